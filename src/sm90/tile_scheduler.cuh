// fp8attn SM90 forward: which (query tile, head, sequence, split) a CTA computes.
//
// One CTA per tile, grid (m_blocks, heads, batch * num_splits), from select_config(); heads are the q heads,
// or the kv heads with PackGQA. The grid is sized by host-known maxima (max_seqlen_q), so CTAs whose tile
// starts past their sequence's end exit at once: that is what keeps a captured CUDA graph valid when the
// device-side lengths change. For decode (one M block per sequence) this is the direct (head, split, batch) grid.
//
// The hardware starts CTAs in linear block order (x fastest), so the order of the tiles is the map from the
// linear block index to a tile. Without a bounded right side it is the grid itself: every M block of a head,
// then the next head, so that the CTAs running at once share that head's K/V in L2. Under a causal mask later M
// blocks have more keys; with reverse_m (KernelConfig) the rows r = head + heads * (batch * splits + split)
// are cut into sections of tile_order_rows rows, and a section's tiles go M block by M block from the last
// (slow), row by row (fast): the longest tiles start first, so the last wave is short ones (LPT), and the
// CTAs running at once read the K/V of one section, sized on the host to fit in L2.
#pragma once

#include <cute/config.hpp>

#include "sm90/kernel_args.cuh"

namespace fp8attn::sm90 {

struct TileCoord {
  int m_block;
  int head;  // q head, or kv head with PackGQA
  int batch;
  int split;
};

// The reverse_m order: linear block index -> tile. Callable on the host for the CPU test.
struct LongestFirstOrder {
  int tiles_m, tiles_head, num_splits, num_rows, section_rows;

  CUTE_HOST_DEVICE TileCoord tile(int linear) const {
    const int section_tiles = section_rows * tiles_m;
    const int section = linear / section_tiles;
    const int in_section = linear - section * section_tiles;
    const int rows_here = min(section_rows, num_rows - section * section_rows);  // the last section may be short
    const int m_desc = in_section / rows_here;
    const int row = section * section_rows + (in_section - m_desc * rows_here);
    const int batch_split = row / tiles_head;
    return {tiles_m - 1 - m_desc, row - batch_split * tiles_head, batch_split / num_splits, batch_split % num_splits};
  }
};

struct SingleTileScheduler {
  CUTE_DEVICE static TileCoord tile(const FwdArgs& args) { return tile_of(args, blockIdx); }

  // The same tile, from the block index read again (a volatile read is not merged with the first): the MMA
  // warpgroups recompute their tile after the KV loop rather than hold its coordinates in registers through it.
  CUTE_DEVICE static TileCoord tile_reread(const FwdArgs& args) {
    uint3 block;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block.x));
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(block.y));
    asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(block.z));
    return tile_of(args, block);
  }

 private:
  CUTE_DEVICE static TileCoord tile_of(const FwdArgs& args, uint3 block) {
    if (!args.reverse_m) {
      int batch, split;
      args.splits_divmod(batch, split, int(block.z));
      return {int(block.x), int(block.y), batch, split};
    }
    const LongestFirstOrder order{int(gridDim.x), int(gridDim.y), args.num_splits, int(gridDim.y * gridDim.z),
                                  args.tile_order_rows};
    return order.tile(int(block.x + gridDim.x * (block.y + gridDim.y * block.z)));
  }
};

}  // namespace fp8attn::sm90
