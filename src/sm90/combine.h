// fp8attn: split-KV combine kernel (see combine.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sm90/output_type.h"

namespace fp8attn::sm90 {

struct CombineArgs {
  // Partials of the forward kernel: o [splits, rows, heads_q, dv] fp32, lse [splits, heads_q, rows] fp32.
  const float* o_partial = nullptr;
  const float* lse_partial = nullptr;
  int num_splits = 0;
  int partial_rows = 0;  // total_q (varlen) or batch * seqlen_q (dense)
  int num_heads_q = 0;
  int head_dim_v = 0;
  int batch = 0;
  int seqlen_q = 0;                    // dense
  const int* cu_seqlens_q = nullptr;   // varlen [batch + 1]
  void* out = nullptr;                 // like q with dv
  OutputType out_type = OutputType::kBFloat16;
  const float* output_scale = nullptr;  // with an E4M3 out: out = E4M3(O / *output_scale)
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  float* lse = nullptr;                // optional, layout of fp8attn_fwd_params::lse
  int64_t lse_batch_stride = 0, lse_head_stride = 0;
  const void* sink = nullptr;          // [heads_q] fp32 or bf16 logits
  bool sink_is_bf16 = false;
};

// The combine's CTA: float4 column groups of a dv row times split groups, enough of them that one pass of
// kCombineLoadsPerPass loads per thread covers the splits, as many as fit in kCombineMaxThreads; rounded up to
// whole warps. 0 when the layout cannot hold the call (dv not a multiple of 4 or above 4 * kCombineMaxThreads).
constexpr int kCombineMaxThreads = 256;
constexpr int kCombineLoadsPerPass = 4;
constexpr int combine_block_threads(int num_splits, int head_dim_v) {
  const int columns = head_dim_v / 4;
  if (head_dim_v <= 0 || head_dim_v % 4 != 0 || columns > kCombineMaxThreads || num_splits < 1) { return 0; }
  const int wanted = (num_splits + kCombineLoadsPerPass - 1) / kCombineLoadsPerPass;
  const int most = kCombineMaxThreads / columns;
  const int groups = wanted < most ? wanted : most;  // wanted >= 1 as num_splits >= 1
  return (columns * groups + 31) / 32 * 32;
}

cudaError_t launch_combine(const CombineArgs& args, cudaStream_t stream);

}  // namespace fp8attn::sm90
