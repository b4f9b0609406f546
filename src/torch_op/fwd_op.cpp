// fp8attn: the torch op fp8attn::fwd in C++, on PyTorch's stable ABI (torch/csrc/stable; torch >= 2.9).
//
// From tensors to the launch without Python: the tensors' metadata, read here through the stable ABI's C shims,
// fill fp8attn_fwd_params (fwd_call.h, shared with the eager entry), then the C ABI plans once (validation,
// config, workspace size), the workspace comes from torch's caching allocator on the current stream (so CUDA
// graph capture serves it from the graph's pool), and fp8attn_fwd_run launches. The library uses only the
// stable ABI's C shims and no Python C API, so one build loads under every torch >= 2.9 and every Python
// version. python/fp8attn/ops.py loads it, registers the fake implementation for torch.compile, and falls back
// to its ctypes op (and says so) when it cannot. Errors as fwd_call.h says.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <optional>

#include "fwd_call.h"

// The current CUDA stream as a cudaStream_t, from the AOTI C shim (libtorch_cuda; declared in shim.h only
// under USE_CUDA). The device-generic stable Stream::id() is torch's stream id, which is a cudaStream_t only
// for external streams.
extern "C" AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);

namespace {

using fp8attn_torch::TensorArg;
using torch::stable::Tensor;
using OptionalTensor = std::optional<Tensor>;

// One tensor's metadata, read once through the shim (each accessor is a C call into libtorch).
TensorArg read(const Tensor& t, const char* name) {
  int32_t device_type = 0, device_index = 0;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(t.get(), &device_type));
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(t.get(), &device_index));
  return TensorArg(name, t.dim(), t.sizes().data(), t.strides().data(), t.scalar_type(), t.data_ptr(), device_type,
                   device_index);
}

TensorArg read(const OptionalTensor& t, const char* name) { return t ? read(*t, name) : TensorArg(name); }

void fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const OptionalTensor& lse,
         const OptionalTensor& cu_seqlens_q, const OptionalTensor& cu_seqlens_k, const OptionalTensor& seqused_k,
         const OptionalTensor& block_table, const OptionalTensor& q_descale, const OptionalTensor& k_descale,
         const OptionalTensor& v_descale, const OptionalTensor& sink, int64_t max_seqlen_q, int64_t max_seqlen_k,
         double softmax_scale, bool causal, int64_t window_left, int64_t window_right, int64_t num_splits,
         const OptionalTensor& output_scale, double softcap) {
  fp8attn_torch::FwdCall call;
  call.q = read(q, "q"), call.k = read(k, "k"), call.v = read(v, "v"), call.out = read(out, "out");
  call.lse = read(lse, "lse");
  call.cu_seqlens_q = read(cu_seqlens_q, "cu_seqlens_q"), call.cu_seqlens_k = read(cu_seqlens_k, "cu_seqlens_k");
  call.seqused_k = read(seqused_k, "seqused_k"), call.block_table = read(block_table, "block_table");
  call.q_descale = read(q_descale, "q_descale"), call.k_descale = read(k_descale, "k_descale");
  call.v_descale = read(v_descale, "v_descale"), call.sink = read(sink, "s_aux");
  call.max_seqlen_q = max_seqlen_q, call.max_seqlen_k = max_seqlen_k, call.softmax_scale = softmax_scale;
  call.causal = causal, call.window_left = window_left, call.window_right = window_right;
  call.num_splits = num_splits, call.output_scale = read(output_scale, "output_scale"), call.softcap = softcap;

  fp8attn_fwd_params p;
  const int32_t device = fp8attn_torch::fill_params(call, &p);
  // The library plans and launches on the current device: make it q's.
  torch::stable::accelerator::DeviceGuard guard(device);
  // Held until the launch is enqueued. empty_strided rather than stable::new_empty skips new_empty's dtype and
  // layout queries and its own dispatch (on CUDA it still dispatches at::empty_strided).
  std::optional<Tensor> workspace;
  auto allocate = [&](size_t nbytes) {
    const int64_t bytes = int64_t(nbytes), stride = 1;
    AtenTensorHandle handle = nullptr;
    TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, &bytes, &stride, aoti_torch_dtype_uint8(),
                                                    aoti_torch_device_type_cuda(), device, &handle));
    workspace.emplace(handle);
    return workspace->data_ptr();
  };
  auto current_stream = [&] {
    void* stream = nullptr;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device, &stream));
    return stream;
  };
  fp8attn_torch::plan_and_run(p, allocate, current_stream);
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
  return fp8attn_torch::last_error_code();
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
