// fp8attn: launch facts shared by the host (config.cpp, validate.cpp) and the kernels (kernel_traits.cuh,
// combine.cu), so the two cannot disagree. Plain constexpr C++, usable from nvcc and from the host compiler.
#pragma once

namespace fp8attn {

// KV tile width per head dim: shared memory holds Q + 2 stages of (K, V as loaded, V^T), and the two-level
// tile accumulator bounds the registers (docs/design.md).
constexpr int block_n_for_head_dim(int head_dim) { return head_dim <= 128 ? 128 : head_dim <= 192 ? 96 : 64; }

// Single-MMA-warpgroup (64-row) tiles with dv <= 128 run two CTAs per SM: one CTA's loads overlap the other's
// math in memory-bound decode, and two 2-stage pipelines fit in the SM's shared memory.
constexpr int ctas_per_sm_for(int block_m, int head_dim_v) { return block_m == 64 && head_dim_v <= 128 ? 2 : 1; }

// K, V-as-loaded and V^T pipeline stages. Three let the load warp run two tiles ahead of the MMA
// warpgroups; two-CTA (decode) kernels keep two so that two CTAs fit in an SM's shared memory.
constexpr int stages_for(int block_m, int head_dim_v) { return ctas_per_sm_for(block_m, head_dim_v) == 2 ? 2 : 3; }

// Most KV splits of one call: the validation's bound, and the combine kernel's shared-memory weight table.
constexpr int kMaxSplits = 256;

}  // namespace fp8attn
