// Probe (not shipped): can 16-CTA clusters of a 256-thread, 2-CTA/SM decode-sized kernel fill a wave, and what does
// a cluster (DSMEM) reduction of split partials cost against storing the partials to global memory?
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <vector>
#include <algorithm>
namespace cg = cooperative_groups;

constexpr int kRows = 16, kDv = 128, kThreads = 256;
struct Args { float* partial; __nv_bfloat16* out; int mode; };

__global__ void __launch_bounds__(kThreads, 2) probe(Args a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* o_part = smem;                 // (kRows, kDv)
  float* lse_part = smem + kRows * kDv; // (kRows)
  const int t = threadIdx.x;
  const int split = blockIdx.z, nsplit = gridDim.z, tile = blockIdx.y;
  // "computed" partials
  for (int i = t; i < kRows * kDv; i += kThreads) o_part[i] = float((i * 7 + split) % 13);
  if (t < kRows) lse_part[t] = float((t + split) % 5);
  if (a.mode == 0 || a.mode == 2) {  // store partials to global, like today's forward (2: launched as clusters)
    float* g = a.partial + ((size_t(tile) * nsplit + split) * kRows) * kDv;
    for (int i = t; i < kRows * kDv; i += kThreads) g[i] = o_part[i];
    return;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (a.mode == 3) { cluster.sync(); return; }  // the two cluster barriers, no reads
  const int rank = cluster.block_rank();
  // CTA `rank` reduces rows rank * rows_per_cta ..; thread: (row, float4 column) x a group of the splits.
  const int rows_per_cta = (kRows + nsplit - 1) / nsplit;
  const int elements = rows_per_cta * (kDv / 4);
  const int groups = max(1, kThreads / elements);
  const int e = t % elements, g = t / elements;
  const int r = rank * rows_per_cta + e / (kDv / 4), c4 = e % (kDv / 4);
  __shared__ float4 part[kThreads];
  __shared__ float wsum[kThreads];
  float lse[16];
#pragma unroll
  for (int s = 0; s < 16; ++s) lse[s] = s < nsplit && r < kRows ? *cluster.map_shared_rank(lse_part + r, s) : -INFINITY;
  float4 o[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int s = g + k * groups;
    o[k] = g < groups && s < nsplit && r < kRows ? *cluster.map_shared_rank(reinterpret_cast<float4*>(o_part + r * kDv) + c4, s)
                                                 : make_float4(0, 0, 0, 0);
  }
  float m = -INFINITY;
#pragma unroll
  for (int s = 0; s < 16; ++s) m = fmaxf(m, lse[s]);
  float sum = 0.f;
#pragma unroll
  for (int s = 0; s < 16; ++s) sum += exp2f(lse[s] - m);
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int s = g + k * groups;
    if (s < nsplit) { const float w = exp2f(lse[s] - m); acc.x += w * o[k].x; acc.y += w * o[k].y; acc.z += w * o[k].z; acc.w += w * o[k].w; }
  }
  part[t] = acc; wsum[t] = sum;
  __syncthreads();
  if (g == 0 && r < kRows) {
    float4 tot = part[e];
    for (int q = 1; q < groups; ++q) { float4 p = part[q * elements + e]; tot.x += p.x; tot.y += p.y; tot.z += p.z; tot.w += p.w; }
    const float inv = 1.f / sum;
    __nv_bfloat16* dst = a.out + (size_t(tile) * kRows + r) * kDv + 4 * c4;
    dst[0] = __float2bfloat16(tot.x * inv); dst[1] = __float2bfloat16(tot.y * inv);
    dst[2] = __float2bfloat16(tot.z * inv); dst[3] = __float2bfloat16(tot.w * inv);
  }
  cluster.sync();
}

int main() {
  const int smem = 104 * 1024;
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  float* partial; __nv_bfloat16* out;
  cudaMalloc(&partial, 64 << 20); cudaMalloc(&out, 16 << 20);
  for (int cz : {1, 2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 16, cz); cfg.blockDim = dim3(kThreads); cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute at = {}; at.id = cudaLaunchAttributeClusterDimension; at.val.clusterDim.x = 1; at.val.clusterDim.y = 1; at.val.clusterDim.z = cz;
    cfg.attrs = &at; cfg.numAttrs = 1;
    int n = -1; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, probe, &cfg);
    printf("cluster %2d: max active clusters %d (%d CTAs) %s\n", cz, n, n * cz, cudaGetErrorString(e));
  }
  cudaStream_t st; cudaStreamCreate(&st);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  struct Case { const char* name; int tiles, splits, mode; };
  std::vector<Case> cases = {{"1x1-4k-like store", 8, 16, 0}, {"1x1-4k-like cluster", 8, 16, 1},
                             {"8x16 cluster launch only", 8, 16, 2}, {"8x16 cluster 2 syncs", 8, 16, 3},
                             {"8x8 cluster launch only", 8, 8, 2}, {"8x8 cluster 2 syncs", 8, 8, 3},
                             {"8x2 store", 8, 2, 0}, {"8x2 cluster", 8, 2, 1},
                             {"8 tiles x 8 store", 8, 8, 0}, {"8 tiles x 8 cluster", 8, 8, 1},
                             {"70b-like 16x16 store", 16, 16, 0}, {"70b-like 16x16 cluster", 16, 16, 1}};
  for (int rep = 0; rep < 2; ++rep)
  for (auto& c : cases) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, c.tiles, c.splits); cfg.blockDim = dim3(kThreads); cfg.dynamicSmemBytes = smem; cfg.stream = st;
    cudaLaunchAttribute at = {}; at.id = cudaLaunchAttributeClusterDimension; at.val.clusterDim.x = 1; at.val.clusterDim.y = 1; at.val.clusterDim.z = c.mode ? c.splits : 1;
    cfg.attrs = &at; cfg.numAttrs = 1;
    Args a{partial, out, c.mode};
    cudaGraph_t g; cudaGraphExec_t ge;
    cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < 20; ++i) cudaLaunchKernelEx(&cfg, probe, a);
    cudaStreamEndCapture(st, &g); cudaGraphInstantiate(&ge, g, 0);
    std::vector<float> ts;
    for (int it = 0; it < 30; ++it) {
      cudaEventRecord(e0, st); cudaGraphLaunch(ge, st); cudaEventRecord(e1, st); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000 / 20);
    }
    std::sort(ts.begin(), ts.end());
    printf("%-26s %7.2f us per launch  (%s)\n", c.name, ts[ts.size() / 2], cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
