// fp8attn benchmark programs: a CUDA runtime call that must succeed, or the program stops naming it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(expr)                                                        \
  do {                                                                          \
    const cudaError_t err_ = (expr);                                            \
    if (err_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(err_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)
