// fp8attn: split-KV combine. Each split wrote its rows' O (normalised within the split, v_descale applied)
// and LSE; the combined row is O = sum_s exp(lse_s - lse) O_s with lse = log(sum_s exp(lse_s) + exp(sink)).
// The sink joins here, once, because each split would otherwise count it. Deterministic for a fixed split
// count (every reduction's order depends only on num_splits and dv).
//
// One CTA per (row, q head). The combine runs after the forward's last CTA, so its time adds to a decode step
// in full: it is built as a latency chain of two memory round trips. Each thread owns one float4 column group
// of some splits and issues all its partial-O loads at once, before the LSE reduction that they do not depend
// on; the weights then come from shared memory and the split groups are summed in a fixed order. The CTA has
// as many split groups as the splits need (launch_combine), so a 2-split plan over many rows runs one warp
// per row. (A warp per row that walked the splits a few loads at a time took ~0.25 us per split after the
// forward ended: 8 us of a 22 us decode step at 29 splits; docs/design.md, Measured choices.)
#include "sm90/combine.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include <cutlass/arch/grid_dependency_control.h>

#include "common/kernel_rules.h"
#include "sm90/output_store.cuh"

namespace fp8attn::sm90 {

namespace {

// Partial-O float4 loads each thread has in flight per pass (combine.h sizes the CTA): one pass covers
// 4 x 256 / (dv / 4) splits (32 at dv = 128, 16 at dv = 256), the decode plans' range.
constexpr int kMaxWarps = kCombineMaxThreads / 32;

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// The CTA-wide reduction of x, returned to every thread. scratch: one float per warp, free on entry and on
// return. blockDim.x is a multiple of 32.
template <class Op>
__device__ float block_reduce(float x, Op op, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) { x = op(x, __shfl_xor_sync(0xffffffff, x, offset)); }
  if (blockDim.x == 32) { return x; }
  if (threadIdx.x % 32 == 0) { scratch[threadIdx.x / 32] = x; }
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) { total = op(total, scratch[w]); }
  __syncthreads();
  return total;
}

__device__ float4 fma4(float w, float4 o, float4 acc) {
  return make_float4(fmaf(w, o.x, acc.x), fmaf(w, o.y, acc.y), fmaf(w, o.z, acc.z), fmaf(w, o.w, acc.w));
}

__global__ void __launch_bounds__(kCombineMaxThreads) combine_kernel(const CombineArgs args) {
  __shared__ float weight[kMaxSplits];       // LSE of split s, then its weight exp(lse_s - lse)
  __shared__ float4 group_sum[kCombineMaxThreads];  // per thread: its splits' weighted sum of its column group
  __shared__ float scratch[kMaxWarps];
  const int threads = int(blockDim.x);
  const int row = int(blockIdx.x / unsigned(args.num_heads_q));
  const int head = int(blockIdx.x % unsigned(args.num_heads_q));
  const int num_splits = args.num_splits;
  // Launched as a programmatic dependent of the forward kernel (launch_combine): the launch overlaps the
  // forward's tail, and this wait orders every read of the partials after the forward grid's writes.
  cutlass::arch::wait_on_dependent_grids();
  // Varlen: rows past the last sequence (padding up to total_q) belong to no sequence and stay untouched.
  if (args.cu_seqlens_q != nullptr && row >= args.cu_seqlens_q[args.batch]) { return; }

  // Thread t: column group t % columns of the splits t / columns + k * groups (threads past groups * columns
  // only help with the LSE).
  const int columns = args.head_dim_v / 4;
  const int groups = threads / columns;
  const int column = threadIdx.x % columns;
  const int group = threadIdx.x / columns;
  const float* o_partial = args.o_partial + (int64_t(row) * args.num_heads_q + head) * args.head_dim_v + 4 * column;
  const int64_t o_split_stride = int64_t(args.partial_rows) * args.num_heads_q * args.head_dim_v;
  auto load_pass = [&](int first_split, float4 (&o)[kCombineLoadsPerPass]) {
#pragma unroll
    for (int k = 0; k < kCombineLoadsPerPass; ++k) {
      const int s = first_split + group + k * groups;
      o[k] = group < groups && s < num_splits ? *reinterpret_cast<const float4*>(o_partial + s * o_split_stride)
                                              : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  float4 o[kCombineLoadsPerPass];
  load_pass(0, o);

  const float* lse_partial = args.lse_partial + int64_t(head) * args.partial_rows + row;
  const int64_t lse_split_stride = int64_t(args.num_heads_q) * args.partial_rows;
  float lse_max = -INFINITY;
  for (int s = threadIdx.x; s < num_splits; s += threads) {
    weight[s] = lse_partial[s * lse_split_stride];
    lse_max = fmaxf(lse_max, weight[s]);
  }
  lse_max = block_reduce(lse_max, MaxOp{}, scratch);
  float sink = -INFINITY;
  if (args.sink != nullptr) {
    sink = args.sink_is_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(args.sink)[head])
                             : static_cast<const float*>(args.sink)[head];
    lse_max = fmaxf(lse_max, sink);
  }
  float lse = -INFINITY;
  if (lse_max != -INFINITY) {  // uniform: every thread has the reduced value
    float sum = 0.f;
    for (int s = threadIdx.x; s < num_splits; s += threads) { sum += expf(weight[s] - lse_max); }
    sum = block_reduce(sum, SumOp{}, scratch);
    if (sink != -INFINITY) { sum += expf(sink - lse_max); }
    lse = lse_max + logf(sum);
  }
  // Each thread rewrites the entries it read; a split with no keys (lse_s = -inf) weighs 0.
  for (int s = threadIdx.x; s < num_splits; s += threads) {
    weight[s] = lse == -INFINITY ? 0.f : expf(weight[s] - lse);
  }
  __syncthreads();

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int first = 0;;) {
#pragma unroll
    for (int k = 0; k < kCombineLoadsPerPass; ++k) {
      const int s = first + group + k * groups;
      if (s < num_splits) { acc = fma4(weight[s], o[k], acc); }
    }
    first += kCombineLoadsPerPass * groups;
    if (first >= num_splits) { break; }
    load_pass(first, o);
  }
  group_sum[threadIdx.x] = acc;
  // Dense rows are b * seqlen_q + t; varlen rows are already packed offsets (batch coordinate 0).
  const bool varlen = args.cu_seqlens_q != nullptr;
  const int batch = varlen ? 0 : row / args.seqlen_q;
  const int token = varlen ? row : row % args.seqlen_q;
  if (threadIdx.x == 0 && args.lse != nullptr) {
    args.lse[int64_t(batch) * args.lse_batch_stride + int64_t(head) * args.lse_head_stride + token] = lse;
  }
  __syncthreads();
  if (threadIdx.x >= columns) { return; }
  float4 total = group_sum[column];
  for (int g = 1; g < groups; ++g) {
    const float4 part = group_sum[g * columns + column];
    total = make_float4(total.x + part.x, total.y + part.y, total.z + part.z, total.w + part.w);
  }

  const int64_t out_offset = int64_t(batch) * args.o_batch_stride + int64_t(token) * args.o_row_stride +
                             int64_t(head) * args.o_head_stride + 4 * column;
  const float out_scale = args.output_scale != nullptr ? 1.f / *args.output_scale : 1.f;
  with_output_store(args.out_type, [&](auto store) {
    auto* out = static_cast<typename decltype(store)::Element*>(args.out) + out_offset;
    store(out, total.x * out_scale, total.y * out_scale);
    store(out + 2, total.z * out_scale, total.w * out_scale);
  });
}

}  // namespace

cudaError_t launch_combine(const CombineArgs& args, cudaStream_t stream) {
  // The kernel's layout: float4 column groups, at most kCombineMaxThreads of them, and one weight slot per split.
  const int threads = combine_block_threads(args.num_splits, args.head_dim_v);
  if (threads == 0 || args.num_splits > kMaxSplits) { return cudaErrorInvalidValue; }
  const int64_t blocks = int64_t(args.partial_rows) * args.num_heads_q;
  if (blocks == 0) { return cudaSuccess; }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(threads);
  config.stream = stream;
  // Programmatic stream serialization: the combine may launch once every forward CTA has reached its epilogue
  // (fwd_kernel.cuh); small decode steps otherwise pay a full kernel-boundary gap here.
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, combine_kernel, args);
}

}  // namespace fp8attn::sm90
