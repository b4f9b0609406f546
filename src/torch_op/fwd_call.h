// fp8attn: one torch call of fp8attn::fwd, from tensor metadata to the launch, for both of its entry points:
// the dispatcher op (fwd_op.cpp, torch's stable ABI) and the eager entry (eager_entry.cpp, ATen and the Python
// C API), which read a tensor's metadata through different APIs and then share everything here.
//
// Errors: a malformed call throws std::invalid_argument (ValueError in Python); others std::runtime_error.
// last_error_code() keeps the fp8attn status code of this thread's last failed call, so that the Python wrappers
// can raise NotImplementedError / KernelNotCompiledError as the ctypes op does. The checks here cover what the
// C ABI cannot see (ranks, the last-dimension stride, devices, dtypes without a C code or a params field);
// every other rule, out's and lse's shapes included, is the library's (src/host/validate.cpp).
// python/fp8attn/ops.py's fill_params is the same mapping for the ctypes op.
#pragma once

#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "fp8attn/c_api.h"

namespace fp8attn_torch {

using torch::headeronly::ScalarType;

inline int& last_error_code() {
  static thread_local int code = FP8ATTN_OK;
  return code;
}

[[noreturn]] inline void fail(int code, const std::string& message) {
  last_error_code() = code;
  if (code == FP8ATTN_INVALID_ARGUMENT) throw std::invalid_argument("fp8attn: " + message);
  throw std::runtime_error("fp8attn: " + message);
}

[[noreturn]] inline void invalid(const std::string& message) { fail(FP8ATTN_INVALID_ARGUMENT, message); }

// torch's device type numbers (c10::DeviceType; the AOTI shim's aoti_torch_device_type_*() return the same).
constexpr int32_t kDeviceCpu = 0, kDeviceCuda = 1, kDeviceMeta = 9;

// One tensor argument's metadata, read once by the entry point (absent: an optional argument that is None).
struct TensorArg {
  const char* name = "";
  bool present = false;
  int64_t ndim = 0;
  const int64_t* sizes = nullptr;    // [ndim]
  const int64_t* strides = nullptr;  // [ndim], in elements
  ScalarType dtype = ScalarType::Undefined;
  void* data = nullptr;
  int32_t device_type = kDeviceCpu;
  int32_t device_index = -1;

  TensorArg() = default;
  explicit TensorArg(const char* n) : name(n) {}  // an absent optional argument
  TensorArg(const char* n, int64_t nd, const int64_t* sz, const int64_t* st, ScalarType dt, void* d, int32_t dev_type,
            int32_t dev_index)
      : name(n), present(true), ndim(nd), sizes(sz), strides(st), dtype(dt), data(d), device_type(dev_type),
        device_index(dev_index) {}

  int64_t size(int64_t i) const { return sizes[i < 0 ? ndim + i : i]; }
  int64_t stride(int64_t i) const { return strides[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
};

// fp8attn::fwd's arguments, in its schema's order (python/fp8attn/ops.py keeps the ctypes op's in step).
struct FwdCall {
  TensorArg q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, q_descale, k_descale, v_descale,
      sink;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  double softmax_scale = 0;
  bool causal = false;
  int64_t window_left = -1, window_right = -1, num_splits = 0;
  TensorArg output_scale;
  double softcap = 0;
};

namespace detail {

inline std::string list_of(const TensorArg& t, const int64_t* values) {
  std::string s = "(";
  for (int64_t i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + (t.ndim == 1 ? ",)" : ")");
}
inline std::string shape_of(const TensorArg& t) { return list_of(t, t.sizes); }
inline std::string strides_of(const TensorArg& t) { return list_of(t, t.strides); }

inline fp8attn_dtype dtype_code(const TensorArg& t) {
  switch (t.dtype) {
    case ScalarType::Float8_e4m3fn: return FP8ATTN_DTYPE_E4M3;
    case ScalarType::Float8_e5m2: return FP8ATTN_DTYPE_E5M2;
    case ScalarType::Half: return FP8ATTN_DTYPE_F16;
    case ScalarType::BFloat16: return FP8ATTN_DTYPE_BF16;
    case ScalarType::Float: return FP8ATTN_DTYPE_F32;
    case ScalarType::Int: return FP8ATTN_DTYPE_I32;
    default:
      // The library names a known-but-wrong dtype itself; one without a C code can only be named here.
      invalid(std::string(t.name) + " has dtype " + torch::headeronly::toString(t.dtype) +
              ", which fp8attn does not take");
  }
}

// Element strides of a varlen [rows, heads, d] tensor (its batch stride unused, left as initialised) or of a
// batched [B, rows, heads, d] one.
inline void set_strides(const TensorArg& t, bool varlen, int64_t& batch, int64_t& row, int64_t& head) {
  if (varlen) {
    row = t.stride(0), head = t.stride(1);
  } else {
    batch = t.stride(0), row = t.stride(1), head = t.stride(2);
  }
}

// The allocation as the library checks it against the sizes (params.h, "Extents"); ndim <= 4 is checked first.
inline void describe_shape(fp8attn_shape& shape, const TensorArg& t) {
  shape.ndim = int32_t(t.ndim);
  for (int64_t i = 0; i < t.ndim && i < 4; ++i) shape.size[i] = t.size(i);
}

inline void check_ndim(const TensorArg& t, int64_t ndim, const char* layout) {
  if (t.ndim != ndim) {
    invalid(std::string(t.name) + " must be " + layout + " (" + std::to_string(ndim) + "-d), got shape " +
            shape_of(t));
  }
}

// params.h stores no stride for the last dimension: it is 1 by contract.
inline void check_last_dim_contiguous(const TensorArg& t) {
  if (t.size(-1) > 1 && t.stride(-1) != 1) {
    invalid(std::string(t.name) + " must be contiguous in its last dimension, got strides " + strides_of(t));
  }
}

// Length arrays are read through a bare pointer: int32 and dense.
inline void check_int32_vector(const TensorArg& t) {
  if (t.dtype != ScalarType::Int || t.ndim != 1 || (t.numel() > 1 && t.stride(0) != 1)) {
    invalid(std::string(t.name) + " must be a contiguous 1-d int32 tensor, got dtype " +
            torch::headeronly::toString(t.dtype) + ", shape " + shape_of(t) + ", strides " + strides_of(t));
  }
}

// As torch prints a device: "cuda:0", "cpu".
inline std::string device_name(int32_t type, int32_t index) {
  const std::string name = type == kDeviceCuda  ? "cuda"
                           : type == kDeviceCpu ? "cpu"
                           : type == kDeviceMeta ? "meta"
                                                 : "device type " + std::to_string(type);
  return index >= 0 ? name + ":" + std::to_string(index) : name;
}

// Points `desc` at a descale read in place through its strides (vLLM passes expand()ed views). Accepted:
// a 0-d or 1-element tensor (one scalar), [num_heads_kv] (per kv head), or (batch, num_heads_kv), any strides.
inline void fill_descale(fp8attn_descale& desc, const TensorArg& t, int32_t batch, int32_t num_heads_kv) {
  const int64_t numel = t.numel();
  if (numel == 1) {
    desc.ndim = 0;
    desc.size[0] = desc.size[1] = 0;
    desc.batch_stride = desc.head_stride = 0;
  } else if (t.ndim == 2) {
    desc.ndim = 2;
    desc.size[0] = t.size(0);
    desc.size[1] = t.size(1);
    desc.batch_stride = t.stride(0);
    desc.head_stride = t.stride(1);
  } else if (t.ndim == 1 && numel == num_heads_kv) {
    desc.ndim = 2;
    desc.size[0] = batch;
    desc.size[1] = num_heads_kv;
    desc.batch_stride = 0;
    desc.head_stride = t.stride(0);
  } else {
    invalid(std::string(t.name) + " must be 0-d, 1-element, [num_heads_kv] or (batch, num_heads_kv), got shape " +
            shape_of(t));
  }
  desc.ptr = static_cast<const float*>(t.data);
  desc.dtype = dtype_code(t);
}

// output_scale: one scalar (0-d or 1-element) as an ndim-0 scale; any other tensor keeps a nonzero ndim, which
// the library refuses by name.
inline void fill_output_scale(fp8attn_descale& desc, const TensorArg& t) {
  desc.ndim = t.numel() == 1 ? 0 : std::max<int32_t>(int32_t(t.ndim), 1);
  desc.ptr = static_cast<const float*>(t.data);
  desc.dtype = dtype_code(t);
}

}  // namespace detail

// Checks what only this layer sees and fills the C ABI's params from the call. Returns q's device index: every
// tensor is on that device, and the library plans and launches on the current device, so the caller makes it
// current.
inline int32_t fill_params(const FwdCall& c, fp8attn_fwd_params* params) {
  using namespace detail;
  last_error_code() = FP8ATTN_OK;
  const TensorArg &q = c.q, &k = c.k, &v = c.v, &out = c.out, &lse = c.lse;
  const bool varlen_q = c.cu_seqlens_q.present;
  const bool paged = c.block_table.present;
  const bool varlen_k = c.cu_seqlens_k.present && !paged;

  // Ranks and layouts.
  check_ndim(q, varlen_q ? 3 : 4, varlen_q ? "[total_q, Hq, d] with cu_seqlens_q" : "[B, Sq, Hq, d]");
  const char* k_layout = paged      ? "[num_pages, page_size, Hkv, d] with block_table"
                         : varlen_k ? "[total_k, Hkv, d] with cu_seqlens_k"
                                    : "[B, Sk, Hkv, d]";
  check_ndim(k, varlen_k ? 3 : 4, k_layout);
  check_ndim(v, varlen_k ? 3 : 4, k_layout);
  check_ndim(out, q.ndim, "q's layout with head_dim_v");
  if (lse.present) {
    check_ndim(lse, varlen_q ? 2 : 3, varlen_q ? "[Hq, total_q]" : "[B, Hq, Sq]");
    // params.h's lse is a float pointer with no dtype field and no token stride: only this layer sees them.
    if (lse.dtype != ScalarType::Float) {
      invalid(std::string("lse must be float32, got ") + torch::headeronly::toString(lse.dtype));
    }
    if (lse.size(-1) > 1 && lse.stride(-1) != 1) invalid("lse must have token stride 1, got strides " + strides_of(lse));
  }
  for (const TensorArg* t : {&q, &k, &v, &out}) check_last_dim_contiguous(*t);
  for (const TensorArg* t : {&c.cu_seqlens_q, &c.cu_seqlens_k, &c.seqused_k}) {
    if (t->present) check_int32_vector(*t);
  }

  // One device for everything, and it is the one the library launches on.
  for (const TensorArg* t : {&k, &v, &out, &lse, &c.cu_seqlens_q, &c.cu_seqlens_k, &c.seqused_k, &c.block_table,
                             &c.q_descale, &c.k_descale, &c.v_descale, &c.sink, &c.output_scale}) {
    if (t->present && (t->device_type != q.device_type || t->device_index != q.device_index)) {
      invalid(std::string(t->name) + " is on " + device_name(t->device_type, t->device_index) + " but q is on " +
              device_name(q.device_type, q.device_index));
    }
  }

  fp8attn_fwd_params& p = *params;
  fp8attn_fwd_params_init(&p);
  // Tensors: pointers, dtypes and element strides. The batch stride of varlen tensors is unused.
  p.q = q.data;
  p.q_dtype = dtype_code(q);
  p.out = out.data;
  p.out_dtype = dtype_code(out);
  set_strides(q, varlen_q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  set_strides(out, varlen_q, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  p.k = k.data;
  p.k_dtype = dtype_code(k);
  p.v = v.data;
  p.v_dtype = dtype_code(v);
  // Dense [B, Sk, ...] or paged [num_pages, page_size, ...]: the leading stride is the batch/page stride.
  set_strides(k, varlen_k, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  set_strides(v, varlen_k, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  if (lse.present) {
    p.lse = static_cast<float*>(lse.data);
    if (varlen_q) {
      p.lse_head_stride = lse.stride(0);
    } else {
      p.lse_batch_stride = lse.stride(0), p.lse_head_stride = lse.stride(1);
    }
  }

  // Sizes.
  const int64_t batch = varlen_q ? c.cu_seqlens_q.numel() - 1 : q.size(0);
  p.batch = int32_t(batch);
  p.seqlen_q = int32_t(varlen_q ? c.max_seqlen_q : q.size(1));
  p.seqlen_k = int32_t(varlen_k || paged ? c.max_seqlen_k : k.size(1));
  p.total_q = int32_t(varlen_q ? q.size(0) : 0);
  p.total_k = int32_t(varlen_k ? k.size(0) : 0);
  p.num_heads_q = int32_t(q.size(-2));
  p.num_heads_kv = int32_t(k.size(-2));
  p.head_dim = int32_t(q.size(-1));
  p.head_dim_v = int32_t(v.size(-1));
  p.cu_seqlens_q = static_cast<const int32_t*>(c.cu_seqlens_q.data);
  p.cu_seqlens_k = static_cast<const int32_t*>(c.cu_seqlens_k.data);
  p.seqused_k = static_cast<const int32_t*>(c.seqused_k.data);

  if (paged) {
    const TensorArg& block_table = c.block_table;
    if (block_table.dtype != ScalarType::Int || block_table.ndim != 2) {
      invalid(std::string("block_table must be a 2-d int32 tensor (batch, max_pages), got dtype ") +
              torch::headeronly::toString(block_table.dtype) + ", shape " + shape_of(block_table));
    }
    check_last_dim_contiguous(block_table);  // rows may be strided (sliced views), columns not
    p.block_table = static_cast<const int32_t*>(block_table.data);
    p.block_table_batch_stride = block_table.stride(0);
    p.max_pages_per_seq = int32_t(block_table.size(1));
    p.num_pages = int32_t(k.size(0));
    p.page_size = int32_t(k.size(1));
  }

  p.softmax_scale = float(c.softmax_scale);
  p.causal = c.causal ? 1 : 0;
  p.window_left = int32_t(c.window_left);
  p.window_right = int32_t(c.window_right);
  const std::pair<const TensorArg*, fp8attn_descale*> descales[] = {
      {&c.q_descale, &p.q_descale}, {&c.k_descale, &p.k_descale}, {&c.v_descale, &p.v_descale}};
  for (const auto& [t, target] : descales) {
    if (t->present) fill_descale(*target, *t, p.batch, p.num_heads_kv);
  }
  if (c.sink.present) {
    const TensorArg& sink = c.sink;
    if (sink.ndim != 1 || (sink.numel() > 1 && sink.stride(0) != 1)) {
      invalid("s_aux must be a contiguous 1-d [Hq] tensor, got shape " + shape_of(sink));
    }
    p.sink = sink.data;
    p.sink_dtype = dtype_code(sink);
    p.sink_len = sink.size(0);
  }
  p.num_splits = int32_t(c.num_splits);
  if (c.output_scale.present) fill_output_scale(p.output_scale, c.output_scale);
  p.softcap = float(c.softcap);

  // Extents: what was allocated, so the library refuses arrays that disagree with the sizes.
  describe_shape(p.q_shape, q);
  describe_shape(p.k_shape, k);
  describe_shape(p.v_shape, v);
  describe_shape(p.out_shape, out);
  if (lse.present) describe_shape(p.lse_shape, lse);
  const std::pair<const TensorArg*, int64_t*> lengths[] = {{&c.cu_seqlens_q, &p.cu_seqlens_q_len},
                                                           {&c.cu_seqlens_k, &p.cu_seqlens_k_len},
                                                           {&c.seqused_k, &p.seqused_k_len},
                                                           {&c.block_table, &p.block_table_rows}};
  for (const auto& [t, field] : lengths) {
    if (t->present) *field = t->ndim > 0 ? t->size(0) : 1;
  }
  return q.device_index;
}

// Plans and launches the filled call on the current device (the caller made it q's). `workspace(bytes)` returns
// device memory from the caller's allocator, held until this returns (the allocator orders its reuse on the
// stream); `stream()` returns the current cudaStream_t.
template <class Workspace, class Stream>
void plan_and_run(fp8attn_fwd_params& p, Workspace&& workspace, Stream&& stream) {
  char err[1024];
  fp8attn_fwd_plan plan;
  int code = fp8attn_fwd_make_plan(&p, &plan, err, sizeof(err));
  if (code != FP8ATTN_OK) fail(code, err);
  if (plan.workspace_bytes > 0) {
    p.workspace = workspace(plan.workspace_bytes);
    p.workspace_bytes = plan.workspace_bytes;
  }
  code = fp8attn_fwd_run(&p, &plan, stream(), err, sizeof(err));
  if (code != FP8ATTN_OK) fail(code, err);
}

}  // namespace fp8attn_torch
