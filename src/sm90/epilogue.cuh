// fp8attn SM90 forward, epilogue: normalise O, convert to fp16/bf16, store O and the LSE.
//
// Rows past the sequence are never written (varlen neighbours and padding stay untouched). Each thread
// stores its accumulator pairs (two adjacent columns) as one 32-bit word.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>

#include "sm90/kernel_args.cuh"

namespace fp8attn::sm90 {

using namespace cute;

template <class Traits>
struct Epilogue {
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kHeadDimV = Traits::kHeadDimV;
  using TiledMmaPV = typename Traits::TiledMmaPV;

  template <class FragmentO>
  CUTE_DEVICE static void store(const FwdArgs& args, const SeqInfo& seq, int m_block, int head_q, int mma_thread,
                                FragmentO const& tOrO, const float (&o_scale)[2], const float (&lse)[2]) {
    TiledMmaPV tiled_mma_pv;
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(mma_thread);
    Tensor cO = make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{});  // (BLK_M, DV) -> (row, col)
    Tensor tOcO = thr_mma_pv.partition_C(cO);  // (MMA, MMA_M, DV / CHUNK) coordinates of tOrO
    static_assert(decltype(size(tOcO))::value == decltype(size(tOrO))::value, "one coordinate per O value");

    const int row_base = m_block * kBlockM;
    const int64_t out_offset = seq.tma_batch_q * args.o_batch_stride + int64_t(head_q) * args.o_head_stride +
                               int64_t(seq.offset_q) * args.o_row_stride;
    CUTE_UNROLL
    for (int i = 0; i < size(tOrO); i += 2) {
      const int row = row_base + int(get<0>(tOcO(i)));
      const int col = int(get<1>(tOcO(i)));  // even; i + 1 is col + 1 of the same row
      if (row >= seq.seqlen_q) { continue; }
      const float scale = o_scale[(i / 2) % 2];
      const float lo = tOrO(i) * scale;
      const float hi = tOrO(i + 1) * scale;
      const int64_t offset = out_offset + int64_t(row) * args.o_row_stride + col;
      if (args.out_is_bf16) {
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(args.out) + offset) = __floats2bfloat162_rn(lo, hi);
      } else {
        *reinterpret_cast<__half2*>(static_cast<__half*>(args.out) + offset) = __floats2half2_rn(lo, hi);
      }
    }

    // One thread per quad owns the quad's two rows.
    if (args.lse != nullptr && mma_thread % 4 == 0) {
      float* lse_row0 = args.lse + seq.tma_batch_q * args.lse_batch_stride + int64_t(head_q) * args.lse_head_stride +
                        seq.offset_q;
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int row = row_base + int(get<0>(tOcO(2 * h)));
        if (row < seq.seqlen_q) { lse_row0[row] = lse[h]; }
      }
    }
  }
};

}  // namespace fp8attn::sm90
