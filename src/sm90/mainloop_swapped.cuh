// fp8attn SM90 forward, swapped operands: the d = dv = 512 decode tile (at most kSwappedRows query rows).
//
// A decode tile of Gemma-4's global layers holds 8 query rows (8 q heads on one KV head, PackGQA) of the 64 that a
// WGMMA's M needs, so the split-dv loop (mainloop_split_dv.cuh) spends 7/8 of its tensor and shared-memory work on
// empty rows and pays a serial chain per block. Here the rows are the GEMMs' N instead:
//   S^T  = K Q^T   (M = 64 keys, N = 8 rows, K = d):  A = the K stage as loaded, B = Q's first 8 rows in sQ;
//   O^T += V^T P^T (M = 512 dv in eight m64 tiles, N = 8, K = 64 keys): A = the V^T stage the transpose writes,
//          B = P^T, which this warpgroup writes to shared memory (sPt) in V^T's key-slot order.
// Each GEMM reads its 32 KB operand once per block (docs/design.md section 8 has the budget). One MMA warpgroup
// (the first) runs the loop; O^T is 512 x 8 fp32, 32 registers per thread, two-level as everywhere (each block's
// O^T starts from zero in a tile accumulator and is folded into O^T on the CUDA cores).
//
// The softmax runs along columns: a row's 64 scores of a block lie in one column of S^T, over the warpgroup's four
// warps, so each block's row maximum crosses warps through shared memory (swapped_exchange) under a warpgroup
// barrier. The row sums need no exchange per block: each thread keeps its share (rescaled like O) and the shares
// are added once after the loop. The sum of P as rounded to E4M3 (what P V multiplied; softmax.cuh says why it
// normalises O) is taken from the rounded bytes themselves.
//
// After the loop, stage_rows() leaves O as 8 rows of floats in shared memory and the row maxima and row sums in
// OnlineSoftmax per accumulator row, so the finalisation is the split-dv kernel's; Epilogue::store_rows stores the
// rows. The second MMA warpgroup has no part in a swapped tile's results past the quantization of Q; it runs the
// epilogue's code ahead as a dry run, so that its instructions are fetched when the first gets there (fwd_kernel.cuh).
//
// A thread's S^T values (AccumulatorIndex, one n8 block): value c + 2h is key 16 * warp + lane / 4 + 8h of the block
// and query row 2 * (lane % 4) + c; OnlineSoftmax's two "row halves" hold the thread's two query rows c = 0, 1.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/kernel_args.cuh"
#include "sm90/kernel_traits.cuh"
#include "sm90/mask.cuh"
#include "sm90/phase_probe.cuh"
#include "sm90/quantize_q.cuh"
#include "sm90/softmax.cuh"
#include "sm90/utils.cuh"

namespace fp8attn::sm90 {

using namespace cute;

// The first MMA warpgroup's own barrier in the swapped loop and after it: an mbarrier of 128 arrivals
// (SharedStorage::swapped_sync), not a named barrier. compute-sanitizer's racecheck lost the order of a hand-over
// after named barriers that one warpgroup passed alone, and keeps it after mbarriers (scripts/racecheck_probe.cu).
// Each thread carries the parity of the phase it waits for. Outside MainloopSwapped so that the kernel can hold one
// for the epilogue whatever its traits.
struct WarpgroupSync {
  uint32_t phase = 0;
  template <class SharedStorage>
  CUTE_DEVICE void sync(SharedStorage& smem) {
    smem.swapped_sync.arrive();
    smem.swapped_sync.wait(phase);
    phase ^= 1;
  }
};

template <class Traits>
struct MainloopSwapped {
  using Element = typename Traits::Element;
  static constexpr int kRows = kSwappedRows;  // N of both GEMMs
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kHeadDimV = Traits::kHeadDimV;
  using SharedStorage = typename Traits::SharedStorage;
  using PipelineK = typename Traits::PipelineK;
  using PipelineVt = typename Traits::PipelineVt;
  using KState = typename Traits::PipelineK::PipelineState;
  using VtState = typename Traits::PipelineVt::PipelineState;
  static_assert(Traits::kSplitDv && Traits::kBlockM == 64 && kBlockN == 64 && kRows == 8,
                "swapped operands: the split-dv tile, 64-key blocks, one n8 block of rows");

  // S^T = K Q^T: (BLK_N, ROWS) over D, both operands K-major in shared memory.
  using TiledMmaSt = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockN>, Int<kRows>, Int<kHeadDim>>>()));
  // O^T tile = V^T P^T: (DV, ROWS) over the block's key slots, in m64 steps.
  using TiledMmaOt = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kRows>, Int<kBlockN>>>()));
  // Q's first kRows rows as S^T's B operand: sQ's first 8-row swizzle atom of every K chunk. (ROWS, D)
  using SmemLayoutQRows = decltype(composition(typename Traits::SmemLayoutQ{}, Shape<Int<kRows>, Int<kHeadDim>>{}));
  using SmemLayoutVtStage = decltype(tile_to_shape(k_major_swizzle_atom<Element, kBlockN>(),
                                                   Shape<Int<kHeadDimV>, Int<kBlockN>>{}));  // (DV, BLK_N)
  static_assert(cute::cosize_v<SmemLayoutVtStage> == Traits::kVtRows * kBlockN, "a V^T stage is dv rows");

  // O staged as rows for the epilogue (stage_rows): a row of dv floats plus 4, so that the 4 rows a warp's store
  // touches start in different banks; rows stay 16-byte aligned for the epilogue's 16-byte reads.
  static constexpr int kStageRowFloats = kHeadDimV + 4;
  static_assert(kRows * kStageRowFloats * 4 <= int(sizeof(SharedStorage::smem_vt)), "staged O fits sVt");

  // O^T of the loop: (MMA, DV/64, 1) fp32, 32 registers per thread of the first MMA warpgroup.
  using FragmentOt = decltype(partition_fragment_C(TiledMmaOt{}, Shape<Int<kHeadDimV>, Int<kRows>>{}));

  // This thread's two query rows (S^T columns) and its two keys (S^T rows) of a block.
  CUTE_HOST_DEVICE static constexpr int query_row(int thread, int c) { return 2 * (thread % 4) + c; }
  CUTE_HOST_DEVICE static constexpr int block_key(int thread, int h) { return 16 * (thread / 32) + (thread % 32) / 4 + 8 * h; }

  // The Q scales of the thread's two query rows (q16: amax / 448 from quantize_q.cuh; E4M3: 1).
  CUTE_DEVICE static auto column_q_scale(const SharedStorage& smem, int thread) {
    if constexpr (Traits::kQ16) {
      return QRowScale{{ld_shared_volatile(&smem.q_row_scale[query_row(thread, 0)]),
                        ld_shared_volatile(&smem.q_row_scale[query_row(thread, 1)])}};
    } else {
      return UniformRowScale{};
    }
  }

  // Max (kMax) or sum of each of x's kStats values over the 32 threads of the warpgroup that hold the same query
  // row (lane % 4 and the four warps), through swapped_exchange; every thread gets the results. Two warpgroup
  // barriers whatever kStats: the exchange is free again when this returns.
  template <bool kMax, int kStats>
  CUTE_DEVICE static void warpgroup_column_reduce(SharedStorage& smem, int thread, WarpgroupSync& wg_sync,
                                                  float (&x)[kStats][2]) {
    static_assert(kStats <= int(sizeof(smem.swapped_exchange) / sizeof(smem.swapped_exchange[0])), "exchange");
    CUTE_UNROLL
    for (int s = 0; s < kStats; ++s) {
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        CUTE_UNROLL
        for (int lane_mask = 4; lane_mask < 32; lane_mask *= 2) {
          const float other = __shfl_xor_sync(0xffffffff, x[s][c], lane_mask);
          x[s][c] = kMax ? fmaxf(x[s][c], other) : x[s][c] + other;
        }
        if (thread % 32 < 4) { smem.swapped_exchange[s][thread / 32][query_row(thread, c)] = x[s][c]; }
      }
    }
    wg_sync.sync(smem);
    CUTE_UNROLL
    for (int s = 0; s < kStats; ++s) {
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        const int row = query_row(thread, c);
        const float* v = smem.swapped_exchange[s][0] + row;
        constexpr int kWarpStride = kRows;
        x[s][c] = kMax ? fmaxf(fmaxf(v[0], v[kWarpStride]), fmaxf(v[2 * kWarpStride], v[3 * kWarpStride]))
                       : (v[0] + v[kWarpStride]) + (v[2 * kWarpStride] + v[3 * kWarpStride]);
      }
    }
    wg_sync.sync(smem);
  }

  // The first MMA warpgroup (thread 0..127): the KV loop of one query tile; O^T, the row maxima and the row-sum
  // shares stay in registers for stage_rows. The range must not be empty.
  CUTE_DEVICE static void run(SharedStorage& smem, PipelineK& pipeline_k, PipelineVt& pipeline_vt,
                              const Mask<Traits::kBlockM, kBlockN>& mask, KvBlockRange range, int thread,
                              OnlineSoftmax& softmax, FragmentOt& tOrOt, bool kv_shared, WarpgroupSync& wg_sync) {
    TiledMmaSt tiled_mma_st;
    TiledMmaOt tiled_mma_ot;
    auto thr_mma_st = tiled_mma_st.get_thread_slice(thread);
    auto thr_mma_ot = tiled_mma_ot.get_thread_slice(thread);

    Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename Traits::SmemLayoutK{});          // (BLK_N, D, PIPE)
    Tensor sQRows = make_tensor(make_smem_ptr(smem.smem_q.data()), SmemLayoutQRows{});                    // (ROWS, D)
    Tensor sPt = make_tensor(make_smem_ptr(smem.smem_p.data()), typename Traits::SmemLayoutPt{});         // (ROWS, BLK_N)
    Tensor tSrK = thr_mma_st.partition_fragment_A(sK);      // (MMA, MMA_M, MMA_K, PIPE) descriptors
    Tensor tSrQ = thr_mma_st.partition_fragment_B(sQRows);  // (MMA, MMA_N, MMA_K) descriptors
    Tensor tOrPt = thr_mma_ot.partition_fragment_B(sPt);    // (MMA, MMA_N, MMA_K) descriptors
    Tensor tStS = partition_fragment_C(tiled_mma_st, Shape<Int<kBlockN>, Int<kRows>>{});        // (MMA, 1, 1) fp32
    Tensor tOrOtTile = partition_fragment_C(tiled_mma_ot, Shape<Int<kHeadDimV>, Int<kRows>>{});  // (MMA, DV/64, 1) fp32
    static_assert(decltype(size(tStS))::value == 4, "S^T: two keys x two query rows per thread");
    static_assert(decltype(size(tOrOtTile))::value == 32, "O^T: 512 x 8 over 128 threads");

    // The V^T operand of stage `stage`: (MMA, DV/64, MMA_K) descriptors.
    auto vt_operand = [&](int stage) {
      Tensor sVt = make_tensor(make_smem_ptr(smem.smem_vt.data() + stage * (kHeadDimV * kBlockN)), SmemLayoutVtStage{});
      return thr_mma_ot.partition_fragment_A(sVt);
    };
    auto issue_st = [&](int stage) {
      warpgroup_fence_operand(tStS);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_st, tSrK(_, _, _, stage), tSrQ, tStS);
      warpgroup_commit_batch();
    };
    auto issue_ot = [&](int stage) {
      warpgroup_fence_operand(tOrOtTile);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_ot, vt_operand(stage), tOrPt, tOrOtTile);
      warpgroup_commit_batch();
    };
    // S^T -> P^T in sPt: softcap, mask, the block's column maxima across the warpgroup, exp2 with the 2^8 offset,
    // the row-sum shares, E4M3 bytes at V^T's key slots. rescale: per query row, the factor for O^T.
    auto scores_to_pt = [&](int n_block, float (&rescale)[2]) {
      using Acc = AccumulatorIndex;
      const auto q_scale = column_q_scale(smem, thread);
      if (softmax.softcap_tanh_scale != 0.f) {
        CUTE_UNROLL
        for (int c = 0; c < 2; ++c) {
          CUTE_UNROLL
          for (int h = 0; h < 2; ++h) {
            tStS(Acc::of(c, h, 0)) = tanh_approx(tStS(Acc::of(c, h, 0)) * (softmax.softcap_tanh_scale * q_scale[c]));
          }
        }
      }
      if (mask.needs_mask(n_block)) {
        CUTE_UNROLL
        for (int c = 0; c < 2; ++c) {
          const int q = mask.query_position(mask.m_block * Traits::kBlockM + query_row(thread, c));
          int lo, hi;
          Mask<Traits::kBlockM, kBlockN>::visible_columns(mask.seqlen_q, mask.seqlen_k, mask.window_left,
                                                          mask.window_right, q, n_block * kBlockN, lo, hi);
          CUTE_UNROLL
          for (int h = 0; h < 2; ++h) {
            const int key = block_key(thread, h);
            if (key < lo || key > hi) { tStS(Acc::of(c, h, 0)) = -INFINITY; }
          }
        }
      }
      float block_max[1][2] = {{fmaxf(tStS(Acc::of(0, 0, 0)), tStS(Acc::of(0, 1, 0))),
                                fmaxf(tStS(Acc::of(1, 0, 0)), tStS(Acc::of(1, 1, 0)))}};
      warpgroup_column_reduce</*kMax=*/true>(smem, thread, wg_sync, block_max);
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        const float scale = softmax.row_scale_log2(q_scale, c);
        float exp_offset;
        rescale[c] = softmax.raise_max(c, block_max[0][c], scale, exp_offset);
        float p[2];
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) { p[h] = exp2_approx(fmaf(tStS(Acc::of(c, h, 0)), scale, -exp_offset)); }
        softmax.row_sum[c] = fmaf(softmax.row_sum[c], rescale[c], p[0] + p[1]);
        const uint32_t bytes = pack_e4m3x2(p[0], p[1]);
        const float2 rounded = unpack_e4m3x2(bytes);
        softmax.pv_sum[c] = fmaf(softmax.pv_sum[c], rescale[c], rounded.x + rounded.y);
        const int row = query_row(thread, c);
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          sPt(row, vt_key_slot(block_key(thread, h))) = Element::bitcast(uint8_t(bytes >> (8 * h)));
        }
      }
      cutlass::arch::fence_view_async_shared();  // the WGMMA reads sPt through the async proxy
      wg_sync.sync(smem);
    };

    KState k_state;
    VtState vt_state;
    int n_block = range.n_block_max - 1;
    pipeline_k.consumer_wait(k_state);
    if (thread == 0) { phase_mark(smem, kPhaseFirstKLanded); }
    issue_st(k_state.index());
    warpgroup_wait<0>();
    warpgroup_fence_operand(tStS);
    pipeline_k.consumer_release(k_state);
    advance_k_stage<Traits>(k_state, kv_shared);
    // O^T += this block's tile, once its GEMM has completed.
    auto fold = [&](const float (&rescale)[2]) {
      warpgroup_fence_operand(tOrOtTile);
      CUTE_UNROLL
      for (int i = 0; i < size(tOrOt); ++i) {
        tOrOt(i) = fmaf(tOrOt(i), rescale[AccumulatorIndex::column(i)], tOrOtTile(i));
      }
    };
    // Every block but the last: its O^T tile and the next block's S^T (S^T is free once P^T is in sPt) in flight
    // together. (The last block is peeled off: a wait depth chosen by a branch inside the loop made ptxas serialize
    // the WGMMAs, C7518.)
    for (; n_block > range.n_block_min; --n_block) {
      float rescale[2];
      scores_to_pt(n_block, rescale);
      pipeline_vt.consumer_wait(vt_state);
      issue_ot(vt_state.index());
      pipeline_k.consumer_wait(k_state);
      issue_st(k_state.index());
      warpgroup_wait<1>();  // the O^T tile is done; S^T still running
      pipeline_vt.consumer_release(vt_state);
      ++vt_state;
      fold(rescale);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tStS);
      pipeline_k.consumer_release(k_state);
      advance_k_stage<Traits>(k_state, kv_shared);
    }
    float rescale[2];
    scores_to_pt(n_block, rescale);
    pipeline_vt.consumer_wait(vt_state);
    issue_ot(vt_state.index());
    warpgroup_wait<0>();
    pipeline_vt.consumer_release(vt_state);
    fold(rescale);
  }

  // The first MMA warpgroup, after the loop (only where it ran): O^T into rows of floats (o_rows, [ROWS][kStageRowFloats]
  // in sVt) for Epilogue::store_rows, and the row maxima and row sums into OnlineSoftmax per accumulator row, rows
  // past kRows empty, for finalize(). Ends with both visible to the warpgroup.
  CUTE_DEVICE static float* stage_rows(SharedStorage& smem, int thread, FragmentOt const& tOrOt, OnlineSoftmax& softmax,
                                       WarpgroupSync& wg_sync) {
    float* o_rows = reinterpret_cast<float*>(smem.smem_vt.data());  // sVt is free: every V^T tile has been read
    // Both sums in one exchange: [0] the row sums' shares, [1] the sums of rounded P.
    float sums[2][2] = {{softmax.row_sum[0], softmax.row_sum[1]}, {softmax.pv_sum[0], softmax.pv_sum[1]}};
    warpgroup_column_reduce</*kMax=*/false>(smem, thread, wg_sync, sums);
    if (thread < 4) {
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        const int row = query_row(thread, c);
        smem.swapped_row_stats[0][row] = softmax.row_max[c];
        smem.swapped_row_stats[1][row] = sums[0][c];
        smem.swapped_row_stats[2][row] = sums[1][c];
      }
    }
    // O^T value i: dv row 64 * (i / 4) + key-row of the m64 tile's accumulator, query row (column) c.
    CUTE_UNROLL
    for (int i = 0; i < size(tOrOt); ++i) {
      const int dv = 64 * (i / AccumulatorIndex::kValuesPerBlock) + block_key(thread, AccumulatorIndex::row_half(i));
      o_rows[query_row(thread, AccumulatorIndex::column(i)) * kStageRowFloats + dv] = tOrOt(i);
    }
    wg_sync.sync(smem);
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int row = accumulator_row(thread, h);
      const bool real = row < kRows;
      softmax.row_max[h] = real ? smem.swapped_row_stats[0][row] : -INFINITY;
      // finalize() adds the row sum over the row's quad: one share holds all of it.
      softmax.row_sum[h] = real && thread % 4 == 0 ? smem.swapped_row_stats[1][row] : 0.f;
      softmax.pv_sum[h] = real ? smem.swapped_row_stats[2][row] : 0.f;
    }
    return o_rows;
  }
};

}  // namespace fp8attn::sm90
