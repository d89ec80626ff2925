// Hybrid placement (docs/HYBRID.md): predicted step time of every scheduler
// on the same global batches, its gap to the certified lower bound, the most
// any schedule could gain on each baseline (baseline / bound), how often
// hybrid returned a baseline's schedule, the K/V bytes each moves against
// fixed CP's all-gathers, and how long hybrid takes to decide, to
// materialise its plans and to price them against the baselines.
//
// Global batches are documents drawn with replacement from each mix until
// they hold `--mb` micro-batches' worth of tokens per rank (mb x W x T): the
// shared mixes dist_wlbllm and dist_prolong when ../shared/workloads is found
// (fulcrum's synthetic mix when not, and the first line says which), and
// always "lognormal", lengths shaped like Megatron-LM's dynamic-CP
// example (lognormal, median 1024, sigma 1, clipped to 128 .. 8192).
//
// Run from the project root so that ../shared/workloads is found:
//   build/release/bin/fulcrum_bench_schedule                 # quality grid
//   build/release/bin/fulcrum_bench_schedule --speed          # plan time
//   build/release/bin/fulcrum_bench_schedule --suite 400      # pre-guard win share
// Options: --ranks 8,16,64  --tokens 4096,8192  --batches N  --mb M
//          --profiles h100_7b,cpu_gloo,configs/profiles/cpu_calibrated.yaml
//          (a bundled name or a profile file)  --mixes dist_wlbllm,lognormal
//          --check (validate every schedule and recount nothing else)
//          --docs 8,1000,4000 (--speed's batch sizes; default 1000,4000,16000)
//          --compact (with --speed: only the compact whole answer, 5 runs
//          each, median and range; for profiling and the plan-time table)
//          --suite N: N seeded random batches per profile (W 2..1024, primes
//          included; documents of one block to 1M tokens; every dense mask);
//          the share where hybrid's own placement, before its never-slower
//          guard, is no slower than fixed and megatron_dcp
// Prints markdown tables. Exits 1 when a scheduler fails on a batch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fulcrum/core/compact_schedule.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
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
using fulcrum::ScheduleStrategyInfo;

struct Options {
  std::vector<std::int64_t> ranks = {8, 16, 64, 256, 1024};
  std::vector<std::int64_t> tokens = {4096, 8192, 16384, 32768};
  std::vector<std::string> profiles = {"h100_7b", "cpu_gloo"};
  std::vector<std::string> mixes;  // empty: all found
  int batches = 5;
  int micro_batches = 4;
  bool speed = false;
  bool compact_only = false;  // --speed --compact: only the compact whole answer
  bool check = false;
  int suite = 0;
  std::vector<std::int64_t> docs = {1000, 4000, 16000};  // --speed's batch sizes
};

std::vector<std::string> split(const char* text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

std::vector<std::int64_t> split_ints(const char* text) {
  std::vector<std::int64_t> out;
  for (const std::string& s : split(text)) out.push_back(std::stoll(s));
  return out;
}

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::vector<std::int64_t> lognormal_mix(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> lengths(count);
  for (auto& len : lengths) {
    // Box-Muller from two portable uniform draws.
    const double u1 = (static_cast<double>(rng() >> 11) + 1.0) / 9007199254740993.0;
    const double u2 = static_cast<double>(rng() >> 11) / 9007199254740992.0;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    const double l = std::exp(std::log(1024.0) + z);
    len = std::clamp<std::int64_t>(std::llround(l), 128, 8192);
  }
  return lengths;
}

struct Run {
  bool ok = false;
  std::string error;
  double step = 0;
  double decide_seconds = 0;
  double plan_seconds = 0;
  std::int64_t bytes = 0;
  std::int64_t allgather = 0;
  std::size_t slots = 0;
  bool baseline_returned = false;  // hybrid's guard returned fixed's or megatron_dcp's
};

Run run_one(const ScheduleStrategyInfo& info, const ScheduleRequest& request, bool check) {
  Run run;
  const double t0 = cpu_seconds();
  fulcrum::Result<Schedule> schedule = info.decide(request);
  const double t1 = cpu_seconds();
  if (!schedule) {
    run.error = schedule.status().message();
    return run;
  }
  if (fulcrum::Status s = info.plan(request, *schedule); !s) {
    run.error = s.message();
    return run;
  }
  const double t2 = cpu_seconds();
  if (check) {
    if (fulcrum::Status s = fulcrum::validate_schedule(request, *schedule); !s) {
      run.error = "invalid schedule: " + s.message();
      return run;
    }
  }
  const ScheduleCost cost = fulcrum::evaluate_schedule(request, *schedule);
  run.ok = true;
  run.step = cost.step_seconds;
  run.decide_seconds = t1 - t0;
  run.plan_seconds = t2 - t1;
  run.bytes = cost.bytes_moved;
  run.allgather = cost.allgather_bytes;
  run.slots = schedule->slots.size();
  run.baseline_returned = !schedule->fallback_reason.empty();
  return run;
}

struct Mix {
  std::string name;
  std::vector<std::int64_t> lengths;
};

int quality(const Options& opt, const std::vector<Mix>& mixes) {
  const auto scheds = fulcrum::schedule_strategies();
  int failures = 0;
  std::printf(
      "| mix | profile | W | T | batches | docs/batch | hybrid vs megatron_dcp: median, worst | "
      "best possible vs megatron_dcp: median, worst | hybrid vs fixed: median, worst | best "
      "possible vs fixed: median, worst | gap to bound: hybrid median, worst | megatron_dcp "
      "worst gap | fixed worst gap | baseline returned | K/V bytes hybrid / fixed all-gather | "
      "hybrid bytes / fixed bytes |\n");
  std::printf(
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
      "| ---: | ---: | ---: |\n");
  for (const std::string& profile_arg : opt.profiles) {
    const fulcrum::Result<CostProfile> profile = fulcrum::host::resolve_cost_profile(profile_arg);
    const std::string profile_name = profile ? profile->name : profile_arg;
    if (!profile) {
      std::fprintf(stderr, "fulcrum_bench_schedule: %s\n", profile.status().message().c_str());
      return 2;
    }
    for (const Mix& mix : mixes) {
      for (const std::int64_t w : opt.ranks) {
        for (const std::int64_t t : opt.tokens) {
          std::mt19937_64 rng(static_cast<std::uint64_t>(w * 1000003 + t));
          std::vector<double> vs_dcp, vs_fixed, gap_h, gap_d, gap_f, bytes_ratio, ag_ratio;
          // baseline / bound: no schedule is faster than the baseline by more.
          std::vector<double> dcp_bound, fixed_bound;
          int returned = 0;
          double docs = 0;
          for (int b = 0; b < opt.batches; ++b) {
            ScheduleRequest request;
            request.doc_lengths =
                fulcrum::bench::draw_batch(mix.lengths, opt.micro_batches * w * t, rng);
            docs += static_cast<double>(request.doc_lengths.size());
            request.world_size = static_cast<std::int32_t>(w);
            request.max_tokens_per_rank = t;
            request.profile = *profile;
            const double bound = fulcrum::step_time_lower_bound(request);
            Run runs[3];
            for (std::size_t s = 0; s < scheds.size() && s < 3; ++s) {
              runs[s] = run_one(scheds[s], request, opt.check);
              if (!runs[s].ok) {
                ++failures;
                std::fprintf(stderr, "%s %s W=%lld T=%lld batch %d: %s failed: %s\n",
                             mix.name.c_str(), profile_name.c_str(), static_cast<long long>(w),
                             static_cast<long long>(t), b, std::string(scheds[s].name).c_str(),
                             runs[s].error.c_str());
              }
            }
            const Run& fixed = runs[0];
            const Run& dcp = runs[1];
            const Run& hybrid = runs[2];
            if (!fixed.ok || !dcp.ok || !hybrid.ok) continue;
            vs_dcp.push_back(dcp.step / hybrid.step);
            vs_fixed.push_back(fixed.step / hybrid.step);
            gap_h.push_back(hybrid.step / bound - 1);
            gap_d.push_back(dcp.step / bound - 1);
            gap_f.push_back(fixed.step / bound - 1);
            dcp_bound.push_back(dcp.step / bound);
            fixed_bound.push_back(fixed.step / bound);
            returned += hybrid.baseline_returned ? 1 : 0;
            if (fixed.allgather > 0) {
              ag_ratio.push_back(static_cast<double>(hybrid.bytes) /
                                 static_cast<double>(fixed.allgather));
            }
            if (fixed.bytes > 0) {
              bytes_ratio.push_back(static_cast<double>(hybrid.bytes) /
                                    static_cast<double>(fixed.bytes));
            }
          }
          if (vs_dcp.empty()) continue;
          const auto worst_of = [](const std::vector<double>& v) {
            return *std::min_element(v.begin(), v.end());
          };
          const auto max_of = [](const std::vector<double>& v) {
            return *std::max_element(v.begin(), v.end());
          };
          const auto ratio_text = [&](const std::vector<double>& v) {
            if (v.empty()) return std::string("-");
            char buf[64];
            std::snprintf(buf, sizeof buf, "%.3f", median(v));
            return std::string(buf);
          };
          std::printf(
              "| %s | %s | %lld | %lld | %zu | %.0f | %.3f, %.3f | %.3f, %.3f | %.3f, %.3f | "
              "%.3f, %.3f | %.1f%%, %.1f%% | %.1f%% | %.1f%% | %d | %s | %s |\n",
              mix.name.c_str(), profile_name.c_str(), static_cast<long long>(w),
              static_cast<long long>(t), vs_dcp.size(), docs / opt.batches, median(vs_dcp),
              worst_of(vs_dcp), median(dcp_bound), worst_of(dcp_bound), median(vs_fixed),
              worst_of(vs_fixed), median(fixed_bound), worst_of(fixed_bound), 100 * median(gap_h),
              100 * max_of(gap_h), 100 * max_of(gap_d), 100 * max_of(gap_f), returned,
              ratio_text(ag_ratio).c_str(), ratio_text(bytes_ratio).c_str());
          std::fflush(stdout);
        }
      }
    }
  }
  return failures > 0 ? 1 : 0;
}

// What hybrid's guard did with each baseline, as it ran: "bound" (fixed:
// ruled out before deciding), "groups" (fixed: ruled out from its DP groups,
// before rows), "decided" (ruled out by its decided slots' bound), "priced"
// (floored and priced from runs), "planned" (cheaper: planned in full and
// returned); a baseline that refused is not named.
std::string guard_steps(const fulcrum::GuardTrace& trace) {
  std::string out;
  for (const auto& [name, what] : trace.steps) {
    out += (out.empty() ? "" : ", ") + name + " " + what;
  }
  return out.empty() ? "none" : out;
}

// The compact answer (ABI 1.4), thread CPU time, medians of `reps`: "whole"
// is hybrid's answer with plans by rule (decide, plan compactly, guard; no
// positions), "own" one rank's expansion of its slots through the CP
// planners (the plugin's plan_cp, in process: plan, recount, validate), the
// worst of the three ranks with the most plan entries. -1: a call failed.
struct CompactTimes {
  double whole = -1;
  double own = -1;
};

CompactTimes compact_times(const ScheduleRequest& full, int reps) {
  ScheduleRequest request = full;
  request.compact = true;
  std::vector<double> wholes;
  fulcrum::Result<Schedule> compact = fulcrum::internal_error("not run");
  for (int rep = 0; rep < reps; ++rep) {
    const double t0 = cpu_seconds();
    compact = fulcrum::run_schedule_strategy("hybrid", request);
    wholes.push_back(cpu_seconds() - t0);
    if (!compact) return {};
  }
  std::vector<std::int64_t> entries(static_cast<std::size_t>(full.world_size), 0);
  for (const fulcrum::ScheduleSlot& slot : compact->slots) {
    for (const std::int32_t r : slot.ranks) {
      entries[static_cast<std::size_t>(r)] += slot.plan.shard_len * slot.plan.cp_size;
    }
  }
  std::vector<std::int32_t> ranks(entries.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<std::int32_t>(r);
  const std::size_t top = std::min<std::size_t>(3, ranks.size());
  std::partial_sort(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(top), ranks.end(),
                    [&](std::int32_t a, std::int32_t b) { return entries[a] > entries[b]; });
  const fulcrum::RulePlanFn plan = [](std::string_view rule, const fulcrum::CpWorkload& w) {
    return fulcrum::cp::plan(rule, w);
  };
  CompactTimes out{median(wholes), 0};
  for (std::size_t i = 0; i < top; ++i) {
    std::vector<double> times;
    for (int rep = 0; rep < reps; ++rep) {
      Schedule mine = *compact;
      const double t0 = cpu_seconds();
      const fulcrum::Status status = fulcrum::expand_slots_of_rank(request, mine, ranks[i], plan);
      times.push_back(cpu_seconds() - t0);
      if (!status) return {};
    }
    out.own = std::max(out.own, median(times));
  }
  return out;
}

// The batch --speed times at W ranks and `docs` documents (T = 16K,
// h100_7b, documents drawn from the first mix, seeded by W and docs).
ScheduleRequest speed_request(const Mix& mix, std::int64_t w, std::int64_t docs,
                              const CostProfile& profile) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(w * 7 + docs));
  ScheduleRequest request;
  for (std::int64_t i = 0; i < docs; ++i) {
    request.doc_lengths.push_back(mix.lengths[rng() % mix.lengths.size()]);
  }
  request.world_size = static_cast<std::int32_t>(w);
  request.max_tokens_per_rank = 16384;
  request.profile = profile;
  return request;
}

// "by rule" when a compact request got a compact answer; "full (N
// per_document_weighted)" when a plan no CP strategy reproduces from its row
// made it a full one (every position written).
std::string answer_kind(const Schedule& answer) {
  std::size_t weighted = 0;
  bool positions = false;
  for (const fulcrum::ScheduleSlot& slot : answer.slots) {
    weighted += slot.plan.strategy_used == "per_document_weighted" ? 1 : 0;
    positions = positions || !slot.compact();
  }
  if (!positions) return "by rule";
  return "full (" + std::to_string(weighted) + " per_document_weighted)";
}

// --speed --compact: the compact whole answer alone, 5 runs (thread CPU
// time), median and range.
int speed_compact(const Options& opt, const Mix& mix, const CostProfile& profile) {
  std::printf(
      "| mix | W | docs | tokens | compact whole ms (median) | least | most | answer |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const std::int64_t w : opt.ranks) {
    for (const std::int64_t docs : opt.docs) {
      ScheduleRequest request = speed_request(mix, w, docs, profile);
      request.compact = true;
      std::int64_t tokens = 0;
      for (const std::int64_t len : request.doc_lengths) tokens += len;
      std::vector<double> times;
      std::string answered;
      for (int rep = 0; rep < 5; ++rep) {
        const double t0 = cpu_seconds();
        const fulcrum::Result<Schedule> answer = fulcrum::run_schedule_strategy("hybrid", request);
        times.push_back(cpu_seconds() - t0);
        if (!answer) return 1;
        answered = answer_kind(*answer);
      }
      std::printf("| %s | %lld | %lld | %lld | %.1f | %.1f | %.1f | %s |\n", mix.name.c_str(),
                  static_cast<long long>(w), static_cast<long long>(docs),
                  static_cast<long long>(tokens), 1e3 * median(times),
                  1e3 * *std::min_element(times.begin(), times.end()),
                  1e3 * *std::max_element(times.begin(), times.end()), answered.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

// hybrid's answer, phase by phase (thread CPU time): deciding, planning its
// own slots compactly (drafts, search: no positions), the guard (deciding
// both baselines, bounding them, planning and pricing those the bound cannot
// rule out), and writing the returned schedule's positions; "whole" is
// plan_hybrid after decide_hybrid, as the plugin answers. Median of 5 runs
// (3 for the phases; 1 past 50M tokens); the baselines' decisions beside.
int speed(const Options& opt, const std::vector<Mix>& mixes) {
  const fulcrum::Result<CostProfile> profile = fulcrum::builtin_cost_profile("h100_7b");
  if (opt.compact_only) return speed_compact(opt, mixes.front(), *profile);
  const auto scheds = fulcrum::schedule_strategies();
  std::printf(
      "| mix | W | T | docs | tokens | hybrid decide ms | hybrid plan ms | guard ms | positions "
      "ms | whole answer ms | compact whole ms | expand own ms | the guard's baselines | "
      "megatron_dcp decide ms | fixed decide ms |\n| --- | ---: | ---: | ---: | ---: | ---: | "
      "---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n");
  const Mix& mix = mixes.front();
  for (const std::int64_t w : opt.ranks) {
    for (const std::int64_t docs : opt.docs) {
      const std::int64_t t = 16384;
      const ScheduleRequest request = speed_request(mix, w, docs, *profile);
      std::int64_t tokens = 0;
      for (const std::int64_t len : request.doc_lengths) tokens += len;
      const int reps = tokens < 50'000'000 ? 5 : 1;
      double decide[3] = {0, 0, 0};
      for (std::size_t s = 0; s < 3; ++s) {
        std::vector<double> times;
        for (int rep = 0; rep < reps; ++rep) {
          const double t0 = cpu_seconds();
          fulcrum::Result<Schedule> schedule = scheds[s].decide(request);
          times.push_back(cpu_seconds() - t0);
          if (!schedule) {
            std::fprintf(stderr, "%s failed: %s\n", std::string(scheds[s].name).c_str(),
                         schedule.status().message().c_str());
            return 1;
          }
        }
        decide[s] = median(times);
      }
      std::vector<double> plans, guards, expands, wholes;
      fulcrum::GuardTrace trace;
      for (int rep = 0; rep < std::min(reps, 3); ++rep) {
        fulcrum::Result<Schedule> schedule = fulcrum::decide_hybrid(request);
        if (!schedule) return 1;
        double step = 0;
        const double p0 = cpu_seconds();
        if (!fulcrum::plan_hybrid_compact(request, *schedule, step)) return 1;
        const double p1 = cpu_seconds();
        trace.steps.clear();
        if (!fulcrum::keep_fastest_of_baselines(request, *schedule, step, &trace)) return 1;
        const double p2 = cpu_seconds();
        if (!fulcrum::expand_hybrid_plans(request, *schedule)) return 1;
        const double p3 = cpu_seconds();
        plans.push_back(p1 - p0);
        guards.push_back(p2 - p1);
        expands.push_back(p3 - p2);
        const double w0 = cpu_seconds();
        fulcrum::Result<Schedule> whole = fulcrum::run_schedule_strategy("hybrid", request);
        wholes.push_back(cpu_seconds() - w0);
        if (!whole) return 1;
      }
      const std::string planned = guard_steps(trace);
      const CompactTimes compact = compact_times(request, std::min(reps, 3));
      if (compact.whole < 0 || compact.own < 0) return 1;
      std::printf(
          "| %s | %lld | %lld | %lld | %lld | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %s "
          "| %.3f | %.3f |\n",
          mix.name.c_str(), static_cast<long long>(w), static_cast<long long>(t),
          static_cast<long long>(docs), static_cast<long long>(tokens), 1e3 * decide[2],
          1e3 * median(plans), 1e3 * median(guards), 1e3 * median(expands), 1e3 * median(wholes),
          1e3 * compact.whole, 1e3 * compact.own, planned.c_str(), 1e3 * decide[1],
          1e3 * decide[0]);
      std::fflush(stdout);
    }
  }
  return 0;
}

// One seeded random batch of the win-share suite: W from 2 to 1024 (primes
// included), T from 1K to 32K, block 128, every dense mask, 1 to 2,000
// documents of one block to 1M tokens (log-uniform), at most 8 W T tokens.
ScheduleRequest suite_request(fulcrum::SplitMix64& rng, const CostProfile& profile) {
  const auto pick = [&](const std::vector<std::int64_t>& v) { return v[rng.next() % v.size()]; };
  const auto log_uniform = [&](std::int64_t lo, std::int64_t hi) {
    const double u = static_cast<double>(rng.next() >> 11) / 9007199254740992.0;
    const double v =
        std::exp(std::log(static_cast<double>(lo)) +
                 u * (std::log(static_cast<double>(hi)) - std::log(static_cast<double>(lo))));
    return std::clamp<std::int64_t>(std::llround(v), lo, hi);
  };
  ScheduleRequest r;
  r.world_size =
      static_cast<std::int32_t>(pick({2,  3,  4,  5,   7,   8,   11,  13,  16,  31,   32,
                                      61, 64, 97, 127, 128, 251, 256, 509, 512, 1021, 1024}));
  r.max_tokens_per_rank = pick({1024, 2048, 4096, 8192, 16384, 32768});
  r.block_size = 128;
  switch (rng.next() % 4) {
    case 0:
      r.mask = fulcrum::MaskSpec::causal();
      break;
    case 1:
      r.mask = fulcrum::MaskSpec::full();
      break;
    case 2:
      r.mask = fulcrum::MaskSpec::sliding(log_uniform(1, 4 * r.max_tokens_per_rank));
      break;
    default:
      r.mask = fulcrum::MaskSpec::prefix(log_uniform(1, 4 * r.max_tokens_per_rank));
      break;
  }
  r.profile = profile;
  const std::int64_t docs = log_uniform(1, 2000);
  const std::int64_t cap = 8 * static_cast<std::int64_t>(r.world_size) * r.max_tokens_per_rank;
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < docs && total < cap; ++i) {
    r.doc_lengths.push_back(log_uniform(128, 1'000'000));
    total += r.doc_lengths.back();
  }
  return r;
}

// Hybrid's own placement (decide, plan_hybrid_slots: before the guard)
// against both baselines in full, on --suite N random batches per profile.
int suite(const Options& opt) {
  const auto scheds = fulcrum::schedule_strategies();
  std::printf(
      "| profile | batches | own placement no slower than both | than fixed | than megatron_dcp | "
      "worst own / best baseline | median own / bound | own plan ms: median, 99th, most |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::string& profile_arg : opt.profiles) {
    const fulcrum::Result<CostProfile> profile = fulcrum::host::resolve_cost_profile(profile_arg);
    if (!profile) {
      std::fprintf(stderr, "fulcrum_bench_schedule: %s\n", profile.status().message().c_str());
      return 2;
    }
    fulcrum::SplitMix64 rng(20261126);
    int wins = 0, vs_fixed = 0, vs_dcp = 0, n = 0;
    double worst = 0;
    std::vector<double> gap;
    std::vector<double> plan_ms;  // own placement: decide and plan, thread CPU time
    // FULCRUM_SUITE_DUMP=b: batch b's request and schedules on stderr, the
    // batches before it drawn (the same sequence) but not planned, and the
    // table's line for batch b alone.
    const char* dump = std::getenv("FULCRUM_SUITE_DUMP");
    char* end = nullptr;
    const long dumped = dump != nullptr ? std::strtol(dump, &end, 10) : -1;
    if (dump != nullptr && (end == dump || *end != '\0' || dumped < 0 || dumped >= opt.suite)) {
      std::fprintf(stderr,
                   "fulcrum_bench_schedule: FULCRUM_SUITE_DUMP=%s names no batch of "
                   "--suite %d; give 0 to %d\n",
                   dump, opt.suite, opt.suite - 1);
      return 2;
    }
    for (int b = 0; b < opt.suite; ++b) {
      const ScheduleRequest r = suite_request(rng, *profile);
      if (dump != nullptr && b != dumped) continue;
      if (dump != nullptr) {
        std::fprintf(stderr, "%s batch %d: W %d, T %lld, mask %d (%lld), %zu documents:",
                     profile->name.c_str(), b, r.world_size,
                     static_cast<long long>(r.max_tokens_per_rank), static_cast<int>(r.mask.kind),
                     static_cast<long long>(r.mask.param), r.doc_lengths.size());
        for (const std::int64_t len : r.doc_lengths) {
          std::fprintf(stderr, " %lld", static_cast<long long>(len));
        }
        std::fprintf(stderr, "\n");
      }
      const double t0 = cpu_seconds();
      fulcrum::Result<Schedule> own = fulcrum::decide_hybrid(r);
      if (!own || !fulcrum::plan_hybrid_slots(r, *own)) {
        std::fprintf(stderr, "suite batch %d: hybrid failed\n", b);
        return 1;
      }
      plan_ms.push_back(1e3 * (cpu_seconds() - t0));
      const double mine = fulcrum::evaluate_schedule(r, *own).step_seconds;
      double steps[2] = {std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::infinity()};
      for (std::size_t s = 0; s < 2; ++s) {
        fulcrum::Result<Schedule> other = fulcrum::run_schedule_strategy(scheds[s].name, r);
        if (other) steps[s] = fulcrum::evaluate_schedule(r, *other).step_seconds;
      }
      if (dump != nullptr) {
        std::vector<std::pair<std::string, Schedule>> all = {{"own", *own}};
        for (std::size_t s = 0; s < 2; ++s) {
          fulcrum::Result<Schedule> other = fulcrum::run_schedule_strategy(scheds[s].name, r);
          if (other) all.emplace_back(std::string(scheds[s].name), *other);
        }
        for (auto& [name, sch] : all) {
          const ScheduleCost c = fulcrum::evaluate_schedule(r, sch);
          std::fprintf(stderr, "%s step %.6g\n", name.c_str(), c.step_seconds);
          for (std::size_t k = 0; k < sch.slots.size() && k < 40; ++k) {
            const auto& sl = sch.slots[k];
            std::fprintf(stderr, "  w%d g=%zu r0=%d plan=%s [%.4g,%.4g] pieces:", sl.wave,
                         sl.ranks.size(), sl.ranks[0], sl.plan.strategy_used.c_str(),
                         c.slots[k].start_seconds, c.slots[k].end_seconds);
            for (const auto& pc : sl.pieces)
              std::fprintf(stderr, " %lld", static_cast<long long>(pc.length));
            std::fprintf(stderr, "\n");
          }
        }
      }
      ++n;
      const bool f = mine <= steps[0];
      const bool d = mine <= steps[1];
      vs_fixed += f;
      vs_dcp += d;
      wins += f && d;
      worst = std::max(worst, mine / std::min(steps[0], steps[1]));
      gap.push_back(mine / fulcrum::step_time_lower_bound(r));
      if (std::getenv("FULCRUM_SUITE_VERBOSE") != nullptr && !(f && d)) {
        std::fprintf(stderr,
                     "lost b=%d W=%d T=%lld mask=%d (%lld) docs=%zu own=%.6g fixed=%.6g dcp=%.6g\n",
                     b, r.world_size, static_cast<long long>(r.max_tokens_per_rank),
                     static_cast<int>(r.mask.kind), static_cast<long long>(r.mask.param),
                     r.doc_lengths.size(), mine, steps[0], steps[1]);
      }
      if (dump != nullptr) break;
    }
    std::sort(plan_ms.begin(), plan_ms.end());
    const double p99 = plan_ms[std::min(plan_ms.size() - 1, plan_ms.size() * 99 / 100)];
    std::printf("| %s | %d | %.1f%% (%d) | %.1f%% | %.1f%% | %.3f | %.3f | %.1f, %.1f, %.1f |\n",
                profile->name.c_str(), n, 100.0 * wins / n, wins, 100.0 * vs_fixed / n,
                100.0 * vs_dcp / n, worst, median(gap), median(plan_ms), p99, plan_ms.back());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--speed") {
      opt.speed = true;
    } else if (arg == "--compact") {
      opt.compact_only = true;
    } else if (arg == "--suite" && has_value) {
      opt.suite = std::atoi(argv[++i]);
      if (opt.suite < 1) {
        std::fprintf(stderr, "fulcrum_bench_schedule: --suite needs a count >= 1, got '%s'\n",
                     argv[i]);
        return 2;
      }
    } else if (arg == "--check") {
      opt.check = true;
    } else if (arg == "--ranks" && has_value) {
      opt.ranks = split_ints(argv[++i]);
    } else if (arg == "--docs" && has_value) {
      opt.docs = split_ints(argv[++i]);
    } else if (arg == "--tokens" && has_value) {
      opt.tokens = split_ints(argv[++i]);
    } else if (arg == "--profiles" && has_value) {
      opt.profiles = split(argv[++i]);
    } else if (arg == "--mixes" && has_value) {
      opt.mixes = split(argv[++i]);
    } else if (arg == "--batches" && has_value) {
      opt.batches = std::atoi(argv[++i]);
    } else if (arg == "--mb" && has_value) {
      opt.micro_batches = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "fulcrum_bench_schedule: unknown or incomplete option '%s'; see the "
                   "options at the top of benchmarks/schedule_quality.cpp\n",
                   arg.c_str());
      return 2;
    }
  }
  if (opt.batches < 1 || opt.micro_batches < 1) {
    std::fprintf(stderr, "fulcrum_bench_schedule: --batches and --mb must be >= 1\n");
    return 2;
  }
  if (opt.compact_only && !opt.speed) {
    std::fprintf(stderr,
                 "fulcrum_bench_schedule: --compact times the compact answer and needs --speed; "
                 "add --speed, or leave --compact out for the quality table\n");
    return 2;
  }
  if (opt.suite > 0) return suite(opt);
  std::string source;
  std::vector<Mix> mixes;
  for (const fulcrum::bench::LengthSet& set : fulcrum::bench::document_mixes(source)) {
    mixes.push_back({set.name, set.lengths});
  }
  mixes.push_back({"lognormal", lognormal_mix(100000, 12345)});
  if (!opt.mixes.empty()) {
    std::vector<Mix> chosen;
    for (const Mix& m : mixes) {
      if (std::find(opt.mixes.begin(), opt.mixes.end(), m.name) != opt.mixes.end()) {
        chosen.push_back(m);
      }
    }
    mixes = std::move(chosen);
  }
  if (mixes.empty()) {
    std::fprintf(stderr, "fulcrum_bench_schedule: no mix left after --mixes\n");
    return 2;
  }
  std::printf("%s; plus lognormal (128..8192, median 1024)\n\n", source.c_str());
  return opt.speed ? speed(opt, mixes) : quality(opt, mixes);
}
