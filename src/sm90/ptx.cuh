// fp8attn SM90: the inline PTX the kernels use, each instruction behind one named function, in one place.
#pragma once

#include <cstdint>

#include <cute/config.hpp>

namespace fp8attn::sm90 {

// 2^x with the SFU (MUFU.EX2); 2^-inf = 0, which is how masked scores vanish.
CUTE_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) with the SFU (MUFU.TANH, max relative error ~2^-11): the softcap.
CUTE_DEVICE float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// threadIdx.x, read again rather than reused: values derived from the thread index that are needed only after
// the KV loop (the epilogue's rows) are then recomputed instead of held in a register through the loop, where
// the MMA warpgroups have none to spare (a volatile read is not merged with the earlier one).
CUTE_DEVICE int thread_idx_reread() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// blockIdx, read again for the same reason as thread_idx_reread.
CUTE_DEVICE uint3 block_idx_reread() {
  uint3 block;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block.x));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(block.y));
  asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(block.z));
  return block;
}

// A float from shared memory that the compiler may neither hoist nor merge with an earlier load: a value read
// where it is used (once per KV block) instead of held in a register through the loop.
CUTE_DEVICE float ld_shared_volatile(const float* address) {
  float value;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(value) : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(address))));
  return value;
}

// A float into shared memory as a volatile store, kept in program order with the asm around it (the split-dv
// hand-over's row factors, mainloop_split_dv.cuh).
CUTE_DEVICE void st_shared_volatile(float* address, float value) {
  asm volatile("st.shared.f32 [%0], %1;" : : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(address))), "f"(value));
}

// Named barrier `id` for `threads` threads (a multiple of 32), not .aligned: the threads may reach it through
// different barrier instructions and need not be converged. CUTLASS's NamedBarrier::sync emits bar.sync, which is
// barrier.sync.aligned: every thread of the CTA that takes part must execute the same instruction, which the
// split-dv hand-over (two warpgroups, each at its own place in its own loop) does not (synccheck: "divergent
// threads", 2026-12-05). The memory clobber keeps shared-memory accesses on their side of it.
template <uint32_t kId, uint32_t kThreads>
CUTE_DEVICE void barrier_sync_unaligned() {
  asm volatile("barrier.sync %0, %1;" : : "n"(kId), "n"(kThreads) : "memory");
}

// Two fp32 values to two E4M3 bytes (lo in the low byte), round-to-nearest-even, saturating at 448.
CUTE_DEVICE uint32_t pack_e4m3x2(float lo, float hi) {
  uint16_t packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
  return packed;
}

// Two E4M3 bytes (as pack_e4m3x2 packs them, lo in the low byte) back to fp32, exactly.
CUTE_DEVICE float2 unpack_e4m3x2(uint32_t packed) {
  uint32_t halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(static_cast<uint16_t>(packed)));
  float2 values;
  asm("{\n .reg .f16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.f32.f16 %0, lo;\n cvt.f32.f16 %1, hi;\n}"
      : "=f"(values.x), "=f"(values.y) : "r"(halves));
  return values;
}

// Four 8x8 b16 matrices from shared memory, transposed (ldmatrix .trans): the V transpose's loads.
CUTE_DEVICE void ldsm_x4_trans(uint32_t smem_address, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address));
}

// Four 8x8 b16 matrices to shared memory (stmatrix): the V transpose's stores.
CUTE_DEVICE void stsm_x4(uint32_t smem_address, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_address), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3));
}

}  // namespace fp8attn::sm90
