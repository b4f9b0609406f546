// fp8attn SM90 forward, MMA warpgroups: S = Q K^T, online softmax, P V with two-level accumulation.
//
// Two-level accumulation: FP8 WGMMA accumulates with fewer mantissa bits than fp32, so summing P V over
// thousands of keys in the tensor-core accumulator loses the small per-tile contributions (the output
// of a nonzero-mean V shrinks with KV length). Each KV tile's P V therefore starts from zero in its own
// accumulator and is folded into the fp32 O on the CUDA cores: O = O * rescale + O_tile (one FFMA).
// The fold runs after the PV GEMM's wait, so no instruction reads an accumulator a WGMMA still writes.
#pragma once

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

  // The O accumulator of this thread: (MMA, MMA_M, DV / kPvChunk) fp32.
  using FragmentO = decltype(partition_fragment_C(TiledMmaPV{}, Shape<Int<kBlockM>, Int<kHeadDimV>>{}));

  // Runs the KV loop for one query tile; O is left unnormalised (scaled by 2^8 like the row sums).
  // mma_thread: 0 .. kNumMmaThreads-1.
  CUTE_DEVICE static void run(SharedStorage& smem, PipelineK& pipeline_k, PipelineVt& pipeline_vt,
                              const Mask<kBlockM, kBlockN>& mask, KvBlockRange range, int mma_thread,
                              OnlineSoftmax& softmax, FragmentO& tOrO) {
    TiledMmaQK tiled_mma_qk;
    TiledMmaPV tiled_mma_pv;
    auto thr_mma_qk = tiled_mma_qk.get_thread_slice(mma_thread);
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(mma_thread);

    Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q.data()), typename Traits::SmemLayoutQ{});     // (BLK_M, D)
    Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename Traits::SmemLayoutK{});     // (BLK_N, D, PIPE)
    Tensor sVt = make_tensor(make_smem_ptr(smem.smem_vt.data()), typename Traits::SmemLayoutVt{});  // (DV, BLK_N, PIPE)

    Tensor tSrQ = thr_mma_qk.partition_fragment_A(sQ);  // (MMA, MMA_M, MMA_K) descriptors
    Tensor tSrK = thr_mma_qk.partition_fragment_B(sK);  // (MMA, MMA_N, MMA_K, PIPE) descriptors
    Tensor tSrS = partition_fragment_C(tiled_mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});  // (MMA, MMA_M, MMA_N) fp32
    Tensor cS = make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{});  // (BLK_M, BLK_N) -> (row, col)
    Tensor tScS = thr_mma_qk.partition_C(cS);  // (MMA, MMA_M, MMA_N) coordinates of tSrS
    Tensor tOrP = make_tensor<Element>(partition_shape_A(tiled_mma_pv, Shape<Int<kBlockM>, Int<kBlockN>>{}));  // (MMA, MMA_M, MMA_K)
    Tensor tOrOTile = partition_fragment_C(tiled_mma_pv, Shape<Int<kBlockM>, Int<kPvChunk>>{});  // (MMA, MMA_M, 1) fp32

    // The PV B operand for dv chunk `chunk` of V^T stage `stage`: (MMA, MMA_N, MMA_K) descriptors.
    auto vt_operand = [&](int chunk, int stage) {
      Tensor sVtChunk = local_tile(sVt(_, _, stage), Shape<Int<kPvChunk>, Int<kBlockN>>{}, make_coord(chunk, _0{}));  // (CHUNK, BLK_N)
      return thr_mma_pv.partition_fragment_B(sVtChunk);
    };

    PipelineState k_state;
    PipelineState vt_state;
    for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
      pipeline_k.consumer_wait(k_state);
      warpgroup_gemm</*kZeroInit=*/true>(tiled_mma_qk, tSrQ, tSrK(_, _, _, k_state.index()), tSrS);
      pipeline_k.consumer_release(k_state);
      ++k_state;

      if (mask.needs_mask(n_block)) { mask.apply(tSrS, tScS, n_block); }
      float o_rescale[2];
      softmax.online(tSrS, o_rescale);
      scores_to_pv_operand(tSrS, tOrP);

      pipeline_vt.consumer_wait(vt_state);
      CUTE_UNROLL
      for (int chunk = 0; chunk < Traits::kNumPvChunks; ++chunk) {
        warpgroup_gemm</*kZeroInit=*/true>(tiled_mma_pv, tOrP, vt_operand(chunk, vt_state.index()), tOrOTile);
        Tensor tOrOChunk = tOrO(_, _, chunk);
        CUTE_UNROLL
        for (int i = 0; i < size(tOrOTile); ++i) {
          // Accumulator flat index i = c + 2*h + 4*j: row half h = (i / 2) % 2.
          tOrOChunk(i) = fmaf(tOrOChunk(i), o_rescale[(i / 2) % 2], tOrOTile(i));
        }
      }
      pipeline_vt.consumer_release(vt_state);
      ++vt_state;
    }
  }
};

}  // namespace fp8attn::sm90
