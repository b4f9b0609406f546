// fp8attn SM90 forward: the kernel, composing the warp roles.
//
//   warpgroup 0      producer: TMA Q/K/V, V transpose (not in the swapped-operand kernels)   (setmaxnreg down)
//   warpgroups 1..W  MMA: (the q16 kernels: Q's per-row quantization,) QK^T, softmax, PV, epilogue, 64 rows each
//                    (setmaxnreg up); split dv (dv = 512): two on the same 64 rows, each with half of O's columns,
//                    the first computing S and the softmax (mainloop_split_dv.cuh), or, for tiles of at most 8
//                    rows, the first S^T and the softmax, the second O^T with V^T from registers, no V transpose
//                    by the producer (mainloop_swapped.cuh)
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/grid_dependency_control.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "sm90/epilogue.cuh"
#include "sm90/kernel_args.cuh"
#include "sm90/mainloop_mma.cuh"
#include "sm90/mainloop_split_dv.cuh"
#include "sm90/mainloop_swapped.cuh"
#include "sm90/mask.cuh"
#include "sm90/pack_gqa.cuh"
#include "sm90/phase_probe.cuh"
#include "sm90/producer_load.cuh"
#include "sm90/quantize_q.cuh"
#include "sm90/softmax.cuh"
#include "sm90/tile_scheduler.cuh"

namespace fp8attn::sm90 {

template <class Traits, class Params>
__global__ void __launch_bounds__(Traits::kNumThreads, Traits::kCtasPerSm) fwd_kernel(const __grid_constant__ Params params) {
  using SharedStorage = typename Traits::SharedStorage;
  using PipelineK = typename Traits::PipelineK;
  using PipelineVLoad = typename Traits::PipelineVLoad;
  using PipelineVt = typename Traits::PipelineVt;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  using TileScheduler = typename Traits::TileScheduler;
  using Mainloop = std::conditional_t<Traits::kSplitDv, MainloopSplitDv<Traits>, MainloopMma<Traits>>;

  extern __shared__ __align__(1024) char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);

  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int warpgroup = warp_idx / 4;
  const bool is_producer = warpgroup == 0;
  const FwdArgs& args = params.args;
  phase_probe_begin(args, smem);
  // The sequence's lengths and offsets first: their global loads (a cold round trip for a decode CTA) are in
  // flight during the prologue below instead of after it (docs/design.md, Measured choices).
  const TileCoord tile = TileScheduler::tile(args);
  const SeqInfo seq(args, tile.batch);

  if (warp_idx == 0 && cute::elect_one_sync()) {
    if constexpr (!Traits::kQ16) { cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor()); }
    if (args.block_table != nullptr) {
      cute::prefetch_tma_descriptor(params.tma_k_box.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_v_box.get_tma_descriptor());
    } else {
      cute::prefetch_tma_descriptor(params.tma_k_tile.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_v_tile.get_tma_descriptor());
    }
    // TMA: one arrival plus the transaction bytes; PackGQA gather: every transpose-warp thread arrives.
    smem.barrier_q.init(args.pack_gqa ? Traits::kNumTransposeThreads : 1);
    if constexpr (Traits::kSplitDv) { smem.swapped_sync.init(128); }  // mainloop_swapped.cuh, WarpgroupSync
    if constexpr (Traits::kSwapped) {  // the P^T ring and the staged O rows between the MMA warpgroups
      for (int stage = 0; stage < Traits::kPtStages; ++stage) {
        smem.pt_full[stage].init(128);
        smem.pt_empty[stage].init(128);
      }
      smem.rows_staged.init(128);
    }
  }

  // Barriers are initialised by warp 0 inside the pipeline constructors. Split dv: only the score warpgroup reads
  // K, and with K = V the transpose warps read the K stage as V too (producer_load.cuh); with swapped operands the
  // second MMA warpgroup reads it as V instead.
  typename PipelineK::Params k_params;
  if constexpr (Traits::kSwapped) {
    k_params.role = is_producer ? PipelineK::ThreadCategory::Producer
                    : warpgroup == 1 || args.kv_shared ? PipelineK::ThreadCategory::Consumer
                                                       : PipelineK::ThreadCategory::NonParticipant;
    k_params.num_consumers = args.kv_shared ? 256 : 128;
  } else if constexpr (Traits::kSplitDv) {
    k_params.role = is_producer ? PipelineK::ThreadCategory::ProducerConsumer
                    : warpgroup == 1 ? PipelineK::ThreadCategory::Consumer
                                     : PipelineK::ThreadCategory::NonParticipant;
    k_params.num_consumers = 128 + (args.kv_shared ? Traits::kNumTransposeThreads : 0);
  } else {
    k_params.role = is_producer ? PipelineK::ThreadCategory::Producer : PipelineK::ThreadCategory::Consumer;
    k_params.num_consumers = Traits::kNumMmaThreads;
  }
  k_params.is_leader = threadIdx.x == 0;
  k_params.transaction_bytes = Traits::kBytesK;
  PipelineK pipeline_k(smem.pipeline_k, k_params, Shape<_1, _1, _1>{});

  // V as loaded: read by the transpose warps, or with swapped operands by the second MMA warpgroup.
  typename PipelineVLoad::Params vload_params;
  if constexpr (Traits::kSwapped) {
    vload_params.role = is_producer ? PipelineVLoad::ThreadCategory::Producer
                        : warpgroup == 2 ? PipelineVLoad::ThreadCategory::Consumer
                                         : PipelineVLoad::ThreadCategory::NonParticipant;
    vload_params.num_consumers = 128;
  } else {
    vload_params.role = is_producer ? PipelineVLoad::ThreadCategory::ProducerConsumer
                                    : PipelineVLoad::ThreadCategory::NonParticipant;
    vload_params.num_consumers = Traits::kNumTransposeThreads;
  }
  vload_params.is_leader = threadIdx.x == 0;
  vload_params.transaction_bytes = Traits::kBytesV;
  PipelineVLoad pipeline_vload(smem.pipeline_vload, vload_params, Shape<_1, _1, _1>{});

  typename PipelineVt::Params vt_params;
  vt_params.role = is_producer ? PipelineVt::ThreadCategory::Producer : PipelineVt::ThreadCategory::Consumer;
  vt_params.producer_arv_count = Traits::kNumTransposeThreads;
  // (The swapped-operand kernels construct it but pass nothing through it: their V^T is in registers.)
  vt_params.consumer_arv_count = Traits::kNumMmaThreads;
  PipelineVt pipeline_vt(smem.pipeline_vt, vt_params, cute::true_type{});

  const PackGqa pack(args);
  const bool has_rows = tile.m_block != TileCoord::kNoTile && tile.m_block * kBlockM < pack.tile_rows(seq.seqlen_q);
  const Mask<kBlockM, kBlockN> mask(seq, args, tile.m_block);
  const KvBlockRange range = Mask<kBlockM, kBlockN>::split_range(mask.kv_block_range(), tile.split, args.splits_divmod);
  const bool has_work = has_rows && range.n_block_max > range.n_block_min;
  const int kv_head = pack.kv_head(tile.head);

  // Warp 0 has initialised every barrier: in the 128-row kernels thread 0 issues the first loads now, before the
  // ones rows and the CTA barrier, so that their latency overlaps the rest of the prologue
  // (ProducerLoad::issue_first_loads; prefill at 1k keys +1.1-1.9%, docs/design.md, Measured choices). The 64-row
  // kernels (decode, short narrow prefill) do not: their paged and PackGQA loads start after the barrier anyway, and
  // with the early path the 8 MB decode steps were 0.1 us slower.
  typename ProducerLoad<Traits>::LoadStates load_states;
  bool first_loads_issued = false;
  if constexpr (kBlockM >= 128) {
    if (warp_idx == 0) {
      cutlass::arch::fence_barrier_init();
      __syncwarp();  // the barriers were initialised by warp 0's elected lane
      if (threadIdx.x == 0 && has_work) {
        first_loads_issued = ProducerLoad<Traits>::issue_first_loads(params, smem, pipeline_k, pipeline_vload, seq,
                                                                     range, tile.m_block, kv_head, tile.head, load_states);
      }
    }
  }

  // The ones of the P x ones row sums (mainloop_mma.cuh), written once: rows kHeadDimV.. of every V^T stage
  // (the transpose never writes them), or the separate ones tile. WGMMA reads them through the async proxy.
  if constexpr (Traits::kPvSumInPv) {
    // 16-byte stores over whole atoms: every byte is the same, so the swizzle inside an atom does not matter
    // (tests/cpu/test_transpose_plan.cu checks that these blocks are exactly the ones rows).
    Tensor sVt = make_tensor(make_smem_ptr(smem.smem_vt.data()), typename Traits::SmemLayoutVt{});  // (VT_ROWS, BLK_N, PIPE)
    constexpr int kAtoms = kBlockN / Traits::kVtAtomBytes;          // per stage
    constexpr int kVecsPerAtom = 8 * Traits::kVtAtomBytes / 16;    // 8 rows x atom width, in uint4
    constexpr uint32_t kOnes4 = 0x01010101u * Traits::kE4m3One;
    for (int i = threadIdx.x; i < Traits::kStages * kAtoms * kVecsPerAtom; i += Traits::kNumThreads) {
      const int atom = i / kVecsPerAtom;
      uint4* block = reinterpret_cast<uint4*>(&sVt(int(Traits::kHeadDimV), (atom % kAtoms) * Traits::kVtAtomBytes, atom / kAtoms));
      block[i % kVecsPerAtom] = make_uint4(kOnes4, kOnes4, kOnes4, kOnes4);
    }
  } else {
    for (int i = threadIdx.x; i < Traits::kOnesBytes; i += Traits::kNumThreads) {
      smem.smem_ones[i] = Traits::Element::bitcast(Traits::kE4m3One);
    }
  }
  cutlass::arch::fence_view_async_shared();
  TileScheduler::keep(tile, smem.scheduled_tile);

  cutlass::arch::fence_barrier_init();
  __syncthreads();
  if (threadIdx.x == 0) { phase_mark(smem, kPhaseCtaBarrier); }

  // The whole CTA agrees, so no barrier is left waiting (and a CTA without rows has issued no load).
  if (!has_rows) { return; }

  if (is_producer) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (threadIdx.x == 0) { phase_mark(smem, kPhaseProducerStart); }
    if (has_work) {
      ProducerLoad<Traits>::run(params, smem, pipeline_k, pipeline_vload, pipeline_vt, seq, range, tile.m_block,
                                kv_head, tile.head, tile.batch, first_loads_issued, load_states);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kMmaRegs>();
    const int mma_thread = threadIdx.x - Traits::kNumProducerThreads;
    if (mma_thread == 0) { phase_mark(smem, kPhaseMmaStart); }
    const float qk_descale = args.q_descale.load(tile.batch, kv_head) * args.k_descale.load(tile.batch, kv_head);
    // Read now, used by the finalisation: read there, its round trip sat between the KV loop and the output
    // (0.36 us of a 16 us d128 1k prefill CTA; docs/design.md, Measured choices). An FP8 output's 1 / scale
    // folds into it (with split-KV the combine applies it to the combined rows instead).
    float v_descale = args.v_descale.load(tile.batch, kv_head);
    if (args.output_scale != nullptr && !args.split_kv) { v_descale /= *args.output_scale; }
    // A q16 kernel quantizes its 16-bit Q into sQ here (quantize_q.cuh); its per-row scales join the softmax's.
    if constexpr (Traits::kQ16) {
      if (has_work) { QuantizeQ<Traits>::run(args, seq, tile.m_block, tile.head, mma_thread, smem); }
    }
    OnlineSoftmax softmax = args.softcap_tanh_scale != 0.f
                                ? OnlineSoftmax(args.softcap_log2, args.softcap_tanh_scale * qk_descale)
                                : OnlineSoftmax(args.softmax_scale_log2 * qk_descale, 0.f);
    typename Mainloop::FragmentO tOrO;
    clear(tOrO);
    WarpgroupSync wg_sync;    // swapped operands: the first MMA warpgroup's barrier (mainloop_swapped.cuh)
    float* o_rows = nullptr;  // swapped operands: O as rows in shared memory, once the loop has run
    if (has_work) {
      if constexpr (Traits::kSwapped) {
        using Swapped = MainloopSwapped<Traits>;
        if (mma_thread < 128) {
          if constexpr (!Traits::kQ16) { smem.barrier_q.wait(0); }
          if (mma_thread == 0) { phase_mark(smem, kPhaseQReady); }
          Swapped::run_scores(smem, pipeline_k, mask, range, mma_thread, softmax, args.kv_shared, wg_sync);
          if (mma_thread == 0) { phase_mark(smem, kPhaseLoopDone); }
          o_rows = Swapped::stage_stats(smem, mma_thread, softmax, wg_sync);
          if (mma_thread == 0) { phase_mark(smem, kPhaseRowsStaged); }
        } else {
          typename Swapped::FragmentOt tOrOt;
          clear(tOrOt);
          Swapped::run_ot(smem, pipeline_k, pipeline_vload, range, seq.seqlen_k, mma_thread - 128, tOrOt, args.kv_shared);
          Swapped::stage_ot_rows(smem, mma_thread - 128, tOrOt);
        }
      } else if constexpr (Traits::kSplitDv) {
        if (mma_thread < 128) {
          if constexpr (!Traits::kQ16) { smem.barrier_q.wait(0); }
          Mainloop::run_score_warpgroup(smem, pipeline_k, pipeline_vt, mask, range, mma_thread, softmax, tOrO,
                                        args.kv_shared);
        } else {
          Mainloop::run_pv_warpgroup(smem, pipeline_vt, range, mma_thread - 128, tOrO);
        }
      } else {
        if constexpr (!Traits::kQ16) { smem.barrier_q.wait(0); }  // Q by TMA (a q16 kernel's is in sQ already)
        Mainloop::run(smem, pipeline_k, pipeline_vt, mask, range, mma_thread, softmax, tOrO);
      }
    }
    // A swapped tile's end is the first MMA warpgroup's: the second is done once its O rows are staged.
    if constexpr (Traits::kSwapped) {
      if (mma_thread >= 128) { return; }
    }
    const int epilogue_thread = thread_idx_reread() - Traits::kNumProducerThreads;
    const TileCoord epilogue_tile = TileScheduler::tile_again(args, smem.scheduled_tile);  // == tile
    // Split dv reads the sequence's offsets again for the epilogue, as it does the tile: held through the KV loops,
    // the 64-bit partial row spilled the q16 kernel once it had the swapped-operand loop beside the split-dv one.
    const SeqInfo epilogue_seq = [&] {
      if constexpr (Traits::kSplitDv) {
        return SeqInfo(args, epilogue_tile.batch);
      } else {
        return seq;
      }
    }();
    // With split-KV the combine kernel adds the sink once; here it would be counted once per split.
    float sink_log2[2] = {-INFINITY, -INFINITY};
    if (args.sink != nullptr && !args.split_kv) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int row = accumulator_row(Traits::row_thread(epilogue_thread), h);
        const int head_q = pack.row_target(epilogue_tile.m_block * kBlockM + row, epilogue_tile.head).head_q;
        const float sink = args.sink_is_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(args.sink)[head_q])
                                             : static_cast<const float*>(args.sink)[head_q];
        sink_log2[h] = sink * kLog2e;
      }
    }
    float o_scale[2], lse[2];
    softmax.finalize(v_descale, sink_log2, q_row_scale_of<Traits>(smem), o_scale, lse);
    // Split dv: the P V warpgroup's o_scale is the score warpgroup's (its own softmax saw no scores). With swapped
    // operands the first warpgroup holds the rows' statistics (stage_stats).
    if constexpr (Traits::kSplitDv && !Traits::kSwapped) {
      if (has_work) { Mainloop::share_output_scale(smem, mma_thread, o_scale); }
    }
    // Programmatic dependent launch: once every CTA is here, the split-KV combine may start launching; it waits
    // (griddepcontrol.wait) for this grid's memory before reading the partials. Triggered this late: triggered at
    // the kernel's start instead, every split step was slower, by 1.3-2 us on the 8 MB steps (docs/design.md, Measured
    // choices; the likely reason: released early, the combine's CTAs land on the few SMs that happen to be free then).
    cutlass::arch::launch_dependent_grids();
    if (epilogue_thread == 0) { phase_mark(smem, kPhaseEpilogueStart); }
    if constexpr (Traits::kSwapped) {
      Epilogue<Traits>::template store_rows<MainloopSwapped<Traits>::kStageRowFloats>(
          smem, args, epilogue_seq, epilogue_tile.m_block, epilogue_tile.head, epilogue_tile.split, epilogue_thread,
          o_rows, o_scale, lse, [&] { wg_sync.sync(smem); });
      if (epilogue_thread == 0) { phase_probe_end(smem); }
    } else {
      Epilogue<Traits>::store(smem, args, epilogue_seq, epilogue_tile.m_block, epilogue_tile.head, epilogue_tile.split,
                              epilogue_thread, tOrO, o_scale, lse);
      if (epilogue_thread == 0) { phase_probe_end(smem); }
    }
  }
}

}  // namespace fp8attn::sm90
