// fp8attn reference: bit-exact conversions between fp32 and E4M3 / bf16 / fp16.
//
// Written on the integer bit fields rather than on compiler FP8/half types, so that the ground truth does
// not depend on which compiler or library version rounds (their rounding and saturation rules differ).
// E4M3 here is OCP "fn": bias 7, no infinities, S.1111.111 is NaN, largest finite 448 (S.1111.110),
// subnormals m * 2^-9.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "reference/reference.h"

namespace fp8attn {
namespace ref {
namespace {

constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32Infinity = 0x7F800000u;
constexpr int kF32MantissaBits = 23;
constexpr int kF32ExponentBias = 127;

constexpr uint8_t kE4m3SignBit = 0x80;
constexpr uint8_t kE4m3MaxFinite = 0x7E;  // 448
constexpr uint8_t kE4m3NaN = 0x7F;
constexpr int kE4m3MantissaBits = 3;
constexpr int kE4m3MinNormalExponent = -6;
// |x| >= 2^9 saturates without rounding (it is past 448 whatever the mantissa).
constexpr int kE4m3SaturateExponent = 9;

constexpr uint16_t kF16SignBit = 0x8000;
constexpr uint16_t kF16Infinity = 0x7C00;
constexpr uint16_t kF16QuietNaN = 0x7E00;
constexpr int kF16MantissaBits = 10;
constexpr int kF16MinNormalExponent = -14;
// |x| >= 2^16 is past the largest finite fp16 (65504) and past the rounding midpoint 65520: infinity.
constexpr int kF16OverflowExponent = 16;

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

float float_of(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// value / 2^shift rounded to the nearest integer, ties to even.
uint32_t shift_right_round_even(uint32_t value, int shift) {
  // Callers pass value < 2^24, so for shifts this large the quotient is below one half: zero.
  if (shift >= 32) return 0;
  const uint32_t kept = value >> shift;
  const uint32_t dropped = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const bool round_up = dropped > half || (dropped == half && (kept & 1u));
  return kept + (round_up ? 1u : 0u);
}

// Rounds a finite fp32 magnitude (sign bit clear) into a smaller IEEE-style binary format with
// `mantissa_bits` stored mantissa bits and smallest normal exponent `min_normal_exponent`, and returns its
// code (biased exponent << mantissa_bits | mantissa). A carry out of the mantissa moves into the exponent
// field, as it must; the caller handles codes past the format's largest finite value.
uint32_t round_magnitude(uint32_t abs_bits, int mantissa_bits, int min_normal_exponent) {
  const int biased_exponent = static_cast<int>(abs_bits >> kF32MantissaBits);
  // fp32 zeros and subnormals (< 2^-126) are far below half the smallest subnormal of E4M3 and fp16.
  if (biased_exponent == 0) return 0;
  const int exponent = biased_exponent - kF32ExponentBias;
  const uint32_t significand = (abs_bits & ((1u << kF32MantissaBits) - 1)) | (1u << kF32MantissaBits);
  const int dropped_bits = kF32MantissaBits - mantissa_bits;
  if (exponent >= min_normal_exponent) {
    // The rounded significand is in [2^m, 2^(m+1)]; its implicit bit adds the final 1 to the exponent field.
    const uint32_t exponent_field_minus_one = static_cast<uint32_t>(exponent - min_normal_exponent);
    return (exponent_field_minus_one << mantissa_bits) + shift_right_round_even(significand, dropped_bits);
  }
  // Subnormal: count in units of the smallest subnormal, 2^(min_normal_exponent - mantissa_bits).
  return shift_right_round_even(significand, dropped_bits + (min_normal_exponent - exponent));
}

float signed_value(bool negative, float magnitude) { return negative ? -magnitude : magnitude; }

}  // namespace

uint8_t float_to_e4m3(float x) {
  const uint32_t bits = bits_of(x);
  const uint32_t sign = (bits >> 31) ? kE4m3SignBit : 0u;
  const uint32_t abs_bits = bits & kF32AbsMask;
  uint32_t magnitude;
  if (abs_bits > kF32Infinity) {
    magnitude = kE4m3NaN;
  } else if (static_cast<int>(abs_bits >> kF32MantissaBits) - kF32ExponentBias >= kE4m3SaturateExponent) {
    magnitude = kE4m3MaxFinite;  // satfinite: finite overflow and infinities clamp to the largest finite value
  } else {
    // Values in (448, 512) may round to 0x7F (the NaN code) or 0x80; satfinite keeps them at 448.
    magnitude = std::min<uint32_t>(round_magnitude(abs_bits, kE4m3MantissaBits, kE4m3MinNormalExponent),
                                   kE4m3MaxFinite);
  }
  return static_cast<uint8_t>(sign | magnitude);
}

float e4m3_to_float(uint8_t bits) {
  const bool negative = (bits & kE4m3SignBit) != 0;
  const int exponent_field = (bits >> kE4m3MantissaBits) & 0xF;
  const int mantissa = bits & 0x7;
  if ((bits & ~kE4m3SignBit) == kE4m3NaN) {
    return signed_value(negative, std::numeric_limits<float>::quiet_NaN());
  }
  if (exponent_field == 0) return signed_value(negative, std::ldexp(static_cast<float>(mantissa), -9));
  // (1 + mantissa/8) * 2^(exponent_field - 7) = (8 + mantissa) * 2^(exponent_field - 10)
  return signed_value(negative, std::ldexp(static_cast<float>(8 + mantissa), exponent_field - 10));
}

uint16_t float_to_bf16(float x) {
  const uint32_t bits = bits_of(x);
  // NaN: keep the sign and the top payload bits, and set the quiet bit so that truncation cannot make it inf.
  if ((bits & kF32AbsMask) > kF32Infinity) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // bf16 is the top half of fp32: add just under half of the dropped range, plus the kept LSB for ties.
  // Finite values past the largest bf16 correctly carry into the infinity code.
  const uint32_t kept_lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + kept_lsb) >> 16);
}

float bf16_to_float(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_f16(float x) {
  const uint32_t bits = bits_of(x);
  const uint32_t sign = (bits >> 31) ? kF16SignBit : 0u;
  const uint32_t abs_bits = bits & kF32AbsMask;
  uint32_t magnitude;
  if (abs_bits > kF32Infinity) {
    magnitude = kF16QuietNaN;
  } else if (static_cast<int>(abs_bits >> kF32MantissaBits) - kF32ExponentBias >= kF16OverflowExponent) {
    magnitude = kF16Infinity;
  } else {
    // Below 2^16 the largest possible rounding result is 2^16 itself, whose code is exactly the infinity
    // code: round-to-nearest-even overflow needs no special case.
    magnitude = round_magnitude(abs_bits, kF16MantissaBits, kF16MinNormalExponent);
  }
  return static_cast<uint16_t>(sign | magnitude);
}

float f16_to_float(uint16_t bits) {
  const bool negative = (bits & kF16SignBit) != 0;
  const int exponent_field = (bits >> kF16MantissaBits) & 0x1F;
  const int mantissa = bits & 0x3FF;
  if (exponent_field == 0x1F) {
    return signed_value(negative, mantissa ? std::numeric_limits<float>::quiet_NaN()
                                           : std::numeric_limits<float>::infinity());
  }
  if (exponent_field == 0) return signed_value(negative, std::ldexp(static_cast<float>(mantissa), -24));
  return signed_value(negative, std::ldexp(static_cast<float>(1024 + mantissa), exponent_field - 25));
}

}  // namespace ref
}  // namespace fp8attn
