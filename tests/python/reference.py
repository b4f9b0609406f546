"""Torch reference for FP8 attention, and the accuracy check of docs/accuracy.md.

Two references per call, both on the same FP8 inputs with the descales applied:
  * ``ref``:  exact attention in float64 (what the kernel approximates); a 16-bit q is used as it is;
  * ``emul``: the kernel's own precision: P = exp(s - rowmax) scaled by 2^8 and rounded to E4M3 before
    the PV product (fp32), then normalised by the sum of those rounded P and rounded to the output dtype. A
    16-bit q is quantized as the kernel does it: each (token, head) row to E4M3(q * 448 / amax(row)), its scores
    multiplied by amax / 448 (src/reference's kEmulation alike).
A kernel passes when max|out - ref| <= 2 * max|emul - ref| + 2 ulp_bf16(max|ref|).

Everything is computed on the inputs' device (float64 on a GPU is fast enough and keeps the GPU tests
short); results stay there.

Masks follow FlashAttention: causal and windows are bottom-right aligned, i.e. query row i of Sq sees
key j of Sk when  i + Sk - Sq - left <= j <= i + Sk - Sq + right  (an unbounded side is -1; causal
means right = 0). The sink (s_aux) adds exp(sink[h]) to the softmax denominator and nothing to the
numerator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

P_OFFSET = 256.0  # the kernel's 2^8 exponent bias on P before the E4M3 cast
E4M3_MAX = 448.0  # a 16-bit q row's amax maps here
SIXTEEN_BIT = (torch.float16, torch.bfloat16)  # the q dtypes the kernel quantizes per row


def descale_table(t: Optional[Tensor], batch: int, num_heads_kv: int, device: torch.device) -> Tensor:
    """A descale argument (None, 1-element, [Hkv] or (B, Hkv) with any strides) as a dense fp64 [B, Hkv]."""
    if t is None:
        return torch.ones(batch, num_heads_kv, dtype=torch.float64, device=device)
    t = t.detach().to(device, torch.float64)
    if t.numel() == 1:
        return t.reshape(1, 1).expand(batch, num_heads_kv).clone()
    return t.expand(batch, num_heads_kv).clone()


def decode(x: Tensor) -> Tensor:
    """FP8, fp16 or bf16 → float64 (exact: every such value is representable)."""
    return x.detach().float().double()


def quantize_q_rows(q: Tensor) -> tuple[Tensor, Tensor]:
    """A 16-bit q [Sq, Hq, d] as the kernel quantizes it: (E4M3(q * 448 / amax) decoded to float64, the row scales
    amax / 448 [Sq, Hq, 1]), one per (token, head) row, in fp32 as the kernel computes them. A row of zeros stays
    zero with scale 1 (as the kernel's: scale 0 would turn a masked -inf score into NaN): its scores are 0, a
    uniform average, never NaN."""
    q32 = q.detach().float()
    amax = q32.abs().amax(dim=-1, keepdim=True)
    to_e4m3 = torch.where(amax > 0, E4M3_MAX / amax, torch.zeros_like(amax))
    values = (q32 * to_e4m3).to(torch.float8_e4m3fn).double()
    return values, torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).double()


def visible_mask(seqlen_q: int, seqlen_k: int, causal: bool, window: tuple[int, int],
                 device: Optional[torch.device] = None) -> Tensor:
    """[Sq, Sk] bool: which keys each query row sees (bottom-right aligned)."""
    left, right = window
    if causal:
        right = 0
    row = torch.arange(seqlen_q, device=device).unsqueeze(1) + (seqlen_k - seqlen_q)
    col = torch.arange(seqlen_k, device=device).unsqueeze(0)
    mask = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        mask &= col <= row + right
    if left >= 0:
        mask &= col >= row - left
    return mask


@dataclass
class Reference:
    out: Tensor   # [Sq, Hq, dv] float64
    lse: Tensor   # [Hq, Sq] float64, natural log; -inf for a row with no key and no sink
    emul: Tensor  # [Sq, Hq, dv] in the output dtype, at the kernel's precision
    # [Hq, Sq]: max over the row's visible keys of |scale| * sum_c |q_c k_c| (descales applied), 0 without keys.
    # The FP8 WGMMA accumulator of QK^T keeps ~13 mantissa bits, so each score carries an error of order
    # 2^-13 of this magnitude and the LSE inherits it (the output mostly does not: a row's scores shift
    # together). check_lse allows 2^-11 of it, as the C++ harness does (tests/gpu/harness.cpp).
    score_magnitude: Tensor
    # [Hq, Sq]: the LSE of the scores the kernel computes from (a 16-bit q's quantized rows; else the same as lse):
    # its distance to lse is the LSE's error bar, as the C++ harness's (twice the emulation's error).
    emul_lse: Tensor


def attention_one(
    q: Tensor, k: Tensor, v: Tensor, *, q_descale: Tensor, k_descale: Tensor, v_descale: Tensor,
    softmax_scale: float, causal: bool, window: tuple[int, int], sink: Optional[Tensor], out_dtype: torch.dtype,
) -> Reference:
    """One sequence. q [Sq, Hq, d] FP8, fp16 or bf16, k [Sk, Hkv, d], v [Sk, Hkv, dv] FP8; descales [Hkv] fp64
    for this sequence; sink [Hq] or None."""
    seqlen_q, num_heads_q, _ = q.shape
    seqlen_k, num_heads_kv, head_dim_v = v.shape
    group = num_heads_q // num_heads_kv
    q_descale_per_head = q_descale.repeat_interleave(group)[None, :, None]
    qf = decode(q) * q_descale_per_head
    kf = (decode(k) * k_descale[None, :, None]).repeat_interleave(group, dim=1)
    vf = (decode(v) * v_descale[None, :, None]).repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", qf, kf) * softmax_scale  # [Hq, Sq, Sk]
    mask = visible_mask(seqlen_q, seqlen_k, causal, window, device=scores.device)
    scores = scores.masked_fill(~mask, float("-inf"))
    emul_scores = scores
    if q.dtype in SIXTEEN_BIT:  # the kernel's scores are those of the quantized rows, times the row scales
        q8, q_scale = quantize_q_rows(q)
        emul_scores = torch.einsum("qhd,khd->hqk", q8 * q_scale * q_descale_per_head, kf) * softmax_scale
        emul_scores = emul_scores.masked_fill(~mask, float("-inf"))
    abs_scores = torch.einsum("qhd,khd->hqk", qf.abs(), kf.abs()) * abs(softmax_scale)
    score_magnitude = abs_scores.masked_fill(~mask, 0.0).amax(dim=-1) if seqlen_k else abs_scores.sum(dim=-1)

    logits = scores
    if sink is not None:
        sink_col = sink.detach().to(scores.device, torch.float64).reshape(num_heads_q, 1, 1).expand(-1, seqlen_q, 1)
        logits = torch.cat([scores, sink_col], dim=-1)
    lse = torch.logsumexp(logits, dim=-1)  # [Hq, Sq]
    emul_lse = lse
    if emul_scores is not scores:
        emul_logits = emul_scores if sink is None else torch.cat([emul_scores, logits[..., -1:]], dim=-1)
        emul_lse = torch.logsumexp(emul_logits, dim=-1)
    empty = torch.isneginf(lse)
    probs = torch.exp(scores - lse.unsqueeze(-1)).masked_fill(empty.unsqueeze(-1), 0.0)
    out = torch.einsum("hqk,khd->qhd", probs, vf)

    # Kernel precision: fp32 scores, P biased by 2^8 and rounded to E4M3 unnormalised, fp32 PV, normalised by
    # the sum of the rounded P (the kernel's P x ones; docs/design.md), plus the sink.
    s32 = emul_scores.float()
    if seqlen_k:
        row_max = s32.amax(dim=-1, keepdim=True)
    else:
        row_max = torch.full((num_heads_q, seqlen_q, 1), float("-inf"), device=scores.device)
    row_max = torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)
    p32 = torch.exp(s32 - row_max)
    p8 = (p32 * P_OFFSET).to(torch.float8_e4m3fn).float()
    denom = p8.sum(dim=-1, keepdim=True) / P_OFFSET
    if sink is not None:
        denom = denom + torch.exp(sink.detach().to(scores.device, torch.float32).reshape(num_heads_q, 1, 1) - row_max)
    emul = torch.einsum("hqk,khd->qhd", p8, vf.float())
    emul = emul / (P_OFFSET * denom.clamp(min=torch.finfo(torch.float32).tiny)).permute(1, 0, 2)
    return Reference(out=out, lse=lse, emul=emul.to(out_dtype), score_magnitude=score_magnitude, emul_lse=emul_lse)


def gather_keys(cache: Tensor, block_table_row: Tensor, seqlen: int) -> Tensor:
    """The first ``seqlen`` rows of one sequence from a paged cache [num_pages, page, Hkv, d]."""
    page_size = cache.shape[1]
    pages = block_table_row[: (seqlen + page_size - 1) // page_size].long()
    # Gather as bytes: indexing is defined for every dtype that way, FP8 included.
    rows = cache.view(torch.uint8)[pages].reshape(-1, *cache.shape[2:])[:seqlen]
    return rows.view(cache.dtype)


def varlen_reference(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, *, cu_seqlens_k: Optional[Tensor] = None,
    seqused_k: Optional[Tensor] = None, block_table: Optional[Tensor] = None, q_descale: Optional[Tensor] = None,
    k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None, softmax_scale: float,
    causal: bool, window: tuple[int, int] = (-1, -1), sink: Optional[Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> Reference:
    """The varlen call of flash_attn_varlen_func: q [total_q, Hq, d]; k/v paged (block_table, seqused_k)
    or varlen (cu_seqlens_k, optionally seqused_k). Returns out/emul [total_q, Hq, dv], lse [Hq, total_q]."""
    cu_q = cu_seqlens_q.tolist()
    batch = len(cu_q) - 1
    num_heads_kv = k.shape[-2]
    qd, kd, vd = (descale_table(t, batch, num_heads_kv, q.device) for t in (q_descale, k_descale, v_descale))
    used = seqused_k.tolist() if seqused_k is not None else None
    cu_k = cu_seqlens_k.tolist() if cu_seqlens_k is not None else None
    outs, lses, emuls, magnitudes, emul_lses = [], [], [], [], []
    for b in range(batch):
        qb = q[cu_q[b]:cu_q[b + 1]]
        if block_table is not None:
            kb = gather_keys(k, block_table[b], used[b])
            vb = gather_keys(v, block_table[b], used[b])
        else:
            length = used[b] if used is not None else cu_k[b + 1] - cu_k[b]
            kb, vb = k[cu_k[b]:cu_k[b] + length], v[cu_k[b]:cu_k[b] + length]
        r = attention_one(qb, kb, vb, q_descale=qd[b], k_descale=kd[b], v_descale=vd[b],
                          softmax_scale=softmax_scale, causal=causal, window=window, sink=sink, out_dtype=out_dtype)
        outs.append(r.out)
        lses.append(r.lse)
        emuls.append(r.emul)
        magnitudes.append(r.score_magnitude)
        emul_lses.append(r.emul_lse)
    return Reference(out=torch.cat(outs), lse=torch.cat(lses, dim=1), emul=torch.cat(emuls),
                     score_magnitude=torch.cat(magnitudes, dim=1), emul_lse=torch.cat(emul_lses, dim=1))


def ulp_bf16(x: float) -> float:
    """The spacing of bfloat16 numbers at magnitude x (8 significant bits)."""
    exponent = torch.frexp(torch.tensor(max(abs(x), 2.0 ** -126), dtype=torch.float64)).exponent.item()
    return 2.0 ** (exponent - 8)


def check_output(out: Tensor, ref: Reference, what: str) -> dict[str, float]:
    """Asserts docs/accuracy.md's bar on ``out`` (any shape matching ref.out) and returns the error figures.

    NaN/inf are reported separately from the numeric error (a NaN means an unwritten or out-of-bounds
    element, not a rounding problem), and a failure names the worst element.
    """
    got = out.detach().to(ref.out.device, torch.float64)
    assert got.shape == ref.out.shape, f"{what}: shape {tuple(got.shape)} vs reference {tuple(ref.out.shape)}"
    bad = ~torch.isfinite(got)
    assert not bad.any(), (f"{what}: {int(bad.sum())} non-finite outputs, first at "
                           f"{tuple(bad.nonzero()[0].tolist())}")
    err = (got - ref.out).abs()
    emul_err = (ref.emul.double() - ref.out).abs().max().item() if ref.out.numel() else 0.0
    ref_max = ref.out.abs().max().item() if ref.out.numel() else 0.0
    bound = 2 * emul_err + 2 * ulp_bf16(ref_max)
    max_err = err.max().item() if err.numel() else 0.0
    ref_rms = ref.out.pow(2).mean().sqrt().item() if ref.out.numel() else 0.0
    rel_rms = ((got - ref.out).pow(2).mean().sqrt().item() / ref_rms) if ref_rms else 0.0
    if max_err > bound:
        worst = tuple(torch.nonzero(err == err.max())[0].tolist())
        raise AssertionError(
            f"{what}: max|out-ref| = {max_err:.3g} at {worst} (out {got[worst].item():.5g}, ref "
            f"{ref.out[worst].item():.5g}) exceeds 2*max|emul-ref| + 2 ulp = {bound:.3g} "
            f"(emul err {emul_err:.3g}); relative RMS error {rel_rms:.3%}")
    return {"max_err": max_err, "bound": bound, "emul_err": emul_err, "rel_rms": rel_rms}


def check_lse(lse: Tensor, ref_lse: Tensor, what: str, atol: float = 2e-3,
              score_magnitude: Optional[Tensor] = None, emul_lse: Optional[Tensor] = None) -> None:
    """LSE: -inf exactly where the reference has no key (and no sink), else within atol (+1e-4 relative,
    + 2^-11 of the row's score magnitude when given: see Reference.score_magnitude, + twice the largest distance
    of the emulation's LSE to the reference when given: a 16-bit q's quantized rows, Reference.emul_lse)."""
    got = lse.detach().to(ref_lse.device, torch.float64)
    assert got.shape == ref_lse.shape, f"{what}: lse shape {tuple(got.shape)} vs {tuple(ref_lse.shape)}"
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(got), empty), f"{what}: lse -inf pattern differs from the reference"
    finite = ~empty
    assert torch.isfinite(got[finite]).all(), f"{what}: non-finite lse on rows that have keys"
    diff = (got[finite] - ref_lse[finite]).abs()
    limit = atol + 1e-4 * ref_lse[finite].abs()
    if score_magnitude is not None:
        limit = limit + 2.0 ** -11 * score_magnitude.to(ref_lse.device, torch.float64)[finite]
    if emul_lse is not None and bool(finite.any()):
        limit = limit + 2 * (emul_lse.to(ref_lse.device, torch.float64)[finite] - ref_lse[finite]).abs().max()
    assert (diff <= limit).all(), f"{what}: max |lse - ref| = {diff.max().item():.3g}"


def check_reference_lse(lse: Tensor, ref: Reference, what: str) -> None:
    """check_lse against a Reference, with every bar it carries (score magnitude, the emulation's LSE)."""
    check_lse(lse, ref.lse, what, score_magnitude=ref.score_magnitude, emul_lse=ref.emul_lse)
