// fp8attn SM90 forward: the phase probe, clock marks of each CTA's start, loop and end for a diagnostic build.
//
// Off unless the library is built with the CMake option FP8ATTN_PHASE_PROBE (then FP8ATTN_PHASE_PROBE is defined for
// the kernels): every function here is then empty and no kernel changes (scripts/check_sass.py --against says so).
// In a probe build the host reads FP8ATTN_PHASE_MARKS ("ADDRESS,CTAS") at each launch (fwd_launch.cuh): the device
// address of an int64 buffer [CTAS, kPhaseMarks], which the kernel fills with clock64 values per CTA (CTAs past CTAS
// record nothing) (kPhaseEntryNs / kPhaseEndNs
// with %globaltimer, so that a reader can turn one CTA's cycles into nanoseconds). bench/phase_probe.py sets it,
// runs a decode step and prints each mark in microseconds from the CTA's entry. Why: a decode CTA of a few KV blocks
// spends as long in its start and end as in its loop (docs/decode_floor.md), and only per-CTA marks say where.
#pragma once

#include <cstdint>

#include <cute/config.hpp>

#include "sm90/kernel_args.cuh"

namespace fp8attn::sm90 {

// Which event of the CTA a mark records; the thread that records it is named.
enum PhaseMark : int {
  kPhaseEntry = 0,         // thread 0, the kernel's first statement
  kPhaseCtaBarrier,        // thread 0, past the CTA barrier
  kPhaseProducerStart,     // thread 0, its registers given back (setmaxnreg), about to load K/V
  kPhaseMmaStart,          // the first MMA thread, its registers granted (setmaxnreg)
  kPhaseFirstKvIssued,     // the load warp's lane 0, the first KV block's TMA issued
  kPhaseQLoaded,           // the first MMA thread: a 16-bit Q's row maxima known (its global loads returned)
  kPhaseQReady,            // the first MMA thread: Q in sQ (16-bit Q quantized, or an E4M3 Q's TMA landed)
  kPhaseFirstKLanded,      // the first MMA thread: the first K stage has landed (its wait returned)
  kPhaseLoopDone,          // the first MMA thread: the KV loop's last GEMM has completed (swapped: its last softmax)
  kPhaseRowsStaged,        // the first MMA thread: swapped operands, statistics and O rows staged (stage_stats)
  kPhaseEpilogueStart,     // the first MMA thread: the rows' scales and LSE computed, about to store
  kPhaseEnd,               // the first MMA thread: the output and LSE stores issued
  kPhaseEntryNs,           // as kPhaseEntry, %globaltimer
  kPhaseEndNs,             // as kPhaseEnd, %globaltimer
  kPhaseMarks
};

#ifdef FP8ATTN_PHASE_PROBE
CUTE_DEVICE uint64_t phase_clock(PhaseMark mark) {
  uint64_t value;
  if (mark == kPhaseEntryNs || mark == kPhaseEndNs) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(value));
  } else {
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(value));
  }
  return value;
}
#endif

// Thread 0, at the kernel's start: this CTA's row of marks into shared memory (the other marks' threads read it
// there, past the CTA barrier), and the entry marks.
template <class SharedStorage>
CUTE_DEVICE void phase_probe_begin(const FwdArgs& args, SharedStorage& smem) {
#ifdef FP8ATTN_PHASE_PROBE
  if (threadIdx.x != 0) { return; }
  uint64_t* row = nullptr;
  const uint32_t cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (args.phase_marks != nullptr && cta < args.phase_mark_ctas) {
    row = args.phase_marks + uint64_t(cta) * kPhaseMarks;
    row[kPhaseEntry] = phase_clock(kPhaseEntry);
    row[kPhaseEntryNs] = phase_clock(kPhaseEntryNs);
  }
  smem.phase_marks = row;
#else
  (void)args;
  (void)smem;
#endif
}

// The calling thread records `mark` (past the CTA barrier only: the row is read from shared memory).
template <class SharedStorage>
CUTE_DEVICE void phase_mark(const SharedStorage& smem, PhaseMark mark) {
#ifdef FP8ATTN_PHASE_PROBE
  if (uint64_t* row = smem.phase_marks; row != nullptr) { row[mark] = phase_clock(mark); }
#else
  (void)smem;
  (void)mark;
#endif
}

// The first MMA thread, once the tile's stores are issued: the end marks (clock64 and %globaltimer).
template <class SharedStorage>
CUTE_DEVICE void phase_probe_end(const SharedStorage& smem) {
  phase_mark(smem, kPhaseEnd);
  phase_mark(smem, kPhaseEndNs);
}

}  // namespace fp8attn::sm90
