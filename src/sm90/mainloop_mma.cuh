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

#include <utility>

#include <cute/tensor.hpp>

#include "sm90/kernel_args.cuh"
#include "sm90/mask.cuh"
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
  using PipelineState = cutlass::PipelineState<Traits::kStages>;
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
    KvLoop loop(smem, pipeline_k, pipeline_vt, mask, mma_thread, softmax, tOrO);
    if constexpr (Traits::kPvAfterSoftmax) {
      loop.run_pv_after_softmax(range);
    } else {
      loop.run_overlapped(range);
    }
  }

 private:
  using ThrMmaQK = decltype(std::declval<TiledMmaQK&>().get_thread_slice(0));
  using ThrMmaPvTile = decltype(std::declval<TiledMmaPvTile&>().get_thread_slice(0));
  using ThrMmaPvSum = decltype(std::declval<TiledMmaPvSum&>().get_thread_slice(0));
  template <class SmemLayout>
  using SmemTensor = decltype(make_tensor(make_smem_ptr(std::declval<Element*>()), SmemLayout{}));
  using TensorSQ = SmemTensor<typename Traits::SmemLayoutQ>;        // (BLK_M, D)
  using TensorSK = SmemTensor<typename Traits::SmemLayoutK>;        // (BLK_N, D, PIPE)
  using TensorSVt = SmemTensor<typename Traits::SmemLayoutVt>;      // (VT_ROWS, BLK_N, PIPE)
  using TensorSOnes = SmemTensor<typename Traits::SmemLayoutOnes>;  // (8, BLK_N), !kPvSumInPv
  using TileMN = Shape<Int<kBlockM>, Int<kBlockN>>;

  // One query tile's KV loop: its operands, accumulators and pipeline positions, the steps of a KV block, and
  // the two schedules of those steps (run_overlapped, run_pv_after_softmax). One object per tile, on the
  // registers of the MMA thread; its members are what the loop keeps live.
  class KvLoop {
   public:
    CUTE_DEVICE KvLoop(SharedStorage& smem, PipelineK& pipeline_k, PipelineVt& pipeline_vt,
                       const Mask<kBlockM, kBlockN>& mask, int mma_thread, OnlineSoftmax& softmax, FragmentO& tOrO)
        : pipeline_k_(pipeline_k),
          pipeline_vt_(pipeline_vt),
          mask_(mask),
          softmax_(softmax),
          tOrO_(tOrO),
          mma_thread_(mma_thread),
          thr_mma_qk_(tiled_mma_qk_.get_thread_slice(mma_thread)),
          thr_mma_pv_(tiled_mma_pv_.get_thread_slice(mma_thread)),
          thr_mma_pv_sum_(tiled_mma_pv_sum_.get_thread_slice(mma_thread)),
          sVt_(make_tensor(make_smem_ptr(smem.smem_vt.data()), typename Traits::SmemLayoutVt{})),
          tSrQ_(thr_mma_qk_.partition_fragment_A(
              make_tensor(make_smem_ptr(smem.smem_q.data()), typename Traits::SmemLayoutQ{}))),
          tSrK_(thr_mma_qk_.partition_fragment_B(
              make_tensor(make_smem_ptr(smem.smem_k.data()), typename Traits::SmemLayoutK{}))),
          tSrS_(partition_fragment_C(tiled_mma_qk_, TileMN{})),
          tSrOnes_(thr_mma_pv_sum_.partition_fragment_B(
              make_tensor(make_smem_ptr(smem.smem_ones.data()), typename Traits::SmemLayoutOnes{}))) {}

    // QK^T of block n and P V of block n + 1 in flight together (blocks run from the last to the first); the
    // softmax of block n runs on the CUDA cores while the tensor cores finish that P V.
    CUTE_DEVICE void run_overlapped(KvBlockRange range) {
      // First block: scores only.
      int n_block = range.n_block_max - 1;
      float rescale_prev[2];
      scores_of_block(n_block, rescale_prev);

      for (--n_block; n_block >= range.n_block_min; --n_block) {
        // QK^T of this block and P V of the previous one, in flight together.
        pipeline_k_.consumer_wait(k_state_);
        issue_qk(k_state_.index());
        pipeline_vt_.consumer_wait(vt_state_);
        issue_pv_previous(vt_state_.index(), rescale_prev);
        warpgroup_wait<1>();  // QK^T done; P V still running
        warpgroup_fence_operand(tSrS_);
        pipeline_k_.consumer_release(k_state_);
        ++k_state_;
        float rescale[2];
        scores_to_p(n_block, rescale);
        warpgroup_wait<0>();  // P V done: its A registers (P) and tile accumulator are free
        complete_pv_previous(vt_state_.index(), rescale_prev);
        pipeline_vt_.consumer_release(vt_state_);
        ++vt_state_;
        scores_to_pv_operand(tSrS_, tOrP_);
        rescale_prev[0] = rescale[0];
        rescale_prev[1] = rescale[1];
      }
      // P V of the last block.
      pipeline_vt_.consumer_wait(vt_state_);
      issue_pv_previous(vt_state_.index(), rescale_prev);
      warpgroup_wait<0>();
      complete_pv_previous(vt_state_.index(), rescale_prev);
      pipeline_vt_.consumer_release(vt_state_);
    }

    // Each block: QK^T, the softmax, then its P V in kBlockN-wide dv parts accumulated in the score registers.
    CUTE_DEVICE void run_pv_after_softmax(KvBlockRange range) {
      TiledMmaPV tiled_mma_pv_part;
      auto thr_mma_pv_part = tiled_mma_pv_part.get_thread_slice(mma_thread_);
      // A part's accumulator: the score registers, (MMA, MMA_M, 1) fp32. (Two 64-wide parts at a time, in the
      // two halves of them, made ptxas serialize every WGMMA (C7511); P x ones in the first part's batch spilled.)
      Tensor tOrPart = make_tensor(tSrS_.data(),
                                   make_layout(partition_shape_C(tiled_mma_pv_part, Shape<Int<kBlockM>, Int<kPvChunk>>{})));
      static_assert(decltype(size(tOrPart))::value <= decltype(size(tSrS_))::value, "a dv part fits the score registers");
      auto issue_part = [&](int part, int stage) {
        // (MMA, MMA_N, MMA_K) descriptors
        issue_pv_gemm(tiled_mma_pv_part, thr_mma_pv_part.partition_fragment_B(vt_part(part, stage)), tOrPart);
      };
      for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
        float rescale[2];
        scores_of_block(n_block, rescale);
        pipeline_vt_.consumer_wait(vt_state_);
        CUTE_UNROLL
        for (int part = 0; part < Traits::kNumPvChunks; ++part) {
          issue_part(part, vt_state_.index());
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrPart);
          fold_from(part, rescale, tOrPart);
        }
        pv_sum_alone();
        fold_pv_sum(rescale);
        pipeline_vt_.consumer_release(vt_state_);
        ++vt_state_;
      }
    }

   private:
    // The PV B operand for dv chunk `chunk` of V^T stage `stage` (with the ones rows when kPvSumInPv):
    // (MMA, MMA_N, MMA_K) descriptors.
    CUTE_DEVICE auto vt_operand(int chunk, int stage) {
      Tensor sVtChunk = local_tile(sVt_(_, _, stage), Shape<Int<kPvTileN>, Int<kBlockN>>{}, make_coord(chunk, _0{}));  // (PV_TILE_N, BLK_N)
      return thr_mma_pv_.partition_fragment_B(sVtChunk);
    }
    // The V^T rows [part * kPvChunk, (part + 1) * kPvChunk) of a stage as a P V operand (SmemLayoutVtRows).
    CUTE_DEVICE auto vt_part(int part, int stage) {
      constexpr int kStageBytes = Traits::kVtRows * kBlockN;
      using Layout = typename Traits::template SmemLayoutVtRows<kPvChunk>;
      return make_tensor(sVt_.data() + (stage * kStageBytes + part * kPvChunk * kBlockN), Layout{});  // (PV_CHUNK, BLK_N)
    }
    // O chunk = O chunk * rescale + tile, after the tile's GEMM has completed. The O chunk's n8 blocks are
    // the first ones of the tile accumulator; the ones block, when there, is its last.
    template <class TensorTile>
    CUTE_DEVICE void fold_from(int chunk, const float (&rescale)[2], TensorTile const& tile) {
      Tensor tOrOChunk = tOrO_(_, _, chunk);
      CUTE_UNROLL
      for (int i = 0; i < size(tOrOChunk); ++i) {
        tOrOChunk(i) = fmaf(tOrOChunk(i), rescale[AccumulatorIndex::row_half(i)], tile(i));
      }
    }
    CUTE_DEVICE void fold(int chunk, const float (&rescale)[2]) { fold_from(chunk, rescale, tOrOTile_); }
    // S -> P for one block: mask (boundary blocks only), online softmax, FP8 conversion into PV A order.
    CUTE_DEVICE void scores_to_p(int n_block, float (&rescale)[2]) {
      if (mask_.needs_mask(n_block)) {
        // Coordinates of tSrS, from the thread index read again: only boundary blocks need them, and held
        // through the loop they would take a register the MMA warpgroups do not have.
        const int thread = thread_idx_reread() - Traits::kNumProducerThreads;
        Tensor cS = make_identity_tensor(TileMN{});                           // (BLK_M, BLK_N) -> (row, col)
        Tensor tScS = tiled_mma_qk_.get_thread_slice(thread).partition_C(cS);  // (MMA, MMA_M, MMA_N) -> (row, col)
        mask_.apply(tSrS_, tScS, n_block);
      }
      softmax_.template online<Traits::kSoftmaxRowHalvesInterleaved>(tSrS_, rescale);
    }
    CUTE_DEVICE void issue_qk(int stage) {
      warpgroup_fence_operand(tSrS_);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_qk_, tSrQ_, tSrK_(_, _, _, stage), tSrS_);
      warpgroup_commit_batch();
    }
    // QK^T of one block, completed, then its softmax and P: every block of P V after the softmax, the first
    // block of the overlapped loop.
    CUTE_DEVICE void scores_of_block(int n_block, float (&rescale)[2]) {
      pipeline_k_.consumer_wait(k_state_);
      issue_qk(k_state_.index());
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS_);
      pipeline_k_.consumer_release(k_state_);
      ++k_state_;
      scores_to_p(n_block, rescale);
      scores_to_pv_operand(tSrS_, tOrP_);
    }
    // P x ones, inside the caller's warpgroup_arrive() / warpgroup_commit_batch() bracket.
    CUTE_DEVICE void gemm_pv_sum() {
      warpgroup_fence_operand(tOrPvSum_);
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_pv_sum_, tOrP_, tSrOnes_, tOrPvSum_);
    }
    // P x ones as a GEMM of its own, completed (chunked P V after its last chunk, P V after the softmax).
    CUTE_DEVICE void pv_sum_alone() {
      warpgroup_arrive();
      gemm_pv_sum();
      warpgroup_commit_batch();
      warpgroup_wait<0>();
    }
    // After the GEMM has completed: the block's sums of rounded P folded like O: column 0 of the ones block,
    // both row halves.
    CUTE_DEVICE void fold_pv_sum(const float (&rescale)[2]) {
      using Acc = AccumulatorIndex;
      if constexpr (Traits::kPvSumInPv) {
        constexpr int kOnesBlock = kPvChunk / 8;  // the n8 block after the dv chunk's
        const float tile_sum[2] = {tOrOTile_(Acc::of(0, 0, kOnesBlock)), tOrOTile_(Acc::of(0, 1, kOnesBlock))};
        softmax_.fold_pv_sum(rescale, tile_sum);
      } else {
        warpgroup_fence_operand(tOrPvSum_);
        const float tile_sum[2] = {tOrPvSum_(Acc::of(0, 0, 0)), tOrPvSum_(Acc::of(0, 1, 0))};
        softmax_.fold_pv_sum(rescale, tile_sum);
      }
    }
    // One P V GEMM from zero into tile (P from registers, V^T operand tOrVt), issued as its own batch.
    template <class TiledMma, class TensorVt, class TensorTile>
    CUTE_DEVICE void issue_pv_gemm(TiledMma& tiled_mma, TensorVt const& tOrVt, TensorTile& tile) {
      warpgroup_fence_operand(tOrP_);
      warpgroup_fence_operand(tile);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma, tOrP_, tOrVt, tile);
      warpgroup_commit_batch();
    }
    CUTE_DEVICE void issue_pv(int chunk, int stage) { issue_pv_gemm(tiled_mma_pv_, vt_operand(chunk, stage), tOrOTile_); }
    // The remaining dv chunks of a block's P V, one after the other through the one tile accumulator; then,
    // for chunked P V, P x ones alone.
    CUTE_DEVICE void pv_remaining_chunks(int stage, const float (&rescale)[2]) {
      CUTE_UNROLL
      for (int chunk = 1; chunk < Traits::kNumPvChunks; ++chunk) {
        issue_pv(chunk, stage);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrOTile_);
        fold(chunk, rescale);
      }
      if constexpr (kPvSumAfterChunks) { pv_sum_alone(); }
    }
    // Single-level accumulation (built only to measure what two-level accumulation buys, see
    // Traits::kTwoLevel): O is rescaled first and every chunk accumulates into it on the tensor cores.
    CUTE_DEVICE void issue_pv_into_o(int stage, const float (&rescale)[2]) {
      if constexpr (!Traits::kTwoLevel) {  // its P V tile is plain dv chunks (kPvTileN == kPvChunk)
        CUTE_UNROLL
        for (int i = 0; i < size(tOrO_); ++i) { tOrO_(i) *= rescale[AccumulatorIndex::row_half(i)]; }
        warpgroup_fence_operand(tOrP_);
        warpgroup_fence_operand(tOrO_);
        warpgroup_arrive();
        CUTE_UNROLL
        for (int chunk = 0; chunk < Traits::kNumPvChunks; ++chunk) {
          // (MMA, MMA_M, 1): the chunk keeps its N mode, as the GEMM expects.
          Tensor tOrOChunk = make_tensor(tOrO_.data() + chunk * stride<2>(tOrO_),
                                         make_layout(layout<0>(tOrO_), layout<1>(tOrO_), Layout<_1, _0>{}));
          gemm_k_steps</*kZeroInit=*/false>(tiled_mma_pv_, tOrP_, vt_operand(chunk, stage), tOrOChunk);
        }
        gemm_pv_sum();
        warpgroup_commit_batch();
      }
    }
    // P V of the previous block: issue (overlapping what follows), then complete after warpgroup_wait.
    CUTE_DEVICE void issue_pv_previous(int stage, const float (&rescale)[2]) {
      if constexpr (Traits::kTwoLevel) {
        issue_pv(0, stage);
      } else {
        issue_pv_into_o(stage, rescale);
      }
    }
    CUTE_DEVICE void complete_pv_previous(int stage, const float (&rescale)[2]) {
      if constexpr (Traits::kTwoLevel) {
        warpgroup_fence_operand(tOrOTile_);
        fold(0, rescale);
        pv_remaining_chunks(stage, rescale);
      } else {
        warpgroup_fence_operand(tOrO_);
      }
      fold_pv_sum(rescale);
    }

    PipelineK& pipeline_k_;
    PipelineVt& pipeline_vt_;
    const Mask<kBlockM, kBlockN>& mask_;
    OnlineSoftmax& softmax_;
    FragmentO& tOrO_;  // (MMA, MMA_M, DV / kPvChunk) fp32
    int mma_thread_;
    TiledMmaQK tiled_mma_qk_;
    TiledMmaPvTile tiled_mma_pv_;
    TiledMmaPvSum tiled_mma_pv_sum_;
    ThrMmaQK thr_mma_qk_;
    ThrMmaPvTile thr_mma_pv_;
    ThrMmaPvSum thr_mma_pv_sum_;
    TensorSVt sVt_;  // (VT_ROWS, BLK_N, PIPE)
    decltype(std::declval<ThrMmaQK&>().partition_fragment_A(std::declval<TensorSQ&>())) tSrQ_;  // (MMA, MMA_M, MMA_K) descriptors
    decltype(std::declval<ThrMmaQK&>().partition_fragment_B(std::declval<TensorSK&>())) tSrK_;  // (MMA, MMA_N, MMA_K, PIPE) descriptors
    // S, then P's fp32 values; with P V after the softmax also each dv part's accumulator.
    decltype(partition_fragment_C(TiledMmaQK{}, TileMN{})) tSrS_;  // (MMA, MMA_M, MMA_N) fp32
    // P in the PV A operand's order: (MMA, MMA_M, MMA_K) E4M3.
    decltype(make_tensor<Element>(partition_shape_A(TiledMmaPV{}, TileMN{}))) tOrP_;
    // One dv chunk of P V (+ the ones block of row sums when kPvSumInPv): (MMA, MMA_M, 1) fp32.
    decltype(partition_fragment_C(TiledMmaPvTile{}, Shape<Int<kBlockM>, Int<kPvTileN>>{})) tOrOTile_;
    decltype(std::declval<ThrMmaPvSum&>().partition_fragment_B(std::declval<TensorSOnes&>())) tSrOnes_;  // (MMA, MMA_N, MMA_K) descriptors
    decltype(partition_fragment_C(TiledMmaPvSum{}, Shape<Int<kBlockM>, _8>{})) tOrPvSum_;  // (MMA, MMA_M, 1) fp32
    static_assert(decltype(size(partition_fragment_C(TiledMmaPvSum{}, Shape<Int<kBlockM>, _8>{})))::value == 4,
                  "one n8 block: (column pair, row half)");
    PipelineState k_state_;
    PipelineState vt_state_;
  };
};

}  // namespace fp8attn::sm90
