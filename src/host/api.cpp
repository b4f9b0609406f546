// fp8attn: the C++ entry points — validate, select a config, dispatch, launch.
#include <cuda_runtime_api.h>

#include <array>
#include <mutex>
#include <string>

#include "fp8attn/fp8attn.h"
#include "host/api_internal.h"
#include "host/config.h"
#include "host/device_args.h"
#include "host/dispatch.h"
#include "sm90/combine.h"

namespace fp8attn {

namespace {

Status cuda_status(cudaError_t err, const char* what) {
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                                            cudaGetErrorString(err) + ")");
}

// The split-KV combine for a config with num_splits > 1; partials live in the workspace (fwd_launch.cuh).
cudaError_t launch_split_combine(const FwdParams& p, const KernelConfig& config, cudaStream_t stream) {
  sm90::CombineArgs c;
  c.o_partial = static_cast<const float*>(p.workspace);
  c.lse_partial = c.o_partial + split_partial_o_floats(config, p.num_heads_q, p.head_dim_v);
  c.num_splits = config.num_splits;
  c.partial_rows = int(config.partial_rows);
  c.num_heads_q = p.num_heads_q;
  c.head_dim_v = p.head_dim_v;
  c.batch = p.batch;
  c.seqlen_q = p.seqlen_q;
  c.cu_seqlens_q = p.cu_seqlens_q;
  c.out = p.out;
  c.out_is_bf16 = p.out_dtype == FP8ATTN_DTYPE_BF16;
  c.o_batch_stride = p.o_batch_stride;
  c.o_row_stride = p.o_row_stride;
  c.o_head_stride = p.o_head_stride;
  c.lse = p.lse;
  c.lse_batch_stride = p.lse_batch_stride;
  c.lse_head_stride = p.lse_head_stride;
  c.sink = p.sink;
  c.sink_is_bf16 = p.sink_dtype == FP8ATTN_DTYPE_BF16;
  return sm90::launch_combine(c, stream);
}

}  // namespace

Status query_device(DeviceInfo* info) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) { return cuda_status(err, "no usable CUDA device"); }
  // Attributes do not change during the process; querying them on every call would cost microseconds.
  constexpr int kMaxDevices = 64;
  static std::array<DeviceInfo, kMaxDevices> cache{};
  static std::mutex cache_mutex;
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (device < kMaxDevices && cache[device].num_sms > 0) {
    *info = cache[device];
    return Status::Ok();
  }
  DeviceInfo d;
  int smem_optin = 0;
  if ((err = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device)) != cudaSuccess ||
      (err = cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device)) != cudaSuccess ||
      (err = cudaDeviceGetAttribute(&d.num_sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess ||
      (err = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) != cudaSuccess) {
    return cuda_status(err, "cudaDeviceGetAttribute");
  }
  d.max_smem_per_block = size_t(smem_optin);
  if (device < kMaxDevices) { cache[device] = d; }
  *info = d;
  return Status::Ok();
}

size_t fwd_workspace_size(const FwdParams& params, const DeviceInfo& device) {
  const ProblemShape problem = describe_problem(params, device);
  return split_workspace_bytes(problem, select_config(problem));
}

size_t fwd_workspace_size(const FwdParams& params) {
  DeviceInfo device;
  if (!query_device(&device).ok()) { return 0; }
  return fwd_workspace_size(params, device);
}

Status fwd(const FwdParams& params, cudaStream_t stream) {
  DeviceInfo device;
  Status status = query_device(&device);
  if (!status.ok()) { return status; }
  status = validate_fwd(params, device);
  if (!status.ok()) { return status; }
  if (device_arg_checks_enabled()) {
    status = check_device_args(params, stream);
    if (!status.ok()) { return status; }
  }
  // No query rows: nothing to write (out and lse are empty too), and q may be NULL, as torch passes it.
  if ((params.cu_seqlens_q != nullptr ? params.total_q : params.seqlen_q) == 0) { return Status::Ok(); }
  const KernelConfig config = select_config(describe_problem(params, device));
  if (params.k == nullptr || params.v == nullptr) {
    // Every key length is 0 and K/V have no elements (validated): the kernel still runs, to write zeros and an
    // LSE of -inf, and never reads K/V; but a TMA descriptor needs a base address, and q's serves.
    FwdParams keyless = params;
    keyless.k = keyless.k ? keyless.k : params.q;
    keyless.v = keyless.v ? keyless.v : params.q;
    return launch_with_config(keyless, config, stream);
  }
  return launch_with_config(params, config, stream);
}

Status launch_with_config(const FwdParams& params, const KernelConfig& config, cudaStream_t stream) {
  const LaunchFn launch = find_launcher(config.key);
  if (launch == nullptr) {
    return Status(StatusCode::kNotCompiled, "no kernel for " + config.key.to_string() +
                                                " in this build (it was configured with a FP8ATTN_HEAD_DIMS subset)");
  }
  if (config.grid_x == 0 || config.grid_y == 0 || config.grid_z == 0) { return Status::Ok(); }  // nothing to compute
  cudaError_t err = launch(params, config, stream);
  if (err != cudaSuccess) { return cuda_status(err, "fp8attn forward launch"); }
  if (config.num_splits > 1) {
    err = launch_split_combine(params, config, stream);
    if (err != cudaSuccess) { return cuda_status(err, "fp8attn split-KV combine launch"); }
  }
  return Status::Ok();
}

}  // namespace fp8attn
