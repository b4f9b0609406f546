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
