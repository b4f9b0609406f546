// fp8attn benchmark programs: host nanoseconds per call of a piece of host code, as bench_launch_cost.cu and
// bench_c_abi_cost.cpp time it. The piece is called kCalls times in batches of kBatch; only the batches are timed
// (the stream is synchronized between them, outside the timing, so the launch queue never fills); the result is
// the median over kRuns such runs.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cuda_check.h"

namespace fp8attn::bench {

constexpr int kCalls = 20000;
constexpr int kBatch = 256;
constexpr int kRuns = 5;

inline double median_ns_per_call(const std::function<void()>& call, cudaStream_t stream, int calls = kCalls) {
  for (int i = 0; i < kBatch; ++i) call();  // warm-up: first-launch setup, attribute caches
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> runs;
  for (int run = 0; run < kRuns; ++run) {
    double total_ns = 0;
    for (int done = 0; done < calls; done += kBatch) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kBatch; ++i) call();
      total_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
      CHECK_CUDA(cudaStreamSynchronize(stream));
    }
    runs.push_back(total_ns / calls);
  }
  std::sort(runs.begin(), runs.end());
  return runs[kRuns / 2];
}

struct Row {
  std::string piece;
  double ns;
};

// Prints the rows as a table; with FP8ATTN_RESULTS_DIR set, also writes them to that directory's file_name as
// {"about", "date", "gpu", "rows": [{"piece", "ns"}]}.
inline void report(const std::vector<Row>& rows, const char* file_name, const std::string& about, const char* gpu) {
  std::printf("%-48s %10s\n", "piece", "ns/call");
  for (const Row& row : rows) std::printf("%-48s %10.1f\n", row.piece.c_str(), row.ns);
  const char* results_dir = std::getenv("FP8ATTN_RESULTS_DIR");
  if (results_dir == nullptr) return;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  const std::string path = std::string(results_dir) + "/" + file_name;
  std::ofstream json(path);
  json << "{\n \"about\": \"" << about << "\",\n";
  json << " \"date\": \"" << date << "\",\n \"gpu\": \"" << gpu << "\",\n \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    json << "  {\"piece\": \"" << rows[i].piece << "\", \"ns\": " << rows[i].ns << "}"
         << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  json << " ]\n}\n";
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace fp8attn::bench
