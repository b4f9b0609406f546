// fp8attn: FP8ATTN_CHECK_DEVICE_ARGS=1, the debug check of device-side arguments (see device_args.h).
//
// Off by default because it costs a synchronizing copy per call; on, a call with an out-of-range length or
// page id fails by name instead of reading out of bounds. Messages end with "(FP8ATTN_CHECK_DEVICE_ARGS)" so
// that the reader knows which check spoke.
#include "host/device_args.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace fp8attn {
namespace {

constexpr const char* kTag = " (FP8ATTN_CHECK_DEVICE_ARGS)";

Status invalid(const std::string& message) { return {StatusCode::kInvalidArgument, message + kTag}; }

Status cuda_failure(cudaError_t err, const std::string& what) {
  return {StatusCode::kCudaError,
          what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")" + kTag};
}

// A device pointer of the current device (or managed memory). cudaPointerGetAttributes answers for any
// address, so this also catches host memory and tensors of another GPU, which the kernel would fault on.
Status check_pointer(const char* name, const void* ptr, int current_device) {
  if (ptr == nullptr) return Status::Ok();
  cudaPointerAttributes attributes{};
  const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();  // the failed query leaves a (non-sticky) error behind: clear it
    return invalid(std::string(name) + ": expected device memory, got an address CUDA does not know (" +
                   cudaGetErrorName(err) + ")");
  }
  if (attributes.type == cudaMemoryTypeManaged) return Status::Ok();
  if (attributes.type != cudaMemoryTypeDevice) {
    return invalid(std::string(name) + ": expected device memory, got " +
                   (attributes.type == cudaMemoryTypeHost ? "pinned host memory" : "unregistered host memory"));
  }
  if (attributes.device != current_device) {
    return invalid(std::string(name) + ": expected memory of the current device " + std::to_string(current_device) +
                   ", got memory of device " + std::to_string(attributes.device));
  }
  return Status::Ok();
}

Status download(const int32_t* ptr, int64_t count, cudaStream_t stream, const char* name, std::vector<int32_t>* out) {
  out->assign(static_cast<size_t>(count), 0);
  if (count == 0) return Status::Ok();
  cudaError_t err = cudaMemcpyAsync(out->data(), ptr, static_cast<size_t>(count) * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return cuda_failure(err, std::string("copying ") + name + " to the host");
  return Status::Ok();
}

std::string at(const char* name, int64_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

// cu_seqlens: non-negative, non-decreasing, last entry within the rows, no sequence longer than max_len.
Status check_cu_seqlens(const char* name, const std::vector<int32_t>& cu, int64_t rows, const char* rows_name,
                        int64_t max_len, const char* max_name) {
  if (cu[0] < 0) return invalid(at(name, 0) + ": expected >= 0, got " + std::to_string(cu[0]));
  for (size_t b = 1; b < cu.size(); ++b) {
    const int64_t len = int64_t{cu[b]} - cu[b - 1];
    if (len < 0) {
      return invalid(at(name, b) + ": expected >= " + at(name, b - 1) + "=" + std::to_string(cu[b - 1]) +
                     " (non-decreasing), got " + std::to_string(cu[b]));
    }
    if (len > max_len) {
      return invalid(at(name, b) + " - " + at(name, b - 1) + ": expected a sequence length <= " + max_name + "=" +
                     std::to_string(max_len) + ", got " + std::to_string(len));
    }
  }
  if (cu.back() > rows) {
    return invalid(at(name, cu.size() - 1) + ": expected <= " + rows_name + "=" + std::to_string(rows) +
                   " (the rows of the tensor), got " + std::to_string(cu.back()));
  }
  return Status::Ok();
}

}  // namespace

bool device_arg_checks_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("FP8ATTN_CHECK_DEVICE_ARGS");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

Status check_device_args(const FwdParams& p, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capture);
  if (err != cudaSuccess) return cuda_failure(err, "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) return Status::Ok();
  int device = 0;
  if ((err = cudaGetDevice(&device)) != cudaSuccess) return cuda_failure(err, "cudaGetDevice");

  const std::pair<const char*, const void*> pointers[] = {
      {"q", p.q}, {"k", p.k}, {"v", p.v}, {"out", p.out}, {"lse", p.lse}, {"cu_seqlens_q", p.cu_seqlens_q},
      {"cu_seqlens_k", p.cu_seqlens_k}, {"seqused_k", p.seqused_k}, {"block_table", p.block_table},
      {"q_descale", p.q_descale.ptr}, {"k_descale", p.k_descale.ptr}, {"v_descale", p.v_descale.ptr},
      {"sink (s_aux)", p.sink}, {"workspace", p.workspace}};
  for (const auto& [name, ptr] : pointers) {
    const Status status = check_pointer(name, ptr, device);
    if (!status.ok()) return status;
  }

  const bool paged = p.block_table != nullptr;
  std::vector<int32_t> values;
  if (p.cu_seqlens_q != nullptr) {
    Status status = download(p.cu_seqlens_q, int64_t{p.batch} + 1, stream, "cu_seqlens_q", &values);
    if (status.ok()) status = check_cu_seqlens("cu_seqlens_q", values, p.total_q, "total_q", p.seqlen_q, "max_seqlen_q");
    if (!status.ok()) return status;
  }
  if (p.cu_seqlens_k != nullptr && !paged) {
    Status status = download(p.cu_seqlens_k, int64_t{p.batch} + 1, stream, "cu_seqlens_k", &values);
    if (status.ok()) status = check_cu_seqlens("cu_seqlens_k", values, p.total_k, "total_k", p.seqlen_k, "max_seqlen_k");
    if (!status.ok()) return status;
  }
  std::vector<int32_t> used;  // keys per sequence, where the call says them per sequence
  if (p.seqused_k != nullptr) {
    const Status status = download(p.seqused_k, p.batch, stream, "seqused_k", &used);
    if (!status.ok()) return status;
    for (int b = 0; b < p.batch; ++b) {
      if (used[b] < 0 || used[b] > p.seqlen_k) {
        return invalid(at("seqused_k", b) + ": expected a key count in [0, " +
                       (paged || p.cu_seqlens_q ? "max_seqlen_k=" : "seqlen_k=") + std::to_string(p.seqlen_k) +
                       "], got " + std::to_string(used[b]));
      }
    }
  }
  if (paged) {
    // The whole table in one copy: rows b * block_table_batch_stride, each max_pages_per_seq wide.
    const int64_t extent = int64_t{p.batch - 1} * p.block_table_batch_stride + p.max_pages_per_seq;
    const Status status = download(p.block_table, extent, stream, "block_table", &values);
    if (!status.ok()) return status;
    for (int b = 0; b < p.batch; ++b) {
      const int64_t pages = (int64_t{used[b]} + p.page_size - 1) / p.page_size;  // checked: <= max_pages_per_seq
      const int32_t* row = values.data() + b * p.block_table_batch_stride;
      for (int64_t i = 0; i < pages; ++i) {
        if (row[i] < 0 || row[i] >= p.num_pages) {
          return invalid("block_table[" + std::to_string(b) + ", " + std::to_string(i) + "]: expected a page id in [0, " +
                         "num_pages=" + std::to_string(p.num_pages) + ") (sequence " + std::to_string(b) + " uses " +
                         std::to_string(pages) + " pages for seqused_k=" + std::to_string(used[b]) + " keys), got " +
                         std::to_string(row[i]));
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace fp8attn
