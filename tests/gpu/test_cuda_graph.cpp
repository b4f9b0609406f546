// fp8attn GPU tests: CUDA-graph safety of the paged decode path (docs/design.md §4 launch choices; vLLM's call).
//
// vLLM captures one attention call per batch size, with max_seqlen_k = max_model_len, and replays it every
// decode step after rewriting its inputs in place: seqused_k, the block table, cu_seqlens_q, q and new
// K/V pages. fp8attn promises that every launch choice (tiles, PackGQA, split count, grid) depends only on
// host-known values, so a graph captured once stays correct whatever those device buffers hold later.
//
// What one test does, for one decode shape (batch 4, 16-token pages, max_seqlen_k = 8192):
//   1. Allocates vLLM's buffers once, in vLLM's exact layout: one cache [2, num_pages, page, Hkv, d] with
//      K = cache[0] and V = cache[1]; a block table that is a column-sliced view of a wider table (row
//      stride 520 > 512 columns); varlen q with cu_seqlens_q and padding rows; descales as (B, Hkv)
//      views with strides (0, 0) / (0, 1); a sink; out in the model dtype; the LSE; the split workspace.
//   2. Checks one eager call on those buffers, then captures two graphs of ONE fp8attn::fwd call each on a
//      non-blocking stream (global capture mode, so a synchronizing or allocating call inside fwd fails
//      the capture): num_splits = 0 (the heuristic, fixed at capture from max_seqlen_k) and num_splits = 3.
//   3. For each of three decode steps (other lengths, 0 to 8192 keys, a reshuffled block table, new q/K/V,
//      new descale and sink values, other q tokens per request), rewrites every input buffer with
//      cudaMemcpyAsync on that stream, outside the graphs, poisons out/lse/workspace, replays each graph and
//      judges the output against the CPU references of THAT step (docs/accuracy.md, through the harness).
// Each step's inputs come from a harness Problem (seeded values, shuffled pages, NaN spare pages and rows,
// invalid block-table ids past each request's pages); its device buffers are the source of the rewrites,
// and its out/lse buffers receive the graph's results so that Problem::check judges them, stray writes
// included.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <numeric>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"

namespace fp8attn_test {
namespace {

// ---- the capture's host-known sizes (vLLM: batch size of the graph, max_model_len, block size) ----------
constexpr int kBatch = 4;
constexpr int kMaxSeqlenK = 8192;
constexpr int kPageSize = 16;
constexpr int kMaxPagesPerSeq = kMaxSeqlenK / kPageSize;  // 512 block-table columns in the view
constexpr int kBlockTableRowStride = kMaxPagesPerSeq + 8;  // the view is sliced out of a wider table
constexpr int kNumPages = 600;                             // cache pages; each step uses at most 534

struct GraphShape {
  const char* name;
  int heads_q, heads_kv, head_dim;
  int max_q_tokens;  // max_seqlen_q of the capture; total_q = kBatch * max_q_tokens
  int window_left;   // causal always, with window (window_left, 0) when >= 0
  SinkType sink;
  fp8attn_dtype out_dtype;
  DescaleForm descale_q, descale_k, descale_v;
  uint64_t seed;  // of the first step; the others follow
};

void PrintTo(const GraphShape& shape, std::ostream* os) { *os << shape.name; }

// The decode shapes of bench/decode_shapes.json the library's config treats differently: d128 GQA 4 with one
// token (two 64-row CTAs per SM) and d256 with 4 speculative tokens and a 1024-token window.
const GraphShape kShapes[] = {
    {"llama8b_d128_32x8_q1", 32, 8, 128, 1, -1, SinkType::kNone, FP8ATTN_DTYPE_BF16, DescaleForm::kBroadcastAll,
     DescaleForm::kBroadcastAll, DescaleForm::kBroadcastBatch, 40000},
    {"gemma31b_d256_8x4_q4_w1024", 8, 4, 256, 4, 1023, SinkType::kF32, FP8ATTN_DTYPE_F16,
     DescaleForm::kBroadcastBatch, DescaleForm::kBroadcastAll, DescaleForm::kBroadcastBatch, 40100},
};

// One decode step's batch: q tokens (capped at the shape's max_q_tokens) and keys (seqused_k) per request.
struct Step {
  std::vector<int> q_tokens;
  std::vector<int> keys;
};

// Step 0 reaches max_seqlen_k; step 1 has an empty request (a padding slot: out 0, LSE -inf) and a page-exact
// length; step 2 moves the long request elsewhere.
const Step kSteps[] = {
    {{4, 4, 4, 4}, {kMaxSeqlenK, 1, 300, 17}},
    {{1, 4, 2, 3}, {4097, 0, 1000, 16}},
    {{4, 1, 1, 4}, {255, 3001, 33, 1500}},
};

int total_q(const GraphShape& shape) { return kBatch * shape.max_q_tokens; }

Case step_case(const GraphShape& shape, const Step& step, uint64_t seed) {
  Case c;
  c.batch = kBatch;
  c.heads_q = shape.heads_q;
  c.heads_kv = shape.heads_kv;
  c.head_dim = c.head_dim_v = shape.head_dim;
  c.varlen_q = true;
  c.kv = KvLayout::kPaged;
  c.seqused_k = true;
  c.page_size = kPageSize;
  c.causal = true;
  c.window_left = shape.window_left;
  c.window_right = shape.window_left >= 0 ? 0 : -1;
  c.descale_q = shape.descale_q;
  c.descale_k = shape.descale_k;
  c.descale_v = shape.descale_v;
  c.sink = shape.sink;
  c.out_dtype = shape.out_dtype;
  c.seed = seed;
  for (int b = 0; b < kBatch; ++b) {
    c.seqlens_q.push_back(std::min(step.q_tokens[b], shape.max_q_tokens));
    c.seqlens_k.push_back(step.keys[b]);
  }
  // Sized so that the Problem's buffers have exactly the graph's shapes: total_q rows, kNumPages pages (the
  // step's pages shuffled over all of them), a block table of kMaxPagesPerSeq columns.
  int used_pages = 0;
  for (int keys : c.seqlens_k) used_pages += (keys + kPageSize - 1) / kPageSize;
  c.spare_pages = kNumPages - used_pages;
  c.spare_q_rows = total_q(shape) - std::accumulate(c.seqlens_q.begin(), c.seqlens_q.end(), 0);
  c.extra_max_seqlen = kMaxSeqlenK - *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end());
  return c;
}

size_t descale_bytes(DescaleForm form, int heads_kv) {
  switch (form) {
    case DescaleForm::kNone:
      return 0;
    case DescaleForm::kScalar:
    case DescaleForm::kBroadcastAll:
      return sizeof(float);
    case DescaleForm::kPerBatchHead:
      return sizeof(float) * kBatch * heads_kv;
    case DescaleForm::kBroadcastBatch:
      return sizeof(float) * heads_kv;
  }
  return 0;
}

// A device allocation freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return ptr_; }
  uint8_t* bytes_ptr() const { return static_cast<uint8_t*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// vLLM's persistent buffers for one captured shape, allocated before any capture.
struct GraphBuffers {
  size_t q_bytes = 0, kv_bytes = 0, out_bytes = 0, lse_bytes = 0, sink_bytes = 0;
  DeviceBuffer q, cache, block_table, seqused_k, cu_seqlens_q, q_descale, k_descale, v_descale, sink, out, lse;

  explicit GraphBuffers(const GraphShape& s) {
    const size_t rows = total_q(s);
    q_bytes = rows * s.heads_q * s.head_dim;
    kv_bytes = size_t{kNumPages} * kPageSize * s.heads_kv * s.head_dim;  // one of K, V
    out_bytes = rows * s.heads_q * s.head_dim * 2;
    lse_bytes = rows * s.heads_q * sizeof(float);
    sink_bytes = s.sink == SinkType::kNone ? 0 : s.heads_q * (s.sink == SinkType::kF32 ? 4 : 2);
    q = DeviceBuffer(q_bytes);
    cache = DeviceBuffer(2 * kv_bytes);  // [2, num_pages, page, Hkv, d]
    block_table = DeviceBuffer(sizeof(int32_t) * kBatch * kBlockTableRowStride);
    seqused_k = DeviceBuffer(sizeof(int32_t) * kBatch);
    cu_seqlens_q = DeviceBuffer(sizeof(int32_t) * (kBatch + 1));
    q_descale = DeviceBuffer(descale_bytes(s.descale_q, s.heads_kv));
    k_descale = DeviceBuffer(descale_bytes(s.descale_k, s.heads_kv));
    v_descale = DeviceBuffer(descale_bytes(s.descale_v, s.heads_kv));
    sink = DeviceBuffer(sink_bytes);
    out = DeviceBuffer(out_bytes);
    lse = DeviceBuffer(lse_bytes);
    // The columns past the view are never part of the call: invalid page ids, never rewritten.
    const std::vector<int32_t> invalid(size_t{kBatch} * kBlockTableRowStride, kInvalidPage);
    check_cuda(cudaMemcpy(block_table.get(), invalid.data(), block_table.bytes(), cudaMemcpyHostToDevice),
               "cudaMemcpy block table");
  }
};

// The call vLLM would make on the graph buffers: the strides and dtypes of a step's Problem (the same layout),
// the pointers of the graph buffers, and the capture's host-known bounds.
fp8attn_fwd_params graph_params(const fp8attn_fwd_params& step, const GraphShape& shape, const GraphBuffers& g,
                                int num_splits) {
  fp8attn_fwd_params p = step;
  p.q = g.q.get();
  p.k = g.cache.get();
  p.v = g.cache.bytes_ptr() + g.kv_bytes;
  p.out = g.out.get();
  p.lse = static_cast<float*>(g.lse.get());
  p.cu_seqlens_q = static_cast<const int32_t*>(g.cu_seqlens_q.get());
  p.seqused_k = static_cast<const int32_t*>(g.seqused_k.get());
  p.block_table = static_cast<const int32_t*>(g.block_table.get());
  p.block_table_batch_stride = kBlockTableRowStride;
  p.max_pages_per_seq = kMaxPagesPerSeq;
  p.num_pages = kNumPages;
  p.seqlen_q = shape.max_q_tokens;
  p.seqlen_k = kMaxSeqlenK;
  p.total_q = total_q(shape);
  p.q_descale.ptr = static_cast<const float*>(g.q_descale.get());
  p.k_descale.ptr = static_cast<const float*>(g.k_descale.get());
  p.v_descale.ptr = static_cast<const float*>(g.v_descale.get());
  p.sink = g.sink.get();
  p.num_splits = num_splits;
  p.workspace = nullptr;
  p.workspace_bytes = 0;
  return p;
}

// The step's Problem must be laid out as the graph buffers are (the copies below are plain byte copies).
void expect_graph_layout(const fp8attn_fwd_params& p, const GraphShape& s, const GraphBuffers& g) {
  const int64_t d = s.head_dim;
  EXPECT_EQ(p.num_pages, kNumPages);
  EXPECT_EQ(p.max_pages_per_seq, kMaxPagesPerSeq);
  EXPECT_EQ(p.block_table_batch_stride, kMaxPagesPerSeq);
  EXPECT_EQ(p.total_q, total_q(s));
  EXPECT_EQ(p.q_row_stride, s.heads_q * d);
  EXPECT_EQ(p.q_head_stride, d);
  EXPECT_EQ(p.o_row_stride, s.heads_q * d);
  EXPECT_EQ(p.o_head_stride, d);
  EXPECT_EQ(p.lse_head_stride, total_q(s));
  EXPECT_EQ(p.k_batch_stride, kPageSize * s.heads_kv * d);
  EXPECT_EQ(p.k_row_stride, s.heads_kv * d);
  EXPECT_EQ(p.k_head_stride, d);
  EXPECT_EQ(p.v_batch_stride, p.k_batch_stride);
  EXPECT_EQ(p.v_row_stride, p.k_row_stride);
  EXPECT_EQ(p.v_head_stride, p.k_head_stride);
  EXPECT_EQ(static_cast<const uint8_t*>(p.v) - static_cast<const uint8_t*>(p.k), static_cast<int64_t>(g.kv_bytes))
      << "the harness no longer puts V right after K";
}

// Rewrites every input of the graph buffers from a step's Problem, on `stream` (vLLM's per-step updates).
void upload_step(const fp8attn_fwd_params& src, const GraphShape& s, const GraphBuffers& g, cudaStream_t stream) {
  auto copy = [&](const DeviceBuffer& dst, const void* from, size_t bytes, const char* what) {
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(dst.get(), from, bytes, cudaMemcpyDeviceToDevice, stream), what);
  };
  copy(g.q, src.q, g.q_bytes, "rewrite q");
  copy(g.cache, src.k, 2 * g.kv_bytes, "rewrite K/V cache");
  copy(g.seqused_k, src.seqused_k, sizeof(int32_t) * kBatch, "rewrite seqused_k");
  copy(g.cu_seqlens_q, src.cu_seqlens_q, sizeof(int32_t) * (kBatch + 1), "rewrite cu_seqlens_q");
  copy(g.q_descale, src.q_descale.ptr, descale_bytes(s.descale_q, s.heads_kv), "rewrite q_descale");
  copy(g.k_descale, src.k_descale.ptr, descale_bytes(s.descale_k, s.heads_kv), "rewrite k_descale");
  copy(g.v_descale, src.v_descale.ptr, descale_bytes(s.descale_v, s.heads_kv), "rewrite v_descale");
  copy(g.sink, src.sink, g.sink_bytes, "rewrite sink");
  // The step's table is [batch, 512]; the graph's view is the first 512 columns of [batch, 520].
  check_cuda(cudaMemcpy2DAsync(g.block_table.get(), sizeof(int32_t) * kBlockTableRowStride, src.block_table,
                               sizeof(int32_t) * src.block_table_batch_stride, sizeof(int32_t) * kMaxPagesPerSeq,
                               kBatch, cudaMemcpyDeviceToDevice, stream),
             "rewrite block table");
}

// out and lse NaN, the workspace 0xFF (stale partials must never be read), as the harness poisons.
void poison_outputs(const GraphBuffers& g, const DeviceBuffer& workspace, cudaStream_t stream) {
  check_cuda(cudaMemsetAsync(g.out.get(), 0xFF, g.out_bytes, stream), "poison out");
  check_cuda(cudaMemsetAsync(g.lse.get(), 0xFF, g.lse_bytes, stream), "poison lse");
  if (workspace.bytes() > 0)
    check_cuda(cudaMemsetAsync(workspace.get(), 0xFF, workspace.bytes(), stream), "poison workspace");
}

// Moves the graph's out/lse into the step Problem's buffers, downloads and judges them (docs/accuracy.md).
void expect_step_passes(Problem* problem, const GraphBuffers& g, cudaStream_t stream, const std::string& what) {
  const fp8attn_fwd_params& p = problem->params();
  check_cuda(cudaMemcpyAsync(p.out, g.out.get(), g.out_bytes, cudaMemcpyDeviceToDevice, stream), "copy out back");
  check_cuda(cudaMemcpyAsync(p.lse, g.lse.get(), g.lse_bytes, cudaMemcpyDeviceToDevice, stream), "copy lse back");
  const Metrics m = problem->check(problem->download(stream));
  std::printf("[  graph   ] %-34s max_err %.3g <= %.3g (%.0f%% of the bar)  rel_rms %.3f%%  lse %.0f%% of its bar\n",
              what.c_str(), m.max_abs_err, m.bound, m.bound > 0 ? 100 * m.max_abs_err / m.bound : 0.0,
              100 * m.rel_rms, 100 * m.lse_worst_fraction);
  EXPECT_TRUE(m.passed) << what << ":\n" << m.failure;
}

// A graph of one fp8attn::fwd call with its own workspace.
struct CapturedCall {
  std::string label;
  fp8attn_fwd_params params{};
  DeviceBuffer workspace;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~CapturedCall() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

// The split count the config chose, for messages, read back from the workspace size (fp32 O and LSE partials
// per split, config.h); "?" if the workspace is laid out otherwise.
std::string splits_from_workspace(size_t bytes, const GraphShape& s) {
  const size_t per_split = size_t{sizeof(float)} * total_q(s) * s.heads_q * (s.head_dim + 1);
  if (bytes == 0) return "1";
  return bytes % per_split == 0 ? std::to_string(bytes / per_split) : "?";
}

class CudaGraphDecode : public ::testing::TestWithParam<GraphShape> {};

TEST_P(CudaGraphDecode, ReplaysMatchReferenceAfterInputRewrites) {
  const GraphShape& shape = GetParam();
  Stream stream;
  GraphBuffers buffers(shape);

  // Step 0's inputs also give the call's strides and dtypes.
  uint64_t seed = shape.seed;
  auto problem = std::make_unique<Problem>(step_case(shape, kSteps[0], seed++));
  check_cuda(cudaDeviceSynchronize(), "Problem uploads");  // its H2D copies ran on the legacy stream
  expect_graph_layout(problem->params(), shape, buffers);
  if (HasFailure()) return;

  std::vector<std::unique_ptr<CapturedCall>> calls;
  for (int num_splits : {0, 3}) {
    auto call = std::make_unique<CapturedCall>();
    call->params = graph_params(problem->params(), shape, buffers, num_splits);
    size_t workspace_bytes = 0;
    const fp8attn::Status planned = fp8attn::fwd_workspace_size(call->params, &workspace_bytes);
    const std::string skip = dev_build_skip(planned, shape.head_dim, shape.head_dim);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(planned.ok()) << planned.message();
    call->workspace = DeviceBuffer(workspace_bytes);
    call->params.workspace = call->workspace.get();
    call->params.workspace_bytes = call->workspace.bytes();
    const std::string splits = splits_from_workspace(call->workspace.bytes(), shape);
    call->label = num_splits == 0 ? "splits=auto(" + splits + ")" : "splits=" + std::to_string(num_splits);
    calls.push_back(std::move(call));
  }

  // An eager call on the graph buffers first: vLLM's layout without a graph, and the kernel's first launch
  // (its one-time attribute setup) outside any capture.
  upload_step(problem->params(), shape, buffers, stream.get());
  poison_outputs(buffers, calls[0]->workspace, stream.get());
  const fp8attn::Status eager = fp8attn::fwd(calls[0]->params, stream.get());
  const std::string skip = dev_build_skip(eager, shape.head_dim, shape.head_dim);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(eager.ok()) << "eager fp8attn::fwd: " << eager.message();
  expect_step_passes(problem.get(), buffers, stream.get(), std::string("eager step 0 ") + calls[0]->label);

  for (auto& call : calls) {
    check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    const fp8attn::Status captured = fp8attn::fwd(call->params, stream.get());
    const cudaError_t end = cudaStreamEndCapture(stream.get(), &call->graph);  // always end the capture
    ASSERT_TRUE(captured.ok()) << "fp8attn::fwd under capture (" << call->label << "): " << captured.message();
    ASSERT_EQ(end, cudaSuccess) << "cudaStreamEndCapture (" << call->label << "): " << cudaGetErrorString(end)
                                << " (a synchronizing or allocating call inside fwd invalidates the capture)";
    size_t nodes = 0;
    check_cuda(cudaGraphGetNodes(call->graph, nullptr, &nodes), "cudaGraphGetNodes");
    ASSERT_GE(nodes, 1u) << "the captured graph of " << call->label << " holds no work";
    check_cuda(cudaGraphInstantiate(&call->exec, call->graph, 0), "cudaGraphInstantiate");
    std::printf("[  graph   ] %s: captured %zu node(s), workspace %zu bytes\n", call->label.c_str(), nodes,
                call->workspace.bytes());
  }

  for (size_t s = 0; s < std::size(kSteps); ++s) {
    if (s > 0) {
      problem.reset();  // frees the previous step's buffers first
      problem = std::make_unique<Problem>(step_case(shape, kSteps[s], seed++));
      check_cuda(cudaDeviceSynchronize(), "Problem uploads");
      expect_graph_layout(problem->params(), shape, buffers);
      if (HasFailure()) return;
    }
    upload_step(problem->params(), shape, buffers, stream.get());
    for (auto& call : calls) {
      poison_outputs(buffers, call->workspace, stream.get());
      check_cuda(cudaGraphLaunch(call->exec, stream.get()), "cudaGraphLaunch");
      expect_step_passes(problem.get(), buffers, stream.get(),
                         "replay step " + std::to_string(s) + " " + call->label);
    }
  }
}

std::string shape_name(const ::testing::TestParamInfo<GraphShape>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(CudaGraph, CudaGraphDecode, ::testing::ValuesIn(kShapes), shape_name);

}  // namespace
}  // namespace fp8attn_test
