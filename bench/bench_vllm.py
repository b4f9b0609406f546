"""vLLM replay: fp8attn against FlashAttention-3 FP8 on the calls vLLM 0.34 actually issues (SPEC §4, "The
serving call"; ../shared/notes/vllm-0.34-call.md).

Every call is built as vLLM 0.34's FlashAttention backend builds it on Hopper with an FP8 KV cache:
- the layer's cache is ONE uint8 tensor [num_blocks, Hkv, 16, 2*d] (16-token pages, vLLM's default block size,
  d256 included), viewed .transpose(1, 2) -> [num_blocks, 16, Hkv, 2*d] and split along the last dim into
  K = [..., :d] and V = [..., d:] (so V starts d bytes after K), each .view(float8_e4m3fn);
- q [tokens, Hq, d] E4M3; out preallocated bf16 (the model dtype); cu_seqlens_q, seqused_k and block_table int32;
  block tables [B, max_seqlen_k / 16] holding shuffled pages, zeros past each request's pages;
- descales: 0-d fp32 scales .expand((B, Hkv)) (strides (0, 0)); max_seqlen_k = max_model_len (32768);
- causal=True, window_size (w - 1, 0) on sliding layers else (-1, -1); softmax scale d^-0.5 (Gemma-4: 1.0);
- num_splits = 32 when the step has <= 512 tokens (vLLM's full-CUDA-graph default), else 0.

Rows (--rows):
  decode  the ten steps of decode_shapes.json, at num_splits 32 ("@32", what vLLM passes) and 0 ("@0");
  mixed   chunked-prefill steps: decoding requests first (vLLM reorders a batch's decodes to its front), then one
          prompt's chunk, in ONE varlen call; each row also times the same work as two fp8attn calls
          (decode-only + prefill-only) as `separate_us` (the issue's target: mixed <= 1.1x separate);
  spec    speculative-decoding verification steps, 4 query tokens per request.
Peers, same run, same tensors: fa3v (the vLLM fork's FA3: two-level accumulation on, what vLLM ships) called as
vLLM's wrapper calls the op, and upstream FA3 (fa3) through its paged entry point; both loaded from the anchor
builds of ../shared/tools/fa3_anchor.sh (.anchors/). A peer that is absent or fails is recorded as null.

Timing: each implementation's call, preceded by a 64 MB L2 flush (as bench_decode flushes between layers), is
captured once in a CUDA graph of --reps calls; after warm-up the implementations' replays are interleaved (the
order rotated per round, bench_common.time_implementations) so all are timed at the same clocks; a flush-only
graph is timed among them and its median subtracted: us = median(flush + call) - median(flush).
Each row also times fp8attn planned from the step's real longest context (`us_at_real_max_seqlen_k`, the bound
an eager call with exact lengths passes): `bound_over_real` near 1 means a graph captured at max_model_len does
the step's real amount of work (split ranges from seqused_k on the device, splits past a short request empty).
Before timing, fp8attn's output is compared with fa3v's (max |diff| printed, not asserted; ~1e-2 expected).

    python bench/bench_vllm.py [--rows decode,mixed,spec] [--iters 30] [--reps 8] [--no-fa3] [--out PATH]
    python bench/bench_vllm.py --dry-run      # the planned rows; needs neither torch nor a GPU

Writes bench/results/vllm_replay.json and .png beside it; prints the table last.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from shapes import shapes_path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_OUT = BENCH_DIR / "results" / "vllm_replay.json"
ANCHORS_DIR = REPO_ROOT / ".anchors"

PAGE = 16                 # vLLM's default block size, also for the d256 (Gemma) layers
MAX_SEQLEN_K = 32768      # max_model_len, what vLLM passes as max_seqlen_k under full CUDA graphs
CUDAGRAPH_MAX_TOKENS = 512  # vLLM's largest full-CUDA-graph capture size by default
SPLITS_UNDER_GRAPHS = 32  # flash_attn_max_num_splits_for_cuda_graph (config/attention.py:66)
KINDS = ("decode", "mixed", "spec")
SEED = 1234
# Keywords vLLM 0.34 passes that fp8attn is gaining in parallel; without them its call raises TypeError.
VLLM_034_KEYWORDS = ("dynamic_causal", "mask_mod", "aux_tensors")

# Per-GPU attention geometry (after tensor parallelism), named as in decode_shapes.json.
MODELS: dict[str, dict[str, Any]] = {
    "llama3.1-8b-tp1": {"q_heads": 32, "kv_heads": 8, "d": 128, "window_left": -1},
    "llama3.1-70b-tp4": {"q_heads": 16, "kv_heads": 2, "d": 128, "window_left": -1},
    "qwen3-32b-tp2": {"q_heads": 32, "kv_heads": 4, "d": 128, "window_left": -1},
    # Gemma-4 31B's sliding layers (d256, window 1024), as decode_shapes.json's gemma rows.
    "gemma4-31b-tp4": {"q_heads": 8, "kv_heads": 4, "d": 256, "window_left": 1023},
}

# Chunked-prefill steps: (model, token budget, decoding requests, prompt length, which chunk of the prompt:
# 0-based, -1 = its last). vLLM's scheduler gives each decode one token and the prompt the rest of the budget, so
# a chunk is budget - decodes tokens, except a prompt's last chunk, which is what remains of it: under the 8192
# budget only last chunks fall in SPEC's 512-4096 range.
MIXED_STEPS = [
    ("llama3.1-8b-tp1", 2048, 64, 6000, 1),
    ("llama3.1-8b-tp1", 8192, 96, 10000, -1),
    ("llama3.1-70b-tp4", 2048, 128, 4096, 0),
    ("llama3.1-70b-tp4", 8192, 48, 12000, -1),
    ("qwen3-32b-tp2", 2048, 32, 8000, 2),
    ("qwen3-32b-tp2", 8192, 128, 9000, -1),
    ("gemma4-31b-tp4", 2048, 100, 4000, 1),
    ("gemma4-31b-tp4", 8192, 48, 11000, -1),
]
MIXED_CHUNK_RANGE = (512, 4096)    # SPEC §4: a prefill chunk of 512-4096 tokens
MIXED_DECODE_RANGE = (30, 130)     # beside 30-130 decoding requests
DECODE_CONTEXT_RANGE = (1024, 8192)  # the decoding requests' contexts, random (seeded)

# Spec-decode verification steps: (model, requests, context); SPEC_TOKENS query tokens per request.
SPEC_TOKENS = 4
SPEC_STEPS = [
    ("llama3.1-8b-tp1", 64, 4096),
    ("llama3.1-70b-tp4", 32, 8192),
    ("qwen3-32b-tp2", 16, 16384),
    ("gemma4-31b-tp4", 32, 16384),
]


# ---- planning: pure Python, so that --dry-run and the CPU tests need no torch ---------------------------------

@dataclass
class Plan:
    """One replayed step: per request its query tokens and its context (keys, the new tokens included), in the
    order of the call's rows. A mixed step's first ``n_decode`` requests are its decodes, the last its chunk."""
    name: str
    kind: str
    model: str
    q_heads: int
    kv_heads: int
    d: int
    window_left: int
    softmax_scale: float
    q_lens: list[int]
    contexts: list[int]
    num_splits: int
    max_seqlen_k: int = MAX_SEQLEN_K
    n_decode: int = 0  # mixed only

    @property
    def requests(self) -> int:
        return len(self.q_lens)

    @property
    def tokens(self) -> int:
        return sum(self.q_lens)

    @property
    def max_seqlen_q(self) -> int:
        return max(self.q_lens)

    @property
    def window_size(self) -> tuple[int, int]:
        # What vLLM passes (as bench_decode.window_arg): (sliding_window - 1, 0) on sliding layers, else (-1, -1).
        return (self.window_left, 0) if self.window_left >= 0 else (-1, -1)

    @property
    def kv_MB(self) -> float:
        return kv_bytes(self) / 1e6


def vllm_num_splits(tokens: int) -> int:
    """num_splits as vLLM 0.34 passes it under the default full CUDA graphs: 32 when the step fits a captured
    graph (<= 512 tokens), else 0 (FA3's heuristic)."""
    return SPLITS_UNDER_GRAPHS if tokens <= CUDAGRAPH_MAX_TOKENS else 0


def softmax_scale_for(model: str, d: int) -> float:
    # Gemma-4 runs QK-norm and passes scale 1.0 (vllm-0.34-call.md); the others 1/sqrt(d).
    return 1.0 if model.startswith("gemma4") else d ** -0.5


def visible_keys(q_len: int, context: int, window_left: int) -> int:
    """Keys a request's q_len rows see together: the union of their windows, or the whole context (the same
    rule as bench_decode.visible_keys)."""
    return context if window_left < 0 else min(context, window_left + q_len)


def kv_bytes(plan: Plan) -> int:
    """FP8 K and V bytes the step must read at least: each request's visible keys."""
    keys = sum(visible_keys(q, c, plan.window_left) for q, c in zip(plan.q_lens, plan.contexts))
    return 2 * keys * plan.kv_heads * plan.d


def prefill_chunks(prompt_len: int, budget: int, n_decode: int) -> list[tuple[int, int]]:
    """(chunk tokens, context after the chunk) of each step that prefills a prompt of prompt_len tokens beside
    n_decode decoding requests: vLLM schedules the decodes first (one token each) and gives the prompt what is left
    of the token budget."""
    room = budget - n_decode
    if room <= 0:
        raise ValueError(f"budget {budget} leaves no room for a chunk beside {n_decode} decodes")
    chunks, done = [], 0
    while done < prompt_len:
        chunk = min(room, prompt_len - done)
        done += chunk
        chunks.append((chunk, done))
    return chunks


def model_plan(name: str, kind: str, model: str, q_lens: list[int], contexts: list[int], max_seqlen_k: int,
               num_splits: Optional[int] = None, n_decode: int = 0) -> Plan:
    geometry = MODELS[model]
    splits = vllm_num_splits(sum(q_lens)) if num_splits is None else num_splits
    return Plan(name=f"{name}@{splits}", kind=kind, model=model, q_heads=geometry["q_heads"],
                kv_heads=geometry["kv_heads"], d=geometry["d"], window_left=geometry["window_left"],
                softmax_scale=softmax_scale_for(model, geometry["d"]), q_lens=q_lens, contexts=contexts,
                num_splits=splits, max_seqlen_k=max_seqlen_k, n_decode=n_decode)


def decode_plans(shapes: list[dict[str, Any]], max_seqlen_k: int) -> list[Plan]:
    """Each decode_shapes.json step at num_splits 32 (what vLLM passes for <= 512 tokens) and at 0."""
    plans = []
    for shape in shapes:
        model = shape["name"].rsplit("-", 2)[0]  # "llama3.1-8b-tp1-32x1-2k" -> "llama3.1-8b-tp1"
        scale = softmax_scale_for(model, shape["d"])
        for splits in (SPLITS_UNDER_GRAPHS, 0):
            plans.append(Plan(
                name=f"{shape['name']}@{splits}", kind="decode", model=model, q_heads=shape["q_heads"],
                kv_heads=shape["kv_heads"], d=shape["d"], window_left=shape["window_left"], softmax_scale=scale,
                q_lens=[shape["q_tokens"]] * shape["requests"], contexts=[shape["context"]] * shape["requests"],
                num_splits=splits, max_seqlen_k=max_seqlen_k))
    return plans


def mixed_plans(max_seqlen_k: int, seed: int = SEED) -> list[Plan]:
    """MIXED_STEPS as ONE varlen call each: the decodes (1 token, random seeded context) first, then the chunk
    (its context = the prompt's earlier chunks + the chunk)."""
    plans = []
    for index, (model, budget, n_decode, prompt_len, which) in enumerate(MIXED_STEPS):
        chunk, context = prefill_chunks(prompt_len, budget, n_decode)[which]
        if not (MIXED_CHUNK_RANGE[0] <= chunk <= MIXED_CHUNK_RANGE[1]
                and MIXED_DECODE_RANGE[0] <= n_decode <= MIXED_DECODE_RANGE[1]):
            raise ValueError(f"mixed step {index}: chunk {chunk} beside {n_decode} decodes is outside SPEC's "
                             f"{MIXED_CHUNK_RANGE} tokens beside {MIXED_DECODE_RANGE} requests")
        rng = random.Random(seed + index)
        decode_contexts = [rng.randint(*DECODE_CONTEXT_RANGE) for _ in range(n_decode)]
        plans.append(model_plan(f"{model}-mixed-b{budget}-{n_decode}d+{chunk}p", "mixed", model,
                                [1] * n_decode + [chunk], decode_contexts + [context], max_seqlen_k,
                                n_decode=n_decode))
    return plans


def spec_plans(max_seqlen_k: int) -> list[Plan]:
    return [model_plan(f"{model}-spec-{requests}x{SPEC_TOKENS}-{context // 1024}k", "spec", model,
                       [SPEC_TOKENS] * requests, [context] * requests, max_seqlen_k)
            for model, requests, context in SPEC_STEPS]


def build_plans(kinds: list[str], shapes_file: Optional[dict[str, Any]] = None) -> list[Plan]:
    spec = shapes_file if shapes_file is not None else json.loads(shapes_path().read_text())
    max_seqlen_k = int(spec.get("max_model_len", spec.get("max_seqlen_k", MAX_SEQLEN_K)))
    if spec.get("page_size", PAGE) != PAGE:
        raise SystemExit(f"decode_shapes.json says page_size {spec['page_size']}; this replay uses {PAGE}")
    builders = {"decode": lambda: decode_plans(spec["shapes"], max_seqlen_k),
                "mixed": lambda: mixed_plans(max_seqlen_k), "spec": lambda: spec_plans(max_seqlen_k)}
    return [plan for kind in kinds for plan in builders[kind]()]


def parse_kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"--rows: a comma list of {', '.join(KINDS)}; got {text!r}")
    return [k for k in KINDS if k in kinds]  # the file's order, each once


def missing_vllm_keywords(interface_py: Path = REPO_ROOT / "python" / "fp8attn" / "interface.py") -> list[str]:
    """VLLM_034_KEYWORDS absent from fp8attn.flash_attn_varlen_func's signature, read from the source (no torch)."""
    tree = ast.parse(interface_py.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "flash_attn_varlen_func":
            names = {a.arg for a in node.args.args + node.args.kwonlyargs}
            return [k for k in VLLM_034_KEYWORDS if k not in names] if node.args.kwarg is None else []
    return list(VLLM_034_KEYWORDS)


def print_plan(plans: list[Plan]) -> None:
    """The planned rows as a plain table (bench_common.format_table needs torch to import)."""
    headers = ("name", "kind", "num_splits", "tokens", "requests", "max_q", "kv_MB")
    rows = [(p.name, p.kind, str(p.num_splits), str(p.tokens), str(p.requests), str(p.max_seqlen_q),
             f"{p.kv_MB:.1f}") for p in plans]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


# ---- the GPU side: torch, bench_common and fp8attn are imported only when measuring -----------------------------

torch: Any = None
bc: Any = None
fp8attn: Any = None


def import_gpu_stack() -> None:
    """Imports torch, bench_common (which puts python/ on sys.path) and fp8attn into this module's globals."""
    global torch, bc, fp8attn
    import torch as torch_module

    import bench_common
    import fp8attn as fp8attn_module

    torch, bc, fp8attn = torch_module, bench_common, fp8attn_module


def load_peers(enabled: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """{"fa3v": module, "fa3": module} for what fa3_anchor.load() finds built, and a status line per peer."""
    if not enabled:
        return {}, {"fa3v": "disabled (--no-fa3)", "fa3": "disabled (--no-fa3)"}
    libs: dict[str, Any] = {}
    if (ANCHORS_DIR / "fa3_anchor.py").is_file():
        sys.path.insert(0, str(ANCHORS_DIR))
        try:
            import fa3_anchor

            libs = fa3_anchor.load()
        except Exception as err:  # a broken anchor build must not stop our own measurement
            print(f"fa3_anchor.load() failed: {type(err).__name__}: {err}"[:300])
    else:
        print(f"{ANCHORS_DIR}/fa3_anchor.py not found (../shared/tools/fa3_anchor.sh prepare, then build)")
    status = {name: "loaded" if name in libs else "not importable: its columns are null" for name in ("fa3v", "fa3")}
    for name, line in status.items():
        print(f"peer {name}: {line}")
    return libs, status


@dataclass
class Batch:
    """The arguments of one varlen call over some of a step's requests (all of them, or a mixed step's decodes or
    its chunk): views into the step's tensors."""
    q: Any
    out: Any
    cu_seqlens_q: Any
    seqused_k: Any
    block_table: Any
    descales: tuple[Any, Any, Any]  # (B, Hkv) expand()ed views of 0-d scales, as vLLM passes them
    max_seqlen_q: int
    num_splits: int


@dataclass
class StepInputs:
    cache: Any  # [num_blocks, Hkv, PAGE, 2*d] uint8: vLLM's per-layer cache
    k: Any      # [num_blocks, PAGE, Hkv, d] E4M3 views of it (V = K + d bytes)
    v: Any
    full: Batch
    parts: list[Batch] = field(default_factory=list)  # mixed: [decodes, chunk], writing into separate_out
    separate_out: Any = None


def vllm_kv_views(cache: Any, d: int) -> tuple[Any, Any]:
    """K and V as vLLM 0.34 hands them to the kernel: [nb, Hkv, bs, 2d] -> transpose(1, 2) -> split at d -> E4M3."""
    k, v = cache.transpose(1, 2).split(d, dim=-1)
    return k.view(torch.float8_e4m3fn), v.view(torch.float8_e4m3fn)


def random_e4m3_(cache: Any, blocks_per_fill: int = 4096) -> None:
    """Fills a uint8 cache with E4M3 bytes of N(0, 1) values, a slab at a time to bound the fp32 temporary."""
    for slab in cache.split(blocks_per_fill):
        slab.copy_(torch.randn(slab.shape, device=slab.device).to(torch.float8_e4m3fn).view(torch.uint8))


def int32(values: list[int], device: Any) -> Any:
    return torch.tensor(values, dtype=torch.int32, device=device)


def cu_seqlens(q_lens: list[int], device: Any) -> Any:
    return int32([0, *itertools.accumulate(q_lens)], device)


def make_batch(plan: Plan, lo: int, hi: int, q: Any, out: Any, block_table: Any, seqused_k: Any,
               scales: tuple[Any, Any, Any], num_splits: int) -> Batch:
    """Requests lo..hi-1 of the step as one call's arguments (their q/out rows, table rows, lengths)."""
    device = q.device
    row0, row1 = sum(plan.q_lens[:lo]), sum(plan.q_lens[:hi])
    descales = tuple(s.expand(hi - lo, plan.kv_heads) for s in scales)
    return Batch(q=q[row0:row1], out=out[row0:row1], cu_seqlens_q=cu_seqlens(plan.q_lens[lo:hi], device),
                 seqused_k=seqused_k[lo:hi], block_table=block_table[lo:hi], descales=descales,
                 max_seqlen_q=max(plan.q_lens[lo:hi]), num_splits=num_splits)


def make_inputs(plan: Plan, device: Any, seed: int) -> StepInputs:
    """The step's cache (random E4M3), shuffled block tables, q, bf16 out and descales, vLLM-shaped."""
    torch.manual_seed(seed)
    pages = [math.ceil(c / PAGE) for c in plan.contexts]
    num_blocks = sum(pages)
    cache = torch.empty(num_blocks, plan.kv_heads, PAGE, 2 * plan.d, dtype=torch.uint8, device=device)
    random_e4m3_(cache)
    k, v = vllm_kv_views(cache, plan.d)
    # vLLM's table is max_model_len / block_size wide, zeros past a request's pages; FA3 takes a paged call's
    # max_seqlen_k from this width, so it equals the max_seqlen_k passed to fp8attn.
    table = torch.zeros(plan.requests, plan.max_seqlen_k // PAGE, dtype=torch.int32, device=device)
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)
    start = 0
    for row, n in enumerate(pages):
        table[row, :n] = perm[start:start + n]
        start += n
    seqused_k = int32(plan.contexts, device)
    q = torch.randn(plan.tokens, plan.q_heads, plan.d, device=device).to(torch.float8_e4m3fn)
    out = torch.empty(plan.tokens, plan.q_heads, plan.d, dtype=torch.bfloat16, device=device)
    scales = tuple(torch.rand((), device=device) + 0.5 for _ in range(3))  # per-tensor q/k/v scales, 0-d fp32
    full = make_batch(plan, 0, plan.requests, q, out, table, seqused_k, scales, plan.num_splits)
    inp = StepInputs(cache=cache, k=k, v=v, full=full)
    if plan.kind == "mixed":  # the same work issued as two calls: the decodes alone, then the chunk alone
        inp.separate_out = torch.empty_like(out)
        n = plan.n_decode
        inp.parts = [make_batch(plan, 0, n, q, inp.separate_out, table, seqused_k, scales, vllm_num_splits(n)),
                     make_batch(plan, n, plan.requests, q, inp.separate_out, table, seqused_k, scales,
                                vllm_num_splits(plan.tokens - n))]
    return inp


def ours_call(plan: Plan, inp: StepInputs, b: Batch, max_seqlen_k: Optional[int] = None) -> Callable[[], Any]:
    """fp8attn with exactly the arguments of vLLM 0.34's main call (flash_attn.py:1437-1462); max_seqlen_k
    overrides the plan's (the captured bound) for the real-length twin of a row."""
    qd, kd, vd = b.descales
    seqlen_k_bound = plan.max_seqlen_k if max_seqlen_k is None else max_seqlen_k
    return lambda: fp8attn.flash_attn_varlen_func(
        b.q, inp.k, inp.v, b.max_seqlen_q, b.cu_seqlens_q, seqlen_k_bound, seqused_k=b.seqused_k,
        softmax_scale=plan.softmax_scale, causal=True, window_size=plan.window_size, block_table=b.block_table,
        out=b.out, q_descale=qd, k_descale=kd, v_descale=vd, num_splits=b.num_splits, s_aux=None,
        scheduler_metadata=None, fa_version=3, dynamic_causal=None, mask_mod=None, aux_tensors=None)


def fa3v_call(lib: Any, plan: Plan, inp: StepInputs, out: Any) -> Callable[[], Any]:
    """The vLLM fork's FA3 as vLLM's wrapper (vllm_flash_attn.flash_attn_varlen_func, fa_version=3) calls its op:
    the fork's hopper flash_attn_varlen_func has no block_table/out, so this goes through _flash_attn_forward,
    which hands the same argument list to flash_attn_3_cuda.fwd."""
    b = inp.full
    qd, kd, vd = b.descales
    return lambda: lib._flash_attn_forward(
        q=b.q, k=inp.k, v=inp.v, k_new=None, v_new=None, qv=None, out=out, cu_seqlens_q=b.cu_seqlens_q,
        cu_seqlens_k=None, cu_seqlens_k_new=None, seqused_q=None, seqused_k=b.seqused_k,
        max_seqlen_q=b.max_seqlen_q, max_seqlen_k=plan.max_seqlen_k, page_table=b.block_table, kv_batch_idx=None,
        leftpad_k=None, rotary_cos=None, rotary_sin=None, seqlens_rotary=None, q_descale=qd, k_descale=kd,
        v_descale=vd, softmax_scale=plan.softmax_scale, causal=True, window_size=plan.window_size, softcap=0.0,
        rotary_interleaved=True, scheduler_metadata=None, num_splits=b.num_splits, pack_gqa=None, sm_margin=0,
        s_aux=None)


def fa3_call(lib: Any, plan: Plan, inp: StepInputs) -> Callable[[], Any]:
    """Upstream FA3 on the same tensors through flash_attn_with_kvcache (its varlen function has no page table,
    and its _flash_attn_forward is a functional custom op that must not be handed `out`): max_seqlen_k is the
    table's width x 16, the value passed to the others; out is allocated per call (no kernel)."""
    b = inp.full
    qd, kd, vd = b.descales
    return lambda: lib.flash_attn_with_kvcache(
        b.q, inp.k, inp.v, cache_seqlens=b.seqused_k, page_table=b.block_table, cu_seqlens_q=b.cu_seqlens_q,
        max_seqlen_q=b.max_seqlen_q, q_descale=qd, k_descale=kd, v_descale=vd, softmax_scale=plan.softmax_scale,
        causal=True, window_size=plan.window_size, num_splits=b.num_splits)


def separate_call(plan: Plan, inp: StepInputs) -> Callable[[], Any]:
    calls = [ours_call(plan, inp, part) for part in inp.parts]

    def run() -> None:
        for call in calls:
            call()
    return run


def max_abs_diff(a: Any, b: Any) -> float:
    return (a.float() - b.float()).abs().max().item()


def check_outputs(plan: Plan, inp: StepInputs, peers: dict[str, Callable[[], Any]],
                  fa3v_out: Any) -> dict[str, Optional[float]]:
    """Eager runs before timing: fp8attn must give finite output; its max |diff| against each peer (and, for a
    mixed step, against its own two separate calls) is returned and printed, never asserted."""
    ours_call(plan, inp, inp.full)()
    torch.cuda.synchronize()
    ours = inp.full.out
    if not torch.isfinite(ours.float()).all():
        raise RuntimeError(f"{plan.name}: fp8attn produced non-finite output; not timing a broken kernel")
    def fa3v_diff() -> float:  # fa3v writes into the preallocated fa3v_out, as vLLM's out
        peers["fa3v"]()
        return max_abs_diff(ours, fa3v_out)

    diffs: dict[str, Optional[float]] = {"fa3v": None, "fa3": None, "separate": None}
    if "fa3v" in peers:
        diffs["fa3v"] = bc.try_peer("fa3v", fa3v_diff)
    if "fa3" in peers:  # upstream FA3 returns its output
        diffs["fa3"] = bc.try_peer("fa3", lambda: max_abs_diff(ours, peers["fa3"]()))
    if inp.parts:
        separate_call(plan, inp)()
        diffs["separate"] = max_abs_diff(ours, inp.separate_out)
    found = [f"{name} {diff:.3g}" for name, diff in diffs.items() if diff is not None]
    print(f"  max |fp8attn out - other|: {', '.join(found) if found else 'no peer to compare with'}")
    return diffs


def flushed(flush: Any, call: Callable[[], Any]) -> Callable[[], None]:
    """The call after an L2 flush, as each layer runs in bench_decode's graphs (flush time subtracted later)."""
    def run() -> None:
        flush()
        call()
    return run


def bench_plan(plan: Plan, libs: dict[str, Any], flush: Any, args: argparse.Namespace, device: Any,
               seed: int) -> dict[str, Any]:
    inp = make_inputs(plan, device, seed)
    fa3v_out = torch.empty_like(inp.full.out)
    peers: dict[str, Callable[[], Any]] = {}
    if "fa3v" in libs:
        peers["fa3v"] = fa3v_call(libs["fa3v"], plan, inp, fa3v_out)
    if "fa3" in libs:
        peers["fa3"] = fa3_call(libs["fa3"], plan, inp)
    diffs = check_outputs(plan, inp, peers, fa3v_out)

    fns: dict[str, Callable[[], Any]] = {"flush": flush, "ours": flushed(flush, ours_call(plan, inp, inp.full))}
    # The same call planned from the step's real longest context instead of max_model_len: what an eager call with
    # exact bounds gets. Equal times mean the graph captured at the bound does the step's real amount of work
    # (issue 34, item 3: split ranges and empty splits come from seqused_k on the device).
    real_max_seqlen_k = max(plan.contexts)
    if real_max_seqlen_k < plan.max_seqlen_k:
        fns["ours_real_bound"] = flushed(flush, ours_call(plan, inp, inp.full, real_max_seqlen_k))
    if inp.parts:
        fns["separate"] = flushed(flush, separate_call(plan, inp))
    fns.update({name: flushed(flush, call) for name, call in peers.items() if diffs[name] is not None})
    times = bc.time_implementations(fns, flush=None, mode="interleaved", warmup=args.warmup, iters=args.iters,
                                    reps=args.reps, optional=set(peers))
    flush_ms = statistics.median(times["flush"])

    def us(name: str) -> Optional[float]:  # per call, the flush before it taken off; None for an absent peer
        return (statistics.median(times[name]) - flush_ms) * 1e3 if name in times else None

    row: dict[str, Any] = {
        "name": plan.name, "kind": plan.kind, "model": plan.model, "num_splits": plan.num_splits, "us": us("ours"),
        "fa3v_fp8_us_same_run": us("fa3v"), "fa3_fp8_us_same_run": us("fa3"), "tokens": plan.tokens,
        "kv_MB": round(plan.kv_MB, 3), "separate_us": us("separate"), "requests": plan.requests,
        "max_seqlen_q": plan.max_seqlen_q, "window_size": list(plan.window_size), "softmax_scale": plan.softmax_scale,
        "separate_num_splits": [p.num_splits for p in inp.parts] or None,
        "max_abs_diff_fa3v": diffs["fa3v"], "max_abs_diff_fa3": diffs["fa3"],
        "max_abs_diff_separate": diffs["separate"], "flush_us": flush_ms * 1e3,
        "us_at_real_max_seqlen_k": us("ours_real_bound"), "real_max_seqlen_k": real_max_seqlen_k,
    }
    for peer in ("fa3v", "fa3"):
        peer_us = row[f"{peer}_fp8_us_same_run"]
        row[f"speedup_vs_{peer}"] = peer_us / row["us"] if peer_us else None
    row["mixed_over_separate"] = row["us"] / row["separate_us"] if row["separate_us"] else None
    row["bound_over_real"] = (row["us"] / row["us_at_real_max_seqlen_k"]) if row["us_at_real_max_seqlen_k"] else None
    del inp, fa3v_out, peers, fns
    torch.cuda.empty_cache()
    return row


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Bars of each row's speedup over fa3v (and upstream FA3), same run; 1.0 marks parity."""
    plotted = [r for r in rows if r["speedup_vs_fa3v"] or r["speedup_vs_fa3"]]
    if not plotted:
        print("no peer timings: no PNG written")
        return
    plt = bc.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(max(8, 0.35 * len(plotted)), 5))
    xs = range(len(plotted))
    for offset, key, label in ((-0.2, "speedup_vs_fa3v", "vs fa3v (vLLM fork FA3 FP8)"),
                               (0.2, "speedup_vs_fa3", "vs fa3 (upstream FA3 FP8)")):
        pts = [(x + offset, r[key]) for x, r in zip(xs, plotted) if r[key]]
        if pts:
            ax.bar(*zip(*pts), 0.4, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"[{r['kind']}] {r['name']}" for r in plotted], rotation=70, ha="right", fontsize=6)
    ax.set_ylabel("fp8attn speedup (peer us / fp8attn us)")
    ax.set_title("vLLM 0.34 call replay, same run (higher is better)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    bc.save_figure(fig, path)


def print_results(rows: list[dict[str, Any]]) -> None:
    headers = ["name", "kind", "splits", "tokens", "KV MB", "us", "fa3v us", "fa3 us", "x fa3v", "x fa3",
               "separate us", "mixed/sep", "bound/real", "|d| fa3v"]
    table = [[r["name"], r["kind"], r["num_splits"], r["tokens"], r["kv_MB"], r["us"], r["fa3v_fp8_us_same_run"],
              r["fa3_fp8_us_same_run"], r["speedup_vs_fa3v"], r["speedup_vs_fa3"], r["separate_us"],
              r["mixed_over_separate"], r["bound_over_real"], r["max_abs_diff_fa3v"]] for r in rows]
    print(bc.format_table(headers, table))
    for peer in ("fa3v", "fa3"):
        ratios = [r[f"speedup_vs_{peer}"] for r in rows if r[f"speedup_vs_{peer}"]]
        if ratios:
            behind = [r["name"] for r in rows if r[f"speedup_vs_{peer}"] and r[f"speedup_vs_{peer}"] < 1]
            print(f"geomean speedup vs {peer}: {bc.geomean(ratios):.3f}x over {len(ratios)} rows; "
                  f"slower on {len(behind)}{': ' + ', '.join(behind) if behind else ''}")
        else:
            print(f"{peer}: no timings (not importable or failed): its columns are null")
    over = [r["name"] for r in rows if r["mixed_over_separate"] and r["mixed_over_separate"] > 1.1]
    if any(r["mixed_over_separate"] for r in rows):
        print(f"mixed > 1.1x separate on: {', '.join(over) if over else 'none'}")


def measure(plans: list[Plan], args: argparse.Namespace) -> None:
    import_gpu_stack()
    missing = [k for k in VLLM_034_KEYWORDS if k not in inspect.signature(fp8attn.flash_attn_varlen_func).parameters]
    if missing:
        raise SystemExit(f"fp8attn.flash_attn_varlen_func lacks vLLM 0.34's keywords {missing}: vLLM's call would "
                         "raise TypeError, and this benchmark replays that call exactly")
    device = bc.require_device()
    libs, peer_status = load_peers(not args.no_fa3)
    flush = bc.L2Flush(device, args.flush_mb << 20, kind=args.flush_kind)
    rows = []
    for index, plan in enumerate(plans):
        print(f"{plan.name} [{plan.kind}]: {plan.requests} requests, {plan.tokens} tokens, "
              f"num_splits {plan.num_splits}, {plan.kv_MB:.1f} MB of KV")
        row = bench_plan(plan, libs, flush, args, device, SEED + index)
        print(f"  {row['us']:.2f} us; fa3v {row['fa3v_fp8_us_same_run']}; fa3 {row['fa3_fp8_us_same_run']}"
              + (f"; separate {row['separate_us']:.2f} us" if row["separate_us"] else ""))
        rows.append(row)

    meta = bc.run_metadata()
    bc.write_json(args.out, {
        "rows": rows, "commit": meta["commit"], "gpu": meta["gpu"], "date": meta["date"], "meta": meta,
        "peers": peer_status, "timing": "interleaved", "iters": args.iters, "reps": args.reps,
        "warmup": args.warmup, "flush_bytes": flush.nbytes, "flush_kind": flush.kind, "page_size": PAGE,
        "max_seqlen_k": plans[0].max_seqlen_k if plans else MAX_SEQLEN_K,
        "method": "us = median(flush + call) - median(flush), per call, CUDA graphs of `reps` calls, "
                  "implementations interleaved; mixed rows' separate_us = decode-only + prefill-only fp8attn calls"})
    plot(rows, args.out.with_suffix(".png"))
    print_results(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=parse_kinds, default=list(KINDS), help="comma list of decode,mixed,spec")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON; the PNG goes beside it")
    parser.add_argument("--reps", type=int, default=8, help="calls per captured graph (each after its L2 flush)")
    parser.add_argument("--iters", type=int, default=30, help="timed graph replays per implementation, interleaved")
    parser.add_argument("--warmup", type=int, default=3, help="untimed replays of each graph first")
    parser.add_argument("--flush-mb", type=int, default=64, help="L2 flush buffer before each call, MiB "
                        "(bench_decode's FLUSH_MB)")
    parser.add_argument("--flush-kind", choices=("zero", "read"), default="zero",
                        help="zero_() the buffer (bench_decode's `us`) or read it (bench_common.L2Flush)")
    parser.add_argument("--no-fa3", action="store_true", help="time fp8attn alone (fa3/fa3v columns null)")
    parser.add_argument("--dry-run", "--list", action="store_true", dest="dry_run",
                        help="print the planned rows and exit (no torch, no GPU)")
    args = parser.parse_args()

    plans = build_plans(args.rows)
    if args.dry_run:
        print_plan(plans)
        print(f"{len(plans)} rows; page size {PAGE}; max_seqlen_k {plans[0].max_seqlen_k if plans else '-'}")
        missing = missing_vllm_keywords()
        print("fp8attn.flash_attn_varlen_func accepts vLLM 0.34's keywords" if not missing else
              f"NOTE: fp8attn.flash_attn_varlen_func lacks {missing}; a measuring run stops until it has them")
        return
    measure(plans, args)


if __name__ == "__main__":
    main()
