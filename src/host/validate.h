// fp8attn: the two halves of validate_fwd (validate.cpp), for the plan/run split (api.cpp): a plan validates
// the arguments, a run only the workspace the plan asked for.
#pragma once

#include <cstddef>

#include "fp8attn/fp8attn.h"

namespace fp8attn {

// Every check of validate_fwd except the workspace.
Status validate_fwd_arguments(const FwdParams& params, const DeviceInfo& device);

// The planned workspace against the cap (kMaxWorkspaceBytes): refused at planning, before anyone allocates it.
Status validate_fwd_workspace_size(const FwdParams& params, size_t needed);

// params.workspace / workspace_bytes against the `needed` bytes of the plan (nothing to check when 0).
Status validate_fwd_workspace(const FwdParams& params, size_t needed);

}  // namespace fp8attn
