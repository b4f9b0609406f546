// Test helper: the extents (params.h, "Extents") that a caller whose tensors agree with the sizes passes.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "fp8attn/params.h"

namespace fp8attn_test {

// A shape of rank sizes.size() (at most 4).
fp8attn_shape make_shape(std::initializer_list<int64_t> sizes);

// Fills every shape and array length of `p` from its sizes and layout (varlen / paged chosen by which of
// cu_seqlens_q, cu_seqlens_k, block_table are set), as consistent tensors would give them.
void describe_extents(fp8attn_fwd_params& p);

}  // namespace fp8attn_test
