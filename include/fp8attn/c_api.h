/*
 * fp8attn: C ABI for foreign callers (the Python package uses it through ctypes).
 * All functions return an fp8attn_status_code; on failure the message is copied (NUL-terminated,
 * truncated to fit) into err_buf when err_buf is not NULL.
 */
#ifndef FP8ATTN_C_API_H_
#define FP8ATTN_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include "fp8attn/export.h"
#include "fp8attn/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The C ABI these declarations describe: bumped whenever a function signature, params.h's structs or an
 * enum's numbering changes incompatibly. A binding compares it with fp8attn_abi_version() at load. */
#define FP8ATTN_ABI_VERSION 2

typedef enum fp8attn_status_code {
  FP8ATTN_OK = 0,
  FP8ATTN_INVALID_ARGUMENT = 1,
  FP8ATTN_NOT_SUPPORTED = 2,
  FP8ATTN_NOT_COMPILED = 3,
  FP8ATTN_CUDA_ERROR = 4
} fp8attn_status_code;

/* Defaults: everything NULL/0, window (-1, -1), softmax_scale 0 (must be set), num_splits 0 (heuristic),
 * every extent (q_shape ... sink_len) -1: not described (must be set for what the call passes). */
FP8ATTN_API void fp8attn_fwd_params_init(fp8attn_fwd_params* params);
/* sizeof(fp8attn_fwd_params) in this build, so bindings can check their mirror of the struct. */
FP8ATTN_API size_t fp8attn_fwd_params_size(void);

/* The launch chosen for one call. fp8attn_fwd_make_plan() validates the params once (everything but the
 * workspace) and plans once: the kernel, the KV split count and the workspace size come from that one call.
 * The caller then provides workspace_bytes of device scratch in params->workspace (if nonzero) and calls
 * fp8attn_fwd_run(), which checks only the workspace and that the params still describe the planned problem.
 * Neither builds a message unless it fails, reads device memory, or synchronizes. */
typedef struct fp8attn_fwd_plan {
  size_t workspace_bytes;  /* device scratch fp8attn_fwd_run needs in params->workspace; 0: none */
  int32_t num_splits;      /* KV splits of the launch (1: unsplit) */
  int32_t reserved_;
  uint64_t internal_[16];  /* the kernel choice and the problem it was made for, written by the plan only */
} fp8attn_fwd_plan;

/* On the current CUDA device. On failure *plan is left unusable (fp8attn_fwd_run rejects it). */
FP8ATTN_API int fp8attn_fwd_make_plan(const fp8attn_fwd_params* params, fp8attn_fwd_plan* plan, char* err_buf,
                                      size_t err_len);
/* params: the ones given to fp8attn_fwd_make_plan, unchanged except params->workspace/workspace_bytes,
 * which must hold plan->workspace_bytes (run checks that, and that the sizes are the planned ones; the
 * other pointers were validated by the plan). stream: a cudaStream_t (NULL = the legacy default stream)
 * of the device the plan was made on. */
FP8ATTN_API int fp8attn_fwd_run(const fp8attn_fwd_params* params, const fp8attn_fwd_plan* plan, void* stream,
                                char* err_buf, size_t err_len);

/* Plan, then report plan.workspace_bytes (a failed device query is an error, not 0). */
FP8ATTN_API int fp8attn_fwd_workspace_size(const fp8attn_fwd_params* params, size_t* bytes, char* err_buf,
                                           size_t err_len);
/* Plan and run in one call; params->workspace must already hold fp8attn_fwd_workspace_size() bytes.
 * stream: a cudaStream_t (NULL = the legacy default stream). */
FP8ATTN_API int fp8attn_fwd(const fp8attn_fwd_params* params, void* stream, char* err_buf, size_t err_len);

/* The compiled kernels, one per line "d=128 dv=128 block_m=128 block_n=128 ...", for diagnostics. */
FP8ATTN_API const char* fp8attn_compiled_kernels(void);

/* The library's version, "MAJOR.MINOR.PATCH" (CMake's project VERSION, as Python's fp8attn.__version__). */
FP8ATTN_API const char* fp8attn_version(void);
/* The C ABI the library implements: equal to FP8ATTN_ABI_VERSION of the headers it was built from. */
FP8ATTN_API int fp8attn_abi_version(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* FP8ATTN_C_API_H_ */
