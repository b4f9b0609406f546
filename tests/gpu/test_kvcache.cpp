// fp8attn GPU tests: the KV-cache (vLLM serving) matrix against the CPU references (paged K/V,
// SplitKV, decode launches, vLLM's call; accuracy by docs/accuracy.md).
//
// The factors, crossed in full, are ~10^6 calls; the CPU side (seeded E4M3 inputs, one value at a
// time, and the fp64 reference) is the budget. KvCacheMatrix crosses the factors that pick the load path,
// the launch and the combine:
//   K/V layout   paged with 16/32/64/128/256-token pages (page-aligned TMA boxes of gcd(page, tile_n) rows)
//                and a dense cache read through seqused_k
//   head dims    every supported pair of src/kernels.list: (64,64) (96,96) (128,128) (192,192) (256,256) (192,128)
//   num_splits   1, 3 (exactly three, some of them empty for short sequences) and 0 (the heuristic)
//   batch kind   decode (1 token per request), speculative decode (1-8 tokens per request) and a mixed
//                batch (one chunked-prefill request of 37 or 300 tokens among decode requests)
// = 324 cases, and rotates the rest deterministically over the case index:
//   mask         none / causal / causal + window (63, 0) / causal + window (1023, 0), vLLM's (w-1, 0) for
//                w = 64 and 1024: the sum of the four indices above mod 4, so every mask meets every layout,
//                head dim, split count and batch kind
//   heads        MHA 4:4, GQA 8:2 (ratio 4), GQA 16:2 (ratio 8), MQA 8:1
//   key lengths  per request from kKeyLengths (odd lengths around page and tile edges: 1, 15, 16, 17, 255,
//                1000...), one request of 4097 keys in one case of 7, and one 20000-key request in six cases
//                (one per layout, one per head dim)
//   q layout     decode: vLLM's varlen q (cu_seqlens_q, with NaN padding rows past the last request as under
//                CUDA-graph padding) in two cases of three, else dense q [batch, 1, ...] (flash_attn_with_kvcache);
//                half of the dense-q decode cases pass max_seqlen_k = 8192 as a graph-style bound
//   descales     q, k and v each cycle through none / scalar / (B,Hkv) / stride (0,0) / stride (0,1)
//   sink         none / f32 / bf16;  out bf16 / fp16 / E4M3 (output_scale, through the split combine too);
//                softcap 50 in one case of 9;  LSE off in one case of 7
//   strided      one case in 4: K/V as views of one interleaved cache [pages, 2, page, Hkv, d+pad], padded
//                q/out/lse strides and a column-sliced block table (row stride > width). The unstrided paged
//                layout is vLLM's own cache [2, num_pages, page, Hkv, d] (K then V, unpadded).
// Every paged case uses the harness's hostile layout: pages shuffled over the cache, spare pages NaN,
// block-table entries past each request's last page an invalid page id, K/V rows past seqused_k NaN.
// KvCacheEdgeCases adds the decode shapes of bench/decode_shapes.json (reduced batch; three with
// max_seqlen_k = 32768 as vLLM captures them), empty requests (seqused_k = 0), more splits than KV blocks,
// fully masked rows, exact page multiples and pages of 48/80 tokens, and vLLM 0.34's cache (K and V the two
// halves of each cache row, HND / NHD / layer-interleaved) at every head dim. KvCacheSixteenBitQ runs fp16 and bf16
// q (issue 35) in decode and speculative-decode steps at every head dim. vLLM's exact cache with a
// column-sliced block table under CUDA graphs is in test_cuda_graph.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "case_suite.h"
#include "harness.h"

namespace fp8attn_test {
namespace {

struct LayoutSpec {
  const char* name;
  int page_size;  // 0: dense cache + seqused_k
};
struct MaskSpec {
  const char* name;
  bool causal;
  int left, right;
};
struct HeadsSpec {
  const char* name;
  int q, kv;
};
enum class BatchKind { kDecode, kSpecDecode, kMixed };

constexpr LayoutSpec kLayouts[] = {{"page16", 16}, {"page32", 32},   {"page64", 64},
                                   {"page128", 128}, {"page256", 256}, {"densekv", 0}};
constexpr int kSplits[] = {1, 3, 0};
constexpr BatchKind kBatchKinds[] = {BatchKind::kDecode, BatchKind::kSpecDecode, BatchKind::kMixed};
// vLLM passes causal=True with window (w-1, 0) for sliding-window layers.
constexpr MaskSpec kMasks[] = {
    {"nomask", false, -1, -1}, {"causal", true, -1, -1}, {"causal_w64", true, 63, 0}, {"causal_w1024", true, 1023, 0}};
constexpr HeadsSpec kHeads[] = {{"mha4x4", 4, 4}, {"gqa8x2", 8, 2}, {"gqa16x2", 16, 2}, {"mqa8x1", 8, 1}};
constexpr HeadsSpec kMqa = kHeads[3];
// Key lengths of the requests: the list and lengths on either side of page (16..256) and KV tile
// (64, 96, 128) edges, in an order that puts short and long ones side by side.
constexpr int kKeyLengths[] = {1, 15, 16, 17, 255, 1000, 31, 64, 129, 257, 511, 100, 3, 47, 200, 96};
constexpr int kNumKeyLengths = sizeof(kKeyLengths) / sizeof(kKeyLengths[0]);
constexpr DescaleForm kDescaleForms[] = {DescaleForm::kNone, DescaleForm::kScalar, DescaleForm::kPerBatchHead,
                                         DescaleForm::kBroadcastAll, DescaleForm::kBroadcastBatch};
constexpr SinkType kSinks[] = {SinkType::kNone, SinkType::kF32, SinkType::kBF16};
// max_seqlen_k of the graph-style dense-q decode cases (vLLM captures with max_model_len).
constexpr int kGraphMaxSeqlenK = 8192;

const char* batch_kind_label(BatchKind kind) {
  switch (kind) {
    case BatchKind::kDecode:
      return "decode";
    case BatchKind::kSpecDecode:
      return "specdec";
    case BatchKind::kMixed:
      return "mixed";
  }
  return "?";
}

const char* sink_label(SinkType sink) {
  return sink == SinkType::kF32 ? "_sinkf32" : sink == SinkType::kBF16 ? "_sinkbf16" : "";
}

std::string splits_label(int num_splits) {
  return num_splits == 0 ? "splits_auto" : "splits" + std::to_string(num_splits);
}

// Puts the case's K/V in `layout`: a paged cache, or a dense cache [batch, rows, ...] read through seqused_k.
void set_kv_layout(Case* c, const LayoutSpec& layout, int spare) {
  c->seqused_k = true;
  if (layout.page_size > 0) {
    c->kv = KvLayout::kPaged;
    c->page_size = layout.page_size;
    c->spare_pages = spare;
  } else {
    c->kv = KvLayout::kDense;
    c->spare_k_rows = 5 * spare;
  }
}

std::vector<NamedCase> matrix_cases() {
  std::vector<NamedCase> cases;
  int i = 0;
  for (int layout_i = 0; layout_i < 6; ++layout_i) {
    for (int hd_i = 0; hd_i < kNumHeadDims; ++hd_i) {
      for (int split_i = 0; split_i < 3; ++split_i) {
        for (int kind_i = 0; kind_i < 3; ++kind_i, ++i) {
          const LayoutSpec& layout = kLayouts[layout_i];
          const HeadDims& hd = kHeadDims[hd_i];
          const BatchKind kind = kBatchKinds[kind_i];
          const MaskSpec& mask = kMasks[(layout_i + hd_i + split_i + kind_i) % 4];
          // One 20000-key request per layout (each with another head dim), on MQA to bound the CPU work.
          const bool very_long = kind == BatchKind::kDecode && hd_i == layout_i && split_i == layout_i % 3;
          const bool long_request = !very_long && i % 7 == 2;
          const HeadsSpec& heads = very_long ? kMqa : kHeads[(i + i / 4) % 4];

          Case c;
          c.head_dim = hd.d;
          c.head_dim_v = hd.dv;
          c.heads_q = heads.q;
          c.heads_kv = heads.kv;
          c.causal = mask.causal;
          c.window_left = mask.left;
          c.window_right = mask.right;
          c.num_splits = kSplits[split_i];
          c.descale_q = kDescaleForms[i % 5];
          c.descale_k = kDescaleForms[(i + 1 + i / 5) % 5];
          c.descale_v = kDescaleForms[(i + 3 + i / 25) % 5];
          c.sink = kSinks[(i / 3) % 3];
          const int out_i = (i / 2) % 3;
          c.out_dtype = out_i == 2 ? FP8ATTN_DTYPE_E4M3 : out_i == 1 ? FP8ATTN_DTYPE_F16 : FP8ATTN_DTYPE_BF16;
          c.softcap = i % 9 == 4 ? 50.0f : 0.0f;
          c.strided = i % 4 == 1;
          c.lse = i % 7 != 5;
          c.seed = 20000 + i;
          set_kv_layout(&c, layout, 1 + i % 5);

          // Requests: (q tokens, keys). Keys never fall below the request's q tokens (vLLM's query tokens
          // are the last ones of the context); the edge cases cover the other way round.
          const int batch = kind == BatchKind::kMixed ? 4 : 3;
          const bool dense_q = kind == BatchKind::kDecode && (i / 3) % 3 == 0;
          std::vector<int> q_tokens(batch, 1), keys(batch);
          for (int b = 0; b < batch; ++b) keys[b] = kKeyLengths[(i * 5 + b * 7) % kNumKeyLengths];
          if (kind == BatchKind::kSpecDecode)
            for (int b = 0; b < batch; ++b) q_tokens[b] = 1 + (i / 3 + 3 * b) % 8;
          std::string prefill;
          const int prefill_at = (i / 3) % batch;
          if (kind == BatchKind::kMixed) {
            // One chunked-prefill request among decode requests: 37 tokens (continuing a 37..4097-key
            // context) or, in one mixed case of 3, 300 tokens (a fresh 300-token prompt or a 1000-key context).
            const int at = prefill_at;
            const bool big = (i / 3) % 3 == 1;
            constexpr int kSmallPrefillKeys[] = {37, 255, 1000, 4097};
            q_tokens[at] = big ? 300 : 37;
            keys[at] = big ? ((i / 9) % 2 ? 1000 : 300) : kSmallPrefillKeys[(i / 9) % 4];
            prefill = "_prefill" + std::to_string(q_tokens[at]) + "of" + std::to_string(keys[at]);
          }
          if (very_long) keys[0] = 20000;
          if (long_request) keys[(prefill_at + 1) % batch] = 4097;  // a decode request, never the prefill one
          for (int b = 0; b < batch; ++b) keys[b] = std::max(keys[b], q_tokens[b]);

          c.batch = batch;
          c.seqlens_q = q_tokens;
          c.seqlens_k = keys;
          c.varlen_q = !dense_q;
          if (c.varlen_q) c.spare_q_rows = (i / 3) % 2 ? 5 : 0;
          if (dense_q && (i / 9) % 2 == 1)
            c.extra_max_seqlen = kGraphMaxSeqlenK - *std::max_element(keys.begin(), keys.end());
          if (c.extra_max_seqlen < 0) c.extra_max_seqlen = 0;

          std::string name = std::string(layout.name) + "_" + head_dims_label(hd) + "_" + splits_label(c.num_splits) +
                             "_" + batch_kind_label(kind) + prefill + "_" + mask.name + "_" + heads.name +
                             (very_long ? "_k20000" : long_request ? "_k4097" : "") + (dense_q ? "_denseq" : "") +
                             (c.extra_max_seqlen > 0 ? "_maxk8192" : "") + (c.strided ? "_strided" : "") +
                             sink_label(c.sink) + softcap_label(c.softcap) + "_" + dtype_label(c.out_dtype) +
                             (c.lse ? "" : "_nolse");
          cases.push_back({name, c});
        }
      }
    }
  }
  return cases;
}

// A paged, varlen-q case with defaults the edge cases start from.
Case paged_case(int d, int dv, int heads_q, int heads_kv, int page_size, std::vector<int> seqlens_q,
                std::vector<int> seqlens_k, uint64_t seed) {
  Case c;
  c.head_dim = d;
  c.head_dim_v = dv;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.kv = KvLayout::kPaged;
  c.page_size = page_size;
  c.seqused_k = true;
  c.batch = static_cast<int>(seqlens_q.size());
  c.seqlens_q = std::move(seqlens_q);
  c.seqlens_k = std::move(seqlens_k);
  c.varlen_q = true;
  c.seed = seed;
  return c;
}

// vLLM's decode call: causal, k/v descales expanded from per-tensor scales (stride (0, 0)), bf16 out.
void set_vllm_decode(Case* c) {
  c->causal = true;
  c->descale_q = DescaleForm::kBroadcastAll;
  c->descale_k = DescaleForm::kBroadcastAll;
  c->descale_v = DescaleForm::kBroadcastAll;
  c->out_dtype = FP8ATTN_DTYPE_BF16;
}

// The same q tokens for every request as dense q [batch, tokens, ...], so that max_seqlen_k can be the
// graph-style bound without raising max_seqlen_q (the harness's extra_max_seqlen raises both for varlen q).
void use_dense_q_with_max_seqlen_k(Case* c, int max_seqlen_k) {
  c->varlen_q = false;
  c->spare_q_rows = 0;
  c->extra_max_seqlen = max_seqlen_k - *std::max_element(c->seqlens_k.begin(), c->seqlens_k.end());
}

std::vector<NamedCase> edge_cases() {
  std::vector<NamedCase> cases;
  uint64_t seed = 30000;
  auto add = [&](const std::string& name, const Case& c) { cases.push_back({name, c}); };

  // ---- bench/decode_shapes.json at reduced batch, max_seqlen_k = 32768 as vLLM captures them ----
  {  // llama3.1-8b-tp1: Hq 32, Hkv 8, d 128, 1 token, 4k context.
    Case c = paged_case(128, 128, 32, 8, 16, {1, 1}, {4096, 4096}, seed++);
    set_vllm_decode(&c);
    use_dense_q_with_max_seqlen_k(&c, 32768);
    add("bench_llama8b_32x8_d128_ctx4096_splits_auto", c);
  }
  {  // The same shape, split 3 ways, 4 speculative tokens, odd contexts.
    Case c = paged_case(128, 128, 32, 8, 16, {4, 4}, {4097, 1023}, seed++);
    set_vllm_decode(&c);
    c.num_splits = 3;
    c.descale_k = c.descale_v = DescaleForm::kBroadcastBatch;
    add("bench_llama8b_32x8_d128_q4_splits3", c);
  }
  {  // gemma4-31b-tp4: Hq 8, Hkv 4, d 256, 4 tokens, window 1023.
    Case c = paged_case(256, 256, 8, 4, 16, {4, 4}, {4096, 2500}, seed++);
    set_vllm_decode(&c);
    c.window_left = 1023;
    c.window_right = 0;
    use_dense_q_with_max_seqlen_k(&c, 32768);
    add("bench_gemma31b_8x4_d256_q4_w1024_splits_auto", c);
  }
  {  // llama3.1-70b-tp4: Hq 16, Hkv 2, d 128, 1 token.
    Case c = paged_case(128, 128, 16, 2, 16, {1, 1, 1, 1}, {4096, 1000, 2047, 17}, seed++);
    set_vllm_decode(&c);
    c.descale_k = c.descale_v = DescaleForm::kBroadcastBatch;
    c.sink = SinkType::kBF16;
    add("bench_llama70b_16x2_d128_varlen_splits_auto", c);
  }
  {  // qwen3-32b-tp2: Hq 32, Hkv 4 (ratio 8), d 128, 1 token, graph bound 32768.
    Case c = paged_case(128, 128, 32, 4, 16, {1, 1, 1}, {8192, 300, 5}, seed++);
    set_vllm_decode(&c);
    use_dense_q_with_max_seqlen_k(&c, 32768);
    add("bench_qwen32b_32x4_d128_ctx8192_splits_auto", c);
  }

  // ---- empty requests (graph padding slots), fully masked rows ----
  {  // seqused_k = 0: out 0, LSE -inf; with every split of three empty for the short requests.
    Case c = paged_case(128, 128, 8, 2, 16, {1, 1, 1, 1}, {0, 17, 0, 300}, seed++);
    c.causal = true;
    c.num_splits = 3;
    add("empty_requests_page16_splits3", c);
  }
  {  // The same with a sink: out 0, LSE = the sink logit; heuristic splits.
    Case c = paged_case(64, 64, 8, 1, 64, {1, 1, 1}, {300, 0, 0}, seed++);
    c.causal = true;
    c.sink = SinkType::kF32;
    c.out_dtype = FP8ATTN_DTYPE_F16;
    add("empty_requests_sink_page64_splits_auto", c);
  }
  {  // Every request empty: nothing to attend to anywhere.
    Case c = paged_case(256, 256, 4, 4, 256, {1, 2}, {0, 0}, seed++);
    c.causal = true;
    c.num_splits = 3;
    add("all_requests_empty_page256_splits3", c);
  }
  {  // More q tokens than keys (causal, bottom-right): the first rows of each request see no key.
    Case c = paged_case(96, 96, 8, 2, 32, {8, 5}, {3, 1}, seed++);
    c.causal = true;
    c.num_splits = 3;
    c.sink = SinkType::kBF16;
    add("q_tokens_beyond_keys_page32_splits3", c);
  }
  {  // A window of one key: each row sees only its diagonal key.
    Case c = paged_case(192, 128, 8, 2, 16, {4, 1}, {1000, 33}, seed++);
    c.causal = true;
    c.window_left = 0;
    c.window_right = 0;
    c.num_splits = 3;
    add("diagonal_window_page16_splits3", c);
  }

  // ---- splits and pages at the edges ----
  {  // Far more splits than KV blocks: most splits are empty and the combine must ignore them.
    Case c = paged_case(128, 128, 8, 2, 16, {1, 3, 1}, {17, 129, 1}, seed++);
    c.causal = true;
    c.num_splits = 64;
    c.descale_q = c.descale_k = c.descale_v = DescaleForm::kPerBatchHead;
    add("splits64_short_requests_page16", c);
  }
  {  // Splits 7 over a long context: split edges fall inside pages and tiles.
    Case c = paged_case(64, 64, 8, 1, 32, {1, 2}, {5003, 777}, seed++);
    c.causal = true;
    c.num_splits = 7;
    c.sink = SinkType::kF32;
    add("splits7_long_page32", c);
  }
  {  // Lengths at exact page multiples (the last page full) for 16-token pages and 256-token pages.
    Case c = paged_case(128, 128, 4, 4, 16, {1, 1, 2, 1}, {16, 32, 256, 512}, seed++);
    c.causal = true;
    add("exact_page_multiples_page16", c);
    c = paged_case(128, 128, 4, 1, 256, {1, 1, 2, 1}, {256, 512, 768, 255}, seed++);
    c.causal = true;
    c.num_splits = 3;
    add("exact_page_multiples_page256_splits3", c);
  }
  {  // Pages of 48 and 80 tokens (multiples of 16 that divide no tile width): 16-row TMA boxes.
    Case c = paged_case(128, 128, 8, 2, 48, {1, 4, 37}, {1000, 97, 300}, seed++);
    c.causal = true;
    c.window_left = 63;
    c.window_right = 0;
    add("page48_mixed", c);
    c = paged_case(256, 256, 4, 1, 80, {1, 2}, {1000, 161}, seed++);
    c.causal = true;
    c.num_splits = 3;
    add("page80_decode_splits3", c);
  }
  {  // One page in the whole cache besides the spares, and many spare NaN pages.
    Case c = paged_case(64, 64, 4, 4, 128, {1}, {100}, seed++);
    c.spare_pages = 40;
    add("single_page_many_spares_page128", c);
  }
  {  // Large GQA ratio (16): 4 tokens x 16 heads = 64 packed rows per KV head, then 5 tokens (80 rows).
    Case c = paged_case(128, 128, 16, 1, 16, {4, 4}, {1025, 300}, seed++);
    c.causal = true;
    add("gqa16_q4_packed64_page16", c);
    c = paged_case(128, 128, 16, 1, 16, {5, 5}, {1025, 300}, seed++);
    c.causal = true;
    c.num_splits = 3;
    add("gqa16_q5_packed80_page16_splits3", c);
  }
  {  // Mixed batch with a long prefill chunk and the strided layout (interleaved cache, sliced table).
    Case c = paged_case(192, 192, 8, 2, 64, {1, 300, 2, 1}, {4097, 1000, 3, 256}, seed++);
    c.causal = true;
    c.strided = true;
    c.spare_q_rows = 7;
    c.sink = SinkType::kBF16;
    c.descale_q = DescaleForm::kScalar;
    c.descale_k = DescaleForm::kBroadcastBatch;
    c.descale_v = DescaleForm::kPerBatchHead;
    add("mixed_prefill300_strided_page64", c);
  }
  {  // Non-causal sliding window with a right side (not vLLM's, but the API allows it) over pages.
    Case c = paged_case(128, 128, 8, 2, 32, {3, 8}, {500, 40}, seed++);
    c.window_left = 100;
    c.window_right = 2;
    c.num_splits = 3;
    add("window_left100_right2_page32_splits3", c);
  }

  // ---- vLLM 0.34's cache: K and V the two halves of each cache row (V = K + d bytes) ----
  // [num_blocks, Hkv, page, 2d] viewed .transpose(1, 2).split(d) (HND), the NHD order, and layer-interleaved
  // buffers (page stride = layers pages, the other layers NaN); every head-dim pair meets every form, over decode,
  // speculative decode and a mixed step (decoding requests first, then a prefill chunk), with vLLM's descales
  // (.expand((B, Hkv)) of a per-tensor and a per-kv-head scale) and num_splits 0, 32 (its CUDA-graph value), 1, 3.
  {
    struct RowsSpec {
      const char* name;
      KvRows rows;
      int layers;
    };
    constexpr RowsSpec kRows[] = {{"halves_hnd", KvRows::kRowHalvesHnd, 1},
                                  {"halves_nhd", KvRows::kRowHalvesNhd, 1},
                                  {"halves_hnd_layers3", KvRows::kRowHalvesHnd, 3},
                                  {"halves_nhd_layers2", KvRows::kRowHalvesNhd, 2}};
    constexpr int kRowsPages[] = {16, 64, 32, 256};
    constexpr int kRowsSplits[] = {0, 32, 1, 3};
    int i = 0;
    for (int hd_i = 0; hd_i < kNumHeadDims; ++hd_i) {
      for (const RowsSpec& rows : kRows) {
        const HeadDims& hd = kHeadDims[hd_i];
        const BatchKind kind = kBatchKinds[i % 3];
        const HeadsSpec& heads = kHeads[(i + i / 3) % 4];
        std::vector<int> q_tokens, keys;
        switch (kind) {
          case BatchKind::kDecode:
            q_tokens = {1, 1, 1, 1};
            keys = {1, 17, 1000, 256};
            break;
          case BatchKind::kSpecDecode:
            q_tokens = {4, 4, 4};
            keys = {4, 515, 33};
            break;
          case BatchKind::kMixed:
            q_tokens = {1, 2, 1, 300};
            keys = {700, 2, 16, i % 2 ? 300 : 1100};
            break;
        }
        Case c = paged_case(hd.d, hd.dv, heads.q, heads.kv, kRowsPages[(i + 2 * hd_i) % 4], q_tokens, keys, seed++);
        set_vllm_decode(&c);
        c.kv_rows = rows.rows;
        c.kv_layers = rows.layers;
        c.num_splits = kRowsSplits[(i + hd_i) % 4];  // every form meets every split count over the head dims
        c.splits_exact = c.num_splits != 32;  // 32: vLLM's, a ceiling as the public API reads it
        c.descale_q = DescaleForm::kBroadcastAll;
        c.descale_k = i % 2 ? DescaleForm::kBroadcastBatch : DescaleForm::kBroadcastAll;
        c.descale_v = i % 2 ? DescaleForm::kBroadcastAll : DescaleForm::kBroadcastBatch;
        if (i % 5 == 2) {  // vLLM's sliding-window layers: (w - 1, 0)
          c.window_left = 255;
          c.window_right = 0;
        }
        c.sink = i % 6 == 1 ? SinkType::kBF16 : SinkType::kNone;
        c.spare_q_rows = i % 3 == 2 ? 3 : 0;
        add(std::string("vllm034_") + rows.name + "_" + head_dims_label(hd) + "_" + batch_kind_label(kind) + "_" +
                heads.name + "_page" + std::to_string(c.page_size) + "_" + splits_label(c.num_splits) +
                (c.window_left >= 0 ? "_w256" : "") + sink_label(c.sink),
            c);
        ++i;
      }
    }
  }
  return cases;
}

// 16-bit q (issue 35) in the serving calls, at every head-dim pair, fp16 and bf16: a decode step with PackGQA
// (32:4 heads, 8 q heads per kv head in one tile), exactly 4 KV splits, softcap 50 and an f32 sink; and a
// speculative-decode step (4 tokens: 32 packed rows per kv head) with vLLM's sliding window (127, 0), the
// heuristic's splits and an E4M3 out (through the split combine where the heuristic splits). vLLM's expand()ed
// k/v descales; no q_descale (a 16-bit q takes none).
std::vector<NamedCase> sixteen_bit_q_cases() {
  std::vector<NamedCase> cases;
  uint64_t seed = 40000;
  for (const HeadDims& hd : kHeadDims) {
    for (fp8attn_dtype q_dtype : {FP8ATTN_DTYPE_BF16, FP8ATTN_DTYPE_F16}) {
      const std::string label = head_dims_label(hd) + "_" + dtype_label(q_dtype) + "_q";
      {
        Case c = paged_case(hd.d, hd.dv, 32, 4, 16, {1, 1, 1}, {17, 1025, 300}, seed++);
        set_vllm_decode(&c);
        c.q_dtype = q_dtype;
        c.descale_q = DescaleForm::kNone;
        c.num_splits = 4;
        c.softcap = 50.0f;
        c.sink = SinkType::kF32;
        c.out_dtype = q_dtype;
        cases.push_back({label + "_paged16_decode_gqa32x4_splits4_softcap50_sink", c});
      }
      {
        Case c = paged_case(hd.d, hd.dv, 32, 4, 64, {4, 4}, {2049, 4}, seed++);
        set_vllm_decode(&c);
        c.q_dtype = q_dtype;
        c.descale_q = DescaleForm::kNone;
        c.descale_k = DescaleForm::kBroadcastBatch;
        c.window_left = 127;
        c.window_right = 0;
        c.out_dtype = FP8ATTN_DTYPE_E4M3;
        cases.push_back({label + "_paged64_specdec_gqa32x4_w128_splits_auto_e4m3", c});
      }
    }
  }
  return cases;
}

// K = V (v is k: same address and strides), as Gemma-4's global layers pass it: d512 with 64-token pages, 8 q heads on
// 1 kv head and 32 on 4 (TP4 and TP1 ranks), a 16-bit q as vLLM passes it, and an E4M3 one; decode with splits,
// speculative decode, a prefill chunk, a sliding window, sinks, and a batch mixing a chunk with decodes. The split-dv
// kernel then loads each KV tile once and reads V from the K stage (producer_load.cuh). One d256 case: the other
// kernels read K and V separately from the one tensor.
std::vector<NamedCase> shared_kv_cases() {
  std::vector<NamedCase> cases;
  uint64_t seed = 50000;
  for (fp8attn_dtype q_dtype : {FP8ATTN_DTYPE_BF16, FP8ATTN_DTYPE_E4M3}) {
    const std::string label = std::string("d512_kv_shared_") + dtype_label(q_dtype) + "_q";
    auto gemma_global = [&](int heads_q, int heads_kv, std::vector<int> q_tokens, std::vector<int> keys) {
      Case c = paged_case(512, 512, heads_q, heads_kv, 64, std::move(q_tokens), std::move(keys), seed++);
      set_vllm_decode(&c);
      c.kv_shared = true;
      c.q_dtype = q_dtype;
      if (q_dtype != FP8ATTN_DTYPE_E4M3) {
        c.descale_q = DescaleForm::kNone;
        c.out_dtype = q_dtype;
      }
      return c;
    };
    {
      Case c = gemma_global(8, 1, {1, 1, 1}, {4097, 1, 700});
      c.num_splits = 32;
      c.splits_exact = false;  // vLLM's ceiling
      cases.push_back({label + "_decode_gqa8x1_splits32_ceiling", c});
    }
    {
      Case c = gemma_global(32, 4, {1, 1}, {2048, 65});
      c.num_splits = 5;
      c.sink = SinkType::kBF16;
      cases.push_back({label + "_decode_gqa32x4_splits5_sink", c});
    }
    {
      Case c = gemma_global(8, 1, {4, 4}, {515, 64});
      cases.push_back({label + "_specdec4_gqa8x1", c});
    }
    {
      Case c = gemma_global(8, 1, {300}, {1000});
      c.window_left = 255;
      c.window_right = 0;
      cases.push_back({label + "_chunk300_of_1000_w256", c});
    }
    {
      Case c = gemma_global(8, 1, {1, 257, 1, 1}, {900, 257, 33, 2000});
      c.varlen_q = true;
      c.zero_q_rows = q_dtype == FP8ATTN_DTYPE_E4M3 ? 0 : 1;
      cases.push_back({label + "_mixed_chunk257_beside_decodes", c});
    }
  }
  {
    Case c = paged_case(256, 256, 16, 2, 16, {1, 3}, {1100, 40}, seed++);
    set_vllm_decode(&c);
    c.kv_shared = true;
    cases.push_back({"d256_kv_shared_e4m3_q_decode_gqa16x2", c});
  }
  return cases;
}

// d512 decode at every row count a tile can have around the 8 rows per tile of the swapped-operand experiments
// (4978c12, 07fc6f7; not on main): 1, 4 and 8 q heads per KV head, one token; 16 rows: 8 heads x 2 tokens, and 16
// heads. Over ranges of 1 to 4 KV blocks of 64 keys (one block, a full and a one-key second block, three, four), each
// split exactly 1 and 3 ways so that splits end with 0, 1 or 2 blocks, with K and V as separate tensors (V through its
// load buffer) and as one tensor (K = V), an E4M3 and a bf16 q, 64- and 16-token pages.
std::vector<NamedCase> d512_decode_cases() {
  std::vector<NamedCase> cases;
  uint64_t seed = 60000;
  struct Rows {
    const char* name;
    int heads_q, heads_kv, tokens;
  };
  constexpr Rows kRowsPerTile[] = {{"rows1", 2, 2, 1}, {"rows4", 8, 2, 1}, {"rows8", 8, 1, 1},
                                   {"rows16_specdec2", 8, 1, 2}, {"rows16", 16, 1, 1}};
  int i = 0;
  for (const Rows& rows : kRowsPerTile) {
    for (int splits : {1, 3}) {
      for (bool kv_shared : {false, true}) {
        const int page = (i / 2) % 2 ? 16 : 64;
        const bool bf16_q = (i + i / 2) % 2 == 1;
        Case c = paged_case(512, 512, rows.heads_q, rows.heads_kv, page, std::vector<int>(5, rows.tokens),
                            {64, 65, 1, 192 + i % 3, 256}, seed++);
        set_vllm_decode(&c);
        c.kv_shared = kv_shared;
        c.num_splits = splits;
        if (bf16_q) {
          c.q_dtype = FP8ATTN_DTYPE_BF16;
          c.descale_q = DescaleForm::kNone;
          c.out_dtype = FP8ATTN_DTYPE_BF16;
        }
        cases.push_back({std::string("d512_decode_") + rows.name + "_splits" + std::to_string(splits) +
                             (kv_shared ? "_kv_shared" : "_kv_separate") + "_page" + std::to_string(page) +
                             (bf16_q ? "_bf16_q" : "_e4m3_q"),
                         c});
        ++i;
      }
    }
  }
  return cases;
}

class KvCacheMatrix : public NamedCaseTest {};
class KvCacheEdgeCases : public NamedCaseTest {};
class KvCacheSixteenBitQ : public NamedCaseTest {};
class KvCacheSharedKv : public NamedCaseTest {};
class KvCacheD512Decode : public NamedCaseTest {};

TEST_P(KvCacheMatrix, MatchesReference) { Check(); }
TEST_P(KvCacheEdgeCases, MatchesReference) { Check(); }
TEST_P(KvCacheSixteenBitQ, MatchesReference) { Check(); }
TEST_P(KvCacheSharedKv, MatchesReference) { Check(); }
TEST_P(KvCacheD512Decode, MatchesReference) { Check(); }

INSTANTIATE_TEST_SUITE_P(KvCache, KvCacheMatrix, ::testing::ValuesIn(matrix_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(KvCache, KvCacheEdgeCases, ::testing::ValuesIn(edge_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(KvCache, KvCacheSixteenBitQ, ::testing::ValuesIn(sixteen_bit_q_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(KvCache, KvCacheSharedKv, ::testing::ValuesIn(shared_kv_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(KvCache, KvCacheD512Decode, ::testing::ValuesIn(d512_decode_cases()), case_name);

}  // namespace
}  // namespace fp8attn_test
