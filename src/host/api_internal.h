// fp8attn: internal entry points for tests and benchmarks (not part of the public API).
#pragma once

#include <cuda_runtime_api.h>

#include "fp8attn/fp8attn.h"
#include "host/config.h"

namespace fp8attn {

// Launches the kernel of `config` (and the split-KV combine) for already validated params, as run_fwd does
// for a plan; tests use it to force a config, e.g. the single-level accumulation kernel
// (KernelKey::two_level = false). The caller owns the workspace for config.num_splits.
Status launch_with_config(const FwdParams& params, const KernelConfig& config, cudaStream_t stream);

}  // namespace fp8attn
