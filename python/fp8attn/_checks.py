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
    """Raises ValueError naming the first argument whose extent or device disagrees with the others.

    Written for the eager path's host time (a few microseconds): each shape is read once, and names and
    messages are built only on a failure.
    """
    device = q.device
    others = (k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, q_descale, k_descale, v_descale,
              s_aux)
    for t in others:
        if t is not None and t.device != device:
            _fail_device(names, others, device)

    q_shape, k_shape, v_shape = _shape(q), _shape(k), _shape(v)
    varlen_q = cu_seqlens_q is not None
    paged = block_table is not None
    varlen_k = cu_seqlens_k is not None and not paged

    # q fixes batch, query rows, heads and the head dim.
    if varlen_q:
        if len(q_shape) != 3:
            _fail(names, f"q must be [total_q, num_heads_q, head_dim] with cu_seqlens_q, got shape {q_shape}")
        cu_q_shape = _shape(cu_seqlens_q)
        if cu_seqlens_q.dtype != names.int32 or len(cu_q_shape) != 1 or cu_q_shape[0] < 2:
            _fail(names, f"cu_seqlens_q must be a 1-d int32 tensor of batch + 1 >= 2 entries, got dtype "
                         f"{cu_seqlens_q.dtype}, shape {cu_q_shape}")
        batch = cu_q_shape[0] - 1
        _, num_heads_q, head_dim = q_shape
    else:
        if len(q_shape) != 4:
            _fail(names, f"q must be [batch, seqlen_q, num_heads_q, head_dim], got shape {q_shape}")
        batch, _, num_heads_q, head_dim = q_shape

    # k fixes the key layout and the kv heads; v must match it in everything but its head dim.
    k_ndim = 3 if varlen_k else 4
    if len(k_shape) != k_ndim or len(v_shape) != k_ndim:
        if paged:
            k_layout = "[num_pages, page_size, num_heads_kv, head_dim] (paged, with block_table)"
        elif varlen_k:
            k_layout = "[total_k, num_heads_kv, head_dim] (with cu_seqlens_k)"
        else:
            k_layout = "[batch, seqlen_k, num_heads_kv, head_dim]"
        name, shape = (names.k, k_shape) if len(k_shape) != k_ndim else (names.v, v_shape)
        _fail(names, f"{name} must be {k_layout}, got shape {shape}")
    num_heads_kv, head_dim_v = k_shape[-2], v_shape[-1]
    if k_shape[-1] != head_dim:
        _fail(names, f"{names.k} must have q's head_dim = {head_dim} in its last dimension, got shape {k_shape}")
    if v_shape[:-1] != k_shape[:-1]:
        _fail(names, f"{names.v} must have {names.k}'s shape {k_shape[:-1]} in all but its last (head) dimension, "
                     f"got {v_shape}")
    if num_heads_kv < 1 or num_heads_q % num_heads_kv != 0:
        _fail(names, f"num_heads_q = {num_heads_q} (q.shape[-2]) must be a multiple of num_heads_kv = {num_heads_kv} "
                     f"({names.k}.shape[-2])")
    if not paged and not varlen_k and k_shape[0] != batch:
        _fail(names, f"{names.k} must have batch = {batch} (q.shape[0]) sequences, got shape {k_shape}")

    # The per-sequence vectors and the block table have one entry (row) per sequence. (That the table covers
    # max_seqlen_k is the library's check: traced calls may pass a loose bound.)
    if cu_seqlens_k is not None:
        _check_vector(names, cu_seqlens_k, "cu_seqlens_k", batch + 1, "batch + 1")
    if seqused_k is not None:
        _check_vector(names, seqused_k, names.seqused_k, batch, "batch")
    if paged:
        table_shape = _shape(block_table)
        if block_table.dtype != names.int32 or len(table_shape) != 2:
            _fail(names, f"block_table must be a 2-d int32 tensor [batch, max_pages], got dtype {block_table.dtype}, "
                         f"shape {table_shape}")
        if table_shape[0] != batch:
            _fail(names, f"block_table must have batch = {batch} rows, got shape {table_shape}")

    # One sink per q head; descales per (batch, kv head), or broadcast.
    if s_aux is not None and _shape(s_aux) != (num_heads_q,):
        _fail(names, f"s_aux must have shape (num_heads_q,) = ({num_heads_q},), got {_shape(s_aux)}")
    for t in (q_descale, k_descale, v_descale):
        if t is not None:
            shape = _shape(t)
            if shape != (batch, num_heads_kv) and shape != (num_heads_kv,) and _numel(shape) != 1:
                name = ("q_descale", "k_descale", "v_descale")[[q_descale, k_descale, v_descale].index(t)]
                _fail(names, f"{name} must be one value, (num_heads_kv,) = ({num_heads_kv},) or (batch, "
                             f"num_heads_kv) = ({batch}, {num_heads_kv}), got shape {shape}")

    # What the call writes: out like q with head_dim_v, lse [B, Hq, Sq] or [Hq, total_q].
    if out is not None and _shape(out) != q_shape[:-1] + (head_dim_v,):
        _fail(names, f"out must have shape {q_shape[:-1] + (head_dim_v,)} (q's, with {names.v}'s head dim), got "
                     f"{_shape(out)}")
    if lse is not None:
        lse_shape = (num_heads_q, q_shape[0]) if varlen_q else (batch, num_heads_q, q_shape[1])
        if _shape(lse) != lse_shape:
            _fail(names, f"lse must have shape {lse_shape}, got {_shape(lse)}")

    if max_seqlen_q < 0 or max_seqlen_k < 0:
        name, value = ("max_seqlen_q", max_seqlen_q) if max_seqlen_q < 0 else ("max_seqlen_k", max_seqlen_k)
        _fail(names, f"{name} must be >= 0, got {value}")
    if not 0 <= num_splits <= MAX_SPLITS:
        _fail(names, f"num_splits must be 0 (heuristic) or 1..{MAX_SPLITS}, got {num_splits}")


def _numel(shape: tuple[int, ...]) -> int:
    numel = 1
    for n in shape:
        numel *= n
    return numel


def _fail_device(names: Names, others: tuple, device: Any) -> None:
    labels = (names.k, names.v, "out", "lse", "cu_seqlens_q", "cu_seqlens_k", names.seqused_k, "block_table",
              "q_descale", "k_descale", "v_descale", "s_aux")
    for name, t in zip(labels, others):
        if t is not None and t.device != device:
            _fail(names, f"{name} is on {t.device} but q is on {device}: every tensor of a call must be on one device")
