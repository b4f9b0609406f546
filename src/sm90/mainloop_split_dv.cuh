// fp8attn SM90 forward, split dv (dv = 512, Gemma-4's global layers): two MMA warpgroups share one 64-row tile.
//
// A 64 x 512 fp32 O is 256 registers per thread, more than a warpgroup has, so O's columns are split: MMA warpgroup
// 0 (the score warpgroup) holds O[:, 0:256] and computes S = Q K^T, the mask, the online softmax, P, P x ones and its
// own P V half with P from registers; MMA warpgroup 1 (the P V warpgroup) holds O[:, 256:512] and runs only its P V
// half, with P from shared memory. Both GEMMs stay FP8 WGMMA and two-level: each 64-column chunk of a block's P V
// starts from zero in a tile accumulator and is folded into O on the CUDA cores (mainloop_mma.cuh says why).
//
// The hand-over, per KV block, at two named barriers that all 256 threads of both warpgroups sync on: at "P empty"
// the P V warpgroup has finished reading the previous block's P; the score warpgroup then writes P (E4M3, K-major,
// the A slots in its own register order, which V^T's key slots follow: scores_to_pv_operand) into sP and each row's
// O rescale factor into split_dv_row_factor, and both meet at "P full", after which the P V warpgroup runs its
// chunks. Both sides sync rather than one arriving: each would wait for the other's next step anyway (the P V
// warpgroup has nothing to do until the next P; the score warpgroup's "P full" finds it already waiting), and
// with the arrive form compute-sanitizer's racecheck reported hazards between the factors' stores and loads (run
// of 2026-12-05; a tool that does not follow bar.arrive's ordering, or a real race: the sync form settles both).
// One P buffer suffices: the P V warpgroup's work per block (half of P V) is a third of the score warpgroup's (Q K^T
// and the other half), so it frees sP before the next block's P is ready. After the last block the same hand-over
// carries the output scale (1 / row sum, from OnlineSoftmax::finalize) instead of a rescale factor (put_row_factors,
// get_row_factors).
// docs/design.md section 8 has the budget (shared memory, registers, bytes per KV token).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/kernel_args.cuh"
#include "sm90/kernel_traits.cuh"
#include "sm90/mask.cuh"
#include "sm90/quantize_q.cuh"
#include "sm90/softmax.cuh"
#include "sm90/utils.cuh"

namespace fp8attn::sm90 {

using namespace cute;

template <class Traits>
struct MainloopSplitDv {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kPvChunk = Traits::kPvChunk;
  static constexpr int kNumPvChunks = Traits::kNumPvChunks;  // per warpgroup
  static constexpr int kColsPerWarpgroup = Traits::kHeadDimVPerWarpgroup;
  using SharedStorage = typename Traits::SharedStorage;
  using PipelineK = typename Traits::PipelineK;
  using PipelineVt = typename Traits::PipelineVt;
  using KState = typename Traits::PipelineK::PipelineState;
  using VtState = typename Traits::PipelineVt::PipelineState;
  using TiledMmaQK = typename Traits::TiledMmaQK;
  using TiledMmaPV = typename Traits::TiledMmaPV;
  static_assert(Traits::kSplitDv && kBlockM == 64 && !Traits::kPvSumInPv && Traits::kTwoLevel, "split dv layout");
  // Each warpgroup's chunks are whole 8-row atoms of a V^T stage one swizzle atom wide: operands of their own.
  static_assert(Traits::kVtAtomBytes == kBlockN && kPvChunk % 8 == 0, "V^T rows from a multiple of 8 are an operand");

  static constexpr int kThreadsBoth = 256;  // the two MMA warpgroups: the P hand-over barriers' count

  // One warpgroup's O half: (MMA, MMA_M, COLS / kPvChunk) fp32.
  using FragmentO = decltype(partition_fragment_C(TiledMmaPV{}, Shape<Int<kBlockM>, Int<kColsPerWarpgroup>>{}));

  // The V^T rows [row0, row0 + kPvChunk) of stage `stage` as a P V operand: (PV_CHUNK, BLK_N).
  CUTE_DEVICE static auto vt_rows(SharedStorage& smem, int row0, int stage) {
    constexpr int kStageBytes = Traits::kVtRows * kBlockN;
    using Layout = typename Traits::template SmemLayoutVtRows<kPvChunk>;
    return make_tensor(make_smem_ptr(smem.smem_vt.data() + (stage * kStageBytes + row0 * kBlockN)), Layout{});
  }

  // O chunk = O chunk * rescale + tile, after the tile's GEMM has completed.
  template <class TileAccumulator>
  CUTE_DEVICE static void fold(FragmentO& tOrO, int chunk, const float (&rescale)[2], TileAccumulator const& tile) {
    Tensor tOrOChunk = tOrO(_, _, chunk);
    CUTE_UNROLL
    for (int i = 0; i < size(tOrOChunk); ++i) {
      tOrOChunk(i) = fmaf(tOrOChunk(i), rescale[AccumulatorIndex::row_half(i)], tile(i));
    }
  }

  // The hand-over's per-row factors (a block's rescale, or the output scale) of this thread's two rows (warpgroup
  // thread 0..127): written by the quad's first thread, read by every thread of the other warpgroup's quad. Volatile
  // accesses, so that the compiler keeps them where they are written (the barrier asm's memory clobber orders them too).
  CUTE_DEVICE static void put_row_factors(SharedStorage& smem, int thread, const float (&factor)[2]) {
    if (thread % 4 == 0) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) { st_shared_volatile(&smem.split_dv_row_factor[accumulator_row(thread, h)], factor[h]); }
    }
  }
  // One of the hand-over's barriers (kSplitDvPEmpty, kSplitDvPFull), both warpgroups, each from its own code: the
  // unaligned barrier (ptx.cuh says why bar.sync is not).
  template <NamedBarrierId kBarrier>
  CUTE_DEVICE static void sync_both_warpgroups() {
    barrier_sync_unaligned<cutlass::arch::NamedBarrier::ReservedNamedBarrierCount + kBarrier, kThreadsBoth>();
  }
  CUTE_DEVICE static void get_row_factors(const SharedStorage& smem, int thread, float (&factor)[2]) {
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) { factor[h] = ld_shared_volatile(&smem.split_dv_row_factor[accumulator_row(thread, h)]); }
  }

  // Score warpgroup (thread 0..127): the KV loop for one query tile; its O half is left unnormalised (scaled by 2^8
  // like the row sums). The range must not be empty.
  CUTE_DEVICE static void run_score_warpgroup(SharedStorage& smem, PipelineK& pipeline_k, PipelineVt& pipeline_vt,
                                              const Mask<kBlockM, kBlockN>& mask, KvBlockRange range, int thread,
                                              OnlineSoftmax& softmax, FragmentO& tOrO, bool kv_shared) {
    TiledMmaQK tiled_mma_qk;
    TiledMmaPV tiled_mma_pv;
    typename Traits::TiledMmaPvSum tiled_mma_pv_sum;
    auto thr_mma_qk = tiled_mma_qk.get_thread_slice(thread);
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(thread);
    auto thr_mma_pv_sum = tiled_mma_pv_sum.get_thread_slice(thread);

    Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q.data()), typename Traits::SmemLayoutQ{});           // (BLK_M, D)
    Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename Traits::SmemLayoutK{});           // (BLK_N, D, PIPE)
    Tensor sOnes = make_tensor(make_smem_ptr(smem.smem_ones.data()), typename Traits::SmemLayoutOnes{});  // (8, BLK_N)
    Tensor sP = make_tensor(make_smem_ptr(smem.smem_p.data()), typename Traits::SmemLayoutP{});           // (BLK_M, BLK_N)
    Tensor tSrQ = thr_mma_qk.partition_fragment_A(sQ);        // (MMA, MMA_M, MMA_K) descriptors
    Tensor tSrK = thr_mma_qk.partition_fragment_B(sK);        // (MMA, MMA_N, MMA_K, PIPE) descriptors
    Tensor tSrOnes = thr_mma_pv_sum.partition_fragment_B(sOnes);  // (MMA, MMA_N, MMA_K) descriptors
    Tensor tSrS = partition_fragment_C(tiled_mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});  // (MMA, MMA_M, MMA_N) fp32
    Tensor cS = make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{});  // (BLK_M, BLK_N) -> (row, col)
    Tensor tOrP = make_tensor<Element>(partition_shape_A(tiled_mma_pv, Shape<Int<kBlockM>, Int<kBlockN>>{}));  // (MMA, MMA_M, MMA_K)
    Tensor tOrOTile = partition_fragment_C(tiled_mma_pv, Shape<Int<kBlockM>, Int<kPvChunk>>{});  // (MMA, MMA_M, 1) fp32
    Tensor tOrPvSum = partition_fragment_C(tiled_mma_pv_sum, Shape<Int<kBlockM>, _8>{});  // (MMA, MMA_M, 1) fp32

    KState k_state;
    VtState vt_state;
    for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
      // S = Q K^T, completed.
      pipeline_k.consumer_wait(k_state);
      warpgroup_fence_operand(tSrS);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), tSrS);
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      pipeline_k.consumer_release(k_state);
      advance_k_stage<Traits>(k_state, kv_shared);

      // Softcap (when on), mask (boundary blocks only), online softmax, P in PV A order.
      float rescale[2];
      const auto q_scale = q_row_scale_of<Traits>(smem);
      if (softmax.softcap_tanh_scale != 0.f) { softmax.softcap(tSrS, q_scale); }
      if (mask.needs_mask(n_block)) {
        Tensor tScS = thr_mma_qk.partition_C(cS);  // (MMA, MMA_M, MMA_N) -> (row, col)
        mask.apply(tSrS, tScS, n_block);
      }
      softmax.template online<Traits::kSoftmaxRowHalvesInterleaved>(tSrS, rescale, q_scale);
      scores_to_pv_operand(tSrS, tOrP);

      // Hand P and the rescale factors to the P V warpgroup.
      sync_both_warpgroups<kSplitDvPEmpty>();
      store_p(sP, tOrP, thread);
      put_row_factors(smem, thread, rescale);
      cutlass::arch::fence_view_async_shared();  // the other warpgroup's WGMMA reads sP through the async proxy
      sync_both_warpgroups<kSplitDvPFull>();

      // This warpgroup's half of P V, chunk by chunk, then P x ones.
      pipeline_vt.consumer_wait(vt_state);
      CUTE_UNROLL
      for (int chunk = 0; chunk < kNumPvChunks; ++chunk) {
        Tensor tOrVt = thr_mma_pv.partition_fragment_B(vt_rows(smem, chunk * kPvChunk, vt_state.index()));  // (MMA, MMA_N, MMA_K)
        warpgroup_fence_operand(tOrP);
        warpgroup_fence_operand(tOrOTile);
        warpgroup_arrive();
        gemm_k_steps</*kZeroInit=*/true>(tiled_mma_pv, tOrP, tOrVt, tOrOTile);
        warpgroup_commit_batch();
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrOTile);
        fold(tOrO, chunk, rescale, tOrOTile);
      }
      warpgroup_fence_operand(tOrPvSum);
      warpgroup_arrive();
      gemm_k_steps</*kZeroInit=*/true>(tiled_mma_pv_sum, tOrP, tSrOnes, tOrPvSum);
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrPvSum);
      pipeline_vt.consumer_release(vt_state);
      ++vt_state;
      using Acc = AccumulatorIndex;
      const float tile_sum[2] = {tOrPvSum(Acc::of(0, 0, 0)), tOrPvSum(Acc::of(0, 1, 0))};
      softmax.fold_pv_sum(rescale, tile_sum);
    }
  }

  // P V warpgroup (thread 0..127 of the second MMA warpgroup): its O half over the same blocks, from the P and the
  // rescale factors the score warpgroup hands over.
  CUTE_DEVICE static void run_pv_warpgroup(SharedStorage& smem, PipelineVt& pipeline_vt, KvBlockRange range, int thread,
                                           FragmentO& tOrO) {
    typename Traits::TiledMmaPvFromSmem tiled_mma_pv;
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(thread);
    Tensor sP = make_tensor(make_smem_ptr(smem.smem_p.data()), typename Traits::SmemLayoutP{});  // (BLK_M, BLK_N)
    Tensor tOsP = thr_mma_pv.partition_fragment_A(sP);  // (MMA, MMA_M, MMA_K) descriptors
    Tensor tOrOTile = partition_fragment_C(tiled_mma_pv, Shape<Int<kBlockM>, Int<kPvChunk>>{});  // (MMA, MMA_M, 1) fp32

    // sP starts free: the first "P empty" lets the score warpgroup write.
    sync_both_warpgroups<kSplitDvPEmpty>();
    VtState vt_state;
    for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
      sync_both_warpgroups<kSplitDvPFull>();
      float rescale[2];
      get_row_factors(smem, thread, rescale);
      pipeline_vt.consumer_wait(vt_state);
      CUTE_UNROLL
      for (int chunk = 0; chunk < kNumPvChunks; ++chunk) {
        // V^T rows of O's second half: (MMA, MMA_N, MMA_K) descriptors
        Tensor tOrVt = thr_mma_pv.partition_fragment_B(vt_rows(smem, kColsPerWarpgroup + chunk * kPvChunk, vt_state.index()));
        warpgroup_fence_operand(tOrOTile);
        warpgroup_arrive();
        gemm_k_steps</*kZeroInit=*/true>(tiled_mma_pv, tOsP, tOrVt, tOrOTile);
        warpgroup_commit_batch();
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrOTile);
        fold(tOrO, chunk, rescale, tOrOTile);
      }
      pipeline_vt.consumer_release(vt_state);
      ++vt_state;
      // sP and the factors are read (every chunk's GEMM has completed): the score warpgroup may write the next block's.
      sync_both_warpgroups<kSplitDvPEmpty>();
    }
  }

  // After the KV loop (both warpgroups, only when it ran): the score warpgroup's output scale per row goes to the
  // P V warpgroup, through the last hand-over; its own o_scale is unchanged.
  CUTE_DEVICE static void share_output_scale(SharedStorage& smem, int mma_thread, float (&o_scale)[2]) {
    const int thread = mma_thread % 128;
    if (mma_thread < 128) {
      sync_both_warpgroups<kSplitDvPEmpty>();
      put_row_factors(smem, thread, o_scale);
      sync_both_warpgroups<kSplitDvPFull>();
    } else {
      sync_both_warpgroups<kSplitDvPFull>();
      get_row_factors(smem, thread, o_scale);
    }
  }

  // P (tOrP, the RS A fragment) into sP at the slots it holds (p_word_position, utils.cuh). Four slots from a
  // multiple of 4 lie inside one 16-byte unit of the swizzled row: one 32-bit store per word.
  template <class TensorSP, class TensorP>
  CUTE_DEVICE static void store_p(TensorSP& sP, TensorP const& tOrP, int thread) {
    Tensor tOrP_u32 = recast<uint32_t>(tOrP);
    CUTE_UNROLL
    for (int word = 0; word < size(tOrP_u32); ++word) {
      const PWordPosition at = p_word_position(thread, word);
      *reinterpret_cast<uint32_t*>(&sP(at.row, at.slot0)) = tOrP_u32(word);
    }
  }
};

}  // namespace fp8attn::sm90
