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
// Who loads: the thread quad that holds a row's accumulator values (accumulator_row) loads that row straight from
// global memory, each thread a quarter of it in 16-byte chunks (chunk c + 4 i for quad lane c, so a quad reads
// 64 contiguous bytes per load), all of its loads in flight at once: one round trip, as the E4M3 TMA, and no
// staging buffer. The quad's max-reduction leaves the row's scale in exactly the threads whose softmax needs it.
// PackGQA rows map to (token, q head) as everywhere (pack_gqa.cuh). Rows past the sequence are zeros. Split dv (d512):
// the two MMA warpgroups share the tile's rows, so each takes one row half (its threads' rows r, or r + 8): a thread
// then holds one row's quarter (64 registers at d512) instead of two (whose 128 spilled).
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
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kChunksPerRow = kHeadDim / 8;          // 16-byte chunks of 8 elements
  static constexpr int kChunksPerThread = kChunksPerRow / 4;  // a quad shares a row
  static constexpr int kRowHalves = Traits::kSplitDv ? 1 : 2;     // rows per thread
  static_assert(kChunksPerRow % 4 == 0, "head dims are multiples of 32");

  // mma_thread: 0 .. kNumMmaThreads - 1. Writes this thread's share of its rows into sQ and the rows' scales
  // (amax / 448) into smem.q_row_scale. Ends with the warpgroup's rows of sQ and scales visible to it (split dv: all
  // rows, to both warpgroups).
  CUTE_DEVICE static void run(const FwdArgs& args, const SeqInfo& seq, int m_block, int cta_head, int mma_thread,
                              typename Traits::SharedStorage& smem) {
    const PackGqa pack(args);
    Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q.data()), typename Traits::SmemLayoutQ{});  // (BLK_M, D) E4M3
    const int quad_lane = mma_thread % 4;
    const uint16_t* q = reinterpret_cast<const uint16_t*>(args.q);  // element strides are of the 16-bit type
    const int thread = Traits::row_thread(mma_thread);
    const int first_half = Traits::kSplitDv ? mma_thread / 128 : 0;
    auto tile_row = [&](int r) { return accumulator_row(thread, first_half + r); };  // this thread's row r
    uint4 chunk[kRowHalves][kChunksPerThread];  // 8 elements each
    CUTE_UNROLL
    for (int h = 0; h < kRowHalves; ++h) {
      const RowTarget target = pack.row_target(m_block * kBlockM + tile_row(h), cta_head);
      const bool valid = target.token < seq.seqlen_q;
      const uint16_t* row = q + seq.tma_batch_q * args.q_batch_stride +
                            int64_t(seq.offset_q + target.token) * args.q_row_stride +
                            int64_t(target.head_q) * args.q_head_stride + 8 * quad_lane;
      CUTE_UNROLL
      for (int i = 0; i < kChunksPerThread; ++i) {
        chunk[h][i] = valid ? *reinterpret_cast<const uint4*>(row + 32 * i) : make_uint4(0, 0, 0, 0);
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
    for (int h = 0; h < kRowHalves; ++h) {
      float amax = 0.f;
      auto take_max = [&](uint32_t word) {  // two elements into amax
        const float2 pair = to_float2(word);
        amax = fmaxf(amax, fmaxf(fabsf(pair.x), fabsf(pair.y)));
      };
      CUTE_UNROLL
      for (int i = 0; i < kChunksPerThread; ++i) {
        take_max(chunk[h][i].x);
        take_max(chunk[h][i].y);
        take_max(chunk[h][i].z);
        take_max(chunk[h][i].w);
      }
      amax = quad_allreduce_max(amax);
      if (mma_thread == 0 && h == 0) { phase_mark(smem, kPhaseQLoaded); }
      // Correctly rounded divisions, as the reference's: the emulation then quantizes to the same bytes.
      if (quad_lane == 0) { smem.q_row_scale[tile_row(h)] = amax > 0.f ? __fdiv_rn(amax, kE4m3Max) : 1.f; }
      const float to_e4m3 = amax > 0.f ? __fdiv_rn(kE4m3Max, amax) : 0.f;
      auto quantize = [&](uint32_t word) {  // two elements to two E4M3 bytes
        const float2 pair = to_float2(word);
        return pack_e4m3x2(pair.x * to_e4m3, pair.y * to_e4m3);
      };
      CUTE_UNROLL
      for (int i = 0; i < kChunksPerThread; ++i) {
        const uint2 packed = make_uint2(quantize(chunk[h][i].x) | quantize(chunk[h][i].y) << 16,
                                        quantize(chunk[h][i].z) | quantize(chunk[h][i].w) << 16);
        // 8 E4M3 columns from a multiple of 8: inside one 16-byte unit of the swizzled row, so contiguous.
        *reinterpret_cast<uint2*>(&sQ(tile_row(h), 8 * (quad_lane + 4 * i))) = packed;
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
