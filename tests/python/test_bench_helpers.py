"""The benchmarks' arithmetic, file lookup and decode cache layouts (no GPU): HBM floor bytes, windows, TFLOP
counts, tables, paged and contiguous layers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_common  # noqa: E402
import bench_decode  # noqa: E402
import bench_prefill  # noqa: E402


def _shape(**overrides: object) -> dict:
    shape = {"name": "s", "q_heads": 16, "kv_heads": 2, "d": 128, "requests": 8, "q_tokens": 1, "context": 32768,
             "window_left": -1}
    shape.update(overrides)
    return shape


def test_visible_keys_is_the_union_of_the_rows_windows() -> None:
    assert bench_decode.visible_keys(_shape()) == 32768
    # 4 query rows at the end of a 28k context, window 1024 (left 1023): keys [ctx-4-1023, ctx-1].
    assert bench_decode.visible_keys(_shape(context=28672, q_tokens=4, window_left=1023)) == 1027
    assert bench_decode.visible_keys(_shape(context=100, q_tokens=4, window_left=1023)) == 100


def test_floor_bytes() -> None:
    kv, total = bench_decode.bytes_needed(_shape())
    assert kv == 2 * 8 * 32768 * 2 * 128  # llama3.1-70b tp4 8x1 32k: 134 MB of FP8 K and V
    assert total == kv + 8 * 16 * 128 * 3  # + FP8 q and bf16 out


def test_shapes_file_lookup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "shapes.json"
    target.write_text(json.dumps({"shapes": []}))
    monkeypatch.setenv("FP8ATTN_DECODE_SHAPES", str(target))
    assert bench_decode.shapes_path() == target
    monkeypatch.setenv("FP8ATTN_DECODE_SHAPES", str(tmp_path / "missing.json"))
    with pytest.raises(SystemExit, match="not a file"):
        bench_decode.shapes_path()


def test_named_shapes_keep_file_order_and_refuse_unknown_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "shapes.json"
    target.write_text(json.dumps({"shapes": [_shape(name="a"), _shape(name="b"), _shape(name="c")]}))
    monkeypatch.setenv("FP8ATTN_DECODE_SHAPES", str(target))
    assert [s["name"] for s in bench_decode.named_shapes(["c", "a"])] == ["a", "c"]
    with pytest.raises(SystemExit, match="unknown shape"):
        bench_decode.named_shapes(["a", "missing"])


def test_prefill_tflops() -> None:
    # 4 * 16384^2 * 128 * 16 heads * 1 batch = 2.2e15 FLOP in 1 s -> 2199 TFLOP/s; causal counts half.
    assert bench_prefill.tflops(16384, 128, 16, 1, False, 1000.0) == pytest.approx(2.199, rel=1e-3)
    assert bench_prefill.tflops(16384, 128, 16, 1, True, 1000.0) == pytest.approx(2.199 / 2, rel=1e-3)


def test_table_and_geomean() -> None:
    text = bench_common.format_table(["a", "bb"], [[1, 2.34567], [None, "x"]])
    assert text.splitlines() == ["a     bb", "-  -----", "1  2.346", "-      x"]
    assert bench_common.geomean([2.0, 8.0]) == pytest.approx(4.0)


def test_timing_modes_order_the_runs_and_drop_only_a_failing_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def fake_back_to_back(fn, reps):  # the fn itself stands for its captured run; its name is logged
        fn()
        return lambda: ran.append(fn.__name__)

    class FakeEvent:  # elapsed time = how many runs happened between the two records
        def __init__(self, enable_timing: bool) -> None: ...
        def record(self) -> None:
            self.at = len(ran)
        def elapsed_time(self, end: "FakeEvent") -> float:
            return 8.0 * (end.at - self.at)

    def ours() -> None: ...
    def sdpa() -> None: ...
    def peer() -> None:
        raise RuntimeError("peer cannot run this shape")

    monkeypatch.setattr(bench_common, "back_to_back", fake_back_to_back)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    times = bench_common.time_implementations({"ours": ours, "sdpa": sdpa, "peer": peer}, flush=None, warmup=1,
                                              iters=3, optional={"sdpa", "peer"})
    assert ran == ["ours", "sdpa", "ours", "sdpa", "sdpa", "ours", "ours", "sdpa"]  # warm-up, then rotated
    assert times == {"ours": [1.0, 1.0, 1.0], "sdpa": [1.0, 1.0, 1.0]}  # one run of 8 calls per event pair
    with pytest.raises(RuntimeError, match="peer cannot run"):  # our own failure is never swallowed
        bench_common.time_implementations({"peer": peer}, flush=None, iters=1)

    ran.clear()
    times = bench_common.time_implementations({"ours": ours, "sdpa": sdpa}, flush=None, mode="consecutive",
                                              warmup=1, iters=2, settle_s=0.0)
    assert ran == ["ours", "ours", "ours", "sdpa", "sdpa", "sdpa"]  # each settles (one run here), then is timed
    assert times == {"ours": [1.0, 1.0], "sdpa": [1.0, 1.0]}
    with pytest.raises(ValueError, match="timing mode"):
        bench_common.time_implementations({"ours": ours}, flush=None, mode="random")


def test_spread_is_the_p10_p90_range_over_the_median() -> None:
    assert bench_prefill.spread([1.0] * 10) == 0.0
    assert bench_prefill.spread([float(x) for x in range(1, 12)]) == pytest.approx((10.8 - 1.2) / 6.0)


def test_host_overhead_row_has_the_issue_schema() -> None:
    import bench_host

    row = bench_host.result_row("s", 12.3456, 8.0, 20.004, None)
    assert {"name", "eager_us", "gpu_us", "fa3_eager_us"} <= set(row)
    assert (row["eager_us"], row["gpu_us"], row["fa3_eager_us"]) == (12.35, 20.0, None)
    assert bench_host.result_row("s", 1, 1, 1, 74.444)["fa3_eager_us"] == 74.44


@pytest.mark.parametrize("page_size", [16, 256])
def test_paged_layer_holds_each_request_on_its_own_shuffled_pages(page_size: int) -> None:
    shape = _shape(requests=3, q_heads=4, kv_heads=2, d=32, context=1000)
    layer = bench_decode.make_layer(shape, torch.device("cpu"), page_size=page_size)
    pages = -(-1000 // page_size)
    assert tuple(layer.k.shape) == (3 * pages, page_size, 2, 32) and layer.cu_seqlens_k is None
    assert tuple(layer.block_table.shape) == (3, bench_decode.MAX_SEQLEN_K // page_size)
    used = layer.block_table[:, :pages].flatten().tolist()
    assert sorted(used) == list(range(3 * pages))  # every page belongs to exactly one request
    assert layer.block_table[:, pages:].eq(0).all()


def test_contiguous_layer_is_varlen_k_without_a_block_table() -> None:
    shape = _shape(requests=3, q_heads=4, kv_heads=2, d=32, context=1000)
    layer = bench_decode.make_layer(shape, torch.device("cpu"), page_size=0)
    assert layer.block_table is None
    assert tuple(layer.k.shape) == (3000, 2, 32) and tuple(layer.v.shape) == (3000, 2, 32)
    assert layer.cu_seqlens_k.tolist() == [0, 1000, 2000, 3000]


@pytest.mark.parametrize("page_size", [-16, 8, 48])
def test_layer_refuses_page_sizes_the_kernel_or_the_table_cannot_take(page_size: int) -> None:
    with pytest.raises(ValueError, match="page_size"):
        bench_decode.make_layer(_shape(context=64), torch.device("cpu"), page_size=page_size)


@pytest.mark.parametrize("page_size", [16, 0])
def test_decode_call_passes_exactly_one_key_length_argument(monkeypatch: pytest.MonkeyPatch, page_size: int) -> None:
    # The API takes cu_seqlens_k (contiguous varlen K/V) or seqused_k (paged), never both.
    shape = _shape(requests=2, q_heads=4, kv_heads=2, d=32, context=64)
    layer = bench_decode.make_layer(shape, torch.device("cpu"), page_size=page_size)
    seen: list[dict] = []
    monkeypatch.setattr(bench_decode.fp8attn, "flash_attn_varlen_func", lambda **kwargs: seen.append(kwargs))
    (call,) = bench_decode.ours(shape, [layer])
    call()
    (kwargs,) = seen
    assert (kwargs["cu_seqlens_k"] is None) != (kwargs["seqused_k"] is None)
    assert (kwargs["block_table"] is None) == (page_size == 0)
    if page_size == 0:
        assert kwargs["cu_seqlens_k"].tolist() == [0, 64, 128]
    else:
        assert kwargs["seqused_k"].tolist() == [64, 64]


# ---- bench_vllm.py: the vLLM 0.34 replay's planning (pure Python) and its vLLM-shaped inputs ----------------------

import bench_vllm  # noqa: E402  (its planning imports no torch: --dry-run runs without it)


def test_vllm_num_splits_is_32_up_to_the_largest_captured_graph() -> None:
    assert bench_vllm.vllm_num_splits(1) == bench_vllm.vllm_num_splits(512) == 32
    assert bench_vllm.vllm_num_splits(513) == 0


def test_prefill_chunks_give_the_decodes_their_tokens_first() -> None:
    assert bench_vllm.prefill_chunks(10000, 8192, 96) == [(8096, 8096), (1904, 10000)]
    assert bench_vllm.prefill_chunks(4096, 2048, 128) == [(1920, 1920), (1920, 3840), (256, 4096)]
    with pytest.raises(ValueError, match="no room"):
        bench_vllm.prefill_chunks(100, 64, 64)


def test_mixed_steps_are_one_call_with_the_decodes_first() -> None:
    plans = bench_vllm.mixed_plans(32768)
    assert len(plans) >= 6 and plans == bench_vllm.mixed_plans(32768)  # seeded: the same rows every run
    for plan, (model, budget, n_decode, _, _) in zip(plans, bench_vllm.MIXED_STEPS):
        chunk = plan.q_lens[-1]
        assert plan.model == model and plan.n_decode == n_decode == plan.requests - 1
        assert plan.q_lens[:n_decode] == [1] * n_decode and 512 <= chunk <= 4096 and plan.tokens <= budget
        assert all(1024 <= c <= 8192 for c in plan.contexts[:n_decode]) and plan.contexts[-1] >= chunk
        assert plan.num_splits == 0 and plan.name.endswith("@0")  # > 512 tokens: vLLM passes 0
    assert {p.model for p in plans} == set(bench_vllm.MODELS)


def test_decode_and_spec_rows() -> None:
    shapes = json.loads(bench_decode.shapes_path().read_text())
    plans = bench_vllm.build_plans(["decode", "spec"], shapes)
    decode = [p for p in plans if p.kind == "decode"]
    assert [p.name for p in decode[:2]] == [f"{shapes['shapes'][0]['name']}@32", f"{shapes['shapes'][0]['name']}@0"]
    assert len(decode) == 2 * len(shapes["shapes"]) and {p.max_seqlen_k for p in plans} == {shapes["max_seqlen_k"]}
    spec = [p for p in plans if p.kind == "spec"]
    assert spec and all(p.num_splits == 32 and p.tokens <= 512 and set(p.q_lens) == {4} for p in spec)


def test_models_match_the_decode_shapes_of_the_same_model() -> None:
    for shape in json.loads(bench_decode.shapes_path().read_text())["shapes"]:
        model = shape["name"].rsplit("-", 2)[0]
        if model in bench_vllm.MODELS:
            geometry = bench_vllm.MODELS[model]
            assert [geometry[k] for k in ("q_heads", "kv_heads", "d", "window_left")] == \
                [shape[k] for k in ("q_heads", "kv_heads", "d", "window_left")], shape["name"]


def test_vllm_kv_bytes_count_each_requests_visible_keys() -> None:
    plan = bench_vllm.model_plan("g", "mixed", "gemma4-31b-tp4", [1, 2000], [5000, 3000], 32768, n_decode=1)
    # window 1024: the decode sees 1024 keys, the 2000-row chunk min(3000, 1023 + 2000) = 3000.
    assert bench_vllm.kv_bytes(plan) == 2 * (1024 + 3000) * 4 * 256
    assert plan.window_size == (1023, 0) and plan.softmax_scale == 1.0


def test_vllm_rows_option_and_signature_check(tmp_path: Path) -> None:
    assert bench_vllm.parse_kinds("spec,decode") == ["decode", "spec"]
    with pytest.raises(Exception, match="--rows"):
        bench_vllm.parse_kinds("decode,prefill")
    source = tmp_path / "interface.py"
    source.write_text("def flash_attn_varlen_func(q, k, v, *, mask_mod=None):\n    pass\n")
    assert bench_vllm.missing_vllm_keywords(source) == ["dynamic_causal", "aux_tensors"]


def test_vllm_dry_run_needs_no_gpu() -> None:
    import subprocess

    result = subprocess.run([sys.executable, str(Path(bench_vllm.__file__)), "--dry-run", "--rows", "mixed"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "-mixed-b2048-" in result.stdout and "num_splits" in result.stdout


def _small_mixed_plan():  # 2 decodes beside a 40-token chunk; 16-token pages
    return bench_vllm.model_plan("m", "mixed", "llama3.1-70b-tp4", [1, 1, 40], [100, 33, 57], 1024, n_decode=2)


def test_vllm_cache_views_are_vllm_034s() -> None:
    bench_vllm.import_gpu_stack()
    plan = _small_mixed_plan()
    inp = bench_vllm.make_inputs(plan, torch.device("cpu"), seed=0)
    hkv, d = plan.kv_heads, plan.d
    nb = sum(-(-c // 16) for c in plan.contexts)
    assert tuple(inp.cache.shape) == (nb, hkv, 16, 2 * d) and inp.cache.dtype == torch.uint8
    assert tuple(inp.k.shape) == tuple(inp.v.shape) == (nb, 16, hkv, d) and inp.k.dtype == torch.float8_e4m3fn
    assert inp.k.stride() == (hkv * 16 * 2 * d, 2 * d, 16 * 2 * d, 1)  # rows 2d apart, heads 16 * 2d apart
    assert inp.v.data_ptr() - inp.k.data_ptr() == d  # V starts d bytes after K
    full = inp.full
    assert tuple(full.block_table.shape) == (3, 1024 // 16)
    assert full.cu_seqlens_q.tolist() == [0, 1, 2, 42] and full.seqused_k.tolist() == [100, 33, 57]
    assert all(s.shape == (3, hkv) and s.stride() == (0, 0) for s in full.descales)
    used = [p for row, c in zip(full.block_table.tolist(), plan.contexts) for p in row[:-(-c // 16)]]
    assert sorted(used) == list(range(nb))
    decodes, chunk = inp.parts
    assert (decodes.num_splits, chunk.num_splits) == (32, 32)  # each part <= 512 tokens
    assert decodes.cu_seqlens_q.tolist() == [0, 1, 2] and chunk.cu_seqlens_q.tolist() == [0, 40]
    assert chunk.q.data_ptr() == full.q[2:].data_ptr() and chunk.seqused_k.tolist() == [57]
    assert chunk.out.data_ptr() == inp.separate_out[2:].data_ptr() and chunk.max_seqlen_q == 40


def test_vllm_ours_call_passes_vllm_034s_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    bench_vllm.import_gpu_stack()
    plan = _small_mixed_plan()
    inp = bench_vllm.make_inputs(plan, torch.device("cpu"), seed=0)
    seen: list[tuple] = []
    monkeypatch.setattr(bench_vllm.fp8attn, "flash_attn_varlen_func", lambda *a, **kw: seen.append((a, kw)))
    bench_vllm.ours_call(plan, inp, inp.full)()
    ((args, kwargs),) = seen
    assert args[3:] == (40, inp.full.cu_seqlens_q, 1024) and args[1] is inp.k and args[2] is inp.v
    assert kwargs["num_splits"] == 32 and kwargs["causal"] is True and kwargs["fa_version"] == 3  # 42 tokens
    assert kwargs["out"] is inp.full.out and kwargs["window_size"] == (-1, -1)
    assert all(kwargs[k] is None for k in ("s_aux", "scheduler_metadata", *bench_vllm.VLLM_034_KEYWORDS))


def test_phase_probe_converts_cycles_to_microseconds() -> None:
    import phase_probe

    col = {name: i for i, name in enumerate(phase_probe.MARKS)}
    marks = torch.zeros(2, len(phase_probe.MARKS), dtype=torch.int64)
    # CTA 0 at 2 cycles per ns: the barrier 2,000 cycles after entry (1 us), the end 20,000 (10 us); no loop marks.
    marks[0, col["entry"]], marks[0, col["cta_barrier"]], marks[0, col["end"]] = 1000, 3000, 21000
    marks[0, col["entry_ns"]], marks[0, col["end_ns"]] = 500, 10500
    # CTA 1 at 1 cycle per ns, with a loop: done 4,000 cycles in (4 us), the end at 5 us.
    marks[1, col["entry"]], marks[1, col["loop_done"]], marks[1, col["end"]] = 7, 4007, 5007
    marks[1, col["entry_ns"]], marks[1, col["end_ns"]] = 0, 5000
    us = phase_probe.cta_microseconds(marks)
    assert us["cta_barrier"] == pytest.approx([1.0])
    assert us["loop_done"] == pytest.approx([4.0])  # CTA 0 did not record it
    assert us["end"] == pytest.approx([10.0, 5.0])
    assert us["cycles_per_ns"] == pytest.approx([2.0, 1.0])
    assert "entry" not in us and "end_ns" not in us
