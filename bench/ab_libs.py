"""A/B of several builds of libfp8attn.so in one run: the same benchmark, one process per library, the libraries
alternated over rounds (so that clock and thermal drift falls on all of them alike).

    python bench/ab_libs.py --lib base=.devrun/base/libfp8attn.so --lib new=build/libfp8attn.so \
        --rounds 2 --out-dir $OUT/ab -- prefill --d 64 128 --seqlens 1024 16384
    python bench/ab_libs.py --lib ... -- decode --shapes llama3.1-8b-tp1-1x1-4k
    python bench/ab_libs.py --lib ... -- d512 --skip-prefill
    python bench/ab_libs.py --lib ... --python old=old/python -- host --calls 1000

(host: each library's directory needs its libfp8attn_torch.so, scripts/build_torch_op.sh BUILD_DIR.)

A library built at a commit of another C ABI needs that commit's Python package: ``--python NAME=DIR`` runs that
library's benchmark with the package in DIR (e.g. ``git archive <commit> python src/kernels.list | tar -x -C old``,
then old/python; bench_common.py reads it from FP8ATTN_PACKAGE_DIR).

Everything after `--` names the benchmark (prefill, decode, d512 or host) and its arguments; `--ours-only` and
`--out-dir` are added. Each round's JSON lands in OUT_DIR/<lib>_<round>/; the table printed last has, per row, the
median over rounds of each library's result and its change against the first library. A row's spread over rounds
(max/min - 1, per library) is printed too: a change smaller than it is noise (docs/timing.md). Rows timed under
the read flush too (d512's decode steps) get a second table, and `results_read_flush` in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import bench_common as bc

# script, its JSON, the key of its rows there
BENCH = {"prefill": ("bench_prefill.py", "prefill.json", "rows"),
         "decode": ("bench_decode.py", "decode.json", "shapes"),
         "d512": ("bench_d512.py", "d512.json", "rows"),
         "host": ("bench_host.py", "host_overhead.json", "shapes")}


def is_prefill_row(kind: str, row: dict) -> bool:
    return kind == "prefill" or (kind == "d512" and row["kind"] == "prefill")


def row_key(kind: str, row: dict) -> str:
    if is_prefill_row(kind, row):
        return f"d{row.get('d', 512)} {'causal' if row['causal'] else 'full'} {row['seqlen']}"
    return row["name"]


def row_metric(kind: str, row: dict) -> tuple[str, float, bool]:
    """(name, value, whether higher is better) of a row: TFLOP/s for prefill rows, microseconds for decode ones,
    host microseconds per eager call for host ones."""
    if kind == "host":
        return ("eager_us", row["eager_us"], False)
    return ("tflops", row["tflops"], True) if is_prefill_row(kind, row) else ("us", row["us"], False)


# A second metric some rows carry: d512's decode steps are timed under both L2 flushes, and its target is judged
# under the read flush (bench_d512.py), so the A/B keeps and prints both.
READ_FLUSH_METRIC = "us_read_flush"


def summary_table(names: list[str], order: list[str], results: dict[str, dict[str, list[float]]],
                  metric_of: dict[str, tuple[str, bool]]) -> tuple[list[str], list[list]]:
    """Headers and rows: per row key, each library's median over rounds, its change against the first library
    (+ is faster) and the row's largest spread over rounds (max/min - 1 of one library)."""
    base = names[0]
    headers = ["row", "metric", *names, *(f"{n} vs {base}" for n in names[1:]), "spread %"]
    table = []
    for key in order:
        if not any(key in results[n] for n in names):
            continue
        metric, higher_better = metric_of[key]
        med = {n: statistics.median(results[n][key]) for n in names if key in results[n]}
        changes = []
        for n in names[1:]:
            if n in med and base in med:
                gain = med[n] / med[base] - 1 if higher_better else med[base] / med[n] - 1
                changes.append(f"{100 * gain:+.1f}%")
            else:
                changes.append("-")
        spread = max(max(v) / min(v) - 1 for v in (results[n][key] for n in names if key in results[n]))
        table.append([key, metric, *(med.get(n) for n in names), *changes, f"{100 * spread:.1f}"])
    return headers, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", action="append", required=True, help="NAME=PATH of a libfp8attn.so (2 or more)")
    parser.add_argument("--python", action="append", default=[],
                        help="NAME=DIR: the fp8attn package for library NAME (a library of another C ABI)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- prefill|decode [its arguments]")
    args = parser.parse_args()
    bench_args = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench_args or bench_args[0] not in BENCH:
        parser.error("name the benchmark after --: prefill, decode, d512 or host")
    kind, extra = bench_args[0], bench_args[1:]
    script, out_name, rows_key = BENCH[kind]
    libs = dict(spec.split("=", 1) for spec in args.lib)
    packages = dict(spec.split("=", 1) for spec in args.python)
    for name in packages:
        if name not in libs:
            parser.error(f"--python {name}: no --lib of that name")
    if len(libs) < 2:
        parser.error("give at least two --lib NAME=PATH")
    for name, path in libs.items():
        if not Path(path).is_file():
            parser.error(f"--lib {name}: no file {path}")

    here = Path(__file__).resolve().parent
    results: dict[str, dict[str, list[float]]] = {name: {} for name in libs}
    results_read_flush: dict[str, dict[str, list[float]]] = {name: {} for name in libs}
    metric_of: dict[str, tuple[str, bool]] = {}  # row key -> (metric, higher is better)
    meta: dict[str, dict] = {}  # per library, as its own benchmark process recorded it (commit built from, GPU)
    order: list[str] = []
    for rnd in range(1, args.rounds + 1):
        for name, path in libs.items():
            out = args.out_dir / f"{name}_{rnd}"
            print(f"=== round {rnd} lib {name} ({path})", flush=True)
            env = dict(os.environ, FP8ATTN_LIB=str(Path(path).resolve()), PYTHONUNBUFFERED="1")
            if name in packages:
                env["FP8ATTN_PACKAGE_DIR"] = str(Path(packages[name]).resolve())
            subprocess.run([sys.executable, str(here / script), *extra, "--ours-only", "--out-dir", str(out)],
                           env=env, check=True)
            payload = json.loads((out / out_name).read_text())
            if kind == "host" and payload.get("backend") != "compiled":
                sys.exit(f"ab_libs: library {name} ran the {payload.get('backend')} torch op, not the compiled one: "
                         f"build its libfp8attn_torch.so (scripts/build_torch_op.sh {Path(path).parent})")
            meta[name] = payload["meta"]
            for row in payload[rows_key]:
                key = row_key(kind, row)
                if key not in order:
                    order.append(key)
                metric, value, higher_better = row_metric(kind, row)
                metric_of[key] = (metric, higher_better)
                results[name].setdefault(key, []).append(value)
                if READ_FLUSH_METRIC in row:
                    results_read_flush[name].setdefault(key, []).append(row[READ_FLUSH_METRIC])

    names = list(libs)
    summary = {"kind": kind, "metrics": {key: m for key, (m, _) in metric_of.items()}, "libs": libs,
               "rounds": args.rounds, "bench_args": extra, "results": results, "meta": meta}
    has_read_flush = any(results_read_flush[n] for n in names)
    if has_read_flush:
        summary["results_read_flush"] = results_read_flush
    bc.write_json(args.out_dir / f"ab_{kind}.json", summary)
    print(f"\nA/B {kind} (median of {args.rounds} rounds; gain: + is faster)")
    print(bc.format_table(*summary_table(names, order, results, metric_of)))
    if has_read_flush:
        read_metric = {key: (READ_FLUSH_METRIC, False) for key in order}
        print(f"\nA/B {kind}, {READ_FLUSH_METRIC} (median of {args.rounds} rounds; gain: + is faster)")
        print(bc.format_table(*summary_table(names, order, results_read_flush, read_metric)))


if __name__ == "__main__":
    main()
