// fp8attn: the opt-in debug check of what validate_fwd cannot see from the host (params.h, "Extents").
#pragma once

#include <cuda_runtime_api.h>

#include "fp8attn/fp8attn.h"

namespace fp8attn {

// True when the environment variable FP8ATTN_CHECK_DEVICE_ARGS is set to anything but "" or "0" (read once).
bool device_arg_checks_enabled();

// For params that passed validate_fwd: checks that every pointer is device memory of the current device, then
// copies cu_seqlens_q/k, seqused_k and the used block-table entries to the host (ordered on `stream`, which it
// synchronizes) and checks their values against the sizes. Returns OK without checking while `stream` is being
// captured into a CUDA graph (a synchronizing copy would invalidate the capture).
Status check_device_args(const FwdParams& params, cudaStream_t stream);

}  // namespace fp8attn
