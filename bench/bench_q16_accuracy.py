"""16-bit Q accuracy (issue 35): the kernel's per-row quantization against vLLM's static per-tensor Q scale.

vLLM hands an FP8 attention backend a Q quantized with one static per-tensor scale: a calibrated q_scale at best
(here: amax(|q|) / 448 of the very tensor, the best a static scale can do), else its fallback q_scale = 1.0
(uncalibrated; vLLM warns about accuracy). fp8attn takes the 16-bit Q itself and quantizes each (token, head) row
with amax(row) / 448 (src/sm90/quantize_q.cuh). This compares the three on the same inputs:

- q: bf16 [1, 64, 8, d], N(0, 1) times a per-channel scale (lognormal, sigma 1: the outlier channels of real
  activations) times a per-token scale (lognormal, sigma 0.5); k, v: E4M3 [1, keys, 8, d], N(0, 1) rounded;
- reference: fp64 attention on the unquantized bf16 q and the decoded E4M3 k, v (SPEC section 3);
- rel_rms_pct = 100 * ||out - ref|| / ||ref|| over the whole output, for
  rel_rms_pct (fp8attn, 16-bit q), static_per_tensor_rel_rms_pct (q_descale = amax / 448),
  uncalibrated_rel_rms_pct (q_descale = 1: q clamped to +-448 and rounded, as vLLM's quantization saturates).

    python bench/bench_q16_accuracy.py [--d 128 256 512] [--keys 1024 4096 16384 32768] [--out PATH]

Writes bench/results/q16_accuracy.json; prints the table last.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc  # noqa: E402  (sets up fp8attn's import path)
import torch  # noqa: E402

import fp8attn  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "q16_accuracy.json"
E4M3_MAX = 448.0
SEED = 35
QUERIES, HEADS = 64, 8


def make_inputs(d: int, keys: int, device: torch.device, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=device).manual_seed(seed)
    channel = torch.exp(torch.randn(d, generator=gen, device=device))  # lognormal, sigma 1
    token = torch.exp(0.5 * torch.randn(1, QUERIES, 1, 1, generator=gen, device=device))
    q = (torch.randn(1, QUERIES, HEADS, d, generator=gen, device=device) * channel * token).to(torch.bfloat16)
    k = torch.randn(1, keys, HEADS, d, generator=gen, device=device).to(torch.float8_e4m3fn)
    v = torch.randn(1, keys, HEADS, d, generator=gen, device=device).to(torch.float8_e4m3fn)
    return q, k, v


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """fp64 softmax(q k^T * scale) v per head, [1, Sq, H, d]."""
    qd, kd, vd = (x[0].double().transpose(0, 1) for x in (q, k, v))  # [H, S, d]
    scores = torch.matmul(qd, kd.transpose(1, 2)) * scale
    return torch.matmul(torch.softmax(scores, dim=-1), vd).transpose(0, 1).unsqueeze(0)


def rel_rms_pct(out: torch.Tensor, ref: torch.Tensor) -> float:
    return 100.0 * math.sqrt(((out.double() - ref) ** 2).sum().item() / (ref**2).sum().item())


def per_tensor(q: torch.Tensor, q_scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's static quantization: E4M3(clamp(q / q_scale, +-448)) and its descale."""
    q8 = (q.float() / q_scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q8, torch.tensor(q_scale, dtype=torch.float32, device=q.device)


def measure_row(d: int, keys: int, device: torch.device, seed: int) -> dict[str, Any]:
    q, k, v = make_inputs(d, keys, device, seed)
    scale = d**-0.5
    ref = reference(q, k, v, scale)
    out_q16 = fp8attn.flash_attn_func(q, k, v, softmax_scale=scale, out_dtype=torch.bfloat16)
    calibrated = q.float().abs().max().item() / E4M3_MAX
    results = {"rel_rms_pct": rel_rms_pct(out_q16, ref)}
    for key, q_scale in (("static_per_tensor_rel_rms_pct", calibrated), ("uncalibrated_rel_rms_pct", 1.0)):
        q8, q_descale = per_tensor(q, q_scale)
        out = fp8attn.flash_attn_func(q8, k, v, softmax_scale=scale, q_descale=q_descale, out_dtype=torch.bfloat16)
        results[key] = rel_rms_pct(out, ref)
    if not all(math.isfinite(x) for x in results.values()):
        raise RuntimeError(f"d{d} {keys} keys: non-finite error {results}")
    return {"head_dim": d, "keys": keys, **results, "calibrated_q_scale": calibrated}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--keys", type=int, nargs="+", default=[1024, 4096, 16384, 32768])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    device = bc.require_device()
    rows = []
    for d in args.d:
        for index, keys in enumerate(args.keys):
            rows.append(measure_row(d, keys, device, SEED + 100 * d + index))
    meta = bc.run_metadata()
    bc.write_json(args.out, {"rows": rows, "commit": meta["commit"], "gpu": meta["gpu"], "date": meta["date"],
                             "meta": meta, "seed": SEED, "queries": QUERIES, "heads": HEADS,
                             "inputs": "q bf16 N(0,1) x lognormal channel (sigma 1) x lognormal token (sigma 0.5) "
                                       "scales; k, v E4M3 of N(0,1)"})
    headers = ["d", "keys", "per-row (fp8attn) %", "static calibrated %", "static q_scale=1 %"]
    print(bc.format_table(headers, [[r["head_dim"], r["keys"], r["rel_rms_pct"], r["static_per_tensor_rel_rms_pct"],
                                     r["uncalibrated_rel_rms_pct"]] for r in rows]))


if __name__ == "__main__":
    main()
