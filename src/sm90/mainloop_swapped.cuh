// fp8attn SM90 forward, swapped operands: the d = dv = 512 decode tile (at most kSwappedRows query rows).
//
// A decode tile of Gemma-4's global layers holds 8 query rows (8 q heads on one KV head, PackGQA) of the 64 that a
// WGMMA's M needs, so the split-dv loop (mainloop_split_dv.cuh) spends 7/8 of its tensor and shared-memory work on
// empty rows and pays a serial chain per block. Here the rows are the GEMMs' N instead:
//   S^T  = K Q^T   (M = 64 keys, N = 8 rows, K = d):  A = the K stage as loaded, B = Q's first 8 rows in sQ;
//   O^T += V^T P^T (M = 512 dv in eight m64 tiles, N = 8, K = 64 keys): A = V^T in registers, made from the V stage
//          as loaded (VtFragments, transpose_v.cuh), B = P^T in shared memory (sPt), in V^T's key-slot order.
// The two MMA warpgroups split the loop by GEMM: the first runs S^T and the softmax (run_scores) and hands each
// block's P^T and its rows' rescale factors to the second through a ring of kPtStages sPt stages with full and empty
// mbarriers; the second (run_ot) builds V^T's fragments, multiplies O^T and folds it. So no V transpose passes
// through shared memory (the producer's transpose warps have no part in these kernels) and each block moves ~104 KB
// of shared memory instead of ~168 (docs/design.md section 8). O^T is 512 x 8 fp32, 32 registers per thread of the
// second warpgroup, two-level as everywhere (each block's O^T starts from zero in a tile accumulator and is folded
// into O^T on the CUDA cores).
//
// The softmax runs along columns: a row's 64 scores of a block lie in one column of S^T, over the warpgroup's four
// warps, so each block's row maximum crosses warps through shared memory (swapped_exchange) under a warpgroup
// barrier. The row sums need no exchange per block: each thread keeps its share (rescaled like O) and the shares
// are added once after the loop. The sum of P as rounded to E4M3 (what P V multiplied; softmax.cuh says why it
// normalises O) is taken from the rounded bytes themselves.
//
// After the loops the second warpgroup stages O as 8 rows of floats in shared memory (stage_ot_rows) and leaves;
// the first leaves the row maxima and row sums in OnlineSoftmax per accumulator row (stage_stats), so the
// finalisation is the split-dv kernel's, and Epilogue::store_rows stores the rows.
//
// A thread's S^T values (AccumulatorIndex, one n8 block): value c + 2h is key 16 * warp + lane / 4 + 8h of the block
// and query row 2 * (lane % 4) + c; OnlineSoftmax's two "row halves" hold the thread's two query rows c = 0, 1. O^T's
// values are alike, accumulator row (16 * warp + lane / 4 + 8h) of m64 tile j holding dv 64 j + ot_row_dv(that row).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/kernel_args.cuh"
#include "sm90/kernel_traits.cuh"
#include "sm90/mask.cuh"
#include "sm90/phase_probe.cuh"
#include "sm90/quantize_q.cuh"
#include "sm90/softmax.cuh"
#include "sm90/transpose_v.cuh"
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
  static constexpr int kPtStages = Traits::kPtStages;
  using SharedStorage = typename Traits::SharedStorage;
  using PipelineK = typename Traits::PipelineK;
  using PipelineVLoad = typename Traits::PipelineVLoad;
  using KState = typename Traits::PipelineK::PipelineState;
  using VLoadState = typename Traits::PipelineVLoad::PipelineState;
  using PtState = cutlass::PipelineState<kPtStages>;  // the P^T ring's position (index, phase)
  using FragmentPlan = VtFragmentPlan<Traits>;
  static_assert(Traits::kSplitDv && Traits::kBlockM == 64 && kBlockN == 64 && kRows == 8,
                "swapped operands: the split-dv tile, 64-key blocks, one n8 block of rows");

  // S^T = K Q^T: (BLK_N, ROWS) over D, both operands K-major in shared memory.
  using TiledMmaSt = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockN>, Int<kRows>, Int<kHeadDim>>>()));
  // O^T tile = V^T P^T: (DV, ROWS) over the block's key slots, in m64 steps, V^T from registers.
  using TiledMmaOt = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kRows>, Int<kBlockN>>>()));
  // Q's first kRows rows as S^T's B operand: sQ's first 8-row swizzle atom of every K chunk. (ROWS, D)
  using SmemLayoutQRows = decltype(composition(typename Traits::SmemLayoutQ{}, Shape<Int<kRows>, Int<kHeadDim>>{}));
  // One P^T stage: sP holds kPtStages of them, each a whole number of swizzle periods.
  static constexpr int kPtStageBytes = int(cute::cosize_v<typename Traits::SmemLayoutPt>);
  static_assert(kPtStages * kPtStageBytes <= int(sizeof(SharedStorage::smem_p)) && kPtStageBytes % 512 == 0,
                "the P^T ring fits sP, each stage at a multiple of the 64-byte swizzle's period");

  // O staged as rows for the epilogue (stage_ot_rows): a row of dv floats plus 4, so that the 4 rows a warp's store
  // touches start in different banks; rows stay 16-byte aligned for the epilogue's 16-byte reads. sVt holds them: no
  // V^T passes through it in these kernels.
  static constexpr int kStageRowFloats = kHeadDimV + 4;
  static_assert(kRows * kStageRowFloats * 4 <= int(sizeof(SharedStorage::smem_vt)), "staged O fits sVt");

  // O^T of the loop: (MMA, DV/64, 1) fp32, 32 registers per thread of the second MMA warpgroup.
  using FragmentOt = decltype(partition_fragment_C(TiledMmaOt{}, Shape<Int<kHeadDimV>, Int<kRows>>{}));

  // This thread's two query rows (S^T and O^T columns) and its two keys (S^T rows) of a block.
  CUTE_HOST_DEVICE static constexpr int query_row(int thread, int c) { return 2 * (thread % 4) + c; }
  CUTE_HOST_DEVICE static constexpr int block_key(int thread, int h) { return 16 * (thread / 32) + (thread % 32) / 4 + 8 * h; }
  // The dv of O^T's value i in this thread (m64 tile i / 4, accumulator row of row half h).
  CUTE_HOST_DEVICE static constexpr int ot_value_dv(int thread, int i) {
    return 64 * (i / AccumulatorIndex::kValuesPerBlock) +
           FragmentPlan::ot_row_dv(block_key(thread, AccumulatorIndex::row_half(i)));
  }

  CUTE_DEVICE static auto pt_stage(SharedStorage& smem, int stage) {
    return make_tensor(make_smem_ptr(smem.smem_p.data() + stage * kPtStageBytes), typename Traits::SmemLayoutPt{});  // (ROWS, BLK_N)
  }

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

  // The first MMA warpgroup (thread 0..127): S^T and the softmax of every block, P^T and the rows' rescale factors
  // into the P^T ring for run_ot; the row maxima and the row-sum shares stay in `softmax` for stage_stats. The next
  // block's S^T is in flight during this block's softmax. The range must not be empty.
  CUTE_DEVICE static void run_scores(SharedStorage& smem, PipelineK& pipeline_k, const Mask<Traits::kBlockM, kBlockN>& mask,
                                     KvBlockRange range, int thread, OnlineSoftmax& softmax, bool kv_shared,
                                     WarpgroupSync& wg_sync) {
    TiledMmaSt tiled_mma_st;
    auto thr_mma_st = tiled_mma_st.get_thread_slice(thread);
    Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename Traits::SmemLayoutK{});  // (BLK_N, D, PIPE)
    Tensor sQRows = make_tensor(make_smem_ptr(smem.smem_q.data()), SmemLayoutQRows{});            // (ROWS, D)
    Tensor tSrK = thr_mma_st.partition_fragment_A(sK);      // (MMA, MMA_M, MMA_K, PIPE) descriptors
    Tensor tSrQ = thr_mma_st.partition_fragment_B(sQRows);  // (MMA, MMA_N, MMA_K) descriptors
    Tensor tStS = partition_fragment_C(tiled_mma_st, Shape<Int<kBlockN>, Int<kRows>>{});      // (MMA, 1, 1) fp32
    Tensor tStSNext = partition_fragment_C(tiled_mma_st, Shape<Int<kBlockN>, Int<kRows>>{});  // the next block's
    static_assert(decltype(size(tStS))::value == 4, "S^T: two keys x two query rows per thread");

    auto issue_st = [&](int stage, auto& acc) {
      warpgroup_fence_operand(acc);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_st, tSrK(_, _, _, stage), tSrQ, acc);
      warpgroup_commit_batch();
    };
    // S^T -> P^T in the ring's stage: softcap, mask, the block's column maxima across the warpgroup, exp2 with the
    // 2^8 offset, the row-sum shares, E4M3 bytes at V^T's key slots, and per query row the factor for O^T.
    PtState pt_state(0, 1, 0);  // a writer's start: phase 1, whose wait on a fresh empty barrier returns at once
    auto scores_to_pt = [&](int n_block) {
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
      smem.pt_empty[pt_state.index()].wait(pt_state.phase());  // run_ot has multiplied this stage's last P^T
      Tensor sPt = pt_stage(smem, pt_state.index());           // (ROWS, BLK_N)
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        const float scale = softmax.row_scale_log2(q_scale, c);
        float exp_offset;
        const float rescale = softmax.raise_max(c, block_max[0][c], scale, exp_offset);
        float p[2];
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) { p[h] = exp2_approx(fmaf(tStS(Acc::of(c, h, 0)), scale, -exp_offset)); }
        softmax.row_sum[c] = fmaf(softmax.row_sum[c], rescale, p[0] + p[1]);
        const uint32_t bytes = pack_e4m3x2(p[0], p[1]);
        const float2 rounded = unpack_e4m3x2(bytes);
        softmax.pv_sum[c] = fmaf(softmax.pv_sum[c], rescale, rounded.x + rounded.y);
        const int row = query_row(thread, c);
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) {
          sPt(row, vt_key_slot(block_key(thread, h))) = Element::bitcast(uint8_t(bytes >> (8 * h)));
        }
        if (thread < 4) { smem.swapped_rescale[pt_state.index()][row] = rescale; }
      }
      cutlass::arch::fence_view_async_shared();  // run_ot's WGMMA reads sPt through the async proxy
      smem.pt_full[pt_state.index()].arrive();
      ++pt_state;
    };

    KState k_state;
    int n_block = range.n_block_max - 1;
    pipeline_k.consumer_wait(k_state);
    if (thread == 0) { phase_mark(smem, kPhaseFirstKLanded); }
    issue_st(k_state.index(), tStS);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tStS);
    // Every block but the last: the next block's S^T in flight during this one's softmax. (The last is peeled off:
    // a WGMMA issued under a branch inside the loop made ptxas serialize the WGMMAs, C7518.)
    for (; n_block > range.n_block_min; --n_block) {
      pipeline_k.consumer_release(k_state);  // this block's S^T is complete
      advance_k_stage<Traits>(k_state, kv_shared);
      pipeline_k.consumer_wait(k_state);
      issue_st(k_state.index(), tStSNext);
      scores_to_pt(n_block);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tStSNext);
      CUTE_UNROLL
      for (int i = 0; i < size(tStS); ++i) { tStS(i) = tStSNext(i); }
    }
    pipeline_k.consumer_release(k_state);
    scores_to_pt(n_block);
  }

  // The second MMA warpgroup (thread 0..127 of it): O^T of every block. Per block: V^T's fragments from the V stage
  // (the K stage with K = V, else the V-as-loaded stage), the stage released at once, then the block's P^T from the
  // ring, O^T's tile from zero and its fold into O^T with the rows' rescale factors. The range must not be empty.
  CUTE_DEVICE static void run_ot(SharedStorage& smem, PipelineK& pipeline_k, PipelineVLoad& pipeline_vload,
                                 KvBlockRange range, int seqlen_k, int thread, FragmentOt& tOrOt, bool kv_shared) {
    TiledMmaOt tiled_mma_ot;
    auto thr_mma_ot = tiled_mma_ot.get_thread_slice(thread);
    Tensor tOrVt = make_tensor<Element>(partition_shape_A(tiled_mma_ot, Shape<Int<kHeadDimV>, Int<kBlockN>>{}));  // (MMA, DV/64, BLK_N/32)
    Tensor tOrVtWords = recast<uint32_t>(tOrVt);
    static_assert(decltype(size(tOrVtWords))::value == FragmentPlan::kWords, "V^T's fragment words");
    Tensor tOrOtTile = partition_fragment_C(tiled_mma_ot, Shape<Int<kHeadDimV>, Int<kRows>>{});  // (MMA, DV/64, 1) fp32
    static_assert(decltype(size(tOrOtTile))::value == 32, "O^T: 512 x 8 over 128 threads");

    const uint32_t lane_offset = FragmentPlan::lane_offset(thread / 32, thread % 32);
    const uint32_t k_lane_base = cast_smem_ptr_to_uint(smem.smem_k.data()) + lane_offset;
    const uint32_t v_lane_base = cast_smem_ptr_to_uint(Traits::v_load_buffer(smem)) + lane_offset;
    KState k_state;
    VLoadState v_state;
    PtState pt_state;
    for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
      uint32_t lane_base;
      if (kv_shared) {
        pipeline_k.consumer_wait(k_state);
        lane_base = k_lane_base + k_state.index() * Traits::kBytesK;
      } else {
        pipeline_vload.consumer_wait(v_state);
        lane_base = v_lane_base + v_state.index() * Traits::kBytesV;
      }
      const int valid_keys = seqlen_k - n_block * kBlockN;
      if (valid_keys < kBlockN) {
        VtFragments<Traits>::template load<true>(lane_base, FragmentPlan::lane_keys_left(valid_keys, thread), tOrVtWords);
      } else {
        VtFragments<Traits>::template load<false>(lane_base, 0, tOrVtWords);
      }
      // The fragments are in registers: the stage is free (its arrival orders the ldmatrix reads before it).
      if (kv_shared) {
        pipeline_k.consumer_release(k_state);
        advance_k_stage<Traits>(k_state, kv_shared);
      } else {
        pipeline_vload.consumer_release(v_state);
        ++v_state;
      }
      smem.pt_full[pt_state.index()].wait(pt_state.phase());
      Tensor tOrPt = thr_mma_ot.partition_fragment_B(pt_stage(smem, pt_state.index()));  // (MMA, MMA_N, MMA_K) descriptors
      warpgroup_fence_operand(tOrVt);
      warpgroup_fence_operand(tOrOtTile);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_ot, tOrVt, tOrPt, tOrOtTile);
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrOtTile);
      const float rescale[2] = {smem.swapped_rescale[pt_state.index()][query_row(thread, 0)],
                                smem.swapped_rescale[pt_state.index()][query_row(thread, 1)]};
      smem.pt_empty[pt_state.index()].arrive();
      ++pt_state;
      CUTE_UNROLL
      for (int i = 0; i < size(tOrOt); ++i) {
        tOrOt(i) = fmaf(tOrOt(i), rescale[AccumulatorIndex::column(i)], tOrOtTile(i));
      }
    }
  }

  // The second MMA warpgroup, after its loop: O^T into rows of floats ([ROWS][kStageRowFloats] in sVt) for
  // Epilogue::store_rows, with the dv order restored; then it arrives on rows_staged and is done.
  CUTE_DEVICE static void stage_ot_rows(SharedStorage& smem, int thread, FragmentOt const& tOrOt) {
    float* o_rows = reinterpret_cast<float*>(smem.smem_vt.data());
    CUTE_UNROLL
    for (int i = 0; i < size(tOrOt); ++i) {
      o_rows[query_row(thread, AccumulatorIndex::column(i)) * kStageRowFloats + ot_value_dv(thread, i)] = tOrOt(i);
    }
    smem.rows_staged.arrive();
  }

  // The first MMA warpgroup, after its loop (only where it ran): the row maxima and row sums into OnlineSoftmax per
  // accumulator row, rows past kRows empty, for finalize(); returns the O rows stage_ot_rows wrote, once they are there.
  CUTE_DEVICE static float* stage_stats(SharedStorage& smem, int thread, OnlineSoftmax& softmax, WarpgroupSync& wg_sync) {
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
    smem.rows_staged.wait(0);
    return reinterpret_cast<float*>(smem.smem_vt.data());
  }
};

}  // namespace fp8attn::sm90
