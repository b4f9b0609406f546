"""Host overhead of one eager call: fp8attn (and FA3 when ``flash_attn_interface`` imports) on the ten decode
steps of decode_shapes.json and one prefill call.

Where attention runs eagerly (prefill, piecewise CUDA graphs) every microsecond the host spends per call is
paid per layer and step. For each shape:

  eager_us      host time of one ``fp8attn.flash_attn_varlen_func`` call, vLLM's arguments, median over
                calls timed one by one with time.perf_counter_ns (and the median of --repeats such runs, each
                kept in eager_us_runs). Calls run back to back without waiting for
                the GPU (the stream is synchronized every --sync-every calls, outside the timing, so the
                launch queue never fills): the time is the host's alone.
  op_us         the same for the dispatcher op's entry point (``fp8attn.interface._FWD_EAGER``, the C++ function
                behind ``torch.ops.fp8attn.fwd.default``) called directly: the op through torch's dispatcher,
                without the Python wrapper. The wrapper itself calls the eager entry (``fp8attn.ops.EAGER_FWD``,
                no dispatcher) where it is loaded (``eager_entry`` in the JSON), else that op.
  gpu_us        the call's GPU time: one call captured in a CUDA graph, median replay (warm L2).
  fa3_eager_us  eager_us of FA3's ``flash_attn_with_kvcache`` (decode) / ``flash_attn_varlen_func`` (prefill)
                on the same FP8 tensors, or null when FA3 does not import or fails.
  eager_plain_us, op_plain_us
                eager_us and op_us outside torch.inference_mode. The other columns are timed inside it, as vLLM
                calls attention: its worker and model runner run the model under ``@torch.inference_mode()``
                (vllm/v1/worker/gpu_worker.py:426 ``Worker.execute_model``, gpu_model_runner.py:2230
                ``GPUModelRunner.execute_model`` and :2896 ``_dummy_run``, which also captures the CUDA graphs;
                v0.11.0, f71952c1c). There the dispatcher skips the op's autograd keys.
With --breakdown, per decode shape also (where a split plan's extra host time goes; same timing):
  op_unsplit_us       op_us with num_splits=1 (one launch, no workspace);
  c_abi_us            the C ABI's fp8attn_fwd alone through ctypes, its params filled and its workspace allocated
                      once: validation, plan, launches; c_abi_unsplit_us the same with num_splits=1;
  workspace_alloc_us  the split plan's workspace from torch's caching allocator, allocated and freed;
  ctypes_call_us      a bare ctypes call (fp8attn_version), the part of c_abi_us that is ctypes.

    python bench/bench_host.py [--calls 2000] [--repeats 3] [--shapes llama3.1-8b-tp1-1x1-4k ...] [--ours-only]
        [--breakdown]

Writes bench/results/host_overhead.json ({"shapes": [{"name", "eager_us", "gpu_us", "fa3_eager_us", ...}]})
and prints a table. ``backend`` records which torch op served the calls ("compiled": the C++ stable-ABI op;
"ctypes": the Python fallback, see fp8attn.ops); FP8ATTN_TORCH_OP=ctypes measures the fallback.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

import bench_common as bc
import bench_decode as bd
import fp8attn
from fp8attn import _args, _lib, interface, ops

E4M3 = torch.float8_e4m3fn
# One vLLM-style prefill: 4 requests of 2048 new tokens each, llama3.1-8b heads (32:8, d128), causal.
PREFILL = {"name": "prefill-llama3.1-8b-4x2048", "q_heads": 32, "kv_heads": 8, "d": 128, "requests": 4,
           "tokens": 2048}
# What the wrapper calls, for op_us; a package older than 2026-12-05 called the OpOverload itself.
OP_ENTRY = getattr(interface, "_FWD_EAGER", ops.FWD)


def host_us(fn: Callable[[], Any], calls: int, sync_every: int, warmup: int = 50) -> float:
    """Median host microseconds of fn(), each call timed alone; the GPU is waited for only between groups of
    ``sync_every`` calls, outside the timing."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for i in range(calls):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
        if (i + 1) % sync_every == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(times) / 1e3


def gpu_us(fn: Callable[[], Any], iters: int = 50) -> float:
    """GPU microseconds of one fn(), from a captured graph's replays (no host time in it)."""
    return bc.time_graph(bc.capture_graph(fn), iters=iters) * 1e3


def result_row(name: str, eager: float, op: float, gpu: float, fa3: Optional[float]) -> dict[str, Any]:
    return {"name": name, "eager_us": round(eager, 2), "op_us": round(op, 2), "gpu_us": round(gpu, 2),
            "fa3_eager_us": None if fa3 is None else round(fa3, 2)}


# (wrapper call, direct op call, FA3 call or None, further calls to time by their JSON key)
Calls = tuple[Callable, Callable, Optional[Callable], dict[str, Callable]]


def decode_calls(shape: dict[str, Any], device: torch.device, with_fa3: bool, breakdown: bool = False) -> Calls:
    """The calls of one decode shape of decode_shapes.json; the further ones are split_breakdown_calls' with
    ``breakdown``."""
    layer = bd.make_layer(shape, device)
    requests, q_tokens = shape["requests"], shape["q_tokens"]
    cu_q = torch.arange(0, requests * q_tokens + 1, q_tokens, dtype=torch.int32, device=device)
    used = torch.full((requests,), shape["context"], dtype=torch.int32, device=device)
    qs, ks, vs = layer.descales
    window = bd.window_arg(shape)
    window_left, window_right = _args.normalize_window(window, True)
    scale = shape["d"] ** -0.5

    def wrapper() -> Any:
        return fp8attn.flash_attn_varlen_func(
            q=layer.q, k=layer.k, v=layer.v, out=layer.out, cu_seqlens_q=cu_q, max_seqlen_q=q_tokens, seqused_k=used,
            max_seqlen_k=bd.MAX_SEQLEN_K, softmax_scale=scale, causal=True, window_size=window,
            block_table=layer.block_table, softcap=0.0, q_descale=qs, k_descale=ks, v_descale=vs, num_splits=0)

    op_args = (layer.q, layer.k, layer.v, layer.out, None, cu_q, None, used, layer.block_table, qs, ks, vs, None,
               q_tokens, bd.MAX_SEQLEN_K, scale, True, window_left, window_right, 0, None, 0.0)
    fa3 = None
    if with_fa3 and bc.importable("flash_attn_interface"):
        fa3 = bd.fa3_fp8(shape, [layer])[0]
    extra = split_breakdown_calls(op_args) if breakdown else {}
    return wrapper, (lambda: OP_ENTRY(*op_args)), fa3, extra


# The op's num_splits argument (0: the heuristic's count) by position: the op takes fill_params' arguments after
# its first (params).
NUM_SPLITS_ARG = list(inspect.signature(ops.fill_params).parameters)[1:].index("num_splits")


def split_breakdown_calls(op_args: tuple) -> dict[str, Callable]:
    """--breakdown: calls that separate a split plan's host cost from an unsplit one's, on the same shape: the op
    with num_splits=1, the C ABI alone (ctypes; params filled and workspace allocated once) with the heuristic's
    splits and with one, the workspace allocation the op makes per split call, and a bare ctypes call."""
    unsplit_args = op_args[:NUM_SPLITS_ARG] + (1,) + op_args[NUM_SPLITS_ARG + 1:]
    lib = _lib.get_lib()
    stream = torch.cuda.current_stream().cuda_stream
    device = op_args[0].device

    def c_abi_call(args: tuple) -> tuple[Callable, int]:
        params = lib.new_params()
        ops.fill_params(params, *args)
        nbytes = lib.workspace_size(params)
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None
        if workspace is not None:
            params.workspace, params.workspace_bytes = workspace.data_ptr(), nbytes
        # The default argument holds the workspace for as long as the call may run.
        return (lambda _workspace=workspace: lib.fwd(params, stream)), nbytes

    split_call, nbytes = c_abi_call(op_args)
    unsplit_call, _ = c_abi_call(unsplit_args)
    return {"op_unsplit_us": lambda: OP_ENTRY(*unsplit_args),
            "c_abi_us": split_call,
            "c_abi_unsplit_us": unsplit_call,
            "workspace_alloc_us": lambda: torch.empty(nbytes, dtype=torch.uint8, device=device),
            "ctypes_call_us": lib.version}


def prefill_calls(device: torch.device, with_fa3: bool) -> Calls:
    """The same calls for the PREFILL varlen call (k/v packed like q: cu_seqlens_k), no further ones."""
    s = PREFILL
    total = s["requests"] * s["tokens"]
    q = torch.randn(total, s["q_heads"], s["d"], device=device).to(E4M3)
    k = torch.randn(total, s["kv_heads"], s["d"], device=device).to(E4M3)
    v = torch.randn(total, s["kv_heads"], s["d"], device=device).to(E4M3)
    out = torch.empty(total, s["q_heads"], s["d"], dtype=torch.bfloat16, device=device)
    cu = torch.arange(0, total + 1, s["tokens"], dtype=torch.int32, device=device)
    scale = s["d"] ** -0.5
    descale = torch.ones(1, device=device).expand(s["requests"], s["kv_heads"])

    def wrapper() -> Any:
        return fp8attn.flash_attn_varlen_func(
            q=q, k=k, v=v, out=out, cu_seqlens_q=cu, max_seqlen_q=s["tokens"], cu_seqlens_k=cu,
            max_seqlen_k=s["tokens"], softmax_scale=scale, causal=True, q_descale=descale, k_descale=descale,
            v_descale=descale)

    op_args = (q, k, v, out, None, cu, cu, None, None, descale, descale, descale, None, s["tokens"], s["tokens"],
               scale, True, -1, 0, 0, None, 0.0)
    fa3 = None
    if with_fa3 and bc.importable("flash_attn_interface"):
        import flash_attn_interface as fa

        fa_descale = descale.contiguous()
        fa3 = lambda: fa.flash_attn_varlen_func(  # noqa: E731
            q, k, v, cu, cu, s["tokens"], s["tokens"], softmax_scale=scale, causal=True, q_descale=fa_descale,
            k_descale=fa_descale, v_descale=fa_descale)
    return wrapper, (lambda: OP_ENTRY(*op_args)), fa3, {}


def measure(name: str, calls: Calls, args: argparse.Namespace) -> dict:
    wrapper, op, fa3, extra = calls
    # --repeats alternates the wrapper and the op: one machine's host time drifts by 10-30% between runs a minute
    # apart (docs/perf.md, Host path), so a row is the median of several runs and keeps them.
    runs: dict[str, list[float]] = {"eager": [], "op": [], "eager_plain": [], "op_plain": []}
    for _ in range(args.repeats):
        for mode, suffix in ((torch.inference_mode, ""), (contextlib.nullcontext, "_plain")):
            with mode():
                runs["eager" + suffix].append(host_us(wrapper, args.calls, args.sync_every))
                runs["op" + suffix].append(host_us(op, args.calls, args.sync_every))
    gpu = gpu_us(wrapper)
    with torch.inference_mode():
        fa3_us = bc.try_peer("fa3", lambda: host_us(fa3, args.calls, args.sync_every)) if fa3 else None
        row = result_row(name, statistics.median(runs["eager"]), statistics.median(runs["op"]), gpu, fa3_us)
        for key, fn in extra.items():
            row[key] = round(statistics.median(host_us(fn, args.calls, args.sync_every)
                                               for _ in range(args.repeats)), 2)
    row["eager_plain_us"] = round(statistics.median(runs["eager_plain"]), 2)
    row["op_plain_us"] = round(statistics.median(runs["op_plain"]), 2)
    for key, values in runs.items():
        row[f"{key}_us_runs"] = [round(x, 2) for x in values]
    print(f"{name}: eager {row['eager_us']} us (op alone {row['op_us']}), GPU {row['gpu_us']} us, "
          f"FA3 eager {row['fa3_eager_us']}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per shape and implementation")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each timing per shape (the row is their median)")
    parser.add_argument("--sync-every", type=int, default=100, help="calls between stream synchronizations")
    parser.add_argument("--shapes", nargs="+", help="only these decode shape names (the prefill call always runs)")
    parser.add_argument("--ours-only", action="store_true", help="skip FA3 (bench/ab_libs.py passes it)")
    parser.add_argument("--breakdown", action="store_true",
                        help="per decode shape also the op with one split, the C ABI alone (ctypes) with the "
                             "heuristic's splits and with one, the workspace allocation, a bare ctypes call")
    parser.add_argument("--out-dir", type=Path, default=bc.RESULTS_DIR)
    args = parser.parse_args()

    spec = json.loads(bd.shapes_path().read_text())
    shapes = [s for s in spec["shapes"] if not args.shapes or s["name"] in args.shapes]
    device = bc.require_device()
    print(f"torch op backend: {ops.BACKEND}" + (f" ({ops.FALLBACK_REASON})" if ops.FALLBACK_REASON else ""))

    rows = []
    for shape in shapes:
        rows.append(measure(shape["name"], decode_calls(shape, device, not args.ours_only, args.breakdown), args))
        torch.cuda.empty_cache()
    rows.append(measure(PREFILL["name"], prefill_calls(device, not args.ours_only), args))

    meta = bc.run_metadata()
    bc.write_json(args.out_dir / "host_overhead.json", {
        "about": "Host microseconds per eager call (median of calls timed one by one, GPU never waited for inside "
                 "the timing) inside torch.inference_mode as vLLM calls it (the *_plain_us columns: outside it), "
                 "GPU microseconds per call (graph replay), FA3's eager host microseconds; bench/bench_host.py.",
        "grad_mode": "inference_mode",
        "backend": ops.BACKEND, "eager_entry": ops.EAGER_FWD is not None,
        "eager_entry_fallback_reason": ops.EAGER_FALLBACK_REASON, "calls": args.calls, "shapes": rows, "meta": meta})
    print(bc.format_table(["shape", "eager us", "op us", "eager us (plain)", "op us (plain)", "GPU us", "FA3 eager us"],
                          [[r["name"], r["eager_us"], r["op_us"], r["eager_plain_us"], r["op_plain_us"], r["gpu_us"],
                            r["fa3_eager_us"]] for r in rows]))
    if args.breakdown:
        keys = ["op_us", "op_unsplit_us", "c_abi_us", "c_abi_unsplit_us", "workspace_alloc_us", "ctypes_call_us"]
        print(bc.format_table(["shape", *keys], [[r["name"], *(r.get(k) for k in keys)] for r in rows if "c_abi_us" in r]))


if __name__ == "__main__":
    main()
