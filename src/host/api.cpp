// fp8attn: the C++ entry points. A call is planned once (validate the arguments, select the config, size the
// workspace) and run once (check the workspace, launch through sm90::launch); nothing is computed twice and
// no message is built unless something fails.
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "fp8attn/fp8attn.h"
#include "host/api_internal.h"
#include "host/config.h"
#include "host/device_args.h"
#include "host/validate.h"
#include "sm90/launch.h"

namespace fp8attn {

namespace {

Status cuda_status(cudaError_t err, const char* what) {
  return Status(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                                            cudaGetErrorString(err) + ")");
}

// A failed launch (or attribute call) also leaves its error pending in the thread's last-error slot, where the
// next unrelated cudaGetLastError (torch checks one after each of its kernels) would report it as its own.
// It is returned here, so it is cleared; a sticky error stays whatever is done.
Status launch_failure(cudaError_t err) {
  (void)cudaGetLastError();
  return cuda_status(err, "fp8attn kernel launch");
}

Status not_compiled(const KernelKey& key) {
  return Status(StatusCode::kNotCompiled,
                "no kernel for " + key.to_string() + " in this build (it was configured with a FP8ATTN_HEAD_DIMS subset)");
}

// What fp8attn_fwd_plan::internal_ holds: the config and the problem it was chosen for (so that a run can
// tell a plan of other sizes), stamped so that an unplanned or failed plan is refused.
struct PlanRecord {
  uint32_t stamp;
  KernelConfig config;
  ProblemShape problem;
};
constexpr uint32_t kPlanStamp = 0xF8A77E4Du;
static_assert(std::is_trivially_copyable_v<PlanRecord>, "copied in and out of the C struct");
static_assert(sizeof(PlanRecord) <= sizeof(fp8attn_fwd_plan::internal_), "fp8attn_fwd_plan::internal_ too small");

bool same_problem(const ProblemShape& a, const ProblemShape& b) {
  return a.batch == b.batch && a.max_seqlen_q == b.max_seqlen_q && a.max_seqlen_k == b.max_seqlen_k &&
         a.total_q == b.total_q && a.num_heads_q == b.num_heads_q && a.num_heads_kv == b.num_heads_kv &&
         a.head_dim == b.head_dim && a.head_dim_v == b.head_dim_v && a.window_left == b.window_left &&
         a.window_right == b.window_right && a.num_splits_requested == b.num_splits_requested &&
         a.num_sms == b.num_sms && a.q16 == b.q16;
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
  if ((err = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device)) != cudaSuccess ||
      (err = cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device)) != cudaSuccess ||
      (err = cudaDeviceGetAttribute(&d.num_sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) {
    return cuda_status(err, "cudaDeviceGetAttribute");
  }
  if (device < kMaxDevices) { cache[device] = d; }
  *info = d;
  return Status::Ok();
}

Status plan_fwd(const FwdParams& params, const DeviceInfo& device, FwdPlan* plan) {
  *plan = FwdPlan{};  // unstamped: a failed plan cannot be run
  Status status = validate_fwd_arguments(params, device);
  if (!status.ok()) { return status; }
  PlanRecord record;
  record.stamp = kPlanStamp;
  record.problem = describe_problem(params, device);
  record.config = select_config(record.problem);
  if (!sm90::has_kernel(record.config.key)) { return not_compiled(record.config.key); }
  const size_t workspace_bytes = split_workspace_bytes(record.problem, record.config);
  status = validate_fwd_workspace_size(params, workspace_bytes);
  if (!status.ok()) { return status; }
  plan->workspace_bytes = workspace_bytes;
  plan->num_splits = record.config.num_splits;
  std::memcpy(plan->internal_, &record, sizeof(record));
  return Status::Ok();
}

Status plan_fwd(const FwdParams& params, FwdPlan* plan) {
  DeviceInfo device;
  const Status status = query_device(&device);
  if (!status.ok()) {
    *plan = FwdPlan{};
    return status;
  }
  return plan_fwd(params, device, plan);
}

Status run_fwd(const FwdParams& params, const FwdPlan& plan, cudaStream_t stream) {
  PlanRecord record;
  std::memcpy(&record, plan.internal_, sizeof(record));
  if (record.stamp != kPlanStamp) {
    return Status(StatusCode::kInvalidArgument,
                  "plan: expected a plan filled by a successful fp8attn_fwd_make_plan, got one it did not fill");
  }
  DeviceInfo planned_device;
  planned_device.num_sms = record.problem.num_sms;
  if (!same_problem(describe_problem(params, planned_device), record.problem)) {
    return Status(StatusCode::kInvalidArgument,
                  "params: expected the sizes the plan was made for (sizes, heads, window, num_splits or q's dtype "
                  "changed since the plan was made; plan again)");
  }
  Status status = validate_fwd_workspace(params, split_workspace_bytes(record.problem, record.config));
  if (!status.ok()) { return status; }
  if (device_arg_checks_enabled()) {
    status = check_device_args(params, stream);
    if (!status.ok()) { return status; }
  }
  // No query rows: nothing to write (out and lse are empty too), and q may be NULL, as torch passes it.
  if ((params.cu_seqlens_q != nullptr ? params.total_q : params.seqlen_q) == 0) { return Status::Ok(); }
  cudaError_t err;
  if (params.k == nullptr || params.v == nullptr) {
    // Every key length is 0 and K/V have no elements (validated): the kernel still runs, to write zeros and an
    // LSE of -inf, and never reads K/V; but a TMA descriptor needs a base address, and q's serves.
    FwdParams keyless = params;
    keyless.k = keyless.k ? keyless.k : params.q;
    keyless.v = keyless.v ? keyless.v : params.q;
    err = sm90::launch(keyless, record.config, stream);
  } else {
    err = sm90::launch(params, record.config, stream);
  }
  if (err != cudaSuccess) { return launch_failure(err); }
  return Status::Ok();
}

size_t fwd_workspace_size(const FwdParams& params, const DeviceInfo& device) {
  const ProblemShape problem = describe_problem(params, device);
  return split_workspace_bytes(problem, select_config(problem));
}

Status fwd_workspace_size(const FwdParams& params, size_t* bytes) {
  FwdPlan plan;
  const Status status = plan_fwd(params, &plan);
  *bytes = status.ok() ? plan.workspace_bytes : 0;
  return status;
}

Status fwd(const FwdParams& params, cudaStream_t stream) {
  FwdPlan plan;
  const Status status = plan_fwd(params, &plan);
  if (!status.ok()) { return status; }
  return run_fwd(params, plan, stream);
}

Status launch_with_config(const FwdParams& params, const KernelConfig& config, cudaStream_t stream) {
  if (!sm90::has_kernel(config.key)) { return not_compiled(config.key); }
  const cudaError_t err = sm90::launch(params, config, stream);
  if (err != cudaSuccess) { return launch_failure(err); }
  return Status::Ok();
}

}  // namespace fp8attn
