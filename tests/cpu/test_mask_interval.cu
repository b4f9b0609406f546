// The element mask's per-row interval (Mask::visible_columns, src/sm90/mask.cuh) against the visibility predicate
// it replaces, key by key: sequence end, causal and both window sides, short and long sequences, queries
// before and after the diagonal, and windows large enough that q + diag - window_left is far below zero. Also the
// split of a tile's KV blocks (Mask::split_range) against the 64-bit formula it replaces.
#include <gtest/gtest.h>

#include <vector>

#include "sm90/mask.cuh"

namespace fp8attn::sm90 {
namespace {

constexpr int kBlockN = 128;
using TileMask = Mask<64, kBlockN>;

bool visible(int seqlen_q, int seqlen_k, int window_left, int window_right, int q, int key) {
  const int diag = seqlen_k - seqlen_q;
  return key < seqlen_k && (window_right < 0 || key <= q + diag + window_right) &&
         (window_left < 0 || key >= q + diag - window_left);
}

TEST(MaskInterval, MatchesTheVisibilityPredicateForEveryKeyOfTheBlock) {
  const std::vector<int> seqlens_q = {1, 4, 130, 1024};
  const std::vector<int> seqlens_k = {1, 17, 128, 300, 1025, 4096};
  const std::vector<std::pair<int, int>> windows = {{-1, -1}, {-1, 0}, {0, 0}, {63, 0}, {100, 2}, {1023, -1},
                                                    {-1, 5}, {2000000000, 0}, {5, 2000000000}};
  int checked = 0;
  for (int sq : seqlens_q) {
    for (int sk : seqlens_k) {
      for (auto [wl, wr] : windows) {
        for (int q : {0, 1, sq / 2, sq - 1}) {
          for (int n_block = 0; n_block * kBlockN < sk + kBlockN; ++n_block) {
            for (int first_col : {0, 2, 8, 9}) {  // the thread's first column inside the block
              const int key0 = n_block * kBlockN + first_col;
              int lo = 0, hi = 0;
              TileMask::visible_columns(sq, sk, wl, wr, q, key0, lo, hi);
              for (int col = 0; first_col + col < kBlockN; ++col) {
                const bool expected = visible(sq, sk, wl, wr, q, key0 + col);
                ASSERT_EQ(col >= lo && col <= hi, expected)
                    << "seqlen_q " << sq << " seqlen_k " << sk << " window (" << wl << ", " << wr << ") q " << q
                    << " key " << key0 + col << ": interval [" << lo << ", " << hi << "] from key0 " << key0;
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100000);
}

TEST(SplitRange, MatchesFloorOfSplitTimesBlocksOverSplits) {
  // Up to kMaxSplits splits, block counts from empty to past 2^31 / kMaxSplits (where split * blocks overflows int).
  const std::vector<int> block_counts = {0, 1, 2, 3, 7, 29, 128, 255, 256, 257, 1000, 4096, 65537, 8388609, 16777215};
  const std::vector<int> split_counts = {1, 2, 3, 7, 16, 29, 128, 255, 256};
  int checked = 0;
  for (int blocks : block_counts) {
    for (int splits : split_counts) {
      const cutlass::FastDivmod divmod(splits);
      int previous_end = 5;
      for (int split = 0; split < splits; ++split) {
        const KvBlockRange got = TileMask::split_range({5, 5 + blocks}, split, divmod);
        const int begin = 5 + int(int64_t(split) * blocks / splits);
        const int end = 5 + int(int64_t(split + 1) * blocks / splits);
        ASSERT_EQ(got.n_block_min, begin) << "blocks " << blocks << " splits " << splits << " split " << split;
        ASSERT_EQ(got.n_block_max, end) << "blocks " << blocks << " splits " << splits << " split " << split;
        ASSERT_EQ(got.n_block_min, previous_end) << "the splits are consecutive";
        previous_end = got.n_block_max;
        ++checked;
      }
      ASSERT_EQ(previous_end, 5 + blocks) << "the splits cover every block";
    }
  }
  EXPECT_GT(checked, 10000);
  // An empty range (the window leaves a tile no keys) stays empty in every split.
  const cutlass::FastDivmod four(4);
  for (int split = 0; split < 4; ++split) {
    const KvBlockRange got = TileMask::split_range({9, 3}, split, four);
    EXPECT_EQ(got.n_block_max, got.n_block_min);
  }
}

}  // namespace
}  // namespace fp8attn::sm90
