// Tests of the reference's bit-exact conversions (E4M3, bf16, fp16). Expected values come from the bit
// fields by the textbook formulas in double, or from brute-force nearest-value searches, never from the
// code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reference/reference.h"

namespace fp8attn {
namespace ref {
namespace {

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// (-1)^s * 2^(e - 7) * (1 + m/8) for normals, (-1)^s * 2^-6 * (m/8) for subnormals; NaN for S.1111.111.
double e4m3_from_fields(int code) {
  const int sign = code >> 7;
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude =
      exponent == 0 ? std::pow(2.0, -6) * (mantissa / 8.0) : std::pow(2.0, exponent - 7) * (1.0 + mantissa / 8.0);
  return sign ? -magnitude : magnitude;
}

// The nearest finite E4M3 code to x by exhaustive search (ties to the even code), with satfinite clamping.
uint8_t nearest_e4m3(double x) {
  const double clamped = std::max(-448.0, std::min(448.0, x));
  int best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int code = 0; code < 256; ++code) {
    const double value = e4m3_from_fields(code);
    if (std::isnan(value)) continue;
    if ((value == 0.0) && (std::signbit(value) != std::signbit(clamped))) continue;  // keep the sign of zero
    const double distance = std::fabs(value - clamped);
    if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(E4m3, DecodesEveryCodeToItsDocumentedValue) {
  for (int code = 0; code < 256; ++code) {
    const double expected = e4m3_from_fields(code);
    const float decoded = e4m3_to_float(static_cast<uint8_t>(code));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(decoded)) << "code 0x" << std::hex << code;
    } else {
      EXPECT_EQ(static_cast<double>(decoded), expected) << "code 0x" << std::hex << code;
      EXPECT_EQ(std::signbit(decoded), (code & 0x80) != 0) << "code 0x" << std::hex << code;
    }
  }
}

TEST(E4m3, LandmarkValues) {
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);         // largest finite
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_float(0x08), 0.015625f);      // smallest normal, 2^-6
  EXPECT_EQ(e4m3_to_float(0x07), 0.013671875f);   // largest subnormal, 7 * 2^-9
  EXPECT_EQ(e4m3_to_float(0x01), 0.001953125f);   // smallest subnormal, 2^-9
  EXPECT_EQ(e4m3_to_float(0x78), 256.0f);         // 2^8: the kernel's P at the row max
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));  // -0
}

TEST(E4m3, PositiveCodesIncreaseStrictly) {
  for (int code = 1; code <= 0x7E; ++code) {
    EXPECT_LT(e4m3_to_float(static_cast<uint8_t>(code - 1)), e4m3_to_float(static_cast<uint8_t>(code)))
        << "code 0x" << std::hex << code;
  }
}

TEST(E4m3, EncodeInvertsDecodeForEveryNonNaNCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(code))), code) << "code 0x" << std::hex << code;
  }
}

// Every midpoint between neighbouring codes (subnormal, normal, across binades) rounds to the even code;
// one fp32 ulp either side rounds to the nearer code.
TEST(E4m3, MidpointsRoundToEvenAndNeighboursToNearest) {
  for (int sign = 0; sign <= 0x80; sign += 0x80) {
    for (int code = 0; code < 0x7E; ++code) {
      const int lower = sign | code;
      const int upper = sign | (code + 1);
      const float a = e4m3_to_float(static_cast<uint8_t>(lower));
      const float b = e4m3_to_float(static_cast<uint8_t>(upper));
      const float midpoint = (a + b) / 2;  // exact: E4M3 needs 4 significant bits, the midpoint 5
      ASSERT_EQ(static_cast<double>(midpoint), (static_cast<double>(a) + b) / 2);
      const int even = (lower & 1) == 0 ? lower : upper;
      EXPECT_EQ(float_to_e4m3(midpoint), even) << "midpoint of 0x" << std::hex << lower << " and 0x" << upper;
      EXPECT_EQ(float_to_e4m3(std::nextafter(midpoint, a)), lower) << "just toward 0x" << std::hex << lower;
      EXPECT_EQ(float_to_e4m3(std::nextafter(midpoint, b)), upper) << "just toward 0x" << std::hex << upper;
    }
  }
  // A few by hand: 1.0625 is halfway between 1 (0x38, even) and 1.125 (0x39); 1.1875 between 0x39 and 0x3A.
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);
  EXPECT_EQ(float_to_e4m3(0.0009765625f), 0x00);  // 2^-10, half the smallest subnormal: ties to +0
  EXPECT_EQ(float_to_e4m3(0.0029296875f), 0x02);  // 1.5 * 2^-9: ties to 2 * 2^-9
  EXPECT_EQ(float_to_e4m3(248.0f), 0x78);         // between 240 (0x77) and 256 (0x78, even)
  EXPECT_EQ(float_to_e4m3(-248.0f), 0xF8);
  EXPECT_EQ(float_to_e4m3(232.0f), 0x76);         // between 224 (0x76, even) and 240 (0x77)
}

TEST(E4m3, SaturatesFiniteOverflowAndInfinity) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(449.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7E);  // the midpoint to the would-be 480 must not become the NaN code
  EXPECT_EQ(float_to_e4m3(500.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(1e6f), 0x7E);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_e4m3(-500.0f), 0xFE);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
}

TEST(E4m3, NaNStaysNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(float_to_e4m3(nan), 0x7F);
  EXPECT_EQ(float_to_e4m3(-nan), 0xFF);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::signaling_NaN()) & 0x7F, 0x7F);
}

TEST(E4m3, SubnormalsAndUnderflow) {
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(0.001953125f), 0x01);          // 2^-9
  EXPECT_EQ(float_to_e4m3(0.0009765626f), 0x01);         // just above 2^-10 rounds up
  EXPECT_EQ(float_to_e4m3(0.0009765624f), 0x00);         // just below rounds to zero
  EXPECT_EQ(float_to_e4m3(0.015625f * 0.9375f), 0x08);   // 0.9375 * 2^-6 = 7.5 * 2^-9: ties to 8 (smallest normal)
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::min()), 0x80);
}

TEST(E4m3, RandomValuesRoundToTheNearestCode) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> exponent(-12.0f, 10.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < 100000; ++i) {
    const float x = (sign(rng) ? -1.0f : 1.0f) * std::exp2(exponent(rng));
    ASSERT_EQ(float_to_e4m3(x), nearest_e4m3(x)) << "x = " << x;
  }
}

TEST(Bf16, RoundTripsEveryNonNaNCode) {
  for (int code = 0; code < 0x10000; ++code) {
    const float value = bf16_to_float(static_cast<uint16_t>(code));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(value))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(value), code) << "code 0x" << std::hex << code;
  }
}

TEST(Bf16, LandmarksTiesAndOverflow) {
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC040), -3.0f);
  // 1 + 2^-8 is halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81); 1 + 3 * 2^-8 between 0x3F81 and 0x3F82.
  EXPECT_EQ(float_to_bf16(1.0f + 0.00390625f), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0.00390625f), 0x3F82);
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + 0.00390625f, 2.0f)), 0x3F81);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past the largest bf16
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);  // 2^-149 is below half of 2^-133
  EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -133)), 0x0001);                    // smallest bf16 subnormal
  const uint16_t nan = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
}

TEST(Bf16, RandomValuesRoundToTheNearerNeighbour) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = value(rng);
    // The two bf16 neighbours of x: x truncated toward zero, and one bf16 ulp further from zero.
    const uint16_t toward_zero = static_cast<uint16_t>(bits_of(x) >> 16);
    const uint16_t away = static_cast<uint16_t>(toward_zero + 1);
    const double d_toward = std::fabs(static_cast<double>(x) - bf16_to_float(toward_zero));
    const double d_away = std::fabs(static_cast<double>(x) - bf16_to_float(away));
    const uint16_t expected =
        d_toward < d_away || (d_toward == d_away && (toward_zero & 1) == 0) ? toward_zero : away;
    ASSERT_EQ(float_to_bf16(x), expected) << "x = " << x;
  }
}

TEST(F16, DecodesFromFieldsAndRoundTripsEveryNonNaNCode) {
  for (int code = 0; code < 0x10000; ++code) {
    const int exponent = (code >> 10) & 0x1F;
    const int mantissa = code & 0x3FF;
    const double sign = (code & 0x8000) ? -1.0 : 1.0;
    const float value = f16_to_float(static_cast<uint16_t>(code));
    if (exponent == 0x1F) {
      if (mantissa == 0) {
        EXPECT_EQ(value, static_cast<float>(sign * std::numeric_limits<double>::infinity()));
        EXPECT_EQ(float_to_f16(value), code);
      } else {
        EXPECT_TRUE(std::isnan(value));
        EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(value))));
      }
      continue;
    }
    const double expected = exponent == 0 ? sign * std::pow(2.0, -14) * (mantissa / 1024.0)
                                          : sign * std::pow(2.0, exponent - 15) * (1.0 + mantissa / 1024.0);
    ASSERT_EQ(static_cast<double>(value), expected) << "code 0x" << std::hex << code;
    ASSERT_EQ(float_to_f16(value), code) << "code 0x" << std::hex << code;
  }
}

TEST(F16, MidpointsRoundToEvenAndOverflowToInfinity) {
  for (int code = 0; code < 0x7BFF; ++code) {
    const float a = f16_to_float(static_cast<uint16_t>(code));
    const float b = f16_to_float(static_cast<uint16_t>(code + 1));
    const float midpoint = (a + b) / 2;  // exact in fp32 (12 significant bits)
    const int even = (code & 1) == 0 ? code : code + 1;
    ASSERT_EQ(float_to_f16(midpoint), even) << "midpoint after 0x" << std::hex << code;
    ASSERT_EQ(float_to_f16(std::nextafter(midpoint, a)), code) << "below midpoint after 0x" << std::hex << code;
    ASSERT_EQ(float_to_f16(std::nextafter(midpoint, b)), code + 1) << "above midpoint after 0x" << std::hex << code;
  }
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);                        // largest finite
  EXPECT_EQ(float_to_f16(65519.996f), 0x7BFF);                      // below the midpoint to 65536
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);                        // the midpoint ties to "even" infinity
  EXPECT_EQ(float_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);           // half the smallest subnormal: ties to 0
  EXPECT_EQ(float_to_f16(std::ldexp(1.5f, -25)), 0x0001);           // above half: rounds up
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7C00, 0x7C00);
  EXPECT_NE(float_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x03FF, 0);
}

}  // namespace
}  // namespace ref
}  // namespace fp8attn
