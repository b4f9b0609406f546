// fp8attn reference attention on the CPU: the ground truth of every GPU test (docs/accuracy.md).
//
// Work is split into tasks of (sequence, kv head, a run of "packed" query rows). A packed row is one
// (q head of the kv head's group, query row) pair, so decode (one query row, many q heads per kv head)
// and prefill (many rows) both give tasks of similar size. A task walks the keys its rows can see in
// chunks, decoding each chunk once into fp32 (E4M3 is exact in fp32) for all of its rows: K transposed,
// so that the score loop runs over contiguous keys, and V row-major, so that the PV loop runs over
// contiguous head-dim columns. Worker threads take tasks from a shared counter; tasks write disjoint rows.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "reference/reference.h"

namespace fp8attn {
namespace ref {
namespace {

constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.69314718055994530942;
// The kernel computes P = exp2(score - max + 8): a 2^8 bias so that E4M3 keeps mantissa bits for P
// (anatomy §2(c)). The bias cancels in out = O / sum and is removed from the LSE.
constexpr float kPExponentOffset = 8.0f;
constexpr float kE4m3Max = 448.0f;  // a 16-bit q row's quantization maps its amax here
// Packed query rows per task: up to 32, so that decoding a chunk of keys is shared by many rows, but
// fewer when the problem is small (decode: a few rows against many keys), so that every thread still
// gets kTasksPerThread tasks.
constexpr int64_t kMaxPackedRowsPerTask = 32;
constexpr int64_t kTasksPerThread = 4;
// Keys decoded at a time: K and V chunks of at most 256 KB each stay in cache while every row uses them.
constexpr int64_t kKeysPerChunk = 256;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kMinusInfinity = -std::numeric_limits<double>::infinity();

Status invalid_argument(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, "fp8attn::ref::attention: " + message);
}

// Where one sequence's rows live.
struct Sequence {
  int64_t q_len = 0;
  int64_t out_row_begin = 0;  // first row of this sequence in Result (and in q, for varlen)
  int64_t q_offset = 0;       // elements from q to this sequence's row 0, head 0
  int64_t k_len = 0;
  int64_t k_offset = 0;       // elements from k to key 0, head 0 (not paged)
  int64_t v_offset = 0;       // same for v
};

struct Task {
  int batch = 0;
  int kv_head = 0;
  int64_t packed_begin = 0;  // packed row r is q head kv_head * group + r / q_len, query row r % q_len
  int64_t packed_end = 0;
};

// Keys [first, last] that query row `row` may attend to; empty when first > last.
struct KeyRange {
  int64_t first = 0;
  int64_t last = -1;
  int64_t count() const { return last >= first ? last - first + 1 : 0; }
};

// Everything the tasks share: the call, derived sizes, and where the results go.
struct Problem {
  const fp8attn_fwd_params* params = nullptr;
  int group = 1;  // q heads per kv head
  int window_left = -1;
  int window_right = -1;
  std::vector<Sequence> sequences;
  std::array<float, 256> e4m3_values{};
  Result* result = nullptr;
};

// Bottom-right alignment (as FlashAttention): the last query row lines up with the last key, so key j is
// visible to row i iff  i + k_len - q_len - window_left <= j <= i + k_len - q_len + window_right,
// a negative window being unbounded on its side.
KeyRange visible_keys(const Problem& problem, const Sequence& seq, int64_t row) {
  const int64_t diagonal = row + seq.k_len - seq.q_len;
  KeyRange range;
  range.first = problem.window_left < 0 ? 0 : std::max<int64_t>(0, diagonal - problem.window_left);
  range.last = problem.window_right < 0 ? seq.k_len - 1 : std::min(seq.k_len - 1, diagonal + problem.window_right);
  return range;
}

float descale_value(const fp8attn_descale& descale, int batch, int kv_head) {
  if (descale.ptr == nullptr) return 1.0f;
  if (descale.ndim == 0) return descale.ptr[0];
  return descale.ptr[batch * descale.batch_stride + kv_head * descale.head_stride];
}

Status check_descale(const fp8attn_descale& descale, const char* name) {
  if (descale.ptr == nullptr) return Status::Ok();
  if (descale.dtype != FP8ATTN_DTYPE_F32) return invalid_argument(std::string(name) + ".dtype must be F32");
  if (descale.ndim != 0 && descale.ndim != 2) {
    return invalid_argument(std::string(name) + ".ndim must be 0 or 2, got " + std::to_string(descale.ndim));
  }
  return Status::Ok();
}

// Reads lengths and offsets of every sequence, with the light checks that keep the reference from reading
// outside its inputs (negative lengths, sequences past total_q/total_k/seqlen_k, bad page ids).
Status describe_sequences(const fp8attn_fwd_params& p, std::vector<Sequence>* sequences) {
  const bool paged = p.block_table != nullptr;
  sequences->assign(p.batch, Sequence{});
  for (int b = 0; b < p.batch; ++b) {
    Sequence& seq = (*sequences)[b];
    const std::string which = "sequence " + std::to_string(b) + ": ";
    if (p.cu_seqlens_q != nullptr) {
      seq.out_row_begin = p.cu_seqlens_q[b];
      seq.q_len = static_cast<int64_t>(p.cu_seqlens_q[b + 1]) - p.cu_seqlens_q[b];
      if (seq.out_row_begin < 0 || seq.q_len < 0 || seq.out_row_begin + seq.q_len > p.total_q) {
        return invalid_argument(which + "cu_seqlens_q gives rows [" + std::to_string(seq.out_row_begin) + ", " +
                                std::to_string(seq.out_row_begin + seq.q_len) + "), outside [0, total_q = " +
                                std::to_string(p.total_q) + "]");
      }
      seq.q_offset = seq.out_row_begin * p.q_row_stride;
    } else {
      seq.q_len = p.seqlen_q;
      seq.out_row_begin = static_cast<int64_t>(b) * p.seqlen_q;
      seq.q_offset = b * p.q_batch_stride;
    }

    const bool varlen_k = p.cu_seqlens_k != nullptr;
    if (p.seqused_k != nullptr) {
      seq.k_len = p.seqused_k[b];
    } else if (varlen_k) {
      seq.k_len = static_cast<int64_t>(p.cu_seqlens_k[b + 1]) - p.cu_seqlens_k[b];
    } else {
      seq.k_len = p.seqlen_k;
    }
    if (seq.k_len < 0) return invalid_argument(which + "negative key length " + std::to_string(seq.k_len));

    if (paged) {
      const int64_t pages = (seq.k_len + p.page_size - 1) / p.page_size;
      if (pages > p.max_pages_per_seq) {
        return invalid_argument(which + std::to_string(seq.k_len) + " keys need " + std::to_string(pages) +
                                " pages, more than max_pages_per_seq = " + std::to_string(p.max_pages_per_seq));
      }
      const int32_t* table_row = p.block_table + b * p.block_table_batch_stride;
      for (int64_t page = 0; page < pages; ++page) {
        if (table_row[page] < 0 || table_row[page] >= p.num_pages) {
          return invalid_argument(which + "block_table[" + std::to_string(b) + "][" + std::to_string(page) +
                                  "] = " + std::to_string(table_row[page]) + " is not a page id in [0, num_pages = " +
                                  std::to_string(p.num_pages) + ")");
        }
      }
    } else if (varlen_k) {
      const int64_t k_row_begin = p.cu_seqlens_k[b];
      if (k_row_begin < 0 || k_row_begin + seq.k_len > p.total_k) {
        return invalid_argument(which + "keys [" + std::to_string(k_row_begin) + ", " +
                                std::to_string(k_row_begin + seq.k_len) + ") are outside [0, total_k = " +
                                std::to_string(p.total_k) + "]");
      }
      seq.k_offset = k_row_begin * p.k_row_stride;
      seq.v_offset = k_row_begin * p.v_row_stride;
    } else {
      if (seq.k_len > p.seqlen_k) {
        return invalid_argument(which + "seqused_k = " + std::to_string(seq.k_len) + " exceeds seqlen_k = " +
                                std::to_string(p.seqlen_k));
      }
      seq.k_offset = b * p.k_batch_stride;
      seq.v_offset = b * p.v_batch_stride;
    }
  }
  return Status::Ok();
}

Status check_params(const fp8attn_fwd_params& p) {
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr) return invalid_argument("q, k and v must be host pointers");
  const bool q_ok =
      p.q_dtype == FP8ATTN_DTYPE_E4M3 || p.q_dtype == FP8ATTN_DTYPE_F16 || p.q_dtype == FP8ATTN_DTYPE_BF16;
  if (!q_ok || p.k_dtype != FP8ATTN_DTYPE_E4M3 || p.v_dtype != FP8ATTN_DTYPE_E4M3) {
    return Status(StatusCode::kNotSupported, "fp8attn::ref::attention: k and v must be E4M3, q E4M3, fp16 or bf16");
  }
  if (p.batch < 0) return invalid_argument("batch must be >= 0");
  if (p.seqlen_q < 0 || p.seqlen_k < 0) return invalid_argument("seqlen_q and seqlen_k must be >= 0");
  if (p.cu_seqlens_q != nullptr && p.total_q < 0) return invalid_argument("total_q must be >= 0");
  if (p.num_heads_q <= 0 || p.num_heads_kv <= 0 || p.num_heads_q % p.num_heads_kv != 0) {
    return invalid_argument("num_heads_q (" + std::to_string(p.num_heads_q) +
                            ") must be a positive multiple of num_heads_kv (" + std::to_string(p.num_heads_kv) + ")");
  }
  if (p.head_dim <= 0 || p.head_dim_v <= 0) return invalid_argument("head_dim and head_dim_v must be positive");
  if (p.block_table != nullptr && p.page_size <= 0) return invalid_argument("page_size must be positive");
  if (p.sink != nullptr && p.sink_dtype != FP8ATTN_DTYPE_F32 && p.sink_dtype != FP8ATTN_DTYPE_BF16) {
    return invalid_argument("sink_dtype must be F32 or BF16");
  }
  for (const auto& [descale, name] : {std::pair{&p.q_descale, "q_descale"}, std::pair{&p.k_descale, "k_descale"},
                                      std::pair{&p.v_descale, "v_descale"}}) {
    Status status = check_descale(*descale, name);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

// Where key `key` of a sequence starts (head 0) in a K or V tensor with the given strides.
int64_t key_row_offset(const fp8attn_fwd_params& p, int batch, int64_t sequence_offset, int64_t key,
                       int64_t batch_stride, int64_t row_stride) {
  if (p.block_table == nullptr) return sequence_offset + key * row_stride;
  const int64_t page = p.block_table[batch * p.block_table_batch_stride + key / p.page_size];
  return page * batch_stride + (key % p.page_size) * row_stride;
}

// Decodes K for keys [first, first + key_count) of one sequence and kv head, transposed to
// [head_dim][key_count], in tiles of keys so that the transposed stores fill whole cache lines.
void decode_k_transposed(const Problem& problem, int batch, int kv_head, int64_t first, int64_t key_count,
                         std::vector<float>* k_transposed) {
  constexpr int64_t kKeysPerTile = 16;
  const fp8attn_fwd_params& p = *problem.params;
  const Sequence& seq = problem.sequences[batch];
  const auto* k = static_cast<const uint8_t*>(p.k) + kv_head * p.k_head_stride;
  k_transposed->resize(static_cast<size_t>(p.head_dim) * key_count);
  std::array<const uint8_t*, kKeysPerTile> rows{};
  for (int64_t tile = 0; tile < key_count; tile += kKeysPerTile) {
    const int64_t tile_keys = std::min(kKeysPerTile, key_count - tile);
    for (int64_t t = 0; t < tile_keys; ++t) {
      rows[t] = k + key_row_offset(p, batch, seq.k_offset, first + tile + t, p.k_batch_stride, p.k_row_stride);
    }
    for (int c = 0; c < p.head_dim; ++c) {
      float* out = &(*k_transposed)[c * key_count + tile];
      for (int64_t t = 0; t < tile_keys; ++t) out[t] = problem.e4m3_values[rows[t][c]];
    }
  }
}

// Decodes V for keys [first, first + key_count) of one sequence and kv head, row-major [key_count][head_dim_v].
void decode_v(const Problem& problem, int batch, int kv_head, int64_t first, int64_t key_count,
              std::vector<float>* v_rows) {
  const fp8attn_fwd_params& p = *problem.params;
  const Sequence& seq = problem.sequences[batch];
  const auto* v = static_cast<const uint8_t*>(p.v) + kv_head * p.v_head_stride;
  const int dv = p.head_dim_v;
  v_rows->resize(static_cast<size_t>(key_count) * dv);
  for (int64_t t = 0; t < key_count; ++t) {
    const uint8_t* in = v + key_row_offset(p, batch, seq.v_offset, first + t, p.v_batch_stride, p.v_row_stride);
    float* out = &(*v_rows)[t * dv];
    for (int c = 0; c < dv; ++c) out[c] = problem.e4m3_values[in[c]];
  }
}

// What every row of a task (one sequence, one kv head) shares.
struct TaskConstants {
  float softmax_scale = 1.0f;
  float q_descale = 1.0f;
  float k_descale = 1.0f;
  float v_descale = 1.0f;
  float softcap = 0.0f;  // > 0: logits l -> softcap * tanh(l / softcap)
  bool has_sink = false;
};

// One query row in flight. Real is the arithmetic of the mode: double (kExact) or float (kEmulation).
template <typename Real>
struct Row {
  int head = 0;
  int64_t out_row = 0;
  KeyRange keys;          // visible keys, at least one
  float sink = 0.0f;      // natural-log units, when the call has sinks
  std::vector<float> q;   // decoded, [head_dim]
  // kEmulation of a 16-bit q (issue 35): the row is quantized to E4M3 with scale amax / 448 (q holds the E4M3
  // values) and the scale multiplies its scores, as the descales do. 1 otherwise; 0 for a row of zeros.
  float q_scale = 1.0f;
  // The scores q.k of keys.first..keys.last in key order; make_weights() turns them into P in place.
  std::vector<Real> weights;
  std::vector<Real> acc;  // sum_j P_j v_j, [head_dim_v]
  // Set by make_weights(), used by finish(): the offset the weights are relative to (kExact: the row
  // max in natural units; kEmulation: max_scaled in log2 units), the sum of the (unrounded) weights, and
  // (kEmulation) the sum of the weights as rounded to E4M3, which normalises the output as in the kernel.
  double weight_offset = 0.0;
  double row_sum = 0.0;
  double pv_sum = 0.0;
};

// scores[t] += q . k_t for `count` keys of a transposed K chunk, summing over the head dim in order. The
// products of E4M3 values are exact in fp32 and fp64, so only the sums round (in fp32 for the emulation).
template <typename Real>
void add_scores(const float* q, int head_dim, const float* k_transposed, int64_t chunk_keys, int64_t chunk_offset,
                int64_t count, Real* scores) {
  for (int c = 0; c < head_dim; ++c) {
    const Real qc = q[c];
    const float* k_column = k_transposed + c * chunk_keys + chunk_offset;
    for (int64_t t = 0; t < count; ++t) scores[t] += qc * k_column[t];
  }
}

// acc += sum_t weights[t] * v_t, in key order.
template <typename Real>
void add_values(const Real* weights, int64_t count, const float* v_rows, int head_dim_v, Real* acc) {
  for (int64_t t = 0; t < count; ++t) {
    const Real w = weights[t];
    const float* v_row = v_rows + t * head_dim_v;
    for (int c = 0; c < head_dim_v; ++c) acc[c] += w * v_row[c];
  }
}

// kExact, fp64: logits l_j = softmax_scale * q_descale * k_descale * s_j (softcap c: c * tanh(l_j / c)),
// M = max(l_j, sink), P_j = exp(l_j - M). The q.k sums are exact in fp64: each product of two E4M3 values has at most 8
// significant bits, and a sum of up to 256 of them spans far fewer than 53 bits.
void make_weights(const TaskConstants& constants, Row<double>* row) {
  const double scale = static_cast<double>(constants.softmax_scale) * constants.q_descale * constants.k_descale;
  double row_max = constants.has_sink ? static_cast<double>(row->sink) : kMinusInfinity;
  const double cap = constants.softcap;
  for (double& score : row->weights) {
    score *= scale;
    if (cap > 0.0) score = cap * std::tanh(score / cap);
    row_max = std::max(row_max, score);
  }
  double row_sum = constants.has_sink ? std::exp(row->sink - row_max) : 0.0;
  for (double& weight : row->weights) {
    weight = std::exp(weight - row_max);
    row_sum += weight;
  }
  row->weight_offset = row_max;
  row->row_sum = row_sum;
}

void finish(const TaskConstants& constants, const Row<double>& row, double* out, double* lse) {
  const double out_scale = constants.v_descale / row.row_sum;
  for (size_t c = 0; c < row.acc.size(); ++c) out[c] = row.acc[c] * out_scale;
  *lse = row.weight_offset + std::log(row.row_sum);
}

// kEmulation, the kernel's arithmetic: P = exp2(s * scale_log2 - max_scaled) with
// max_scaled = max(s) * scale_log2 - 8, both through FFMA as the kernel computes them; PV takes P rounded
// to E4M3 and is normalised by the sum of those rounded P (the kernel's P x ones), while the LSE takes the
// fp32 sum of the unrounded P. Softcap c, as the kernel: s -> t = tanh(s * a) with a = softmax_scale / c times the
// descales, then scale_log2 = c * log2(e) (the kernel's tanh is MUFU.TANH, ~2^-11 relative; this one is libm's).
void make_weights(const TaskConstants& constants, Row<float>* row) {
  // As FlashAttention: softmax_scale * log2(e) is formed on the host, the descales multiply it on the device.
  const float qk_descale = constants.q_descale * constants.k_descale * row->q_scale;
  float scale_log2 = static_cast<float>(constants.softmax_scale * kLog2e) * qk_descale;
  if (constants.softcap > 0.0f) {
    const float tanh_scale = (constants.softmax_scale / constants.softcap) * qk_descale;
    for (float& weight : row->weights) weight = std::tanh(weight * tanh_scale);
    scale_log2 = constants.softcap * static_cast<float>(kLog2e);
  }
  const float row_max = *std::max_element(row->weights.begin(), row->weights.end());
  const float max_scaled = std::fma(row_max, scale_log2, -kPExponentOffset);
  float row_sum = 0.0f, pv_sum = 0.0f;
  for (float& weight : row->weights) {
    const float p = std::exp2(std::fma(weight, scale_log2, -max_scaled));
    row_sum += p;
    weight = e4m3_to_float(float_to_e4m3(p));
    pv_sum += weight;
  }
  row->weight_offset = max_scaled;
  row->row_sum = row_sum;
  row->pv_sum = pv_sum;
}

void finish(const TaskConstants& constants, const Row<float>& row, double* out, double* lse) {
  // In log2 units the keys contribute 2^keys_log2, keys_log2 = max_scaled + log2(row_sum), and a sink
  // 2^(sink * log2 e) (the kernel adds exp2(sink * log2e - max_scaled) to row_sum). Combining the two as a
  // log-sum-exp keeps a sink far above the scores from overflowing.
  auto with_sink_log2 = [&](double keys_log2) {
    if (!constants.has_sink) return keys_log2;
    const double sink_log2 = row.sink * kLog2e;
    const double larger = std::max(keys_log2, sink_log2);
    return larger + std::log2(1.0 + std::exp2(std::min(keys_log2, sink_log2) - larger));
  };
  const double keys_log2 = row.weight_offset + std::log2(row.row_sum);
  const double pv_keys_log2 = row.weight_offset + std::log2(row.pv_sum);
  const double out_scale = constants.v_descale / row.pv_sum * std::exp2(pv_keys_log2 - with_sink_log2(pv_keys_log2));
  for (size_t c = 0; c < row.acc.size(); ++c) out[c] = row.acc[c] * out_scale;
  *lse = with_sink_log2(keys_log2) * kLn2;
}

// One query row, decoded into q. A 16-bit row is used as is (kExact), or quantized (quantize_16bit: kEmulation,
// as the kernel does per (token, head) row): E4M3(q * 448 / amax), scale amax / 448; a row of zeros stays zero
// with scale 1 (its scores are 0: a uniform average, not NaN).
void read_q_row(const fp8attn_fwd_params& p, int64_t element, bool quantize_16bit,
                const std::array<float, 256>& e4m3_values, std::vector<float>* q, float* q_scale) {
  q->resize(p.head_dim);
  *q_scale = 1.0f;
  if (p.q_dtype == FP8ATTN_DTYPE_E4M3) {
    const uint8_t* bytes = static_cast<const uint8_t*>(p.q) + element;
    for (int c = 0; c < p.head_dim; ++c) (*q)[c] = e4m3_values[bytes[c]];
    return;
  }
  const uint16_t* bits = static_cast<const uint16_t*>(p.q) + element;
  float amax = 0.0f;
  for (int c = 0; c < p.head_dim; ++c) {
    (*q)[c] = p.q_dtype == FP8ATTN_DTYPE_BF16 ? bf16_to_float(bits[c]) : f16_to_float(bits[c]);
    amax = std::max(amax, std::fabs((*q)[c]));
  }
  if (!quantize_16bit) return;
  if (amax == 0.0f) return;  // scale 1, as set above
  const float to_e4m3 = kE4m3Max / amax;
  for (float& x : *q) x = e4m3_to_float(float_to_e4m3(x * to_e4m3));
  *q_scale = amax / kE4m3Max;
}

// Each worker's buffers, reused from task to task.
template <typename Real>
struct Scratch {
  std::vector<Row<Real>> rows;
  std::vector<float> k_chunk;  // [head_dim][chunk keys]
  std::vector<float> v_chunk;  // [chunk keys][head_dim_v]
};

// The keys of `range` inside the chunk [chunk_first, chunk_first + chunk_keys).
KeyRange overlap(const KeyRange& range, int64_t chunk_first, int64_t chunk_keys) {
  return KeyRange{std::max(range.first, chunk_first), std::min(range.last, chunk_first + chunk_keys - 1)};
}

// Computes the task's rows in two passes over its keys, a chunk at a time so that each decoded chunk is
// used by every row while it is in cache: scores (then the row max and P), then PV. Every sum still runs
// in key order, so the chunking does not change any result.
template <typename Real>
void run_task(const Problem& problem, const Task& task, Scratch<Real>* scratch) {
  const fp8attn_fwd_params& p = *problem.params;
  const Sequence& seq = problem.sequences[task.batch];
  Result& result = *problem.result;
  const int64_t hq = p.num_heads_q;
  const int dv = p.head_dim_v;

  TaskConstants constants;
  constants.softmax_scale = p.softmax_scale;
  constants.q_descale = descale_value(p.q_descale, task.batch, task.kv_head);
  constants.k_descale = descale_value(p.k_descale, task.batch, task.kv_head);
  constants.v_descale = descale_value(p.v_descale, task.batch, task.kv_head);
  constants.softcap = p.softcap;
  constants.has_sink = p.sink != nullptr;

  // Set up the rows; a row with no visible key is written at once: nothing to average, and its LSE is
  // that of the sink alone, or log(0).
  std::vector<Row<Real>>& rows = scratch->rows;
  size_t live_rows = 0;
  KeyRange hull{std::numeric_limits<int64_t>::max(), -1};
  for (int64_t r = task.packed_begin; r < task.packed_end; ++r) {
    const int head = task.kv_head * problem.group + static_cast<int>(r / seq.q_len);
    const int64_t row_in_seq = r % seq.q_len;
    const int64_t out_row = seq.out_row_begin + row_in_seq;
    float sink = 0.0f;
    if (constants.has_sink) {
      sink = p.sink_dtype == FP8ATTN_DTYPE_BF16 ? bf16_to_float(static_cast<const uint16_t*>(p.sink)[head])
                                                : static_cast<const float*>(p.sink)[head];
    }
    const KeyRange keys = visible_keys(problem, seq, row_in_seq);
    if (keys.count() == 0) {
      double* out = &result.out[(out_row * hq + head) * dv];
      std::fill(out, out + dv, 0.0);
      result.lse[head * result.total_rows + out_row] = constants.has_sink ? static_cast<double>(sink) : kMinusInfinity;
      continue;
    }
    if (rows.size() <= live_rows) rows.emplace_back();
    Row<Real>& row = rows[live_rows++];
    row.head = head;
    row.out_row = out_row;
    row.keys = keys;
    row.sink = sink;
    const int64_t q_element = seq.q_offset + row_in_seq * p.q_row_stride + head * p.q_head_stride;
    read_q_row(p, q_element, std::is_same_v<Real, float>, problem.e4m3_values, &row.q, &row.q_scale);
    row.weights.assign(static_cast<size_t>(keys.count()), Real(0));
    row.acc.assign(static_cast<size_t>(dv), Real(0));
    hull.first = std::min(hull.first, keys.first);
    hull.last = std::max(hull.last, keys.last);
  }

  for (int64_t chunk = hull.first; chunk <= hull.last; chunk += kKeysPerChunk) {
    const int64_t chunk_keys = std::min(kKeysPerChunk, hull.last + 1 - chunk);
    decode_k_transposed(problem, task.batch, task.kv_head, chunk, chunk_keys, &scratch->k_chunk);
    for (size_t i = 0; i < live_rows; ++i) {
      Row<Real>& row = rows[i];
      const KeyRange part = overlap(row.keys, chunk, chunk_keys);
      if (part.count() == 0) continue;
      add_scores(row.q.data(), p.head_dim, scratch->k_chunk.data(), chunk_keys, part.first - chunk, part.count(),
                 &row.weights[part.first - row.keys.first]);
    }
  }
  for (size_t i = 0; i < live_rows; ++i) make_weights(constants, &rows[i]);
  for (int64_t chunk = hull.first; chunk <= hull.last; chunk += kKeysPerChunk) {
    const int64_t chunk_keys = std::min(kKeysPerChunk, hull.last + 1 - chunk);
    decode_v(problem, task.batch, task.kv_head, chunk, chunk_keys, &scratch->v_chunk);
    for (size_t i = 0; i < live_rows; ++i) {
      Row<Real>& row = rows[i];
      const KeyRange part = overlap(row.keys, chunk, chunk_keys);
      if (part.count() == 0) continue;
      add_values(&row.weights[part.first - row.keys.first], part.count(),
                 &scratch->v_chunk[(part.first - chunk) * dv], dv, row.acc.data());
    }
  }
  for (size_t i = 0; i < live_rows; ++i) {
    const Row<Real>& row = rows[i];
    finish(constants, row, &result.out[(row.out_row * hq + row.head) * dv],
           &result.lse[row.head * result.total_rows + row.out_row]);
  }
}

std::vector<Task> make_tasks(const Problem& problem, int64_t num_threads) {
  const int num_heads_kv = problem.params->num_heads_kv;
  int64_t total_packed_rows = 0;
  for (const Sequence& seq : problem.sequences) total_packed_rows += seq.q_len * problem.group * num_heads_kv;
  const int64_t rows_per_task =
      std::clamp<int64_t>(total_packed_rows / (kTasksPerThread * num_threads), 1, kMaxPackedRowsPerTask);

  std::vector<Task> tasks;
  for (int b = 0; b < static_cast<int>(problem.sequences.size()); ++b) {
    const int64_t packed_rows = problem.sequences[b].q_len * problem.group;
    for (int kv_head = 0; kv_head < num_heads_kv; ++kv_head) {
      for (int64_t begin = 0; begin < packed_rows; begin += rows_per_task) {
        tasks.push_back(Task{b, kv_head, begin, std::min(packed_rows, begin + rows_per_task)});
      }
    }
  }
  return tasks;
}

// Runs the tasks on up to `max_threads` threads that take them from a shared counter.
template <typename Real>
void run_tasks(const Problem& problem, const std::vector<Task>& tasks, size_t max_threads) {
  std::atomic<size_t> next_task{0};
  auto worker = [&]() {
    Scratch<Real> scratch;
    for (size_t i = next_task++; i < tasks.size(); i = next_task++) run_task(problem, tasks[i], &scratch);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < std::min(tasks.size(), max_threads); ++t) helpers.emplace_back(worker);
  worker();
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace

Status attention(const fp8attn_fwd_params& host_params, Mode mode, Result* result) {
  if (result == nullptr) return invalid_argument("result must not be null");
  if (mode != Mode::kExact && mode != Mode::kEmulation) return invalid_argument("unknown mode");
  Status status = check_params(host_params);
  if (!status.ok()) return status;

  Problem problem;
  problem.params = &host_params;
  problem.group = host_params.num_heads_q / host_params.num_heads_kv;
  problem.window_left = host_params.window_left;
  problem.window_right = host_params.causal ? 0 : host_params.window_right;
  status = describe_sequences(host_params, &problem.sequences);
  if (!status.ok()) return status;
  for (int code = 0; code < 256; ++code) problem.e4m3_values[code] = e4m3_to_float(static_cast<uint8_t>(code));

  const int64_t hq = host_params.num_heads_q;
  result->total_rows = host_params.cu_seqlens_q != nullptr
                           ? host_params.total_q
                           : static_cast<int64_t>(host_params.batch) * host_params.seqlen_q;
  // Rows that belong to no sequence are never written; NaN makes any use of them visible.
  result->out.assign(static_cast<size_t>(result->total_rows * hq * host_params.head_dim_v), kNaN);
  result->lse.assign(static_cast<size_t>(hq * result->total_rows), kNaN);
  problem.result = result;

  const size_t hardware_threads = std::max(1u, std::thread::hardware_concurrency());
  const std::vector<Task> tasks = make_tasks(problem, static_cast<int64_t>(hardware_threads));
  if (mode == Mode::kExact) {
    run_tasks<double>(problem, tasks, hardware_threads);
  } else {
    run_tasks<float>(problem, tasks, hardware_threads);
  }
  return Status::Ok();
}

}  // namespace ref
}  // namespace fp8attn
