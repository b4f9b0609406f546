// fp8attn SM90: the element type out is written in, by the forward's epilogue and by the split-KV combine.
// Plain C++ (the host launcher fills it in); the device-side stores are in output_store.cuh.
#pragma once

#include "fp8attn/params.h"

namespace fp8attn::sm90 {

enum class OutputType : int {
  kFloat16,
  kBFloat16,
  kE4M3,  // out = E4M3(O / output_scale), saturated (params.h, output_scale)
};

// For a validated out_dtype (F16, BF16 or E4M3).
inline OutputType output_type_of(fp8attn_dtype out_dtype) {
  return out_dtype == FP8ATTN_DTYPE_E4M3 ? OutputType::kE4M3
         : out_dtype == FP8ATTN_DTYPE_BF16 ? OutputType::kBFloat16
                                          : OutputType::kFloat16;
}

}  // namespace fp8attn::sm90
