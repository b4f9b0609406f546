// fp8attn SM90 forward: PackGQA row math, in one place.
//
// With PackGQA a CTA serves the G = num_heads_q / num_heads_kv q heads of one kv head, interleaved along M:
// tile row r (counted from the sequence's first query) holds query position r / G of q head
// kv_head * G + r % G, so K/V are read once for all G heads. Without it G is 1: tile row r is query position r
// of the CTA's own q head. The grid's head index is the kv head when packing and the q head otherwise.
// (producer_load.cuh's Q gather still spells the same mapping out with FwdArgs::packed_rows_divmod.)
#pragma once

#include <cute/config.hpp>
#include <cutlass/fast_math.h>

#include "sm90/kernel_args.cuh"

namespace fp8attn::sm90 {

// Where tile row r of a CTA goes: its query position and q head.
struct RowTarget {
  int token;
  int head_q;
};

struct PackGqa {
  cutlass::FastDivmod rows_per_token;  // divides a tile row by G (1 when not packing)
  int qheads_per_kvhead;
  bool packed;

  CUTE_DEVICE explicit PackGqa(const FwdArgs& args)
      : rows_per_token(args.packed_rows_divmod), qheads_per_kvhead(args.qheads_per_kvhead), packed(args.pack_gqa) {}

  // Tile rows a sequence of seqlen_q queries occupies.
  CUTE_DEVICE int tile_rows(int seqlen_q) const { return packed ? seqlen_q * qheads_per_kvhead : seqlen_q; }

  // The kv head whose K/V the CTA of grid head `cta_head` reads.
  CUTE_DEVICE int kv_head(int cta_head) const { return packed ? cta_head : cta_head / qheads_per_kvhead; }

  CUTE_DEVICE int query_position(int tile_row) const { return rows_per_token.divide(tile_row); }

  CUTE_DEVICE RowTarget row_target(int tile_row, int cta_head) const {
    if (!packed) { return {tile_row, cta_head}; }
    int token, g;
    rows_per_token(token, g, tile_row);
    return {token, cta_head * qheads_per_kvhead + g};
  }
};

}  // namespace fp8attn::sm90
