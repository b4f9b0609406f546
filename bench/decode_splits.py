"""fp8attn decode time per split count: what the split heuristic leaves on the table, shape by shape.

bench_decode.py's steps (same caches, graph, flushes and timing), fp8attn only, with num_splits forced to each
given count and to 0 (the heuristic, as vLLM calls it). The combine is included, so a count that shortens the
forward but lengthens the combine shows as what it costs the step.

    python bench/decode_splits.py --shapes llama3.1-8b-tp1-1x1-4k --splits 16 29 32 [--flush-kinds zero read]

Prints a table (µs per layer per flush kind); --json writes the rows. A diagnostic: bench_decode.py gives the
numbers that count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import bench_common as bc
import bench_decode as bd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", required=True, help="shape names of the shapes file")
    parser.add_argument("--splits", type=int, nargs="+", required=True, help="num_splits values besides 0")
    parser.add_argument("--flush-kinds", nargs="+", choices=bc.L2Flush.KINDS, default=["zero", "read"])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()

    shapes = bd.named_shapes(args.shapes)
    device = bc.require_device()
    flushes = [bc.L2Flush(device, bd.FLUSH_MB << 20, kind=kind) for kind in args.flush_kinds]
    rows = []
    for shape in shapes:
        layers = [bd.make_layer(shape, device) for _ in range(args.layers)]
        for splits in [0, *args.splits]:
            calls = bd.ours(shape, layers, num_splits=splits)
            row = {"shape": shape["name"], "num_splits": splits}
            for flush in flushes:
                row["us" + bd.flush_suffix(flush.kind)] = bd.per_layer_us(calls, flush, args)
            rows.append(row)
            print(row)
        del layers
        torch.cuda.empty_cache()
    keys = ["us" + bd.flush_suffix(f.kind) for f in flushes]
    print(bc.format_table(["shape", "num_splits", *keys], [[r["shape"], r["num_splits"], *(r[k] for k in keys)]
                                                            for r in rows]))
    if args.json:
        bc.write_json(args.json, {"rows": rows, "meta": bc.run_metadata()})


if __name__ == "__main__":
    main()
