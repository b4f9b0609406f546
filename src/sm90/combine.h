// fp8attn: split-KV combine kernel (see combine.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

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
  void* out = nullptr;                 // like q with dv; fp16 or bf16
  bool out_is_bf16 = true;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  float* lse = nullptr;                // optional, layout of fp8attn_fwd_params::lse
  int64_t lse_batch_stride = 0, lse_head_stride = 0;
  const void* sink = nullptr;          // [heads_q] fp32 or bf16 logits
  bool sink_is_bf16 = false;
};

cudaError_t launch_combine(const CombineArgs& args, cudaStream_t stream);

}  // namespace fp8attn::sm90
