// fp8attn: kernel configuration selection (see config.h). Host-known values only.
#include "host/config.h"

#include <algorithm>

#include "common/kernel_rules.h"
#include "fp8attn/fp8attn.h"

namespace fp8attn {

ProblemShape describe_problem(const fp8attn_fwd_params& p, const DeviceInfo& device) {
  ProblemShape s;
  s.batch = p.batch;
  s.max_seqlen_q = p.seqlen_q;
  s.max_seqlen_k = p.seqlen_k;
  s.total_q = p.cu_seqlens_q != nullptr ? int64_t(p.total_q) : int64_t(p.batch) * p.seqlen_q;
  s.num_heads_q = p.num_heads_q;
  s.num_heads_kv = p.num_heads_kv;
  s.head_dim = p.head_dim;
  s.head_dim_v = p.head_dim_v;
  s.window_left = p.window_left;
  s.window_right = p.causal ? 0 : p.window_right;
  s.num_splits_requested = p.num_splits;
  s.q16 = p.q_dtype == FP8ATTN_DTYPE_F16 || p.q_dtype == FP8ATTN_DTYPE_BF16;
  s.num_sms = device.num_sms;
  return s;
}

namespace {

constexpr int kMaxGridZ = 65535;
constexpr int64_t kMaxGridX = 2147483647;
// K/V bytes that the CTAs running at once may share through L2 (H100/H200: 50 MB of L2, in two halves).
constexpr int64_t kL2BytesForTileOrder = int64_t{24} << 20;
// Longest-first order only where the tile lengths spread enough for it to pay.
constexpr int kMinMBlocksForLongestFirst = 16;

int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

// Fraction of the rows of the M tiles that hold real rows.
double m_tile_efficiency(int64_t rows, int block_m) {
  return rows <= 0 ? 1.0 : double(rows) / (double(ceil_div(rows, block_m)) * block_m);
}

int block_m_for_rows(int64_t rows) { return rows <= 64 ? 64 : 128; }

// Longest key range (max_seqlen_k) at which prefill with d, dv <= 96 still takes 64-row tiles.
constexpr int kMaxKeysForShortTileBlockM = 1024;
// dv <= 64 prefill takes 192-row tiles (three MMA warpgroups, one CTA per SM) over key spans at least this long
// whose rows fill the tiles at least this well; 64-row tiles (two CTAs per SM) otherwise.
constexpr int64_t kMinKeysForTallTile = 8192;
constexpr double kMinTallTileEfficiency = 0.9;

// Keys one query row attends to at most: the key range, or a window bounded on both sides.
int64_t key_span(const ProblemShape& p) {
  if (p.window_left >= 0 && p.window_right >= 0) {
    return std::min<int64_t>(p.max_seqlen_k, int64_t(p.window_left) + p.window_right + 1);
  }
  return p.max_seqlen_k;
}

// Query tile rows. 64-row tiles (one MMA warpgroup) run two CTAs per SM where dv <= 128 (kernel_rules.h), so one
// CTA's prologue, pipeline fill and epilogue overlap the other CTA's KV loop; 128-row tiles read each K/V block
// once for twice the rows. Measured (H200, one process, 64 vs 128 rows, 1k queries; docs/design.md, Measured choices):
// at dv = 64 the 64-row tile wins at every key length (+16% at 1k keys, +3.5% at 16k: the same time per KV block,
// a smaller fixed part per tile); at d = dv = 96 up to 1k keys (+10%, causal +7%). At d = dv = 128 it won up to 1k
// keys (+4%) while the 128-row epilogue stored rows 4 bytes at a time; since that epilogue stages its rows in
// shared memory (bulk copies) the 128-row tile wins there too (+2% at 1k keys, causal +4%). Short decode
// tiles (<= 64 rows) are 64 rows anyway; head dims above 128 keep 128-row prefill tiles (d192 with dv 128 would
// fit two CTAs but is not measured). At dv = 64 the two 64-row CTAs give each SM scheduler two MMA warps, too
// few to hide the softmax's latency over a long key range; three 192-row warpgroups (FA3's d64 shape) win there:
// measured (192 x 128 tiles against two 64-row CTAs), 8k x 8k +10.5% (causal +6.1%), 16k x 16k +11.5% (causal
// +11.4%), but with a 192 x 96 tile 4k x 4k -2.5% (causal -6.1%) and 1k x 1k -21% (the larger fixed part per tile,
// and 1k rows fill 192-row tiles to 89%).
int block_m_for(int64_t rows, const ProblemShape& p) {
  if (rows <= 64) { return 64; }
  if (p.head_dim > 128 || p.head_dim_v > 128) { return 128; }
  if (p.head_dim_v <= 64) {
    const bool tall = key_span(p) >= kMinKeysForTallTile && m_tile_efficiency(rows, 192) >= kMinTallTileEfficiency;
    return tall ? 192 : 64;
  }
  return p.head_dim <= 96 && p.head_dim_v <= 96 && p.max_seqlen_k <= kMaxKeysForShortTileBlockM ? 64 : 128;
}

// KV blocks one query tile visits at most: the whole key range, or, with a window bounded on both sides,
// the window plus the tile's own span (and one block of misalignment).
int max_kv_blocks(const ProblemShape& p, int block_n, int block_m) {
  int64_t keys = p.max_seqlen_k;
  if (p.window_left >= 0 && p.window_right >= 0) {
    keys = std::min<int64_t>(keys, int64_t(p.window_left) + p.window_right + block_m + block_n);
  }
  return std::max(1, ceil_div(keys, block_n));
}

// Split count for a grid too small to fill the GPU (none when it already fills 80% of a wave or the KV range is
// short): the most splits that still fit in one wave of CTA slots, when that wave is within 85% of the best wave
// efficiency any count reaches; else (grids too large for one wave to be well filled by splitting) the smallest
// count whose wave efficiency is within 85% of the best (the FlashAttention rule). Always at least one KV block
// per split. Why one wave first: a decode CTA's fixed part (its cold start, the epilogue) is several KV blocks'
// time, so a second wave of short CTAs costs more than the shorter splits save, while more splits inside the one
// wave shorten every split. Measured (docs/design.md, Measured choices: split counts forced, the decode steps of
// bench_decode.py): llama 1x1-4k 29 splits 14.0 us, 32 splits 13.0; 70b 8x1-32k 15 splits 50.7, 16 splits 50.2,
// 32 (two waves) 55.0; gemma 4x4 (d256, 132 slots) 7 splits 13.5, 9 and 17 (two and three waves) 18.3 and 23.0.
//
// The count is then lowered to the fewest splits with the same longest split at the bound (ceil(blocks / s) blocks
// each): more only add CTAs with fewer or no blocks and partials for the combine to read. Measured
// (bench/results/ab_split_count.json): Llama-8B 1 x 4k planned at 32k keys, 33 -> 32 splits (8 blocks per split at
// the bound either way, one block each at 4k) 12.96 -> 12.81 us; Gemma-4 4 x 4, 8 -> 6, 13.71 -> 13.59 us.
int split_heuristic(int64_t ctas, int kv_blocks, int slots, int split_cap) {
  if (ctas >= int64_t(0.8 * slots) || kv_blocks <= 4) { return 1; }
  const int max_splits = std::min({split_cap, kv_blocks, slots});
  auto efficiency = [&](int s) {
    const int64_t work = ctas * s;
    return double(work) / (double(ceil_div(work, slots)) * slots);
  };
  auto wave_choice = [&] {
    double best = 0;
    for (int s = 1; s <= max_splits; ++s) { best = std::max(best, efficiency(s)); }
    const int one_wave = int(std::clamp<int64_t>(slots / ctas, 1, max_splits));
    if (efficiency(one_wave) >= 0.85 * best) { return one_wave; }
    for (int s = 1; s <= max_splits; ++s) {
      if (efficiency(s) >= 0.85 * best) { return s; }
    }
    return 1;
  };
  const int blocks_per_split = ceil_div(kv_blocks, wave_choice());
  return ceil_div(kv_blocks, blocks_per_split);
}

// num_splits as FlashAttention-3 reads it: 0 lets the heuristic choose (up to kMaxHeuristicSplits), 1 means no
// split, n >= 2 is a ceiling on the heuristic's choice (vLLM passes 32 under full CUDA graphs for every batch of
// up to 512 tokens, whatever its shape). The ceiling also keeps the workspace under kMaxWorkspaceBytes.
int split_ceiling(const ProblemShape& p, int64_t partial_rows) {
  const int requested = p.num_splits_requested == 0 ? kMaxHeuristicSplits : p.num_splits_requested;
  const size_t bytes_per_split = SplitWorkspace::per_split(partial_rows, p.num_heads_q, p.head_dim_v).bytes();
  const int64_t fits = int64_t(kMaxWorkspaceBytes / std::max<size_t>(1, bytes_per_split));
  return int(std::clamp<int64_t>(fits, 1, requested));
}

// Varlen batches whose sequences differ in length (vLLM's chunked prefill: a prefill chunk beside decoding
// requests in one call) waste most of a grid sized by max_seqlen_q: every sequence gets the longest one's M blocks,
// and the CTAs past a short sequence's end only start and exit (a 4k chunk beside 130 decodes: 134k CTAs for 5k
// tiles). There the varlen schedule lists the real tiles instead (tile_scheduler.cuh). Host-known test: the query
// rows fill less than 90% of batch x max_seqlen_q.
bool lengths_differ(const ProblemShape& p) {
  return p.batch > 1 && p.total_q * 10 < int64_t(9) * p.batch * p.max_seqlen_q;
}

// PackGQA puts the `group` q heads of a kv head in one tile: K/V are then read once per kv head, and short
// query tiles fill up. Pack when that raises the share of real rows in the M tiles of `rows` queries.
bool pack_pays(int64_t rows, int group) {
  return group > 1 && m_tile_efficiency(rows, block_m_for_rows(rows)) <
                          0.9 * m_tile_efficiency(rows * group, block_m_for_rows(rows * group));
}

// Query heads per kv head.
int group_of(const ProblemShape& p) { return std::max(1, p.num_heads_q / std::max(1, p.num_heads_kv)); }

// The direct grid (m_blocks, heads, batch x splits) for c's tiles and split count, and the order of its tiles.
// CUDA caps gridDim.y and gridDim.z at 65535: a batch of more sequences (times splits), or more heads, folds the
// grid into gridDim.x (up to 2^31 - 1 CTAs), each CTA finding its (M block, head, sequence, split) by division
// (tile_scheduler.cuh). Longest-first order where the causal tiles' lengths spread (measured, docs/design.md,
// Measured choices: +4-9% at d128/d256 with 32 and 128 M blocks, -3.5% at d64/d256 with 8), in sections of rows
// whose K/V fit in L2.
void set_direct_grid(KernelConfig& c, const ProblemShape& p) {
  const int heads = c.pack_gqa ? p.num_heads_kv : p.num_heads_q;
  const int64_t m_blocks = p.max_seqlen_q > 0 ? c.num_m_blocks : 0;
  const int64_t batch_splits = int64_t(p.batch) * c.num_splits;
  c.folded_grid = (heads > kMaxGridZ || batch_splits > kMaxGridZ) && m_blocks * heads * batch_splits <= kMaxGridX;
  c.grid_x = static_cast<unsigned>(c.folded_grid ? m_blocks * heads * batch_splits : m_blocks);
  c.grid_y = c.folded_grid ? 1u : static_cast<unsigned>(heads);
  c.grid_z = c.folded_grid ? 1u : static_cast<unsigned>(std::min<int64_t>(batch_splits, UINT32_MAX));
  c.reverse_m = !c.folded_grid && p.window_right >= 0 && c.num_m_blocks >= kMinMBlocksForLongestFirst;
  c.tile_order_rows = 1;
  if (c.reverse_m) {
    const int64_t kv_bytes_per_row = int64_t(std::max(1, p.max_seqlen_k)) * (p.head_dim + p.head_dim_v) /
                                     (c.pack_gqa ? 1 : group_of(p));
    const int64_t grid_rows = int64_t(c.grid_y) * c.grid_z;
    c.tile_order_rows = int(std::clamp<int64_t>(kL2BytesForTileOrder / std::max<int64_t>(1, kv_bytes_per_row), 1,
                                                std::max<int64_t>(1, grid_rows)));
  }
}

}  // namespace

KernelConfig select_config(const ProblemShape& problem) {
  KernelConfig c;
  c.key.head_dim = problem.head_dim;
  c.key.head_dim_v = problem.head_dim_v;
  c.key.q16 = problem.q16;
  const int group = group_of(problem);

  // PackGQA where it pays for the longest sequence (decode and speculative decode always pack), the tile height
  // from its rows: short query tiles (decode, speculative decode) would leave a 128-row tile mostly padding, so
  // one MMA warpgroup of 64 rows serves them, and short or narrow prefill (block_m_for).
  auto choose_tiles = [&](bool pack, bool varlen_schedule = false) {
    c.pack_gqa = pack;
    c.key.varlen_schedule = varlen_schedule;
    const int64_t rows = int64_t(problem.max_seqlen_q) * (pack ? group : 1);
    c.key.block_m = single_kernel_per_head_dims(problem.q16, problem.head_dim_v) ? kSingleKernelBlockM
                    : varlen_schedule ? varlen_schedule_block_m(problem.head_dim, problem.head_dim_v)
                                      : block_m_for(rows, problem);
    c.key.block_n = block_n_for(c.key.block_m, problem.head_dim);
    c.num_m_blocks = std::max(1, ceil_div(rows, c.key.block_m));
  };
  choose_tiles(pack_pays(problem.max_seqlen_q, group));
  c.partial_rows = problem.total_q;
  // The q16 and split-dv kernels are direct-grid kernels only (src/kernels.list): their mixed calls run on the grid.
  if (!single_kernel_per_head_dims(problem.q16, problem.head_dim_v) && c.num_m_blocks > 1 && lengths_differ(problem)) {
    // The varlen schedule: one launch whose CTAs take the listed tiles, all heads of the last tile first (a
    // causal chunk's longest tiles; vLLM puts the prefill chunk after the decodes), no split: the decode rows
    // fill the machine beside the chunk's tiles. Sum over sequences of ceil(rows_b / block_m) is at most
    // ceil(total rows / block_m) + batch, and at most batch x the longest sequence's tiles: the grid is heads x
    // that bound. PackGQA where it makes the grid smaller (one tile per kv head, not per q head, for each decode).
    // 64-row tiles where they run two CTAs per SM (varlen_schedule_block_m): a decode's tile then streams its K/V
    // beside another CTA, as in a decode-only call, instead of alone in a 128-row CTA whose second warpgroup has
    // no rows (measured on 128 decodes beside a 1920-token chunk, 2 kv heads: 1.26x the two calls issued apart).
    auto grid_bound = [&](bool pack) {
      choose_tiles(pack, true);
      const int64_t tile_bound =
          std::min<int64_t>(int64_t(problem.batch) * c.num_m_blocks,
                            ceil_div(problem.total_q * (pack ? group : 1), c.key.block_m) + problem.batch);
      return tile_bound * (pack ? problem.num_heads_kv : problem.num_heads_q);
    };
    const bool pack = group > 1 && grid_bound(true) < grid_bound(false);
    const int64_t ctas = grid_bound(pack);
    if (ctas <= kMaxGridX) {
      c.num_splits = 1;
      c.grid_x = static_cast<unsigned>(ctas);
      c.grid_y = 1;
      c.grid_z = 1;
      return c;
    }
    choose_tiles(pack_pays(problem.max_seqlen_q, group));  // too many tiles to list: the direct grid below
  }
  const int heads = c.pack_gqa ? problem.num_heads_kv : problem.num_heads_q;
  const int64_t ctas = int64_t(c.num_m_blocks) * heads * problem.batch;
  const int split_cap = split_ceiling(problem, c.partial_rows);
  c.num_splits = split_cap <= 1 ? 1
                                : split_heuristic(ctas, max_kv_blocks(problem, c.key.block_n, c.key.block_m),
                                                  problem.num_sms * ctas_per_sm_for(c.key.block_m, c.key.head_dim_v),
                                                  split_cap);
  c.key.swapped = swapped_operands(problem.head_dim_v, int64_t(problem.max_seqlen_q) * (c.pack_gqa ? group : 1));
  set_direct_grid(c, problem);
  return c;
}

KernelConfig with_exact_splits(const ProblemShape& problem, KernelConfig config, int splits) {
  if (config.key.varlen_schedule) { return config; }
  config.num_splits = std::clamp(splits, 1, kMaxSplits);
  set_direct_grid(config, problem);
  return config;
}

}  // namespace fp8attn
