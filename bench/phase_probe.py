"""Where a d512 decode CTA's time goes: the phase probe's per-CTA marks (src/sm90/phase_probe.cuh).

Needs a probe build of the library (cmake -DFP8ATTN_PHASE_PROBE=ON, e.g. with -DFP8ATTN_HEAD_DIMS=512), named by
FP8ATTN_LIB. Runs one Gemma-4 global-layer decode step as bench_d512.py issues it (bf16 q, one E4M3 cache as k and
v, 64-token pages, num_splits 32), eagerly, `--reps` times; before each run the marks buffer is zeroed and the L2
flushed (`--flush read`: clean lines, as between two layers of a step; `none`: whatever the previous run left,
i.e. code and data warm). Each CTA's clock64 marks become microseconds from its entry through the CTA's own
cycles-per-nanosecond (its entry and end read both clock64 and %globaltimer). Prints, per mark, the median and the
10th / 90th percentiles over all CTAs of all runs, and writes them to --out (JSON).

    FP8ATTN_LIB=build_probe/libfp8attn.so python bench/phase_probe.py --requests 8 --context 4096 --flush read
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

import bench_common as bc
from bench_d512 import decode_layer

# src/sm90/phase_probe.cuh's PhaseMark, in its order (tests/python/test_phase_probe.py checks the two agree).
MARKS = ["entry", "cta_barrier", "producer_start", "mma_start", "first_kv_issued", "q_loaded", "q_ready",
         "first_k_landed", "loop_done", "rows_staged", "epilogue_start", "end", "entry_ns", "end_ns"]
MAX_CTAS = 8192


def cta_microseconds(marks: torch.Tensor) -> dict[str, list[float]]:
    """marks: [ctas, len(MARKS)] int64 of the CTAs that ran (entry != 0). Per mark, each CTA's time from its entry
    in microseconds (marks a CTA did not record are left out)."""
    m = marks.double()
    entry, end = m[:, MARKS.index("entry")], m[:, MARKS.index("end")]
    span_ns = m[:, MARKS.index("end_ns")] - m[:, MARKS.index("entry_ns")]
    cycles_per_ns = (end - entry) / span_ns
    out: dict[str, list[float]] = {}
    for i, name in enumerate(MARKS):
        if name in ("entry", "entry_ns", "end_ns"):
            continue
        recorded = (m[:, i] != 0) & (span_ns > 0)
        us = (m[recorded, i] - entry[recorded]) / cycles_per_ns[recorded] / 1e3
        out[name] = us.tolist()
    out["cycles_per_ns"] = cycles_per_ns[span_ns > 0].tolist()
    return out


def grid_microseconds(runs: list[torch.Tensor]) -> dict[str, list[float]]:
    """The grid's view, per run, in %globaltimer microseconds from the run's first CTA entry: each CTA's entry
    (how late it started), each CTA's end, and the run's last end (the grid's span, as the kernel's duration
    less its launch and completion). The marks above time each CTA from its own entry; these say whether CTAs
    enter late or a few run long."""
    out: dict[str, list[float]] = {"entry": [], "end": [], "last_end": [], "slowest_cta": []}
    for ran in runs:
        m = ran.double()
        entry_ns, end_ns = m[:, MARKS.index("entry_ns")], m[:, MARKS.index("end_ns")]
        ended = end_ns > 0
        first = entry_ns.min()
        out["entry"] += ((entry_ns - first) / 1e3).tolist()
        out["end"] += ((end_ns[ended] - first) / 1e3).tolist()
        out["last_end"].append(float((end_ns[ended].max() - first) / 1e3))
        out["slowest_cta"].append(float((end_ns[ended] - entry_ns[ended]).max() / 1e3))
    return out


def quantile_rows(per_mark: dict[str, list[float]], quantiles: dict[str, float]) -> list[dict]:
    """One row per mark with values: {"mark", each named quantile, "samples"}."""
    rows = []
    for name, values in per_mark.items():
        if not values:
            continue
        q = torch.tensor(values, dtype=torch.float64).quantile(
            torch.tensor(list(quantiles.values()), dtype=torch.float64)).tolist()
        rows.append({"mark": name, **dict(zip(quantiles, q)), "samples": len(values)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--flush", choices=("read", "none"), default="read")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="JSON of the table (default: print only)")
    args = parser.parse_args()
    device = torch.device("cuda")
    call = decode_layer(args.requests, args.context, device)
    flush = bc.L2Flush(device, kind="read")
    marks = torch.zeros(MAX_CTAS, len(MARKS), dtype=torch.int64, device=device)
    os.environ["FP8ATTN_PHASE_MARKS"] = f"{marks.data_ptr()},{MAX_CTAS}"
    call()  # library load, the kernel's first launch
    torch.cuda.synchronize()
    runs = []
    for _ in range(args.reps):
        marks.zero_()
        if args.flush == "read":
            flush()
        call()
        torch.cuda.synchronize()
        ran = marks[marks[:, MARKS.index("entry")] != 0].cpu()
        if ran.numel() == 0:
            raise SystemExit("phase_probe: no marks recorded: is FP8ATTN_LIB a probe build (FP8ATTN_PHASE_PROBE=ON)?")
        runs.append(ran)
    quantiles = {"p10": 0.1, "median": 0.5, "p90": 0.9}
    rows = quantile_rows(cta_microseconds(torch.cat(runs)), quantiles)
    grid_quantiles = {**quantiles, "max": 1.0}
    grid_rows = quantile_rows(grid_microseconds(runs), grid_quantiles)
    for title, table, names in (("mark (us from the CTA's entry)", rows, quantiles),
                                ("grid (%globaltimer us from the run's first entry)", grid_rows, grid_quantiles)):
        print(bc.format_table([title, *names, "samples"],
                              [[r["mark"], *(r[n] for n in names), r["samples"]] for r in table]))
    if args.out is not None:
        meta = bc.run_metadata()
        bc.write_json(args.out, {"requests": args.requests, "context": args.context, "flush": args.flush,
                                 "reps": args.reps, "ctas_per_run": int(runs[0].shape[0]), "rows": rows,
                                 "grid_rows": grid_rows, "commit": meta["commit"], "gpu": meta["gpu"], "meta": meta})


if __name__ == "__main__":
    main()
