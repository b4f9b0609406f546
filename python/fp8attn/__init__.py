"""fp8attn: FP8 (E4M3 K/V; E4M3, fp16 or bf16 Q) FlashAttention forward for NVIDIA Hopper, from Python.

    import fp8attn
    out = fp8attn.flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k,
                                         seqused_k=seqused_k, block_table=block_table, causal=True,
                                         q_descale=qs, k_descale=ks, v_descale=vs, out=out)

Importing this package needs neither torch nor libfp8attn.so: the policy helper ``use_fp8attn`` is pure
Python, and the torch-facing functions are imported on first use (PEP 562). That first use loads the
shared library and the compiled torch op beside it (fp8attn.ops); when the library is missing, the first
op call raises a clear error.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._lib import KernelNotCompiledError, LibraryNotFoundError, get_lib
from ._version import __version__
from .quant import SUPPORTED_HEAD_SIZES, quantize_e4m3, use_fp8attn

# Public names that need torch, and the submodule that defines each.
_LAZY = {
    "flash_attn_varlen_func": "interface",
    "flash_attn_with_kvcache": "interface",
    "flash_attn_func": "interface",
    "ops": None,
}

__all__ = [
    "KernelNotCompiledError",
    "LibraryNotFoundError",
    "SUPPORTED_HEAD_SIZES",
    "compiled_kernels",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "get_lib",
    "quantize_e4m3",
    "use_fp8attn",
]


def compiled_kernels() -> list[str]:
    """The kernels compiled into the loaded libfp8attn.so (loads it)."""
    return get_lib().compiled_kernels()


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'fp8attn' has no attribute {name!r}")
    module_name = _LAZY[name] or name
    try:
        module = importlib.import_module(f".{module_name}", __name__)
    except ImportError as err:
        raise ImportError(f"fp8attn.{name} needs PyTorch ({err})") from err
    value = module if _LAZY[name] is None else getattr(module, name)
    # Bound once: later lookups find the module attribute and never come back here (a call through
    # fp8attn.flash_attn_varlen_func must not pay for an import-system lookup every time).
    globals()[name] = value
    return value
