// fp8attn: kernel configuration, chosen in one place from host-known values only.
//
// select_config() is the single source of truth for the kernel (tiles), PackGQA, splits and the grid; a
// call plans once (api.cpp: plan_fwd) and the plan carries its choice to the launcher and the workspace size.
// It reads no device memory, so its choice is the same when a CUDA graph is captured and replayed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/kernel_config.h"
#include "fp8attn/params.h"

namespace fp8attn {

struct DeviceInfo;

// Host-known description of a call: what every launch choice may depend on.
struct ProblemShape {
  int batch = 0;
  int max_seqlen_q = 0;  // dense seqlen_q or varlen max_seqlen_q
  int max_seqlen_k = 0;  // dense seqlen_k or varlen/paged max_seqlen_k (max_model_len under graphs)
  bool q16 = false;      // Q in fp16/bf16 (the q16 kernels), else E4M3; here, in total_q's alignment gap, so that
                         // a plan (api.cpp's PlanRecord) still fits fp8attn_fwd_plan
  int64_t total_q = 0;   // query rows: total_q (varlen) or batch * seqlen_q
  int num_heads_q = 0;
  int num_heads_kv = 0;
  int head_dim = 0;
  int head_dim_v = 0;
  int window_left = -1;   // -1: unbounded
  int window_right = -1;  // -1: unbounded; causal arrives as 0
  int num_splits_requested = 0;  // 0: heuristic
  int num_sms = 132;
};

ProblemShape describe_problem(const fp8attn_fwd_params& params, const DeviceInfo& device);
KernelConfig select_config(const ProblemShape& problem);

// `config` with exactly `splits` KV splits instead of its planned count, for the tests and benchmarks that
// exercise a given split count (the public num_splits is a ceiling). The varlen schedule does not split: its
// config comes back unchanged.
KernelConfig with_exact_splits(const ProblemShape& problem, KernelConfig config, int splits);

// Bytes of split-KV workspace for a config (layout: SplitWorkspace in common/kernel_config.h); 0 when unsplit.
inline size_t split_workspace_bytes(const ProblemShape& problem, const KernelConfig& config) {
  return SplitWorkspace::of(config, problem.num_heads_q, problem.head_dim_v).bytes();
}

}  // namespace fp8attn
