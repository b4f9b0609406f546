// fp8attn SM90 forward: host side of one kernel instantiation — TMA descriptors, kernel params, launch.
// Included only by the generated instantiation files (build/generated/fwd_*.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdlib>

#include <array>
#include <atomic>

#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>

#include "common/kernel_config.h"
#include "fp8attn/params.h"
#include "sm90/fwd_kernel.cuh"
#include "sm90/kernel_args.cuh"
#include "sm90/kernel_traits.cuh"

namespace fp8attn::sm90 {

using namespace cute;

// Q, K and V as TMA sees them: (rows, head dim, heads, batches), head dim contiguous. Dense tensors have
// one "batch" per sequence; varlen tensors are one packed batch and each sequence is a row offset; paged
// K/V is (page_size, head dim, heads, num_pages) and each 16-row box names its page.
using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;
using GmemStride = Stride<int64_t, _1, int64_t, int64_t>;

template <class Traits>
struct KernelParams {
  using Element = typename Traits::Element;
  using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShape{}, GmemStride{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, std::declval<GmemTensor>(), typename Traits::SmemLayoutQ{},
                                      Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDim>>{}, _1{}));
  // Paged K/V: one TMA per 16-row box (each box names its page).
  using TmaKBox = decltype(make_tma_copy(SM90_TMA_LOAD{}, std::declval<GmemTensor>(), typename Traits::SmemLayoutKBox{},
                                         Shape<Int<Traits::kBoxRows>, Int<Traits::kHeadDim>>{}, _1{}));
  using TmaVBox = decltype(make_tma_copy(SM90_TMA_LOAD{}, std::declval<GmemTensor>(), typename Traits::SmemLayoutVBox{},
                                         Shape<Int<Traits::kBoxRows>, Int<Traits::kHeadDimV>>{}, _1{}));
  // Dense and varlen K/V: one TMA per tile. Measured: 16-row boxes cost 16% of prefill while one warp both loaded
  // and transposed, 1-2% with the dedicated load warp (docs/design.md, Measured choices).
  using TmaKTile = decltype(make_tma_copy(SM90_TMA_LOAD{}, std::declval<GmemTensor>(),
                                          take<0, 2>(typename Traits::SmemLayoutK{}),
                                          Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDim>>{}, _1{}));
  using TmaVTile = decltype(make_tma_copy(SM90_TMA_LOAD{}, std::declval<GmemTensor>(),
                                          take<0, 2>(typename Traits::SmemLayoutVLoad{}),
                                          Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDimV>>{}, _1{}));

  FwdArgs args;
  GmemShape shape_q, shape_k, shape_v;
  TmaQ tma_q;
  TmaKBox tma_k_box;
  TmaVBox tma_v_box;
  TmaKTile tma_k_tile;
  TmaVTile tma_v_tile;
};

inline DescaleArg make_descale_arg(const fp8attn_descale& d) {
  return DescaleArg{d.ptr, d.batch_stride, d.head_stride};
}

inline FwdArgs make_fwd_args(const fp8attn_fwd_params& p, const KernelConfig& config) {
  FwdArgs a;
  a.batch = p.batch;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.num_heads_q = p.num_heads_q;
  a.num_heads_kv = p.num_heads_kv;
  a.qheads_per_kvhead = p.num_heads_q / p.num_heads_kv;
  a.pack_gqa = config.pack_gqa;
  a.q_bf16 = p.q_dtype == FP8ATTN_DTYPE_BF16;
  a.kv_shared = p.k == p.v && p.head_dim == p.head_dim_v && p.k_batch_stride == p.v_batch_stride &&
                p.k_row_stride == p.v_row_stride && p.k_head_stride == p.v_head_stride;
  a.packed_rows_divmod = cutlass::FastDivmod(config.pack_gqa ? a.qheads_per_kvhead : 1);
  a.q = static_cast<const uint8_t*>(p.q);
  a.q_batch_stride = p.q_batch_stride;
  a.q_row_stride = p.q_row_stride;
  a.q_head_stride = p.q_head_stride;
  a.cu_seqlens_q = p.cu_seqlens_q;
  a.cu_seqlens_k = p.cu_seqlens_k;
  a.seqused_k = p.seqused_k;
  a.block_table = p.block_table;
  a.block_table_batch_stride = p.block_table_batch_stride;
  a.page_size = p.page_size;
  a.num_splits = config.num_splits;
  a.splits_divmod = cutlass::FastDivmod(std::max(1, config.num_splits));
  a.split_kv = config.split_kv();
  a.reverse_m = config.reverse_m;
  a.tile_order_rows = config.tile_order_rows;
  a.heads_divmod = cutlass::FastDivmod(config.pack_gqa ? p.num_heads_kv : p.num_heads_q);
  a.folded_grid = config.folded_grid;
  a.m_blocks_divmod = cutlass::FastDivmod(std::max(1, config.num_m_blocks));
  if (a.split_kv) {
    a.partial_rows = int(config.partial_rows);
    a.o_partial = static_cast<float*>(p.workspace);
    a.lse_partial = a.o_partial + SplitWorkspace::of(config, p.num_heads_q, p.head_dim_v).o_floats;
  }
  a.out = p.out;
  a.out_type = output_type_of(p.out_dtype);
  a.output_scale = p.output_scale.ptr;  // NULL unless out is E4M3 (validate.cpp)
  a.o_batch_stride = p.o_batch_stride;
  a.o_row_stride = p.o_row_stride;
  a.o_head_stride = p.o_head_stride;
  a.lse = p.lse;
  a.lse_batch_stride = p.cu_seqlens_q != nullptr ? 0 : p.lse_batch_stride;
  a.lse_head_stride = p.lse_head_stride;
  a.softmax_scale_log2 = p.softmax_scale * kLog2e;
  if (p.softcap > 0.f) {
    a.softcap_tanh_scale = p.softmax_scale / p.softcap;
    a.softcap_log2 = p.softcap * kLog2e;
  }
  a.q_descale = make_descale_arg(p.q_descale);
  a.k_descale = make_descale_arg(p.k_descale);
  a.v_descale = make_descale_arg(p.v_descale);
  a.sink = p.sink;
  a.sink_is_bf16 = p.sink_dtype == FP8ATTN_DTYPE_BF16;
  a.window_left = p.window_left;
  a.window_right = p.causal ? 0 : p.window_right;
  return a;
}

template <class Traits>
cudaError_t launch_fwd(const fp8attn_fwd_params& p, const KernelConfig& config, cudaStream_t stream) {
  using Params = KernelParams<Traits>;
  using Element = typename Traits::Element;
  Params params;
  params.args = make_fwd_args(p, config);
#ifdef FP8ATTN_PHASE_PROBE
  // A probe build (phase_probe.cuh): "ADDRESS,CTAS", the marks buffer and its rows, set by bench/phase_probe.py.
  if (const char* marks = std::getenv("FP8ATTN_PHASE_MARKS"); marks != nullptr) {
    char* rest = nullptr;
    params.args.phase_marks = reinterpret_cast<uint64_t*>(std::strtoull(marks, &rest, 0));
    params.args.phase_mark_ctas = *rest == ',' ? uint32_t(std::strtoul(rest + 1, nullptr, 0)) : 0u;
  }
#endif

  const bool varlen_q = p.cu_seqlens_q != nullptr;
  const bool varlen_k = p.cu_seqlens_k != nullptr;
  const bool paged = p.block_table != nullptr;
  // A TMA tensor dimension may not be 0; an empty tensor is never read (no CTA has rows or keys), so 1 is safe.
  const int rows_q = std::max(1, varlen_q ? p.total_q : p.seqlen_q);
  const int rows_k = std::max(1, paged ? p.page_size : varlen_k ? p.total_k : p.seqlen_k);
  const int batches_q = varlen_q ? 1 : p.batch;
  const int batches_k = paged ? p.num_pages : varlen_k ? 1 : p.batch;
  params.shape_q = GmemShape{rows_q, p.head_dim, p.num_heads_q, batches_q};
  params.shape_k = GmemShape{rows_k, p.head_dim, p.num_heads_kv, batches_k};
  params.shape_v = GmemShape{rows_k, p.head_dim_v, p.num_heads_kv, batches_k};

  auto k = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.k)), params.shape_k,
                       GmemStride{p.k_row_stride, _1{}, p.k_head_stride, p.k_batch_stride});
  auto v = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.v)), params.shape_v,
                       GmemStride{p.v_row_stride, _1{}, p.v_head_stride, p.v_batch_stride});
  // Descriptors for the kernel's path only (producer_load.cuh): paged K/V goes by 16-row boxes, the rest by
  // tiles, and a 16-bit Q is read by the MMA warpgroups (quantize_q.cuh), not by TMA; the kernel prefetches and
  // reads only those. Each encoding is ~0.1 us of every eager call's host time.
  if constexpr (!Traits::kQ16) {
    auto q = make_tensor(make_gmem_ptr(static_cast<Element const*>(p.q)), params.shape_q,
                         GmemStride{p.q_row_stride, _1{}, p.q_head_stride, p.q_batch_stride});
    params.tma_q = make_tma_copy(SM90_TMA_LOAD{}, q, typename Traits::SmemLayoutQ{},
                                 Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDim>>{}, _1{});
  }
  if (paged) {
    params.tma_k_box = make_tma_copy(SM90_TMA_LOAD{}, k, typename Traits::SmemLayoutKBox{},
                                     Shape<Int<Traits::kBoxRows>, Int<Traits::kHeadDim>>{}, _1{});
    params.tma_v_box = make_tma_copy(SM90_TMA_LOAD{}, v, typename Traits::SmemLayoutVBox{},
                                     Shape<Int<Traits::kBoxRows>, Int<Traits::kHeadDimV>>{}, _1{});
  } else {
    params.tma_k_tile = make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename Traits::SmemLayoutK{}),
                                      Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDim>>{}, _1{});
    params.tma_v_tile = make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename Traits::SmemLayoutVLoad{}),
                                      Shape<Int<Traits::kBlockN>, Int<Traits::kHeadDimV>>{}, _1{});
  }

  auto kernel = fwd_kernel<Traits, Params>;
  constexpr int kSmemBytes = Traits::kSmemBytes;
  // cudaLaunchKernelEx returns this launch's own error (a triple-chevron launch leaves it to cudaGetLastError,
  // which would also report an earlier call's unchecked error as ours), and a failed launch enqueued nothing.
  cudaLaunchConfig_t launch = {};
  launch.gridDim = dim3(config.grid_x, config.grid_y, config.grid_z);
  launch.blockDim = dim3(Traits::kNumThreads);
  launch.dynamicSmemBytes = kSmemBytes;
  launch.stream = stream;
  // The opt-in to kSmemBytes of dynamic shared memory is set once per device, not per call (~0.4 us of host time,
  // docs/perf.md "Host path"). It belongs to a context: after a device reset, or in another context of the same
  // device, the launch fails without it, so a launch that skipped it and failed sets it and tries once more.
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) { return err; }
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<bool>, kMaxDevices> smem_opted_in{};
  std::atomic<bool>* opted_in = device < kMaxDevices ? &smem_opted_in[device] : nullptr;
  auto opt_in_and_launch = [&] {
    const cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    return set != cudaSuccess ? set : cudaLaunchKernelEx(&launch, kernel, params);
  };
  if (opted_in == nullptr || !opted_in->load(std::memory_order_relaxed)) {
    err = opt_in_and_launch();
    if (err == cudaSuccess && opted_in != nullptr) { opted_in->store(true, std::memory_order_relaxed); }
    return err;
  }
  err = cudaLaunchKernelEx(&launch, kernel, params);
  if (err == cudaSuccess) { return err; }
  (void)cudaGetLastError();  // this launch's error, not the caller's: the retry reports its own
  return opt_in_and_launch();
}

}  // namespace fp8attn::sm90
