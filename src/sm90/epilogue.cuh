// fp8attn SM90 forward, epilogue: normalise O and store it with the LSE — as fp16/bf16/E4M3 output
// (output_store.cuh), or as the fp32 partials of one KV split for the combine kernel.
//
// Rows past the sequence are never written (varlen neighbours and padding stay untouched).
//
// Two paths. Direct: each thread stores its accumulator pairs (two adjacent columns) as one 32- or 64-bit
// word — small code, for the once-per-CTA path of decode (64-row kernels) and for the split partials. Staged
// (128-row prefill kernels): each MMA warpgroup writes its 64 rows into shared memory and copies
// every row out with one bulk copy (cp.async.bulk, full 128-byte lines, issued by one thread per row). The
// direct path's 4-byte stores, 8 rows per warp instruction, held the end of every prefill CTA on the store
// queue: a timing-only build without them took the fixed part of a d256 CTA from ~9 to ~2.5 µs and of a d128
// CTA from ~5.3 to ~3.5 µs (docs/design.md, Measured choices). A swapped-operand d512 decode tile has a third,
// store_rows: its 8 rows from shared memory, 16 bytes per thread and row.
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "common/kernel_rules.h"
#include "sm90/kernel_args.cuh"
#include "sm90/output_store.cuh"
#include "sm90/pack_gqa.cuh"
#include "sm90/utils.cuh"

namespace fp8attn::sm90 {

using namespace cute;

template <class Traits>
struct Epilogue {
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kHeadDimV = Traits::kHeadDimV;
  static constexpr int kCols = Traits::kHeadDimVPerWarpgroup;  // O's columns in one MMA warpgroup (split dv: half)
  using TiledMmaPV = typename Traits::TiledMmaPV;
  using SharedStorage = typename Traits::SharedStorage;

  // Staged output: each MMA warpgroup stages its 64 rows in its share of sVLoad. That buffer is free once the
  // warpgroup's KV loop is over, whatever the other warpgroup still does: every V tile loaded has been
  // transposed (the warpgroup consumed every V^T stage), and nothing else reads or writes it. (sK and sVt may
  // still be read by the other warpgroup's GEMMs.) Where 64 full rows do not fit (d256), dv goes in two passes.
  static constexpr bool kStagedOut = kBlockM >= 128;
  static_assert(!(kStagedOut && Traits::kSplitDv), "split dv tiles (64 rows) store directly");
  static constexpr int kStageRegionBytes = int(sizeof(SharedStorage::smem_vload)) / Traits::kNumMmaWarpgroups;
  static constexpr int kStagePasses = 64 * (kHeadDimV * 2 + 16) <= kStageRegionBytes ? 1 : 2;
  static constexpr int kPassCols = kHeadDimV / kStagePasses;
  // A row of 16-bit outputs plus 16 bytes: rows then start 4 banks apart (row stride in words = 4 mod 8), so a
  // warp's pair stores (8 rows x 4 threads x 4 bytes) hit 32 distinct banks; rows stay 16-byte aligned for
  // the bulk copy. E4M3 rows use the first half of the same rows.
  static constexpr int kStageRowBytes = kPassCols * 2 + 16;
  static_assert(!kStagedOut || 64 * kStageRowBytes <= kStageRegionBytes, "staged rows fit the sVLoad share");
  static_assert(!kStagedOut || ((kStageRowBytes / 4) % 8 == 4 && kPassCols % 8 == 0),
                "conflict-free staging rows; passes split dv at whole accumulator column blocks");

  // Where a row goes: its first element in the split-KV partials (fp32), in `out` (elements), and its LSE.
  CUTE_DEVICE static float* partial_row(const FwdArgs& args, const SeqInfo& seq, int split, const RowTarget& t) {
    const int64_t row = seq.partial_row0 + t.token;
    return args.o_partial + ((int64_t(split) * args.partial_rows + row) * args.num_heads_q + t.head_q) * kHeadDimV;
  }
  CUTE_DEVICE static int64_t out_offset(const FwdArgs& args, const SeqInfo& seq, const RowTarget& t) {
    return seq.tma_batch_q * args.o_batch_stride + int64_t(t.head_q) * args.o_head_stride +
           int64_t(seq.offset_q + t.token) * args.o_row_stride;
  }
  CUTE_DEVICE static void store_lse(const FwdArgs& args, const SeqInfo& seq, int split, const RowTarget& t, float lse) {
    if (args.split_kv) {
      args.lse_partial[(int64_t(split) * args.num_heads_q + t.head_q) * args.partial_rows + seq.partial_row0 + t.token] = lse;
    } else if (args.lse != nullptr) {
      args.lse[seq.tma_batch_q * args.lse_batch_stride + int64_t(t.head_q) * args.lse_head_stride + seq.offset_q +
               t.token] = lse;
    }
  }

  // head: the CTA's q head, or its kv head with PackGQA. o_scale / lse: per row half of this thread. With split dv
  // each MMA warpgroup stores its half of the columns, and the first one the LSE.
  template <class FragmentO>
  CUTE_DEVICE static void store(SharedStorage& smem, const FwdArgs& args, const SeqInfo& seq, int m_block,
                                int head, int split, int mma_thread, FragmentO const& tOrO,
                                const float (&o_scale)[2], const float (&lse)[2]) {
    TiledMmaPV tiled_mma_pv;
    const int row_thread = Traits::row_thread(mma_thread);
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(row_thread);
    Tensor cO = make_identity_tensor(Shape<Int<kBlockM>, Int<kCols>>{});  // (BLK_M, COLS) -> (row, col)
    Tensor tOcO = thr_mma_pv.partition_C(cO);  // (MMA, MMA_M, COLS / CHUNK) coordinates of tOrO, in the warpgroup's columns
    static_assert(decltype(size(tOcO))::value == decltype(size(tOrO))::value, "one coordinate per O value");

    const PackGqa pack(args);
    RowTarget target[2];
    bool row_valid[2];
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      target[h] = pack.row_target(m_block * kBlockM + accumulator_row(row_thread, h), head);
      row_valid[h] = target[h].token < seq.seqlen_q;
    }

    // One store loop per destination kind, each with its row addresses computed once: a decode CTA runs this
    // code once, cold, so its size is its cost (docs/design.md, Measured choices: one loop that chose the destination
    // and rebuilt the address per column pair was 36 KB of SASS and took ~3 us per CTA).
    // Each store is the thread's first column's address plus a constant: the column of accumulator i minus
    // that of accumulator 0 is a compile-time offset (the thread's part cancels).
    const int first_col = get<1>(tOcO(0));
    const int warpgroup_col0 = Traits::kSplitDv ? mma_thread / 128 * kCols : 0;  // the warpgroup's first column of O
    auto store_pairs = [&](auto* row0, auto* row1, auto convert) {
      row0 += warpgroup_col0 + first_col;
      row1 += warpgroup_col0 + first_col;
      CUTE_UNROLL
      for (int i = 0; i < size(tOrO); i += 2) {
        const int h = AccumulatorIndex::row_half(i);  // i + 1 is the next column
        if (row_valid[h]) {
          convert((h == 0 ? row0 : row1) + (get<1>(tOcO(i)) - first_col), tOrO(i) * o_scale[h], tOrO(i + 1) * o_scale[h]);
        }
      }
    };
    // Pass `pass` of the staged output: this thread's pairs in columns [pass, pass + 1) * kPassCols into its
    // rows of the warpgroup's staging rows. Which pass a pair belongs to is known at compile time: the
    // accumulator's column minus the thread's first column is a constant multiple of 8.
    auto stage_pairs = [&](int pass, char* region, const int (&local_row)[2], auto store) {
      using Element = typename decltype(store)::Element;
      CUTE_UNROLL
      for (int i = 0; i < size(tOrO); i += 2) {
        const int col = get<1>(tOcO(i)) - first_col;
        if (col / kPassCols != pass) { continue; }
        const int h = AccumulatorIndex::row_half(i);
        store(reinterpret_cast<Element*>(region + local_row[h] * kStageRowBytes) + (first_col + col - pass * kPassCols),
              tOrO(i) * o_scale[h], tOrO(i + 1) * o_scale[h]);
      }
    };
    if (args.split_kv) {
      store_pairs(partial_row(args, seq, split, target[0]), partial_row(args, seq, split, target[1]),
                  [](float* dst, float lo, float hi) { *reinterpret_cast<float2*>(dst) = make_float2(lo, hi); });
    } else {
      if constexpr (kStagedOut) {
        // Thread r < 64 of the warpgroup copies row r of the warpgroup's 64.
        const int warpgroup = mma_thread / 128;
        const int copy_row = mma_thread % 128;
        const RowTarget copy_target = pack.row_target(m_block * kBlockM + warpgroup * 64 + copy_row, head);
        const bool copies = copy_row < 64 && copy_target.token < seq.seqlen_q;
        const int out_bytes = args.out_type == OutputType::kE4M3 ? 1 : 2;
        char* out_row = static_cast<char*>(args.out) + out_offset(args, seq, copy_target) * out_bytes;
        char* region = reinterpret_cast<char*>(smem.smem_vload.data()) + warpgroup * kStageRegionBytes;
        const int local_row[2] = {accumulator_row(mma_thread, 0) % 64, accumulator_row(mma_thread, 1) % 64};
        auto warpgroup_sync = [&]() { warpgroup_named_sync<Traits::kNumMmaWarpgroups, kEpilogueWarpgroup0>(warpgroup); };
        CUTE_UNROLL
        for (int pass = 0; pass < kStagePasses; ++pass) {
          if (pass > 0) {  // the previous pass's copies have read the rows
            if (copies) { cute::tma_store_wait<0>(); }
            warpgroup_sync();
          }
          with_output_store(args.out_type, [&](auto store) { stage_pairs(pass, region, local_row, store); });
          // The bulk copies read the rows through the async proxy: order this thread's stores first, then
          // wait for the whole warpgroup's.
          cutlass::arch::fence_view_async_shared();
          warpgroup_sync();
          if (copies) {
            cute::SM90_BULK_COPY_S2G::copy(region + copy_row * kStageRowBytes, out_row + pass * kPassCols * out_bytes,
                                           kPassCols * out_bytes);
            cute::tma_store_arrive();
          }
        }
        // The rows must stay in shared memory until the copies have read them (the CTA may exit next).
        if (copies) { cute::tma_store_wait<0>(); }
      } else {
        with_output_store(args.out_type, [&](auto store) {
          auto* out = static_cast<typename decltype(store)::Element*>(args.out);
          store_pairs(out + out_offset(args, seq, target[0]), out + out_offset(args, seq, target[1]), store);
        });
      }
    }

    // One thread per quad owns the quad's two rows.
    if (mma_thread % 4 != 0 || (Traits::kSplitDv && mma_thread >= 128)) { return; }
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      if (row_valid[h]) { store_lse(args, seq, split, target[h], lse[h]); }
    }
  }

  // Swapped operands (d512 decode tiles, mainloop_swapped.cuh), the first MMA warpgroup: the tile's kSwappedRows
  // rows from o_rows ([ROWS][kRowFloats] fp32 in shared memory, MainloopSwapped::stage_ot_rows; null where the split
  // had no KV block, whose rows are zeros). Each thread takes 4 adjacent columns of every row: one 16-byte read, one
  // 16-byte partial store or two pair stores. The row loop stays rolled: a decode CTA runs this once, cold, and
  // its code size is its cost (the split-dv row layout's store, which this replaces, ran 128 values per thread
  // for 8 real rows). o_scale / lse: this thread's accumulator rows' (finalize()); the tile's rows are the
  // first row half of warp 0. warpgroup_sync: the warpgroup's barrier (the loop's, WarpgroupSync).
  template <int kRowFloats, class Sync>
  CUTE_DEVICE static void store_rows(SharedStorage& smem, const FwdArgs& args, const SeqInfo& seq, int m_block, int head,
                                     int split, int thread, const float* o_rows, const float (&o_scale)[2],
                                     const float (&lse)[2], Sync&& warpgroup_sync) {
    static_assert(Traits::kSplitDv && kHeadDimV == 4 * 128, "one float4 per thread and row");
    static_assert(kRowFloats % 4 == 0, "16-byte aligned rows");
    const PackGqa pack(args);
    const int own_row = accumulator_row(thread, 0);
    if (own_row < kSwappedRows && thread % 4 == 0) {
      smem.split_dv_row_factor[own_row] = o_scale[0];
      const RowTarget target = pack.row_target(m_block * kBlockM + own_row, head);
      if (target.token < seq.seqlen_q) { store_lse(args, seq, split, target, lse[0]); }
    }
    warpgroup_sync();
    const int col = 4 * thread;
    auto each_row = [&](auto store_four) {
      #pragma unroll 1
      for (int r = 0; r < kSwappedRows; ++r) {
        const RowTarget target = pack.row_target(m_block * kBlockM + r, head);
        if (target.token >= seq.seqlen_q) { continue; }
        const float scale = smem.split_dv_row_factor[r];
        float4 v = o_rows != nullptr ? *reinterpret_cast<const float4*>(o_rows + r * kRowFloats + col)
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
        store_four(target, make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale));
      }
    };
    if (args.split_kv) {
      each_row([&](const RowTarget& t, float4 v) { *reinterpret_cast<float4*>(partial_row(args, seq, split, t) + col) = v; });
    } else {
      with_output_store(args.out_type, [&](auto store) {
        auto* out = static_cast<typename decltype(store)::Element*>(args.out);
        each_row([&](const RowTarget& t, float4 v) {
          auto* dst = out + out_offset(args, seq, t) + col;
          store(dst, v.x, v.y);
          store(dst + 2, v.z, v.w);
        });
      });
    }
  }
};

}  // namespace fp8attn::sm90
