// fp8attn SM90: stores of the output's elements, two adjacent columns at a time, for each OutputType: fp16 and
// bf16 round to nearest (one 4-byte store), E4M3 rounds to nearest and saturates to +-448, NaN staying NaN (one
// 2-byte store). The caller has folded every scale into the values (1 / output_scale included).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include <cute/config.hpp>

#include "sm90/output_type.h"
#include "sm90/ptx.cuh"

namespace fp8attn::sm90 {

struct StoreFloat16 {
  using Element = __half;
  CUTE_DEVICE void operator()(Element* dst, float lo, float hi) const {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(lo, hi);
  }
};

struct StoreBFloat16 {
  using Element = __nv_bfloat16;
  CUTE_DEVICE void operator()(Element* dst, float lo, float hi) const {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(lo, hi);
  }
};

struct StoreE4M3 {
  using Element = uint8_t;
  CUTE_DEVICE void operator()(Element* dst, float lo, float hi) const {
    *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(pack_e4m3x2(lo, hi));
  }
};

// Calls body(store) with the store of `type`: one copy of the caller's loop per type, the branch outside it.
template <class Body>
CUTE_DEVICE void with_output_store(OutputType type, Body&& body) {
  if (type == OutputType::kBFloat16) {
    body(StoreBFloat16{});
  } else if (type == OutputType::kFloat16) {
    body(StoreFloat16{});
  } else {
    body(StoreE4M3{});
  }
}

}  // namespace fp8attn::sm90
