#include "common/extents.h"

#include <algorithm>

namespace fp8attn_test {

fp8attn_shape make_shape(std::initializer_list<int64_t> sizes) {
  fp8attn_shape s{};
  s.ndim = static_cast<int32_t>(std::min<size_t>(sizes.size(), 4));
  std::copy_n(sizes.begin(), s.ndim, s.size);
  return s;
}

void describe_extents(fp8attn_fwd_params& p) {
  const int64_t hq = p.num_heads_q, hkv = p.num_heads_kv, d = p.head_dim, dv = p.head_dim_v;
  if (p.cu_seqlens_q != nullptr) {
    p.q_shape = make_shape({p.total_q, hq, d});
    p.out_shape = make_shape({p.total_q, hq, dv});
    p.lse_shape = make_shape({hq, p.total_q});
  } else {
    p.q_shape = make_shape({p.batch, p.seqlen_q, hq, d});
    p.out_shape = make_shape({p.batch, p.seqlen_q, hq, dv});
    p.lse_shape = make_shape({p.batch, hq, p.seqlen_q});
  }
  if (p.block_table != nullptr) {
    p.k_shape = make_shape({p.num_pages, p.page_size, hkv, d});
    p.v_shape = make_shape({p.num_pages, p.page_size, hkv, dv});
  } else if (p.cu_seqlens_k != nullptr) {
    p.k_shape = make_shape({p.total_k, hkv, d});
    p.v_shape = make_shape({p.total_k, hkv, dv});
  } else {
    p.k_shape = make_shape({p.batch, p.seqlen_k, hkv, d});
    p.v_shape = make_shape({p.batch, p.seqlen_k, hkv, dv});
  }
  p.cu_seqlens_q_len = p.cu_seqlens_k_len = int64_t{p.batch} + 1;
  p.seqused_k_len = p.block_table_rows = p.batch;
  p.sink_len = hq;
}

}  // namespace fp8attn_test
