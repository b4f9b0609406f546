// The longest-first tile order (src/sm90/tile_scheduler.cuh), checked on the CPU for configs select_config()
// makes: under a causal mask the linear block index maps onto every tile of the grid exactly once, each section
// visits its M blocks from the last (the longest tiles) to the first, and a section's K/V stays within the L2
// share; without one (or with one M block) the grid's own order is kept.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "host/config.h"
#include "sm90/tile_scheduler.cuh"

namespace fp8attn::sm90 {
namespace {

struct Problem {
  const char* name;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, d;
  bool causal;
  int num_splits;
};

const Problem kProblems[] = {
    {"prefill d128 1k", 16, 1024, 1024, 16, 16, 128, false, 0},
    {"prefill d128 1k causal", 16, 1024, 1024, 16, 16, 128, true, 0},
    {"prefill d128 16k causal", 1, 16384, 16384, 16, 16, 128, true, 0},
    {"prefill d64 16k causal gqa", 1, 16384, 16384, 32, 8, 64, true, 0},
    {"prefill d256 4k causal", 4, 4096, 4096, 8, 8, 256, true, 0},
    {"chunked prefill causal", 3, 700, 9000, 32, 8, 128, true, 0},
    {"decode split", 1, 1, 32768, 32, 8, 128, true, 0},
    {"decode batch 128", 128, 1, 1024, 32, 8, 128, true, 0},
    {"decode explicit splits", 7, 1, 4096, 8, 1, 192, false, 5},
    {"speculative decode", 5, 4, 2048, 64, 8, 128, true, 3},
    {"prefill d256 1k causal", 16, 1024, 1024, 8, 8, 256, true, 0},
    {"prefill d96 1k causal", 16, 1024, 1024, 16, 16, 96, true, 0},
};

ProblemShape shape_of(const Problem& p) {
  ProblemShape s;
  s.batch = p.batch;
  s.max_seqlen_q = p.seqlen_q;
  s.max_seqlen_k = p.seqlen_k;
  s.total_q = int64_t(p.batch) * p.seqlen_q;
  s.num_heads_q = p.heads_q;
  s.num_heads_kv = p.heads_kv;
  s.head_dim = s.head_dim_v = p.d;
  s.window_right = p.causal ? 0 : -1;
  s.num_splits_requested = p.num_splits;
  s.num_sms = 132;
  return s;
}

TEST(TileOrder, VisitsEveryTileOnceInTheDeclaredOrder) {
  for (const Problem& p : kProblems) {
    const ProblemShape shape = shape_of(p);
    const KernelConfig config = select_config(shape);
    const int rows = int(config.grid_y * config.grid_z);
    if (!config.reverse_m) {
      EXPECT_TRUE(!p.causal || config.grid_x < 16) << p.name << ": a causal mask over 16+ M blocks keeps the grid order";
      EXPECT_EQ(config.tile_order_rows, 1) << p.name;
      continue;
    }
    const LongestFirstOrder order{int(config.grid_x), int(config.grid_y), config.num_splits, rows,
                                  config.tile_order_rows};
    const int tiles = int(config.grid_x) * rows;
    ASSERT_GT(tiles, 0) << p.name;
    const int batch_splits = int(config.grid_z);
    std::vector<int> seen(size_t(tiles), 0);
    int previous_m = -1, previous_row = -1;
    for (int t = 0; t < tiles; ++t) {
      const TileCoord c = order.tile(t);
      ASSERT_GE(c.m_block, 0) << p.name << " tile " << t;
      ASSERT_LT(c.m_block, int(config.grid_x)) << p.name << " tile " << t;
      ASSERT_GE(c.head, 0) << p.name;
      ASSERT_LT(c.head, int(config.grid_y)) << p.name;
      ASSERT_GE(c.batch, 0) << p.name;
      ASSERT_LT(c.batch, p.batch) << p.name;
      ASSERT_GE(c.split, 0) << p.name;
      ASSERT_LT(c.split, config.num_splits) << p.name;
      const int row = c.head + int(config.grid_y) * (c.batch * config.num_splits + c.split);
      ASSERT_LT(row, rows) << p.name;
      ASSERT_LT(c.batch * config.num_splits + c.split, batch_splits) << p.name;
      ++seen[size_t(row) * config.grid_x + size_t(c.m_block)];
      const int section = row / config.tile_order_rows;
      const bool same_section = previous_row >= 0 && previous_row / config.tile_order_rows == section;
      if (same_section) {
        // Longest first: M never grows inside a section.
        EXPECT_LE(c.m_block, previous_m) << p.name << " tile " << t;
      } else {
        EXPECT_EQ(c.m_block, int(config.grid_x) - 1) << p.name << " tile " << t << ": a section starts with its last M block";
      }
      previous_m = c.m_block;
      previous_row = row;
    }
    for (int i = 0; i < tiles; ++i) { ASSERT_EQ(seen[size_t(i)], 1) << p.name << ": tile slot " << i << " visited " << seen[size_t(i)] << " times"; }
    std::cout << "[ order ] " << p.name << ": " << tiles << " tiles, sections of "
              << config.tile_order_rows << " rows, reverse_m " << config.reverse_m << "\n";
  }
}

// Causal prefill with long keys: a section's K/V (its rows' keys x (d + dv) bytes) stays within the L2 share,
// and grids of fewer than 16 M blocks keep the grid order.
TEST(TileOrder, CausalSectionsFitTheL2Share) {
  const KernelConfig long_keys = select_config(shape_of(kProblems[2]));  // 16 heads x 16k keys x 256 B = 4 MiB each
  EXPECT_TRUE(long_keys.reverse_m);
  EXPECT_GT(long_keys.tile_order_rows, 1);
  EXPECT_LE(int64_t(long_keys.tile_order_rows) * 16384 * 256, int64_t{24} << 20);
  EXPECT_LT(long_keys.tile_order_rows, 16);
  const KernelConfig short_keys = select_config(shape_of(kProblems[11]));  // 16 M blocks of 64 rows
  EXPECT_TRUE(short_keys.reverse_m);
  EXPECT_EQ(short_keys.tile_order_rows, 128);                              // 24 MiB / (1k keys x 192 B)
  const KernelConfig d128_1k = select_config(shape_of(kProblems[1]));     // 8 M blocks of 128 rows: the grid order
  EXPECT_FALSE(d128_1k.reverse_m);
  const KernelConfig d256_1k = select_config(shape_of(kProblems[10]));   // 8 M blocks: the grid order
  EXPECT_FALSE(d256_1k.reverse_m);
  EXPECT_EQ(d256_1k.tile_order_rows, 1);
  const KernelConfig d256 = select_config(shape_of(kProblems[4]));  // 32 rows x 4k keys x 512 B = 64 MiB
  EXPECT_TRUE(d256.reverse_m);
  EXPECT_EQ(d256.tile_order_rows, 12);                              // 24 MiB / 2 MiB
  const KernelConfig no_mask = select_config(shape_of(kProblems[0]));
  EXPECT_FALSE(no_mask.reverse_m);
  EXPECT_EQ(no_mask.tile_order_rows, 1);
}

}  // namespace
}  // namespace fp8attn::sm90
