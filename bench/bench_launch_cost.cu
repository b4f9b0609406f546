// fp8attn: host nanoseconds of the CUDA calls one eager fp8attn call makes (docs/perf.md, "Host path").
//
// Each piece is called 20000 times in batches of 256; only the batches are timed (the stream is synchronized
// between them, outside the timing, so the launch queue never fills); the row is the median over 5 such runs.
// The kernels have empty bodies and launch 132 CTAs of 384 threads, as the forward does, so the numbers are
// the host's and the driver's alone. The launch variants separate the launch API (triple chevrons, the forward's
// until 67db4d4, against cudaLaunchKernelEx, its launch since), the programmatic-serialization (PDL) attribute
// (the combine's), the parameter size (the forward passes 1,792 B: five TMA descriptors and its arguments) and
// 200 KB of dynamic shared memory. Prints a table; with FP8ATTN_RESULTS_DIR set, writes host_pieces.json there.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "host_timing.h"

namespace {

template <int kBytes>
struct Params {
  unsigned char bytes[kBytes];
};

template <int kBytes>
__global__ void empty_kernel(Params<kBytes>) {}

constexpr int kBlocks = 132;
constexpr int kThreads = 384;
constexpr int kLargeSmem = 200 * 1024;

template <int kBytes>
cudaError_t launch_ex(cudaStream_t stream, int smem, bool pdl) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kBlocks);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = pdl ? &attribute : nullptr;
  config.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&config, empty_kernel<kBytes>, Params<kBytes>{});
}

}  // namespace

int main() {
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaFuncSetAttribute(empty_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, kLargeSmem));
  CHECK_CUDA(cudaFuncSetAttribute(empty_kernel<1024>, cudaFuncAttributeMaxDynamicSharedMemorySize, kLargeSmem));
  void* device_buffer = nullptr;
  CHECK_CUDA(cudaMalloc(&device_buffer, 1 << 20));

  std::vector<fp8attn::bench::Row> rows;
  auto measure = [&](const char* piece, const std::function<void()>& call) {
    rows.push_back({piece, fp8attn::bench::median_ns_per_call(call, stream)});
    CHECK_CUDA(cudaGetLastError());
  };
  measure("cudaGetDevice", [] {
    int d;
    (void)cudaGetDevice(&d);
  });
  measure("cudaStreamIsCapturing", [&] {
    cudaStreamCaptureStatus status;
    (void)cudaStreamIsCapturing(stream, &status);
  });
  measure("cudaPointerGetAttributes", [&] {
    cudaPointerAttributes attributes;
    (void)cudaPointerGetAttributes(&attributes, device_buffer);
  });
  // The TMA descriptor encoding, as CuTe's make_tma_copy calls it: a 2-D E4M3 tensor, 128 x 128 boxes.
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                              cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || encode == nullptr) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    return 1;
  }
  // Row names as in the first host_pieces.json (12-04) where the piece is the same, so the files compare by name.
  const cuuint64_t sizes[2] = {128, 1024};
  const cuuint64_t strides[1] = {128};
  const cuuint32_t box[2] = {128, 128};
  const cuuint32_t element_strides[2] = {1, 1};
  auto encode_map = [&] {
    CUtensorMap map;
    return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, device_buffer, sizes, strides, box, element_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  if (encode_map() != CUDA_SUCCESS) {  // the timed calls are not checked: check the call once here
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
    return 1;
  }
  measure("cuTensorMapEncodeTiled", [&] { (void)encode_map(); });
  // CUTLASS 4.2 (cutlass/cuda_host_adapter.hpp, without CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL) looks the encoder
  // up by name before every encoding, so each make_tma_copy of the forward's launch pays this too.
  measure("cudaGetDriverEntryPointByVersion", [&] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult result;
    (void)cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &result);
  });
  measure("cudaFuncSetAttribute", [] {
    (void)cudaFuncSetAttribute(empty_kernel<1024>, cudaFuncAttributeMaxDynamicSharedMemorySize, kLargeSmem);
  });
  // Every kernel opted in to 200 KB once (the forward's opt-in is once per device too), and every launch variant
  // checked once here: the timed calls are not checked, and a failed launch returns about as fast.
  CHECK_CUDA(cudaFuncSetAttribute(empty_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, kLargeSmem));
  CHECK_CUDA(cudaFuncSetAttribute(empty_kernel<1792>, cudaFuncAttributeMaxDynamicSharedMemorySize, kLargeSmem));
  empty_kernel<64><<<kBlocks, kThreads, kLargeSmem, stream>>>(Params<64>{});
  empty_kernel<1024><<<kBlocks, kThreads, kLargeSmem, stream>>>(Params<1024>{});
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(launch_ex<64>(stream, 0, true));
  CHECK_CUDA(launch_ex<1792>(stream, kLargeSmem, false));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  measure("launch 64 B params", [&] { empty_kernel<64><<<kBlocks, kThreads, 0, stream>>>(Params<64>{}); });
  measure("launch 1 KB params", [&] { empty_kernel<1024><<<kBlocks, kThreads, 0, stream>>>(Params<1024>{}); });
  measure("launch 64 B + 200 KB smem",
          [&] { empty_kernel<64><<<kBlocks, kThreads, kLargeSmem, stream>>>(Params<64>{}); });
  // The forward's launch until 67db4d4: triple chevrons, then cudaGetLastError for the launch's error.
  measure("launch 1 KB + 200 KB smem + cudaGetLastError", [&] {
    empty_kernel<1024><<<kBlocks, kThreads, kLargeSmem, stream>>>(Params<1024>{});
    (void)cudaGetLastError();
  });
  measure("launchEx 64 B", [&] { (void)launch_ex<64>(stream, 0, false); });
  measure("launchEx 1 KB + 200 KB smem", [&] { (void)launch_ex<1024>(stream, kLargeSmem, false); });
  // The forward's: KernelParams holds five TMA descriptors and the arguments, 1,792 B at d128 (sizeof, 2026-12-05).
  measure("launchEx 1792 B + 200 KB smem", [&] { (void)launch_ex<1792>(stream, kLargeSmem, false); });
  measure("launchEx PDL 64 B", [&] { (void)launch_ex<64>(stream, 0, true); });  // the combine's
  CHECK_CUDA(cudaFree(device_buffer));
  CHECK_CUDA(cudaStreamDestroy(stream));

  fp8attn::bench::report(rows, "host_pieces.json",
                         "Host nanoseconds per call of the CUDA calls of one eager fp8attn call "
                         "(bench/bench_launch_cost.cu: 20000 calls in batches of 256, the stream synchronized between "
                         "batches outside the timing, median of 5 runs; empty kernels of 132 x 384 threads).",
                         prop.name);
  return 0;
}
