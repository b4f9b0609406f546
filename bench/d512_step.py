"""One Gemma-4 global-layer d512 decode step (bench_d512.py's layer call), run a few times eagerly: a target for
ncu's source-level stall sampling. Session 20's table of it: bench/results/d512_ncu_regions.json.

    ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 4 --launch-count 1 \
        --section WarpStateStats --section SourceCounters -o d512_8x4k python bench/d512_step.py 8 4096
    ncu -i d512_8x4k.ncu-rep --page source --csv --print-source sass > d512_8x4k.csv
"""

from __future__ import annotations

import argparse

import torch

from bench_d512 import decode_layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("requests", type=int)
    parser.add_argument("context", type=int)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    call = decode_layer(args.requests, args.context, torch.device("cuda"))
    for _ in range(args.runs):
        call()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
