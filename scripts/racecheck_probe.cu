// racecheck probe: does compute-sanitizer's racecheck order a hand-over through a 256-thread named barrier
// (barrier.sync 3, 256) when, before it, the two 128-thread groups passed different numbers of group-local
// barriers? The swapped-operand d512 decode loop (src/sm90/mainloop_swapped.cuh) had that shape until session 18:
// its first MMA warpgroup syncs alone (the row-maximum exchange) for the whole KV loop while the second waited, then
// to_row_layout handed the row statistics and O over through a 256-thread barrier. Why WarpgroupSync is an mbarrier.
//
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -o racecheck_probe scripts/racecheck_probe.cu
//   compute-sanitizer --tool racecheck ./racecheck_probe A B SYNC
//
// A, B: the group-local exchanges of group A (threads 0-127) and of group B (128-255); SYNC: 0 = they sync on a
// named barrier of their own (barrier.sync 1|2, 128), 1 = on an mbarrier of their own. The program checks every
// hand-over read itself. Measured on an H100 (bench/results/ab_d512_land_k3.json, "racecheck_probe"): every run
// reads every value right; racecheck reports 0 hazards for "0 0 0", "3 3 0", "3 0 1" and "3 3 1", and RAW hazards
// on the hand-over for "3 0 0": a false positive when only one group has passed group-local named barriers.
#include <cstdio>
#include <cstdlib>
#include <cuda/barrier>
__device__ __forceinline__ void bar_sync(unsigned id, unsigned n) { asm volatile("barrier.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }
__global__ void probe(int local_a, int local_b, int use_mbarrier, float* out) {
  __shared__ float stats[8];
  __shared__ float scratch[2][128];
  __shared__ cuda::barrier<cuda::thread_scope_block> group_barrier[2];
  const int t = threadIdx.x;
  const int g = t / 128;
  if (t == 0) { init(&group_barrier[0], 128); init(&group_barrier[1], 128); }
  __syncthreads();
  auto local_sync = [&] {
    if (use_mbarrier) { group_barrier[g].arrive_and_wait(); } else { bar_sync(1 + g, 128); }
  };
  const int local = g == 0 ? local_a : local_b;
  for (int i = 0; i < local; ++i) {  // a group-local exchange, as the swapped loop's column reduce
    scratch[g][t % 128] = float(i + t);
    local_sync();
    const float x = scratch[g][(t + 1) % 128];
    local_sync();
    out[blockIdx.x * 1024 + t] += x;
  }
  if (t < 8) stats[t] = float(t + blockIdx.x);  // the hand-over's writes (group A)
  bar_sync(3, 256);
  out[blockIdx.x * 1024 + 512 + t] = stats[t % 8];  // read by both groups
}
int main(int argc, char** argv) {
  const int a = argc > 1 ? atoi(argv[1]) : 0, b = argc > 2 ? atoi(argv[2]) : 0, mb = argc > 3 ? atoi(argv[3]) : 0;
  float* out;
  cudaMalloc(&out, 4 * 1024 * 4);
  cudaMemset(out, 0, 4 * 1024 * 4);
  probe<<<4, 256>>>(a, b, mb, out);
  const cudaError_t e = cudaDeviceSynchronize();
  float host[1024];
  cudaMemcpy(host, out + 1024, sizeof(host), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int t = 0; t < 256; ++t) wrong += host[512 + t] != float(t % 8 + 1);
  printf("local exchanges a=%d b=%d %s: %s, %d wrong hand-over reads\n", a, b, mb ? "mbarrier" : "named barrier",
         cudaGetErrorString(e), wrong);
  return 0;
}
