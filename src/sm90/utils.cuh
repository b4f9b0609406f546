// fp8attn SM90 forward: small device helpers shared by the warp roles.
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>

#include "sm90/ptx.cuh"

namespace fp8attn::sm90 {

using namespace cute;

// The named barriers (bar.sync ids, cutlass::arch::NamedBarrier's user ids 0-7: hardware barriers 8-15) the kernels
// use; CUTLASS's pipelines synchronize through mbarriers instead.
// Each id is an immediate at its call site: a register id makes ptxas reserve all 16.
enum NamedBarrierId : uint32_t {
  kEpilogueWarpgroup0 = 0,  // one MMA warpgroup's staged output rows (epilogue.cuh), per warpgroup
  kEpilogueWarpgroup1 = 1,
  kEpilogueWarpgroup2 = 2,
  kQuantizeQWarpgroup0 = 3,  // one MMA warpgroup's rows of a 16-bit Q, quantized into sQ (quantize_q.cuh)
  kQuantizeQWarpgroup1 = 4,
  kQuantizeQWarpgroup2 = 5,
  kSplitDvPFull = 6,   // split dv: the score warpgroup has written P and the row factors (mainloop_split_dv.cuh)
  kSplitDvPEmpty = 7,  // split dv: the P V warpgroup has read them
  // Split dv: both MMA warpgroups' rows of a 16-bit Q are in sQ (quantize_q.cuh). The split-dv kernels have no
  // per-warpgroup quantizer barriers, so this one takes the first's id: CUTLASS's NamedBarrier offers 8 (0-7).
  kQuantizeQSplitDv = kQuantizeQWarpgroup0,
};
static_assert(kSplitDvPEmpty < cutlass::arch::NamedBarrier::HardwareMaxNumNamedBarriers -
                                 cutlass::arch::NamedBarrier::ReservedNamedBarrierCount,
              "NamedBarrier user ids are 0-7");

// Synchronizes the 128 threads of MMA warpgroup `warpgroup` (0-based) on its own barrier of a per-warpgroup triple
// kFirst, kFirst + 1, kFirst + 2 (NamedBarrierId), each id an immediate at its call site.
template <int kNumMmaWarpgroups, uint32_t kFirst>
CUTE_DEVICE void warpgroup_named_sync(int warpgroup) {
  if (warpgroup == 0) {
    cutlass::arch::NamedBarrier::sync(128, kFirst);
  } else if (kNumMmaWarpgroups == 2 || warpgroup == 1) {
    cutlass::arch::NamedBarrier::sync(128, kFirst + 1);
  } else {
    cutlass::arch::NamedBarrier::sync(128, kFirst + 2);
  }
}

// Reductions over the 4 threads of a quad, which together hold one accumulator row.
CUTE_DEVICE float quad_allreduce_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
CUTE_DEVICE float quad_allreduce_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// The WGMMA K steps of one warpgroup GEMM, to be bracketed by warpgroup_arrive() and
// warpgroup_commit_batch() by the caller, which decides when to wait. kZeroInit starts the accumulator
// from zero (the first K step uses ScaleOut::Zero): that makes each PV tile a separate first-level sum
// for two-level accumulation.
template <bool kZeroInit, class TiledMma, class TensorA, class TensorB, class TensorC>
CUTE_DEVICE void gemm_k_steps(TiledMma& tiled_mma, TensorA const& tCrA, TensorB const& tCrB, TensorC& tCrC) {
  if constexpr (kZeroInit) { tiled_mma.accumulate_ = GMMA::ScaleOut::Zero; }
  CUTE_UNROLL
  for (int k = 0; k < size<2>(tCrA); ++k) {
    cute::gemm(tiled_mma, tCrA(_, _, k), tCrB(_, _, k), tCrC);
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

// One thread's part of an SM90 WGMMA accumulator (an M x N fp32 tile over a warpgroup) is a flat fragment of 4
// values per n8 block: value i = c + 2*h + 4*j is column c of the thread's column pair in n8 block j, in row half
// h (the thread's rows r and r + 8). Every loop over a fragment that needs a value's row half or block goes
// through this map, so it is written once. (A CuTe (row, column) view of the fragment, as FA3's
// convert_layout_acc_rowcol, computes the same indices but changed ptxas's schedule of the kernels:
// docs/perf.md, "What was tried and lost".)
struct AccumulatorIndex {
  static constexpr int kValuesPerBlock = 4;  // 2 columns x 2 row halves
  CUTE_HOST_DEVICE static constexpr int of(int column, int row_half, int block) {
    return column + 2 * row_half + kValuesPerBlock * block;
  }
  CUTE_HOST_DEVICE static constexpr int row_half(int i) { return (i / 2) % 2; }
  CUTE_HOST_DEVICE static constexpr int column(int i) { return i % 2; }
};

// Scores (an accumulator fragment, AccumulatorIndex) to the FP8 A operand of the PV WGMMA (flat index e + 4*h + 8*kh + 16*kb: 4 consecutive K slots e,
// row half h, K half kh, K block kb of 32). No value crosses threads: A slot 16*kh + 4*q + e of thread q
// (lane % 4) takes the score of key 8*(e/2) + 2*q + (e%2) + 16*kh, i.e. n8 block 4*kb + 2*kh + e/2.
// The producer writes V^T in exactly that key order (see producer_load.cuh), so P V is unchanged.
template <class TensorS, class TensorP>
CUTE_DEVICE void scores_to_pv_operand(TensorS const& tSrS, TensorP& tOrP) {
  static_assert(sizeof(typename TensorP::value_type) == 1, "P is FP8");
  static_assert(decltype(size(tOrP))::value == decltype(size(tSrS))::value, "P and S hold the same values");
  Tensor tOrP_u32 = recast<uint32_t>(tOrP);  // word = (h, kh, kb) holding 4 slots e
  // Each 32-key block kb holds 16 scores per thread: 2 rows x 8 columns.
  CUTE_UNROLL
  for (int kb = 0; kb < decltype(size(tSrS))::value / 16; ++kb) {
    CUTE_UNROLL
    for (int kh = 0; kh < 2; ++kh) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int j0 = 4 * kb + 2 * kh;  // n8 block of slots e = 0, 1; j0 + 1 holds e = 2, 3
        using Acc = AccumulatorIndex;
        const uint32_t lo = pack_e4m3x2(tSrS(Acc::of(0, h, j0)), tSrS(Acc::of(1, h, j0)));
        const uint32_t hi = pack_e4m3x2(tSrS(Acc::of(0, h, j0 + 1)), tSrS(Acc::of(1, h, j0 + 1)));
        tOrP_u32(h + 2 * kh + 4 * kb) = lo | (hi << 16);
      }
    }
  }
}

// Tile row of row half h (0: rows 0-7, 1: rows 8-15 of the warp's 16) in an SM90 accumulator held by
// MMA thread mma_thread (warpgroup w owns rows 64w .. 64w + 63; warp k of it 16 rows; lane / 4 the row).
CUTE_HOST_DEVICE constexpr int accumulator_row(int mma_thread, int h) {
  return (mma_thread / 128) * 64 + ((mma_thread % 128) / 32) * 16 + (mma_thread % 32) / 4 + 8 * h;
}

// Where word `word` (4 FP8 A slots) of MMA thread mma_thread's P operand, in scores_to_pv_operand's order (word = h
// + 2 kh + 4 kb), sits in the P tile: row accumulator_row(mma_thread, h), A slots slot0 .. slot0 + 3. The split-dv
// kernels store P to shared memory by it (mainloop_split_dv.cuh); tests/cpu/test_p_operand_layout.cu checks it
// against the RS WGMMA's A layout.
struct PWordPosition {
  int row, slot0;
};
CUTE_HOST_DEVICE constexpr PWordPosition p_word_position(int mma_thread, int word) {
  return {accumulator_row(mma_thread, word % 2), 32 * (word / 4) + 16 * ((word / 2) % 2) + 4 * (mma_thread % 4)};
}

// The V^T key slot (column of a V^T stage, the PV GEMM's K index) that holds key `key` of the block: the inverse of
// scores_to_pv_operand's order, slot 32 kb + 16 kh + 4 q + e holding key 32 kb + 16 kh + 8 (e / 2) + 2 q + e % 2. The
// swapped-operand loop writes P^T at these slots (mainloop_swapped.cuh); tests/cpu/test_p_operand_layout.cu checks
// that every key gets the slot P's register order gives it.
CUTE_HOST_DEVICE constexpr int vt_key_slot(int key) {
  const int in16 = key % 16;
  return key - in16 + 4 * ((in16 % 8) / 2) + 2 * (in16 / 8) + in16 % 2;
}

}  // namespace fp8attn::sm90
