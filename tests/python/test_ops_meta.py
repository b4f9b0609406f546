"""The torch layer without a GPU: params filled from vLLM-shaped (meta) tensors, argument checks, the fake
implementation (shapes and dtypes under FakeTensorMode and torch.compile), and opcheck."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import fp8attn  # noqa: E402
from fp8attn import _args, _lib, interface, ops  # noqa: E402

E4M3 = torch.float8_e4m3fn
B, Q_TOKENS, HQ, HKV, D, PAGE, NUM_BLOCKS = 5, 2, 32, 8, 128, 16, 64
MAX_PAGES, TABLE_OFFSET = 40, 3
T = B * Q_TOKENS


def vllm_decode_args(device: str, hnd: bool = False) -> dict[str, Any]:
    """The arguments vLLM's FlashAttentionImpl passes for a decode step, as tensors on ``device``."""
    if hnd:  # HND cache layout: physical [2, nb, Hkv, page, d], logical [2, nb, page, Hkv, d]
        kv_cache = torch.empty(2, NUM_BLOCKS, HKV, PAGE, D, dtype=E4M3, device=device).permute(0, 1, 3, 2, 4)
    else:
        kv_cache = torch.empty(2, NUM_BLOCKS, PAGE, HKV, D, dtype=E4M3, device=device)
    k, v = kv_cache.unbind(0)
    table = torch.empty(B, MAX_PAGES, dtype=torch.int32, device=device)[:, TABLE_OFFSET:]  # column-sliced view
    return dict(
        q=torch.empty(T, HQ, D, dtype=E4M3, device=device), k=k, v=v,
        out=torch.empty(2 * T, HQ, D, dtype=torch.bfloat16, device=device)[:T],  # output[:num_actual_tokens]
        cu_seqlens_q=torch.empty(B + 1, dtype=torch.int32, device=device), max_seqlen_q=Q_TOKENS,
        seqused_k=torch.empty(B, dtype=torch.int32, device=device), max_seqlen_k=32768,
        softmax_scale=D ** -0.5, causal=True, window_size=(1023, 0), block_table=table,
        q_descale=torch.empty(1, device=device).expand(B, HKV),     # per-tensor scale: strides (0, 0)
        k_descale=torch.empty(HKV, device=device).expand(B, HKV),   # per-head scale: strides (0, 1)
        v_descale=torch.empty((), device=device).expand(B, HKV),
        num_splits=0, s_aux=torch.empty(HQ, dtype=torch.bfloat16, device=device),
        scheduler_metadata=None, fa_version=3,
    )


def op_args(a: dict[str, Any], lse: Any = None) -> tuple:
    """Positional arguments of torch.ops.fp8attn.fwd for the dict above."""
    return (a["q"], a["k"], a["v"], a["out"], lse, a["cu_seqlens_q"], None, a["seqused_k"], a["block_table"],
            a["q_descale"], a["k_descale"], a["v_descale"], a["s_aux"], a["max_seqlen_q"], a["max_seqlen_k"],
            a["softmax_scale"], a["causal"], a["window_size"][0], a["window_size"][1], a["num_splits"],
            a.get("output_scale"), a.get("softcap", 0.0))


@pytest.mark.parametrize("hnd", [False, True])
def test_fill_params_from_vllm_decode_call(hnd: bool) -> None:
    a = vllm_decode_args("meta", hnd=hnd)
    lse = torch.empty(HQ, T, device="meta")
    params = _lib.FwdParams()
    ops.fill_params(params, *op_args(a, lse))
    assert (params.q_dtype, params.k_dtype, params.v_dtype) == (_lib.DTYPE_E4M3,) * 3
    assert params.out_dtype == _lib.DTYPE_BF16
    assert (params.q_row_stride, params.q_head_stride) == (HQ * D, D)
    assert (params.o_row_stride, params.o_head_stride) == (HQ * D, D)
    page_stride = PAGE * HKV * D
    row, head = (D, PAGE * D) if hnd else (HKV * D, D)
    for prefix in ("k", "v"):
        strides = tuple(getattr(params, f"{prefix}_{s}_stride") for s in ("batch", "row", "head"))
        assert strides == (page_stride, row, head), prefix
    assert (params.lse_batch_stride, params.lse_head_stride) == (0, T)
    assert (params.batch, params.seqlen_q, params.seqlen_k, params.total_q) == (B, Q_TOKENS, 32768, T)
    assert (params.num_heads_q, params.num_heads_kv, params.head_dim, params.head_dim_v) == (HQ, HKV, D, D)
    assert params.block_table_batch_stride == MAX_PAGES
    assert params.max_pages_per_seq == MAX_PAGES - TABLE_OFFSET
    assert (params.num_pages, params.page_size) == (NUM_BLOCKS, PAGE)
    assert (params.causal, params.window_left, params.window_right) == (1, 1023, 0)
    assert params.softmax_scale == pytest.approx(D ** -0.5)
    for name, strides in (("q_descale", (0, 0)), ("k_descale", (0, 1)), ("v_descale", (0, 0))):
        desc = getattr(params, name)
        assert (desc.ndim, tuple(desc.size), desc.batch_stride, desc.head_stride) == (2, (B, HKV), *strides), name
        assert desc.dtype == _lib.DTYPE_F32
    assert params.sink_dtype == _lib.DTYPE_BF16
    assert params.cu_seqlens_k is None and params.num_splits == 0


@pytest.mark.parametrize("descale,expected", [
    (lambda: torch.empty((), device="meta"), (0, 0, 0)),
    (lambda: torch.empty(1, 1, device="meta"), (0, 0, 0)),
    (lambda: torch.empty(HKV, device="meta"), (2, 0, 1)),
    (lambda: torch.empty(HKV, B, device="meta").t(), (2, 1, B)),  # a transposed (B, Hkv) view
])
def test_descale_forms(descale: Any, expected: tuple[int, int, int]) -> None:
    a = vllm_decode_args("meta")
    a["k_descale"] = descale()
    params = _lib.FwdParams()
    ops.fill_params(params, *op_args(a))
    desc = params.k_descale
    assert (desc.ndim, desc.batch_stride, desc.head_stride) == expected
    if desc.ndim == 2:
        assert tuple(desc.size) == (B, HKV)


def _with(**changes: Any) -> dict[str, Any]:
    a = vllm_decode_args("meta")
    a.update(changes)
    return a


@pytest.mark.parametrize("make,match", [
    (lambda: _with(k=torch.empty(NUM_BLOCKS, PAGE, HKV, D, 2, dtype=E4M3, device="meta")[..., 0]), "last dimension"),
    (lambda: _with(q=torch.empty(T, HQ, D, dtype=torch.float8_e4m3fnuz, device="meta")), "does not take"),
    (lambda: _with(q=torch.empty(B, 1, HQ, D, dtype=E4M3, device="meta")), r"q must be \[total_q"),
    (lambda: _with(cu_seqlens_q=torch.empty(B + 1, dtype=torch.int64, device="meta")), "cu_seqlens_q"),
    (lambda: _with(seqused_k=torch.empty(B, 2, dtype=torch.int32, device="meta")[:, 0]), "seqused_k"),
    (lambda: _with(block_table=torch.empty(B, 8, dtype=torch.int64, device="meta")), "block_table"),
    (lambda: _with(block_table=torch.empty(8, B, dtype=torch.int32, device="meta").t()), "block_table"),
    (lambda: _with(out=torch.empty(T * HQ, D, dtype=torch.bfloat16, device="meta")), r"out must be q's layout"),
    (lambda: _with(k_descale=torch.empty(B, HKV, 2, device="meta")), "k_descale"),
    (lambda: _with(s_aux=torch.empty(HQ, 2, device="meta")[:, 0]), "s_aux"),
    (lambda: _with(seqused_k=torch.empty(B, dtype=torch.int32)), "is on cpu"),
])
def test_fill_params_rejects(make: Any, match: str) -> None:
    # Only what the library cannot see (ranks, strides, devices, dtypes without a C code); its own rules are
    # tests/cpu/test_validate.cpp's, and the op's words for them test_torch_op.py's GPU tests.
    with pytest.raises(ValueError, match=match):
        ops.fill_params(_lib.FwdParams(), *op_args(make()))


def test_fill_params_rejects_bad_lse() -> None:
    a = vllm_decode_args("meta")
    with pytest.raises(ValueError, match=r"lse must be \[Hq, total_q\]"):
        ops.fill_params(_lib.FwdParams(), *op_args(a, torch.empty(HQ * T, device="meta")))
    with pytest.raises(ValueError, match="lse must be float32"):
        ops.fill_params(_lib.FwdParams(), *op_args(a, torch.empty(HQ, T, dtype=torch.float16, device="meta")))
    with pytest.raises(ValueError, match="token stride"):
        ops.fill_params(_lib.FwdParams(), *op_args(a, torch.empty(T, HQ, device="meta").t()))


def _vllm_call(a: dict[str, Any], **extra: Any) -> Any:
    """flash_attn_varlen_func with vLLM's keyword set (FlashAttentionImpl.forward); ``extra`` overrides."""
    kwargs = dict(
        q=a["q"], k=a["k"], v=a["v"], out=a["out"], cu_seqlens_q=a["cu_seqlens_q"], max_seqlen_q=a["max_seqlen_q"],
        seqused_k=a["seqused_k"], max_seqlen_k=a["max_seqlen_k"], softmax_scale=a["softmax_scale"],
        causal=a["causal"], window_size=a["window_size"], block_table=a["block_table"], softcap=0.0,
        scheduler_metadata=a["scheduler_metadata"], fa_version=a["fa_version"], q_descale=a["q_descale"],
        k_descale=a["k_descale"], v_descale=a["v_descale"], num_splits=a["num_splits"], s_aux=a["s_aux"])
    kwargs.update(extra)
    return fp8attn.flash_attn_varlen_func(**kwargs)


def test_fake_vllm_call_writes_into_out() -> None:
    with FakeTensorMode():
        a = vllm_decode_args("cuda")
        result = _vllm_call(a)
        assert result is a["out"]
        out, lse = _vllm_call(a, return_softmax_lse=True)
        assert out is a["out"]
        assert lse.shape == (HQ, T) and lse.dtype == torch.float32 and lse.device.type == "cuda"


@pytest.mark.parametrize("out_dtype,expected", [(None, torch.bfloat16), (torch.float16, torch.float16)])
def test_fake_allocates_out(out_dtype: Any, expected: Any) -> None:
    with FakeTensorMode():
        a = vllm_decode_args("cuda")
        a["out"] = None
        out = _vllm_call(a, out_dtype=out_dtype)
        assert out.shape == (T, HQ, D) and out.dtype == expected


def test_fake_rejects_mismatched_out_dtype() -> None:
    with FakeTensorMode():
        a = vllm_decode_args("cuda")
        with pytest.raises(ValueError, match="out_dtype"):
            _vllm_call(a, out_dtype=torch.float16)


def test_fake_kvcache_and_dense() -> None:
    with FakeTensorMode():
        q = torch.empty(3, 4, HQ, D, dtype=E4M3, device="cuda")
        cache = torch.empty(2, NUM_BLOCKS, PAGE, HKV, D, dtype=E4M3, device="cuda")
        table = torch.empty(3, 10, dtype=torch.int32, device="cuda")
        out, lse = fp8attn.flash_attn_with_kvcache(q, cache[0], cache[1], cache_seqlens=100, block_table=table,
                                                   causal=True, return_softmax_lse=True)
        assert out.shape == (3, 4, HQ, D) and out.dtype == torch.bfloat16
        assert lse.shape == (3, HQ, 4) and lse.dtype == torch.float32
        dense_k = torch.empty(3, 300, HKV, D, dtype=E4M3, device="cuda")
        out = fp8attn.flash_attn_with_kvcache(q, dense_k, dense_k, out_dtype=torch.float16)
        assert out.shape == (3, 4, HQ, D) and out.dtype == torch.float16
        # (192, 128): out takes V's head dim.
        q192 = torch.empty(2, 33, 16, 192, dtype=E4M3, device="cuda")
        k192 = torch.empty(2, 65, 16, 192, dtype=E4M3, device="cuda")
        v128 = torch.empty(2, 65, 16, 128, dtype=E4M3, device="cuda")
        out, lse = fp8attn.flash_attn_func(q192, k192, v128, causal=True, return_softmax_lse=True)
        assert out.shape == (2, 33, 16, 128) and lse.shape == (2, 16, 33)


@pytest.mark.parametrize("keyword", sorted(_args.UNSUPPORTED_IF_SET))
def test_interface_rejects_each_unsupported_keyword(keyword: str) -> None:
    # flash_attn_varlen_func tests "anything set?" inline before reject_unsupported names it: every keyword of
    # the list must reach it.
    with pytest.raises(NotImplementedError, match=keyword):
        _vllm_call(vllm_decode_args("meta"), **{keyword: object()})


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"dropout_p": 0.1}, NotImplementedError, "dropout"),
    ({"alibi_slopes": torch.empty(HQ)}, NotImplementedError, "alibi"),
    ({"return_attn_probs": True}, NotImplementedError, "return_attn_probs"),
    ({"cp_world_size": 2}, NotImplementedError, "context parallelism"),
])
def test_interface_rejects_before_launch(kwargs: dict[str, Any], exc: type, match: str) -> None:
    a = vllm_decode_args("meta")
    with pytest.raises(exc, match=match):
        _vllm_call(a, **kwargs)


def test_cpu_tensors_are_refused() -> None:
    q = torch.zeros(2, 8, 2, 64).to(E4M3)
    with pytest.raises(ValueError, match="CUDA device"):
        fp8attn.flash_attn_func(q, q, q)


def test_opcheck_on_meta() -> None:
    a = vllm_decode_args("meta")
    args = op_args(a, torch.empty(HQ, T, device="meta"))
    torch.library.opcheck(torch.ops.fp8attn.fwd.default, args)


def test_compile_fullgraph_traces_the_op() -> None:
    graphs = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        graphs.append(gm)
        return gm.forward

    def step(q: Any, k: Any, v: Any, out: Any, cu: Any, used: Any, table: Any, qs: Any, ks: Any, vs: Any,
             sink: Any) -> Any:
        return fp8attn.flash_attn_varlen_func(q, k, v, Q_TOKENS, cu, 32768, seqused_k=used, block_table=table,
                                              causal=True, window_size=(1023, 0), out=out, q_descale=qs,
                                              k_descale=ks, v_descale=vs, s_aux=sink, return_softmax_lse=True)

    a = vllm_decode_args("meta")
    args = (a["q"], a["k"], a["v"], a["out"], a["cu_seqlens_q"], a["seqused_k"], a["block_table"], a["q_descale"],
            a["k_descale"], a["v_descale"], a["s_aux"])
    out, lse = torch.compile(step, fullgraph=True, backend=backend)(*args)
    assert out.shape == (T, HQ, D) and lse.shape == (HQ, T)
    assert graphs and "fp8attn.fwd" in str(graphs[0].graph)
    # And through AOT autograd's functionalization (what Inductor sees).
    out, lse = torch.compile(step, fullgraph=True, backend="aot_eager")(*args)
    assert out.shape == (T, HQ, D) and lse.dtype == torch.float32


def test_fill_params_maps_output_scale_and_softcap() -> None:
    a = vllm_decode_args("meta")
    a["out"] = torch.empty(a["out"].shape, dtype=E4M3, device="meta")
    a["output_scale"] = torch.empty((), device="meta")
    a["softcap"] = 50.0
    params = _lib.FwdParams()
    ops.fill_params(params, *op_args(a))
    assert params.out_dtype == _lib.DTYPE_E4M3
    assert (params.output_scale.ndim, params.output_scale.dtype) == (0, _lib.DTYPE_F32)
    assert params.softcap == 50.0
    a["output_scale"] = torch.empty(2, 3, device="meta")  # not a scalar: a nonzero ndim, which the library refuses
    ops.fill_params(params, *op_args(a))
    assert params.output_scale.ndim == 2


def test_e4m3_out_traces_on_meta() -> None:
    a = vllm_decode_args("meta")
    out = _vllm_call(a, out=torch.empty(a["out"].shape, dtype=E4M3, device="meta"),
                     output_scale=torch.empty((), device="meta"), softcap=50.0)
    assert out.dtype == E4M3 and out.shape == a["out"].shape


# ---- 16-bit q over an E4M3 KV cache (issue 35): mapped as it is; the kernel quantizes it per row ----

SIXTEEN_BIT = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("q_dtype", SIXTEEN_BIT)
def test_fill_params_maps_16bit_q_with_element_strides(q_dtype: Any) -> None:
    a = vllm_decode_args("meta")
    a["q"] = torch.empty(T, HQ, D + 8, dtype=q_dtype, device="meta")[..., :D]  # padded heads: 8 elements, 16 bytes
    params = _lib.FwdParams()
    ops.fill_params(params, *op_args(a))
    assert params.q_dtype == {torch.bfloat16: _lib.DTYPE_BF16, torch.float16: _lib.DTYPE_F16}[q_dtype]
    assert (params.k_dtype, params.v_dtype) == (_lib.DTYPE_E4M3, _lib.DTYPE_E4M3)
    assert (params.q_row_stride, params.q_head_stride) == (HQ * (D + 8), D + 8)
    # A q_descale beside a 16-bit q is passed on: the library refuses it by name (validate.cpp), not this layer.
    assert params.q_descale.ndim == 2 and params.q_descale.dtype == _lib.DTYPE_F32


@pytest.mark.parametrize("q_dtype", SIXTEEN_BIT)
def test_fake_16bit_q_out_defaults_to_q_dtype_at_every_entry_point(q_dtype: Any) -> None:
    with FakeTensorMode():
        a = vllm_decode_args("cuda")
        a["q"] = torch.empty(T, HQ, D, dtype=q_dtype, device="cuda")
        a["out"], a["q_descale"] = None, None
        assert _vllm_call(a).dtype == q_dtype
        assert _vllm_call(a, out_dtype=torch.float16).dtype == torch.float16
        fused = _vllm_call(a, out_dtype=E4M3, output_scale=torch.empty((), device="cuda"))
        assert fused.dtype == E4M3
        q = torch.empty(3, 4, HQ, D, dtype=q_dtype, device="cuda")
        cache = torch.empty(2, NUM_BLOCKS, PAGE, HKV, D, dtype=E4M3, device="cuda")
        table = torch.empty(3, 10, dtype=torch.int32, device="cuda")
        out = fp8attn.flash_attn_with_kvcache(q, cache[0], cache[1], cache_seqlens=100, block_table=table, causal=True)
        assert out.shape == (3, 4, HQ, D) and out.dtype == q_dtype
        dense_k = torch.empty(3, 300, HKV, D, dtype=E4M3, device="cuda")
        assert fp8attn.flash_attn_func(q, dense_k, dense_k, causal=True).dtype == q_dtype


@pytest.mark.parametrize("q_dtype,out_dtype", [(torch.bfloat16, torch.float16), (torch.float16, torch.bfloat16)])
def test_fake_16bit_out_of_the_other_16bit_dtype_is_named(q_dtype: Any, out_dtype: Any) -> None:
    with FakeTensorMode():
        a = vllm_decode_args("cuda")
        a["q"] = torch.empty(T, HQ, D, dtype=q_dtype, device="cuda")
        a["out"] = torch.empty(T, HQ, D, dtype=out_dtype, device="cuda")
        with pytest.raises(ValueError, match=f"out has dtype {out_dtype} but q has dtype {q_dtype}"):
            _vllm_call(a)
        assert _vllm_call(a, out_dtype=out_dtype) is a["out"]  # said explicitly: written as asked
        a["out"] = torch.empty(T, HQ, D, dtype=E4M3, device="cuda")  # the fused FP8 output is never a mix-up
        assert _vllm_call(a, output_scale=torch.empty((), device="cuda")) is a["out"]


def _recorded_op_args(monkeypatch: pytest.MonkeyPatch, call: Any) -> tuple:
    """The positional arguments the eager path hands the op when ``call()`` runs (the op itself is not run)."""
    recorded: list[tuple] = []
    monkeypatch.setattr(interface, "_FWD_EAGER", lambda *args: recorded.append(args))
    call()
    assert len(recorded) == 1
    return recorded[0]


def _same_op_args(got: tuple, expected: tuple) -> bool:
    # Tensors by identity (each argument below is a distinct tensor), everything else by value and type.
    return len(got) == len(expected) and all(
        g is e if isinstance(e, torch.Tensor) else (type(g) is type(e) and g == e) for g, e in zip(got, expected))


def test_each_entry_point_routes_every_argument_to_its_op_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    # _call takes its arguments by position; a swapped pair of same-typed arguments (k/v descale, the two
    # max_seqlens) would pass every shape check, so in each call every argument the entry point forwards gets a
    # value of its own, none of them the default, and its slot is checked.
    def meta(*shape: int, dtype: Any = torch.float32) -> Any:
        return torch.empty(shape, dtype=dtype, device="meta")

    def descales() -> tuple[Any, Any, Any]:
        return meta(B, HKV), meta(B, HKV), meta(B, HKV)

    a = vllm_decode_args("meta")
    qd, kd, vd = descales()
    sink, output_scale = meta(HQ), meta()
    out = meta(T, HQ, D, dtype=E4M3)
    got = _recorded_op_args(monkeypatch, lambda: fp8attn.flash_attn_varlen_func(
        q=a["q"], k=a["k"], v=a["v"], out=out, cu_seqlens_q=a["cu_seqlens_q"], max_seqlen_q=3,
        seqused_k=a["seqused_k"], max_seqlen_k=4000, softmax_scale=0.25, causal=True, window_size=(100, 7),
        block_table=a["block_table"], softcap=30.0, q_descale=qd, k_descale=kd, v_descale=vd, num_splits=5,
        s_aux=sink, output_scale=output_scale, return_softmax_lse=True))
    lse = got[4]
    assert lse.shape == (HQ, T) and lse.dtype == torch.float32
    assert _same_op_args(got, (
        a["q"], a["k"], a["v"], out, lse, a["cu_seqlens_q"], None, a["seqused_k"], a["block_table"], qd, kd, vd,
        sink, 3, 4000, 0.25, True, 100, 0, 5, output_scale, 30.0)), got

    # Positionally, as FlashAttention's signature orders them; no out: it is allocated in out_dtype.
    cu_k = meta(B + 1, dtype=torch.int32)
    got = _recorded_op_args(monkeypatch, lambda: fp8attn.flash_attn_varlen_func(
        a["q"], a["k"], a["v"], 2, a["cu_seqlens_q"], 900, cu_k, out_dtype=torch.float16))
    new_out = got[3]
    assert new_out.shape == (T, HQ, D) and new_out.dtype == torch.float16
    assert _same_op_args(got, (
        a["q"], a["k"], a["v"], new_out, None, a["cu_seqlens_q"], cu_k, None, None, None, None, None, None, 2, 900,
        _args.default_softmax_scale(D), False, -1, -1, 0, None, 0.0)), got

    q4 = meta(B, Q_TOKENS, HQ, D, dtype=E4M3)
    out4 = meta(B, Q_TOKENS, HQ, D, dtype=E4M3)
    seqlens = meta(B, dtype=torch.int32)
    qd, kd, vd = descales()
    sink, output_scale = meta(HQ), meta()
    got = _recorded_op_args(monkeypatch, lambda: fp8attn.flash_attn_with_kvcache(
        q4, a["k"], a["v"], cache_seqlens=seqlens, block_table=a["block_table"], softmax_scale=0.5, causal=True,
        window_size=(60, 9), softcap=20.0, return_softmax_lse=True, out=out4, q_descale=qd, k_descale=kd,
        v_descale=vd, num_splits=4, s_aux=sink, output_scale=output_scale))
    lse = got[4]
    assert lse.shape == (B, HQ, Q_TOKENS) and lse.dtype == torch.float32
    max_seqlen_k = a["block_table"].shape[1] * PAGE
    assert _same_op_args(got, (
        q4, a["k"], a["v"], out4, lse, None, None, seqlens, a["block_table"], qd, kd, vd, sink, Q_TOKENS,
        max_seqlen_k, 0.5, True, 60, 0, 4, output_scale, 20.0)), got

    dense_k, dense_v = meta(B, 70, HKV, D, dtype=E4M3), meta(B, 70, HKV, D, dtype=E4M3)
    qd, kd, vd = descales()
    sink, output_scale = meta(HQ), meta()
    got = _recorded_op_args(monkeypatch, lambda: fp8attn.flash_attn_func(
        q4, dense_k, dense_v, softmax_scale=0.75, causal=True, window_size=(20, 20), softcap=50.0, q_descale=qd,
        k_descale=kd, v_descale=vd, num_splits=3, s_aux=sink, return_softmax_lse=True, out=out4,
        output_scale=output_scale))
    lse = got[4]
    assert lse.shape == (B, HQ, Q_TOKENS)
    assert _same_op_args(got, (
        q4, dense_k, dense_v, out4, lse, None, None, None, None, qd, kd, vd, sink, Q_TOKENS, 70, 0.75, True, 20, 0,
        3, output_scale, 50.0)), got
