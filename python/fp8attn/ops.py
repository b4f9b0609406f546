"""The torch op ``fp8attn::fwd``: tensors → fp8attn_fwd_params → libfp8attn.so on the current stream.

Two implementations of one schema; ``BACKEND`` says which one this process registered:

* ``"compiled"``: libfp8attn_torch.so (src/torch_op/fwd_op.cpp), a C++ op on PyTorch's stable ABI (torch
  >= 2.9), loaded from next to libfp8attn.so. Tensors reach the launch without running Python: the op fills
  the params, plans once through the C ABI, takes the split-KV workspace from torch's caching allocator and
  launches on the current stream. An installed package whose wheel was built without torch (torch installed
  after fp8attn) compiles it at this module's first import from the source it ships (fp8attn/_torch_op/)
  against the running torch, once: ~2.5 s with g++ on 2 cores, then cached in ~/.cache/fp8attn (see
  ``_compile_op``). ``OP_LIBRARY`` is the path that serves.
* ``"ctypes"``: the fallback below, a Python custom op over the ctypes binding (about 100 µs of host time
  more per call). Used when the compiled op is absent or cannot load (torch < 2.9), or when
  FP8ATTN_TORCH_OP=ctypes; ``FALLBACK_REASON`` says why, and a warning says so once when a library that
  was found cannot serve.

With the compiled op, eager calls of the Python wrappers go past torch's dispatcher: ``EAGER_FWD`` is
``fp8attn_eager.fwd`` (src/torch_op/eager_entry.cpp, built next to the op by scripts/build_torch_op.sh against
one torch and one Python), the same C++ from the tensors on, without the dispatcher's ~4-9 µs of argument
handling per call. It hands back (NotImplemented) every call the dispatcher must see: tensor subclasses, torch
function and dispatch modes, a recording profiler, tensors needing grad; torch.compile always gets the op.
``EAGER_FALLBACK_REASON`` says why it is not loaded (not built, another torch, FP8ATTN_EAGER_ENTRY=0).

Why an op that writes into ``out`` (and ``lse``) rather than a functional op returning new tensors:
vLLM and other servers pass a pre-allocated ``out`` (a slice of the layer's output buffer) and expect
it to be written in place, and their own attention op is itself a mutating custom op
(``unified_attention_with_output``). A functional op would force a copy into that buffer. Under
torch.compile a mutating custom op is functionalised (``auto_functionalized``) and Inductor writes it
back in place where it can, so the compiled path costs at most the copy a functional op always costs.
Under CUDA graphs the op allocates only its split-KV workspace, from torch's allocator on the current
stream, which capture serves from the graph's private pool; nothing is cached across calls, so a captured
graph never refers to memory that a later call could free or resize.

Layouts (all strided: only the last dimension must be contiguous; strides are passed, never copied, in
elements of each tensor's own dtype):
    q      varlen [total_q, Hq, d] with cu_seqlens_q, or dense [B, Sq, Hq, d]; E4M3, or fp16/bf16 (quantized
           per (token, head) row by the kernel)
    k, v   paged [num_pages, page_size, Hkv, d] with block_table, varlen [total_k, Hkv, d] with
           cu_seqlens_k, or dense [B, Sk, Hkv, d]; E4M3
    out    like q with dv; fp16/bf16, or E4M3 with output_scale
    lse    varlen [Hq, total_q] or dense [B, Hq, Sq]; fp32; token stride 1
"""

# No `from __future__ import annotations` here: torch.library.custom_op infers the op schema from the
# annotations of `fill_params` (the signature of `fwd`), which must stay real types rather than strings.
import contextlib
import ctypes
import fcntl
import hashlib
import importlib.util
import inspect
import logging
import os
import shutil
import subprocess
import sysconfig
import tempfile
import warnings
from pathlib import Path
from types import ModuleType
from typing import Callable, Optional

import torch
from torch import Tensor

from . import _lib

_DTYPE_CODES = {
    torch.float8_e4m3fn: _lib.DTYPE_E4M3,
    torch.float8_e5m2: _lib.DTYPE_E5M2,
    torch.float16: _lib.DTYPE_F16,
    torch.bfloat16: _lib.DTYPE_BF16,
    torch.float32: _lib.DTYPE_F32,
    torch.int32: _lib.DTYPE_I32,
}


def _dtype_code(t: Tensor, name: str) -> int:
    # The library rejects a known-but-wrong dtype with its own message (e.g. E5M2 → NotImplementedError);
    # a dtype with no C code at all (fnuz, fp64, int64...) can only be named here.
    try:
        return _DTYPE_CODES[t.dtype]
    except KeyError:
        raise ValueError(f"fp8attn: {name} has dtype {t.dtype}, which fp8attn does not take") from None


def _check_last_dim_contiguous(t: Tensor, name: str) -> None:
    # params.h stores no stride for the last dimension: it is 1 by contract, so a violation must be
    # caught here, where the stride is still known.
    if t.size(-1) > 1 and t.stride(-1) != 1:
        raise ValueError(f"fp8attn: {name} must be contiguous in its last dimension, got strides {tuple(t.stride())}")


def _check_ndim(t: Tensor, ndim: int, name: str, layout: str) -> None:
    if t.dim() != ndim:
        raise ValueError(f"fp8attn: {name} must be {layout} ({ndim}-d), got shape {tuple(t.shape)}")


def _check_int32_vector(t: Optional[Tensor], name: str) -> None:
    # Length arrays are read through a bare pointer: int32 and dense.
    if t is None:
        return
    if t.dtype != torch.int32 or t.dim() != 1 or (t.numel() > 1 and t.stride(0) != 1):
        raise ValueError(
            f"fp8attn: {name} must be a contiguous 1-d int32 tensor, got dtype {t.dtype}, shape {tuple(t.shape)}, "
            f"strides {tuple(t.stride())}")


def expected_out_shape(q: Tensor, v: Tensor) -> tuple[int, ...]:
    """out has q's shape with the last dimension replaced by dv = v.shape[-1]."""
    return (*q.shape[:-1], v.shape[-1])


def expected_lse_shape(q: Tensor, varlen_q: bool) -> tuple[int, ...]:
    """lse is [Hq, total_q] for varlen q [total_q, Hq, d], and [B, Hq, Sq] for dense q [B, Sq, Hq, d]."""
    if varlen_q:
        return (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[2], q.shape[1])


def _check_output_shapes(q: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor], varlen_q: bool) -> None:
    """The fake's check: the buffers the op writes have the shapes and dtypes it writes (the library checks the
    same on a real call, validate.cpp's check_extents and check_dtypes)."""
    if tuple(out.shape) != expected_out_shape(q, v):
        raise ValueError(f"fp8attn: out must have shape {expected_out_shape(q, v)}, got {tuple(out.shape)}")
    if out.dtype not in (torch.float16, torch.bfloat16, torch.float8_e4m3fn):
        raise ValueError(f"fp8attn: out must be float16, bfloat16 or float8_e4m3fn, got {out.dtype}")
    if lse is not None:
        if tuple(lse.shape) != expected_lse_shape(q, varlen_q):
            raise ValueError(
                f"fp8attn: lse must have shape {expected_lse_shape(q, varlen_q)}, got {tuple(lse.shape)}")
        _check_lse_dtype(lse)


def _check_lse_dtype(lse: Tensor) -> None:
    # params.h's lse is a float pointer with no dtype field: only this layer can see the dtype.
    if lse.dtype != torch.float32:
        raise ValueError(f"fp8attn: lse must be float32, got {lse.dtype}")


def _fill_descale(desc: _lib.Descale, t: Optional[Tensor], batch: int, num_heads_kv: int, name: str) -> None:
    """Points ``desc`` at a descale tensor, read in place through its strides (vLLM passes expand()ed
    views of the layer's scale; materialising them would cost an allocation and a kernel per call).

    Accepted: None (1.0, the struct default), a 0-d or 1-element tensor (one scalar), [Hkv] (per kv head,
    broadcast over batch), or (B, Hkv) with any strides, 0 included.
    """
    if t is None:
        return
    if t.numel() == 1:  # whatever its shape, one value for every (batch, kv head)
        desc.ndim = 0
        desc.size[0] = desc.size[1] = 0
        desc.batch_stride = desc.head_stride = 0
    elif t.dim() == 2:
        desc.ndim = 2
        desc.size[0], desc.size[1] = t.size(0), t.size(1)
        desc.batch_stride, desc.head_stride = t.stride(0), t.stride(1)
    elif t.dim() == 1 and t.numel() == num_heads_kv:
        desc.ndim = 2
        desc.size[0], desc.size[1] = batch, num_heads_kv
        desc.batch_stride, desc.head_stride = 0, t.stride(0)
    else:
        raise ValueError(
            f"fp8attn: {name} must be 0-d, 1-element, [num_heads_kv] or (batch, num_heads_kv), got shape "
            f"{tuple(t.shape)}")
    desc.ptr = t.data_ptr()
    desc.dtype = _dtype_code(t, name)


def _describe_shape(shape: _lib.Shape, t: Tensor) -> None:
    # The allocation as the library checks it against the sizes (params.h, "Extents").
    shape.ndim = t.dim()
    for i, n in enumerate(t.shape):
        shape.size[i] = n


def fill_params(
    params: _lib.FwdParams,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor],
    cu_seqlens_k: Optional[Tensor],
    seqused_k: Optional[Tensor],
    block_table: Optional[Tensor],
    q_descale: Optional[Tensor],
    k_descale: Optional[Tensor],
    v_descale: Optional[Tensor],
    sink: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    num_splits: int,
    output_scale: Optional[Tensor],
    softcap: float,
) -> None:
    """Fills ``params`` (already defaulted by fp8attn_fwd_params_init) from tensors.

    Checks only what the C library cannot see (the last-dimension stride, tensor ranks per layout, devices,
    dtypes without a C code or a params field, pointer-only arrays being dense); every other rule, out's and
    lse's shapes included, is the library's, so its messages are the single source of truth.
    src/torch_op/fwd_op.cpp is the same mapping in C++.
    """
    varlen_q = cu_seqlens_q is not None
    paged = block_table is not None
    varlen_k = cu_seqlens_k is not None and not paged

    _check_ndim(q, 3 if varlen_q else 4, "q", "[total_q, Hq, d] with cu_seqlens_q" if varlen_q else "[B, Sq, Hq, d]")
    if paged:
        k_layout = "[num_pages, page_size, Hkv, d] with block_table"
    elif varlen_k:
        k_layout = "[total_k, Hkv, d] with cu_seqlens_k"
    else:
        k_layout = "[B, Sk, Hkv, d]"
    _check_ndim(k, 3 if varlen_k else 4, "k", k_layout)
    _check_ndim(v, 3 if varlen_k else 4, "v", k_layout)
    _check_ndim(out, q.dim(), "out", "q's layout with head_dim_v")
    if lse is not None:
        _check_ndim(lse, 2 if varlen_q else 3, "lse", "[Hq, total_q]" if varlen_q else "[B, Hq, Sq]")
    for t, name in ((q, "q"), (k, "k"), (v, "v"), (out, "out")):
        _check_last_dim_contiguous(t, name)
    if lse is not None:
        _check_lse_dtype(lse)
        if lse.size(-1) > 1 and lse.stride(-1) != 1:  # params.h has no token stride for lse: it is 1
            raise ValueError(f"fp8attn: lse must have token stride 1, got strides {tuple(lse.stride())}")
    for t, name in ((cu_seqlens_q, "cu_seqlens_q"), (cu_seqlens_k, "cu_seqlens_k"), (seqused_k, "seqused_k")):
        _check_int32_vector(t, name)
    named = {
        "k": k, "v": v, "out": out, "lse": lse, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
        "seqused_k": seqused_k, "block_table": block_table, "q_descale": q_descale, "k_descale": k_descale,
        "v_descale": v_descale, "s_aux": sink, "output_scale": output_scale,
    }
    for name, t in named.items():
        if t is not None and t.device != q.device:
            raise ValueError(f"fp8attn: {name} is on {t.device} but q is on {q.device}")

    # Tensors: pointers, dtypes and element strides. The batch stride of varlen tensors is unused.
    params.q, params.q_dtype = q.data_ptr(), _dtype_code(q, "q")
    if varlen_q:
        params.q_batch_stride, params.q_row_stride, params.q_head_stride = 0, q.stride(0), q.stride(1)
        params.o_batch_stride, params.o_row_stride, params.o_head_stride = 0, out.stride(0), out.stride(1)
    else:
        params.q_batch_stride, params.q_row_stride, params.q_head_stride = q.stride(0), q.stride(1), q.stride(2)
        params.o_batch_stride, params.o_row_stride, params.o_head_stride = out.stride(0), out.stride(1), out.stride(2)
    params.k, params.k_dtype = k.data_ptr(), _dtype_code(k, "k")
    params.v, params.v_dtype = v.data_ptr(), _dtype_code(v, "v")
    if varlen_k:
        params.k_batch_stride, params.k_row_stride, params.k_head_stride = 0, k.stride(0), k.stride(1)
        params.v_batch_stride, params.v_row_stride, params.v_head_stride = 0, v.stride(0), v.stride(1)
    else:  # dense [B, Sk, ...] or paged [num_pages, page_size, ...]: the leading stride is the batch/page stride
        params.k_batch_stride, params.k_row_stride, params.k_head_stride = k.stride(0), k.stride(1), k.stride(2)
        params.v_batch_stride, params.v_row_stride, params.v_head_stride = v.stride(0), v.stride(1), v.stride(2)
    params.out, params.out_dtype = out.data_ptr(), _dtype_code(out, "out")
    if lse is not None:
        params.lse = lse.data_ptr()
        if varlen_q:
            params.lse_batch_stride, params.lse_head_stride = 0, lse.stride(0)
        else:
            params.lse_batch_stride, params.lse_head_stride = lse.stride(0), lse.stride(1)

    # Sizes.
    batch = cu_seqlens_q.numel() - 1 if varlen_q else q.size(0)
    params.batch = batch
    params.seqlen_q = max_seqlen_q if varlen_q else q.size(1)
    params.seqlen_k = max_seqlen_k if (varlen_k or paged) else k.size(1)
    params.total_q = q.size(0) if varlen_q else 0
    params.total_k = k.size(0) if varlen_k else 0
    params.num_heads_q = q.size(-2)
    params.num_heads_kv = k.size(-2)
    params.head_dim = q.size(-1)
    params.head_dim_v = v.size(-1)

    params.cu_seqlens_q = cu_seqlens_q.data_ptr() if cu_seqlens_q is not None else None
    params.cu_seqlens_k = cu_seqlens_k.data_ptr() if cu_seqlens_k is not None else None
    params.seqused_k = seqused_k.data_ptr() if seqused_k is not None else None

    if paged:
        if block_table.dtype != torch.int32 or block_table.dim() != 2:
            raise ValueError(
                f"fp8attn: block_table must be a 2-d int32 tensor (batch, max_pages), got dtype {block_table.dtype}, "
                f"shape {tuple(block_table.shape)}")
        _check_last_dim_contiguous(block_table, "block_table")  # rows may be strided (sliced views), columns not
        params.block_table = block_table.data_ptr()
        params.block_table_batch_stride = block_table.stride(0)
        params.max_pages_per_seq = block_table.size(1)
        params.num_pages = k.size(0)
        params.page_size = k.size(1)

    # Extents: what was allocated, so the library refuses arrays that disagree with the sizes.
    for shape, t in ((params.q_shape, q), (params.k_shape, k), (params.v_shape, v), (params.out_shape, out)):
        _describe_shape(shape, t)
    if lse is not None:
        _describe_shape(params.lse_shape, lse)
    for field, t in (("cu_seqlens_q_len", cu_seqlens_q), ("cu_seqlens_k_len", cu_seqlens_k),
                     ("seqused_k_len", seqused_k), ("block_table_rows", block_table), ("sink_len", sink)):
        if t is not None:
            setattr(params, field, t.size(0) if t.dim() > 0 else 1)

    params.softmax_scale = softmax_scale
    params.causal = int(causal)
    params.window_left = window_left
    params.window_right = window_right
    _fill_descale(params.q_descale, q_descale, batch, params.num_heads_kv, "q_descale")
    _fill_descale(params.k_descale, k_descale, batch, params.num_heads_kv, "k_descale")
    _fill_descale(params.v_descale, v_descale, batch, params.num_heads_kv, "v_descale")
    if sink is not None:
        if sink.dim() != 1 or (sink.numel() > 1 and sink.stride(0) != 1):
            raise ValueError(f"fp8attn: s_aux must be a contiguous 1-d [Hq] tensor, got shape {tuple(sink.shape)}")
        params.sink, params.sink_dtype = sink.data_ptr(), _dtype_code(sink, "s_aux")
    params.num_splits = num_splits
    if output_scale is not None:
        # One scalar as an ndim-0 scale; any other tensor keeps a nonzero ndim, which the library refuses by name.
        params.output_scale.ndim = 0 if output_scale.numel() == 1 else max(output_scale.dim(), 1)
        params.output_scale.ptr = output_scale.data_ptr()
        params.output_scale.dtype = _dtype_code(output_scale, "output_scale")
    params.softcap = softcap


def _fwd(*args) -> None:
    """FP8 attention forward writing ``out`` (and ``lse`` when given) in place; see the module docstring
    for layouts. Launches on torch's current stream of q's device and never synchronizes.

    Takes the parameters of ``fill_params`` after ``params``, positionally (see ``_OP_SIGNATURE``)."""
    q = args[0]
    lib = _lib.get_lib()
    params = lib.new_params()
    fill_params(params, *args)
    # The library queries and launches on the current CUDA device: make it q's.
    device_ctx = (torch.cuda.device(q.device) if q.device.index != torch.cuda.current_device()
                  else contextlib.nullcontext())
    with device_ctx:
        nbytes = lib.workspace_size(params)
        # Held in a local until the launch is enqueued; the caching allocator orders its reuse on this stream.
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=q.device) if nbytes else None
        if workspace is not None:
            params.workspace = workspace.data_ptr()
            params.workspace_bytes = nbytes
        lib.fwd(params, torch.cuda.current_stream(q.device).cuda_stream)


def _fwd_fake(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor],
              cu_seqlens_q: Optional[Tensor], *_rest) -> None:
    # The op returns nothing; what tracing can check is that the buffers it writes have the right
    # shapes and dtypes, so a bad call fails at compile time rather than at the first replay.
    _check_output_shapes(q, v, out, lse, cu_seqlens_q is not None)


_OP_LIB_NAME = "libfp8attn_torch.so"
_ENV_BACKEND = "FP8ATTN_TORCH_OP"
_MIN_TORCH = "2.9"  # the stable ABI the op library targets (TORCH_TARGET_VERSION in cmake/torch_op.cmake)


_SOURCE_DIR = "_torch_op"  # the op's source and C headers in an installed package (cmake/install.cmake)
_TORCH_TARGET_VERSION = "0x0209000000000000"  # as cmake/torch_op.cmake and scripts/build_torch_op.sh


def _cache_dir() -> Path:
    """A folder of this user's for compiled op libraries: ~/.cache/fp8attn, else <tmp>/fp8attn-<uid>."""
    bases = []
    with contextlib.suppress(RuntimeError, KeyError):  # no home directory
        bases.append(Path.home() / ".cache" / "fp8attn")
    bases.append(Path(tempfile.gettempdir()) / f"fp8attn-{os.getuid()}")
    for folder in bases:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Only a folder of this user's: a library loaded from it runs in this process.
            if folder.stat().st_uid == os.getuid() and os.access(folder, os.W_OK):
                return folder
        except OSError:
            continue
    raise OSError(f"no writable cache folder of this user's ({', '.join(str(b) for b in bases)})")


def _compile_shipped(lib_path: Path, source_name: str, target_name: str, flags: list[str],
                     libraries: list[str]) -> tuple[Optional[Path], Optional[str]]:
    """Compiles ``source_name`` of the source an installed package ships (fp8attn/_torch_op/) against the running
    torch and ``lib_path`` (the loaded libfp8attn.so) into the cache as ``target_name`` (a stem; the cached file
    is ``<stem>-<key>.so``), with the flags of scripts/build_torch_op.sh plus ``flags`` and ``libraries``.

    Returns (path, None), or (None, why not); (None, None) when there is no shipped source (a source
    checkout: there scripts/build_torch_op.sh or the CMake build makes it). Cached under a key of the
    source, the headers, the library (path, size, mtime), torch (version, folder), the flags and the compiler,
    so that a reinstall or another torch compiles anew; concurrent processes (one per GPU) compile it once,
    under a file lock, and a library appears in the cache only whole (written aside, then renamed)."""
    src_dir = Path(__file__).resolve().parent / _SOURCE_DIR
    source = src_dir / source_name
    if not source.is_file():
        return None, None
    torch_dir = Path(torch.__file__).resolve().parent
    if not (torch_dir / "include" / "torch" / "csrc" / "stable" / "library.h").is_file():
        return None, f"torch {torch.__version__} at {torch_dir} has no stable-ABI headers to compile {source_name}"
    if not (torch_dir / "lib" / "libtorch_cuda.so").is_file():
        return None, f"torch {torch.__version__} at {torch_dir} is built without CUDA (no libtorch_cuda.so)"
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        return None, f"no C++ compiler (c++ or g++ on PATH) to compile {source}"
    key = hashlib.sha256()
    for path in [source, src_dir / "fwd_call.h", *sorted((src_dir / "include").rglob("*.h"))]:
        key.update(path.name.encode() + b"\0" + path.read_bytes())
    stat = lib_path.stat()
    key.update(f"{lib_path}|{stat.st_size}|{stat.st_mtime_ns}|{torch.__version__}|{torch_dir}|{compiler}|"
               f"{' '.join(flags)}".encode())
    try:
        cache = _cache_dir()
    except OSError as err:
        return None, str(err)
    target = cache / f"{target_name}-{key.hexdigest()[:16]}.so"
    if target.is_file():
        return target, None
    with open(cache / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if target.is_file():  # another process compiled it meanwhile
            return target, None
        partial = cache / f"{target.name}.{os.getpid()}.tmp"
        command = [
            compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", *flags,
            "-I", str(src_dir / "include"), "-isystem", str(torch_dir / "include"), str(source),
            # libfp8attn.so by its path (the op needs its soname; the loaded copy serves it) and its folder as
            # RUNPATH; torch's libraries by name only: torch has loaded them by the time the op loads.
            str(lib_path), f"-Wl,-rpath,{lib_path.parent}",
            "-L", str(torch_dir / "lib"), *(f"-l{name}" for name in libraries),
            "-o", str(partial),
        ]
        logging.getLogger(__name__).info("fp8attn: compiling %s for torch %s: %s", target, torch.__version__,
                                         " ".join(command))
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as err:
            partial.unlink(missing_ok=True)
            return None, f"cannot compile {source}: {err}"
        if run.returncode != 0:
            partial.unlink(missing_ok=True)
            tail = " ".join((run.stderr or run.stdout).strip().splitlines()[-5:])
            return None, f"compiling {source} failed (exit {run.returncode}: {' '.join(command)}): {tail}"
        os.replace(partial, target)
    return target, None


def _compile_op(lib_path: Path) -> tuple[Optional[Path], Optional[str]]:
    """libfp8attn_torch.so from the shipped source (_compile_shipped): the stable ABI, so any Python."""
    return _compile_shipped(lib_path, "fwd_op.cpp", _OP_LIB_NAME[:-3],
                            [f"-DTORCH_TARGET_VERSION={_TORCH_TARGET_VERSION}"], ["torch_cpu", "torch_cuda"])


def _compile_eager_entry(lib_path: Path) -> tuple[Optional[Path], Optional[str]]:
    """The eager entry from the shipped source (_compile_shipped), for this torch and this Python: ATen, the
    Python C API (Python.h must be installed) and torch's C++ ABI setting, as cmake/torch_op.cmake builds it."""
    python_include = Path(sysconfig.get_paths()["include"])
    if not (python_include / "Python.h").is_file():
        return None, f"no Python.h in {python_include} to compile the eager entry (install the Python headers)"
    torch_include = Path(torch.__file__).resolve().parent / "include"
    flags = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             f'-DFP8ATTN_EAGER_TORCH_VERSION="{torch.__version__}"',
             "-isystem", str(torch_include / "torch" / "csrc" / "api" / "include"), "-isystem", str(python_include)]
    # The Python version is in the cached name: the module serves one Python, and one user may run several.
    stem = f"fp8attn_eager-py{sysconfig.get_config_var('py_version_nodot')}"
    return _compile_shipped(lib_path, "eager_entry.cpp", stem, flags, ["torch_python", "torch_cpu", "torch_cuda", "c10"])


def _load_compiled_op() -> tuple[Optional[ctypes.CDLL], Optional[str], bool, Optional[Path]]:
    """Loads libfp8attn_torch.so, which registers fp8attn::fwd: the one next to libfp8attn.so, else (an
    installed package) the one compiled from the package's source. Returns (library, reason it was not loaded,
    whether that reason deserves a warning, the library's path)."""
    if os.environ.get(_ENV_BACKEND, "").lower() == "ctypes":
        return None, f"{_ENV_BACKEND}=ctypes", False, None
    if torch.__version__ < _MIN_TORCH:
        return None, f"torch {torch.__version__} predates the stable ABI op (needs >= {_MIN_TORCH})", True, None
    try:
        lib_path = _lib.get_lib().path
    except _lib.LibraryNotFoundError as err:
        return None, str(err), False, None  # the first call raises this anyway; no op library can help
    path = lib_path.parent / _OP_LIB_NAME
    if not path.is_file():
        compiled, why_not = _compile_op(lib_path)
        if compiled is None:
            reason = f"{path} is not built (build with torch >= {_MIN_TORCH}: see cmake/torch_op.cmake)"
            return None, reason + (f" and cannot be compiled here: {why_not}" if why_not else ""), True, None
        path = compiled
    try:
        torch.ops.load_library(str(path))
        op_lib = ctypes.CDLL(str(path))
        op_lib.fp8attn_torch_last_error_code.restype = ctypes.c_int
    except (OSError, RuntimeError, AttributeError) as err:
        return None, f"cannot load {path}: {err}", True, None
    return op_lib, None, False, path


_op_lib, FALLBACK_REASON, _warn, OP_LIBRARY = _load_compiled_op()
BACKEND = "compiled" if _op_lib is not None else "ctypes"

if BACKEND == "compiled":
    fwd = torch.ops.fp8attn.fwd
    torch.library.register_fake("fp8attn::fwd")(_fwd_fake)
else:
    if _warn:
        warnings.warn(f"fp8attn: using the ctypes torch op, slower on the host: {FALLBACK_REASON}", stacklevel=2)
    # The op's parameters, with their annotations, are those of fill_params after ``params``: one list, so
    # the schema torch.library.custom_op infers from it and the Python-side filling cannot drift apart.
    _OP_SIGNATURE = inspect.signature(fill_params)
    _fwd.__signature__ = _OP_SIGNATURE.replace(parameters=list(_OP_SIGNATURE.parameters.values())[1:])
    fwd = torch.library.custom_op("fp8attn::fwd", _fwd, mutates_args=("out", "lse"), device_types="cuda")
    fwd.register_fake(_fwd_fake)

# The overload itself, so that a call skips the packet's overload resolution.
FWD = torch.ops.fp8attn.fwd.default

_ENV_EAGER = "FP8ATTN_EAGER_ENTRY"


def _load_eager_entry() -> tuple[Optional[ModuleType], Optional[str]]:
    """The eager entry built next to the compiled op (scripts/build_torch_op.sh), if it loads under this torch.
    Returns (module, None) or (None, why not)."""
    if os.environ.get(_ENV_EAGER, "") == "0":
        return None, f"{_ENV_EAGER}=0"
    if OP_LIBRARY is None:
        return None, f"the compiled op is not loaded ({FALLBACK_REASON})"
    # Beside libfp8attn.so, where the install and scripts/build_torch_op.sh put it; else (an installed package
    # whose wheel was built without this torch or this Python) compiled from the shipped source, as the op is.
    lib_path = _lib.get_lib().path
    path = lib_path.parent / f"fp8attn_eager{sysconfig.get_config_var('EXT_SUFFIX')}"
    unusable = (f"{path} is not built (scripts/build_torch_op.sh builds it)" if not path.is_file()
                else None if _eager_entry_serves(path) else f"{path} was built for another torch, not {torch.__version__}")
    if unusable is not None:
        compiled, why_not = _compile_eager_entry(lib_path)
        if compiled is None:
            return None, unusable + (f" and cannot be compiled here: {why_not}" if why_not else "")
        path = compiled
    try:
        spec = importlib.util.spec_from_file_location("fp8attn_eager", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as err:
        return None, f"cannot load {path}: {err}"
    return module, None


def _eager_entry_serves(path: Path) -> bool:
    """Whether the module at ``path`` was built for this torch, read from its file without loading it (a module
    built against another torch's C++ may not even load): its docstring ends with that torch's version."""
    return f"built for torch {torch.__version__}\0".encode() in path.read_bytes()


_eager_module, EAGER_FALLBACK_REASON = _load_eager_entry()
# fp8attn_eager.fwd(*the op's arguments): None when it ran the call, NotImplemented when the op must.
EAGER_FWD: Optional[Callable[..., object]] = None if _eager_module is None else _eager_module.fwd


def reraise(err: RuntimeError, eager: bool = False) -> None:
    """Re-raises a RuntimeError of the compiled op (of EAGER_FWD with ``eager``) as the ctypes path would raise
    it: NotImplementedError for an unsupported case, KernelNotCompiledError for a kernel missing from the build
    (ValueError for a malformed call needs nothing: the op raises it directly). Anything else is raised
    unchanged."""
    last_error_code = _eager_module.last_error_code if eager else getattr(_op_lib, "fp8attn_torch_last_error_code",
                                                                          None)
    if last_error_code is not None and str(err).startswith("fp8attn: "):
        code = last_error_code()
        if code == _lib.STATUS_NOT_SUPPORTED:
            raise NotImplementedError(str(err)) from None
        if code == _lib.STATUS_NOT_COMPILED:
            raise _lib.KernelNotCompiledError(str(err)) from None
    raise err
