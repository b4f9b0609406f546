// fp8attn: argument validation for the forward call.
//
// Runs on the host before any launch and reads only host-known values: q/k/v/out, cu_seqlens, seqused_k
// and the block table live in device memory and are never dereferenced here (their contents are the
// caller's contract, see params.h). Every failure names the argument, with vLLM / FlashAttention's
// spelling where one exists, and says what was expected and what was got. Checks run from the most
// fundamental (device, feature, dtype) to the most derived (workspace), so the first failure reported is
// the one to fix first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <string_view>
#include <utility>

#include "common/kernel_rules.h"
#include "fp8attn/fp8attn.h"
#include "host/head_dims.h"
#include "host/validate.h"

#define FP8ATTN_RETURN_IF_ERROR(expr)   \
  do {                                  \
    ::fp8attn::Status status_ = (expr); \
    if (!status_.ok()) return status_;  \
  } while (0)

namespace fp8attn {
namespace {

constexpr int kPageSizeMultiple = 16;     // vLLM's block_size rule; also the FP8 TMA box granularity
constexpr int64_t kTmaAlignBytes = 16;    // TMA: global base address and every stride 16-byte aligned
constexpr int64_t kTmaMaxStrideBytes = int64_t{1} << 40;  // TMA: strides below 2^40 bytes

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

std::string hex(const void* ptr) {
  std::ostringstream os;
  os << "0x" << std::hex << reinterpret_cast<uintptr_t>(ptr);
  return os.str();
}

// The shape of every message: "name: expected X, got Y".
std::string expected_got(std::string_view name, std::string_view expected, std::string_view got) {
  return cat(name, ": expected ", expected, ", got ", got);
}

Status invalid(const std::string& message) { return {StatusCode::kInvalidArgument, message}; }
Status not_supported(const std::string& message) { return {StatusCode::kNotSupported, message}; }

std::string dtype_name(fp8attn_dtype t) {
  switch (t) {
    case FP8ATTN_DTYPE_NONE: return "none (unset)";
    case FP8ATTN_DTYPE_E4M3: return "float8_e4m3fn";
    case FP8ATTN_DTYPE_E5M2: return "float8_e5m2";
    case FP8ATTN_DTYPE_F16: return "float16";
    case FP8ATTN_DTYPE_BF16: return "bfloat16";
    case FP8ATTN_DTYPE_F32: return "float32";
    case FP8ATTN_DTYPE_I32: return "int32";
  }
  return cat("unknown dtype ", static_cast<int>(t));
}

int64_t dtype_bytes(fp8attn_dtype t) {
  switch (t) {
    case FP8ATTN_DTYPE_E4M3: case FP8ATTN_DTYPE_E5M2: return 1;
    case FP8ATTN_DTYPE_F16: case FP8ATTN_DTYPE_BF16: return 2;
    case FP8ATTN_DTYPE_F32: case FP8ATTN_DTYPE_I32: return 4;
    default: return 0;
  }
}

// A floating type the call could meaningfully carry but fp8attn does not take is "not supported";
// anything else (unset, int32, an out-of-range enum value) makes the call malformed.
StatusCode wrong_dtype_code(fp8attn_dtype t) {
  switch (t) {
    case FP8ATTN_DTYPE_E4M3: case FP8ATTN_DTYPE_E5M2: case FP8ATTN_DTYPE_F16:
    case FP8ATTN_DTYPE_BF16: case FP8ATTN_DTYPE_F32: return StatusCode::kNotSupported;
    default: return StatusCode::kInvalidArgument;
  }
}

Status expect_dtype(std::string_view name, fp8attn_dtype got, std::initializer_list<fp8attn_dtype> allowed) {
  if (std::find(allowed.begin(), allowed.end(), got) != allowed.end()) return Status::Ok();
  std::string expected = "dtype ";
  for (auto it = allowed.begin(); it != allowed.end(); ++it)
    expected += (it == allowed.begin() ? "" : " or ") + dtype_name(*it);
  return {wrong_dtype_code(got), expected_got(name, expected, dtype_name(got))};
}

Status expect_at_least(std::string_view name, int64_t got, int64_t min, std::string_view why = "") {
  if (got >= min) return Status::Ok();
  return invalid(expected_got(name, cat(">= ", min, why), cat(got)));
}

Status expect_aligned(std::string_view name, const void* ptr, int64_t bytes, std::string_view why) {
  if (reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(bytes) == 0) return Status::Ok();
  return invalid(expected_got(name, cat("a ", bytes, "-byte aligned address (", why, ")"), hex(ptr)));
}

// One strided dimension of a tensor: its params field, its extent, and how to describe the extent. Only
// names are stored (string literals); messages are composed from them when a check fails, so a valid call
// builds no string.
struct Dim {
  std::string_view field_prefix;  // the params field is field_prefix + field_suffix, e.g. "k" + "_row_stride"
  std::string_view field_suffix;
  std::string_view extent_name;   // the extent is described as extent_name=size extent_unit, e.g. "page_size=16 rows"
  std::string_view extent_unit;
  int64_t size;
  int64_t stride;
  bool zero_stride_ok;            // a read-only batch dimension may broadcast (stride 0); rows and heads may not

  std::string stride_name() const { return cat(field_prefix, field_suffix); }
  std::string size_desc() const { return cat(extent_name, "=", size, extent_unit); }
};

// The dims of one tensor, at most [batch, rows, heads, head_dim]: a fixed array, so checking allocates nothing.
struct Dims {
  static constexpr int kMax = 4;
  Dim dim[kMax];
  int count = 0;

  void add(const Dim& d) { dim[count++] = d; }
  const Dim* begin() const { return dim; }
  const Dim* end() const { return dim + count; }
};

// x * y + z saturated at INT64_MAX (all operands >= 0): spans of absurd strides must not wrap around.
int64_t saturating_mul_add(int64_t x, int64_t y, int64_t z) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (y != 0 && x > (kMax - z) / y) return kMax;
  return x * y + z;
}

// A written tensor must not alias itself, or two CTAs race on one address. Checked in the sufficient form
// every view of a contiguous tensor meets: ordered by stride (the contiguous dim first), each dimension
// starts beyond the span of the smaller ones.
Status expect_no_self_overlap(std::string_view tensor, const Dims& dims) {
  Dims sorted;  // the dims of more than one element, by stride; stable, so equal strides keep their order
  for (const Dim& d : dims) {
    if (d.size == 0) return Status::Ok();  // no elements, nothing to alias
    if (d.size <= 1) continue;
    int at = sorted.count;
    while (at > 0 && sorted.dim[at - 1].stride > d.stride) {
      sorted.dim[at] = sorted.dim[at - 1];
      --at;
    }
    sorted.dim[at] = d;
    ++sorted.count;
  }
  int64_t span = 1;
  for (const Dim& d : sorted) {
    if (d.stride < span) {
      return invalid(expected_got(d.stride_name(), cat(">= ", span, " so that ", tensor, " does not overlap itself (",
                                                       d.size_desc(), ")"),
                                  cat(d.stride)));
    }
    span = saturating_mul_add(d.stride, d.size - 1, span);
  }
  return Status::Ok();
}

// q, k, v or out: [batch?, rows, heads, head_dim] with the head_dim contiguous.
struct StridedTensor {
  std::string_view name;
  const void* ptr;
  int64_t elem_bytes;
  bool written;
  Dims dims;       // the strided dims in use (the batch dim is absent when varlen)
  Dim contiguous;  // the head dim, stride 1
};

Status check_stride(const StridedTensor& t, const Dim& d) {
  if (d.stride < 0) return invalid(expected_got(d.stride_name(), ">= 0", cat(d.stride)));
  if (d.stride == 0 && d.size > 1 && (t.written || !d.zero_stride_ok)) {
    return invalid(expected_got(d.stride_name(), cat("a nonzero stride (", d.size_desc(), " would alias one address)"),
                                "0"));
  }
  const int64_t multiple = kTmaAlignBytes / t.elem_bytes;
  if (d.stride % multiple != 0) {
    return invalid(expected_got(d.stride_name(),
                                cat("a multiple of ", multiple, " elements (", t.name,
                                    " strides must be 16-byte aligned for TMA)"),
                                cat(d.stride)));
  }
  if (d.stride >= kTmaMaxStrideBytes / t.elem_bytes) {
    return invalid(expected_got(d.stride_name(), cat("< 2^40 bytes (the TMA stride limit)"),
                                cat(d.stride, " elements")));
  }
  return Status::Ok();
}

bool has_elements(const StridedTensor& t) {
  return std::all_of(t.dims.begin(), t.dims.end(), [](const Dim& d) { return d.size > 0; }) && t.contiguous.size > 0;
}

Status check_tensor(const StridedTensor& t) {
  if (t.ptr == nullptr) {
    // torch hands over NULL for a tensor with no elements (a batch whose every key length is 0): nothing is read.
    if (!has_elements(t)) return Status::Ok();
    return invalid(expected_got(t.name, "a non-NULL device pointer (it has elements)", "NULL"));
  }
  FP8ATTN_RETURN_IF_ERROR(expect_aligned(t.name, t.ptr, kTmaAlignBytes, "TMA needs a 16-byte aligned base"));
  for (const Dim& d : t.dims) FP8ATTN_RETURN_IF_ERROR(check_stride(t, d));
  if (!t.written) return Status::Ok();
  Dims all;
  all.add(t.contiguous);
  for (const Dim& d : t.dims) all.add(d);
  return expect_no_self_overlap(t.name, all);
}

bool varlen_q(const FwdParams& p) { return p.cu_seqlens_q != nullptr; }
bool paged(const FwdParams& p) { return p.block_table != nullptr; }
bool varlen_k(const FwdParams& p) { return p.cu_seqlens_k != nullptr && !paged(p); }

const char* seqlen_q_name(const FwdParams& p) { return varlen_q(p) ? "max_seqlen_q" : "seqlen_q"; }
const char* seqlen_k_name(const FwdParams& p) {
  return p.cu_seqlens_k || p.seqused_k || paged(p) ? "max_seqlen_k" : "seqlen_k";
}

// Rows of q / out / lse: total_q when varlen, else seqlen_q per batch entry. The stride's field is
// prefix + suffix.
Dim q_rows(const FwdParams& p, std::string_view prefix, std::string_view suffix, int64_t stride) {
  return varlen_q(p) ? Dim{prefix, suffix, "total_q", " rows", p.total_q, stride, false}
                     : Dim{prefix, suffix, "seqlen_q", " rows", p.seqlen_q, stride, false};
}

Dim head_dim_of(int head_dim) { return {"head_dim", "", "head_dim", "", head_dim, 1, false}; }

// prefix: of the stride fields ("q", "o").
StridedTensor q_like(const FwdParams& p, std::string_view name, std::string_view prefix, const void* ptr,
                     fp8attn_dtype dtype, bool written, int head_dim, int64_t batch_stride, int64_t row_stride,
                     int64_t head_stride) {
  StridedTensor t{name, ptr, dtype_bytes(dtype), written, {}, head_dim_of(head_dim)};
  if (!varlen_q(p)) t.dims.add({prefix, "_batch_stride", "batch", "", p.batch, batch_stride, !written});
  t.dims.add(q_rows(p, prefix, "_row_stride", row_stride));
  t.dims.add({prefix, "_head_stride", "num_heads_q", " heads", p.num_heads_q, head_stride, false});
  return t;
}

StridedTensor kv_like(const FwdParams& p, std::string_view name, const void* ptr, fp8attn_dtype dtype,
                      int head_dim, int64_t batch_stride, int64_t row_stride, int64_t head_stride) {
  StridedTensor t{name, ptr, dtype_bytes(dtype), false, {}, head_dim_of(head_dim)};
  if (paged(p)) {  // [num_pages, page_size, heads, d]: the batch stride is the page stride
    t.dims.add({name, "_batch_stride", "num_pages", "", p.num_pages, batch_stride, true});
    t.dims.add({name, "_row_stride", "page_size", " rows", p.page_size, row_stride, false});
  } else if (varlen_k(p)) {
    t.dims.add({name, "_row_stride", "total_k", " rows", p.total_k, row_stride, false});
  } else {
    t.dims.add({name, "_batch_stride", "batch", "", p.batch, batch_stride, true});
    t.dims.add({name, "_row_stride", "seqlen_k", " rows", p.seqlen_k, row_stride, false});
  }
  t.dims.add({name, "_head_stride", "num_heads_kv", " heads", p.num_heads_kv, head_stride, false});
  return t;
}

// ---- the checks, in the order validate_fwd runs them ----

Status check_device(const DeviceInfo& d) {
  // The kernels are sm_90a code (WGMMA, TMA, setmaxnreg): they run on compute capability 9.0 only.
  if (d.cc_major != 9 || d.cc_minor != 0) {
    return not_supported(expected_got("device", "compute capability 9.0 (sm_90: H100/H200)",
                                      cat(d.cc_major, ".", d.cc_minor, " (sm_", d.cc_major, d.cc_minor, ")")));
  }
  return expect_at_least("device.num_sms", d.num_sms, 1);
}

Status check_unsupported_features(const FwdParams& p) {
  if (p.qv != nullptr)
    return not_supported(expected_got("qv", "NULL", "a pointer") + " (MLA / Qv is not supported)");
  if (p.block_sparsity != nullptr)
    return not_supported(expected_got("block_sparsity", "NULL", "a pointer") + " (block sparsity is not supported)");
  return Status::Ok();
}

bool is_16bit_float(fp8attn_dtype t) { return t == FP8ATTN_DTYPE_F16 || t == FP8ATTN_DTYPE_BF16; }

Status check_dtypes(const FwdParams& p) {
  // q is E4M3, or fp16/bf16 that the kernel quantizes to E4M3 row by row; k and v are E4M3 only (the KV cache is
  // read as it is stored). E5M2 is named apart: it is FP8, just not the format the kernels take.
  constexpr const char* kE5m2Note = " (E5M2 is not supported)";
  if (p.q_dtype != FP8ATTN_DTYPE_E4M3 && !is_16bit_float(p.q_dtype)) {
    return {wrong_dtype_code(p.q_dtype),
            expected_got("q", "dtype float8_e4m3fn, float16 or bfloat16", dtype_name(p.q_dtype)) +
                (p.q_dtype == FP8ATTN_DTYPE_E5M2 ? kE5m2Note : "")};
  }
  for (const auto& [name, dtype] : {std::pair{"k", p.k_dtype}, std::pair{"v", p.v_dtype}}) {
    if (dtype == FP8ATTN_DTYPE_E4M3) continue;
    const char* why = dtype == FP8ATTN_DTYPE_E5M2
                          ? kE5m2Note
                          : " (fp8attn reads k and v as FP8 E4M3, only q may be 16-bit: quantize the KV cache)";
    return {wrong_dtype_code(dtype), expected_got(name, "dtype float8_e4m3fn", dtype_name(dtype)) + why};
  }
  return expect_dtype("out_dtype", p.out_dtype, {FP8ATTN_DTYPE_F16, FP8ATTN_DTYPE_BF16, FP8ATTN_DTYPE_E4M3});
}

Status check_head_dims(const FwdParams& p) {
  for (const auto& [d, dv] : kSupportedHeadDims)
    if (p.head_dim == d && p.head_dim_v == dv) return Status::Ok();
  std::string supported;
  for (const auto& [d, dv] : kSupportedHeadDims) supported += cat(supported.empty() ? "" : ", ", "(", d, ", ", dv, ")");
  return not_supported(expected_got("(head_dim, head_dim_v)", "one of " + supported,
                                    cat("(", p.head_dim, ", ", p.head_dim_v, ")")));
}

Status check_sizes(const FwdParams& p) {
  FP8ATTN_RETURN_IF_ERROR(expect_at_least("batch", p.batch, 1));
  FP8ATTN_RETURN_IF_ERROR(expect_at_least("num_heads_q", p.num_heads_q, 1));
  FP8ATTN_RETURN_IF_ERROR(expect_at_least("num_heads_kv", p.num_heads_kv, 1));
  if (p.num_heads_q % p.num_heads_kv != 0) {
    return invalid(expected_got("num_heads_q", cat("a multiple of num_heads_kv=", p.num_heads_kv, " (MHA/GQA/MQA)"),
                                cat("num_heads_q=", p.num_heads_q)));
  }
  FP8ATTN_RETURN_IF_ERROR(expect_at_least(seqlen_q_name(p), p.seqlen_q, 0));
  FP8ATTN_RETURN_IF_ERROR(expect_at_least(seqlen_k_name(p), p.seqlen_k, 0));
  if (varlen_q(p))
    FP8ATTN_RETURN_IF_ERROR(expect_at_least("total_q", p.total_q, 0, " (rows of q with cu_seqlens_q)"));
  if (varlen_k(p))
    FP8ATTN_RETURN_IF_ERROR(expect_at_least("total_k", p.total_k, 0, " (rows of k/v with cu_seqlens_k)"));
  return Status::Ok();
}

// Which of cu_seqlens_k / seqused_k / block_table may come together (vLLM's flash_attn_varlen_func contract).
Status check_sequence_lengths(const FwdParams& p) {
  if (paged(p)) {
    if (p.cu_seqlens_k != nullptr) {
      return invalid(expected_got("cu_seqlens_k", "NULL with block_table (paged K/V takes its lengths from seqused_k)",
                                  "a pointer"));
    }
    if (p.seqused_k == nullptr) {
      return invalid(expected_got("seqused_k", "a [batch] int32 tensor with block_table (paged K/V needs each "
                                               "sequence's key count)", "NULL"));
    }
  } else if (varlen_q(p) && (p.cu_seqlens_k != nullptr) == (p.seqused_k != nullptr)) {
    return invalid(expected_got("cu_seqlens_k, seqused_k", "exactly one of them with cu_seqlens_q",
                                p.cu_seqlens_k != nullptr ? "both" : "neither"));
  } else if (!varlen_q(p) && p.cu_seqlens_k != nullptr) {
    return invalid(expected_got("cu_seqlens_k", "NULL without cu_seqlens_q (a dense call may give seqused_k only)",
                                "a pointer"));
  }
  const std::pair<const char*, const int32_t*> int32_arrays[] = {
      {"cu_seqlens_q", p.cu_seqlens_q}, {"cu_seqlens_k", p.cu_seqlens_k},
      {"seqused_k", p.seqused_k}, {"block_table", p.block_table}};
  for (const auto& [name, ptr] : int32_arrays)
    FP8ATTN_RETURN_IF_ERROR(expect_aligned(name, ptr, sizeof(int32_t), "int32 elements"));
  return Status::Ok();
}

Status check_paging(const FwdParams& p) {
  if (!paged(p)) return Status::Ok();
  FP8ATTN_RETURN_IF_ERROR(expect_at_least("page_size", p.page_size, 1));
  if (p.page_size % kPageSizeMultiple != 0) {
    return not_supported(expected_got("page_size", cat("a multiple of ", kPageSizeMultiple, " (vLLM block_size)"),
                                      cat(p.page_size)));
  }
  FP8ATTN_RETURN_IF_ERROR(expect_at_least("num_pages", p.num_pages, 1, " (leading dim of the paged k/v cache)"));
  FP8ATTN_RETURN_IF_ERROR(expect_at_least("max_pages_per_seq", p.max_pages_per_seq, 1, " (columns of block_table)"));
  const int64_t covered = int64_t{p.max_pages_per_seq} * p.page_size;
  if (covered < p.seqlen_k) {
    return invalid(expected_got("max_pages_per_seq * page_size",
                                cat(">= max_seqlen_k=", p.seqlen_k, " (block_table must cover the longest sequence)"),
                                cat(p.max_pages_per_seq, " * ", p.page_size, " = ", covered)));
  }
  // A row stride wider than the row is fine (vLLM passes column-sliced views); narrower overlaps rows.
  // With one sequence the stride is never used.
  if (p.batch > 1) {
    FP8ATTN_RETURN_IF_ERROR(expect_at_least("block_table_batch_stride", p.block_table_batch_stride,
                                            p.max_pages_per_seq, " (= max_pages_per_seq, or wider)"));
  }
  return Status::Ok();
}

// ---- extents: each array's allocation against the sizes (params.h, "Extents") ----

// One expected extent: its value and what it is called, for the message. Labels are literals, so a call that
// passes builds no string.
struct Extent {
  const char* label;
  int64_t value;
};

std::string describe_expected(const Extent* expected, int ndim) {
  std::string text = "[";
  for (int i = 0; i < ndim; ++i) text += cat(i ? ", " : "", expected[i].label, "=", expected[i].value);
  return text + "]";
}

std::string describe_shape(const fp8attn_shape& shape) {
  if (shape.ndim < 0) return cat("no shape (ndim ", shape.ndim, ": not described)");
  std::string text = "(";
  for (int i = 0; i < std::min(shape.ndim, 4); ++i) text += cat(i ? ", " : "", shape.size[i]);
  return text + (shape.ndim > 4 ? ", ...)" : ")");
}

// `tensor`'s allocation (`field`, e.g. "v_shape") must be exactly `expected` in rank and every extent.
Status expect_shape(const char* tensor, const char* field, const fp8attn_shape& shape,
                    std::initializer_list<Extent> expected) {
  const int ndim = static_cast<int>(expected.size());
  bool same = shape.ndim == ndim;
  for (int i = 0; same && i < ndim; ++i) same = shape.size[i] == expected.begin()[i].value;
  if (same) return Status::Ok();
  return invalid(cat(tensor, ": expected shape ", describe_expected(expected.begin(), ndim), ", got ",
                     describe_shape(shape), " (", field, ")"));
}

// An array passed by pointer alone: its length (`field`) must be `expected` (`formula` says why, `unit` what).
Status expect_length(const char* array, const char* field, int64_t length, int64_t expected, const char* formula,
                     const char* unit) {
  if (length == expected) return Status::Ok();
  return invalid(cat(array, ": expected ", formula, "=", expected, " ", unit, ", got ",
                     length < 0 ? "no length (-1: not described)" : std::to_string(length), " (", field, ")"));
}

Status check_extents(const FwdParams& p) {
  const int64_t d = p.head_dim, dv = p.head_dim_v, hq = p.num_heads_q, hkv = p.num_heads_kv;
  if (varlen_q(p)) {
    FP8ATTN_RETURN_IF_ERROR(expect_shape("q", "q_shape", p.q_shape, {{"total_q", p.total_q}, {"num_heads_q", hq},
                                                                    {"head_dim", d}}));
    FP8ATTN_RETURN_IF_ERROR(expect_shape("out", "out_shape", p.out_shape,
                                         {{"total_q", p.total_q}, {"num_heads_q", hq}, {"head_dim_v", dv}}));
    if (p.lse != nullptr)
      FP8ATTN_RETURN_IF_ERROR(
          expect_shape("lse", "lse_shape", p.lse_shape, {{"num_heads_q", hq}, {"total_q", p.total_q}}));
  } else {
    FP8ATTN_RETURN_IF_ERROR(expect_shape("q", "q_shape", p.q_shape, {{"batch", p.batch}, {"seqlen_q", p.seqlen_q},
                                                                    {"num_heads_q", hq}, {"head_dim", d}}));
    FP8ATTN_RETURN_IF_ERROR(expect_shape(
        "out", "out_shape", p.out_shape,
        {{"batch", p.batch}, {"seqlen_q", p.seqlen_q}, {"num_heads_q", hq}, {"head_dim_v", dv}}));
    if (p.lse != nullptr)
      FP8ATTN_RETURN_IF_ERROR(expect_shape("lse", "lse_shape", p.lse_shape,
                                           {{"batch", p.batch}, {"num_heads_q", hq}, {"seqlen_q", p.seqlen_q}}));
  }
  for (const auto& [tensor, field, shape, dim] : {std::tuple{"k", "k_shape", &p.k_shape, Extent{"head_dim", d}},
                                                  std::tuple{"v", "v_shape", &p.v_shape, Extent{"head_dim_v", dv}}}) {
    if (paged(p)) {
      FP8ATTN_RETURN_IF_ERROR(expect_shape(
          tensor, field, *shape,
          {{"num_pages", p.num_pages}, {"page_size", p.page_size}, {"num_heads_kv", hkv}, dim}));
    } else if (varlen_k(p)) {
      FP8ATTN_RETURN_IF_ERROR(
          expect_shape(tensor, field, *shape, {{"total_k", p.total_k}, {"num_heads_kv", hkv}, dim}));
    } else {
      FP8ATTN_RETURN_IF_ERROR(expect_shape(tensor, field, *shape,
                                           {{"batch", p.batch}, {"seqlen_k", p.seqlen_k}, {"num_heads_kv", hkv}, dim}));
    }
  }
  // Exact lengths, as FlashAttention checks them: a longer array is as likely a caller's bug as a shorter one.
  if (p.cu_seqlens_q != nullptr)
    FP8ATTN_RETURN_IF_ERROR(
        expect_length("cu_seqlens_q", "cu_seqlens_q_len", p.cu_seqlens_q_len, int64_t{p.batch} + 1, "batch + 1",
                      "entries"));
  if (p.cu_seqlens_k != nullptr)
    FP8ATTN_RETURN_IF_ERROR(
        expect_length("cu_seqlens_k", "cu_seqlens_k_len", p.cu_seqlens_k_len, int64_t{p.batch} + 1, "batch + 1",
                      "entries"));
  if (p.seqused_k != nullptr)
    FP8ATTN_RETURN_IF_ERROR(expect_length("seqused_k", "seqused_k_len", p.seqused_k_len, p.batch, "batch", "entries"));
  if (p.block_table != nullptr)
    FP8ATTN_RETURN_IF_ERROR(
        expect_length("block_table", "block_table_rows", p.block_table_rows, p.batch, "batch", "rows"));
  if (p.sink != nullptr)
    FP8ATTN_RETURN_IF_ERROR(expect_length("sink (s_aux)", "sink_len", p.sink_len, hq, "num_heads_q", "entries"));
  return Status::Ok();
}

Status check_tensors(const FwdParams& p) {
  FP8ATTN_RETURN_IF_ERROR(check_tensor(q_like(p, "q", "q", p.q, p.q_dtype, false, p.head_dim, p.q_batch_stride,
                                              p.q_row_stride, p.q_head_stride)));
  FP8ATTN_RETURN_IF_ERROR(check_tensor(
      kv_like(p, "k", p.k, p.k_dtype, p.head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride)));
  FP8ATTN_RETURN_IF_ERROR(check_tensor(
      kv_like(p, "v", p.v, p.v_dtype, p.head_dim_v, p.v_batch_stride, p.v_row_stride, p.v_head_stride)));
  return check_tensor(q_like(p, "out", "o", p.out, p.out_dtype, true, p.head_dim_v, p.o_batch_stride,
                             p.o_row_stride, p.o_head_stride));
}

// lse: dense [batch, num_heads_q, seqlen_q], varlen [num_heads_q, total_q], fp32, token stride 1.
Status check_lse(const FwdParams& p) {
  if (p.lse == nullptr) return Status::Ok();
  FP8ATTN_RETURN_IF_ERROR(expect_aligned("lse", p.lse, sizeof(float), "float32 elements"));
  Dims dims;
  dims.add(q_rows(p, "lse (its token stride is 1)", "", 1));
  dims.add({"lse", "_head_stride", "num_heads_q", " heads", p.num_heads_q, p.lse_head_stride, false});
  if (!varlen_q(p)) dims.add({"lse", "_batch_stride", "batch", "", p.batch, p.lse_batch_stride, false});
  for (const Dim& d : dims)
    if (d.stride < 0) return invalid(expected_got(d.stride_name(), ">= 0", cat(d.stride)));
  return expect_no_self_overlap("lse", dims);
}

Status check_window(const FwdParams& p) {
  FP8ATTN_RETURN_IF_ERROR(expect_at_least("window_size_left", p.window_left, -1, " (-1: unbounded)"));
  FP8ATTN_RETURN_IF_ERROR(expect_at_least("window_size_right", p.window_right, -1, " (-1: unbounded)"));
  if (p.causal && p.window_right > 0) {
    return invalid(expected_got("window_size_right", "0 or -1 with causal=true (causal means window_size_right = 0)",
                                cat(p.window_right)));
  }
  return Status::Ok();
}

Status check_descale(std::string_view name, const fp8attn_descale& d, const FwdParams& p) {
  if (d.ptr == nullptr) return Status::Ok();  // 1.0; the other fields are unused
  FP8ATTN_RETURN_IF_ERROR(expect_dtype(name, d.dtype, {FP8ATTN_DTYPE_F32}));
  FP8ATTN_RETURN_IF_ERROR(expect_aligned(name, d.ptr, sizeof(float), "float32 elements"));
  auto shape = [&] { return cat("a 0-d tensor or shape (batch=", p.batch, ", num_heads_kv=", p.num_heads_kv, ")"); };
  auto strides = [&] { return cat("(", d.batch_stride, ", ", d.head_stride, ")"); };
  switch (d.ndim) {
    case 0:
      if (d.batch_stride != 0 || d.head_stride != 0)
        return invalid(expected_got(name, "strides (0, 0) for a 0-d tensor", strides()));
      return Status::Ok();
    case 2:
      if (d.size[0] != p.batch || d.size[1] != p.num_heads_kv)
        return invalid(expected_got(name, shape(), cat("shape (", d.size[0], ", ", d.size[1], ")")));
      if (d.batch_stride < 0 || d.head_stride < 0)  // 0 is a broadcast (vLLM's expand()), fine
        return invalid(expected_got(name, "strides >= 0", strides()));
      return Status::Ok();
    default:
      return invalid(expected_got(name, shape(), cat("ndim ", d.ndim)));
  }
}

Status check_descales(const FwdParams& p) {
  // A 16-bit q holds its real values (the kernel quantizes each row and keeps the row's own scale), so a q_descale
  // has nothing to undo: refused rather than silently applied or ignored.
  if (is_16bit_float(p.q_dtype) && p.q_descale.ptr != nullptr) {
    return invalid(expected_got("q_descale",
                                cat("NULL with a ", dtype_name(p.q_dtype),
                                    " q (a 16-bit q is quantized per row by the kernel, so it takes no descale)"),
                                "a descale"));
  }
  FP8ATTN_RETURN_IF_ERROR(check_descale("q_descale", p.q_descale, p));
  FP8ATTN_RETURN_IF_ERROR(check_descale("k_descale", p.k_descale, p));
  return check_descale("v_descale", p.v_descale, p);
}

// An E4M3 out is quantized with output_scale, and output_scale is for an E4M3 out only: a bf16 out with a scale
// would silently not be scaled.
Status check_output_scale(const FwdParams& p) {
  const fp8attn_descale& s = p.output_scale;
  if (p.out_dtype != FP8ATTN_DTYPE_E4M3) {
    if (s.ptr == nullptr) return Status::Ok();
    return invalid(expected_got("output_scale", "NULL unless out is float8_e4m3fn (it quantizes an FP8 output)",
                                cat("a scale with out dtype ", dtype_name(p.out_dtype))));
  }
  if (s.ptr == nullptr) {
    return invalid(expected_got("output_scale", "a 0-d float32 device tensor with a float8_e4m3fn out "
                                                "(out = E4M3(O / output_scale))", "NULL"));
  }
  FP8ATTN_RETURN_IF_ERROR(expect_dtype("output_scale", s.dtype, {FP8ATTN_DTYPE_F32}));
  FP8ATTN_RETURN_IF_ERROR(expect_aligned("output_scale", s.ptr, sizeof(float), "float32 elements"));
  if (s.ndim != 0 || s.batch_stride != 0 || s.head_stride != 0)
    return invalid(expected_got("output_scale", "one scalar (a 0-d or 1-element tensor)", cat("ndim ", s.ndim)));
  return Status::Ok();
}

Status check_sink(const FwdParams& p) {
  if (p.sink == nullptr) return Status::Ok();
  FP8ATTN_RETURN_IF_ERROR(expect_dtype("sink_dtype (s_aux)", p.sink_dtype, {FP8ATTN_DTYPE_F32, FP8ATTN_DTYPE_BF16}));
  return expect_aligned("sink (s_aux)", p.sink, dtype_bytes(p.sink_dtype),
                        p.sink_dtype == FP8ATTN_DTYPE_F32 ? "float32 elements" : "bfloat16 elements");
}

Status check_scalars(const FwdParams& p) {
  if (!(std::isfinite(p.softmax_scale) && p.softmax_scale > 0.0f)) {
    return invalid(expected_got("softmax_scale", "a finite value > 0 (usually 1/sqrt(head_dim))",
                                cat(p.softmax_scale)));
  }
  // softcap * tanh(s / softcap): a NaN or negative cap has no meaning, and an infinite one is "off" spelled
  // another way that the kernel would run as tanh(0) = 0 for every score.
  if (!(p.softcap == 0.0f || (std::isfinite(p.softcap) && p.softcap > 0.0f))) {
    return invalid(expected_got("softcap", "0 (off) or a finite value > 0 (Gemma-2: 50)", cat(p.softcap)));
  }
  if (p.num_splits < 0 || p.num_splits > kMaxSplits) {
    return invalid(expected_got("num_splits", cat("0 (heuristic) or 1..", kMaxSplits), cat(p.num_splits)));
  }
  return Status::Ok();
}

}  // namespace

Status validate_fwd_workspace_size(const FwdParams& p, size_t needed) {
  if (needed > kMaxWorkspaceBytes) {
    // The plan keeps its splits under the cap (select_config), so this guards the plan itself: name the split
    // count that fits rather than let the caller meet an out-of-memory error at allocation.
    const size_t per_split = needed / static_cast<size_t>(std::max(1, p.num_splits));
    return invalid(expected_got("num_splits",
                                cat("a split count whose split-KV workspace fits the ", kMaxWorkspaceBytes >> 30,
                                    " GiB cap (here at most ", kMaxWorkspaceBytes / std::max<size_t>(per_split, 1),
                                    " splits, or 0 for the heuristic)"),
                                cat(p.num_splits, " (", needed, " bytes of workspace)")));
  }
  return Status::Ok();
}

// Last: the size depends on the config planned for otherwise valid params.
Status validate_fwd_workspace(const FwdParams& p, size_t needed) {
  if (needed == 0) return Status::Ok();
  FP8ATTN_RETURN_IF_ERROR(validate_fwd_workspace_size(p, needed));
  if (p.workspace == nullptr) {
    return invalid(expected_got(
        "workspace", cat("a device buffer of >= ", needed, " bytes (split-KV partials, see fwd_workspace_size)"),
        "NULL"));
  }
  if (p.workspace_bytes < needed) {
    return invalid(
        expected_got("workspace_bytes", cat(">= ", needed, " (fwd_workspace_size)"), cat(p.workspace_bytes)));
  }
  return expect_aligned("workspace", p.workspace, kTmaAlignBytes, "vectorized fp32 partials");
}

Status validate_fwd_arguments(const FwdParams& params, const DeviceInfo& device) {
  FP8ATTN_RETURN_IF_ERROR(check_device(device));
  FP8ATTN_RETURN_IF_ERROR(check_unsupported_features(params));
  FP8ATTN_RETURN_IF_ERROR(check_dtypes(params));
  FP8ATTN_RETURN_IF_ERROR(check_head_dims(params));
  FP8ATTN_RETURN_IF_ERROR(check_sizes(params));
  FP8ATTN_RETURN_IF_ERROR(check_sequence_lengths(params));
  FP8ATTN_RETURN_IF_ERROR(check_paging(params));
  FP8ATTN_RETURN_IF_ERROR(check_extents(params));
  FP8ATTN_RETURN_IF_ERROR(check_tensors(params));
  FP8ATTN_RETURN_IF_ERROR(check_lse(params));
  FP8ATTN_RETURN_IF_ERROR(check_window(params));
  FP8ATTN_RETURN_IF_ERROR(check_descales(params));
  FP8ATTN_RETURN_IF_ERROR(check_sink(params));
  FP8ATTN_RETURN_IF_ERROR(check_output_scale(params));
  return check_scalars(params);
}

Status validate_fwd(const FwdParams& params, const DeviceInfo& device) {
  FP8ATTN_RETURN_IF_ERROR(validate_fwd_arguments(params, device));
  return validate_fwd_workspace(params, fwd_workspace_size(params, device));
}

}  // namespace fp8attn
