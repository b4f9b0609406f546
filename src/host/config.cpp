// fp8attn: kernel configuration selection (see config.h). Host-known values only.
#include "host/config.h"

#include <algorithm>
#include <string>

#include "fp8attn/fp8attn.h"

namespace fp8attn {

std::string KernelKey::to_string() const {
  return "d=" + std::to_string(head_dim) + " dv=" + std::to_string(head_dim_v) + " block_m=" + std::to_string(block_m) +
         " block_n=" + std::to_string(block_n);
}

ProblemShape describe_problem(const fp8attn_fwd_params& p, const DeviceInfo& device) {
  ProblemShape s;
  s.batch = p.batch;
  s.max_seqlen_q = p.seqlen_q;
  s.max_seqlen_k = p.seqlen_k;
  s.num_heads_q = p.num_heads_q;
  s.num_heads_kv = p.num_heads_kv;
  s.head_dim = p.head_dim;
  s.head_dim_v = p.head_dim_v;
  s.causal = p.causal != 0;
  s.window_left = p.window_left;
  s.window_right = p.causal ? 0 : p.window_right;
  s.paged = p.block_table != nullptr;
  s.page_size = p.page_size;
  s.num_splits_requested = p.num_splits;
  s.num_sms = device.num_sms;
  return s;
}

namespace {

// KV tile width per head dim. Shared memory is Q + 2 stages of (K, V as loaded, V^T); the tile
// accumulator of two-level accumulation caps the register budget (docs/design.md).
int block_n_for(int head_dim) {
  if (head_dim <= 128) { return 128; }
  if (head_dim <= 192) { return 96; }
  return 64;
}

}  // namespace

KernelConfig select_config(const ProblemShape& problem) {
  KernelConfig c;
  c.key.head_dim = problem.head_dim;
  c.key.head_dim_v = problem.head_dim_v;
  c.key.block_n = block_n_for(problem.head_dim);
  c.pack_gqa = false;
  // Short query tiles (decode, speculative decode) would leave a 128-row tile mostly padding: one MMA
  // warpgroup of 64 rows serves them.
  const int rows_per_tile_head = problem.max_seqlen_q * (c.pack_gqa ? problem.num_heads_q / problem.num_heads_kv : 1);
  c.key.block_m = rows_per_tile_head <= 64 ? 64 : 128;
  c.num_mma_warpgroups = c.key.block_m / 64;
  c.stages = 2;
  c.pv_from_registers = true;
  c.num_splits = std::max(1, problem.num_splits_requested);
  c.ctas_per_sm = 1;
  c.num_m_blocks = (rows_per_tile_head + c.key.block_m - 1) / c.key.block_m;
  c.grid_x = static_cast<unsigned>(c.num_m_blocks);
  c.grid_y = static_cast<unsigned>(problem.num_heads_q);
  c.grid_z = static_cast<unsigned>(problem.batch * c.num_splits);
  return c;
}

size_t split_workspace_bytes(const ProblemShape& problem, const KernelConfig& config, int64_t total_rows) {
  if (config.num_splits <= 1) { return 0; }
  const size_t partial_o = size_t(config.num_splits) * size_t(total_rows) * size_t(problem.num_heads_q) *
                           size_t(problem.head_dim_v) * sizeof(float);
  const size_t partial_lse = size_t(config.num_splits) * size_t(problem.num_heads_q) * size_t(total_rows) * sizeof(float);
  return partial_o + partial_lse;
}

}  // namespace fp8attn
