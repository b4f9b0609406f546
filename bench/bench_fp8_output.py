"""The fused FP8 output and the softcap's cost (issue 36), each against its alternative in the same run.

FP8 output (`bench/results/fp8_output.json`): the call vLLM's attention + quant fusion makes, an E4M3 ``out`` with
a 0-d fp32 ``output_scale`` (out = E4M3(O / scale)), against the unfused path it replaces: bf16 out, then the
static per-tensor quantization as one more kernel (``quant_impl`` says which: one fused torch.compile kernel where
Triton is there, else torch eager, three kernels). Decode steps (decode_shapes.json, vLLM's paged call, with and
without splits: num_splits 0 and the full-graph ceiling 32) and prefill (16k tokens, d128 and d256, causal and not).
The scale is calibrated as a static scale would be: amax of the bf16 output / 448. ``within_error_bar``: on the
row's own inputs, per element |out - Q(exact)| <= 2 max|Q(eager) - Q(exact)| + 1 E4M3 ulp of Q(exact), where Q()
quantizes with the same scale, exact is fp64 attention on the same FP8 inputs, and eager is the bf16 out.

Softcap (`bench/results/softcap_cost.json`): the same calls with softcap 50 (Gemma-2's) against softcap 0, bf16
out, at d64, d128 and d256, decode and prefill.

Timing: several calls (layers) with their own inputs captured in one CUDA graph with an L2 flush before each, the
flush-only graph subtracted, the median replay per call (bench_decode.per_layer_us); implementations alternate.

    python bench/bench_fp8_output.py [--iters 50] [--skip-softcap] [--skip-fp8-output] [--head-dims 128]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Callable

import torch

import bench_common as bc
import bench_decode as bd
import fp8attn

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
LAYERS = 4
PREFILL_TOKENS = 16384
DECODE_STEPS = ["llama3.1-8b-tp1-1x1-4k", "llama3.1-8b-tp1-32x1-2k", "llama3.1-8b-tp1-128x1-1k",
                "llama3.1-70b-tp4-8x1-32k", "gemma4-31b-tp4-4x4-28k", "qwen3-32b-tp2-32x1-8k"]
# A d64 decode step for the softcap's cost (no shape of the file has d64).
D64_DECODE = {"name": "d64-16x4kv-32x1-4k", "q_heads": 16, "kv_heads": 4, "d": 64, "requests": 32, "q_tokens": 1,
              "context": 4096, "window_left": -1}


def static_quant(impl_out: dict[str, str]) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]:
    """out = E4M3(clamp(x * inv_scale, +-448)), as vLLM's static_scaled_fp8_quant: one Triton kernel through
    torch.compile when it compiles here, else torch eager (multiply, clamp, cast)."""
    def quant(x: torch.Tensor, inv_scale: torch.Tensor, out: torch.Tensor) -> None:
        out.copy_((x.float() * inv_scale).clamp(-E4M3_MAX, E4M3_MAX))

    try:
        # One compiled graph per tensor shape: every row of this benchmark has its own.
        for limit in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 64)
        compiled = torch.compile(quant, fullgraph=True)
        x = torch.randn(64, 8, 128, device="cuda", dtype=torch.bfloat16)
        o = torch.empty(x.shape, dtype=E4M3, device="cuda")
        compiled(x, torch.ones((), device="cuda"), o)
        torch.cuda.synchronize()
        impl_out["quant_impl"] = "torch.compile (one Triton kernel)"
        return compiled
    except Exception as err:  # noqa: BLE001 (no Triton, no compiler: the eager path is the fallback)
        impl_out["quant_impl"] = f"torch eager, 3 kernels (torch.compile failed: {type(err).__name__})"
        return quant


def e4m3_round(x: torch.Tensor) -> torch.Tensor:
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).double()


def e4m3_ulp(x: torch.Tensor) -> torch.Tensor:
    """One E4M3 ulp at |x| (3 mantissa bits; 2^-9 below the smallest normal 2^-6)."""
    mag = x.abs().clamp(min=2.0 ** -6)
    return torch.exp2(torch.floor(torch.log2(mag)) - 3)


def within_error_bar(fused: torch.Tensor, eager_bf16: torch.Tensor, exact: torch.Tensor, scale: float) -> bool:
    q_exact = e4m3_round(exact / scale) * scale
    q_eager = e4m3_round(eager_bf16.double() / scale) * scale
    out = fused.double() * scale
    bound = 2 * (q_eager - q_exact).abs().max()
    excess = (out - q_exact).abs() - e4m3_ulp(q_exact / scale) * scale
    return bool(torch.isfinite(out).all() and (excess <= bound).all())


def dequant(t: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    return t.double() * descale.reshape(-1)[0].double()


def exact_decode(shape: dict[str, Any], layer: bd.Layer) -> torch.Tensor:
    """fp64 attention of one paged decode layer: [requests * q_tokens, Hq, d]."""
    requests, q_tokens, hq, hkv, d = (shape[k] for k in ("requests", "q_tokens", "q_heads", "kv_heads", "d"))
    qs, ks, vs = layer.descales
    q = dequant(layer.q, qs).view(requests, q_tokens, hq, d)
    out = torch.empty(requests, q_tokens, hq, d, dtype=torch.float64, device=q.device)
    context, window = shape["context"], shape["window_left"]
    pages = math.ceil(context / bd.PAGE)
    rows = torch.arange(q_tokens, device=q.device).view(-1, 1) + context - q_tokens
    keys = torch.arange(context, device=q.device).view(1, -1)
    visible = keys <= rows
    if window >= 0:
        visible &= keys >= rows - window
    for r in range(requests):
        table = layer.block_table[r, :pages].long()
        k = dequant(layer.k[table].reshape(-1, hkv, d)[:context], ks).repeat_interleave(hq // hkv, dim=1)
        v = dequant(layer.v[table].reshape(-1, hkv, d)[:context], vs).repeat_interleave(hq // hkv, dim=1)
        scores = torch.einsum("thd,khd->htk", q[r], k) * d ** -0.5
        scores = scores.masked_fill(~visible, -math.inf)
        out[r] = torch.einsum("htk,khd->thd", torch.softmax(scores, dim=-1), v)
    return out.view(requests * q_tokens, hq, d)


def exact_prefill(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor, causal: bool) -> torch.Tensor:
    """fp64 attention of dense [B, S, H, d] FP8 inputs (descales 1), one (batch, head) at a time."""
    batch, seqlen, heads, d = q8.shape
    out = torch.empty(q8.shape, dtype=torch.float64, device=q8.device)
    mask = torch.ones(seqlen, seqlen, dtype=torch.bool, device=q8.device).tril() if causal else None
    for b in range(batch):
        for h in range(heads):
            scores = (q8[b, :, h].double() @ k8[b, :, h].double().T) * d ** -0.5
            if mask is not None:
                scores = scores.masked_fill(~mask, -math.inf)
            out[b, :, h] = torch.softmax(scores, dim=-1) @ v8[b, :, h].double()
    return out


def decode_call(shape: dict[str, Any], layer: bd.Layer, out: torch.Tensor, num_splits: int, softcap: float = 0.0,
                output_scale: torch.Tensor | None = None) -> Callable[[], Any]:
    requests, q_tokens = shape["requests"], shape["q_tokens"]
    cu_q = torch.arange(0, requests * q_tokens + 1, q_tokens, dtype=torch.int32, device=layer.q.device)
    qs, ks, vs = layer.descales
    return lambda: fp8attn.flash_attn_varlen_func(
        q=layer.q, k=layer.k, v=layer.v, out=out, cu_seqlens_q=cu_q, max_seqlen_q=q_tokens, seqused_k=layer.seqused_k,
        max_seqlen_k=bd.MAX_SEQLEN_K, softmax_scale=shape["d"] ** -0.5, causal=True, window_size=bd.window_arg(shape),
        block_table=layer.block_table, softcap=softcap, q_descale=qs, k_descale=ks, v_descale=vs,
        num_splits=num_splits, output_scale=output_scale)


def time_pair(a: list[Callable[[], Any]], b: list[Callable[[], Any]], flush: bc.L2Flush,
              args: argparse.Namespace) -> tuple[float, float]:
    """Per-call us of two lists of calls, alternated over rounds; medians."""
    ta, tb = [], []
    for _ in range(args.rounds):
        ta.append(bd.per_layer_us(a, flush, args))
        tb.append(bd.per_layer_us(b, flush, args))
    return sorted(ta)[len(ta) // 2], sorted(tb)[len(tb) // 2]


def fp8_output_rows(args: argparse.Namespace, flush: bc.L2Flush, quant: Callable, device: torch.device) -> list[dict]:
    rows = []
    for shape in bd.named_shapes(DECODE_STEPS):
        layers = [bd.make_layer(shape, device) for _ in range(LAYERS)]
        outs8 = [torch.empty(l.out.shape, dtype=E4M3, device=device) for l in layers]
        for num_splits in (0, 32):
            for layer in layers:
                decode_call(shape, layer, layer.out, num_splits)()
            scale_value = max(l.out.float().abs().max().item() for l in layers) / E4M3_MAX
            scale = torch.tensor(scale_value, dtype=torch.float32, device=device)
            inv_scale = 1.0 / scale
            fused = [decode_call(shape, l, o, num_splits, output_scale=scale) for l, o in zip(layers, outs8)]
            bf16 = [decode_call(shape, l, l.out, num_splits) for l in layers]
            unfused = [(lambda c=c, l=l, o=o: (c(), quant(l.out, inv_scale, o)))
                       for c, l, o in zip(bf16, layers, outs8)]
            us, us_unfused = time_pair(fused, unfused, flush, args)
            fused[0]()
            bf16[0]()
            ok = within_error_bar(outs8[0], layers[0].out, exact_decode(shape, layers[0]), scale_value)
            rows.append({"name": f"{shape['name']} splits{num_splits}", "kind": "decode", "us": us,
                         "us_bf16_then_quant": us_unfused, "gain_pct": 100 * (us_unfused / us - 1),
                         "within_error_bar": ok, "output_scale": scale_value})
            print(f"{rows[-1]['name']}: fused {us:.2f} us, bf16 + quant {us_unfused:.2f} us, within bar {ok}")
        del layers, outs8
    for d, seqlen, causal in ((128, 1024, True), (128, 4096, False), (256, 1024, True), (256, 4096, False)):
        heads, batch = 2048 // d, PREFILL_TOKENS // seqlen
        inputs = [tuple(torch.randn(batch, seqlen, heads, d, device=device).to(E4M3) for _ in range(3))
                  for _ in range(2)]
        out16 = [torch.empty(batch, seqlen, heads, d, dtype=torch.bfloat16, device=device) for _ in inputs]
        out8 = [torch.empty(o.shape, dtype=E4M3, device=device) for o in out16]

        def call(qkv: tuple, out: torch.Tensor, output_scale: torch.Tensor | None = None) -> Callable[[], Any]:
            return lambda: fp8attn.flash_attn_func(*qkv, causal=causal, out=out, output_scale=output_scale)

        for qkv, o in zip(inputs, out16):
            call(qkv, o)()
        scale_value = max(o.float().abs().max().item() for o in out16) / E4M3_MAX
        scale = torch.tensor(scale_value, dtype=torch.float32, device=device)
        inv_scale = 1.0 / scale
        fused = [call(qkv, o8, scale) for qkv, o8 in zip(inputs, out8)]
        unfused = [(lambda c=call(qkv, o), o=o, o8=o8: (c(), quant(o, inv_scale, o8)))
                   for qkv, o, o8 in zip(inputs, out16, out8)]
        us, us_unfused = time_pair(fused, unfused, flush, args)
        fused[0]()
        call(inputs[0], out16[0])()
        small = (slice(0, 1), slice(0, 512))  # the reference on the first sequence's first 512 rows' inputs
        q8, k8, v8 = (t[small] for t in inputs[0])
        ref_out8 = torch.empty(q8.shape, dtype=E4M3, device=device)
        ref_out16 = torch.empty(q8.shape, dtype=torch.bfloat16, device=device)
        fp8attn.flash_attn_func(q8, k8, v8, causal=causal, out=ref_out8, output_scale=scale)
        fp8attn.flash_attn_func(q8, k8, v8, causal=causal, out=ref_out16)
        ok = within_error_bar(ref_out8, ref_out16, exact_prefill(q8, k8, v8, causal), scale_value)
        name = f"prefill d{d} {seqlen} {'causal' if causal else 'full'}"
        rows.append({"name": name, "kind": "prefill", "us": us, "us_bf16_then_quant": us_unfused,
                     "gain_pct": 100 * (us_unfused / us - 1), "within_error_bar": ok, "output_scale": scale_value})
        print(f"{name}: fused {us:.2f} us, bf16 + quant {us_unfused:.2f} us, within bar {ok}")
    return rows


def softcap_rows(args: argparse.Namespace, flush: bc.L2Flush, device: torch.device) -> list[dict]:
    rows = []
    for shape in [D64_DECODE, *bd.named_shapes(["llama3.1-8b-tp1-32x1-2k", "llama3.1-8b-tp1-16x1-16k",
                                                 "gemma4-31b-tp4-16x4-28k", "llama3.1-8b-tp1-1x1-4k"])]:
        if shape["d"] not in args.head_dims:
            continue
        layers = [bd.make_layer(shape, device) for _ in range(LAYERS)]
        off = [decode_call(shape, l, l.out, 0) for l in layers]
        on = [decode_call(shape, l, l.out, 0, softcap=50.0) for l in layers]
        us0, us50 = time_pair(off, on, flush, args)
        rows.append({"name": f"decode {shape['name']}", "d": shape["d"], "us_softcap0": us0, "us_softcap50": us50,
                     "cost_pct": 100 * (us50 / us0 - 1)})
        print(f"{rows[-1]['name']}: softcap 0 {us0:.2f} us, 50 {us50:.2f} us ({rows[-1]['cost_pct']:+.1f}%)")
        del layers
    for d in sorted({64, 128, 256} & set(args.head_dims)):
        for seqlen, causal in ((1024, True), (4096, False), (16384, False)):
            heads, batch = 2048 // d, PREFILL_TOKENS // seqlen
            inputs = [tuple(torch.randn(batch, seqlen, heads, d, device=device).to(E4M3) for _ in range(3))
                      for _ in range(2)]
            outs = [torch.empty(batch, seqlen, heads, d, dtype=torch.bfloat16, device=device) for _ in inputs]

            def call(qkv: tuple, out: torch.Tensor, softcap: float) -> Callable[[], Any]:
                return lambda: fp8attn.flash_attn_func(*qkv, causal=causal, out=out, softcap=softcap)

            us0, us50 = time_pair([call(i, o, 0.0) for i, o in zip(inputs, outs)],
                                  [call(i, o, 50.0) for i, o in zip(inputs, outs)], flush, args)
            name = f"prefill d{d} {seqlen} {'causal' if causal else 'full'}"
            rows.append({"name": name, "d": d, "us_softcap0": us0, "us_softcap50": us50,
                         "cost_pct": 100 * (us50 / us0 - 1)})
            print(f"{name}: softcap 0 {us0:.2f} us, 50 {us50:.2f} us ({rows[-1]['cost_pct']:+.1f}%)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two implementations")
    parser.add_argument("--skip-softcap", action="store_true")
    parser.add_argument("--skip-fp8-output", action="store_true")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256],
                        help="softcap rows at these head dims only (a dev build with fewer kernels)")
    parser.add_argument("--out-dir", type=Path, default=bc.RESULTS_DIR)
    args = parser.parse_args()
    device = bc.require_device()
    flush = bc.L2Flush(device, bd.FLUSH_MB << 20)
    meta = bc.run_metadata()
    if not args.skip_fp8_output:
        impl: dict[str, str] = {}
        quant = static_quant(impl)
        rows = fp8_output_rows(args, flush, quant, device)
        bc.write_json(args.out_dir / "fp8_output.json", {**meta, **impl, "rows": rows})
        print(bc.format_table(["row", "fused us", "bf16+quant us", "gain %", "within bar"],
                              [[r["name"], r["us"], r["us_bf16_then_quant"], r["gain_pct"], r["within_error_bar"]]
                               for r in rows]))
    if not args.skip_softcap:
        rows = softcap_rows(args, flush, device)
        bc.write_json(args.out_dir / "softcap_cost.json", {**meta, "rows": rows})
        print(bc.format_table(["row", "softcap 0 us", "softcap 50 us", "cost %"],
                              [[r["name"], r["us_softcap0"], r["us_softcap50"], r["cost_pct"]] for r in rows]))


if __name__ == "__main__":
    main()
