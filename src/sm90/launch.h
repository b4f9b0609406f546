// fp8attn SM90: the launcher. It carries out a KernelConfig the host planned (common/kernel_config.h): the
// forward kernel and, for a split-KV config, the combine kernel, over the workspace layout it owns.
// The table of compiled kernels is generated from src/kernels.list (cmake/kernels.cmake), so what is built
// and what can be launched cannot drift apart.
#pragma once

#include <cuda_runtime_api.h>

#include "common/kernel_config.h"
#include "fp8attn/params.h"

namespace fp8attn::sm90 {

// Launches the forward kernel of `config` and, when config.split_kv(), the combine kernel, on `stream`.
// The params must be validated, hold config's workspace (SplitWorkspace) when split, and `config` must name
// a compiled kernel (has_kernel); cudaErrorInvalidDeviceFunction otherwise.
cudaError_t launch(const fp8attn_fwd_params& params, const KernelConfig& config, cudaStream_t stream);

// Whether this build contains the kernel `key`.
bool has_kernel(const KernelKey& key);

// Every kernel in src/kernels.list (compiled or not): select_config() must only ever pick one of these.
bool is_declared_kernel(const KernelKey& key);

// One line per compiled kernel, e.g. "d=128 dv=128 block_m=128 block_n=128".
const char* compiled_kernels_description();

// One generated forward launcher per compiled kernel (fwd_instantiation.cu.in).
using ForwardLauncher = cudaError_t (*)(const fp8attn_fwd_params&, const KernelConfig&, cudaStream_t);
#define FP8ATTN_LAUNCHER_NAME(D, DV, BM, BN, TL, VS, Q16, SW) \
  launch_fwd_d##D##_dv##DV##_m##BM##_n##BN##_tl##TL##_vs##VS##_q##Q16##_sw##SW

}  // namespace fp8attn::sm90
