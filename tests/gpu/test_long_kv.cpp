// fp8attn GPU tests: long-KV accuracy with one split (docs/accuracy.md, the design's two-level accumulation table).
//
// FP8 WGMMA accumulates with ~13 mantissa bits; without two-level PV accumulation the output of a
// nonzero-mean V shrinks as keys grow (0.77% / 10.4% / 34.7% / 71.0% relative RMS at 1k / 8k / 32k / 128k
// keys in the design). With it the design reports 0.17% / 0.15% / 0.13% / 0.12%, and docs/accuracy.md makes those
// the limits for us.
//
// Measurement choices, and why:
//   - One sequence, one head, 128 query rows, d = dv = 128, num_splits = 1, V = 0.5 + 0.25 N(0,1) in E4M3. The same
//     table at d = dv = 512 (issue 35: the split-dv kernel, two warpgroups each folding half of O), same limits.
//   - The asserted run writes fp16. bf16 output alone costs 0.12-0.18% relative RMS here: the outputs sit
//     at 0.5, where the bf16 step changes from 2^-9 to 2^-8, and rounding the fp64 reference itself to bf16
//     scores ~0.18% at 1k keys and 0.12-0.14% at 128k (seed-dependent), at or above the limits. A bf16 run
//     cannot tell a good kernel from a bad one by these numbers; it is still made and reported, and held to
//     the per-element bar of docs/accuracy.md.
//   - q, k ~ N(0, 0.5^2). With N(0, 1) the kernel-precision emulation itself (P rounded to E4M3) scores
//     0.153-0.175% at 1k keys depending on the seed, straddling the 0.17% limit; at 0.5 it scores ~0.13%.
//     A kernel without two-level accumulation still fails by far (its error grows with the key count).
//   - The same inputs also run through the one single-level accumulation kernel that src/kernels.list
//     declares (d128, block 128 x 128; select_config never picks it), to show what two-level accumulation
//     buys: from 8k keys on, its error must be several times the two-level one.
// A table is printed at the end; with FP8ATTN_RESULTS_DIR set it is also written as long_kv_accuracy.json.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "harness.h"
#include "host/api_internal.h"
#include "host/config.h"

namespace fp8attn_test {
namespace {

struct LongKvLimit {
  int head_dim;
  int keys;
  double max_rel_rms_pct;  // docs/accuracy.md
};

// docs/accuracy.md (Long KV): the output mean stays within 0.03% of the reference mean.
constexpr double kMaxMeanDrift = 3e-4;
constexpr LongKvLimit kLimits[] = {{128, 1024, 0.17}, {128, 8192, 0.15}, {128, 32768, 0.13}, {128, 131072, 0.12},
                                   {512, 1024, 0.17}, {512, 8192, 0.15}, {512, 32768, 0.13}, {512, 131072, 0.12}};

struct LongKvResult {
  int head_dim = 0;
  int keys = 0;
  double limit_pct = 0;
  double rel_rms_pct = 0;            // fp16 output: the asserted number
  double emulation_rel_rms_pct = 0;  // the kernel-precision emulation on the same inputs
  double bf16_rel_rms_pct = 0;       // bf16 output, reported only
  double one_level_rel_rms_pct = -1;  // fp16 output of the single-level accumulation kernel; -1 if not built
  double mean_ratio = 1;              // fp16 output mean / exact mean
  double emulation_mean_ratio = 1;
};

// The single-level accumulation kernel on `problem`'s inputs (fp16 output), or nullopt if it is not built.
std::optional<Metrics> run_single_level(Problem& problem) {
  fp8attn::DeviceInfo device;
  if (!fp8attn::query_device(&device).ok()) return std::nullopt;
  fp8attn::KernelConfig config = fp8attn::select_config(fp8attn::describe_problem(problem.params(), device));
  config.key.two_level = false;
  problem.poison(nullptr);
  const fp8attn::Status status = fp8attn::launch_with_config(problem.params(), config, nullptr);
  if (status.code() == fp8attn::StatusCode::kNotCompiled) return std::nullopt;
  EXPECT_TRUE(status.ok()) << status.message();
  return problem.check(problem.download());
}

std::string device_name() {
  int device = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "unknown";
  return prop.name;
}

class LongKv : public ::testing::TestWithParam<LongKvLimit> {
 protected:
  static void TearDownTestSuite() {
    if (results_.empty()) return;
    std::printf("\nLong-KV accuracy, one split, mean-0.5 V (relative RMS vs fp64)\n");
    std::printf("%4s  %8s  %10s  %10s  %10s  %10s  %12s  %11s  %11s\n", "d", "keys", "fp16 out", "limit", "emulation",
                "bf16 out", "single-level", "mean ratio", "emul ratio");
    for (const LongKvResult& r : results_)
      std::printf("%4d  %8d  %9.3f%%  %9.2f%%  %9.3f%%  %9.3f%%  %11.3f%%  %11.6f  %11.6f\n", r.head_dim, r.keys, r.rel_rms_pct,
                  r.limit_pct, r.emulation_rel_rms_pct, r.bf16_rel_rms_pct, r.one_level_rel_rms_pct, r.mean_ratio,
                  r.emulation_mean_ratio);
    write_json();
    results_.clear();
  }

  static inline std::vector<LongKvResult> results_;

 private:
  static void write_json() {
    const char* dir = std::getenv("FP8ATTN_RESULTS_DIR");
    if (dir == nullptr || *dir == '\0') return;
    std::error_code ignored;  // a directory that cannot be made shows as the write failure below
    std::filesystem::create_directories(dir, ignored);
    const std::string path = std::string(dir) + "/long_kv_accuracy.json";
    std::ofstream out(path);
    out << "{\"rows\":[";
    for (size_t i = 0; i < results_.size(); ++i) {
      const LongKvResult& r = results_[i];
      out << (i ? "," : "") << "{\"head_dim\":" << r.head_dim << ",\"keys\":" << r.keys
          << ",\"two_level\":true,\"rel_rms_pct\":" << r.rel_rms_pct
          << ",\"out_dtype\":\"f16\",\"limit_pct\":" << r.limit_pct
          << ",\"emulation_rel_rms_pct\":" << r.emulation_rel_rms_pct
          << ",\"bf16_out_rel_rms_pct\":" << r.bf16_rel_rms_pct << ",\"mean_ratio\":" << r.mean_ratio
          << ",\"emulation_mean_ratio\":" << r.emulation_mean_ratio << "}";
      if (r.one_level_rel_rms_pct >= 0) {
        out << ",{\"head_dim\":" << r.head_dim << ",\"keys\":" << r.keys
            << ",\"two_level\":false,\"rel_rms_pct\":" << r.one_level_rel_rms_pct
            << ",\"out_dtype\":\"f16\"}";
      }
    }
    out << "],\"gpu\":\"" << device_name() << "\"}\n";
    if (!out) ADD_FAILURE() << "could not write " << path;
  }
};

// The long-KV inputs (see the top of this file): one sequence, one kv head, one split, q, k ~ N(0, 0.5^2),
// V = 0.5 + 0.25 N(0, 1), fp16 output.
Case long_kv_case(int q_tokens, int heads_q, int head_dim, int keys, int seed) {
  Case c;
  c.batch = 1;
  c.seqlens_q = {q_tokens};
  c.seqlens_k = {keys};
  c.heads_q = heads_q;
  c.heads_kv = 1;
  c.head_dim = c.head_dim_v = head_dim;
  c.num_splits = 1;
  c.qk_std = 0.5f;
  c.v_mean = 0.5f;
  c.v_std = 0.25f;
  c.out_dtype = FP8ATTN_DTYPE_F16;
  c.seed = seed;
  return c;
}

TEST_P(LongKv, RelativeRmsWithinDesignLimit) {
  const LongKvLimit limit = GetParam();
  const Case c = long_kv_case(128, 1, limit.head_dim, limit.keys, 9000 + limit.keys + (limit.head_dim == 128 ? 0 : limit.head_dim));

  Problem problem(c);
  const fp8attn::Status status = problem.run();
  const std::string skip = dev_build_skip(status, c.head_dim, c.head_dim_v);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(status.ok()) << status.message();
  const Metrics f16 = problem.check(problem.download());

  problem.set_out_dtype(FP8ATTN_DTYPE_BF16);
  const fp8attn::Status bf16_status = problem.run();
  ASSERT_TRUE(bf16_status.ok()) << bf16_status.message();
  const Metrics bf16 = problem.check(problem.download());

  problem.set_out_dtype(FP8ATTN_DTYPE_F16);
  const std::optional<Metrics> single_level = run_single_level(problem);
  const double single_level_pct = single_level ? 100 * single_level->rel_rms : -1;

  results_.push_back({limit.head_dim, limit.keys, limit.max_rel_rms_pct, 100 * f16.rel_rms, 100 * f16.emul_rel_rms,
                      100 * bf16.rel_rms, single_level_pct, f16.mean_ratio, f16.emul_mean_ratio});
  if (single_level && limit.keys >= 8192) {
    EXPECT_GT(single_level_pct, 3 * 100 * f16.rel_rms)
        << "single-level accumulation should lose accuracy as keys grow (two-level: " << 100 * f16.rel_rms << "%)";
  }
  EXPECT_LE(100 * f16.rel_rms, limit.max_rel_rms_pct)
      << "relative RMS vs fp64 with fp16 output at " << limit.keys << " keys (emulation " << 100 * f16.emul_rel_rms
      << "%): the output of a mean-0.5 V drifts as keys grow; is two-level PV accumulation on?\n  case: "
      << c.describe();
  // docs/accuracy.md (Long KV): O is normalised by the sum of the P it multiplied, so its mean does not drift below the exact one.
  EXPECT_LE(std::fabs(f16.mean_ratio - 1), kMaxMeanDrift)
      << "output mean / exact mean = " << f16.mean_ratio << " at " << limit.keys << " keys (emulation "
      << f16.emul_mean_ratio << ")";
  EXPECT_TRUE(f16.passed) << f16.failure;
  EXPECT_TRUE(bf16.passed) << bf16.failure;
}

INSTANTIATE_TEST_SUITE_P(OneSplit, LongKv, ::testing::ValuesIn(kLimits),
                         [](const ::testing::TestParamInfo<LongKvLimit>& info) {
                           return "d" + std::to_string(info.param.head_dim) + "_keys" + std::to_string(info.param.keys);
                         });

// The mean bar on the other P V paths. d128 prefill (above) gets its row sums from the ones block inside the
// P V GEMM; d192/d256 run P V in dv chunks with a separate P x ones GEMM, and decode tiles (64 rows, PackGQA)
// in 32-wide chunks with the same separate GEMM. A 160-key d128 variant with the separate GEMM moved the mean by
// -0.035% (measured on an H200; not kept), so each path is held to the same 0.03%.
struct MeanPath {
  const char* name;
  int head_dim;
  int q_tokens;
  int heads_q;  // over one kv head: 8 with one q token is a PackGQA decode tile
  int keys;
};

class LongKvMean : public ::testing::TestWithParam<MeanPath> {};

TEST_P(LongKvMean, OutputMeanWithinBar) {
  const MeanPath path = GetParam();
  const Case c = long_kv_case(path.q_tokens, path.heads_q, path.head_dim, path.keys, 9100 + path.keys + path.head_dim);

  Problem problem(c);
  const fp8attn::Status status = problem.run();
  const std::string skip = dev_build_skip(status, c.head_dim, c.head_dim_v);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(status.ok()) << status.message();
  const Metrics f16 = problem.check(problem.download());
  EXPECT_LE(std::fabs(f16.mean_ratio - 1), kMaxMeanDrift)
      << path.name << ": output mean / exact mean = " << f16.mean_ratio << " at " << path.keys << " keys (emulation "
      << f16.emul_mean_ratio << ")\n  case: " << c.describe();
  EXPECT_TRUE(f16.passed) << f16.failure;
}

constexpr MeanPath kMeanPaths[] = {
    {"d192_chunked", 192, 128, 1, 8192},   {"d192_chunked", 192, 128, 1, 32768},
    {"d256_chunked", 256, 128, 1, 8192},   {"d256_chunked", 256, 128, 1, 32768},
    {"d128_decode_tile", 128, 1, 8, 8192}, {"d128_decode_tile", 128, 1, 8, 32768},
    {"d512_decode_tile", 512, 1, 8, 32768},  // split dv: the P V warpgroup's half folded from the handed-over factors
};

INSTANTIATE_TEST_SUITE_P(OneSplit, LongKvMean, ::testing::ValuesIn(kMeanPaths),
                         [](const ::testing::TestParamInfo<MeanPath>& info) {
                           return std::string(info.param.name) + "_keys" + std::to_string(info.param.keys);
                         });

}  // namespace
}  // namespace fp8attn_test
