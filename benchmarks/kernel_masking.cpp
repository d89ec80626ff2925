// Kernel masking: what each way of grouping and masking a query block's
// tiles (attention::Masking) costs on this CPU, and how well the cost
// model's two tile prices (tile_seconds for every tile, partial_tile_seconds
// more for a partial one) explain each.
//
// For each shape (block B, heads, head_dim) and each member, every rank of
// the plans below on rows of documents, the rank's local forward + backward
// runs under each Masking (whole chunks, full tiles apart, each partial tile
// apart), on the same inputs, one after the other in an order that rotates
// each repetition, in the thread's CPU time, ATen and OpenBLAS on one
// thread. Per shape and kernel:
//   - the members' summed median time, and its ratio to whole chunks with
//     the same ratio's min..max by repetition;
//   - a least-squares fit of a member's median time on its tiles, its
//     partial tiles, its local rows and a constant (the cost model's compute
//     terms), and the fit's median |error|: the partial / full price ratio,
//     and how well two tile prices explain the time.
// Then, at the jobs' member size (P = 8: 512 rows of a 4,096-token row, as at
// W = 8 in benchmarks/hybrid_train.py), each member of head_tail,
// per_document_padded and balanced under the default kernel, run three ways,
// in an order that rotates each repetition: in one call, as a rank of a fixed
// CP group runs it after the all-gather, and in the calls of the overlapped
// exchange (make_overlap_plan) with a call per peer (one call per group of
// key blocks, the member's own and then each peer's) and with two calls a
// pass (OverlapCalls::kOwnThenRemote): forward merged by log-sum-exp,
// backward's dK/dV joined and added to the row's running dK/dV per group, as
// ShardedAttention and the peer exchange run them; one call's dK/dV joined
// once. Per shape: the summed times and their ratios to one call (min..max
// by repetition), the query-block visits of each (a call visits each query
// block it has tiles of) and the calls, and the first two ways' fits on the
// model's compute terms, with the prices per visit and per call when those
// join the fit.
// Rows: documents of ../shared/workloads/dist_wlbllm.json, lengths / 8 as
// benchmarks/hybrid_train.py takes them (the synthetic mix when the folder is
// missing), packed into rows of kRowTokens; and one single causal document.
// Plans: contiguous at P = 1 (a one-rank slot), head_tail at P = 2,
// per_document_padded and balanced at P = 4.
//
//   build/release/bin/fulcrum_bench_kernel_masking [--reps N] [--rows N] [--quick]
// Run from the project root so that ../shared/workloads is found.
#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention/blocked_attention.h"
#include "attention/kv_exchange.h"
#include "attention/sharded_attention.h"
#include "attention/sharding.h"
#include "attention/tile_schedule.h"
#include "bench_args.h"
#include "fulcrum/cp_types.h"
#include "runtime_bench_util.h"
#include "strategies/cp_strategies.h"
#include "workloads.h"

namespace {

using fulcrum::CpWorkload;
using fulcrum::ShardPlan;
using fulcrum::attention::KernelOptions;
using fulcrum::attention::Masking;
using fulcrum::attention::TileSchedule;
using fulcrum::bench::median;
using fulcrum::bench::thread_cpu_ms;

constexpr std::int64_t kRowTokens = 4096;

struct Shape {
  std::int64_t block, heads, head_dim;
  const char* what;
};

struct Member {
  std::string label;  // row, plan, rank
  TileSchedule schedule;
  at::Tensor q, dout;
  const at::Tensor* k = nullptr;
  const at::Tensor* v = nullptr;
  std::vector<double> ms[3];  // per Masking, per repetition
};

constexpr Masking kKernels[3] = {Masking::kWholeChunks, Masking::kFullApart, Masking::kPerTile};
constexpr const char* kKernelNames[3] = {"whole chunks", "full apart", "per partial tile"};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "fulcrum_bench_kernel_masking: %s\n", message.c_str());
  std::exit(2);
}

// One call each way; with `joined`, the backward's dK and dV joined as the
// runtime's exchange takes them (sharded_attention.cpp, backward).
double run_once(const Member& m, Masking masking, bool joined = false) {
  KernelOptions options;
  options.masking = masking;
  const double start = thread_cpu_ms();
  const auto f = fulcrum::attention::local_attention_forward(m.schedule, m.q, *m.k, *m.v, options);
  const auto g = fulcrum::attention::local_attention_backward(m.schedule, m.q, *m.k, *m.v, f.out,
                                                              f.lse, m.dout, options);
  if (joined) (void)at::cat({g.dk, g.dv}, -1);
  const double ms = thread_cpu_ms() - start;
  if (f.tiles != m.schedule.tiles || g.tiles != m.schedule.tiles) {
    die(m.label + ": the kernel computed " + std::to_string(f.tiles) +
        " tiles, the schedule lists " + std::to_string(m.schedule.tiles));
  }
  return ms;
}

struct Fit {
  double tile = 0, partial = 0, token = 0, fixed = 0, median_error = 0;
};

// The median |predicted - measured| / measured of a least-squares fit `b`.
template <std::size_t N>
double median_error(const std::vector<std::array<double, N>>& x, const std::vector<double>& y,
                    const std::vector<double>& b) {
  std::vector<double> errors;
  for (std::size_t i = 0; i < x.size(); ++i) {
    double predicted = 0.0;
    for (std::size_t c = 0; c < N; ++c) predicted += b[c] * x[i][c];
    errors.push_back(std::abs(predicted - y[i]) / y[i]);
  }
  return median(errors);
}

// ms ~ tile x tiles + partial x partial tiles + token x local rows + fixed,
// over the members' medians: the cost model's compute terms (every member
// holds the same row, so its K/V work is in the constant).
Fit fit_prices(const std::vector<Member>& members, int kernel) {
  std::vector<std::array<double, 4>> x;
  std::vector<double> y;
  for (const Member& m : members) {
    const auto tiles = static_cast<double>(m.schedule.tiles);
    x.push_back({tiles, tiles - static_cast<double>(m.schedule.full_tiles),
                 static_cast<double>(m.schedule.shard_len), 1.0});
    y.push_back(median(m.ms[kernel]));
  }
  const std::vector<double> b = fulcrum::bench::least_squares(x, y);
  if (b.empty()) die("the members do not separate the fit's four terms; add rows (--rows)");
  return {b[0], b[1], b[2], b[3], median_error(x, y, b)};
}

// A member of a P = 8 plan, in one call and in the overlap's group calls.
struct GroupedMember {
  Member m;
  fulcrum::attention::OverlapPlan overlap;   // a call per peer (OverlapCalls::kPerPeer)
  fulcrum::attention::OverlapPlan two;       // two calls a pass (OverlapCalls::kOwnThenRemote)
  std::vector<double> one, grouped, in_two;  // per repetition
};

// Local query blocks with tiles, over the calls of a schedule list.
std::int64_t visits(const std::vector<TileSchedule>& calls) {
  std::int64_t n = 0;
  for (const TileSchedule& s : calls) {
    for (std::int64_t qb = 0; qb < s.num_query_blocks; ++qb) {
      n += s.run_offsets[qb] < s.run_offsets[qb + 1] ? 1 : 0;
    }
  }
  return n;
}

// Query-block visits of both passes.
std::int64_t visits_of(const fulcrum::attention::OverlapPlan& overlap) {
  return visits(overlap.forward) + visits(overlap.backward);
}

// Kernel calls of both passes: the groups with tiles.
std::int64_t calls_of(const fulcrum::attention::OverlapPlan& overlap) {
  std::int64_t n = 0;
  for (const auto* list : {&overlap.forward, &overlap.backward}) {
    for (const TileSchedule& c : *list) n += c.tiles > 0 ? 1 : 0;
  }
  return n;
}

// The calls of the overlapped exchange, as ShardedAttention and the peer
// exchange make them (forward_overlapped, backward_overlapped and
// return_grads_overlapped): each group's forward merged in; each group's
// backward dQ summed, its dK and dV joined and added to the row's running
// dK/dV, from which each peer's rows leave. Empty groups are skipped.
double run_grouped(const Member& m, const fulcrum::attention::OverlapPlan& overlap,
                   Masking masking) {
  KernelOptions options;
  options.masking = masking;
  std::int64_t tiles[2] = {0, 0};
  const double start = thread_cpu_ms();
  at::Tensor out, lse, dq, acc;
  for (const TileSchedule& s : overlap.forward) {
    if (s.tiles == 0) continue;
    auto part = fulcrum::attention::local_attention_forward(s, m.q, *m.k, *m.v, options);
    tiles[0] += part.tiles;
    fulcrum::attention::merge_partial(out, lse, std::move(part));
  }
  for (const TileSchedule& s : overlap.backward) {
    if (s.tiles == 0) continue;
    auto part =
        fulcrum::attention::local_attention_backward(s, m.q, *m.k, *m.v, out, lse, m.dout, options);
    tiles[1] += part.tiles;
    dq = dq.defined() ? dq.add_(part.dq) : part.dq;
    const at::Tensor dkv = at::cat({part.dk, part.dv}, -1);
    acc = acc.defined() ? acc.add_(dkv) : dkv;
  }
  const double ms = thread_cpu_ms() - start;
  if (tiles[0] != m.schedule.tiles || tiles[1] != m.schedule.tiles) {
    die(m.label + ": the overlap's calls computed " + std::to_string(tiles[0]) + " and " +
        std::to_string(tiles[1]) + " tiles, the schedule lists " +
        std::to_string(m.schedule.tiles));
  }
  return ms;
}

// ms ~ tile x tiles + partial x partial tiles + token x local rows + fixed
// [+ visit x visits + call x calls], by least squares; as printed: (a + e) / a
// (n/a where the tile price is not positive), then the price per visit and
// per call where fitted, and the fit's median |error|; "n/a" where the
// members do not separate the terms.
template <std::size_t N>
std::string fit_members(const std::vector<std::array<double, N>>& x, const std::vector<double>& y) {
  const std::vector<double> b = fulcrum::bench::least_squares(x, y);
  if (b.empty()) return "n/a (the terms do not separate)";
  const double error = median_error(x, y, b);
  char text[160];
  const std::string ratio =
      b[0] > 1e-9 ? std::to_string((b[0] + b[1]) / b[0]).substr(0, 4) + "x"
                  : std::string("n/a (tile price ") + std::to_string(b[0]).substr(0, 7) + " ms)";
  if constexpr (N > 4) {
    std::snprintf(text, sizeof text, "%s, %.3f ms a visit, %.3f ms a call, %.1f%%", ratio.c_str(),
                  b[4], b[5], 100.0 * error);
  } else {
    std::snprintf(text, sizeof text, "%s, %.1f%%", ratio.c_str(), 100.0 * error);
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  int rows = 2;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto count = [&](const char* name) {
      if (i + 1 >= argc) die(std::string(name) + " needs a value");
      int n = 0;
      if (!fulcrum::bench::parse_int(argv[++i], 1, 1000, n)) {
        die(std::string(name) + " " + argv[i] + ": give a whole number from 1 to 1000");
      }
      return n;
    };
    if (a == "--reps") {
      reps = count("--reps");
    } else if (a == "--rows") {
      rows = count("--rows");
    } else if (a == "--quick") {
      quick = true;
    } else {
      die("unknown argument " + a + "; usage: [--reps N] [--rows N] [--quick]");
    }
  }
  if (quick) reps = std::min(reps, 2), rows = 1;

  std::printf("# fulcrum_bench_kernel_masking: three ways to mask a query block's tiles\n\n");
  std::printf("machine: %s\n", fulcrum::bench::machine_line().c_str());
  std::printf("%s\n", fulcrum::bench::use_one_core().c_str());
  std::string source;
  const std::vector<fulcrum::bench::LengthSet> mixes = fulcrum::bench::document_mixes(source);
  const fulcrum::bench::LengthSet* mix = &mixes.front();
  for (const auto& m : mixes) {
    if (m.name == "dist_wlbllm") mix = &m;
  }
  std::vector<std::int64_t> lengths;
  for (std::int64_t n : mix->lengths) lengths.push_back(std::max<std::int64_t>(1, n / 8));
  std::printf(
      "%s\nrows: %d of %lld tokens packed from %s, lengths / 8 (seed 7), and one causal "
      "document of %lld tokens; float32; %d repetitions, interleaved\n\n",
      source.c_str(), rows, static_cast<long long>(kRowTokens), mix->name.c_str(),
      static_cast<long long>(kRowTokens), reps);

  std::vector<std::pair<std::string, std::vector<std::int64_t>>> docs_of_rows = {{"causal", {}}};
  const auto packed = fulcrum::bench::packed_rows(lengths, kRowTokens, rows, 7);
  for (std::size_t i = 0; i < packed.size(); ++i) {
    docs_of_rows.push_back({mix->name + " row " + std::to_string(i), packed[i]});
  }
  const std::vector<std::pair<const char*, std::int32_t>> plans = {
      {"contiguous", 1}, {"head_tail", 2}, {"per_document_padded", 4}, {"balanced", 4}};
  std::vector<Shape> shapes = {{64, 4, 16, "benchmarks/hybrid_train.py's model"},
                               {128, 8, 64, "a wider head"}};
  if (quick) shapes.resize(1);

  std::vector<std::string> group_rows;
  std::printf(
      "| B, heads x head_dim | members | tiles (partial) | kernel | ms | / whole chunks (by "
      "repetition) | ms per tile, + per partial tile (ratio) | fit's median |e| |\n"
      "| --- | ---: | ---: | --- | ---: | ---: | --- | ---: |\n");
  for (const Shape& shape : shapes) {
    at::manual_seed(1234);
    std::vector<at::Tensor> keys, values;
    keys.reserve(docs_of_rows.size());
    values.reserve(docs_of_rows.size());
    std::vector<Member> members;
    std::int64_t tiles = 0, partial = 0;
    for (const auto& [row_label, docs] : docs_of_rows) {
      keys.push_back(at::randn({kRowTokens, shape.heads, shape.head_dim}, at::kFloat));
      values.push_back(at::randn({kRowTokens, shape.heads, shape.head_dim}, at::kFloat));
      const at::Tensor q = at::randn({kRowTokens, shape.heads, shape.head_dim}, at::kFloat);
      const at::Tensor dout = at::randn({kRowTokens, shape.heads, shape.head_dim}, at::kFloat);
      for (const auto& [name, p] : plans) {
        CpWorkload w;
        w.tokens = kRowTokens;
        w.doc_lengths = docs;
        w.block_size = shape.block;
        w.cp_size = p;
        fulcrum::Result<ShardPlan> plan = fulcrum::cp::plan(name, w);
        if (!plan) die(row_label + ", " + name + ": " + plan.status().message());
        for (std::int32_t r = 0; r < p; ++r) {
          Member m;
          m.label = row_label + ", " + name + " rank " + std::to_string(r);
          m.schedule = fulcrum::attention::make_tile_schedule(w, *plan, r).value();
          m.q = fulcrum::attention::shard(q, *plan, r).contiguous();
          m.dout = fulcrum::attention::shard(dout, *plan, r).contiguous();
          m.k = &keys.back();
          m.v = &values.back();
          tiles += m.schedule.tiles;
          partial += m.schedule.tiles - m.schedule.full_tiles;
          members.push_back(std::move(m));
        }
      }
    }
    std::vector<GroupedMember> grouped;
    for (std::size_t row = 0; row < docs_of_rows.size(); ++row) {
      CpWorkload w;
      w.tokens = kRowTokens;
      w.doc_lengths = docs_of_rows[row].second;
      w.block_size = shape.block;
      w.cp_size = 8;
      const at::Tensor q = at::randn({kRowTokens, shape.heads, shape.head_dim}, at::kFloat);
      const at::Tensor dout = at::randn({kRowTokens, shape.heads, shape.head_dim}, at::kFloat);
      for (const char* name : {"head_tail", "per_document_padded", "balanced"}) {
        fulcrum::Result<ShardPlan> plan = fulcrum::cp::plan(name, w);
        if (!plan) die(docs_of_rows[row].first + ", " + name + ": " + plan.status().message());
        const auto exchange = fulcrum::attention::make_kv_exchange_plan(w, *plan);
        if (!exchange)
          die(docs_of_rows[row].first + ", " + name + ": " + exchange.status().message());
        for (std::int32_t r = 0; r < 8; ++r) {
          GroupedMember g;
          g.m.label = docs_of_rows[row].first + ", " + name + " rank " + std::to_string(r);
          g.m.schedule = fulcrum::attention::make_tile_schedule(w, *plan, r).value();
          g.m.q = fulcrum::attention::shard(q, *plan, r).contiguous();
          g.m.dout = fulcrum::attention::shard(dout, *plan, r).contiguous();
          g.m.k = &keys[row];
          g.m.v = &values[row];
          g.overlap = fulcrum::attention::make_overlap_plan(
              g.m.schedule, *plan, *exchange, r, fulcrum::attention::OverlapCalls::kPerPeer);
          g.two = fulcrum::attention::make_overlap_plan(
              g.m.schedule, *plan, *exchange, r, fulcrum::attention::OverlapCalls::kOwnThenRemote);
          grouped.push_back(std::move(g));
        }
      }
    }
    for (Member& m : members) {  // warm-up
      for (const Masking masking : kKernels) run_once(m, masking);
    }
    std::vector<double> ratio[3];
    for (int rep = 0; rep < reps; ++rep) {
      double sum[3] = {0, 0, 0};
      for (Member& m : members) {
        for (int i = 0; i < 3; ++i) {
          const int kernel = (rep + i) % 3;
          const double ms = run_once(m, kKernels[kernel]);
          m.ms[kernel].push_back(ms);
          sum[kernel] += ms;
        }
      }
      for (int k = 0; k < 3; ++k) ratio[k].push_back(sum[k] / sum[0]);
    }
    double total[3] = {0, 0, 0};
    for (const Member& m : members) {
      for (int k = 0; k < 3; ++k) total[k] += median(m.ms[k]);
    }
    for (int k = 0; k < 3; ++k) {
      const Fit f = fit_prices(members, k);
      std::printf(
          "| %lld, %lld x %lld (%s) | %zu | %lld (%lld) | %s | %.0f | %.3f (%.3f..%.3f) | %.4f, + "
          "%.4f (%.2fx) | %.1f%% |\n",
          static_cast<long long>(shape.block), static_cast<long long>(shape.heads),
          static_cast<long long>(shape.head_dim), shape.what, members.size(),
          static_cast<long long>(tiles), static_cast<long long>(partial), kKernelNames[k], total[k],
          total[k] / total[0], *std::min_element(ratio[k].begin(), ratio[k].end()),
          *std::max_element(ratio[k].begin(), ratio[k].end()), f.tile, f.partial,
          (f.tile + f.partial) / f.tile, 100.0 * f.median_error);
    }
    std::fflush(stdout);

    for (GroupedMember& g : grouped) {  // warm-up, every way
      run_once(g.m, Masking::kFullApart, true);
      run_grouped(g.m, g.overlap, Masking::kFullApart);
      run_grouped(g.m, g.two, Masking::kFullApart);
    }
    std::vector<double> by_rep, two_by_rep;
    for (int rep = 0; rep < reps; ++rep) {
      double one = 0, in_groups = 0, in_two = 0;
      for (GroupedMember& g : grouped) {
        for (int i = 0; i < 3; ++i) {  // the ways in an order that rotates each repetition
          const int way = (rep + i) % 3;
          if (way == 0) {
            g.one.push_back(run_once(g.m, Masking::kFullApart, true));
            one += g.one.back();
          } else if (way == 1) {
            g.grouped.push_back(run_grouped(g.m, g.overlap, Masking::kFullApart));
            in_groups += g.grouped.back();
          } else {
            g.in_two.push_back(run_grouped(g.m, g.two, Masking::kFullApart));
            in_two += g.in_two.back();
          }
        }
      }
      by_rep.push_back(in_groups / one);
      two_by_rep.push_back(in_two / one);
    }
    double one = 0, in_groups = 0, in_two = 0;
    std::int64_t one_visits = 0, group_visits = 0, calls = 0, two_visits = 0, two_calls = 0;
    std::vector<std::array<double, 4>> x_one, x_grouped;
    std::vector<std::array<double, 6>> x_visits;
    std::vector<double> y_one, y_grouped;
    for (const GroupedMember& g : grouped) {
      const TileSchedule& s = g.m.schedule;
      const auto all = static_cast<double>(s.tiles);
      const double part = all - static_cast<double>(s.full_tiles);
      const auto local = static_cast<double>(s.shard_len);
      const std::int64_t own = 2 * visits({s});
      const std::int64_t in = visits_of(g.overlap);
      const std::int64_t member_calls = calls_of(g.overlap);
      calls += member_calls;
      two_visits += visits_of(g.two);
      two_calls += calls_of(g.two);
      in_two += median(g.in_two);
      one_visits += own;
      group_visits += in;
      x_one.push_back({all, part, local, 1.0});
      x_grouped.push_back({all, part, local, 1.0});
      x_visits.push_back(
          {all, part, local, 1.0, static_cast<double>(in), static_cast<double>(member_calls)});
      y_one.push_back(median(g.one));
      y_grouped.push_back(median(g.grouped));
      one += y_one.back();
      in_groups += y_grouped.back();
    }
    char line[1024];
    std::snprintf(line, sizeof line,
                  "| %lld, %lld x %lld | %zu | %.0f | %.0f | %.2f (%.2f..%.2f) | %lld | %lld "
                  "(%lld calls) | %s | %s | %s | %.0f | %.2f (%.2f..%.2f) | %lld (%lld calls) |",
                  static_cast<long long>(shape.block), static_cast<long long>(shape.heads),
                  static_cast<long long>(shape.head_dim), grouped.size(), one, in_groups,
                  in_groups / one, *std::min_element(by_rep.begin(), by_rep.end()),
                  *std::max_element(by_rep.begin(), by_rep.end()),
                  static_cast<long long>(one_visits), static_cast<long long>(group_visits),
                  static_cast<long long>(calls), fit_members(x_one, y_one).c_str(),
                  fit_members(x_grouped, y_grouped).c_str(),
                  fit_members(x_visits, y_grouped).c_str(), in_two, in_two / one,
                  *std::min_element(two_by_rep.begin(), two_by_rep.end()),
                  *std::max_element(two_by_rep.begin(), two_by_rep.end()),
                  static_cast<long long>(two_visits), static_cast<long long>(two_calls));
    group_rows.push_back(line);
  }
  std::printf(
      "\nThe jobs' member size, P = 8 (head_tail, per_document_padded, balanced), the default "
      "kernel: one call against the overlapped exchange's calls, a call per peer (group calls) "
      "and two a pass\n\n"
      "| B, heads x head_dim | members | one call ms | group calls ms | groups / one (by "
      "repetition) | visits, one call | visits, group calls | one call: (a + e) / a, fit's "
      "median |e| | group calls: (a + e) / a, median |e| | group calls, visits and calls "
      "fitted too | two a pass ms | two / one (by repetition) | visits, two a pass |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | ---: "
      "|\n");
  for (const std::string& row : group_rows) std::printf("%s\n", row.c_str());
  std::printf("\nload average at the end: %s\n", fulcrum::bench::load_average().c_str());
  return 0;
}
