"""fp8attn decode time per KV layout: what the paged path costs a decode step, shape by shape.

bench_decode.py's steps (same graph, flushes, timing and heuristic split plan), fp8attn only, with the same keys
stored as 16-token pages (the shapes file's layout), as larger pages, and contiguously per request (varlen K/V
through cu_seqlens_k, no block table: one TMA per KV tile instead of one per 16-row box and its page lookup).
FA3 FP8 runs on the paged layouts too when it imports (its page_table path), so that a gap between the layouts
can be told apart from a gap between the libraries.

    python bench/decode_layouts.py --shapes llama3.1-8b-tp1-1x1-4k --page-sizes 16 256 0 [--flush-kinds zero read]

page size 0 = contiguous. Prints a table (µs per layer per flush kind); --json writes the rows. A diagnostic:
bench_decode.py gives the numbers that count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import bench_common as bc
import bench_decode as bd


def layout_name(page_size: int) -> str:
    return "contiguous" if page_size == 0 else f"paged {page_size}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", required=True, help="shape names of the shapes file")
    parser.add_argument("--page-sizes", type=int, nargs="+", default=[bd.PAGE, 256, 0],
                        help="multiples of 16 that divide max_seqlen_k, or 0 for contiguous K/V")
    parser.add_argument("--flush-kinds", nargs="+", choices=bc.L2Flush.KINDS, default=["zero", "read"])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--ours-only", action="store_true", help="leave FA3 out even if it imports")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()

    shapes = bd.named_shapes(args.shapes)
    device = bc.require_device()
    with_fa3 = not args.ours_only and bc.importable(bd.PEER_MODULES["fa3_fp8"])
    flushes = [bc.L2Flush(device, bd.FLUSH_MB << 20, kind=kind) for kind in args.flush_kinds]
    keys = ["us" + bd.flush_suffix(f.kind) for f in flushes]
    rows = []
    for shape in shapes:
        for page_size in args.page_sizes:
            layers = [bd.make_layer(shape, device, page_size=page_size) for _ in range(args.layers)]
            row = {"shape": shape["name"], "layout": layout_name(page_size), "lib": "fp8attn"}
            calls = bd.ours(shape, layers)
            row.update({key: bd.per_layer_us(calls, flush, args) for flush, key in zip(flushes, keys)})
            rows.append(row)
            print(row)
            if with_fa3 and page_size > 0:  # FA3's kvcache entry takes a page table, not cu_seqlens_k
                peer = {"shape": shape["name"], "layout": layout_name(page_size), "lib": "fa3_fp8"}
                for flush, key in zip(flushes, keys):
                    peer[key] = bc.try_peer("fa3_fp8", lambda flush=flush: bd.per_layer_us(bd.fa3_fp8(shape, layers),
                                                                                          flush, args))
                rows.append(peer)
                print(peer)
            del layers, calls
            torch.cuda.empty_cache()
    print(bc.format_table(["shape", "layout", "lib", *keys],
                          [[r["shape"], r["layout"], r["lib"], *(r[k] for k in keys)] for r in rows]))
    if args.json:
        bc.write_json(args.json, {"rows": rows, "meta": bc.run_metadata()})


if __name__ == "__main__":
    main()
