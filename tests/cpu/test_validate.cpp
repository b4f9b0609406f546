// Unit tests of fp8attn::validate_fwd and of the C ABI's parameter plumbing. Host only: every pointer is a
// fake device address, and validation never dereferences one.
//
// Each baseline (dense, varlen, vLLM paged decode) passes; each rule test breaks exactly one thing in a
// baseline and checks the status code and that the message names the argument and what was expected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "fp8attn/c_api.h"
#include "fp8attn/fp8attn.h"
#include "common/extents.h"
#include "common/fake_device.h"
#include "host/head_dims.h"
#include "host/validate.h"

namespace {

using fp8attn_test::fake;
using fp8attn_test::h200;
using fp8attn::DeviceInfo;
using fp8attn::FwdParams;
using fp8attn::Status;
using fp8attn::StatusCode;
using fp8attn_test::describe_extents;
using fp8attn_test::make_shape;
using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
constexpr StatusCode kUnsupported = StatusCode::kNotSupported;

template <typename T>
T* offset_bytes(T* ptr, int64_t bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(ptr) + bytes);
}

AssertionResult Accepted(const FwdParams& p, const DeviceInfo& device = h200()) {
  const Status s = fp8attn::validate_fwd(p, device);
  if (s.ok()) return AssertionSuccess();
  return AssertionFailure() << "rejected (code " << static_cast<int>(s.code()) << "): " << s.message();
}

// Rejected with `code`, and the message contains every one of `parts`.
AssertionResult Rejected(const FwdParams& p, StatusCode code, std::initializer_list<std::string> parts,
                         const DeviceInfo& device = h200()) {
  const Status s = fp8attn::validate_fwd(p, device);
  if (s.ok()) return AssertionFailure() << "accepted";
  if (s.code() != code) {
    return AssertionFailure() << "code " << static_cast<int>(s.code()) << " instead of " << static_cast<int>(code)
                              << ": " << s.message();
  }
  for (const std::string& part : parts) {
    if (s.message().find(part) == std::string::npos)
      return AssertionFailure() << "message \"" << s.message() << "\" lacks \"" << part << "\"";
  }
  return AssertionSuccess() << s.message();
}

// Contiguous strides for the current sizes: q/out [batch, seqlen_q, heads, d] (or [total_q, heads, d]),
// k/v [batch, seqlen_k, heads, d], lse [batch, heads, seqlen_q] (or [heads, total_q]).
void set_contiguous_strides(FwdParams& p) {
  const bool varlen = p.cu_seqlens_q != nullptr;
  p.q_head_stride = p.head_dim;
  p.q_row_stride = int64_t{p.num_heads_q} * p.head_dim;
  p.q_batch_stride = p.seqlen_q * p.q_row_stride;
  p.o_head_stride = p.head_dim_v;
  p.o_row_stride = int64_t{p.num_heads_q} * p.head_dim_v;
  p.o_batch_stride = p.seqlen_q * p.o_row_stride;
  p.k_head_stride = p.head_dim;
  p.k_row_stride = int64_t{p.num_heads_kv} * p.head_dim;
  p.k_batch_stride = p.seqlen_k * p.k_row_stride;
  p.v_head_stride = p.head_dim_v;
  p.v_row_stride = int64_t{p.num_heads_kv} * p.head_dim_v;
  p.v_batch_stride = p.seqlen_k * p.v_row_stride;
  p.lse_head_stride = varlen ? p.total_q : p.seqlen_q;
  p.lse_batch_stride = varlen ? 0 : int64_t{p.num_heads_q} * p.seqlen_q;
  describe_extents(p);
}

FwdParams common(int head_dim, int head_dim_v) {
  FwdParams p;
  fp8attn_fwd_params_init(&p);
  p.q = fake(1);
  p.k = fake(2);
  p.v = fake(3);
  p.out = fake(4);
  p.lse = fake<float>(5);
  p.q_dtype = p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E4M3;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Ample scratch, so a config that splits KV never trips the workspace rule (WorkspaceTooSmall tests it).
  p.workspace = fake(6);
  p.workspace_bytes = size_t{1} << 40;
  return p;
}

// Dense prefill, GQA 8:2, causal, with LSE.
FwdParams dense(int head_dim = 128, int head_dim_v = 128) {
  FwdParams p = common(head_dim, head_dim_v);
  p.batch = 2;
  p.seqlen_q = 128;
  p.seqlen_k = 256;
  p.num_heads_q = 8;
  p.num_heads_kv = 2;
  p.causal = 1;
  set_contiguous_strides(p);
  return p;
}

// Varlen prefill: three packed sequences, k/v by cu_seqlens_k.
FwdParams varlen() {
  FwdParams p = common(128, 128);
  p.batch = 3;
  p.cu_seqlens_q = fake<int32_t>(7);
  p.cu_seqlens_k = fake<int32_t>(8);
  p.total_q = 300;
  p.total_k = 700;
  p.seqlen_q = 200;
  p.seqlen_k = 500;
  p.num_heads_q = 16;
  p.num_heads_kv = 4;
  set_contiguous_strides(p);
  return p;
}

// vLLM's decode step: q [B, Hq, d] by cu_seqlens_q, k/v unbound from an HND cache whose pages are
// [num_pages, 2, Hkv, page_size, d], seqused_k, a column-sliced block table, descales expand()ed to
// (B, Hkv) with strides (0, 0), a sliding window (w - 1, 0) with causal, a sink and LSE.
FwdParams paged(int page_size = 16) {
  FwdParams p = common(128, 128);
  p.batch = 4;
  p.num_heads_q = 32;
  p.num_heads_kv = 8;
  p.cu_seqlens_q = fake<int32_t>(7);
  p.total_q = 4;
  p.seqlen_q = 1;
  p.seqlen_k = 4096;
  set_contiguous_strides(p);  // q, out, lse; k/v below
  p.seqused_k = fake<int32_t>(8);
  p.block_table = fake<int32_t>(9);
  p.page_size = page_size;
  p.num_pages = 1000;
  p.max_pages_per_seq = (p.seqlen_k + page_size - 1) / page_size;
  p.block_table_batch_stride = p.max_pages_per_seq + 64;
  const int64_t head_bytes = int64_t{page_size} * p.head_dim;
  p.k_head_stride = p.v_head_stride = head_bytes;
  p.k_row_stride = p.v_row_stride = p.head_dim;
  p.k_batch_stride = p.v_batch_stride = 2 * p.num_heads_kv * head_bytes;
  p.v = offset_bytes(p.k, p.num_heads_kv * head_bytes);
  for (fp8attn_descale* d : {&p.q_descale, &p.k_descale, &p.v_descale}) {
    d->ptr = fake<float>(10);
    d->ndim = 2;
    d->size[0] = p.batch;
    d->size[1] = p.num_heads_kv;
  }
  p.causal = 1;
  p.window_left = 127;
  p.window_right = 0;
  p.sink = fake(11);
  describe_extents(p);
  return p;
}

// ---------------------------------------------------------------------------------------------------
// Baselines and the C ABI
// ---------------------------------------------------------------------------------------------------

TEST(ValidateBaseline, DensePasses) { EXPECT_TRUE(Accepted(dense())); }
TEST(ValidateBaseline, VarlenPasses) { EXPECT_TRUE(Accepted(varlen())); }
TEST(ValidateBaseline, PagedDecodePasses) { EXPECT_TRUE(Accepted(paged())); }

TEST(CApi, ParamsInitDefaults) {
  FwdParams p;
  std::memset(&p, 0xAB, sizeof(p));
  fp8attn_fwd_params_init(&p);
  EXPECT_EQ(p.q, nullptr);
  EXPECT_EQ(p.block_table, nullptr);
  EXPECT_EQ(p.q_dtype, FP8ATTN_DTYPE_NONE);
  EXPECT_EQ(p.out_dtype, FP8ATTN_DTYPE_BF16);
  EXPECT_EQ(p.sink_dtype, FP8ATTN_DTYPE_F32);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  for (const fp8attn_descale* d : {&p.q_descale, &p.k_descale, &p.v_descale}) {
    EXPECT_EQ(d->ptr, nullptr);
    EXPECT_EQ(d->ndim, 0);
    EXPECT_EQ(d->dtype, FP8ATTN_DTYPE_F32);
  }
  EXPECT_EQ(p.softmax_scale, 0.0f);
  EXPECT_EQ(p.softcap, 0.0f);
  EXPECT_EQ(p.output_scale.ptr, nullptr);
  EXPECT_EQ(p.output_scale.dtype, FP8ATTN_DTYPE_F32);
  EXPECT_EQ(p.num_splits, 0);
  EXPECT_EQ(p.workspace_bytes, 0u);
  EXPECT_EQ(fp8attn_fwd_params_size(), sizeof(fp8attn_fwd_params));
}

TEST(CApi, NullParamsGiveACodeAndATruncatedMessage) {
  char buf[64];
  EXPECT_EQ(fp8attn_fwd(nullptr, nullptr, buf, sizeof(buf)), FP8ATTN_INVALID_ARGUMENT);
  EXPECT_STREQ(buf, "params: expected a pointer to fp8attn_fwd_params, got NULL");
  size_t bytes = 0;
  char small[8];
  EXPECT_EQ(fp8attn_fwd_workspace_size(nullptr, &bytes, small, sizeof(small)), FP8ATTN_INVALID_ARGUMENT);
  EXPECT_STREQ(small, "params:");
  EXPECT_EQ(fp8attn_fwd(nullptr, nullptr, nullptr, 0), FP8ATTN_INVALID_ARGUMENT);  // no buffer: code only
}

// ---------------------------------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------------------------------

TEST(ValidateDevice, AmpereRejected) {
  DeviceInfo a100 = h200();
  a100.cc_major = 8;
  EXPECT_TRUE(Rejected(dense(), kUnsupported, {"device", "compute capability 9.0", "got 8.0 (sm_80)"}, a100));
}

TEST(ValidateDevice, BlackwellRejected) {
  DeviceInfo b200 = h200();
  b200.cc_major = 10;
  EXPECT_TRUE(Rejected(dense(), kUnsupported, {"device", "compute capability 9.0", "got 10.0 (sm_100)"}, b200));
}

TEST(ValidateDevice, NoSmsRejected) {
  DeviceInfo broken = h200();
  broken.num_sms = 0;
  EXPECT_TRUE(Rejected(dense(), kInvalid, {"device.num_sms", ">= 1", "got 0"}, broken));
}

// ---------------------------------------------------------------------------------------------------
// Features fp8attn does not implement, and dtypes
// ---------------------------------------------------------------------------------------------------

TEST(ValidateScalars, SoftcapZeroOrFinitePositive) {
  FwdParams p = dense();
  p.softcap = 50.0f;
  EXPECT_TRUE(Accepted(p));
  p.softcap = -1.0f;
  EXPECT_TRUE(Rejected(p, kInvalid, {"softcap", "0 (off) or a finite value > 0", "got -1"}));
  p.softcap = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(Rejected(p, kInvalid, {"softcap", "got nan"}));
  p.softcap = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(Rejected(p, kInvalid, {"softcap", "got inf"}));
}

TEST(ValidateOutputScale, E4M3OutNeedsAScalarScale) {
  FwdParams p = dense();
  p.out_dtype = FP8ATTN_DTYPE_E4M3;
  EXPECT_TRUE(Rejected(p, kInvalid, {"output_scale", "a 0-d float32 device tensor with a float8_e4m3fn out", "got NULL"}));
  p.output_scale.ptr = static_cast<const float*>(fake(24));
  EXPECT_TRUE(Accepted(p));
  p.output_scale.dtype = FP8ATTN_DTYPE_BF16;
  EXPECT_TRUE(Rejected(p, kUnsupported, {"output_scale", "float32", "got bfloat16"}));
  p.output_scale.dtype = FP8ATTN_DTYPE_F32;
  p.output_scale.ndim = 1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"output_scale", "one scalar", "ndim 1"}));
}

TEST(ValidateOutputScale, OnlyWithAnE4M3Out) {
  FwdParams p = dense();
  p.output_scale.ptr = static_cast<const float*>(fake(24));
  EXPECT_TRUE(Rejected(p, kInvalid, {"output_scale", "NULL unless out is float8_e4m3fn", "out dtype bfloat16"}));
}

TEST(ValidateFeatures, MlaQvRejected) {
  FwdParams p = dense();
  p.qv = fake(20);
  EXPECT_TRUE(Rejected(p, kUnsupported, {"qv", "expected NULL", "MLA"}));
}

TEST(ValidateFeatures, BlockSparsityRejected) {
  FwdParams p = dense();
  p.block_sparsity = fake(20);
  EXPECT_TRUE(Rejected(p, kUnsupported, {"block_sparsity", "expected NULL"}));
}

TEST(ValidateDtypes, E5M2Rejected) {
  FwdParams p = dense();
  p.q_dtype = p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E5M2;
  EXPECT_TRUE(Rejected(p, kUnsupported, {"q: expected dtype float8_e4m3fn, float16 or bfloat16, got float8_e5m2 "
                                         "(E5M2 is not supported)"}));
  p = dense();
  p.k_dtype = FP8ATTN_DTYPE_E5M2;  // an E5M2 cache beside an E4M3 q
  EXPECT_TRUE(Rejected(p, kUnsupported, {"k: expected dtype float8_e4m3fn, got float8_e5m2 (E5M2 is not supported)"}));
}

TEST(ValidateDtypes, QNeitherE4M3Nor16BitRejected) {
  FwdParams p = dense();
  p.q_dtype = FP8ATTN_DTYPE_F32;  // a real dtype fp8attn does not take
  EXPECT_TRUE(Rejected(p, kUnsupported, {"q: expected dtype float8_e4m3fn, float16 or bfloat16, got float32"}));
  p = dense();
  p.v_dtype = FP8ATTN_DTYPE_NONE;  // never set: malformed
  EXPECT_TRUE(Rejected(p, kInvalid, {"v: expected dtype float8_e4m3fn", "none"}));
}

// ---- 16-bit q (issue 35): fp16/bf16 q over an E4M3 KV cache, quantized per row by the kernel ----

TEST(ValidateSixteenBitQ, AcceptedWithE4M3KvInEveryLayout) {
  for (fp8attn_dtype q_dtype : {FP8ATTN_DTYPE_BF16, FP8ATTN_DTYPE_F16}) {
    for (FwdParams p : {dense(), varlen(), paged()}) {
      SCOPED_TRACE(testing::Message() << (q_dtype == FP8ATTN_DTYPE_BF16 ? "bf16 q, " : "fp16 q, ")
                                      << (p.block_table ? "paged" : p.cu_seqlens_q ? "varlen" : "dense"));
      p.q_dtype = q_dtype;
      p.q_descale.ptr = nullptr;  // the paged baseline passes one (see TakesNoQDescale)
      EXPECT_TRUE(Accepted(p));
      p.out_dtype = FP8ATTN_DTYPE_E4M3;  // the fused FP8 output too
      p.output_scale.ptr = static_cast<const float*>(fake(24));
      EXPECT_TRUE(Accepted(p));
    }
  }
}

TEST(ValidateSixteenBitQ, TakesNoQDescale) {
  FwdParams p = paged();  // q, k and v descales
  p.q_dtype = FP8ATTN_DTYPE_BF16;
  EXPECT_TRUE(Rejected(p, kInvalid, {"q_descale: expected NULL with a bfloat16 q",
                                     "a 16-bit q is quantized per row by the kernel, so it takes no descale"}));
  p.q_descale.ptr = nullptr;  // k and v descales stay
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateSixteenBitQ, KvMustStillBeE4M3) {
  FwdParams p = dense();
  p.q_dtype = p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_BF16;
  EXPECT_TRUE(Rejected(p, kUnsupported, {"k: expected dtype float8_e4m3fn, got bfloat16", "quantize the KV cache"}));
  p = dense();
  p.q_dtype = FP8ATTN_DTYPE_F16;
  p.v_dtype = FP8ATTN_DTYPE_F16;
  EXPECT_TRUE(Rejected(p, kUnsupported, {"v: expected dtype float8_e4m3fn, got float16"}));
}

TEST(ValidateSixteenBitQ, E4M3QWith16BitKvRejected) {
  FwdParams p = dense();
  p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_BF16;
  EXPECT_TRUE(Rejected(p, kUnsupported, {"k: expected dtype float8_e4m3fn, got bfloat16"}));
}

// q's strides are elements of its own type: 16 bytes are 8 elements of a 16-bit q (16 of an E4M3 one).
TEST(ValidateSixteenBitQ, StridesCountTwoByteElements) {
  FwdParams p = dense();
  p.q_dtype = FP8ATTN_DTYPE_BF16;
  p.q_row_stride += 8;  // padded rows of 16 bytes
  p.q_batch_stride = p.seqlen_q * p.q_row_stride;
  EXPECT_TRUE(Accepted(p));
  p.q_row_stride += 4;
  EXPECT_TRUE(Rejected(p, kInvalid, {"q_row_stride", "a multiple of 8 elements", "16-byte aligned"}));
  p = dense();
  p.q_dtype = FP8ATTN_DTYPE_F16;
  p.q = offset_bytes(p.q, 8);
  EXPECT_TRUE(Rejected(p, kInvalid, {"q: expected a 16-byte aligned address"}));
  p = dense();
  p.q_dtype = FP8ATTN_DTYPE_F16;
  p.q_batch_stride = int64_t{1} << 39;  // 2^40 bytes
  EXPECT_TRUE(Rejected(p, kInvalid, {"q_batch_stride", "2^40"}));
}

TEST(ValidateDtypes, OutDtypeF16OrBf16) {
  FwdParams p = dense();
  p.out_dtype = FP8ATTN_DTYPE_F16;
  EXPECT_TRUE(Accepted(p));
  p.out_dtype = FP8ATTN_DTYPE_F32;
  EXPECT_TRUE(Rejected(p, kUnsupported, {"out_dtype", "float16 or bfloat16", "got float32"}));
  p.out_dtype = FP8ATTN_DTYPE_I32;
  EXPECT_TRUE(Rejected(p, kInvalid, {"out_dtype", "got int32"}));
}

TEST(ValidateDtypes, SinkDtypeF32OrBf16) {
  FwdParams p = paged();
  p.sink_dtype = FP8ATTN_DTYPE_BF16;
  EXPECT_TRUE(Accepted(p));
  p.sink_dtype = FP8ATTN_DTYPE_F16;
  EXPECT_TRUE(Rejected(p, kUnsupported, {"s_aux", "float32 or bfloat16", "got float16"}));
  p.sink = nullptr;  // no sink: its dtype is unused
  EXPECT_TRUE(Accepted(p));
}

// ---------------------------------------------------------------------------------------------------
// Head dims and sizes
// ---------------------------------------------------------------------------------------------------

TEST(ValidateHeadDims, EverySupportedPairAccepted) {
  for (const auto& [d, dv] : fp8attn::kSupportedHeadDims) {
    SCOPED_TRACE(testing::Message() << "(" << d << ", " << dv << ")");
    EXPECT_TRUE(Accepted(dense(d, dv)));
  }
}

TEST(ValidateHeadDims, OtherPairsRejectedListingTheSupportedOnes) {
  std::string supported;  // "(64, 64), (96, 96), ...": every pair of src/kernels.list, in its order
  for (const auto& [d, dv] : fp8attn::kSupportedHeadDims) {
    supported += (supported.empty() ? "(" : ", (") + std::to_string(d) + ", " + std::to_string(dv) + ")";
  }
  // (512, 256) and (512, 128): d512 needs dv = 512 (issue 35); (576, 512): MLA is not served.
  for (const auto& [d, dv] : {std::pair{128, 64}, {80, 80}, {256, 128}, {192, 256}, {0, 0}, {512, 256}, {512, 128},
                              {576, 512}, {256, 512}}) {
    SCOPED_TRACE(testing::Message() << "(" << d << ", " << dv << ")");
    const std::string got = "got (" + std::to_string(d) + ", " + std::to_string(dv) + ")";
    EXPECT_TRUE(Rejected(dense(d, dv), kUnsupported, {"(head_dim, head_dim_v)", supported, got}));
  }
}

TEST(ValidateSizes, BatchAndHeadsAtLeastOne) {
  FwdParams p = dense();
  p.batch = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"batch: expected >= 1, got 0"}));
  p = dense();
  p.num_heads_q = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"num_heads_q: expected >= 1, got 0"}));
  p = dense();
  p.num_heads_kv = -1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"num_heads_kv: expected >= 1, got -1"}));
}

TEST(ValidateSizes, GqaDivisibility) {
  FwdParams p = dense();
  p.num_heads_q = 12;
  p.num_heads_kv = 8;
  EXPECT_TRUE(Rejected(p, kInvalid, {"num_heads_q", "multiple of num_heads_kv=8", "num_heads_q=12"}));
  p.num_heads_kv = 1;  // MQA
  set_contiguous_strides(p);
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateSizes, NegativeSeqlensRejected) {
  FwdParams p = dense();
  p.seqlen_q = -1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"seqlen_q: expected >= 0, got -1"}));
  p = varlen();
  p.seqlen_q = -1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"max_seqlen_q: expected >= 0"}));
  p = paged();
  p.seqlen_k = -5;
  EXPECT_TRUE(Rejected(p, kInvalid, {"max_seqlen_k: expected >= 0, got -5"}));
}

TEST(ValidateSizes, NegativeVarlenTotalsRejected) {
  FwdParams p = varlen();
  p.total_q = -1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"total_q: expected >= 0", "cu_seqlens_q"}));
  p = varlen();
  p.total_k = -1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"total_k: expected >= 0", "cu_seqlens_k"}));
  p = paged();
  p.total_k = -1;  // unused when paged
  EXPECT_TRUE(Accepted(p));
}

// ---------------------------------------------------------------------------------------------------
// Tensors: pointers, strides, alignment, aliasing
// ---------------------------------------------------------------------------------------------------

TEST(ValidateTensors, NullPointersRejected) {
  const std::pair<const char*, void (*)(FwdParams&)> cases[] = {
      {"q", [](FwdParams& p) { p.q = nullptr; }},
      {"k", [](FwdParams& p) { p.k = nullptr; }},
      {"v", [](FwdParams& p) { p.v = nullptr; }},
      {"out", [](FwdParams& p) { p.out = nullptr; }},
  };
  for (const auto& [name, clear] : cases) {
    FwdParams p = dense();
    clear(p);
    EXPECT_TRUE(Rejected(p, kInvalid, {std::string(name) + ": expected a non-NULL device pointer", "got NULL"}));
  }
}

TEST(ValidateTensors, MisalignedBasePointerRejected) {
  FwdParams p = dense();
  p.q = offset_bytes(p.q, 8);
  EXPECT_TRUE(Rejected(p, kInvalid, {"q: expected a 16-byte aligned address"}));
  p = dense();
  p.out = offset_bytes(p.out, 2);
  EXPECT_TRUE(Rejected(p, kInvalid, {"out: expected a 16-byte aligned address"}));
}

TEST(ValidateTensors, NegativeStrideRejected) {
  FwdParams p = dense();
  p.k_head_stride = -128;
  EXPECT_TRUE(Rejected(p, kInvalid, {"k_head_stride: expected >= 0, got -128"}));
}

TEST(ValidateTensors, ZeroRowOrHeadStrideRejectedWhenTheDimHasSeveralEntries) {
  FwdParams p = dense();
  p.q_row_stride = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"q_row_stride", "nonzero", "seqlen_q=128"}));
  p = dense();
  p.v_head_stride = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"v_head_stride", "nonzero", "num_heads_kv=2"}));
  p = paged();
  p.k_row_stride = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"k_row_stride", "nonzero", "page_size=16"}));
  p = dense();
  p.seqlen_q = 1;  // one query row: its stride is never stepped
  set_contiguous_strides(p);
  p.q_row_stride = 0;
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateTensors, ZeroBatchStrideBroadcastsInputsButNotOut) {
  FwdParams p = dense();
  p.k_batch_stride = p.v_batch_stride = p.q_batch_stride = 0;
  EXPECT_TRUE(Accepted(p));
  p.o_batch_stride = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"o_batch_stride", "nonzero", "batch=2"}));
}

TEST(ValidateTensors, Fp8StridesMultipleOf16Elements) {
  FwdParams p = dense();
  p.q_row_stride += 8;
  EXPECT_TRUE(Rejected(p, kInvalid, {"q_row_stride", "a multiple of 16 elements", "got 1032"}));
  p = paged();
  p.k_batch_stride += 4;
  EXPECT_TRUE(Rejected(p, kInvalid, {"k_batch_stride", "a multiple of 16 elements"}));
  p = dense();
  p.v_row_stride += 16;  // padded rows are fine
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateTensors, OutStridesMultipleOf8Elements) {
  FwdParams p = dense();
  p.o_row_stride += 4;
  EXPECT_TRUE(Rejected(p, kInvalid, {"o_row_stride", "a multiple of 8 elements"}));
  p.o_row_stride += 4;  // padded rows are fine once the batch stride makes room for them
  p.o_batch_stride = p.seqlen_q * p.o_row_stride;
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateTensors, StrideBeyondTmaLimitRejected) {
  FwdParams p = dense();
  p.k_batch_stride = int64_t{1} << 40;
  EXPECT_TRUE(Rejected(p, kInvalid, {"k_batch_stride", "2^40"}));
}

TEST(ValidateTensors, OutOverlappingItselfRejected) {
  FwdParams p = dense();
  p.o_head_stride = 64;  // heads of 128 elements, 64 apart
  EXPECT_TRUE(Rejected(p, kInvalid, {"o_head_stride", ">= 128", "does not overlap"}));
  p = dense();  // [batch, heads, rows, dv] memory, seen as [batch, rows, heads, dv]: a transposed view is fine
  p.o_row_stride = p.head_dim_v;
  p.o_head_stride = int64_t{p.seqlen_q} * p.head_dim_v;
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateTensors, LseLayout) {
  FwdParams p = dense();
  p.lse_head_stride = 1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"lse_head_stride", ">= 128", "does not overlap"}));
  p = varlen();
  p.lse_head_stride = -300;
  EXPECT_TRUE(Rejected(p, kInvalid, {"lse_head_stride: expected >= 0"}));
  p.lse = nullptr;  // no LSE: its strides are unused
  EXPECT_TRUE(Accepted(p));
}

// ---------------------------------------------------------------------------------------------------
// Variable lengths and paging
// ---------------------------------------------------------------------------------------------------

TEST(ValidateVarlen, CuSeqlensKAndBlockTableExclusive) {
  FwdParams p = paged();
  p.cu_seqlens_k = fake<int32_t>(20);
  EXPECT_TRUE(Rejected(p, kInvalid, {"cu_seqlens_k", "NULL with block_table"}));
}

TEST(ValidateVarlen, BlockTableRequiresSequsedK) {
  FwdParams p = paged();
  p.seqused_k = nullptr;
  EXPECT_TRUE(Rejected(p, kInvalid, {"seqused_k", "with block_table", "got NULL"}));
}

TEST(ValidateVarlen, ExactlyOneOfCuSeqlensKAndSequsedKWithCuSeqlensQ) {
  FwdParams p = varlen();
  p.seqused_k = fake<int32_t>(20);
  EXPECT_TRUE(Rejected(p, kInvalid, {"cu_seqlens_k, seqused_k", "exactly one", "got both"}));
  p.cu_seqlens_k = p.seqused_k = nullptr;
  EXPECT_TRUE(Rejected(p, kInvalid, {"cu_seqlens_k, seqused_k", "exactly one", "got neither"}));
  p.seqused_k = fake<int32_t>(20);  // dense k [batch, seqlen_k, ...] cut by seqused_k
  describe_extents(p);
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateVarlen, DenseCallTakesSequsedKOnly) {
  FwdParams p = dense();
  p.seqused_k = fake<int32_t>(20);
  EXPECT_TRUE(Accepted(p));
  p.seqused_k = nullptr;
  p.cu_seqlens_k = fake<int32_t>(20);
  EXPECT_TRUE(Rejected(p, kInvalid, {"cu_seqlens_k", "without cu_seqlens_q"}));
}

TEST(ValidateVarlen, Int32ArraysAligned) {
  FwdParams p = paged();
  p.seqused_k = offset_bytes(p.seqused_k, 2);
  EXPECT_TRUE(Rejected(p, kInvalid, {"seqused_k", "4-byte aligned"}));
}

TEST(ValidatePaged, PageSizeMultipleOf16) {
  for (int page_size : {16, 32, 48, 64, 256}) {
    SCOPED_TRACE(page_size);
    EXPECT_TRUE(Accepted(paged(page_size)));
  }
  EXPECT_TRUE(Rejected(paged(24), kUnsupported, {"page_size", "a multiple of 16", "got 24"}));
  FwdParams p = paged();
  p.page_size = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"page_size: expected >= 1, got 0"}));
}

TEST(ValidatePaged, NumPagesAtLeastOne) {
  FwdParams p = paged();
  p.num_pages = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"num_pages: expected >= 1"}));
}

TEST(ValidatePaged, BlockTableCoversMaxSeqlenK) {
  FwdParams p = paged();
  p.max_pages_per_seq = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"max_pages_per_seq: expected >= 1"}));
  p = paged();
  p.max_pages_per_seq = 255;  // 255 * 16 = 4080 < 4096
  EXPECT_TRUE(Rejected(p, kInvalid, {"max_pages_per_seq * page_size", "max_seqlen_k=4096", "got 255 * 16 = 4080"}));
}

TEST(ValidatePaged, BlockTableRowsMayBeStridedButNotOverlap) {
  FwdParams p = paged();
  p.block_table_batch_stride = p.max_pages_per_seq;  // contiguous
  EXPECT_TRUE(Accepted(p));
  p.block_table_batch_stride = p.max_pages_per_seq - 1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"block_table_batch_stride", ">= 256", "got 255"}));
  // One sequence (the cascade prefix call's block_table[:1]): the row stride is never used.
  p.batch = 1;
  p.block_table_batch_stride = 0;
  for (fp8attn_descale* d : {&p.q_descale, &p.k_descale, &p.v_descale}) d->size[0] = 1;
  describe_extents(p);
  EXPECT_TRUE(Accepted(p));
}

// ---------------------------------------------------------------------------------------------------
// Masks, descales, scalars, workspace
// ---------------------------------------------------------------------------------------------------

TEST(ValidateWindow, BoundsAtLeastMinusOne) {
  FwdParams p = paged();
  p.window_left = -2;
  EXPECT_TRUE(Rejected(p, kInvalid, {"window_size_left: expected >= -1", "got -2"}));
  p = paged();
  p.window_right = -2;
  EXPECT_TRUE(Rejected(p, kInvalid, {"window_size_right: expected >= -1", "got -2"}));
}

TEST(ValidateWindow, CausalMeansRightWindowZero) {
  FwdParams p = paged();  // causal
  p.window_right = 5;
  EXPECT_TRUE(Rejected(p, kInvalid, {"window_size_right", "0 or -1 with causal", "got 5"}));
  p.window_right = -1;  // read as 0
  EXPECT_TRUE(Accepted(p));
  p.causal = 0;
  p.window_right = 5;  // a two-sided window without causal
  EXPECT_TRUE(Accepted(p));
}

// The fp8attn_descale member of each of q/k/v_descale, with its argument name.
const std::pair<const char*, fp8attn_descale FwdParams::*> kDescales[] = {
    {"q_descale", &FwdParams::q_descale}, {"k_descale", &FwdParams::k_descale}, {"v_descale", &FwdParams::v_descale}};

TEST(ValidateDescale, EveryFormAccepted) {
  struct Form {
    const char* what;
    int ndim;
    int64_t batch_stride, head_stride;
  };
  const Form forms[] = {{"0-d scalar", 0, 0, 0},
                        {"(B, Hkv) contiguous", 2, 8, 1},
                        {"per-tensor expand, strides (0, 0)", 2, 0, 0},
                        {"per-head expand, strides (0, 1)", 2, 0, 1}};
  for (const auto& [name, member] : kDescales) {
    for (const Form& f : forms) {
      SCOPED_TRACE(testing::Message() << name << " " << f.what);
      FwdParams p = paged();  // batch 4, num_heads_kv 8
      fp8attn_descale& d = p.*member;
      d.ndim = f.ndim;
      d.batch_stride = f.batch_stride;
      d.head_stride = f.head_stride;
      EXPECT_TRUE(Accepted(p));
    }
  }
}

TEST(ValidateDescale, BadFormsRejected) {
  for (const auto& [name, member] : kDescales) {
    SCOPED_TRACE(name);
    const std::string n = name;
    FwdParams p = paged();
    (p.*member).ndim = 1;
    EXPECT_TRUE(Rejected(p, kInvalid, {n + ": expected a 0-d tensor or shape (batch=4, num_heads_kv=8), got ndim 1"}));
    p = paged();
    (p.*member).size[1] = 32;  // num_heads_q instead of num_heads_kv
    EXPECT_TRUE(Rejected(p, kInvalid, {n, "(batch=4, num_heads_kv=8)", "got shape (4, 32)"}));
    p = paged();
    (p.*member).ndim = 0;
    (p.*member).head_stride = 1;
    EXPECT_TRUE(Rejected(p, kInvalid, {n, "strides (0, 0) for a 0-d tensor", "got (0, 1)"}));
    p = paged();
    (p.*member).batch_stride = -8;
    EXPECT_TRUE(Rejected(p, kInvalid, {n, "strides >= 0", "got (-8, 0)"}));
    p = paged();
    (p.*member).dtype = FP8ATTN_DTYPE_BF16;
    EXPECT_TRUE(Rejected(p, kUnsupported, {n, "dtype float32", "got bfloat16"}));
    p = paged();
    (p.*member).ptr = nullptr;  // 1.0: the rest is unused
    (p.*member).ndim = 7;
    EXPECT_TRUE(Accepted(p));
  }
}

TEST(ValidateScalars, SoftmaxScaleFinitePositive) {
  for (float scale : {0.0f, -0.125f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(scale);
    FwdParams p = dense();
    p.softmax_scale = scale;
    EXPECT_TRUE(Rejected(p, kInvalid, {"softmax_scale", "a finite value > 0"}));
  }
}

TEST(ValidateScalars, NumSplitsRange) {
  for (int splits : {0, 1, 7, 256}) {
    SCOPED_TRACE(splits);
    FwdParams p = paged();
    p.num_splits = splits;
    EXPECT_TRUE(Accepted(p));
  }
  for (int splits : {-1, 257}) {
    SCOPED_TRACE(splits);
    FwdParams p = paged();
    p.num_splits = splits;
    EXPECT_TRUE(Rejected(p, kInvalid, {"num_splits", "0 (heuristic) or 1..256", "got " + std::to_string(splits)}));
  }
}

// Relies on a split-KV launch needing scratch: num_splits = 4 on a 4096-key decode must ask for a workspace.
TEST(ValidateWorkspace, TooSmallOrMissingRejected) {
  FwdParams p = paged();
  p.window_left = -1;  // the whole 4096 keys: the heuristic splits (a ceiling of 4 keeps 4)
  p.num_splits = 4;
  const size_t needed = fp8attn::fwd_workspace_size(p, h200());
  ASSERT_GT(needed, 0u);
  p.workspace_bytes = needed;
  EXPECT_TRUE(Accepted(p));
  p.workspace_bytes = needed - 1;
  EXPECT_TRUE(Rejected(p, kInvalid,
                       {"workspace_bytes", ">= " + std::to_string(needed), "got " + std::to_string(needed - 1)}));
  p.workspace = nullptr;
  p.workspace_bytes = 0;
  EXPECT_TRUE(Rejected(p, kInvalid, {"workspace", std::to_string(needed) + " bytes", "got NULL"}));
  p.workspace = offset_bytes(fake(6), 4);
  p.workspace_bytes = needed;
  EXPECT_TRUE(Rejected(p, kInvalid, {"workspace", "16-byte aligned"}));
}

// num_splits is a ceiling: a request whose exact count would need more than the 2 GiB workspace cap (256 splits x
// 16k tokens x 32 heads would be ~69 GB) is planned within it, here unsplit since the grid fills the machine. The
// cap still guards the plan itself, naming num_splits and the largest count that fits.
TEST(ValidateWorkspace, CeilingPlansStayUnderTheCap) {
  FwdParams p = common(128, 128);
  p.batch = 1;
  p.seqlen_q = 16384;
  p.seqlen_k = 16384;
  p.num_heads_q = p.num_heads_kv = 32;
  set_contiguous_strides(p);
  p.num_splits = 256;
  EXPECT_TRUE(Accepted(p));
  EXPECT_EQ(fp8attn::fwd_workspace_size(p, h200()), 0u);
  const Status s = fp8attn::validate_fwd_workspace_size(p, size_t{69256347648});
  EXPECT_EQ(s.code(), kInvalid);
  for (const char* part : {"num_splits", "2 GiB cap", "at most 7 splits", "got 256 (69256347648 bytes"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  }
}

// The heuristic's plans stay far below the cap over a sweep of shapes.
TEST(ValidateWorkspace, HeuristicPlansStayFarBelowTheCap) {
  size_t largest = 0;
  for (int batch : {1, 2, 8, 64, 256}) {
    for (int q_tokens : {1, 4, 64, 1024}) {
      for (int heads_q : {8, 32, 128}) {
        for (int heads_kv : {1, 8}) {
          for (int seqlen_k : {1024, 32768, 131072}) {
            FwdParams p = common(256, 256);
            p.batch = batch;
            p.seqlen_q = q_tokens;
            p.seqlen_k = seqlen_k;
            p.num_heads_q = heads_q;
            p.num_heads_kv = heads_kv;
            set_contiguous_strides(p);
            largest = std::max(largest, fp8attn::fwd_workspace_size(p, h200()));
          }
        }
      }
    }
  }
  std::printf("largest heuristic workspace over the sweep: %zu bytes\n", largest);
  EXPECT_LE(largest, size_t{256} << 20) << "the heuristic plans a " << largest << "-byte workspace";
}

// ---------------------------------------------------------------------------------------------------
// Extents: each array's allocation against the sizes (params.h, "Extents")
// ---------------------------------------------------------------------------------------------------

TEST(CApi, ParamsInitLeavesExtentsNotDescribed) {
  FwdParams p;
  fp8attn_fwd_params_init(&p);
  for (const fp8attn_shape* s : {&p.q_shape, &p.k_shape, &p.v_shape, &p.out_shape, &p.lse_shape})
    EXPECT_EQ(s->ndim, -1) << "init leaves shapes not described";
  for (int64_t n : {p.cu_seqlens_q_len, p.cu_seqlens_k_len, p.seqused_k_len, p.block_table_rows, p.sink_len})
    EXPECT_EQ(n, -1) << "init leaves lengths not described";
}

TEST(ValidateExtents, UndescribedShapeRejected) {
  FwdParams p = dense();
  p.k_shape.ndim = -1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"k: expected shape [batch=2, seqlen_k=256, num_heads_kv=2, head_dim=128]",
                                     "got no shape (ndim -1: not described)", "(k_shape)"}));
}

TEST(ValidateExtents, QShapeMatchesTheSizes) {
  FwdParams p = dense();
  p.q_shape = make_shape({2, 127, 8, 128});
  EXPECT_TRUE(Rejected(p, kInvalid, {"q: expected shape [batch=2, seqlen_q=128, num_heads_q=8, head_dim=128]",
                                     "got (2, 127, 8, 128)", "(q_shape)"}));
  p = varlen();
  p.q_shape = make_shape({299, 16, 128});
  EXPECT_TRUE(Rejected(p, kInvalid, {"q: expected shape [total_q=300, num_heads_q=16, head_dim=128]", "(299, 16, 128)"}));
}

TEST(ValidateExtents, KShapeMatchesTheSizesInEveryLayout) {
  FwdParams p = dense();
  p.k_shape = make_shape({2, 256, 2, 64});
  EXPECT_TRUE(Rejected(p, kInvalid, {"k: expected shape", "head_dim=128]", "got (2, 256, 2, 64)"}));
  p = varlen();
  p.k_shape = make_shape({699, 4, 128});
  EXPECT_TRUE(Rejected(p, kInvalid, {"k: expected shape [total_k=700, num_heads_kv=4, head_dim=128]"}));
  p = paged();
  p.k_shape = make_shape({999, 16, 8, 128});
  EXPECT_TRUE(Rejected(p, kInvalid, {"k: expected shape [num_pages=1000, page_size=16, num_heads_kv=8, head_dim=128]",
                                     "got (999, 16, 8, 128)"}));
}

// The first hole: a v with fewer keys than k was accepted, and the kernel read past its end.
TEST(ValidateExtents, VShorterThanKRejected) {
  FwdParams p = dense();
  p.v_shape = make_shape({2, 128, 2, 128});
  EXPECT_TRUE(Rejected(p, kInvalid, {"v: expected shape [batch=2, seqlen_k=256, num_heads_kv=2, head_dim_v=128]",
                                     "got (2, 128, 2, 128)", "(v_shape)"}));
  p = varlen();
  p.v_shape = make_shape({350, 4, 128});
  EXPECT_TRUE(Rejected(p, kInvalid, {"v: expected shape [total_k=700", "got (350, 4, 128)"}));
  p = paged();
  p.v_shape = make_shape({500, 16, 8, 128});
  EXPECT_TRUE(Rejected(p, kInvalid, {"v: expected shape [num_pages=1000", "got (500, 16, 8, 128)"}));
}

TEST(ValidateExtents, VHeadDimIsHeadDimV) {
  FwdParams p = dense(192, 128);
  p.v_shape = make_shape({2, 256, 2, 192});
  EXPECT_TRUE(Rejected(p, kInvalid, {"v: expected shape", "head_dim_v=128]", "got (2, 256, 2, 192)"}));
}

TEST(ValidateExtents, OutShapeMatchesQWithHeadDimV) {
  FwdParams p = dense(192, 128);
  p.out_shape = make_shape({2, 128, 8, 192});
  EXPECT_TRUE(Rejected(p, kInvalid, {"out: expected shape [batch=2, seqlen_q=128, num_heads_q=8, head_dim_v=128]",
                                     "(out_shape)"}));
  p = varlen();
  p.out_shape = make_shape({300, 8, 128});
  EXPECT_TRUE(Rejected(p, kInvalid, {"out: expected shape [total_q=300, num_heads_q=16, head_dim_v=128]"}));
}

TEST(ValidateExtents, LseShapeMatchesQWhenGiven) {
  FwdParams p = dense();
  p.lse_shape = make_shape({2, 128, 8});  // [batch, seqlen_q, heads]: the transposed layout
  EXPECT_TRUE(Rejected(p, kInvalid, {"lse: expected shape [batch=2, num_heads_q=8, seqlen_q=128]", "(lse_shape)"}));
  p = varlen();
  p.lse_shape = make_shape({300, 16});
  EXPECT_TRUE(Rejected(p, kInvalid, {"lse: expected shape [num_heads_q=16, total_q=300]", "got (300, 16)"}));
  p.lse = nullptr;  // no lse: its shape is not read
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateExtents, CuSeqlensQHasBatchPlusOneEntries) {
  FwdParams p = varlen();
  p.cu_seqlens_q_len = 3;
  EXPECT_TRUE(Rejected(p, kInvalid, {"cu_seqlens_q: expected batch + 1=4 entries, got 3 (cu_seqlens_q_len)"}));
  p.cu_seqlens_q_len = -1;
  EXPECT_TRUE(Rejected(p, kInvalid, {"cu_seqlens_q", "got no length (-1: not described)"}));
}

TEST(ValidateExtents, CuSeqlensKHasBatchPlusOneEntries) {
  FwdParams p = varlen();
  p.cu_seqlens_k_len = 5;
  EXPECT_TRUE(Rejected(p, kInvalid, {"cu_seqlens_k: expected batch + 1=4 entries, got 5 (cu_seqlens_k_len)"}));
}

TEST(ValidateExtents, SequsedKHasBatchEntries) {
  FwdParams p = paged();
  p.seqused_k_len = 3;
  EXPECT_TRUE(Rejected(p, kInvalid, {"seqused_k: expected batch=4 entries, got 3 (seqused_k_len)"}));
}

TEST(ValidateExtents, BlockTableHasBatchRows) {
  FwdParams p = paged();
  p.block_table_rows = 2;
  EXPECT_TRUE(Rejected(p, kInvalid, {"block_table: expected batch=4 rows, got 2 (block_table_rows)"}));
}

// The second hole: an s_aux shorter than num_heads_q was read past its end (invalid global reads).
TEST(ValidateExtents, SinkShorterThanNumHeadsQRejected) {
  FwdParams p = paged();
  p.sink_len = 8;  // one per kv head instead of one per q head
  EXPECT_TRUE(Rejected(p, kInvalid, {"sink (s_aux): expected num_heads_q=32 entries, got 8 (sink_len)"}));
}

TEST(ValidateExtents, LengthsOfAbsentArraysAreNotRead) {
  FwdParams p = dense();
  p.cu_seqlens_q_len = p.cu_seqlens_k_len = p.seqused_k_len = p.block_table_rows = p.sink_len = -1;
  p.sink = nullptr;
  EXPECT_TRUE(Accepted(p));
}

// ---------------------------------------------------------------------------------------------------
// Empty is valid: NULL is accepted for a tensor without elements, and only then
// ---------------------------------------------------------------------------------------------------

// A varlen batch whose every key length is 0: k and v have no rows and torch hands over NULL.
TEST(ValidateEmpty, AllKeyLengthsZeroAcceptsNullKv) {
  FwdParams p = varlen();
  p.total_k = 0;
  p.seqlen_k = 0;
  p.k = p.v = nullptr;
  describe_extents(p);
  EXPECT_TRUE(Accepted(p));
  p = dense();
  p.seqlen_k = 0;
  p.k = p.v = nullptr;
  set_contiguous_strides(p);
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateEmpty, NoQueryRowsAcceptsNullQOutAndLse) {
  FwdParams p = varlen();
  p.total_q = 0;
  p.q = p.out = nullptr;
  p.lse = nullptr;
  set_contiguous_strides(p);
  EXPECT_TRUE(Accepted(p));
}

TEST(ValidateEmpty, NullWithElementsRejected) {
  FwdParams p = varlen();
  p.v = nullptr;
  EXPECT_TRUE(Rejected(p, kInvalid, {"v: expected a non-NULL device pointer (it has elements), got NULL"}));
}

}  // namespace
