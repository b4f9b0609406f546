// fp8attn SM90 forward: which (query tile, head, sequence) a CTA computes.
//
// One CTA per tile, grid (m_blocks, num_heads_q, batch), from select_config(). The grid is sized by
// host-known maxima (max_seqlen_q), so CTAs whose tile starts past their sequence's end exit at once:
// that is what keeps a captured CUDA graph valid when the device-side lengths change.
#pragma once

#include <cute/config.hpp>

namespace fp8attn::sm90 {

struct TileCoord {
  int m_block;
  int head_q;
  int batch;
};

struct SingleTileScheduler {
  CUTE_DEVICE static TileCoord tile() { return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)}; }
};

}  // namespace fp8attn::sm90
