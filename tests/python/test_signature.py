"""fp8attn.flash_attn_varlen_func's signature against vLLM 0.34's, and the rejection of each keyword
fp8attn does not implement.

Torch-free: interface.py imports torch, so its signature is read with ``ast`` from the source file instead
of imported; the rejections are reached through fp8attn._args, which needs no torch.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from fp8attn import _args

INTERFACE = Path(__file__).resolve().parents[2] / "python" / "fp8attn" / "interface.py"

REQUIRED = object()  # a parameter without a default

# vLLM 0.34.0's vllm/vllm_flash_attn/flash_attn_interface.py::flash_attn_varlen_func: every parameter, in
# order, with its default (read from the vllm==0.34.0 wheel; CI has no vLLM). All are positional-or-keyword.
# That file defines no flash_attn_with_kvcache (only a stale comment names it), so there is no vLLM 0.34
# kvcache signature to hold fp8attn.flash_attn_with_kvcache against.
VLLM_034_VARLEN: list[tuple[str, Any]] = [
    ("q", REQUIRED),
    ("k", REQUIRED),
    ("v", REQUIRED),
    ("max_seqlen_q", REQUIRED),
    ("cu_seqlens_q", REQUIRED),
    ("max_seqlen_k", REQUIRED),
    ("cu_seqlens_k", None),
    ("seqused_k", None),
    ("q_v", None),
    ("dropout_p", 0.0),
    ("softmax_scale", None),
    ("causal", False),
    ("window_size", None),
    ("softcap", 0.0),
    ("alibi_slopes", None),
    ("deterministic", False),
    ("return_attn_probs", False),
    ("block_table", None),
    ("return_softmax_lse", False),
    ("out", None),
    ("scheduler_metadata", None),
    ("q_descale", None),
    ("k_descale", None),
    ("v_descale", None),
    ("num_splits", 0),
    ("output_scale", None),
    ("fa_version", 2),  # DEFAULT_FA_VERSION
    ("s_aux", None),
    ("cp_world_size", 1),
    ("cp_rank", 0),
    ("cp_tot_seqused_k", None),
    ("mask_mod", None),
    ("block_sparse_tensors", None),
    ("aux_tensors", None),
    ("aux_tensor_leading_dims", None),
    ("dynamic_causal", None),
    ("gather_kv_indices", None),
    ("gather_kv_valid_length", None),
]

# Where fp8attn's default deliberately differs: fa_version is ignored, and None says that no FlashAttention
# version is picked (vLLM's 2 would read as FA2).
FP8ATTN_DEFAULTS = {"fa_version": None}
# fp8attn's own keywords, after vLLM's.
FP8ATTN_EXTRA: list[tuple[str, Any]] = [("out_dtype", None)]

# Every vLLM keyword is one of: used by fp8attn, accepted and ignored (a hint), or rejected when set.
USED = {"q", "k", "v", "max_seqlen_q", "cu_seqlens_q", "max_seqlen_k", "cu_seqlens_k", "seqused_k",
        "softmax_scale", "causal", "window_size", "block_table", "return_softmax_lse", "out", "q_descale",
        "k_descale", "v_descale", "num_splits", "s_aux", "softcap", "output_scale"}
IGNORED = {"scheduler_metadata", "fa_version", "deterministic", "cp_rank", "cp_tot_seqused_k"}
# Rejected keywords that reject_unsupported takes by name, with a value that must be rejected.
REJECTED_SCALARS = {"dropout_p": 0.1, "return_attn_probs": True, "cp_world_size": 2}
REJECTED = set(REJECTED_SCALARS) | set(_args.UNSUPPORTED_IF_SET)
VLLM_DEFAULTS = dict(VLLM_034_VARLEN)


def _function(name: str) -> ast.FunctionDef:
    tree = ast.parse(INTERFACE.read_text(), filename=str(INTERFACE))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name]
    assert len(found) == 1, f"{INTERFACE} defines {name} {len(found)} times"
    return found[0]


def _default(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)  # a name such as a module constant: compared as its source text


def _parameters(function: ast.FunctionDef) -> list[tuple[str, Any]]:
    """(name, default) of each positional-or-keyword parameter, REQUIRED where there is no default."""
    args = function.args
    defaults = [REQUIRED] * (len(args.args) - len(args.defaults)) + [_default(d) for d in args.defaults]
    return [(arg.arg, default) for arg, default in zip(args.args, defaults)]


def test_varlen_signature_is_vllm_034s_plus_out_dtype() -> None:
    function = _function("flash_attn_varlen_func")
    args = function.args
    assert not args.posonlyargs and not args.kwonlyargs and args.vararg is None and args.kwarg is None
    expected = [(name, FP8ATTN_DEFAULTS.get(name, default)) for name, default in VLLM_034_VARLEN]
    assert _parameters(function) == expected + FP8ATTN_EXTRA


def test_every_vllm_keyword_is_used_ignored_or_rejected() -> None:
    assert not (USED & IGNORED) and not (USED & REJECTED) and not (IGNORED & REJECTED)
    assert USED | IGNORED | REJECTED == set(VLLM_DEFAULTS)


def test_varlen_passes_every_rejected_keyword_to_reject_unsupported() -> None:
    calls = [node for node in ast.walk(_function("flash_attn_varlen_func"))
             if isinstance(node, ast.Call) and ast.unparse(node.func) == "_args.reject_unsupported"]
    assert len(calls) == 1
    passed = {kw.arg: ast.unparse(kw.value) for kw in calls[0].keywords}
    assert passed == {name: name for name in REJECTED}


def test_vllm_defaults_of_rejected_keywords_pass() -> None:
    _args.reject_unsupported(**{name: VLLM_DEFAULTS[name] for name in REJECTED})


def test_vllm_034_main_call_passes() -> None:
    # v1/attention/backends/flash_attn.py's main call passes these three as None on FA3.
    _args.reject_unsupported(dynamic_causal=None, mask_mod=None, aux_tensors=None)


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_each_unimplemented_keyword_set_is_rejected_by_name(name: str) -> None:
    value = REJECTED_SCALARS.get(name, object())
    with pytest.raises(NotImplementedError, match=rf"^fp8attn: .*\b{name}\b"):
        _args.reject_unsupported(**{name: value})


def test_reject_unsupported_refuses_an_unknown_keyword() -> None:
    with pytest.raises(TypeError, match="mask_modd"):
        _args.reject_unsupported(mask_modd=None)
