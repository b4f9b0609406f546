// fp8attn: launch facts shared by the host (config.cpp, validate.cpp) and the kernels (kernel_traits.cuh,
// combine.cu), so the two cannot disagree. Plain constexpr C++, usable from nvcc and from the host compiler.
#pragma once

namespace fp8attn {

// KV tile width. Shared memory holds Q + the pipeline stages of (K, V as loaded, V^T), and the two-level tile
// accumulator bounds the registers (docs/design.md). 128-row d256 tiles take 128 keys with P V after the softmax
// (pv_after_softmax below); 64-row d256 tiles (decode, short queries) keep 64. 192-row tiles (d64, three MMA
// warpgroups at 160 registers) take 128 keys with P V in 32-column dv chunks (kernel_traits.cuh).
constexpr int block_n_for(int block_m, int head_dim) {
  return block_m == 192 ? 128 : head_dim <= 128 ? 128 : head_dim <= 192 ? 96 : block_m == 128 ? 128 : 64;
}

// Single-MMA-warpgroup (64-row) tiles with dv <= 128 run two CTAs per SM: one CTA's loads overlap the other's
// math in memory-bound decode, and two 2-stage pipelines fit in the SM's shared memory.
constexpr int ctas_per_sm_for(int block_m, int head_dim_v) { return block_m == 64 && head_dim_v <= 128 ? 2 : 1; }

// dv = 512 (Gemma-4's global layers): a 64 x 512 fp32 O is 256 registers per thread, more than a warpgroup has. Its
// columns are split over two MMA warpgroups that share the tile's 64 rows (mainloop_split_dv.cuh; docs/design.md
// section 8): one computes S, the softmax and P V on O's first half, the other P V on the second half.
constexpr bool split_dv(int head_dim_v) { return head_dim_v > 256; }

// Split dv with at most kSwappedRows query rows per tile (decode of Gemma-4's global layers: 8 q heads per KV head,
// one token) runs the swapped-operand loop, on a kernel of its own (KernelKey::swapped): S^T = K Q^T and
// O^T = V^T P^T with the rows as the GEMMs' N (mainloop_swapped.cuh; docs/design.md section 8). tile_rows: query
// rows of one M tile (tokens x q heads per KV head with PackGQA).
constexpr int kSwappedRows = 8;
constexpr bool swapped_operands(int head_dim_v, long long tile_rows) {
  return split_dv(head_dim_v) && tile_rows <= kSwappedRows;
}

// Tile rows of the varlen schedule (mixed prefill + decode calls; src/kernels.list compiles it at these only):
// 64 where that runs two CTAs per SM (d, dv <= 128), so that a decode's tile streams its K/V beside another CTA as
// in a decode-only call; 128 above, where 64-row tiles run one CTA per SM and the prefill chunk wants 128 rows.
constexpr int varlen_schedule_block_m(int head_dim, int head_dim_v) {
  return head_dim <= 128 && ctas_per_sm_for(64, head_dim_v) == 2 ? 64 : 128;
}

// Head dims and Q types whose every call runs on one direct-grid kernel of kSingleKernelBlockM rows
// (src/kernels.list): a 16-bit Q (the q16 kernels: the quantization's per-row scales take two registers through the
// KV loop, which the 128-row d128 and d256 prefill tiles do not have, docs/design.md section 8) and split dv (dv =
// 512, whose two MMA warpgroups share one 64-row tile). Decode runs there as on any 64-row kernel (PackGQA, splits),
// prefill in 64-row tiles, mixed prefill + decode calls on the direct grid. At dv = 512 the decode tiles of the
// swapped-operand loop have a 64-row kernel of their own (KernelKey::swapped), beside the one for every other call.
constexpr bool single_kernel_per_head_dims(bool q16, int head_dim_v) { return q16 || split_dv(head_dim_v); }
constexpr int kSingleKernelBlockM = 64;

// P V after the softmax, through the score registers (mainloop_mma.cuh): where O (dv > 128) leaves no registers
// for a tile accumulator next to the scores of a 128-key block, each block's P V runs once its scores are
// converted to P, in dv parts of 128 columns accumulated in the registers that held the scores. It gives up the
// overlap of one block's P V with the next block's softmax (measured ~0% at d128; docs/design.md, Measured choices) for
// 128-key blocks: per key, half the two-level folds and half the per-block work of 64-key blocks.
constexpr bool pv_after_softmax(int block_m, int block_n, int head_dim_v) {
  return block_m == 128 && block_n == 128 && head_dim_v > 128;
}

// V-as-loaded and V^T pipeline stages. Three let the load warp run two tiles ahead of the MMA warpgroups;
// two-CTA (decode) kernels keep two so that two CTAs fit in an SM's shared memory, and so do the 128-key
// d256 tiles (a stage is 96 KB) and split dv (V^T stages of 32 KB each beside a 32 KB Q; its V-as-loaded
// buffer has one stage, kernel_traits.cuh).
constexpr int stages_for(int block_m, int block_n, int head_dim_v) {
  return ctas_per_sm_for(block_m, head_dim_v) == 2 || pv_after_softmax(block_m, block_n, head_dim_v) ||
                 split_dv(head_dim_v)
             ? 2
             : 3;
}

// K stages. Split dv has three, the last of which is also its one V-as-loaded stage: with K = V (Gemma-4; V is
// never loaded) the K ring takes all three, with K != V it skips the last (kernel_traits.cuh, advance_k_stage).
// A decode CTA then keeps two K tiles of HBM reads in flight instead of one (docs/design.md, Measured choices).
constexpr int k_stages_for(int block_m, int block_n, int head_dim_v) {
  return split_dv(head_dim_v) ? 3 : stages_for(block_m, block_n, head_dim_v);
}

// Most KV splits of one call: the validation's bound, and the combine kernel's shared-memory weight table.
constexpr int kMaxSplits = 256;

// The split-KV workspace (fp32 partial O and LSE per split) may not exceed 2 GiB: 256 splits of 16k query rows
// x 32 heads x dv 128 would ask for ~69 GB. num_splits is a ceiling, so the plan takes fewer splits where a
// requested count would pass the cap (config.cpp); validation refuses a plan over it all the same.
constexpr unsigned long long kMaxWorkspaceBytes = 2ull << 30;

// Most splits the heuristic takes on its own (num_splits = 0).
constexpr int kMaxHeuristicSplits = 128;

}  // namespace fp8attn
