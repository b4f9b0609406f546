// fp8attn GPU tests: runtime behaviour of fp8attn::fwd on a device.
//   - A bad argument comes back as a named validation error, with nothing launched and no CUDA error left.
//   - The stream argument is honoured: the work waits behind earlier work on that stream and on nothing else,
//     and fwd() itself never blocks on it.
//   - Two runs of the same call are bit-identical.
//   - Output is written exactly where the call says and nowhere else.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "host/api_internal.h"
#include "host/config.h"

namespace fp8attn_test {
namespace {

using fp8attn::StatusCode;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

// A small valid varlen call with every optional input present, to break one argument at a time.
Case valid_call() {
  Case c;
  c.batch = 2;
  c.seqlens_q = {17, 5};
  c.seqlens_k = {40, 239};
  c.varlen_q = true;
  c.spare_q_rows = 3;
  c.kv = KvLayout::kVarlen;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.head_dim = c.head_dim_v = 128;
  c.causal = true;
  c.descale_q = c.descale_k = c.descale_v = DescaleForm::kPerBatchHead;
  c.sink = SinkType::kF32;
  c.seed = 42;
  return c;
}

struct BadCall {
  const char* name;
  void (*mutate)(fp8attn_fwd_params* p);
  std::vector<StatusCode> codes;  // any of these is right
  const char* names;              // the message must mention this (lower case)
};

const BadCall kBadCalls[] = {
    {"softcap_negative", [](fp8attn_fwd_params* p) { p->softcap = -30.0f; }, {StatusCode::kInvalidArgument}, "softcap"},
    {"e4m3_out_without_output_scale",
     [](fp8attn_fwd_params* p) { p->out_dtype = FP8ATTN_DTYPE_E4M3; },
     {StatusCode::kInvalidArgument},
     "output_scale"},
    {"output_scale_with_bf16_out",
     [](fp8attn_fwd_params* p) { p->output_scale.ptr = static_cast<const float*>(p->q); },
     {StatusCode::kInvalidArgument},
     "output_scale"},
    {"qv", [](fp8attn_fwd_params* p) { p->qv = p->q; }, {StatusCode::kNotSupported}, "qv"},
    {"block_sparsity",
     [](fp8attn_fwd_params* p) { p->block_sparsity = p->q; },
     {StatusCode::kNotSupported},
     "block_sparsity"},
    {"e5m2",
     [](fp8attn_fwd_params* p) { p->q_dtype = p->k_dtype = p->v_dtype = FP8ATTN_DTYPE_E5M2; },
     {StatusCode::kNotSupported},
     "e5m2"},
    {"v_e5m2_beside_e4m3",
     [](fp8attn_fwd_params* p) { p->v_dtype = FP8ATTN_DTYPE_E5M2; },
     {StatusCode::kNotSupported},
     "v: expected dtype float8_e4m3fn"},
    {"q_f32",
     [](fp8attn_fwd_params* p) { p->q_dtype = FP8ATTN_DTYPE_F32; },
     {StatusCode::kNotSupported, StatusCode::kInvalidArgument},
     "q"},
    // A 16-bit q (issue 35) is quantized per row by the kernel: it takes no q_descale (valid_call passes one).
    {"bf16_q_with_q_descale",
     [](fp8attn_fwd_params* p) { p->q_dtype = FP8ATTN_DTYPE_BF16; },
     {StatusCode::kInvalidArgument},
     "q_descale"},
    {"f16_q_over_f16_kv",
     [](fp8attn_fwd_params* p) {
       p->q_descale.ptr = nullptr;
       p->q_dtype = p->k_dtype = p->v_dtype = FP8ATTN_DTYPE_F16;
     },
     {StatusCode::kNotSupported},
     "k: expected dtype float8_e4m3fn"},
    {"out_dtype_f32",
     [](fp8attn_fwd_params* p) { p->out_dtype = FP8ATTN_DTYPE_F32; },
     {StatusCode::kNotSupported, StatusCode::kInvalidArgument},
     "out_dtype"},
    {"head_dim_80",
     [](fp8attn_fwd_params* p) { p->head_dim = p->head_dim_v = 80; },
     {StatusCode::kNotSupported, StatusCode::kInvalidArgument},
     "head_dim"},
    {"heads_not_multiple",
     [](fp8attn_fwd_params* p) { p->num_heads_kv = 3; },
     {StatusCode::kInvalidArgument},
     "num_heads"},
    {"batch_zero", [](fp8attn_fwd_params* p) { p->batch = 0; }, {StatusCode::kInvalidArgument}, "batch"},
    {"softmax_scale_unset",
     [](fp8attn_fwd_params* p) { p->softmax_scale = 0.0f; },
     {StatusCode::kInvalidArgument},
     "softmax_scale"},
    {"window_left_below_minus_one",
     [](fp8attn_fwd_params* p) { p->window_left = -2; },
     {StatusCode::kInvalidArgument},
     "window"},
    {"causal_with_right_window",
     [](fp8attn_fwd_params* p) { p->window_right = 5; },
     {StatusCode::kInvalidArgument},
     "window"},
    // The two holes, which used to launch and read past the buffers: a v shorter than k, an s_aux
    // shorter than num_heads_q.
    {"v_shorter_than_k",
     [](fp8attn_fwd_params* p) { p->v_shape.size[0] -= 1; },
     {StatusCode::kInvalidArgument},
     "v: expected shape"},
    {"sink_shorter_than_num_heads_q",
     [](fp8attn_fwd_params* p) { p->sink_len = p->num_heads_kv; },
     {StatusCode::kInvalidArgument},
     "s_aux"},
    {"q_null", [](fp8attn_fwd_params* p) { p->q = nullptr; }, {StatusCode::kInvalidArgument}, "q"},
    {"out_null", [](fp8attn_fwd_params* p) { p->out = nullptr; }, {StatusCode::kInvalidArgument}, "out"},
    {"q_head_stride_unaligned",
     [](fp8attn_fwd_params* p) { p->q_head_stride += 1; },
     {StatusCode::kInvalidArgument},
     "q_head_stride"},
    {"out_heads_alias",
     [](fp8attn_fwd_params* p) { p->o_head_stride = 0; },
     {StatusCode::kInvalidArgument},
     "o_head_stride"},
    {"descale_wrong_shape",
     [](fp8attn_fwd_params* p) { p->q_descale.size[0] += 1; },
     {StatusCode::kInvalidArgument},
     "q_descale"},
    {"descale_not_f32",
     [](fp8attn_fwd_params* p) { p->k_descale.dtype = FP8ATTN_DTYPE_BF16; },
     {StatusCode::kNotSupported, StatusCode::kInvalidArgument},
     "k_descale"},
    {"sink_f16",
     [](fp8attn_fwd_params* p) { p->sink_dtype = FP8ATTN_DTYPE_F16; },
     {StatusCode::kNotSupported, StatusCode::kInvalidArgument},
     "sink"},
    {"both_cu_seqlens_k_and_seqused_k",
     [](fp8attn_fwd_params* p) { p->seqused_k = p->cu_seqlens_k; },
     {StatusCode::kInvalidArgument},
     "seqused_k"},
    {"num_splits_negative",
     [](fp8attn_fwd_params* p) { p->num_splits = -1; },
     {StatusCode::kInvalidArgument},
     "num_splits"},
    {"everything_unset",
     [](fp8attn_fwd_params* p) { fp8attn_fwd_params_init(p); },
     {StatusCode::kInvalidArgument, StatusCode::kNotSupported},
     ""},
};

void PrintTo(const BadCall& bad, std::ostream* os) { *os << bad.name; }

class FwdBadArgument : public ::testing::TestWithParam<BadCall> {};

TEST_P(FwdBadArgument, IsRefusedByNameWithoutLaunching) {
  const BadCall& bad = GetParam();
  Problem problem(valid_call());
  problem.poison(nullptr);
  fp8attn_fwd_params params = problem.params();
  bad.mutate(&params);

  const fp8attn::Status status = fp8attn::fwd(params, nullptr);
  EXPECT_NE(std::find(bad.codes.begin(), bad.codes.end(), status.code()), bad.codes.end())
      << "got code " << static_cast<int>(status.code()) << ": " << status.message();
  EXPECT_FALSE(status.message().empty());
  EXPECT_NE(lower(status.message()).find(bad.names), std::string::npos)
      << "the message should name '" << bad.names << "': " << status.message();

  // Nothing ran: the poison is intact and the runtime holds no error.
  const Output output = problem.download(nullptr);
  EXPECT_TRUE(Problem::untouched(output)) << "a refused call wrote to out or lse";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(Api, FwdBadArgument, ::testing::ValuesIn(kBadCalls),
                         [](const ::testing::TestParamInfo<BadCall>& info) { return std::string(info.param.name); });

// A launch the runtime refuses (here a grid past CUDA's y limit of 65,535, which select_config never picks) is
// reported as a CUDA error naming the launch, after the forward's one retry with the shared-memory opt-in set
// again, and leaves no error pending for the caller's next runtime check.
TEST(FwdLaunchFailure, IsReportedAndLeavesNoErrorPending) {
  const Case c = valid_call();
  Problem problem(c);
  const fp8attn::Status first = problem.run();  // sets the opt-in, so the failure below takes the retry
  const std::string skip = dev_build_skip(first, c.head_dim, c.head_dim_v);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(first.ok()) << first.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  fp8attn::DeviceInfo device;
  ASSERT_TRUE(fp8attn::query_device(&device).ok());
  fp8attn::KernelConfig config = fp8attn::select_config(fp8attn::describe_problem(problem.params(), device));
  config.grid_y = 70000;
  problem.poison(nullptr);

  const fp8attn::Status status = fp8attn::launch_with_config(problem.params(), config, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kCudaError) << status.message();
  EXPECT_NE(status.message().find("fp8attn kernel launch"), std::string::npos) << status.message();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(Problem::untouched(problem.download(nullptr))) << "a refused launch wrote to out or lse";

  // The next call runs as usual, and right.
  ASSERT_TRUE(problem.run().ok());
  const Metrics m = problem.check(problem.download());
  EXPECT_TRUE(m.passed) << m.failure;
}

// Holds a stream at one point until opened: a host function enqueued on the stream waits on the gate. A
// watchdog opens it after `timeout` so that the test cannot hang (for instance when fwd() waits on its own
// stream); opened_by_watchdog() tells whether that happened.
class StreamGate {
 public:
  explicit StreamGate(std::chrono::seconds timeout)
      : watchdog_([this, timeout] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (!cv_.wait_for(lock, timeout, [&] { return open_; })) by_watchdog_ = true;
          open_ = true;
          cv_.notify_all();
        }) {}
  ~StreamGate() {
    open();
    watchdog_.join();
  }
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  bool opened_by_watchdog() {
    std::lock_guard<std::mutex> lock(mutex_);
    return by_watchdog_;
  }
  static void CUDART_CB wait(void* gate) {
    auto* self = static_cast<StreamGate*>(gate);
    std::unique_lock<std::mutex> lock(self->mutex_);
    self->cv_.wait(lock, [&] { return self->open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
  bool by_watchdog_ = false;
  std::thread watchdog_;  // declared last: it starts once the members it uses exist
};

TEST(FwdStream, RunsOnTheGivenStreamOnly) {
  Case c = valid_call();
  c.seqlens_k = {1025, 239};  // long enough for a split-KV heuristic to split, so a combine step is covered
  Problem problem(c);
  cudaStream_t stream = nullptr, probe = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&probe, cudaStreamNonBlocking), cudaSuccess);

  // Warm-up: the same call once, run to completion, before any stream is blocked. With CUDA's lazy module
  // loading (the default since CUDA 12) the first launch of a kernel in the process loads its module, and that
  // load may wait for the device (work already queued, such as the host function below) — inside the CUDA
  // runtime, outside fp8attn's control. If this test runs first in the binary, fwd() would be that first
  // launch and would stall until the gate's watchdog opened it. CUDA_MODULE_LOADING=EAGER would also avoid
  // it; warming up keeps the test independent of the environment and of test order. Every kernel this call
  // launches (split and combine alike: same params, same heuristic) is loaded after this.
  const fp8attn::Status warm_up = problem.run(stream);
  const std::string skip = dev_build_skip(warm_up, c.head_dim, c.head_dim_v);
  if (!skip.empty()) {
    cudaStreamDestroy(probe);
    cudaStreamDestroy(stream);
    GTEST_SKIP() << skip;
  }
  ASSERT_TRUE(warm_up.ok()) << "warm-up call: " << warm_up.message();
  ASSERT_FALSE(Problem::untouched(problem.download(stream))) << "warm-up call wrote nothing";

  problem.poison(stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  // Block `stream`, then enqueue the call behind the block.
  StreamGate gate(std::chrono::seconds(20));
  ASSERT_EQ(cudaLaunchHostFunc(stream, StreamGate::wait, &gate), cudaSuccess);
  const fp8attn::Status status = problem.launch(stream);
  const bool returned_while_blocked = !gate.opened_by_watchdog();
  // Work enqueued anywhere else (the legacy or per-thread default stream) completes now; ours must not have.
  const cudaError_t legacy_sync = cudaStreamSynchronize(nullptr);
  const cudaError_t per_thread_sync = cudaStreamSynchronize(cudaStreamPerThread);
  const Output while_blocked = problem.download(probe);

  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const Output after = problem.download(stream);
  cudaStreamDestroy(probe);
  cudaStreamDestroy(stream);

  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(returned_while_blocked) << "fwd() did not return while its stream was blocked: it synchronizes";
  EXPECT_EQ(legacy_sync, cudaSuccess);
  EXPECT_EQ(per_thread_sync, cudaSuccess);
  EXPECT_TRUE(Problem::untouched(while_blocked)) << "output was written before the stream reached the call: the "
                                                    "work ran on another stream";
  const Metrics m = problem.check(after);
  EXPECT_TRUE(m.passed) << m.failure;
}

// Bit-identical results from two runs of one call.
void expect_deterministic(const Case& c) {
  Problem problem(c);
  const fp8attn::Status first_status = problem.run();
  const std::string skip = dev_build_skip(first_status, c.head_dim, c.head_dim_v);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(first_status.ok()) << first_status.message();
  const Output first = problem.download();
  ASSERT_TRUE(problem.run().ok());
  const Output second = problem.download();
  ASSERT_FALSE(Problem::untouched(first));
  size_t differing = 0;
  for (size_t i = 0; i < first.out.size(); ++i) differing += first.out[i] != second.out[i];
  for (size_t i = 0; i < first.lse.size(); ++i) differing += first.lse[i] != second.lse[i];
  EXPECT_EQ(differing, 0u) << "bytes that differ between two identical runs\n  case: " << c.describe();
}

TEST(FwdDeterminism, PrefillTwoRunsBitIdentical) {
  Case c;
  c.batch = 2;
  c.seqlens_q = {1025, 1025};
  c.seqlens_k = {1025, 1025};
  c.heads_q = 8;
  c.heads_kv = 2;
  c.causal = true;
  c.seed = 43;
  expect_deterministic(c);
}

TEST(FwdDeterminism, DecodeWithHeuristicSplitsTwoRunsBitIdentical) {
  Case c;
  c.batch = 4;
  c.seqlens_q = {1, 1, 1, 1};
  c.seqlens_k = {4000, 1025, 17, 2500};
  c.varlen_q = true;
  c.kv = KvLayout::kVarlen;
  c.heads_q = 32;
  c.heads_kv = 4;
  c.head_dim = c.head_dim_v = 64;
  c.sink = SinkType::kF32;
  c.seed = 44;
  expect_deterministic(c);
}

// Padding rows of varlen q, stride gaps of out, LSE gaps: all must keep their poison.
TEST(FwdOutput, WrittenOnlyWhereExpected) {
  Case c;
  c.batch = 3;
  c.seqlens_q = {17, 1, 113};
  c.seqlens_k = {17, 239, 50};
  c.varlen_q = true;
  c.spare_q_rows = 19;
  c.kv = KvLayout::kVarlen;
  c.spare_k_rows = 16;
  c.strided = true;
  c.heads_q = 4;
  c.heads_kv = 1;
  c.window_left = 37;
  c.window_right = 11;
  c.seed = 45;
  Problem problem(c);
  const fp8attn::Status status = problem.run();
  const std::string skip = dev_build_skip(status, c.head_dim, c.head_dim_v);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(status.ok()) << status.message();
  const Metrics m = problem.check(problem.download());
  EXPECT_EQ(m.stray_writes, 0) << "elements written outside the valid rows";
  EXPECT_EQ(m.nonfinite, 0) << "valid elements left unwritten or non-finite";
  EXPECT_EQ(m.lse_mismatches, 0) << "LSE entries unwritten or of the wrong finiteness";
  EXPECT_TRUE(m.passed) << m.failure;
}

// The C ABI's two steps (make_plan, then run with a workspace the caller sized from the plan) compute what
// fwd() computes, bit for bit, on a decode whose heuristic splits KV (so the workspace and the combine
// launch are exercised).
TEST(FwdPlanRun, CallerSizedWorkspaceMatchesFwd) {
  Case c;
  c.batch = 2;
  c.seqlens_q = {1, 1};
  c.seqlens_k = {3000, 4096};
  c.varlen_q = true;
  c.kv = KvLayout::kVarlen;
  c.heads_q = 32;
  c.heads_kv = 8;
  c.seed = 45;
  Problem problem(c);
  const fp8attn::Status fwd_status = problem.run();
  if (fwd_status.code() == StatusCode::kNotCompiled) GTEST_SKIP() << fwd_status.message();
  ASSERT_TRUE(fwd_status.ok()) << fwd_status.message();
  const Output by_fwd = problem.download();

  fp8attn_fwd_params params = problem.params();
  params.workspace = nullptr;
  params.workspace_bytes = 0;
  fp8attn_fwd_plan plan;
  char err[1024] = {};
  ASSERT_EQ(fp8attn_fwd_make_plan(&params, &plan, err, sizeof(err)), FP8ATTN_OK) << err;
  ASSERT_GT(plan.num_splits, 1) << "precondition: the heuristic splits this decode";
  ASSERT_GT(plan.workspace_bytes, 0u);
  void* workspace = nullptr;
  ASSERT_EQ(cudaMalloc(&workspace, plan.workspace_bytes), cudaSuccess);
  params.workspace = workspace;
  params.workspace_bytes = plan.workspace_bytes;
  problem.poison(nullptr);
  const int code = fp8attn_fwd_run(&params, &plan, nullptr, err, sizeof(err));
  const Output by_plan_run = problem.download();
  cudaFree(workspace);
  ASSERT_EQ(code, FP8ATTN_OK) << err;
  ASSERT_FALSE(Problem::untouched(by_plan_run));
  EXPECT_TRUE(by_plan_run.out == by_fwd.out && by_plan_run.lse == by_fwd.lse)
      << "plan + run differs from fwd()\n  case: " << c.describe();
}

}  // namespace
}  // namespace fp8attn_test
