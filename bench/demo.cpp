// fp8attn_demo: the CPU reference on a small FP8 attention problem, runnable on any machine.
//
// It builds random Q, K, V, quantizes them to E4M3 with per-tensor (Q) and per-(batch, kv head) (K, V)
// scales, passes the scales as descales, and runs fp8attn::ref::attention twice:
//   kExact     fp64 attention on the FP8-decoded inputs (the reference of docs/accuracy.md),
//   kEmulation the GPU kernel's own precision (fp32 scores, P rounded to E4M3 with the 2^8 offset, fp32 sums).
// The difference between the two is the error the FP8 kernel cannot avoid; the GPU tests hold the kernel to
//   max|out - exact| <= 2 * max|emulation - exact| + 2 ulp(bf16).
// It uses the CPU reference (src/reference/reference.h, an internal library) and fp8attn/params.h; no GPU is needed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "fp8attn/params.h"
#include "reference/reference.h"

namespace {

struct Case {
  const char* name;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  bool causal;
  int window_left;  // -1: unbounded
};

// Quantizes `x` (grouped in `groups` equal runs) to E4M3 with one scale per group: scale = amax / 448,
// bits = e4m3(x / scale). Returns the scales, which are the descales the kernel takes.
std::vector<float> quantize(const std::vector<float>& x, const std::vector<int64_t>& group_of, int groups,
                            std::vector<uint8_t>* bits) {
  std::vector<float> amax(groups, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) amax[group_of[i]] = std::max(amax[group_of[i]], std::fabs(x[i]));
  std::vector<float> scale(groups);
  for (int g = 0; g < groups; ++g) scale[g] = amax[g] > 0.0f ? amax[g] / 448.0f : 1.0f;
  bits->resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) (*bits)[i] = fp8attn::ref::float_to_e4m3(x[i] / scale[group_of[i]]);
  return scale;
}

struct Stats {
  double max_abs = 0.0;
  double rel_rms = 0.0;
};

Stats compare(const std::vector<double>& a, const std::vector<double>& ref) {
  Stats s;
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(ref[i])) continue;
    const double e = a[i] - ref[i];
    s.max_abs = std::max(s.max_abs, std::fabs(e));
    err2 += e * e;
    ref2 += ref[i] * ref[i];
  }
  s.rel_rms = ref2 > 0.0 ? std::sqrt(err2 / ref2) : 0.0;
  return s;
}

// bf16 has 8 significant bits: ulp(x) = 2^(floor(log2|x|) - 7).
double bf16_ulp(double x) {
  if (x == 0.0) return std::ldexp(1.0, -133);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(std::fabs(x)))) - 7);
}

bool run_case(const Case& c, std::mt19937_64& rng) {
  const int B = c.batch, SQ = c.seqlen_q, SK = c.seqlen_k, HQ = c.heads_q, HKV = c.heads_kv, D = c.head_dim;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);

  // Dense layouts: q [B, SQ, HQ, D], k/v [B, SK, HKV, D]. V has mean 0.5, the case where FP8 PV
  // accumulation without the two-level scheme loses accuracy (docs/accuracy.md).
  std::vector<float> q(static_cast<size_t>(B) * SQ * HQ * D), k(static_cast<size_t>(B) * SK * HKV * D), v(k.size());
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = 0.5f + 0.5f * normal(rng);
  // K and V of some heads are larger, so the per-head descales differ.
  std::vector<int64_t> q_group(q.size(), 0), kv_group(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    const int64_t head = (i / D) % HKV, b = i / (static_cast<size_t>(SK) * HKV * D);
    kv_group[i] = b * HKV + head;
    k[i] *= 1.0f + 0.5f * head;
  }
  std::vector<uint8_t> q8, k8, v8;
  const std::vector<float> q_scale = quantize(q, q_group, 1, &q8);
  const std::vector<float> k_scale = quantize(k, kv_group, B * HKV, &k8);
  const std::vector<float> v_scale = quantize(v, kv_group, B * HKV, &v8);

  fp8attn_fwd_params p{};  // value-initialized: every pointer NULL, every size 0
  p.q = q8.data();
  p.q_dtype = FP8ATTN_DTYPE_E4M3;
  p.q_batch_stride = static_cast<int64_t>(SQ) * HQ * D;
  p.q_row_stride = static_cast<int64_t>(HQ) * D;
  p.q_head_stride = D;
  p.k = k8.data();
  p.k_dtype = FP8ATTN_DTYPE_E4M3;
  p.k_batch_stride = static_cast<int64_t>(SK) * HKV * D;
  p.k_row_stride = static_cast<int64_t>(HKV) * D;
  p.k_head_stride = D;
  p.v = v8.data();
  p.v_dtype = FP8ATTN_DTYPE_E4M3;
  p.v_batch_stride = p.k_batch_stride;
  p.v_row_stride = p.k_row_stride;
  p.v_head_stride = p.k_head_stride;
  p.out_dtype = FP8ATTN_DTYPE_BF16;  // the reference writes fp64 results; out/lse stay NULL
  p.o_batch_stride = static_cast<int64_t>(SQ) * HQ * D;
  p.o_row_stride = static_cast<int64_t>(HQ) * D;
  p.o_head_stride = D;
  p.batch = B;
  p.seqlen_q = SQ;
  p.seqlen_k = SK;
  p.num_heads_q = HQ;
  p.num_heads_kv = HKV;
  p.head_dim = D;
  p.head_dim_v = D;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  p.causal = c.causal ? 1 : 0;
  p.window_left = c.window_left;
  p.window_right = c.causal ? 0 : -1;
  // q: one scalar (0-d); k, v: (batch, kv_heads), contiguous.
  p.q_descale = fp8attn_descale{q_scale.data(), 0, {0, 0}, 0, 0, FP8ATTN_DTYPE_F32};
  p.k_descale = fp8attn_descale{k_scale.data(), 2, {B, HKV}, HKV, 1, FP8ATTN_DTYPE_F32};
  p.v_descale = fp8attn_descale{v_scale.data(), 2, {B, HKV}, HKV, 1, FP8ATTN_DTYPE_F32};
  p.sink_dtype = FP8ATTN_DTYPE_F32;

  fp8attn::ref::Result exact, emul;
  for (auto [mode, result] : {std::pair{fp8attn::ref::Mode::kExact, &exact},
                              std::pair{fp8attn::ref::Mode::kEmulation, &emul}}) {
    const fp8attn::Status status = fp8attn::ref::attention(p, mode, result);
    if (!status.ok()) {
      std::fprintf(stderr, "fp8attn_demo: %s: reference failed: %s\n", c.name, status.message().c_str());
      return false;
    }
  }
  const Stats out = compare(emul.out, exact.out);
  double max_ulp = 0.0;
  for (double x : exact.out) {
    if (!std::isnan(x)) max_ulp = std::max(max_ulp, bf16_ulp(x));
  }
  const double bound = 2.0 * out.max_abs + 2.0 * max_ulp;

  char window[32] = "";
  if (c.window_left >= 0) std::snprintf(window, sizeof window, " window(%d,%d)", c.window_left, c.causal ? 0 : -1);
  char shape[128];
  std::snprintf(shape, sizeof shape, "b%d sq%d sk%d hq%d hkv%d d%d%s%s", B, SQ, SK, HQ, HKV, D,
                c.causal ? " causal" : "", window);
  std::printf("%-12s %-46s %12.3e %9.3f%% %11.3e\n", c.name, shape, out.max_abs, 100.0 * out.rel_rms, bound);

  // A few LSEs of q head 0 (natural log) of batch 0's first, middle and last row, and the largest LSE
  // difference between emulation and exact over all rows and heads.
  double lse_diff = 0.0;
  for (size_t i = 0; i < exact.lse.size(); ++i) {
    if (std::isfinite(exact.lse[i])) lse_diff = std::max(lse_diff, std::fabs(emul.lse[i] - exact.lse[i]));
  }
  const int64_t rows = exact.total_rows;
  std::vector<int64_t> show = {0, SQ / 2, SQ - 1};
  show.erase(std::unique(show.begin(), show.end()), show.end());
  std::printf("%-12s lse(head 0):", "");
  for (int64_t r : show) std::printf("  row %lld = %.5f", static_cast<long long>(r), exact.lse[0 * rows + r]);
  std::printf("   max|emul-exact| %.1e\n", lse_diff);
  return true;
}

}  // namespace

int main() {
  std::mt19937_64 rng(20260101);  // fixed seed: the same numbers on every run
  const Case cases[] = {
      {"prefill", 2, 37, 53, 4, 2, 64, true, -1},
      {"prefill-swa", 2, 37, 53, 4, 2, 128, true, 16},
      {"decode", 2, 1, 53, 8, 2, 128, false, -1},
  };
  std::printf("fp8attn CPU reference demo: FP8 (E4M3) Q/K/V with descales; GQA; seed 20260101\n\n");
  std::printf("%-12s %-46s %12s %10s %11s\n", "case", "shape", "max|emul-ex|", "rel RMS", "GPU bound");
  bool ok = true;
  for (const Case& c : cases) ok = run_case(c, rng) && ok;
  std::printf(
      "\nWhat the numbers mean: 'exact' is fp64 attention on the same E4M3 inputs with the descales applied;\n"
      "'emul' computes at the GPU kernel's precision (fp32 scores, P = exp2(s - max + 8) rounded to E4M3 before\n"
      "the PV product and in the sum that normalises it, fp32 accumulation). Their difference is the error FP8 P\n"
      "itself costs. The SM90 kernel is held to 'GPU bound' = 2 x max|emul - exact| + 2 ulp(bf16) against\n"
      "'exact'. LSE is the natural-log\n"
      "softmax denominator per (head, row), as the kernel returns it.\n");

  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      std::printf("\nCUDA device found: %s (sm_%d%d). The kernels and their benchmarks run with: "
                  "bash scripts/run.sh\n", prop.name, prop.major, prop.minor);
    }
  } else {
    std::printf("\nNo CUDA device here: the SM90 kernels need an H100/H200; on one, `bash scripts/run.sh` "
                "runs the benchmarks.\n");
  }
  return ok ? 0 : 1;
}
