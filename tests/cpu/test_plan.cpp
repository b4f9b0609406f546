// Unit tests of the plan/run entry points (fp8attn_fwd_make_plan / fp8attn_fwd_run, C++ plan_fwd / run_fwd).
// Host only: pointers are fake device addresses, and every run here fails before it would launch.
//
//   PlanFwd      a plan is select_config's choice and its workspace; it validates, and builds no message
//                (allocates nothing) on success; a kernel this build lacks is "not compiled" at plan time.
//   RunFwd       a run refuses an unplanned or failed plan, changed sizes and a missing workspace.
//   CApiPlan     the C ABI: NULL arguments, error codes, and the workspace query reporting a failed device
//                query instead of returning 0.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>

#include "common/extents.h"
#include "common/fake_device.h"
#include "fp8attn/c_api.h"
#include "fp8attn/fp8attn.h"
#include "host/config.h"
#include "sm90/launch.h"

// Counts heap allocations of the whole test binary (the library's code is linked in statically, from
// fp8attn_internal), so a test can assert that a call allocated nothing. Forwarding to malloc changes nothing else.
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using fp8attn_test::fake;
using fp8attn_test::h200;
using fp8attn::DeviceInfo;
using fp8attn::FwdParams;
using fp8attn::FwdPlan;
using fp8attn::Status;
using fp8attn::StatusCode;

// vLLM-style paged decode: 32 sequences of one token, 32:8 heads, 16-token pages, up to 32k keys.
FwdParams paged_decode(int head_dim = 128) {
  FwdParams p;
  fp8attn_fwd_params_init(&p);
  p.q = fake(1);
  p.k = fake(2);
  p.v = fake(3);
  p.out = fake(4);
  p.q_dtype = p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E4M3;
  p.head_dim = p.head_dim_v = head_dim;
  p.softmax_scale = 0.088f;
  p.batch = 32;
  p.seqlen_q = 1;
  p.seqlen_k = 32768;
  p.num_heads_q = 32;
  p.num_heads_kv = 8;
  p.cu_seqlens_q = fake<int32_t>(5);
  p.total_q = 32;
  p.seqused_k = fake<int32_t>(6);
  p.block_table = fake<int32_t>(7);
  p.page_size = 16;
  p.max_pages_per_seq = 2048;
  p.block_table_batch_stride = 2048;
  p.num_pages = 100000;
  p.q_head_stride = p.o_head_stride = head_dim;
  p.q_row_stride = p.o_row_stride = 32 * head_dim;
  p.k_head_stride = p.v_head_stride = head_dim;
  p.k_row_stride = p.v_row_stride = 8 * head_dim;
  p.k_batch_stride = p.v_batch_stride = 16 * 8 * head_dim;
  p.causal = 1;
  fp8attn_test::describe_extents(p);  // the extents a caller whose tensors agree with the sizes passes
  return p;
}

// ---------------------------------------------------------------------------------------------------------

TEST(PlanFwd, IsSelectConfigsChoiceAndItsWorkspace) {
  for (int num_splits : {0, 1, 4}) {
    SCOPED_TRACE(num_splits);
    FwdParams p = paged_decode();
    p.batch = 2;  // a small grid: the heuristic splits
    p.total_q = 2;
    p.num_splits = num_splits;
    fp8attn_test::describe_extents(p);  // again, for the new sizes
    const fp8attn::ProblemShape problem = fp8attn::describe_problem(p, h200());
    const fp8attn::KernelConfig config = fp8attn::select_config(problem);
    if (!fp8attn::sm90::has_kernel(config.key)) GTEST_SKIP() << config.key.to_string() << " not in this build";
    FwdPlan plan;
    const Status s = fp8attn::plan_fwd(p, h200(), &plan);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(plan.num_splits, config.num_splits);
    EXPECT_EQ(plan.workspace_bytes, fp8attn::split_workspace_bytes(problem, config));
    EXPECT_EQ(plan.workspace_bytes, fp8attn::fwd_workspace_size(p, h200()));
    if (num_splits == 0) {
      EXPECT_GT(plan.num_splits, 1) << "precondition: the heuristic splits this decode";
    }
    EXPECT_EQ(plan.workspace_bytes > 0, plan.num_splits > 1);
  }
}

// Validation and planning run on every eager call: a valid call must not pay for error messages (or any
// other heap allocation).
TEST(PlanFwd, AllocatesNothingOnSuccess) {
  FwdParams p = paged_decode();
  p.lse = fake<float>(8);
  p.lse_head_stride = 32;
  p.q_descale.ptr = fake<float>(9);  // a 0-d descale
  p.sink = fake(10);
  FwdPlan plan;
  const Status warm = fp8attn::plan_fwd(p, h200(), &plan);
  if (warm.code() == StatusCode::kNotCompiled) GTEST_SKIP() << warm.message();
  ASSERT_TRUE(warm.ok()) << warm.message();
  const long before = g_allocations.load();
  const Status s = fp8attn::plan_fwd(p, h200(), &plan);
  const long allocated = g_allocations.load() - before;
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(allocated, 0) << "plan_fwd of a valid call allocated " << allocated << " times";
  // The counter sees the library's allocations: a failing plan builds its message.
  FwdParams bad = p;
  bad.page_size = 24;
  const long before_bad = g_allocations.load();
  ASSERT_FALSE(fp8attn::plan_fwd(bad, h200(), &plan).ok());
  EXPECT_GT(g_allocations.load() - before_bad, 0) << "allocation counting does not reach libfp8attn";
}

TEST(PlanFwd, ValidatesTheArguments) {
  FwdParams p = paged_decode();
  p.num_heads_kv = 5;  // 32 q heads are no multiple of 5
  FwdPlan plan;
  const Status s = fp8attn::plan_fwd(p, h200(), &plan);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_heads_q"), std::string::npos) << s.message();
  // The workspace is the run's business: a plan ignores it.
  FwdParams no_workspace = paged_decode();
  no_workspace.num_splits = 4;
  EXPECT_TRUE(fp8attn::plan_fwd(no_workspace, h200(), &plan).ok() ||
              fp8attn::plan_fwd(no_workspace, h200(), &plan).code() == StatusCode::kNotCompiled);
}

TEST(PlanFwd, KernelNotInThisBuildIsNotCompiled) {
  for (int head_dim : {64, 96, 128, 192, 256}) {
    SCOPED_TRACE(head_dim);
    const FwdParams p = paged_decode(head_dim);
    const fp8attn::KernelConfig config = fp8attn::select_config(fp8attn::describe_problem(p, h200()));
    FwdPlan plan;
    const Status s = fp8attn::plan_fwd(p, h200(), &plan);
    if (fp8attn::sm90::has_kernel(config.key)) {
      EXPECT_TRUE(s.ok()) << s.message();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kNotCompiled) << s.message();
      EXPECT_NE(s.message().find("FP8ATTN_HEAD_DIMS"), std::string::npos) << s.message();
    }
  }
}

// ---------------------------------------------------------------------------------------------------------

// Plans p (skipping the test when this build lacks its kernel).
#define PLAN_OR_SKIP(p, plan)                                                    \
  do {                                                                           \
    const Status planned_ = fp8attn::plan_fwd(p, h200(), &plan);                 \
    if (planned_.code() == StatusCode::kNotCompiled) GTEST_SKIP() << planned_.message(); \
    ASSERT_TRUE(planned_.ok()) << planned_.message();                            \
  } while (0)

TEST(RunFwd, RefusesAPlanThatWasNotMade) {
  const FwdParams p = paged_decode();
  FwdPlan unplanned{};
  Status s = fp8attn::run_fwd(p, unplanned, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("plan:"), std::string::npos) << s.message();

  FwdParams bad = p;
  bad.softmax_scale = 0;
  FwdPlan failed;
  ASSERT_FALSE(fp8attn::plan_fwd(bad, h200(), &failed).ok());
  s = fp8attn::run_fwd(p, failed, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "a failed plan must not run";
}

TEST(RunFwd, RefusesChangedSizes) {
  FwdParams p = paged_decode();
  FwdPlan plan;
  PLAN_OR_SKIP(p, plan);
  for (auto change : {+[](FwdParams& q) { q.batch = 31; }, +[](FwdParams& q) { q.seqlen_k = 65536; },
                      +[](FwdParams& q) { q.num_splits = 3; }, +[](FwdParams& q) { q.window_left = 127; },
                      // an E4M3-Q plan names an E4M3 kernel: a 16-bit Q must not run on it
                      +[](FwdParams& q) { q.q_dtype = FP8ATTN_DTYPE_BF16; }}) {
    FwdParams changed = p;
    change(changed);
    const Status s = fp8attn::run_fwd(changed, plan, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    EXPECT_NE(s.message().find("the sizes the plan was made for"), std::string::npos) << s.message();
  }
}

TEST(RunFwd, ChecksTheWorkspaceThePlanAsks) {
  FwdParams p = paged_decode();
  p.batch = p.total_q = 2;  // 2 x 8 kv heads: the heuristic splits, and a ceiling of 4 keeps 4
  fp8attn_test::describe_extents(p);
  p.num_splits = 4;
  FwdPlan plan;
  PLAN_OR_SKIP(p, plan);
  ASSERT_GT(plan.workspace_bytes, 0u);
  Status s = fp8attn::run_fwd(p, plan, nullptr);  // no workspace given
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.message();
  p.workspace = fake(11);
  p.workspace_bytes = plan.workspace_bytes - 1;
  s = fp8attn::run_fwd(p, plan, nullptr);
  EXPECT_NE(s.message().find("workspace_bytes: expected >= " + std::to_string(plan.workspace_bytes)),
            std::string::npos)
      << s.message();
}

// ---------------------------------------------------------------------------------------------------------

TEST(CApiPlan, NullArguments) {
  const FwdParams p = paged_decode();
  fp8attn_fwd_plan plan;
  char err[256] = {};
  EXPECT_EQ(fp8attn_fwd_make_plan(nullptr, &plan, err, sizeof(err)), FP8ATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("params"), std::string::npos) << err;
  EXPECT_EQ(fp8attn_fwd_make_plan(&p, nullptr, err, sizeof(err)), FP8ATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("plan"), std::string::npos) << err;
  EXPECT_EQ(fp8attn_fwd_run(&p, nullptr, nullptr, err, sizeof(err)), FP8ATTN_INVALID_ARGUMENT);
  EXPECT_EQ(fp8attn_fwd_run(nullptr, &plan, nullptr, err, sizeof(err)), FP8ATTN_INVALID_ARGUMENT);
}

// On the current device: without a usable GPU (CPU CI) the query fails, and the workspace query must say so
// rather than report 0 bytes; with one, it plans.
TEST(CApiPlan, WorkspaceSizeReportsAFailedDeviceQuery) {
  const FwdParams p = paged_decode();
  DeviceInfo device;
  const Status queried = fp8attn::query_device(&device);
  size_t bytes = 12345;
  char err[512] = {};
  const int code = fp8attn_fwd_workspace_size(&p, &bytes, err, sizeof(err));
  fp8attn_fwd_plan plan;
  const int plan_code = fp8attn_fwd_make_plan(&p, &plan, err, sizeof(err));
  if (!queried.ok()) {
    EXPECT_EQ(code, FP8ATTN_CUDA_ERROR) << err;
    EXPECT_EQ(plan_code, FP8ATTN_CUDA_ERROR) << err;
    EXPECT_NE(std::string(err).find("CUDA device"), std::string::npos) << err;
    size_t cpp_bytes = 1;
    EXPECT_EQ(fp8attn::fwd_workspace_size(p, &cpp_bytes).code(), StatusCode::kCudaError);
  } else if (device.cc_major == 9 && device.cc_minor == 0 && code != FP8ATTN_NOT_COMPILED) {
    EXPECT_EQ(code, FP8ATTN_OK) << err;
    EXPECT_EQ(bytes, fp8attn::fwd_workspace_size(p, device));
  }
}

}  // namespace
