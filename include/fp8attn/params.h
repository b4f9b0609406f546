/*
 * fp8attn: parameters of one FP8 attention forward call.
 *
 * A plain C struct, so the same definition serves the C++ API, the C ABI and foreign callers (the
 * Python package mirrors it with ctypes and checks its size through fp8attn_fwd_params_size()).
 * Pointers are device pointers unless a comment says otherwise. Strides are in ELEMENTS, never bytes;
 * the last (head-dim) dimension of every tensor must be contiguous (stride 1) and is not stored.
 *
 * Layouts (the three K/V layouts share the same stride fields):
 *   q      dense  [batch, seqlen_q, num_heads_q, head_dim]          (q_batch_stride used)
 *          varlen [total_q, num_heads_q, head_dim]                  (cu_seqlens_q != NULL)
 *   k, v   dense  [batch, seqlen_k, num_heads_kv, head_dim(_v)]
 *          varlen [total_k, num_heads_kv, head_dim(_v)]             (cu_seqlens_k != NULL)
 *          paged  [num_pages, page_size, num_heads_kv, head_dim(_v)] (block_table != NULL;
 *                  the "batch" stride is then the page stride)
 *   out    like q, with head_dim_v; fp16 or bf16, or E4M3 with output_scale.
 *   lse    dense  [batch, num_heads_q, seqlen_q] fp32; varlen [num_heads_q, total_q] fp32 (optional).
 *          Natural log of sum_j exp(softmax_scale * descale_q * descale_k * q.k_j) (+ exp(sink)).
 *
 * Extents: besides the sizes, the caller describes what it allocated: the shape of every tensor
 * (q_shape ... lse_shape) and the length of every array passed by pointer (cu_seqlens_*_len, seqused_k_len,
 * block_table_rows, sink_len). Validation checks each against the sizes, so arrays that disagree with
 * each other (a v shorter than k, an s_aux shorter than num_heads_q) are refused by name instead of being
 * read or written past their end. fp8attn_fwd_params_init() leaves them "not described" (ndim / length -1),
 * which is refused wherever the array is passed. A tensor with no elements (a 0 in its shape) may have a
 * NULL pointer: torch hands one over for an empty tensor, and a batch whose every key length is 0 is valid
 * (its output is 0 and its LSE -inf, as FlashAttention's).
 *
 * What validation cannot see: the values inside cu_seqlens_q/k, seqused_k and block_table (device memory).
 * The contract: cu_seqlens_* are non-negative, never decrease, end at most at total_q / total_k, and no sequence
 * exceeds max_seqlen_q / max_seqlen_k; seqused_k[b] lies in [0, max_seqlen_k] (and within k's rows when
 * dense); block_table entries of the pages a sequence uses lie in [0, num_pages). With the environment
 * variable FP8ATTN_CHECK_DEVICE_ARGS=1 every call copies these arrays to the host and checks them (and the
 * device of every pointer), failing by name; it synchronizes the stream, so it is for debugging, and is
 * skipped while the stream is being captured into a CUDA graph.
 *
 * Use fp8attn_fwd_params_init() to fill defaults, then set what the call needs.
 */
#ifndef FP8ATTN_PARAMS_H_
#define FP8ATTN_PARAMS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. The numbering is part of the C ABI: append only. */
typedef enum fp8attn_dtype {
  FP8ATTN_DTYPE_NONE = 0,
  FP8ATTN_DTYPE_E4M3 = 1,
  FP8ATTN_DTYPE_E5M2 = 2,
  FP8ATTN_DTYPE_F16 = 3,
  FP8ATTN_DTYPE_BF16 = 4,
  FP8ATTN_DTYPE_F32 = 5,
  FP8ATTN_DTYPE_I32 = 6
} fp8attn_dtype;

/* A per-(batch, kv_head) fp32 scale, read in place: value(b, h) = ptr[b * batch_stride + h * head_stride].
 * ndim 0: a single scalar (both strides must be 0). ndim 2: shape (batch, num_heads_kv) with any strides,
 * 0 included (vLLM passes expand()ed views with strides (0, 0) or (0, 1)). ptr == NULL means 1.0. */
typedef struct fp8attn_descale {
  const float* ptr;
  int32_t ndim;           /* 0 or 2 */
  int64_t size[2];        /* (batch, num_heads_kv) when ndim == 2 */
  int64_t batch_stride;   /* elements */
  int64_t head_stride;    /* elements */
  fp8attn_dtype dtype;    /* must be F32 */
} fp8attn_descale;

/* The shape of a tensor as the caller allocated it: size[0..ndim-1] used, outermost first (torch's
 * tensor.shape). ndim -1: not described. */
typedef struct fp8attn_shape {
  int32_t ndim;
  int64_t size[4];
} fp8attn_shape;

typedef struct fp8attn_fwd_params {
  /* ---- tensors ---- */
  const void* q;  fp8attn_dtype q_dtype; /* E4M3; or F16 / BF16, which the kernel quantizes to E4M3 per (token,
                                           head) row with scale amax(row) / 448 (q_descale must then be NULL) */
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  const void* k;  fp8attn_dtype k_dtype; /* E4M3 */
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  const void* v;  fp8attn_dtype v_dtype; /* E4M3 */
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  void* out;      fp8attn_dtype out_dtype; /* F16 or BF16; E4M3 with output_scale */
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  float* lse;                              /* optional */
  int64_t lse_batch_stride, lse_head_stride; /* the token stride is 1 */

  /* ---- sizes ---- */
  int32_t batch;
  int32_t seqlen_q;      /* dense: every sequence's length; varlen: max_seqlen_q (host-known bound) */
  int32_t seqlen_k;      /* dense: every sequence's length; varlen/paged: max_seqlen_k (host-known bound) */
  int32_t total_q;       /* varlen: rows of q/out (cu_seqlens_q[batch] must not exceed it); dense: unused */
  int32_t total_k;       /* rows of k/v when varlen and not paged; else unused */
  int32_t num_heads_q;
  int32_t num_heads_kv;  /* num_heads_q % num_heads_kv == 0 (MHA, GQA, MQA) */
  int32_t head_dim;      /* d: of q and k */
  int32_t head_dim_v;    /* dv: of v and out */

  /* ---- variable lengths (int32, contiguous; optional) ---- */
  const int32_t* cu_seqlens_q; /* [batch + 1] */
  const int32_t* cu_seqlens_k; /* [batch + 1] */
  const int32_t* seqused_k;    /* [batch]: keys actually used per sequence (overrides the others) */

  /* ---- paged K/V (optional) ---- */
  const int32_t* block_table;       /* [batch, max_pages_per_seq]; rows may be strided, columns contiguous */
  int64_t block_table_batch_stride; /* elements */
  int32_t max_pages_per_seq;
  int32_t num_pages;                /* leading dim of paged k/v */
  int32_t page_size;                /* multiple of 16 */

  /* ---- attention ---- */
  float softmax_scale;  /* applied to q.k before descales; the usual value is 1/sqrt(head_dim) */
  int32_t causal;       /* bottom-right aligned, as FlashAttention */
  int32_t window_left;  /* -1: unbounded */
  int32_t window_right; /* -1: unbounded; causal means window_right = 0 */
  fp8attn_descale q_descale, k_descale, v_descale;
  const void* sink;     /* optional learnable sink logit per q head, [num_heads_q] */
  fp8attn_dtype sink_dtype; /* F32 or BF16 */
  float softcap;        /* > 0: every score s becomes softcap * tanh(s / softcap) before the softmax, s being
                           softmax_scale * descale_q * descale_k * q.k (Gemma-2's logit softcapping); 0: off */

  /* ---- FP8 output (optional) ---- */
  /* With out_dtype E4M3 (and only then): out = E4M3(O / output_scale), saturated to +-448 (NaN stays NaN), the
   * static per-tensor quantization of the next layer's input. A single fp32 on the device (ndim 0, F32), read
   * by the kernels; its value must be finite and > 0 (device data: not checked). */
  fp8attn_descale output_scale;

  /* ---- features fp8attn does not implement: set them and the call is rejected by name ---- */
  const void* qv;         /* MLA / Qv: must be NULL */
  const void* block_sparsity; /* block-sparse masks: must be NULL */

  /* ---- launch ---- */
  int32_t num_splits;     /* 0: heuristic; n >= 1: exactly n KV splits */
  void* workspace;        /* device scratch of at least fp8attn_fwd_workspace_size() bytes, or NULL if that is 0 */
  size_t workspace_bytes;

  /* ---- extents: what the caller allocated (see "Extents" above; -1: not described) ---- */
  fp8attn_shape q_shape;    /* dense [batch, seqlen_q, num_heads_q, head_dim]; varlen [total_q, num_heads_q, head_dim] */
  fp8attn_shape k_shape;    /* dense [batch, seqlen_k, num_heads_kv, head_dim]; varlen [total_k, ...];
                               paged [num_pages, page_size, num_heads_kv, head_dim] */
  fp8attn_shape v_shape;    /* as k_shape, with head_dim_v */
  fp8attn_shape out_shape;  /* as q_shape, with head_dim_v */
  fp8attn_shape lse_shape;  /* dense [batch, num_heads_q, seqlen_q]; varlen [num_heads_q, total_q] (with lse) */
  int64_t cu_seqlens_q_len; /* batch + 1 (with cu_seqlens_q) */
  int64_t cu_seqlens_k_len; /* batch + 1 (with cu_seqlens_k) */
  int64_t seqused_k_len;    /* batch (with seqused_k) */
  int64_t block_table_rows; /* batch (with block_table; its columns are max_pages_per_seq) */
  int64_t sink_len;         /* num_heads_q (with sink) */
} fp8attn_fwd_params;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FP8ATTN_PARAMS_H_ */
