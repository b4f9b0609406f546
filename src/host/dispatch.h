// fp8attn: the runtime table of compiled kernels, generated from src/kernels.list (cmake/kernels.cmake).
#pragma once

#include <cuda_runtime_api.h>

#include "fp8attn/params.h"
#include "host/config.h"

namespace fp8attn {

using LaunchFn = cudaError_t (*)(const fp8attn_fwd_params&, const KernelConfig&, cudaStream_t);

#define FP8ATTN_LAUNCHER_NAME(D, DV, BM, BN, TL) launch_fwd_d##D##_dv##DV##_m##BM##_n##BN##_tl##TL

// The launcher for `key`, or nullptr when this build does not contain it.
LaunchFn find_launcher(const KernelKey& key);

// Every kernel in src/kernels.list (compiled or not): select_config() must only ever pick one of these.
bool is_declared_kernel(const KernelKey& key);

// One line per compiled kernel, e.g. "d=128 dv=128 block_m=128 block_n=128".
const char* compiled_kernels_description();

}  // namespace fp8attn
