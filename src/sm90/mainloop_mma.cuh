// fp8attn SM90 forward, MMA warpgroups: S = Q K^T, online softmax, P V with two-level accumulation.
//
// Two-level accumulation: FP8 WGMMA accumulates with fewer mantissa bits than fp32, so summing P V over
// thousands of keys in the tensor-core accumulator loses the small per-tile contributions (the output
// of a nonzero-mean V shrinks with KV length). Each KV tile's P V therefore starts from zero in its own
// accumulator and is folded into the fp32 O on the CUDA cores: O = O * rescale + O_tile (one FFMA).
// The fold runs after the PV GEMM's wait, so no instruction reads an accumulator a WGMMA still writes.
//
// The row sums that normalise O come from the same GEMM stream: P x ones (an N = 8 WGMMA issued with the
// first dv chunk of P V) sums P exactly as rounded to E4M3 and is folded like O (softmax.cuh says why).
//
// Intra-warpgroup overlap: block n's QK^T and block n+1's P V (blocks run from the last to the first)
// are issued together; the softmax of block n then runs on the CUDA cores while the tensor cores finish
// that P V. Only the first dv chunk overlaps when the PV GEMM is chunked (dv > 128, or two CTAs per SM).
//
// P V after the softmax (Traits::kPvAfterSoftmax, 128-row tiles of 128 keys with dv > 128): O leaves no
// registers for a tile accumulator beside a 128-key S, so each block runs QK^T, the softmax, then its P V in
// kBlockN-wide dv parts accumulated in the registers that held S (a part of kBlockN columns is S's size). No
// overlap of P V with the softmax inside the warpgroup: the other MMA warpgroup's GEMMs fill the tensor cores
// during this one's softmax.
#pragma once

#include <cute/tensor.hpp>

#include "sm90/kernel_args.cuh"
#include "sm90/mask.cuh"
#include "sm90/quantize_q.cuh"
#include "sm90/softmax.cuh"
#include "sm90/utils.cuh"

namespace fp8attn::sm90 {

using namespace cute;

template <class Traits>
struct MainloopMma {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDimV = Traits::kHeadDimV;
  static constexpr int kPvChunk = Traits::kPvChunk;
  using SharedStorage = typename Traits::SharedStorage;
  using PipelineK = typename Traits::PipelineK;
  using PipelineVt = typename Traits::PipelineVt;
  using KState = typename Traits::PipelineK::PipelineState;
  using VtState = typename Traits::PipelineVt::PipelineState;
  using TiledMmaQK = typename Traits::TiledMmaQK;
  using TiledMmaPV = typename Traits::TiledMmaPV;
  using TiledMmaPvTile = typename Traits::TiledMmaPvTile;
  using TiledMmaPvSum = typename Traits::TiledMmaPvSum;
  static constexpr int kPvTileN = Traits::kPvTileN;
  // Where a separate P x ones runs (!Traits::kPvSumInPv, kernel_traits.cuh): in the single-level GEMM's batch
  // (issue_pv_into_o), or after the last dv chunk of chunked P V, when the chunk accumulator's registers are
  // free again.
  static constexpr bool kPvSumAfterChunks = !Traits::kPvSumInPv && Traits::kTwoLevel;

  // The O accumulator of this thread: (MMA, MMA_M, DV / kPvChunk) fp32.
  using FragmentO = decltype(partition_fragment_C(TiledMmaPV{}, Shape<Int<kBlockM>, Int<kHeadDimV>>{}));

  // Runs the KV loop for one query tile; O is left unnormalised (scaled by 2^8 like the row sums).
  // mma_thread: 0 .. kNumMmaThreads-1. The range must not be empty.
  CUTE_DEVICE static void run(SharedStorage& smem, PipelineK& pipeline_k, PipelineVt& pipeline_vt,
                              const Mask<kBlockM, kBlockN>& mask, KvBlockRange range, int mma_thread,
                              OnlineSoftmax& softmax, FragmentO& tOrO) {
    TiledMmaQK tiled_mma_qk;
    TiledMmaPvTile tiled_mma_pv;
    TiledMmaPvSum tiled_mma_pv_sum;
    auto thr_mma_qk = tiled_mma_qk.get_thread_slice(mma_thread);
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(mma_thread);
    auto thr_mma_pv_sum = tiled_mma_pv_sum.get_thread_slice(mma_thread);

    Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q.data()), typename Traits::SmemLayoutQ{});     // (BLK_M, D)
    Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename Traits::SmemLayoutK{});     // (BLK_N, D, PIPE)
    Tensor sVt = make_tensor(make_smem_ptr(smem.smem_vt.data()), typename Traits::SmemLayoutVt{});  // (VT_ROWS, BLK_N, PIPE)
    Tensor sOnes = make_tensor(make_smem_ptr(smem.smem_ones.data()), typename Traits::SmemLayoutOnes{});  // (8, BLK_N), !kPvSumInPv

    Tensor tSrQ = thr_mma_qk.partition_fragment_A(sQ);  // (MMA, MMA_M, MMA_K) descriptors
    Tensor tSrK = thr_mma_qk.partition_fragment_B(sK);  // (MMA, MMA_N, MMA_K, PIPE) descriptors
    // P V after the softmax: S and each dv part of P V share these registers; otherwise S has its own.
    constexpr int kScoreRegs = decltype(size(partition_shape_C(tiled_mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{})))::value;
    constexpr int kSharedRegs = Traits::kPvAfterSoftmax ? kScoreRegs : 1;
    Tensor tSharedRegs = make_tensor<float>(Int<kSharedRegs>{});
    Tensor tSrS = [&] {
      if constexpr (Traits::kPvAfterSoftmax) {
        return make_tensor(tSharedRegs.data(), make_layout(partition_shape_C(tiled_mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{})));
      } else {
        return partition_fragment_C(tiled_mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
      }
    }();  // (MMA, MMA_M, MMA_N) fp32
    Tensor cS = make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{});  // (BLK_M, BLK_N) -> (row, col)
    Tensor tOrP = make_tensor<Element>(partition_shape_A(tiled_mma_pv, Shape<Int<kBlockM>, Int<kBlockN>>{}));  // (MMA, MMA_M, MMA_K)
    // One dv chunk of P V (+ the ones block of row sums when kPvSumInPv): (MMA, MMA_M, 1) fp32.
    Tensor tOrOTile = partition_fragment_C(tiled_mma_pv, Shape<Int<kBlockM>, Int<kPvTileN>>{});
    Tensor tSrOnes = thr_mma_pv_sum.partition_fragment_B(sOnes);  // (MMA, MMA_N, MMA_K) descriptors
    Tensor tOrPvSum = partition_fragment_C(tiled_mma_pv_sum, Shape<Int<kBlockM>, _8>{});  // (MMA, MMA_M, 1) fp32
    static_assert(decltype(size(tOrPvSum))::value == 4, "one n8 block: (column pair, row half)");

    // The PV B operand for dv chunk `chunk` of V^T stage `stage` (with the ones rows when kPvSumInPv):
    // (MMA, MMA_N, MMA_K) descriptors.
    auto vt_operand = [&](int chunk, int stage) {
      Tensor sVtChunk = local_tile(sVt(_, _, stage), Shape<Int<kPvTileN>, Int<kBlockN>>{}, make_coord(chunk, _0{}));  // (PV_TILE_N, BLK_N)
      return thr_mma_pv.partition_fragment_B(sVtChunk);
    };
    // O chunk = O chunk * rescale + tile, after the tile's GEMM has completed. The O chunk's n8 blocks are
    // the first ones of the tile accumulator; the ones block, when there, is its last.
    auto fold_from = [&](int chunk, const float (&rescale)[2], auto const& tile) {
      Tensor tOrOChunk = tOrO(_, _, chunk);
      CUTE_UNROLL
      for (int i = 0; i < size(tOrOChunk); ++i) {
        tOrOChunk(i) = fmaf(tOrOChunk(i), rescale[AccumulatorIndex::row_half(i)], tile(i));
      }
    };
    auto fold = [&](int chunk, const float (&rescale)[2]) { fold_from(chunk, rescale, tOrOTile); };
    // S -> P for one block: softcap (when on), mask (boundary blocks only), online softmax, FP8 conversion into PV
    // A order.
    auto scores_to_p = [&](int n_block, float (&rescale)[2]) {
      const auto q_scale = q_row_scale_of<Traits>(smem);
      if (softmax.softcap_tanh_scale != 0.f) { softmax.softcap(tSrS, q_scale); }
      if (mask.needs_mask(n_block)) {
        // Coordinates of tSrS, from the thread index read again: only boundary blocks need them, and held
        // through the loop they would take a register the MMA warpgroups do not have.
        const int thread = thread_idx_reread() - Traits::kNumProducerThreads;
        Tensor tScS = tiled_mma_qk.get_thread_slice(thread).partition_C(cS);  // (MMA, MMA_M, MMA_N) -> (row, col)
        mask.apply(tSrS, tScS, n_block);
      }
      softmax.template online<Traits::kSoftmaxRowHalvesInterleaved>(tSrS, rescale, q_scale);
    };
    auto issue_qk = [&](int stage) {
      warpgroup_fence_operand(tSrS);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_qk, tSrQ, tSrK(_, _, _, stage), tSrS);
      warpgroup_commit_batch();
    };
    // P x ones, inside the caller's warpgroup_arrive() / warpgroup_commit_batch() bracket.
    auto gemm_pv_sum = [&]() {
      warpgroup_fence_operand(tOrPvSum);
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_pv_sum, tOrP, tSrOnes, tOrPvSum);
    };
    // P x ones as a GEMM of its own, completed (chunked P V after its last chunk, P V after the softmax).
    auto pv_sum_alone = [&]() {
      warpgroup_arrive();
      gemm_pv_sum();
      warpgroup_commit_batch();
      warpgroup_wait<0>();
    };
    // After the GEMM has completed: the block's sums of rounded P folded like O: column 0 of the ones block, both
    // row halves.
    auto fold_pv_sum = [&](const float (&rescale)[2]) {
      using Acc = AccumulatorIndex;
      if constexpr (Traits::kPvSumInPv) {
        constexpr int kOnesBlock = kPvChunk / 8;  // the n8 block after the dv chunk's
        const float tile_sum[2] = {tOrOTile(Acc::of(0, 0, kOnesBlock)), tOrOTile(Acc::of(0, 1, kOnesBlock))};
        softmax.fold_pv_sum(rescale, tile_sum);
      } else {
        warpgroup_fence_operand(tOrPvSum);
        const float tile_sum[2] = {tOrPvSum(Acc::of(0, 0, 0)), tOrPvSum(Acc::of(0, 1, 0))};
        softmax.fold_pv_sum(rescale, tile_sum);
      }
    };
    // One P V GEMM from zero into tile (P from registers, V^T operand tOrVt), issued as its own batch.
    auto issue_pv_gemm = [&](auto& tiled_mma, auto const& tOrVt, auto& tile) {
      warpgroup_fence_operand(tOrP);
      warpgroup_fence_operand(tile);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma, tOrP, tOrVt, tile);
      warpgroup_commit_batch();
    };
    auto issue_pv = [&](int chunk, int stage) { issue_pv_gemm(tiled_mma_pv, vt_operand(chunk, stage), tOrOTile); };
    // The remaining dv chunks of a block's P V, one after the other through the one tile accumulator; then,
    // for chunked P V, P x ones alone.
    auto pv_remaining_chunks = [&](int stage, const float (&rescale)[2]) {
      CUTE_UNROLL
      for (int chunk = 1; chunk < Traits::kNumPvChunks; ++chunk) {
        issue_pv(chunk, stage);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrOTile);
        fold(chunk, rescale);
      }
      if constexpr (kPvSumAfterChunks) { pv_sum_alone(); }
    };
    // Single-level accumulation (built only to measure what two-level accumulation buys, see
    // Traits::kTwoLevel): O is rescaled first and every chunk accumulates into it on the tensor cores.
    auto issue_pv_into_o = [&](int stage, const float (&rescale)[2]) {
      if constexpr (!Traits::kTwoLevel) {  // its P V tile is plain dv chunks (kPvTileN == kPvChunk)
        CUTE_UNROLL
        for (int i = 0; i < size(tOrO); ++i) { tOrO(i) *= rescale[AccumulatorIndex::row_half(i)]; }
        warpgroup_fence_operand(tOrP);
        warpgroup_fence_operand(tOrO);
        warpgroup_arrive();
        CUTE_UNROLL
        for (int chunk = 0; chunk < Traits::kNumPvChunks; ++chunk) {
          // (MMA, MMA_M, 1): the chunk keeps its N mode, as the GEMM expects.
          Tensor tOrOChunk = make_tensor(tOrO.data() + chunk * stride<2>(tOrO),
                                         make_layout(layout<0>(tOrO), layout<1>(tOrO), Layout<_1, _0>{}));
          gemm_k_steps</*kZeroInit=*/false>(tiled_mma_pv, tOrP, vt_operand(chunk, stage), tOrOChunk);
        }
        gemm_pv_sum();
        warpgroup_commit_batch();
      }
    };
    // P V of the previous block: issue (overlapping what follows), then complete after warpgroup_wait.
    auto issue_pv_previous = [&](int stage, const float (&rescale)[2]) {
      if constexpr (Traits::kTwoLevel) {
        issue_pv(0, stage);
      } else {
        issue_pv_into_o(stage, rescale);
      }
    };
    auto complete_pv_previous = [&](int stage, const float (&rescale)[2]) {
      if constexpr (Traits::kTwoLevel) {
        warpgroup_fence_operand(tOrOTile);
        fold(0, rescale);
        pv_remaining_chunks(stage, rescale);
      } else {
        warpgroup_fence_operand(tOrO);
      }
      fold_pv_sum(rescale);
    };

    KState k_state;
    VtState vt_state;
    // QK^T of one block, completed, then its softmax and P: every block of P V after the softmax, the first block
    // of the overlapped loop.
    auto scores_of_block = [&](int n_block, float (&rescale)[2]) {
      pipeline_k.consumer_wait(k_state);
      issue_qk(k_state.index());
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      pipeline_k.consumer_release(k_state);
      ++k_state;
      scores_to_p(n_block, rescale);
      scores_to_pv_operand(tSrS, tOrP);
    };
    if constexpr (Traits::kPvAfterSoftmax) {
      // The V^T rows [part * kPvChunk, (part + 1) * kPvChunk) of a stage as a P V operand (SmemLayoutVtRows).
      auto vt_part = [&](int part, int stage) {
        constexpr int kStageBytes = Traits::kVtRows * kBlockN;
        using Layout = typename Traits::template SmemLayoutVtRows<kPvChunk>;
        return make_tensor(sVt.data() + (stage * kStageBytes + part * kPvChunk * kBlockN), Layout{});  // (PV_CHUNK, BLK_N)
      };
      TiledMmaPV tiled_mma_pv_part;
      auto thr_mma_pv_part = tiled_mma_pv_part.get_thread_slice(mma_thread);
      // A part's accumulator: the score registers, (MMA, MMA_M, 1) fp32. (Two 64-wide parts at a time, in the
      // two halves of them, made ptxas serialize every WGMMA (C7511); P x ones in the first part's batch spilled.)
      Tensor tOrPart = make_tensor(tSharedRegs.data(),
                                   make_layout(partition_shape_C(tiled_mma_pv_part, Shape<Int<kBlockM>, Int<kPvChunk>>{})));
      static_assert(decltype(size(tOrPart))::value <= kSharedRegs, "a dv part fits the score registers");
      auto issue_part = [&](int part, int stage) {
        // (MMA, MMA_N, MMA_K) descriptors
        issue_pv_gemm(tiled_mma_pv_part, thr_mma_pv_part.partition_fragment_B(vt_part(part, stage)), tOrPart);
      };
      for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
        float rescale[2];
        scores_of_block(n_block, rescale);
        pipeline_vt.consumer_wait(vt_state);
        CUTE_UNROLL
        for (int part = 0; part < Traits::kNumPvChunks; ++part) {
          issue_part(part, vt_state.index());
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrPart);
          fold_from(part, rescale, tOrPart);
        }
        pv_sum_alone();
        fold_pv_sum(rescale);
        pipeline_vt.consumer_release(vt_state);
        ++vt_state;
      }
    } else {
      // First block: scores only.
      int n_block = range.n_block_max - 1;
      float rescale_prev[2];
      scores_of_block(n_block, rescale_prev);

      for (--n_block; n_block >= range.n_block_min; --n_block) {
        // QK^T of this block and P V of the previous one, in flight together.
        pipeline_k.consumer_wait(k_state);
        issue_qk(k_state.index());
        pipeline_vt.consumer_wait(vt_state);
        issue_pv_previous(vt_state.index(), rescale_prev);
        warpgroup_wait<1>();  // QK^T done; P V still running
        warpgroup_fence_operand(tSrS);
        pipeline_k.consumer_release(k_state);
        ++k_state;
        float rescale[2];
        scores_to_p(n_block, rescale);
        warpgroup_wait<0>();  // P V done: its A registers (P) and tile accumulator are free
        complete_pv_previous(vt_state.index(), rescale_prev);
        pipeline_vt.consumer_release(vt_state);
        ++vt_state;
        scores_to_pv_operand(tSrS, tOrP);
        rescale_prev[0] = rescale[0];
        rescale_prev[1] = rescale[1];
      }
      // P V of the last block.
      pipeline_vt.consumer_wait(vt_state);
      issue_pv_previous(vt_state.index(), rescale_prev);
      warpgroup_wait<0>();
      complete_pv_previous(vt_state.index(), rescale_prev);
      pipeline_vt.consumer_release(vt_state);
    }
  }
};

}  // namespace fp8attn::sm90
