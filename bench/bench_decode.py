"""Decode latency of fp8attn on the design's ten vLLM decode steps (docs/targets.md, decode_shapes.json).

Each shape is replayed as its "about" says: FP8 q [requests * q_tokens, Hq, d]; paged KV with 16-token
pages in one cache tensor [2, num_blocks, 16, Hkv, d] unbound into k/v views, block tables shuffled;
seqused_k = context for every request; cu_seqlens_q with q_tokens per request; causal, window
(window_left, 0); max_seqlen_k = 32768 as under vLLM's CUDA-graph capture; num_splits = 0; descales
expand()ed to (B, Hkv) with strides (0, 0); bf16 out pre-allocated. ``--layers`` layers, each with its
own cache, are captured in ONE CUDA graph with an L2 flush of a 64 MB buffer before each layer (--flush-mb
changes it). Time per layer = (graph time - flush-only graph time) / layers, each the median over replays.
Each shape is timed under two flushes: zero_() of the buffer (`us`, the file's method) and a read of it
(`us_read_flush`). zero_() leaves the L2 full of dirty lines that the attention kernel then writes back while it
reads its K/V (~7 us on every shape larger than the L2, docs/timing.md); the read leaves clean lines, as the
weight reads between two attention layers of a decode step do. FA3 FP8 (when it imports) is timed under both.

HBM floor = bytes the step must move (K and V of the visible keys, q and out) / 4.27 TB/s.

    python bench/bench_decode.py [--layers 8] [--iters 50] [--shapes llama3.1-8b-tp1-1x1-4k ...]

Writes bench/results/decode.json and bench/results/decode.png; prints the table last.
The shapes file: $FP8ATTN_DECODE_SHAPES, else ../shared/bench/decode_shapes.json from the repo root,
else bench/decode_shapes.json.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

import bench_common as bc
import fp8attn
from shapes import shapes_path

E4M3 = torch.float8_e4m3fn
PAGE = 16
MAX_SEQLEN_K = 32768
FLUSH_MB = 64  # the L2 flush between layers, as the shapes file's "about" says


def flush_suffix(kind: str) -> str:
    """What a result key measured under a flush other than the first carries: 'us' + '_read_flush'."""
    return f"_{kind}_flush"
PEER_MODULES = {"fa3_fp8": "flash_attn_interface", "vllm_fa_fp8": "vllm.vllm_flash_attn"}


def named_shapes(names: list[str]) -> list[dict[str, Any]]:
    """The shapes file's entries with these names, in file order; an unknown name is an error (the diagnostics
    time exactly what they are asked for)."""
    shapes = [s for s in json.loads(shapes_path().read_text())["shapes"] if s["name"] in names]
    if len(shapes) != len(set(names)):
        raise SystemExit(f"unknown shape among {names}")
    return shapes


def visible_keys(shape: dict[str, Any]) -> int:
    """Keys a request's q_tokens rows see together: the union of their windows (or the whole context)."""
    if shape["window_left"] < 0:
        return shape["context"]
    return min(shape["context"], shape["window_left"] + shape["q_tokens"])


def bytes_needed(shape: dict[str, Any]) -> tuple[int, int]:
    """(KV bytes, total bytes) a step must move at least: FP8 K and V of the visible keys, FP8 q, bf16 out."""
    kv = 2 * shape["requests"] * visible_keys(shape) * shape["kv_heads"] * shape["d"]
    tokens = shape["requests"] * shape["q_tokens"] * shape["q_heads"] * shape["d"]
    return kv, kv + tokens * (1 + 2)


@dataclass
class Layer:
    """One layer's decode inputs, vLLM-shaped (paged), or the same keys stored contiguously (page_size 0)."""
    cache: torch.Tensor        # paged: [2, num_blocks, page_size, Hkv, d]; contiguous: [2, requests * context, Hkv, d]
    k: torch.Tensor            # views of cache.unbind(0)
    v: torch.Tensor
    block_table: torch.Tensor | None   # paged: [requests, MAX_SEQLEN_K / page_size] int32, shuffled pages
    cu_seqlens_k: torch.Tensor | None  # contiguous: [requests + 1] int32, context keys per request
    seqused_k: torch.Tensor | None     # paged: [requests] int32, context (the API takes one of the two)
    q: torch.Tensor            # [requests * q_tokens, Hq, d] E4M3
    out: torch.Tensor          # [requests * q_tokens, Hq, d] bf16
    descales: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (B, Hkv) views, strides (0, 0)


def make_layer(shape: dict[str, Any], device: torch.device, page_size: int = PAGE) -> Layer:
    """A layer's caches as the shapes file says (16-token pages), with other page sizes (multiples of 16), or
    with page_size 0 contiguous per request (varlen K/V through cu_seqlens_k, no block table)."""
    if page_size < 0 or page_size % 16 != 0 or MAX_SEQLEN_K % max(page_size, 1) != 0:
        raise ValueError(f"page_size must be 0 or a multiple of 16 that divides {MAX_SEQLEN_K}, got {page_size}")
    requests, hq, hkv, d, context = (shape[k] for k in ("requests", "q_heads", "kv_heads", "d", "context"))
    if page_size > 0:
        pages = math.ceil(context / page_size)
        num_blocks = requests * pages
        cache = torch.empty(2, num_blocks, page_size, hkv, d, dtype=E4M3, device=device)
        table = torch.zeros(requests, MAX_SEQLEN_K // page_size, dtype=torch.int32, device=device)
        table[:, :pages] = torch.randperm(num_blocks, device=device).to(torch.int32).view(requests, pages)
        cu_seqlens_k = None
        seqused_k = torch.full((requests,), context, dtype=torch.int32, device=device)
    else:
        cache = torch.empty(2, requests * context, hkv, d, dtype=E4M3, device=device)
        table = None
        cu_seqlens_k = torch.arange(0, requests * context + 1, context, dtype=torch.int32, device=device)
        seqused_k = None
    for half in cache.view(torch.uint8):  # half at a time to bound the fp32 temporary
        half.copy_(torch.randn(half.shape, device=device).to(E4M3).view(torch.uint8))
    tokens = requests * shape["q_tokens"]
    q = torch.randn(tokens, hq, d, device=device).to(E4M3)
    descales = tuple((torch.rand(1, device=device) + 0.5).expand(requests, hkv) for _ in range(3))
    k, v = cache.unbind(0)
    return Layer(cache=cache, k=k, v=v, block_table=table, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k, q=q,
                 out=torch.empty(tokens, hq, d, dtype=torch.bfloat16, device=device), descales=descales)


def window_arg(shape: dict[str, Any]) -> tuple[int, int]:
    # What vLLM passes: (sliding_window - 1, 0) for sliding layers, (-1, -1) otherwise.
    return (shape["window_left"], 0) if shape["window_left"] >= 0 else (-1, -1)


def layers_graph(calls: list[Callable[[], Any]], flush: bc.L2Flush) -> torch.cuda.CUDAGraph:
    """One CUDA graph of the steps as timed: an L2 flush, then the layer's call, for each layer."""
    def layers() -> None:
        for call in calls:
            flush()
            call()

    return bc.capture_graph(layers)


def per_layer_us(calls: list[Callable[[], Any]], flush: bc.L2Flush, args: argparse.Namespace) -> float:
    """(graph of flush + call per layer  -  graph of the flushes alone) / layers, in microseconds."""
    def flushes() -> None:
        for _ in calls:
            flush()

    graph, flush_graph = layers_graph(calls, flush), bc.capture_graph(flushes)
    total_ms = bc.time_graph(graph, iters=args.iters)
    flush_ms = bc.time_graph(flush_graph, iters=args.iters)
    return (total_ms - flush_ms) / len(calls) * 1e3


def ours(shape: dict[str, Any], layers: list[Layer], num_splits: int = 0) -> list[Callable[[], Any]]:
    requests, q_tokens = shape["requests"], shape["q_tokens"]
    device = layers[0].q.device
    cu_q = torch.arange(0, requests * q_tokens + 1, q_tokens, dtype=torch.int32, device=device)

    def call(layer: Layer) -> Callable[[], Any]:
        qs, ks, vs = layer.descales
        return lambda: fp8attn.flash_attn_varlen_func(
            q=layer.q, k=layer.k, v=layer.v, out=layer.out, cu_seqlens_q=cu_q, max_seqlen_q=q_tokens,
            seqused_k=layer.seqused_k, max_seqlen_k=MAX_SEQLEN_K, softmax_scale=shape["d"] ** -0.5, causal=True,
            window_size=window_arg(shape), block_table=layer.block_table, cu_seqlens_k=layer.cu_seqlens_k,
            softcap=0.0, q_descale=qs, k_descale=ks, v_descale=vs, num_splits=num_splits)

    return [call(layer) for layer in layers]


def fa3_fp8(shape: dict[str, Any], layers: list[Layer]) -> list[Callable[[], Any]]:
    """Upstream FA3 on the same paged FP8 caches, through its kvcache entry point (uniform q_tokens)."""
    import flash_attn_interface as fa3

    requests, q_tokens = shape["requests"], shape["q_tokens"]

    def call(layer: Layer) -> Callable[[], Any]:
        q = layer.q.view(requests, q_tokens, *layer.q.shape[1:])
        qs, ks, vs = (s.contiguous() for s in layer.descales)
        return lambda: fa3.flash_attn_with_kvcache(
            q, layer.k, layer.v, cache_seqlens=layer.seqused_k, page_table=layer.block_table, causal=True,
            window_size=window_arg(shape), softmax_scale=shape["d"] ** -0.5, q_descale=qs, k_descale=ks,
            v_descale=vs, num_splits=0)

    return [call(layer) for layer in layers]


def vllm_fa_fp8(shape: dict[str, Any], layers: list[Layer]) -> list[Callable[[], Any]]:
    """vLLM's own FlashAttention build, called exactly as fp8attn is (same keyword set)."""
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    requests, q_tokens = shape["requests"], shape["q_tokens"]
    device = layers[0].q.device
    cu_q = torch.arange(0, requests * q_tokens + 1, q_tokens, dtype=torch.int32, device=device)
    outs = [torch.empty_like(layer.out) for layer in layers]

    def call(layer: Layer, out: torch.Tensor) -> Callable[[], Any]:
        qs, ks, vs = layer.descales
        return lambda: flash_attn_varlen_func(
            q=layer.q, k=layer.k, v=layer.v, out=out, cu_seqlens_q=cu_q, max_seqlen_q=q_tokens,
            seqused_k=layer.seqused_k, max_seqlen_k=MAX_SEQLEN_K, softmax_scale=shape["d"] ** -0.5, causal=True,
            window_size=window_arg(shape), block_table=layer.block_table, softcap=0.0, q_descale=qs, k_descale=ks,
            v_descale=vs, num_splits=0, fa_version=3)

    return [call(layer, out) for layer, out in zip(layers, outs)]


def sdpa_bf16_dense(shape: dict[str, Any], num_layers: int, device: torch.device) -> list[Callable[[], Any]]:
    """torch SDPA on bf16 dense K/V holding only the visible keys (not paged: SDPA has no paged form),
    with the exact bottom-right causal/window mask when q_tokens > 1."""
    requests, q_tokens, hq, hkv, d = (shape[k] for k in ("requests", "q_tokens", "q_heads", "kv_heads", "d"))
    keys = visible_keys(shape)
    mask = None
    if q_tokens > 1:
        row = torch.arange(q_tokens, device=device).unsqueeze(1) + (keys - q_tokens)
        col = torch.arange(keys, device=device).unsqueeze(0)
        mask = col <= row
        if shape["window_left"] >= 0:
            mask &= col >= row - shape["window_left"]

    def call() -> Callable[[], Any]:
        q = torch.randn(requests, hq, q_tokens, d, dtype=torch.bfloat16, device=device)
        k, v = (torch.randn(requests, hkv, keys, d, dtype=torch.bfloat16, device=device) for _ in range(2))
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    return [call() for _ in range(num_layers)]


def bench_paged(shape: dict[str, Any], flushes: list[bc.L2Flush], args: argparse.Namespace,
                device: torch.device) -> dict[str, Any]:
    """fp8attn, then each importable paged-KV peer, on the same ``args.layers`` caches (freed on return), under
    each flush: the first gives ``us`` and ``<peer>_us_same_run``, the others add ``..._<kind>_flush`` keys."""
    layers = [make_layer(shape, device) for _ in range(args.layers)]
    calls = ours(shape, layers)
    calls[0]()
    torch.cuda.synchronize()
    if not torch.isfinite(layers[0].out.float()).all():
        raise RuntimeError(f"{shape['name']}: fp8attn produced non-finite output; not timing a broken kernel")
    times: dict[str, Any] = {}
    peers = {"fa3_fp8": fa3_fp8, "vllm_fa_fp8": vllm_fa_fp8}
    for i, flush in enumerate(flushes):
        suffix = "" if i == 0 else flush_suffix(flush.kind)
        times["us" + suffix] = per_layer_us(calls, flush, args)
        for name, build in peers.items():
            if name in args.peers:
                times[f"{name}_us_same_run{suffix}"] = bc.try_peer(
                    name, lambda build=build, flush=flush: per_layer_us(build(shape, layers), flush, args))
    return times


def bench_shape(shape: dict[str, Any], flushes: list[bc.L2Flush], args: argparse.Namespace,
                device: torch.device) -> dict[str, Any]:
    times = bench_paged(shape, flushes, args, device)
    flush = flushes[0]
    torch.cuda.empty_cache()
    us = times["us"]
    kv_bytes, total_bytes = bytes_needed(shape)
    floor_us = total_bytes / (args.hbm_tbps * 1e12) * 1e6
    row: dict[str, Any] = {
        "name": shape["name"], "us": us, "floor_us": floor_us, "pct_floor": 100 * floor_us / us,
        "GBps": total_bytes / (us * 1e-6) / 1e9, "kv_MB": kv_bytes / 1e6,
        "published_us": shape.get("published_us", {}), "measured_us": shape.get("measured_us", {}),
    }
    design = row["published_us"].get("design_fp8")
    row["speedup_vs_design"] = design / us if design else None
    row.update({k: v for k, v in times.items() if k != "us"})
    for other in flushes[1:]:
        suffix = flush_suffix(other.kind)
        row["pct_floor" + suffix] = 100 * floor_us / times["us" + suffix]
    if not args.ours_only:
        row["sdpa_bf16_dense_us"] = bc.try_peer(
            "sdpa_bf16_dense", lambda: per_layer_us(sdpa_bf16_dense(shape, args.layers, device), flush, args))
    torch.cuda.empty_cache()
    return row


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = bc.pyplot()
    if plt is None:
        return
    names = [r["name"] for r in rows]
    series = {"fp8attn": [r["us"] for r in rows],
              "design fp8 (published)": [r["published_us"].get("design_fp8") for r in rows],
              "FA3 fp8 (measured, json)": [r["measured_us"].get("fa3_fp8") for r in rows]}
    for key in ("fa3_fp8_us_same_run", "vllm_fa_fp8_us_same_run", "sdpa_bf16_dense_us"):
        if any(r.get(key) for r in rows):
            series[key.removesuffix("_same_run").removesuffix("_us") + " (this run)"] = [r.get(key) for r in rows]
    fig, (ax_us, ax_pct) = plt.subplots(1, 2, figsize=(16, 5))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        xs = [j + i * width for j, v in enumerate(values) if v]
        ax_us.bar(xs, [v for v in values if v], width, label=label)
        ax_pct.bar(xs, [100 * r["floor_us"] / v for r, v in zip(rows, values) if v], width, label=label)
    for ax, title in ((ax_us, "time per layer (us, lower is better)"), (ax_pct, "% of HBM floor (higher is better)")):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    ax_us.set_yscale("log")
    ax_pct.axhline(100, color="k", lw=0.8)
    ax_pct.legend(fontsize=7)
    bc.save_figure(fig, path)


def column_label(key: str) -> str:
    """A result key as a table header: 'fa3_fp8_us_same_run_read_flush' -> 'fa3 fp8 us, read flush'."""
    flush = ""
    for kind in bc.L2Flush.KINDS:
        if key.endswith(flush_suffix(kind)):
            key, flush = key.removesuffix(flush_suffix(kind)), f", {kind} flush"
    named = {"us": "us", "pct_floor": "% floor"}
    return named.get(key, key.removesuffix("_same_run").removesuffix("_us").replace("_", " ") + " us") + flush


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=8, help="layers (distinct caches) per captured graph")
    parser.add_argument("--iters", type=int, default=50, help="timed graph replays")
    parser.add_argument("--shapes", nargs="+", help="only these shape names")
    parser.add_argument("--flush-mb", type=int, default=FLUSH_MB, help="L2 flush buffer between layers, MiB")
    parser.add_argument("--flush-kinds", nargs="+", choices=bc.L2Flush.KINDS, default=["zero", "read"],
                        help="L2 flushes to time under, the first giving `us` (default: zero_, then a read of the "
                             "buffer, which leaves no dirty lines for the next kernel to write back: bench_common.L2Flush)")
    parser.add_argument("--ours-only", action="store_true", help="time fp8attn alone (no peers, no SDPA): A/B runs")
    parser.add_argument("--out-dir", type=Path, default=bc.RESULTS_DIR)
    args = parser.parse_args()

    spec = json.loads(shapes_path().read_text())
    shapes = [s for s in spec["shapes"] if not args.shapes or s["name"] in args.shapes]
    if not shapes:
        raise SystemExit(f"no shape matches {args.shapes}")
    args.hbm_tbps = spec["hbm_TBps_measured"]
    device = bc.require_device()
    args.peers = set() if args.ours_only else {name for name, module in PEER_MODULES.items() if bc.importable(module)}
    print("peers: none (--ours-only)" if args.ours_only else
          f"peers: torch SDPA bf16 (dense){''.join(', ' + p for p in sorted(args.peers))}")
    flushes = [bc.L2Flush(device, args.flush_mb << 20, kind=kind) for kind in args.flush_kinds]

    rows = []
    for shape in shapes:
        row = bench_shape(shape, flushes, args, device)
        print(f"{row['name']}: {row['us']:.2f} us, {row['pct_floor']:.1f}% of floor")
        rows.append(row)

    speedups = [r["speedup_vs_design"] for r in rows if r["speedup_vs_design"]]
    meta = bc.run_metadata()
    bc.write_json(args.out_dir / "decode.json", {
        "shapes": rows, "hbm_TBps": args.hbm_tbps,
        "geomean_speedup_vs_design": bc.geomean(speedups) if speedups else None,
        "layers": args.layers, "flush_bytes": flushes[0].nbytes,
        "flush_kinds": [f.kind for f in flushes], "max_seqlen_k": MAX_SEQLEN_K, "page_size": PAGE,
        "commit": meta["commit"], "gpu": meta["gpu"], "date": meta["date"], "meta": meta})
    plot(rows, args.out_dir / "decode.png")

    extra = [flush_suffix(f.kind) for f in flushes[1:]]
    peer_keys = [k for k in ("fa3_fp8_us_same_run", "vllm_fa_fp8_us_same_run", "sdpa_bf16_dense_us",
                             *(f"us{x}" for x in extra), *(f"pct_floor{x}" for x in extra),
                             *(f"fa3_fp8_us_same_run{x}" for x in extra)) if any(r.get(k) for r in rows)]
    headers = ["shape", "KV MB", "us", "floor us", "% floor", "GB/s", "design us", "x design", "fa3 fp8 us (json)",
               *(column_label(k) for k in peer_keys)]
    table = [[r["name"], r["kv_MB"], r["us"], r["floor_us"], r["pct_floor"], r["GBps"],
              r["published_us"].get("design_fp8"), r["speedup_vs_design"], r["measured_us"].get("fa3_fp8"),
              *(r.get(k) for k in peer_keys)] for r in rows]
    print(bc.format_table(headers, table))
    if speedups:
        print(f"geomean speedup vs design_fp8 (published): {bc.geomean(speedups):.3f}x over {len(speedups)} shapes")


if __name__ == "__main__":
    main()
