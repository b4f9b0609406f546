"""End-to-end tests of the Python API on an SM90 GPU against tests/python/reference.py (docs/accuracy.md).

Every call gets fresh seeded data, a NaN-poisoned ``out`` (and, for vLLM-style calls, an out that is a
slice of a larger NaN buffer, to catch writes past the end), and, for paged K/V, a shuffled block table
whose unused pages and unused table entries are NaN pages. Page tails past a sequence's length hold
finite garbage (±448): a key read there would change the result, but it must not be NaN, because a
masked key still enters the PV product as 0 × V and 0 × NaN is NaN; vLLM's page tails hold stale finite
values, never NaN. The tests of vLLM 0.34's cache layout (the last section) are stricter: there everything
but the rows a sequence uses stays NaN, page tails included, which the kernel must never let reach the
output (it zeroes V past a sequence's keys before PV and sets their scores to -inf, as the C++ harness's
NaN page tails also check).

A case whose kernel is not in this build is skipped only in a dev build (FP8ATTN_HEAD_DIMS subset); in a
full build it fails.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pytest

torch = pytest.importorskip("torch")

import build_info  # noqa: E402
import fp8attn  # noqa: E402
import reference  # noqa: E402

# The supported head dims, from src/kernels.list (their one source).
HEAD_DIM_PAIRS = sorted(fp8attn.SUPPORTED_HEAD_SIZES)
EQUAL_HEAD_DIMS = [d for d, dv in HEAD_DIM_PAIRS if d == dv]

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
NAN_E4M3_BYTE = 0x7F   # S.1111.111: NaN in float8_e4m3fn
GARBAGE_E4M3 = 448.0   # the largest finite E4M3 value
PAGE = 16
CUDA = "cuda"


def run(fn: Callable[[], Any]) -> Any:
    """Runs fn. 'Kernel not in this build' is a skip only in a dev build that left head dims out; in a full
    build it fails, so that a full build cannot pass by skipping."""
    try:
        return fn()
    except fp8attn.KernelNotCompiledError as err:
        missing = build_info.missing_head_dims()
        if not missing:
            raise
        pytest.skip(f"dev build without head dims {missing} (FP8ATTN_HEAD_DIMS subset): {err}")


def fp8_randn(*shape: int, scale: float = 1.0) -> "torch.Tensor":
    return (torch.randn(*shape, device=CUDA) * scale).to(E4M3)


def nan_like_out(shape: tuple[int, ...], dtype: "torch.dtype",
                 extra_rows: int = 0) -> tuple["torch.Tensor", "torch.Tensor"]:
    """A NaN buffer with ``extra_rows`` spare leading-dim rows, and the view of its first shape[0] rows."""
    buf = torch.full((shape[0] + extra_rows, *shape[1:]), float("nan"), dtype=dtype, device=CUDA)
    return buf, buf[: shape[0]]


@dataclass
class PagedCache:
    k: "torch.Tensor"             # [num_blocks, PAGE, Hkv, d] view of one cache tensor (kv_cache.unbind(0))
    v: "torch.Tensor"
    block_table: "torch.Tensor"   # [B, width] int32, a column-sliced view
    seqused_k: "torch.Tensor"     # [B] int32


def make_paged_cache(contexts: list[int], hkv: int, d: int, *, table_width: int, hnd: bool = False,
                     spare_pages: int = 7, table_offset: int = 3) -> PagedCache:
    """vLLM's cache: one tensor [2, num_blocks, PAGE, Hkv, d] (or HND-strided), pages shuffled, unused
    pages NaN, unused table entries pointing at NaN pages, page tails finite garbage."""
    pages_per_seq = [math.ceil(c / PAGE) for c in contexts]
    num_blocks = sum(pages_per_seq) + spare_pages
    if hnd:
        cache = torch.empty(2, num_blocks, hkv, PAGE, d, dtype=E4M3, device=CUDA).permute(0, 1, 3, 2, 4)
    else:
        cache = torch.empty(2, num_blocks, PAGE, hkv, d, dtype=E4M3, device=CUDA)
    # Written through a byte view: same-size dtype views work on any strides, and indexed writes are
    # defined for uint8 on every torch version (not for FP8 on all of them).
    cache_bytes = cache.view(torch.uint8)
    cache_bytes.fill_(NAN_E4M3_BYTE)
    order = torch.randperm(num_blocks, device=CUDA).to(torch.int32)
    data_pages, nan_pages = order[: sum(pages_per_seq)], order[sum(pages_per_seq):]
    table_full = nan_pages[torch.randint(len(nan_pages), (len(contexts), table_width + table_offset), device=CUDA)]
    start = 0
    for b, (ctx, n) in enumerate(zip(contexts, pages_per_seq)):
        pages = data_pages[start:start + n]
        start += n
        table_full[b, table_offset:table_offset + n] = pages
        for kv in range(2):
            rows = torch.full((n * PAGE, hkv, d), GARBAGE_E4M3, device=CUDA)
            rows[torch.arange(n * PAGE, device=CUDA) % 2 == 1] *= -1
            rows[:ctx] = torch.randn(ctx, hkv, d, device=CUDA)
            cache_bytes[kv][pages.long()] = rows.to(E4M3).view(torch.uint8).view(n, PAGE, hkv, d)
    k, v = cache.unbind(0)
    seqused = torch.tensor(contexts, dtype=torch.int32, device=CUDA)
    return PagedCache(k=k, v=v, block_table=table_full[:, table_offset:], seqused_k=seqused)


def cu_seqlens(lengths: list[int]) -> "torch.Tensor":
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=CUDA)


def descales(kind: str, batch: int, hkv: int) -> Optional["torch.Tensor"]:
    """Descale forms: vLLM's expand()ed per-tensor (0,0) and per-head (0,1) views, 0-d, dense (B,Hkv), None."""
    if kind == "none":
        return None
    if kind == "scalar":
        return torch.rand((), device=CUDA) + 0.5
    if kind == "expand00":
        return (torch.rand(1, device=CUDA) + 0.5).expand(batch, hkv)
    if kind == "expand01":
        return (torch.rand(hkv, device=CUDA) + 0.5).expand(batch, hkv)
    if kind == "dense":
        return torch.rand(batch, hkv, device=CUDA) + 0.5
    if kind == "transposed":
        return (torch.rand(hkv, batch, device=CUDA) + 0.5).t()
    raise ValueError(kind)


def vllm_decode(*, d: int, hq: int, hkv: int, q_tokens: int, contexts: list[int], window_left: int,
                q_descale: str = "expand00", k_descale: str = "expand01", v_descale: str = "expand00",
                sink_dtype: Optional["torch.dtype"] = torch.float32, out_dtype: "torch.dtype" = torch.bfloat16,
                num_splits: int = 0, max_seqlen_k: Optional[int] = None, hnd: bool = False,
                q_dtype: "torch.dtype" = E4M3) -> None:
    """One vLLM decode step (FlashAttentionImpl.forward's call) checked against the reference. A 16-bit
    ``q_dtype`` passes q unquantized (the kernel quantizes it per row)."""
    contexts = [max(c, q_tokens) for c in contexts]  # a request's context includes its new tokens
    batch = len(contexts)
    max_seqlen_k = max_seqlen_k or max(contexts)
    cache = make_paged_cache(contexts, hkv, d, table_width=math.ceil(max_seqlen_k / PAGE), hnd=hnd)
    total_q = batch * q_tokens
    q = fp8_randn(total_q, hq, d) if q_dtype == E4M3 else torch.randn(total_q, hq, d, device=CUDA).to(q_dtype)
    cu_q = cu_seqlens([q_tokens] * batch)
    qs, ks, vs = (descales(kind, batch, hkv) for kind in (q_descale, k_descale, v_descale))
    sink = torch.randn(hq, device=CUDA).to(sink_dtype) if sink_dtype is not None else None
    buf, out = nan_like_out((total_q, hq, d), out_dtype, extra_rows=5)
    window = (window_left, 0)
    result, lse = run(lambda: fp8attn.flash_attn_varlen_func(
        q=q, k=cache.k, v=cache.v, out=out, cu_seqlens_q=cu_q, max_seqlen_q=q_tokens, seqused_k=cache.seqused_k,
        max_seqlen_k=max_seqlen_k, softmax_scale=d ** -0.5, causal=True, window_size=window,
        block_table=cache.block_table, softcap=0.0, return_softmax_lse=True, scheduler_metadata=None,
        q_descale=qs, k_descale=ks, v_descale=vs, num_splits=num_splits, s_aux=sink))
    torch.cuda.synchronize()
    assert result is out
    assert torch.isnan(buf[total_q:].float()).all(), "rows past out's end were written"
    ref = reference.varlen_reference(q, cache.k, cache.v, cu_q, seqused_k=cache.seqused_k,
                                     block_table=cache.block_table, q_descale=qs, k_descale=ks, v_descale=vs,
                                     softmax_scale=d ** -0.5, causal=True, window=window, sink=sink,
                                     out_dtype=out_dtype)
    reference.check_output(out, ref, f"paged decode d={d} hq={hq} hkv={hkv} q_tokens={q_tokens} q {q_dtype}")
    reference.check_reference_lse(lse, ref, "paged decode lse")


CONTEXTS = [1, 17, 239, 1025, 640, 3001]


@pytest.mark.parametrize("window_left", [-1, 63])
@pytest.mark.parametrize("q_tokens", [1, 4])
@pytest.mark.parametrize("hq,hkv", [(32, 8), (8, 4), (16, 1)])
@pytest.mark.parametrize("d", EQUAL_HEAD_DIMS)
def test_vllm_paged_decode(d: int, hq: int, hkv: int, q_tokens: int, window_left: int) -> None:
    vllm_decode(d=d, hq=hq, hkv=hkv, q_tokens=q_tokens, contexts=CONTEXTS, window_left=window_left)


@pytest.mark.parametrize("q_descale,k_descale,v_descale", [
    ("expand00", "expand00", "expand00"), ("expand01", "expand01", "expand01"), ("none", "none", "none"),
    ("scalar", "dense", "transposed"), ("transposed", "scalar", "none")])
def test_vllm_paged_decode_descales(q_descale: str, k_descale: str, v_descale: str) -> None:
    vllm_decode(d=128, hq=32, hkv=8, q_tokens=1, contexts=CONTEXTS, window_left=-1, q_descale=q_descale,
                k_descale=k_descale, v_descale=v_descale)


@pytest.mark.parametrize("sink_dtype", [None, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_vllm_paged_decode_sink_and_out_dtype(sink_dtype: Any, out_dtype: Any) -> None:
    vllm_decode(d=128, hq=32, hkv=8, q_tokens=2, contexts=CONTEXTS, window_left=127, sink_dtype=sink_dtype,
                out_dtype=out_dtype)


@pytest.mark.parametrize("num_splits", [0, 1, 3, 16])
@pytest.mark.parametrize("hnd", [False, True])
def test_vllm_paged_decode_splits_graph_bound_and_hnd(num_splits: int, hnd: bool) -> None:
    # max_seqlen_k = 32768 as under vLLM's CUDA-graph capture, far above the real lengths.
    vllm_decode(d=128, hq=32, hkv=8, q_tokens=1, contexts=[5, 3000, 77, 16 * 64], window_left=-1,
                num_splits=num_splits, max_seqlen_k=32768, hnd=hnd)


PREFILL_LENGTHS = [(1, 1), (3, 1025), (17, 5), (0, 9), (239, 239), (128, 300), (64, 0), (1025, 1025)]


@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (True, (100, 0)), (False, (64, 64))])
@pytest.mark.parametrize("d,dv", HEAD_DIM_PAIRS)
def test_varlen_prefill(d: int, dv: int, causal: bool, window: tuple[int, int]) -> None:
    hq, hkv = 8, 2
    lens_q = [lq for lq, _ in PREFILL_LENGTHS]
    lens_k = [lk for _, lk in PREFILL_LENGTHS]
    total_q, total_k = sum(lens_q), sum(lens_k)
    q = fp8_randn(total_q, hq, d)
    # K and V as strided views of one packed [total_k, 2, Hkv, d] tensor (only the last dim is contiguous).
    if d == dv:
        kv = fp8_randn(total_k, 2, hkv, d)
        k, v = kv[:, 0], kv[:, 1]
    else:
        k, v = fp8_randn(total_k, hkv, d), fp8_randn(total_k, hkv, dv)
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    qs, ks, vs = (descales("dense", len(lens_q), hkv) for _ in range(3))
    out, lse = run(lambda: fp8attn.flash_attn_varlen_func(
        q, k, v, max(lens_q), cu_q, max(lens_k), cu_seqlens_k=cu_k, causal=causal, window_size=window,
        q_descale=qs, k_descale=ks, v_descale=vs, return_softmax_lse=True))
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16 and out.shape == (total_q, hq, dv)
    ref = reference.varlen_reference(q, k, v, cu_q, cu_seqlens_k=cu_k, q_descale=qs, k_descale=ks, v_descale=vs,
                                     softmax_scale=d ** -0.5, causal=causal, window=window)
    reference.check_output(out, ref, f"varlen prefill d={d} dv={dv} causal={causal} window={window}")
    reference.check_reference_lse(lse, ref, "varlen prefill lse")


@pytest.mark.parametrize("causal", [False, True])
def test_dense_flash_attn_func(causal: bool) -> None:
    batch, seqlen_q, seqlen_k, hq, hkv, d = 3, 130, 257, 16, 4, 128
    q, k, v = fp8_randn(batch, seqlen_q, hq, d), fp8_randn(batch, seqlen_k, hkv, d), fp8_randn(batch, seqlen_k, hkv, d)
    ks = descales("expand01", batch, hkv)
    _, out = nan_like_out((batch, seqlen_q, hq, d), torch.float16)
    result, lse = run(lambda: fp8attn.flash_attn_func(q, k, v, causal=causal, k_descale=ks, out=out,
                                                      return_softmax_lse=True))
    torch.cuda.synchronize()
    assert result is out and lse.shape == (batch, hq, seqlen_q)
    for b in range(batch):
        cu_q = torch.tensor([0, seqlen_q], dtype=torch.int32)
        cu_k = torch.tensor([0, seqlen_k], dtype=torch.int32)
        ref = reference.varlen_reference(q[b], k[b], v[b], cu_q, cu_seqlens_k=cu_k, k_descale=ks[b:b + 1],
                                         softmax_scale=d ** -0.5, causal=causal, out_dtype=torch.float16)
        reference.check_output(out[b], ref, f"dense batch {b}")
        reference.check_reference_lse(lse[b], ref, f"dense lse batch {b}")


@pytest.mark.parametrize("paged", [False, True])
def test_flash_attn_with_kvcache(paged: bool) -> None:
    contexts, seqlen_q, hq, hkv, d = [50, 700, 4], 4, 16, 2, 128
    batch = len(contexts)
    q = fp8_randn(batch, seqlen_q, hq, d)
    if paged:
        cache = make_paged_cache(contexts, hkv, d, table_width=64)
        k_cache, v_cache, table, used = cache.k, cache.v, cache.block_table, cache.seqused_k
    else:
        k_cache, v_cache = fp8_randn(batch, 800, hkv, d), fp8_randn(batch, 800, hkv, d)
        table, used = None, torch.tensor(contexts, dtype=torch.int32, device=CUDA)
    out = run(lambda: fp8attn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=used, block_table=table,
                                                      causal=True))
    torch.cuda.synchronize()
    for b, ctx in enumerate(contexts):
        keys = reference.gather_keys(k_cache, table[b], ctx) if paged else k_cache[b, :ctx]
        values = reference.gather_keys(v_cache, table[b], ctx) if paged else v_cache[b, :ctx]
        ones = torch.ones(hkv, dtype=torch.float64, device=CUDA)
        ref = reference.attention_one(q[b], keys, values, q_descale=ones, k_descale=ones, v_descale=ones,
                                      softmax_scale=d ** -0.5, causal=True, window=(-1, -1), sink=None,
                                      out_dtype=torch.bfloat16)
        reference.check_output(out[b], ref, f"kvcache batch {b}")


def test_cuda_graph_replays_with_new_lengths_and_tables() -> None:
    """Capture once with max_seqlen_k = 32768, then replay with other seqused_k / block tables / queries."""
    batch, hq, hkv, d, max_seqlen_k, pool_pages = 8, 32, 8, 128, 32768, 8 * 200
    width = max_seqlen_k // PAGE
    cache = torch.empty(2, pool_pages + 16, PAGE, hkv, d, dtype=E4M3, device=CUDA)
    cache.view(torch.uint8).fill_(NAN_E4M3_BYTE)
    cache.view(torch.uint8)[:, :pool_pages] = fp8_randn(2, pool_pages, PAGE, hkv, d).view(torch.uint8)  # rest NaN
    k, v = cache.unbind(0)
    nan_page = pool_pages
    q = torch.empty(batch, hq, d, dtype=E4M3, device=CUDA)
    cu_q = cu_seqlens([1] * batch)
    used = torch.empty(batch, dtype=torch.int32, device=CUDA)
    table = torch.full((batch, width), nan_page, dtype=torch.int32, device=CUDA)
    qs, ks, vs = descales("expand00", batch, hkv), descales("expand01", batch, hkv), descales("expand00", batch, hkv)
    sink = torch.randn(hq, device=CUDA)
    out = torch.empty(batch, hq, d, dtype=torch.bfloat16, device=CUDA)

    def step() -> None:
        fp8attn.flash_attn_varlen_func(q, k, v, 1, cu_q, max_seqlen_k, seqused_k=used, block_table=table,
                                       causal=True, out=out, q_descale=qs, k_descale=ks, v_descale=vs, s_aux=sink)

    def refill(contexts: list[int]) -> None:
        q.copy_(fp8_randn(batch, hq, d))
        used.copy_(torch.tensor(contexts, dtype=torch.int32))
        table.fill_(nan_page)
        pages = torch.randperm(pool_pages, device=CUDA).to(torch.int32)
        start = 0
        for b, ctx in enumerate(contexts):
            n = math.ceil(ctx / PAGE)
            table[b, :n] = pages[start:start + n]
            start += n

    refill([100] * batch)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run(step)  # warm-up outside capture (library load, lazy CUDA init)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    lengths = [[1] * batch, [3000, 1, 17, 239, 1025, 2048, 16, 15],
               [int(x) for x in torch.randint(1, 3200, (batch,))], [3199] * batch]
    for replay, contexts in enumerate(lengths):
        refill(contexts)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = reference.varlen_reference(q, k, v, cu_q, seqused_k=used, block_table=table, q_descale=qs,
                                         k_descale=ks, v_descale=vs, softmax_scale=d ** -0.5, causal=True,
                                         sink=sink)
        reference.check_output(out, ref, f"graph replay {replay} contexts={contexts}")


def test_torch_compile_fullgraph_matches_eager() -> None:
    contexts, hq, hkv, d = [33, 1000, 7, 400], 32, 8, 128
    batch = len(contexts)
    cache = make_paged_cache(contexts, hkv, d, table_width=4096 // PAGE)  # covers max_seqlen_k below
    q = fp8_randn(batch * 2, hq, d)
    cu_q = cu_seqlens([2] * batch)
    qs, ks, vs = (descales("expand00", batch, hkv) for _ in range(3))
    sink = torch.randn(hq, device=CUDA)

    def attention(q: Any, out: Any) -> Any:
        result, lse = fp8attn.flash_attn_varlen_func(
            q, cache.k, cache.v, 2, cu_q, 4096, seqused_k=cache.seqused_k, block_table=cache.block_table,
            causal=True, window_size=(511, 0), out=out, q_descale=qs, k_descale=ks, v_descale=vs, s_aux=sink,
            return_softmax_lse=True)
        return result * 2, lse  # some work around the op for Inductor to fuse

    eager_out = torch.empty(batch * 2, hq, d, dtype=torch.bfloat16, device=CUDA)
    eager, eager_lse = run(lambda: attention(q, eager_out))
    compiled_out = torch.full_like(eager_out, float("nan"))
    compiled, compiled_lse = torch.compile(attention, fullgraph=True)(q, compiled_out)
    torch.cuda.synchronize()
    assert torch.equal(compiled, eager) and torch.equal(compiled_lse, eager_lse)
    assert torch.equal(compiled_out, eager_out), "the compiled call did not write the caller's out"


# ---------------------------------------------------------------------------------------------------------------
# vLLM 0.34's call on vLLM 0.34's cache (shared/notes/vllm-0.34-call.md (a), the "k, v" row): one cache tensor
# [num_blocks, Hkv, page, 2d] whose rows hold K in their first d bytes and V in their last d bytes, viewed
# .transpose(1, 2) -> [num_blocks, page, Hkv, 2d] and .split(d, dim=-1): K and V are strided views of the same
# bytes with V = K + d, rows 2d apart, heads page * 2d apart. Also the NHD order ([num_blocks, page, Hkv, 2d],
# heads 2d apart) and a layer-interleaved buffer [num_blocks, layers, page...] whose per-layer view has a page
# stride of layers pages. One varlen call serves decode, spec-decode and mixed prefill + decode batches; the
# descales are vLLM's expand()ed layer scales; num_splits is 0 or vLLM's full-CUDA-graph value 32.
#
# Everything in the cache but the rows a sequence uses is NaN: unused pages, the other layers, and the rows past
# seqused_k inside each sequence's last page (both halves). The block table is shuffled, its unused entries
# point at NaN pages, and out is a NaN-filled slice of a longer buffer.
# ---------------------------------------------------------------------------------------------------------------

VLLM034_LAYOUTS = ("hnd", "nhd", "hnd_layers", "nhd_layers")
VLLM034_NUM_LAYERS = 3          # layer-interleaved buffers; the call uses the middle layer
VLLM034_GQA = [(8, 8), (32, 8), (32, 4)]  # (Hq, Hkv): groups 1, 4 and 8
VLLM034_HEAD_DIMS = [128, 256]
VLLM_GRAPH_SPLITS = 32          # flash_attn_max_num_splits_for_cuda_graph (config/attention.py:66)
VLLM_MAX_CAPTURE_TOKENS = 512   # vLLM passes num_splits=32 only for batches of at most this many tokens
VLLM_GRAPH_MAX_SEQLEN_K = 8192  # a capture-time max_seqlen_k bound, far above the real lengths


@dataclass
class Vllm034Cache:
    k: "torch.Tensor"             # [num_blocks, PAGE, Hkv, d] E4M3 view: the first halves of the cache rows
    v: "torch.Tensor"             # the second halves: v.data_ptr() == k.data_ptr() + d, same strides
    block_table: "torch.Tensor"   # [B, width] int32: the first B rows of a larger (persistent) table
    seqused_k: "torch.Tensor"     # [B] int32
    buffer: "torch.Tensor"        # the whole allocation as bytes (every layer)


def make_vllm034_cache(contexts: list[int], hkv: int, d: int, *, layout: str, table_width: int,
                       spare_pages: int = 6) -> Vllm034Cache:
    """vLLM 0.34's FP8 KV cache in ``layout`` (VLLM034_LAYOUTS), filled with NaN except the first contexts[b]
    rows of each sequence's pages, which are random E4M3 K (first half) and V (second half)."""
    assert layout in VLLM034_LAYOUTS and spare_pages >= 1
    pages_per_seq = [math.ceil(c / PAGE) for c in contexts]
    used_pages = sum(pages_per_seq)
    num_blocks = used_pages + spare_pages
    layers = VLLM034_NUM_LAYERS if layout.endswith("_layers") else 1
    hnd = layout.startswith("hnd")
    page_shape = (hkv, PAGE, 2 * d) if hnd else (PAGE, hkv, 2 * d)
    # Bytes, as vLLM allocates the cache; viewed as E4M3 at the end (flash_attn.py:1310-1313).
    buffer = torch.full((num_blocks, layers, *page_shape), NAN_E4M3_BYTE, dtype=torch.uint8, device=CUDA)
    kv_cache = buffer[:, layers // 2]                      # this layer: [num_blocks, *page_shape]
    rows = kv_cache.transpose(1, 2) if hnd else kv_cache   # [num_blocks, PAGE, Hkv, 2d]
    k_bytes, v_bytes = rows.split(d, dim=-1)
    # The layout this test is about, checked before use: a wrong view would pass as another layout.
    page_stride = layers * hkv * PAGE * 2 * d
    row_stride, head_stride = (2 * d, PAGE * 2 * d) if hnd else (hkv * 2 * d, 2 * d)
    assert k_bytes.stride() == v_bytes.stride() == (page_stride, row_stride, head_stride, 1), k_bytes.stride()
    assert v_bytes.data_ptr() == k_bytes.data_ptr() + d

    order = torch.randperm(num_blocks, device=CUDA)
    data_pages, nan_pages = order[:used_pages], order[used_pages:]
    table_rows = len(contexts) + 3
    table = nan_pages[torch.randint(len(nan_pages), (table_rows, table_width), device=CUDA)].to(torch.int32)
    page_index, row_index = [], []
    start = 0
    for b, (ctx, n) in enumerate(zip(contexts, pages_per_seq)):
        pages = data_pages[start:start + n]
        start += n
        table[b, :n] = pages.to(torch.int32)
        position = torch.arange(ctx, device=CUDA)
        page_index.append(pages[position // PAGE])
        row_index.append(position % PAGE)
    total = sum(contexts)
    if total:
        pages_of_rows, rows_in_page = torch.cat(page_index), torch.cat(row_index)
        # index_put_ on the strided views writes into `buffer`: only these rows' halves change.
        k_bytes[pages_of_rows, rows_in_page] = fp8_randn(total, hkv, d).view(torch.uint8)
        v_bytes[pages_of_rows, rows_in_page] = fp8_randn(total, hkv, d).view(torch.uint8)
    # No finite E4M3 value is the NaN byte: exactly the written rows' K and V bytes differ from it.
    written = int((buffer != NAN_E4M3_BYTE).sum())
    assert written == 2 * total * hkv * d, f"cache construction wrote {written} bytes, expected {2 * total * hkv * d}"
    seqused = torch.tensor(contexts, dtype=torch.int32, device=CUDA)
    return Vllm034Cache(k=k_bytes.view(E4M3), v=v_bytes.view(E4M3), block_table=table[:len(contexts)],
                        seqused_k=seqused, buffer=buffer)


def vllm_scale(form: str, batch: int, hkv: int) -> "torch.Tensor":
    """A descale as vLLM 0.34 passes it: the layer's scale .expand((B, Hkv)) (flash_attn.py:1197-1214, 1322-1329).
    '0d': a 0-d per-tensor scale, strides (0, 0); 'per_head': an [Hkv] per-kv-head scale, strides (0, 1)."""
    if form == "0d":
        scale, strides = torch.rand((), device=CUDA) + 0.5, (0, 0)
    elif form == "per_head":
        scale, strides = torch.rand(hkv, device=CUDA) + 0.5, (0, 1)
    else:
        raise ValueError(form)
    expanded = scale.expand(batch, hkv)
    assert expanded.stride() == strides
    return expanded


@dataclass
class Vllm034Batch:
    q: "torch.Tensor"             # [N, Hq, d] E4M3: the first N rows of a longer NaN query buffer (query[:N])
    cache: Vllm034Cache
    cu_seqlens_q: "torch.Tensor"
    max_seqlen_q: int
    max_seqlen_k: int
    descales: tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]
    requests: list[tuple[int, int]]  # (query tokens, context incl. them) per request, in batch order


def make_vllm034_batch(requests: list[tuple[int, int]], *, d: int, hq: int, hkv: int, layout: str,
                       descale_forms: tuple[str, str, str] = ("0d", "per_head", "0d"),
                       max_seqlen_k: Optional[int] = None) -> Vllm034Batch:
    """One step's batch: requests (q_len, context) in vLLM's order (decode rows first, then prefill chunks)."""
    q_lens = [q for q, _ in requests]
    contexts = [c for _, c in requests]
    max_seqlen_k = max_seqlen_k or max(contexts)
    assert max_seqlen_k >= max(contexts)
    cache = make_vllm034_cache(contexts, hkv, d, layout=layout, table_width=math.ceil(max_seqlen_k / PAGE))
    total_q = sum(q_lens)
    q_buffer = torch.full((total_q + 8, hq, d), NAN_E4M3_BYTE, dtype=torch.uint8, device=CUDA)
    q_buffer[:total_q] = fp8_randn(total_q, hq, d).view(torch.uint8)
    batch = len(requests)
    descales = tuple(vllm_scale(form, batch, hkv) for form in descale_forms)
    return Vllm034Batch(q=q_buffer.view(E4M3)[:total_q], cache=cache, cu_seqlens_q=cu_seqlens(q_lens),
                        max_seqlen_q=max(q_lens), max_seqlen_k=max_seqlen_k, descales=descales, requests=requests)


def call_vllm034(batch: Vllm034Batch, *, window_left: int, num_splits: int, sink: Optional["torch.Tensor"] = None,
                 return_lse: bool = False, out_dtype: "torch.dtype" = torch.bfloat16
                 ) -> tuple["torch.Tensor", Optional["torch.Tensor"]]:
    """FlashAttentionImpl.forward's main call (flash_attn.py:1437-1462) with vLLM 0.34's keywords, into a
    NaN-poisoned out that is a slice of a longer NaN buffer; returns (out, lse or None)."""
    total_q, hq, d = batch.q.shape
    buf, out = nan_like_out((total_q, hq, d), out_dtype, extra_rows=7)
    qs, ks, vs = batch.descales
    window = [window_left, 0] if window_left >= 0 else [-1, -1]
    result = run(lambda: fp8attn.flash_attn_varlen_func(
        q=batch.q, k=batch.cache.k, v=batch.cache.v, out=out, cu_seqlens_q=batch.cu_seqlens_q,
        max_seqlen_q=batch.max_seqlen_q, seqused_k=batch.cache.seqused_k, max_seqlen_k=batch.max_seqlen_k,
        softmax_scale=d ** -0.5, causal=True, window_size=window, block_table=batch.cache.block_table,
        softcap=0, return_softmax_lse=return_lse, scheduler_metadata=None, q_descale=qs, k_descale=ks,
        v_descale=vs, num_splits=num_splits, fa_version=3, s_aux=sink, mask_mod=None, aux_tensors=None,
        dynamic_causal=None))
    torch.cuda.synchronize()
    got, lse = result if return_lse else (result, None)
    assert got is out
    assert torch.isnan(buf[total_q:].float()).all(), "rows past out's end were written"
    return out, lse


def check_vllm034(batch: Vllm034Batch, out: "torch.Tensor", lse: Optional["torch.Tensor"], *, window_left: int,
                  sink: Optional["torch.Tensor"], what: str) -> None:
    """The fp64 reference on the same views (reference.gather_keys reads K and V through them) and its bar."""
    qs, ks, vs = batch.descales
    d = batch.q.shape[-1]
    ref = reference.varlen_reference(batch.q, batch.cache.k, batch.cache.v, batch.cu_seqlens_q,
                                     seqused_k=batch.cache.seqused_k, block_table=batch.cache.block_table,
                                     q_descale=qs, k_descale=ks, v_descale=vs, softmax_scale=d ** -0.5, causal=True,
                                     window=(window_left, 0) if window_left >= 0 else (-1, -1), sink=sink,
                                     out_dtype=out.dtype)
    what = f"{what} requests(q,ctx)={batch.requests}"
    reference.check_output(out, ref, what)
    if lse is not None:
        reference.check_reference_lse(lse, ref, f"{what} lse")


def vllm_decode_requests(q_tokens: int, count: int = 24) -> list[tuple[int, int]]:
    """Decode (q_tokens = 1) or spec-decode requests: page-border contexts and random ones up to 3000."""
    edges = [q_tokens, PAGE, PAGE + 1, 2 * PAGE - 1, 64 * PAGE, 3001]
    contexts = edges + [random.randint(q_tokens, 3000) for _ in range(count - len(edges))]
    random.shuffle(contexts)
    return [(q_tokens, ctx) for ctx in contexts]


def vllm_mixed_requests(num_splits: int, decode_q: int = 1) -> list[tuple[int, int]]:
    """One chunked-prefill step: 5-40 decoding requests first, then one prefill chunk of 200-1100 tokens after
    0-2000 tokens of earlier context (vLLM's order). With num_splits = 32 the step has at most 512 tokens, as
    vLLM passes 32 only to steps that fit its CUDA-graph capture sizes."""
    decodes = [(decode_q, random.randint(decode_q, 3000)) for _ in range(random.randint(5, 40))]
    decodes[0] = (decode_q, max(decode_q, 1))    # a request at its first decoded token
    decodes[-1] = (decode_q, PAGE + 1)            # one key into its second page
    decode_tokens = decode_q * len(decodes)
    longest_chunk = 1100 if num_splits == 0 else VLLM_MAX_CAPTURE_TOKENS - decode_tokens
    chunk = random.randint(200, longest_chunk)
    return decodes + [(chunk, random.randint(0, 2000) + chunk)]


@pytest.mark.parametrize("num_splits", [0, VLLM_GRAPH_SPLITS])
@pytest.mark.parametrize("q_tokens", [1, 4])
@pytest.mark.parametrize("hq,hkv", VLLM034_GQA)
@pytest.mark.parametrize("d", VLLM034_HEAD_DIMS)
def test_vllm034_cache_decode(d: int, hq: int, hkv: int, q_tokens: int, num_splits: int) -> None:
    """Decode (1 query per request) and spec-decode (4) steps on the [nb, Hkv, page, 2d] cache."""
    batch = make_vllm034_batch(vllm_decode_requests(q_tokens), d=d, hq=hq, hkv=hkv, layout="hnd",
                               descale_forms=("0d", "per_head", "0d"))
    out, _ = call_vllm034(batch, window_left=-1, num_splits=num_splits)
    check_vllm034(batch, out, None, window_left=-1, sink=None,
                  what=f"vLLM 0.34 decode d={d} hq={hq} hkv={hkv} q_tokens={q_tokens} num_splits={num_splits}")


@pytest.mark.parametrize("window_left", [-1, 255])
@pytest.mark.parametrize("num_splits", [0, VLLM_GRAPH_SPLITS])
@pytest.mark.parametrize("hq,hkv", VLLM034_GQA)
@pytest.mark.parametrize("d", VLLM034_HEAD_DIMS)
def test_vllm034_cache_mixed_batch(d: int, hq: int, hkv: int, num_splits: int, window_left: int) -> None:
    """A chunked-prefill step in ONE varlen call: decoding requests, then a 200-1100-token prefill chunk;
    causal, and with a sliding window (w - 1, 0) for w = 256."""
    requests = vllm_mixed_requests(num_splits)
    batch = make_vllm034_batch(requests, d=d, hq=hq, hkv=hkv, layout="hnd",
                               descale_forms=("per_head", "0d", "per_head"))
    out, _ = call_vllm034(batch, window_left=window_left, num_splits=num_splits)
    check_vllm034(batch, out, None, window_left=window_left, sink=None,
                  what=f"vLLM 0.34 mixed d={d} hq={hq} hkv={hkv} num_splits={num_splits} window_left={window_left}")


@pytest.mark.parametrize("num_splits", [0, VLLM_GRAPH_SPLITS])
@pytest.mark.parametrize("kind", ["decode", "spec_decode", "mixed"])
@pytest.mark.parametrize("layout", ["nhd", "hnd_layers", "nhd_layers"])
@pytest.mark.parametrize("d", VLLM034_HEAD_DIMS)
def test_vllm034_cache_layouts(d: int, layout: str, kind: str, num_splits: int) -> None:
    """The other layouts: NHD rows, and a layer-interleaved buffer (page stride = 3 pages), in HND and NHD
    order. With num_splits = 32, max_seqlen_k is a capture-time bound (8192) far above the real lengths; the
    LSE is checked too."""
    hq, hkv = 32, 8
    if kind == "mixed":
        requests = vllm_mixed_requests(num_splits, decode_q=random.choice([1, 2]))
    else:
        requests = vllm_decode_requests(1 if kind == "decode" else 4, count=16)
    forms = {"decode": ("0d", "per_head", "0d"), "spec_decode": ("per_head", "per_head", "per_head"),
             "mixed": ("0d", "0d", "per_head")}[kind]
    # The spec-decode step of a model with sinks: bf16 sinks in the model dtype, as vLLM passes them.
    sink = torch.randn(hq, device=CUDA).to(torch.bfloat16) if kind == "spec_decode" else None
    window_left = 1023 if kind == "mixed" else -1
    batch = make_vllm034_batch(requests, d=d, hq=hq, hkv=hkv, layout=layout, descale_forms=forms,
                               max_seqlen_k=VLLM_GRAPH_MAX_SEQLEN_K if num_splits else None)
    out, lse = call_vllm034(batch, window_left=window_left, num_splits=num_splits, sink=sink, return_lse=True)
    check_vllm034(batch, out, lse, window_left=window_left, sink=sink,
                  what=f"vLLM 0.34 layout={layout} {kind} d={d} num_splits={num_splits}")


@pytest.mark.parametrize("num_splits", [0, VLLM_GRAPH_SPLITS])
@pytest.mark.parametrize("pattern", ["padded_tail", "alternate", "all"])
@pytest.mark.parametrize("sink_dtype", [torch.float32, torch.bfloat16])
def test_vllm_sink_padded_with_neg_inf(sink_dtype: Any, pattern: str, num_splits: int) -> None:
    """vLLM pads s_aux with -inf for heads that have no sink (weight_utils.py:1643-1651). A head whose sink is
    -inf must give exactly the no-sink result (out and LSE, bit for bit against a call without s_aux); the
    other heads must match the reference with their sink. The batch mixes decode, spec-decode and a prefill
    chunk, and has rows with no visible key (a request with 0 keys, and one with 2 keys for 4 queries): there
    a -inf sink gives out 0 and LSE -inf, a finite sink out 0 and LSE = sink."""
    d, hq, hkv = 128, 32, 8
    requests = [(1, 700), (4, 2), (1, 0), (4, 33), (1, 1), (1, 2049), (4, 1500), (300, 450)]
    batch = make_vllm034_batch(requests, d=d, hq=hq, hkv=hkv, layout="hnd")
    sink = torch.randn(hq, device=CUDA) * 2
    neg = torch.zeros(hq, dtype=torch.bool, device=CUDA)
    if pattern == "padded_tail":
        neg[hq - hq // 4:] = True    # e.g. 24 heads with sinks padded to 32
    elif pattern == "alternate":
        neg[::2] = True
    else:
        neg[:] = True
    sink = sink.masked_fill(neg, float("-inf")).to(sink_dtype)
    assert torch.isneginf(sink.float()).sum() == neg.sum()
    what = f"s_aux {sink_dtype} -inf {pattern} num_splits={num_splits}"

    out, lse = call_vllm034(batch, window_left=-1, num_splits=num_splits, sink=sink, return_lse=True)
    check_vllm034(batch, out, lse, window_left=-1, sink=sink, what=what)
    plain_out, plain_lse = call_vllm034(batch, window_left=-1, num_splits=num_splits, sink=None, return_lse=True)
    check_vllm034(batch, plain_out, plain_lse, window_left=-1, sink=None, what=f"{what} (no s_aux)")
    heads = neg.nonzero().flatten()
    assert torch.equal(out[:, heads], plain_out[:, heads]), f"{what}: a -inf sink head differs from no sink (out)"
    assert torch.equal(lse[heads], plain_lse[heads]), f"{what}: a -inf sink head differs from no sink (lse)"


# ---- 16-bit q over an E4M3 KV cache (issue 35): the kernel quantizes each (token, head) row of q itself ----

SIXTEEN_BIT = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("q_tokens", [1, 4])
@pytest.mark.parametrize("q_dtype", SIXTEEN_BIT)
def test_16bit_q_paged_decode(q_dtype: Any, q_tokens: int) -> None:
    # GQA 32:8 (PackGQA), vLLM's k/v descales and a sink; a 16-bit q takes no q_descale, and its out is its dtype.
    vllm_decode(d=128, hq=32, hkv=8, q_tokens=q_tokens, contexts=CONTEXTS, window_left=127, q_descale="none",
                out_dtype=q_dtype, q_dtype=q_dtype)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_dtype", SIXTEEN_BIT)
def test_16bit_q_varlen_prefill(q_dtype: Any, causal: bool) -> None:
    hq, hkv, d = 8, 2, 128
    lens_q = [lq for lq, _ in PREFILL_LENGTHS]
    lens_k = [lk for _, lk in PREFILL_LENGTHS]
    q = torch.randn(sum(lens_q), hq, d, device=CUDA).to(q_dtype)
    q[1, 3] = 0  # a row of zeros: its scale is 1, its output the mean of the V rows it sees
    k, v = fp8_randn(sum(lens_k), hkv, d), fp8_randn(sum(lens_k), hkv, d)
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    ks, vs = descales("dense", len(lens_q), hkv), descales("expand01", len(lens_q), hkv)
    out, lse = run(lambda: fp8attn.flash_attn_varlen_func(
        q, k, v, max(lens_q), cu_q, max(lens_k), cu_seqlens_k=cu_k, causal=causal, k_descale=ks, v_descale=vs,
        return_softmax_lse=True))
    torch.cuda.synchronize()
    assert out.dtype == q_dtype and out.shape == (sum(lens_q), hq, d)
    ref = reference.varlen_reference(q, k, v, cu_q, cu_seqlens_k=cu_k, k_descale=ks, v_descale=vs,
                                     softmax_scale=d ** -0.5, causal=causal, out_dtype=q_dtype)
    reference.check_output(out, ref, f"16-bit q varlen prefill {q_dtype} causal={causal}")
    reference.check_reference_lse(lse, ref, "16-bit q varlen prefill lse")


# ---- head dim 512 (issue 35): Gemma-4's global layers, the K = V cache passed as both k and v ----


@pytest.mark.parametrize("q_tokens", [1, 4])
@pytest.mark.parametrize("q_dtype", [torch.bfloat16, E4M3])
def test_d512_paged_decode_k_is_v(q_dtype: Any, q_tokens: int) -> None:
    # A global layer per GPU at TP4: 8 q heads on 1 kv head, 64-token pages in a shuffled cache, one E4M3 tensor as
    # k and v (the kernel then reads each tile once), num_splits=32 as vLLM passes it under full CUDA graphs.
    hq, hkv, d, page = 8, 1, 512, 64
    contexts = [max(c, q_tokens) for c in (1, 70, 1025, 3001)]
    batch = len(contexts)
    pages = [math.ceil(c / page) for c in contexts]
    cache = fp8_randn(sum(pages) + 3, page, hkv, d)
    order = torch.randperm(cache.shape[0], device=CUDA).to(torch.int32)
    table = torch.zeros(batch, max(pages) + 2, dtype=torch.int32, device=CUDA)
    starts = itertools.accumulate([0] + pages)
    for b, (start, n) in enumerate(zip(starts, pages)):
        table[b, :n] = order[start:start + n]
    seqused = torch.tensor(contexts, dtype=torch.int32, device=CUDA)
    total_q = batch * q_tokens
    q = fp8_randn(total_q, hq, d) if q_dtype == E4M3 else torch.randn(total_q, hq, d, device=CUDA).to(q_dtype)
    cu_q = cu_seqlens([q_tokens] * batch)
    out, lse = run(lambda: fp8attn.flash_attn_varlen_func(
        q=q, k=cache, v=cache, max_seqlen_q=q_tokens, cu_seqlens_q=cu_q, max_seqlen_k=page * table.shape[1],
        seqused_k=seqused, softmax_scale=d ** -0.5, causal=True, block_table=table, return_softmax_lse=True,
        num_splits=32))
    torch.cuda.synchronize()
    assert out.dtype == torch.bfloat16 and out.shape == (total_q, hq, d)
    ref = reference.varlen_reference(q, cache, cache, cu_q, seqused_k=seqused, block_table=table,
                                     softmax_scale=d ** -0.5, causal=True, out_dtype=torch.bfloat16)
    reference.check_output(out, ref, f"d512 K = V paged decode, q {q_dtype}, {q_tokens} tokens")
    reference.check_reference_lse(lse, ref, "d512 K = V paged decode lse")


def test_16bit_q_named_errors() -> None:
    q = torch.randn(2, 64, 8, 128, device=CUDA).to(torch.bfloat16)
    k, v = fp8_randn(2, 100, 2, 128), fp8_randn(2, 100, 2, 128)
    with pytest.raises(ValueError, match="q_descale: expected NULL with a bfloat16 q"):
        fp8attn.flash_attn_func(q, k, v, q_descale=torch.ones((), device=CUDA))
    with pytest.raises(NotImplementedError, match="k: expected dtype float8_e4m3fn, got bfloat16"):
        fp8attn.flash_attn_func(q, k.to(torch.bfloat16), v)
    with pytest.raises(ValueError, match="out has dtype torch.float16 but q has dtype torch.bfloat16"):
        fp8attn.flash_attn_func(q, k, v, out=torch.empty(2, 64, 8, 128, dtype=torch.float16, device=CUDA))


# ---- FP8 output (output_scale) and softcap through the Python API (the C++ suite holds their error bars) ----

def e4m3_ulp(x: "torch.Tensor") -> "torch.Tensor":
    """One E4M3 ulp at |x| (3 mantissa bits; 2^-9 below the smallest normal 2^-6)."""
    return torch.exp2(torch.floor(torch.log2(x.abs().float().clamp(min=2.0 ** -6))) - 3)


def assert_quantized_alike(fused: "torch.Tensor", bf16: "torch.Tensor", scale: "torch.Tensor", what: str) -> None:
    """The fused E4M3 out is the bf16 out of the same call quantized with the same scale, up to one E4M3 ulp
    (the bf16 rounding in between may move a value across an E4M3 rounding boundary)."""
    assert fused.dtype == E4M3, what
    expected = (bf16.float() / scale).clamp(-448, 448).to(E4M3).float()
    got = fused.float()
    assert torch.isfinite(got).all(), what
    assert ((got - expected).abs() <= e4m3_ulp(expected)).all(), f"{what}: max diff {(got - expected).abs().max()}"


@pytest.mark.parametrize("num_splits", [0, 1, 7])
def test_fp8_output_paged_decode_every_entry_point(num_splits: int) -> None:
    contexts, hq, hkv, d = [900, 3000, 17], 16, 2, 128
    cache = make_paged_cache(contexts, hkv, d, table_width=256)
    batch = len(contexts)
    q = fp8_randn(batch, hq, d)
    cu_q = cu_seqlens([1] * batch)
    kwargs = dict(q=q, k=cache.k, v=cache.v, cu_seqlens_q=cu_q, max_seqlen_q=1, seqused_k=cache.seqused_k,
                  max_seqlen_k=4096, block_table=cache.block_table, causal=True, num_splits=num_splits)
    bf16 = run(lambda: fp8attn.flash_attn_varlen_func(**kwargs))
    scale = bf16.float().abs().max() / 448
    poisoned = torch.full((batch, hq, d), float("nan"), dtype=E4M3, device=CUDA)
    fused = run(lambda: fp8attn.flash_attn_varlen_func(**kwargs, out=poisoned, output_scale=scale))
    assert_quantized_alike(fused, bf16, scale, f"varlen, num_splits={num_splits}")
    by_dtype = run(lambda: fp8attn.flash_attn_with_kvcache(q.unsqueeze(1), cache.k, cache.v,
                                                           cache_seqlens=cache.seqused_k, block_table=cache.block_table,
                                                           causal=True, num_splits=num_splits, out_dtype=E4M3,
                                                           output_scale=scale))
    assert_quantized_alike(by_dtype.squeeze(1), bf16, scale, f"kvcache, num_splits={num_splits}")


def test_fp8_output_dense_prefill_and_named_errors() -> None:
    q, k, v = fp8_randn(2, 300, 8, 256), fp8_randn(2, 500, 8, 256), fp8_randn(2, 500, 8, 256)
    bf16 = run(lambda: fp8attn.flash_attn_func(q, k, v, causal=True))
    scale = bf16.float().abs().max() / 448
    fused = run(lambda: fp8attn.flash_attn_func(q, k, v, causal=True, out_dtype=E4M3, output_scale=scale))
    assert_quantized_alike(fused, bf16, scale, "dense d256 (staged epilogue)")
    with pytest.raises(ValueError, match="output_scale"):
        fp8attn.flash_attn_func(q, k, v, out_dtype=E4M3)
    with pytest.raises(ValueError, match="output_scale"):
        fp8attn.flash_attn_func(q, k, v, output_scale=scale)
    # A 16-bit float scale is a dtype the library could take but does not: "not supported", as for every dtype.
    with pytest.raises(NotImplementedError, match="output_scale: expected dtype float32, got bfloat16"):
        fp8attn.flash_attn_func(q, k, v, out_dtype=E4M3, output_scale=scale.to(torch.bfloat16))
    with pytest.raises(ValueError, match="output_scale"):
        fp8attn.flash_attn_func(q, k, v, out_dtype=E4M3, output_scale=torch.ones(2, 3, device=CUDA))


@pytest.mark.parametrize("softcap", [50.0, 2.0])
def test_softcap_against_fp64(softcap: float) -> None:
    batch, seqlen, hq, hkv, d = 2, 200, 8, 2, 128
    q = fp8_randn(batch, seqlen, hq, d, scale=6.0)  # logits ~ N(0, 6^2), up to ~20: tanh(l / 50) bends there
    k, v = fp8_randn(batch, seqlen, hkv, d), fp8_randn(batch, seqlen, hkv, d)
    out = run(lambda: fp8attn.flash_attn_func(q, k, v, causal=True, softcap=softcap))
    plain = run(lambda: fp8attn.flash_attn_func(q, k, v, causal=True))
    qd = q.double().transpose(1, 2)
    kd = k.double().transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    vd = v.double().transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    logits = softcap * torch.tanh(qd @ kd.transpose(-1, -2) * d ** -0.5 / softcap)
    mask = torch.ones(seqlen, seqlen, dtype=torch.bool, device=CUDA).tril()
    exact = (torch.softmax(logits.masked_fill(~mask, -math.inf), dim=-1) @ vd).transpose(1, 2)
    rel_rms = ((out.double() - exact).norm() / exact.norm()).item()
    plain_rel_rms = ((plain.double() - exact).norm() / exact.norm()).item()
    assert rel_rms < 0.02, f"softcap {softcap}: rel RMS {rel_rms:.4f} against fp64"
    assert plain_rel_rms > 3 * rel_rms, f"softcap {softcap} changed too little ({plain_rel_rms:.4f} without it)"
    with pytest.raises(ValueError, match="softcap"):
        fp8attn.flash_attn_func(q, k, v, softcap=-1.0)
