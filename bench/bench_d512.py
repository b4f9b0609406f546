"""Head dim 512 (issue 35): Gemma-4's global layers, decode against the HBM floor and prefill against torch SDPA.

Decode: Gemma-4-31B global-layer steps at TP4 (8 q heads on 1 kv head per GPU, d = dv = 512), 8-128 requests of
one query token at 4k-32k context, as vLLM issues them: bf16 q [requests, 8, 512] (the kernel quantizes it per
row), one E4M3 cache [num_blocks, 64, 1, 512] passed as both k and v (K = V: each KV tile is read once), 64-token
pages shuffled over the cache, seqused_k = context, max_seqlen_k 32768, causal, num_splits = 32 (vLLM's ceiling
under full CUDA graphs), descales expand()ed to (B, Hkv), bf16 out. ``--layers`` layers, each with its own cache,
in one CUDA graph with a 64 MB L2 flush before each layer; time per layer = (graph - flush-only graph) / layers,
medians over replays (bench_decode.per_layer_us). Timed under two flushes, as bench_decode does: `us` after a
zero_() of the buffer (the L2 left full of dirty lines, whose write-back lands in the attention kernel), and
`us_read_flush` after a read of it (clean lines, as a real step's weight reads leave them; docs/timing.md). The
floor counts K = V once: kv_MB = requests * context * 512 B, plus q and out (bf16), over 4.27 TB/s (the H200's
measured copy bandwidth, bench_decode.py). The target: >= 85% of the floor (floor_us / us >= 0.85) on every step
of >= 128 MB; the table shows it under both flushes.

Prefill: 1k-16k tokens (16k in total per call: batch = 16384 / seqlen), 8 q heads on 1 kv head, causal and not;
fp8attn on E4M3 q/k/v (k = v) against torch SDPA on the same values in bf16 (enable_gqa), interleaved timing in
the same run (bench_common.time_implementations). TFLOP/s = 4 * sq * sk * 512 * heads * batch / time, halved for
causal. The target: >= 600 TFLOP/s non-causal at 16k and at least SDPA bf16 everywhere.

    python bench/bench_d512.py [--layers 4] [--iters 50] [--skip-prefill] [--skip-decode] [--requests 8 128]
        [--contexts 32768] [--seqlens 16384]

Writes bench/results/d512.json ({"rows": [{"kind": "decode", "name", "us", "floor_us", "kv_MB", "us_read_flush"},
{"kind": "prefill", "seqlen", "causal", "tflops", "sdpa_bf16_tflops"}]}); prints the tables last.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

import bench_common as bc
import fp8attn
from bench_decode import flush_suffix, per_layer_us
from bench_prefill import sdpa_bf16, tflops

E4M3 = torch.float8_e4m3fn
D = 512
Q_HEADS, KV_HEADS = 8, 1  # Gemma-4-31B global layers per GPU at TP4
PAGE = 64
MAX_SEQLEN_K = 32768
NUM_SPLITS = 32
HBM_BYTES_PER_S = 4.27e12
PREFILL_TOKENS = 16384
DECODE_REQUESTS = (8, 32, 128)
DECODE_CONTEXTS = (4096, 8192, 32768)


def step_name(requests: int, context: int) -> str:
    return f"gemma4-31b-tp4-global-{requests}x1-{context // 1024}k"


def decode_layer(requests: int, context: int, device: torch.device) -> Callable[[], Any]:
    """One global layer's decode call on its own cache (K = V)."""
    pages = math.ceil(context / PAGE)
    num_blocks = requests * pages
    cache = torch.randn(num_blocks, PAGE, KV_HEADS, D, device=device).to(E4M3)
    table = torch.zeros(requests, MAX_SEQLEN_K // PAGE, dtype=torch.int32, device=device)
    table[:, :pages] = torch.randperm(num_blocks, device=device).to(torch.int32).view(requests, pages)
    seqused_k = torch.full((requests,), context, dtype=torch.int32, device=device)
    cu_q = torch.arange(0, requests + 1, dtype=torch.int32, device=device)
    q = torch.randn(requests, Q_HEADS, D, device=device).to(torch.bfloat16)
    out = torch.empty_like(q)
    k_descale, v_descale = ((torch.rand(1, device=device) + 0.5).expand(requests, KV_HEADS) for _ in range(2))
    return lambda: fp8attn.flash_attn_varlen_func(
        q=q, k=cache, v=cache, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1, seqused_k=seqused_k,
        max_seqlen_k=MAX_SEQLEN_K, softmax_scale=1.0, causal=True, block_table=table, k_descale=k_descale,
        v_descale=v_descale, num_splits=NUM_SPLITS)


def bench_decode_step(requests: int, context: int, flushes: list[bc.L2Flush], args: argparse.Namespace,
                      device: torch.device) -> dict[str, Any]:
    """The step under each flush: the first gives `us` and `floor_fraction`, the others the same keys with
    their suffix (`us_read_flush`)."""
    calls = [decode_layer(requests, context, device) for _ in range(args.layers)]
    kv_bytes = requests * context * KV_HEADS * D
    q_out_bytes = requests * Q_HEADS * D * (2 + 2)
    floor_us = (kv_bytes + q_out_bytes) / HBM_BYTES_PER_S * 1e6
    row = {"kind": "decode", "name": step_name(requests, context),
           "floor_us": floor_us, "kv_MB": kv_bytes / 1e6, "requests": requests, "context": context,
           "q_heads": Q_HEADS, "kv_heads": KV_HEADS, "page_size": PAGE, "num_splits": NUM_SPLITS,
           "q_dtype": "bfloat16", "kv_shared": True}
    for i, flush in enumerate(flushes):
        suffix = "" if i == 0 else flush_suffix(flush.kind)
        us = per_layer_us(calls, flush, args)
        row["us" + suffix], row["floor_fraction" + suffix] = us, floor_us / us
    return row


def bench_prefill_row(seqlen: int, causal: bool, flush: bc.L2Flush, args: argparse.Namespace,
                      device: torch.device) -> dict[str, Any]:
    batch = PREFILL_TOKENS // seqlen
    q8 = torch.randn(batch, seqlen, Q_HEADS, D, device=device).to(E4M3)
    kv8 = torch.randn(batch, seqlen, KV_HEADS, D, device=device).to(E4M3)
    out = torch.empty(batch, seqlen, Q_HEADS, D, dtype=torch.bfloat16, device=device)
    scale = D**-0.5

    def ours() -> None:
        fp8attn.flash_attn_func(q8, kv8, kv8, softmax_scale=scale, causal=causal, out=out)

    qt = q8.to(torch.bfloat16).transpose(1, 2).contiguous()  # SDPA wants [B, H, S, d]
    kvt = kv8.to(torch.bfloat16).transpose(1, 2).contiguous()
    fns: dict[str, Callable[[], Any]] = {"ours": ours}
    if not args.ours_only:
        fns["sdpa_bf16"] = sdpa_bf16(qt, kvt, kvt, causal, enable_gqa=True)
    times = bc.time_implementations(fns, flush=flush, iters=args.iters, optional={"sdpa_bf16"})
    ms = statistics.median(times["ours"])
    sdpa_ms = statistics.median(times["sdpa_bf16"]) if "sdpa_bf16" in times else None
    return {"kind": "prefill", "seqlen": seqlen, "causal": causal, "batch": batch, "q_heads": Q_HEADS,
            "kv_heads": KV_HEADS, "ms": ms, "tflops": tflops(seqlen, D, Q_HEADS, batch, causal, ms),
            "sdpa_bf16_tflops": tflops(seqlen, D, Q_HEADS, batch, causal, sdpa_ms) if sdpa_ms else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="layers (distinct caches) per captured decode graph")
    parser.add_argument("--iters", type=int, default=50, help="timed replays")
    parser.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096, 16384], help="prefill lengths")
    parser.add_argument("--requests", type=int, nargs="+", default=list(DECODE_REQUESTS), help="decode batch sizes")
    parser.add_argument("--contexts", type=int, nargs="+", default=list(DECODE_CONTEXTS), help="decode context lengths")
    parser.add_argument("--skip-decode", action="store_true")
    parser.add_argument("--skip-prefill", action="store_true")
    parser.add_argument("--flush-kinds", nargs="+", choices=bc.L2Flush.KINDS, default=["zero", "read"],
                        help="L2 flushes to time decode under, the first giving `us` (bench_decode.py's option)")
    parser.add_argument("--ours-only", action="store_true", help="time fp8attn alone (no SDPA): A/B runs (ab_libs.py)")
    parser.add_argument("--out-dir", type=Path, default=bc.RESULTS_DIR)
    args = parser.parse_args()
    device = bc.require_device()
    flushes = [bc.L2Flush(device, kind=kind) for kind in args.flush_kinds]
    flush = flushes[0]
    rows: list[dict[str, Any]] = []
    if not args.skip_decode:
        for requests, context in ((r, c) for r in args.requests for c in args.contexts):
            rows.append(bench_decode_step(requests, context, flushes, args, device))
            print(f"{rows[-1]['name']}: {rows[-1]['us']:.1f} us, floor {rows[-1]['floor_us']:.1f} us", flush=True)
            torch.cuda.empty_cache()
    if not args.skip_prefill:
        for causal in (False, True):
            for seqlen in args.seqlens:
                rows.append(bench_prefill_row(seqlen, causal, flush, args, device))
                print(f"prefill {seqlen} causal={causal}: {rows[-1]['tflops']:.1f} TFLOP/s", flush=True)
                torch.cuda.empty_cache()
    meta = bc.run_metadata()
    bc.write_json(args.out_dir / "d512.json", {"rows": rows, "commit": meta["commit"], "gpu": meta["gpu"],
                                               "date": meta["date"], "meta": meta, "flush_bytes": flush.nbytes,
                                               "flush_kinds": args.flush_kinds, "hbm_bytes_per_s": HBM_BYTES_PER_S})
    decode = [r for r in rows if r["kind"] == "decode"]
    if decode:
        suffixes = [""] + [flush_suffix(kind) for kind in args.flush_kinds[1:]]
        names = [f", {kind}" for kind in args.flush_kinds]
        print(bc.format_table(
            ["step", "kv MB", "floor us"] + [h + n for n in names for h in ("us", "floor / us")] +
            [">= 85% (>= 128 MB)" + n for n in names],
            [[r["name"], r["kv_MB"], r["floor_us"]] + [r[k + s] for s in suffixes for k in ("us", "floor_fraction")] +
             ["yes" if r["floor_fraction" + s] >= 0.85 else ("no" if r["kv_MB"] >= 128 else "-") for s in suffixes]
             for r in decode]))
    prefill = [r for r in rows if r["kind"] == "prefill"]
    if prefill:
        print(bc.format_table(["seqlen", "causal", "TFLOP/s", "sdpa bf16", "x sdpa"],
                              [[r["seqlen"], r["causal"], r["tflops"], r["sdpa_bf16_tflops"],
                                r["tflops"] / r["sdpa_bf16_tflops"] if r["sdpa_bf16_tflops"] else None]
                               for r in prefill]))


if __name__ == "__main__":
    main()
