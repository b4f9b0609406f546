// fp8attn: public C++ API. Framework-free: plain params (see params.h), a status, a CUDA stream.
//
//   fp8attn_fwd_params p;  fp8attn_fwd_params_init(&p);  ... fill p ...
//   size_t bytes = fp8attn::fwd_workspace_size(p);          // split-KV scratch, 0 when unsplit
//   fp8attn::Status s = fp8attn::fwd(p, stream);             // validates, selects a kernel, launches
//
// fwd() never synchronizes and allocates nothing, so it can be captured in a CUDA graph. Every launch
// choice depends only on host-known values (sizes, max_seqlen_q/k, num_splits), never on device-side
// lengths, so a graph captured once replays correctly when seqused_k / cu_seqlens / block_table change.
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
  size_t max_smem_per_block = 0;  // opt-in dynamic shared memory per block, bytes
};

// Queries the current CUDA device (cached per device).
FP8ATTN_API Status query_device(DeviceInfo* info);

// Checks every argument; the message names the first bad one and what was expected.
FP8ATTN_API Status validate_fwd(const FwdParams& params, const DeviceInfo& device);

// Bytes of device workspace fwd() needs for these params (split-KV partials), 0 if none.
FP8ATTN_API size_t fwd_workspace_size(const FwdParams& params, const DeviceInfo& device);
FP8ATTN_API size_t fwd_workspace_size(const FwdParams& params);  // on the current device

// Validate, select a config, launch on `stream`.
FP8ATTN_API Status fwd(const FwdParams& params, cudaStream_t stream);

}  // namespace fp8attn
