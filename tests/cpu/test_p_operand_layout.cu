// The FP8 P operand's register order, checked on the CPU against CuTe's layouts for every declared kernel:
//   - scores_to_pv_operand (utils.cuh) fills word w of the P V GEMM's A fragment with the (row, A slots) that
//     p_word_position(t, w) names: the RS WGMMA's A layout must hold exactly those, in that order, or P V would
//     multiply the wrong keys;
//   - split dv (mainloop_split_dv.cuh, store_p): the score warpgroup stores each word with one 32-bit store at
//     sP(p_word_position) for the P V warpgroup's SS WGMMA; the four slots must be contiguous bytes of SmemLayoutP
//     and the 128 threads' words must cover the 64 x BLK_N tile exactly once.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "sm90/kernel_traits.cuh"
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

TEST(POperandLayout, RegisterOrderAndSplitDvStoresForEveryDeclaredKernel) {
  int kernels = 0;
#define FP8ATTN_KERNEL(D, DV, BM, BN, TL, VS, Q16)                                                              \
  check_p_operand<KernelTraits<D, DV, BM, BN, bool(TL), bool(VS), bool(Q16)>>(                                 \
      "d" #D " dv" #DV " m" #BM " n" #BN " tl" #TL " vs" #VS " q16 " #Q16);                                     \
  ++kernels;
#include "kernel_list_all.inc"
#undef FP8ATTN_KERNEL
  EXPECT_GE(kernels, 12);
}

}  // namespace
}  // namespace fp8attn::sm90
