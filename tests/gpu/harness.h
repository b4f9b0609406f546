// fp8attn GPU test harness: one forward call described by a Case, run on the device and judged against the
// CPU references by the rules of docs/accuracy.md.
//
//   Case c = ...;                    // shapes, layout, masks, descales, sink, output, seed
//   expect_case_passes(c);           // gtest: skip if its kernel is not built, else fail with the worst element
//
// or, step by step (API tests):
//   Problem p(c);                    // fresh seeded inputs in host memory and on the device
//   p.run(stream);                   // poison out/lse/workspace on `stream`, then fp8attn::fwd on `stream`
//   Output o = p.download(stream);   // copy out/lse back (synchronizes `stream` only)
//   Metrics m = p.check(o);          // run the two references once, compare, explain a failure
//
// What a Problem lays out (so that a kernel that reads or writes out of bounds is caught):
//   - Every byte of q/k/v that is not an input element is an E4M3 NaN (0x7F): padding rows of varlen q,
//     key rows past a sequence's used length, stride gaps, unused pages, other layers' units of a
//     layer-interleaved cache. None of them may reach the output. A 16-bit q's non-input elements are NaN
//     in its own type (0x7FFF, NaN in fp16 and in bf16).
//   - out is filled with 0xFF bytes (NaN in fp16 and bf16) and lse with NaN before each run: every element
//     of a valid row must be overwritten, and nothing else (padding rows, stride gaps) may be.
//   - Paged K/V: the pages of all sequences are shuffled over the cache, spare pages stay NaN, and block
//     table entries past a sequence's last page (and the padding of each table row) hold kInvalidPage.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/kernel_config.h"
#include "fp8attn/fp8attn.h"
#include "reference/reference.h"

namespace fp8attn_test {

// Block-table filler past each sequence's last page: a page id far beyond any cache, so that a kernel that
// reads the table past ceil(seqused_k / page_size) faults or reads garbage instead of passing by luck.
constexpr int32_t kInvalidPage = 2147480000;

// Where K/V rows live.
enum class KvLayout {
  kDense,   // [batch, seqlen_k, heads_kv, d]; with seqused_k, rows past a sequence's length are NaN
  kVarlen,  // [total_k, heads_kv, d] packed by cu_seqlens_k (needs varlen_q, as in vLLM's contract)
  kPaged,   // [num_pages, page_size, heads_kv, d] through a block table, lengths from seqused_k
};

// How each of q_descale / k_descale / v_descale is passed (params.h: read in place, never copied).
enum class DescaleForm {
  kNone,            // NULL: 1.0
  kScalar,          // 0-d tensor
  kPerBatchHead,    // (batch, heads_kv), contiguous
  kBroadcastAll,    // (batch, heads_kv) view with strides (0, 0): one value
  kBroadcastBatch,  // (batch, heads_kv) view with strides (0, 1): one value per kv head
};

enum class SinkType { kNone, kF32, kBF16 };

// How K and V rows are stored (vLLM 0.34's cache: shared/notes/vllm-0.34-call.md (a), the "k, v" row).
enum class KvRows {
  kSeparate,      // K and V in separate regions of one buffer (or interleaved per unit when Case::strided)
  kRowHalvesHnd,  // vLLM 0.34: each unit (page, batch entry, or the varlen tensor) is [heads_kv][rows][d + dv],
                  // its rows holding K in their first d bytes and V in their last dv: the [num_blocks, Hkv, page,
                  // 2d] cache viewed .transpose(1, 2).split(d): V = K + d bytes, rows d + dv apart, heads
                  // rows * (d + dv) apart
  kRowHalvesNhd,  // the same halves with units [rows][heads_kv][d + dv]: heads d + dv apart
};

struct Case {
  // ---- shape ----
  int batch = 1;
  std::vector<int> seqlens_q;  // query rows of each sequence (dense q: all equal)
  std::vector<int> seqlens_k;  // keys each sequence attends over (its seqused_k when that is passed)
  int heads_q = 4;
  int heads_kv = 4;
  int head_dim = 128;
  int head_dim_v = 128;

  // ---- layout ----
  bool varlen_q = false;  // cu_seqlens_q; otherwise dense q [batch, seqlen_q, ...]
  KvLayout kv = KvLayout::kDense;
  bool seqused_k = false;    // pass seqused_k (kDense); forced for kPaged, refused for kVarlen
  int spare_k_rows = 0;      // kDense with seqused_k: NaN rows allocated past the longest sequence
  int spare_q_rows = 0;      // varlen q: NaN rows after the last sequence; out/lse there stay unwritten
  int extra_max_seqlen = 0;  // max_seqlen_q/k bounds exceed the real maxima (CUDA-graph style); varlen/paged
  int page_size = 0;         // kPaged: tokens per page (a multiple of 16)
  int spare_pages = 3;       // kPaged: NaN pages no sequence uses
  bool strided = false;      // padded head/row/batch strides everywhere, K and V as views of one
                             // interleaved cache [units, 2, rows, heads_kv, max(d, dv) + 16]
  KvRows kv_rows = KvRows::kSeparate;  // row halves: K/V strides from it (strided then pads q/out/table only)
  int kv_layers = 1;  // row halves only: each unit sits among kv_layers - 1 other layers' NaN units (vLLM's
                      // layer-interleaved cache: the unit stride is kv_layers units; this layer is the middle one)
  bool kv_shared = false;  // K = V: v is k itself, same address and strides (Gemma-4's global layers; d == dv,
                           // separate rows only). The kernel then reads each tile once (FwdArgs::kv_shared).

  // ---- attention ----
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  DescaleForm descale_q = DescaleForm::kNone;
  DescaleForm descale_k = DescaleForm::kNone;
  DescaleForm descale_v = DescaleForm::kNone;
  SinkType sink = SinkType::kNone;
  float softcap = 0.0f;  // > 0: logits capped to softcap * tanh(l / softcap)
  // F16, BF16 or E4M3. E4M3 runs the same call with a bf16 out first (the eager path: bf16 out, then the same
  // static quantization) and is judged against it (Problem::check).
  fp8attn_dtype out_dtype = FP8ATTN_DTYPE_BF16;
  // E4M3 out: output_scale; 0 = derived from the inputs, max|v| * max v_descale / 448, so that nothing saturates.
  float output_scale = 0.0f;
  bool lse = true;
  int num_splits = 0;  // 0: the library's heuristic
  // num_splits >= 2: exactly that many splits, through the library's internal launch with its planned config
  // (fp8attn::with_exact_splits), for the tests of a given split count; false: num_splits as the public API reads
  // it, a ceiling on the heuristic (vLLM's 32). The varlen schedule does not split either way.
  bool splits_exact = true;

  // ---- inputs: q, k ~ N(0, qk_std^2), v ~ N(v_mean, v_std^2), each rounded to E4M3 (a 16-bit q: to its type) ----
  // E4M3, or F16 / BF16: a 16-bit q, which the kernel quantizes per (token, head) row (amax / 448) and which
  // takes no q_descale (descale_q must be kNone). Its strides stay in elements (of 2 bytes).
  fp8attn_dtype q_dtype = FP8ATTN_DTYPE_E4M3;
  // The first zero_q_rows query rows of every sequence are all zeros in every head (their values are still drawn,
  // so the other inputs do not move): a 16-bit q row of zeros has scale 1, and its output is the mean of the V
  // rows it sees.
  int zero_q_rows = 0;
  float qk_std = 1.0f;
  float v_mean = 0.0f;
  float v_std = 1.0f;
  uint64_t seed = 1;

  // Everything above on one line, for failure messages.
  std::string describe() const;
};

// One kernel output, as raw bytes in the device layout (so that bit-exact comparisons are possible).
struct Output {
  std::vector<uint8_t> out;
  std::vector<uint8_t> lse;  // empty when the case asks for no LSE
};

// The docs/accuracy.md judgement of one run.
struct Metrics {
  bool passed = false;
  double max_abs_err = 0;       // max |out - exact| over valid elements
  double emul_max_abs_err = 0;  // max |emulation - exact|
  double max_abs_exact = 0;
  double bound = 0;    // 2 * emul_max_abs_err + 2 ulp_bf16(max_abs_exact)
  double rel_rms = 0;  // sqrt(sum (out - exact)^2 / sum exact^2)
  double emul_rel_rms = 0;
  // sum(out) / sum(exact) over the valid elements: a bias shows here long before it shows in the RMS.
  double mean_ratio = 1;
  double emul_mean_ratio = 1;
  // LSE, over entries where the exact LSE is finite. The bar is per row (derivation in harness.cpp, "The LSE
  // bar"): |lse - exact| <= 2 * emul_lse_max_abs_err + 1e-3 + 2^-11 * M_row, where M_row = max over the row's
  // visible keys j of |softmax_scale * q_descale * k_descale| * sum_c |q_c k_jc| (FP8 WGMMA's truncating
  // ~13-bit QK^T accumulator, which the fp32 emulation does not model).
  double lse_max_abs_err = 0;
  double emul_lse_max_abs_err = 0;
  double lse_bound = 0;                // the largest row bound (for reporting; each row has its own)
  double lse_worst_fraction = 0;       // max over rows of |lse - exact| / row bound: above 1 fails
  double lse_max_score_magnitude = 0;  // the largest M_row
  int64_t lse_rows_over_bound = 0;
  int64_t checked_elements = 0;
  int64_t nonfinite = 0;       // valid out elements left NaN or written non-finite
  int64_t stray_writes = 0;    // out/lse elements outside valid rows that changed
  int64_t lse_mismatches = 0;  // LSE non-finite where it must be finite, or finite where it must be -inf
  std::string failure;         // empty when passed: what failed, where, and the case
};

// One forward call: inputs on host and device, the references, and the comparison.
class Problem {
 public:
  explicit Problem(const Case& c);
  ~Problem();
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  const Case& description() const { return case_; }
  // The device-side params of this call (a copy may be altered to make bad calls).
  const fp8attn_fwd_params& params() const { return device_params_; }
  // Changes only the output dtype: the same inputs, and the same references, serve both.
  void set_out_dtype(fp8attn_dtype dtype);

  // Fills out and lse with NaN bytes and the workspace with 0xFF, asynchronously on `stream`.
  void poison(cudaStream_t stream) const;
  // fp8attn::fwd on `stream`, or the exact-split launch of Case::splits_exact (no poisoning, no synchronization).
  fp8attn::Status launch(cudaStream_t stream) const;
  // poison(stream), then launch(stream).
  fp8attn::Status run(cudaStream_t stream = nullptr) const;
  // Copies out and lse back on `stream` and waits for that stream only.
  Output download(cudaStream_t stream = nullptr) const;
  // docs/accuracy.md: against the fp64 reference and the kernel-precision emulation (computed on first use).
  // An E4M3 out is judged against Q(exact) = E4M3(exact / output_scale), dequantized: per element
  // |out - Q(exact)| <= 2 * max|Q(eager) - Q(exact)| + 1 E4M3 ulp of Q(exact), where Q(eager) quantizes the bf16
  // output of the same call (`eager`, required then) with the same scale.
  Metrics check(const Output& output, const Output* eager = nullptr);
  // run(), download() and check(), on `stream`. An E4M3 out first runs the same call with a bf16 out, which must
  // pass on its own (else its metrics are returned) and is check()'s eager path. A failed launch returns its
  // status and leaves `metrics` alone.
  fp8attn::Status run_and_check(Metrics* metrics, cudaStream_t stream = nullptr);
  // True when every out/lse byte still holds the poison (nothing was written).
  static bool untouched(const Output& output);

 private:
  struct Buffers;
  void compute_references();

  Case case_;
  std::unique_ptr<Buffers> buffers_;
  fp8attn_fwd_params host_params_{};
  fp8attn_fwd_params device_params_{};
  bool exact_splits_ = false;  // launch exact_split_config_ (Case::splits_exact)
  fp8attn::KernelConfig exact_split_config_{};
  bool have_references_ = false;
  float output_scale_ = 1.0f;  // the E4M3 out's scale (Case::output_scale)
  fp8attn::ref::Result exact_;
  fp8attn::ref::Result emulation_;
  std::vector<double> score_magnitude_;  // M_row of the LSE bar, laid out as Result::lse (only with an LSE)
};

// The whole check for one case, reported through gtest. Skips only in a dev build that left the case's head
// dims out (see dev_build_skip); any other refusal, kNotSupported included, fails, as does Metrics::failure.
// Prints one metrics line.
void expect_case_passes(const Case& c, Metrics* metrics = nullptr);

// The (head_dim, head_dim_v) pairs compiled into this build (from the generated kernel registry), and whether
// this is a dev build that compiled only some of the declared pairs (FP8ATTN_HEAD_DIMS).
std::vector<std::pair<int, int>> compiled_head_dims();
bool is_partial_build();

// What a test may skip on: kNotCompiled for a head-dim pair that this dev build left out. Returns the skip
// message then, and "" otherwise (a full build, a compiled pair, or any other status: the test must not
// pass by skipping, so a full build reports 0 skips).
std::string dev_build_skip(const fp8attn::Status& status, int head_dim, int head_dim_v);

// "f16" / "bf16" and so on, for test names and messages.
const char* dtype_label(fp8attn_dtype dtype);
// "" for no softcap, else "_softcap<value>" (whole values: "_softcap50"), for test names.
std::string softcap_label(float softcap);

// Throws std::runtime_error naming `what` and the CUDA error when err is not cudaSuccess.
void check_cuda(cudaError_t err, const char* what);

// A non-blocking CUDA stream, destroyed with the object.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace fp8attn_test
