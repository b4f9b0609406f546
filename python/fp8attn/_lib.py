"""ctypes binding of libfp8attn.so: the C ABI of include/fp8attn/c_api.h over include/fp8attn/params.h.

This module needs neither torch nor a GPU. The library is found and loaded on the first call to
:func:`get_lib`, never at import, so ``import fp8attn`` works on a machine without the .so; the first
op call then raises :class:`LibraryNotFoundError` naming every place it looked.

The ctypes structures below mirror the C structs field by field, in order. ``get_lib`` compares
``ctypes.sizeof(FwdParams)`` with the library's ``fp8attn_fwd_params_size()`` and its
``fp8attn_abi_version()`` with :data:`ABI_VERSION`, and refuses a library that differs in either;
tests/python/test_lib.py also checks every field offset against a C compiler.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path
from typing import Optional

# FP8ATTN_ABI_VERSION of the c_api.h / params.h this binding mirrors (test_lib.py compares the two).
ABI_VERSION = 2

# fp8attn_status_code (c_api.h).
STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_NOT_SUPPORTED = 2
STATUS_NOT_COMPILED = 3
STATUS_CUDA_ERROR = 4

# fp8attn_dtype (params.h): the numbering is part of the C ABI.
DTYPE_NONE = 0
DTYPE_E4M3 = 1
DTYPE_E5M2 = 2
DTYPE_F16 = 3
DTYPE_BF16 = 4
DTYPE_F32 = 5
DTYPE_I32 = 6

_LIB_NAME = "libfp8attn.so"
_ENV_LIB = "FP8ATTN_LIB"
_ERR_LEN = 2048

# C enums are ints on every ABI we target (x86-64 and aarch64 Linux).
_c_enum = ctypes.c_int


class Descale(ctypes.Structure):
    """Mirror of ``fp8attn_descale``: a per-(batch, kv_head) fp32 scale read in place.

    value(b, h) = ptr[b * batch_stride + h * head_stride]; ndim 0 means one scalar (strides 0).
    """

    _fields_ = [
        ("ptr", ctypes.c_void_p),
        ("ndim", ctypes.c_int32),
        ("size", ctypes.c_int64 * 2),
        ("batch_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
        ("dtype", _c_enum),
    ]


class Shape(ctypes.Structure):
    """Mirror of ``fp8attn_shape``: a tensor's shape as allocated, size[0..ndim-1] used; ndim -1: not described."""

    _fields_ = [
        ("ndim", ctypes.c_int32),
        ("size", ctypes.c_int64 * 4),
    ]


class FwdParams(ctypes.Structure):
    """Mirror of ``fp8attn_fwd_params`` (strides in elements; see params.h for the layouts)."""

    _fields_ = [
        # tensors
        ("q", ctypes.c_void_p),
        ("q_dtype", _c_enum),
        ("q_batch_stride", ctypes.c_int64),
        ("q_row_stride", ctypes.c_int64),
        ("q_head_stride", ctypes.c_int64),
        ("k", ctypes.c_void_p),
        ("k_dtype", _c_enum),
        ("k_batch_stride", ctypes.c_int64),
        ("k_row_stride", ctypes.c_int64),
        ("k_head_stride", ctypes.c_int64),
        ("v", ctypes.c_void_p),
        ("v_dtype", _c_enum),
        ("v_batch_stride", ctypes.c_int64),
        ("v_row_stride", ctypes.c_int64),
        ("v_head_stride", ctypes.c_int64),
        ("out", ctypes.c_void_p),
        ("out_dtype", _c_enum),
        ("o_batch_stride", ctypes.c_int64),
        ("o_row_stride", ctypes.c_int64),
        ("o_head_stride", ctypes.c_int64),
        ("lse", ctypes.c_void_p),
        ("lse_batch_stride", ctypes.c_int64),
        ("lse_head_stride", ctypes.c_int64),
        # sizes
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("total_q", ctypes.c_int32),
        ("total_k", ctypes.c_int32),
        ("num_heads_q", ctypes.c_int32),
        ("num_heads_kv", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        # variable lengths
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("seqused_k", ctypes.c_void_p),
        # paged K/V
        ("block_table", ctypes.c_void_p),
        ("block_table_batch_stride", ctypes.c_int64),
        ("max_pages_per_seq", ctypes.c_int32),
        ("num_pages", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        # attention
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("q_descale", Descale),
        ("k_descale", Descale),
        ("v_descale", Descale),
        ("sink", ctypes.c_void_p),
        ("sink_dtype", _c_enum),
        ("softcap", ctypes.c_float),
        # FP8 output
        ("output_scale", Descale),
        # features fp8attn rejects by name
        ("qv", ctypes.c_void_p),
        ("block_sparsity", ctypes.c_void_p),
        # launch
        ("num_splits", ctypes.c_int32),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        # extents: what the caller allocated
        ("q_shape", Shape),
        ("k_shape", Shape),
        ("v_shape", Shape),
        ("out_shape", Shape),
        ("lse_shape", Shape),
        ("cu_seqlens_q_len", ctypes.c_int64),
        ("cu_seqlens_k_len", ctypes.c_int64),
        ("seqused_k_len", ctypes.c_int64),
        ("block_table_rows", ctypes.c_int64),
        ("sink_len", ctypes.c_int64),
    ]


class LibraryNotFoundError(RuntimeError):
    """libfp8attn.so could not be found or loaded, or does not match this binding."""


class KernelNotCompiledError(NotImplementedError):
    """The call is supported, but its kernel is not in this build (FP8ATTN_HEAD_DIMS)."""


def raise_for_status(code: int, message: str, where: str) -> None:
    """Turns a C status code into the matching Python exception; returns on FP8ATTN_OK.

    INVALID_ARGUMENT -> ValueError, NOT_SUPPORTED -> NotImplementedError,
    NOT_COMPILED -> KernelNotCompiledError (a NotImplementedError), CUDA_ERROR and unknown codes -> RuntimeError.
    """
    if code == STATUS_OK:
        return
    # An argument error names the argument; the C entry point (``where``) would only distract a Python caller,
    # who called flash_attn_* (interface.py adds that name). A runtime failure keeps it, for the bug report.
    text = f"fp8attn: {message or 'no message from the library'}"
    if code == STATUS_INVALID_ARGUMENT:
        raise ValueError(text)
    if code == STATUS_NOT_SUPPORTED:
        raise NotImplementedError(text)
    if code == STATUS_NOT_COMPILED:
        raise KernelNotCompiledError(text)
    if code == STATUS_CUDA_ERROR:
        raise RuntimeError(f"{text} (from {where})")
    raise RuntimeError(f"{text} (from {where}; unknown status code {code})")


def library_candidates() -> list[Path]:
    """Where the library is looked for, in order.

    FP8ATTN_LIB if set (then only there, so a wrong setting is an error rather than a silent fallback);
    else the package's own copy (next to this module: where `pip install .` puts it; or the ignored
    python/fp8attn/_lib/ folder), then <repo>/build/libfp8attn.so for a source checkout.
    """
    env = os.environ.get(_ENV_LIB)
    if env:
        return [Path(env)]
    package_dir = Path(__file__).resolve().parent
    repo_root = package_dir.parent.parent
    return [
        package_dir / _LIB_NAME,
        package_dir / "_lib" / _LIB_NAME,
        repo_root / "build" / _LIB_NAME,
    ]


class Library:
    """The loaded libfp8attn.so with typed entry points."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._dll = ctypes.CDLL(str(path))
        except OSError as err:
            raise LibraryNotFoundError(f"fp8attn: cannot load {path}: {err}") from err
        dll = self._dll
        dll.fp8attn_fwd_params_init.argtypes = [ctypes.POINTER(FwdParams)]
        dll.fp8attn_fwd_params_init.restype = None
        dll.fp8attn_fwd_params_size.argtypes = []
        dll.fp8attn_fwd_params_size.restype = ctypes.c_size_t
        dll.fp8attn_fwd_workspace_size.argtypes = [
            ctypes.POINTER(FwdParams), ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p, ctypes.c_size_t]
        dll.fp8attn_fwd_workspace_size.restype = ctypes.c_int
        dll.fp8attn_fwd.argtypes = [ctypes.POINTER(FwdParams), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        dll.fp8attn_fwd.restype = ctypes.c_int
        dll.fp8attn_compiled_kernels.argtypes = []
        dll.fp8attn_compiled_kernels.restype = ctypes.c_char_p
        try:
            dll.fp8attn_abi_version.argtypes = []
            dll.fp8attn_abi_version.restype = ctypes.c_int
            dll.fp8attn_version.argtypes = []
            dll.fp8attn_version.restype = ctypes.c_char_p
        except AttributeError as err:
            raise LibraryNotFoundError(
                f"fp8attn: {path} has no version query (fp8attn_abi_version): it predates this binding "
                f"(C ABI {ABI_VERSION}); rebuild the library") from err

        c_abi = dll.fp8attn_abi_version()
        if c_abi != ABI_VERSION:
            raise LibraryNotFoundError(
                f"fp8attn: {path} implements C ABI {c_abi} but this package binds C ABI {ABI_VERSION}: "
                "install a matching fp8attn (or rebuild the library from this checkout)")
        c_size = dll.fp8attn_fwd_params_size()
        py_size = ctypes.sizeof(FwdParams)
        if c_size != py_size:
            raise LibraryNotFoundError(
                f"fp8attn: {path} has sizeof(fp8attn_fwd_params) = {c_size} bytes but the Python mirror "
                f"(fp8attn._lib.FwdParams) has {py_size}: params.h and _lib.py disagree; rebuild the library "
                "or update the mirror")

    def new_params(self) -> FwdParams:
        """A params struct filled with the library's defaults (fp8attn_fwd_params_init)."""
        params = FwdParams()
        self._dll.fp8attn_fwd_params_init(ctypes.byref(params))
        return params

    def workspace_size(self, params: FwdParams) -> int:
        """Bytes of device scratch fp8attn_fwd needs for these params (0 when unsplit)."""
        nbytes = ctypes.c_size_t(0)
        err = ctypes.create_string_buffer(_ERR_LEN)
        code = self._dll.fp8attn_fwd_workspace_size(ctypes.byref(params), ctypes.byref(nbytes), err, _ERR_LEN)
        raise_for_status(code, err.value.decode(errors="replace"), "fp8attn_fwd_workspace_size")
        return nbytes.value

    def fwd(self, params: FwdParams, stream: int) -> None:
        """Validates and launches on ``stream`` (a cudaStream_t as an int; 0 is the legacy default stream)."""
        err = ctypes.create_string_buffer(_ERR_LEN)
        code = self._dll.fp8attn_fwd(ctypes.byref(params), ctypes.c_void_p(stream or None), err, _ERR_LEN)
        raise_for_status(code, err.value.decode(errors="replace"), "fp8attn_fwd")

    def version(self) -> str:
        """The library's version string (fp8attn_version); equal to ``fp8attn.__version__`` when they match."""
        return self._dll.fp8attn_version().decode()

    def compiled_kernels(self) -> list[str]:
        """The kernels in this build, one description per entry."""
        text = self._dll.fp8attn_compiled_kernels()
        return [line for line in (text or b"").decode().splitlines() if line.strip()]


@functools.lru_cache(maxsize=None)
def _load(path_key: Optional[str]) -> Library:
    # Keyed by FP8ATTN_LIB so that tests changing the variable get a fresh search; the library itself is
    # loaded once per path (dlopen would return the same handle anyway).
    tried = library_candidates()
    for path in tried:
        if path.is_file():
            return Library(path)
    where = ", ".join(str(p) for p in tried)
    raise LibraryNotFoundError(
        f"fp8attn: {_LIB_NAME} not found (looked in: {where}). Install the package with `pip install .`, "
        f"build the library with `cmake -B build && cmake --build build`, or set {_ENV_LIB} to its path.")


def get_lib() -> Library:
    """The loaded library; raises LibraryNotFoundError with the searched paths when absent."""
    return _load(os.environ.get(_ENV_LIB))
