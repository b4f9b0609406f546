// fp8attn SM90 forward, producer warpgroup: TMA loads of Q, K and V, and the V transpose.
//
// FP8 WGMMA reads B only K-major, but V is stored [keys, dv] (dv contiguous) and TMA cannot transpose.
// So V lands row-major in sVLoad, and producer warps rewrite it into the K-major sVt (transpose_v.cuh)
// for the MMA warpgroups, through a second pipeline. Warp 0 only issues loads, so
// it runs ahead by as many tiles as there are stages; warps 1-3 only transpose. The transpose of block n
// runs while later blocks' loads are in flight and the MMA warpgroups work on block n+1 (blocks are
// visited from the last to the first). Split dv with K = V (args.kv_shared): each tile is loaded once, into the K
// stage, and the transpose warps read V from there (the K stage is released by the score warpgroup and by them).
// Split dv's V-as-loaded stage is the K ring's last (Traits::v_load_buffer): K = V uses it as a third K stage,
// K != V skips it (advance_k_stage). The swapped-operand kernels have no transpose here: their second MMA warpgroup
// reads V from the K stage or the V-as-loaded stage into registers (mainloop_swapped.cuh).
#pragma once

#include <cute/tensor.hpp>
#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/copy_sm90.hpp>
#include <cutlass/arch/barrier.h>

#include <type_traits>

#include "sm90/kernel_args.cuh"
#include "sm90/kernel_traits.cuh"
#include "sm90/mask.cuh"
#include "sm90/phase_probe.cuh"
#include "sm90/transpose_v.cuh"

namespace fp8attn::sm90 {

using namespace cute;

template <class Traits>
struct ProducerLoad {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kHeadDimV = Traits::kHeadDimV;
  using SharedStorage = typename Traits::SharedStorage;
  using PipelineK = typename Traits::PipelineK;
  using PipelineVLoad = typename Traits::PipelineVLoad;
  using PipelineVt = typename Traits::PipelineVt;
  using KState = typename PipelineK::PipelineState;
  using VtState = typename PipelineVt::PipelineState;
  using VLoadState = cutlass::PipelineState<Traits::kVLoadStages>;
  // Split dv with K = V: V is the K stage (identical layouts when d = dv).
  static constexpr bool kMayShareKv = Traits::kSplitDv && Traits::kHeadDim == Traits::kHeadDimV;
  static_assert(!kMayShareKv || std::is_same_v<decltype(take<0, 2>(typename Traits::SmemLayoutK{})),
                                               decltype(take<0, 2>(typename Traits::SmemLayoutVLoad{}))>,
                "a K stage has the layout of a V-as-loaded stage (the transpose's offsets, transpose_v.cuh)");
  CUTE_DEVICE static bool shares_kv(const FwdArgs& args) {
    if constexpr (kMayShareKv) {
      return args.kv_shared;
    } else {
      return false;
    }
  }

  // The load warp's pipeline positions, carried from the loads issued before the CTA barrier to the rest.
  struct LoadStates {
    KState k = cutlass::make_producer_start_state<PipelineK>();
    VLoadState v = cutlass::make_producer_start_state<PipelineVLoad>();
  };

  // Thread 0, right after it has initialised the barriers and before the ones rows and the CTA barrier
  // (fwd_kernel.cuh): Q's TMA and the first KV block's V and K, so that their latency overlaps the rest of the
  // prologue (phase clocks of a d128 1k prefill CTA: Q and the first K/V went out 1.6 and 2.0 us after its start,
  // this way 1.2 and 1.3; docs/design.md, Measured choices). Dense and varlen K/V with Q by TMA only; returns whether
  // it issued them. The block range must not be empty.
  template <class Params>
  CUTE_DEVICE static bool issue_first_loads(Params const& params, SharedStorage& smem, PipelineK& pipeline_k,
                                            PipelineVLoad& pipeline_vload, const SeqInfo& seq, KvBlockRange range,
                                            int m_block, int kv_head, int head_q, LoadStates& states) {
    if (params.args.pack_gqa || params.args.block_table != nullptr) { return false; }
    if constexpr (!Traits::kQ16) { load_q(params, smem, seq, m_block, head_q); }
    load_kv_tiles(params, seq, range.n_block_max - 1, range.n_block_max - 1, kv_head, smem, pipeline_k, pipeline_vload, states);
    return true;
  }

  template <class Params>
  CUTE_DEVICE static void run(Params const& params, SharedStorage& smem, PipelineK& pipeline_k,
                              PipelineVLoad& pipeline_vload, PipelineVt& pipeline_vt, const SeqInfo& seq,
                              KvBlockRange range, int m_block, int kv_head, int head_q, int batch,
                              bool first_loads_issued, LoadStates& states) {
    const FwdArgs& args = params.args;
    const int warp = cutlass::canonical_warp_idx_sync();  // 0..3 inside the producer warpgroup
    const int lane = threadIdx.x % 32;
    // One thread issues every TMA; it is also the pipelines' leader (expect-tx on the full barriers).
    const bool is_tma_issuer = threadIdx.x == 0;

    if constexpr (Traits::kQ16) {
      // A 16-bit Q is the MMA warpgroups' to load and quantize (quantize_q.cuh).
    } else if (args.pack_gqa) {
      // Warps 1-3 gather Q while warp 0 already issues the K/V loads: the gather is a chain of dependent
      // global loads, and decode is latency-bound on short sequences.
      if (warp != 0) {
        Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q.data()), typename Traits::SmemLayoutQ{});  // (BLK_M, D)
        gather_q_packed(args, seq, m_block, kv_head, sQ, smem);
      }
    } else if (is_tma_issuer && !first_loads_issued) {
      load_q(params, smem, seq, m_block, head_q);
    }

    if (warp == 0) {
      if (args.block_table == nullptr) {
        load_kv_tiles(params, seq, range.n_block_max - 1 - int(first_loads_issued), range.n_block_min, kv_head, smem,
                      pipeline_k, pipeline_vload, states);
      } else {
        load_kv_paged(params, seq, range, kv_head, batch, lane, smem, pipeline_k, pipeline_vload);
      }
    } else if constexpr (Traits::kSwapped) {
      // Swapped operands: the second MMA warpgroup makes V^T itself, in registers (mainloop_swapped.cuh).
    } else if (shares_kv(args)) {
      transpose_v_tiles(smem, smem.smem_k.data(), pipeline_k, KState{}, pipeline_vt, seq, range, warp - 1, lane);
    } else {
      transpose_v_tiles(smem, Traits::v_load_buffer(smem), pipeline_vload, VLoadState{}, pipeline_vt, seq, range, warp - 1,
                        lane);
    }
  }

  // Thread 0: Q by TMA. Varlen sequences are a row offset into one packed batch.
  template <class Params>
  CUTE_DEVICE static void load_q(Params const& params, SharedStorage& smem, const SeqInfo& seq, int m_block, int head_q) {
    Tensor sQ = make_tensor(make_smem_ptr(smem.smem_q.data()), typename Traits::SmemLayoutQ{});  // (BLK_M, D)
    Tensor mQ = params.tma_q.get_tma_tensor(params.shape_q)(_, _, head_q, seq.tma_batch_q);  // (rows_q, D)
    Tensor gQ = local_tile(domain_offset(make_coord(seq.offset_q, _0{}), mQ),
                           Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, _0{}));  // (BLK_M, D)
    auto [tQgQ, tQsQ] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    smem.barrier_q.arrive_and_expect_tx(Traits::kBytesQ);
    copy(params.tma_q.with(reinterpret_cast<cutlass::arch::ClusterTransactionBarrier::ValueType&>(smem.barrier_q), 0),
         tQgQ, tQsQ);
  }

  // Warp 0, dense or varlen K/V: one TMA per tile from lane 0, blocks n_block_from down to n_block_to. Varlen
  // sequences are a row offset into one packed batch; rows past the tensor's end arrive as zeros.
  template <class Params>
  CUTE_DEVICE static void load_kv_tiles(Params const& params, const SeqInfo& seq, int n_block_from, int n_block_to,
                                        int kv_head, SharedStorage& smem, PipelineK& pipeline_k,
                                        PipelineVLoad& pipeline_vload, LoadStates& states) {
    if (threadIdx.x != 0) { return; }
    Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename Traits::SmemLayoutK{});  // (BLK_N, D, PIPE)
    Tensor sVLoad = make_tensor(make_smem_ptr(Traits::v_load_buffer(smem)), typename Traits::SmemLayoutVLoad{});  // (BLK_N, DV, PIPE)
    Tensor mK = params.tma_k_tile.get_tma_tensor(params.shape_k)(_, _, kv_head, seq.tma_batch_k);  // (rows_k, D)
    Tensor mV = params.tma_v_tile.get_tma_tensor(params.shape_v)(_, _, kv_head, seq.tma_batch_k);  // (rows_k, DV)
    Tensor gK = local_tile(domain_offset(make_coord(seq.offset_k, _0{}), mK),
                           Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));  // (BLK_N, D, n_blocks)
    Tensor gV = local_tile(domain_offset(make_coord(seq.offset_k, _0{}), mV),
                           Shape<Int<kBlockN>, Int<kHeadDimV>>{}, make_coord(_, _0{}));  // (BLK_N, DV, n_blocks)
    auto [tKgK, tKsK] = tma_partition(params.tma_k_tile, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [tVgV, tVsV] = tma_partition(params.tma_v_tile, _0{}, Layout<_1>{}, group_modes<0, 2>(sVLoad),
                                      group_modes<0, 2>(gV));
    const bool kv_shared = shares_kv(params.args);
    for (int n_block = n_block_from; n_block >= n_block_to; --n_block) {
      // V first: its transpose (swapped operands: the second MMA warpgroup's fragments) is the longer path.
      if (!kv_shared) {
        pipeline_vload.producer_acquire(states.v);
        copy(params.tma_v_tile.with(*pipeline_vload.producer_get_barrier(states.v), 0), tVgV(_, n_block),
             tVsV(_, states.v.index()));
        ++states.v;
      }
      pipeline_k.producer_acquire(states.k);
      copy(params.tma_k_tile.with(*pipeline_k.producer_get_barrier(states.k), 0), tKgK(_, n_block),
           tKsK(_, states.k.index()));
      if (states.k.count() == 0) { phase_mark(smem, kPhaseFirstKvIssued); }  // the CTA's first K, not this call's
      advance_k_stage<Traits>(states.k, kv_shared);
    }
  }

  // Warp 0, paged K/V: lane b loads box b of each tile (16 rows of K and of V). Lane 0 first waits for the
  // stage to be free and posts the tile's byte count on its barrier; then the boxes go out from their lanes.
  template <class Params>
  CUTE_DEVICE static void load_kv_paged(Params const& params, const SeqInfo& seq, KvBlockRange range, int kv_head,
                                        int batch, int lane, SharedStorage& smem, PipelineK& pipeline_k,
                                        PipelineVLoad& pipeline_vload) {
    Tensor sK = make_tensor(make_smem_ptr(smem.smem_k.data()), typename Traits::SmemLayoutK{});  // (BLK_N, D, PIPE)
    Tensor sVLoad = make_tensor(make_smem_ptr(Traits::v_load_buffer(smem)), typename Traits::SmemLayoutVLoad{});  // (BLK_N, DV, PIPE)
    // (page_size, D, heads_kv, num_pages)
    Tensor mK = params.tma_k_box.get_tma_tensor(params.shape_k);
    Tensor mV = params.tma_v_box.get_tma_tensor(params.shape_v);
    const bool is_leader = lane == 0;
    const bool loads_a_box = lane < Traits::kBoxesPerTile;
    KState load_k_state = cutlass::make_producer_start_state<PipelineK>();
    VLoadState load_v_state = cutlass::make_producer_start_state<PipelineVLoad>();
    const bool kv_shared = shares_kv(params.args);
    for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
      int box_row, box_page;
      locate_box(params.args, seq, batch, n_block, lane, box_row, box_page);
      if (!kv_shared) {
        if (is_leader) { pipeline_vload.producer_acquire(load_v_state); }
        __syncwarp();
        if (loads_a_box) {
          Tensor sVStage = sVLoad(_, _, load_v_state.index());  // (BLK_N, DV)
          copy_box<kHeadDimV>(params.tma_v_box, *pipeline_vload.producer_get_barrier(load_v_state), mV, box_row,
                              kv_head, box_page, sVStage, lane);
        }
        ++load_v_state;
      }
      if (is_leader) { pipeline_k.producer_acquire(load_k_state); }
      __syncwarp();
      if (loads_a_box) {
        Tensor sKStage = sK(_, _, load_k_state.index());  // (BLK_N, D)
        copy_box<kHeadDim>(params.tma_k_box, *pipeline_k.producer_get_barrier(load_k_state), mK, box_row, kv_head,
                           box_page, sKStage, lane);
      }
      if (is_leader && load_k_state.count() == 0) { phase_mark(smem, kPhaseFirstKvIssued); }
      advance_k_stage<Traits>(load_k_state, kv_shared);
    }
  }

  // Lane b: TMA coordinates (row in page, page) of box b of tile n_block, looked up in block_table. Boxes past
  // the sequence's end reuse its last page: the load must still deliver the tile's bytes, its rows are masked
  // (scores to -inf, V rows to zero), and block_table entries past ceil(seqlen_k / page_size) may hold anything.
  CUTE_DEVICE static void locate_box(const FwdArgs& args, const SeqInfo& seq, int batch, int n_block, int lane,
                                     int& box_row, int& box_page) {
    const int row = n_block * kBlockN + min(lane, Traits::kBoxesPerTile - 1) * Traits::kBoxRows;
    const int last_page = max(seq.seqlen_k - 1, 0) / args.page_size;
    const int page_index = row / args.page_size;
    box_page = args.block_table[batch * args.block_table_batch_stride + min(page_index, last_page)];
    box_row = page_index > last_page ? 0 : row % args.page_size;
  }

  // One TMA box: rows [row, row + 16) of (head, batch_or_page) into rows [16 * box, 16 * box + 16) of sStage.
  template <int kDim, class Tma, class TensorM, class TensorS>
  CUTE_DEVICE static void copy_box(Tma const& tma, uint64_t& barrier, TensorM const& mX, int row, int head,
                                   int batch_or_page, TensorS& sStage, int box) {
    Tensor gBox = local_tile(domain_offset(make_coord(row, _0{}), mX(_, _, head, batch_or_page)),
                             Shape<Int<Traits::kBoxRows>, Int<kDim>>{}, make_coord(_0{}, _0{}));  // (BOX, DIM)
    Tensor sBox = local_tile(sStage, Shape<Int<Traits::kBoxRows>, Int<kDim>>{}, make_coord(box, _0{}));  // (BOX, DIM)
    auto [tXgX, tXsX] = tma_partition(tma, _0{}, Layout<_1>{}, group_modes<0, 2>(sBox), group_modes<0, 2>(gBox));
    copy(tma.with(barrier, 0), tXgX, tXsX);
  }

  // PackGQA: tile row r holds token (m_block * BLK_M + r) / G of q head kv_head * G + (m_block * BLK_M + r) % G,
  // a gather TMA cannot express. The transpose warps (1-3) copy Q in 16-byte chunks into the swizzled sQ
  // (zeros past the sequence) and arrive on barrier_q, which counts all of them for this path.
  template <class TensorQ>
  CUTE_DEVICE static void gather_q_packed(const FwdArgs& args, const SeqInfo& seq, int m_block, int kv_head,
                                          TensorQ& sQ, SharedStorage& smem) {
    constexpr int kChunksPerRow = kHeadDim / 16;
    const int group = args.qheads_per_kvhead;
    // Four 16-byte loads in flight per thread: enough to cover the latency, and within the producer's registers
    // (a full unroll spilled at d = 192).
    #pragma unroll 4
    for (int chunk = threadIdx.x - 32; chunk < kBlockM * kChunksPerRow; chunk += Traits::kNumTransposeThreads) {
      const int r = chunk / kChunksPerRow;
      const int col = (chunk % kChunksPerRow) * 16;
      int token, g;
      args.packed_rows_divmod(token, g, m_block * kBlockM + r);
      uint4 value = make_uint4(0, 0, 0, 0);
      if (token < seq.seqlen_q) {
        const uint8_t* src = args.q + seq.tma_batch_q * args.q_batch_stride +
                             int64_t(seq.offset_q + token) * args.q_row_stride +
                             int64_t(kv_head * group + g) * args.q_head_stride + col;
        value = *reinterpret_cast<const uint4*>(src);
      }
      *reinterpret_cast<uint4*>(&sQ(r, col)) = value;
    }
    // WGMMA reads sQ through the async proxy.
    cutlass::arch::fence_view_async_shared();
    smem.barrier_q.arrive();
  }

  // Warps 1-3 (transpose_warp 0-2): every V tile of the range, [keys, dv] as loaded (sVLoad through
  // pipeline_vload, or with K = V the K stage through pipeline_k) to [dv, key slots] in sVt (transpose_v.cuh), from
  // the last block to the first like the loads. read_state: the start of the read pipeline's consumer side.
  template <class PipelineRead, class ReadState>
  CUTE_DEVICE static void transpose_v_tiles(SharedStorage& smem, Element* v_loaded, PipelineRead& pipeline_read,
                                            ReadState read_state, PipelineVt& pipeline_vt, const SeqInfo& seq,
                                            KvBlockRange range, int transpose_warp, int lane) {
    using Plan = VTransposePlan<Traits>;
    using Warp = VTransposeWarp<Traits>;
    // Shared-memory window addresses of this lane in stage 0; a stage adds its size.
    const uint32_t load_lane0 = cast_smem_ptr_to_uint(v_loaded) + Plan::load_lane_offset(lane);
    const uint32_t store_lane0 = cast_smem_ptr_to_uint(smem.smem_vt.data()) + Plan::store_lane_offset(lane);
    const uint32_t first_selector = Plan::first_selector(lane);
    const uint32_t second_selector = Plan::second_selector(lane);
    VtState write_state = cutlass::make_producer_start_state<PipelineVt>();
    for (int n_block = range.n_block_max - 1; n_block >= range.n_block_min; --n_block) {
      const int valid_keys = seq.seqlen_k - n_block * kBlockN;
      pipeline_read.consumer_wait(read_state);
      pipeline_vt.producer_acquire(write_state);
      const uint32_t load_base = load_lane0 + read_state.index() * Plan::kLoadStageBytes;
      const uint32_t store_base = store_lane0 + write_state.index() * Plan::kStoreStageBytes;
      if (valid_keys < kBlockN) {
        Warp::template tile_for_warp<true>(transpose_warp, load_base, store_base, first_selector, second_selector,
                                           valid_keys - 2 * (lane % 4));
      } else {
        Warp::template tile_for_warp<false>(transpose_warp, load_base, store_base, first_selector, second_selector, 0);
      }
      // The MMA warpgroups read sVt through the async proxy (WGMMA): order our generic-proxy stores first.
      cutlass::arch::fence_view_async_shared();
      pipeline_vt.producer_commit(write_state);
      pipeline_read.consumer_release(read_state);
      ++read_state;
      ++write_state;
    }
  }
};

}  // namespace fp8attn::sm90
