// The V transpose's shared-memory plan (src/sm90/transpose_v.cuh), checked on the CPU for every declared kernel
// configuration: its position-independent addresses equal the CuTe layouts the TMA writes and the WGMMAs
// read, an emulation of ldmatrix.trans / byte permute / stmatrix puts every key in the slot the P registers
// expect (and zeros past the valid keys), every sVt byte is written once, and no ldmatrix or stmatrix matrix
// touches a 16-byte bank group twice. The transpose reads V as loaded (sVLoad), or with split dv and K = V the K
// stage (producer_load.cuh): both layouts are checked.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "sm90/kernel_traits.cuh"
#include "sm90/transpose_v.cuh"

namespace fp8attn::sm90 {
namespace {

// Key held by sVt key slot `slot` (the P register order, see scores_to_pv_operand in utils.cuh).
int key_of_slot(int slot) {
  const int q = (slot % 16) / 4, e = slot % 4;
  return 16 * (slot / 16) + 2 * q + (e % 2) + 8 * (e / 2);
}

uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t selector) {
  const uint64_t bytes = uint64_t(x) | (uint64_t(y) << 32);
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t index = (selector >> (4 * i)) & 7u;
    out |= uint32_t((bytes >> (8 * index)) & 0xffu) << (8 * i);
  }
  return out;
}

uint8_t v_value(int key, int dv) { return uint8_t((key * 131 + dv * 7 + 1) % 251 + 1); }  // never 0

// LayoutLoad: the buffer the transpose reads, (BLK_N, DV, its stages). Its stage s pairs with V^T stage s here (a
// buffer of fewer stages: s modulo its count).
template <class Traits, class LayoutLoad>
struct PlanChecker {
  using Plan = VTransposePlan<Traits>;
  static constexpr int kStages = Traits::kStages;  // V^T's
  static constexpr int kLoadStages = decltype(size<2>(LayoutLoad{}))::value;
  static int load_stage(int stage) { return stage % kLoadStages; }
  std::string name;

  // Matrix rows (16 bytes each) of one ldmatrix/stmatrix: 8 lanes per matrix; no two rows in one 16-byte bank
  // group (address / 16 mod 8), so one matrix is served in one shared-memory wavefront.
  void expect_conflict_free(const uint32_t (&address)[32], const char* what, int unit) const {
    for (int m = 0; m < 4; ++m) {
      std::set<uint32_t> groups;
      for (int r = 0; r < 8; ++r) { groups.insert((address[8 * m + r] / 16) % 8); }
      EXPECT_EQ(groups.size(), 8u) << name << ": " << what << " of unit " << unit << ", matrix " << m
                                   << " is bank-conflicted";
    }
  }

  void check_addresses() const {
    LayoutLoad layout_load;
    typename Traits::SmemLayoutVt layout_store;
    for (int stage = 0; stage < kStages; ++stage) {
      for (int unit = 0; unit < Plan::kUnits; ++unit) {
        const int key0 = 16 * Plan::key_group(unit), dv0 = 32 * Plan::dv_block(unit);
        for (int lane = 0; lane < 32; ++lane) {
          const uint32_t load =
              Plan::load_address(load_stage(stage) * Plan::kLoadStageBytes + Plan::load_lane_offset(lane), unit);
          const uint32_t load_expected = uint32_t(
              layout_load(key0 + Plan::load_lane_key(lane), dv0 + Plan::load_lane_byte(lane), load_stage(stage)));
          ASSERT_EQ(load, load_expected) << name << ": ldmatrix address, stage " << stage << " unit " << unit
                                         << " lane " << lane;
          const uint32_t store = Plan::store_address(stage * Plan::kStoreStageBytes + Plan::store_lane_offset(lane), unit);
          const uint32_t store_expected = uint32_t(layout_store(dv0 + Plan::store_lane_dv(lane), key0, stage));
          ASSERT_EQ(store, store_expected) << name << ": stmatrix address, stage " << stage << " unit " << unit
                                           << " lane " << lane;
        }
      }
    }
  }

  // dv passes (Plan::kDvPasses > 1): the kernel runs units 0..kUnitsPerPass-1 once per pass from bases moved by
  // p * kPassBytes; that must be unit p * kUnitsPerPass + u, so the passes together are the whole unit list.
  void check_passes() const {
    for (int stage = 0; stage < kStages; ++stage) {
      for (int pass = 0; pass < Plan::kDvPasses; ++pass) {
        for (int u = 0; u < Plan::kUnitsPerPass; ++u) {
          const int unit = pass * Plan::kUnitsPerPass + u;
          for (int lane = 0; lane < 32; ++lane) {
            const uint32_t load_base = load_stage(stage) * Plan::kLoadStageBytes + Plan::load_lane_offset(lane);
            const uint32_t store_base = stage * Plan::kStoreStageBytes + Plan::store_lane_offset(lane);
            ASSERT_EQ(Plan::load_address(load_base + pass * Plan::kPassBytes, u), Plan::load_address(load_base, unit))
                << name << ": ldmatrix address of pass " << pass << " unit " << u << " lane " << lane;
            ASSERT_EQ(Plan::store_address(store_base + pass * Plan::kPassBytes, u), Plan::store_address(store_base, unit))
                << name << ": stmatrix address of pass " << pass << " unit " << u << " lane " << lane;
            ASSERT_EQ(Plan::key_group(u), Plan::key_group(unit)) << name << ": the mask of pass " << pass;
          }
        }
      }
    }
  }

  // The ones rows of every stage (kPvSumInPv) are the blocks fwd_kernel.cuh fills with 16-byte stores: per stage
  // and atom column, 8 x kVtAtomBytes contiguous bytes starting at the atom's first element.
  void check_ones_blocks() const {
    if constexpr (Traits::kPvSumInPv) {
      typename Traits::SmemLayoutVt layout_store;
      for (int stage = 0; stage < kStages; ++stage) {
        for (int atom = 0; atom < Traits::kBlockN / Traits::kVtAtomBytes; ++atom) {
          const int col0 = atom * Traits::kVtAtomBytes;
          const int64_t first = layout_store(Traits::kHeadDimV, col0, stage);
          ASSERT_EQ(first % 16, 0) << name << ": ones block not 16-byte aligned";
          std::set<int64_t> expected;
          for (int r = 0; r < 8; ++r)
            for (int c = 0; c < Traits::kVtAtomBytes; ++c)
              expected.insert(layout_store(Traits::kHeadDimV + r, col0 + c, stage));
          ASSERT_EQ(int64_t(expected.size()), int64_t(8 * Traits::kVtAtomBytes));
          ASSERT_EQ(*expected.begin(), first) << name << ": stage " << stage << " atom " << atom;
          ASSERT_EQ(*expected.rbegin(), first + 8 * Traits::kVtAtomBytes - 1) << name << ": stage " << stage;
        }
      }
    }
  }

  // Emulates the three transpose warps on one stage; valid_keys < BLK_N exercises the masked path.
  void check_data(int valid_keys) const {
    LayoutLoad layout_load;
    typename Traits::SmemLayoutVt layout_store;
    const int stage = kStages - 1;  // the last stage: stage offsets included
    std::vector<uint8_t> smem_load(size_t(cosize(layout_load)), 0);
    std::vector<uint8_t> smem_store(size_t(cosize(layout_store)), 0);
    std::vector<int> writes(smem_store.size(), 0);
    for (int key = 0; key < Traits::kBlockN; ++key) {
      for (int dv = 0; dv < Traits::kHeadDimV; ++dv) {
        smem_load[layout_load(key, dv, load_stage(stage))] = v_value(key, dv);
      }
    }
    int units_done = 0;
    for (int warp = 0; warp < Plan::kWarps; ++warp) {
      for (int unit = warp; unit < Plan::kUnits; unit += Plan::kWarps, ++units_done) {
        uint32_t load_address[32], store_address[32], regs[32][4];
        for (int lane = 0; lane < 32; ++lane) {
          load_address[lane] =
              Plan::load_address(load_stage(stage) * Plan::kLoadStageBytes + Plan::load_lane_offset(lane), unit);
          store_address[lane] = Plan::store_address(stage * Plan::kStoreStageBytes + Plan::store_lane_offset(lane), unit);
        }
        expect_conflict_free(load_address, "ldmatrix", unit);
        expect_conflict_free(store_address, "stmatrix", unit);
        // ldmatrix.x4.trans (b16): register m of thread t = element (row 2q, col p) and (row 2q+1, col p) of
        // matrix m, q = t % 4, p = t / 4; a b16 element is 2 bytes of a 16-byte row.
        for (int t = 0; t < 32; ++t) {
          const int q = t % 4, p = t / 4;
          for (int m = 0; m < 4; ++m) {
            const uint8_t* row0 = &smem_load[load_address[8 * m + 2 * q]];
            const uint8_t* row1 = &smem_load[load_address[8 * m + 2 * q + 1]];
            regs[t][m] = uint32_t(row0[2 * p]) | uint32_t(row0[2 * p + 1]) << 8 | uint32_t(row1[2 * p]) << 16 |
                         uint32_t(row1[2 * p + 1]) << 24;
            // The kernel's mask, in its form: the unit's key offset against the lane's valid keys left.
            const int key = 16 * Plan::key_group(unit) + 8 * (m % 2), keys_left = valid_keys - 2 * q;
            if (valid_keys < Traits::kBlockN) {
              regs[t][m] &= (key < keys_left ? 0x0000ffffu : 0u) | (key + 1 < keys_left ? 0xffff0000u : 0u);
            }
          }
        }
        // byte permutes, then stmatrix.x4 (b16): register m of thread t = bytes 4q..4q+3 of row t / 4 of matrix m.
        for (int t = 0; t < 32; ++t) {
          const uint32_t first = Plan::first_selector(t), second = Plan::second_selector(t);
          const uint32_t out[4] = {byte_perm(regs[t][0], regs[t][1], first), byte_perm(regs[t][0], regs[t][1], second),
                                   byte_perm(regs[t][2], regs[t][3], first), byte_perm(regs[t][2], regs[t][3], second)};
          for (int m = 0; m < 4; ++m) {
            const uint32_t address = store_address[8 * m + t / 4] + 4 * (t % 4);
            for (int b = 0; b < 4; ++b) {
              smem_store[address + b] = uint8_t(out[m] >> (8 * b));
              ++writes[address + b];
            }
          }
        }
      }
    }
    ASSERT_EQ(units_done, Plan::kUnits);
    for (int dv = 0; dv < Traits::kHeadDimV; ++dv) {
      for (int slot = 0; slot < Traits::kBlockN; ++slot) {
        const int key = key_of_slot(slot);
        const size_t at = layout_store(dv, slot, stage);
        const uint8_t expected = key < valid_keys ? v_value(key, dv) : 0;
        ASSERT_EQ(writes[at], 1) << name << ": sVt(" << dv << ", " << slot << ") written " << writes[at] << " times";
        ASSERT_EQ(smem_store[at], expected) << name << ": sVt(" << dv << ", slot " << slot << " = key " << key
                                            << "), valid_keys " << valid_keys;
      }
    }
  }
};

template <class Traits, class LayoutLoad>
void check_plan(const std::string& name) {
  PlanChecker<Traits, LayoutLoad> checker{name};
  SCOPED_TRACE(checker.name);
  checker.check_addresses();
  checker.check_passes();
  checker.check_ones_blocks();
  for (int valid_keys : {Traits::kBlockN, Traits::kBlockN - 1, 17, 1}) { checker.check_data(valid_keys); }
}

template <int kD, int kDv, int kBlockM, int kBlockN, bool kTwoLevel>
void check_kernel() {
  using Traits = KernelTraits<kD, kDv, kBlockM, kBlockN, kTwoLevel>;
  const std::string name = "d" + std::to_string(kD) + " dv" + std::to_string(kDv) + " m" + std::to_string(kBlockM) +
                           " n" + std::to_string(kBlockN);
  check_plan<Traits, typename Traits::SmemLayoutVLoad>(name);
  if constexpr (Traits::kSplitDv && kD == kDv) {
    check_plan<Traits, typename Traits::SmemLayoutK>(name + ", K = V (V read from the K stage)");
  }
}

TEST(TransposePlan, AddressesDataAndBanksForEveryDeclaredKernel) {
  int kernels = 0;
#define FP8ATTN_KERNEL(D, DV, BM, BN, TL, VS, Q16, SW) \
  check_kernel<D, DV, BM, BN, bool(TL)>();               \
  ++kernels;
#include "kernel_list_all.inc"
#undef FP8ATTN_KERNEL
  EXPECT_GE(kernels, 12);
}

}  // namespace
}  // namespace fp8attn::sm90
