// fp8attn: the C++ entry points — validate, select a config, dispatch, launch.
#include <cuda_runtime_api.h>

#include <array>
#include <mutex>
#include <string>

#include "fp8attn/fp8attn.h"
#include "host/config.h"
#include "host/dispatch.h"

namespace fp8attn {

namespace {

Status cuda_status(cudaError_t err, const char* what) {
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                                            cudaGetErrorString(err) + ")");
}

int64_t total_query_rows(const FwdParams& p) {
  return p.cu_seqlens_q != nullptr ? int64_t(p.total_q) : int64_t(p.batch) * p.seqlen_q;
}

// Features the interface accepts but this version does not run yet; rejected by name, never ignored.
Status check_implemented(const FwdParams& p, const KernelConfig& config) {
  if (p.block_table != nullptr) {
    return Status(StatusCode::kNotSupported, "block_table: paged K/V is not implemented in this version of fp8attn");
  }
  if (config.num_splits > 1) {
    return Status(StatusCode::kNotSupported, "num_splits: expected 0 or 1, got " + std::to_string(p.num_splits) +
                                                 " (split-KV is not implemented in this version of fp8attn)");
  }
  return Status::Ok();
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
  return split_workspace_bytes(problem, select_config(problem), total_query_rows(params));
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
  const KernelConfig config = select_config(describe_problem(params, device));
  status = check_implemented(params, config);
  if (!status.ok()) { return status; }
  const LaunchFn launch = find_launcher(config.key);
  if (launch == nullptr) {
    return Status(StatusCode::kNotCompiled, "no kernel for " + config.key.to_string() +
                                                " in this build (it was configured with a FP8ATTN_HEAD_DIMS subset)");
  }
  if (config.grid_x == 0 || config.grid_y == 0 || config.grid_z == 0) { return Status::Ok(); }  // nothing to compute
  const cudaError_t err = launch(params, config, stream);
  if (err != cudaSuccess) { return cuda_status(err, "fp8attn forward launch"); }
  return Status::Ok();
}

}  // namespace fp8attn
