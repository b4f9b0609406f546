// Unit tests of the launch policy: fp8attn::describe_problem(), select_config() and split_workspace_bytes()
// (src/host/config.h). Host only: every pointer is a fake device address that config selection must never
// dereference (doing so would crash this test).
//
//   ConfigSweep      every config over a broad sweep of problems obeys the structural rules (declared kernel,
//                    grid, tiles, split range, PackGQA/short-decode rules).
//   ConfigBlockM     short decode -> 64-row tiles for every head dim, longer -> 128.
//   ConfigPackGqa    PackGQA for GQA decode, never for MHA; grid_y is kv heads when packing.
//   ConfigSplit      the num_splits = 0 heuristic, explicit counts, the sliding window.
//   ConfigGraph      the config depends only on host-known fields (CUDA-graph capture/replay).
//   ConfigWorkspace  split_workspace_bytes: exact byte counts, dense and varlen.
//   ConfigDecode     the ten decode shapes of bench/decode_shapes.json; prints the chosen splits and grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fp8attn/c_api.h"
#include "fp8attn/fp8attn.h"
#include "common/extents.h"
#include "host/config.h"
#include "common/kernel_rules.h"
#include "host/head_dims.h"
#include "sm90/launch.h"

namespace {

using fp8attn::DeviceInfo;
using fp8attn::FwdParams;
using fp8attn::KernelConfig;
using fp8attn::ProblemShape;

constexpr int kMaxSplits = 256;        // validate.cpp's bound on an explicit num_splits
constexpr int kMaxHeuristicSplits = 128;
constexpr int64_t kMaxGridYZ = 65535;  // CUDA's limit on gridDim.y and gridDim.z

DeviceInfo device_with_sms(int num_sms) {
  DeviceInfo d;
  d.cc_major = 9;
  d.cc_minor = 0;
  d.num_sms = num_sms;
  return d;
}

// A distinct fake device address per slot, 256-byte aligned like cudaMalloc's; `salt` moves it elsewhere.
template <typename T = void>
T* fake(uintptr_t slot, uintptr_t salt = 0) {
  return reinterpret_cast<T*>(uintptr_t{0x7f0000000000} + slot * 0x10000000 + salt * 0x100000);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// CTAs per SM of the config's kernel: a fact of the kernel (common/kernel_rules.h), not of the config.
int ctas_per_sm(const KernelConfig& k) { return fp8attn::ctas_per_sm_for(k.key.block_m, k.key.head_dim_v); }

// One point of the problem space.
struct Case {
  int d = 128, dv = 128;
  int seqlen_q = 1, seqlen_k = 4096;
  int heads_q = 32, heads_kv = 8;
  int batch = 1;
  bool paged = false;
  bool varlen = false;  // cu_seqlens_q (vLLM passes it for decode too)
  int64_t total_q = -1; // varlen rows; -1: batch * seqlen_q
  bool causal = false;
  int window_left = -1, window_right = -1;
  int num_splits = 0;
  int num_sms = 132;
  fp8attn_dtype q_dtype = FP8ATTN_DTYPE_E4M3;  // F16 / BF16: the q16 kernels
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "d=" << c.d << " dv=" << c.dv << " sq=" << c.seqlen_q << " sk=" << c.seqlen_k << " heads=" << c.heads_q
    << ":" << c.heads_kv << " batch=" << c.batch << (c.paged ? " paged" : "") << (c.varlen ? " varlen" : "")
    << " causal=" << c.causal << " window=(" << c.window_left << "," << c.window_right << ")"
    << " num_splits=" << c.num_splits << " sms=" << c.num_sms << (c.q_dtype != FP8ATTN_DTYPE_E4M3 ? " q16" : "");
  return s.str();
}

std::string describe(const KernelConfig& k) {
  std::ostringstream s;
  s << "{" << k.key.to_string() << " pack_gqa=" << k.pack_gqa << " splits=" << k.num_splits
    << " m_blocks=" << k.num_m_blocks << " partial_rows=" << k.partial_rows
    << " grid=(" << k.grid_x << "," << k.grid_y << "," << k.grid_z << ") reverse_m=" << k.reverse_m
    << " order_rows=" << k.tile_order_rows << (k.key.varlen_schedule ? " varlen_schedule" : "")
    << (k.folded_grid ? " folded_grid" : "") << "}";
  return s.str();
}

// Params as the C API would receive them (strides are irrelevant to config selection and left 0).
FwdParams make_params(const Case& c, uintptr_t salt = 0) {
  FwdParams p;
  fp8attn_fwd_params_init(&p);
  p.q = fake(1, salt);
  p.k = fake(2, salt);
  p.v = fake(3, salt);
  p.out = fake(4, salt);
  p.lse = fake<float>(5, salt);
  p.q_dtype = c.q_dtype;
  p.k_dtype = p.v_dtype = FP8ATTN_DTYPE_E4M3;
  p.head_dim = c.d;
  p.head_dim_v = c.dv;
  p.softmax_scale = 0.125f;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.num_heads_q = c.heads_q;
  p.num_heads_kv = c.heads_kv;
  if (c.varlen || c.paged) {
    p.cu_seqlens_q = fake<int32_t>(7, salt);
    p.total_q = static_cast<int32_t>(c.total_q >= 0 ? c.total_q : int64_t{c.batch} * c.seqlen_q);
  }
  if (c.paged) {
    p.seqused_k = fake<int32_t>(8, salt);
    p.block_table = fake<int32_t>(9, salt);
    p.page_size = 16;
    p.max_pages_per_seq = static_cast<int32_t>(ceil_div(c.seqlen_k, 16));
    p.block_table_batch_stride = p.max_pages_per_seq;
    p.num_pages = 4096;
  } else if (c.varlen) {
    p.cu_seqlens_k = fake<int32_t>(10, salt);
    p.total_k = c.batch * c.seqlen_k;
  }
  p.causal = c.causal ? 1 : 0;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.num_splits = c.num_splits;
  p.workspace = fake(11, salt);
  p.workspace_bytes = size_t{1} << 40;
  return p;
}

ProblemShape problem_of(const Case& c) { return fp8attn::describe_problem(make_params(c), device_with_sms(c.num_sms)); }
KernelConfig config_of(const Case& c) { return fp8attn::select_config(problem_of(c)); }

// Every field of two configs, named where they differ ("" when identical).
std::string config_diff(const KernelConfig& a, const KernelConfig& b) {
  std::ostringstream s;
#define FP8ATTN_CMP(field) \
  if (!(a.field == b.field)) s << " " #field ": " << a.field << " vs " << b.field;
  FP8ATTN_CMP(key.head_dim)
  FP8ATTN_CMP(key.head_dim_v)
  FP8ATTN_CMP(key.block_m)
  FP8ATTN_CMP(key.block_n)
  FP8ATTN_CMP(key.two_level)
  FP8ATTN_CMP(key.varlen_schedule)
  FP8ATTN_CMP(key.q16)
  FP8ATTN_CMP(pack_gqa)
  FP8ATTN_CMP(num_splits)
  FP8ATTN_CMP(num_m_blocks)
  FP8ATTN_CMP(partial_rows)
  FP8ATTN_CMP(grid_x)
  FP8ATTN_CMP(grid_y)
  FP8ATTN_CMP(grid_z)
  FP8ATTN_CMP(reverse_m)
  FP8ATTN_CMP(tile_order_rows)
  FP8ATTN_CMP(folded_grid)
#undef FP8ATTN_CMP
  return s.str();
}

std::string problem_diff(const ProblemShape& a, const ProblemShape& b) {
  std::ostringstream s;
#define FP8ATTN_CMP(field) \
  if (!(a.field == b.field)) s << " " #field ": " << a.field << " vs " << b.field;
  FP8ATTN_CMP(batch)
  FP8ATTN_CMP(max_seqlen_q)
  FP8ATTN_CMP(max_seqlen_k)
  FP8ATTN_CMP(total_q)
  FP8ATTN_CMP(num_heads_q)
  FP8ATTN_CMP(num_heads_kv)
  FP8ATTN_CMP(head_dim)
  FP8ATTN_CMP(head_dim_v)
  FP8ATTN_CMP(window_left)
  FP8ATTN_CMP(window_right)
  FP8ATTN_CMP(num_splits_requested)
  FP8ATTN_CMP(num_sms)
  FP8ATTN_CMP(q16)
#undef FP8ATTN_CMP
  return s.str();
}

// The split-KV workspace, written out independently of config.cpp: fp32 O [splits, rows, heads_q, dv] then
// fp32 LSE [splits, heads_q, rows].
size_t expected_workspace(int splits, int64_t rows, int heads_q, int dv) {
  if (splits <= 1) return 0;
  return size_t(splits) * size_t(rows) * size_t(heads_q) * size_t(dv) * 4 + size_t(splits) * size_t(heads_q) * size_t(rows) * 4;
}

// The structural rules every config must obey; returns "" or the violations.
std::string check_config(const Case& c, const ProblemShape& p, const KernelConfig& k) {
  std::ostringstream e;
  const int group = c.heads_q / c.heads_kv;
  // describe_problem maps the params field by field.
  ProblemShape want;
  want.batch = c.batch;
  want.max_seqlen_q = c.seqlen_q;
  want.max_seqlen_k = c.seqlen_k;
  want.total_q = (c.varlen || c.paged) && c.total_q >= 0 ? c.total_q : int64_t{c.batch} * c.seqlen_q;
  want.num_heads_q = c.heads_q;
  want.num_heads_kv = c.heads_kv;
  want.head_dim = c.d;
  want.head_dim_v = c.dv;
  want.window_left = c.window_left;
  want.window_right = c.causal ? 0 : c.window_right;
  want.num_splits_requested = c.num_splits;
  want.num_sms = c.num_sms;
  const bool q16 = c.q_dtype == FP8ATTN_DTYPE_F16 || c.q_dtype == FP8ATTN_DTYPE_BF16;
  want.q16 = q16;
  const std::string pd = problem_diff(p, want);
  if (!pd.empty()) e << " describe_problem:" << pd << ";";

  if (!fp8attn::sm90::is_declared_kernel(k.key)) e << " kernel " << k.key.to_string() << " is not in src/kernels.list;";
  if (k.key.head_dim != c.d || k.key.head_dim_v != c.dv) e << " key head dims differ from the problem's;";
  if (k.key.block_n != fp8attn::block_n_for(k.key.block_m, c.d)) e << " block_n != block_n_for(block_m, d);";
  if (!k.key.two_level) e << " picked the single-level (test-only) kernel;";
  // A 16-bit Q runs on the q16 kernels, 64-row direct-grid ones only (src/kernels.list); an E4M3 Q never does. So
  // does dv = 512 (split dv: two MMA warpgroups on one 64-row tile), with either Q.
  if (k.key.q16 != q16) e << " q16 kernel " << k.key.q16 << " for q16 " << q16 << ";";
  const bool single_kernel = q16 || c.dv == 512;
  if (single_kernel && (k.key.block_m != 64 || k.key.varlen_schedule))
    e << " q16 or dv 512 kernel not a 64-row direct-grid kernel;";
  if (k.key.block_m != 64 && k.key.block_m != 128 && k.key.block_m != 192) e << " block_m not 64, 128 or 192;";

  // PackGQA: never without a group; always for GQA decode whose packed rows fit one 64-row tile.
  if (k.pack_gqa && group == 1) e << " pack_gqa with one q head per kv head;";
  if (group > 1 && c.seqlen_q >= 1 && int64_t{c.seqlen_q} * group <= 64 && !k.pack_gqa)
    e << " GQA decode (" << c.seqlen_q << " tokens x " << group << " heads <= 64) not packed;";
  const int64_t rows = int64_t{c.seqlen_q} * (k.pack_gqa ? group : 1);
  // The swapped-operand kernel exactly for split-dv tiles of at most kSwappedRows rows (kernel_rules.h).
  if (k.key.swapped != (c.dv == 512 && rows <= fp8attn::kSwappedRows))
    e << " swapped kernel " << k.key.swapped << " for dv " << c.dv << " with " << rows << " rows per tile;";
  // 64-row tiles for short decode (rows of one tile's head <= 64), for dv <= 64 (d <= 128), and for d, dv <= 96
  // over at most 1024 keys (two CTAs per SM: docs/design.md, Measured choices); 128 rows otherwise. dv <= 64 over >=
  // 8192 keys per row (the window, where bounded on both sides) takes 192 rows where they fill >= 90% of the tiles
  // (docs/design.md, Measured choices).
  const bool bounded_window = c.window_left >= 0 && (c.causal || c.window_right >= 0);
  const int64_t window = int64_t{c.window_left} + (c.causal ? 0 : c.window_right) + 1;
  const int64_t span = bounded_window ? std::min<int64_t>(c.seqlen_k, window) : c.seqlen_k;
  const bool tall_tile =
      rows > 64 && c.d <= 128 && c.dv <= 64 && span >= 8192 && 10 * rows >= 9 * 192 * ceil_div(rows, 192);
  const bool two_cta_prefill = c.d <= 128 && (c.dv <= 64 || (c.d <= 96 && c.dv <= 96 && c.seqlen_k <= 1024));
  const int want_block_m = single_kernel ? 64 : tall_tile ? 192 : rows <= 64 || two_cta_prefill ? 64 : 128;
  // The varlen schedule takes 64-row tiles wherever they run two CTAs per SM (d, dv <= 128), 128 rows above.
  const int want_schedule_block_m = c.d <= 128 && c.dv <= 128 ? 64 : 128;
  if (k.key.block_m != (k.key.varlen_schedule ? want_schedule_block_m : want_block_m))
    e << " block_m " << k.key.block_m << " for " << rows << " rows per head;";

  if (k.partial_rows != want.total_q) e << " partial_rows != total_q;";
  // The varlen schedule exactly where a varlen batch's rows fill less than 90% of batch x max_seqlen_q and the
  // longest sequence has several M blocks: a one-dimensional grid of heads x a bound on the listed tiles that no
  // lengths within total_q and max_seqlen_q can exceed, and no split.
  const bool lengths_differ = c.batch > 1 && want.total_q * 10 < int64_t{9} * c.batch * c.seqlen_q;
  const int64_t m_blocks = std::max<int64_t>(1, ceil_div(rows, k.key.block_m));
  if (k.key.varlen_schedule) {
    if (!lengths_differ) e << " varlen schedule for a batch whose rows fill >= 90% of batch x max_seqlen_q;";
    if (m_blocks <= 1) e << " varlen schedule with one M block per sequence;";
    if (k.num_splits != 1) e << " varlen schedule split " << k.num_splits << " ways;";
    if (k.grid_y != 1 || k.grid_z != 1) e << " varlen schedule grid not one-dimensional;";
    const int64_t heads = k.pack_gqa ? c.heads_kv : c.heads_q;
    const int64_t packed_total = want.total_q * (k.pack_gqa ? group : 1);
    // The most tiles lengths can have: every sequence at its own rows, at most max_seqlen_q each.
    const int64_t most_tiles = std::min<int64_t>(c.batch * m_blocks, ceil_div(packed_total, k.key.block_m) + c.batch);
    if (int64_t{k.grid_x} != heads * most_tiles) e << " varlen schedule grid_x " << k.grid_x << " != heads x " << most_tiles << ";";
    return e.str();
  }
  if (lengths_differ && m_blocks > 1 && !q16) e << " direct grid for a varlen batch of differing lengths;";

  // Grid: (m_blocks, heads, batch * splits), folded into gridDim.x exactly when heads or batch * splits pass
  // CUDA's 65535; nothing to launch when there are no queries.
  if (k.num_m_blocks != m_blocks) e << " num_m_blocks " << k.num_m_blocks << " != " << m_blocks << ";";
  const int64_t grid_heads = k.pack_gqa ? c.heads_kv : c.heads_q;
  const int64_t batch_splits = int64_t{c.batch} * k.num_splits;
  const int64_t grid_m = c.seqlen_q > 0 ? m_blocks : 0;
  if (k.folded_grid != (grid_heads > kMaxGridYZ || batch_splits > kMaxGridYZ)) e << " folded_grid " << k.folded_grid << ";";
  if (k.folded_grid) {
    if (int64_t{k.grid_x} != grid_m * grid_heads * batch_splits || k.grid_y != 1 || k.grid_z != 1)
      e << " folded grid != (m_blocks x heads x batch * splits, 1, 1);";
    if (k.reverse_m) e << " reverse_m on a folded grid;";
  } else {
    if (int64_t{k.grid_x} != grid_m) e << " grid_x != num_m_blocks;";
    if (int64_t{k.grid_y} != grid_heads) e << " grid_y != (packed ? kv : q) heads;";
    if (int64_t{k.grid_z} != batch_splits) e << " grid_z != batch * num_splits;";
  }
  if (int64_t{k.grid_y} > kMaxGridYZ || int64_t{k.grid_z} > kMaxGridYZ) e << " grid beyond CUDA's 65535 limit;";
  // Tile order: longest tiles first exactly when a bounded right side makes later M blocks longer; sections of
  // at least one row and at most all rows, and several rows only with that order.
  const bool bounded_right = c.causal || c.window_right >= 0;
  if (k.reverse_m != (bounded_right && k.num_m_blocks >= 16 && !k.folded_grid)) e << " reverse_m " << k.reverse_m << ";";
  const int64_t order_rows = int64_t{k.grid_y} * k.grid_z;
  if (k.tile_order_rows < 1 || (k.tile_order_rows > 1 && k.tile_order_rows > order_rows))
    e << " tile_order_rows " << k.tile_order_rows << " outside 1.." << order_rows << ";";
  if (!k.reverse_m && k.tile_order_rows != 1) e << " sections of several rows without reverse_m;";

  // Splits.
  if (k.num_splits < 1 || k.num_splits > kMaxSplits) e << " num_splits " << k.num_splits << " outside 1..256;";
  // num_splits is a ceiling on the heuristic (FlashAttention-3's reading): 1 never splits, n >= 2 at most n.
  if (c.num_splits > 0 && k.num_splits > c.num_splits) e << " num_splits " << k.num_splits << " over the ceiling;";
  if (c.num_splits != 1) {
    const int block_n = fp8attn::block_n_for(k.key.block_m, c.d);
    const int64_t kv_blocks = std::max<int64_t>(1, ceil_div(c.seqlen_k, block_n));
    if (k.num_splits > (c.num_splits == 0 ? kMaxHeuristicSplits : c.num_splits))
      e << " heuristic gave more than " << (c.num_splits == 0 ? kMaxHeuristicSplits : c.num_splits) << " splits;";
    if (k.num_splits > kv_blocks) e << " heuristic gave more splits than KV blocks;";
    if (kv_blocks <= 4 && k.num_splits != 1) e << " heuristic split a KV range of <= 4 blocks;";
    const int64_t ctas = int64_t{k.grid_x} * k.grid_y * c.batch;
    const int64_t slots = int64_t{c.num_sms} * ctas_per_sm(k);
    if (c.seqlen_q > 0 && 5 * ctas >= 4 * slots && k.num_splits != 1)
      e << " heuristic split a grid of " << ctas << " CTAs that fills >= 80% of " << slots << " slots;";
  }
  if (fp8attn::split_workspace_bytes(p, k) != expected_workspace(k.num_splits, want.total_q, c.heads_q, c.dv))
    e << " split_workspace_bytes " << fp8attn::split_workspace_bytes(p, k) << " != "
      << expected_workspace(k.num_splits, want.total_q, c.heads_q, c.dv) << ";";
  return e.str();
}

// ---------------------------------------------------------------------------------------------------------
// The sweep
// ---------------------------------------------------------------------------------------------------------

TEST(ConfigSweep, EveryConfigIsDeclaredAndConsistent) {
  const std::vector<int> seqlens_q = {0, 1, 2, 4, 8, 17, 64, 65, 1000, 16384};
  const std::vector<int> seqlens_k = {0, 1, 128, 4096, 32768};
  const std::vector<std::pair<int, int>> heads = {{1, 1}, {8, 1}, {32, 8}, {16, 2}, {6, 6}, {12, 4}};
  const std::vector<int> batches = {1, 4, 128};
  struct Mask { bool causal; int left, right; };
  const std::vector<Mask> masks = {{false, -1, -1}, {true, -1, -1}, {true, 127, 0}, {false, 255, 255}, {false, 1023, -1}};
  const std::vector<int> splits = {0, 1, 3, 256};
  const std::vector<int> sms = {132, 114};

  int64_t checked = 0, failures = 0;
  std::vector<int> seen_block_m(257, 0);
  int64_t seen_packed = 0, seen_split = 0, seen_q16 = 0;
  for (const auto& hd : fp8attn::kSupportedHeadDims)
    for (int sq : seqlens_q)
      for (int sk : seqlens_k)
        for (const auto& h : heads)
          for (int b : batches)
            for (bool paged : {false, true})
              for (const Mask& m : masks)
                for (int ns : splits)
                  for (int n_sm : sms) {
                    Case c;
                    c.d = hd.first;
                    c.dv = hd.second;
                    c.seqlen_q = sq;
                    c.seqlen_k = sk;
                    c.heads_q = h.first;
                    c.heads_kv = h.second;
                    c.batch = b;
                    c.paged = paged;
                    c.causal = m.causal;
                    c.window_left = m.left;
                    c.window_right = m.right;
                    c.num_splits = ns;
                    c.num_sms = n_sm;
                    // A third of the points with a 16-bit Q (fp16 and bf16 alternating): the q16 kernels.
                    c.q_dtype = checked % 3 != 2 ? FP8ATTN_DTYPE_E4M3
                                : checked % 2 == 0 ? FP8ATTN_DTYPE_BF16 : FP8ATTN_DTYPE_F16;
                    const ProblemShape p = problem_of(c);
                    const KernelConfig k = fp8attn::select_config(p);
                    ++checked;
                    seen_q16 += k.key.q16;
                    seen_block_m[std::min(k.key.block_m, 256)]++;
                    seen_packed += k.pack_gqa;
                    seen_split += ns == 0 && k.num_splits > 1;
                    const std::string err = check_config(c, p, k);
                    if (!err.empty() && ++failures <= 25) ADD_FAILURE() << describe(c) << "\n  -> " << describe(k) << "\n  " << err;
                  }
  EXPECT_EQ(failures, 0) << "of " << checked << " configs";
  // The sweep must exercise every tile height, PackGQA and the split heuristic, or it proves little.
  EXPECT_GT(seen_block_m[64], 0);
  EXPECT_GT(seen_block_m[128], 0);
  EXPECT_GT(seen_block_m[192], 0);
  EXPECT_GT(seen_packed, 0);
  EXPECT_GT(seen_split, 0);
  EXPECT_GT(seen_q16, 0);
  std::cout << "[ config sweep ] " << checked << " configs: block_m 64: " << seen_block_m[64]
            << ", block_m 128: " << seen_block_m[128] << ", block_m 192: " << seen_block_m[192] << ", packed: " << seen_packed
            << ", heuristic splits > 1: " << seen_split << ", q16: " << seen_q16 << "\n";
}

// The check the sweep relies on: is_declared_kernel() knows exactly src/kernels.list's two-level kernels the
// policy may pick (and the one single-level comparison kernel, which it must never pick), direct grid and varlen
// schedule apart.
TEST(ConfigSweep, DeclaredKernelsAreTheList) {
  struct K { int d, dv, bm, bn; bool varlen_schedule; bool q16 = false; bool swapped = false; };
  const K declared[] = {
      {64, 64, 64, 128, false},    {64, 64, 192, 128, false},   {96, 96, 128, 128, false},  {96, 96, 64, 128, false},
      {128, 128, 128, 128, false}, {128, 128, 64, 128, false},  {192, 192, 128, 96, false}, {192, 192, 64, 96, false},
      {192, 128, 128, 96, false},  {192, 128, 64, 96, false},   {256, 256, 128, 128, false}, {256, 256, 64, 64, false},
      {64, 64, 64, 128, true},     {96, 96, 64, 128, true},     {128, 128, 64, 128, true},   {192, 192, 128, 96, true},
      {192, 128, 128, 96, true},   {256, 256, 128, 128, true},
      {64, 64, 64, 128, false, true}, {96, 96, 64, 128, false, true},  {128, 128, 64, 128, false, true},
      {192, 192, 64, 96, false, true}, {192, 128, 64, 96, false, true}, {256, 256, 64, 64, false, true},
      {512, 512, 64, 64, false},      {512, 512, 64, 64, false, false, true},
      {512, 512, 64, 64, false, true}, {512, 512, 64, 64, false, true, true}};
  auto key_of = [](const K& k) {
    fp8attn::KernelKey key;
    key.head_dim = k.d;
    key.head_dim_v = k.dv;
    key.block_m = k.bm;
    key.block_n = k.bn;
    key.varlen_schedule = k.varlen_schedule;
    key.q16 = k.q16;
    key.swapped = k.swapped;
    return key;
  };
  for (const K& k : declared) { EXPECT_TRUE(fp8attn::sm90::is_declared_kernel(key_of(k))) << key_of(k).to_string(); }
  const K undeclared[] = {{128, 128, 192, 128, false}, {64, 64, 128, 128, false}, {64, 64, 64, 64, false},
                          {256, 256, 64, 128, false},  {256, 256, 128, 64, false}, {128, 64, 64, 128, false},
                          {96, 96, 64, 96, false},     {128, 128, 128, 128, true}, {256, 256, 64, 64, true},
                          {64, 64, 192, 128, true},  {128, 128, 128, 128, false, true}, {64, 64, 64, 128, true, true},
                          {256, 256, 128, 128, false, true}, {256, 256, 64, 64, false, false, true},
                          {512, 512, 128, 64, false, false, true}};
  for (const K& k : undeclared) { EXPECT_FALSE(fp8attn::sm90::is_declared_kernel(key_of(k))) << key_of(k).to_string(); }
}

// A varlen sweep where total_q is not batch * max_seqlen_q: partial_rows and the workspace follow total_q.
TEST(ConfigSweep, VarlenRowsFollowTotalQ) {
  for (int ns : {0, 1, 3, 256})
    for (int total : {1, 37, 1000})
      for (const auto& h : std::vector<std::pair<int, int>>{{32, 8}, {6, 6}}) {
        Case c;
        c.varlen = true;
        c.batch = 5;
        c.seqlen_q = 300;
        c.total_q = total;
        c.seqlen_k = 32768;
        c.heads_q = h.first;
        c.heads_kv = h.second;
        c.num_splits = ns;
        const ProblemShape p = problem_of(c);
        const KernelConfig k = fp8attn::select_config(p);
        const std::string err = check_config(c, p, k);
        EXPECT_TRUE(err.empty()) << describe(c) << "\n  -> " << describe(k) << "\n  " << err;
      }
}

// ---------------------------------------------------------------------------------------------------------
// Tile height
// ---------------------------------------------------------------------------------------------------------

TEST(ConfigBlockM, ShortDecodeUses64RowsForEveryHeadDim) {
  struct Short { int sq, hq, hkv; };
  // q tokens x q heads per kv head <= 64 (packed), or q tokens <= 64 (MHA).
  const std::vector<Short> shorts = {{1, 32, 8}, {8, 32, 8}, {16, 32, 8}, {8, 16, 2}, {1, 8, 1}, {8, 8, 1},
                                     {1, 6, 6},  {64, 6, 6}, {1, 1, 1},   {21, 12, 4}, {64, 1, 1}};
  for (const auto& hd : fp8attn::kSupportedHeadDims)
    for (const Short& s : shorts) {
      Case c;
      c.d = hd.first;
      c.dv = hd.second;
      c.seqlen_q = s.sq;
      c.heads_q = s.hq;
      c.heads_kv = s.hkv;
      c.batch = 4;
      c.paged = true;
      c.causal = true;
      c.seqlen_k = 32768;
      const KernelConfig k = config_of(c);
      EXPECT_EQ(k.key.block_m, 64) << describe(c) << " -> " << describe(k);
      EXPECT_EQ(k.num_m_blocks, 1) << describe(c);
      EXPECT_EQ(ctas_per_sm(k), hd.second <= 128 ? 2 : 1) << describe(c);
    }
}

TEST(ConfigBlockM, LongerUses128Rows) {
  struct Long { int sq, hq, hkv; };
  // Packed rows > 64 (17 x 4, 9 x 8, 22 x 3), MHA tokens > 64, prefill; over 4096 keys, dv > 64.
  const std::vector<Long> longs = {{17, 32, 8}, {9, 16, 2}, {22, 12, 4}, {65, 1, 1}, {65, 6, 6},
                                   {1000, 32, 8}, {16384, 6, 6}, {16384, 8, 1}};
  for (const auto& hd : fp8attn::kSupportedHeadDims)
    for (const Long& s : longs) {
      if (hd.second <= 64) continue;   // ConfigBlockM.NarrowOrShortPrefillUses64Rows
      if (hd.second == 512) continue;  // ConfigSplitDv
      Case c;
      c.d = hd.first;
      c.dv = hd.second;
      c.seqlen_q = s.sq;
      c.heads_q = s.hq;
      c.heads_kv = s.hkv;
      c.seqlen_k = 4096;
      c.causal = true;
      const KernelConfig k = config_of(c);
      EXPECT_EQ(k.key.block_m, 128) << describe(c) << " -> " << describe(k);
      EXPECT_EQ(ctas_per_sm(k), 1) << describe(c);
    }
}

// Two CTAs of 64 rows per SM where they measured faster (docs/design.md, Measured choices): dv = 64 at every key
// length, d, dv <= 96 up to 1024 keys; d = dv = 128 takes 128 rows since its 128-row epilogue is staged; never d
// or dv > 128 (not measured, or one CTA per SM either way).
TEST(ConfigBlockM, NarrowOrShortPrefillUses64Rows) {
  struct Want { int d, dv, seqlen_k, block_m; };
  const std::vector<Want> wants = {{64, 64, 16384, 64},   {64, 64, 1024, 64},     {96, 96, 1024, 64},
                                   {96, 96, 1025, 128},   {128, 128, 1024, 128},  {128, 128, 512, 128},
                                   {128, 128, 1025, 128}, {128, 128, 16384, 128}, {192, 128, 1024, 128},
                                   {192, 192, 1024, 128}, {256, 256, 1024, 128},  {256, 256, 256, 128}};
  for (const Want& w : wants)
    for (bool causal : {false, true}) {
      Case c;
      c.d = w.d;
      c.dv = w.dv;
      c.seqlen_q = 1024;
      c.seqlen_k = w.seqlen_k;
      c.heads_q = c.heads_kv = 16;
      c.batch = 16;
      c.causal = causal;
      const KernelConfig k = config_of(c);
      EXPECT_EQ(k.key.block_m, w.block_m) << describe(c) << " -> " << describe(k);
      EXPECT_EQ(k.num_m_blocks, 1024 / w.block_m) << describe(c);
      EXPECT_EQ(ctas_per_sm(k), w.block_m == 64 ? 2 : 1) << describe(c);
      EXPECT_EQ(k.num_splits, 1) << describe(c);  // 16 x 16 x 8+ tiles fill the GPU
    }
}

TEST(ConfigBlockM, PrefillTileCount) {
  Case c;
  c.seqlen_q = 1000;
  c.seqlen_k = 2000;
  c.heads_q = c.heads_kv = 16;
  c.batch = 2;
  const KernelConfig k = config_of(c);
  EXPECT_EQ(k.key.block_m, 128);
  EXPECT_FALSE(k.pack_gqa);
  EXPECT_EQ(k.num_m_blocks, 8);  // ceil(1000 / 128)
  EXPECT_EQ(k.grid_x, 8u);
  EXPECT_EQ(k.grid_y, 16u);
}

// ---------------------------------------------------------------------------------------------------------
// PackGQA
// ---------------------------------------------------------------------------------------------------------

TEST(ConfigPackGqa, GqaDecodePacksAndGridsOverKvHeads) {
  for (const auto& hd : fp8attn::kSupportedHeadDims)
    for (int tokens = 1; tokens <= 8; ++tokens) {
      Case c;
      c.d = hd.first;
      c.dv = hd.second;
      c.seqlen_q = tokens;
      c.heads_q = 32;
      c.heads_kv = 8;
      c.batch = 16;
      c.paged = true;
      c.causal = true;
      c.seqlen_k = 32768;
      const KernelConfig k = config_of(c);
      EXPECT_TRUE(k.pack_gqa) << describe(c);
      EXPECT_EQ(k.grid_x, 1u) << describe(c);   // 4 heads x 8 tokens <= 64 rows: one tile per kv head
      EXPECT_EQ(k.grid_y, 8u) << describe(c);   // kv heads
      EXPECT_EQ(k.key.block_m, 64) << describe(c);
    }
  // MQA (8:1) and 16:2 decode too.
  Case mqa;
  mqa.heads_q = 8;
  mqa.heads_kv = 1;
  EXPECT_TRUE(config_of(mqa).pack_gqa);
  EXPECT_EQ(config_of(mqa).grid_y, 1u);
  Case g8;
  g8.heads_q = 16;
  g8.heads_kv = 2;
  g8.seqlen_q = 8;
  EXPECT_TRUE(config_of(g8).pack_gqa);
  EXPECT_EQ(config_of(g8).grid_y, 2u);
}

TEST(ConfigPackGqa, MhaNeverPacksAndGridsOverQHeads) {
  for (const auto& hd : fp8attn::kSupportedHeadDims)
    for (int tokens : {1, 2, 4, 8, 17, 64, 65, 1000})
      for (int heads : {1, 6, 32}) {
        Case c;
        c.d = hd.first;
        c.dv = hd.second;
        c.seqlen_q = tokens;
        c.heads_q = c.heads_kv = heads;
        c.batch = 3;
        const KernelConfig k = config_of(c);
        EXPECT_FALSE(k.pack_gqa) << describe(c);
        EXPECT_EQ(k.grid_y, unsigned(heads)) << describe(c);
      }
}

TEST(ConfigPackGqa, UnpackedGqaGridsOverQHeads) {
  // 64 tokens already fill a 64-row tile: packing adds nothing, and the grid is over q heads.
  Case c;
  c.seqlen_q = 64;
  c.heads_q = 32;
  c.heads_kv = 8;
  const KernelConfig k = config_of(c);
  EXPECT_FALSE(k.pack_gqa) << describe(k);
  EXPECT_EQ(k.grid_y, 32u);
  EXPECT_EQ(k.key.block_m, 64);
}

// ---------------------------------------------------------------------------------------------------------
// Splits
// ---------------------------------------------------------------------------------------------------------

TEST(ConfigSplit, HeuristicFillsSmsForSmallGridLongKv) {
  for (int n_sm : {132, 114}) {
    Case c;  // batch 1, 32:8, 1 token, 32k keys: 8 CTAs for 2 x SMs slots
    c.seqlen_q = 1;
    c.seqlen_k = 32768;
    c.paged = true;
    c.causal = true;
    c.num_sms = n_sm;
    const KernelConfig k = config_of(c);
    const int64_t slots = int64_t{n_sm} * ctas_per_sm(k);
    const int64_t total = int64_t{k.grid_x} * k.grid_y * k.grid_z;
    EXPECT_GE(k.num_splits, 4) << describe(k);
    EXPECT_LE(k.num_splits, kMaxHeuristicSplits) << describe(k);
    EXPECT_EQ(k.grid_z, unsigned(k.num_splits)) << describe(k);
    // Several splits fill most of one wave without spilling into a second.
    EXPECT_GE(total * 10, slots * 8) << describe(k) << " slots " << slots;
    EXPECT_LE(total, slots) << describe(k) << " slots " << slots;
    std::cout << "[ split ] batch 1, 32:8, 1 token, 32k keys, " << n_sm << " SMs: " << describe(k) << "\n";
  }
}

TEST(ConfigSplit, HeuristicTakesTheMostSplitsThatFitOneWave) {
  // The decode steps of bench_decode.py where the grid is small (docs/design.md, Measured choices): as many splits as
  // one wave of CTA slots holds, never a second wave, lowered to the fewest with the same longest split (llama 1x1:
  // 33 fit, 256 blocks make 8 per split either way, so 32; gemma: 8 fit, 18 windowed blocks make 3 per split, so 6).
  struct Step {
    const char* name;
    int d, heads_q, heads_kv, batch, window_left, splits;
  };
  const Step steps[] = {
      {"llama 8b 1x1 (8 CTAs, 264 slots)", 128, 32, 8, 1, -1, 32},
      {"llama 70b tp4 8x1 (16 CTAs, 264 slots)", 128, 16, 2, 8, -1, 16},
      {"gemma 4x4, d256 window 1023 (16 CTAs, 132 slots)", 256, 8, 4, 4, 1023, 6},
      {"llama 8b 16x1 (128 CTAs, 264 slots)", 128, 32, 8, 16, -1, 2},
  };
  for (const Step& st : steps) {
    Case c;
    c.d = c.dv = st.d;
    c.heads_q = st.heads_q;
    c.heads_kv = st.heads_kv;
    c.batch = st.batch;
    c.seqlen_q = st.d == 256 ? 4 : 1;
    c.seqlen_k = 32768;  // max_seqlen_k under vLLM's graph capture
    c.paged = true;
    c.causal = true;
    c.window_left = st.window_left;
    const KernelConfig k = config_of(c);
    EXPECT_EQ(k.num_splits, st.splits) << st.name << ": " << describe(k);
    const int64_t slots = int64_t{c.num_sms} * ctas_per_sm(k);
    EXPECT_LE(int64_t{k.grid_x} * k.grid_y * k.grid_z, slots) << st.name << ": " << describe(k);
  }
  // A grid that one wave cannot fill well however it is split (150 CTAs of 264 slots: one split fills 57%) still
  // takes the FlashAttention rule's count, here three splits over two waves.
  Case mid;
  mid.d = mid.dv = 128;
  mid.heads_q = mid.heads_kv = 75;  // MHA: 75 heads x 2 sequences = 150 CTAs
  mid.batch = 2;
  mid.seqlen_k = 32768;
  mid.paged = true;
  EXPECT_EQ(config_of(mid).num_splits, 3) << describe(config_of(mid));
}

TEST(ConfigSplit, HeuristicDoesNotSplitAFullGrid) {
  for (const auto& hd : fp8attn::kSupportedHeadDims) {
    Case c;  // prefill 16k tokens
    c.d = hd.first;
    c.dv = hd.second;
    c.seqlen_q = 16384;
    c.seqlen_k = 16384;
    c.causal = true;
    EXPECT_EQ(config_of(c).num_splits, 1) << describe(c);
    // Decode whose grid already fills the GPU: 128 requests x 8 kv heads.
    Case d;
    d.d = hd.first;
    d.dv = hd.second;
    d.batch = 128;
    d.seqlen_k = 32768;
    d.paged = true;
    d.causal = true;
    EXPECT_EQ(config_of(d).num_splits, 1) << describe(d);
  }
}

TEST(ConfigSplit, HeuristicDoesNotSplitShortKv) {
  for (const auto& hd : fp8attn::kSupportedHeadDims) {
    Case c;  // a small grid (8 CTAs) that would be split if the KV range allowed it
    c.d = hd.first;
    c.dv = hd.second;
    c.causal = true;
    const int block_n = fp8attn::block_n_for(config_of(c).key.block_m, c.d);  // the tile height does not move with seqlen_k here
    c.seqlen_k = 4 * block_n;  // exactly 4 blocks
    EXPECT_EQ(config_of(c).num_splits, 1) << describe(c);
    c.seqlen_k = 1;
    EXPECT_EQ(config_of(c).num_splits, 1) << describe(c);
    c.seqlen_k = 0;
    EXPECT_EQ(config_of(c).num_splits, 1) << describe(c);
    c.seqlen_k = 4 * block_n + 1;  // 5 blocks: now worth splitting
    EXPECT_GT(config_of(c).num_splits, 1) << describe(c);
    EXPECT_LE(config_of(c).num_splits, 5) << describe(c);
  }
}

// num_splits as FlashAttention-3 reads it (vLLM passes 32 under full CUDA graphs for every batch of <= 512 tokens):
// 1 never splits; n >= 2 caps the heuristic's count, which it never raises.
TEST(ConfigSplit, RequestedCountIsACeiling) {
  Case decode;  // 1 x 32:8 decode over 32k keys: the heuristic alone takes many splits
  decode.seqlen_k = 32768;
  const int heuristic = config_of(decode).num_splits;
  ASSERT_GT(heuristic, 8) << "precondition";
  for (int ns : {1, 2, 3, 7, 8, 32, 64, 128, 255, 256}) {
    decode.num_splits = ns;
    EXPECT_EQ(config_of(decode).num_splits, std::min(ns, heuristic)) << "num_splits " << ns;
    EXPECT_EQ(config_of(decode).grid_z, unsigned(std::min(ns, heuristic))) << "num_splits " << ns;
    Case prefill;  // the heuristic never splits a full grid, whatever the ceiling
    prefill.seqlen_q = prefill.seqlen_k = 16384;
    prefill.batch = 2;
    prefill.num_splits = ns;
    EXPECT_EQ(config_of(prefill).num_splits, 1) << "num_splits " << ns;
    Case tiny;  // nor a KV range shorter than the ceiling
    tiny.seqlen_k = 1;
    tiny.num_splits = ns;
    EXPECT_EQ(config_of(tiny).num_splits, 1) << "num_splits " << ns;
  }
}

// vLLM's ten decode steps (bench/decode_shapes.json's batch x context, 32:8 heads) at its full-graph num_splits=32
// and max_seqlen_k = max_model_len: a batch that fills the machine is not split (exact 32 made 128 x 1k decode
// 2.9x slower than FA3's reading of the same call), a small one keeps the heuristic's count.
TEST(ConfigSplit, VllmFullGraphCeilingFollowsTheHeuristic) {
  for (int batch : {1, 8, 32, 64, 128}) {
    Case c;
    c.paged = true;
    c.causal = true;
    c.batch = batch;
    c.seqlen_k = 32768;
    const int heuristic = config_of(c).num_splits;
    c.num_splits = 32;
    EXPECT_EQ(config_of(c).num_splits, std::min(32, heuristic)) << "batch " << batch;
    if (batch >= 32) {
      EXPECT_EQ(config_of(c).num_splits, 1) << "batch " << batch << " fills the machine";
    }
  }
}

// The tests and benchmarks that exercise a given split count take it exactly through with_exact_splits.
TEST(ConfigSplit, ExactSplitsForTests) {
  for (int ns : {1, 2, 3, 7, 64, 256}) {
    Case prefill;
    prefill.seqlen_q = prefill.seqlen_k = 16384;
    prefill.batch = 2;
    const ProblemShape p = problem_of(prefill);
    const KernelConfig k = fp8attn::with_exact_splits(p, fp8attn::select_config(p), ns);
    EXPECT_EQ(k.num_splits, ns);
    EXPECT_EQ(k.grid_z, unsigned(2 * ns));
    EXPECT_EQ(fp8attn::split_workspace_bytes(p, k), expected_workspace(ns, 2 * 16384, 32, 128));
  }
}

// The workspace of any ceiling stays under the 2 GiB cap: the plan never fails where a count is only a ceiling.
TEST(ConfigSplit, CeilingKeepsTheWorkspaceUnderTheCap) {
  for (int batch : {1, 4, 64, 1024})
    for (int seqlen_q : {1, 4, 128, 4096})
      for (int heads_kv : {1, 8}) {
        Case c;
        c.paged = true;
        c.batch = batch;
        c.seqlen_q = seqlen_q;
        c.heads_q = 8 * heads_kv;
        c.heads_kv = heads_kv;
        c.seqlen_k = 131072;
        c.num_splits = 256;
        const ProblemShape p = problem_of(c);
        EXPECT_LE(fp8attn::split_workspace_bytes(p, fp8attn::select_config(p)), size_t{2} << 30) << describe(c);
      }
}

// A mixed varlen call (vLLM's chunked prefill: one 4096-token chunk beside 130 single-token decodes) takes the
// varlen schedule: PackGQA (a decode is then one tile per kv head), heads x (the chunk's tiles + one per decode)
// CTAs instead of the direct grid's 32 M blocks x 32 heads x 131 sequences.
TEST(ConfigVarlenSchedule, MixedPrefillAndDecode) {
  Case c;
  c.varlen = true;
  c.paged = true;
  c.causal = true;
  c.batch = 131;
  c.seqlen_q = 4096;
  c.total_q = 4096 + 130;
  c.seqlen_k = 8192;
  c.num_splits = 0;
  const KernelConfig k = config_of(c);
  EXPECT_TRUE(k.key.varlen_schedule) << describe(k);
  EXPECT_TRUE(k.pack_gqa) << describe(k);
  EXPECT_EQ(k.key.block_m, 64) << describe(k);  // two CTAs per SM, as a decode-only call
  EXPECT_EQ(k.num_splits, 1) << describe(k);
  // ceil(4226 x 4 / 64) + 131 = 396 tiles bound (the real count: 256 + 130 = 386) x 8 kv heads.
  EXPECT_EQ(k.grid_x, 396u * 8u) << describe(k);
  c.num_splits = 32;  // vLLM's full-graph ceiling changes nothing here
  EXPECT_EQ(config_of(c).grid_x, 396u * 8u);
  const std::string err = check_config(c, problem_of(c), k);
  EXPECT_TRUE(err.empty()) << err;
  c.d = c.dv = 256;  // d256 tiles of 64 rows run one CTA per SM: the schedule keeps 128 rows there
  EXPECT_EQ(config_of(c).key.block_m, 128) << describe(config_of(c));
}

// Batches whose sequences all have max_seqlen_q's length, and decode batches, keep the direct grid.
// A 16-bit Q takes the q16 kernel of its head dims, 64 rows, for every shape: decode packs and splits as on the
// E4M3 64-row kernel; prefill runs in 64-row tiles; a mixed call stays on the direct grid (no q16 schedule kernel).
TEST(ConfigQ16, SixteenBitQTakesTheQ16KernelAt64Rows) {
  Case decode;  // Llama-8B-like decode step, bf16 q
  decode.varlen = decode.paged = true;
  decode.batch = 1;
  decode.seqlen_k = 4096;
  decode.q_dtype = FP8ATTN_DTYPE_BF16;
  Case decode_e4m3 = decode;
  decode_e4m3.q_dtype = FP8ATTN_DTYPE_E4M3;
  const KernelConfig k16 = config_of(decode), k8 = config_of(decode_e4m3);
  EXPECT_TRUE(k16.key.q16) << describe(k16);
  EXPECT_FALSE(k8.key.q16) << describe(k8);
  // Apart from the kernel's q16 flag, the plan is the E4M3 one (both 64-row tiles).
  KernelConfig k16_as_e4m3 = k16;
  k16_as_e4m3.key.q16 = false;
  EXPECT_EQ(config_diff(k16_as_e4m3, k8), "");

  Case prefill;  // d256 causal 16k prefill, fp16 q
  prefill.d = prefill.dv = 256;
  prefill.seqlen_q = prefill.seqlen_k = 16384;
  prefill.heads_q = prefill.heads_kv = 16;
  prefill.causal = true;
  prefill.q_dtype = FP8ATTN_DTYPE_F16;
  const KernelConfig kp = config_of(prefill);
  EXPECT_TRUE(kp.key.q16);
  EXPECT_EQ(kp.key.block_m, 64) << describe(kp);
  EXPECT_EQ(kp.key.block_n, 64) << describe(kp);
  EXPECT_EQ(kp.num_m_blocks, 256) << describe(kp);

  Case mixed;  // a chunk beside 130 decodes: the E4M3 call takes the varlen schedule, the 16-bit one cannot
  mixed.varlen = mixed.paged = mixed.causal = true;
  mixed.batch = 131;
  mixed.seqlen_q = 4096;
  mixed.total_q = 4096 + 130;
  mixed.seqlen_k = 8192;
  mixed.q_dtype = FP8ATTN_DTYPE_BF16;
  const KernelConfig km = config_of(mixed);
  EXPECT_TRUE(km.key.q16);
  EXPECT_FALSE(km.key.varlen_schedule) << describe(km);
  EXPECT_EQ(km.key.block_m, 64);
  for (const Case& c : {decode, prefill, mixed}) {
    const std::string err = check_config(c, problem_of(c), config_of(c));
    EXPECT_TRUE(err.empty()) << describe(c) << ": " << err;
  }
}

// Gemma-4's global layers (d = dv = 512; per TP4 rank 8 q heads on 1 kv head, or 32 on 4, 64-token pages): every call
// on the split-dv kernel of its Q type, 64 x 64 tiles on the direct grid. Decode packs the q heads and splits the
// keys over the SMs, prefill runs 64-row tiles, a mixed call stays on the direct grid.
TEST(ConfigSplitDv, Gemma4GlobalLayersTake64x64DirectGridTiles) {
  Case decode;  // 8 requests x 32k context, bf16 q
  decode.d = decode.dv = 512;
  decode.varlen = decode.paged = true;
  decode.batch = 8;
  decode.seqlen_q = 1;
  decode.total_q = 8;
  decode.seqlen_k = 32768;
  decode.heads_q = 8;
  decode.heads_kv = 1;
  decode.q_dtype = FP8ATTN_DTYPE_BF16;
  const KernelConfig kd = config_of(decode);
  EXPECT_TRUE(kd.key.q16);
  EXPECT_TRUE(kd.pack_gqa) << describe(kd);
  EXPECT_EQ(kd.key.block_m, 64);
  EXPECT_EQ(kd.key.block_n, 64);
  EXPECT_GT(kd.num_splits, 1) << "8 CTAs on 132 SMs: the keys must be split, " << describe(kd);
  EXPECT_TRUE(kd.key.swapped) << "8 rows per tile: the swapped-operand kernel";
  Case spec = decode;  // speculative decode, 2 tokens: 16 rows per tile, the split-dv loop
  spec.seqlen_q = 2;
  spec.total_q = 16;
  EXPECT_FALSE(config_of(spec).key.swapped);

  Case prefill;  // 16k causal prefill, E4M3 q
  prefill.d = prefill.dv = 512;
  prefill.seqlen_q = prefill.seqlen_k = 16384;
  prefill.heads_q = 8;
  prefill.heads_kv = 1;
  prefill.causal = true;
  const KernelConfig kp = config_of(prefill);
  EXPECT_FALSE(kp.key.q16);
  EXPECT_EQ(kp.key.block_m, 64) << describe(kp);
  EXPECT_EQ(kp.key.block_n, 64) << describe(kp);
  EXPECT_EQ(kp.num_splits, 1) << describe(kp);
  EXPECT_FALSE(kp.key.swapped);

  Case mixed = decode;  // a 2k chunk beside 40 decodes: no varlen-schedule kernel at dv = 512
  mixed.batch = 41;
  mixed.seqlen_q = 2048;
  mixed.total_q = 2048 + 40;
  const KernelConfig km = config_of(mixed);
  EXPECT_FALSE(km.key.varlen_schedule) << describe(km);
  EXPECT_EQ(km.key.block_m, 64);
  for (const Case& c : {decode, prefill, mixed}) {
    const std::string err = check_config(c, problem_of(c), config_of(c));
    EXPECT_TRUE(err.empty()) << describe(c) << ": " << err;
  }
}

TEST(ConfigVarlenSchedule, EqualLengthsAndDecodeKeepTheDirectGrid) {
  Case prefill;
  prefill.varlen = true;
  prefill.batch = 4;
  prefill.seqlen_q = prefill.seqlen_k = 4096;
  prefill.total_q = 4 * 4096;
  EXPECT_FALSE(config_of(prefill).key.varlen_schedule);
  Case decode;
  decode.varlen = true;
  decode.paged = true;
  decode.batch = 64;
  decode.seqlen_q = 4;  // speculative decode: 4 x 4 packed rows fit one 64-row tile
  decode.total_q = 64 * 2;
  decode.seqlen_k = 32768;
  EXPECT_FALSE(config_of(decode).key.varlen_schedule);
}

TEST(ConfigSplit, SlidingWindowLimitsKvBlocks) {
  Case c;  // batch 1, 32:8, 1 token, 32k keys, causal: long KV, a small grid
  c.seqlen_k = 32768;
  c.paged = true;
  c.causal = true;
  const int unbounded = config_of(c).num_splits;
  EXPECT_GT(unbounded, 10);
  c.window_left = 127;  // 128 keys: at most 3 blocks for a 64-row tile -> nothing to split
  EXPECT_EQ(config_of(c).num_splits, 1) << describe(c);
  c.window_left = 1023;  // 1024 keys: a 64-row tile visits at most ceil((1024 + 63) / 128) + 1 = 10 blocks
  const int windowed = config_of(c).num_splits;
  EXPECT_GT(windowed, 1) << describe(c);
  EXPECT_LE(windowed, 10) << describe(c);
  EXPECT_LT(windowed, unbounded) << describe(c);
  // A window wider than the keys changes nothing.
  c.window_left = 100000;
  EXPECT_EQ(config_of(c).num_splits, unbounded) << describe(c);
}

// The window bounds a tile's KV range only when the right side is bounded too. With a non-causal window
// (left, -1) the first query tile of a 4096-token prefill still visits all 32 KV blocks, and with (0, 2048) a
// tile visits ~18; the heuristic must not treat either as a short (<= 4 block) range and leave a 32-CTA grid on
// 132 SMs unsplit. (Performance only: the kernel splits each tile's real range.)
TEST(ConfigSplit, WindowRightCountsTowardKvBlocks) {
  Case base;
  base.heads_q = base.heads_kv = 1;
  base.seqlen_q = base.seqlen_k = 4096;  // 32 M tiles of 128 rows: 32 CTAs for 132 slots
  const int no_window = config_of(base).num_splits;
  ASSERT_GT(no_window, 1) << "precondition: the unwindowed problem is split";
  Case left_only = base;
  left_only.window_left = 128;
  left_only.window_right = -1;
  EXPECT_GT(config_of(left_only).num_splits, 1)
      << "window (128, -1), non-causal: tile 0 visits all 32 KV blocks, yet " << describe(config_of(left_only));
  Case right = base;
  right.window_left = 0;
  right.window_right = 2048;
  EXPECT_GT(config_of(right).num_splits, 1)
      << "window (0, 2048): a tile visits ~18 KV blocks, yet " << describe(config_of(right));
}

// batch * num_splits becomes gridDim.z, which CUDA caps at 65535: a call validate_fwd accepts must get a grid
// that launches (either validation rejects the count, or the config keeps grid_z within the limit).
TEST(ConfigSplit, AcceptedCallsHaveALaunchableGrid) {
  Case c;
  c.paged = true;
  c.causal = true;
  c.seqlen_k = 4096;
  c.batch = 512;
  c.num_splits = 256;  // 512 x 256 = 131072 > 65535
  FwdParams p = make_params(c);
  // Enough layout for validate_fwd: q/out [total_q, Hq, d], paged k/v [pages, 16, Hkv, d].
  p.q_row_stride = int64_t{p.num_heads_q} * p.head_dim;
  p.q_head_stride = p.head_dim;
  p.o_row_stride = int64_t{p.num_heads_q} * p.head_dim_v;
  p.o_head_stride = p.head_dim_v;
  p.lse = nullptr;
  p.k_head_stride = p.v_head_stride = p.head_dim;
  p.k_row_stride = p.v_row_stride = int64_t{p.num_heads_kv} * p.head_dim;
  p.k_batch_stride = p.v_batch_stride = 16 * p.k_row_stride;
  p.num_pages = 200000;
  fp8attn_test::describe_extents(p);
  const fp8attn::Status s = fp8attn::validate_fwd(p, device_with_sms(132));
  FwdParams one = p;
  one.num_splits = 1;
  const fp8attn::Status s1 = fp8attn::validate_fwd(one, device_with_sms(132));
  ASSERT_TRUE(s1.ok()) << "precondition: the layout is valid: " << s1.message();
  if (s.ok()) {
    const KernelConfig k = fp8attn::select_config(fp8attn::describe_problem(p, device_with_sms(132)));
    EXPECT_LE(int64_t{k.grid_z}, kMaxGridYZ) << "validate_fwd accepts batch 512 x num_splits 256, but the grid "
                                            << describe(k) << " cannot launch (gridDim.z <= 65535)";
  } else {
    EXPECT_NE(s.message().find("num_splits"), std::string::npos) << s.message();
  }
}

// A decode batch of 70,000 sequences (more than gridDim.z's 65535) runs on a grid folded into gridDim.x; 60,000
// keeps the three-dimensional grid. With an exact split count the folded rows count the splits too.
TEST(ConfigGrid, BatchesPastGridZFoldIntoGridX) {
  for (int batch : {60000, 65535, 65536, 70000, 1000000}) {
    Case c;
    c.varlen = true;
    c.paged = true;
    c.causal = true;
    c.batch = batch;
    c.seqlen_k = 4096;
    const ProblemShape p = problem_of(c);
    const KernelConfig k = fp8attn::select_config(p);
    EXPECT_EQ(k.folded_grid, batch > 65535) << describe(k);
    EXPECT_EQ(int64_t{k.grid_x} * k.grid_y * k.grid_z, int64_t{batch} * 8) << describe(k);
    const std::string err = check_config(c, p, k);
    EXPECT_TRUE(err.empty()) << describe(c) << "\n  -> " << describe(k) << "\n  " << err;
    const KernelConfig split = fp8attn::with_exact_splits(p, k, 3);
    EXPECT_EQ(split.folded_grid, batch * 3 > 65535) << describe(split);
    EXPECT_EQ(int64_t{split.grid_x} * split.grid_y * split.grid_z, int64_t{batch} * 8 * 3) << describe(split);
  }
}

// ---------------------------------------------------------------------------------------------------------
// CUDA graphs: only host-known fields matter
// ---------------------------------------------------------------------------------------------------------

TEST(ConfigGraph, DevicePointersDoNotChangeTheConfig) {
  std::vector<Case> cases;
  for (int ns : {0, 3})
    for (int sq : {1, 4, 17}) {
      Case c;  // vLLM decode / spec decode under graphs: max_seqlen_k = max_model_len
      c.paged = true;
      c.causal = true;
      c.seqlen_q = sq;
      c.seqlen_k = 32768;
      c.batch = 4;
      c.num_splits = ns;
      cases.push_back(c);
      c.paged = false;
      c.varlen = true;
      c.seqlen_q = 1000;
      c.total_q = 1234;
      c.window_left = 511;
      cases.push_back(c);
    }
  for (const Case& c : cases) {
    const DeviceInfo dev = device_with_sms(c.num_sms);
    const FwdParams a = make_params(c, 0);
    const ProblemShape pa = fp8attn::describe_problem(a, dev);
    const KernelConfig ka = fp8attn::select_config(pa);
    for (uintptr_t salt : {1u, 2u, 7u}) {
      // Every device pointer moved: seqused_k, cu_seqlens_q/k, block_table, q/k/v/out/lse, workspace.
      const FwdParams b = make_params(c, salt);
      ASSERT_NE(a.cu_seqlens_q, b.cu_seqlens_q);
      ASSERT_NE(a.q, b.q);
      if (c.paged) {
        ASSERT_NE(a.seqused_k, b.seqused_k);
        ASSERT_NE(a.block_table, b.block_table);
      } else {
        ASSERT_NE(a.cu_seqlens_k, b.cu_seqlens_k);
      }
      const ProblemShape pb = fp8attn::describe_problem(b, dev);
      EXPECT_EQ(problem_diff(pa, pb), "") << describe(c);
      const KernelConfig kb = fp8attn::select_config(pb);
      EXPECT_EQ(config_diff(ka, kb), "") << describe(c);
      EXPECT_EQ(fp8attn::split_workspace_bytes(pa, ka), fp8attn::split_workspace_bytes(pb, kb)) << describe(c);
      EXPECT_EQ(fp8attn::fwd_workspace_size(a, dev), fp8attn::fwd_workspace_size(b, dev)) << describe(c);
    }
    // Descale / sink pointers and the workspace size given are device-side or caller-side too.
    FwdParams d = a;
    d.q_descale.ptr = fake<float>(12);
    d.sink = fake(13);
    d.workspace_bytes = 0;
    d.block_table_batch_stride += 64;  // a column-sliced block table view
    EXPECT_EQ(config_diff(ka, fp8attn::select_config(fp8attn::describe_problem(d, dev))), "") << describe(c);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Workspace
// ---------------------------------------------------------------------------------------------------------

TEST(ConfigWorkspace, ZeroForOneSplit) {
  Case c;
  c.seqlen_k = 32768;
  c.num_splits = 1;
  const ProblemShape p = problem_of(c);
  EXPECT_EQ(fp8attn::split_workspace_bytes(p, fp8attn::select_config(p)), 0u);
  Case prefill;  // heuristic -> 1 split
  prefill.seqlen_q = prefill.seqlen_k = 16384;
  const ProblemShape pp = problem_of(prefill);
  const KernelConfig kp = fp8attn::select_config(pp);
  ASSERT_EQ(kp.num_splits, 1);
  EXPECT_EQ(fp8attn::split_workspace_bytes(pp, kp), 0u);
  EXPECT_EQ(fp8attn::fwd_workspace_size(make_params(prefill), device_with_sms(132)), 0u);
}

TEST(ConfigWorkspace, DenseByteCount) {
  Case c;  // dense: rows = batch * seqlen_q = 12
  c.batch = 4;
  c.seqlen_q = 3;
  c.heads_q = 32;
  c.heads_kv = 8;
  c.seqlen_k = 32768;
  c.num_splits = 3;
  const ProblemShape p = problem_of(c);
  const KernelConfig k = fp8attn::select_config(p);
  ASSERT_EQ(k.num_splits, 3);
  EXPECT_EQ(k.partial_rows, 12);
  // O: 3 splits x 12 rows x 32 heads x 128 dv x 4 B = 589824; LSE: 3 x 32 x 12 x 4 B = 4608.
  EXPECT_EQ(fp8attn::split_workspace_bytes(p, k), size_t{589824 + 4608});
  EXPECT_EQ(fp8attn::fwd_workspace_size(make_params(c), device_with_sms(132)), size_t{589824 + 4608});
}

TEST(ConfigWorkspace, VarlenByteCountUsesTotalQ) {
  Case c;  // varlen: rows = total_q = 37, not batch * max_seqlen_q = 80
  c.varlen = true;
  c.batch = 5;
  c.seqlen_q = 16;
  c.total_q = 37;
  c.d = 192;
  c.dv = 128;
  c.heads_q = 12;
  c.heads_kv = 4;
  c.seqlen_k = 8192;
  c.num_splits = 5;
  const ProblemShape p = problem_of(c);
  EXPECT_EQ(p.total_q, 37);
  const KernelConfig k = fp8attn::select_config(p);
  ASSERT_EQ(k.num_splits, 5);
  EXPECT_EQ(k.partial_rows, 37);
  // O: 5 x 37 x 12 x 128 x 4 B = 1136640; LSE: 5 x 12 x 37 x 4 B = 8880.
  EXPECT_EQ(fp8attn::split_workspace_bytes(p, k), size_t{1136640 + 8880});
  EXPECT_EQ(fp8attn::fwd_workspace_size(make_params(c), device_with_sms(132)), size_t{1136640 + 8880});
}

TEST(ConfigWorkspace, HeuristicSplitDecodeByteCount) {
  Case c;  // paged decode via cu_seqlens_q: rows = total_q = batch * 1
  c.paged = true;
  c.causal = true;
  c.seqlen_k = 32768;
  c.batch = 2;
  const ProblemShape p = problem_of(c);
  const KernelConfig k = fp8attn::select_config(p);
  ASSERT_GT(k.num_splits, 1);
  EXPECT_EQ(fp8attn::split_workspace_bytes(p, k), size_t(k.num_splits) * (2 * 32 * 128 * 4 + 32 * 2 * 4));
}

// ---------------------------------------------------------------------------------------------------------
// The ten decode shapes of bench/decode_shapes.json (vLLM decode under CUDA graphs)
// ---------------------------------------------------------------------------------------------------------

struct DecodeShape {
  const char* name;
  int q_heads, kv_heads, d, requests, q_tokens, window_left;
};

const DecodeShape kDecodeShapes[] = {
    {"gemma4-31b-tp4-4x4-28k", 8, 4, 256, 4, 4, 1023},
    {"gemma4-31b-tp4-16x4-28k", 8, 4, 256, 16, 4, 1023},
    {"llama3.1-8b-tp1-1x1-4k", 32, 8, 128, 1, 1, -1},
    {"llama3.1-8b-tp1-32x1-2k", 32, 8, 128, 32, 1, -1},
    {"llama3.1-8b-tp1-128x1-1k", 32, 8, 128, 128, 1, -1},
    {"llama3.1-8b-tp1-16x1-16k", 32, 8, 128, 16, 1, -1},
    {"llama3.1-8b-tp1-32x4-4k", 32, 8, 128, 32, 4, -1},
    {"llama3.1-70b-tp4-64x1-4k", 16, 2, 128, 64, 1, -1},
    {"llama3.1-70b-tp4-8x1-32k", 16, 2, 128, 8, 1, -1},
    {"qwen3-32b-tp2-32x1-8k", 32, 4, 128, 32, 1, -1},
};

Case decode_case(const DecodeShape& s) {
  Case c;
  c.d = c.dv = s.d;
  c.heads_q = s.q_heads;
  c.heads_kv = s.kv_heads;
  c.batch = s.requests;
  c.seqlen_q = s.q_tokens;
  c.seqlen_k = 32768;  // max_seqlen_k as under vLLM's graph capture
  c.paged = true;      // 16-token pages, seqused_k, cu_seqlens_q
  c.causal = true;
  c.window_left = s.window_left;
  c.window_right = s.window_left >= 0 ? 0 : -1;
  c.num_splits = 0;
  c.num_sms = 132;
  return c;
}

TEST(ConfigDecode, TenShapesUse64RowPackedTiles) {
  std::ostringstream table;
  table << "\n" << std::left << std::setw(28) << "shape" << std::right << std::setw(6) << "bm" << std::setw(5) << "bn"
        << std::setw(5) << "pack" << std::setw(8) << "cta/sm" << std::setw(7) << "splits" << std::setw(18) << "grid"
        << std::setw(7) << "ctas" << std::setw(8) << "waves" << std::setw(12) << "ws bytes" << "\n";
  for (const DecodeShape& s : kDecodeShapes) {
    const Case c = decode_case(s);
    const ProblemShape p = problem_of(c);
    const KernelConfig k = fp8attn::select_config(p);
    const std::string err = check_config(c, p, k);
    EXPECT_TRUE(err.empty()) << s.name << ": " << err;
    EXPECT_EQ(k.key.block_m, 64) << s.name << " " << describe(k);
    EXPECT_TRUE(k.pack_gqa) << s.name << " " << describe(k);
    EXPECT_EQ(k.grid_x, 1u) << s.name;  // direct (head, split, batch) grid
    EXPECT_EQ(k.grid_y, unsigned(s.kv_heads)) << s.name;
    EXPECT_EQ(k.grid_z, unsigned(s.requests * k.num_splits)) << s.name;
    EXPECT_TRUE(fp8attn::sm90::is_declared_kernel(k.key)) << s.name;
    // Small grids are split to fill the GPU; grids that already fill 80% of its slots are not.
    const int64_t ctas = int64_t{s.kv_heads} * s.requests;
    const int64_t slots = 132 * int64_t{ctas_per_sm(k)};
    if (5 * ctas >= 4 * slots) {
      EXPECT_EQ(k.num_splits, 1) << s.name;
    } else {
      EXPECT_GT(k.num_splits, 1) << s.name << " (" << ctas << " CTAs for " << slots << " slots)";
    }
    const int64_t total = int64_t{k.grid_x} * k.grid_y * k.grid_z;
    std::ostringstream grid;
    grid << "(" << k.grid_x << "," << k.grid_y << "," << k.grid_z << ")";
    table << std::left << std::setw(28) << s.name << std::right << std::setw(6) << k.key.block_m << std::setw(5)
          << k.key.block_n << std::setw(5) << (k.pack_gqa ? "yes" : "no") << std::setw(8) << ctas_per_sm(k)
          << std::setw(7) << k.num_splits << std::setw(18) << grid.str() << std::setw(7) << total << std::setw(8)
          << std::fixed << std::setprecision(2) << double(total) / double(slots) << std::setw(12)
          << fp8attn::split_workspace_bytes(p, k) << "\n";
    ::testing::Test::RecordProperty(std::string(s.name) + ".splits", k.num_splits);
    ::testing::Test::RecordProperty(std::string(s.name) + ".grid", grid.str());
  }
  std::cout << table.str();
}

}  // namespace
