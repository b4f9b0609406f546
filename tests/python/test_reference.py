"""The test reference itself (tests/python/reference.py), checked on the CPU against independent torch code,
so that GPU tests compare against something known to be right."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import reference  # noqa: E402


def _fp8(*shape: int, scale: float = 1.0) -> "torch.Tensor":
    return (torch.randn(*shape) * scale).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("seqlen_q,seqlen_k", [(1, 1), (5, 17), (17, 5), (64, 64), (3, 239)])
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (True, (7, 0)), (False, (3, 2))])
def test_visible_mask_matches_definition(seqlen_q: int, seqlen_k: int, causal: bool, window: tuple[int, int]) -> None:
    mask = reference.visible_mask(seqlen_q, seqlen_k, causal, window)
    left, right = window[0], 0 if causal else window[1]
    for i in range(seqlen_q):
        for j in range(seqlen_k):
            pos = i + seqlen_k - seqlen_q
            expected = (right < 0 or j <= pos + right) and (left < 0 or j >= pos - left)
            assert bool(mask[i, j]) == expected, (i, j)


@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (True, (15, 0))])
def test_reference_matches_sdpa(causal: bool, window: tuple[int, int]) -> None:
    seqlen_q, seqlen_k, hq, hkv, d = 19, 41, 8, 2, 64
    q, k, v = _fp8(seqlen_q, hq, d), _fp8(seqlen_k, hkv, d), _fp8(seqlen_k, hkv, d)
    qd, kd, vd = (torch.rand(hkv, dtype=torch.float64) + 0.5 for _ in range(3))
    r = reference.attention_one(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, softmax_scale=d ** -0.5,
                                causal=causal, window=window, sink=None, out_dtype=torch.bfloat16)
    # Independent path: decode with the descales, repeat kv heads, SDPA with an explicit boolean mask.
    group = hq // hkv
    qf = (q.double() * qd.repeat_interleave(group)[None, :, None]).transpose(0, 1)
    kf = (k.double() * kd[None, :, None]).repeat_interleave(group, dim=1).transpose(0, 1)
    vf = (v.double() * vd[None, :, None]).repeat_interleave(group, dim=1).transpose(0, 1)
    mask = reference.visible_mask(seqlen_q, seqlen_k, causal, window)
    expected = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=d ** -0.5).transpose(0, 1)
    torch.testing.assert_close(r.out, expected, rtol=1e-10, atol=1e-10)
    lse = torch.logsumexp((qf @ kf.transpose(-1, -2) * d ** -0.5).masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(r.lse, lse, rtol=1e-10, atol=1e-10)


def test_sink_only_adds_to_the_denominator() -> None:
    seqlen_q, seqlen_k, hq, d = 4, 9, 2, 64
    q, k, v = _fp8(seqlen_q, hq, d), _fp8(seqlen_k, hq, d), _fp8(seqlen_k, hq, d)
    ones = torch.ones(hq, dtype=torch.float64)
    sink = torch.tensor([0.5, -2.0])
    r = reference.attention_one(q, k, v, q_descale=ones, k_descale=ones, v_descale=ones, softmax_scale=0.1,
                                causal=False, window=(-1, -1), sink=sink, out_dtype=torch.bfloat16)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k.double()) * 0.1
    with_sink = torch.cat([scores, sink.double().view(hq, 1, 1).expand(-1, seqlen_q, 1)], dim=-1)
    probs = torch.softmax(with_sink, dim=-1)[..., :-1]
    torch.testing.assert_close(r.out, torch.einsum("hqk,khd->qhd", probs, v.double()), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(r.lse, torch.logsumexp(with_sink, dim=-1), rtol=1e-10, atol=1e-10)


def test_rows_without_keys_give_zero_and_minus_inf() -> None:
    ones = torch.ones(1, dtype=torch.float64)
    q, k, v = _fp8(3, 1, 64), _fp8(0, 1, 64), _fp8(0, 1, 64)
    r = reference.attention_one(q, k, v, q_descale=ones, k_descale=ones, v_descale=ones, softmax_scale=0.125,
                                causal=True, window=(-1, -1), sink=None, out_dtype=torch.bfloat16)
    assert torch.equal(r.out, torch.zeros(3, 1, 64, dtype=torch.float64))
    assert torch.isneginf(r.lse).all()
    assert torch.equal(r.emul.float(), torch.zeros(3, 1, 64))


def test_emulation_is_close_but_not_exact() -> None:
    q, k, v = _fp8(16, 4, 128), _fp8(700, 4, 128), _fp8(700, 4, 128)
    ones = torch.ones(4, dtype=torch.float64)
    r = reference.attention_one(q, k, v, q_descale=ones, k_descale=ones, v_descale=ones, softmax_scale=128 ** -0.5,
                                causal=True, window=(-1, -1), sink=None, out_dtype=torch.bfloat16)
    err = (r.emul.double() - r.out).abs().max().item()
    assert 0 < err < 0.05 * r.out.abs().max().item()


def test_gather_keys_follows_a_shuffled_table() -> None:
    pages, page, hkv, d = 10, 16, 2, 64
    cache = _fp8(pages, page, hkv, d)
    table = torch.randperm(pages, dtype=torch.int32)[:4]
    rows = reference.gather_keys(cache, table, 50)
    assert rows.shape == (50, hkv, d) and rows.dtype == torch.float8_e4m3fn
    for i in range(50):
        expected = cache[table[i // page].item(), i % page]
        assert torch.equal(rows[i].view(torch.uint8), expected.view(torch.uint8))


def test_check_output_bar() -> None:
    q, k, v = _fp8(8, 2, 64), _fp8(33, 2, 64), _fp8(33, 2, 64)
    ones = torch.ones(2, dtype=torch.float64)
    r = reference.attention_one(q, k, v, q_descale=ones, k_descale=ones, v_descale=ones, softmax_scale=0.125,
                                causal=False, window=(-1, -1), sink=None, out_dtype=torch.bfloat16)
    figures = reference.check_output(r.emul, r, "emulation")
    assert figures["max_err"] <= figures["bound"]
    with pytest.raises(AssertionError, match="exceeds"):
        reference.check_output(r.emul.double() + 0.25, r, "shifted")
    poisoned = r.emul.clone()
    poisoned[3, 1, 5] = float("nan")
    with pytest.raises(AssertionError, match="non-finite"):
        reference.check_output(poisoned, r, "poisoned")
    reference.check_lse(r.lse.float(), r.lse, "lse")
    with pytest.raises(AssertionError):
        reference.check_lse(r.lse + 0.1, r.lse, "lse shifted")


def test_varlen_reference_splits_sequences() -> None:
    hq, hkv, d = 4, 2, 64
    lens_q, lens_k = [3, 0, 5], [7, 4, 5]
    cu_q = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 11, 16], dtype=torch.int32)
    q, k, v = _fp8(8, hq, d), _fp8(16, hkv, d), _fp8(16, hkv, d)
    kd = torch.rand(3, hkv) + 0.5
    r = reference.varlen_reference(q, k, v, cu_q, cu_seqlens_k=cu_k, k_descale=kd, softmax_scale=0.125, causal=True)
    assert r.out.shape == (8, hq, d) and r.lse.shape == (hq, 8)
    ones = torch.ones(hkv, dtype=torch.float64)
    last = reference.attention_one(q[3:8], k[11:16], v[11:16], q_descale=ones, k_descale=kd[2].double(),
                                   v_descale=ones, softmax_scale=0.125, causal=True, window=(-1, -1), sink=None,
                                   out_dtype=torch.bfloat16)
    torch.testing.assert_close(r.out[3:8], last.out)
    assert sum(lens_q) == r.out.shape[0] and len(lens_k) == 3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_q_rows_quantized_as_the_kernel_does(dtype: "torch.dtype") -> None:
    q = torch.tensor([[[1.0, 0.3]], [[0.0, -0.0]]], dtype=dtype)  # [Sq 2, Hq 1, d 2]; the second row all zeros
    values, scale = reference.quantize_q_rows(q)
    assert values[0, 0].tolist() == [448.0, 128.0]  # 0.3 * 448 ~ 134.4 lies between E4M3's 128 and 144
    assert scale[0, 0, 0].item() == pytest.approx(1 / 448)
    assert values[1].abs().sum().item() == 0 and scale[1].item() == 1  # scale 0 would make -inf * 0 = NaN


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_q_exact_unquantized_emulation_quantized(dtype: "torch.dtype") -> None:
    q = (torch.randn(9, 4, 64) * 2).to(dtype)
    q[3, 1] = 0  # a row of zeros: the uniform average, never NaN
    k, v = _fp8(30, 2, 64), _fp8(30, 2, 64)
    ones = torch.ones(2, dtype=torch.float64)
    kwargs = dict(q_descale=ones, k_descale=ones, v_descale=ones, softmax_scale=0.125, causal=True, window=(-1, -1),
                  sink=None, out_dtype=torch.float32)
    r = reference.attention_one(q, k, v, **kwargs)
    unquantized = reference.attention_one(q.float(), k, v, **kwargs)
    values, scale = reference.quantize_q_rows(q)
    quantized = reference.attention_one((values * scale).float(), k, v, **kwargs)
    assert torch.equal(r.out, unquantized.out) and torch.equal(r.lse, unquantized.lse)
    torch.testing.assert_close(r.emul, quantized.emul, rtol=1e-5, atol=1e-6)
    assert (r.emul - unquantized.emul).abs().max().item() > 1e-3
    assert torch.isfinite(r.emul).all()
    # The LSE of the quantized rows' scores is the LSE's error bar (GPU tests: check_lse's emul_lse).
    emul_distance = (r.emul_lse - r.lse).abs().max().item()
    assert emul_distance > 1e-3 and torch.isfinite(r.emul_lse).all()
    reference.check_lse(r.emul_lse, r.lse, "lse of the quantized rows", emul_lse=r.emul_lse)
    with pytest.raises(AssertionError):
        reference.check_lse(r.emul_lse, r.lse, "lse of the quantized rows, no emulation bar")
    with pytest.raises(AssertionError):
        reference.check_lse(r.lse + 3 * emul_distance, r.lse, "lse three emulation errors off", emul_lse=r.emul_lse)
    visible = 3 + 30 - 9 + 1  # causal, bottom-right aligned: row 3 sees keys 0..24 (q head 1 reads kv head 0)
    mean_v = v[:visible, 0].double().mean(dim=0)
    torch.testing.assert_close(r.out[3, 1], mean_v)
    torch.testing.assert_close(r.emul[3, 1].double(), mean_v, rtol=1e-5, atol=1e-6)
