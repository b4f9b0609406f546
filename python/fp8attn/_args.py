"""What the Python API decides before the op, with no torch: rejection of keywords the op does not carry,
window normalisation, output-dtype resolution, the default softmax scale. Every rule about the call itself
(shapes, lengths, which length arguments go together) is the library's (src/host/validate.cpp). Kept
torch-free so CPU-only CI tests it.
"""

from __future__ import annotations

import math
from typing import Any, Container, Optional, Sequence


# vLLM wrapper keywords that fp8attn does not implement and that are None unless a caller asks for the
# feature, with what each one is. Most are FlashAttention-4 only; vLLM 0.34 passes mask_mod, aux_tensors
# and dynamic_causal as None on every FA3 call.
UNSUPPORTED_IF_SET = {
    "q_v": "MLA",
    "alibi_slopes": "ALiBi",
    "mask_mod": "FA4 custom masks",
    "block_sparse_tensors": "FA4 block sparsity",
    "aux_tensors": "FA4 mask_mod tensors",
    "aux_tensor_leading_dims": "FA4 mask_mod tensors",
    "dynamic_causal": "FA4 per-sequence causal offsets",
    "gather_kv_indices": "FA4 gather-KV",
    "gather_kv_valid_length": "FA4 gather-KV",
}


def reject_unsupported(
    *,
    dropout_p: float = 0.0,
    return_attn_probs: bool = False,
    cp_world_size: int = 1,
    **if_set: Any,
) -> None:
    """Raises NotImplementedError naming the first FlashAttention feature fp8attn does not implement.

    fp8attn is a forward-only FP8 kernel: no dropout, no attention-probability output,
    no context parallelism, and none of the features in UNSUPPORTED_IF_SET (its keywords are passed in
    ``if_set``; None means unused). Each is rejected rather than ignored, because ignoring any of them
    silently changes the result.
    """
    if dropout_p:
        raise NotImplementedError(f"fp8attn: dropout is not supported (dropout_p={dropout_p}); it is inference-only")
    if return_attn_probs:
        raise NotImplementedError("fp8attn: return_attn_probs is not supported (use return_softmax_lse)")
    if cp_world_size != 1:
        raise NotImplementedError(f"fp8attn: context parallelism is not supported (cp_world_size={cp_world_size})")
    for name, value in if_set.items():
        if name not in UNSUPPORTED_IF_SET:
            raise TypeError(f"reject_unsupported() got an unexpected keyword argument {name!r}")
        if value is not None:
            raise NotImplementedError(f"fp8attn: {name} is not supported ({UNSUPPORTED_IF_SET[name]}); pass None")


def normalize_window(window_size: Optional[Sequence[int]], causal: bool) -> tuple[int, int]:
    """FlashAttention's window_size → (left, right), -1 meaning unbounded.

    None and (-1, -1) mean no window; any negative side is unbounded. causal forces right = 0, as
    FlashAttention does (vLLM passes causal=True with (w - 1, 0) for sliding-window layers).
    """
    if window_size is None:
        return -1, 0 if causal else -1
    if len(window_size) != 2:
        raise ValueError(f"fp8attn: window_size must be (left, right), got {tuple(window_size)}")
    left, right = window_size
    left = -1 if left < 0 else int(left)
    right = 0 if causal else -1 if right < 0 else int(right)
    return left, right


def resolve_out_dtype(out_dtype: Any, given_out_dtype: Any, q_dtype: Any, sixteen_bit: Container[Any],
                      fp8_q_default: Any) -> Any:
    """The output dtype: out_dtype if given, else the dtype of a caller-provided out, else q's dtype when q is
    16-bit (in ``sixteen_bit``: fp16 and bf16), else ``fp8_q_default`` (an E4M3 q).

    An explicit out_dtype that disagrees with a provided out is an error, not a silent cast. So is a provided
    16-bit out of the other 16-bit dtype than a 16-bit q's with no out_dtype: the output of a 16-bit q is in q's
    dtype unless out_dtype says otherwise, so such an out is more likely a mix-up than a choice.
    Works on any dtype objects (torch dtypes in practice), so it needs no torch.
    """
    if out_dtype is not None:
        if given_out_dtype is not None and given_out_dtype != out_dtype:
            raise ValueError(f"fp8attn: out has dtype {given_out_dtype} but out_dtype={out_dtype}")
        return out_dtype
    if q_dtype not in sixteen_bit:
        return fp8_q_default if given_out_dtype is None else given_out_dtype
    if given_out_dtype is None:
        return q_dtype
    if given_out_dtype in sixteen_bit and given_out_dtype != q_dtype:
        raise ValueError(
            f"fp8attn: out has dtype {given_out_dtype} but q has dtype {q_dtype}: a 16-bit q's output is in q's "
            f"dtype; pass out_dtype={given_out_dtype} to write {given_out_dtype} from a {q_dtype} q")
    return given_out_dtype


def default_softmax_scale(head_dim: int) -> float:
    """FlashAttention's softmax_scale when the caller passes None: head_dim ** -0.5."""
    return 1.0 / math.sqrt(head_dim)
