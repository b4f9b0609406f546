// fp8attn: the supported (head_dim, head_dim_v) pairs. src/kernels.list is their one source: every pair it
// declares, in list order, generated into head_dims.inc by cmake/kernels.cmake. Validation and the tests
// read them here (the Python package reads src/kernels.list itself: python/fp8attn/_kernel_list.py).
#pragma once

#include <utility>

namespace fp8attn {

inline constexpr std::pair<int, int> kSupportedHeadDims[] = {
#define FP8ATTN_HEAD_DIM_PAIR(D, DV) {D, DV},
#include "head_dims.inc"
#undef FP8ATTN_HEAD_DIM_PAIR
};

}  // namespace fp8attn
