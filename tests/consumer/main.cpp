// fp8attn from C++ (the README's example): one causal prefill call, 2 sequences of 1024 tokens, 32 query
// heads over 8 KV heads, head dim 128, FP8 E4M3 in, bf16 out. tests/consumer builds it against the
// installed package (find_package(fp8attn)) and runs it; without an SM90 GPU the call reports why it cannot
// run, and the validation part (a described H100, no GPU needed) still runs.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fp8attn/fp8attn.h"

int main() {
  std::printf("fp8attn %s (C ABI %d)\ncompiled kernels:\n%s", fp8attn_version(), fp8attn_abi_version(),
              fp8attn_compiled_kernels());
  if (fp8attn_abi_version() != FP8ATTN_ABI_VERSION) {
    std::fprintf(stderr, "the headers declare C ABI %d, the library implements %d\n", FP8ATTN_ABI_VERSION,
                 fp8attn_abi_version());
    return 1;
  }

  const int batch = 2, seqlen = 1024, heads_q = 32, heads_kv = 8, d = 128;
  fp8attn::FwdParams p;
  fp8attn_fwd_params_init(&p);
  p.batch = batch;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.num_heads_q = heads_q;
  p.num_heads_kv = heads_kv;
  p.head_dim = p.head_dim_v = d;
  p.q_dtype = p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E4M3;
  p.out_dtype = FP8ATTN_DTYPE_BF16;
  // Contiguous [batch, seqlen, heads, d] tensors; strides in elements.
  p.q_head_stride = p.o_head_stride = p.k_head_stride = p.v_head_stride = d;
  p.q_row_stride = p.o_row_stride = int64_t{heads_q} * d;
  p.k_row_stride = p.v_row_stride = int64_t{heads_kv} * d;
  p.q_batch_stride = p.o_batch_stride = seqlen * p.q_row_stride;
  p.k_batch_stride = p.v_batch_stride = seqlen * p.k_row_stride;
  p.softmax_scale = 1.0f / std::sqrt(float(d));
  p.causal = 1;

  // The device buffers on an SM90 GPU (uninitialized here: the example shows the call, not the numbers).
  int cc_major = 0;
  const bool have_sm90 =
      cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess && cc_major == 9;
  const size_t q_bytes = size_t(p.q_batch_stride) * batch, kv_bytes = size_t(p.k_batch_stride) * batch;
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
  if (have_sm90 && (cudaMalloc(&q, q_bytes) != cudaSuccess || cudaMalloc(&k, kv_bytes) != cudaSuccess ||
                    cudaMalloc(&v, kv_bytes) != cudaSuccess || cudaMalloc(&out, 2 * q_bytes) != cudaSuccess)) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  size_t workspace_bytes = 0;  // split-KV scratch; 0 when the call is not split
  char error[512];
  if (have_sm90 && fp8attn_fwd_workspace_size(&p, &workspace_bytes, error, sizeof error) == FP8ATTN_OK &&
      workspace_bytes > 0 && cudaMalloc(&p.workspace, workspace_bytes) == cudaSuccess) {
    p.workspace_bytes = workspace_bytes;
  }
  const fp8attn::Status run = fp8attn::fwd(p, /*stream=*/nullptr);
  std::printf("fp8attn::fwd: %s\n", run.ok() ? "launched" : run.message().c_str());
  if (run.ok() != have_sm90) {  // without an SM90 GPU the call must fail, with a message saying why
    std::fprintf(stderr, "unexpected result of fp8attn::fwd (SM90 GPU present: %d)\n", int(have_sm90));
    return 1;
  }
  if (have_sm90 && cudaDeviceSynchronize() != cudaSuccess) return 1;

  // Every argument is checked before a launch, and a bad one is named: here against a described H100.
  fp8attn::DeviceInfo h100;
  h100.cc_major = 9;
  h100.num_sms = 132;
  p.head_dim = p.head_dim_v = 80;
  const fp8attn::Status bad = fp8attn::validate_fwd(p, h100);
  std::printf("head_dim 80: %s\n", bad.message().c_str());
  if (bad.code() != fp8attn::StatusCode::kNotSupported || bad.message().find("head_dim") == std::string::npos) {
    std::fprintf(stderr, "expected a not-supported error naming head_dim\n");
    return 1;
  }
  for (void* buffer : {q, k, v, out, p.workspace}) cudaFree(buffer);
  std::printf("fp8attn consumer: ok\n");
  return 0;
}
