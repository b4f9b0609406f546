"""FlashAttention-compatible entry points over the ``fp8attn::fwd`` op.

``flash_attn_varlen_func`` accepts the call vLLM's FlashAttention backend makes (its keywords are vLLM
0.34's ``vllm_flash_attn`` wrapper's, in its order, plus ``out_dtype``); ``flash_attn_with_kvcache`` and
``flash_attn_func`` follow FlashAttention's batched semantics. K and V are FP8 E4M3; Q is E4M3, or fp16 / bf16,
which the kernel quantizes to E4M3 itself, per (token, head) row with scale amax(row) / 448 (such a Q takes no
q_descale). Descales are fp32 and applied in the kernel (q/k folded into the softmax scale, v into the
normalisation). The output is fp16 or bf16 (by default a 16-bit Q's dtype, else bf16), or E4M3 quantized with
``output_scale`` (vLLM's attention + quant fusion); the optional LSE is fp32, natural log, including the sink.
``softcap`` > 0 caps the logits (Gemma-2).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch import Tensor

from . import _args
from . import ops  # registers torch.ops.fp8attn.fwd

_FWD = ops.FWD

Result = Union[Tensor, tuple[Tensor, Tensor]]

# The library's rules (src/host/validate.cpp) are the only ones: this module checks nothing they check. Its
# messages start with the argument's name ("k: expected shape ..."); a function that spells an argument
# otherwise (flash_attn_with_kvcache's k_cache, cache_seqlens) gets its own spelling back.
_KVCACHE_SPELLING = {"k": "k_cache", "v": "v_cache", "seqused_k": "cache_seqlens"}
_LEADING_NAME = re.compile(r"\w+")
# The dtypes of a 16-bit q (the kernel quantizes it row by row); its output defaults to q's dtype.
_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def _in_callers_words(message: str, function: str, spelling: dict[str, str]) -> str:
    """The library's (or the op's) message under the function the user called, in its argument names."""
    message = message.removeprefix("fp8attn: ")
    head = _LEADING_NAME.match(message)
    if head is not None and head.group() in spelling:
        message = spelling[head.group()] + message[head.end():]
    return f"fp8attn.{function}: {message}"


# The eager path costs host time on every layer of every step (bench/bench_host.py measures it; docs/perf.md,
# "Host path"). So _call takes its arguments by position (16 keywords cost ~0.7 us more to bind), reads each
# tensor attribute once, calls no helper where an expression does, and calls the eager entry (ops.EAGER_FWD: no
# dispatcher), else the op's C++ entry point directly (the OpOverload's __call__ is one more Python frame that
# forwards *args: ~0.3 us).
_FWD_EAGER = getattr(_FWD, "_op", _FWD)
_EAGER_FWD = ops.EAGER_FWD


def _on_the_gpu_with_unit_last_strides(args: tuple) -> tuple:
    """The op's arguments with q, k and v copied where their last stride is not 1 (as vLLM's FlashAttention
    wrapper: any other stride is passed to the kernel as is, so K/V cache views are never copied); q on a CUDA
    device ("meta" too, so that shapes can be traced on a machine without a GPU). The eager entry hands such
    calls back, so this runs only for the op."""
    q, k, v = args[:3]
    if not (q.is_cuda or q.is_meta):
        raise ValueError(f"fp8attn: tensors must be on a CUDA device, got q on {q.device}")
    if q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1:
        return args
    return tuple(t.contiguous() if t.stride(-1) != 1 else t for t in (q, k, v)) + args[3:]


def _call(
    function: str, spelling: dict[str, str], return_lse: bool, out_dtype: Optional[torch.dtype],
    window_size: Optional[Sequence[int]],
    # The op's arguments, in its order (ops.py's schema), but lse and the window's two sides:
    q: Tensor, k: Tensor, v: Tensor, out: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor], block_table: Optional[Tensor],
    q_descale: Optional[Tensor], k_descale: Optional[Tensor], v_descale: Optional[Tensor], s_aux: Optional[Tensor],
    max_seqlen_q: int, max_seqlen_k: int, softmax_scale: Optional[float], causal: bool, num_splits: int,
    output_scale: Optional[Tensor], softcap: Optional[float], /,
) -> Result:
    """Allocates out/lse when needed, runs the op, returns out or (out, lse). The op and the library check the
    call; a refusal is raised in the words of ``function`` (see ``_in_callers_words``)."""
    dtype = _args.resolve_out_dtype(out_dtype, None if out is None else out.dtype, q.dtype, _SIXTEEN_BIT,
                                    torch.bfloat16)
    if out is None:
        out = q.new_empty(ops.expected_out_shape(q, v), dtype=dtype)
    lse = q.new_empty(ops.expected_lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32) if return_lse else None
    window_left, window_right = _args.normalize_window(window_size, causal)
    scale = _args.default_softmax_scale(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    args = (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, q_descale, k_descale, v_descale,
            s_aux, max_seqlen_q, max_seqlen_k, scale, bool(causal), window_left, window_right, num_splits,
            output_scale, float(softcap or 0.0))
    compiling = torch.compiler.is_compiling()  # traced: the library runs later, at replay
    try:
        served = False
        if _EAGER_FWD is not None and not compiling:
            try:
                # NotImplemented: the dispatcher must see this call, or it needs the checks and copies below.
                served = _EAGER_FWD(*args) is None
            except RuntimeError as err:
                ops.reraise(err, eager=True)
        if not served:
            args = _on_the_gpu_with_unit_last_strides(args)
            if compiling:
                _FWD(*args)
            else:
                try:
                    _FWD_EAGER(*args)
                except RuntimeError as err:
                    ops.reraise(err)  # the compiled op's refusals, as the exception types the ctypes op raises
    except (ValueError, NotImplementedError) as err:
        raise type(err)(_in_callers_words(str(err), function, spelling)) from None
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    max_seqlen_q: int,
    cu_seqlens_q: Tensor,
    max_seqlen_k: int,
    cu_seqlens_k: Optional[Tensor] = None,
    seqused_k: Optional[Tensor] = None,
    q_v: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Optional[Sequence[int]] = None,
    softcap: float = 0.0,
    alibi_slopes: Optional[Tensor] = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: Optional[Tensor] = None,
    return_softmax_lse: bool = False,
    out: Optional[Tensor] = None,
    scheduler_metadata: Optional[Tensor] = None,
    q_descale: Optional[Tensor] = None,
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
    num_splits: int = 0,
    output_scale: Optional[Tensor] = None,
    fa_version: Optional[int] = None,
    s_aux: Optional[Tensor] = None,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_tot_seqused_k: Optional[Tensor] = None,
    mask_mod: Optional[Callable[..., Any]] = None,
    block_sparse_tensors: Any = None,
    aux_tensors: Optional[Sequence[Tensor]] = None,
    aux_tensor_leading_dims: Any = None,
    dynamic_causal: Optional[Tensor] = None,
    gather_kv_indices: Optional[Tensor] = None,
    gather_kv_valid_length: Optional[Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> Result:
    """Varlen FP8 attention, a drop-in for vLLM's ``flash_attn_varlen_func``.

    Args:
        q: [total_q, Hq, d] E4M3, or fp16 / bf16 (a model's 16-bit Q over its FP8 KV cache): the kernel
            quantizes each (token, head) row to E4M3 with scale amax(row) / 448, so a 16-bit q needs no
            quantization first and takes no q_descale.
        k, v: paged [num_pages, page_size, Hkv, d(v)] E4M3 with ``block_table`` (e.g. the two views of
            vLLM's ``kv_cache.unbind(0)``), or varlen [total_k, Hkv, d(v)] with ``cu_seqlens_k``.
        max_seqlen_q, max_seqlen_k: host-known upper bounds; launch choices depend only on them (under
            vLLM's CUDA graphs max_seqlen_k is max_model_len).
        cu_seqlens_q: [B + 1] int32. cu_seqlens_k: [B + 1] int32. seqused_k: [B] int32. Exactly one
            of cu_seqlens_k / seqused_k; block_table needs seqused_k.
        block_table: [B, max_pages] int32; rows may be strided (column-sliced views), columns contiguous.
        softmax_scale: default d ** -0.5. causal: bottom-right aligned.
        window_size: (left, right) or None; vLLM passes (w - 1, 0) for sliding-window layers.
        q_descale, k_descale, v_descale: fp32, None, 0-d, 1-element, [Hkv] or (B, Hkv) with any strides
            (expand()ed views are read in place). q_descale only with an E4M3 q.
        num_splits: 0 = heuristic, n >= 2 = at most n KV splits (a ceiling, as FlashAttention-3 reads
            it), 1 = exactly one split (no split).
        s_aux: [Hq] fp32/bf16 learnable sink logits.
        softcap: 0 (off) or > 0: each logit l becomes softcap * tanh(l / softcap) (Gemma-2: 50).
        out: [total_q, Hq, dv] fp16/bf16/float8_e4m3fn, written in place. out_dtype: default out.dtype, else
            q's dtype for a 16-bit q, else bf16. With a 16-bit q, an out of the other 16-bit dtype needs
            out_dtype saying so (a ValueError otherwise: it is likelier a mix-up).
        output_scale: with a float8_e4m3fn out (or out_dtype): a 0-d fp32 device tensor; out = E4M3(O /
            output_scale), saturated to +-448 (vLLM's static per-tensor quantization of o_proj's input, fused).
        scheduler_metadata, fa_version, deterministic, cp_rank, cp_tot_seqused_k: accepted for vLLM
            compatibility and not used (FA3's ahead-of-time split metadata is a hint; fp8attn plans its
            own splits on the host, and its forward is deterministic).
        mask_mod, block_sparse_tensors, aux_tensors, aux_tensor_leading_dims, dynamic_causal,
            gather_kv_indices, gather_kv_valid_length: FlashAttention-4 features; accepted only as None (vLLM
            0.34 passes mask_mod, aux_tensors and dynamic_causal as None).

    Returns:
        out, or (out, lse) with lse [Hq, total_q] fp32 when return_softmax_lse.

    Raises:
        NotImplementedError: dropout, ALiBi, q_v, return_attn_probs, context parallelism or an FA4 feature
            set, or a case the library does not support or did not compile.
        ValueError: malformed arguments (the message names the argument), e.g. a q_descale with a 16-bit q.
    """
    # The common call sets none of them: test that inline, and let reject_unsupported name the one that is set
    # (building its 13 keywords costs ~1 us per call; test_ops_meta.py sets each one in turn).
    if (dropout_p or return_attn_probs or cp_world_size != 1 or q_v is not None
            or alibi_slopes is not None or mask_mod is not None
            or block_sparse_tensors is not None or aux_tensors is not None or aux_tensor_leading_dims is not None
            or dynamic_causal is not None or gather_kv_indices is not None or gather_kv_valid_length is not None):
        _args.reject_unsupported(
            dropout_p=dropout_p, return_attn_probs=return_attn_probs, cp_world_size=cp_world_size,
            q_v=q_v, alibi_slopes=alibi_slopes, mask_mod=mask_mod,
            block_sparse_tensors=block_sparse_tensors, aux_tensors=aux_tensors,
            aux_tensor_leading_dims=aux_tensor_leading_dims, dynamic_causal=dynamic_causal,
            gather_kv_indices=gather_kv_indices, gather_kv_valid_length=gather_kv_valid_length)
    return _call(
        "flash_attn_varlen_func", {}, return_softmax_lse, out_dtype, window_size,
        q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, q_descale, k_descale, v_descale, s_aux,
        max_seqlen_q, max_seqlen_k, softmax_scale, causal, num_splits, output_scale, softcap)


def flash_attn_with_kvcache(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cache_seqlens: Optional[Union[int, Tensor]] = None,
    block_table: Optional[Tensor] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Optional[Sequence[int]] = (-1, -1),
    softcap: float = 0.0,
    return_softmax_lse: bool = False,
    out: Optional[Tensor] = None,
    q_descale: Optional[Tensor] = None,
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
    num_splits: int = 0,
    s_aux: Optional[Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    output_scale: Optional[Tensor] = None,
) -> Result:
    """FP8 attention of a batch of queries against a KV cache (FlashAttention's kvcache semantics,
    without appending new K/V).

    Args:
        q: [B, Sq, Hq, d] E4M3, or fp16 / bf16 (quantized per row by the kernel; see
            :func:`flash_attn_varlen_func`).
        k_cache, v_cache: dense [B, Sk, Hkv, d(v)], or paged [num_pages, page_size, Hkv, d(v)] with
            ``block_table`` [B, max_pages] int32.
        cache_seqlens: keys used per sequence, [B] int32 or one int for all; None means all Sk keys
            (dense only: a paged cache needs it).
        causal: bottom-right aligned, so the Sq queries are the last Sq positions of each sequence.
        Other arguments as in :func:`flash_attn_varlen_func`.

    Returns:
        out [B, Sq, Hq, dv], or (out, lse) with lse [B, Hq, Sq] fp32 when return_softmax_lse.
    """
    batch = q.shape[0]
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
    if block_table is not None:
        max_seqlen_k = block_table.shape[1] * k_cache.shape[1]
    else:
        max_seqlen_k = k_cache.shape[1]
    return _call(
        "flash_attn_with_kvcache", _KVCACHE_SPELLING, return_softmax_lse, out_dtype, window_size,
        q, k_cache, v_cache, out, None, None, cache_seqlens, block_table, q_descale, k_descale, v_descale, s_aux,
        q.shape[1], max_seqlen_k, softmax_scale, causal, num_splits, output_scale, softcap)


def flash_attn_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_size: Optional[Sequence[int]] = (-1, -1),
    softcap: float = 0.0,
    q_descale: Optional[Tensor] = None,
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
    num_splits: int = 0,
    s_aux: Optional[Tensor] = None,
    return_softmax_lse: bool = False,
    out: Optional[Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    output_scale: Optional[Tensor] = None,
) -> Result:
    """Dense FP8 attention: q [B, Sq, Hq, d] E4M3 or fp16 / bf16, k/v [B, Sk, Hkv, d(v)] E4M3 → out [B, Sq, Hq, dv].

    Returns out, or (out, lse) with lse [B, Hq, Sq] fp32 when return_softmax_lse. Other arguments as in
    :func:`flash_attn_varlen_func`.
    """
    return _call(
        "flash_attn_func", {}, return_softmax_lse, out_dtype, window_size,
        q, k, v, out, None, None, None, None, q_descale, k_descale, v_descale, s_aux,
        q.shape[1], k.shape[1], softmax_scale, causal, num_splits, output_scale, softcap)
