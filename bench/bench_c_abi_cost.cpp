// fp8attn: host nanoseconds of one eager call through the C ABI, whole and in its two halves (issue 37's host
// time). bench/bench_host.py measured the C ABI through ctypes at ~11 us for a one-launch call, while the pieces
// it makes (bench_launch_cost.cu: the CUDA calls, a launch of the forward's parameter size) add up to ~4 us.
// Timed here from C++, with no Python or ctypes, on vLLM's decode call for Llama-3.1-8B at TP1 (1 request of
// one token, 32 q heads on 8 KV heads, d 128, a 16-token paged cache holding 4096 keys, seqused_k, max_seqlen_k
// 32768, descales expand()ed to (batch, kv_heads), bf16 out):
//   fp8attn_fwd_make_plan            validation, config, workspace size (no CUDA call but the device query)
//   fp8attn_fwd_run                  the run of a plan made once: the workspace check and the launch(es)
//   fp8attn_fwd                      both, as the torch op and ctypes call them
// each with num_splits 1 (one launch) and 0 (the heuristic's split plan: forward + combine). Same method as
// bench_launch_cost.cu (host_timing.h). Prints a table; with FP8ATTN_RESULTS_DIR set, writes c_abi_cost.json.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_check.h"
#include "fp8attn/c_api.h"
#include "host_timing.h"

namespace {

constexpr int kHeadsQ = 32, kHeadsKv = 8, kHeadDim = 128, kPageSize = 16, kKeys = 4096, kMaxSeqlenK = 32768;

void check(int code, const char* what, const char* err) {
  if (code != FP8ATTN_OK) {
    std::fprintf(stderr, "%s failed (%d): %s\n", what, code, err);
    std::exit(1);
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const int pages = kKeys / kPageSize, max_pages = kMaxSeqlenK / kPageSize;
  const size_t kv_bytes = size_t(pages) * kPageSize * kHeadsKv * kHeadDim;  // E4M3: one byte per element
  auto device_alloc = [](size_t bytes) {
    void* ptr = nullptr;
    CHECK_CUDA(cudaMalloc(&ptr, bytes));
    return ptr;
  };
  void* q = device_alloc(kHeadsQ * kHeadDim);
  void* k = device_alloc(kv_bytes);
  void* v = device_alloc(kv_bytes);
  void* out = device_alloc(kHeadsQ * kHeadDim * 2);
  auto* cu_seqlens_q = static_cast<int32_t*>(device_alloc(2 * sizeof(int32_t)));
  auto* seqused_k = static_cast<int32_t*>(device_alloc(sizeof(int32_t)));
  auto* block_table = static_cast<int32_t*>(device_alloc(max_pages * sizeof(int32_t)));
  auto* descale = static_cast<float*>(device_alloc(sizeof(float)));
  CHECK_CUDA(cudaMemset(q, 0x38, kHeadsQ * kHeadDim));  // E4M3 1.0
  CHECK_CUDA(cudaMemset(k, 0x38, kv_bytes));
  CHECK_CUDA(cudaMemset(v, 0x38, kv_bytes));
  const int32_t cu_host[2] = {0, 1}, used_host = kKeys;
  std::vector<int32_t> table_host(max_pages, 0);
  for (int i = 0; i < pages; ++i) table_host[i] = i;
  const float one = 1.f;
  CHECK_CUDA(cudaMemcpy(cu_seqlens_q, cu_host, sizeof(cu_host), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(seqused_k, &used_host, sizeof(used_host), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(block_table, table_host.data(), max_pages * sizeof(int32_t), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(descale, &one, sizeof(one), cudaMemcpyHostToDevice));

  fp8attn_fwd_params p;
  fp8attn_fwd_params_init(&p);
  p.q = q;
  p.q_dtype = FP8ATTN_DTYPE_E4M3;
  p.q_row_stride = kHeadsQ * kHeadDim;
  p.q_head_stride = kHeadDim;
  const int64_t kv_row = kHeadsKv * kHeadDim;
  for (auto [ptr, dtype, batch_stride, row_stride, head_stride, tensor] :
       {std::tuple{&p.k, &p.k_dtype, &p.k_batch_stride, &p.k_row_stride, &p.k_head_stride, k},
        std::tuple{&p.v, &p.v_dtype, &p.v_batch_stride, &p.v_row_stride, &p.v_head_stride, v}}) {
    *ptr = tensor;
    *dtype = FP8ATTN_DTYPE_E4M3;
    *batch_stride = kPageSize * kv_row;
    *row_stride = kv_row;
    *head_stride = kHeadDim;
  }
  p.out = out;
  p.out_dtype = FP8ATTN_DTYPE_BF16;
  p.o_row_stride = kHeadsQ * kHeadDim;
  p.o_head_stride = kHeadDim;
  p.batch = 1;
  p.seqlen_q = 1;
  p.seqlen_k = kMaxSeqlenK;
  p.total_q = 1;
  p.num_heads_q = kHeadsQ;
  p.num_heads_kv = kHeadsKv;
  p.head_dim = p.head_dim_v = kHeadDim;
  p.cu_seqlens_q = cu_seqlens_q;
  p.seqused_k = seqused_k;
  p.block_table = block_table;
  p.block_table_batch_stride = max_pages;
  p.max_pages_per_seq = max_pages;
  p.num_pages = pages;
  p.page_size = kPageSize;
  p.softmax_scale = 0.0883883f;
  p.causal = 1;
  p.k_descale = p.v_descale = fp8attn_descale{descale, 2, {1, kHeadsKv}, 0, 0, FP8ATTN_DTYPE_F32};
  p.q_descale = fp8attn_descale{descale, 0, {0, 0}, 0, 0, FP8ATTN_DTYPE_F32};
  p.q_shape = p.out_shape = fp8attn_shape{3, {1, kHeadsQ, kHeadDim, 0}};
  p.k_shape = p.v_shape = fp8attn_shape{4, {pages, kPageSize, kHeadsKv, kHeadDim}};
  p.cu_seqlens_q_len = 2;
  p.seqused_k_len = 1;
  p.block_table_rows = 1;

  char err[1024];
  std::vector<fp8attn::bench::Row> rows;
  for (int splits : {1, 0}) {
    fp8attn_fwd_params call = p;
    call.num_splits = splits;
    fp8attn_fwd_plan plan;
    check(fp8attn_fwd_make_plan(&call, &plan, err, sizeof(err)), "fp8attn_fwd_make_plan", err);
    void* workspace = nullptr;
    if (plan.workspace_bytes > 0) CHECK_CUDA(cudaMalloc(&workspace, plan.workspace_bytes));
    call.workspace = workspace;
    call.workspace_bytes = plan.workspace_bytes;
    check(fp8attn_fwd_run(&call, &plan, stream, err, sizeof(err)), "fp8attn_fwd_run", err);
    check(fp8attn_fwd(&call, stream, err, sizeof(err)), "fp8attn_fwd", err);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const std::string tag = " (" + std::to_string(plan.num_splits) + (plan.num_splits == 1 ? " split)" : " splits)");
    auto measure = [&](const char* entry, const std::function<void()>& call_once) {
      rows.push_back({entry + tag, fp8attn::bench::median_ns_per_call(call_once, stream)});
    };
    fp8attn_fwd_plan timed;
    measure("fp8attn_fwd_make_plan", [&] { (void)fp8attn_fwd_make_plan(&call, &timed, err, sizeof(err)); });
    measure("fp8attn_fwd_run", [&] { (void)fp8attn_fwd_run(&call, &plan, stream, err, sizeof(err)); });
    measure("fp8attn_fwd", [&] { (void)fp8attn_fwd(&call, stream, err, sizeof(err)); });
    // The timed calls are not checked: one more, checked, reports any error the library kept (its own runtime's).
    check(fp8attn_fwd(&call, stream, err, sizeof(err)), "fp8attn_fwd after the timing", err);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (workspace != nullptr) CHECK_CUDA(cudaFree(workspace));
  }
  for (void* ptr : {q, k, v, out, static_cast<void*>(cu_seqlens_q), static_cast<void*>(seqused_k),
                    static_cast<void*>(block_table), static_cast<void*>(descale)}) {
    CHECK_CUDA(cudaFree(ptr));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  fp8attn::bench::report(rows, "c_abi_cost.json",
                         "Host nanoseconds per eager call of the C ABI (bench/bench_c_abi_cost.cpp: vLLM's Llama-3.1-8B "
                         "TP1 decode call, 1 x 4k keys in 16-token pages, max_seqlen_k 32768; 20000 calls in batches "
                         "of 256, the stream synchronized between batches outside the timing, median of 5 runs).",
                         prop.name);
  return 0;
}
