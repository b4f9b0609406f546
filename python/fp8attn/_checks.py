"""Cross-checks of every extent of a call, in the words of the function the user called.

Each tensor's shape is checked against every other that shares a dimension (batch, heads, head dims, key
rows, pages, the lengths of the per-sequence vectors and of the block table's rows, the sink, the descales,
out and lse), and every tensor's device against q's, before anything reaches the library. The library checks
the same extents again (params.h, "Extents"); these checks exist so that a Python caller reads the argument
names it passed (``k_cache``, ``cache_seqlens``, ``s_aux``) and the function it called, and so that a call
traced on meta tensors fails at trace time.

Self-contained and cheap: it reads only ``.shape``, ``.dtype`` and ``.device`` (no torch import, no device
sync), so it runs on CUDA, meta and CPU tensors alike, and the tests drive it with plain stand-ins.
What it cannot see are the values inside cu_seqlens, seqused_k and the block table (device memory): see
FP8ATTN_CHECK_DEVICE_ARGS in params.h.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

MAX_SPLITS = 256  # validate.cpp's kMaxSplits


@dataclass(frozen=True)
class Names:
    """What the user called and how it spells the arguments (flash_attn_with_kvcache says k_cache, ...)."""

    function: str
    k: str = "k"
    v: str = "v"
    seqused_k: str = "seqused_k"
    # The int32 dtype object of the tensors checked (torch.int32), compared by ==: no str() of a dtype, which
    # keeps the checks traceable by torch.compile.
    int32: Any = "int32"


def _fail(names: Names, message: str) -> None:
    raise ValueError(f"fp8attn.{names.function}: {message}")


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape)  # no generator expression: torch.compile traces these checks


def _check_vector(names: Names, t: Any, name: str, length: int, what: str) -> None:
    if t.dtype != names.int32 or len(t.shape) != 1:
        _fail(names, f"{name} must be a 1-d int32 tensor, got dtype {t.dtype}, shape {_shape(t)}")
    if t.shape[0] != length:
        _fail(names, f"{name} must have {what} = {length} entries, got shape {_shape(t)}")


def check_call(
    names: Names,
    q: Any,
    k: Any,
    v: Any,
    out: Optional[Any],
    lse: Optional[Any],
    cu_seqlens_q: Optional[Any],
    cu_seqlens_k: Optional[Any],
    seqused_k: Optional[Any],
    block_table: Optional[Any],
    q_descale: Optional[Any],
    k_descale: Optional[Any],
    v_descale: Optional[Any],
    s_aux: Optional[Any],
    max_seqlen_q: int,
    max_seqlen_k: int,
    num_splits: int,
) -> None:
    """Raises ValueError naming the first argument whose extent or device disagrees with the others."""
    given = {
        names.k: k, names.v: v, "out": out, "lse": lse, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
        names.seqused_k: seqused_k, "block_table": block_table, "q_descale": q_descale, "k_descale": k_descale,
        "v_descale": v_descale, "s_aux": s_aux,
    }
    for name, t in given.items():
        if t is not None and t.device != q.device:
            _fail(names, f"{name} is on {t.device} but q is on {q.device}: every tensor of a call must be on one device")

    varlen_q = cu_seqlens_q is not None
    paged = block_table is not None
    varlen_k = cu_seqlens_k is not None and not paged

    # q fixes batch, query rows, heads and the head dim.
    if varlen_q:
        if len(q.shape) != 3:
            _fail(names, f"q must be [total_q, num_heads_q, head_dim] with cu_seqlens_q, got shape {_shape(q)}")
        if cu_seqlens_q.dtype != names.int32 or len(cu_seqlens_q.shape) != 1 or cu_seqlens_q.shape[0] < 2:
            _fail(names, f"cu_seqlens_q must be a 1-d int32 tensor of batch + 1 >= 2 entries, got dtype "
                         f"{cu_seqlens_q.dtype}, shape {_shape(cu_seqlens_q)}")
        batch = int(cu_seqlens_q.shape[0]) - 1
        _, num_heads_q, head_dim = _shape(q)
    else:
        if len(q.shape) != 4:
            _fail(names, f"q must be [batch, seqlen_q, num_heads_q, head_dim], got shape {_shape(q)}")
        batch, _, num_heads_q, head_dim = _shape(q)

    # k fixes the key layout and the kv heads; v must match it in everything but its head dim.
    if paged:
        k_layout = "[num_pages, page_size, num_heads_kv, head_dim] (paged, with block_table)"
    elif varlen_k:
        k_layout = "[total_k, num_heads_kv, head_dim] (with cu_seqlens_k)"
    else:
        k_layout = "[batch, seqlen_k, num_heads_kv, head_dim]"
    k_ndim = 3 if varlen_k else 4
    for name, t in ((names.k, k), (names.v, v)):
        if len(t.shape) != k_ndim:
            _fail(names, f"{name} must be {k_layout}, got shape {_shape(t)}")
    num_heads_kv = int(k.shape[-2])
    if k.shape[-1] != head_dim:
        _fail(names, f"{names.k} must have q's head_dim = {head_dim} in its last dimension, got shape {_shape(k)}")
    if _shape(v)[:-1] != _shape(k)[:-1]:
        _fail(names, f"{names.v} must have {names.k}'s shape {_shape(k)[:-1]} in all but its last (head) dimension, "
                     f"got {_shape(v)}")
    if num_heads_kv < 1 or num_heads_q % num_heads_kv != 0:
        _fail(names, f"num_heads_q = {num_heads_q} (q.shape[-2]) must be a multiple of num_heads_kv = {num_heads_kv} "
                     f"({names.k}.shape[-2])")
    if not paged and not varlen_k and k.shape[0] != batch:
        _fail(names, f"{names.k} must have batch = {batch} (q.shape[0]) sequences, got shape {_shape(k)}")
    head_dim_v = int(v.shape[-1])

    # The per-sequence vectors and the block table have one entry (row) per sequence. (That the table covers
    # max_seqlen_k is the library's check: traced calls may pass a loose bound.)
    if cu_seqlens_k is not None:
        _check_vector(names, cu_seqlens_k, "cu_seqlens_k", batch + 1, "batch + 1")
    if seqused_k is not None:
        _check_vector(names, seqused_k, names.seqused_k, batch, "batch")
    if paged:
        if block_table.dtype != names.int32 or len(block_table.shape) != 2:
            _fail(names, f"block_table must be a 2-d int32 tensor [batch, max_pages], got dtype {block_table.dtype}, "
                         f"shape {_shape(block_table)}")
        if block_table.shape[0] != batch:
            _fail(names, f"block_table must have batch = {batch} rows, got shape {_shape(block_table)}")

    # One sink per q head; descales per (batch, kv head), or broadcast.
    if s_aux is not None and _shape(s_aux) != (num_heads_q,):
        _fail(names, f"s_aux must have shape (num_heads_q,) = ({num_heads_q},), got {_shape(s_aux)}")
    for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if t is None:
            continue
        shape = _shape(t)
        numel = 1
        for n in shape:
            numel *= n
        if numel != 1 and shape != (num_heads_kv,) and shape != (batch, num_heads_kv):
            _fail(names, f"{name} must be one value, (num_heads_kv,) = ({num_heads_kv},) or (batch, num_heads_kv) = "
                         f"({batch}, {num_heads_kv}), got shape {shape}")

    # What the call writes: out like q with head_dim_v, lse [B, Hq, Sq] or [Hq, total_q].
    out_shape = _shape(q)[:-1] + (head_dim_v,)
    if out is not None and _shape(out) != out_shape:
        _fail(names, f"out must have shape {out_shape} (q's, with {names.v}'s head dim), got {_shape(out)}")
    if lse is not None:
        lse_shape = (num_heads_q, q.shape[0]) if varlen_q else (batch, num_heads_q, q.shape[1])
        if _shape(lse) != lse_shape:
            _fail(names, f"lse must have shape {lse_shape}, got {_shape(lse)}")

    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if value < 0:
            _fail(names, f"{name} must be >= 0, got {value}")
    if not 0 <= num_splits <= MAX_SPLITS:
        _fail(names, f"num_splits must be 0 (heuristic) or 1..{MAX_SPLITS}, got {num_splits}")
