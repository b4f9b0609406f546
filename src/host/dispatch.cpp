// fp8attn: dispatch table. kernel_registry.inc lists the compiled kernels and kernel_list_all.inc every
// declared one; both are generated from src/kernels.list, so the table cannot drift from the build.
// This file is compiled twice: into libfp8attn.so with the shipped kernels only, and into the internal
// library that tests and benchmarks link with FP8ATTN_WITH_INTERNAL_KERNELS, which adds the `one_level`
// comparison kernels (kernel_registry_internal.inc) the library does not ship.
#include "host/dispatch.h"

#include <string>

namespace fp8attn {

#define FP8ATTN_KERNEL(D, DV, BM, BN, TL) \
  cudaError_t FP8ATTN_LAUNCHER_NAME(D, DV, BM, BN, TL)(const fp8attn_fwd_params&, const KernelConfig&, cudaStream_t);
#include "kernel_registry.inc"
#ifdef FP8ATTN_WITH_INTERNAL_KERNELS
#include "kernel_registry_internal.inc"
#endif
#undef FP8ATTN_KERNEL

namespace {

struct CompiledKernel {
  KernelKey key;
  LaunchFn launch;
};

const CompiledKernel kCompiledKernels[] = {
#define FP8ATTN_KERNEL(D, DV, BM, BN, TL) {KernelKey{D, DV, BM, BN, TL != 0}, &FP8ATTN_LAUNCHER_NAME(D, DV, BM, BN, TL)},
#include "kernel_registry.inc"
#ifdef FP8ATTN_WITH_INTERNAL_KERNELS
#include "kernel_registry_internal.inc"
#endif
#undef FP8ATTN_KERNEL
};

const KernelKey kDeclaredKernels[] = {
#define FP8ATTN_KERNEL(D, DV, BM, BN, TL) KernelKey{D, DV, BM, BN, TL != 0},
#include "kernel_list_all.inc"
#undef FP8ATTN_KERNEL
};

}  // namespace

LaunchFn find_launcher(const KernelKey& key) {
  for (const CompiledKernel& k : kCompiledKernels) {
    if (k.key == key) { return k.launch; }
  }
  return nullptr;
}

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

}  // namespace fp8attn
