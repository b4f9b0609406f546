// fp8attn: CPU reference implementations, the ground truth the GPU tests compare against.
//
// Both take the same fp8attn_fwd_params a GPU call takes, but with HOST pointers (k/v as E4M3 bytes, q as E4M3
// bytes or fp16/bf16 bits, cu_seqlens/seqused/block_table/descales/sink as host arrays, same strides). They ignore
// out/lse in the params and write dense fp64 results instead:
//   out: [total_rows, num_heads_q, head_dim_v] where total_rows = batch * seqlen_q (dense) or total_q
//        (varlen); row r of sequence b is at cu_seqlens_q[b] + r (varlen) or b * seqlen_q + r (dense)
//   lse: [num_heads_q, total_rows] (natural log; -inf for rows with no visible key and no sink)
// Rows past a sequence's length (varlen padding up to total_q) are never written: they hold NaN.
//
//   kExact:     fp64 attention on the FP8-decoded inputs, descales applied (the reference of docs/accuracy.md);
//               a 16-bit q is used unquantized.
//   kEmulation: the kernel's precision: scores in fp32 with folded descales, P = exp2(s - m + 8)
//               rounded to E4M3 before PV (row max over the whole row), fp32 accumulation, the output
//               normalised by the sum of the rounded P (the kernel's P x ones) and v_descale, the LSE from
//               the sum of the unrounded P. A 16-bit q is quantized per (token, head) row as the kernel will
//               (issue 35): E4M3(q * 448 / amax(row)), the scale amax / 448 multiplying the row's scores. The
//               error bar (docs/accuracy.md) is
//               max|out - exact| <= 2 * max|emulation - exact| + 2 ulp(bf16).
#pragma once

#include <cstdint>
#include <vector>

#include "fp8attn/params.h"
#include "fp8attn/status.h"

namespace fp8attn {
namespace ref {

// ---- E4M3 (OCP FP8, "fn": no infinities, S.1111.111 is NaN, max finite 448) ----
// Round-to-nearest-even; finite values beyond 448 saturate to +-448 (satfinite, as the GPU cvt does);
// NaN maps to NaN (0x7F with the sign).
uint8_t float_to_e4m3(float x);
float e4m3_to_float(uint8_t bits);
// ---- fp16 / bf16 (round-to-nearest-even) for output comparison ----
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t bits);
uint16_t float_to_f16(float x);
float f16_to_float(uint16_t bits);

enum class Mode { kExact, kEmulation };

struct Result {
  std::vector<double> out;  // [total_rows, num_heads_q, head_dim_v]
  std::vector<double> lse;  // [num_heads_q, total_rows]
  int64_t total_rows = 0;
};

// Runs the reference; the params must already pass fp8attn::validate_fwd (apart from the device check).
Status attention(const fp8attn_fwd_params& host_params, Mode mode, Result* result);

}  // namespace ref
}  // namespace fp8attn
