// fp8attn: public C++ API. Framework-free: plain params (see params.h), a status, a CUDA stream.
//
//   fp8attn_fwd_params p;  fp8attn_fwd_params_init(&p);  ... fill p ...
//   fp8attn::FwdPlan plan;
//   fp8attn::Status s = fp8attn::plan_fwd(p, &plan);        // validates once, picks kernel + splits + workspace
//   ... p.workspace / p.workspace_bytes = plan.workspace_bytes of device scratch, if nonzero ...
//   s = fp8attn::run_fwd(p, plan, stream);                   // launches (forward, and the split-KV combine)
//
// fwd(p, stream) is both in one call, for callers that size the workspace beforehand (fwd_workspace_size).
// Nothing here synchronizes or allocates, so a run can be captured in a CUDA graph. Every launch choice
// depends only on host-known values (sizes, max_seqlen_q/k, num_splits), never on device-side lengths, so a
// graph captured once replays correctly when seqused_k / cu_seqlens / block_table change.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "fp8attn/c_api.h"
#include "fp8attn/export.h"
#include "fp8attn/params.h"
#include "fp8attn/status.h"

namespace fp8attn {

using FwdParams = fp8attn_fwd_params;

// What validation and config selection need to know about the device; host-known, CPU-testable.
struct DeviceInfo {
  int cc_major = 0;
  int cc_minor = 0;
  int num_sms = 0;
};

// Queries the current CUDA device (cached per device).
FP8ATTN_API Status query_device(DeviceInfo* info);

// Checks every argument, the workspace included; the message names the first bad one and what was expected.
FP8ATTN_API Status validate_fwd(const FwdParams& params, const DeviceInfo& device);

// The launch chosen for one call (see fp8attn_fwd_make_plan in c_api.h).
using FwdPlan = fp8attn_fwd_plan;

// Validates everything but the workspace and plans the launch for `device` (plan_fwd(params, plan): the
// current device). Builds no message unless it fails.
FP8ATTN_API Status plan_fwd(const FwdParams& params, const DeviceInfo& device, FwdPlan* plan);
FP8ATTN_API Status plan_fwd(const FwdParams& params, FwdPlan* plan);
// Launches `plan` on `stream`: params as planned, with plan.workspace_bytes of workspace.
FP8ATTN_API Status run_fwd(const FwdParams& params, const FwdPlan& plan, cudaStream_t stream);

// Bytes of device workspace a call needs (split-KV partials), 0 if none. The first form is the plan's
// arithmetic for `device` and assumes valid params; the second plans on the current device and reports
// invalid params or a failed device query.
FP8ATTN_API size_t fwd_workspace_size(const FwdParams& params, const DeviceInfo& device);
FP8ATTN_API Status fwd_workspace_size(const FwdParams& params, size_t* bytes);

// plan_fwd + run_fwd; params.workspace must already hold the planned bytes.
FP8ATTN_API Status fwd(const FwdParams& params, cudaStream_t stream);

}  // namespace fp8attn
