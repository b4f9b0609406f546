"""Argument rules of the Python API that need no torch (fp8attn._args)."""

from __future__ import annotations

import math

import pytest

from fp8attn import _args


def test_accepts_vllm_defaults() -> None:
    _args.reject_unsupported(dropout_p=0.0, alibi_slopes=None, q_v=None, return_attn_probs=False, cp_world_size=1)


@pytest.mark.parametrize("kwargs,word", [
    ({"dropout_p": 0.1}, "dropout"),
    ({"alibi_slopes": object()}, "alibi"),
    ({"q_v": object()}, "q_v"),
    ({"return_attn_probs": True}, "return_attn_probs"),
    ({"cp_world_size": 2}, "context parallelism"),
])
def test_rejects_unsupported_features_by_name(kwargs: dict, word: str) -> None:
    with pytest.raises(NotImplementedError, match=word):
        _args.reject_unsupported(**kwargs)


@pytest.mark.parametrize("window,causal,expected", [
    (None, False, (-1, -1)),
    (None, True, (-1, 0)),
    ((-1, -1), False, (-1, -1)),
    ([-1, -1], True, (-1, 0)),
    ((1023, 0), True, (1023, 0)),      # vLLM's sliding window: (w - 1, 0)
    ((127, 0), False, (127, 0)),
    ((64, 32), False, (64, 32)),
    ((64, 32), True, (64, 0)),        # causal wins on the right side, as in FlashAttention
    ((-5, 3), False, (-1, 3)),
])
def test_normalize_window(window: object, causal: bool, expected: tuple[int, int]) -> None:
    assert _args.normalize_window(window, causal) == expected


def test_normalize_window_rejects_bad_length() -> None:
    with pytest.raises(ValueError, match="window_size"):
        _args.normalize_window((1, 2, 3), False)


SIXTEEN_BIT = ("fp16", "bf16")


def resolve(out_dtype: object, given_out_dtype: object, q_dtype: object) -> object:
    return _args.resolve_out_dtype(out_dtype, given_out_dtype, q_dtype, SIXTEEN_BIT, "bf16")


def test_resolve_out_dtype_e4m3_q() -> None:
    assert resolve(None, None, "e4m3") == "bf16"
    assert resolve(None, "fp16", "e4m3") == "fp16"
    assert resolve(None, "e4m3", "e4m3") == "e4m3"
    assert resolve("fp16", None, "e4m3") == "fp16"
    assert resolve("fp16", "fp16", "e4m3") == "fp16"
    with pytest.raises(ValueError, match="out_dtype"):
        resolve("fp16", "bf16", "e4m3")


@pytest.mark.parametrize("q_dtype", SIXTEEN_BIT)
def test_resolve_out_dtype_16bit_q_defaults_to_q_dtype(q_dtype: str) -> None:
    assert resolve(None, None, q_dtype) == q_dtype
    assert resolve(None, q_dtype, q_dtype) == q_dtype
    assert resolve(None, "e4m3", q_dtype) == "e4m3"  # the fused FP8 output: a choice, never a mix-up
    other = "bf16" if q_dtype == "fp16" else "fp16"
    assert resolve(other, None, q_dtype) == other  # asked for explicitly
    assert resolve(other, other, q_dtype) == other


@pytest.mark.parametrize("q_dtype,out", [("bf16", "fp16"), ("fp16", "bf16")])
def test_resolve_out_dtype_16bit_out_of_the_other_type_needs_out_dtype(q_dtype: str, out: str) -> None:
    with pytest.raises(ValueError, match=f"out has dtype {out} but q has dtype {q_dtype}.*out_dtype={out}"):
        resolve(None, out, q_dtype)


def test_default_softmax_scale() -> None:
    assert _args.default_softmax_scale(128) == pytest.approx(1 / math.sqrt(128))
