"""Where a decode step's time goes: the kernel timeline of bench_decode.py's graph (flush, forward, combine per
layer), from CUPTI through torch.profiler, for fp8attn and (when it imports) FA3 FP8.

For each shape and library, per layer (median over layers and replays), microseconds:
  gap_in   flush end -> first attention kernel start (launch latency the step pays after the previous kernel)
  fwd      forward kernel duration (FA3's scheduling-metadata kernel, when it runs one, counts in the span only)
  gap_mid  forward end -> combine start (negative when the combine overlaps the forward: programmatic launch)
  combine  combine kernel duration
  span     first attention kernel start -> last attention kernel end
  step     flush end -> next flush start (what bench_decode.py's per-layer time measures, less the flush)

    python bench/decode_timeline.py [--shapes llama3.1-8b-tp1-1x1-4k ...] [--replays 5] [--json out.json]
    python bench/decode_timeline.py --d512 8x4096 128x4096 ...   (bench_d512.py's Gemma-4 global-layer steps instead)

A diagnostic, not a benchmark: profiling adds no work inside the graph, but keep the timed numbers from
bench_decode.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile

import bench_common as bc
import bench_d512
import bench_decode as bd


def kernel_events(prof: Any) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every GPU kernel in the trace, in start order."""
    events = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start:
            events.append((e.name, float(e.time_range.start), float(e.time_range.end)))
    return sorted(events, key=lambda t: t[1])


def kernel_role(name: str) -> str:
    """'flush' (whatever runs between layers: the L2 flush's fill or reduction kernels), or an attention kernel's
    role: 'prepare' (FA3's scheduling metadata kernel), 'combine' (split-KV reduction) or 'fwd'."""
    lower = name.lower()
    if "fp8attn" not in lower and "flash" not in lower:
        return "flush"
    if "combine" in lower:
        return "combine"
    return "prepare" if "prepare" in lower else "fwd"


def decompose(events: list[tuple[str, float, float]]) -> dict[str, float]:
    """Per-layer phases from a kernel list of [flush kernels, attention kernels...]* (see the module doc)."""
    layers: list[dict[str, Any]] = []
    for name, start, end in events:
        role = kernel_role(name)
        if role == "flush":
            if layers and not layers[-1]["kernels"]:  # a flush of several kernels
                layers[-1]["flush_end"] = end
            else:
                layers.append({"flush_start": start, "flush_end": end, "kernels": []})
        elif layers:
            layers[-1]["kernels"].append((role, start, end))
    phases: dict[str, list[float]] = {k: [] for k in ("gap_in", "fwd", "gap_mid", "combine", "span", "step")}
    for layer, next_layer in zip(layers, layers[1:] + [None]):
        ks = layer["kernels"]
        fwd = [k for k in ks if k[0] == "fwd"]
        if not fwd:
            continue
        phases["gap_in"].append(ks[0][1] - layer["flush_end"])
        phases["fwd"].append(fwd[0][2] - fwd[0][1])
        combine = [k for k in ks if k[0] == "combine"]
        if combine:
            phases["gap_mid"].append(combine[0][1] - fwd[0][2])
            phases["combine"].append(combine[0][2] - combine[0][1])
        phases["span"].append(max(k[2] for k in ks) - ks[0][1])
        if next_layer is not None:
            phases["step"].append(next_layer["flush_start"] - layer["flush_end"])
    return {k: statistics.median(v) for k, v in phases.items() if v}


def timeline(calls: list[Callable[[], Any]], flush: bc.L2Flush, replays: int) -> tuple[dict[str, float], list[str]]:
    graph = bd.layers_graph(calls, flush)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    events = kernel_events(prof)
    names = sorted({n for n, _, _ in events})
    return decompose(events), names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", help="only these shape names (default: all)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--flush-kb", type=int, default=64 << 10,
                        help="flush buffer between layers, KiB (4: a fill kernel that evicts nothing, for warm caches)")
    parser.add_argument("--flush-kind", choices=bc.L2Flush.KINDS, default="zero",
                        help="evict by writing the buffer (zero_) or by reading it (bench_common.L2Flush)")
    parser.add_argument("--d512", nargs="+", metavar="REQUESTSxCONTEXT",
                        help="time bench_d512.py's decode steps (e.g. 8x4096) instead of the shapes file's "
                             "(fp8attn only)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()

    device = bc.require_device()
    flush = bc.L2Flush(device, args.flush_kb << 10, kind=args.flush_kind)
    if args.d512:
        rows = [d512_row(step, device, flush, args) for step in args.d512]
        print_and_write(rows, args)
        return
    spec = json.loads(bd.shapes_path().read_text())
    shapes = [s for s in spec["shapes"] if not args.shapes or s["name"] in args.shapes]
    libs = {"fp8attn": bd.ours}
    if bc.importable("flash_attn_interface"):
        libs["fa3_fp8"] = bd.fa3_fp8
    rows = []
    for shape in shapes:
        layers = [bd.make_layer(shape, device) for _ in range(args.layers)]
        for lib, build in libs.items():
            phases, names = timeline(build(shape, layers), flush, args.replays)
            rows.append({"shape": shape["name"], "lib": lib, "flush_kb": args.flush_kb, "flush_kind": args.flush_kind, **phases, "kernels": names})
            print(f"{shape['name']} {lib}: kernels {names}")
        del layers
        torch.cuda.empty_cache()
    print_and_write(rows, args)


def d512_row(step: str, device: torch.device, flush: bc.L2Flush, args: argparse.Namespace) -> dict[str, Any]:
    """One of bench_d512.py's decode steps ("8x4096": requests x context), its layers as that benchmark builds them."""
    requests, context = (int(x) for x in step.lower().split("x"))
    calls = [bench_d512.decode_layer(requests, context, device) for _ in range(args.layers)]
    phases, names = timeline(calls, flush, args.replays)
    del calls
    torch.cuda.empty_cache()
    name = bench_d512.step_name(requests, context)
    print(f"{name} fp8attn: kernels {names}")
    return {"shape": name, "lib": "fp8attn", "flush_kb": args.flush_kb, "flush_kind": args.flush_kind, **phases,
            "kernels": names}


def print_and_write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    headers = ["shape", "lib", "gap_in", "fwd", "gap_mid", "combine", "span", "step"]
    print(bc.format_table(headers, [[r["shape"], r["lib"], *(r.get(h) for h in headers[2:])] for r in rows]))
    if args.json:
        bc.write_json(args.json, {"rows": rows, "meta": bc.run_metadata()})


if __name__ == "__main__":
    main()
