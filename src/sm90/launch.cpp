// fp8attn SM90: the launcher (launch.h). kernel_registry.inc lists the compiled kernels and
// kernel_list_all.inc every declared one; both are generated from src/kernels.list.
// This file is compiled twice: into libfp8attn.so with the shipped kernels only, and into the internal
// library that tests and benchmarks link with FP8ATTN_WITH_INTERNAL_KERNELS, which adds the `one_level`
// comparison kernels (kernel_registry_internal.inc) the library does not ship.
#include "sm90/launch.h"

#include <string>

#include "sm90/combine.h"

namespace fp8attn::sm90 {

#define FP8ATTN_KERNEL(D, DV, BM, BN, TL, VS, Q16, SW)                                                      \
  cudaError_t FP8ATTN_LAUNCHER_NAME(D, DV, BM, BN, TL, VS, Q16, SW)(const fp8attn_fwd_params&, const KernelConfig&, \
                                                                   cudaStream_t);
#include "kernel_registry.inc"
#ifdef FP8ATTN_WITH_INTERNAL_KERNELS
#include "kernel_registry_internal.inc"
#endif
#undef FP8ATTN_KERNEL

namespace {

struct CompiledKernel {
  KernelKey key;
  ForwardLauncher launch;
};

const CompiledKernel kCompiledKernels[] = {
#define FP8ATTN_KERNEL(D, DV, BM, BN, TL, VS, Q16, SW)               \
  {KernelKey{D, DV, BM, BN, TL != 0, VS != 0, Q16 != 0, SW != 0}, \
   &FP8ATTN_LAUNCHER_NAME(D, DV, BM, BN, TL, VS, Q16, SW)},
#include "kernel_registry.inc"
#ifdef FP8ATTN_WITH_INTERNAL_KERNELS
#include "kernel_registry_internal.inc"
#endif
#undef FP8ATTN_KERNEL
};

const KernelKey kDeclaredKernels[] = {
#define FP8ATTN_KERNEL(D, DV, BM, BN, TL, VS, Q16, SW) KernelKey{D, DV, BM, BN, TL != 0, VS != 0, Q16 != 0, SW != 0},
#include "kernel_list_all.inc"
#undef FP8ATTN_KERNEL
};

ForwardLauncher find_launcher(const KernelKey& key) {
  for (const CompiledKernel& k : kCompiledKernels) {
    if (k.key == key) { return k.launch; }
  }
  return nullptr;
}

// The split-KV reduction of the partials the forward kernel left in the workspace (SplitWorkspace layout).
cudaError_t launch_combine_of(const fp8attn_fwd_params& p, const KernelConfig& config, cudaStream_t stream) {
  const SplitWorkspace layout = SplitWorkspace::of(config, p.num_heads_q, p.head_dim_v);
  CombineArgs c;
  c.o_partial = static_cast<const float*>(p.workspace);
  c.lse_partial = c.o_partial + layout.o_floats;
  c.num_splits = config.num_splits;
  c.partial_rows = int(config.partial_rows);
  c.num_heads_q = p.num_heads_q;
  c.head_dim_v = p.head_dim_v;
  c.batch = p.batch;
  c.seqlen_q = p.seqlen_q;
  c.cu_seqlens_q = p.cu_seqlens_q;
  c.out = p.out;
  c.out_type = output_type_of(p.out_dtype);
  c.output_scale = p.output_scale.ptr;  // NULL unless out is E4M3 (validate.cpp)
  c.o_batch_stride = p.o_batch_stride;
  c.o_row_stride = p.o_row_stride;
  c.o_head_stride = p.o_head_stride;
  c.lse = p.lse;
  c.lse_batch_stride = p.lse_batch_stride;
  c.lse_head_stride = p.lse_head_stride;
  c.sink = p.sink;
  c.sink_is_bf16 = p.sink_dtype == FP8ATTN_DTYPE_BF16;
  return launch_combine(c, stream);
}

}  // namespace

cudaError_t launch(const fp8attn_fwd_params& params, const KernelConfig& config, cudaStream_t stream) {
  const ForwardLauncher forward = find_launcher(config.key);
  if (forward == nullptr) { return cudaErrorInvalidDeviceFunction; }
  if (config.grid_x == 0 || config.grid_y == 0 || config.grid_z == 0) { return cudaSuccess; }  // nothing to compute
  const cudaError_t err = forward(params, config, stream);
  if (err != cudaSuccess || !config.split_kv()) { return err; }
  return launch_combine_of(params, config, stream);
}

bool has_kernel(const KernelKey& key) { return find_launcher(key) != nullptr; }

bool is_declared_kernel(const KernelKey& key) {
  for (const KernelKey& k : kDeclaredKernels) {
    if (k == key) { return true; }
  }
  return false;
}

const char* compiled_kernels_description() {
  static const std::string description = [] {
    std::string s;
    for (const CompiledKernel& k : kCompiledKernels) { s += k.key.to_string() + "\n"; }
    return s;
  }();
  return description.c_str();
}

}  // namespace fp8attn::sm90
