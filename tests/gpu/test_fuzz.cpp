// fp8attn GPU tests: random configurations against the fp64 reference (docs/accuracy.md's bar, as every harness
// case).
//
// Each run draws FP8ATTN_FUZZ_COUNT configurations (default 500) from a seed that changes per run and is
// printed; FP8ATTN_FUZZ_SEED fixes it, and FP8ATTN_FUZZ_ONLY=i replays configuration i of that seed alone.
// The draw spans every layout (dense, dense + seqused_k, varlen, varlen q over dense K, paged with every page
// size 16..256 under varlen or dense q), decode and prefill lengths including 0 and 1, MHA/GQA/MQA, masks
// (none, causal, window, causal + window), sinks, every descale form, split counts, fp16/bf16 outputs,
// strided views, padding rows and loose max_seqlen bounds, and every head-dim pair this build compiled.
// Sizes are bounded so that the fp64 CPU reference (the cost) keeps 500 configurations well under a minute.
//
// A fifth of the configurations (kMixedShare) are instead the step vLLM issues under chunked prefill: ONE varlen
// call holding 2-30 decoding requests of 1-4 query rows (decode, speculative decode) and one or two prefill
// chunks of 100-1500 rows, usually after earlier context (random_mixed_case), with num_splits 0, 1 or 2..64.
// Independently, about a third of all configurations store K and V as vLLM 0.34's cache does: the two halves
// of each cache row (V = K + d bytes), in HND or NHD order, sometimes inside a layer-interleaved buffer
// (harness.h KvRows, kv_layers). Also independently: a quarter write an E4M3 out (output_scale, judged against
// the same call's bf16 out quantized alike) and a fifth cap the logits (softcap 50, Gemma-2's, or 2, where tanh
// is far from linear). And a fifth take a 16-bit q (issue 35: bf16 or fp16, quantized per row by the kernel, so
// with no q_descale), a tenth of those with each sequence's first query row all zeros; and a fifth of those with
// d == dv and separate K/V rows pass v as k itself (K = V, Gemma-4's global layers). These choices come from
// streams of their own, so the rest of a configuration i of a seed is what it was without them.
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
// Mixed prefill + decode configurations: their share, and their budgets. The reference there is counted over the
// keys each row sees (a causal chunk's rows see about half), and the host-generated input elements (q, k, v: one
// seeded draw each) are bounded too, since a long chunk beside many requests' keys makes many.
constexpr double kMixedShare = 0.2;
constexpr double kMixedWorkBudget = 6e8;
constexpr double kMixedInputBudget = 6e6;
constexpr int kMinPrefillRows = 100;
// Share of all configurations with vLLM 0.34's row-halves K/V.
constexpr double kRowHalvesShare = 0.3;
// Streams of the draws that decide a configuration's kind and its K/V rows, apart from random_case's.
constexpr uint64_t kMixedStream = 0x6D697865642D6B76ull;
constexpr uint64_t kRowsStream = 0x726F772D68616C66ull;
// Shares and stream of the E4M3 out and the softcap.
constexpr double kE4M3OutShare = 0.25;
constexpr double kSoftcapShare = 0.2;
constexpr uint64_t kOutputStream = 0x6F75742D63617073ull;
// Share and stream of the 16-bit q, and the share of those whose sequences start with a query row of zeros.
constexpr double kSixteenBitQShare = 0.2;
constexpr double kZeroQRowShare = 0.1;
constexpr uint64_t kQueryStream = 0x7131362D62697473ull;
// K = V (v is k: Gemma-4's global layers) in a fifth of the configurations whose d == dv and whose K/V rows are
// separate (harness.h Case::kv_shared).
constexpr double kSharedKvShare = 0.2;
constexpr uint64_t kSharedKvStream = 0x6B763D762D6F6E65ull;

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

// Head dims (a compiled pair) and heads (MHA, GQA, MQA): drawn alike for every kind of configuration.
void draw_head_dims_and_heads(Draw& draw, Case& c) {
  const auto [d, dv] = draw.pick(compiled_head_dims());
  c.head_dim = d;
  c.head_dim_v = dv;
  c.heads_kv = draw.pick({1, 1, 2, 4});
  c.heads_q = c.heads_kv * draw.pick({1, 2, 4, 8});
}

// Descale forms, sink, output dtype and LSE: drawn alike for every kind of configuration.
void draw_outputs_and_scales(Draw& draw, Case& c) {
  const DescaleForm forms[] = {DescaleForm::kNone, DescaleForm::kScalar, DescaleForm::kPerBatchHead,
                               DescaleForm::kBroadcastAll, DescaleForm::kBroadcastBatch};
  c.descale_q = forms[draw.uniform(0, 4)];
  c.descale_k = forms[draw.uniform(0, 4)];
  c.descale_v = forms[draw.uniform(0, 4)];
  c.sink = draw.pick({SinkType::kNone, SinkType::kNone, SinkType::kF32, SinkType::kBF16});
  c.out_dtype = draw.chance(0.5) ? FP8ATTN_DTYPE_BF16 : FP8ATTN_DTYPE_F16;
  c.lse = draw.chance(0.85);
}

Case random_case(uint64_t seed, int index) {
  Draw draw(mix(seed ^ mix(static_cast<uint64_t>(index))));
  Case c;
  draw_head_dims_and_heads(draw, c);
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
  draw_outputs_and_scales(draw, c);
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

// Keys that query row i of a sequence (q_len rows over k_len keys) sees, summed over its rows: the case's mask,
// bottom-right aligned as the reference's (causal means a right window of 0).
double visible_keys(const Case& c, int q_len, int k_len) {
  const int64_t right = c.causal ? 0 : c.window_right;
  const int64_t left = c.window_left;
  double total = 0;
  for (int64_t i = 0; i < q_len; ++i) {
    const int64_t diagonal = i + k_len - q_len;
    const int64_t first = left >= 0 ? std::max<int64_t>(0, diagonal - left) : 0;
    const int64_t last = right >= 0 ? std::min<int64_t>(k_len - 1, diagonal + right) : k_len - 1;
    if (last >= first) total += static_cast<double>(last - first + 1);
  }
  return total;
}

double masked_reference_work(const Case& c) {
  double work = 0;
  for (int b = 0; b < c.batch; ++b) work += visible_keys(c, c.seqlens_q[b], c.seqlens_k[b]);
  return work * c.heads_q * (c.head_dim + c.head_dim_v);
}

double input_elements(const Case& c) {
  double rows_q = 0, rows_k = 0;
  for (int b = 0; b < c.batch; ++b) {
    rows_q += c.seqlens_q[b];
    rows_k += c.seqlens_k[b];
  }
  return rows_q * c.heads_q * c.head_dim + rows_k * c.heads_kv * (c.head_dim + c.head_dim_v);
}

// vLLM's chunked-prefill step in one varlen call: decoding requests (1-4 query rows each: decode and speculative
// decode) and one or two prefill chunks of 100-1500 rows, decode rows first as vLLM orders them (in one
// configuration of 4 the requests are shuffled instead). A request's keys include its query rows (vLLM's new
// tokens are the last of the context), except rarely, where its first rows see no key. Paged K/V mostly, with
// 16-token pages in half of those, else varlen K; causal, or causal + vLLM's window (w - 1, 0), rarely no mask;
// num_splits 0 (heuristic), 1, or 2..64 (a ceiling, as vLLM's 32 under CUDA graphs).
Case random_mixed_case(uint64_t seed, int index) {
  Draw draw(mix(mix(seed ^ kMixedStream) ^ mix(static_cast<uint64_t>(index))));
  Case c;
  draw_head_dims_and_heads(draw, c);
  c.varlen_q = true;

  struct Request {
    int q, k;
    bool prefill;
  };
  std::vector<Request> requests;
  const int decodes = draw.uniform(2, 30);
  for (int i = 0; i < decodes; ++i) {
    const int q = draw.uniform(1, 4);
    const int k = draw.chance(0.05) ? draw.uniform(0, q - 1) : q + draw.length(1500);
    requests.push_back({q, k, false});
  }
  const int prefills = draw.chance(0.3) ? 2 : 1;
  for (int i = 0; i < prefills; ++i) {
    const int q = draw.uniform(kMinPrefillRows, 1500);
    requests.push_back({q, q + (draw.chance(0.4) ? 0 : draw.uniform(1, 2000)), true});
  }
  if (draw.chance(0.25)) {
    std::mt19937_64 order(draw.bits());
    std::shuffle(requests.begin(), requests.end(), order);
  }

  switch (draw.uniform(0, 4)) {
    case 0:
      c.kv = KvLayout::kVarlen;
      c.spare_k_rows = draw.pick({0, 0, 3});
      break;
    default:
      c.kv = KvLayout::kPaged;
      c.page_size = draw.chance(0.5) ? 16 : 16 * draw.uniform(1, 16);
      c.spare_pages = draw.uniform(1, 4);
      break;
  }
  c.spare_q_rows = draw.pick({0, 0, 2});
  c.extra_max_seqlen = draw.pick({0, 0, 0, 7, 100});
  c.strided = draw.chance(0.25);
  switch (draw.uniform(0, 9)) {
    case 9:  // no mask (cross-attention-like)
      break;
    case 7:
    case 8:
      c.causal = true;
      c.window_left = draw.pick({0, 15, 127, 255, 1023});
      c.window_right = 0;
      break;
    default:
      c.causal = true;
      break;
  }
  draw_outputs_and_scales(draw, c);
  switch (draw.uniform(0, 5)) {
    case 0:
    case 1:
      c.num_splits = 0;
      break;
    case 2:
      c.num_splits = 1;
      break;
    default:
      c.num_splits = draw.uniform(2, 64);
      break;
  }
  c.splits_exact = false;  // read as the public API reads it (a ceiling), as vLLM's calls are
  c.seed = draw.bits();

  auto store = [&] {
    c.batch = static_cast<int>(requests.size());
    c.seqlens_q.clear();
    c.seqlens_k.clear();
    for (const Request& r : requests) {
      c.seqlens_q.push_back(r.q);
      c.seqlens_k.push_back(r.k);
    }
  };
  store();
  // Within the budgets, shrinking first what keeps the step's shape longest: the decoding requests' keys when
  // the inputs are too many (they are most of them), the chunks' earlier context, the chunks' rows (never below
  // kMinPrefillRows), and last the decoding requests' keys when the reference work is still too much.
  while (true) {
    const bool input_over = input_elements(c) > kMixedInputBudget;
    if (!input_over && masked_reference_work(c) <= kMixedWorkBudget) break;
    bool shrunk = false;
    auto shrink_context = [&](bool prefill) {
      for (Request& r : requests) {
        if (r.prefill == prefill && r.k > r.q) {
          r.k = r.q + (r.k - r.q) / 2;
          shrunk = true;
        }
      }
    };
    if (input_over) shrink_context(false);
    if (!shrunk) shrink_context(true);
    if (!shrunk) {
      for (Request& r : requests) {
        if (r.prefill && r.q > kMinPrefillRows) {
          r.q = r.k = std::max(kMinPrefillRows, r.q * 3 / 4);
          shrunk = true;
        }
      }
    }
    if (!shrunk) shrink_context(false);
    if (!shrunk) break;
    store();
  }
  return c;
}

// Configuration i of a run: a mixed step (kMixedShare) or random_case's, then vLLM 0.34's row-halves K/V, the
// E4M3 out, the softcap, the 16-bit q and K = V, each for a share of either.
Case fuzz_case(uint64_t seed, int index) {
  Draw kind(mix(mix(seed ^ kMixedStream ^ 1) ^ mix(static_cast<uint64_t>(index))));
  Case c = kind.chance(kMixedShare) ? random_mixed_case(seed, index) : random_case(seed, index);
  Draw rows(mix(mix(seed ^ kRowsStream) ^ mix(static_cast<uint64_t>(index))));
  if (rows.chance(kRowHalvesShare)) {
    c.kv_rows = rows.chance(0.5) ? KvRows::kRowHalvesHnd : KvRows::kRowHalvesNhd;
    c.kv_layers = rows.pick({1, 1, 2, 3});
  }
  Draw output(mix(mix(seed ^ kOutputStream) ^ mix(static_cast<uint64_t>(index))));
  if (output.chance(kE4M3OutShare)) { c.out_dtype = FP8ATTN_DTYPE_E4M3; }
  if (output.chance(kSoftcapShare)) { c.softcap = output.pick({50.0f, 2.0f}); }
  Draw query(mix(mix(seed ^ kQueryStream) ^ mix(static_cast<uint64_t>(index))));
  if (query.chance(kSixteenBitQShare)) {
    c.q_dtype = query.chance(0.5) ? FP8ATTN_DTYPE_BF16 : FP8ATTN_DTYPE_F16;
    c.descale_q = DescaleForm::kNone;  // the kernel's row scale takes its place
    c.zero_q_rows = query.chance(kZeroQRowShare) ? 1 : 0;
  }
  Draw shared(mix(mix(seed ^ kSharedKvStream) ^ mix(static_cast<uint64_t>(index))));
  if (shared.chance(kSharedKvShare) && c.head_dim == c.head_dim_v && c.kv_rows == KvRows::kSeparate) {
    c.kv_shared = true;
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
    const Case c = fuzz_case(seed, i);
    std::string failure;
    bool context_lost = false;
    try {
      Problem problem(c);
      Metrics m;
      const fp8attn::Status status = problem.run_and_check(&m);
      if (!status.ok()) {
        failure = "fp8attn::fwd returned " + std::to_string(static_cast<int>(status.code())) + ": " + status.message();
      } else if (!m.passed) {
        failure = m.failure;
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
// together they reach every kernel. The prefill calls' sequences have about the same query lengths, so that
// they take the direct grid; the mixed call (decodes beside a chunk) takes the varlen schedule. A bf16 q's decode
// call reaches the head dims' q16 kernel. At d512 the paged calls pass v as k (K = V: each tile loaded once), the
// others separate K and V, so both of its load paths run; its decode calls reach the swapped-operand kernels, and a
// bf16 q's prefill call the q16 kernel of every other call (below d512 the decode call's q16 kernel serves it too).
enum class CallKind { kDecode, kPrefill, kLongPrefill, kMixed, kSixteenBitQDecode, kSixteenBitQPrefill };

TEST(KernelVariants, EachCompiledKernelMatchesTheReference) {
  std::set<std::string> compiled, covered;
  std::istringstream lines(fp8attn_compiled_kernels());
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.find("one_level") == std::string::npos) compiled.insert(line);
  fp8attn::DeviceInfo device;
  ASSERT_TRUE(fp8attn::query_device(&device).ok());
  uint64_t seed = 7000;
  for (const auto& [d, dv] : compiled_head_dims()) {
    for (const CallKind kind : {CallKind::kDecode, CallKind::kPrefill, CallKind::kLongPrefill, CallKind::kMixed,
                                CallKind::kSixteenBitQDecode, CallKind::kSixteenBitQPrefill}) {
      // The long call exists for the 192-row tiles (dv = 64); at d512 its fp64 reference would cost seconds for nothing.
      if (kind == CallKind::kLongPrefill && dv == 512) continue;
      if (kind == CallKind::kSixteenBitQPrefill && dv != 512) continue;
      const bool paged = kind == CallKind::kDecode || kind == CallKind::kMixed || kind == CallKind::kSixteenBitQDecode;
      Case c;
      c.head_dim = d;
      c.head_dim_v = dv;
      c.heads_q = 8;
      c.heads_kv = 2;
      c.varlen_q = true;
      switch (kind) {
        case CallKind::kDecode:
        case CallKind::kSixteenBitQDecode:
          c.seqlens_q = {1, 1, 1};
          c.seqlens_k = {700, 33, 1};
          break;
        case CallKind::kPrefill:
        case CallKind::kSixteenBitQPrefill:
          c.seqlens_q = {200, 190, 185};
          c.seqlens_k = {300, 190, 1100};
          break;
        case CallKind::kLongPrefill:
          c.seqlens_q = {576, 540};
          c.seqlens_k = {8300, 5000};
          break;
        case CallKind::kMixed:
          c.seqlens_q = {1, 1, 300, 1};
          c.seqlens_k = {700, 33, 900, 1};
          break;
      }
      c.batch = static_cast<int>(c.seqlens_q.size());
      c.kv = paged ? KvLayout::kPaged : KvLayout::kVarlen;
      c.page_size = 32;
      c.causal = true;
      c.sink = paged ? SinkType::kF32 : SinkType::kNone;
      if (kind == CallKind::kSixteenBitQDecode || kind == CallKind::kSixteenBitQPrefill) {
        c.q_dtype = FP8ATTN_DTYPE_BF16;
        c.out_dtype = FP8ATTN_DTYPE_BF16;
      }
      c.kv_shared = paged && d == 512 && dv == 512;
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
