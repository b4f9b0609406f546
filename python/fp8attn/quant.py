"""Serving-integration helpers: when to take the native FP8 path, and Q quantization to E4M3 (for an E4M3 Q;
a 16-bit Q needs none: the kernel quantizes it row by row).

``use_fp8attn`` is pure Python. ``quantize_e4m3`` imports torch when called, so this module (and the
policy) stays importable where torch is absent.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional, Union

from ._kernel_list import supported_head_dims

if TYPE_CHECKING:
    from torch import Tensor

FP8_E4M3_MAX = 448.0
# vLLM's lower bound on a dynamic scale (QuantFP8: 1 / (fp8_max * 512)), so an all-zero input gets a finite
# scale and the same bits as under vLLM.
MIN_SCALE = 1.0 / (FP8_E4M3_MAX * 512.0)

# (head_size, head_size_v) pairs with an FP8 kernel: every pair src/kernels.list declares.
SUPPORTED_HEAD_SIZES = frozenset(supported_head_dims())

# vLLM cache_dtype strings (and torch dtype names) that mean E4M3, of the KV cache or of Q. "fp8" is E4M3 on CUDA.
_E4M3_DTYPES = frozenset({"fp8", "fp8_e4m3", "float8_e4m3fn", "torch.float8_e4m3fn"})
# Query dtypes the kernel takes besides E4M3 (names of vLLM's model dtype and of torch dtypes): it quantizes such a
# Q to E4M3 itself, row by row.
_SIXTEEN_BIT_Q_DTYPES = frozenset({"bfloat16", "torch.bfloat16", "bf16", "float16", "torch.float16", "fp16", "half"})


def _capability_major(device_capability: Any) -> int:
    # vLLM passes DeviceCapability(major, minor) (a NamedTuple), torch gives (major, minor), and some
    # callers use the integer form 90.
    if hasattr(device_capability, "major"):
        return int(device_capability.major)
    if isinstance(device_capability, (tuple, list)):
        return int(device_capability[0])
    value = int(device_capability)
    return value // 10 if value >= 10 else value


def use_fp8attn(
    device_capability: Any,
    kv_cache_dtype: Any,
    head_size: int,
    head_size_v: Optional[int] = None,
    softcap: Optional[float] = 0.0,
    *,
    batch_invariant: bool = False,
    q_dtype: Any = None,
) -> bool:
    """Whether a layer should run on fp8attn's native FP8 forward (the design's vLLM policy).

    True exactly when: the device is SM90 (Hopper: major 9), the KV cache is FP8 E4M3 ("fp8" or
    "fp8_e4m3"; E5M2 is not supported), Q is E4M3 or 16-bit (fp16 / bf16: the kernel quantizes it to E4M3
    per (token, head) row, so a layer that keeps a 16-bit Q beside its FP8 KV cache is served as it is),
    (head_size, head_size_v) is in ``SUPPORTED_HEAD_SIZES`` (the pairs of src/kernels.list: 64/96/128/192/256/512
    with equal V, and (192, 128); 512 is Gemma-4's global layers, whose K = V cache may be passed as one tensor for
    both k and v: each KV tile is then read once), the softcap is off or a finite value > 0 (Gemma-2's 50), and batch-invariant
    mode is off (it needs fixed split counts that this path does not promise).

    Args:
        device_capability: (major, minor), an object with ``.major``, or an int like 90.
        kv_cache_dtype: vLLM's cache dtype string, or a torch dtype.
        head_size, head_size_v: head sizes of Q/K and of V (head_size_v defaults to head_size).
        softcap: logit softcap; None or 0 means off.
        q_dtype: the dtype Q reaches attention in, a torch dtype or its name ("bfloat16", "fp16", "fp8"...);
            None means E4M3 (the caller quantizes Q, e.g. with ``quantize_e4m3``). Any other dtype (float32,
            E5M2) is not served.
    """
    if _capability_major(device_capability) != 9:
        return False
    if str(kv_cache_dtype).lower() not in _E4M3_DTYPES:
        return False
    if q_dtype is not None:
        name = str(q_dtype).lower()
        if name not in _E4M3_DTYPES and name not in _SIXTEEN_BIT_Q_DTYPES:
            return False
    if (head_size, head_size if head_size_v is None else head_size_v) not in SUPPORTED_HEAD_SIZES:
        return False
    if softcap and not (softcap > 0 and math.isfinite(softcap)):
        return False
    return not batch_invariant


def quantize_e4m3(
    x: "Tensor",
    scale: Optional[Union["Tensor", float]] = None,
    per_kv_head: bool = False,
    num_kv_heads: Optional[int] = None,
) -> tuple["Tensor", "Tensor"]:
    """Quantizes bf16/fp16/fp32 ``x`` [..., Hq, d] to E4M3 as vLLM's QuantFP8 does.

    out = clamp(x * (1 / scale), -448, 448) cast to float8_e4m3fn, computed in fp32 (vLLM multiplies by
    the reciprocal rather than dividing; the two can differ in the last fp32 bit and hence in the E4M3
    rounding, so we do the same). Without ``scale``, the scale is dynamic: amax / 448, floored at
    1 / (448 * 512).

    Args:
        x: [..., Hq, d], e.g. a query [T, Hq, d].
        scale: static scale: per tensor a float or 1-element tensor; per kv head an [Hkv] tensor.
        per_kv_head: one scale per KV head, shared by its Hq / Hkv query heads (vLLM's Q scale of
            numel Hkv, GroupShape(-1, d * Hq / Hkv)).
        num_kv_heads: Hkv; required with per_kv_head.

    Returns:
        (x_fp8 [..., Hq, d] float8_e4m3fn, scale fp32 [1] per tensor or [Hkv] per kv head). The scale is
        the descale to pass to the attention call: per tensor as is (or expand(B, Hkv)), per kv head as
        scale.expand(B, Hkv) (strides (0, 1)).
    """
    import torch  # deferred: the policy above must import without torch

    if x.dim() < 2:
        raise ValueError(f"fp8attn: quantize_e4m3 expects x of shape [..., heads, head_dim], got {tuple(x.shape)}")
    xf = x.to(torch.float32)
    if per_kv_head:
        if num_kv_heads is None or num_kv_heads <= 0 or x.shape[-2] % num_kv_heads:
            raise ValueError(
                f"fp8attn: per_kv_head needs num_kv_heads dividing the {x.shape[-2]} heads, got {num_kv_heads}")
        # [..., Hkv, Hq/Hkv, d]: each kv head's group of query heads shares one scale.
        grouped = xf.reshape(*x.shape[:-2], num_kv_heads, x.shape[-2] // num_kv_heads, x.shape[-1])
        if scale is None:
            reduce_dims = [i for i in range(grouped.dim()) if i != grouped.dim() - 3]
            amax = grouped.abs().amax(dim=reduce_dims)
            scale_t = (amax / FP8_E4M3_MAX).clamp(min=MIN_SCALE)
        else:
            scale_t = torch.as_tensor(scale, dtype=torch.float32, device=x.device).reshape(-1)
            if scale_t.numel() != num_kv_heads:
                raise ValueError(f"fp8attn: per-kv-head scale must have {num_kv_heads} elements, got {scale_t.numel()}")
        q = (grouped * scale_t.reciprocal().view(num_kv_heads, 1, 1)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
        return q.to(torch.float8_e4m3fn).reshape(x.shape), scale_t
    if scale is None:
        scale_t = (xf.abs().amax().reshape(1) / FP8_E4M3_MAX).clamp(min=MIN_SCALE)
    else:
        scale_t = torch.as_tensor(scale, dtype=torch.float32, device=x.device).reshape(-1)
        if scale_t.numel() != 1:
            raise ValueError(f"fp8attn: a per-tensor scale must have one element, got {scale_t.numel()}")
    q = (xf * scale_t.reciprocal()).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    return q.to(torch.float8_e4m3fn), scale_t
