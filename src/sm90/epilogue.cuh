// fp8attn SM90 forward, epilogue: normalise O and store it with the LSE — as fp16/bf16 output, or as the
// fp32 partials of one KV split for the combine kernel.
//
// Rows past the sequence are never written (varlen neighbours and padding stay untouched). Each thread
// stores its accumulator pairs (two adjacent columns) as one 32- or 64-bit word.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>

#include "sm90/kernel_args.cuh"
#include "sm90/pack_gqa.cuh"
#include "sm90/utils.cuh"

namespace fp8attn::sm90 {

using namespace cute;

template <class Traits>
struct Epilogue {
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kHeadDimV = Traits::kHeadDimV;
  using TiledMmaPV = typename Traits::TiledMmaPV;

  // head: the CTA's q head, or its kv head with PackGQA. o_scale / lse: per row half of this thread.
  template <class FragmentO>
  CUTE_DEVICE static void store(const FwdArgs& args, const SeqInfo& seq, int m_block, int head, int split,
                                int mma_thread, FragmentO const& tOrO, const float (&o_scale)[2],
                                const float (&lse)[2]) {
    TiledMmaPV tiled_mma_pv;
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(mma_thread);
    Tensor cO = make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{});  // (BLK_M, DV) -> (row, col)
    Tensor tOcO = thr_mma_pv.partition_C(cO);  // (MMA, MMA_M, DV / CHUNK) coordinates of tOrO
    static_assert(decltype(size(tOcO))::value == decltype(size(tOrO))::value, "one coordinate per O value");

    const PackGqa pack(args);
    RowTarget target[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) { target[h] = pack.row_target(m_block * kBlockM + accumulator_row(mma_thread, h), head); }

    CUTE_UNROLL
    for (int i = 0; i < size(tOrO); i += 2) {
      const int h = (i / 2) % 2;  // accumulator flat index c + 2*h + 4*j; i + 1 is the next column
      if (target[h].token >= seq.seqlen_q) { continue; }
      const int col = int(get<1>(tOcO(i)));
      const float lo = tOrO(i) * o_scale[h];
      const float hi = tOrO(i + 1) * o_scale[h];
      if (args.split_kv) {
        const int64_t row = seq.partial_row0 + target[h].token;
        float* dst = args.o_partial + ((int64_t(split) * args.partial_rows + row) * args.num_heads_q + target[h].head_q) *
                                          kHeadDimV + col;
        *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
        continue;
      }
      const int64_t offset = seq.tma_batch_q * args.o_batch_stride + int64_t(target[h].head_q) * args.o_head_stride +
                             int64_t(seq.offset_q + target[h].token) * args.o_row_stride + col;
      if (args.out_is_bf16) {
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(args.out) + offset) = __floats2bfloat162_rn(lo, hi);
      } else {
        *reinterpret_cast<__half2*>(static_cast<__half*>(args.out) + offset) = __floats2half2_rn(lo, hi);
      }
    }

    // One thread per quad owns the quad's two rows.
    if (mma_thread % 4 != 0) { return; }
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      if (target[h].token >= seq.seqlen_q) { continue; }
      if (args.split_kv) {
        args.lse_partial[(int64_t(split) * args.num_heads_q + target[h].head_q) * args.partial_rows +
                         seq.partial_row0 + target[h].token] = lse[h];
      } else if (args.lse != nullptr) {
        args.lse[seq.tma_batch_q * args.lse_batch_stride + int64_t(target[h].head_q) * args.lse_head_stride +
                 seq.offset_q + target[h].token] = lse[h];
      }
    }
  }
};

}  // namespace fp8attn::sm90
