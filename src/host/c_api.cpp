// fp8attn: the C ABI (c_api.h) over the C++ API. This is the boundary foreign callers (ctypes) cross, so
// no C++ exception may leave it: every entry point turns one into an error code and a message.
#include "fp8attn/c_api.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>

#include "fp8attn/fp8attn.h"
#include "sm90/launch.h"

namespace {

using fp8attn::Status;
using fp8attn::StatusCode;

// The two enums are the same codes; the C one is the ABI, so a drift must fail the build.
static_assert(static_cast<int>(StatusCode::kOk) == FP8ATTN_OK);
static_assert(static_cast<int>(StatusCode::kInvalidArgument) == FP8ATTN_INVALID_ARGUMENT);
static_assert(static_cast<int>(StatusCode::kNotSupported) == FP8ATTN_NOT_SUPPORTED);
static_assert(static_cast<int>(StatusCode::kNotCompiled) == FP8ATTN_NOT_COMPILED);
static_assert(static_cast<int>(StatusCode::kCudaError) == FP8ATTN_CUDA_ERROR);

// Copies the message into the caller's buffer, NUL-terminated and truncated to fit.
void write_message(const std::string& message, char* err_buf, size_t err_len) {
  if (err_buf == nullptr || err_len == 0) return;
  const size_t n = std::min(message.size(), err_len - 1);
  std::memcpy(err_buf, message.data(), n);
  err_buf[n] = '\0';
}

int report(const Status& status, char* err_buf, size_t err_len) {
  if (!status.ok()) write_message(status.message(), err_buf, err_len);
  return static_cast<int>(status.code());
}

// Runs `body` (returning a Status) and reports its result; an escaping exception becomes an error. There is
// no "internal error" code in the ABI: the nearest is the runtime-failure code.
template <typename Body>
int guarded(char* err_buf, size_t err_len, Body&& body) {
  try {
    return report(body(), err_buf, err_len);
  } catch (const std::exception& e) {
    return report(Status(StatusCode::kCudaError, std::string("fp8attn internal error: ") + e.what()), err_buf,
                  err_len);
  } catch (...) {
    return report(Status(StatusCode::kCudaError, "fp8attn internal error: unknown exception"), err_buf, err_len);
  }
}

Status null_params() {
  return Status(StatusCode::kInvalidArgument, "params: expected a pointer to fp8attn_fwd_params, got NULL");
}

}  // namespace

void fp8attn_fwd_params_init(fp8attn_fwd_params* params) {
  if (params == nullptr) return;
  *params = fp8attn_fwd_params{};  // every pointer NULL, every number 0, every dtype NONE
  params->out_dtype = FP8ATTN_DTYPE_BF16;
  params->window_left = -1;
  params->window_right = -1;
  for (fp8attn_descale* d : {&params->q_descale, &params->k_descale, &params->v_descale, &params->output_scale})
    d->dtype = FP8ATTN_DTYPE_F32;
  params->sink_dtype = FP8ATTN_DTYPE_F32;
  for (fp8attn_shape* s : {&params->q_shape, &params->k_shape, &params->v_shape, &params->out_shape,
                           &params->lse_shape})
    s->ndim = -1;  // not described: the caller must say what it allocated
  for (int64_t* n : {&params->cu_seqlens_q_len, &params->cu_seqlens_k_len, &params->seqused_k_len,
                     &params->block_table_rows, &params->sink_len})
    *n = -1;
}

size_t fp8attn_fwd_params_size(void) { return sizeof(fp8attn_fwd_params); }

int fp8attn_fwd_make_plan(const fp8attn_fwd_params* params, fp8attn_fwd_plan* plan, char* err_buf, size_t err_len) {
  return guarded(err_buf, err_len, [&]() -> Status {
    if (plan == nullptr) return Status(StatusCode::kInvalidArgument, "plan: expected a fp8attn_fwd_plan pointer, got NULL");
    if (params == nullptr) {
      *plan = fp8attn_fwd_plan{};
      return null_params();
    }
    return fp8attn::plan_fwd(*params, plan);
  });
}

int fp8attn_fwd_run(const fp8attn_fwd_params* params, const fp8attn_fwd_plan* plan, void* stream, char* err_buf,
                    size_t err_len) {
  return guarded(err_buf, err_len, [&]() -> Status {
    if (params == nullptr) return null_params();
    if (plan == nullptr) return Status(StatusCode::kInvalidArgument, "plan: expected a fp8attn_fwd_plan pointer, got NULL");
    return fp8attn::run_fwd(*params, *plan, static_cast<cudaStream_t>(stream));
  });
}

int fp8attn_fwd_workspace_size(const fp8attn_fwd_params* params, size_t* bytes, char* err_buf, size_t err_len) {
  return guarded(err_buf, err_len, [&]() -> Status {
    if (params == nullptr) return null_params();
    if (bytes == nullptr) return Status(StatusCode::kInvalidArgument, "bytes: expected a size_t pointer, got NULL");
    return fp8attn::fwd_workspace_size(*params, bytes);
  });
}

int fp8attn_fwd(const fp8attn_fwd_params* params, void* stream, char* err_buf, size_t err_len) {
  return guarded(err_buf, err_len, [&]() -> Status {
    if (params == nullptr) return null_params();
    return fp8attn::fwd(*params, static_cast<cudaStream_t>(stream));
  });
}

const char* fp8attn_compiled_kernels(void) {
  try {
    return fp8attn::sm90::compiled_kernels_description();
  } catch (...) {
    return "";  // diagnostics only: an empty list beats an exception across the C boundary
  }
}
