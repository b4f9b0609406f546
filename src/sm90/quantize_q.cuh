// fp8attn SM90 forward, MMA warpgroups of the q16 kernels: a 16-bit Q (fp16 or bf16) quantized per row into sQ.
//
// Each (token, head) row gets its own scale amax(row) / 448: q_e4m3 = E4M3(q * 448 / amax), round to nearest
// even. A row's scale multiplies every score of that row, so it folds into the row's softmax multiplier (the
// exponent's, or with softcap the tanh's): one multiply per row half and KV block. The scales wait in shared
// memory and are read per KV block (load_q_row_scale): held in registers through the loop, they spilled the
// 64-row d192 kernel (120 B at 255 registers). A row of zeros stays zeros with scale 1: its scores are all 0, a uniform
// average over the visible keys, which is the exact answer (no 0 / 0). Scale 0 would be wrong: a masked score is -inf,
// and -inf * 0 in the exponent is NaN (run of 2026-12-05). The CPU reference's emulation quantizes alike
// (src/reference/attention.cpp).
//
// Who loads: a row's lanes (kLanesPerRow of one warp, up to 32) load it straight from global memory, each lane
// 16-byte chunks lane, lane + kLanesPerRow, ... so that the row's lanes read contiguous bytes; every load of a thread is
// in flight at once: one round trip, as the E4M3 TMA, and no staging buffer. The warps of a row group (a warpgroup's
// own 64 rows; split dv (d512): the two warpgroups share the tile's 64) take its rows in passes of one row set each:
// pass p, warp w, lane l has row p * kRowsPerPass + w * kRowsPerWarpPass + l / kLanesPerRow. A tile's valid rows are
// a prefix (tokens, or PackGQA rows), so a decode tile's few rows (8 q heads of one token) land on different warps in
// the first pass, and a pass with no valid row of the warp only writes zeros: the quantization's instructions run for
// the valid rows only. Why: a thread quad per row put all 8 rows of such a tile on one warp, 128 elements per thread
// behind ~1,700 instructions executed cold once per CTA; the decode CTA's start waited for them (the phase probe:
// 1.7 us from Q loaded to Q quantized, 8 x 4k at d512; docs/decode_floor.md). PackGQA rows map to (token, q head)
// as everywhere (pack_gqa.cuh). Rows past the sequence are zeros.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/kernel_args.cuh"
#include "sm90/pack_gqa.cuh"
#include "sm90/phase_probe.cuh"
#include "sm90/ptx.cuh"
#include "sm90/softmax.cuh"
#include "sm90/utils.cuh"

namespace fp8attn::sm90 {

using namespace cute;

constexpr float kE4m3Max = 448.f;

template <class Traits>
struct QuantizeQ {
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks of 8 elements
  // The most lanes that split a row evenly, a power of two: 32 at d256 and d512, 16 at d128, 8 at d64 and d192.
  static constexpr int kLanesPerRow = kChunksPerRow % 32 == 0 ? 32 : kChunksPerRow % 16 == 0 ? 16
                                      : kChunksPerRow % 8 == 0 ? 8 : 4;
  static_assert(kChunksPerRow % kLanesPerRow == 0, "head dims are multiples of 32");
  static constexpr int kChunksPerLane = kChunksPerRow / kLanesPerRow;
  static constexpr int kRowsPerWarpPass = 32 / kLanesPerRow;
  static constexpr int kGroupRows = 64;  // a warpgroup's rows; split dv: the tile's, shared by both warpgroups
  static constexpr int kGroupWarps = Traits::kSplitDv ? Traits::kNumMmaThreads / 32 : 4;
  static constexpr int kRowsPerPass = kGroupWarps * kRowsPerWarpPass;
  static constexpr int kPasses = kGroupRows / kRowsPerPass;
  static_assert(kGroupRows % kRowsPerPass == 0, "whole passes");

  // mma_thread: 0 .. kNumMmaThreads - 1. Writes this thread's share of its row group into sQ and the rows' scales
  // (amax / 448) into smem.q_row_scale. Ends with the warpgroup's rows of sQ and scales visible to it (split dv: all
  // rows, to both warpgroups).
  CUTE_DEVICE static void run(const FwdArgs& args, const SeqInfo& seq, int m_block, int cta_head, int mma_thread,
                              typename Traits::SharedStorage& smem) {
    const PackGqa pack(args);
    Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q.data()), typename Traits::SmemLayoutQ{});  // (BLK_M, D) E4M3
    const uint16_t* q = reinterpret_cast<const uint16_t*>(args.q);  // element strides are of the 16-bit type
    const int lane = mma_thread % 32;
    const int row_lane = lane % kLanesPerRow;
    const int group_row0 = Traits::kSplitDv ? 0 : mma_thread / 128 * kGroupRows;
    const int group_warp = (Traits::kSplitDv ? mma_thread : mma_thread % 128) / 32;
    const int tile_valid_rows = pack.tile_rows(seq.seqlen_q) - m_block * Traits::kBlockM;
    auto pass_row = [&](int pass, int lane_in_warp) {  // the tile row of a lane of this warp in a pass
      return group_row0 + pass * kRowsPerPass + group_warp * kRowsPerWarpPass + lane_in_warp / kLanesPerRow;
    };
    uint4 chunk[kPasses][kChunksPerLane];  // 8 elements each
    CUTE_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      const int row = pass_row(pass, lane);
      const bool valid = row < tile_valid_rows;
      const RowTarget target = pack.row_target(m_block * Traits::kBlockM + row, cta_head);
      const uint16_t* src = q + seq.tma_batch_q * args.q_batch_stride +
                            int64_t(seq.offset_q + target.token) * args.q_row_stride +
                            int64_t(target.head_q) * args.q_head_stride + 8 * row_lane;
      CUTE_UNROLL
      for (int i = 0; i < kChunksPerLane; ++i) {
        chunk[pass][i] = valid ? *reinterpret_cast<const uint4*>(src + 8 * kLanesPerRow * i) : make_uint4(0, 0, 0, 0);
      }
    }
    // The elements are converted twice (for the row maximum, then for the quantization) rather than held as fp32:
    // 16 bits per element in registers instead of 32 while every load is in flight.
    const bool bf16 = args.q_bf16;
    auto to_float2 = [bf16](uint32_t word) {
      return bf16 ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&word))
                  : __half22float2(*reinterpret_cast<const __half2*>(&word));
    };
    CUTE_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      const int row = pass_row(pass, lane);
      auto store_chunk = [&](int i, uint2 packed) {
        // 8 E4M3 columns from a multiple of 8: inside one 16-byte unit of the swizzled row, so contiguous.
        *reinterpret_cast<uint2*>(&sQ(row, 8 * (row_lane + kLanesPerRow * i))) = packed;
      };
      // Warp-uniform: the warp's first row of the pass is valid whenever any of its rows is (valid rows are a prefix).
      if (pass_row(pass, 0) >= tile_valid_rows) {
        if (row_lane == 0) { smem.q_row_scale[row] = 1.f; }
        CUTE_UNROLL
        for (int i = 0; i < kChunksPerLane; ++i) { store_chunk(i, make_uint2(0u, 0u)); }
        continue;
      }
      float amax = 0.f;
      auto take_max = [&](uint32_t word) {  // two elements into amax
        const float2 pair = to_float2(word);
        amax = fmaxf(amax, fmaxf(fabsf(pair.x), fabsf(pair.y)));
      };
      CUTE_UNROLL
      for (int i = 0; i < kChunksPerLane; ++i) {
        take_max(chunk[pass][i].x);
        take_max(chunk[pass][i].y);
        take_max(chunk[pass][i].z);
        take_max(chunk[pass][i].w);
      }
      CUTE_UNROLL
      for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, offset));
      }
      if (mma_thread == 0 && pass == 0) { phase_mark(smem, kPhaseQLoaded); }
      // Correctly rounded divisions, as the reference's: the emulation then quantizes to the same bytes.
      if (row_lane == 0) { smem.q_row_scale[row] = amax > 0.f ? __fdiv_rn(amax, kE4m3Max) : 1.f; }
      const float to_e4m3 = amax > 0.f ? __fdiv_rn(kE4m3Max, amax) : 0.f;
      auto quantize = [&](uint32_t word) {  // two elements to two E4M3 bytes
        const float2 pair = to_float2(word);
        return pack_e4m3x2(pair.x * to_e4m3, pair.y * to_e4m3);
      };
      CUTE_UNROLL
      for (int i = 0; i < kChunksPerLane; ++i) {
        store_chunk(i, make_uint2(quantize(chunk[pass][i].x) | quantize(chunk[pass][i].y) << 16,
                                  quantize(chunk[pass][i].z) | quantize(chunk[pass][i].w) << 16));
      }
    }
    // Each MMA warpgroup's QK^T reads only its own 64 rows of sQ, through the async proxy (split dv: the score
    // warpgroup all of them, half written by the other warpgroup).
    cutlass::arch::fence_view_async_shared();
    if constexpr (Traits::kSplitDv) {
      cutlass::arch::NamedBarrier::sync(Traits::kNumMmaThreads, kQuantizeQSplitDv);
    } else {
      warpgroup_named_sync<Traits::kNumMmaWarpgroups, kQuantizeQWarpgroup0>(mma_thread / 128);
    }
  }
};

// This thread's two rows' Q scales (softmax.cuh): in the q16 kernels read from shared memory where used (once per
// KV block); 1 for an E4M3 Q.
template <class Traits>
CUTE_DEVICE auto q_row_scale_of(const typename Traits::SharedStorage& smem) {
  if constexpr (Traits::kQ16) {
    const int thread = Traits::row_thread(thread_idx_reread() - Traits::kNumProducerThreads);
    return QRowScale{{ld_shared_volatile(&smem.q_row_scale[accumulator_row(thread, 0)]),
                      ld_shared_volatile(&smem.q_row_scale[accumulator_row(thread, 1)])}};
  } else {
    return UniformRowScale{};
  }
}

}  // namespace fp8attn::sm90
