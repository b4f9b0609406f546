// fp8attn GPU tests: random configurations against the fp64 reference (docs/accuracy.md's bar, as every harness
// case).
//
// Each run draws FP8ATTN_FUZZ_COUNT configurations (default 500) from a seed that changes per run and is
// printed; FP8ATTN_FUZZ_SEED fixes it, and FP8ATTN_FUZZ_ONLY=i replays configuration i of that seed alone.
// The draw spans every layout (dense, dense + seqused_k, varlen, varlen q over dense K, paged with every page
// size 16..256 under varlen or dense q), decode and prefill lengths including 0 and 1, MHA/GQA/MQA, masks
// (none, causal, window, causal + window), sinks, every descale form, split counts, both output dtypes,
// strided views, padding rows and loose max_seqlen bounds, and every head-dim pair this build compiled.
// Sizes are bounded so that the fp64 CPU reference (the cost) keeps 500 configurations well under a minute.
//
// A failure prints the configuration and the command that replays it; the run ends with one line
//   fuzz: N configurations, seed S, F failed
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "host/config.h"

namespace fp8attn_test {
namespace {

constexpr int kDefaultCount = 500;
// Reference work per configuration: sum over sequences of q_len * k_len * heads_q * (d + dv) multiply-adds.
constexpr double kWorkBudget = 2e7;

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 0) : fallback;
}

uint64_t fresh_seed() {
  std::random_device device;
  const uint64_t clock = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return ((uint64_t{device()} << 32) ^ device() ^ clock) & 0xFFFFFFFFFFFFull;  // 48 bits: short enough to type
}

// splitmix64: configuration i of a run depends on (seed, i) only, so one configuration replays alone.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }  // [lo, hi]
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  T pick(std::initializer_list<T> values) {
    return values.begin()[uniform(0, static_cast<int>(values.size()) - 1)];
  }
  template <typename T>
  T pick(const std::vector<T>& values) {
    return values[uniform(0, static_cast<int>(values.size()) - 1)];
  }
  uint64_t bits() { return rng_(); }

  // A length with the edges over-represented: 0, 1, and small values that straddle tile and page borders.
  int length(int max) {
    switch (uniform(0, 5)) {
      case 0: return 0;
      case 1: return std::min(1, max);
      case 2: return uniform(0, std::min(max, 20));
      default: return uniform(0, max);
    }
  }

 private:
  std::mt19937_64 rng_;
};

double reference_work(const Case& c) {
  double work = 0;
  for (int b = 0; b < c.batch; ++b) work += double(c.seqlens_q[b]) * c.seqlens_k[b];
  return work * c.heads_q * (c.head_dim + c.head_dim_v);
}

Case random_case(uint64_t seed, int index) {
  Draw draw(mix(seed ^ mix(static_cast<uint64_t>(index))));
  Case c;
  const auto [d, dv] = draw.pick(compiled_head_dims());
  c.head_dim = d;
  c.head_dim_v = dv;
  c.heads_kv = draw.pick({1, 1, 2, 4});
  c.heads_q = c.heads_kv * draw.pick({1, 2, 4, 8});
  c.batch = draw.uniform(1, 4);

  enum Layout { kDense, kDenseSequsedK, kVarlen, kVarlenQDenseK, kPagedVarlenQ, kPagedDenseQ };
  const Layout layout = static_cast<Layout>(draw.uniform(0, 5));
  const bool decode = draw.chance(0.4);  // few query rows per sequence, many keys
  const int max_q = decode ? 8 : 160;
  const int max_k = decode ? 1200 : 400;
  c.varlen_q = layout == kVarlen || layout == kVarlenQDenseK || layout == kPagedVarlenQ;
  const bool equal_q = !c.varlen_q;
  const bool equal_k = layout == kDense;
  const int q_all = draw.length(max_q), k_all = draw.length(max_k);
  for (int b = 0; b < c.batch; ++b) {
    c.seqlens_q.push_back(equal_q ? q_all : draw.length(max_q));
    c.seqlens_k.push_back(equal_k ? k_all : draw.length(max_k));
  }
  switch (layout) {
    case kDense:
      c.kv = KvLayout::kDense;
      break;
    case kDenseSequsedK:
    case kVarlenQDenseK:
      c.kv = KvLayout::kDense;
      c.seqused_k = true;
      c.spare_k_rows = draw.pick({0, 0, 5, 64});
      break;
    case kVarlen:
      c.kv = KvLayout::kVarlen;
      c.spare_k_rows = draw.pick({0, 0, 3});
      break;
    case kPagedVarlenQ:
    case kPagedDenseQ:
      c.kv = KvLayout::kPaged;
      c.page_size = 16 * draw.uniform(1, 16);  // every multiple of 16 in 16..256
      c.spare_pages = draw.uniform(1, 4);
      break;
  }
  if (c.varlen_q) c.spare_q_rows = draw.pick({0, 0, 2});
  if (c.varlen_q || c.kv != KvLayout::kDense || c.seqused_k) c.extra_max_seqlen = draw.pick({0, 0, 0, 7, 100});
  c.strided = draw.chance(0.25);

  switch (draw.uniform(0, 3)) {
    case 0: break;  // no mask
    case 1: c.causal = true; break;
    case 2:
      c.window_left = draw.pick({0, 1, 17, 100, 255});
      c.window_right = draw.pick({-1, 0, 1, 31});
      break;
    case 3:
      c.causal = true;
      c.window_left = draw.pick({0, 1, 63, 200});
      c.window_right = draw.pick({-1, 0});
      break;
  }
  const DescaleForm forms[] = {DescaleForm::kNone, DescaleForm::kScalar, DescaleForm::kPerBatchHead,
                               DescaleForm::kBroadcastAll, DescaleForm::kBroadcastBatch};
  c.descale_q = forms[draw.uniform(0, 4)];
  c.descale_k = forms[draw.uniform(0, 4)];
  c.descale_v = forms[draw.uniform(0, 4)];
  c.sink = draw.pick({SinkType::kNone, SinkType::kNone, SinkType::kF32, SinkType::kBF16});
  c.out_dtype = draw.chance(0.5) ? FP8ATTN_DTYPE_BF16 : FP8ATTN_DTYPE_F16;
  c.lse = draw.chance(0.85);
  c.num_splits = draw.pick({0, 0, 0, 1, 2, 3, 5, 8, 16});
  c.seed = draw.bits();

  // Keep the reference affordable: shorten the key lengths (then the query lengths) until within budget.
  while (reference_work(c) > kWorkBudget) {
    for (int& k : c.seqlens_k) k /= 2;
    if (reference_work(c) > kWorkBudget)
      for (int& q : c.seqlens_q) q = (q + 1) / 2;
  }
  return c;
}

std::string replay_command(uint64_t seed, int index) {
  return "FP8ATTN_FUZZ_SEED=" + std::to_string(seed) + " FP8ATTN_FUZZ_ONLY=" + std::to_string(index) +
         " build/tests/fp8attn_gpu_tests --gtest_filter='Fuzz.*'";
}

TEST(Fuzz, RandomConfigurationsMatchTheReference) {
  const uint64_t seed = env_u64("FP8ATTN_FUZZ_SEED", fresh_seed());
  const int count = static_cast<int>(env_u64("FP8ATTN_FUZZ_COUNT", kDefaultCount));
  const char* only = std::getenv("FP8ATTN_FUZZ_ONLY");
  const int first = only != nullptr && *only != '\0' ? std::atoi(only) : 0;
  const int last = only != nullptr && *only != '\0' ? first + 1 : count;
  std::printf("[  fuzz    ] seed %llu (FP8ATTN_FUZZ_SEED=%llu replays this run), configurations %d..%d\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed), first, last - 1);
  std::fflush(stdout);

  int run = 0, failed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = first; i < last; ++i) {
    const Case c = random_case(seed, i);
    std::string failure;
    bool context_lost = false;
    try {
      Problem problem(c);
      const fp8attn::Status status = problem.run();
      if (!status.ok()) {
        failure = "fp8attn::fwd returned " + std::to_string(static_cast<int>(status.code())) + ": " + status.message();
      } else {
        const Metrics m = problem.check(problem.download());
        if (!m.passed) failure = m.failure;
      }
    } catch (const std::exception& e) {
      failure = std::string("exception: ") + e.what();
      // An illegal address or launch failure poisons the context: later configurations cannot run.
      context_lost = cudaDeviceSynchronize() != cudaSuccess;
    }
    ++run;
    if (!failure.empty()) {
      ++failed;
      ADD_FAILURE() << "fuzz configuration " << i << " of seed " << seed << " failed:\n  " << failure
                    << "\n  case: " << c.describe() << "\n  replay: " << replay_command(seed, i);
    }
    if (context_lost) {
      ADD_FAILURE() << "the CUDA context is lost after configuration " << i << "; stopping the fuzz";
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz: %d configurations, seed %llu, %d failed (%.1f s)\n", run, static_cast<unsigned long long>(seed),
              failed, seconds);
  std::fflush(stdout);
  EXPECT_EQ(failed, 0);
}

// Every compiled two-level kernel (head dims x block_m) once, against the reference: what the sanitizer runs
// (FP8ATTN_SANITIZE_FUZZ) need to cover every variant, whatever the fuzz drew. A decode call (few packed rows)
// selects block_m = 64, a prefill call over more than 1024 keys block_m = 128 where it is compiled (d > 64), a
// long prefill call (>= 8192 keys, 576 rows) block_m = 192 where it is compiled (dv = 64); the test checks that
// together they reach every kernel.
enum class CallKind { kDecode, kPrefill, kLongPrefill };

TEST(KernelVariants, EachCompiledKernelMatchesTheReference) {
  std::set<std::string> compiled, covered;
  std::istringstream lines(fp8attn_compiled_kernels());
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.find("one_level") == std::string::npos) compiled.insert(line);
  fp8attn::DeviceInfo device;
  ASSERT_TRUE(fp8attn::query_device(&device).ok());
  uint64_t seed = 7000;
  for (const auto& [d, dv] : compiled_head_dims()) {
    for (const CallKind kind : {CallKind::kDecode, CallKind::kPrefill, CallKind::kLongPrefill}) {
      const bool decode = kind == CallKind::kDecode;
      Case c;
      c.head_dim = d;
      c.head_dim_v = dv;
      c.heads_q = 8;
      c.heads_kv = 2;
      c.batch = 3;
      c.varlen_q = true;
      switch (kind) {
        case CallKind::kDecode:
          c.seqlens_q = {1, 1, 1};
          c.seqlens_k = {700, 33, 1};
          break;
        case CallKind::kPrefill:
          c.seqlens_q = {200, 17, 130};
          c.seqlens_k = {300, 17, 1100};
          break;
        case CallKind::kLongPrefill:
          c.seqlens_q = {576, 100, 383};
          c.seqlens_k = {8300, 100, 5000};
          break;
      }
      c.kv = decode ? KvLayout::kPaged : KvLayout::kVarlen;
      c.page_size = 32;
      c.causal = true;
      c.sink = decode ? SinkType::kF32 : SinkType::kNone;
      c.seed = seed++;
      SCOPED_TRACE(c.describe());
      Problem problem(c);
      const fp8attn::KernelConfig config =
          fp8attn::select_config(fp8attn::describe_problem(problem.params(), device));
      covered.insert(config.key.to_string());
      const fp8attn::Status status = problem.run();
      ASSERT_TRUE(status.ok()) << status.message();
      const Metrics m = problem.check(problem.download());
      EXPECT_TRUE(m.passed) << m.failure;
    }
  }
  for (const std::string& kernel : compiled)
    EXPECT_TRUE(covered.count(kernel)) << "no call of this test selects the compiled kernel " << kernel;
}

}  // namespace
}  // namespace fp8attn_test
