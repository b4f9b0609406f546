"""The two implementations of ``fp8attn::fwd`` (fp8attn.ops): the compiled C++ op on torch's stable ABI
(libfp8attn_torch.so) and the ctypes fallback. One schema; the compiled op is used when it is built, and the
fallback is reported, never silent; the compiled op's errors are the ctypes op's exception types; on a GPU the
compiled op rejects what the ctypes op's fill_params rejects, with the same words."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import fp8attn  # noqa: E402
from fp8attn import _lib, ops  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


def _op_library() -> Path:
    try:
        return _lib.get_lib().path.parent / "libfp8attn_torch.so"
    except _lib.LibraryNotFoundError as err:
        pytest.skip(str(err))


def _normalized(schema: str) -> str:
    """A schema's argument list with alias-set names and SymInt/int spelled one way."""
    schema = schema[schema.index("("):]
    schema = re.sub(r"\(\w+!\)", "(!)", schema)
    return schema.replace("SymInt", "int")


def test_compiled_op_serves_when_built() -> None:
    if not _op_library().is_file():
        pytest.skip(f"{_op_library()} is not built (a build whose Python has torch >= 2.9 builds it: cmake/torch_op.cmake)")
    if os.environ.get("FP8ATTN_TORCH_OP", "").lower() == "ctypes":
        pytest.skip("FP8ATTN_TORCH_OP=ctypes forces the fallback")
    assert ops.BACKEND == "compiled", ops.FALLBACK_REASON
    assert ops.FALLBACK_REASON is None


def test_one_schema_for_both_implementations() -> None:
    signature = inspect.signature(ops.fill_params)
    python_params = list(signature.parameters.values())[1:]

    def op_signature(*args: Any) -> None: ...

    op_signature.__signature__ = signature.replace(parameters=python_params)  # type: ignore[attr-defined]
    inferred = torch.library.infer_schema(op_signature, mutates_args=("out", "lse"))
    assert _normalized(str(ops.FWD._schema)) == _normalized(inferred)


def _import_ops_in_subprocess(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = ("import warnings; warnings.simplefilter('always'); import fp8attn.ops as o; "
            "print('BACKEND', o.BACKEND); print('REASON', o.FALLBACK_REASON)")
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "python"), **env}
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=300)


def test_fallback_is_reported(tmp_path: Path) -> None:
    # A libfp8attn.so without its op library beside it: the ctypes op serves, with a warning naming why.
    _op_library()  # skips without libfp8attn.so
    lone = tmp_path / "libfp8attn.so"
    shutil.copy(_lib.get_lib().path, lone)
    run = _import_ops_in_subprocess({"FP8ATTN_LIB": str(lone), "FP8ATTN_TORCH_OP": ""})
    assert run.returncode == 0, run.stderr
    assert "BACKEND ctypes" in run.stdout
    assert "libfp8attn_torch.so" in run.stdout and "is not built" in run.stdout
    assert "using the ctypes torch op" in run.stderr


def test_ctypes_can_be_forced_without_a_warning() -> None:
    _op_library()
    run = _import_ops_in_subprocess({"FP8ATTN_TORCH_OP": "ctypes"})
    assert run.returncode == 0, run.stderr
    assert "BACKEND ctypes" in run.stdout and "FP8ATTN_TORCH_OP=ctypes" in run.stdout
    assert "using the ctypes torch op" not in run.stderr


class _FakeOpLibrary:
    def __init__(self, code: int) -> None:
        self.code = code

    def fp8attn_torch_last_error_code(self) -> int:
        return self.code


@pytest.mark.parametrize("code,exc", [
    (_lib.STATUS_NOT_SUPPORTED, NotImplementedError),
    (_lib.STATUS_NOT_COMPILED, _lib.KernelNotCompiledError),
    (_lib.STATUS_CUDA_ERROR, RuntimeError),
])
def test_compiled_op_errors_take_the_ctypes_exception_types(monkeypatch: pytest.MonkeyPatch, code: int,
                                                            exc: type) -> None:
    monkeypatch.setattr(ops, "_op_lib", _FakeOpLibrary(code))
    with pytest.raises(exc, match="fp8attn: head_dim") as info:
        ops.reraise(RuntimeError("fp8attn: head_dim stub"))
    assert type(info.value) is exc
    with pytest.raises(RuntimeError, match="CUDA out of memory"):  # not the op's own error: unchanged
        ops.reraise(RuntimeError("CUDA out of memory"))


# ---- on a GPU: the compiled op's own checks -------------------------------------------------------------

def valid_decode_args() -> dict[str, Any]:
    """test_ops_meta's vLLM decode call on the GPU, with a max_seqlen_k its block table covers (the library's
    rule), so that each test's one change is what the library refuses."""
    import test_ops_meta as meta

    a = meta.vllm_decode_args("cuda")
    a["max_seqlen_k"] = a["block_table"].shape[1] * meta.PAGE
    return a


@pytest.mark.gpu
def test_op_rejects_what_fill_params_rejects_with_the_same_words() -> None:
    import test_ops_meta as meta  # the same vLLM decode call and bad variants, here on the GPU

    def bad_cases() -> list[tuple[dict[str, Any], str]]:
        base = valid_decode_args()
        E4M3 = torch.float8_e4m3fn
        B, T, HQ, HKV, D, PAGE, NB = meta.B, meta.T, meta.HQ, meta.HKV, meta.D, meta.PAGE, meta.NUM_BLOCKS

        def with_(**changes: Any) -> dict[str, Any]:
            return {**base, **changes}

        return [
            (with_(k=torch.empty(NB, PAGE, HKV, D, 2, dtype=E4M3, device="cuda")[..., 0]), "last dimension"),
            (with_(q=torch.empty(T, HQ, D, dtype=torch.float8_e4m3fnuz, device="cuda")), "does not take"),
            (with_(q=torch.empty(B, 1, HQ, D, dtype=E4M3, device="cuda")), r"q must be \[total_q"),
            (with_(cu_seqlens_q=torch.empty(B + 1, dtype=torch.int64, device="cuda")), "cu_seqlens_q"),
            (with_(seqused_k=torch.empty(B, 2, dtype=torch.int32, device="cuda")[:, 0]), "seqused_k"),
            (with_(block_table=torch.empty(B, 8, dtype=torch.int64, device="cuda")), "block_table"),
            (with_(out=torch.empty(T, HQ, 64, dtype=torch.bfloat16, device="cuda")),
             r"out: expected shape \[total_q=10, num_heads_q=32, head_dim_v=128\], got \(10, 32, 64\)"),
            (with_(out=torch.empty(T * HQ, D, dtype=torch.bfloat16, device="cuda")), r"out must be q's layout"),
            (with_(k_descale=torch.empty(B, HKV, 2, device="cuda")), "k_descale"),
            (with_(s_aux=torch.empty(HQ, 2, device="cuda")[:, 0]), "s_aux"),
            (with_(seqused_k=torch.empty(B, dtype=torch.int32)), "is on cpu"),
        ]

    for args, match in bad_cases():
        with pytest.raises(ValueError, match=match):
            ops.FWD(*meta.op_args(args))
    base = valid_decode_args()
    # A floating out of another precision is the library's "not supported" (RuntimeError from the compiled op,
    # NotImplementedError from the ctypes op; the public functions raise NotImplementedError for both).
    with pytest.raises((RuntimeError, NotImplementedError), match="out_dtype: expected dtype float16 or bfloat16"):
        ops.FWD(*meta.op_args({**base, "out": torch.empty(meta.T, meta.HQ, meta.D, device="cuda")}))
    with pytest.raises(ValueError, match=r"lse: expected shape \[num_heads_q=32, total_q=10\], got \(10, 32\)"):
        ops.FWD(*meta.op_args(base, torch.empty(meta.T, meta.HQ, device="cuda")))
    with pytest.raises(ValueError, match="lse must be float32"):
        ops.FWD(*meta.op_args(base, torch.empty(meta.HQ, meta.T, dtype=torch.float16, device="cuda")))


# The library's rules (validate.cpp) are the only ones; a public function raises their refusal under its own
# name, in its own spelling of the arguments (flash_attn_with_kvcache: k_cache, v_cache, cache_seqlens).
@pytest.mark.gpu
@pytest.mark.parametrize("change,match", [
    ("v_half_the_pages", r"v: expected shape \[num_pages=64, page_size=16, num_heads_kv=8, head_dim_v=128\], "
                         r"got \(32, 16, 8, 128\)"),
    ("s_aux_per_kv_head", r"sink \(s_aux\): expected num_heads_q=32 entries, got 8"),
    ("seqused_k_on_cpu", "seqused_k is on cpu but q is on cuda:0"),
    ("block_table_short", r"block_table: expected batch=5 rows, got 4"),
    ("cu_seqlens_k_too", "cu_seqlens_k: expected NULL with block_table"),
])
def test_public_function_raises_the_library_refusal_under_its_name(change: str, match: str) -> None:
    import test_ops_meta as meta

    a = valid_decode_args()
    extra: dict[str, Any] = {}
    if change == "v_half_the_pages":
        a["v"] = torch.empty(meta.NUM_BLOCKS // 2, meta.PAGE, meta.HKV, meta.D, dtype=torch.float8_e4m3fn,
                             device="cuda")
    elif change == "s_aux_per_kv_head":
        a["s_aux"] = torch.empty(meta.HKV, device="cuda")
    elif change == "seqused_k_on_cpu":
        a["seqused_k"] = torch.empty(meta.B, dtype=torch.int32)
    elif change == "block_table_short":
        a["block_table"] = torch.empty(meta.B - 1, meta.MAX_PAGES, dtype=torch.int32, device="cuda")
    else:
        extra["cu_seqlens_k"] = torch.zeros(meta.B + 1, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"^fp8attn\.flash_attn_varlen_func: " + match):
        meta._vllm_call(a, **extra)


@pytest.mark.gpu
def test_kvcache_refusals_use_its_argument_names() -> None:
    E4M3 = torch.float8_e4m3fn
    q = torch.zeros(3, 4, 32, 128, dtype=E4M3, device="cuda")
    k = torch.zeros(3, 300, 8, 128, dtype=E4M3, device="cuda")
    with pytest.raises(ValueError, match=r"^fp8attn\.flash_attn_with_kvcache: v_cache: expected shape "
                                         r"\[batch=3, seqlen_k=300, num_heads_kv=8, head_dim_v=128\]"):
        fp8attn.flash_attn_with_kvcache(q, k, k[:, :200])
    with pytest.raises(ValueError, match=r"^fp8attn\.flash_attn_with_kvcache: cache_seqlens: expected batch=3 "
                                         r"entries, got 4"):
        fp8attn.flash_attn_with_kvcache(q, k, k, cache_seqlens=torch.zeros(4, dtype=torch.int32, device="cuda"))
    pages = torch.zeros(16, 16, 8, 128, dtype=E4M3, device="cuda")
    with pytest.raises(ValueError, match=r"^fp8attn\.flash_attn_with_kvcache: cache_seqlens: expected a \[batch\] "
                                         r"int32 tensor with block_table"):
        fp8attn.flash_attn_with_kvcache(q, pages, pages, block_table=torch.zeros(3, 4, dtype=torch.int32,
                                                                                   device="cuda"))


@pytest.mark.gpu
def test_unsupported_head_dim_is_not_implemented() -> None:
    q = torch.zeros(1, 16, 4, 80, device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match="head_dim"):
        fp8attn.flash_attn_func(q, q, q)


@pytest.mark.gpu
def test_each_head_dim_runs_or_is_reported_not_compiled() -> None:
    # A full build runs every pair; a dev build (FP8ATTN_HEAD_DIMS subset) must name the missing ones by the
    # build option, never fail later inside the launch. Either way every pair is exercised, so nothing skips.
    compiled = {tuple(int(w.split("=")[1]) for w in line.split()[:2]) for line in fp8attn.compiled_kernels()}
    for d, dv in ((64, 64), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128)):
        q = torch.zeros(1, 16, 4, d, device="cuda").to(torch.float8_e4m3fn)
        v = torch.ones(1, 16, 4, dv, device="cuda").to(torch.float8_e4m3fn)
        if (d, dv) in compiled:
            out = fp8attn.flash_attn_func(q, q, v)
            assert out.shape == (1, 16, 4, dv)
            assert torch.equal(out.float(), torch.ones_like(out, dtype=torch.float32)), (d, dv)
        else:
            with pytest.raises(fp8attn.KernelNotCompiledError, match="FP8ATTN_HEAD_DIMS"):
                fp8attn.flash_attn_func(q, q, v)
