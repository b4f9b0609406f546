"""Prefill throughput of fp8attn (docs/targets.md) against torch SDPA bf16 and, where importable, FA3/FA4/FlashInfer.

Shapes as in FlashAttention-3's benchmark: 16k tokens in total (batch = 16384 / seqlen), heads = 2048 / d
(MHA), causal and not, seqlen 1k-16k, d 64/128/256. TFLOP/s = 4 * sq * sk * d * heads * batch / time,
halved for causal. GPU time only: 8 calls captured in one CUDA graph, each replay timed with CUDA events after
an L2 flush, the median per call reported. The card's clocks are not locked and follow its power draw, so by
default the implementations' runs are interleaved (the order rotated each round) and all are timed at the same
clocks; --timing consecutive times each alone after it has settled (bench_common.time_implementations).
Every implementation is timed the same way in the same run, and the JSON records the mode.

    python bench/bench_prefill.py [--d 128] [--seqlens 4096 16384] [--iters 30]

Writes bench/results/prefill.json and bench/results/prefill.png, and prints a table.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

import bench_common as bc
import fp8attn

TOTAL_TOKENS = 16384
# Optional peers and the module each needs.
PEER_MODULES = {"fa3_fp8": "flash_attn_interface", "fa3_bf16": "flash_attn_interface",
                "fa4_bf16": "flash_attn.cute", "flashinfer_bf16": "flashinfer"}


def spread(times: list[float]) -> float:
    """(p90 - p10) / median of one implementation's timed replays: how much the clock moved under it."""
    deciles = statistics.quantiles(times, n=10)
    return (deciles[-1] - deciles[0]) / statistics.median(times)


def tflops(seqlen: int, d: int, heads: int, batch: int, causal: bool, ms: float) -> float:
    flops = 4 * seqlen * seqlen * d * heads * batch / (2 if causal else 1)
    return flops / (ms * 1e-3) / 1e12


def sdpa_bf16(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
              enable_gqa: bool = False) -> Callable[[], Any]:
    """torch SDPA on bf16 [B, H, S, d], on cuDNN when this torch has that backend, else the default choice;
    enable_gqa: k and v have fewer heads than q."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call() -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=enable_gqa)

    def call_cudnn() -> Any:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return call()

    try:
        call_cudnn()
        return call_cudnn
    except RuntimeError as err:
        print(f"  [sdpa] cuDNN backend unavailable ({str(err).splitlines()[0]}); using the default backend")
        return call


def peer_calls(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, descales: tuple, qb: torch.Tensor,
               kb: torch.Tensor, vb: torch.Tensor, causal: bool) -> dict[str, Callable[[], Callable[[], Any]]]:
    """Builders of each optional peer's call on [B, S, H, d] inputs; a builder raises if the peer is absent."""
    def fa3_fp8() -> Callable[[], Any]:
        import flash_attn_interface as fa3

        qs, ks, vs = (s.contiguous() for s in descales)  # FA3 takes dense (B, Hkv) descales
        return lambda: fa3.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qs, k_descale=ks, v_descale=vs)

    def fa3_bf16() -> Callable[[], Any]:
        import flash_attn_interface as fa3

        return lambda: fa3.flash_attn_func(qb, kb, vb, causal=causal)

    def fa4_bf16() -> Callable[[], Any]:
        from flash_attn.cute import flash_attn_func as fa4

        return lambda: fa4(qb, kb, vb, causal=causal)

    def flashinfer_bf16() -> Callable[[], Any]:
        import flashinfer

        batch, seqlen, heads, d = qb.shape
        indptr = torch.arange(0, (batch + 1) * seqlen, seqlen, dtype=torch.int32, device=qb.device)
        workspace = torch.empty(256 << 20, dtype=torch.uint8, device=qb.device)
        wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD")
        wrapper.plan(indptr, indptr, heads, kb.shape[2], d, causal=causal, q_data_type=torch.bfloat16)
        q2, k2, v2 = (t.reshape(batch * seqlen, *t.shape[2:]) for t in (qb, kb, vb))
        return lambda: wrapper.run(q2, k2, v2)

    return {"fa3_fp8": fa3_fp8, "fa3_bf16": fa3_bf16, "fa4_bf16": fa4_bf16, "flashinfer_bf16": flashinfer_bf16}


def bench_one(d: int, causal: bool, seqlen: int, flush: bc.L2Flush, args: argparse.Namespace,
              device: torch.device) -> dict[str, Any]:
    batch, heads = TOTAL_TOKENS // seqlen, 2048 // d
    shape = (batch, seqlen, heads, d)
    qb, kb, vb = (torch.randn(shape, dtype=torch.bfloat16, device=device) for _ in range(3))
    (q8, qs), (k8, ks), (v8, vs) = (fp8attn.quantize_e4m3(t) for t in (qb, kb, vb))
    descales = tuple(s.expand(batch, heads) for s in (qs, ks, vs))  # vLLM-style broadcast views
    out = torch.empty(shape, dtype=torch.bfloat16, device=device)

    def ours() -> None:
        fp8attn.flash_attn_func(q8, k8, v8, causal=causal, q_descale=descales[0], k_descale=descales[1],
                                v_descale=descales[2], out=out)

    fns: dict[str, Callable[[], Any]] = {"ours": ours}
    if not args.ours_only:
        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (qb, kb, vb))  # SDPA wants [B, H, S, d]
        fns["sdpa_bf16"] = sdpa_bf16(qt, kt, vt, causal)
    for name, build in peer_calls(q8, k8, v8, descales, qb, kb, vb, causal).items():
        if name in args.peers:
            fns[name] = bc.try_peer(name, build)
    optional = {name for name in fns if name != "ours"}
    times = bc.time_implementations({name: fn for name, fn in fns.items() if fn is not None}, flush=flush,
                                    mode=args.timing, warmup=args.warmup, iters=args.iters, optional=optional,
                                    trace=args.trace_windows)
    ms = statistics.median(times["ours"])
    row: dict[str, Any] = {"d": d, "causal": causal, "seqlen": seqlen, "batch": batch, "heads": heads,
                           "ms": ms, "tflops": tflops(seqlen, d, heads, batch, causal, ms),
                           "ms_spread": {name: spread(t) for name, t in times.items()}}
    for name in optional:  # a peer that is absent or failed is recorded as None, never as a number
        row[f"{name}_tflops"] = (tflops(seqlen, d, heads, batch, causal, statistics.median(times[name]))
                                 if name in times else None)
    if row.get("fa3_fp8_tflops"):
        row["ratio_vs_fa3_fp8"] = row["tflops"] / row["fa3_fp8_tflops"]  # the same run, the same timing
    return row


def plot(rows: list[dict[str, Any]], path: Any) -> None:
    plt = bc.pyplot()
    if plt is None:
        return
    dims = sorted({r["d"] for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(5 * len(dims), 4), squeeze=False)
    series = ["tflops", "sdpa_bf16_tflops"] + sorted({k for r in rows for k in r if k.endswith("_tflops")}
                                                      - {"tflops", "sdpa_bf16_tflops"})
    for ax, d in zip(axes[0], dims):
        for causal, style in ((False, "-"), (True, "--")):
            sel = sorted((r for r in rows if r["d"] == d and r["causal"] == causal), key=lambda r: r["seqlen"])
            for color, key in enumerate(series):
                pts = [(r["seqlen"], r[key]) for r in sel if r.get(key) is not None]
                if pts:
                    label = "fp8attn" if key == "tflops" else key.removesuffix("_tflops")
                    label += " causal" if causal else ""
                    ax.plot(*zip(*pts), style, color=f"C{color}", marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("seqlen")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"prefill d={d}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    bc.save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    parser.add_argument("--iters", type=int, default=30,
                        help="timed graph replays (8 calls each) per implementation, interleaved with the others'")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timing", choices=bc.TIMING_MODES, default="interleaved",
                        help="interleaved: the implementations' runs alternate, all at the same clocks; consecutive: "
                             "each settles and is timed alone, at its own clocks (bench_common.time_implementations)")
    parser.add_argument("--trace-windows", action="store_true", help="print each timed window's wall-clock span")
    parser.add_argument("--out-dir", type=Path, default=bc.RESULTS_DIR)
    parser.add_argument("--ours-only", action="store_true", help="time fp8attn alone (no peers, no SDPA): A/B runs")
    args = parser.parse_args()

    device = bc.require_device()
    args.peers = set() if args.ours_only else {name for name, module in PEER_MODULES.items() if bc.importable(module)}
    print(f"peers: torch SDPA bf16{''.join(', ' + p for p in sorted(args.peers))} "
          f"(absent: {', '.join(sorted(set(PEER_MODULES) - args.peers)) or 'none'})")
    flush = bc.L2Flush(device)
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    rows = []
    for d in args.d:
        for causal in causals:
            for seqlen in args.seqlens:
                row = bench_one(d, causal, seqlen, flush, args, device)
                print(f"d={d} causal={causal} seqlen={seqlen}: {row['tflops']:.1f} TFLOP/s "
                      f"(sdpa bf16 {row.get('sdpa_bf16_tflops') or 0:.1f})")
                rows.append(row)
                torch.cuda.empty_cache()

    meta = bc.run_metadata()
    bc.write_json(args.out_dir / "prefill.json", {"rows": rows, "commit": meta["commit"], "gpu": meta["gpu"],
                                                  "date": meta["date"], "meta": meta, "flush_bytes": flush.nbytes,
                                                  "timing": args.timing, "iters": args.iters})
    plot(rows, args.out_dir / "prefill.png")
    peer_keys = sorted({k for r in rows for k in r if k.endswith("_tflops")} - {"tflops", "sdpa_bf16_tflops"})
    headers = ["d", "causal", "seqlen", "batch", "heads", "ms", "TFLOP/s", "sdpa bf16", *(k[:-7] for k in peer_keys),
               "x fa3 fp8"]
    table = [[r["d"], r["causal"], r["seqlen"], r["batch"], r["heads"], r["ms"], r["tflops"], r.get("sdpa_bf16_tflops"),
              *(r.get(k) for k in peer_keys), r.get("ratio_vs_fa3_fp8")] for r in rows]
    print(bc.format_table(headers, table))


if __name__ == "__main__":
    main()
