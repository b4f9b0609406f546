// fp8attn GPU tests: robustness of the C++ API.
//   - Empty is valid: every key length 0 (NULL k and v, as torch passes them) gives zeros and an LSE of -inf;
//     no query rows writes nothing.
//   - Two streams driven by two host threads at once give the bits of serial calls.
//   - A call on a second GPU (made current, tensors there) works and leaves that device current; it gives
//     the bits of the same call on the first GPU. Skipped, saying so, with fewer than two SM90 GPUs.
//   - FP8ATTN_CHECK_DEVICE_ARGS's check (check_device_args) names out-of-range lengths and page ids, host
//     memory and memory of another device, and stays out of the way of a graph capture.
//   - Split counts: the same split plan gives the same bits; different counts each stay within the error bar
//     of docs/accuracy.md (so within the sum of two bars of each other), and are not promised to be bitwise equal.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "host/device_args.h"

namespace fp8attn_test {
namespace {

using fp8attn::StatusCode;

// Int32 values in device memory of the current device.
class DeviceInts {
 public:
  explicit DeviceInts(const std::vector<int32_t>& values) {
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(values.size(), 1) * sizeof(int32_t)),
               "cudaMalloc");
    check_cuda(cudaMemcpy(ptr_, values.data(), values.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceInts() { cudaFree(ptr_); }
  const int32_t* get() const { return ptr_; }

 private:
  int32_t* ptr_ = nullptr;
};

// Makes `device` current for a scope.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~CurrentDevice() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

// A second SM90 device besides the current one, or -1.
int second_sm90_device() {
  int count = 0, current = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || cudaGetDevice(&current) != cudaSuccess) return -1;
  for (int dev = 0; dev < count; ++dev) {
    cudaDeviceProp prop;
    if (dev != current && cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major == 9) return dev;
  }
  return -1;
}

int device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

bool same_bits(const Output& a, const Output& b) { return a.out == b.out && a.lse == b.lse; }

// max |a - b| over the finite out elements of two outputs of one layout.
double max_abs_difference(const Output& a, const Output& b, fp8attn_dtype dtype) {
  double worst = 0;
  for (size_t i = 0; i + 1 < a.out.size(); i += 2) {
    uint16_t x, y;
    std::memcpy(&x, &a.out[i], 2);
    std::memcpy(&y, &b.out[i], 2);
    const double fx = dtype == FP8ATTN_DTYPE_F16 ? fp8attn::ref::f16_to_float(x) : fp8attn::ref::bf16_to_float(x);
    const double fy = dtype == FP8ATTN_DTYPE_F16 ? fp8attn::ref::f16_to_float(y) : fp8attn::ref::bf16_to_float(y);
    if (std::isfinite(fx) && std::isfinite(fy)) worst = std::max(worst, std::fabs(fx - fy));
  }
  return worst;
}

Case prefill_case() {
  Case c;
  c.batch = 2;
  c.seqlens_q = {300, 77};
  c.seqlens_k = {700, 77};
  c.varlen_q = true;
  c.kv = KvLayout::kVarlen;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.causal = true;
  c.descale_q = c.descale_k = c.descale_v = DescaleForm::kPerBatchHead;
  c.seed = 101;
  return c;
}

Case decode_case(int num_splits) {
  Case c;
  c.batch = 4;
  c.seqlens_q = {1, 1, 1, 1};
  c.seqlens_k = {4000, 17, 1025, 2500};
  c.varlen_q = true;
  c.kv = KvLayout::kPaged;
  c.page_size = 64;
  c.heads_q = 32;
  c.heads_kv = 8;
  c.causal = true;
  c.sink = SinkType::kBF16;
  c.descale_k = DescaleForm::kBroadcastBatch;
  c.num_splits = num_splits;
  c.seed = 202;
  return c;
}

// ---- empty is valid ----------------------------------------------------------------------------------------

TEST(Empty, AllKeyLengthsZeroGivesZerosAndMinusInfLse) {
  Case c = prefill_case();
  c.seqlens_k = {0, 0};  // total_k = 0: the harness passes NULL k and v, as torch does
  expect_case_passes(c);
}

TEST(Empty, DenseZeroKeysGivesZerosAndMinusInfLse) {
  Case c;
  c.seqlens_q = {33};
  c.seqlens_k = {0};
  c.heads_q = c.heads_kv = 4;
  c.sink = SinkType::kF32;  // the sink alone: out 0, LSE = the sink
  expect_case_passes(c);
}

TEST(Empty, NoQueryRowsWritesNothing) {
  Case c = prefill_case();
  c.seqlens_q = {0, 0};  // total_q = 0: NULL q, out and lse
  c.extra_max_seqlen = 16;
  expect_case_passes(c);
}

// ---- batches past CUDA's grid limits ----------------------------------------------------------------------

// 70,000 decoding sequences: batch x splits passes gridDim.z's 65535, so the grid folds into gridDim.x (it
// failed at launch with cudaErrorInvalidValue before). Short contexts keep the CPU reference quick; every
// sequence's row is checked against it, and an exact split count folds the splits in too.
TEST(LargeBatch, SeventyThousandSequenceDecode) {
  for (int splits : {0, 2}) {
    SCOPED_TRACE("num_splits=" + std::to_string(splits));
    Case c;
    c.batch = 70000;
    c.seqlens_q.assign(c.batch, 1);
    c.seqlens_k.resize(c.batch);
    for (int b = 0; b < c.batch; ++b) c.seqlens_k[b] = 1 + (b * 7) % 40;
    c.varlen_q = true;
    c.kv = KvLayout::kPaged;
    c.page_size = 16;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.head_dim = c.head_dim_v = 128;
    c.causal = true;
    c.num_splits = splits;
    c.seed = 70000;
    expect_case_passes(c);
  }
}

// ---- concurrency -------------------------------------------------------------------------------------------

TEST(Concurrency, TwoStreamsTwoThreadsSameBitsAsSerial) {
  // Serial bits first, one call after the other on the legacy stream.
  const Case cases[2] = {prefill_case(), decode_case(0)};
  Output serial[2];
  for (int i = 0; i < 2; ++i) {
    Problem problem(cases[i]);
    const fp8attn::Status status = problem.run();
    const std::string skip = dev_build_skip(status, cases[i].head_dim, cases[i].head_dim_v);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(status.ok()) << status.message();
    serial[i] = problem.download();
  }
  // Then each case from its own thread on its own stream, both at once, many rounds.
  constexpr int kRounds = 25;
  Problem first(cases[0]), second(cases[1]);
  const Problem* problems[2] = {&first, &second};
  check_cuda(cudaDeviceSynchronize(), "uploads");
  std::atomic<int> ready{0};  // both threads start together, so that their calls overlap
  int mismatches[2] = {0, 0};
  std::string errors[2];
  auto worker = [&](int i) {
    try {
      Stream stream;
      ++ready;
      while (ready.load() < 2) std::this_thread::yield();
      for (int round = 0; round < kRounds; ++round) {
        const fp8attn::Status status = problems[i]->run(stream.get());
        if (!status.ok()) throw std::runtime_error(status.message());
        if (!same_bits(problems[i]->download(stream.get()), serial[i])) ++mismatches[i];
      }
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(errors[i], "") << "thread " << i;
    EXPECT_EQ(mismatches[i], 0) << "thread " << i << ": " << mismatches[i] << " of " << kRounds
                                << " concurrent runs differ from the serial bits; case: " << cases[i].describe();
  }
}

// ---- devices -----------------------------------------------------------------------------------------------

TEST(Devices, CallOnSecondGpuWorksAndGivesTheFirstGpusBits) {
  const int second = second_sm90_device();
  if (second < 0)
    GTEST_SKIP() << "needs a second SM90 GPU, found " << device_count() << " device(s): run on a 2-GPU machine";
  const Case c = decode_case(3);
  Output on_first;
  {
    Problem problem(c);
    ASSERT_TRUE(problem.run().ok());
    on_first = problem.download();
  }
  CurrentDevice use(second);
  Problem problem(c);  // every buffer on the second device
  const fp8attn::Status status = problem.run();
  ASSERT_TRUE(status.ok()) << status.message();
  const Output on_second = problem.download();
  int now = -1;
  check_cuda(cudaGetDevice(&now), "cudaGetDevice");
  EXPECT_EQ(now, second) << "fp8attn::fwd changed the current device";
  const Metrics m = problem.check(on_second);
  EXPECT_TRUE(m.passed) << m.failure;
  EXPECT_TRUE(same_bits(on_first, on_second)) << "the same call gives other bits on device " << second;
}

// ---- FP8ATTN_CHECK_DEVICE_ARGS ------------------------------------------------------------------------------

// Rejected with a message naming `parts`, from the debug check.
void expect_debug_rejects(const fp8attn_fwd_params& p, std::initializer_list<std::string> parts) {
  const fp8attn::Status s = fp8attn::check_device_args(p, nullptr);
  ASSERT_FALSE(s.ok()) << "accepted; expected: " << *parts.begin();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  for (const std::string& part : parts) EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("(FP8ATTN_CHECK_DEVICE_ARGS)"), std::string::npos) << s.message();
}

TEST(DeviceArgs, ValidCallsPass) {
  for (const Case& c : {prefill_case(), decode_case(0)}) {
    Problem problem(c);
    const fp8attn::Status s = fp8attn::check_device_args(problem.params(), nullptr);
    EXPECT_TRUE(s.ok()) << s.message();
  }
}

TEST(DeviceArgs, SequsedKBeyondMaxSeqlenKRejected) {
  Problem problem(decode_case(0));
  fp8attn_fwd_params p = problem.params();
  const DeviceInts used({1, p.seqlen_k + 1, 5, 0});
  p.seqused_k = used.get();
  expect_debug_rejects(p, {"seqused_k[1]", "max_seqlen_k=" + std::to_string(p.seqlen_k), "got " +
                                                                                         std::to_string(p.seqlen_k + 1)});
  const DeviceInts negative({1, -3, 5, 0});
  p.seqused_k = negative.get();
  expect_debug_rejects(p, {"seqused_k[1]", "got -3"});
}

TEST(DeviceArgs, BlockTablePageOutOfRangeRejected) {
  Problem problem(decode_case(0));
  fp8attn_fwd_params p = problem.params();
  std::vector<int32_t> table(size_t(p.batch) * p.block_table_batch_stride, 0);
  table[2 * p.block_table_batch_stride + 3] = p.num_pages;  // sequence 2 (1025 keys) uses pages 0..16
  const DeviceInts bad(table);
  p.block_table = bad.get();
  expect_debug_rejects(p, {"block_table[2, 3]", "num_pages=" + std::to_string(p.num_pages),
                           "got " + std::to_string(p.num_pages)});
  // Entries past a sequence's last page are never read, so they may hold anything.
  table[2 * p.block_table_batch_stride + 3] = 0;
  table[1 * p.block_table_batch_stride + 5] = -1;  // sequence 1 (17 keys) uses pages 0..0
  const DeviceInts padding(table);
  p.block_table = padding.get();
  const fp8attn::Status s = fp8attn::check_device_args(p, nullptr);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(DeviceArgs, CuSeqlensOutOfRangeRejected) {
  Problem problem(prefill_case());
  fp8attn_fwd_params p = problem.params();
  const DeviceInts decreasing({0, 300, 299});
  p.cu_seqlens_q = decreasing.get();
  expect_debug_rejects(p, {"cu_seqlens_q[2]", "non-decreasing", "got 299"});
  const DeviceInts past_total({0, 300, p.total_q + 1});
  p.cu_seqlens_q = past_total.get();
  expect_debug_rejects(p, {"cu_seqlens_q", "total_q=" + std::to_string(p.total_q)});
  p = problem.params();
  const DeviceInts too_long({0, 700, 700 + p.seqlen_k + 1});
  p.cu_seqlens_k = too_long.get();
  expect_debug_rejects(p, {"cu_seqlens_k[2] - cu_seqlens_k[1]", "max_seqlen_k=" + std::to_string(p.seqlen_k)});
}

TEST(DeviceArgs, HostMemoryRejected) {
  Problem problem(prefill_case());
  fp8attn_fwd_params p = problem.params();
  std::vector<int32_t> host_lengths(3, 0);
  p.cu_seqlens_k = host_lengths.data();
  expect_debug_rejects(p, {"cu_seqlens_k: expected device memory"});
}

TEST(DeviceArgs, MemoryOfAnotherDeviceRejected) {
  const int second = second_sm90_device();
  if (second < 0)
    GTEST_SKIP() << "needs a second SM90 GPU, found " << device_count() << " device(s): run on a 2-GPU machine";
  Problem problem(prefill_case());
  fp8attn_fwd_params p = problem.params();
  int first = 0;
  check_cuda(cudaGetDevice(&first), "cudaGetDevice");
  void* elsewhere = nullptr;
  {
    CurrentDevice use(second);
    check_cuda(cudaMalloc(&elsewhere, 1 << 20), "cudaMalloc");
  }
  p.v = elsewhere;
  expect_debug_rejects(p, {"v: expected memory of the current device " + std::to_string(first),
                           "got memory of device " + std::to_string(second)});
  cudaFree(elsewhere);
}

TEST(DeviceArgs, SkippedWhileCapturing) {
  Problem problem(decode_case(0));
  fp8attn_fwd_params p = problem.params();
  const DeviceInts used({1, p.seqlen_k + 1, 5, 0});  // would be refused outside a capture
  p.seqused_k = used.get();
  Stream stream;
  check_cuda(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  const fp8attn::Status s = fp8attn::check_device_args(p, stream.get());
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream.get(), &graph);
  if (graph) cudaGraphDestroy(graph);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(end, cudaSuccess) << "the check broke the capture: " << cudaGetErrorString(end);
}

// ---- split counts (docs/accuracy.md, "Determinism") ---------------------------------------------------------

TEST(Splits, SamePlanSameBitsEveryCountWithinTheBar) {
  Output by_one;
  for (int splits : {1, 2, 3, 4, 7, 16, 0}) {
    SCOPED_TRACE("num_splits=" + std::to_string(splits));
    Problem problem(decode_case(splits));
    const fp8attn::Status status = problem.run();
    const std::string skip = dev_build_skip(status, 128, 128);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(status.ok()) << status.message();
    const Output first = problem.download();
    ASSERT_TRUE(problem.run().ok());
    EXPECT_TRUE(same_bits(first, problem.download())) << "two runs of one split plan differ";
    const Metrics m = problem.check(first);
    EXPECT_TRUE(m.passed) << m.failure;
    if (splits == 1) {
      by_one = first;
    } else {
      std::printf("[  splits  ] num_splits=%d: %s bits as num_splits=1, max |difference| %.3g (bar %.3g)\n", splits,
                  same_bits(first, by_one) ? "the same" : "other", max_abs_difference(first, by_one, FP8ATTN_DTYPE_BF16),
                  m.bound);
    }
  }
}

}  // namespace
}  // namespace fp8attn_test
