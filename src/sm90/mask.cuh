// fp8attn SM90 forward: which KV blocks a query tile visits, and the element mask on the blocks that
// straddle a boundary (sequence end, causal/window diagonals).
//
// Masks are bottom-right aligned (FlashAttention's convention): key j is visible to query i iff
//   j < seqlen_k  and  j <= i + seqlen_k - seqlen_q + window_right  and  j >= i + seqlen_k - seqlen_q - window_left
// with an unbounded side when its window is -1 (causal is window_right = 0). With PackGQA a tile row is
// token * G + g, so the query position of tile row r is r / G.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/fast_math.h>

#include "sm90/kernel_args.cuh"
#include "sm90/pack_gqa.cuh"
#include "sm90/utils.cuh"

namespace fp8attn::sm90 {

struct KvBlockRange {
  int n_block_min;
  int n_block_max;  // exclusive; empty when n_block_max <= n_block_min
};

template <int kBlockM, int kBlockN>
struct Mask {
  int seqlen_q, seqlen_k;
  int window_left, window_right;
  int m_block;
  PackGqa pack;  // tile row -> query position

  CUTE_DEVICE Mask(const SeqInfo& seq, const FwdArgs& args, int m_block_)
      : seqlen_q(seq.seqlen_q), seqlen_k(seq.seqlen_k), window_left(args.window_left),
        window_right(args.window_right), m_block(m_block_), pack(args) {}

  CUTE_DEVICE int query_position(int packed_row) const { return pack.query_position(packed_row); }
  // First and last query positions of the tile that exist in the sequence.
  CUTE_DEVICE int first_query() const { return query_position(m_block * kBlockM); }
  CUTE_DEVICE int last_query() const { return min(query_position(m_block * kBlockM + kBlockM - 1), seqlen_q - 1); }

  // All KV blocks the tile needs, before splitting.
  CUTE_DEVICE KvBlockRange kv_block_range() const {
    int n_max = cute::ceil_div(seqlen_k, kBlockN);
    int n_min = 0;
    const int diag = seqlen_k - seqlen_q;
    if (window_right >= 0) {
      const int key_hi = last_query() + diag + window_right;  // last key any row of the tile sees
      n_max = min(n_max, key_hi < 0 ? 0 : key_hi / kBlockN + 1);
    }
    if (window_left >= 0) {
      const int key_lo = first_query() + diag - window_left;  // first key any row of the tile sees
      n_min = max(n_min, key_lo < 0 ? 0 : key_lo / kBlockN);
    }
    return {n_min, n_max};
  }

  // The share of split `split` of `splits` (a divider by num_splits): consecutive runs of blocks whose sizes differ
  // by at most one. num_splits is planned from host-known lengths (max_seqlen_k), the blocks from the real ones:
  // with ceil-sized runs, a 4k-key sequence under a 32k plan left 13 of 29 splits empty; spread this way every split
  // has a block whenever there are at least as many blocks as splits. num_splits = 1 gives the whole range.
  // Split s starts at floor(s * blocks / num_splits) = s * q + floor(s * r / num_splits), blocks = q * num_splits + r:
  // products within 32 bits (s * blocks alone can pass 2^31; s, r < num_splits <= kMaxSplits) and no 64-bit
  // division, two calls of an ~80-instruction subroutine on every CTA's path to its first load (docs/design.md,
  // Measured choices).
  CUTE_HOST_DEVICE static KvBlockRange split_range(KvBlockRange all, int split, const cutlass::FastDivmod& splits) {
    const int blocks = all.n_block_max > all.n_block_min ? all.n_block_max - all.n_block_min : 0;
    int q, r;
    splits(q, r, blocks);
    return {all.n_block_min + split * q + splits.div(split * r),
            all.n_block_min + (split + 1) * q + splits.div((split + 1) * r)};
  }

  // Whether block n_block has any key that some row of the tile must not see.
  CUTE_DEVICE bool needs_mask(int n_block) const {
    const int key_first = n_block * kBlockN;
    const int key_last = key_first + kBlockN - 1;
    const int diag = seqlen_k - seqlen_q;
    return key_last >= seqlen_k ||
           (window_right >= 0 && key_last > first_query() + diag + window_right) ||
           (window_left >= 0 && key_first < last_query() + diag - window_left);
  }

  // Query position q sees keys key0 + [lo, hi] of the columns key0 .. key0 + kBlockN - 1 (the predicate at the
  // top of this file as one interval), clamped to [-1, kBlockN]: compared, not subtracted, where the difference
  // could overflow. Host-callable for the CPU test.
  CUTE_HOST_DEVICE static void visible_columns(int seqlen_q, int seqlen_k, int window_left, int window_right, int q,
                                               int key0, int& lo, int& hi) {
    const int diag = seqlen_k - seqlen_q;
    const int last = window_right >= 0 ? cute::min(seqlen_k - 1, q + diag + window_right) : seqlen_k - 1;
    const int first = window_left >= 0 ? q + diag - window_left : key0;
    lo = first < key0 ? -1 : cute::min(first - key0, kBlockN);
    hi = last < key0 ? -1 : cute::min(last - key0, kBlockN);
  }

  // Sets masked scores to -inf. tSrS: (MMA, MMA_M, MMA_N) fp32 scores; tScS: the same partition of the
  // identity tensor over (kBlockM, kBlockN), giving each score's (row, col) inside the tile.
  // Each row half's visible keys are one interval, computed once relative to the thread's first column; a score's
  // column minus that first column is a compile-time constant, so each score costs two compares with immediates
  // and a select. (Testing the three conditions per score made this the largest part of the decode kernel's
  // code: 25 KB of 106, run once and cold per CTA; docs/design.md, Measured choices.)
  template <class TensorS, class TensorC>
  CUTE_DEVICE void apply(TensorS& tSrS, const TensorC& tScS, int n_block) const {
    const int first_col = int(cute::get<1>(tScS(0)));
    const int key0 = n_block * kBlockN + first_col;
    const int row_base = m_block * kBlockM;
    // One row half at a time, so that only its interval is live (the MMA warpgroups have no registers to spare).
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      using Acc = AccumulatorIndex;
      const int q = query_position(row_base + int(cute::get<0>(tScS(Acc::of(0, h, 0)))));
      int lo, hi;
      visible_columns(seqlen_q, seqlen_k, window_left, window_right, q, key0, lo, hi);
      CUTE_UNROLL
      for (int j = 0; j < cute::size(tSrS) / Acc::kValuesPerBlock; ++j) {
        CUTE_UNROLL
        for (int c = 0; c < 2; ++c) {
          const int col = int(cute::get<1>(tScS(Acc::of(c, h, j)))) - first_col;
          if (col < lo || col > hi) { tSrS(Acc::of(c, h, j)) = -INFINITY; }
        }
      }
    }
  }
};

}  // namespace fp8attn::sm90
