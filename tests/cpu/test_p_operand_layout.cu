// The FP8 P operand's register order, checked on the CPU against CuTe's layouts for every declared kernel:
//   - scores_to_pv_operand (utils.cuh) fills word w of the P V GEMM's A fragment with the (row, A slots) that
//     p_word_position(t, w) names: the RS WGMMA's A layout must hold exactly those, in that order, or P V would
//     multiply the wrong keys;
//   - split dv (mainloop_split_dv.cuh, store_p): the score warpgroup stores each word with one 32-bit store at
//     sP(p_word_position) for the P V warpgroup's SS WGMMA; the four slots must be contiguous bytes of SmemLayoutP
//     and the 128 threads' words must cover the 64 x BLK_N tile exactly once;
//   - split dv with swapped operands (mainloop_swapped.cuh): vt_key_slot is where P's register order puts each key;
//     the loop's own index maps of S^T and O^T (query_row, block_key) are CuTe's accumulator layouts and O^T's dv
//     order (ot_value_dv) covers every dv; its P^T stores cover SmemLayoutPt exactly once; its Q rows are sQ's first
//     rows; and V^T's register fragments (VtFragments, transpose_v.cuh), emulated byte by byte from a random V stage
//     (ldmatrix.trans, the byte permutes, the mask of keys past the sequence), are what CuTe's RS A layout of O^T's
//     GEMM asks for: A slot s of accumulator row r holds V[key of slot s][dv of row r].
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "sm90/kernel_traits.cuh"
#include "sm90/mainloop_swapped.cuh"
#include "sm90/transpose_v.cuh"
#include "sm90/utils.cuh"

namespace fp8attn::sm90 {
namespace {

template <class Traits>
void check_p_operand(const std::string& name) {
  SCOPED_TRACE(name);
  constexpr int kBlockN = Traits::kBlockN;
  typename Traits::TiledMmaPV tiled_mma_pv;
  Tensor cP = make_identity_tensor(Shape<Int<Traits::kBlockM>, Int<kBlockN>>{});  // (BLK_M, BLK_N) -> (row, slot)
  std::set<std::pair<int, int>> covered;
  for (int t = 0; t < 128 * Traits::kNumRowWarpgroups; ++t) {
    Tensor tPcP = tiled_mma_pv.get_thread_slice(t).partition_A(cP);  // (MMA, MMA_M, MMA_K) -> (row, slot)
    ASSERT_EQ(int(size(tPcP)), 64 * kBlockN / 128);
    for (int v = 0; v < int(size(tPcP)); ++v) {
      const PWordPosition at = p_word_position(t, v / 4);
      const int row = get<0>(tPcP(v)), slot = get<1>(tPcP(v));
      ASSERT_EQ(row, at.row) << "thread " << t << " value " << v;
      ASSERT_EQ(slot, at.slot0 + v % 4) << "thread " << t << " value " << v;
      covered.insert({row, slot});
    }
  }
  EXPECT_EQ(int(covered.size()), Traits::kBlockM * kBlockN);
  if constexpr (Traits::kSplitDv) {
    typename Traits::SmemLayoutP layout_p;
    std::vector<int> writes(size_t(cosize(layout_p)), 0);
    for (int t = 0; t < 128; ++t) {
      for (int word = 0; word < 64 * kBlockN / 128 / 4; ++word) {
        const auto [row, slot0] = p_word_position(t, word);
        const int address = int(layout_p(row, slot0));
        ASSERT_EQ(address % 4, 0) << "the 32-bit store of thread " << t << " word " << word << " is misaligned";
        for (int e = 0; e < 4; ++e) {
          ASSERT_EQ(int(layout_p(row, slot0 + e)), address + e) << "slots of one word not contiguous in sP";
          ++writes[size_t(address + e)];
        }
      }
    }
    for (size_t i = 0; i < writes.size(); ++i) ASSERT_EQ(writes[i], 1) << "sP byte " << i << " written " << writes[i] << " times";
  }
}

// The key each A slot of P holds, from scores_to_pv_operand: slot slot0 + e of word (h, kh, kb) is score column
// 8 (j0 + e / 2) + 2 q + e % 2 of the QK^T accumulator (n8 block j0 = 4 kb + 2 kh, q = thread % 4).
TEST(POperandLayout, VtKeySlotIsWherePsRegisterOrderPutsEachKey) {
  for (int t = 0; t < 4; ++t) {
    for (int word = 0; word < 64 * 128 / 128 / 4; ++word) {
      const int kh = (word / 2) % 2, kb = word / 4;
      const int j0 = 4 * kb + 2 * kh;
      for (int e = 0; e < 4; ++e) {
        const int key = 8 * (j0 + e / 2) + 2 * t + e % 2;
        EXPECT_EQ(vt_key_slot(key), p_word_position(t, word).slot0 + e) << "thread " << t << " word " << word;
      }
    }
  }
  std::set<int> slots;
  for (int key = 0; key < 128; ++key) { slots.insert(vt_key_slot(key)); }
  EXPECT_EQ(int(slots.size()), 128);
  EXPECT_EQ(*slots.rbegin(), 127);
}

template <class Traits>
void check_swapped_operands(const std::string& name) {
  SCOPED_TRACE(name);
  using Swapped = MainloopSwapped<Traits>;
  constexpr int kRows = kSwappedRows, kBlockN = Traits::kBlockN, kDv = Traits::kHeadDimV;
  Tensor cSt = make_identity_tensor(Shape<Int<kBlockN>, Int<kRows>>{});  // (BLK_N, ROWS) -> (key, row)
  Tensor cOt = make_identity_tensor(Shape<Int<kDv>, Int<kRows>>{});      // (DV, ROWS) -> (dv, row)
  typename Traits::SmemLayoutPt layout_pt;
  std::vector<int> pt_writes(size_t(cosize(layout_pt)), 0);
  std::set<std::pair<int, int>> scores, outputs;
  for (int t = 0; t < 128; ++t) {
    Tensor tScS = typename Swapped::TiledMmaSt{}.get_thread_slice(t).partition_C(cSt);  // (MMA, 1, 1) -> (key, row)
    ASSERT_EQ(int(size(tScS)), 4);
    for (int i = 0; i < 4; ++i) {
      const int key = Swapped::block_key(t, AccumulatorIndex::row_half(i));
      const int row = Swapped::query_row(t, AccumulatorIndex::column(i));
      ASSERT_EQ(int(get<0>(tScS(i))), key) << "thread " << t << " value " << i;
      ASSERT_EQ(int(get<1>(tScS(i))), row) << "thread " << t << " value " << i;
      scores.insert({key, row});
      ++pt_writes[size_t(layout_pt(row, vt_key_slot(key)))];
    }
    Tensor tOcO = typename Swapped::TiledMmaOt{}.get_thread_slice(t).partition_C(cOt);  // (MMA, DV/64, 1) -> (row, col)
    ASSERT_EQ(int(size(tOcO)), kDv * kRows / 128);
    for (int i = 0; i < int(size(tOcO)); ++i) {
      const int acc_row = 64 * (i / AccumulatorIndex::kValuesPerBlock) + Swapped::block_key(t, AccumulatorIndex::row_half(i));
      ASSERT_EQ(int(get<0>(tOcO(i))), acc_row) << "thread " << t << " value " << i;
      ASSERT_EQ(int(get<1>(tOcO(i))), Swapped::query_row(t, AccumulatorIndex::column(i))) << "thread " << t;
      // The accumulator row holds the dv that V^T's fragments put there (check_vt_fragments).
      const int dv = Swapped::ot_value_dv(t, i);
      ASSERT_EQ(dv, 64 * (acc_row / 64) + VtFragmentPlan<Traits>::ot_row_dv(acc_row % 64)) << "thread " << t;
      outputs.insert({dv, int(get<1>(tOcO(i)))});
    }
  }
  EXPECT_EQ(int(scores.size()), kBlockN * kRows);
  EXPECT_EQ(int(outputs.size()), kDv * kRows);
  for (size_t i = 0; i < pt_writes.size(); ++i) ASSERT_EQ(pt_writes[i], 1) << "sPt byte " << i;
  typename Traits::SmemLayoutQ layout_q;
  typename Swapped::SmemLayoutQRows layout_q_rows;
  for (int r = 0; r < kRows; ++r) {
    for (int k = 0; k < Traits::kHeadDim; ++k) { ASSERT_EQ(int(layout_q_rows(r, k)), int(layout_q(r, k))); }
  }
}

// __byte_perm(x, y, selector) as the PTX prmt instruction defines it (default mode).
uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t selector) {
  const uint64_t bytes = uint64_t(x) | (uint64_t(y) << 32);
  uint32_t out = 0;
  for (int n = 0; n < 4; ++n) { out |= uint32_t((bytes >> (8 * ((selector >> (4 * n)) & 7))) & 0xff) << (8 * n); }
  return out;
}

// VtFragments::load, emulated on the CPU for one warpgroup, against CuTe's RS A layout of the O^T GEMM.
template <class Traits>
void check_vt_fragments(const std::string& name) {
  SCOPED_TRACE(name);
  using Plan = VtFragmentPlan<Traits>;
  using Swapped = MainloopSwapped<Traits>;
  constexpr int kBlockN = Traits::kBlockN, kDv = Traits::kHeadDimV;
  typename VTransposePlan<Traits>::LayoutLoadStage layout_stage;  // (BLK_N, DV) -> byte offset
  // Every lane's ldmatrix row address is the stage layout's offset of its (key, dv) row start.
  for (int warp = 0; warp < 4; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int m = 0; m < Plan::kMTiles; ++m) {
        for (int k = 0; k < Plan::kKSteps; ++k) {
          ASSERT_EQ(Plan::address(Plan::lane_offset(warp, lane), m, k),
                    uint32_t(layout_stage(32 * k + lane, 64 * m + 16 * warp)))
              << "warp " << warp << " lane " << lane << " m " << m << " k " << k;
        }
      }
    }
  }
  std::mt19937 rng(20261207);
  std::vector<uint8_t> stage(size_t(cosize(layout_stage)));
  for (auto& b : stage) { b = uint8_t(rng()); }
  auto v_at = [&](int key, int dv) { return stage[size_t(layout_stage(key, dv))]; };
  std::vector<int> key_of_slot(kBlockN);
  for (int key = 0; key < kBlockN; ++key) { key_of_slot[size_t(vt_key_slot(key))] = key; }
  typename Swapped::TiledMmaOt tiled_mma_ot;
  Tensor cVt = make_identity_tensor(Shape<Int<kDv>, Int<kBlockN>>{});  // (DV, BLK_N) -> (accumulator row, slot)
  // The fragment tensor run_ot fills (make_tensor of partition_shape_A) and the partition checked here: one shape, so
  // that a flat index names the same value in both.
  using FragmentShape = decltype(partition_shape_A(tiled_mma_ot, Shape<Int<kDv>, Int<kBlockN>>{}));
  using PartitionShape = decltype(shape(tiled_mma_ot.get_thread_slice(0).partition_A(cVt)));
  static_assert(std::is_same_v<FragmentShape, PartitionShape>, "V^T's fragment and CuTe's partition of A");
  for (const int valid_keys : {kBlockN, 40, 37, 32, 1}) {
    for (int t = 0; t < 128; ++t) {
      const int warp = t / 32, lane = t % 32, q = lane % 4, g = lane / 4;
      const int lane_keys_left = Plan::lane_keys_left(valid_keys, t);
      Tensor tAcA = tiled_mma_ot.get_thread_slice(t).partition_A(cVt);  // (MMA, DV/64, BLK_N/32) -> (row, slot)
      ASSERT_EQ(int(size(tAcA)), 4 * Plan::kWords);
      for (int m = 0; m < Plan::kMTiles; ++m) {
        for (int k = 0; k < Plan::kKSteps; ++k) {
          uint32_t r[4];
          for (int i = 0; i < 4; ++i) {
            // ldmatrix .trans: from matrix i (rows = keys, addressed by lanes 8 i .. 8 i + 7), lane l receives the
            // b16 element (row 2 (l % 4), column l / 4) and the one of the next row.
            const uint32_t row0 = Plan::address(Plan::lane_offset(warp, 8 * i + 2 * q), m, k);
            const uint32_t row1 = Plan::address(Plan::lane_offset(warp, 8 * i + 2 * q + 1), m, k);
            r[i] = uint32_t(stage[row0 + 2 * g]) | uint32_t(stage[row0 + 2 * g + 1]) << 8 |
                   uint32_t(stage[row1 + 2 * g]) << 16 | uint32_t(stage[row1 + 2 * g + 1]) << 24;
            if (valid_keys < kBlockN) { r[i] &= Plan::key_mask(k, i, lane_keys_left); }
          }
          for (int w = 0; w < 4; ++w) {
            const int first = Plan::word_first_register(w);
            const uint32_t word = byte_perm(r[first], r[first + 1], Plan::word_selector(w));
            for (int e = 0; e < 4; ++e) {
              const auto coord = tAcA(4 * Plan::fragment_word(w, m, k) + e);
              const int row = get<0>(coord), slot = get<1>(coord);
              const int key = key_of_slot[size_t(slot)];
              const int dv = 64 * (row / 64) + Plan::ot_row_dv(row % 64);
              const uint8_t want = key < valid_keys ? v_at(key, dv) : 0;
              ASSERT_EQ(int((word >> (8 * e)) & 0xff), int(want))
                  << "thread " << t << " m " << m << " k " << k << " word " << w << " byte " << e << " (row " << row
                  << ", slot " << slot << ", key " << key << ", dv " << dv << ", valid keys " << valid_keys << ")";
            }
          }
        }
      }
    }
  }
}

template <class Traits>
struct TraitsTag {
  using type = Traits;
};

// Calls check(TraitsTag<Traits>{}, name) for every declared swapped-operand kernel; returns how many there are.
template <class Check>
int for_each_swapped_kernel(Check&& check) {
  int kernels = 0;
#define FP8ATTN_KERNEL(D, DV, BM, BN, TL, VS, Q16, SW)                                                    \
  if constexpr (KernelTraits<D, DV, BM, BN, bool(TL), bool(VS), bool(Q16), bool(SW)>::kSwapped) {          \
    check(TraitsTag<KernelTraits<D, DV, BM, BN, bool(TL), bool(VS), bool(Q16), bool(SW)>>{},              \
          std::string("d" #D " dv" #DV " m" #BM " n" #BN " q16 " #Q16 " swapped"));                       \
    ++kernels;                                                                                            \
  }
#include "kernel_list_all.inc"
#undef FP8ATTN_KERNEL
  return kernels;
}

TEST(POperandLayout, VtFragmentsForEverySwappedKernel) {
  const int kernels = for_each_swapped_kernel(
      [](auto tag, const std::string& name) { check_vt_fragments<typename decltype(tag)::type>(name); });
  EXPECT_EQ(kernels, 2) << "the d512 swapped-operand kernels: E4M3 Q and 16-bit Q";
}

TEST(POperandLayout, SwappedOperandsForEverySplitDvKernel) {
  const int kernels = for_each_swapped_kernel(
      [](auto tag, const std::string& name) { check_swapped_operands<typename decltype(tag)::type>(name); });
  EXPECT_EQ(kernels, 2) << "the d512 swapped-operand kernels: E4M3 Q and 16-bit Q";
}

TEST(POperandLayout, RegisterOrderAndSplitDvStoresForEveryDeclaredKernel) {
  int kernels = 0;
#define FP8ATTN_KERNEL(D, DV, BM, BN, TL, VS, Q16, SW)                                                          \
  check_p_operand<KernelTraits<D, DV, BM, BN, bool(TL), bool(VS), bool(Q16), bool(SW)>>(                       \
      "d" #D " dv" #DV " m" #BM " n" #BN " tl" #TL " vs" #VS " q16 " #Q16 " sw" #SW);                           \
  ++kernels;
#include "kernel_list_all.inc"
#undef FP8ATTN_KERNEL
  EXPECT_GE(kernels, 12);
}

}  // namespace
}  // namespace fp8attn::sm90
