// fp8attn GPU test harness (see harness.h).
#include "harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "host/api_internal.h"
#include "host/config.h"

namespace fp8attn_test {
namespace {

using fp8attn::StatusCode;
namespace ref = fp8attn::ref;

constexpr uint8_t kE4m3NaN = 0x7F;     // E4M3 S.1111.111: the byte every non-input q/k/v byte holds
constexpr uint16_t kSixteenBitNaN = 0x7FFF;  // every non-input element of a 16-bit q: NaN in fp16 and in bf16
constexpr uint8_t kPoisonByte = 0xFF;  // out/lse/workspace fill: 0xFFFF is NaN in fp16 and bf16, 0xFFFFFFFF in fp32
constexpr uint16_t kPoisonOut = 0xFFFF;
constexpr uint8_t kPoisonOutE4M3 = 0xFF;  // -NaN in E4M3
constexpr uint32_t kPoisonLse = 0xFFFFFFFF;

// ---- The LSE bar ----------------------------------------------------------------------------------------
//
// docs/accuracy.md's bar binds the output. The LSE gets a bar of the same form, 2·max|emulation − exact| + slack, plus
// one term the emulation cannot supply, per (batch, row, q head):
//
//   |lse − exact| <= 2·max|emul_lse − exact_lse| (over the case) + 1e-3 + 2^-11·M_row,
//   M_row = max over the keys j visible to the row of |scale|·Σ_c |q_c·k_jc|,
//   scale = softmax_scale·q_descale·k_descale (of the row's batch entry and kv head),
//
// with q and k the decoded inputs (a 16-bit q's own values: the kernel's E4M3 row times its row scale differs
// from them by at most half an E4M3 ulp, 2^-4 relative). Where the term comes from:
//   - The kernel computes QK^T on FP8 WGMMA, whose accumulator keeps only ~13-14 mantissa bits and truncates
//     (the products of each k-group are aligned to the largest exponent and the bits below ~2^-13 of it are
//     dropped; DeepSeek-V3 §3.3.2 measures "around 14 bits"; FlashAttention-3's FP8 path has the same
//     property). So each score s_j = scale·Σ_c q_c k_jc comes out with an error of order 2^-13 of the magnitude
//     of what was summed: every partial sum, and every addend, is at most S_j = |scale|·Σ_c |q_c k_jc| in
//     magnitude, so each truncating addition costs at most about 2^-13·S_j.
//   - The emulation (ref::Mode::kEmulation) sums scores in fp32 (24 bits): it does not show this error.
//   - The LSE inherits score errors directly: LSE = log(Σ_j exp(s_j) [+ exp(sink)]) gives
//       δLSE = Σ_j p_j·δs_j,  so  |δLSE| <= max_j |δs_j| <= (error per unit of S)·M_row,
//     p_j being the softmax weights (summing to 1, or less with a sink, which has no GEMM error). The output
//     mostly does not: an error common to a row's scores cancels in the softmax, and the output bar of
//     docs/accuracy.md holds.
//   - 2^-11 = 4·2^-13: the accumulator's ~2^-13 relative precision, with margin for a few truncating additions
//     (one per k-group of the WGMMA chain, d/32 of them; truncations all go toward zero, so on the large
//     scores that dominate the LSE they add up rather than cancel). The H200 errors that led to this bar
//     (1e-4..9e-4 of the LSE, kernel always below exact, only where descales enlarge the scores) fit it: a CPU
//     model of the kernel (scores summed over k-groups of 32, each group's sum truncated 13 bits below its
//     largest addend) gives errors of that size, at most 20% of this bar over the suite (38% with 12 bits).
//   - The max over keys rather than the softmax-weighted average: an upper bound that needs no softmax, so a
//     softmax bug cannot widen its own bar. M_row is exact (one fp32 pass of |q|·|k| over each row's visible
//     keys, ~8% of the time of the two references), not the Cauchy–Schwarz bound ‖q‖·max‖k‖, 1.4-2x looser.
// What it still catches: over the suite's cases M_row is at most ~90 (median ~16; q, k ~ N(0,1), descales in
// [0.5, 2]), so the term is ~0.008 typically and under 0.045 at most. An LSE shifted by 0.05 fails in every
// case with an LSE, and one scaled by 1.01 in all but a case whose |LSE| is ~0.5 (CPU dry run, with a fake
// kernel that writes the emulation's results, shifted or scaled).
constexpr double kLseAbsoluteSlack = 1e-3;             // natural log
constexpr double kScoreRelativeError = 1.0 / 2048.0;  // 2^-11 per unit of M_row

template <typename T>
std::string join(const std::vector<T>& values) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < values.size(); ++i) os << (i ? "," : "") << values[i];
  os << "]";
  return os.str();
}

const char* kv_label(KvLayout kv) {
  switch (kv) {
    case KvLayout::kDense:
      return "dense";
    case KvLayout::kVarlen:
      return "varlen";
    case KvLayout::kPaged:
      return "paged";
  }
  return "?";
}

const char* kv_rows_label(KvRows rows) {
  switch (rows) {
    case KvRows::kSeparate:
      return "separate";
    case KvRows::kRowHalvesHnd:
      return "halves_hnd";
    case KvRows::kRowHalvesNhd:
      return "halves_nhd";
  }
  return "?";
}

const char* descale_label(DescaleForm form) {
  switch (form) {
    case DescaleForm::kNone:
      return "none";
    case DescaleForm::kScalar:
      return "scalar";
    case DescaleForm::kPerBatchHead:
      return "bh";
    case DescaleForm::kBroadcastAll:
      return "bcast00";
    case DescaleForm::kBroadcastBatch:
      return "bcast01";
  }
  return "?";
}

const char* sink_label(SinkType sink) {
  switch (sink) {
    case SinkType::kNone:
      return "none";
    case SinkType::kF32:
      return "f32";
    case SinkType::kBF16:
      return "bf16";
  }
  return "?";
}

// One ulp of bf16 at magnitude x (the bf16 significand has 8 bits): 2^(floor(log2 x) - 7).
double ulp_bf16(double x) {
  if (!(x > 0)) return 0;
  int exponent = 0;
  std::frexp(x, &exponent);  // x = m * 2^exponent, m in [0.5, 1)
  return std::ldexp(1.0, exponent - 1 - 7);
}

// One ulp of E4M3 at magnitude x (3 mantissa bits; subnormals below 2^-6 are 2^-9 apart).
double ulp_e4m3(double x) {
  if (!(x >= std::ldexp(1.0, -6))) return std::ldexp(1.0, -9);
  int exponent = 0;
  std::frexp(x, &exponent);
  return std::ldexp(1.0, exponent - 1 - 3);
}

// Rejects descriptions the harness cannot lay out, or that the API contract forbids, before any work.
void check_case(const Case& c) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("bad test case (" + why + "): " + c.describe());
  };
  if (c.batch < 1) fail("batch < 1");
  if (static_cast<int>(c.seqlens_q.size()) != c.batch || static_cast<int>(c.seqlens_k.size()) != c.batch)
    fail("seqlens_q / seqlens_k need one entry per batch entry");
  for (int b = 0; b < c.batch; ++b)
    if (c.seqlens_q[b] < 0 || c.seqlens_k[b] < 0) fail("negative length");
  if (c.heads_q % c.heads_kv != 0) fail("heads_q must be a multiple of heads_kv");
  const bool equal_q = std::all_of(c.seqlens_q.begin(), c.seqlens_q.end(), [&](int n) { return n == c.seqlens_q[0]; });
  const bool equal_k = std::all_of(c.seqlens_k.begin(), c.seqlens_k.end(), [&](int n) { return n == c.seqlens_k[0]; });
  if (!c.varlen_q && (!equal_q || c.spare_q_rows != 0)) fail("dense q needs equal lengths and no spare rows");
  switch (c.kv) {
    case KvLayout::kDense:
      if (!c.seqused_k && (!equal_k || c.spare_k_rows != 0)) fail("dense K without seqused_k needs equal lengths");
      if (c.varlen_q && !c.seqused_k)
        fail("varlen q with dense K needs seqused_k (exactly one of cu_seqlens_k/seqused_k)");
      break;
    case KvLayout::kVarlen:
      if (!c.varlen_q) fail("cu_seqlens_k needs cu_seqlens_q");
      if (c.seqused_k) fail("cu_seqlens_k and seqused_k together are refused with varlen q");
      break;
    case KvLayout::kPaged:
      if (c.page_size <= 0 || c.page_size % 16 != 0) fail("page_size must be a positive multiple of 16");
      break;
  }
  if (c.kv_layers < 1) fail("kv_layers < 1");
  if (c.kv_layers > 1 && c.kv_rows == KvRows::kSeparate) fail("kv_layers > 1 needs row-halves K/V (kv_rows)");
  if (c.kv_shared && (c.head_dim != c.head_dim_v || c.kv_rows != KvRows::kSeparate))
    fail("kv_shared (v is k) needs d == dv and separate K/V rows");
  if (c.q_dtype != FP8ATTN_DTYPE_E4M3 && c.q_dtype != FP8ATTN_DTYPE_F16 && c.q_dtype != FP8ATTN_DTYPE_BF16)
    fail("q_dtype must be E4M3, F16 or BF16");
  if (c.q_dtype != FP8ATTN_DTYPE_E4M3 && c.descale_q != DescaleForm::kNone)
    fail("a 16-bit q takes no q_descale (the kernel quantizes it per row): descale_q must be kNone");
  if (c.zero_q_rows < 0) fail("zero_q_rows < 0");
}

// The random inputs of one case, drawn in a fixed order (q, k, v, descales, sink) that does not depend on
// the layout (strided or not, paged or not): the same seed gives the same numbers.
class InputSource {
 public:
  explicit InputSource(uint64_t seed) : rng_(seed) {}
  float normal(float mean, float std) { return mean + std * normal_(rng_); }
  uint8_t e4m3(float mean, float std) { return ref::float_to_e4m3(normal(mean, std)); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }

 private:
  std::mt19937_64 rng_;
  std::normal_distribution<float> normal_{0.0f, 1.0f};
};

// M_row of the LSE bar (see "The LSE bar" above) for every row, laid out as ref::Result::lse: [num_heads_q,
// total_rows], 0 for a row that sees no key. From host params (host pointers), with the reference's semantics:
// lengths from seqused_k, else cu_seqlens_k, else seqlen_k; bottom-right aligned windows, causal meaning
// window_right = 0. Work is split as the reference splits it, over (sequence, kv head, packed rows), and each
// chunk of |K| is decoded once for all rows of a task; the sums run in fp32, which is far more than enough
// here (positive addends, each an exact product of two E4M3 magnitudes).
std::vector<double> score_magnitudes(const fp8attn_fwd_params& p, int64_t total_rows) {
  constexpr int64_t kKeysPerChunk = 256;
  // Register blocking: kRowBlock x kKeyBlock sums at a time, each |K| value loaded once for kRowBlock rows.
  constexpr int kRowBlock = 4, kKeyBlock = 8;
  constexpr int64_t kKeyStride = kKeysPerChunk + kKeyBlock;
  const int hq = p.num_heads_q, group = p.num_heads_q / p.num_heads_kv, d = p.head_dim;
  const int64_t window_left = p.window_left, window_right = p.causal ? 0 : p.window_right;
  std::vector<double> result(static_cast<size_t>(hq) * total_rows, 0.0);

  std::array<float, 256> magnitude{};
  for (int code = 0; code < 256; ++code) magnitude[code] = std::fabs(ref::e4m3_to_float(static_cast<uint8_t>(code)));
  // |q| at element i of q, in q's dtype.
  auto q_magnitude = [&](int64_t i) -> float {
    switch (p.q_dtype) {
      case FP8ATTN_DTYPE_F16:
        return std::fabs(ref::f16_to_float(static_cast<const uint16_t*>(p.q)[i]));
      case FP8ATTN_DTYPE_BF16:
        return std::fabs(ref::bf16_to_float(static_cast<const uint16_t*>(p.q)[i]));
      default:
        return magnitude[static_cast<const uint8_t*>(p.q)[i]];
    }
  };
  auto descale = [](const fp8attn_descale& ds, int b, int h) -> double {
    if (ds.ptr == nullptr) return 1.0;
    return ds.ndim == 0 ? ds.ptr[0] : ds.ptr[b * ds.batch_stride + h * ds.head_stride];
  };

  struct Sequence {
    int64_t q_len = 0, row_begin = 0, q_offset = 0, k_len = 0, k_begin = 0;
  };
  std::vector<Sequence> sequences(p.batch);
  for (int b = 0; b < p.batch; ++b) {
    Sequence& s = sequences[b];
    if (p.cu_seqlens_q) {
      s.row_begin = p.cu_seqlens_q[b];
      s.q_len = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
      s.q_offset = s.row_begin * p.q_row_stride;
    } else {
      s.q_len = p.seqlen_q;
      s.row_begin = int64_t{b} * p.seqlen_q;
      s.q_offset = b * p.q_batch_stride;
    }
    if (p.cu_seqlens_k) s.k_begin = p.cu_seqlens_k[b];
    s.k_len = p.seqused_k ? p.seqused_k[b] : p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : p.seqlen_k;
  }
  // Byte offset of key j (head 0) of sequence b in k.
  auto key_offset = [&](int b, int64_t j) -> int64_t {
    if (p.block_table)
      return p.block_table[b * p.block_table_batch_stride + j / p.page_size] * p.k_batch_stride +
             (j % p.page_size) * p.k_row_stride;
    if (p.cu_seqlens_k) return (sequences[b].k_begin + j) * p.k_row_stride;
    return b * p.k_batch_stride + j * p.k_row_stride;
  };

  struct Task {
    int b, kv_head;
    int64_t begin, end;  // packed rows: q head kv_head * group + r / q_len, query row r % q_len
  };
  const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  int64_t packed_total = 0;
  for (const Sequence& s : sequences) packed_total += s.q_len * hq;
  const int64_t rows_per_task = std::clamp<int64_t>(packed_total / (4 * threads), 8, 32);
  std::vector<Task> tasks;
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.num_heads_kv; ++h)
      for (int64_t r = 0; r < sequences[b].q_len * group; r += rows_per_task)
        tasks.push_back({b, h, r, std::min(sequences[b].q_len * group, r + rows_per_task)});

  std::atomic<size_t> next{0};
  auto worker = [&] {
    // |K| of a chunk, transposed: [d][kKeyStride]; columns past the chunk's keys are never visible to a row.
    std::vector<float> k_abs(static_cast<size_t>(d) * kKeyStride, 0.0f);
    std::vector<float> q_abs, row_max;  // [rows padded to kRowBlock][d], [rows]
    std::vector<int64_t> first, last, out_index;
    for (size_t t = next++; t < tasks.size(); t = next++) {
      const Task& task = tasks[t];
      const Sequence& s = sequences[task.b];
      const auto* k = static_cast<const uint8_t*>(p.k) + task.kv_head * p.k_head_stride;
      const int64_t rows = task.end - task.begin, padded_rows = (rows + kRowBlock - 1) / kRowBlock * kRowBlock;
      q_abs.assign(padded_rows * d, 0.0f);
      first.assign(padded_rows, 0);
      last.assign(padded_rows, -1);  // padding rows see no key
      out_index.assign(rows, 0);
      row_max.assign(padded_rows, 0.0f);
      int64_t hull_first = std::numeric_limits<int64_t>::max(), hull_last = -1;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t packed = task.begin + i;
        const int head = task.kv_head * group + static_cast<int>(packed / s.q_len);
        const int64_t row = packed % s.q_len, diagonal = row + s.k_len - s.q_len;
        first[i] = window_left < 0 ? 0 : std::max<int64_t>(0, diagonal - window_left);
        last[i] = window_right < 0 ? s.k_len - 1 : std::min(s.k_len - 1, diagonal + window_right);
        out_index[i] = head * total_rows + s.row_begin + row;
        const int64_t q_row = s.q_offset + row * p.q_row_stride + head * p.q_head_stride;
        for (int c = 0; c < d; ++c) q_abs[i * d + c] = q_magnitude(q_row + c);
        if (first[i] <= last[i]) {
          hull_first = std::min(hull_first, first[i]);
          hull_last = std::max(hull_last, last[i]);
        }
      }
      for (int64_t chunk = hull_first; chunk <= hull_last; chunk += kKeysPerChunk) {
        const int64_t chunk_last = std::min(chunk + kKeysPerChunk, hull_last + 1) - 1;
        for (int64_t j = chunk; j <= chunk_last; ++j) {
          const uint8_t* k_row = k + key_offset(task.b, j);
          for (int c = 0; c < d; ++c) k_abs[c * kKeyStride + (j - chunk)] = magnitude[k_row[c]];
        }
        // Blocks of kRowBlock rows x kKeyBlock keys over the keys any row of the block sees in this chunk;
        // each row then takes the max over the keys it sees.
        for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
          int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
          for (int r = 0; r < kRowBlock; ++r) {
            const int64_t row_lo = std::max(first[r0 + r], chunk), row_hi = std::min(last[r0 + r], chunk_last);
            if (row_lo > row_hi) continue;
            lo = std::min(lo, row_lo);
            hi = std::max(hi, row_hi);
          }
          for (int64_t j0 = lo; j0 <= hi; j0 += kKeyBlock) {
            float sums[kRowBlock][kKeyBlock] = {};
            for (int c = 0; c < d; ++c) {
              const float* k_col = &k_abs[c * kKeyStride + (j0 - chunk)];
              for (int r = 0; r < kRowBlock; ++r) {
                const float qc = q_abs[(r0 + r) * d + c];
                for (int j = 0; j < kKeyBlock; ++j) sums[r][j] += qc * k_col[j];
              }
            }
            for (int r = 0; r < kRowBlock; ++r)
              for (int j = 0; j < kKeyBlock; ++j) {
                const int64_t key = j0 + j;
                if (key >= first[r0 + r] && key <= last[r0 + r] && key <= hi)
                  row_max[r0 + r] = std::max(row_max[r0 + r], sums[r][j]);
              }
          }
        }
      }
      const double scale = std::fabs(static_cast<double>(p.softmax_scale) * descale(p.q_descale, task.b, task.kv_head) *
                                     descale(p.k_descale, task.b, task.kv_head));
      for (int64_t i = 0; i < rows; ++i) result[out_index[i]] = scale * row_max[i];
    }
  };
  std::vector<std::thread> helpers;
  for (int64_t i = 1; i < std::min<int64_t>(threads, static_cast<int64_t>(tasks.size())); ++i)
    helpers.emplace_back(worker);
  worker();
  for (std::thread& helper : helpers) helper.join();
  return result;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------

const char* dtype_label(fp8attn_dtype dtype) {
  switch (dtype) {
    case FP8ATTN_DTYPE_F16:
      return "f16";
    case FP8ATTN_DTYPE_BF16:
      return "bf16";
    case FP8ATTN_DTYPE_F32:
      return "f32";
    case FP8ATTN_DTYPE_E4M3:
      return "e4m3";
    case FP8ATTN_DTYPE_E5M2:
      return "e5m2";
    case FP8ATTN_DTYPE_I32:
      return "i32";
    case FP8ATTN_DTYPE_NONE:
      return "none";
  }
  return "?";
}

std::string softcap_label(float softcap) {
  if (softcap == 0.0f) return "";
  std::ostringstream os;
  os << "_softcap" << softcap;
  std::string label = os.str();
  std::replace(label.begin(), label.end(), '.', 'p');  // test names allow [A-Za-z0-9_] only
  return label;
}

std::string Case::describe() const {
  std::ostringstream os;
  os << "batch=" << batch << " seqlens_q=" << join(seqlens_q) << " seqlens_k=" << join(seqlens_k)
     << " heads=" << heads_q << ":" << heads_kv << " d=" << head_dim << " dv=" << head_dim_v
     << " q=" << (varlen_q ? "varlen" : "dense") << " q_dtype=" << dtype_label(q_dtype)
     << (zero_q_rows > 0 ? " zero_q_rows=" + std::to_string(zero_q_rows) : "") << " kv=" << kv_label(kv)
     << (seqused_k ? "+seqused_k" : "");
  if (kv == KvLayout::kPaged) os << " page_size=" << page_size << " spare_pages=" << spare_pages;
  if (kv_rows != KvRows::kSeparate) os << " kv_rows=" << kv_rows_label(kv_rows) << " kv_layers=" << kv_layers;
  if (kv_shared) os << " kv_shared(v=k)";
  os << " spare_q_rows=" << spare_q_rows << " spare_k_rows=" << spare_k_rows << " extra_max_seqlen=" << extra_max_seqlen
     << " strided=" << strided << " causal=" << causal << " window=(" << window_left << "," << window_right << ")"
     << " descale(q,k,v)=" << descale_label(descale_q) << "," << descale_label(descale_k) << ","
     << descale_label(descale_v) << " sink=" << sink_label(sink) << " softcap=" << softcap
     << " out=" << dtype_label(out_dtype)
     << (out_dtype == FP8ATTN_DTYPE_E4M3 ? " output_scale=" + std::to_string(output_scale) : "")
     << " lse=" << lse
     << " num_splits=" << num_splits << " qk_std=" << qk_std << " v=N(" << v_mean << "," << v_std
     << "^2) seed=" << seed;
  return os.str();
}

// Host bytes of one tensor or array and its device copy. Empty host bytes mean "not passed" (NULL).
struct Array {
  std::vector<uint8_t> host;
  void* device = nullptr;

  template <typename T>
  void assign(const std::vector<T>& values) {
    host.resize(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(host.data(), values.data(), host.size());
  }
  // NULL when absent; `offset` bytes into the array otherwise.
  void* address(bool on_device, size_t offset = 0) {
    if (host.empty()) return nullptr;
    return static_cast<uint8_t*>(on_device ? device : host.data()) + offset;
  }
};

namespace {
// output_scale is passed exactly when out is E4M3 (validate.cpp refuses it otherwise): set on the params whenever
// their out dtype is (re)chosen.
void bind_output_scale(fp8attn_fwd_params* params, Array& output_scale, bool on_device) {
  const bool e4m3_out = params->out_dtype == FP8ATTN_DTYPE_E4M3;
  params->output_scale.ptr = e4m3_out ? static_cast<const float*>(output_scale.address(on_device)) : nullptr;
}
}  // namespace

struct Problem::Buffers {
  Array q, kv, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, q_descale, k_descale, v_descale, sink,
      output_scale;
  size_t k_offset = 0;  // bytes from the start of kv to k (a layer-interleaved cache's middle layer)
  size_t v_offset = 0;  // bytes from the start of kv to v
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  std::vector<Array*> arrays() {
    return {&q,         &kv,          &out,       &lse,       &cu_seqlens_q, &cu_seqlens_k, &seqused_k,
            &block_table, &q_descale, &k_descale, &v_descale,    &sink,         &output_scale};
  }

  ~Buffers() {
    // Destructors must not throw; a failing cudaFree here means the context is already broken, which the
    // test that broke it has reported.
    for (Array* a : arrays())
      if (a->device) cudaFree(a->device);
    if (workspace) cudaFree(workspace);
  }
};

Problem::Problem(const Case& c) : case_(c), buffers_(new Buffers) {
  check_case(c);
  Buffers& buf = *buffers_;
  InputSource inputs(c.seed);
  fp8attn_fwd_params& p = host_params_;
  fp8attn_fwd_params_init(&p);

  const int batch = c.batch, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim, dv = c.head_dim_v;
  const int max_q = *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end());
  const int max_k = *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end());
  // Stride padding when c.strided: multiples of 16 bytes, the TMA stride granularity the API requires.
  const int64_t pad = c.strided ? 1 : 0;

  p.batch = batch;
  p.num_heads_q = hq;
  p.num_heads_kv = hkv;
  p.head_dim = d;
  p.head_dim_v = dv;
  p.q_dtype = c.q_dtype;
  p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E4M3;
  p.out_dtype = c.out_dtype;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.causal = c.causal ? 1 : 0;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.softcap = c.softcap;
  p.num_splits = c.num_splits;

  // ---- q, out, lse rows ----
  std::vector<int32_t> cu_q(batch + 1, 0);
  for (int b = 0; b < batch; ++b) cu_q[b + 1] = cu_q[b] + c.seqlens_q[b];
  p.q_head_stride = d + 16 * pad;
  p.q_row_stride = hq * p.q_head_stride + 32 * pad;
  // out pads by 16 elements: 16-byte strides for an E4M3 out too (set_out_dtype keeps the layout).
  p.o_head_stride = dv + 16 * pad;
  p.o_row_stride = hq * p.o_head_stride + 16 * pad;
  int64_t q_elems = 0, out_elems = 0, lse_elems = 0;
  if (c.varlen_q) {
    p.total_q = cu_q[batch] + c.spare_q_rows;
    p.seqlen_q = max_q + c.extra_max_seqlen;
    buf.cu_seqlens_q.assign(cu_q);
    q_elems = int64_t{p.total_q} * p.q_row_stride;
    out_elems = int64_t{p.total_q} * p.o_row_stride;
    p.lse_head_stride = p.total_q + 4 * pad;
    lse_elems = hq * p.lse_head_stride;
  } else {
    p.seqlen_q = c.seqlens_q[0];
    // Batch strides stay nonzero without rows too: a zero stride on a written tensor is refused as aliasing.
    const int64_t rows = std::max(p.seqlen_q, 1);
    p.q_batch_stride = rows * p.q_row_stride + 64 * pad;
    p.o_batch_stride = rows * p.o_row_stride + 16 * pad;
    q_elems = batch * p.q_batch_stride;
    out_elems = batch * p.o_batch_stride;
    p.lse_head_stride = rows + 4 * pad;
    p.lse_batch_stride = hq * p.lse_head_stride + 4 * pad;
    lse_elems = batch * p.lse_batch_stride;
  }
  // A tensor with no rows still needs a valid (non-NULL, aligned) pointer: keep every buffer non-empty.
  const bool q_16bit = c.q_dtype != FP8ATTN_DTYPE_E4M3;
  if (q_16bit) {
    buf.q.assign(std::vector<uint16_t>(std::max<int64_t>(q_elems, 16), kSixteenBitNaN));
  } else {
    buf.q.host.assign(std::max<int64_t>(q_elems, 16), kE4m3NaN);
  }
  buf.out.host.assign(std::max<int64_t>(out_elems, 16) * 2, kPoisonByte);
  if (c.lse) buf.lse.host.assign(std::max<int64_t>(lse_elems, 4) * 4, kPoisonByte);
  // Element i of q (strides count elements of q's dtype), rounded to that dtype.
  auto store_q = [&](int64_t i, float value) {
    if (!q_16bit) {
      buf.q.host[i] = ref::float_to_e4m3(value);
      return;
    }
    const uint16_t bits = c.q_dtype == FP8ATTN_DTYPE_BF16 ? ref::float_to_bf16(value) : ref::float_to_f16(value);
    std::memcpy(&buf.q.host[2 * i], &bits, sizeof(bits));
  };
  for (int b = 0; b < batch; ++b) {
    for (int r = 0; r < c.seqlens_q[b]; ++r) {
      const int64_t row = c.varlen_q ? (cu_q[b] + r) * p.q_row_stride : b * p.q_batch_stride + r * p.q_row_stride;
      for (int h = 0; h < hq; ++h) {
        for (int col = 0; col < d; ++col) {
          const float value = inputs.normal(0.0f, c.qk_std);
          store_q(row + h * p.q_head_stride + col, r < c.zero_q_rows ? 0.0f : value);
        }
      }
    }
  }

  // ---- k/v rows: (unit, row) of each key; a unit is a batch entry (dense), the whole tensor (varlen) or a page ----
  std::vector<int32_t> cu_k(batch + 1, 0);
  std::vector<std::vector<int32_t>> pages_of(batch);  // paged: page ids of each sequence, in order
  int64_t units = 1, unit_rows = 0;
  switch (c.kv) {
    case KvLayout::kDense:
      p.seqlen_k = max_k + (c.seqused_k ? c.spare_k_rows + c.extra_max_seqlen : 0);
      units = batch;
      unit_rows = p.seqlen_k;
      break;
    case KvLayout::kVarlen:
      for (int b = 0; b < batch; ++b) cu_k[b + 1] = cu_k[b] + c.seqlens_k[b];
      p.total_k = cu_k[batch] + c.spare_k_rows;  // trailing NaN rows no sequence owns
      p.seqlen_k = max_k + c.extra_max_seqlen;
      buf.cu_seqlens_k.assign(cu_k);
      unit_rows = p.total_k;
      break;
    case KvLayout::kPaged: {
      p.seqlen_k = max_k + c.extra_max_seqlen;
      p.page_size = c.page_size;
      int used_pages = 0;
      for (int b = 0; b < batch; ++b) used_pages += (c.seqlens_k[b] + c.page_size - 1) / c.page_size;
      p.num_pages = used_pages + c.spare_pages;
      // A separate generator: the page order must not shift the input values.
      std::vector<int32_t> order(p.num_pages);
      std::iota(order.begin(), order.end(), 0);
      std::mt19937_64 layout_rng(c.seed ^ 0x5DEECE66DULL);
      std::shuffle(order.begin(), order.end(), layout_rng);
      int next = 0;
      for (int b = 0; b < batch; ++b)
        for (int k = 0; k < c.seqlens_k[b]; k += c.page_size) pages_of[b].push_back(order[next++]);
      p.max_pages_per_seq = std::max(1, (p.seqlen_k + c.page_size - 1) / c.page_size);
      p.block_table_batch_stride = p.max_pages_per_seq + 2 * pad;  // a column-sliced view when strided
      std::vector<int32_t> table(batch * p.block_table_batch_stride, kInvalidPage);
      for (int b = 0; b < batch; ++b)
        std::copy(pages_of[b].begin(), pages_of[b].end(), table.begin() + b * p.block_table_batch_stride);
      buf.block_table.assign(table);
      units = p.num_pages;
      unit_rows = p.page_size;
      break;
    }
  }
  if (c.kv == KvLayout::kPaged || c.seqused_k)
    buf.seqused_k.assign(std::vector<int32_t>(c.seqlens_k.begin(), c.seqlens_k.end()));

  if (c.kv_rows != KvRows::kSeparate) {
    // vLLM 0.34's cache: K and V are the two halves of each row of one tensor, so V = K + d bytes with K's strides.
    // A unit is a page, a batch entry (dense) or the whole varlen tensor, [heads_kv][rows][d + dv] (HND) or
    // [rows][heads_kv][d + dv] (NHD); with kv_layers > 1 each unit sits among other layers' (NaN) units, the unit
    // stride being kv_layers units, and this layer's units are the middle ones.
    const int64_t row = d + dv;
    const int64_t unit_bytes = std::max<int64_t>(unit_rows, 1) * hkv * row;
    if (c.kv_rows == KvRows::kRowHalvesHnd) {
      p.k_row_stride = p.v_row_stride = row;
      p.k_head_stride = p.v_head_stride = std::max<int64_t>(unit_rows, 1) * row;
    } else {
      p.k_head_stride = p.v_head_stride = row;
      p.k_row_stride = p.v_row_stride = hkv * row;
    }
    if (c.kv != KvLayout::kVarlen) p.k_batch_stride = p.v_batch_stride = c.kv_layers * unit_bytes;
    buf.k_offset = static_cast<size_t>((c.kv_layers / 2) * unit_bytes);
    buf.v_offset = buf.k_offset + d;
    buf.kv.host.assign(std::max<int64_t>(units * c.kv_layers * unit_bytes, 16), kE4m3NaN);
  } else if (c.strided) {
    // One interleaved cache: per unit [2][rows][heads_kv][slot] (vLLM-style K and V views of one tensor,
    // unbound along the "2" axis); varlen interleaves per row instead, [rows][2][heads_kv][slot].
    const int64_t slot = std::max(d, dv) + 16;
    p.k_head_stride = p.v_head_stride = slot;
    if (c.kv == KvLayout::kVarlen) {
      p.k_row_stride = p.v_row_stride = 2 * hkv * slot;
      buf.v_offset = hkv * slot;
      buf.kv.host.assign(std::max<int64_t>(unit_rows * p.k_row_stride, 16), kE4m3NaN);
    } else {
      p.k_row_stride = p.v_row_stride = hkv * slot;
      p.k_batch_stride = p.v_batch_stride = 2 * unit_rows * p.k_row_stride;
      buf.v_offset = unit_rows * p.k_row_stride;
      buf.kv.host.assign(std::max<int64_t>(units * p.k_batch_stride, 16), kE4m3NaN);
    }
  } else {
    p.k_head_stride = d;
    p.v_head_stride = dv;
    p.k_row_stride = hkv * d;
    p.v_row_stride = hkv * dv;
    if (c.kv != KvLayout::kVarlen) {
      p.k_batch_stride = unit_rows * p.k_row_stride;
      p.v_batch_stride = unit_rows * p.v_row_stride;
    }
    const int64_t k_bytes = units * unit_rows * p.k_row_stride;
    buf.v_offset = (k_bytes + 255) / 256 * 256;
    buf.kv.host.assign(std::max<int64_t>(buf.v_offset + units * unit_rows * p.v_row_stride, 16), kE4m3NaN);
  }
  // Byte offset of key j of sequence b, head 0, from k (add k_offset for k in kv, v_offset for v in kv).
  auto key_row = [&](int b, int j, bool is_v) -> int64_t {
    const int64_t batch_stride = is_v ? p.v_batch_stride : p.k_batch_stride;
    const int64_t row_stride = is_v ? p.v_row_stride : p.k_row_stride;
    switch (c.kv) {
      case KvLayout::kDense:
        return b * batch_stride + j * row_stride;
      case KvLayout::kVarlen:
        return (cu_k[b] + j) * row_stride;
      case KvLayout::kPaged:
        return pages_of[b][j / c.page_size] * batch_stride + (j % c.page_size) * row_stride;
    }
    return 0;
  };
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < c.seqlens_k[b]; ++j)
      for (int h = 0; h < hkv; ++h)
        for (int col = 0; col < d; ++col)
          buf.kv.host[buf.k_offset + key_row(b, j, false) + h * p.k_head_stride + col] = inputs.e4m3(0.0f, c.qk_std);
  if (c.kv_shared) {
    // v is k: the same bytes, address and strides (v_mean and v_std do not apply).
    p.v_batch_stride = p.k_batch_stride;
    p.v_row_stride = p.k_row_stride;
    p.v_head_stride = p.k_head_stride;
    buf.v_offset = buf.k_offset;
  } else {
    for (int b = 0; b < batch; ++b)
      for (int j = 0; j < c.seqlens_k[b]; ++j)
        for (int h = 0; h < hkv; ++h)
          for (int col = 0; col < dv; ++col)
            buf.kv.host[buf.v_offset + key_row(b, j, true) + h * p.v_head_stride + col] = inputs.e4m3(c.v_mean, c.v_std);
  }

  // ---- descales in [0.5, 2], each in its own form ----
  auto make_descale = [&](DescaleForm form, Array* array, fp8attn_descale* descale) {
    *descale = fp8attn_descale{};
    descale->dtype = FP8ATTN_DTYPE_F32;
    int values = 0;
    switch (form) {
      case DescaleForm::kNone:
        return;
      case DescaleForm::kScalar:
        descale->ndim = 0;
        values = 1;
        break;
      case DescaleForm::kPerBatchHead:
        descale->ndim = 2;
        descale->batch_stride = hkv;
        descale->head_stride = 1;
        values = batch * hkv;
        break;
      case DescaleForm::kBroadcastAll:
        descale->ndim = 2;
        values = 1;
        break;
      case DescaleForm::kBroadcastBatch:
        descale->ndim = 2;
        descale->head_stride = 1;
        values = hkv;
        break;
    }
    if (descale->ndim == 2) {
      descale->size[0] = batch;
      descale->size[1] = hkv;
    }
    std::vector<float> v(values);
    for (float& x : v) x = inputs.uniform(0.5f, 2.0f);
    array->assign(v);
  };
  make_descale(c.descale_q, &buf.q_descale, &p.q_descale);
  make_descale(c.descale_k, &buf.k_descale, &p.k_descale);
  make_descale(c.descale_v, &buf.v_descale, &p.v_descale);

  // ---- the E4M3 out's scale: given, or max|v| * max v_descale / 448 (O is a convex combination of v rows) ----
  output_scale_ = c.output_scale;
  if (!(output_scale_ > 0)) {
    float v_max = 0, descale_max = 1;
    for (size_t i = buf.v_offset; i < buf.kv.host.size(); ++i) {
      const float x = ref::e4m3_to_float(buf.kv.host[i]);
      if (std::isfinite(x)) v_max = std::max(v_max, std::fabs(x));
    }
    for (size_t i = 0; i + sizeof(float) <= buf.v_descale.host.size(); i += sizeof(float)) {
      float x;
      std::memcpy(&x, &buf.v_descale.host[i], sizeof(float));
      descale_max = i == 0 ? x : std::max(descale_max, x);
    }
    output_scale_ = v_max > 0 ? v_max * descale_max / 448.0f : 1.0f;
  }
  buf.output_scale.assign(std::vector<float>{output_scale_});
  p.output_scale.dtype = FP8ATTN_DTYPE_F32;
  p.output_scale.ndim = 0;

  // ---- sink logits, in the range of the scaled scores so that they matter ----
  if (c.sink != SinkType::kNone) {
    std::vector<float> logits(hq);
    for (float& x : logits) x = inputs.uniform(-2.0f, 4.0f);
    if (c.sink == SinkType::kF32) {
      p.sink_dtype = FP8ATTN_DTYPE_F32;
      buf.sink.assign(logits);
    } else {
      p.sink_dtype = FP8ATTN_DTYPE_BF16;
      std::vector<uint16_t> bits(hq);
      for (int h = 0; h < hq; ++h) bits[h] = ref::float_to_bf16(logits[h]);
      buf.sink.assign(bits);
    }
  }

  // ---- extents: the shapes and lengths of what was laid out above, as a torch caller describes its tensors ----
  auto shape = [](std::initializer_list<int64_t> sizes) {
    fp8attn_shape s{};
    s.ndim = static_cast<int32_t>(sizes.size());
    std::copy(sizes.begin(), sizes.end(), s.size);
    return s;
  };
  if (c.varlen_q) {
    p.q_shape = shape({p.total_q, hq, d});
    p.out_shape = shape({p.total_q, hq, dv});
    p.lse_shape = shape({hq, p.total_q});
  } else {
    p.q_shape = shape({batch, p.seqlen_q, hq, d});
    p.out_shape = shape({batch, p.seqlen_q, hq, dv});
    p.lse_shape = shape({batch, hq, p.seqlen_q});
  }
  switch (c.kv) {
    case KvLayout::kDense:
      p.k_shape = shape({batch, p.seqlen_k, hkv, d});
      p.v_shape = shape({batch, p.seqlen_k, hkv, dv});
      break;
    case KvLayout::kVarlen:
      p.k_shape = shape({p.total_k, hkv, d});
      p.v_shape = shape({p.total_k, hkv, dv});
      break;
    case KvLayout::kPaged:
      p.k_shape = shape({p.num_pages, p.page_size, hkv, d});
      p.v_shape = shape({p.num_pages, p.page_size, hkv, dv});
      p.block_table_rows = batch;
      break;
  }
  p.cu_seqlens_q_len = static_cast<int64_t>(buf.cu_seqlens_q.host.size() / sizeof(int32_t));
  p.cu_seqlens_k_len = static_cast<int64_t>(buf.cu_seqlens_k.host.size() / sizeof(int32_t));
  p.seqused_k_len = static_cast<int64_t>(buf.seqused_k.host.size() / sizeof(int32_t));
  p.sink_len = hq;
  // Like torch, the device params name no address for a tensor without elements (the host copies keep one
  // for the references): a batch whose every key length is 0 passes NULL k and v, total_q == 0 NULL q/out/lse.
  const bool no_query_rows = (c.varlen_q ? p.total_q : p.seqlen_q) == 0;
  const bool no_key_rows = c.kv == KvLayout::kDense ? p.seqlen_k == 0 : c.kv == KvLayout::kVarlen && p.total_k == 0;

  // ---- device copies, then the same params with device addresses ----
  for (Array* a : buf.arrays()) {
    if (a->host.empty()) continue;
    // Exactly the bytes laid out (cudaMalloc aligns the base to 256): compute-sanitizer's memcheck then sees
    // a read one element past any array.
    check_cuda(cudaMalloc(&a->device, a->host.size()), "cudaMalloc");
    check_cuda(cudaMemcpy(a->device, a->host.data(), a->host.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  auto bind = [&](fp8attn_fwd_params* params, bool on_device) {
    params->q = buf.q.address(on_device);
    params->k = buf.kv.address(on_device, buf.k_offset);
    params->v = buf.kv.address(on_device, buf.v_offset);
    params->out = buf.out.address(on_device);
    params->lse = static_cast<float*>(buf.lse.address(on_device));
    params->cu_seqlens_q = static_cast<const int32_t*>(buf.cu_seqlens_q.address(on_device));
    params->cu_seqlens_k = static_cast<const int32_t*>(buf.cu_seqlens_k.address(on_device));
    params->seqused_k = static_cast<const int32_t*>(buf.seqused_k.address(on_device));
    params->block_table = static_cast<const int32_t*>(buf.block_table.address(on_device));
    params->q_descale.ptr = static_cast<const float*>(buf.q_descale.address(on_device));
    params->k_descale.ptr = static_cast<const float*>(buf.k_descale.address(on_device));
    params->v_descale.ptr = static_cast<const float*>(buf.v_descale.address(on_device));
    params->sink = buf.sink.address(on_device);
    bind_output_scale(params, buf.output_scale, on_device);
  };
  device_params_ = host_params_;
  bind(&host_params_, false);
  bind(&device_params_, true);
  if (no_query_rows) device_params_.q = device_params_.out = device_params_.lse = nullptr;
  if (no_key_rows) device_params_.k = device_params_.v = nullptr;

  // A call that does not plan (the invalid-argument tests) gets no workspace; its fwd() reports the error.
  const bool plans = fp8attn::fwd_workspace_size(device_params_, &buf.workspace_bytes).ok();
  if (!plans) { buf.workspace_bytes = 0; }
  fp8attn::DeviceInfo device;
  if (plans && c.num_splits >= 2 && c.splits_exact && fp8attn::query_device(&device).ok()) {
    const fp8attn::ProblemShape problem = fp8attn::describe_problem(device_params_, device);
    exact_split_config_ = fp8attn::with_exact_splits(problem, fp8attn::select_config(problem), c.num_splits);
    exact_splits_ = true;
    buf.workspace_bytes = fp8attn::split_workspace_bytes(problem, exact_split_config_);
  }
  if (buf.workspace_bytes > 0) {
    check_cuda(cudaMalloc(&buf.workspace, buf.workspace_bytes), "cudaMalloc workspace");
    device_params_.workspace = buf.workspace;
    device_params_.workspace_bytes = buf.workspace_bytes;
  }
}

Problem::~Problem() = default;

void Problem::set_out_dtype(fp8attn_dtype dtype) {
  case_.out_dtype = dtype;
  host_params_.out_dtype = dtype;
  device_params_.out_dtype = dtype;
  bind_output_scale(&host_params_, buffers_->output_scale, false);
  bind_output_scale(&device_params_, buffers_->output_scale, true);
}

void Problem::poison(cudaStream_t stream) const {
  Buffers& buf = *buffers_;
  check_cuda(cudaMemsetAsync(buf.out.device, kPoisonByte, buf.out.host.size(), stream), "cudaMemsetAsync out");
  if (buf.lse.device)
    check_cuda(cudaMemsetAsync(buf.lse.device, kPoisonByte, buf.lse.host.size(), stream), "cudaMemsetAsync lse");
  // Split partials are written before they are read; stale NaN there exposes a split that is never written.
  if (buf.workspace)
    check_cuda(cudaMemsetAsync(buf.workspace, kPoisonByte, buf.workspace_bytes, stream), "cudaMemsetAsync workspace");
}

fp8attn::Status Problem::launch(cudaStream_t stream) const {
  if (!exact_splits_) { return fp8attn::fwd(device_params_, stream); }
  // validate_fwd accepts the exact count's workspace: it is at least the ceiling plan's.
  fp8attn::DeviceInfo device;
  fp8attn::Status status = fp8attn::query_device(&device);
  if (status.ok()) { status = fp8attn::validate_fwd(device_params_, device); }
  return status.ok() ? fp8attn::launch_with_config(device_params_, exact_split_config_, stream) : status;
}

fp8attn::Status Problem::run(cudaStream_t stream) const {
  poison(stream);
  return launch(stream);
}

Output Problem::download(cudaStream_t stream) const {
  Buffers& buf = *buffers_;
  Output o;
  o.out.resize(buf.out.host.size());
  o.lse.resize(buf.lse.host.size());
  check_cuda(cudaMemcpyAsync(o.out.data(), buf.out.device, o.out.size(), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync out");
  if (!o.lse.empty())
    check_cuda(cudaMemcpyAsync(o.lse.data(), buf.lse.device, o.lse.size(), cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync lse");
  // Also where an asynchronous kernel fault (illegal address...) surfaces.
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize after the forward call");
  return o;
}

bool Problem::untouched(const Output& output) {
  auto all_poison = [](const std::vector<uint8_t>& bytes) {
    return std::all_of(bytes.begin(), bytes.end(), [](uint8_t x) { return x == kPoisonByte; });
  };
  return all_poison(output.out) && all_poison(output.lse);
}

void Problem::compute_references() {
  if (have_references_) return;
  // ref::attention already spreads its rows over every core; the two modes run side by side so that small
  // problems (few tasks) still use two cores.
  fp8attn::Status emulation_status;
  std::thread emulation([&] { emulation_status = ref::attention(host_params_, ref::Mode::kEmulation, &emulation_); });
  const fp8attn::Status exact_status = ref::attention(host_params_, ref::Mode::kExact, &exact_);
  emulation.join();
  if (!exact_status.ok()) throw std::runtime_error("reference (exact): " + exact_status.message());
  if (!emulation_status.ok()) throw std::runtime_error("reference (emulation): " + emulation_status.message());
  // The LSE bar's M_row, only where an LSE is checked.
  if (case_.lse) score_magnitude_ = score_magnitudes(host_params_, exact_.total_rows);
  have_references_ = true;
}

Metrics Problem::check(const Output& output, const Output* eager) {
  compute_references();
  const Case& c = case_;
  const fp8attn_fwd_params& p = host_params_;
  const int hq = c.heads_q, dv = c.head_dim_v;
  const bool e4m3 = c.out_dtype == FP8ATTN_DTYPE_E4M3;
  if (e4m3 && eager == nullptr) throw std::runtime_error("check: an E4M3 out is judged against the bf16 out (eager)");
  const int out_bytes = e4m3 ? 1 : 2;
  const uint16_t poison_out = e4m3 ? kPoisonOutE4M3 : kPoisonOut;
  const int64_t out_elems = static_cast<int64_t>(output.out.size() / out_bytes);
  const int64_t lse_elems = static_cast<int64_t>(output.lse.size() / 4);
  auto out_bits = [&](int64_t i) -> uint16_t {
    if (e4m3) return output.out[i];
    uint16_t bits;
    std::memcpy(&bits, &output.out[2 * i], 2);
    return bits;
  };
  // E4M3(x / output_scale), dequantized: the static quantization a perfect kernel would apply.
  const double scale = output_scale_;
  auto quantized = [&](double x) {
    return ref::e4m3_to_float(ref::float_to_e4m3(static_cast<float>(x / scale))) * scale;
  };
  auto eager_value = [&](int64_t i) -> double {
    uint16_t bits;
    std::memcpy(&bits, &eager->out[2 * i], 2);
    return quantized(ref::bf16_to_float(bits));
  };
  auto lse_bits = [&](int64_t i) {
    uint32_t bits;
    std::memcpy(&bits, &output.lse[4 * i], 4);
    return bits;
  };
  auto out_value = [&](int64_t i) -> double {
    const uint16_t bits = out_bits(i);
    if (e4m3) return ref::e4m3_to_float(static_cast<uint8_t>(bits)) * scale;
    return c.out_dtype == FP8ATTN_DTYPE_F16 ? ref::f16_to_float(bits) : ref::bf16_to_float(bits);
  };
  auto lse_value = [&](int64_t i) -> double {
    float x;
    std::memcpy(&x, &output.lse[4 * i], 4);
    return x;
  };

  Metrics m;
  std::vector<uint8_t> out_expected(out_elems, 0), lse_expected(lse_elems, 0);
  std::ostringstream first_nonfinite, first_lse_mismatch;
  struct Worst {
    double err = -1;
    int b = 0, r = 0, h = 0, col = 0;
    double out = 0, exact = 0, emulation = 0;
  } worst;
  // Rows with a finite exact LSE, judged once the case-wide emulation error (part of every row's bound) is known.
  struct LseRow {
    double err = 0, score_magnitude = 0;
    int b = 0, r = 0, h = 0;
    double lse = 0, exact = 0, emulation = 0;
  };
  std::vector<LseRow> lse_rows;
  double sum_sq_err = 0, sum_sq_emul_err = 0, sum_sq_exact = 0;
  double sum_out = 0, sum_emul = 0, sum_exact = 0;  // for the mean ratios
  // E4M3 out: max|Q(eager) - Q(exact)|, and the worst |out - Q(exact)| - ulp(Q(exact)) (judged against 2x the first).
  double eager_max_err = 0, e4m3_max_err = 0;
  struct WorstE4M3 {
    double excess = -std::numeric_limits<double>::infinity();
    int b = 0, r = 0, h = 0, col = 0;
    double out = 0, quantized_exact = 0, eager = 0;
  } worst_e4m3;

  for (int b = 0; b < c.batch; ++b) {
    for (int r = 0; r < c.seqlens_q[b]; ++r) {
      const int64_t ref_row = c.varlen_q ? p.cu_seqlens_q[b] + r : int64_t{b} * p.seqlen_q + r;
      const int64_t out_row = c.varlen_q ? ref_row * p.o_row_stride : b * p.o_batch_stride + r * p.o_row_stride;
      for (int h = 0; h < hq; ++h) {
        for (int col = 0; col < dv; ++col) {
          const int64_t i = out_row + h * p.o_head_stride + col;
          const size_t ref_i = static_cast<size_t>((ref_row * hq + h) * dv + col);
          const double exact = exact_.out[ref_i], emulation = emulation_.out[ref_i];
          out_expected[i] = 1;
          ++m.checked_elements;
          m.max_abs_exact = std::max(m.max_abs_exact, std::fabs(exact));
          m.emul_max_abs_err = std::max(m.emul_max_abs_err, std::fabs(emulation - exact));
          sum_sq_emul_err += (emulation - exact) * (emulation - exact);
          sum_sq_exact += exact * exact;
          sum_exact += exact;
          sum_emul += emulation;
          const double value = out_value(i);
          if (!std::isfinite(value)) {
            if (m.nonfinite++ == 0)
              first_nonfinite << "batch " << b << ", row " << r << ", head " << h << ", col " << col
                              << ": out=" << value
                              << (out_bits(i) == kPoisonOut ? " (never written)" : " (written non-finite)");
            continue;
          }
          const double err = std::fabs(value - exact);
          sum_sq_err += err * err;
          sum_out += value;
          if (err > worst.err) worst = {err, b, r, h, col, value, exact, emulation};
          if (e4m3) {
            const double q_exact = quantized(exact), q_eager = eager_value(i);
            eager_max_err = std::max(eager_max_err, std::fabs(q_eager - q_exact));
            e4m3_max_err = std::max(e4m3_max_err, std::fabs(value - q_exact));
            const double excess = std::fabs(value - q_exact) - ulp_e4m3(std::fabs(q_exact) / scale) * scale;
            if (excess > worst_e4m3.excess) worst_e4m3 = {excess, b, r, h, col, value, q_exact, q_eager};
          }
        }
        if (!c.lse) continue;
        const int64_t li =
            c.varlen_q ? h * p.lse_head_stride + ref_row : b * p.lse_batch_stride + h * p.lse_head_stride + r;
        const size_t ref_li = static_cast<size_t>(h * exact_.total_rows + ref_row);
        const double exact = exact_.lse[ref_li], emulation = emulation_.lse[ref_li], value = lse_value(li);
        lse_expected[li] = 1;
        const bool must_be_minus_inf = std::isinf(exact) && exact < 0;
        const bool ok = must_be_minus_inf ? (std::isinf(value) && value < 0) : std::isfinite(value);
        if (!ok) {
          if (m.lse_mismatches++ == 0)
            first_lse_mismatch << "batch " << b << ", row " << r << ", head " << h << ": lse=" << value
                               << " exact=" << exact << (lse_bits(li) == kPoisonLse ? " (never written)" : "");
          continue;
        }
        if (must_be_minus_inf) continue;
        m.emul_lse_max_abs_err = std::max(m.emul_lse_max_abs_err, std::fabs(emulation - exact));
        lse_rows.push_back({std::fabs(value - exact), score_magnitude_[ref_li], b, r, h, value, exact, emulation});
      }
    }
  }
  m.max_abs_err = std::max(worst.err, 0.0);
  m.bound = 2 * m.emul_max_abs_err + 2 * ulp_bf16(m.max_abs_exact);
  const double e4m3_bound = 2 * eager_max_err;  // plus one ulp per element (above)
  if (e4m3) {  // reported as the E4M3 bar (at the largest element's ulp); judged per element below
    m.max_abs_err = e4m3_max_err;
    m.bound = e4m3_bound + ulp_e4m3(m.max_abs_exact / scale) * scale;
  }
  // The LSE bar, row by row (see "The LSE bar" at the top of this file).
  const double lse_common_bound = 2 * m.emul_lse_max_abs_err + kLseAbsoluteSlack;
  auto lse_row_bound = [&](const LseRow& row) {
    return lse_common_bound + kScoreRelativeError * row.score_magnitude;
  };
  const LseRow* worst_lse = nullptr;  // the row nearest to (or furthest over) its bound
  for (const LseRow& row : lse_rows) {
    const double bound = lse_row_bound(row), fraction = row.err / bound;
    m.lse_max_abs_err = std::max(m.lse_max_abs_err, row.err);
    m.lse_bound = std::max(m.lse_bound, bound);
    m.lse_max_score_magnitude = std::max(m.lse_max_score_magnitude, row.score_magnitude);
    // `!(err <= bound)` so that a NaN bound (a harness bug) fails rather than passes.
    if (!(row.err <= bound)) ++m.lse_rows_over_bound;
    if (worst_lse == nullptr || !(fraction <= m.lse_worst_fraction)) {
      worst_lse = &row;
      m.lse_worst_fraction = fraction;
    }
  }
  m.rel_rms = sum_sq_exact > 0 ? std::sqrt(sum_sq_err / sum_sq_exact)
                               : (sum_sq_err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  m.emul_rel_rms = sum_sq_exact > 0 ? std::sqrt(sum_sq_emul_err / sum_sq_exact) : 0.0;
  m.mean_ratio = sum_exact != 0 ? sum_out / sum_exact : 1.0;
  m.emul_mean_ratio = sum_exact != 0 ? sum_emul / sum_exact : 1.0;

  // Everything outside the valid rows (varlen padding rows, stride gaps) must still hold the poison.
  std::ostringstream first_stray;
  for (int64_t i = 0; i < out_elems; ++i) {
    if (out_expected[i] || out_bits(i) == poison_out) continue;
    if (m.stray_writes++ > 0) continue;
    int64_t rest = i;
    const int64_t b = c.varlen_q ? 0 : rest / p.o_batch_stride;
    if (!c.varlen_q) rest %= p.o_batch_stride;
    const int64_t row = rest / p.o_row_stride, head = rest % p.o_row_stride / p.o_head_stride;
    const int64_t col = rest % p.o_row_stride % p.o_head_stride;
    const bool gap = head >= hq || col >= dv || (!c.varlen_q && row >= p.seqlen_q);
    first_stray << "out " << (c.varlen_q ? "" : "batch " + std::to_string(b) + ", ") << "row " << row << ", head "
                << head << ", col " << col << (gap ? " (a stride gap)" : " (a padding row)") << ": bits 0x" << std::hex
                << out_bits(i) << std::dec;
  }
  for (int64_t i = 0; i < lse_elems; ++i) {
    if (lse_expected[i] || lse_bits(i) == kPoisonLse) continue;
    if (m.stray_writes++ > 0) continue;
    const int64_t b = c.varlen_q ? 0 : i / p.lse_batch_stride;
    const int64_t rest = c.varlen_q ? i : i % p.lse_batch_stride;
    first_stray << "lse " << (c.varlen_q ? "" : "batch " + std::to_string(b) + ", ") << "head "
                << rest / p.lse_head_stride << ", token " << rest % p.lse_head_stride << ": " << lse_value(i);
  }

  const bool out_ok = m.nonfinite == 0 && (e4m3 ? worst_e4m3.excess <= e4m3_bound : m.max_abs_err <= m.bound);
  const bool lse_ok = !c.lse || (m.lse_mismatches == 0 && m.lse_rows_over_bound == 0);
  m.passed = out_ok && lse_ok && m.stray_writes == 0;
  if (m.passed) return m;

  std::ostringstream f;
  f.precision(6);
  if (m.nonfinite)
    f << m.nonfinite << " non-finite output elements in valid rows; first at " << first_nonfinite.str() << "\n";
  if (m.stray_writes)
    f << m.stray_writes
      << " elements written outside valid rows (padding rows / stride gaps); first: " << first_stray.str() << "\n";
  if (e4m3 && worst.err >= 0) {
    const bool over = !(worst_e4m3.excess <= e4m3_bound);
    f << (over ? "E4M3 BAR EXCEEDED: " : "") << "max(|out - Q(exact)| - ulp) = " << worst_e4m3.excess
      << (over ? " > " : " <= ") << "2 * max|Q(eager) - Q(exact)| = " << e4m3_bound << " (output_scale " << scale
      << ")\n  worst at batch " << worst_e4m3.b << ", row " << worst_e4m3.r << ", head " << worst_e4m3.h << ", col "
      << worst_e4m3.col << ": out=" << worst_e4m3.out << " Q(exact)=" << worst_e4m3.quantized_exact
      << " Q(eager)=" << worst_e4m3.eager << "\n";
  } else if (worst.err >= 0) {
    f << (m.max_abs_err <= m.bound ? "" : "ERROR BAR EXCEEDED: ") << "max|out - exact| = " << m.max_abs_err
      << (m.max_abs_err <= m.bound ? " <= " : " > ") << "bound " << m.bound << " (= 2*" << m.emul_max_abs_err
      << " + 2 ulp_bf16(" << m.max_abs_exact << "))\n  worst at batch " << worst.b << ", row " << worst.r << ", head "
      << worst.h << ", col " << worst.col << ": out=" << worst.out << " exact=" << worst.exact
      << " emulation=" << worst.emulation << "\n";
  }
  f << "  rel RMS " << 100 * m.rel_rms << "% (emulation " << 100 * m.emul_rel_rms << "%), " << m.checked_elements
    << " elements checked\n";
  if (c.lse) {
    if (m.lse_mismatches)
      f << m.lse_mismatches << " LSE entries with the wrong finiteness; first at " << first_lse_mismatch.str() << "\n";
    if (worst_lse) {
      const LseRow& w = *worst_lse;
      const bool over = m.lse_rows_over_bound > 0;
      if (over)
        f << "LSE BAR EXCEEDED in " << m.lse_rows_over_bound << " of " << lse_rows.size() << " rows; worst";
      else
        f << "LSE within its bar in all " << lse_rows.size() << " rows; nearest";
      f << " at batch " << w.b << ", row " << w.r << ", head " << w.h << ": |lse - exact| = " << w.err
        << (over ? " > " : " <= ") << "row bound " << lse_row_bound(w) << " (" << 100 * m.lse_worst_fraction
        << "% of it; = 2*" << m.emul_lse_max_abs_err << " + " << kLseAbsoluteSlack << " + 2^-11*M_row, M_row = "
        << w.score_magnitude << "); lse=" << w.lse << " exact=" << w.exact << " emulation=" << w.emulation
        << "\n  max|lse - exact| over the case = " << m.lse_max_abs_err << ", largest row bound " << m.lse_bound
        << ", largest M_row " << m.lse_max_score_magnitude << "\n";
    }
  }
  f << "  case: " << c.describe();
  m.failure = f.str();
  return m;
}

namespace {

struct DeclaredKernel {
  int head_dim, head_dim_v;
};
constexpr DeclaredKernel kCompiledKernels[] = {
#define FP8ATTN_KERNEL(D, DV, BLOCK_M, BLOCK_N, TWO_LEVEL, VARLEN_SCHEDULE, Q16, SWAPPED) {D, DV},
#include "kernel_registry.inc"
#undef FP8ATTN_KERNEL
};
constexpr DeclaredKernel kDeclaredKernels[] = {
#define FP8ATTN_KERNEL(D, DV, BLOCK_M, BLOCK_N, TWO_LEVEL, VARLEN_SCHEDULE, Q16, SWAPPED) {D, DV},
#include "kernel_list_all.inc"
#undef FP8ATTN_KERNEL
};

std::vector<std::pair<int, int>> head_dim_pairs(const DeclaredKernel* begin, const DeclaredKernel* end) {
  std::vector<std::pair<int, int>> pairs;
  for (const DeclaredKernel* k = begin; k != end; ++k) pairs.emplace_back(k->head_dim, k->head_dim_v);
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  return pairs;
}

}  // namespace

std::vector<std::pair<int, int>> compiled_head_dims() {
  return head_dim_pairs(std::begin(kCompiledKernels), std::end(kCompiledKernels));
}

bool is_partial_build() {
  return compiled_head_dims() != head_dim_pairs(std::begin(kDeclaredKernels), std::end(kDeclaredKernels));
}

std::string dev_build_skip(const fp8attn::Status& status, int head_dim, int head_dim_v) {
  if (status.code() != StatusCode::kNotCompiled || !is_partial_build()) return "";
  const auto compiled = compiled_head_dims();
  if (std::find(compiled.begin(), compiled.end(), std::make_pair(head_dim, head_dim_v)) != compiled.end()) return "";
  return "dev build: head dims (" + std::to_string(head_dim) + ", " + std::to_string(head_dim_v) +
         ") are not compiled (FP8ATTN_HEAD_DIMS subset; a full build runs this test): " + status.message();
}

fp8attn::Status Problem::run_and_check(Metrics* metrics, cudaStream_t stream) {
  const bool e4m3 = case_.out_dtype == FP8ATTN_DTYPE_E4M3;
  if (!e4m3) {
    const fp8attn::Status status = run(stream);
    if (status.ok()) *metrics = check(download(stream));
    return status;
  }
  set_out_dtype(FP8ATTN_DTYPE_BF16);
  fp8attn::Status status = run(stream);
  const Output eager = status.ok() ? download(stream) : Output{};
  const Metrics eager_metrics = status.ok() ? check(eager) : Metrics{};
  set_out_dtype(FP8ATTN_DTYPE_E4M3);
  if (!status.ok()) return status;
  if (!eager_metrics.passed) {
    *metrics = eager_metrics;
    metrics->failure = "the bf16 out of an E4M3 case (its eager path): " + metrics->failure;
    return status;
  }
  status = run(stream);
  if (status.ok()) *metrics = check(download(stream), &eager);
  return status;
}

void expect_case_passes(const Case& c, Metrics* metrics) {
  Problem problem(c);
  Metrics m;
  const fp8attn::Status status = problem.run_and_check(&m);
  const std::string skip = dev_build_skip(status, c.head_dim, c.head_dim_v);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(status.ok()) << "fp8attn::fwd returned " << static_cast<int>(status.code()) << ": " << status.message()
                           << "\n  case: " << c.describe();
  std::printf(
      "[  metrics ] max_err %.3g <= %.3g (%.0f%% of the bar)  rel_rms %.3f%% (emulation %.3f%%)  lse_err %.2g "
      "(worst row at %.0f%% of its bar)\n",
      m.max_abs_err, m.bound, m.bound > 0 ? 100 * m.max_abs_err / m.bound : 0.0, 100 * m.rel_rms, 100 * m.emul_rel_rms,
      m.lse_max_abs_err, 100 * m.lse_worst_fraction);
  if (metrics) *metrics = m;
  EXPECT_TRUE(m.passed) << m.failure;
}

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
}

Stream::Stream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
Stream::~Stream() { cudaStreamDestroy(stream_); }

}  // namespace fp8attn_test
