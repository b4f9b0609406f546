// fp8attn: what a kernel that only reads a d512 decode step's KV pages reaches, timed as bench_d512.py times the
// forward (docs/perf.md, "Head dim 512 and 16-bit Q").
//
// The d512 decode steps of >= 128 MB run 128 CTAs, one per SM, each streaming 32-512 pages of 32 KB (64 tokens x
// 512 B, K = V read once) in a random page order through a ring of 32 KB stages filled by TMA. Every step sits
// 15-22 us above bytes / 4.27 TB/s whatever its size. `stream_pages` is that CTA with the attention taken out: one
// thread reads the block table and issues one bulk copy per page into the next free stage; one warp waits for each
// stage, optionally spins `consume_cycles` (the forward's work per block), and frees it. What it reaches bounds
// what any kernel of this shape can reach; the stage count and the CTA count (128 as the forward, or 132 with the
// pages spread evenly) are the knobs. `read_all` (16-byte loads from 4 CTAs of 512 threads per SM, grid-stride)
// is a generic read of the same bytes.
//
// Per row: `layers` distinct caches in one CUDA graph, a 64 MB L2 flush before each (a zero fill, or a read of the
// buffer, as bench_d512.py's two flushes); time per layer = (median graph replay - median replay of the flushes
// alone) / layers. Prints a table; with FP8ATTN_RESULTS_DIR set, writes read_ceiling.json there.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_check.h"

namespace {

constexpr int kPageBytes = 64 * 512;           // one 64-token page of one d512 KV head
constexpr double kHbmBytesPerS = 4.27e12;       // the floor's bandwidth (docs/targets.md)
constexpr size_t kFlushBytes = 64ull << 20;
constexpr int kDynamicSmem = 200 * 1024;        // as the d512 forward's ~197 KB: one CTA per SM
constexpr int kLayers = 4;
constexpr int kIters = 30;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// One CTA of a decode step without the attention: pages [first, last) of `table`, each copied into the next of
// kStages stages of 32 KB.
template <int kStages>
__global__ void __launch_bounds__(64, 1)
    stream_pages(const uint8_t* cache, const int* table, int total_pages, int consume_cycles, int* sink) {
  extern __shared__ __align__(128) uint8_t stages[];  // kStages x kPageBytes
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ __align__(8) uint64_t empty[kStages];
  const int first = static_cast<int>(int64_t(blockIdx.x) * total_pages / gridDim.x);
  const int last = static_cast<int>(int64_t(blockIdx.x + 1) * total_pages / gridDim.x);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&full[s])));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&empty[s])));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0) {
    if (lane == 0) {
      for (int i = 0; first + i < last; ++i) {
        const int stage = i % kStages;
        if (i >= kStages) { mbarrier_wait(smem_addr(&empty[stage]), ((i / kStages) - 1) & 1); }
        const uint32_t full_bar = smem_addr(&full[stage]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(full_bar), "r"(kPageBytes)
                     : "memory");
        const uint8_t* page = cache + int64_t(table[first + i]) * kPageBytes;
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                smem_addr(stages + stage * kPageBytes)),
            "l"(page), "r"(kPageBytes), "r"(full_bar)
            : "memory");
      }
    }
  } else {
    int acc = 0;
    for (int i = 0; first + i < last; ++i) {
      const int stage = i % kStages;
      mbarrier_wait(smem_addr(&full[stage]), (i / kStages) & 1);
      acc ^= reinterpret_cast<const int*>(stages + stage * kPageBytes)[lane];
      if (consume_cycles > 0) {
        const long long until = clock64() + consume_cycles;
        while (clock64() < until) {}
      }
      __syncwarp();
      if (lane == 0) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(&empty[stage])) : "memory"); }
    }
    if (acc == 0x7eadbeef) { *sink = acc; }  // keeps the reads; never true for the random pages
  }
}

// A generic read of n 16-byte words: 4 in flight per thread, grid-stride.
__global__ void __launch_bounds__(512) read_all(const uint4* words, size_t n, int* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 w[4];
    for (int j = 0; j < 4; ++j) { w[j] = __ldcs(words + i + j * stride); }
    for (int j = 0; j < 4; ++j) { acc ^= w[j].x ^ w[j].y ^ w[j].z ^ w[j].w; }
  }
  for (; i < n; i += stride) {
    const uint4 w = __ldcs(words + i);
    acc ^= w.x ^ w.y ^ w.z ^ w.w;
  }
  if (acc == 0x7eadbeefu) { *sink = static_cast<int>(acc); }
}

struct Step {
  const char* name;  // as bench_d512.py's rows
  int requests;
  int context;
  int splits;        // the forward's plan for the step (config.cpp): requests x splits = 128 CTAs
};

struct Row {
  std::string step, reader, flush;
  int ctas, stages, consume_cycles;
  double mb, floor_us, us;
};

float median_replay_ms(cudaGraphExec_t graph, cudaStream_t stream) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < kIters + 3; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cudaGraphLaunch(graph, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    if (i >= 3) { ms.push_back(t); }
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

cudaGraphExec_t capture(cudaStream_t stream, const std::function<void()>& body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  body();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return exec;
}

template <int kStages>
void launch_stream_pages(int ctas, const uint8_t* cache, const int* table, int pages, int consume, int* sink,
                         cudaStream_t stream) {
  stream_pages<kStages><<<ctas, 64, kDynamicSmem, stream>>>(cache, table, pages, consume, sink);
}

using StreamLauncher = void (*)(int, const uint8_t*, const int*, int, int, int*, cudaStream_t);

StreamLauncher launcher_for(int stages) {
  switch (stages) {
    case 2: return launch_stream_pages<2>;
    case 3: return launch_stream_pages<3>;
    case 4: return launch_stream_pages<4>;
    case 6: return launch_stream_pages<6>;
    default: std::fprintf(stderr, "stages: expected 2, 3, 4 or 6, got %d\n", stages); std::exit(1);
  }
}

template <int kStages>
void allow_smem() {
  CHECK_CUDA(cudaFuncSetAttribute(stream_pages<kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, kDynamicSmem));
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  allow_smem<2>();
  allow_smem<3>();
  allow_smem<4>();
  allow_smem<6>();
  int* sink = nullptr;
  uint8_t* flush = nullptr;
  CHECK_CUDA(cudaMalloc(&sink, sizeof(int)));
  CHECK_CUDA(cudaMalloc(&flush, kFlushBytes));
  CHECK_CUDA(cudaMemset(flush, 1, kFlushBytes));
  const int sms = prop.multiProcessorCount;

  // bench_d512.py's steps of >= 128 MB, with the split counts the forward runs them at (128 CTAs each).
  const std::vector<Step> steps = {{"gemma4-31b-tp4-global-8x1-32k", 8, 32768, 16},
                                   {"gemma4-31b-tp4-global-32x1-8k", 32, 8192, 4},
                                   {"gemma4-31b-tp4-global-128x1-4k", 128, 4096, 1},
                                   {"gemma4-31b-tp4-global-32x1-32k", 32, 32768, 4},
                                   {"gemma4-31b-tp4-global-128x1-8k", 128, 8192, 1}};
  std::vector<Row> rows;
  std::mt19937 rng(2026);
  for (const Step& step : steps) {
    const int pages = step.requests * step.context / 64;
    const size_t bytes = size_t(pages) * kPageBytes;
    std::vector<uint8_t*> caches(kLayers);
    std::vector<int*> tables(kLayers);
    std::vector<int> order(pages);
    for (int l = 0; l < kLayers; ++l) {
      CHECK_CUDA(cudaMalloc(&caches[l], bytes));
      CHECK_CUDA(cudaMemset(caches[l], 0x35, bytes));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);  // bench_d512.py: a random permutation of the pages
      CHECK_CUDA(cudaMalloc(&tables[l], pages * sizeof(int)));
      CHECK_CUDA(cudaMemcpy(tables[l], order.data(), pages * sizeof(int), cudaMemcpyHostToDevice));
    }
    const double floor_us = double(bytes) / kHbmBytesPerS * 1e6;
    for (const char* flush_kind : {"zero", "read"}) {
      const bool zero = std::string(flush_kind) == "zero";
      auto do_flush = [&] {
        if (zero) {
          CHECK_CUDA(cudaMemsetAsync(flush, 0, kFlushBytes, stream));
        } else {
          read_all<<<4 * sms, 512, 0, stream>>>(reinterpret_cast<const uint4*>(flush), kFlushBytes / 16, sink);
        }
      };
      cudaGraphExec_t flushes_only = capture(stream, [&] {
        for (int l = 0; l < kLayers; ++l) { do_flush(); }
      });
      auto measure = [&](const std::string& reader, int ctas, int stages, int consume,
                         const std::function<void(int)>& read_layer) {
        cudaGraphExec_t graph = capture(stream, [&] {
          for (int l = 0; l < kLayers; ++l) {
            do_flush();
            read_layer(l);
          }
        });
        CHECK_CUDA(cudaGetLastError());
        const double total = median_replay_ms(graph, stream);
        const double alone = median_replay_ms(flushes_only, stream);
        CHECK_CUDA(cudaGraphExecDestroy(graph));
        const double us = (total - alone) / kLayers * 1e3;
        rows.push_back({step.name, reader, flush_kind, ctas, stages, consume, bytes / 1e6, floor_us, us});
        std::printf("%-32s %-13s %-4s ctas %3d stages %d consume %4d: %7.1f us  floor %6.1f  %.2f\n", step.name,
                    reader.c_str(), flush_kind, ctas, stages, consume, us, floor_us, floor_us / us);
        std::fflush(stdout);
      };
      const int forward_ctas = step.requests * step.splits;
      for (int stages : {2, 3, 4, 6}) {
        for (int ctas : {forward_ctas, sms}) {
          measure("stream_pages", ctas, stages, 0, [&](int l) {
            launcher_for(stages)(ctas, caches[l], tables[l], pages, 0, sink, stream);
          });
        }
      }
      // The forward's chain per 64-key block is ~1,000 cycles (docs/design.md section 8): the same ring with that
      // much work per stage.
      for (int stages : {3, 4}) {
        measure("stream_pages", forward_ctas, stages, 1000, [&](int l) {
          launcher_for(stages)(forward_ctas, caches[l], tables[l], pages, 1000, sink, stream);
        });
      }
      measure("read_all", 4 * sms, 0, 0, [&](int l) {
        read_all<<<4 * sms, 512, 0, stream>>>(reinterpret_cast<const uint4*>(caches[l]), bytes / 16, sink);
      });
      CHECK_CUDA(cudaGraphExecDestroy(flushes_only));
    }
    for (int l = 0; l < kLayers; ++l) {
      CHECK_CUDA(cudaFree(caches[l]));
      CHECK_CUDA(cudaFree(tables[l]));
    }
  }

  if (const char* dir = std::getenv("FP8ATTN_RESULTS_DIR")) {
    std::ofstream json(std::string(dir) + "/read_ceiling.json");
    json << "{\n \"about\": \"bench/bench_read_ceiling.cu: a d512 decode step's KV pages read by kernels without "
            "the attention, timed as bench_d512.py times the forward (graph of 4 layers, 64 MB flush before each, "
            "minus the flushes alone; medians of 30 replays)\",\n \"gpu\": \""
         << prop.name << "\",\n \"hbm_bytes_per_s\": " << kHbmBytesPerS << ",\n \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      json << "  {\"name\": \"" << r.step << "\", \"reader\": \"" << r.reader << "\", \"flush\": \"" << r.flush
           << "\", \"ctas\": " << r.ctas << ", \"stages\": " << r.stages << ", \"consume_cycles\": "
           << r.consume_cycles << ", \"kv_MB\": " << r.mb << ", \"floor_us\": " << r.floor_us << ", \"us\": " << r.us
           << ", \"floor_fraction\": " << r.floor_us / r.us << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    json << " ]\n}\n";
  }
  CHECK_CUDA(cudaFree(flush));
  CHECK_CUDA(cudaFree(sink));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
