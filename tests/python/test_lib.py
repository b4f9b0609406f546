"""The ctypes binding (fp8attn._lib) against the C headers, without torch, CUDA or the real library.

The struct mirror is checked three ways: field names in header order (parsed from params.h), every
offset and size as a C compiler lays them out, and a round trip through a stub library compiled from
the same headers (which also exercises status codes → exceptions and the size check at load).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fp8attn
from fp8attn import _lib

REPO_ROOT = Path(__file__).resolve().parents[2]
INCLUDE_DIR = REPO_ROOT / "include"
PARAMS_H = INCLUDE_DIR / "fp8attn" / "params.h"

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) to lay out the C structs")


def _struct_members(header: str, struct: str) -> list[str]:
    """Member names of ``typedef struct <struct> {...}`` in declaration order (handles `a, b, c;` lists)."""
    text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    body = re.search(r"typedef\s+struct\s+" + struct + r"\s*\{(.*?)\}\s*" + struct + r"\s*;", text, re.S)
    assert body, f"struct {struct} not found in params.h"
    names = []
    for decl in body.group(1).split(";"):
        if not decl.strip():
            continue
        for part in decl.split(","):
            match = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", part.strip())
            assert match, f"cannot parse member declaration {decl!r}"
            names.append(match.group(1))
    return names


@pytest.mark.parametrize("struct,mirror", [("fp8attn_fwd_params", _lib.FwdParams), ("fp8attn_descale", _lib.Descale),
                                           ("fp8attn_shape", _lib.Shape)])
def test_field_names_follow_header_order(struct: str, mirror: type) -> None:
    assert [name for name, _ in mirror._fields_] == _struct_members(PARAMS_H.read_text(), struct)


def _compile(tmp_path: Path, source: str, name: str, *flags: str) -> Path:
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = tmp_path / name
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", f"-I{INCLUDE_DIR}", *flags, "-o", str(out), str(src)],
                   check=True, capture_output=True, text=True)
    return out


@needs_cc
def test_offsets_and_sizes_match_c(tmp_path: Path) -> None:
    lines = []
    mirrors = {"fp8attn_fwd_params": _lib.FwdParams, "fp8attn_descale": _lib.Descale, "fp8attn_shape": _lib.Shape}
    for struct, mirror in mirrors.items():
        lines.append(f'printf("{struct} sizeof %zu\\n", sizeof({struct}));')
        for field, _ in mirror._fields_:
            lines.append(f'printf("{struct} {field} %zu %zu\\n", offsetof({struct}, {field}), '
                         f'sizeof((({struct}*)0)->{field}));')
    source = "#include <stddef.h>\n#include <stdio.h>\n#include \"fp8attn/c_api.h\"\nint main(void) {\n"
    source += "\n".join("  " + line for line in lines) + "\n  return 0;\n}\n"
    exe = _compile(tmp_path, source, "layout")
    c_layout = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    mismatches = []
    for line in c_layout:
        struct, field, *numbers = line.split()
        mirror = mirrors[struct]
        if field == "sizeof":
            py = (ctypes.sizeof(mirror),)
        else:
            descriptor = getattr(mirror, field)
            py = (descriptor.offset, descriptor.size)
        if tuple(int(n) for n in numbers) != py:
            mismatches.append(f"{struct}.{field}: C {numbers} vs ctypes {list(py)}")
    assert not mismatches, "ctypes mirror differs from the C layout:\n" + "\n".join(mismatches)


STUB_SOURCE = textwrap.dedent("""
    /* A stand-in libfp8attn.so built from the real headers: records the last params it was given. */
    #include <stdio.h>
    #include <string.h>
    #include "fp8attn/c_api.h"

    #ifndef SIZE_DELTA
    #define SIZE_DELTA 0
    #endif
    #ifndef ABI_DELTA
    #define ABI_DELTA 0
    #endif

    static fp8attn_fwd_params last_params;
    static void* last_stream;

    void fp8attn_fwd_params_init(fp8attn_fwd_params* p) {
      memset(p, 0, sizeof *p);
      p->window_left = -1;
      p->window_right = -1;
    }
    size_t fp8attn_fwd_params_size(void) { return sizeof(fp8attn_fwd_params) + SIZE_DELTA; }
    int fp8attn_fwd_workspace_size(const fp8attn_fwd_params* p, size_t* bytes, char* err, size_t len) {
      (void)err; (void)len;
      *bytes = (size_t)p->num_splits * 4096u;
      return FP8ATTN_OK;
    }
    int fp8attn_fwd(const fp8attn_fwd_params* p, void* stream, char* err, size_t len) {
      last_params = *p;
      last_stream = stream;
      /* head_dim 1..4 selects a failing status, with a message naming it. */
      if (p->head_dim >= 1 && p->head_dim <= 4) {
        snprintf(err, len, "stub status %d for head_dim", p->head_dim);
        return p->head_dim;
      }
      return FP8ATTN_OK;
    }
    const char* fp8attn_compiled_kernels(void) {
      return "d=128 dv=128 block_m=128 block_n=128\\nd=128 dv=128 block_m=64 block_n=128\\n";
    }
    const char* fp8attn_version(void) { return "0.0.0-stub"; }
    int fp8attn_abi_version(void) { return FP8ATTN_ABI_VERSION + ABI_DELTA; }
    const fp8attn_fwd_params* stub_last_params(void) { return &last_params; }
    void* stub_last_stream(void) { return last_stream; }
""")


@pytest.fixture()
def stub_lib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ctypes.CDLL:
    path = _compile(tmp_path, STUB_SOURCE, "libfp8attn.so", "-shared", "-fPIC")
    monkeypatch.setenv("FP8ATTN_LIB", str(path))
    stub = ctypes.CDLL(str(path))
    stub.stub_last_params.restype = ctypes.POINTER(_lib.FwdParams)
    stub.stub_last_stream.restype = ctypes.c_void_p
    return stub


@needs_cc
def test_round_trip_through_c(stub_lib: ctypes.CDLL) -> None:
    lib = _lib.get_lib()
    params = lib.new_params()
    assert (params.window_left, params.window_right) == (-1, -1)  # defaults come from the library
    params.q = 0x1000
    params.q_dtype = _lib.DTYPE_E4M3
    params.o_head_stride = 1 << 40
    params.seqlen_k = 32768
    params.softmax_scale = 0.125
    params.k_descale.ptr = 0x2000
    params.k_descale.ndim = 2
    params.k_descale.size[0], params.k_descale.size[1] = 7, 8
    params.k_descale.batch_stride, params.k_descale.head_stride = 0, 1
    params.k_descale.dtype = _lib.DTYPE_F32
    params.sink_dtype = _lib.DTYPE_BF16
    params.num_splits = 3
    assert lib.workspace_size(params) == 3 * 4096
    params.workspace_bytes = 3 * 4096
    lib.fwd(params, 0xABC0)

    seen = stub_lib.stub_last_params().contents
    assert stub_lib.stub_last_stream() == 0xABC0
    assert (seen.q, seen.q_dtype, seen.o_head_stride, seen.seqlen_k) == (0x1000, _lib.DTYPE_E4M3, 1 << 40, 32768)
    assert seen.softmax_scale == 0.125
    assert (seen.k_descale.ptr, seen.k_descale.ndim, tuple(seen.k_descale.size)) == (0x2000, 2, (7, 8))
    assert (seen.k_descale.batch_stride, seen.k_descale.head_stride) == (0, 1)
    assert (seen.sink_dtype, seen.num_splits, seen.workspace_bytes) == (_lib.DTYPE_BF16, 3, 3 * 4096)
    assert lib.compiled_kernels() == ["d=128 dv=128 block_m=128 block_n=128", "d=128 dv=128 block_m=64 block_n=128"]


@needs_cc
@pytest.mark.parametrize("code,exc", [
    (_lib.STATUS_INVALID_ARGUMENT, ValueError),
    (_lib.STATUS_NOT_SUPPORTED, NotImplementedError),
    (_lib.STATUS_NOT_COMPILED, _lib.KernelNotCompiledError),
    (_lib.STATUS_CUDA_ERROR, RuntimeError),
])
def test_status_codes_raise_with_library_message(stub_lib: ctypes.CDLL, code: int, exc: type) -> None:
    lib = _lib.get_lib()
    params = lib.new_params()
    params.head_dim = code
    with pytest.raises(exc, match=f"stub status {code} for head_dim"):
        lib.fwd(params, 0)


def test_not_compiled_is_a_not_implemented_error() -> None:
    assert issubclass(_lib.KernelNotCompiledError, NotImplementedError)
    with pytest.raises(RuntimeError, match="unknown status code 99"):
        _lib.raise_for_status(99, "x", "test")
    _lib.raise_for_status(_lib.STATUS_OK, "", "test")


@needs_cc
def test_struct_size_mismatch_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _compile(tmp_path, STUB_SOURCE, "libfp8attn.so", "-shared", "-fPIC", "-DSIZE_DELTA=8")
    monkeypatch.setenv("FP8ATTN_LIB", str(path))
    with pytest.raises(_lib.LibraryNotFoundError, match="disagree"):
        _lib.get_lib()


@needs_cc
def test_abi_version_mismatch_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _compile(tmp_path, STUB_SOURCE, "libfp8attn.so", "-shared", "-fPIC", "-DABI_DELTA=1")
    monkeypatch.setenv("FP8ATTN_LIB", str(path))
    with pytest.raises(_lib.LibraryNotFoundError, match=f"C ABI {_lib.ABI_VERSION + 1} .* binds C ABI"):
        _lib.get_lib()


def test_abi_version_is_the_headers() -> None:
    match = re.search(r"#define\s+FP8ATTN_ABI_VERSION\s+(\d+)", (INCLUDE_DIR / "fp8attn" / "c_api.h").read_text())
    assert match, "c_api.h defines no FP8ATTN_ABI_VERSION"
    assert _lib.ABI_VERSION == int(match.group(1)), "the ctypes binding and c_api.h disagree on the C ABI version"


def test_missing_library_names_where_it_looked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "libfp8attn.so"
    monkeypatch.setenv("FP8ATTN_LIB", str(missing))
    assert _lib.library_candidates() == [missing]
    with pytest.raises(_lib.LibraryNotFoundError, match=re.escape(str(missing))):
        _lib.get_lib()


def test_default_search_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # The package's own copy (an installed wheel) first, the source checkout's build/ last.
    monkeypatch.delenv("FP8ATTN_LIB", raising=False)
    candidates = _lib.library_candidates()
    assert candidates[0] == REPO_ROOT / "python" / "fp8attn" / "libfp8attn.so"
    assert candidates[-1] == REPO_ROOT / "build" / "libfp8attn.so"
    assert all(path.name == "libfp8attn.so" for path in candidates)


def test_import_needs_neither_torch_nor_library(tmp_path: Path) -> None:
    # A fresh interpreter where `import torch` fails, and FP8ATTN_LIB points at nothing.
    script = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # makes `import torch` raise ImportError
        sys.path.insert(0, sys.argv[1])
        import fp8attn
        assert fp8attn.use_fp8attn((9, 0), "fp8", 128)
        try:
            fp8attn.flash_attn_varlen_func
        except ImportError as err:
            assert "PyTorch" in str(err), err
        else:
            raise AssertionError("expected ImportError")
        try:
            fp8attn.get_lib()
        except fp8attn.LibraryNotFoundError as err:
            assert "not found" in str(err), err
        else:
            raise AssertionError("expected LibraryNotFoundError")
        print("ok")
    """)
    env = {**os.environ, "FP8ATTN_LIB": str(tmp_path / "missing.so")}
    result = subprocess.run([sys.executable, "-c", script, str(REPO_ROOT / "python")], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_built_library_loads_and_fails_cleanly() -> None:
    """The real libfp8attn.so (build/, or FP8ATTN_LIB), where built: it loads (size check included) without
    a GPU, its defaults are those params.h documents, and a call with empty params is an error, never a crash."""
    if not any(path.is_file() for path in _lib.library_candidates()):
        pytest.skip("libfp8attn.so is not built")
    lib = _lib.get_lib()
    params = lib.new_params()
    assert (params.window_left, params.window_right, params.num_splits) == (-1, -1, 0)
    assert params.q is None and params.workspace is None
    assert lib.compiled_kernels(), "the build lists no kernels"
    assert lib.version() == fp8attn.__version__  # both from CMakeLists.txt's project VERSION
    assert not any("one_level" in kernel for kernel in lib.compiled_kernels()), "test-only kernels are shipped"
    # Without a GPU the first call reports the CUDA error; with one, the empty params are invalid.
    with pytest.raises((ValueError, RuntimeError), match="fp8attn: "):
        lib.workspace_size(params)
    with pytest.raises((ValueError, RuntimeError), match="fp8attn: "):
        lib.fwd(params, 0)
