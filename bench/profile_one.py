"""One fp8attn call to profile (ncu, compute-sanitizer): a decode step of the shapes file after an L2 flush, or a
prefill call of bench_prefill.py's shapes. Not a benchmark: it times nothing.

    python bench/profile_one.py decode llama3.1-8b-tp1-32x1-2k [--flush-kind zero|read] [--calls 2]
    python bench/profile_one.py prefill --d 256 --seqlen 16384 [--causal] [--calls 2] [--impl fa3_fp8]

Each call is preceded by the flush (decode) so that a profiler that replays the whole application
(ncu --replay-mode application --cache-control none) sees the L2 as the benchmark leaves it: after zero_()
full of dirty lines, after a read full of clean ones. Profile the last call (ncu -k regex:fwd_kernel -s N-1).
"""

from __future__ import annotations

import argparse
import json

import torch

import bench_common as bc
import bench_decode as bd
import bench_prefill as bp
import fp8attn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    dec = sub.add_parser("decode")
    dec.add_argument("shape", help="a shape name of the shapes file")
    dec.add_argument("--flush-kind", choices=bc.L2Flush.KINDS, default="zero")
    pre = sub.add_parser("prefill")
    pre.add_argument("--d", type=int, default=128)
    pre.add_argument("--seqlen", type=int, default=16384)
    pre.add_argument("--causal", action="store_true")
    pre.add_argument("--impl", choices=["ours", "fa3_fp8"], default="ours",
                     help="fa3_fp8: FA3's FP8 forward on the same inputs (flash_attn_interface must import)")
    for p in (dec, pre):
        p.add_argument("--calls", type=int, default=2, help="calls in a row (the first warms the library up)")
    args = parser.parse_args()
    device = bc.require_device()

    if args.kind == "decode":
        spec = json.loads(bd.shapes_path().read_text())
        shape = next((s for s in spec["shapes"] if s["name"] == args.shape), None)
        if shape is None:
            raise SystemExit(f"no shape {args.shape!r} in {bd.shapes_path()}")
        call = bd.ours(shape, [bd.make_layer(shape, device)])[0]
        flush = bc.L2Flush(device, bd.FLUSH_MB << 20, kind=args.flush_kind)
        for _ in range(args.calls):
            flush()
            call()
    else:
        batch, heads = 16384 // args.seqlen, 2048 // args.d
        shape = (batch, args.seqlen, heads, args.d)
        (q, qs), (k, ks), (v, vs) = (fp8attn.quantize_e4m3(torch.randn(shape, device=device)) for _ in range(3))
        if args.impl == "ours":
            def call() -> None:
                fp8attn.flash_attn_func(q, k, v, causal=args.causal, q_descale=qs, k_descale=ks, v_descale=vs)
        else:  # bench_prefill's own FA3 call (its bf16 inputs serve only the bf16 peers: none here)
            descales = tuple(s.expand(batch, heads) for s in (qs, ks, vs))
            call = bp.peer_calls(q, k, v, descales, None, None, None, args.causal)["fa3_fp8"]()
        for _ in range(args.calls):
            call()
    torch.cuda.synchronize()
    print("ok")


if __name__ == "__main__":
    main()
