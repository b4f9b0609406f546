// The split-KV combine's CTA size (src/sm90/combine.h): whole warps, never above the kernel's bound, one float4
// column group per thread for every column of dv, and enough split groups that a decode plan's splits are read
// in one pass of loads (the kernel's latency budget; docs/design.md, Measured choices) — but no more threads than that.
#include <gtest/gtest.h>

#include "common/kernel_rules.h"
#include "sm90/combine.h"

namespace fp8attn::sm90 {
namespace {

TEST(CombineLayout, WholeWarpsCoveringEveryColumnWithinTheBound) {
  for (int dv : {64, 96, 128, 192, 256}) {
    for (int splits = 1; splits <= kMaxSplits; ++splits) {
      const int threads = combine_block_threads(splits, dv);
      SCOPED_TRACE(testing::Message() << "dv " << dv << ", " << splits << " splits: " << threads << " threads");
      ASSERT_GT(threads, 0);
      EXPECT_EQ(threads % 32, 0);
      EXPECT_LE(threads, kCombineMaxThreads);
      const int columns = dv / 4;
      const int groups = threads / columns;  // as the kernel derives it
      ASSERT_GE(groups, 1);
      // One pass of loads covers the splits whenever the bound allows it.
      const int passes = (splits + groups * kCombineLoadsPerPass - 1) / (groups * kCombineLoadsPerPass);
      if (splits <= (kCombineMaxThreads / columns) * kCombineLoadsPerPass) { EXPECT_EQ(passes, 1); }
      // No warp beyond what the splits need: dropping one would leave a split group short.
      if (threads > 32) { EXPECT_LT((threads - 32) / columns * kCombineLoadsPerPass, splits); }
    }
  }
}

TEST(CombineLayout, DecodePlansRunOneWarpPerRowForTwoSplitsAndAFullCtaForMany) {
  EXPECT_EQ(combine_block_threads(2, 128), 32);    // 70b 64x1-4k, qwen 32x1-8k: 2 splits
  EXPECT_EQ(combine_block_threads(14, 128), 128);  // 70b 8x1-32k
  EXPECT_EQ(combine_block_threads(29, 128), 256);  // llama 1x1-4k under a 32k graph plan
  EXPECT_EQ(combine_block_threads(10, 256), 192);  // gemma d256 window
}

TEST(CombineLayout, RefusesLayoutsTheKernelCannotHold) {
  EXPECT_EQ(combine_block_threads(0, 128), 0);
  EXPECT_EQ(combine_block_threads(4, 0), 0);
  EXPECT_EQ(combine_block_threads(4, 130), 0);   // not whole float4 groups
  EXPECT_EQ(combine_block_threads(4, 2048), 0);  // more columns than threads
}

}  // namespace
}  // namespace fp8attn::sm90
