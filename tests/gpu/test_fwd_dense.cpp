// fp8attn GPU tests: the forward pass against the CPU references (docs/accuracy.md), dense and varlen.
//
// The full cross product of the matrix (head dims x masks x head layouts x length pairs x
// dense/varlen x descale forms x sink x output dtype) is ~26,000 calls, far beyond the time a GPU run
// has (the fp64 reference is the slow part). FwdMatrix crosses the factors that decide which kernel runs
// and how its tiles are masked — every head-dim pair x every mask x every length pair x dense/varlen
// (432 cases) — and rotates the rest deterministically over the case index so that each head-dim pair
// also meets every head layout and the others appear in every combination many times:
//   head layout    (mask + length pair + layout) % 3: every head dim, mask, length pair meets MHA, GQA, MQA
//   descale forms  q, k and v each cycle through the five forms at different rates
//   sink, out      sink on every other run of 5 cases; bf16 / fp16 / E4M3 (with output_scale) by runs of 10
//   softcap        50 in one case of 11, 2 (far from linear) in another
//   strided        one case in 3: padded strides and K/V as views of one interleaved cache
//   lse            off in one case of 7
//   seqused_k      one dense and one varlen case in 4: keys past each sequence's length are NaN
// FwdEdgeCases adds what the matrix cannot reach by rotation: fully masked rows, empty sequences,
// max_seqlen bounds far above the lengths, bf16 sinks, window corner cases, large GQA ratios, extreme
// score ranges. FwdPagedSmoke runs the harness's paged layout; it skips while paged K/V is not implemented.
// FwdSixteenBitQ runs fp16 and bf16 q (issue 35) at every head-dim pair.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "case_suite.h"
#include "harness.h"

namespace fp8attn_test {
namespace {

struct MaskSpec {
  const char* name;
  bool causal;
  int left, right;
};
struct HeadsSpec {
  const char* name;
  int q, kv;
};
struct LengthPair {
  int q, k;
};

// "causal" keeps window_right = -1 and "causal_local" spells it 0: both forms of causal reach the kernel.
constexpr MaskSpec kMasks[] = {
    {"full", false, -1, -1}, {"causal", true, -1, -1}, {"local", false, 37, 11}, {"causal_local", true, 64, 0}};
constexpr HeadsSpec kHeads[] = {{"mha4x4", 4, 4}, {"gqa8x2", 8, 2}, {"mqa4x1", 4, 1}};
// Odd lengths around tile edges, one query row (decode), and sq != sk both ways.
constexpr LengthPair kLengthPairs[] = {{1, 1},   {3, 3},    {17, 17},  {239, 239}, {1025, 1025},
                                       {1, 239}, {3, 1025}, {239, 17}, {113, 203}};
constexpr DescaleForm kDescaleForms[] = {DescaleForm::kNone, DescaleForm::kScalar, DescaleForm::kPerBatchHead,
                                         DescaleForm::kBroadcastAll, DescaleForm::kBroadcastBatch};

// Sequence b of `count` gets a share of the longest length; keys shrink in the opposite order to queries,
// so one varlen batch holds sq > sk, sq == sk and sq < sk sequences.
int query_length(int longest, int b, int count) { return longest - (b * longest) / count; }
int key_length(int longest, int b, int count) { return longest - ((count - 1 - b) * longest) / count; }

std::vector<NamedCase> matrix_cases() {
  std::vector<NamedCase> cases;
  int i = 0;
  for (int hd_i = 0; hd_i < kNumHeadDims; ++hd_i) {
    for (int mask_i = 0; mask_i < 4; ++mask_i) {
      for (int len_i = 0; len_i < 9; ++len_i) {
        for (int varlen = 0; varlen < 2; ++varlen, ++i) {
          const HeadDims& hd = kHeadDims[hd_i];
          const MaskSpec& mask = kMasks[mask_i];
          const HeadsSpec& heads = kHeads[(mask_i + len_i + varlen) % 3];
          const LengthPair& len = kLengthPairs[len_i];
          Case c;
          c.head_dim = hd.d;
          c.head_dim_v = hd.dv;
          c.heads_q = heads.q;
          c.heads_kv = heads.kv;
          c.causal = mask.causal;
          c.window_left = mask.left;
          c.window_right = mask.right;
          c.descale_q = kDescaleForms[i % 5];
          c.descale_k = kDescaleForms[(i + 1 + i / 5) % 5];
          c.descale_v = kDescaleForms[(i + 3 + i / 25) % 5];
          c.sink = (i / 5) % 2 ? SinkType::kF32 : SinkType::kNone;
          const int out_i = (i / 10) % 3;
          c.out_dtype = out_i == 2 ? FP8ATTN_DTYPE_E4M3 : out_i == 1 ? FP8ATTN_DTYPE_F16 : FP8ATTN_DTYPE_BF16;
          c.softcap = i % 11 == 3 ? 50.0f : i % 11 == 8 ? 2.0f : 0.0f;
          c.strided = i % 3 == 1;
          c.lse = i % 7 != 6;
          c.seed = 1000 + i;
          const bool with_seqused = i % 4 == (varlen ? 1 : 3);
          if (varlen) {
            c.batch = 3;
            c.varlen_q = true;
            c.spare_q_rows = 5;
            c.extra_max_seqlen = i % 5 == 2 ? 100 : 0;
            if (with_seqused) {  // dense K cache with per-sequence used lengths
              c.kv = KvLayout::kDense;
              c.seqused_k = true;
              c.spare_k_rows = 7;
            } else {
              c.kv = KvLayout::kVarlen;
              c.spare_k_rows = i % 2 ? 16 : 0;
            }
          } else {
            // Few sequences for the long pairs: the CPU reference is the budget.
            c.batch = len.q * len.k >= 500000 ? 1 : 1 + i % 3;
            c.seqused_k = with_seqused;
            c.spare_k_rows = with_seqused ? 5 : 0;
          }
          for (int b = 0; b < c.batch; ++b) {
            c.seqlens_q.push_back(varlen ? query_length(len.q, b, c.batch) : len.q);
            c.seqlens_k.push_back(varlen || with_seqused ? key_length(len.k, b, c.batch) : len.k);
          }
          std::string name = head_dims_label(hd) + "_" + mask.name + "_" + heads.name + "_q" + std::to_string(len.q) +
                             "_k" + std::to_string(len.k) + (varlen ? "_varlen" : "_dense") +
                             (with_seqused ? "_seqused" : "") + (c.strided ? "_strided" : "") +
                             (c.sink != SinkType::kNone ? "_sink" : "") + softcap_label(c.softcap) + "_" +
                             dtype_label(c.out_dtype);
          cases.push_back({name, c});
        }
      }
    }
  }
  return cases;
}

// A case with defaults the edge cases start from: d128 MHA 4:4, bf16 out, LSE on.
Case base_case(int d, int dv, int heads_q, int heads_kv, uint64_t seed) {
  Case c;
  c.head_dim = d;
  c.head_dim_v = dv;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.seed = seed;
  return c;
}

void set_dense(Case* c, int batch, int seqlen_q, int seqlen_k) {
  c->batch = batch;
  c->seqlens_q.assign(batch, seqlen_q);
  c->seqlens_k.assign(batch, seqlen_k);
}

void set_varlen(Case* c, std::vector<int> seqlens_q, std::vector<int> seqlens_k, KvLayout kv) {
  c->batch = static_cast<int>(seqlens_q.size());
  c->seqlens_q = std::move(seqlens_q);
  c->seqlens_k = std::move(seqlens_k);
  c->varlen_q = true;
  c->spare_q_rows = 3;
  c->kv = kv;
  c->seqused_k = kv == KvLayout::kDense;
}

std::vector<NamedCase> edge_cases() {
  std::vector<NamedCase> cases;
  uint64_t seed = 5000;
  auto add = [&](const std::string& name, Case c) { cases.push_back({name, c}); };

  {  // Window (5, 0) with sq 239 > sk 17: rows 0..221 see no key: out 0, LSE -inf.
    Case c = base_case(128, 128, 4, 4, seed++);
    set_dense(&c, 2, 239, 17);
    c.window_left = 5;
    c.window_right = 0;
    c.descale_q = c.descale_k = c.descale_v = DescaleForm::kPerBatchHead;
    add("fully_masked_rows_local", c);
  }
  {  // The same rows with a sink: out 0, LSE = the sink logit.
    Case c = base_case(64, 64, 8, 2, seed++);
    set_dense(&c, 1, 239, 17);
    c.window_left = 5;
    c.window_right = 0;
    c.sink = SinkType::kF32;
    c.out_dtype = FP8ATTN_DTYPE_F16;
    add("fully_masked_rows_local_sink", c);
  }
  {  // Right window only, sq > sk: the first sq - sk - 3 rows see nothing.
    Case c = base_case(256, 256, 4, 1, seed++);
    set_dense(&c, 1, 113, 17);
    c.window_right = 3;
    add("fully_masked_rows_right_window", c);
  }
  {  // Causal varlen: sq > sk rows, and a sequence with no keys at all.
    Case c = base_case(96, 96, 8, 2, seed++);
    set_varlen(&c, {50, 7, 40}, {10, 30, 0}, KvLayout::kVarlen);
    c.causal = true;
    add("fully_masked_rows_causal_varlen", c);
  }
  {  // Empty sequences of every kind among non-empty ones, with a bf16 sink.
    Case c = base_case(192, 128, 4, 4, seed++);
    set_varlen(&c, {0, 17, 5, 0}, {10, 0, 33, 0}, KvLayout::kVarlen);
    c.sink = SinkType::kBF16;
    c.spare_k_rows = 16;
    add("zero_length_sequences_varlen", c);
  }
  {  // The same through seqused_k over a dense K cache.
    Case c = base_case(128, 128, 4, 4, seed++);
    set_varlen(&c, {3, 0, 9}, {0, 12, 40}, KvLayout::kDense);
    c.spare_k_rows = 9;
    c.causal = true;
    add("zero_length_sequences_seqused", c);
  }
  {  // No query rows at all: nothing may be written.
    Case c = base_case(64, 64, 4, 4, seed++);
    set_varlen(&c, {0, 0}, {10, 20}, KvLayout::kVarlen);
    add("all_queries_empty_varlen", c);
  }
  {  // Dense with seqlen_q = 0: nothing to do.
    Case c = base_case(128, 128, 4, 4, seed++);
    set_dense(&c, 2, 0, 17);
    add("dense_zero_query_rows", c);
  }
  {  // Dense with seqlen_k = 0: every row fully masked (and no K/V tile exists to load).
    Case c = base_case(128, 128, 4, 2, seed++);
    set_dense(&c, 2, 17, 0);
    add("dense_zero_keys", c);
  }
  {  // CUDA-graph style decode: max_seqlen_k = max_model_len far above every sequence.
    Case c = base_case(128, 128, 8, 2, seed++);
    set_varlen(&c, {1, 1, 1, 1}, {5, 300, 1025, 17}, KvLayout::kVarlen);
    c.extra_max_seqlen = 4000;
    c.descale_q = c.descale_k = c.descale_v = DescaleForm::kBroadcastBatch;
    add("max_seqlen_k_far_above_lengths", c);
  }
  {  // The same over seqused_k, with a local window and q bound above the rows too.
    Case c = base_case(256, 256, 4, 4, seed++);
    set_varlen(&c, {4, 2}, {100, 7}, KvLayout::kDense);
    c.spare_k_rows = 20;
    c.extra_max_seqlen = 2048;
    c.causal = true;
    c.window_left = 64;
    add("max_seqlen_far_above_seqused", c);
  }
  {
    Case c = base_case(128, 128, 8, 2, seed++);
    set_dense(&c, 2, 239, 239);
    c.causal = true;
    c.sink = SinkType::kBF16;
    add("sink_bf16_dense_causal", c);
  }
  {
    Case c = base_case(64, 64, 4, 1, seed++);
    set_varlen(&c, {1, 1, 1}, {239, 17, 1025}, KvLayout::kVarlen);
    c.sink = SinkType::kBF16;
    c.out_dtype = FP8ATTN_DTYPE_F16;
    add("sink_bf16_varlen_decode", c);
  }
  {  // Every stride padded, K/V interleaved per row, mixed descale forms, trailing NaN rows.
    Case c = base_case(192, 128, 8, 2, seed++);
    set_varlen(&c, {113, 17, 1}, {203, 239, 3}, KvLayout::kVarlen);
    c.strided = true;
    c.spare_q_rows = 7;
    c.spare_k_rows = 5;
    c.descale_q = DescaleForm::kBroadcastBatch;
    c.descale_k = DescaleForm::kPerBatchHead;
    c.descale_v = DescaleForm::kScalar;
    c.sink = SinkType::kF32;
    add("strided_everything_varlen", c);
  }
  {
    Case c = base_case(96, 96, 4, 4, seed++);
    c.batch = 3;
    c.seqlens_q.assign(3, 64);
    c.seqlens_k = {200, 64, 1};
    c.seqused_k = true;
    c.spare_k_rows = 11;
    c.strided = true;
    c.causal = true;
    add("strided_dense_seqused", c);
  }
  {  // Window (0, 0): every row sees exactly its diagonal key, so out = v * v_descale exactly.
    Case c = base_case(128, 128, 4, 4, seed++);
    set_dense(&c, 1, 239, 239);
    c.window_left = 0;
    c.window_right = 0;
    c.descale_v = DescaleForm::kPerBatchHead;
    add("diagonal_window", c);
  }
  {  // Causal spelled as a window (-1, 0) without the causal flag (sq < sk).
    Case c = base_case(128, 128, 4, 4, seed++);
    set_dense(&c, 2, 113, 203);
    c.window_right = 0;
    add("causal_as_window", c);
  }
  {  // A window wider than the keys masks nothing.
    Case c = base_case(64, 64, 4, 4, seed++);
    set_dense(&c, 1, 239, 17);
    c.window_left = 5000;
    c.window_right = 5000;
    add("window_wider_than_keys", c);
  }
  {
    Case c = base_case(192, 192, 4, 1, seed++);
    set_dense(&c, 1, 203, 239);
    c.causal = true;
    c.window_left = 0;
    add("causal_window_left_zero", c);
  }
  {  // 4 query tokens x 16 q heads per kv head = 64 packed rows: the short-decode tile limit...
    Case c = base_case(128, 128, 16, 1, seed++);
    set_varlen(&c, {4, 4}, {1025, 300}, KvLayout::kVarlen);
    add("gqa16_decode_64_rows", c);
  }
  {  // ...and one token more per sequence.
    Case c = base_case(128, 128, 16, 1, seed++);
    set_varlen(&c, {5, 5}, {1025, 300}, KvLayout::kVarlen);
    c.causal = true;
    add("gqa16_decode_80_rows", c);
  }
  {
    Case c = base_case(256, 256, 6, 2, seed++);
    set_dense(&c, 1, 239, 239);
    c.causal = true;
    add("gqa_ratio_3", c);
  }
  {
    Case c = base_case(128, 128, 32, 8, seed++);
    set_dense(&c, 2, 17, 1025);
    c.descale_q = c.descale_k = c.descale_v = DescaleForm::kPerBatchHead;
    add("many_heads_32x8", c);
  }
  {  // Scores spread over tens of units: softmax close to one-hot, P mostly far below the row max.
    Case c = base_case(128, 128, 4, 4, seed++);
    set_dense(&c, 1, 239, 239);
    c.qk_std = 3.0f;
    c.descale_q = c.descale_k = DescaleForm::kPerBatchHead;
    add("peaky_scores", c);
  }
  {  // Near-uniform softmax over many keys with mean-0.5 V: P all near the 2^8 offset.
    Case c = base_case(64, 64, 4, 4, seed++);
    set_dense(&c, 1, 113, 1025);
    c.qk_std = 0.1f;
    c.v_mean = 0.5f;
    c.v_std = 0.25f;
    c.out_dtype = FP8ATTN_DTYPE_F16;
    add("flat_scores_mean_v", c);
  }
  {  // Many query tiles with the causal diagonal crossing them.
    Case c = base_case(128, 128, 2, 2, seed++);
    set_dense(&c, 1, 2048, 2048);
    c.causal = true;
    add("prefill_2048_causal", c);
  }
  {
    Case c = base_case(64, 64, 8, 2, seed++);
    set_varlen(&c, {113, 17, 239}, {203, 17, 1}, KvLayout::kVarlen);
    c.lse = false;
    c.spare_q_rows = 9;
    add("varlen_without_lse", c);
  }
  {  // num_splits = 1 asked for explicitly (the heuristic may differ).
    Case c = base_case(128, 128, 4, 4, seed++);
    set_dense(&c, 1, 239, 1025);
    c.num_splits = 1;
    add("one_split_explicit", c);
  }
  return cases;
}

// Softcap and the FP8 output where the matrix does not go: long rows, saturation, splits.
std::vector<NamedCase> softcap_and_fp8_out_cases() {
  std::vector<NamedCase> cases;
  uint64_t seed = 8000;
  {  // Gemma-2's softcap 50 over 32k keys (SPEC's long rows): the capped logits' small errors add up over the row.
    Case c = base_case(128, 128, 4, 2, seed++);
    set_dense(&c, 1, 16, 32768);
    c.softcap = 50.0f;
    c.qk_std = 3.5f;  // logits ~ N(0, 12^2): the row maxima, ~50, deep in tanh's curve
    cases.push_back({"softcap50_32k_keys", c});
  }
  {  // A small cap on a causal prefill with descales: every logit deep in tanh's curve.
    Case c = base_case(256, 256, 4, 4, seed++);
    set_varlen(&c, {300, 129}, {300, 1000}, KvLayout::kVarlen);
    c.causal = true;
    c.softcap = 1.0f;
    c.descale_q = c.descale_k = c.descale_v = DescaleForm::kPerBatchHead;
    cases.push_back({"softcap1_d256_causal_varlen", c});
  }
  {  // E4M3 out at a scale 16x too small: |O| / scale passes 448 and saturates (as the reference's quantization).
    Case c = base_case(128, 128, 4, 4, seed++);
    set_dense(&c, 2, 100, 300);
    c.out_dtype = FP8ATTN_DTYPE_E4M3;
    c.output_scale = 1.0f / 448 / 16;
    c.v_mean = 0.5f;
    cases.push_back({"e4m3_out_saturating", c});
  }
  {  // E4M3 out through the split-KV combine, with a sink and a softcap, 64-row decode kernel.
    Case c = base_case(64, 64, 8, 2, seed++);
    set_varlen(&c, {1, 3, 1}, {4000, 2500, 7}, KvLayout::kDense);
    c.num_splits = 7;
    c.sink = SinkType::kBF16;
    c.softcap = 50.0f;
    c.out_dtype = FP8ATTN_DTYPE_E4M3;
    cases.push_back({"e4m3_out_splits_sink_softcap_decode", c});
  }
  {  // E4M3 out from the staged 128-row epilogue at d256 (two passes) with strided out.
    Case c = base_case(256, 256, 2, 2, seed++);
    set_dense(&c, 1, 300, 500);
    c.strided = true;
    c.out_dtype = FP8ATTN_DTYPE_E4M3;
    cases.push_back({"e4m3_out_staged_d256_strided", c});
  }
  return cases;
}

// 16-bit q (issue 35): fp16 and bf16 q over E4M3 K/V, quantized per (token, head) row by the kernel, at every
// head-dim pair. Per pair and dtype: a dense causal prefill written in q's dtype, and a varlen prefill with a
// causal sliding window, a bf16 sink, padded strides, an E4M3 out and rows of zeros (the first two of each sequence:
// scale 1, the mean of the V rows they see, never NaN; masked keys beside them). The serving calls (paged decode, PackGQA, splits, softcap)
// are test_kvcache.cpp's KvCacheSixteenBitQ.
std::vector<NamedCase> sixteen_bit_q_cases() {
  std::vector<NamedCase> cases;
  uint64_t seed = 9000;
  for (const HeadDims& hd : kHeadDims) {
    for (fp8attn_dtype q_dtype : {FP8ATTN_DTYPE_BF16, FP8ATTN_DTYPE_F16}) {
      const std::string label = head_dims_label(hd) + "_" + dtype_label(q_dtype) + "_q";
      {
        Case c = base_case(hd.d, hd.dv, 8, 2, seed++);
        c.q_dtype = q_dtype;
        set_dense(&c, 2, 239, 239);
        c.causal = true;
        c.descale_k = DescaleForm::kPerBatchHead;
        c.descale_v = DescaleForm::kScalar;
        c.out_dtype = q_dtype;
        cases.push_back({label + "_dense_causal_prefill", c});
      }
      {
        Case c = base_case(hd.d, hd.dv, 8, 2, seed++);
        c.q_dtype = q_dtype;
        set_varlen(&c, {113, 17, 1}, {203, 239, 3}, KvLayout::kVarlen);
        c.causal = true;
        c.window_left = 63;
        c.window_right = 0;
        c.sink = SinkType::kBF16;
        c.strided = true;
        c.zero_q_rows = 2;
        c.descale_v = DescaleForm::kBroadcastBatch;
        c.out_dtype = FP8ATTN_DTYPE_E4M3;
        cases.push_back({label + "_varlen_window_sink_zero_rows_strided_e4m3", c});
      }
    }
  }
  return cases;
}

std::vector<NamedCase> paged_cases() {
  std::vector<NamedCase> cases;
  uint64_t seed = 7000;
  {  // vLLM decode: 16-token pages, causal with window (w-1, 0), broadcast descales, a sink.
    Case c = base_case(128, 128, 8, 2, seed++);
    set_varlen(&c, {1, 1, 1}, {17, 239, 1025}, KvLayout::kPaged);
    c.page_size = 16;
    c.causal = true;
    c.window_left = 127;
    c.window_right = 0;
    c.descale_q = c.descale_k = c.descale_v = DescaleForm::kBroadcastBatch;
    c.sink = SinkType::kF32;
    cases.push_back({"paged16_decode", c});
  }
  {
    Case c = base_case(256, 256, 4, 4, seed++);
    set_varlen(&c, {113, 17}, {203, 17}, KvLayout::kPaged);
    c.page_size = 64;
    c.strided = true;
    c.causal = true;
    cases.push_back({"paged64_prefill_strided", c});
  }
  {
    Case c = base_case(64, 64, 4, 1, seed++);
    set_dense(&c, 2, 3, 0);
    c.seqlens_k = {1025, 300};
    c.kv = KvLayout::kPaged;
    c.page_size = 256;
    c.extra_max_seqlen = 500;
    cases.push_back({"paged256_dense_q", c});
  }
  return cases;
}

class FwdMatrix : public NamedCaseTest {};
class FwdEdgeCases : public NamedCaseTest {};
class FwdPagedSmoke : public NamedCaseTest {};
class FwdSoftcapAndFp8Out : public NamedCaseTest {};
class FwdSixteenBitQ : public NamedCaseTest {};

TEST_P(FwdMatrix, MatchesReference) { Check(); }
TEST_P(FwdEdgeCases, MatchesReference) { Check(); }
TEST_P(FwdPagedSmoke, MatchesReference) { Check(); }
TEST_P(FwdSoftcapAndFp8Out, MatchesReference) { Check(); }
TEST_P(FwdSixteenBitQ, MatchesReference) { Check(); }

INSTANTIATE_TEST_SUITE_P(Fwd, FwdMatrix, ::testing::ValuesIn(matrix_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Fwd, FwdEdgeCases, ::testing::ValuesIn(edge_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Fwd, FwdPagedSmoke, ::testing::ValuesIn(paged_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Fwd, FwdSoftcapAndFp8Out, ::testing::ValuesIn(softcap_and_fp8_out_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Fwd, FwdSixteenBitQ, ::testing::ValuesIn(sixteen_bit_q_cases()), case_name);

}  // namespace
}  // namespace fp8attn_test
