"""quantize_e4m3 on CPU tensors: vLLM QuantFP8 semantics, per tensor and per kv head."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fp8attn import quantize_e4m3  # noqa: E402
from fp8attn.quant import FP8_E4M3_MAX, MIN_SCALE  # noqa: E402


def _vllm_static(x: "torch.Tensor", scale: "torch.Tensor") -> "torch.Tensor":
    # QuantFP8.forward_native, written out: fp32, multiply by the reciprocal, clamp, cast.
    return (x.to(torch.float32) * scale.to(torch.float32).reciprocal()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def _same_bits(a: "torch.Tensor", b: "torch.Tensor") -> bool:
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_dynamic_per_tensor(dtype: "torch.dtype") -> None:
    x = (torch.randn(37, 8, 128) * 3).to(dtype)
    q, scale = quantize_e4m3(x)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == (1,)
    amax = x.float().abs().max()
    torch.testing.assert_close(scale, (amax / FP8_E4M3_MAX).reshape(1))
    assert _same_bits(q, _vllm_static(x, scale))
    assert q.float().abs().max().item() == FP8_E4M3_MAX  # the largest element lands on the top of the range
    # E4M3 keeps 3 mantissa bits: relative error at most 2^-4 where x / scale is normal (>= 2^-6).
    dq = q.float() * scale
    normal = x.float().abs() >= 2 ** -6 * scale
    assert ((dq - x.float()).abs()[normal] <= x.float().abs()[normal] * 2 ** -4 * (1 + 1e-6)).all()


@pytest.mark.parametrize("scale", [0.05, torch.tensor(0.05), torch.tensor([0.05])])
def test_static_per_tensor_matches_vllm_bits_and_clamps(scale: object) -> None:
    x = torch.randn(64, 4, 64, dtype=torch.bfloat16) * 40  # many values beyond 448 * 0.05
    q, out_scale = quantize_e4m3(x, scale)
    assert out_scale.shape == (1,) and out_scale.item() == pytest.approx(0.05)
    assert _same_bits(q, _vllm_static(x, torch.tensor(0.05)))
    assert q.float().abs().max().item() == FP8_E4M3_MAX
    assert not torch.isnan(q.float()).any()  # clamped, never cast to NaN


def test_per_kv_head_scales_each_group() -> None:
    tokens, hq, hkv, d = 23, 8, 2, 64
    x = torch.randn(tokens, hq, d, dtype=torch.bfloat16)
    x[:, hq // hkv:] *= 10  # the second kv head's queries are 10x larger
    q, scale = quantize_e4m3(x, per_kv_head=True, num_kv_heads=hkv)
    assert scale.shape == (hkv,) and q.shape == x.shape
    group = hq // hkv
    for h in range(hkv):
        xs = x[:, h * group:(h + 1) * group]
        assert scale[h].item() == pytest.approx(xs.float().abs().max().item() / FP8_E4M3_MAX)
        assert _same_bits(q[:, h * group:(h + 1) * group], _vllm_static(xs, scale[h]))
    assert scale[1] > 5 * scale[0]


def test_static_per_kv_head() -> None:
    x = torch.randn(5, 4, 64)
    scale = torch.tensor([0.01, 0.02])
    q, out_scale = quantize_e4m3(x, scale, per_kv_head=True, num_kv_heads=2)
    torch.testing.assert_close(out_scale, scale)
    assert _same_bits(q[:, :2], _vllm_static(x[:, :2], scale[0]))
    assert _same_bits(q[:, 2:], _vllm_static(x[:, 2:], scale[1]))


def test_zero_input_gets_the_minimum_scale() -> None:
    q, scale = quantize_e4m3(torch.zeros(3, 2, 64))
    assert scale.item() == pytest.approx(MIN_SCALE)
    assert (q.float() == 0).all()


def test_rejects_bad_arguments() -> None:
    x = torch.randn(4, 6, 64)
    with pytest.raises(ValueError, match="num_kv_heads"):
        quantize_e4m3(x, per_kv_head=True)
    with pytest.raises(ValueError, match="num_kv_heads"):
        quantize_e4m3(x, per_kv_head=True, num_kv_heads=4)
    with pytest.raises(ValueError, match="one element"):
        quantize_e4m3(x, torch.ones(2))
    with pytest.raises(ValueError, match="3 elements"):
        quantize_e4m3(x, torch.ones(2), per_kv_head=True, num_kv_heads=3)
    with pytest.raises(ValueError, match="heads, head_dim"):
        quantize_e4m3(torch.randn(8))
