// fp8attn: the torch op fp8attn::fwd in C++, on PyTorch's stable ABI (torch/csrc/stable; torch >= 2.9).
//
// From tensors to the launch without Python: the tensors' metadata fill fp8attn_fwd_params here, then the
// C ABI plans once (validation, config, workspace size), the workspace comes from torch's caching allocator
// on the current stream (so CUDA graph capture serves it from the graph's pool), and fp8attn_fwd_run
// launches. The library uses only the stable ABI's C shims and no Python C API, so one build loads under
// every torch >= 2.9 and every Python version. python/fp8attn/ops.py loads it, registers the fake
// implementation for torch.compile, and falls back to its ctypes op (and says so) when it cannot.
//
// Errors: a malformed call throws std::invalid_argument, which torch raises as ValueError. Others throw
// std::runtime_error (RuntimeError); their fp8attn status code stays readable through
// fp8attn_torch_last_error_code(), so the Python wrappers can raise NotImplementedError /
// KernelNotCompiledError as the ctypes path does. The checks here cover what the C ABI cannot see (ranks,
// the last-dimension stride, devices, dtypes without a C code or a params field); every other rule, out's
// and lse's shapes included, is the library's (src/host/validate.cpp). python/fp8attn/ops.py's fill_params
// is the same mapping for the ctypes op.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "fp8attn/c_api.h"

// The current CUDA stream as a cudaStream_t, from the AOTI C shim (libtorch_cuda; declared in shim.h only
// under USE_CUDA). The device-generic stable Stream::id() is torch's stream id, which is a cudaStream_t only
// for external streams.
extern "C" AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;
using OptionalTensor = std::optional<Tensor>;

thread_local int g_last_error_code = FP8ATTN_OK;

[[noreturn]] void fail(int code, const std::string& message) {
  g_last_error_code = code;
  if (code == FP8ATTN_INVALID_ARGUMENT) throw std::invalid_argument("fp8attn: " + message);
  throw std::runtime_error("fp8attn: " + message);
}

[[noreturn]] void invalid(const std::string& message) { fail(FP8ATTN_INVALID_ARGUMENT, message); }

std::string shape_of(const Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + (t.dim() == 1 ? ",)" : ")");
}

std::string strides_of(const Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.stride(i));
  return s + (t.dim() == 1 ? ",)" : ")");
}

// One tensor's metadata, read once through the shim (each accessor is a C call into libtorch).
struct View {
  const Tensor* tensor = nullptr;
  const char* name = "";
  int64_t ndim = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;
  ScalarType dtype = ScalarType::Undefined;
  void* data = nullptr;

  View() = default;
  View(const Tensor& t, const char* n) : tensor(&t), name(n), ndim(t.dim()), dtype(t.scalar_type()), data(t.data_ptr()) {
    const auto s = t.sizes();
    const auto st = t.strides();
    sizes = s.data();
    strides = st.data();
  }
  int64_t size(int64_t i) const { return sizes[i < 0 ? ndim + i : i]; }
  int64_t stride(int64_t i) const { return strides[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
};

fp8attn_dtype dtype_code(const View& t) {
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

// The allocation as the library checks it against the sizes (params.h, "Extents"); ndim <= 4 is checked first.
void describe_shape(fp8attn_shape& shape, const View& t) {
  shape.ndim = int32_t(t.ndim);
  for (int64_t i = 0; i < t.ndim && i < 4; ++i) shape.size[i] = t.size(i);
}

void check_ndim(const View& t, int64_t ndim, const char* layout) {
  if (t.ndim != ndim) {
    invalid(std::string(t.name) + " must be " + layout + " (" + std::to_string(ndim) + "-d), got shape " +
            shape_of(*t.tensor));
  }
}

// params.h stores no stride for the last dimension: it is 1 by contract.
void check_last_dim_contiguous(const View& t) {
  if (t.size(-1) > 1 && t.stride(-1) != 1) {
    invalid(std::string(t.name) + " must be contiguous in its last dimension, got strides " + strides_of(*t.tensor));
  }
}

// Length arrays are read through a bare pointer: int32 and dense.
void check_int32_vector(const View& t) {
  if (t.dtype != ScalarType::Int || t.ndim != 1 || (t.numel() > 1 && t.stride(0) != 1)) {
    invalid(std::string(t.name) + " must be a contiguous 1-d int32 tensor, got dtype " +
            torch::headeronly::toString(t.dtype) + ", shape " + shape_of(*t.tensor) + ", strides " +
            strides_of(*t.tensor));
  }
}

struct DeviceOf {
  int32_t type;
  int32_t index;
};

DeviceOf device_of(const Tensor& t) {
  DeviceOf d{};
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(t.get(), &d.type));
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(t.get(), &d.index));
  return d;
}

// As torch prints a device: "cuda:0", "cpu".
std::string device_name(const DeviceOf& d) {
  const std::string type = d.type == aoti_torch_device_type_cuda()  ? "cuda"
                           : d.type == aoti_torch_device_type_cpu() ? "cpu"
                           : d.type == aoti_torch_device_type_meta() ? "meta"
                                                                     : "device type " + std::to_string(d.type);
  return d.index >= 0 ? type + ":" + std::to_string(d.index) : type;
}

// Points `desc` at a descale read in place through its strides (vLLM passes expand()ed views). Accepted:
// a 0-d or 1-element tensor (one scalar), [num_heads_kv] (per kv head), or (batch, num_heads_kv), any strides.
void fill_descale(fp8attn_descale& desc, const View& t, int32_t batch, int32_t num_heads_kv) {
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
            shape_of(*t.tensor));
  }
  desc.ptr = static_cast<const float*>(t.data);
  desc.dtype = dtype_code(t);
}

// output_scale: one scalar (0-d or 1-element) as an ndim-0 scale; any other tensor keeps a nonzero ndim, which
// the library refuses by name.
void fill_output_scale(fp8attn_descale& desc, const View& t) {
  desc.ndim = t.numel() == 1 ? 0 : std::max<int32_t>(int32_t(t.ndim), 1);
  desc.ptr = static_cast<const float*>(t.data);
  desc.dtype = dtype_code(t);
}

void fwd(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& out_t, const OptionalTensor& lse_t,
         const OptionalTensor& cu_seqlens_q_t, const OptionalTensor& cu_seqlens_k_t, const OptionalTensor& seqused_k_t,
         const OptionalTensor& block_table_t, const OptionalTensor& q_descale_t, const OptionalTensor& k_descale_t,
         const OptionalTensor& v_descale_t, const OptionalTensor& sink_t, int64_t max_seqlen_q, int64_t max_seqlen_k,
         double softmax_scale, bool causal, int64_t window_left, int64_t window_right, int64_t num_splits,
         const OptionalTensor& output_scale_t, double softcap) {
  g_last_error_code = FP8ATTN_OK;
  const View q(q_t, "q"), k(k_t, "k"), v(v_t, "v"), out(out_t, "out");
  auto view_of = [](const OptionalTensor& t, const char* name) { return t ? View(*t, name) : View(); };
  const View lse = view_of(lse_t, "lse"), cu_seqlens_q = view_of(cu_seqlens_q_t, "cu_seqlens_q"),
             cu_seqlens_k = view_of(cu_seqlens_k_t, "cu_seqlens_k"), seqused_k = view_of(seqused_k_t, "seqused_k"),
             block_table = view_of(block_table_t, "block_table");

  const bool varlen_q = cu_seqlens_q.tensor != nullptr;
  const bool paged = block_table.tensor != nullptr;
  const bool varlen_k = cu_seqlens_k.tensor != nullptr && !paged;

  // Ranks and layouts.
  check_ndim(q, varlen_q ? 3 : 4, varlen_q ? "[total_q, Hq, d] with cu_seqlens_q" : "[B, Sq, Hq, d]");
  const char* k_layout = paged      ? "[num_pages, page_size, Hkv, d] with block_table"
                         : varlen_k ? "[total_k, Hkv, d] with cu_seqlens_k"
                                    : "[B, Sk, Hkv, d]";
  check_ndim(k, varlen_k ? 3 : 4, k_layout);
  check_ndim(v, varlen_k ? 3 : 4, k_layout);
  check_ndim(out, q.ndim, "q's layout with head_dim_v");
  if (lse.tensor != nullptr) {
    check_ndim(lse, varlen_q ? 2 : 3, varlen_q ? "[Hq, total_q]" : "[B, Hq, Sq]");
    // params.h's lse is a float pointer with no dtype field and no token stride: only this layer sees them.
    if (lse.dtype != ScalarType::Float) {
      invalid(std::string("lse must be float32, got ") + torch::headeronly::toString(lse.dtype));
    }
    if (lse.size(-1) > 1 && lse.stride(-1) != 1) {
      invalid("lse must have token stride 1, got strides " + strides_of(*lse.tensor));
    }
  }
  for (const View* t : {&q, &k, &v, &out}) check_last_dim_contiguous(*t);
  for (const View* t : {&cu_seqlens_q, &cu_seqlens_k, &seqused_k}) {
    if (t->tensor != nullptr) check_int32_vector(*t);
  }

  // One device for everything, and it is the one the library launches on.
  const DeviceOf device = device_of(q_t);
  const std::pair<const OptionalTensor*, const char*> others[] = {
      {&lse_t, "lse"}, {&cu_seqlens_q_t, "cu_seqlens_q"}, {&cu_seqlens_k_t, "cu_seqlens_k"},
      {&seqused_k_t, "seqused_k"}, {&block_table_t, "block_table"}, {&q_descale_t, "q_descale"},
      {&k_descale_t, "k_descale"}, {&v_descale_t, "v_descale"}, {&sink_t, "s_aux"}, {&output_scale_t, "output_scale"}};
  auto check_device = [&](const Tensor& t, const char* name) {
    const DeviceOf d = device_of(t);
    if (d.type != device.type || d.index != device.index) {
      invalid(std::string(name) + " is on " + device_name(d) + " but q is on " + device_name(device));
    }
  };
  check_device(k_t, "k");
  check_device(v_t, "v");
  check_device(out_t, "out");
  for (const auto& [t, name] : others) {
    if (*t) check_device(**t, name);
  }

  fp8attn_fwd_params p;
  fp8attn_fwd_params_init(&p);
  // Tensors: pointers, dtypes and element strides. The batch stride of varlen tensors is unused.
  p.q = q.data;
  p.q_dtype = dtype_code(q);
  p.out = out.data;
  p.out_dtype = dtype_code(out);
  if (varlen_q) {
    p.q_row_stride = q.stride(0), p.q_head_stride = q.stride(1);
    p.o_row_stride = out.stride(0), p.o_head_stride = out.stride(1);
  } else {
    p.q_batch_stride = q.stride(0), p.q_row_stride = q.stride(1), p.q_head_stride = q.stride(2);
    p.o_batch_stride = out.stride(0), p.o_row_stride = out.stride(1), p.o_head_stride = out.stride(2);
  }
  p.k = k.data;
  p.k_dtype = dtype_code(k);
  p.v = v.data;
  p.v_dtype = dtype_code(v);
  if (varlen_k) {
    p.k_row_stride = k.stride(0), p.k_head_stride = k.stride(1);
    p.v_row_stride = v.stride(0), p.v_head_stride = v.stride(1);
  } else {  // dense [B, Sk, ...] or paged [num_pages, page_size, ...]: the leading stride is the batch/page stride
    p.k_batch_stride = k.stride(0), p.k_row_stride = k.stride(1), p.k_head_stride = k.stride(2);
    p.v_batch_stride = v.stride(0), p.v_row_stride = v.stride(1), p.v_head_stride = v.stride(2);
  }
  if (lse.tensor != nullptr) {
    p.lse = static_cast<float*>(lse.data);
    if (varlen_q) {
      p.lse_head_stride = lse.stride(0);
    } else {
      p.lse_batch_stride = lse.stride(0), p.lse_head_stride = lse.stride(1);
    }
  }

  // Sizes.
  const int64_t batch = varlen_q ? cu_seqlens_q.numel() - 1 : q.size(0);
  p.batch = int32_t(batch);
  p.seqlen_q = int32_t(varlen_q ? max_seqlen_q : q.size(1));
  p.seqlen_k = int32_t(varlen_k || paged ? max_seqlen_k : k.size(1));
  p.total_q = int32_t(varlen_q ? q.size(0) : 0);
  p.total_k = int32_t(varlen_k ? k.size(0) : 0);
  p.num_heads_q = int32_t(q.size(-2));
  p.num_heads_kv = int32_t(k.size(-2));
  p.head_dim = int32_t(q.size(-1));
  p.head_dim_v = int32_t(v.size(-1));
  p.cu_seqlens_q = static_cast<const int32_t*>(cu_seqlens_q.data);
  p.cu_seqlens_k = static_cast<const int32_t*>(cu_seqlens_k.data);
  p.seqused_k = static_cast<const int32_t*>(seqused_k.data);

  if (paged) {
    if (block_table.dtype != ScalarType::Int || block_table.ndim != 2) {
      invalid(std::string("block_table must be a 2-d int32 tensor (batch, max_pages), got dtype ") +
              torch::headeronly::toString(block_table.dtype) + ", shape " + shape_of(*block_table.tensor));
    }
    check_last_dim_contiguous(block_table);  // rows may be strided (sliced views), columns not
    p.block_table = static_cast<const int32_t*>(block_table.data);
    p.block_table_batch_stride = block_table.stride(0);
    p.max_pages_per_seq = int32_t(block_table.size(1));
    p.num_pages = int32_t(k.size(0));
    p.page_size = int32_t(k.size(1));
  }

  p.softmax_scale = float(softmax_scale);
  p.causal = causal ? 1 : 0;
  p.window_left = int32_t(window_left);
  p.window_right = int32_t(window_right);
  const std::pair<const OptionalTensor*, std::pair<fp8attn_descale*, const char*>> descales[] = {
      {&q_descale_t, {&p.q_descale, "q_descale"}},
      {&k_descale_t, {&p.k_descale, "k_descale"}},
      {&v_descale_t, {&p.v_descale, "v_descale"}}};
  for (const auto& [t, target] : descales) {
    if (*t) fill_descale(*target.first, View(**t, target.second), p.batch, p.num_heads_kv);
  }
  if (sink_t) {
    const View sink(*sink_t, "s_aux");
    if (sink.ndim != 1 || (sink.numel() > 1 && sink.stride(0) != 1)) {
      invalid("s_aux must be a contiguous 1-d [Hq] tensor, got shape " + shape_of(*sink_t));
    }
    p.sink = sink.data;
    p.sink_dtype = dtype_code(sink);
    p.sink_len = sink.size(0);
  }
  p.num_splits = int32_t(num_splits);
  if (output_scale_t) fill_output_scale(p.output_scale, View(*output_scale_t, "output_scale"));
  p.softcap = float(softcap);

  // Extents: what was allocated, so the library refuses arrays that disagree with the sizes.
  describe_shape(p.q_shape, q);
  describe_shape(p.k_shape, k);
  describe_shape(p.v_shape, v);
  describe_shape(p.out_shape, out);
  if (lse.tensor != nullptr) describe_shape(p.lse_shape, lse);
  const std::pair<const View*, int64_t*> lengths[] = {{&cu_seqlens_q, &p.cu_seqlens_q_len},
                                                      {&cu_seqlens_k, &p.cu_seqlens_k_len},
                                                      {&seqused_k, &p.seqused_k_len},
                                                      {&block_table, &p.block_table_rows}};
  for (const auto& [t, field] : lengths) {
    if (t->tensor != nullptr) *field = t->ndim > 0 ? t->size(0) : 1;
  }

  // The library plans and launches on the current device: make it q's.
  torch::stable::accelerator::DeviceGuard guard(device.index);
  char err[1024];
  fp8attn_fwd_plan plan;
  int code = fp8attn_fwd_make_plan(&p, &plan, err, sizeof(err));
  if (code != FP8ATTN_OK) fail(code, err);
  // Held until the launch is enqueued; the caching allocator orders its reuse on this stream. empty_strided
  // rather than stable::new_empty skips new_empty's dtype and layout queries and its own dispatch (on CUDA it
  // still dispatches at::empty_strided): 0.8 -> 0.6 us per call on the dev CPU's allocator (docs/perf.md).
  std::optional<Tensor> workspace;
  if (plan.workspace_bytes > 0) {
    const int64_t bytes = int64_t(plan.workspace_bytes), stride = 1;
    AtenTensorHandle handle = nullptr;
    TORCH_ERROR_CODE_CHECK(
        aoti_torch_empty_strided(1, &bytes, &stride, aoti_torch_dtype_uint8(), device.type, device.index, &handle));
    workspace.emplace(handle);
    p.workspace = workspace->data_ptr();
    p.workspace_bytes = plan.workspace_bytes;
  }
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device.index, &stream));
  code = fp8attn_fwd_run(&p, &plan, stream, err, sizeof(err));
  if (code != FP8ATTN_OK) fail(code, err);
}

template <typename T>
T arg(StableIValue* stack, int i) {
  return torch::stable::detail::to<T>(stack[i]);
}

void boxed_fwd(StableIValue* stack, uint64_t /*num_args*/, uint64_t /*num_outputs*/) {
  fwd(arg<Tensor>(stack, 0), arg<Tensor>(stack, 1), arg<Tensor>(stack, 2), arg<Tensor>(stack, 3),
      arg<OptionalTensor>(stack, 4), arg<OptionalTensor>(stack, 5), arg<OptionalTensor>(stack, 6),
      arg<OptionalTensor>(stack, 7), arg<OptionalTensor>(stack, 8), arg<OptionalTensor>(stack, 9),
      arg<OptionalTensor>(stack, 10), arg<OptionalTensor>(stack, 11), arg<OptionalTensor>(stack, 12),
      arg<int64_t>(stack, 13), arg<int64_t>(stack, 14), arg<double>(stack, 15), arg<bool>(stack, 16),
      arg<int64_t>(stack, 17), arg<int64_t>(stack, 18), arg<int64_t>(stack, 19), arg<OptionalTensor>(stack, 20),
      arg<double>(stack, 21));
}

}  // namespace

// The fp8attn status code of this thread's last failed fp8attn::fwd (FP8ATTN_OK when it succeeded), for the
// Python wrappers to pick the exception type; read through ctypes only after a failure.
extern "C" __attribute__((visibility("default"))) int fp8attn_torch_last_error_code(void) {
  return g_last_error_code;
}

// The schema python/fp8attn/ops.py's ctypes op infers from its fill_params(): keep the two in step
// (tests/python/test_torch_op.py compares them).
STABLE_TORCH_LIBRARY(fp8attn, m) {
  m.def(
      "fwd(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor(b!)? lse, Tensor? cu_seqlens_q, "
      "Tensor? cu_seqlens_k, Tensor? seqused_k, Tensor? block_table, Tensor? q_descale, Tensor? k_descale, "
      "Tensor? v_descale, Tensor? sink, int max_seqlen_q, int max_seqlen_k, float softmax_scale, bool causal, "
      "int window_left, int window_right, int num_splits, Tensor? output_scale, float softcap) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(fp8attn, CUDA, m) { m.impl("fwd", &boxed_fwd); }
