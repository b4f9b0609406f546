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
    bool row_valid[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      target[h] = pack.row_target(m_block * kBlockM + accumulator_row(mma_thread, h), head);
      row_valid[h] = target[h].token < seq.seqlen_q;
    }

    // One store loop per destination kind, each with its row addresses computed once: a decode CTA runs this
    // code once, cold, so its size is its cost (docs/perf.md run 18: one loop that chose the destination and
    // rebuilt the address per column pair was 36 KB of SASS and took ~3 us per CTA).
    // Each store is the thread's first column's address plus a constant: the column of accumulator i minus
    // that of accumulator 0 is a compile-time offset (the thread's part cancels).
    const int first_col = get<1>(tOcO(0));
    auto store_pairs = [&](auto* row0, auto* row1, auto convert) {
      row0 += first_col;
      row1 += first_col;
      CUTE_UNROLL
      for (int i = 0; i < size(tOrO); i += 2) {
        const int h = (i / 2) % 2;  // accumulator flat index c + 2*h + 4*j; i + 1 is the next column
        if (row_valid[h]) {
          convert((h == 0 ? row0 : row1) + (get<1>(tOcO(i)) - first_col), tOrO(i) * o_scale[h], tOrO(i + 1) * o_scale[h]);
        }
      }
    };
    if (args.split_kv) {
      auto row_address = [&](int h) {
        const int64_t row = seq.partial_row0 + target[h].token;
        return args.o_partial + ((int64_t(split) * args.partial_rows + row) * args.num_heads_q + target[h].head_q) * kHeadDimV;
      };
      store_pairs(row_address(0), row_address(1),
                  [](float* dst, float lo, float hi) { *reinterpret_cast<float2*>(dst) = make_float2(lo, hi); });
    } else {
      auto out_offset = [&](int h) {
        return seq.tma_batch_q * args.o_batch_stride + int64_t(target[h].head_q) * args.o_head_stride +
               int64_t(seq.offset_q + target[h].token) * args.o_row_stride;
      };
      if (args.out_is_bf16) {
        auto* out = static_cast<__nv_bfloat16*>(args.out);
        store_pairs(out + out_offset(0), out + out_offset(1), [](__nv_bfloat16* dst, float lo, float hi) {
          *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(lo, hi);
        });
      } else {
        auto* out = static_cast<__half*>(args.out);
        store_pairs(out + out_offset(0), out + out_offset(1), [](__half* dst, float lo, float hi) {
          *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(lo, hi);
        });
      }
    }

    // One thread per quad owns the quad's two rows.
    if (mma_thread % 4 != 0) { return; }
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      if (!row_valid[h]) { continue; }
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
