// Tests of the CPU reference attention. The small cases are checked against numbers worked out in the
// test itself from the definition softmax(l)_j = exp(l_j) / (sum_k exp(l_k) + exp(sink)), with logits
// chosen by hand; the larger random cases check properties (paged == dense, batched == alone, the size
// of the emulation's error) rather than a second implementation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "reference/reference.h"

namespace fp8attn {
namespace ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint8_t kE4m3NaN = 0x7F;

struct Shape {
  int batch = 1;
  int seqlen_q = 1;
  int seqlen_k = 1;
  int heads_q = 1;
  int heads_kv = 1;
  int d = 1;
  int dv = 1;
};

// Encodes values that E4M3 represents exactly (the tests choose them so); anything else is a test bug.
std::vector<uint8_t> e4m3_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes;
  for (float value : values) {
    bytes.push_back(float_to_e4m3(value));
    EXPECT_EQ(e4m3_to_float(bytes.back()), value) << "test value is not exact in E4M3";
  }
  return bytes;
}

// Element index in a contiguous [batch, seqlen, heads, dim] tensor.
size_t at(int seqlen, int heads, int dim, int b, int row, int head, int c) {
  return ((static_cast<size_t>(b) * seqlen + row) * heads + head) * dim + c;
}
size_t q_at(const Shape& s, int b, int row, int head, int c) { return at(s.seqlen_q, s.heads_q, s.d, b, row, head, c); }
size_t k_at(const Shape& s, int b, int key, int head, int c) { return at(s.seqlen_k, s.heads_kv, s.d, b, key, head, c); }
size_t v_at(const Shape& s, int b, int key, int head, int c) { return at(s.seqlen_k, s.heads_kv, s.dv, b, key, head, c); }

// A sample of N(mean, 1) rounded to E4M3.
float random_e4m3(std::mt19937& rng, double mean = 0.0) {
  std::normal_distribution<float> normal(static_cast<float>(mean), 1.0f);
  return e4m3_to_float(float_to_e4m3(normal(rng)));
}

// Holds the FP8 tensors a dense params struct points to.
struct DenseInputs {
  Shape shape;
  std::vector<float> q, k, v;  // E4M3-exact values, contiguous [batch, seqlen, heads, dim]
  std::vector<uint8_t> q8, k8, v8;

  explicit DenseInputs(const Shape& s)
      : shape(s),
        q(static_cast<size_t>(s.batch) * s.seqlen_q * s.heads_q * s.d, 0.0f),
        k(static_cast<size_t>(s.batch) * s.seqlen_k * s.heads_kv * s.d, 0.0f),
        v(static_cast<size_t>(s.batch) * s.seqlen_k * s.heads_kv * s.dv, 0.0f) {}

  // Random E4M3 inputs: q, k ~ N(0, 1), v ~ N(0.5, 1).
  void fill_random(std::mt19937& rng) {
    for (float& x : q) x = random_e4m3(rng);
    for (float& x : k) x = random_e4m3(rng);
    for (float& x : v) x = random_e4m3(rng, 0.5);
  }

  // Encodes q/k/v (call after filling them) and returns params for contiguous dense tensors.
  fp8attn_fwd_params params() {
    q8 = e4m3_bytes(q);
    k8 = e4m3_bytes(k);
    v8 = e4m3_bytes(v);
    const Shape& s = shape;
    fp8attn_fwd_params p{};
    p.q = q8.data();
    p.k = k8.data();
    p.v = v8.data();
    p.q_dtype = p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E4M3;
    p.out_dtype = FP8ATTN_DTYPE_BF16;
    p.q_head_stride = s.d;
    p.q_row_stride = static_cast<int64_t>(s.heads_q) * s.d;
    p.q_batch_stride = p.q_row_stride * s.seqlen_q;
    p.k_head_stride = s.d;
    p.k_row_stride = static_cast<int64_t>(s.heads_kv) * s.d;
    p.k_batch_stride = p.k_row_stride * s.seqlen_k;
    p.v_head_stride = s.dv;
    p.v_row_stride = static_cast<int64_t>(s.heads_kv) * s.dv;
    p.v_batch_stride = p.v_row_stride * s.seqlen_k;
    p.batch = s.batch;
    p.seqlen_q = s.seqlen_q;
    p.seqlen_k = s.seqlen_k;
    p.num_heads_q = s.heads_q;
    p.num_heads_kv = s.heads_kv;
    p.head_dim = s.d;
    p.head_dim_v = s.dv;
    p.softmax_scale = 1.0f;
    p.window_left = -1;
    p.window_right = -1;
    return p;
  }
};

Result run(const fp8attn_fwd_params& params, Mode mode) {
  Result result;
  const Status status = attention(params, mode, &result);
  EXPECT_TRUE(status.ok()) << status.message();
  return result;
}

double out_at(const Result& r, int heads_q, int dv, int64_t row, int head, int c) {
  return r.out[(static_cast<size_t>(row) * heads_q + head) * dv + c];
}
double lse_at(const Result& r, int64_t row, int head) { return r.lse[static_cast<size_t>(head) * r.total_rows + row]; }

// The textbook definition: out = sum_j w_j values_j, w_j = exp(l_j) / Z, Z = sum_j exp(l_j) + exp(sink),
// lse = log Z. (The logits in these tests are small, so no max subtraction is needed.)
struct Softmax {
  std::vector<double> out;
  double lse = 0.0;
};
Softmax softmax_average(const std::vector<double>& logits, const std::vector<std::vector<double>>& values,
                        double sink = -kInf) {
  double z = std::exp(sink);
  for (double logit : logits) z += std::exp(logit);
  Softmax result;
  result.out.assign(values.empty() ? 0 : values[0].size(), 0.0);
  for (size_t j = 0; j < logits.size(); ++j) {
    for (size_t c = 0; c < result.out.size(); ++c) result.out[c] += std::exp(logits[j]) / z * values[j][c];
  }
  result.lse = std::log(z);
  return result;
}

// ---------------------------------------------------------------------------------------------------
// Plain attention, batch and head indexing, GQA

TEST(Reference, OneQueryTwoKeysExact) {
  Shape s;
  s.seqlen_k = 2;
  s.d = 2;
  s.dv = 2;
  DenseInputs in(s);
  in.q = {1, 2};
  in.k = {1, 0.5f, /* key 1 */ 0.5f, -1};  // q.k = 2 and -1.5
  in.v = {1, -2, /* key 1 */ 4, 0.5f};
  fp8attn_fwd_params p = in.params();
  p.softmax_scale = 0.5f;  // logits 1 and -0.75
  const Softmax expected = softmax_average({1.0, -0.75}, {{1, -2}, {4, 0.5}});

  const Result r = run(p, Mode::kExact);
  ASSERT_EQ(r.total_rows, 1);
  EXPECT_NEAR(out_at(r, 1, 2, 0, 0, 0), expected.out[0], 1e-12);
  EXPECT_NEAR(out_at(r, 1, 2, 0, 0, 1), expected.out[1], 1e-12);
  EXPECT_NEAR(lse_at(r, 0, 0), expected.lse, 1e-12);
}

TEST(Reference, EmulationRoundsPToE4m3) {
  Shape s;
  s.seqlen_k = 2;
  s.d = 2;
  s.dv = 2;
  DenseInputs in(s);
  in.q = {1, 2};
  in.k = {1, 0.5f, 0.5f, -1};
  in.v = {1, -2, 4, 0.5f};
  fp8attn_fwd_params p = in.params();
  p.softmax_scale = 0.5f;
  // The kernel's P: 2^8 at the row max (key 0), 2^(8 - 1.75 log2 e) = 44.49 for key 1. E4M3 steps by 4 in
  // [32, 64), so P8 = 44. The output is normalised by the sum of the rounded P (the kernel's P x ones); the
  // LSE by the exact one.
  const double p1 = std::exp2(8.0 - 1.75 / std::log(2.0));
  ASSERT_GT(p1, 44.0);
  ASSERT_LT(p1, 46.0);
  const double sum = 256.0 + 44.0;
  const Result r = run(p, Mode::kEmulation);
  EXPECT_NEAR(out_at(r, 1, 2, 0, 0, 0), (256.0 * 1 + 44.0 * 4) / sum, 1e-5);
  EXPECT_NEAR(out_at(r, 1, 2, 0, 0, 1), (256.0 * -2 + 44.0 * 0.5) / sum, 1e-5);
  EXPECT_NEAR(lse_at(r, 0, 0), std::log(std::exp(1.0) + std::exp(-0.75)), 1e-5);
  // ... and that is measurably not the exact answer.
  const Result exact = run(p, Mode::kExact);
  EXPECT_GT(std::fabs(out_at(r, 1, 2, 0, 0, 0) - out_at(exact, 1, 2, 0, 0, 0)), 1e-4);
}

TEST(Reference, EmulationKeepsSmallPThroughThe2To8Offset) {
  // Logits 0 and -10, values 0 and 1. Key 1's P is 2^8 e^-10 = 0.01162: an E4M3 subnormal (steps of
  // 2^-9) that rounds to 6 * 2^-9. Without the 2^8 offset it would be e^-10, below half of 2^-9: zero.
  Shape s;
  s.seqlen_k = 2;
  DenseInputs in(s);
  in.q = {1};
  in.k = {0, -10};
  in.v = {0, 1};
  const double p1 = 256.0 * std::exp(-10.0);
  ASSERT_GT(p1, 5.5 / 512);
  ASSERT_LT(p1, 6.5 / 512);
  const Result r = run(in.params(), Mode::kEmulation);
  EXPECT_NEAR(out_at(r, 1, 1, 0, 0, 0), (6.0 / 512) / (256.0 + p1), 1e-9);
  EXPECT_NEAR(lse_at(r, 0, 0), std::log(1.0 + std::exp(-10.0)), 1e-6);
}

// ---------------------------------------------------------------------------------------------------
// Softcap: logits l -> c * tanh(l / c) before the softmax (Gemma-2)

TEST(Reference, SoftcapCapsTheLogitsExactly) {
  Shape s;
  s.seqlen_k = 3;
  s.d = 2;
  s.dv = 2;
  DenseInputs in(s);
  in.q = {2, 1};
  in.k = {4, 2, /* key 1 */ -1, 0.5f, /* key 2 */ 0.5f, 0.5f};  // q.k = 10, -1.5, 1.5
  in.v = {1, -2, /* key 1 */ 4, 0.5f, /* key 2 */ -3, 2};
  fp8attn_fwd_params p = in.params();
  p.softmax_scale = 0.5f;  // logits 5, -0.75, 0.75
  p.softcap = 2.0f;        // capped: 2 tanh(2.5), 2 tanh(-0.375), 2 tanh(0.375)
  const Softmax expected = softmax_average({2 * std::tanh(2.5), 2 * std::tanh(-0.375), 2 * std::tanh(0.375)},
                                           {{1, -2}, {4, 0.5}, {-3, 2}});
  const Result r = run(p, Mode::kExact);
  EXPECT_NEAR(out_at(r, 1, 2, 0, 0, 0), expected.out[0], 1e-12);
  EXPECT_NEAR(out_at(r, 1, 2, 0, 0, 1), expected.out[1], 1e-12);
  EXPECT_NEAR(lse_at(r, 0, 0), expected.lse, 1e-12);
  // The emulation caps alike (its error is P's E4M3 rounding only), and the cap changes the answer.
  const Result emulation = run(p, Mode::kEmulation);
  EXPECT_NEAR(lse_at(emulation, 0, 0), expected.lse, 1e-5);
  EXPECT_NEAR(out_at(emulation, 1, 2, 0, 0, 0), expected.out[0], 0.1);
  p.softcap = 0.0f;
  EXPECT_GT(std::fabs(out_at(run(p, Mode::kExact), 1, 2, 0, 0, 0) - expected.out[0]), 0.3);
}

TEST(Reference, SoftcapAppliesToScaledLogitsWithDescales) {
  // The cap applies to softmax_scale * q_descale * k_descale * q.k, not to the raw dot product.
  Shape s;
  s.seqlen_k = 2;
  DenseInputs in(s);
  in.q = {1};
  in.k = {3, -1};
  in.v = {1, 0};
  fp8attn_fwd_params p = in.params();
  const float q_descale = 2.0f, k_descale = 0.5f;
  p.q_descale.ptr = &q_descale;
  p.q_descale.dtype = FP8ATTN_DTYPE_F32;
  p.k_descale.ptr = &k_descale;
  p.k_descale.dtype = FP8ATTN_DTYPE_F32;
  p.softmax_scale = 0.5f;  // logits 1.5 and -0.5
  p.softcap = 1.0f;
  const Softmax expected = softmax_average({std::tanh(1.5), std::tanh(-0.5)}, {{1}, {0}});
  const Result r = run(p, Mode::kExact);
  EXPECT_NEAR(out_at(r, 1, 1, 0, 0, 0), expected.out[0], 1e-12);
  EXPECT_NEAR(lse_at(r, 0, 0), expected.lse, 1e-12);
}

// ---------------------------------------------------------------------------------------------------
// 16-bit q (issue 35): exact on the unquantized values, emulated as the kernel's per-row E4M3 quantization

// One key: the output is v and the LSE is the logit, so the logit the reference used is read off directly.
struct OneKey16BitQ {
  std::vector<uint16_t> q16;
  DenseInputs in{Shape{1, 1, 1, 1, 1, 2, 1}};
  fp8attn_fwd_params params(fp8attn_dtype q_dtype, float q0, float q1) {
    q16 = q_dtype == FP8ATTN_DTYPE_BF16 ? std::vector<uint16_t>{float_to_bf16(q0), float_to_bf16(q1)}
                                        : std::vector<uint16_t>{float_to_f16(q0), float_to_f16(q1)};
    in.k = {2, 4};
    in.v = {1.5f};
    fp8attn_fwd_params p = in.params();
    p.q = q16.data();
    p.q_dtype = q_dtype;
    p.softmax_scale = 0.5f;
    return p;
  }
};

TEST(Reference, SixteenBitQIsExactUnquantizedAndEmulatedPerRow) {
  for (fp8attn_dtype dtype : {FP8ATTN_DTYPE_BF16, FP8ATTN_DTYPE_F16}) {
    SCOPED_TRACE(dtype == FP8ATTN_DTYPE_BF16 ? "bf16" : "fp16");
    OneKey16BitQ one;
    const fp8attn_fwd_params p = one.params(dtype, 1.0f, 0.3f);
    const double q1 =
        dtype == FP8ATTN_DTYPE_BF16 ? bf16_to_float(float_to_bf16(0.3f)) : f16_to_float(float_to_f16(0.3f));
    // Exact: the 16-bit values as they are. Emulation: amax 1, so the row becomes E4M3(q * 448) = {448, 128}
    // (134.4 lies between E4M3's 128 and 144) at scale 1 / 448: q1 counts as 128 / 448 = 0.2857.
    const Result exact = run(p, Mode::kExact);
    EXPECT_NEAR(lse_at(exact, 0, 0), 0.5 * (2 * 1.0 + 4 * q1), 1e-12);
    EXPECT_NEAR(out_at(exact, 1, 1, 0, 0, 0), 1.5, 1e-12);
    const Result emulation = run(p, Mode::kEmulation);
    EXPECT_NEAR(lse_at(emulation, 0, 0), 0.5 * (2 * 1.0 + 4 * 128.0 / 448.0), 1e-5);
    EXPECT_NEAR(out_at(emulation, 1, 1, 0, 0, 0), 1.5, 1e-6);
  }
}

TEST(Reference, SixteenBitQRowOfZerosIsTheUniformAverage) {
  Shape s;
  s.seqlen_k = 3;
  s.d = 2;
  DenseInputs in(s);
  in.k = {1, 2, -3, 4, 0.5f, 0.5f};
  in.v = {1, 2, 6};
  fp8attn_fwd_params p = in.params();
  const std::vector<uint16_t> zeros = {float_to_bf16(0.0f), float_to_bf16(-0.0f)};
  p.q = zeros.data();
  p.q_dtype = FP8ATTN_DTYPE_BF16;
  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const Result r = run(p, mode);
    EXPECT_NEAR(out_at(r, 1, 1, 0, 0, 0), 3.0, 1e-6);  // (1 + 2 + 6) / 3, not NaN
    EXPECT_NEAR(lse_at(r, 0, 0), std::log(3.0), 1e-6);
  }
}

TEST(Reference, BatchesAndHeadsUseTheirOwnRows) {
  Shape s;
  s.batch = 2;
  s.seqlen_k = 2;
  s.heads_q = 2;
  s.heads_kv = 2;
  DenseInputs in(s);
  const float key1[2][2] = {{0.5f, 1}, {-1, 2}};  // q = 1, key 0 = 0: logits 0 and key1[b][h]
  const float value1[2][2] = {{1, 2}, {3, 4}};     // value 0 = 0
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 2; ++h) {
      in.q[q_at(s, b, 0, h, 0)] = 1;
      in.k[k_at(s, b, 1, h, 0)] = key1[b][h];
      in.v[v_at(s, b, 1, h, 0)] = value1[b][h];
    }
  }
  const Result r = run(in.params(), Mode::kExact);
  ASSERT_EQ(r.total_rows, 2);
  for (int b = 0; b < 2; ++b) {
    for (int h = 0; h < 2; ++h) {
      const Softmax expected = softmax_average({0.0, key1[b][h]}, {{0.0}, {value1[b][h]}});
      EXPECT_NEAR(out_at(r, 2, 1, b, h, 0), expected.out[0], 1e-12) << "b " << b << " h " << h;
      EXPECT_NEAR(lse_at(r, b, h), expected.lse, 1e-12) << "b " << b << " h " << h;
    }
  }
}

TEST(Reference, GqaAndMqaMapQHeadsToKvHeadsByDivision) {
  for (int heads_kv : {2, 1}) {
    Shape s;
    s.heads_q = 4;
    s.heads_kv = heads_kv;
    DenseInputs in(s);
    const float key[2] = {0.5f, 2};
    const float value[2] = {3, 5};
    for (int h = 0; h < 4; ++h) in.q[q_at(s, 0, 0, h, 0)] = static_cast<float>(h + 1);
    for (int h = 0; h < heads_kv; ++h) {
      in.k[k_at(s, 0, 0, h, 0)] = key[h];
      in.v[v_at(s, 0, 0, h, 0)] = value[h];
    }
    const Result r = run(in.params(), Mode::kExact);
    for (int h = 0; h < 4; ++h) {
      const int kv_head = h / (4 / heads_kv);  // q heads 0,1 -> kv 0 and 2,3 -> kv 1 (not h % heads_kv)
      // One key: the output is its value, the LSE its logit.
      EXPECT_EQ(out_at(r, 4, 1, 0, h, 0), value[kv_head]) << "kv heads " << heads_kv << " q head " << h;
      EXPECT_NEAR(lse_at(r, 0, h), (h + 1.0) * key[kv_head], 1e-12) << "kv heads " << heads_kv << " q head " << h;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Descales

// One query (q = 1), key 0 = 1 and key 1 = 0, value 0 = 1 and value 1 = 0: out = v_descale * sigmoid(l0)
// with l0 = softmax_scale * q_descale * k_descale.
DenseInputs descale_inputs(int batch, int heads) {
  Shape s;
  s.batch = batch;
  s.seqlen_k = 2;
  s.heads_q = heads;
  s.heads_kv = heads;
  DenseInputs in(s);
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      in.q[q_at(s, b, 0, h, 0)] = 1;
      in.k[k_at(s, b, 0, h, 0)] = 1;
      in.v[v_at(s, b, 0, h, 0)] = 1;
    }
  }
  return in;
}

fp8attn_descale scalar_descale(const float* value) {
  fp8attn_descale d{};
  d.ptr = value;
  d.ndim = 0;
  d.dtype = FP8ATTN_DTYPE_F32;
  return d;
}

fp8attn_descale matrix_descale(const float* values, int batch, int heads, int64_t batch_stride, int64_t head_stride) {
  fp8attn_descale d{};
  d.ptr = values;
  d.ndim = 2;
  d.size[0] = batch;
  d.size[1] = heads;
  d.batch_stride = batch_stride;
  d.head_stride = head_stride;
  d.dtype = FP8ATTN_DTYPE_F32;
  return d;
}

// Two keys with logits l0 (the row max) and 0: key 0's share of the output normaliser, exp(l0) / (exp(l0) + 1)
// exactly; in the emulation 2^8 / (2^8 + P1) with key 1's P1 = 2^8 e^-l0 rounded to E4M3, as the kernel sums it.
double output_weight_of_key0(double l0, Mode mode) {
  if (mode == Mode::kExact) return std::exp(l0) / (std::exp(l0) + 1.0);
  const double p1 = e4m3_to_float(float_to_e4m3(static_cast<float>(256.0 * std::exp(-l0))));
  return 256.0 / (256.0 + p1);
}

TEST(Reference, ScalarDescalesScaleLogitsAndOutput) {
  DenseInputs in = descale_inputs(1, 1);
  fp8attn_fwd_params p = in.params();
  const float q_descale = 2.0f, k_descale = 1.5f, v_descale = 0.25f;
  p.softmax_scale = 0.5f;
  p.q_descale = scalar_descale(&q_descale);
  p.k_descale = scalar_descale(&k_descale);
  p.v_descale = scalar_descale(&v_descale);
  const double l0 = 0.5 * 2.0 * 1.5;
  // Key 0 holds the row max, so its P is 2^8 in the emulation too, and key 1 (v = 0) adds only to the sums:
  // the exact one in both modes' LSE, its E4M3-rounded P to the emulation's output normaliser.
  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const double tolerance = mode == Mode::kExact ? 1e-12 : 1e-6;
    const Result r = run(p, mode);
    EXPECT_NEAR(out_at(r, 1, 1, 0, 0, 0), 0.25 * output_weight_of_key0(l0, mode), tolerance);
    EXPECT_NEAR(lse_at(r, 0, 0), std::log(std::exp(l0) + 1.0), tolerance);  // dequantised units, no v_descale
  }
}

TEST(Reference, PerBatchAndHeadDescalesWithBroadcastStrides) {
  DenseInputs in = descale_inputs(2, 2);
  fp8attn_fwd_params p = in.params();
  const float q_per_head[2] = {1.0f, 2.0f};                 // expand()ed over batch: strides (0, 1)
  const float k_per_batch_head[2][2] = {{0.5f, 1.0f}, {1.5f, 2.0f}};  // contiguous: strides (2, 1)
  const float v_everywhere = 3.0f;                          // expand()ed scalar: strides (0, 0)
  p.q_descale = matrix_descale(q_per_head, 2, 2, 0, 1);
  p.k_descale = matrix_descale(&k_per_batch_head[0][0], 2, 2, 2, 1);
  p.v_descale = matrix_descale(&v_everywhere, 2, 2, 0, 0);
  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const double tolerance = mode == Mode::kExact ? 1e-12 : 1e-6;
    const Result r = run(p, mode);
    for (int b = 0; b < 2; ++b) {
      for (int h = 0; h < 2; ++h) {
        const double l0 = q_per_head[h] * k_per_batch_head[b][h];
        EXPECT_NEAR(out_at(r, 2, 1, b, h, 0), 3.0 * output_weight_of_key0(l0, mode), tolerance) << b << h;
        EXPECT_NEAR(lse_at(r, b, h), std::log(std::exp(l0) + 1.0), tolerance) << b << h;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Masks: one head, q = 1, d = 1, key j has logit key_logits[j], and V row j is the one-hot e_j, so each
// output row is exactly the softmax weights over its visible keys.

struct MaskCase {
  DenseInputs inputs;
  std::vector<double> logits;

  MaskCase(int seqlen_q, const std::vector<float>& key_logits)
      : inputs(Shape{1, seqlen_q, static_cast<int>(key_logits.size()), 1, 1, 1, static_cast<int>(key_logits.size())}),
        logits(key_logits.begin(), key_logits.end()) {
    const int sk = static_cast<int>(key_logits.size());
    for (int i = 0; i < seqlen_q; ++i) inputs.q[i] = 1;
    for (int j = 0; j < sk; ++j) {
      inputs.k[j] = key_logits[j];
      inputs.v[j * sk + j] = 1;
    }
  }
};

void expect_row_sees(const Result& r, const MaskCase& mask, int64_t row, const std::vector<int>& visible,
                     double tolerance) {
  const int sk = static_cast<int>(mask.logits.size());
  std::vector<double> logits;
  std::vector<std::vector<double>> values;
  for (int j : visible) {
    logits.push_back(mask.logits[j]);
    values.emplace_back(sk, 0.0);
    values.back()[j] = 1.0;
  }
  const Softmax expected = softmax_average(logits, values);
  for (int j = 0; j < sk; ++j) {
    const double want = visible.empty() ? 0.0 : expected.out[j];
    EXPECT_NEAR(out_at(r, 1, sk, row, 0, j), want, tolerance) << "row " << row << " key " << j;
  }
  if (visible.empty()) {
    EXPECT_EQ(lse_at(r, row, 0), -kInf) << "row " << row;
  } else {
    EXPECT_NEAR(lse_at(r, row, 0), expected.lse, tolerance) << "row " << row;
  }
}

TEST(Reference, CausalIsBottomRightAlignedWithFewerQueriesThanKeys) {
  // 2 queries, 4 keys: the last query sees every key, the one before it all but the last. Key 3 has the
  // largest logit, so any leak into row 0 would dominate that row.
  MaskCase mask(2, {0, 0.5f, 0.25f, 2});
  fp8attn_fwd_params p = mask.inputs.params();
  p.causal = 1;
  const Result r = run(p, Mode::kExact);
  expect_row_sees(r, mask, 0, {0, 1, 2}, 1e-12);
  expect_row_sees(r, mask, 1, {0, 1, 2, 3}, 1e-12);
}

TEST(Reference, CausalWithMoreQueriesThanKeysMasksLeadingRowsFully) {
  // 4 queries, 2 keys: query i sees keys j <= i - 2, so rows 0 and 1 see nothing.
  MaskCase mask(4, {1, 0.5f});
  fp8attn_fwd_params p = mask.inputs.params();
  p.causal = 1;
  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const Result r = run(p, mode);
    const double tolerance = mode == Mode::kExact ? 1e-12 : 0.05;
    expect_row_sees(r, mask, 0, {}, tolerance);
    expect_row_sees(r, mask, 1, {}, tolerance);
    expect_row_sees(r, mask, 2, {0}, tolerance);
    expect_row_sees(r, mask, 3, {0, 1}, tolerance);
  }
}

TEST(Reference, SlidingWindows) {
  MaskCase square(5, {0, 0.25f, 0.5f, 0.75f, 1});
  fp8attn_fwd_params p = square.inputs.params();

  p.window_left = 2;  // (2, 0) without the causal flag: keys i-2..i
  p.window_right = 0;
  Result r = run(p, Mode::kExact);
  expect_row_sees(r, square, 0, {0}, 1e-12);
  expect_row_sees(r, square, 1, {0, 1}, 1e-12);
  expect_row_sees(r, square, 4, {2, 3, 4}, 1e-12);

  p.window_left = 1;  // (1, 1): keys i-1..i+1
  p.window_right = 1;
  r = run(p, Mode::kExact);
  expect_row_sees(r, square, 0, {0, 1}, 1e-12);
  expect_row_sees(r, square, 2, {1, 2, 3}, 1e-12);
  expect_row_sees(r, square, 4, {3, 4}, 1e-12);

  p.window_left = -1;  // (-1, 1): everything up to i+1
  p.window_right = 1;
  r = run(p, Mode::kExact);
  expect_row_sees(r, square, 0, {0, 1}, 1e-12);
  expect_row_sees(r, square, 3, {0, 1, 2, 3, 4}, 1e-12);

  p.causal = 1;  // causal with a left window: keys i-1..i (causal forces the right window to 0)
  p.window_left = 1;
  p.window_right = -1;
  r = run(p, Mode::kExact);
  expect_row_sees(r, square, 0, {0}, 1e-12);
  expect_row_sees(r, square, 3, {2, 3}, 1e-12);

  // 2 queries, 5 keys, window (1, 0): bottom-right aligned, query 1 is at key 4 and query 0 at key 3.
  MaskCase wide(2, {0, 0.25f, 0.5f, 0.75f, 1});
  p = wide.inputs.params();
  p.window_left = 1;
  p.window_right = 0;
  r = run(p, Mode::kExact);
  expect_row_sees(r, wide, 0, {2, 3}, 1e-12);
  expect_row_sees(r, wide, 1, {3, 4}, 1e-12);
}

// ---------------------------------------------------------------------------------------------------
// Sink

TEST(Reference, SinkJoinsTheDenominator) {
  // Two keys with logit 0 and a sink of log 2: Z = 1 + 1 + 2 = 4, so out = (v0 + v1) / 4 and lse = log 4.
  Shape s;
  s.seqlen_k = 2;
  DenseInputs in(s);
  in.q = {1};
  in.v = {1, 3};
  fp8attn_fwd_params p = in.params();
  const float sink = static_cast<float>(std::log(2.0));
  p.sink = &sink;
  p.sink_dtype = FP8ATTN_DTYPE_F32;
  const Softmax expected = softmax_average({0, 0}, {{1}, {3}}, sink);
  ASSERT_NEAR(expected.out[0], 1.0, 1e-6);
  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {  // every P is 2^8: the emulation is exact too
    const Result r = run(p, mode);
    EXPECT_NEAR(out_at(r, 1, 1, 0, 0, 0), expected.out[0], 1e-6);
    EXPECT_NEAR(lse_at(r, 0, 0), expected.lse, 1e-6);
  }
}

TEST(Reference, SinkOfAFullyMaskedRowIsItsLse) {
  // Causal, 2 queries and 1 key: row 0 sees nothing (out 0, lse = sink), row 1 sees the key.
  Shape s;
  s.seqlen_q = 2;
  DenseInputs in(s);
  in.q = {1, 1};
  in.k = {0.5f};
  in.v = {2};
  fp8attn_fwd_params p = in.params();
  p.causal = 1;
  const float sink = 0.75f;
  p.sink = &sink;
  p.sink_dtype = FP8ATTN_DTYPE_F32;
  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const Result r = run(p, mode);
    EXPECT_EQ(out_at(r, 1, 1, 0, 0, 0), 0.0);
    EXPECT_EQ(lse_at(r, 0, 0), 0.75);
    const Softmax expected = softmax_average({0.5}, {{2}}, 0.75);
    EXPECT_NEAR(out_at(r, 1, 1, 1, 0, 0), expected.out[0], mode == Mode::kExact ? 1e-12 : 1e-6);
    EXPECT_NEAR(lse_at(r, 1, 0), expected.lse, mode == Mode::kExact ? 1e-12 : 1e-6);
  }
}

TEST(Reference, Bf16SinkPerQHead) {
  Shape s;
  s.heads_q = 2;
  DenseInputs in(s);
  in.q = {1, 1};
  in.k = {0.5f};
  in.v = {2};
  fp8attn_fwd_params p = in.params();
  const uint16_t sinks[2] = {float_to_bf16(1.5f), float_to_bf16(-2.0f)};
  p.sink = sinks;
  p.sink_dtype = FP8ATTN_DTYPE_BF16;
  const Result r = run(p, Mode::kExact);
  const double sink_values[2] = {1.5, -2.0};
  for (int h = 0; h < 2; ++h) {
    const Softmax expected = softmax_average({0.5}, {{2}}, sink_values[h]);
    EXPECT_NEAR(out_at(r, 2, 1, 0, h, 0), expected.out[0], 1e-12) << "head " << h;
    EXPECT_NEAR(lse_at(r, 0, h), expected.lse, 1e-12) << "head " << h;
  }
}

TEST(Reference, SinkFarAboveTheScoresStaysFinite) {
  // A sink of 200 against logits of 0: the keys' weight is about e^-200. Both modes must stay finite.
  Shape s;
  s.seqlen_k = 2;
  DenseInputs in(s);
  in.q = {1};
  in.v = {1, 3};
  fp8attn_fwd_params p = in.params();
  const float sink = 200.0f;
  p.sink = &sink;
  p.sink_dtype = FP8ATTN_DTYPE_F32;
  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const Result r = run(p, mode);
    const double out = out_at(r, 1, 1, 0, 0, 0);
    EXPECT_TRUE(std::isfinite(out));
    EXPECT_NEAR(out, 4.0 * std::exp(-200.0), 1e-90);
    EXPECT_NEAR(lse_at(r, 0, 0), 200.0, 1e-9);
  }
}

// ---------------------------------------------------------------------------------------------------
// Variable lengths, seqused_k, paged K/V

TEST(Reference, VarlenTwoSequences) {
  // Sequence 0: 1 query, 2 keys. Sequence 1: 2 queries, 3 keys. q row 3 is padding (total_q = 4).
  // Causal, every logit 0, V row j of sequence b = (b + 1) e_j: the output is (b + 1) / count on the
  // visible keys, so reading the other sequence's keys would show.
  const int32_t cu_q[3] = {0, 1, 3};
  const int32_t cu_k[3] = {0, 2, 5};
  const std::vector<uint8_t> q = e4m3_bytes({1, 1, 1, 1});
  const std::vector<uint8_t> k = e4m3_bytes({0, 0, 0, 0, 0});
  const std::vector<uint8_t> v = e4m3_bytes({1, 0, 0, /**/ 0, 1, 0, /* sequence 1 */ 2, 0, 0, /**/ 0, 2, 0, /**/ 0, 0, 2});
  fp8attn_fwd_params p{};
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.q_dtype = p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E4M3;
  p.q_row_stride = 1;
  p.q_head_stride = 1;
  p.k_row_stride = 1;
  p.k_head_stride = 1;
  p.v_row_stride = 3;
  p.v_head_stride = 3;
  p.batch = 2;
  p.seqlen_q = 2;
  p.seqlen_k = 3;
  p.total_q = 4;
  p.total_k = 5;
  p.cu_seqlens_q = cu_q;
  p.cu_seqlens_k = cu_k;
  p.num_heads_q = p.num_heads_kv = 1;
  p.head_dim = 1;
  p.head_dim_v = 3;
  p.softmax_scale = 1.0f;
  p.causal = 1;
  p.window_left = p.window_right = -1;

  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const Result r = run(p, mode);
    ASSERT_EQ(r.total_rows, 4);
    const std::vector<std::vector<double>> expected_out = {{0.5, 0.5, 0}, {1, 1, 0}, {2.0 / 3, 2.0 / 3, 2.0 / 3}};
    const double expected_lse[3] = {std::log(2.0), std::log(2.0), std::log(3.0)};
    for (int row = 0; row < 3; ++row) {
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(out_at(r, 1, 3, row, 0, c), expected_out[row][c], 1e-6) << row << c;
      EXPECT_NEAR(lse_at(r, row, 0), expected_lse[row], 1e-6) << row;
    }
    for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(out_at(r, 1, 3, 3, 0, c))) << "padding row written";
    EXPECT_TRUE(std::isnan(lse_at(r, 3, 0))) << "padding row written";
  }
}

TEST(Reference, SequsedKLimitsTheKeys) {
  // seqlen_k = 4 with 2, 3 and 0 keys used; unused K/V rows hold NaN, which must never be read.
  Shape s;
  s.batch = 3;
  s.seqlen_k = 4;
  s.dv = 4;
  DenseInputs in(s);
  for (int b = 0; b < 3; ++b) {
    in.q[q_at(s, b, 0, 0, 0)] = 1;
    for (int j = 0; j < 4; ++j) in.v[v_at(s, b, j, 0, j)] = 1;
  }
  fp8attn_fwd_params p = in.params();
  const int32_t used[3] = {2, 3, 0};
  for (int b = 0; b < 3; ++b) {
    for (int j = used[b]; j < 4; ++j) {
      in.k8[k_at(s, b, j, 0, 0)] = kE4m3NaN;
      for (int c = 0; c < 4; ++c) in.v8[v_at(s, b, j, 0, c)] = kE4m3NaN;
    }
  }
  p.seqused_k = used;
  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const Result r = run(p, mode);
    for (int b = 0; b < 3; ++b) {
      for (int j = 0; j < 4; ++j) {
        EXPECT_NEAR(out_at(r, 1, 4, b, 0, j), j < used[b] ? 1.0 / used[b] : 0.0, 1e-6) << b << j;
      }
      if (used[b] > 0) {
        EXPECT_NEAR(lse_at(r, b, 0), std::log(static_cast<double>(used[b])), 1e-6) << b;
      }
    }
    EXPECT_EQ(lse_at(r, 2, 0), -kInf);  // no key at all
  }
}

TEST(Reference, PagedWithShuffledPagesEqualsDense) {
  // 4 sequences with 17, 40, 1 and 0 keys in 16-key pages of one vLLM-style cache [pages, 2 (k|v), 16,
  // heads_kv, d] (k and v are views with a page stride of 2 * 16 * heads_kv * d). Pages are shuffled, unused
  // pages hold NaN, and block-table entries past each sequence's pages hold a bogus id.
  Shape s;
  s.batch = 4;
  s.seqlen_q = 3;
  s.seqlen_k = 40;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.d = 32;
  s.dv = 32;
  const int32_t used[4] = {17, 40, 1, 0};
  const int page_size = 16;
  const int num_pages = 9;
  const int max_pages = 4;
  const int table_stride = 6;  // a column-sliced view of a wider table

  std::mt19937 rng(7);
  DenseInputs dense(s);
  dense.fill_random(rng);
  fp8attn_fwd_params dense_params = dense.params();
  dense_params.seqused_k = used;
  dense_params.causal = 1;
  dense_params.softmax_scale = 0.25f;

  const int64_t row_elems = static_cast<int64_t>(s.heads_kv) * s.d;
  const int64_t page_stride = 2 * page_size * row_elems;
  std::vector<uint8_t> cache(static_cast<size_t>(num_pages) * page_stride, kE4m3NaN);
  std::vector<int32_t> page_ids(num_pages);
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(s.batch) * table_stride, 2147480000);
  int next_page = 0;
  for (int b = 0; b < s.batch; ++b) {
    for (int first = 0; first < used[b]; first += page_size) {
      const int page = page_ids[next_page++];
      table[b * table_stride + first / page_size] = page;
      for (int j = first; j < std::min<int>(used[b], first + page_size); ++j) {
        for (int h = 0; h < s.heads_kv; ++h) {
          for (int c = 0; c < s.d; ++c) {
            const int64_t in_page = (j - first) * row_elems + h * s.d + c;
            cache[page * page_stride + in_page] = dense.k8[k_at(s, b, j, h, c)];
            cache[page * page_stride + page_size * row_elems + in_page] = dense.v8[v_at(s, b, j, h, c)];
          }
        }
      }
    }
  }

  fp8attn_fwd_params paged = dense_params;
  paged.k = cache.data();
  paged.v = cache.data() + page_size * row_elems;
  paged.k_batch_stride = paged.v_batch_stride = page_stride;
  paged.k_row_stride = paged.v_row_stride = row_elems;
  paged.block_table = table.data();
  paged.block_table_batch_stride = table_stride;
  paged.max_pages_per_seq = max_pages;
  paged.num_pages = num_pages;
  paged.page_size = page_size;

  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const Result want = run(dense_params, mode);
    const Result got = run(paged, mode);
    ASSERT_EQ(got.out.size(), want.out.size());
    for (size_t i = 0; i < got.out.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got.out[i])) << i;
      ASSERT_EQ(got.out[i], want.out[i]) << i;
    }
    for (size_t i = 0; i < got.lse.size(); ++i) ASSERT_EQ(got.lse[i], want.lse[i]) << i;
    // Sequence 2 (one key, 3 causal queries) has two fully masked rows; sequence 3 has no keys at all.
    EXPECT_EQ(lse_at(got, 2 * 3 + 0, 0), -kInf);
    EXPECT_TRUE(std::isfinite(lse_at(got, 2 * 3 + 2, 0)));
    EXPECT_EQ(lse_at(got, 3 * 3 + 2, 3), -kInf);
  }
}

TEST(Reference, BatchedVarlenEqualsEachSequenceAlone) {
  // Three sequences packed (q rows padded to a wider stride) against the same sequences run one by one,
  // dense and contiguous: results must be bit-identical (also covers work split into many tasks).
  const int heads_q = 4, heads_kv = 2, d = 16, dv = 16;
  const int q_len[3] = {5, 37, 1};
  const int k_len[3] = {70, 37, 129};
  const int q_row_stride = heads_q * d + 8;
  std::mt19937 rng(11);

  std::vector<std::vector<float>> q(3), k(3), v(3);
  int32_t cu_q[4] = {0}, cu_k[4] = {0};
  for (int b = 0; b < 3; ++b) {
    q[b].resize(static_cast<size_t>(q_len[b]) * heads_q * d);
    k[b].resize(static_cast<size_t>(k_len[b]) * heads_kv * d);
    v[b].resize(static_cast<size_t>(k_len[b]) * heads_kv * dv);
    for (float& x : q[b]) x = random_e4m3(rng);
    for (float& x : k[b]) x = random_e4m3(rng);
    for (float& x : v[b]) x = random_e4m3(rng, 0.5);
    cu_q[b + 1] = cu_q[b] + q_len[b];
    cu_k[b + 1] = cu_k[b] + k_len[b];
  }
  std::vector<uint8_t> packed_q(static_cast<size_t>(cu_q[3]) * q_row_stride, kE4m3NaN);
  std::vector<float> packed_k, packed_v;
  for (int b = 0; b < 3; ++b) {
    for (int row = 0; row < q_len[b]; ++row) {
      for (int e = 0; e < heads_q * d; ++e) {
        packed_q[(cu_q[b] + row) * q_row_stride + e] = float_to_e4m3(q[b][row * heads_q * d + e]);
      }
    }
    packed_k.insert(packed_k.end(), k[b].begin(), k[b].end());
    packed_v.insert(packed_v.end(), v[b].begin(), v[b].end());
  }
  const std::vector<uint8_t> packed_k8 = e4m3_bytes(packed_k), packed_v8 = e4m3_bytes(packed_v);

  fp8attn_fwd_params packed{};
  packed.q = packed_q.data();
  packed.k = packed_k8.data();
  packed.v = packed_v8.data();
  packed.q_dtype = packed.k_dtype = packed.v_dtype = FP8ATTN_DTYPE_E4M3;
  packed.q_row_stride = q_row_stride;
  packed.q_head_stride = d;
  packed.k_row_stride = heads_kv * d;
  packed.k_head_stride = d;
  packed.v_row_stride = heads_kv * dv;
  packed.v_head_stride = dv;
  packed.batch = 3;
  packed.seqlen_q = 37;
  packed.seqlen_k = 129;
  packed.total_q = cu_q[3];
  packed.total_k = cu_k[3];
  packed.cu_seqlens_q = cu_q;
  packed.cu_seqlens_k = cu_k;
  packed.num_heads_q = heads_q;
  packed.num_heads_kv = heads_kv;
  packed.head_dim = d;
  packed.head_dim_v = dv;
  packed.softmax_scale = 0.25f;
  packed.causal = 1;
  packed.window_left = 20;
  packed.window_right = -1;

  for (Mode mode : {Mode::kExact, Mode::kEmulation}) {
    const Result together = run(packed, mode);
    for (int b = 0; b < 3; ++b) {
      DenseInputs alone(Shape{1, q_len[b], k_len[b], heads_q, heads_kv, d, dv});
      alone.q = q[b];
      alone.k = k[b];
      alone.v = v[b];
      fp8attn_fwd_params p = alone.params();
      p.softmax_scale = packed.softmax_scale;
      p.causal = packed.causal;
      p.window_left = packed.window_left;
      const Result single = run(p, mode);
      for (int row = 0; row < q_len[b]; ++row) {
        for (int h = 0; h < heads_q; ++h) {
          for (int c = 0; c < dv; ++c) {
            ASSERT_EQ(out_at(together, heads_q, dv, cu_q[b] + row, h, c), out_at(single, heads_q, dv, row, h, c))
                << "sequence " << b << " row " << row << " head " << h;
          }
          ASSERT_EQ(lse_at(together, cu_q[b] + row, h), lse_at(single, row, h));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Head dims, emulation accuracy, errors

TEST(Reference, HeadDim192WithValueDim128) {
  // q and k meet in columns 0 and 191 only; V is nonzero in columns 0 and 127 only.
  Shape s;
  s.seqlen_k = 2;
  s.d = 192;
  s.dv = 128;
  DenseInputs in(s);
  in.q[0] = 1;
  in.q[191] = 1;
  in.k[k_at(s, 0, 0, 0, 0)] = 0.5f;
  in.k[k_at(s, 0, 1, 0, 0)] = 0.5f;
  in.k[k_at(s, 0, 1, 0, 191)] = 1;  // logits 0.5 and 1.5
  in.v[v_at(s, 0, 0, 0, 0)] = 1;
  in.v[v_at(s, 0, 1, 0, 0)] = 1;
  in.v[v_at(s, 0, 0, 0, 127)] = 1;
  in.v[v_at(s, 0, 1, 0, 127)] = 3;
  const Result r = run(in.params(), Mode::kExact);
  const Softmax expected = softmax_average({0.5, 1.5}, {{1, 1}, {1, 3}});
  ASSERT_EQ(r.out.size(), 128u);
  EXPECT_NEAR(r.out[0], expected.out[0], 1e-12);
  EXPECT_NEAR(r.out[127], expected.out[1], 1e-12);
  for (int c = 1; c < 127; ++c) EXPECT_EQ(r.out[c], 0.0) << c;
  EXPECT_NEAR(lse_at(r, 0, 0), expected.lse, 1e-12);
}

TEST(Reference, LongRowsWithAWindow) {
  // 700 keys, 2 queries, window (300, 0): row 1 sees keys 399..699 and row 0 keys 398..698. Logit of key j
  // is ((j % 5) - 2) / 2 (q = 1), its value (j % 7) - 3; the expected rows are the weighted means.
  Shape s;
  s.seqlen_q = 2;
  s.seqlen_k = 700;
  DenseInputs in(s);
  in.q = {1, 1};
  for (int j = 0; j < 700; ++j) {
    in.k[j] = 0.5f * static_cast<float>(j % 5 - 2);
    in.v[j] = static_cast<float>(j % 7 - 3);
  }
  fp8attn_fwd_params p = in.params();
  p.window_left = 300;
  p.window_right = 0;
  const Result exact = run(p, Mode::kExact);
  const Result emulated = run(p, Mode::kEmulation);
  for (int row = 0; row < 2; ++row) {
    double weighted = 0, total = 0;
    for (int j = 398 + row; j <= 698 + row; ++j) {
      const double weight = std::exp(static_cast<double>(in.k[j]));
      weighted += weight * in.v[j];
      total += weight;
    }
    EXPECT_NEAR(out_at(exact, 1, 1, row, 0, 0), weighted / total, 1e-12) << "row " << row;
    EXPECT_NEAR(lse_at(exact, row, 0), std::log(total), 1e-12) << "row " << row;
    EXPECT_NEAR(out_at(emulated, 1, 1, row, 0, 0), weighted / total, 3.0 / 16) << "row " << row;
    EXPECT_NEAR(lse_at(emulated, row, 0), std::log(total), 1e-5) << "row " << row;
  }
}

TEST(Reference, EmulationDiffersFromExactWithinTheE4m3RoundingOfP) {
  // |P8 - P| <= 2^-4 P for normal E4M3 values and <= 2^-10 below 2^-6, and sum(P) >= 2^8, so
  // |out_emulation - out_exact| <= v_descale * max|v| * (2^-4 + keys * 2^-10 / 2^8) (+ fp32 noise).
  Shape s;
  s.batch = 2;
  s.seqlen_q = 16;
  s.seqlen_k = 300;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.d = 64;
  s.dv = 64;
  std::mt19937 rng(3);
  DenseInputs in(s);
  in.fill_random(rng);
  fp8attn_fwd_params p = in.params();
  p.softmax_scale = 0.125f;
  const float v_descale = 2.0f;
  p.v_descale = scalar_descale(&v_descale);
  double max_abs_v = 0;
  for (float x : in.v) max_abs_v = std::max(max_abs_v, std::fabs(static_cast<double>(x)));

  const Result exact = run(p, Mode::kExact);
  const Result emulated = run(p, Mode::kEmulation);
  double max_diff = 0;
  for (size_t i = 0; i < exact.out.size(); ++i) max_diff = std::max(max_diff, std::fabs(exact.out[i] - emulated.out[i]));
  const double bound = v_descale * max_abs_v * (1.0 / 16 + s.seqlen_k / 1024.0 / 256.0) + 1e-5;
  EXPECT_GT(max_diff, 1e-4) << "the emulation should not be exact on random scores";
  EXPECT_LE(max_diff, bound);
  // The LSE uses the unrounded P: only fp32 noise.
  for (size_t i = 0; i < exact.lse.size(); ++i) EXPECT_NEAR(emulated.lse[i], exact.lse[i], 1e-4) << i;
}

TEST(Reference, EmulationMatchesExactWhenEveryPIsAPowerOfTwo) {
  // softmax_scale = ln 2 and integer scores: P = 2^(8 + s - max) with s - max >= -8, exact in E4M3.
  Shape s;
  s.seqlen_q = 4;
  s.seqlen_k = 50;
  s.d = 4;
  s.dv = 8;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small_integer(-1, 1);
  DenseInputs in(s);
  for (float& x : in.q) x = static_cast<float>(small_integer(rng));
  for (float& x : in.k) x = static_cast<float>(small_integer(rng));
  for (float& x : in.v) x = random_e4m3(rng, 0.5);
  fp8attn_fwd_params p = in.params();
  p.softmax_scale = static_cast<float>(std::log(2.0));
  const Result exact = run(p, Mode::kExact);
  const Result emulated = run(p, Mode::kEmulation);
  for (size_t i = 0; i < exact.out.size(); ++i) EXPECT_NEAR(emulated.out[i], exact.out[i], 1e-5) << i;
  for (size_t i = 0; i < exact.lse.size(); ++i) EXPECT_NEAR(emulated.lse[i], exact.lse[i], 1e-5) << i;
}

TEST(Reference, RejectsInputsItCannotInterpret) {
  DenseInputs in(Shape{2, 1, 4, 1, 1, 1, 1});
  const fp8attn_fwd_params dense = in.params();
  Result r;

  fp8attn_fwd_params p = dense;
  const int32_t negative_used[2] = {2, -1};
  p.seqused_k = negative_used;
  Status status = attention(p, Mode::kExact, &r);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("negative key length"), std::string::npos) << status.message();

  p = dense;
  const int32_t decreasing[3] = {0, 1, 0};
  p.cu_seqlens_q = decreasing;
  p.total_q = 1;
  EXPECT_EQ(attention(p, Mode::kExact, &r).code(), StatusCode::kInvalidArgument);

  p = dense;
  const int32_t used[2] = {20, 1};
  const int32_t table[2] = {0, 5};  // sequence 1's only page is 5, but there are 2 pages
  p.seqused_k = used;
  p.block_table = table;
  p.block_table_batch_stride = 1;
  p.max_pages_per_seq = 1;
  p.num_pages = 2;
  p.page_size = 16;
  status = attention(p, Mode::kExact, &r);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);  // 20 keys need 2 pages, only 1 allowed
  const int32_t fits[2] = {16, 1};
  p.seqused_k = fits;
  status = attention(p, Mode::kExact, &r);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("block_table[1][0] = 5"), std::string::npos) << status.message();

  p = dense;
  const float descale = 1.0f;
  p.k_descale = scalar_descale(&descale);
  p.k_descale.dtype = FP8ATTN_DTYPE_BF16;
  status = attention(p, Mode::kExact, &r);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("k_descale"), std::string::npos) << status.message();

  p = dense;
  p.k_dtype = FP8ATTN_DTYPE_E5M2;
  EXPECT_EQ(attention(p, Mode::kExact, &r).code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace ref
}  // namespace fp8attn
