// The price of Megatron-core's dynamic-CP constraints (docs/INTEGRATION.md):
// predicted step time, by the cost model of docs/HYBRID.md, of `hybrid`
// under Megatron's group shapes (aligned power-of-two groups below
// 2^floor(log2 W) and the world, every rank in every micro-batch) against
// `megatron_dcp` and against unconstrained `hybrid`, on the same batches;
// and how many megatron_dcp schedules use a group Megatron's runtime does
// not have.
//
// Batches as fulcrum_bench_schedule draws them (mb x W x T tokens from each
// mix, ../shared/workloads when found, and the lognormal mix), each document
// clipped to W x T: Megatron cannot split a sample, so its datasets stop at
// that length.
//
// Run from the project root:
//   build/release/bin/fulcrum_bench_megatron                  # W = 8, 16, 64
// Options: --ranks 8,16,64  --tokens 8192,16384  --batches N  --mb M
//          --profile h100_7b|h100_7b_fa3|h100_7b_nccl|cpu_gloo|FILE
//          --vpp K (wave count a multiple of K)
// Prints a markdown table. Exits 1 when a scheduler fails on a batch. Where
// Megatron's scheduler fails, megatron_dcp serves fixed's schedule; such a
// batch is named on stderr and left out of the table.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/host/cost_profile_file.h"
#include "strategies/schedule_strategies.h"
#include "workloads.h"

namespace {

using fulcrum::GroupShapes;
using fulcrum::Schedule;
using fulcrum::ScheduleRequest;

// Comma-separated integers; false on anything else (empty, junk, overflow).
bool split_ints(const char* text, std::vector<std::int64_t>& out) {
  out.clear();
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE) return false;
    out.push_back(v);
  }
  return !out.empty();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Megatron-core's communicators at W = DP x CP (parallel_state.py,
// create_dynamic_dp_cp_groups): 2^k for k < floor(log2 W), aligned blocks,
// and the whole DP x CP group.
GroupShapes megatron_shapes(std::int64_t world, std::int32_t vpp) {
  GroupShapes s;
  std::int32_t floor_log = 0;
  while ((std::int64_t{2} << floor_log) <= world) ++floor_log;
  for (std::int32_t k = 0; k < floor_log; ++k) s.sizes |= std::uint64_t{1} << k;
  s.world = true;
  s.aligned = true;
  s.every_wave = true;
  s.wave_multiple = vpp;
  return s;
}

struct Run {
  bool ok = false;
  std::string error;
  double step = 0;
  Schedule schedule;
};

Run run(std::string_view name, const ScheduleRequest& request) {
  Run r;
  fulcrum::Result<Schedule> s = fulcrum::run_schedule_strategy(name, request);
  if (!s) {
    r.error = s.status().message();
    return r;
  }
  if (fulcrum::Status v = fulcrum::validate_schedule(request, *s); !v) {
    r.error = "invalid schedule: " + v.message();
    return r;
  }
  r.ok = true;
  r.step = fulcrum::evaluate_schedule(request, *s).step_seconds;
  r.schedule = std::move(*s);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> ranks = {8, 16, 64};
  std::vector<std::int64_t> tokens = {8192, 16384};
  std::string profile_arg = "h100_7b";
  int batches = 5;
  int mb = 4;
  int vpp = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    bool good = has_value;
    if (arg == "--ranks" && has_value) {
      good = split_ints(argv[++i], ranks);
    } else if (arg == "--tokens" && has_value) {
      good = split_ints(argv[++i], tokens);
    } else if (arg == "--profile" && has_value) {
      profile_arg = argv[++i];
    } else if (arg == "--batches" && has_value) {
      good = fulcrum::bench::parse_int(argv[++i], 1, 100000, batches);
    } else if (arg == "--mb" && has_value) {
      good = fulcrum::bench::parse_int(argv[++i], 1, 1024, mb);
    } else if (arg == "--vpp" && has_value) {
      good = fulcrum::bench::parse_int(argv[++i], 1, 1024, vpp);
    } else {
      good = false;
    }
    if (!good) {
      std::fprintf(stderr,
                   "fulcrum_bench_megatron: option '%s' is unknown, incomplete or has a bad "
                   "value; see the options at the top of benchmarks/megatron_shapes.cpp\n",
                   arg.c_str());
      return 2;
    }
  }
  for (const std::int64_t w : ranks) {
    if (w < 2 || w > 4096 || w % 2) {
      std::fprintf(stderr,
                   "fulcrum_bench_megatron: --ranks %lld: Megatron's dynamic CP needs "
                   "an even DP x CP; give even values in [2, 4096]\n",
                   static_cast<long long>(w));
      return 2;
    }
  }
  for (const std::int64_t t : tokens) {
    if (t < 1 || t > (std::int64_t{1} << 24)) {
      std::fprintf(stderr, "fulcrum_bench_megatron: --tokens %lld is outside [1, 2^24]\n",
                   static_cast<long long>(t));
      return 2;
    }
  }
  for (const std::int64_t w : ranks) {
    for (const std::int64_t t : tokens) {
      if (static_cast<double>(mb) * static_cast<double>(w) * static_cast<double>(t) >
          4294967296.0) {
        std::fprintf(stderr,
                     "fulcrum_bench_megatron: --mb x W x T = %d x %lld x %lld tokens per "
                     "batch exceeds 2^32; lower one of them\n",
                     mb, static_cast<long long>(w), static_cast<long long>(t));
        return 2;
      }
    }
  }
  const fulcrum::Result<fulcrum::CostProfile> profile =
      fulcrum::host::resolve_cost_profile(profile_arg);
  if (!profile) {
    std::fprintf(stderr, "fulcrum_bench_megatron: %s\n", profile.status().message().c_str());
    return 2;
  }
  std::string source;
  const std::vector<fulcrum::bench::LengthSet> mixes = fulcrum::bench::document_mixes(source);
  std::printf("%s; profile %s; %d batches of %d micro-batches' worth of tokens per rank%s\n\n",
              source.c_str(), profile->name.c_str(), batches, mb,
              vpp > 1 ? (", waves a multiple of " + std::to_string(vpp)).c_str() : "");
  std::printf(
      "| mix | W | T | docs/batch | megatron_dcp / shaped hybrid: median, worst | shaped / "
      "unconstrained hybrid: median, worst | shaped gap to bound: median, worst | "
      "megatron_dcp schedules outside Megatron's groups | shaped hybrid returned megatron_dcp's "
      "|\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  int failures = 0;
  for (const fulcrum::bench::LengthSet& mix : mixes) {
    for (const std::int64_t w : ranks) {
      for (const std::int64_t t : tokens) {
        std::mt19937_64 rng(static_cast<std::uint64_t>(w * 1000003 + t));
        std::vector<double> vs_dcp, price, gap;
        int outside = 0;
        int returned = 0;
        double docs = 0;
        for (int b = 0; b < batches; ++b) {
          ScheduleRequest request;
          request.doc_lengths = fulcrum::bench::draw_batch(mix.lengths, mb * w * t, rng);
          for (std::int64_t& len : request.doc_lengths) len = std::min(len, w * t);
          docs += static_cast<double>(request.doc_lengths.size());
          request.world_size = static_cast<std::int32_t>(w);
          request.max_tokens_per_rank = t;
          request.profile = *profile;
          ScheduleRequest shaped = request;
          shaped.group_shapes = megatron_shapes(w, vpp);
          const Run dcp = run("megatron_dcp", request);
          const Run free_hybrid = run("hybrid", request);
          const Run shaped_hybrid = run("hybrid", shaped);
          for (const Run* r : {&dcp, &free_hybrid, &shaped_hybrid}) {
            if (!r->ok) {
              ++failures;
              std::fprintf(stderr, "%s W=%lld T=%lld batch %d: %s\n", mix.name.c_str(),
                           static_cast<long long>(w), static_cast<long long>(t), b,
                           r->error.c_str());
            }
          }
          if (!dcp.ok || !free_hybrid.ok || !shaped_hybrid.ok) continue;
          if (dcp.schedule.strategy_used != "megatron_dcp") {
            std::fprintf(stderr, "%s W=%lld T=%lld batch %d: left out: %s\n", mix.name.c_str(),
                         static_cast<long long>(w), static_cast<long long>(t), b,
                         dcp.schedule.fallback_reason.c_str());
            continue;
          }
          vs_dcp.push_back(dcp.step / shaped_hybrid.step);
          price.push_back(shaped_hybrid.step / free_hybrid.step);
          gap.push_back(shaped_hybrid.step / fulcrum::step_time_lower_bound(request) - 1);
          // Megatron's runtime needs its groups and every rank in every wave.
          ScheduleRequest check = shaped;
          check.group_shapes.wave_multiple = 1;
          if (!fulcrum::validate_schedule(check, dcp.schedule)) ++outside;
          if (!shaped_hybrid.schedule.fallback_reason.empty()) ++returned;
        }
        if (vs_dcp.empty()) continue;
        std::printf(
            "| %s | %lld | %lld | %.0f | %.3f, %.3f | %.3f, %.3f | %.1f%%, %.1f%% | "
            "%d of %zu | %d |\n",
            mix.name.c_str(), static_cast<long long>(w), static_cast<long long>(t), docs / batches,
            median(vs_dcp), *std::min_element(vs_dcp.begin(), vs_dcp.end()), median(price),
            *std::max_element(price.begin(), price.end()), 100 * median(gap),
            100 * *std::max_element(gap.begin(), gap.end()), outside, vs_dcp.size(), returned);
        std::fflush(stdout);
      }
    }
  }
  return failures ? 1 : 0;
}
