// fp8attn: the cost of two-level PV accumulation on d128 prefill (issue: target <= 3%).
//
// Times the same call through the two-level kernel select_config() picks and through the single-level
// kernel src/kernels.list declares for this comparison (d128, block 128 x 128): CUDA events around each
// launch, the two kernels' launches alternated, 10 warm-up iterations, median of 60 per kernel, a 64 MB L2
// flush before each timed launch. Random E4M3 inputs (never zeros). Prints a table and, with
// FP8ATTN_RESULTS_DIR set, writes two_level_cost.json there.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "fp8attn/fp8attn.h"
#include "host/api_internal.h"
#include "host/config.h"
#include "reference/reference.h"

namespace {

struct Timing {
  bool causal;
  double two_level_ms;
  double single_level_ms;
};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 1;
  }
  constexpr int kSeqlen = 16384, kHeads = 16, kDim = 128;
  const size_t elems = size_t(kSeqlen) * kHeads * kDim;
  std::vector<uint8_t> host(elems * 3);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (uint8_t& b : host) b = fp8attn::ref::float_to_e4m3(normal(rng));
  uint8_t* qkv = nullptr;
  void* out = nullptr;
  void* flush = nullptr;
  constexpr size_t kFlushBytes = size_t(64) << 20;
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&qkv), host.size()));
  CHECK_CUDA(cudaMalloc(&out, elems * 2));
  CHECK_CUDA(cudaMalloc(&flush, kFlushBytes));
  CHECK_CUDA(cudaMemcpy(qkv, host.data(), host.size(), cudaMemcpyHostToDevice));

  fp8attn_fwd_params p;
  fp8attn_fwd_params_init(&p);
  p.q = qkv;
  p.k = qkv + elems;
  p.v = qkv + 2 * elems;
  p.q_dtype = p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E4M3;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = int64_t(elems);
  p.q_row_stride = p.k_row_stride = p.v_row_stride = kHeads * kDim;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = kDim;
  p.out = out;
  p.out_dtype = FP8ATTN_DTYPE_BF16;
  p.o_batch_stride = int64_t(elems);
  p.o_row_stride = kHeads * kDim;
  p.o_head_stride = kDim;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = kSeqlen;
  p.num_heads_q = p.num_heads_kv = kHeads;
  p.head_dim = p.head_dim_v = kDim;
  p.softmax_scale = 1.f / 11.3137085f;
  p.num_splits = 1;
  for (fp8attn_shape* shape : {&p.q_shape, &p.k_shape, &p.v_shape, &p.out_shape}) {
    *shape = fp8attn_shape{4, {1, kSeqlen, kHeads, kDim}};  // q, k, v and out: [batch, seqlen, heads, d]
  }

  fp8attn::DeviceInfo info;
  if (!fp8attn::query_device(&info).ok()) return 1;
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<Timing> rows;
  for (bool causal : {false, true}) {
    p.causal = causal;
    const fp8attn::Status valid = fp8attn::validate_fwd(p, info);
    if (!valid.ok()) {
      std::printf("invalid benchmark call: %s\n", valid.message().c_str());
      return 1;
    }
    fp8attn::KernelConfig config = fp8attn::select_config(fp8attn::describe_problem(p, info));
    // The two kernels' launches alternate (the order swapped every iteration), so that both are timed at the
    // same clocks: the card's clocks are not locked and follow its recent power draw (docs/timing.md).
    fp8attn::KernelConfig configs[2] = {config, config};
    configs[0].key.two_level = true;
    configs[1].key.two_level = false;
    std::vector<float> times[2];
    for (int it = 0; it < 70; ++it) {
      for (int slot = 0; slot < 2; ++slot) {
        const int variant = slot ^ (it & 1);
        CHECK_CUDA(cudaMemsetAsync(flush, it, kFlushBytes));
        CHECK_CUDA(cudaEventRecord(start));
        const fp8attn::Status s = fp8attn::launch_with_config(p, configs[variant], nullptr);
        CHECK_CUDA(cudaEventRecord(stop));
        if (!s.ok()) {
          std::printf("%s: %s\n", configs[variant].key.to_string().c_str(), s.message().c_str());
          return 1;
        }
        CHECK_CUDA(cudaEventSynchronize(stop));
        float t = 0;
        CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
        if (it >= 10) times[variant].push_back(t);
      }
    }
    const double ms[2] = {median(times[0]), median(times[1])};
    rows.push_back({causal, ms[0], ms[1]});
  }

  const double flops_full = 4.0 * kSeqlen * double(kSeqlen) * kDim * kHeads;
  std::printf("two-level PV accumulation cost, d128, seqlen %d, %d heads, bf16 out\n", kSeqlen, kHeads);
  std::printf("%7s  %12s  %14s  %8s  %14s\n", "causal", "two-level ms", "single-lvl ms", "cost", "TFLOP/s (2lvl)");
  for (const Timing& r : rows) {
    const double flops = r.causal ? flops_full / 2 : flops_full;
    std::printf("%7s  %12.3f  %14.3f  %7.1f%%  %14.1f\n", r.causal ? "yes" : "no", r.two_level_ms,
                r.single_level_ms, 100 * (r.two_level_ms / r.single_level_ms - 1), flops / r.two_level_ms * 1e-9);
  }
  if (const char* dir = std::getenv("FP8ATTN_RESULTS_DIR"); dir != nullptr && *dir != '\0') {
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::ofstream json(std::string(dir) + "/two_level_cost.json");
    json << "{\"d\":" << kDim << ",\"seqlen\":" << kSeqlen << ",\"heads\":" << kHeads << ",\"rows\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      json << (i ? "," : "") << "{\"causal\":" << (rows[i].causal ? "true" : "false")
           << ",\"two_level_ms\":" << rows[i].two_level_ms << ",\"single_level_ms\":" << rows[i].single_level_ms
           << ",\"cost_pct\":" << 100 * (rows[i].two_level_ms / rows[i].single_level_ms - 1) << "}";
    }
    json << "],\"gpu\":\"" << prop.name << "\"}\n";
  }
  return 0;
}
