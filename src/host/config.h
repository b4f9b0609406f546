// fp8attn: kernel configuration, chosen in one place from host-known values only.
//
// select_config() is the single source of truth for tiles, stages, RS PV, PackGQA, splits, CTAs per SM
// and the grid; the launcher and the workspace-size query both call it, never a copy of its logic.
// It reads no device memory, so its choice is the same when a CUDA graph is captured and replayed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fp8attn/params.h"

namespace fp8attn {

struct DeviceInfo;

// Identifies one compiled kernel instantiation (see src/kernels.list).
struct KernelKey {
  int head_dim = 0;
  int head_dim_v = 0;
  int block_m = 0;  // query rows per CTA: 64 per MMA warpgroup
  int block_n = 0;  // keys per KV tile
  // Two-level PV accumulation (always, in what select_config picks); false only for the one declared
  // single-level kernel that tests and benchmarks compare against.
  bool two_level = true;
  bool operator==(const KernelKey& o) const {
    return head_dim == o.head_dim && head_dim_v == o.head_dim_v && block_m == o.block_m && block_n == o.block_n &&
           two_level == o.two_level;
  }
  std::string to_string() const;
};

// Host-known description of a call: what every launch choice may depend on.
struct ProblemShape {
  int batch = 0;
  int max_seqlen_q = 0;  // dense seqlen_q or varlen max_seqlen_q
  int max_seqlen_k = 0;  // dense seqlen_k or varlen/paged max_seqlen_k (max_model_len under graphs)
  int64_t total_q = 0;   // query rows: total_q (varlen) or batch * seqlen_q
  int num_heads_q = 0;
  int num_heads_kv = 0;
  int head_dim = 0;
  int head_dim_v = 0;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  bool paged = false;
  int page_size = 0;
  int num_splits_requested = 0;  // 0: heuristic
  int num_sms = 132;
};

struct KernelConfig {
  KernelKey key;
  int num_mma_warpgroups = 0;  // block_m / 64
  int stages = 0;              // K and V shared-memory stages
  bool pv_from_registers = true;  // PV GEMM as RS WGMMA (P in registers); always true for FP8
  bool pack_gqa = false;       // q heads of one kv head packed along M
  int num_splits = 1;
  int ctas_per_sm = 1;
  int num_m_blocks = 0;        // M tiles per (batch, head) — per (batch, kv head) when pack_gqa
  int64_t partial_rows = 0;    // rows of the split-KV partial buffers (total_q or batch * seqlen_q)
  unsigned grid_x = 0, grid_y = 0, grid_z = 0;  // (m_blocks, heads, batch * splits)
};

ProblemShape describe_problem(const fp8attn_fwd_params& params, const DeviceInfo& device);
KernelConfig select_config(const ProblemShape& problem);

// Bytes of split-KV workspace for a config: fp32 partial O [splits, rows, heads, dv] + LSE [splits, heads, rows].
size_t split_workspace_bytes(const ProblemShape& problem, const KernelConfig& config);
// Floats of the partial-O part, i.e. where the partial LSEs start in the workspace.
inline int64_t split_partial_o_floats(const KernelConfig& config, int num_heads_q, int head_dim_v) {
  return int64_t(config.num_splits) * config.partial_rows * num_heads_q * head_dim_v;
}

}  // namespace fp8attn
