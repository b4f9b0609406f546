// fp8attn SM90 forward: online softmax in exp2 with the FP8 2^8 offset.
//
// P = exp2(s * scale_log2 - (m * scale_log2 - 8)) lies in [0, 256] instead of [0, 1]: E4M3 has 3 mantissa
// bits and a smallest normal of 2^-6, so without the offset most of P would round to subnormals or zero.
// O and the row sum carry the same 2^8, so it cancels in O / sum; finalize() takes it out of the LSE.
// scale_log2 = softmax_scale * log2(e) * q_descale * k_descale: the descales cost nothing per element.
//
// Two row sums: row_sum, of P in fp32 as computed, gives the LSE (log of the exact denominator); pv_sum, of P
// as rounded to E4M3 (what P V multiplied; the MMA warpgroups get it from a P x ones GEMM, see
// mainloop_mma.cuh), normalises O. Rounding P to nearest E4M3 loses mass on average (by ~0.1% on long rows),
// and dividing P_rounded V by the sum of the unrounded P carried that loss into O as a downward bias; divided by
// the sum of the same rounded weights, O is an exact weighted mean of V rows.
#pragma once

#include <cute/tensor.hpp>

#include "sm90/utils.cuh"

namespace fp8attn::sm90 {

constexpr float kFp8MaxOffset = 8.f;  // log2 of the P bias
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A 16-bit Q's per-row scale (amax / 448, quantize_q.cuh) multiplies every score of its row. Each softmax step
// takes the scales of the thread's two rows: UniformRowScale (E4M3 Q: 1, which the compiler folds away, so the
// E4M3 kernels compile as without it) or QRowScale (the q16 kernels: read from shared memory where used, once per
// KV block, not held in registers through the loop, which the 64-row d192 kernel does not have).
struct UniformRowScale {
  CUTE_DEVICE float operator[](int) const { return 1.f; }
};
struct QRowScale {
  float value[2];
  CUTE_DEVICE float operator[](int h) const { return value[h]; }
};

// Per thread: the two accumulator rows it holds (row halves h = 0, 1 of its quad).
struct OnlineSoftmax {
  float row_max[2];  // raw score units; -inf until a visible key is seen
  float row_sum[2];  // this thread's share of sum(P), relative to the current row_max
  float pv_sum[2];   // the whole row's sum of P rounded to E4M3, relative to the row_max of the folded blocks
  float scale_log2;
  float softcap_tanh_scale;  // 0: no softcap; else scores become tanh(score * this) (capped, see softcap())

  // scale_log2 multiplies the scores (raw, or capped) in the exponent. Softcap c: logit = c * tanh(s * a) with
  // a = softmax_scale * descales / c, so the scores become t = tanh(s * a) and scale_log2 = c * log2(e).
  CUTE_DEVICE OnlineSoftmax(float scale_log2_, float softcap_tanh_scale_)
      : scale_log2(scale_log2_), softcap_tanh_scale(softcap_tanh_scale_) {
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      row_max[h] = -INFINITY;
      row_sum[h] = 0.f;
      pv_sum[h] = 0.f;
    }
  }

  // Turns scores into P in place (tSrS: an accumulator fragment, AccumulatorIndex) and returns, per row, the factor the
  // caller must apply to O for the new maximum. Two instruction orders, chosen per kernel by measurement
  // (Traits::kSoftmaxRowHalvesInterleaved): kRowHalvesInterleaved = false takes row half 0's maximum and
  // exponentials, then row half 1's; true takes both maxima first (each as a tree of FMNMX), then the
  // exponentials of both halves interleaved. The instruction counts are equal; the order is ptxas's schedule.
  // The exponent's multiplier of row half h's scores: a row scale joins it when the scores are raw, the tanh's
  // when they are capped (softcap()).
  template <class RowScale>
  CUTE_DEVICE float row_scale_log2(const RowScale& q_scale, int h) const {
    return softcap_tanh_scale != 0.f ? scale_log2 : scale_log2 * q_scale[h];
  }

  // Row h's maximum raised to include block_max (already reduced over the row's threads), in raw score units.
  // Returns the factor for O and what went before, and sets the exponent's offset m * scale - 8 for the block's P.
  // A row with no visible key yet keeps -inf and uses 0 as its reference, so no -inf - -inf = NaN appears.
  CUTE_DEVICE float raise_max(int h, float block_max, float scale, float& exp_offset) {
    const float new_max = fmaxf(row_max[h], block_max);
    const float max_ref = new_max == -INFINITY ? 0.f : new_max;
    const float o_rescale = exp2_approx((row_max[h] - max_ref) * scale);
    row_max[h] = new_max;
    exp_offset = max_ref * scale - kFp8MaxOffset;
    return o_rescale;
  }

  template <bool kRowHalvesInterleaved, class TensorS, class RowScale>
  CUTE_DEVICE void online(TensorS& tSrS, float (&o_rescale)[2], const RowScale& q_scale) {
    using Acc = AccumulatorIndex;
    constexpr int kBlocks = decltype(size(tSrS))::value / Acc::kValuesPerBlock;  // n8 blocks
    const float scale[2] = {row_scale_log2(q_scale, 0), row_scale_log2(q_scale, 1)};
    float exp_offset[2];  // m * scale_log2 - 8 per row half
    // The larger of the two scores of row half h in n8 block j.
    auto pair_max = [&](int h, int j) { return fmaxf(tSrS(Acc::of(0, h, j)), tSrS(Acc::of(1, h, j))); };
    // Row half h: the new maximum over the quad, the factor for O, and the offset of the exponentials.
    auto update_max = [&](int h, float block_max) {
      o_rescale[h] = raise_max(h, quad_allreduce_max(block_max), scale[h], exp_offset[h]);
    };
    auto exponentiate = [&](int h, int j, float& sum) {  // the n8 block j of row half h; its P added to sum
      CUTE_UNROLL
      for (int c = 0; c < 2; ++c) {
        float& s = tSrS(Acc::of(c, h, j));
        s = exp2_approx(fmaf(s, scale[h], -exp_offset[h]));
        sum += s;
      }
    };
    if constexpr (!kRowHalvesInterleaved) {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        float block_max = -INFINITY;
        CUTE_UNROLL
        for (int j = 0; j < kBlocks; ++j) { block_max = fmaxf(block_max, pair_max(h, j)); }
        update_max(h, block_max);
        float sum = 0.f;
        CUTE_UNROLL
        for (int j = 0; j < kBlocks; ++j) { exponentiate(h, j, sum); }
        row_sum[h] = fmaf(row_sum[h], o_rescale[h], sum);
      }
    } else {
      CUTE_UNROLL
      for (int h = 0; h < 2; ++h) {
        float block_max[kBlocks];
        CUTE_UNROLL
        for (int j = 0; j < kBlocks; ++j) { block_max[j] = pair_max(h, j); }
        CUTE_UNROLL
        for (int stride = 1; stride < kBlocks; stride *= 2) {
          CUTE_UNROLL
          for (int j = 0; j + stride < kBlocks; j += 2 * stride) {
            block_max[j] = fmaxf(block_max[j], block_max[j + stride]);
          }
        }
        update_max(h, block_max[0]);
        row_sum[h] *= o_rescale[h];
      }
      CUTE_UNROLL
      for (int j = 0; j < kBlocks; ++j) {
        CUTE_UNROLL
        for (int h = 0; h < 2; ++h) { exponentiate(h, j, row_sum[h]); }
      }
    }
  }

  // Softcap: one multiply and one MUFU.TANH per score, before the mask (a masked score must stay -inf, and
  // tanh(-inf) = -1 would not). The row maximum and the LSE are then of the capped logits / c, as the
  // exponent's scale_log2 = c * log2(e) expects.
  template <class TensorS, class RowScale>
  CUTE_DEVICE void softcap(TensorS& tSrS, const RowScale& q_scale) const {
    const float scale[2] = {softcap_tanh_scale * q_scale[0], softcap_tanh_scale * q_scale[1]};
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) { tSrS(i) = tanh_approx(tSrS(i) * scale[AccumulatorIndex::row_half(i)]); }
  }

  // Folds one block's sum of rounded P (the same for every thread of the row) like O: sum * rescale + tile.
  CUTE_DEVICE void fold_pv_sum(const float (&o_rescale)[2], const float (&tile_pv_sum)[2]) {
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) { pv_sum[h] = fmaf(pv_sum[h], o_rescale[h], tile_pv_sum[h]); }
  }

  // After the last KV block: the per-row factor that turns O into the output (v_descale / sum, 0 for an
  // empty row) and the natural-log LSE. sink_log2[h] = sink * log2(e) of the row's q head, or -inf without a
  // sink. The sink joins the denominator only: exp(sink) relative to the reference point 2^(m*scale_log2 - 8) of P.
  template <class RowScale>
  CUTE_DEVICE void finalize(float v_descale, const float (&sink_log2)[2], const RowScale& q_scale, float (&o_scale)[2],
                            float (&lse)[2]) const {
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      float sum = quad_allreduce_sum(row_sum[h]);
      float o_sum = pv_sum[h];
      float reference = row_max[h] == -INFINITY ? -INFINITY : row_max[h] * row_scale_log2(q_scale, h) - kFp8MaxOffset;
      float factor = 1.f;
      if (sink_log2[h] != -INFINITY) {
        // Move the reference up if the sink dominates, so exp2 stays finite.
        const float new_reference = fmaxf(reference, sink_log2[h] - kFp8MaxOffset);
        factor = exp2_approx(reference - new_reference);
        const float sink_p = exp2_approx(sink_log2[h] - new_reference);
        sum = fmaf(sum, factor, sink_p);
        o_sum = fmaf(o_sum, factor, sink_p);
        reference = new_reference;
      }
      const bool empty = !(sum > 0.f) || !(o_sum > 0.f);
      o_scale[h] = empty ? 0.f : factor * v_descale / o_sum;
      lse[h] = empty ? -INFINITY : (reference + __log2f(sum)) * kLn2;
    }
  }
};

}  // namespace fp8attn::sm90
