"""use_fp8attn: the serving policy (pure Python, runs without torch)."""

from __future__ import annotations

from collections import namedtuple

import pytest

from fp8attn import SUPPORTED_HEAD_SIZES, use_fp8attn

DeviceCapability = namedtuple("DeviceCapability", ["major", "minor"])  # the shape of vLLM's


@pytest.mark.parametrize("head_size,head_size_v", sorted(SUPPORTED_HEAD_SIZES))
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e4m3", "FP8_E4M3", "torch.float8_e4m3fn"])
def test_supported(head_size: int, head_size_v: int, kv_cache_dtype: str) -> None:
    assert use_fp8attn((9, 0), kv_cache_dtype, head_size, head_size_v, 0.0)


@pytest.mark.parametrize("capability", [(9, 0), DeviceCapability(9, 0), 90, 9])
def test_capability_forms(capability: object) -> None:
    assert use_fp8attn(capability, "fp8", 128)


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (10, 0), (12, 0), 89, 100, DeviceCapability(10, 3)])
def test_rejects_other_architectures(capability: object) -> None:
    assert not use_fp8attn(capability, "fp8", 128)


@pytest.mark.parametrize("kv_cache_dtype", ["fp8_e5m2", "auto", "bfloat16", "fp16", "torch.float8_e5m2", "fp8_inc"])
def test_rejects_non_e4m3_cache(kv_cache_dtype: str) -> None:
    assert not use_fp8attn((9, 0), kv_cache_dtype, 128)


@pytest.mark.parametrize("head_size,head_size_v", [(32, 32), (80, 80), (112, 112), (512, 256), (128, 64),
                                                   (256, 128), (128, 192), (576, 512), (1024, 1024)])
def test_rejects_unsupported_head_sizes(head_size: int, head_size_v: int) -> None:
    assert not use_fp8attn((9, 0), "fp8", head_size, head_size_v)


def test_gemma4_global_layers_are_served() -> None:
    # d = dv = 512 with the 16-bit Q vLLM passes (issue 35), and with an E4M3 one.
    assert use_fp8attn((9, 0), "fp8", 512, 512, q_dtype="bfloat16")
    assert use_fp8attn((9, 0), "fp8_e4m3", 512)


def test_head_size_v_defaults_to_head_size() -> None:
    assert use_fp8attn((9, 0), "fp8", 192)
    assert use_fp8attn((9, 0), "fp8", 192, 128)
    assert not use_fp8attn((9, 0), "fp8", 128, 192)


@pytest.mark.parametrize("softcap,expected", [(0.0, True), (None, True), (0, True), (30.0, True), (50, True),
                                              (-1.0, False), (float("nan"), False), (float("inf"), False)])
def test_softcap(softcap: object, expected: bool) -> None:
    assert use_fp8attn((9, 0), "fp8", 128, 128, softcap) is expected


def test_batch_invariance_opts_out() -> None:
    assert not use_fp8attn((9, 0), "fp8", 128, batch_invariant=True)


@pytest.mark.parametrize("head_size,head_size_v", sorted(SUPPORTED_HEAD_SIZES))
@pytest.mark.parametrize("q_dtype", ["bfloat16", "float16", "bf16", "fp16", "half", "torch.bfloat16", "torch.float16"])
def test_16bit_q_over_fp8_kv_is_served(q_dtype: str, head_size: int, head_size_v: int) -> None:
    # The kernel quantizes a 16-bit Q per row itself: every supported head-dim pair serves it.
    assert use_fp8attn((9, 0), "fp8", head_size, head_size_v, q_dtype=q_dtype)


@pytest.mark.parametrize("q_dtype", [None, "fp8", "fp8_e4m3", "float8_e4m3fn", "torch.float8_e4m3fn"])
def test_e4m3_q_is_served(q_dtype: object) -> None:
    assert use_fp8attn((9, 0), "fp8", 128, q_dtype=q_dtype)


@pytest.mark.parametrize("q_dtype", ["float32", "torch.float32", "fp8_e5m2", "torch.float8_e5m2", "int8"])
def test_other_q_dtypes_are_not_served(q_dtype: str) -> None:
    assert not use_fp8attn((9, 0), "fp8", 128, q_dtype=q_dtype)


def test_16bit_q_follows_the_other_rules() -> None:
    assert not use_fp8attn((9, 0), "bfloat16", 128, q_dtype="bfloat16")  # a 16-bit KV cache: not FP8 attention
    assert not use_fp8attn((8, 9), "fp8", 128, q_dtype="bfloat16")
    assert not use_fp8attn((9, 0), "fp8", 80, q_dtype="bfloat16")
    assert not use_fp8attn((9, 0), "fp8", 128, q_dtype="bfloat16", batch_invariant=True)
    assert use_fp8attn((9, 0), "fp8", 256, softcap=50.0, q_dtype="bfloat16")
