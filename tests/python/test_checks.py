"""fp8attn._checks: one test per extent rule, without torch or a GPU.

The checks read only .shape, .dtype and .device, so plain stand-ins drive them here; test_ops_meta.py runs
the same rules through the public functions on meta tensors when torch is installed. Each test starts from
a valid vLLM-shaped call (paged decode, varlen prefill or dense kvcache) and breaks one extent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from fp8attn import _checks

B, HQ, HKV, D, PAGE, NUM_PAGES, MAX_PAGES = 4, 32, 8, 128, 16, 64, 40


@dataclass(frozen=True)
class T:
    """A stand-in tensor: what the checks read."""

    shape: tuple[int, ...]
    dtype: str = "float8_e4m3fn"
    device: str = "cuda:0"


def i32(*shape: int, device: str = "cuda:0") -> T:
    return T(shape, "int32", device)


def f32(*shape: int) -> T:
    return T(shape, "float32")


def paged_decode() -> dict[str, Any]:
    return dict(
        q=T((B, HQ, D)), k=T((NUM_PAGES, PAGE, HKV, D)), v=T((NUM_PAGES, PAGE, HKV, D)),
        out=T((B, HQ, D), "bfloat16"), lse=None, cu_seqlens_q=i32(B + 1), cu_seqlens_k=None, seqused_k=i32(B),
        block_table=i32(B, MAX_PAGES), q_descale=f32(B, HKV), k_descale=f32(HKV), v_descale=f32(1),
        s_aux=T((HQ,), "bfloat16"), max_seqlen_q=1, max_seqlen_k=MAX_PAGES * PAGE, num_splits=0,
    )


def varlen_prefill() -> dict[str, Any]:
    a = paged_decode()
    a.update(q=T((300, HQ, D)), k=T((700, HKV, D)), v=T((700, HKV, D)), out=T((300, HQ, D), "bfloat16"),
             cu_seqlens_k=i32(B + 1), seqused_k=None, block_table=None, max_seqlen_q=200, max_seqlen_k=500)
    return a


def dense_kvcache() -> dict[str, Any]:
    a = paged_decode()
    a.update(q=T((B, 2, HQ, D)), k=T((B, 512, HKV, D)), v=T((B, 512, HKV, D)), out=T((B, 2, HQ, D), "bfloat16"),
             cu_seqlens_q=None, block_table=None, max_seqlen_q=2, max_seqlen_k=512)
    return a


NAMES = _checks.Names("flash_attn_varlen_func")
KVCACHE_NAMES = _checks.Names("flash_attn_with_kvcache", k="k_cache", v="v_cache", seqused_k="cache_seqlens")


def check(a: dict[str, Any], names: _checks.Names = NAMES) -> None:
    _checks.check_call(names, **a)


def rejected(a: dict[str, Any], *parts: str, names: _checks.Names = NAMES) -> str:
    with pytest.raises(ValueError) as info:
        check(a, names)
    message = str(info.value)
    assert message.startswith(f"fp8attn.{names.function}: "), message
    for part in parts:
        assert part in message, f"{message!r} lacks {part!r}"
    return message


@pytest.mark.parametrize("make", [paged_decode, varlen_prefill, dense_kvcache])
def test_valid_calls_pass(make) -> None:
    check(make())


def test_empty_varlen_batch_passes() -> None:
    # Every key length 0: k and v have no rows (torch hands over NULL), which is valid.
    a = varlen_prefill()
    a.update(k=T((0, HKV, D)), v=T((0, HKV, D)), max_seqlen_k=0)
    check(a)
    a.update(q=T((0, HQ, D)), out=T((0, HQ, D), "bfloat16"), max_seqlen_q=0)
    check(a)


def test_tensor_on_another_device_rejected() -> None:
    a = paged_decode()
    a["seqused_k"] = i32(B, device="cuda:1")
    rejected(a, "seqused_k is on cuda:1 but q is on cuda:0", "one device")


def test_q_rank_follows_the_layout() -> None:
    a = paged_decode()
    a["q"] = T((B, 1, HQ, D))
    rejected(a, "q must be [total_q, num_heads_q, head_dim] with cu_seqlens_q", "(4, 1, 32, 128)")
    a = dense_kvcache()
    a["q"] = T((B * 2, HQ, D))
    rejected(a, "q must be [batch, seqlen_q, num_heads_q, head_dim]")


def test_cu_seqlens_q_has_at_least_two_int32_entries() -> None:
    a = paged_decode()
    a["cu_seqlens_q"] = i32(1)
    rejected(a, "cu_seqlens_q must be a 1-d int32 tensor of batch + 1 >= 2 entries")
    a["cu_seqlens_q"] = T((B + 1,), "int64")
    rejected(a, "cu_seqlens_q", "int64")


def test_k_rank_follows_the_layout() -> None:
    a = varlen_prefill()
    a["k"] = T((1, 700, HKV, D))
    rejected(a, "k must be [total_k, num_heads_kv, head_dim] (with cu_seqlens_k)")
    a = paged_decode()
    a["v"] = T((NUM_PAGES * PAGE, HKV, D))
    rejected(a, "v must be [num_pages, page_size, num_heads_kv, head_dim] (paged")


def test_k_head_dim_is_q_head_dim() -> None:
    a = paged_decode()
    a["k"] = T((NUM_PAGES, PAGE, HKV, 64))
    rejected(a, "k must have q's head_dim = 128")


# The first hole: a v with fewer keys than k.
@pytest.mark.parametrize("make,short_v", [
    (dense_kvcache, (B, 256, HKV, D)), (varlen_prefill, (350, HKV, D)), (paged_decode, (32, PAGE, HKV, D))])
def test_v_shorter_than_k_rejected(make, short_v: tuple[int, ...]) -> None:
    a = make()
    a["v"] = T(short_v)
    rejected(a, "v must have k's shape", f"got {short_v}")


def test_v_heads_must_be_k_heads() -> None:
    a = paged_decode()
    a["v"] = T((NUM_PAGES, PAGE, HKV // 2, D))
    rejected(a, "v must have k's shape")


def test_v_may_have_its_own_head_dim() -> None:
    a = paged_decode()
    a.update(q=T((B, HQ, 192)), k=T((NUM_PAGES, PAGE, HKV, 192)), out=T((B, HQ, 128), "bfloat16"))
    check(a)


def test_heads_q_multiple_of_heads_kv() -> None:
    a = paged_decode()
    a.update(k=T((NUM_PAGES, PAGE, 6, D)), v=T((NUM_PAGES, PAGE, 6, D)), q_descale=None, k_descale=None,
             v_descale=None)
    rejected(a, "num_heads_q = 32 (q.shape[-2]) must be a multiple of num_heads_kv = 6")


def test_dense_k_has_batch_sequences() -> None:
    a = dense_kvcache()
    a.update(k=T((B - 1, 512, HKV, D)), v=T((B - 1, 512, HKV, D)))
    rejected(a, "k_cache must have batch = 4 (q.shape[0]) sequences", names=KVCACHE_NAMES)


def test_cu_seqlens_k_has_batch_plus_one_entries() -> None:
    a = varlen_prefill()
    a["cu_seqlens_k"] = i32(B)
    rejected(a, "cu_seqlens_k must have batch + 1 = 5 entries, got shape (4,)")


def test_seqused_k_has_batch_entries() -> None:
    a = dense_kvcache()
    a["seqused_k"] = i32(B + 1)
    rejected(a, "cache_seqlens must have batch = 4 entries, got shape (5,)", names=KVCACHE_NAMES)
    a["seqused_k"] = T((B,), "int64")
    rejected(a, "cache_seqlens must be a 1-d int32 tensor", names=KVCACHE_NAMES)


def test_block_table_has_batch_rows() -> None:
    a = paged_decode()
    a["block_table"] = i32(B - 1, MAX_PAGES)
    rejected(a, "block_table must have batch = 4 rows, got shape (3, 40)")
    a["block_table"] = i32(B * MAX_PAGES)
    rejected(a, "block_table must be a 2-d int32 tensor")


# The second hole: an s_aux shorter than num_heads_q.
def test_s_aux_shorter_than_num_heads_q_rejected() -> None:
    a = paged_decode()
    a["s_aux"] = T((HKV,), "float32")
    rejected(a, "s_aux must have shape (num_heads_q,) = (32,), got (8,)")


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (HKV,), (B, HKV)])
def test_descale_forms_accepted(shape: tuple[int, ...]) -> None:
    a = paged_decode()
    a["k_descale"] = f32(*shape)
    check(a)


@pytest.mark.parametrize("shape", [(HQ,), (B, HQ), (B + 1, HKV), (HKV, B)])
def test_descale_of_another_shape_rejected(shape: tuple[int, ...]) -> None:
    a = paged_decode()
    a["v_descale"] = f32(*shape)
    rejected(a, "v_descale must be one value, (num_heads_kv,) = (8,) or (batch, num_heads_kv) = (4, 8)",
             f"got shape {shape}")


def test_out_shape_is_q_with_head_dim_v() -> None:
    a = paged_decode()
    a["out"] = T((B - 1, HQ, D), "bfloat16")  # a view of too few tokens
    rejected(a, "out must have shape (4, 32, 128)", "got (3, 32, 128)")


def test_lse_shape_follows_q() -> None:
    a = varlen_prefill()
    a["lse"] = f32(300, HQ)
    rejected(a, "lse must have shape (32, 300), got (300, 32)")
    a = dense_kvcache()
    a["lse"] = f32(B, HQ, 2)
    check(a)


def test_max_seqlens_non_negative() -> None:
    a = varlen_prefill()
    a["max_seqlen_q"] = -1
    rejected(a, "max_seqlen_q must be >= 0, got -1")


@pytest.mark.parametrize("splits", [-1, 257])
def test_num_splits_range(splits: int) -> None:
    a = paged_decode()
    a["num_splits"] = splits
    rejected(a, "num_splits must be 0 (heuristic) or 1..256", f"got {splits}")
