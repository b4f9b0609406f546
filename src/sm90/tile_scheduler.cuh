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
//
// A varlen batch whose sequences differ in length (a prefill chunk beside decoding requests) takes the varlen
// schedule instead (KernelKey::varlen_schedule): a one-dimensional grid over the tiles the sequences really
// have, found on the device from cu_seqlens_q (VarlenTiles below). It is a kernel of its own (src/kernels.list):
// in the direct-grid kernels its warp scan sat, branched over, between a decode CTA's start and its first load,
// and the small decode steps were 1.7-3.4% slower for it (docs/perf.md, "The serving call").
#pragma once

#include <cute/config.hpp>

#include "sm90/kernel_args.cuh"
#include "sm90/ptx.cuh"

namespace fp8attn::sm90 {

struct TileCoord {
  int m_block;  // kNoTile: the CTA has no tile (past the varlen schedule's list)
  int head;     // q head, or kv head with PackGQA
  int batch;
  int split;
  static constexpr int kNoTile = -1;
};

// The varlen schedule's map from CTA to tile. The batch's tiles are listed sequence by sequence, M block by M
// block, sequence b having ceil(rows_b / kBlockM) of them (rows_b: its query rows, times G when packing). CTA i
// takes head i % heads of the tile of rank i / heads in the order: first the tiles of the one-tile sequences
// (decodes, in batch order), then the other sequences' tiles from the last. A decode's tile streams its whole
// context from DRAM alone and is the longest tile of a mixed batch; started last it was the tail (design.md,
// "The varlen schedule"). Among the prefill chunks the last tiles start first: vLLM lists the chunk after the
// decodes, and a causal chunk's last M blocks see the most keys. Each warp finds its tile from cu_seqlens_q
// itself: a first pass sums every sequence's tiles and counts the one-tile ones (32 sequences a step, the loads
// independent of each other), a second finds the sequence by a warp prefix sum over the same, now cached,
// lengths. No pre-pass kernel and no workspace, so a captured CUDA graph stays valid whatever the lengths.
// Called by whole warps.
template <int kBlockM>
struct VarlenTiles {
  CUTE_DEVICE static int tiles_of(const FwdArgs& args, int batch) {
    if (batch >= args.batch) { return 0; }
    const int rows = (args.cu_seqlens_q[batch + 1] - args.cu_seqlens_q[batch]) *
                     (args.pack_gqa ? args.qheads_per_kvhead : 1);
    return (rows + kBlockM - 1) / kBlockM;
  }

  CUTE_DEVICE static TileCoord tile(const FwdArgs& args, int linear) {
    constexpr unsigned kFullWarp = 0xffffffffu;
    int rank, head;
    args.heads_divmod(rank, head, linear);
    const int lane = int(threadIdx.x % 32);
    int total = 0, single = 0;
#pragma unroll 4
    for (int b = lane; b < args.batch; b += 32) {
      const int tiles = tiles_of(args, b);
      total += tiles;
      single += tiles == 1;
    }
    total = __reduce_add_sync(kFullWarp, total);
    single = __reduce_add_sync(kFullWarp, single);
    if (rank >= total) { return {TileCoord::kNoTile, 0, 0, 0}; }
    // The rank's tile in the list of its kind: the one-tile sequences' tiles in order, the others' from the last.
    const bool decode = rank < single;
    const int target = decode ? rank : total - 1 - rank;
    for (int first = 0, before = 0;; first += 32) {
      const int tiles = tiles_of(args, first + lane);
      const int counted = (tiles == 1) == decode ? tiles : 0;
      int inclusive = counted;
      CUTE_UNROLL
      for (int offset = 1; offset < 32; offset *= 2) {
        const int below = __shfl_up_sync(kFullWarp, inclusive, offset);
        if (lane >= offset) { inclusive += below; }
      }
      const unsigned past = __ballot_sync(kFullWarp, before + inclusive > target);
      if (past != 0) {
        const int owner = __ffs(past) - 1;
        const int owner_first_tile = before + __shfl_sync(kFullWarp, inclusive - counted, owner);
        return {target - owner_first_tile, head, first + owner, 0};
      }
      before += __shfl_sync(kFullWarp, inclusive, 31);
    }
  }
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

// The direct grid's scheduler (one tile per CTA from its block index).
struct DirectGridScheduler {
  CUTE_DEVICE static TileCoord tile(const FwdArgs& args) { return tile_of(args, blockIdx); }

  // The MMA warpgroups find their tile again after the KV loop rather than hold its coordinates in registers
  // through it: recomputed from the block index read again (a volatile read is not merged with the first).
  CUTE_DEVICE static void keep(const TileCoord&, TileCoord&) {}
  CUTE_DEVICE static TileCoord tile_again(const FwdArgs& args, const TileCoord&) {
    return tile_of(args, block_idx_reread());
  }

 private:
  CUTE_DEVICE static TileCoord tile_of(const FwdArgs& args, uint3 block) {
    if (args.folded_grid) {  // (m_blocks x heads x batch * splits) CTAs in gridDim.x
      int row, m_block, batch_split, head, batch, split;
      args.m_blocks_divmod(row, m_block, int(block.x));
      args.heads_divmod(batch_split, head, row);
      args.splits_divmod(batch, split, batch_split);
      return {m_block, head, batch, split};
    }
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

// The varlen schedule's scheduler: the tile of rank blockIdx.x / heads in VarlenTiles' list. Its warp scan is
// not worth repeating after the KV loop, so `keep` stores the tile in `slot` (shared memory, written by one thread
// before the CTA barrier) and `tile_again` reads it there.
template <int kBlockM>
struct VarlenListScheduler {
  CUTE_DEVICE static TileCoord tile(const FwdArgs& args) { return VarlenTiles<kBlockM>::tile(args, int(blockIdx.x)); }
  CUTE_DEVICE static void keep(const TileCoord& tile, TileCoord& slot) {
    if (threadIdx.x == 0) { slot = tile; }
  }
  CUTE_DEVICE static TileCoord tile_again(const FwdArgs&, const TileCoord& slot) { return slot; }
};

}  // namespace fp8attn::sm90
