// fp8attn: split-KV combine. Each split wrote its rows' O (normalised within the split, v_descale applied)
// and LSE; the combined row is O = sum_s exp(lse_s - lse) O_s with lse = log(sum_s exp(lse_s) + exp(sink)).
// The sink joins here, once, because each split would otherwise count it. One warp per (row, q head);
// lanes own column pairs, so partial-O reads are coalesced along dv. Deterministic for a fixed split count
// (the reductions' order depends only on num_splits).
#include "sm90/combine.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include <cutlass/arch/grid_dependency_control.h>

namespace fp8attn::sm90 {

namespace {

constexpr int kWarpsPerBlock = 8;

constexpr int kMaxColumnPairsPerLane = 4;  // dv <= 256 = 32 lanes x 2 columns x 4

__device__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) { x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset)); }
  return x;
}
__device__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) { x += __shfl_xor_sync(0xffffffff, x, offset); }
  return x;
}

// The splits are spread over the lanes (lane s reads split s, s + 32, ...), so the LSE loads of all splits
// are in flight together; a loop of dependent loads per split made this kernel latency-bound (run 5:
// 23 us for 32 rows x 29 splits, docs/perf.md).
__global__ void __launch_bounds__(kWarpsPerBlock * 32) combine_kernel(const CombineArgs args) {
  const int warp_global = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row = warp_global / args.num_heads_q;
  const int head = warp_global % args.num_heads_q;
  // Launched as a programmatic dependent of the forward kernel (launch_combine): the launch overlaps the
  // forward's tail, and this wait orders every read of the partials after the forward grid's writes.
  cutlass::arch::wait_on_dependent_grids();
  if (row >= args.partial_rows) { return; }
  // Varlen: rows past the last sequence (padding up to total_q) belong to no sequence and stay untouched.
  if (args.cu_seqlens_q != nullptr && row >= args.cu_seqlens_q[args.batch]) { return; }

  const float* lse_partial = args.lse_partial + int64_t(head) * args.partial_rows + row;
  const int64_t lse_split_stride = int64_t(args.num_heads_q) * args.partial_rows;
  float lse_max = -INFINITY;
  for (int s = lane; s < args.num_splits; s += 32) { lse_max = fmaxf(lse_max, lse_partial[s * lse_split_stride]); }
  lse_max = warp_max(lse_max);
  float sink = -INFINITY;
  if (args.sink != nullptr) {
    sink = args.sink_is_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(args.sink)[head])
                             : static_cast<const float*>(args.sink)[head];
    lse_max = fmaxf(lse_max, sink);
  }
  float lse = -INFINITY;
  if (lse_max != -INFINITY) {
    float sum = 0.f;
    for (int s = lane; s < args.num_splits; s += 32) { sum += expf(lse_partial[s * lse_split_stride] - lse_max); }
    sum = warp_sum(sum);
    if (sink != -INFINITY) { sum += expf(sink - lse_max); }
    lse = lse_max + logf(sum);
  }

  // Lane l owns columns 2l, 2l + 1 (+ 64 c for c < 4, while below dv); weights travel from the lane that owns
  // the split.
  const float* o_partial = args.o_partial + (int64_t(row) * args.num_heads_q + head) * args.head_dim_v;
  const int64_t o_split_stride = int64_t(args.partial_rows) * args.num_heads_q * args.head_dim_v;
  float2 acc[kMaxColumnPairsPerLane];
  for (int c = 0; c < kMaxColumnPairsPerLane; ++c) { acc[c] = make_float2(0.f, 0.f); }
  if (lse != -INFINITY) {
    for (int base = 0; base < args.num_splits; base += 32) {
      const int s_mine = base + lane;
      const float my_weight = s_mine < args.num_splits ? expf(lse_partial[s_mine * lse_split_stride] - lse) : 0.f;
      const int count = min(32, args.num_splits - base);
#pragma unroll 4
      for (int j = 0; j < count; ++j) {
        const float weight = __shfl_sync(0xffffffff, my_weight, j);
        const float* o_split = o_partial + (base + j) * o_split_stride + 2 * lane;
#pragma unroll
        for (int c = 0; c < kMaxColumnPairsPerLane; ++c) {
          if (2 * lane + 64 * c < args.head_dim_v) {
            const float2 o = *reinterpret_cast<const float2*>(o_split + 64 * c);
            acc[c].x = fmaf(weight, o.x, acc[c].x);
            acc[c].y = fmaf(weight, o.y, acc[c].y);
          }
        }
      }
    }
  }

  // Dense rows are b * seqlen_q + t; varlen rows are already packed offsets (batch coordinate 0).
  int64_t out_row_offset, lse_offset;
  if (args.cu_seqlens_q != nullptr) {
    out_row_offset = int64_t(row) * args.o_row_stride;
    lse_offset = int64_t(head) * args.lse_head_stride + row;
  } else {
    const int b = row / args.seqlen_q, t = row % args.seqlen_q;
    out_row_offset = int64_t(b) * args.o_batch_stride + int64_t(t) * args.o_row_stride;
    lse_offset = int64_t(b) * args.lse_batch_stride + int64_t(head) * args.lse_head_stride + t;
  }
  const int64_t out_offset = out_row_offset + int64_t(head) * args.o_head_stride;
#pragma unroll
  for (int c = 0; c < kMaxColumnPairsPerLane; ++c) {
    const int col = 2 * lane + 64 * c;
    if (col >= args.head_dim_v) { continue; }
    if (args.out_is_bf16) {
      *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(args.out) + out_offset + col) =
          __floats2bfloat162_rn(acc[c].x, acc[c].y);
    } else {
      *reinterpret_cast<__half2*>(static_cast<__half*>(args.out) + out_offset + col) =
          __floats2half2_rn(acc[c].x, acc[c].y);
    }
  }
  if (args.lse != nullptr && lane == 0) { args.lse[lse_offset] = lse; }
}

}  // namespace

cudaError_t launch_combine(const CombineArgs& args, cudaStream_t stream) {
  const int64_t warps = int64_t(args.partial_rows) * args.num_heads_q;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks == 0) { return cudaSuccess; }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kWarpsPerBlock * 32);
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
