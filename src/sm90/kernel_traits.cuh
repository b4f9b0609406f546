// fp8attn SM90 forward: compile-time shape of one kernel instantiation.
//
// One CTA = one producer warpgroup (TMA loads + the V transpose) and kBlockM / 64 MMA warpgroups, each
// owning 64 query rows — or, with split dv (dv = 512), two MMA warpgroups sharing 64 rows, each owning half of O's
// columns (mainloop_split_dv.cuh). Both GEMMs are FP8 WGMMA: S = Q K^T with both operands in shared memory (SS),
// O_tile = P V with P from registers (RS) and V^T in shared memory. FP8 WGMMA only takes K-major
// operands, and V arrives row-major ([keys, dv]), so the producer transposes every V tile into sVt.
// docs/design.md has the byte and cycle budget behind these numbers.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/pipeline/pipeline.hpp>
#include <cutlass/arch/barrier.h>

#include <type_traits>

#include "common/kernel_rules.h"
#include "sm90/tile_scheduler.cuh"

namespace fp8attn::sm90 {

using namespace cute;

// The GMMA shared-memory swizzle atom for a K-major operand whose K extent is kBytes bytes: the widest
// swizzle that tiles it (128 B when the row is a multiple of 128 B, else 64 B or 32 B), so that TMA writes
// and ldmatrix/stmatrix/WGMMA reads of 16-byte chunks are bank-conflict free. The atom is that many bytes wide.
constexpr int k_major_swizzle_bytes(int k_bytes) { return k_bytes % 128 == 0 ? 128 : k_bytes % 64 == 0 ? 64 : 32; }
template <class Element, int kBytes>
constexpr auto k_major_swizzle_atom() {
  static_assert(kBytes % 32 == 0, "K extent must be a multiple of 32 bytes");
  if constexpr (k_major_swizzle_bytes(kBytes) == 128) {
    return GMMA::Layout_K_SW128_Atom<Element>{};
  } else if constexpr (k_major_swizzle_bytes(kBytes) == 64) {
    return GMMA::Layout_K_SW64_Atom<Element>{};
  } else {
    return GMMA::Layout_K_SW32_Atom<Element>{};
  }
}

// kTwoLevel_ = false builds the single-level accumulation the design replaces (P V accumulated over all
// KV tiles in the FP8 WGMMA accumulator); src/kernels.list declares one such kernel, for the long-KV
// accuracy test and the cost measurement of two-level accumulation. select_config() never picks it.
// kVarlenSchedule_ = true: the varlen schedule's tile list instead of the direct grid (tile_scheduler.cuh).
// kQ16_ = true: Q arrives in fp16/bf16 and the MMA warpgroups quantize it per row (quantize_q.cuh).
// kSwapped_ = true (split dv only): decode tiles of at most kSwappedRows rows, the swapped-operand loop alone
// (mainloop_swapped.cuh); false: the split-dv loop alone (mainloop_split_dv.cuh).
template <int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, bool kTwoLevel_ = true, bool kVarlenSchedule_ = false,
          bool kQ16_ = false, bool kSwapped_ = false>
struct KernelTraits {
  using Element = cutlass::float_e4m3_t;  // Q, K, V and P
  using ElementAccum = float;

  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = stages_for(kBlockM_, kBlockN_, kHeadDimV_);     // V^T (and V-as-loaded); kernel_rules.h
  static constexpr int kKStages = k_stages_for(kBlockM_, kBlockN_, kHeadDimV_);  // K
  static constexpr bool kTwoLevel = kTwoLevel_;
  static constexpr bool kQ16 = kQ16_;
  using TileScheduler = std::conditional_t<kVarlenSchedule_, VarlenListScheduler<kBlockM_>, DirectGridScheduler>;

  // Split dv: two MMA warpgroups on one 64-row tile, O's columns halved between them (kernel_rules.h).
  static constexpr bool kSplitDv = split_dv(kHeadDimV_);
  static constexpr bool kSwapped = kSwapped_;
  // Swapped operands: the P^T ring between the two MMA warpgroups (mainloop_swapped.cuh); two stages let the score
  // warpgroup write the next block's P^T while the other multiplies this one's.
  static constexpr int kPtStages = 2;
  static_assert(!kSwapped || (kSplitDv && kBlockM_ == 64 && !kVarlenSchedule_),
                "swapped operands: the split-dv 64-row tile on the direct grid (kernel_rules.h)");
  static constexpr int kNumRowWarpgroups = kBlockM / 64;  // warpgroups along M: the GEMMs' atom layout
  static constexpr int kNumMmaWarpgroups = kSplitDv ? 2 : kNumRowWarpgroups;
  static constexpr int kHeadDimVPerWarpgroup = kSplitDv ? kHeadDimV / 2 : kHeadDimV;  // O's columns per warpgroup
  // The thread whose accumulator rows accumulator_row() (utils.cuh) gives for MMA thread mma_thread: with split dv
  // both warpgroups hold the tile's same 64 rows.
  CUTE_HOST_DEVICE static constexpr int row_thread(int mma_thread) { return kSplitDv ? mma_thread % 128 : mma_thread; }
  static constexpr int kNumProducerThreads = 128;
  static constexpr int kNumTransposeThreads = 96;  // producer warps 1-3; warp 0 issues the loads
  static constexpr int kNumMmaThreads = 128 * kNumMmaWarpgroups;
  static constexpr int kNumThreads = kNumProducerThreads + kNumMmaThreads;
  static constexpr int kCtasPerSm = ctas_per_sm_for(kBlockM, kHeadDimV);

  // Two-level accumulation keeps a second fp32 accumulator (the tile's P V) next to O. When O + O_tile + S
  // would not fit the MMA warpgroup's registers (dv > 128, two CTAs per SM, or three MMA warpgroups at 160
  // registers: unchunked, the 192 x 128 d64 tile spilled 56 B), the PV GEMM runs in dv chunks through one
  // chunk-sized tile accumulator — or, with P V after the softmax (kernel_rules.h), in
  // kBlockN-wide parts through the score registers: a part of kBlockN columns takes as many registers as S. (A
  // part accumulator on only some of S's registers made ptxas serialize every WGMMA, C7511: 64-wide parts at d256
  // and 96-wide ones at d192 with 128-key tiles; docs/design.md, Measured choices.)
  static constexpr bool kPvAfterSoftmax = pv_after_softmax(kBlockM_, kBlockN_, kHeadDimV_) && kTwoLevel_;
  static constexpr int kPvChunk = kPvAfterSoftmax ? kBlockN
                                 : kHeadDimV > 128 ? 64
                                 : (kCtasPerSm == 2 && kHeadDimV == 128) || kNumMmaWarpgroups == 3 ? 32 : kHeadDimV;
  static constexpr int kNumPvChunks = kHeadDimVPerWarpgroup / kPvChunk;  // per MMA warpgroup
  // The softmax's instruction order (OnlineSoftmax::online): both row maxima first, then both row halves'
  // exponentials interleaved, where that measured faster — P V after the softmax (d256, +3-6%) and the 192-row
  // d64 tile (three warpgroups at 160 registers, +3% at 16k). The overlapped 128-row loop (d128) needs row half
  // 0's exponentials right after its own maximum (7-12% slower otherwise), the 64-row tiles lose 1-2%
  // (docs/design.md, Measured choices).
  static constexpr bool kSoftmaxRowHalvesInterleaved = kPvAfterSoftmax || kNumMmaWarpgroups == 3;

  // setmaxnreg split (per thread). The producer also transposes V (but in the swapped-operand kernels), so it keeps
  // more than a pure TMA warpgroup would. The pool the split divides is what the CTA was launched with: the per-thread count ptxas gives
  // under __launch_bounds__ (65536 / (threads x CTAs per SM), in steps of 8) times the threads — 64512 for
  // 384 threads, not 65536. A split over the pool makes setmaxnreg's allocation wait forever (a 240 + 32 split
  // hung every launch; docs/design.md, Measured choices). P V after the softmax (d256) gives the producer 48: its
  // 128-key V transpose spilled at 40, and the MMA warpgroups' 208 live accumulator and P registers fit 224.
  static constexpr int kProducerRegs = kNumMmaWarpgroups == 1 && kCtasPerSm == 1 ? 56
                                     : kNumMmaWarpgroups == 3 ? 32 : kPvAfterSoftmax ? 48 : 40;
  static constexpr int kMmaRegs = kCtasPerSm == 2 ? 216 : kNumMmaWarpgroups == 1 ? 256
                                : kNumMmaWarpgroups == 3 ? 160 : kPvAfterSoftmax ? 224 : 232;
  static constexpr int kLaunchRegsPerThread = cute::min(256, 65536 / (kNumThreads * kCtasPerSm) / 8 * 8);
  static_assert((kProducerRegs + kNumMmaWarpgroups * kMmaRegs) * 128 <= kLaunchRegsPerThread * kNumThreads,
                "register split over the CTA's launch pool");

  static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 192, "block_m is 64, 128 or 192 (1-3 MMA warpgroups)");
  static_assert(!kSplitDv || (kBlockM == 64 && kHeadDimV == 512 && kBlockN == 64 && kTwoLevel_),
                "split dv: one 64-row tile of 64-key blocks, two-level (design.md section 8)");
  static_assert(kBlockN % 32 == 0 && kBlockN <= 256, "block_n is a multiple of the FP8 WGMMA K step (32)");
  static_assert(kHeadDim % 32 == 0 && kHeadDimV % 32 == 0, "head dims are multiples of 32");
  static_assert(kHeadDimV % kPvChunk == 0 && kPvChunk % 8 == 0 && kPvChunk <= 256, "PV chunk is a WGMMA N");

  using AtomLayoutMma = Layout<Shape<Int<kNumRowWarpgroups>, _1, _1>>;
  // S = Q K^T: (kBlockM, kBlockN) accumulated over kHeadDim.
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, ElementAccum, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(),
      AtomLayoutMma{}));
  // The shape of O and of one dv chunk of it (MMA_M, kPvChunk): fragments and epilogue coordinates.
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, ElementAccum, Shape<_64, Int<kPvChunk>, Int<kBlockN>>>(),
      AtomLayoutMma{}));

  // The row sums of P as rounded to E4M3 (softmax.cuh says why) come from the tensor cores, P x ones. When P V
  // is one GEMM (two-level, unchunked), V^T carries 8 rows of E4M3 ones after its dv rows and that GEMM is
  // N = dv + 8 wide: the sums cost one more n8 block of the same instructions (measured: a separate n8 GEMM,
  // which reads the A registers again, cost 9% at d128; docs/design.md, Measured choices). Chunked P V (dv > 128,
  // two CTAs per SM) has no registers for a wider tile while the softmax runs, P V after the softmax none for a part
  // of N = kBlockN + 8 (it spilled, and ptxas serialized the WGMMAs; docs/design.md, Measured choices), and the
  // single-level kernel accumulates into O itself: they run P x ones as its own N = 8 GEMM from a separate ones
  // tile. All 8 columns of the ones block are sums, so every thread of a row's quad holds it.
  static constexpr bool kPvSumInPv = kNumPvChunks == 1 && kTwoLevel;
  static constexpr int kPvTileN = kPvSumInPv ? kPvChunk + 8 : kPvChunk;  // N of the P V GEMM
  static constexpr int kVtRows = kPvSumInPv ? kHeadDimV + 8 : kHeadDimV;  // rows of one V^T stage
  // Width of V^T's swizzle atom (k_major_swizzle_atom<Element, kBlockN>): a stage is 8-row atoms, so the 8
  // ones rows are kBlockN / kVtAtomBytes contiguous blocks of 8 x kVtAtomBytes bytes each.
  static constexpr int kVtAtomBytes = k_major_swizzle_bytes(kBlockN);
  static constexpr int kVLoadAtomBytes = k_major_swizzle_bytes(kHeadDimV);  // sVLoad's atom width (dv bytes)
  // A V^T stage one swizzle atom wide is a stack of 8-row atoms, so the rows of each P V part (from a multiple of
  // 8 on) are a V^T operand of their own (mainloop_mma.cuh).
  static_assert(!kPvAfterSoftmax || kVtAtomBytes == kBlockN, "P V parts need a V^T stage one swizzle atom wide");
  static_assert(!kPvAfterSoftmax || kHeadDimV % kBlockN == 0, "P V parts are exactly the score registers");
  // O_tile = P V^T-view (+ ones): (kBlockM, kPvTileN) accumulated over kBlockN, P from registers.
  using TiledMmaPvTile = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, ElementAccum, Shape<_64, Int<kPvTileN>, Int<kBlockN>>>(),
      AtomLayoutMma{}));
  using TiledMmaPvSum = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, ElementAccum, Shape<_64, _8, Int<kBlockN>>>(), AtomLayoutMma{}));
  // Split dv: the second MMA warpgroup's P V chunk, P from shared memory (sP, written by the first warpgroup).
  using TiledMmaPvFromSmem = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, ElementAccum, Shape<_64, Int<kPvChunk>, Int<kBlockN>>>(), AtomLayoutMma{}));

  using SmemLayoutQ = decltype(tile_to_shape(k_major_swizzle_atom<Element, kHeadDim>(),
                                             Shape<Int<kBlockM>, Int<kHeadDim>>{}));  // (BLK_M, D)
  using SmemLayoutK = decltype(tile_to_shape(k_major_swizzle_atom<Element, kHeadDim>(),
                                             Shape<Int<kBlockN>, Int<kHeadDim>, Int<kKStages>>{}));  // (BLK_N, D, KPIPE)
  // V as TMA lands it: row-major [keys, dv], swizzled like K so ldmatrix.trans reads are conflict-free. Split dv
  // keeps one stage, in the K ring's last stage (kVLoadInKRing): shared memory holds no fourth 32 KB tile, and with
  // K = V (Gemma-4) V is not loaded at all (the transpose reads the K stage, producer_load.cuh) and K takes it.
  static constexpr int kVLoadStages = kSplitDv ? 1 : kStages;
  static constexpr bool kVLoadInKRing = kSplitDv;
  using SmemLayoutVLoad = decltype(tile_to_shape(k_major_swizzle_atom<Element, kHeadDimV>(),
                                                 Shape<Int<kBlockN>, Int<kHeadDimV>, Int<kVLoadStages>>{}));  // (BLK_N, DV, VPIPE)
  // V^T for the PV GEMM: [dv (+ 8 ones rows when kPvSumInPv), key slots], K-major. Key slots follow the P
  // register order (see transpose_v.cuh).
  using SmemLayoutVt = decltype(tile_to_shape(k_major_swizzle_atom<Element, kBlockN>(),
                                              Shape<Int<kVtRows>, Int<kBlockN>, Int<kStages>>{}));  // (VT_ROWS, BLK_N, PIPE)

  // kRows rows of one V^T stage from a multiple of 8 on, as their own operand (P V after the softmax, in dv parts:
  // the stage is one swizzle atom wide, so its rows are a stack of 8-row atoms). (ROWS, BLK_N)
  template <int kRows>
  using SmemLayoutVtRows = decltype(tile_to_shape(k_major_swizzle_atom<Element, kBlockN>(), Shape<Int<kRows>, Int<kBlockN>>{}));

  // The B operand of a separate P x ones (!kPvSumInPv): 8 rows of E4M3 1.0, K-major.
  using SmemLayoutOnes = decltype(tile_to_shape(k_major_swizzle_atom<Element, kBlockN>(), Shape<_8, Int<kBlockN>>{}));  // (8, BLK_N)
  // Split dv: P of one block as the second warpgroup's P V reads it, K-major (A slots in the first warpgroup's
  // register order, which V^T's key slots follow; mainloop_split_dv.cuh).
  using SmemLayoutP = decltype(tile_to_shape(k_major_swizzle_atom<Element, kBlockN>(), Shape<Int<kBlockM>, Int<kBlockN>>{}));  // (BLK_M, BLK_N)
  // Split dv, swapped operands: P^T of one block, the B operand of O^T = V^T P^T (mainloop_swapped.cuh), in the first
  // rows of sP, K-major in V^T's key slots. (ROWS, BLK_N)
  using SmemLayoutPt = decltype(tile_to_shape(k_major_swizzle_atom<Element, kBlockN>(), Shape<Int<kSwappedRows>, Int<kBlockN>>{}));
  static constexpr int kOnesBytes = kPvSumInPv ? 0 : int(cute::cosize_v<SmemLayoutOnes>);
  static constexpr uint8_t kE4m3One = 0x38;  // E4M3 1.0 (S.0111.000)

  // K and V tiles are loaded as kBoxRows-row TMA boxes. 16 rows divide every page size fp8attn accepts
  // (multiples of 16), so one box never crosses a page and the same kernel serves dense, varlen and paged
  // K/V; the box of each page is looked up separately.
  static constexpr int kBoxRows = 16;
  static constexpr int kBoxesPerTile = kBlockN / kBoxRows;
  static_assert(kBoxesPerTile <= 32, "one lane of the load warp looks up each box's page");
  using SmemLayoutKBox = decltype(composition(take<0, 2>(SmemLayoutK{}), Shape<Int<kBoxRows>, Int<kHeadDim>>{}));      // (BOX, D)
  using SmemLayoutVBox = decltype(composition(take<0, 2>(SmemLayoutVLoad{}), Shape<Int<kBoxRows>, Int<kHeadDimV>>{}));  // (BOX, DV)

  using PipelineK = cutlass::PipelineTmaAsync<kKStages>;     // TMA -> MMA warpgroups
  using PipelineVLoad = cutlass::PipelineTmaAsync<kVLoadStages>;  // TMA -> the transpose (swapped: the second MMA warpgroup)
  using PipelineVt = cutlass::PipelineAsync<kStages>;        // producer warpgroup -> MMA warpgroups (unused if swapped)

  struct SharedStorage {
    // 1024-byte alignment: the 128-byte swizzle pattern repeats every 8 rows x 128 B.
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>> smem_q;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>> smem_k;
    // Unused (16 bytes) where V lands in the K ring's last stage (v_load_buffer).
    alignas(1024) cute::array_aligned<Element, kVLoadInKRing ? 16 : int(cute::cosize_v<SmemLayoutVLoad>)> smem_vload;
    alignas(1024) cute::array_aligned<Element, cute::cosize_v<SmemLayoutVt>> smem_vt;
    // Unused (16 bytes) when the ones rows live in sVt.
    alignas(1024) cute::array_aligned<Element, (kOnesBytes > 0 ? kOnesBytes : 16)> smem_ones;
    typename PipelineK::SharedStorage pipeline_k;
    typename PipelineVLoad::SharedStorage pipeline_vload;
    typename PipelineVt::SharedStorage pipeline_vt;
    cutlass::arch::ClusterTransactionBarrier barrier_q;
    TileCoord scheduled_tile;  // the varlen schedule's tile, found once, for the epilogue
    // q16 kernels: each tile row's Q scale (amax / 448, quantize_q.cuh); last, so that the E4M3 kernels' members
    // keep their offsets.
    float q_row_scale[kQ16 ? kBlockM : 1];
    // Split dv (mainloop_split_dv.cuh): the block's P, and per row the factor the second warpgroup applies to its O
    // half — each block's rescale, then the output scale (1 / row sum). Unused (small) otherwise. With swapped
    // operands sP holds P^T (SmemLayoutPt), a WGMMA operand whose swizzle repeats every 512 bytes: hence 1024.
    alignas(kSplitDv ? 1024 : 128) cute::array_aligned<Element, kSplitDv ? int(cute::cosize_v<SmemLayoutP>) : 16> smem_p;
    float split_dv_row_factor[kSplitDv ? kBlockM : 1];
    // Split dv, swapped operands (mainloop_swapped.cuh): per warp and query row, a block's row maximum (or, after the
    // loop, the two row sums' shares); then per query row its maximum, row sum and sum of rounded P for stage_stats.
    float swapped_exchange[kSplitDv ? 2 : 1][kSplitDv ? 4 : 1][kSplitDv ? kSwappedRows : 1];
    float swapped_row_stats[kSplitDv ? 3 : 1][kSplitDv ? kSwappedRows : 1];
    cutlass::arch::ClusterBarrier swapped_sync;  // the loop's warpgroup barrier (128 arrivals; split dv only)
    // Swapped operands: per P^T stage its rows' rescale factors for O^T, the stage's full and empty barriers (128
    // arrivals: the first, the second MMA warpgroup), and the second's O rows staged for the epilogue (128 arrivals).
    float swapped_rescale[kSwapped ? kPtStages : 1][kSwapped ? kSwappedRows : 1];
    cutlass::arch::ClusterBarrier pt_full[kSwapped ? kPtStages : 1];
    cutlass::arch::ClusterBarrier pt_empty[kSwapped ? kPtStages : 1];
    cutlass::arch::ClusterBarrier rows_staged;
#ifdef FP8ATTN_PHASE_PROBE
    uint64_t* phase_marks;  // a probe build: this CTA's row of FwdArgs::phase_marks, or nullptr (phase_probe.cuh)
#endif
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes * kCtasPerSm <= 227 * 1024, "shared memory over the SM90 limit for kCtasPerSm CTAs");

  static constexpr uint32_t kBytesQ = kBlockM * kHeadDim;
  static constexpr uint32_t kBytesK = kBlockN * kHeadDim;
  static constexpr uint32_t kBytesV = kBlockN * kHeadDimV;

  // Where V lands as loaded: sVLoad, or (split dv) the K ring's last stage, which has sVLoad's layout (d = dv).
  CUTE_HOST_DEVICE static Element* v_load_buffer(SharedStorage& smem) {
    if constexpr (kVLoadInKRing) {
      static_assert(kHeadDim == kHeadDimV && cute::cosize_v<decltype(take<0, 2>(SmemLayoutK{}))> == int(kBytesV),
                    "a K stage holds one V-as-loaded tile");
      return smem.smem_k.data() + (kKStages - 1) * kBytesK;
    } else {
      return smem.smem_vload.data();
    }
  }
};

// The K pipeline's next stage. Where V lands in the K ring's last stage and K != V, K skips that stage; the load
// warp and every K consumer advance through here, so that they agree (the skipped stage's barriers stay unused).
template <class Traits, class State>
CUTE_DEVICE void advance_k_stage(State& state, bool kv_shared) {
  ++state;
  if constexpr (Traits::kVLoadInKRing) {
    if (!kv_shared && state.index() == Traits::kKStages - 1) { ++state; }
  }
}

}  // namespace fp8attn::sm90
