// fp8attn SM90 forward: the per-call values every warp role reads, and the per-sequence view of them.
#pragma once

#include <cstdint>

#include <cute/config.hpp>
#include <cutlass/fast_math.h>

#include "sm90/output_type.h"

namespace fp8attn::sm90 {

// A per-(batch, kv head) scale read in place; ptr == nullptr means 1. Strides may be 0 (broadcast).
struct DescaleArg {
  const float* ptr = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;

  CUTE_DEVICE float load(int batch, int kv_head) const {
    return ptr == nullptr ? 1.f : ptr[batch * batch_stride + kv_head * head_stride];
  }
};

// Derived on the host from fp8attn_fwd_params and the KernelConfig (fwd_launch.cuh: make_fwd_args); TMA
// descriptors travel beside it.
struct FwdArgs {
  int batch = 0;
  int seqlen_q = 0;  // dense length, or varlen max_seqlen_q
  int seqlen_k = 0;  // dense length, or varlen/paged max_seqlen_k
  int num_heads_q = 0;
  int num_heads_kv = 0;
  int qheads_per_kvhead = 1;
  // PackGQA: the q heads of one kv head share a CTA, interleaved along M (tile row = token * G + g).
  // Without it, G = 1 and each CTA serves one q head. The row math is PackGqa's (pack_gqa.cuh).
  bool pack_gqa = false;
  bool q_bf16 = false;  // the q16 kernels' Q: bf16, else fp16 (in the padding after pack_gqa: no field moves)
  // k and v are one tensor (same address and strides: Gemma-4's K = V). The split-dv kernels then load each KV tile
  // once and transpose V from the K stage (producer_load.cuh); the other kernels do not look. (Padding: no field moves.)
  bool kv_shared = false;
  cutlass::FastDivmod packed_rows_divmod;  // divides a packed row by G (G = 1 when not packing)

  // Q for the PackGQA gather and the q16 kernels' loads (TMA reads an E4M3 Q otherwise): dense [batch, seqlen_q,
  // heads_q, d] or varlen [total_q, ...], element strides (of Q's type).
  const uint8_t* q = nullptr;
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;

  const int* cu_seqlens_q = nullptr;  // [batch + 1]
  const int* cu_seqlens_k = nullptr;  // [batch + 1]
  const int* seqused_k = nullptr;     // [batch]

  // Paged K/V: [num_pages, page_size, heads_kv, d] through block_table[batch, max_pages]; nullptr = not paged.
  const int* block_table = nullptr;
  int64_t block_table_batch_stride = 0;
  int page_size = 0;

  // Split-KV (KernelConfig::split_kv() on the host): write fp32 partials (O normalised per split, and the
  // split's LSE) to the workspace for the combine kernel: o_partial [splits, rows, heads_q, dv], lse_partial
  // [splits, heads_q, rows], rows = total_q (varlen) or batch * seqlen_q (dense). num_splits counts the grid's
  // splits (1 when unsplit); split_kv is the decision.
  int num_splits = 1;
  cutlass::FastDivmod splits_divmod;  // divides by num_splits: the split of a tile, and each split's KV blocks
  bool split_kv = false;
  // Tile order (KernelConfig, tile_scheduler.cuh).
  bool reverse_m = false;
  int tile_order_rows = 1;
  // Divides by the grid's heads (kv heads with PackGQA): the varlen schedule's CTA i takes head i % heads of a
  // listed tile; the folded grid's row i takes head i % heads.
  cutlass::FastDivmod heads_divmod;
  // The folded direct grid (KernelConfig::folded_grid): CTA i takes M block i % m_blocks.
  bool folded_grid = false;
  cutlass::FastDivmod m_blocks_divmod;
  float* o_partial = nullptr;
  float* lse_partial = nullptr;
  int partial_rows = 0;

  void* out = nullptr;  // like q with dv
  OutputType out_type = OutputType::kBFloat16;
  const float* output_scale = nullptr;  // with an E4M3 out: out = E4M3(O / *output_scale)
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  float* lse = nullptr;  // optional
  int64_t lse_batch_stride = 0, lse_head_stride = 0;

  float softmax_scale_log2 = 0.f;  // softmax_scale * log2(e); q and k descales are folded in per CTA
  // Softcap (params.h): score -> softcap * tanh(softcap_tanh_scale * descales * q.k), then exp2 with the scale
  // softcap_log2 = softcap * log2(e) (softmax.cuh). softcap_tanh_scale = softmax_scale / softcap; 0: off.
  float softcap_tanh_scale = 0.f;
  float softcap_log2 = 0.f;
  DescaleArg q_descale, k_descale, v_descale;
  const void* sink = nullptr;  // [num_heads_q] logits, fp32 or bf16
  bool sink_is_bf16 = false;

  // Bottom-right aligned window; causal arrives here as window_right = 0. -1: unbounded.
  int window_left = -1;
  int window_right = -1;
#ifdef FP8ATTN_PHASE_PROBE
  // A probe build's clock marks, [phase_mark_ctas, kPhaseMarks] (phase_probe.cuh); nullptr: none recorded.
  uint64_t* phase_marks = nullptr;
  uint32_t phase_mark_ctas = 0;
#endif
};

// Where one sequence's rows live and how long it is.
struct SeqInfo {
  int seqlen_q;
  int seqlen_k;
  int offset_q;  // first row of this sequence in q/out (varlen), 0 for dense
  int offset_k;  // first row in k/v (varlen), 0 for dense
  int tma_batch_q;  // batch coordinate of the q TMA tensor: b for dense, 0 for varlen (one packed batch)
  int tma_batch_k;
  int64_t partial_row0;  // this sequence's first row in the split-KV partial buffers

  CUTE_DEVICE SeqInfo(const FwdArgs& args, int batch) {
    if (args.cu_seqlens_q != nullptr) {
      offset_q = args.cu_seqlens_q[batch];
      seqlen_q = args.cu_seqlens_q[batch + 1] - offset_q;
      tma_batch_q = 0;
    } else {
      offset_q = 0;
      seqlen_q = args.seqlen_q;
      tma_batch_q = batch;
    }
    if (args.cu_seqlens_k != nullptr) {
      offset_k = args.cu_seqlens_k[batch];
      seqlen_k = args.cu_seqlens_k[batch + 1] - offset_k;
      tma_batch_k = 0;
    } else {
      offset_k = 0;
      seqlen_k = args.seqlen_k;
      tma_batch_k = batch;
    }
    if (args.seqused_k != nullptr) {
      seqlen_k = args.seqused_k[batch];
    }
    partial_row0 = args.cu_seqlens_q != nullptr ? int64_t(offset_q) : int64_t(batch) * args.seqlen_q;
  }
};

}  // namespace fp8attn::sm90
