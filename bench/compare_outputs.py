"""Run fp8attn on fixed seeded inputs and save, or compare against a saved run: a check that two builds of the
library (e.g. a kernel variant and the shipped one, one process each through FP8ATTN_LIB) give the same output.

  python3 bench/compare_outputs.py --save A.pt      # with one library
  python3 bench/compare_outputs.py --compare A.pt   # with the other: max |difference| per case, exit 1 if any

Cases: dense prefill calls at d = 128 with LSE, 16k tokens per batch: bench_prefill.py's non-causal 1k / 4k / 16k,
a causal 1k, and lengths that leave a partial M and KV block with GQA (4 and 2 kv heads) and a sink.
"""

from __future__ import annotations

import argparse
import sys

import torch

import fp8attn


def cases():
    # (seqlen, causal, kv heads, sink)
    for seqlen, causal, heads_kv, sink in ((1024, False, 16, False), (4096, False, 16, False), (16384, False, 16, False),
                                           (1000, False, 4, True), (1024, True, 16, False), (3000, False, 2, False)):
        batch, heads, d = max(1, 16384 // seqlen), 16, 128
        yield f"d{d} s{seqlen} causal={causal} hkv={heads_kv} sink={sink}", (batch, seqlen, heads, d), causal, heads_kv, sink


def run() -> dict[str, torch.Tensor]:
    results = {}
    for seed, (name, shape, causal, heads_kv, sink) in enumerate(cases()):
        gen = torch.Generator(device="cuda").manual_seed(1234 + seed)
        b, s, h, d = shape
        q = torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn((b, s, heads_kv, d), generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        (q8, qs), (k8, ks), (v8, vs) = (fp8attn.quantize_e4m3(t) for t in (q, k, v))
        s_aux = torch.randn(h, generator=gen, device="cuda") if sink else None
        out, lse = fp8attn.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qs.expand(b, heads_kv),
                                           k_descale=ks.expand(b, heads_kv), v_descale=vs.expand(b, heads_kv),
                                           s_aux=s_aux, return_softmax_lse=True)
        results[name] = out.float().cpu()
        results[name + " lse"] = lse.float().cpu()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save")
    group.add_argument("--compare")
    args = parser.parse_args()
    results = run()
    if args.save:
        torch.save(results, args.save)
        print(f"saved {len(results)} tensors to {args.save}")
        return 0
    reference = torch.load(args.compare)
    bad = 0
    for name, value in results.items():
        ref = reference[name]
        same = torch.equal(value, ref)  # element for element; a NaN anywhere makes it False
        print(f"{name:32s} {'identical' if same else 'DIFFERENT'}, max|diff| {(value - ref).abs().max().item():.3e}")
        bad += not same
    print(f"compare: {len(results) - bad} of {len(results)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
