// fp8attn SM90 forward: which (query tile, head, sequence) a CTA computes.
//
// One CTA per tile, grid (m_blocks, heads, batch * num_splits), from select_config(); heads are the q heads,
// or the kv heads with PackGQA. The grid is sized by host-known maxima (max_seqlen_q), so CTAs whose tile
// starts past their sequence's end exit at once: that is what keeps a captured CUDA graph valid when the
// device-side lengths change. For decode (one M block per sequence) this is the direct (head, split, batch) grid.
#pragma once

#include <cute/config.hpp>

namespace fp8attn::sm90 {

struct TileCoord {
  int m_block;
  int head;  // q head, or kv head with PackGQA
  int batch;
  int split;
};

struct SingleTileScheduler {
  CUTE_DEVICE static TileCoord tile(int num_splits) {
    return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z) / num_splits, int(blockIdx.z) % num_splits};
  }
};

}  // namespace fp8attn::sm90
