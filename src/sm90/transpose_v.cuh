// fp8attn SM90 forward, the V transpose: producer warps 1-3, sVLoad [keys, dv] -> sVt [dv, key slots]; and, for the
// swapped-operand d512 decode tile, the same transpose into registers (VtFragmentPlan, VtFragments, at the end).
//
// FP8 WGMMA reads B only K-major, V arrives [keys, dv] and TMA cannot transpose, so every V tile is rewritten
// in shared memory. The work is split into units of 16 keys x 32 dv bytes: one ldmatrix.x4.trans (b16) reads
// the unit, two byte permutes per register pair split even and odd bytes, one stmatrix.x4 writes it. Within
// every 16 keys k0..k0+15, key slot 4q + e of sVt holds key k0 + {2q, 2q+1, 2q+8, 2q+9}[e]: the order in
// which scores_to_pv_operand() leaves P in registers, so P needs no shuffles.
//
// Why it is built this way (docs/design.md): the transpose used to cost 30-42% of prefill time, because
// each unit recomputed its swizzled generic addresses (~55 of ~88 instructions per unit), ran one unit at a
// time and stored 2-way bank-conflicted rows. Here:
//  * Addresses are position independent. The shared-memory swizzles are XOR maps on address bits, so the
//    offset of (lane part + unit part) is lane_offset ^ unit_offset as long as the two parts do not share
//    bits; the unit part is a compile-time constant (every warp's unit list is unrolled with its warp index
//    as a template argument), and one LOP3 per ldmatrix / stmatrix remains. tests/cpu/test_transpose_plan.cu
//    checks every lane x unit x stage against the CuTe layouts, for every kernel configuration.
//  * Two units are in flight: the next unit's ldmatrix is issued before this unit's permutes and store.
//  * Conflict-free stmatrix: a stmatrix matrix takes its row r from lanes 4r..4r+3, which hold dv columns
//    c = dv0 + 2r and c + 1. Rows 0-3 store column c and rows 4-7 column c + 1 (lanes 16-31 swap their even
//    and odd byte selectors, same instruction count), so the 8 rows of one matrix cover 8 distinct rows
//    mod 8 of sVt and hit 8 distinct 16-byte bank groups under every swizzle fp8attn uses (32/64/128 B).
//    Nothing is permuted in dv, so O needs no fix-up.
#pragma once

#include <cstdint>

#include <cute/tensor.hpp>

#include "sm90/ptx.cuh"

namespace fp8attn::sm90 {

using namespace cute;

// An ldmatrix.trans register of V holds a lane's two consecutive keys, two bytes each: the mask that keeps the keys
// the block has and zeroes the rest (0 * NaN would not be 0). key: the register's first key minus the lane's
// 2 * (lane % 4); lane_keys_left: the block's valid keys minus the same, so each test compares with a constant.
CUTE_HOST_DEVICE constexpr uint32_t valid_key_pair_mask(int key, int lane_keys_left) {
  return (key < lane_keys_left ? 0x0000ffffu : 0u) | (key + 1 < lane_keys_left ? 0xffff0000u : 0u);
}

// Shared-memory offsets of the V transpose for one kernel configuration; host-callable so that the CPU tests
// can check them against the CuTe layouts the TMA and the WGMMAs use.
template <class Traits>
struct VTransposePlan {
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDimV = Traits::kHeadDimV;
  static constexpr int kKeyGroups = kBlockN / 16;    // 16 keys per unit
  static constexpr int kDvBlocks = kHeadDimV / 32;   // 32 dv bytes per unit
  static constexpr int kUnits = kKeyGroups * kDvBlocks;
  static constexpr int kWarps = Traits::kNumTransposeThreads / 32;
  // Tiles of more than 32 units with V^T one swizzle atom wide (the 128-key d256 tile: 64 units) are transposed
  // in passes, a loop over the same unit list at an offset of kPassBytes in both buffers: unrolled whole, the
  // 22 units per warp of a d256 tile spilled the producer's registers. A pass is one atom column of sVLoad
  // (kVLoadAtomBytes of dv, BLK_N rows) and as many rows of sVt (a stack of 8-row atoms), so unit
  // p * kUnitsPerPass + u is unit u moved by p * kPassBytes in both (tests/cpu/test_transpose_plan.cu checks it).
  static constexpr int kDvPasses = kUnits > 32 && Traits::kVtAtomBytes == kBlockN ? kHeadDimV / Traits::kVLoadAtomBytes : 1;
  static constexpr int kUnitsPerPass = kUnits / kDvPasses;
  static constexpr uint32_t kPassBytes = Traits::kVLoadAtomBytes * kBlockN;

  // One pipeline stage of each buffer: (BLK_N, DV) and (DV, BLK_N) -> swizzled byte offset (E4M3 = 1 byte).
  using LayoutLoadStage = decltype(take<0, 2>(typename Traits::SmemLayoutVLoad{}));
  using LayoutStoreStage = decltype(take<0, 2>(typename Traits::SmemLayoutVt{}));
  static constexpr int kLoadStageBytes = kBlockN * kHeadDimV;
  static constexpr int kStoreStageBytes = Traits::kVtRows * kBlockN;  // dv rows (+ the ones rows, never written here)
  // A swizzle Swizzle<B, M, S> reads and writes only the address bits below 2^(B + M + S) (1024 B for the 128-byte
  // swizzle, 256 B for the 32-byte one); offsets that are multiples of that period pass through it unchanged, so
  // they can be added after the XOR.
  template <class Layout>
  static constexpr uint32_t swizzle_period() {
    using Swizzle = typename get_swizzle<Layout>::type;
    return uint32_t(1) << (Swizzle::num_bits + Swizzle::num_base + Swizzle::num_shft);
  }
  static constexpr uint32_t kLoadSwizzlePeriod = swizzle_period<typename Traits::SmemLayoutVLoad>();
  static constexpr uint32_t kStoreSwizzlePeriod = swizzle_period<typename Traits::SmemLayoutVt>();
  static_assert(kLoadStageBytes % kLoadSwizzlePeriod == 0 && kStoreStageBytes % kStoreSwizzlePeriod == 0,
                "a pipeline stage must not shift the swizzle pattern");

  CUTE_HOST_DEVICE static constexpr int key_group(int unit) { return unit % kKeyGroups; }
  CUTE_HOST_DEVICE static constexpr int dv_block(int unit) { return unit / kKeyGroups; }

  // ldmatrix: lane l addresses row l % 8 of matrix l / 8; matrices = keys +0..7 / +8..15 (bit 0) x dv bytes
  // +0..15 / +16..31 (bit 1).
  CUTE_HOST_DEVICE static constexpr int load_lane_key(int lane) { return lane % 8 + 8 * ((lane / 8) % 2); }
  CUTE_HOST_DEVICE static constexpr int load_lane_byte(int lane) { return 16 * (lane / 16); }
  // stmatrix: lane l addresses row i = l % 8 of matrix m = l / 8, which holds sVt row (dv)
  // 2i + (m odd XOR i >= 4) + 16 * (m / 2) of the unit, 16 key slots wide (see the file comment).
  CUTE_HOST_DEVICE static constexpr int store_lane_dv(int lane) {
    const int m = lane / 8, i = lane % 8;
    return 2 * i + ((m % 2) ^ (i >= 4 ? 1 : 0)) + 16 * (m / 2);
  }

  CUTE_HOST_DEVICE static uint32_t load_lane_offset(int lane) {
    return uint32_t(LayoutLoadStage{}(load_lane_key(lane), load_lane_byte(lane)));
  }
  CUTE_HOST_DEVICE static uint32_t store_lane_offset(int lane) {
    return uint32_t(LayoutStoreStage{}(store_lane_dv(lane), 0));
  }
  CUTE_HOST_DEVICE static constexpr uint32_t load_unit_offset(int unit) {
    return uint32_t(LayoutLoadStage{}(16 * key_group(unit), 32 * dv_block(unit)));
  }
  CUTE_HOST_DEVICE static constexpr uint32_t store_unit_offset(int unit) {
    return uint32_t(LayoutStoreStage{}(32 * dv_block(unit), 16 * key_group(unit)));
  }
  // The address of a unit from a lane base (buffer + stage * stage bytes + lane offset; the buffer is aligned
  // to the swizzle period): XOR the unit's low bits, add its high bits (an immediate of the instruction).
  template <uint32_t kPeriod>
  CUTE_HOST_DEVICE static constexpr uint32_t unit_address(uint32_t lane_base, uint32_t unit_offset) {
    return (lane_base ^ (unit_offset % kPeriod)) + (unit_offset - unit_offset % kPeriod);
  }
  CUTE_HOST_DEVICE static constexpr uint32_t load_address(uint32_t lane_base, int unit) {
    return unit_address<kLoadSwizzlePeriod>(lane_base, load_unit_offset(unit));
  }
  CUTE_HOST_DEVICE static constexpr uint32_t store_address(uint32_t lane_base, int unit) {
    return unit_address<kStoreSwizzlePeriod>(lane_base, store_unit_offset(unit));
  }
  // Byte-permute selectors of a lane: its first and second stored register get column c (even bytes,
  // 0x6420) and c + 1 (odd bytes, 0x7531), swapped for lanes 16-31 (stmatrix rows 4-7).
  CUTE_HOST_DEVICE static constexpr uint32_t first_selector(int lane) { return lane < 16 ? 0x6420u : 0x7531u; }
  CUTE_HOST_DEVICE static constexpr uint32_t second_selector(int lane) { return lane < 16 ? 0x7531u : 0x6420u; }
};

// One V tile by one transpose warp. lane_load_base / lane_store_base: this lane's base address in the stage
// (shared-memory window addresses). Keys at or past the tile's valid keys are written as zeros: their P is 0,
// but 0 * NaN (padding, unused pages) would not be. lane_keys_left = valid keys - 2 * (lane % 4), the valid keys
// counted from this lane's first key of a unit: each mask is then a compare of one register with a constant
// (compared key by key, the hoisted per-key values needed more than the producer's registers at d256).
template <class Traits>
struct VTransposeWarp {
  using Plan = VTransposePlan<Traits>;

  template <int kWarp, bool kMasked>
  CUTE_DEVICE static void tile(uint32_t lane_load_base, uint32_t lane_store_base, uint32_t first_selector,
                               uint32_t second_selector, int lane_keys_left) {
    constexpr int kMyUnits = (Plan::kUnitsPerPass - kWarp + Plan::kWarps - 1) / Plan::kWarps;
    static_assert(kMyUnits >= 1, "every transpose warp has a unit");
    uint32_t current[4];
    ldsm_x4_trans(Plan::load_address(lane_load_base, kWarp), current);
    CUTE_UNROLL
    for (int i = 0; i < kMyUnits; ++i) {
      const int unit = kWarp + i * Plan::kWarps;
      uint32_t next[4];
      if (i + 1 < kMyUnits) {
        ldsm_x4_trans(Plan::load_address(lane_load_base, unit + Plan::kWarps), next);
      }
      // After .trans, current[m] = bytes {V[k][c], V[k][c+1], V[k+1][c], V[k+1][c+1]} with
      // k = key0 + 2 * (lane % 4) (+8 for odd m) and c = dv0 + 2 * (lane / 4) (+16 for m >= 2).
      if constexpr (kMasked) {
        CUTE_UNROLL
        for (int m = 0; m < 4; ++m) {
          const int key = 16 * Plan::key_group(unit) + 8 * (m % 2);  // minus the lane's 2 * (lane % 4)
          current[m] &= valid_key_pair_mask(key, lane_keys_left);
        }
      }
      stsm_x4(Plan::store_address(lane_store_base, unit),
              __byte_perm(current[0], current[1], first_selector), __byte_perm(current[0], current[1], second_selector),
              __byte_perm(current[2], current[3], first_selector), __byte_perm(current[2], current[3], second_selector));
      if (i + 1 < kMyUnits) {
        CUTE_UNROLL
        for (int m = 0; m < 4; ++m) { current[m] = next[m]; }
      }
    }
  }

  // Dispatches the runtime warp index (0..kWarps-1) to the unrolled unit list of that warp, once per dv pass.
  template <bool kMasked>
  CUTE_DEVICE static void tile_for_warp(int transpose_warp, uint32_t lane_load_base, uint32_t lane_store_base,
                                        uint32_t first_selector, uint32_t second_selector, int lane_keys_left) {
    static_assert(Plan::kWarps == 3, "the dispatch below names three transpose warps");
    #pragma unroll 1
    for (int pass = 0; pass < Plan::kDvPasses; ++pass) {
      const uint32_t load_base = lane_load_base + pass * Plan::kPassBytes;
      const uint32_t store_base = lane_store_base + pass * Plan::kPassBytes;
      if (transpose_warp == 0) {
        tile<0, kMasked>(load_base, store_base, first_selector, second_selector, lane_keys_left);
      } else if (transpose_warp == 1) {
        tile<1, kMasked>(load_base, store_base, first_selector, second_selector, lane_keys_left);
      } else {
        tile<2, kMasked>(load_base, store_base, first_selector, second_selector, lane_keys_left);
      }
    }
  }
};

// The swapped-operand d512 decode tile (mainloop_swapped.cuh) multiplies O^T = V^T P^T with V^T from registers (RS
// WGMMA): its second MMA warpgroup makes the A fragments straight from the V stage as loaded, with a transpose unit's
// ldmatrix.trans and byte permutes and no store. That takes sVt's 32 KB write and its 32 KB WGMMA read off every block
// and the producer's transpose warps off the loop (docs/design.md section 8).
//
// One ldmatrix.x4.trans per (m64 tile m, k32 step k) and warp w: lane l addresses key 32 k + l of the block (matrix
// l / 8 holds keys 8 (l / 8) .. + 7), dv bytes 64 m + 16 w .. + 15. Lane l receives, per matrix i, the bytes
// {V[key][c], V[key][c + 1], V[key + 1][c], V[key + 1][c + 1]} of key = 32 k + 8 i + 2 (l % 4), c = 64 m + 16 w + 2 (l / 4);
// the even (0x6420) and odd (0x7531) bytes of matrices (0, 1) and (2, 3) are the four words of the RS A fragment
// (p_word_position: word h + 2 kh is accumulator row r + 8 h, A slots 16 kh + 4 (l % 4) .. + 3). Key slots come out in
// vt_key_slot's order (where the first warpgroup writes P^T), and accumulator row 16 w + r + 8 h of the m64 tile holds
// dv 64 m + 16 w + 2 r + h: O^T's rows are permuted within each 16 (ot_row_dv), undone where O is staged as rows.
// tests/cpu/test_p_operand_layout.cu checks every address against the stage's CuTe layout and emulates the fragments
// byte by byte against CuTe's RS A layout.
template <class Traits>
struct VtFragmentPlan {
  using Transpose = VTransposePlan<Traits>;
  static constexpr int kMTiles = Traits::kHeadDimV / 64;  // m64 tiles of O^T
  static constexpr int kKSteps = Traits::kBlockN / 32;    // k32 steps of a block
  static constexpr int kWords = 4 * kMTiles * kKSteps;    // 32-bit fragment registers per thread and block
  static_assert(Traits::kHeadDimV % 64 == 0 && Traits::kBlockN % 32 == 0, "whole m64 tiles and k32 steps");

  // Offsets in one V stage (the layout the TMA writes, [keys, dv]) of lane `lane` of warp `warp` (0..3 of the
  // warpgroup), and of the (m, k) part; address() joins them as VTransposePlan::unit_address does (the two parts
  // use disjoint address bits: the CPU test checks every sum against the layout).
  CUTE_HOST_DEVICE static uint32_t lane_offset(int warp, int lane) {
    return uint32_t(typename Transpose::LayoutLoadStage{}(lane, 16 * warp));
  }
  CUTE_HOST_DEVICE static constexpr uint32_t part_offset(int m, int k) {
    return uint32_t(typename Transpose::LayoutLoadStage{}(32 * k, 64 * m));
  }
  CUTE_HOST_DEVICE static constexpr uint32_t address(uint32_t lane_base, int m, int k) {
    return Transpose::template unit_address<Transpose::kLoadSwizzlePeriod>(lane_base, part_offset(m, k));
  }
  // The flat index of word `word` (h + 2 kh) of part (m, k) in the RS A fragment (MMA, MMA_M, MMA_K) as uint32.
  CUTE_HOST_DEVICE static constexpr int fragment_word(int word, int m, int k) { return word + 4 * (m + kMTiles * k); }
  // The dv that accumulator row `row` (0..63) of an m64 tile of O^T holds.
  CUTE_HOST_DEVICE static constexpr int ot_row_dv(int row) { return row - row % 16 + 2 * (row % 8) + (row % 16) / 8; }
  // The block's valid keys counted from MMA thread `thread`'s first key of each matrix (its lane's 2 * (lane % 4)).
  CUTE_HOST_DEVICE static constexpr int lane_keys_left(int valid_keys, int thread) { return valid_keys - 2 * (thread % 4); }
  // The mask of ldmatrix register i of part (m, k) (valid_key_pair_mask).
  CUTE_HOST_DEVICE static constexpr uint32_t key_mask(int k, int i, int lane_keys_left) {
    return valid_key_pair_mask(32 * k + 8 * i, lane_keys_left);
  }
  // Word `word` (h + 2 kh) of a part is the even (h = 0) or odd (h = 1) bytes of ldmatrix registers 2 kh and 2 kh + 1.
  CUTE_HOST_DEVICE static constexpr int word_first_register(int word) { return 2 * (word / 2); }
  CUTE_HOST_DEVICE static constexpr uint32_t word_selector(int word) { return word % 2 == 0 ? 0x6420u : 0x7531u; }
};

template <class Traits>
struct VtFragments {
  using Plan = VtFragmentPlan<Traits>;

  // The A fragments of one block into `words` (Plan::fragment_word order). lane_base: this lane's base address in the
  // V stage (shared-memory window address). Keys at or past the block's valid keys become zeros as in the transpose
  // (0 * NaN would not be 0); lane_keys_left: Plan::lane_keys_left.
  template <bool kMasked, class Words>
  CUTE_DEVICE static void load(uint32_t lane_base, int lane_keys_left, Words& words) {
    CUTE_UNROLL
    for (int k = 0; k < Plan::kKSteps; ++k) {
      CUTE_UNROLL
      for (int m = 0; m < Plan::kMTiles; ++m) {
        uint32_t r[4];
        ldsm_x4_trans(Plan::address(lane_base, m, k), r);
        if constexpr (kMasked) {
          CUTE_UNROLL
          for (int i = 0; i < 4; ++i) { r[i] &= Plan::key_mask(k, i, lane_keys_left); }
        }
        CUTE_UNROLL
        for (int word = 0; word < 4; ++word) {
          const int first = Plan::word_first_register(word);
          words(Plan::fragment_word(word, m, k)) = __byte_perm(r[first], r[first + 1], Plan::word_selector(word));
        }
      }
    }
  }
};

}  // namespace fp8attn::sm90
