// Where hybrid's gap to the certified lower bound goes (docs/HYBRID.md
// sections 4 and 6): on the same global batches as fulcrum_bench_schedule's
// quality grid (same seeds, same draws), one row per batch with hybrid's
// step split into the terms the bound's average counts (tiles, fixed costs,
// K/V time, latency; tokens are the same for every schedule) beside the
// bound's own figure for each (without the work caps), the idle time the
// average omits (inside slots, waiting for the slowest member; after a
// rank's last slot), and what the work caps add to the bound. Every split
// figure is a mean over the W ranks in ms: gap = the differences + idle -
// work caps (when the average binds). megatron_dcp's step over
// hybrid's and over the bound, per batch, for the goals of section 6; the
// wall time of one step_time_lower_bound call (the least of 5).
//
// Run from the project root so that ../shared/workloads is found:
//   build/release/bin/fulcrum_bench_bound_gap --mixes dist_wlbllm --ranks 64 --tokens 8192
// Options: --ranks 64,256  --tokens 8192,16384  --batches N  --mb M
//          --profiles h100_7b,h100_7b_fa3  --mixes dist_wlbllm,dist_prolong
//          --slots: after each batch, hybrid's multi-rank slots, each re-planned
//          by every CP planner on the same ranks, planned as chosen on
//          ranks 0..g-1 (the fewest nodes) and with its members dealt to its
//          nodes in every order of the nodes (the least end), slot end in ms
//          --redeal: hybrid's multi-rank slots kept, its one-rank rows dealt
//          again longest first to the rank free soonest; the step in ms
//          --timeline: after each batch, the ranks' finish times (least,
//          10th, 50th and 90th percentile, most) and every member of the
//          widest slot (tokens, tiles, K/V bytes in and out, peers, compute
//          and communication in ms)
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/host/cost_profile_file.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_strategies.h"
#include "workloads.h"

namespace {

using fulcrum::CostProfile;
using fulcrum::Schedule;
using fulcrum::ScheduleCost;
using fulcrum::ScheduleRequest;
using fulcrum::ScheduleSlot;

struct Options {
  std::vector<std::int64_t> ranks = {64};
  std::vector<std::int64_t> tokens = {8192};
  std::vector<std::string> profiles = {"h100_7b"};
  std::vector<std::string> mixes;  // empty: all found
  int batches = 5;
  int micro_batches = 4;
  bool slots = false;
  bool redeal = false;
  bool timeline = false;
};

std::vector<std::string> split(const char* text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

// Positive integers separated by commas; false (and nothing else) on any
// other text.
bool split_ints(const char* text, std::vector<std::int64_t>& out) {
  out.clear();
  for (const std::string& item : split(text)) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < 1) return false;
    out.push_back(v);
  }
  return !out.empty();
}

bool parse(int argc, char** argv, Options& opt) {
  for (int i = 1; i < argc; ++i) {
    const bool more = i + 1 < argc;
    const bool ints =
        more && (std::strcmp(argv[i], "--ranks") == 0 || std::strcmp(argv[i], "--tokens") == 0 ||
                 std::strcmp(argv[i], "--batches") == 0 || std::strcmp(argv[i], "--mb") == 0);
    std::vector<std::int64_t> values;
    if (ints && !split_ints(argv[i + 1], values)) {
      std::fprintf(stderr,
                   "fulcrum_bench_bound_gap: %s '%s' is not a list of positive integers; give "
                   "positive integers separated by commas, e.g. 64,256\n",
                   argv[i], argv[i + 1]);
      return false;
    }
    if (std::strcmp(argv[i], "--ranks") == 0 && more) {
      opt.ranks = values;
      ++i;
    } else if (std::strcmp(argv[i], "--tokens") == 0 && more) {
      opt.tokens = values;
      ++i;
    } else if (std::strcmp(argv[i], "--profiles") == 0 && more) {
      opt.profiles = split(argv[++i]);
    } else if (std::strcmp(argv[i], "--mixes") == 0 && more) {
      opt.mixes = split(argv[++i]);
    } else if (std::strcmp(argv[i], "--batches") == 0 && more) {
      opt.batches = static_cast<int>(std::min<std::int64_t>(values[0], 1000));
      ++i;
    } else if (std::strcmp(argv[i], "--mb") == 0 && more) {
      opt.micro_batches = static_cast<int>(std::min<std::int64_t>(values[0], 64));
      ++i;
    } else if (std::strcmp(argv[i], "--slots") == 0) {
      opt.slots = true;
    } else if (std::strcmp(argv[i], "--redeal") == 0) {
      opt.redeal = true;
    } else if (std::strcmp(argv[i], "--timeline") == 0) {
      opt.timeline = true;
    } else {
      std::fprintf(stderr,
                   "fulcrum_bench_bound_gap: unknown or incomplete option '%s'; see the options "
                   "at the top of benchmarks/bound_gap.cpp\n",
                   argv[i]);
      return false;
    }
  }
  return true;
}

// Hybrid's step split into the cost model's terms, summed over members.
struct Split {
  double tiles = 0, fixed = 0, kv = 0, latency = 0;
  double idle_inside = 0, idle_after = 0;
};

Split split_of(const ScheduleRequest& r, const Schedule& s, const ScheduleCost& cost) {
  const CostProfile& p = r.profile;
  Split out;
  std::vector<double> free_at(static_cast<std::size_t>(r.world_size), 0.0);
  for (std::size_t i = 0; i < s.slots.size(); ++i) {
    const fulcrum::SlotCost& sc = cost.slots[i];
    for (const fulcrum::SlotMemberCost& m : sc.members) {
      out.tiles += p.tile_seconds * static_cast<double>(m.tiles);
      out.fixed += p.slot_seconds;
      out.latency += p.latency_seconds * m.peers;
      out.kv += m.comm_seconds - p.latency_seconds * m.peers;
      out.idle_inside += (sc.end_seconds - sc.start_seconds) - (m.compute_seconds + m.comm_seconds);
      free_at[m.rank] = std::max(free_at[m.rank], sc.end_seconds);
    }
  }
  for (const double f : free_at) out.idle_after += cost.step_seconds - f;
  return out;
}

// The same plan with its members dealt to the slot's nodes in every order
// of the nodes (each node's ranks kept in order; at most 720 orders): the
// slot whose end is least (the first such, its own order first).
ScheduleSlot best_node_order(const ScheduleRequest& r, const ScheduleSlot& slot) {
  std::vector<std::vector<std::int32_t>> groups;
  for (const std::int32_t a : slot.ranks) {
    if (groups.empty() ||
        groups.back()[0] / r.profile.ranks_per_node != a / r.profile.ranks_per_node)
      groups.emplace_back();
    groups.back().push_back(a);
  }
  std::vector<std::size_t> order(groups.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  ScheduleSlot best = slot;
  double least = fulcrum::evaluate_slot(r, slot).end_seconds;
  int tried = 0;
  while (++tried < 720 && std::next_permutation(order.begin(), order.end())) {
    ScheduleSlot moved = slot;
    moved.ranks.clear();
    for (const std::size_t k : order)
      moved.ranks.insert(moved.ranks.end(), groups[k].begin(), groups[k].end());
    const double end = fulcrum::evaluate_slot(r, moved).end_seconds;
    if (end < least) {
      least = end;
      best = std::move(moved);
    }
  }
  return best;
}

// Every CP planner on a slot's own ranks, and its own plan on ranks 0..g-1.
void print_slots(const ScheduleRequest& r, const Schedule& s, const ScheduleCost& cost) {
  Schedule moved = s;
  for (std::size_t i = 0; i < s.slots.size(); ++i) {
    const ScheduleSlot& slot = s.slots[i];
    if (slot.ranks.size() < 2) continue;
    std::int64_t tokens = 0;
    for (const fulcrum::DocPiece& piece : slot.pieces) tokens += piece.length;
    std::vector<std::int32_t> nodes;
    for (const std::int32_t a : slot.ranks) nodes.push_back(a / r.profile.ranks_per_node);
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    ScheduleSlot packed = slot;
    for (std::size_t k = 0; k < packed.ranks.size(); ++k) packed.ranks[k] = static_cast<int>(k);
    std::printf(
        "    slot %zu: g %zu, %zu pieces, %lld tokens, %zu nodes, ends %.1f after %.1f; "
        "on ranks 0..g-1 %.1f;",
        i, slot.ranks.size(), slot.pieces.size(), static_cast<long long>(tokens), nodes.size(),
        (cost.slots[i].end_seconds - cost.slots[i].start_seconds) * 1e3,
        cost.slots[i].start_seconds * 1e3, fulcrum::evaluate_slot(r, packed).end_seconds * 1e3);
    moved.slots[i] = best_node_order(r, slot);
    std::printf(" node orders %.1f;", fulcrum::evaluate_slot(r, moved.slots[i]).end_seconds * 1e3);
    const fulcrum::CpWorkload w = fulcrum::slot_workload(r, slot);
    for (const fulcrum::cp::StrategyInfo& info : fulcrum::cp::strategies()) {
      fulcrum::Result<fulcrum::ShardPlan> plan = info.plan(w);
      if (!plan || plan->shard_len > r.max_tokens_per_rank) continue;
      ScheduleSlot other = slot;
      other.plan = std::move(*plan);
      std::printf(" %s %.1f", std::string(info.name).c_str(),
                  fulcrum::evaluate_slot(r, other).end_seconds * 1e3);
    }
    std::printf("\n");
  }
  std::printf("    every multi-rank slot in its best node order: step %.1f\n",
              fulcrum::evaluate_schedule(r, moved).step_seconds * 1e3);
}

// Per-rank finish times (quantiles) and the members of the widest slot:
// where the step's ranks wait, and what the widest slot's members spend.
void print_timeline(const ScheduleRequest& r, const Schedule& s, const ScheduleCost& cost) {
  std::vector<double> free_at(static_cast<std::size_t>(r.world_size), 0.0);
  std::size_t widest = 0;
  for (std::size_t i = 0; i < s.slots.size(); ++i) {
    for (const std::int32_t a : s.slots[i].ranks)
      free_at[a] = std::max(free_at[a], cost.slots[i].end_seconds);
    if (s.slots[i].ranks.size() > s.slots[widest].ranks.size()) widest = i;
  }
  std::vector<double> sorted = free_at;
  std::sort(sorted.begin(), sorted.end());
  std::printf("    finish ms: min %.1f p10 %.1f p50 %.1f p90 %.1f max %.1f\n", sorted.front() * 1e3,
              sorted[sorted.size() / 10] * 1e3, sorted[sorted.size() / 2] * 1e3,
              sorted[sorted.size() * 9 / 10] * 1e3, sorted.back() * 1e3);
  const fulcrum::SlotCost& sc = cost.slots[widest];
  std::printf("    widest slot %zu (%s): start %.1f end %.1f\n", widest,
              s.slots[widest].plan.strategy_used.c_str(), sc.start_seconds * 1e3,
              sc.end_seconds * 1e3);
  for (const fulcrum::SlotMemberCost& m : sc.members) {
    std::printf(
        "      rank %d tokens %lld tiles %lld in %lld out %lld peers %d compute %.1f comm %.1f\n",
        m.rank, static_cast<long long>(m.tokens), static_cast<long long>(m.tiles),
        static_cast<long long>(m.bytes_received), static_cast<long long>(m.bytes_sent), m.peers,
        m.compute_seconds * 1e3, m.comm_seconds * 1e3);
  }
}

// Hybrid's multi-rank slots as they are (same ranks, plans and wave order),
// then its one-rank rows dealt again longest first, each to the rank free
// soonest, in a wave after that rank's others. Valid by construction.
Schedule redealt(const ScheduleRequest& r, const Schedule& s) {
  Schedule out;
  std::vector<ScheduleSlot> rows;
  for (const ScheduleSlot& slot : s.slots)
    (slot.ranks.size() > 1 ? out.slots : rows).push_back(slot);
  const ScheduleCost base = fulcrum::evaluate_schedule(r, out);
  std::vector<double> free_at(static_cast<std::size_t>(r.world_size), 0.0);
  std::vector<std::int32_t> wave(static_cast<std::size_t>(r.world_size), 0);
  for (std::size_t i = 0; i < out.slots.size(); ++i) {
    for (const std::int32_t a : out.slots[i].ranks) {
      free_at[a] = std::max(free_at[a], base.slots[i].end_seconds);
      wave[a] = std::max(wave[a], out.slots[i].wave + 1);
    }
  }
  std::vector<std::pair<double, std::size_t>> by_time;
  for (std::size_t i = 0; i < rows.size(); ++i)
    by_time.emplace_back(fulcrum::evaluate_slot(r, rows[i]).end_seconds, i);
  std::sort(by_time.rbegin(), by_time.rend());
  for (const auto& [seconds, i] : by_time) {
    const auto a = static_cast<std::int32_t>(std::min_element(free_at.begin(), free_at.end()) -
                                             free_at.begin());
    ScheduleSlot slot = rows[i];
    slot.ranks = {a};
    slot.wave = wave[a]++;
    free_at[a] += seconds;
    out.slots.push_back(std::move(slot));
  }
  return out;
}

double step_of(const char* name, const ScheduleRequest& r, Schedule* keep = nullptr) {
  fulcrum::Result<Schedule> s = fulcrum::run_schedule_strategy(name, r);
  if (!s) {
    std::fprintf(stderr, "fulcrum_bench_bound_gap: %s failed: %s\n", name,
                 s.status().message().c_str());
    std::exit(1);
  }
  const double step = fulcrum::evaluate_schedule(r, *s).step_seconds;
  if (keep != nullptr) *keep = std::move(*s);
  return step;
}

void one_batch(const Options& opt, const std::string& mix, const ScheduleRequest& r, int b) {
  // The least wall time of 5 calls: this machine is shared.
  double bound_ms = 1e300;
  fulcrum::BoundTerms bt;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    bt = fulcrum::step_time_lower_bound_terms(r);
    bound_ms = std::min(
        bound_ms,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  Schedule hybrid;
  const double step = step_of("hybrid", r, &hybrid);
  const double dcp = step_of("megatron_dcp", r);
  const ScheduleCost cost = fulcrum::evaluate_schedule(r, hybrid);
  const Split sp = split_of(r, hybrid, cost);
  const double ms = 1e3 / static_cast<double>(r.world_size);
  std::printf(
      "| %s | %s | %d | %lld | %d | %lld | %.1f | %.1f | %.1f%% | %.4f | %.3f | %.1f / %.1f | "
      "%.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f | %.1f | %.1f | %zu | %.2f |\n",
      mix.c_str(), r.profile.name.c_str(), r.world_size,
      static_cast<long long>(r.max_tokens_per_rank), b,
      static_cast<long long>(*std::max_element(r.doc_lengths.begin(), r.doc_lengths.end())),
      step * 1e3, bt.bound * 1e3, 100 * (step / bt.bound - 1), dcp / step, dcp / bt.bound,
      sp.tiles * ms, bt.tiles * ms, sp.fixed * ms, bt.fixed * ms, sp.kv * ms, bt.exchange * ms,
      sp.latency * ms, bt.latency * ms, sp.idle_inside * ms, sp.idle_after * ms,
      (bt.bound - std::max(bt.average, bt.per_piece)) * 1e3, r.doc_lengths.size(), bound_ms);
  if (opt.slots) print_slots(r, hybrid, cost);
  if (opt.timeline) print_timeline(r, hybrid, cost);
  if (opt.redeal) {
    const Schedule again = redealt(r, hybrid);
    const fulcrum::Status valid = fulcrum::validate_schedule(r, again);
    std::printf("    rows dealt again: %s, step %.1f\n", valid ? "valid" : valid.message().c_str(),
                fulcrum::evaluate_schedule(r, again).step_seconds * 1e3);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, opt)) return 2;
  std::string source;
  const auto mixes = fulcrum::bench::document_mixes(source);
  std::printf("%s\n\n", source.c_str());
  std::printf(
      "| mix | profile | W | T | batch | longest | hybrid ms | bound ms | gap | megatron_dcp / "
      "hybrid | megatron_dcp / bound | tiles: hybrid / bound | fixed | K/V | latency | idle "
      "inside slots | idle after last slot | work caps | docs | bound computed in ms |\n");
  std::printf(
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
      "---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::string& name : opt.profiles) {
    const fulcrum::Result<CostProfile> profile = fulcrum::host::resolve_cost_profile(name);
    if (!profile) {
      std::fprintf(stderr, "fulcrum_bench_bound_gap: %s\n", profile.status().message().c_str());
      return 2;
    }
    for (const auto& mix : mixes) {
      if (!opt.mixes.empty() &&
          std::find(opt.mixes.begin(), opt.mixes.end(), mix.name) == opt.mixes.end())
        continue;
      for (const std::int64_t w : opt.ranks) {
        for (const std::int64_t t : opt.tokens) {
          // The quality grid's seed and draws (benchmarks/schedule_quality.cpp).
          std::mt19937_64 rng(static_cast<std::uint64_t>(w * 1000003 + t));
          for (int b = 0; b < opt.batches; ++b) {
            ScheduleRequest r;
            r.doc_lengths = fulcrum::bench::draw_batch(mix.lengths, opt.micro_batches * w * t, rng);
            r.world_size = static_cast<std::int32_t>(w);
            r.max_tokens_per_rank = t;
            r.profile = *profile;
            if (const fulcrum::Status valid = fulcrum::validate_schedule_request(r); !valid) {
              std::fprintf(stderr, "fulcrum_bench_bound_gap: W = %lld, T = %lld: %s\n",
                           static_cast<long long>(w), static_cast<long long>(t),
                           valid.message().c_str());
              return 2;
            }
            one_batch(opt, mix.name, r, b);
          }
        }
      }
    }
  }
  return 0;
}
