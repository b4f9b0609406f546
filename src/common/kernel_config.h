// fp8attn: the launch decided for one call, as the host hands it to the SM90 launcher.
//
// Neutral ground between the two layers: src/host makes a KernelConfig (select_config, config.cpp) and
// src/sm90 carries it out (launch.cpp), and neither includes the other's headers. Plain C++, no CUDA, so
// the CPU tests read it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fp8attn {

// Identifies one compiled kernel instantiation (see src/kernels.list).
struct KernelKey {
  int head_dim = 0;
  int head_dim_v = 0;
  int block_m = 0;  // query rows per CTA: 64 per MMA warpgroup
  int block_n = 0;  // keys per KV tile
  // Two-level PV accumulation (always, in what select_config picks); false only for the one declared
  // single-level kernel that tests and benchmarks compare against.
  bool two_level = true;
  // The varlen schedule (select_config: sequences of different lengths in one varlen call): a one-dimensional
  // grid of at least heads x the listed tiles, each CTA finding its tile from cu_seqlens_q on the device
  // (tile_scheduler.cuh); CTAs past the list exit; no split. Its own instantiation, so that the direct-grid
  // kernels carry none of its code (src/kernels.list).
  bool varlen_schedule = false;
  // Q in fp16/bf16, quantized to E4M3 per row inside the kernel (quantize_q.cuh); E4M3 Q otherwise. Kernels of
  // their own, so that the E4M3 kernels carry none of its code or its two per-row scale registers.
  bool q16 = false;
  // Split dv (dv = 512) tiles of at most kSwappedRows rows (decode): the swapped-operand loop alone
  // (mainloop_swapped.cuh). A kernel of its own, so that the decode path's code is not spread through the split-dv
  // prefill loop's (a decode CTA fetches its start and end cold: docs/design.md, Measured choices).
  bool swapped = false;
  bool operator==(const KernelKey& o) const {
    return head_dim == o.head_dim && head_dim_v == o.head_dim_v && block_m == o.block_m && block_n == o.block_n &&
           two_level == o.two_level && varlen_schedule == o.varlen_schedule && q16 == o.q16 &&
           swapped == o.swapped;
  }
  // "d=128 dv=128 block_m=64 block_n=128": for diagnostics and not-compiled errors only.
  std::string to_string() const {
    return "d=" + std::to_string(head_dim) + " dv=" + std::to_string(head_dim_v) +
           " block_m=" + std::to_string(block_m) + " block_n=" + std::to_string(block_n) +
           (two_level ? "" : " one_level") + (varlen_schedule ? " varlen_schedule" : "") + (q16 ? " q16" : "") +
           (swapped ? " swapped" : "");
  }
};

// What the launch depends on beyond the kernel itself. Everything the kernel's traits fix (warpgroups,
// stages, CTAs per SM) is read from the traits, or from common/kernel_rules.h on the host, never copied here.
struct KernelConfig {
  KernelKey key;
  bool pack_gqa = false;     // q heads of one kv head packed along M
  int num_splits = 1;        // KV splits; see split_kv()
  int num_m_blocks = 0;      // M tiles per (batch, head) — per (batch, kv head) when pack_gqa
  int64_t partial_rows = 0;  // query rows: total_q (varlen) or batch * seqlen_q (dense)
  unsigned grid_x = 0, grid_y = 0, grid_z = 0;  // (m_blocks, heads, batch * splits)
  // The order in which the CTAs, dispatched in linear block order, take the tiles (sm90/tile_scheduler.cuh).
  // reverse_m: under a bounded right side (causal, window) later M blocks have more keys, so with at least 16
  // M blocks the linear order visits M blocks from the last (longest first), in sections of tile_order_rows
  // (head, sequence, split) rows so that the CTAs running at once read the K/V of at most that many rows (it
  // fits in L2). Otherwise the grid's own order: every M block of a head, then the next head.
  bool reverse_m = false;
  int tile_order_rows = 1;
  // The direct grid folded into gridDim.x (more than 65535 sequences x splits, or heads): CTA i takes M block
  // i % m_blocks of row i / m_blocks, rows as in (heads, batch * splits).
  bool folded_grid = false;

  // The one definition of a split-KV call: the forward kernel writes fp32 partials into the workspace and
  // the combine kernel reduces them into out/lse. Everything else asks this, host and device alike (the
  // kernel through FwdArgs::split_kv).
  bool split_kv() const { return num_splits > 1; }
};

// The split-KV workspace of a config, in fp32 elements: partial O [splits, rows, heads_q, dv], then partial
// LSE [splits, heads_q, rows]. The one definition both the size query and the launcher use.
struct SplitWorkspace {
  int64_t o_floats = 0;
  int64_t lse_floats = 0;

  // One split's share: partial O and LSE of every (row, q head).
  static SplitWorkspace per_split(int64_t partial_rows, int num_heads_q, int head_dim_v) {
    const int64_t rows_heads = partial_rows * num_heads_q;
    return {rows_heads * head_dim_v, rows_heads};
  }
  static SplitWorkspace of(const KernelConfig& config, int num_heads_q, int head_dim_v) {
    if (!config.split_kv()) { return {}; }
    const SplitWorkspace one = per_split(config.partial_rows, num_heads_q, head_dim_v);
    return {config.num_splits * one.o_floats, config.num_splits * one.lse_floats};
  }
  size_t bytes() const { return size_t(o_floats + lse_floats) * sizeof(float); }
};

}  // namespace fp8attn
