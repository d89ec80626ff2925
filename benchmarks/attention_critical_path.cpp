// Attention critical path: does a better plan make CP attention faster by as
// much as the tile model says?
//
// For each row, the `auto` and `contiguous` plans at P = 4 (B = 128). Each
// CP rank's local blocked attention, forward + backward, runs over the
// row's full K and V in global order, exactly as the rank computes after the
// all-gather (no communication, so only the compute the plan decides is
// timed). Ranks run one after another on one core; the step waits for the
// slowest rank, so a plan's critical path is the max over ranks of each
// rank's median time. The tile model predicts
//   speedup = max rank tiles (contiguous) / max rank tiles (auto),
// and the goal (issue 3, Measures) is measured / predicted >= 0.95: on single
// causal rows (predicted ~1.75 at P = 4) and on packed rows of 32K tokens
// from ../shared/workloads (per row and the median).
//
// Times are the thread's CPU time: the machine these figures come from is
// shared, and wall-clock time there mostly measures other people's builds.
// Wall-clock ratios are printed beside them. Repetitions interleave the two
// plans rank by rank and alternate which goes first, so drift (load,
// thermal) hits both plans alike. A least-squares fit of time on tiles over
// all ranks of both plans separates a per-rank fixed cost (full-row K/V
// work that does not depend on the plan) from the per-tile cost, to say
// where measured and predicted part.
//
//   build/bench-rt/bin/fulcrum_bench_attention [--set causal|packed|all]
//       [--reps N] [--packed-rows N] [--detail] [--quick]
// Run from the project root so that ../shared/workloads is found.
#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention/blocked_attention.h"
#include "attention/sharding.h"
#include "attention/tile_schedule.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/cp_types.h"
#include "runtime_bench_util.h"
#include "strategies/cp_strategies.h"
#include "workloads.h"

namespace {

using fulcrum::CpWorkload;
using fulcrum::ShardPlan;
using fulcrum::attention::TileSchedule;
using fulcrum::bench::BenchClock;
using fulcrum::bench::median;
using fulcrum::bench::ms_since;
using fulcrum::bench::thread_cpu_ms;

constexpr std::int32_t kCpSize = 4;
constexpr std::int64_t kBlock = 128;
constexpr std::int64_t kHeadDim = 64;
constexpr std::int64_t kPackedTokens = 32768;
constexpr double kGoal = 0.95;

struct Options {
  int reps = 5;
  int packed_rows = 3;  // per document mix
  bool causal = true;   // the single causal rows
  bool packed = true;   // the packed rows of ../shared/workloads
  bool quick = false;   // one small causal row and one packed row: a smoke test
  bool detail = false;  // per-rank tiles, kernel calls and times
};

struct Row {
  std::string label;
  std::string kind;  // "causal" or the mix name
  CpWorkload workload;
  std::int64_t heads = 1;
};

// One plan of one row, ready to time: every rank's schedule and inputs.
struct PlanUnderTest {
  std::string name;  // "auto" or "contiguous"
  ShardPlan plan;
  std::vector<TileSchedule> schedules;
  std::vector<at::Tensor> q;              // per rank [S, H, D], plan order
  std::vector<at::Tensor> dout;           // per rank [S, H, D]
  std::vector<std::vector<double>> ms;    // [rank][rep], thread CPU time
  std::vector<std::vector<double>> wall;  // [rank][rep], wall clock

  std::int64_t max_tiles() const {
    std::int64_t top = 0;
    for (const auto& w : plan.work) top = std::max(top, w.tiles);
    return top;
  }
  // The critical path: the slowest rank's median (or its fastest
  // repetition: contention on a shared machine only ever adds time, so the
  // minimum is the least noisy estimate of the rank's own cost).
  static double critical(const std::vector<std::vector<double>>& per_rank, bool use_min = false) {
    double top = 0.0;
    for (const auto& rank : per_rank) {
      top = std::max(top, use_min ? *std::min_element(rank.begin(), rank.end()) : median(rank));
    }
    return top;
  }
  double critical_ms() const { return critical(ms); }
  double critical_min_ms() const { return critical(ms, /*use_min=*/true); }
  double critical_wall_ms() const { return critical(wall); }
  // Measured time imbalance: max / mean of the ranks' medians.
  double time_imbalance() const {
    double sum = 0.0;
    for (const auto& rank : ms) sum += median(rank);
    return sum > 0 ? critical_ms() * static_cast<double>(ms.size()) / sum : 1.0;
  }
};

// What the kernel does per rank besides tiles: one matmul group per chunk
// (attention::for_each_chunk, the kernel's own, under its default Masking),
// and a mask built for every partial chunk that needs one. Explains where
// time departs from the tile model.
struct KernelCalls {
  std::int64_t chunks = 0;
  std::int64_t masked = 0;
};

KernelCalls kernel_calls(const TileSchedule& s) {
  KernelCalls c;
  for (std::int64_t qb = 0; qb < s.num_query_blocks; ++qb) {
    const std::int64_t r0 = qb * s.block_size;
    const std::int64_t r1 = std::min(r0 + s.block_size, s.shard_len);
    fulcrum::attention::for_each_chunk(s, qb, {}, [&](const fulcrum::attention::Chunk& chunk) {
      ++c.chunks;
      const bool masked =
          !chunk.full && fulcrum::attention::chunk_needs_mask(s, r0, r1, chunk.k0, chunk.k1);
      c.masked += masked ? 1 : 0;
    });
  }
  return c;
}

// One (plan, rank) point: what the rank computes and its median time.
struct RankPoint {
  std::int64_t tiles = 0;
  KernelCalls calls;
  double ms = 0.0;
};

struct RowResult {
  Row row;
  std::string auto_strategy;
  std::int64_t auto_tiles = 0;
  std::int64_t contiguous_tiles = 0;
  double predicted = 1.0;
  double auto_ms = 0.0;  // critical paths, thread CPU time
  double contiguous_ms = 0.0;
  double auto_wall_ms = 0.0;  // the same in wall-clock time
  double contiguous_wall_ms = 0.0;
  double auto_min_ms = 0.0;  // critical paths from each rank's fastest repetition
  double contiguous_min_ms = 0.0;
  // time = per_tile * tiles + fixed, fitted over every rank of both plans:
  // `fixed` is what a rank pays whatever its tiles (the O(N) layout copies
  // of K and V, the full-row dK/dV buffers), which the tile model ignores.
  double per_tile_ms = 0.0;
  double fixed_ms = 0.0;
  std::vector<RankPoint> auto_points;  // per rank
  std::vector<RankPoint> contiguous_points;
  double auto_spread = 1.0;
  double contiguous_spread = 1.0;
  double measured() const { return auto_ms > 0 ? contiguous_ms / auto_ms : 0.0; }
  double efficiency() const { return measured() / predicted; }
  double measured_wall() const {
    return auto_wall_ms > 0 ? contiguous_wall_ms / auto_wall_ms : 0.0;
  }
  double efficiency_wall() const { return measured_wall() / predicted; }
  double efficiency_min() const {
    return auto_min_ms > 0 ? contiguous_min_ms / auto_min_ms / predicted : 0.0;
  }
  // The tile model plus the fitted fixed cost per rank.
  double predicted_with_fixed() const {
    const double a = per_tile_ms * static_cast<double>(auto_tiles) + fixed_ms;
    const double c = per_tile_ms * static_cast<double>(contiguous_tiles) + fixed_ms;
    return a > 0 ? c / a : 0.0;
  }
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "fulcrum_bench_attention: %s\n", message.c_str());
  std::exit(1);
}

PlanUnderTest prepare(const std::string& name, const Row& row, const at::Tensor& q_full,
                      const at::Tensor& dout_full) {
  PlanUnderTest p;
  p.name = name;
  fulcrum::Result<ShardPlan> plan = fulcrum::cp::plan(name, row.workload);
  if (!plan) die(row.label + ": planning with " + name + " failed: " + plan.status().message());
  p.plan = std::move(plan).value();
  for (std::int32_t r = 0; r < kCpSize; ++r) {
    fulcrum::Result<TileSchedule> s =
        fulcrum::attention::make_tile_schedule(row.workload, p.plan, r);
    if (!s)
      die(row.label + ": tile schedule of rank " + std::to_string(r) + ": " + s.status().message());
    // The kernel computes the schedule's tiles; the prediction uses the
    // planner's work figures. They must be the same count, or the ratio
    // below compares two different things.
    if (s->tiles != p.plan.work[static_cast<std::size_t>(r)].tiles) {
      die(row.label + ": rank " + std::to_string(r) + " schedule has " + std::to_string(s->tiles) +
          " tiles but the plan reports " +
          std::to_string(p.plan.work[static_cast<std::size_t>(r)].tiles));
    }
    p.schedules.push_back(std::move(s).value());
    p.q.push_back(fulcrum::attention::shard(q_full, p.plan, r).contiguous());
    p.dout.push_back(fulcrum::attention::shard(dout_full, p.plan, r).contiguous());
  }
  p.ms.assign(kCpSize, {});
  p.wall.assign(kCpSize, {});
  return p;
}

void print_detail(const Row& row, const PlanUnderTest& p) {
  std::printf("%s, %s (%s):\n", row.label.c_str(), p.name.c_str(), p.plan.strategy_used.c_str());
  for (std::size_t r = 0; r < p.schedules.size(); ++r) {
    const KernelCalls c = kernel_calls(p.schedules[r]);
    const double ms = median(p.ms[r]);
    std::printf(
        "  rank %zu: tiles %lld, chunks %lld, masked chunks %lld, median %.1f ms, "
        "%.3f ms/tile\n",
        r, static_cast<long long>(p.schedules[r].tiles), static_cast<long long>(c.chunks),
        static_cast<long long>(c.masked), ms,
        ms / static_cast<double>(std::max<std::int64_t>(1, p.schedules[r].tiles)));
  }
}

struct Timing {
  double cpu_ms = 0.0;
  double wall_ms = 0.0;
};

// One rank's local forward + backward, in thread CPU time (the rank's
// compute; see thread_cpu_ms) and in wall-clock time.
Timing time_rank(const PlanUnderTest& p, std::int32_t r, const at::Tensor& k, const at::Tensor& v) {
  std::int64_t tiles[2] = {0, 0};
  const auto start = BenchClock::now();
  const double cpu_start = thread_cpu_ms();
  {
    const auto f = fulcrum::attention::local_attention_forward(p.schedules[r], p.q[r], k, v);
    const auto g = fulcrum::attention::local_attention_backward(p.schedules[r], p.q[r], k, v, f.out,
                                                                f.lse, p.dout[r]);
    tiles[0] = f.tiles;
    tiles[1] = g.tiles;
  }
  const Timing t{thread_cpu_ms() - cpu_start, ms_since(start)};
  // The prediction is stated in the planner's tiles; the kernel must have
  // computed exactly those, or the ratio compares different work.
  if (tiles[0] != p.schedules[r].tiles || tiles[1] != p.schedules[r].tiles) {
    die(p.name + " rank " + std::to_string(r) + ": the kernel computed " +
        std::to_string(tiles[0]) + " / " + std::to_string(tiles[1]) +
        " tiles (forward / backward), the schedule lists " + std::to_string(p.schedules[r].tiles));
  }
  return t;
}

RowResult measure(const Row& row, int reps, bool detail) {
  const std::int64_t n = row.workload.tokens;
  at::manual_seed(1234);
  const at::Tensor q = at::randn({n, row.heads, kHeadDim}, at::kFloat);
  const at::Tensor k = at::randn({n, row.heads, kHeadDim}, at::kFloat);
  const at::Tensor v = at::randn({n, row.heads, kHeadDim}, at::kFloat);
  const at::Tensor dout = at::randn({n, row.heads, kHeadDim}, at::kFloat);

  PlanUnderTest plans[2] = {prepare("auto", row, q, dout), prepare("contiguous", row, q, dout)};
  // Warm-up: first-touch page faults and the allocator's first growth
  // belong to neither plan. Every rank allocates the same full-row buffers,
  // so the cheapest rank (contiguous rank 0) warms up as well as any.
  for (auto& p : plans) time_rank(p, 0, k, v);

  for (int rep = 0; rep < reps; ++rep) {
    for (std::int32_t r = 0; r < kCpSize; ++r) {
      for (int i = 0; i < 2; ++i) {
        PlanUnderTest& p = plans[(i + rep) % 2];
        const Timing t = time_rank(p, r, k, v);
        p.ms[static_cast<std::size_t>(r)].push_back(t.cpu_ms);
        p.wall[static_cast<std::size_t>(r)].push_back(t.wall_ms);
      }
    }
  }

  if (detail) {
    for (const auto& p : plans) print_detail(row, p);
  }
  RowResult out;
  out.row = row;
  for (int i = 0; i < 2; ++i) {
    for (std::size_t r = 0; r < plans[i].schedules.size(); ++r) {
      (i == 0 ? out.auto_points : out.contiguous_points)
          .push_back({plans[i].schedules[r].tiles, kernel_calls(plans[i].schedules[r]),
                      median(plans[i].ms[r])});
    }
  }
  out.auto_strategy = plans[0].plan.strategy_used;
  out.auto_tiles = plans[0].max_tiles();
  out.contiguous_tiles = plans[1].max_tiles();
  out.predicted = static_cast<double>(out.contiguous_tiles) / static_cast<double>(out.auto_tiles);
  out.auto_ms = plans[0].critical_ms();
  out.contiguous_ms = plans[1].critical_ms();
  out.auto_wall_ms = plans[0].critical_wall_ms();
  out.contiguous_wall_ms = plans[1].critical_wall_ms();
  out.auto_min_ms = plans[0].critical_min_ms();
  out.contiguous_min_ms = plans[1].critical_min_ms();
  // Least squares of median time on tiles over the 2P (plan, rank) points.
  double points = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& p : plans) {
    for (std::size_t r = 0; r < p.ms.size(); ++r) {
      const double x = static_cast<double>(p.schedules[r].tiles);
      const double y = median(p.ms[r]);
      points += 1;
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
  }
  const double denom = points * sxx - sx * sx;
  if (denom > 0) {
    out.per_tile_ms = (points * sxy - sx * sy) / denom;
    out.fixed_ms = (sy - out.per_tile_ms * sx) / points;
  }
  out.auto_spread = plans[0].time_imbalance();
  out.contiguous_spread = plans[1].time_imbalance();
  return out;
}

void print_table(const std::vector<RowResult>& results) {
  std::printf(
      "| row | N | H | docs | auto plan | max tiles auto / contiguous | predicted | "
      "critical ms auto / contiguous | measured | **measured / predicted** | same, min of reps "
      "| same, wall clock | fit: ms per tile, fixed ms per rank | tiles + fixed predicts | "
      "rank time max/mean auto / contiguous |\n");
  std::printf(
      "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
      "---: | ---: |\n");
  for (const RowResult& r : results) {
    const std::size_t docs =
        r.row.workload.doc_lengths.empty() ? 1 : r.row.workload.doc_lengths.size();
    std::printf(
        "| %s | %lld | %lld | %zu | %s | %lld / %lld | %.3f | %.0f / %.0f | %.3f | **%.3f** | "
        "%.3f | %.3f | %.4f, %.1f | %.3f | %.3f / %.3f |\n",
        r.row.label.c_str(), static_cast<long long>(r.row.workload.tokens),
        static_cast<long long>(r.row.heads), docs, r.auto_strategy.c_str(),
        static_cast<long long>(r.auto_tiles), static_cast<long long>(r.contiguous_tiles),
        r.predicted, r.auto_ms, r.contiguous_ms, r.measured(), r.efficiency(), r.efficiency_min(),
        r.efficiency_wall(), r.per_tile_ms, r.fixed_ms, r.predicted_with_fixed(), r.auto_spread,
        r.contiguous_spread);
  }
}

Options parse(int argc, char** argv) {
  Options o;
  const char* usage =
      "usage: [--set causal|packed|all] [--reps N] [--packed-rows N] [--quick] [--detail]";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value; " + usage);
      return argv[++i];
    };
    if (a == "--reps") {
      o.reps = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--packed-rows") {
      o.packed_rows = std::max(0, std::atoi(value().c_str()));
    } else if (a == "--set") {
      const std::string set = value();
      if (set != "causal" && set != "packed" && set != "all") die("--set " + set + "; " + usage);
      o.causal = set != "packed";
      o.packed = set != "causal";
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--detail") {
      o.detail = true;
    } else {
      die("unknown argument " + a + "; " + usage);
    }
  }
  return o;
}

CpWorkload causal_row(std::int64_t n) {
  CpWorkload w;
  w.tokens = n;
  w.block_size = kBlock;
  w.cp_size = kCpSize;
  return w;
}

// "goal MET/MISSED" over a set of rows: every row for single causal rows,
// the median for packed rows.
void print_goal(const char* what, const std::vector<RowResult>& results, bool use_median) {
  if (results.empty()) return;
  std::vector<double> cpu, wall, measured, predicted, fastest;
  for (const RowResult& r : results) {
    fastest.push_back(r.efficiency_min());
    cpu.push_back(r.efficiency());
    wall.push_back(r.efficiency_wall());
    measured.push_back(r.measured());
    predicted.push_back(r.predicted);
  }
  const double cpu_figure = use_median ? median(cpu) : *std::min_element(cpu.begin(), cpu.end());
  const double wall_figure =
      use_median ? median(wall) : *std::min_element(wall.begin(), wall.end());
  const double min_figure =
      use_median ? median(fastest) : *std::min_element(fastest.begin(), fastest.end());
  std::printf(
      "%s: predicted %.3f, measured %.3f (medians over rows); measured / predicted, %s: %.3f "
      "(goal >= %.2f: %s); min of reps %.3f, wall clock %.3f\n",
      what, median(predicted), median(measured), use_median ? "median over rows" : "worst row",
      cpu_figure, kGoal, cpu_figure >= kGoal ? "MET" : "MISSED", min_figure, wall_figure);
}

// Where the tile model and the clock part, on rows of one shape (same N and
// H, so one fixed cost): time = a * tiles + m * masked chunks + F, fitted
// over every (row, plan, rank). Masked chunks (a causal diagonal or a
// document boundary crosses them) build a mask and run masked_fill on top of
// the tile's matmuls; plans that cut documents into more pieces put more of
// them on each rank. Rows whose ranks all have the same masked count (single
// causal rows) cannot separate m from F, hence the per-row two-term fit in
// the main table.
void print_cost_model(const std::vector<RowResult>& results) {
  if (results.size() < 2) return;
  for (const RowResult& r : results) {
    if (r.row.workload.tokens != results[0].row.workload.tokens ||
        r.row.heads != results[0].row.heads) {
      return;
    }
  }
  std::vector<std::array<double, 3>> x;
  std::vector<double> y;
  for (const RowResult& r : results) {
    for (const auto* points : {&r.auto_points, &r.contiguous_points}) {
      for (const RankPoint& p : *points) {
        x.push_back({static_cast<double>(p.tiles), static_cast<double>(p.calls.masked), 1.0});
        y.push_back(p.ms);
      }
    }
  }
  const std::vector<double> b = fulcrum::bench::least_squares(x, y);
  if (b.empty()) {
    std::printf(
        "\nno fit over all rows: the points do not separate tiles, masked chunks and "
        "a fixed cost\n");
    return;
  }
  auto cost = [&](const RankPoint& p) {
    return b[0] * static_cast<double>(p.tiles) + b[1] * static_cast<double>(p.calls.masked) + b[2];
  };
  auto critical = [&](const std::vector<RankPoint>& points) {
    double top = 0.0;
    for (const RankPoint& p : points) top = std::max(top, cost(p));
    return top;
  };
  std::printf(
      "\nfit over all rows, plans and ranks: %.4f ms per tile + %.4f ms per masked chunk + "
      "%.1f ms per rank\n\n",
      b[0], b[1], b[2]);
  std::printf(
      "| row | tile model predicts | tiles + masked chunks + fixed predicts | measured | "
      "measured / (tiles + masked + fixed) |\n| --- | ---: | ---: | ---: | ---: |\n");
  for (const RowResult& r : results) {
    const double model = critical(r.contiguous_points) / critical(r.auto_points);
    std::printf("| %s | %.3f | %.3f | %.3f | %.3f |\n", r.row.label.c_str(), r.predicted, model,
                r.measured(), r.measured() / model);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::printf("# fulcrum_bench_attention: CP attention critical path, auto vs contiguous\n\n");
  std::printf("machine: %s\n", fulcrum::bench::machine_line().c_str());
  std::printf("%s\n", fulcrum::bench::use_one_core().c_str());
  std::printf(
      "P = %d, B = %lld, head_dim = %lld, float32, %d repetitions; times are the thread's CPU "
      "time (a rank's compute, not the time other processes hold the core) unless marked "
      "wall clock; critical path = max over ranks of each rank's median\n",
      kCpSize, static_cast<long long>(kBlock), static_cast<long long>(kHeadDim), o.reps);

  std::vector<Row> causal;
  if (o.causal) {
    if (o.quick) {
      causal.push_back({"causal 8K", "causal", causal_row(8192), 1});
    } else {
      causal.push_back({"causal 16K", "causal", causal_row(16384), 1});
      causal.push_back({"causal 16K, 2 heads", "causal", causal_row(16384), 2});
      causal.push_back({"causal 32K", "causal", causal_row(32768), 1});
      causal.push_back({"causal 32000", "causal", causal_row(32000), 1});
    }
  }

  std::vector<Row> packed;
  std::string source;
  if (o.packed) {
    const std::vector<fulcrum::bench::LengthSet> mixes = fulcrum::bench::document_mixes(source);
    const int rows_per_mix = o.quick ? 1 : o.packed_rows;
    for (const auto& mix : mixes) {
      const auto rows = fulcrum::bench::packed_rows(mix.lengths, kPackedTokens, rows_per_mix, 7);
      for (std::size_t i = 0; i < rows.size(); ++i) {
        CpWorkload w = causal_row(kPackedTokens);
        w.doc_lengths = rows[i];
        packed.push_back({mix.name + " row " + std::to_string(i), mix.name, w, 1});
      }
    }
    std::printf(
        "%s\npacked rows: %d per mix, %lld tokens, document-causal, seed 7 "
        "(fulcrum::bench::packed_rows)\n",
        source.c_str(), rows_per_mix, static_cast<long long>(kPackedTokens));
  }
  std::printf("\n");
  std::fflush(stdout);

  std::vector<RowResult> causal_results;
  for (const Row& row : causal) {
    causal_results.push_back(measure(row, o.reps, o.detail));
    std::fprintf(stderr, "  done %s\n", row.label.c_str());
  }
  std::vector<RowResult> packed_results;
  for (const Row& row : packed) {
    packed_results.push_back(measure(row, o.reps, o.detail));
    std::fprintf(stderr, "  done %s\n", row.label.c_str());
  }

  if (!causal_results.empty()) {
    std::printf("\n## Single causal rows\n\n");
    print_table(causal_results);
  }
  if (!packed_results.empty()) {
    std::printf("\n## Packed rows (%s)\n\n", source.c_str());
    print_table(packed_results);
    print_cost_model(packed_results);
  }
  std::printf("\n");
  print_goal("single causal rows", causal_results, /*use_median=*/false);
  print_goal("packed rows", packed_results, /*use_median=*/true);
  std::printf("load average at the end: %s\n", fulcrum::bench::load_average().c_str());
  return 0;
}
