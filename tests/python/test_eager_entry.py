"""The eager entry (fp8attn_eager.fwd, src/torch_op/eager_entry.cpp): the Python wrappers' eager calls go past
torch's dispatcher into the same C++ as the compiled op. It must give the op's results bit for bit and the op's
refusals word for word, hand back every call the dispatcher has to see, and say why when it is not loaded."""

from __future__ import annotations

import sysconfig
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import fp8attn  # noqa: E402
from fp8attn import _lib, interface, ops  # noqa: E402

E4M3 = torch.float8_e4m3fn


def _entry_path() -> Any:
    try:
        folder = _lib.get_lib().path.parent
    except _lib.LibraryNotFoundError as err:
        pytest.skip(str(err))
    return folder / f"fp8attn_eager{sysconfig.get_config_var('EXT_SUFFIX')}"


def _require_entry() -> Any:
    if ops.EAGER_FWD is None:
        pytest.skip(f"the eager entry is not loaded: {ops.EAGER_FALLBACK_REASON}")
    return ops.EAGER_FWD


def test_eager_entry_serves_when_built_for_this_torch() -> None:
    path = _entry_path()
    if not path.is_file():
        pytest.skip(f"{path} is not built (scripts/build_torch_op.sh builds it next to the op)")
    if ops.BACKEND != "compiled":
        pytest.skip(f"the compiled op is not loaded: {ops.FALLBACK_REASON}")
    assert ops.EAGER_FWD is not None, ops.EAGER_FALLBACK_REASON
    assert ops.EAGER_FALLBACK_REASON is None
    assert interface._EAGER_FWD is ops.EAGER_FWD


def test_eager_entry_loads_only_under_its_torch_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    _require_entry()
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    module, reason = ops._load_eager_entry()  # a source checkout ships no source to compile another from
    assert module is None and "was built for another torch, not 2.99.0" in reason
    monkeypatch.undo()
    monkeypatch.setenv("FP8ATTN_EAGER_ENTRY", "0")
    assert ops._load_eager_entry() == (None, "FP8ATTN_EAGER_ENTRY=0")


def test_eager_entry_version_is_read_from_the_file(tmp_path: Any) -> None:
    module = tmp_path / "fp8attn_eager.so"
    module.write_bytes(b"\x7fELF...built for torch " + torch.__version__.encode() + b"\0more")
    assert ops._eager_entry_serves(module)
    module.write_bytes(b"\x7fELF...built for torch " + torch.__version__.encode() + b"1\0more")
    assert not ops._eager_entry_serves(module)


def test_eager_entry_hands_back_calls_off_the_gpu() -> None:
    # CPU and meta tensors are the dispatcher's (the fake, or the op's own device refusal).
    fwd = _require_entry()
    for device in ("cpu", "meta"):
        q = torch.zeros(1, 4, 2, 128, dtype=E4M3, device=device)
        out = torch.zeros(1, 4, 2, 128, dtype=torch.bfloat16, device=device)
        args = (q, q, q, out, None, None, None, None, None, None, None, None, None, 4, 4, 0.1, False, -1, -1, 0,
                None, 0.0)
        assert fwd(*args) is NotImplemented, device


def test_eager_entry_checks_its_argument_count() -> None:
    fwd = _require_entry()
    with pytest.raises(TypeError, match="takes 22 arguments"):
        fwd(1, 2, 3)


# ---- on a GPU --------------------------------------------------------------------------------------------

def _decode_call(num_splits: int, lse: bool, q_dtype: Any = E4M3) -> tuple:
    """A paged vLLM-style decode call (3 requests of 2 tokens, 32:8 heads, d128, 16-token pages, up to 1024 keys
    each: the block table covers every seqused_k), random data."""
    g = torch.Generator(device="cuda").manual_seed(1234 + num_splits)
    batch, tokens, hq, hkv, d, page, pages = 3, 2, 32, 8, 128, 16, 192
    q = torch.randn(batch * tokens, hq, d, device="cuda", generator=g).to(q_dtype)
    cache = torch.randn(2, pages, page, hkv, d, device="cuda", generator=g).to(E4M3)
    k, v = cache.unbind(0)
    table = torch.randperm(pages, device="cuda", generator=g).to(torch.int32).view(batch, pages // batch)
    used = torch.tensor([500, 17, 1000], dtype=torch.int32, device="cuda")
    cu_q = torch.arange(0, batch * tokens + 1, tokens, dtype=torch.int32, device="cuda")
    out = torch.full((batch * tokens, hq, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse_t = torch.full((hq, batch * tokens), float("nan"), device="cuda") if lse else None
    descale = None if q_dtype != E4M3 else torch.full((batch, hkv), 0.5, device="cuda")
    kd = torch.rand(hkv, device="cuda", generator=g).add(0.5).expand(batch, hkv)
    return (q, k, v, out, lse_t, cu_q, None, used, table, descale, kd, kd, None, tokens, table.shape[1] * page,
            d ** -0.5, True, -1, 0, num_splits, None, 0.0)


def _fresh(args: tuple) -> tuple:
    """The same call writing into fresh NaN-filled out/lse."""
    out, lse = args[3], args[4]
    return args[:3] + (torch.full_like(out, float("nan")), None if lse is None else torch.full_like(lse, float("nan"))) \
        + args[5:]


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits,lse,q_dtype", [(1, False, E4M3), (0, True, E4M3), (4, True, torch.bfloat16)])
def test_eager_entry_gives_the_ops_result_bit_for_bit(num_splits: int, lse: bool, q_dtype: Any) -> None:
    fwd = _require_entry()
    by_op = _decode_call(num_splits, lse, q_dtype)
    by_entry = _fresh(by_op)
    ops.FWD(*by_op)
    assert fwd(*by_entry) is None
    torch.cuda.synchronize()
    assert not by_entry[3].isnan().any()
    assert torch.equal(by_entry[3].view(torch.int16), by_op[3].view(torch.int16))
    if lse:
        assert torch.equal(by_entry[4], by_op[4])


@pytest.mark.gpu
def test_eager_entry_refuses_with_the_ops_words_and_types() -> None:
    import test_ops_meta as meta
    import test_torch_op as top

    fwd = _require_entry()
    base = top.valid_decode_args()
    cases = [
        {**base, "q": torch.empty(meta.B, 1, meta.HQ, meta.D, dtype=E4M3, device="cuda")},
        {**base, "out": torch.empty(meta.T, meta.HQ, 64, dtype=torch.bfloat16, device="cuda")},
        {**base, "seqused_k": torch.empty(meta.B, dtype=torch.int32)},
        {**base, "s_aux": torch.empty(meta.HKV, device="cuda")},
        {**base, "out": torch.empty(meta.T, meta.HQ, meta.D, device="cuda")},  # fp32 out: not supported
    ]
    for args in cases:
        op_args = meta.op_args(args)
        with pytest.raises((ValueError, RuntimeError)) as by_op:
            ops.FWD(*op_args)
        with pytest.raises((ValueError, RuntimeError)) as by_entry:
            fwd(*op_args)
        assert type(by_entry.value) is type(by_op.value)
        # The op's text may carry what torch appends to an exception from C++; ours is its start.
        assert str(by_entry.value).startswith("fp8attn: ")
        assert str(by_op.value).startswith(str(by_entry.value)), (str(by_entry.value), str(by_op.value))
    # Through the public function, a refusal of the entry takes the ctypes op's exception type.
    with pytest.raises(NotImplementedError, match="out_dtype: expected dtype float16 or bfloat16"):
        meta._vllm_call({**base, "out": torch.empty(meta.T, meta.HQ, meta.D, device="cuda")})


class _Watching(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _Subclass(torch.Tensor):
    pass


@pytest.mark.gpu
def test_eager_entry_hands_back_what_the_dispatcher_must_see() -> None:
    fwd = _require_entry()
    args = _decode_call(1, False)
    # A dispatch mode, a profiler, a tensor subclass, a q that needs grad: the op's path serves each.
    with _Watching() as mode:
        assert fwd(*args) is NotImplemented
        fp8attn.flash_attn_varlen_func(q=args[0], k=args[1], v=args[2], max_seqlen_q=args[13], cu_seqlens_q=args[5],
                                       max_seqlen_k=args[14], seqused_k=args[7], block_table=args[8], causal=True,
                                       out=args[3], q_descale=args[9], k_descale=args[10], v_descale=args[11])
    assert any("fp8attn.fwd" in op for op in mode.ops), mode.ops
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert fwd(*args) is NotImplemented
        ops.FWD(*args)
    assert any(event.name == "fp8attn::fwd" for event in prof.events())
    assert fwd(*((args[0].as_subclass(_Subclass),) + args[1:])) is NotImplemented
    q16 = torch.randn(args[0].shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    assert fwd(*((q16,) + args[1:9] + (None,) + args[10:])) is NotImplemented
    # A q with a non-unit last stride: the wrapper copies it for the op, so the entry hands it back.
    strided_q = torch.empty(args[0].shape + (2,), dtype=E4M3, device="cuda")[..., 0]
    strided_q.copy_(args[0])
    assert fwd(*((strided_q,) + args[1:])) is NotImplemented
    with torch.no_grad():
        out = torch.full_like(args[3], float("nan"))
        assert fwd(*((q16, args[1], args[2], out) + args[4:9] + (None,) + args[10:])) is None
        assert not out.isnan().any()


@pytest.mark.gpu
def test_wrapper_copies_a_strided_q_and_gives_the_contiguous_result() -> None:
    _require_entry()
    args = _decode_call(0, False)
    strided_q = torch.empty(args[0].shape + (2,), dtype=E4M3, device="cuda")[..., 0]
    strided_q.copy_(args[0])

    def call(q: Any) -> Any:
        return fp8attn.flash_attn_varlen_func(
            q=q, k=args[1], v=args[2], max_seqlen_q=args[13], cu_seqlens_q=args[5], max_seqlen_k=args[14],
            seqused_k=args[7], block_table=args[8], causal=True, q_descale=args[9], k_descale=args[10],
            v_descale=args[11])

    assert torch.equal(call(strided_q).view(torch.int16), call(args[0]).view(torch.int16))


@pytest.mark.gpu
def test_eager_entry_bumps_the_version_of_what_it_writes() -> None:
    fwd = _require_entry()
    args = _decode_call(0, True)
    out, lse = args[3], args[4]
    before = out._version, lse._version
    assert fwd(*args) is None
    assert out._version > before[0] and lse._version > before[1]


@pytest.mark.gpu
def test_eager_entry_under_cuda_graph_capture_replays_the_eager_result() -> None:
    # A split call's workspace comes from the capture's pool; the replay must reproduce the eager result.
    fwd = _require_entry()
    args = _decode_call(0, True)
    eager = _fresh(args)
    assert fwd(*eager) is None
    captured = _fresh(args)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        assert fwd(*captured) is None  # warm-up on the side stream, as torch.cuda.graph asks
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    captured[3].fill_(float("nan"))
    with torch.cuda.graph(graph):
        assert fwd(*captured) is None
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[3].view(torch.int16), eager[3].view(torch.int16))
    assert torch.equal(captured[4], eager[4])
