// Slot attention over point-to-point K/V exchange (docs/HYBRID_RUNTIME.md)
// executed, not modelled: whole schedules of every scheduler run on a world of
// W threads, each rank running only its own slots in wave order with no
// barrier between waves (the schedule's wave order is the only
// synchronisation). Per scheduler and W:
//   - K/V bytes each rank actually received in the forward exchanges against
//     the cost model's bytes_received (equal by construction, counted here
//     from the tensors handed to the exchange), against the all-gather of the
//     same slots, and against the all-gathers of the `fixed` schedule;
//   - bookkeeping per rank (deciding and planning the schedule, which every
//     rank does from the replicated batch, plus building each slot's tile
//     schedule, exchange plan and index tensors) against the CPU time of the
//     rank's attention forward and backward.
// Global batches are documents drawn with replacement from the shared mixes
// (../shared/workloads, found from the project root) or, when absent, from a
// seeded lognormal mix; the line "workloads:" says which. Compute is timed as
// the thread's CPU time (the machine is shared); ATen and OpenBLAS are pinned
// to one thread.
//
//   build/release/bin/fulcrum_bench_slot_exchange
//   options: --ranks 4,8  --tokens 1024 (T)  --batches 2  --heads 4  --dim 32
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attention/sharding.h"
#include "attention/slot_attention.h"
#include "comm/thread_communicator.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"
#include "runtime_bench_util.h"
#include "strategies/schedule_strategies.h"
#include "workloads.h"

namespace {

using namespace fulcrum;
using namespace fulcrum::attention;

struct Options {
  std::vector<std::int64_t> ranks = {4, 8};
  std::int64_t tokens = 1024;
  int batches = 2;
  std::int64_t heads = 4;
  std::int64_t dim = 32;
};

std::vector<std::int64_t> split_ints(const char* text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

std::vector<std::int64_t> lognormal_mix(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> length(std::log(1024.0), 1.0);
  std::vector<std::int64_t> lengths(count);
  for (auto& len : lengths) len = std::clamp<std::int64_t>(std::llround(length(rng)), 128, 8192);
  return lengths;
}

struct RankResult {
  std::int64_t received = 0;    // forward K/V bytes, measured
  std::int64_t predicted = 0;   // the cost model's bytes_received, summed over its slots
  double setup_cpu_ms = 0;      // SlotAttention::create of its slots
  double attention_cpu_ms = 0;  // forward + backward of its slots
  int slots = 0;
  std::string error;
};

// Runs every slot of `schedule` on a world of W threads; rank r runs its
// slots in wave order and nothing else.
std::vector<RankResult> execute(const ScheduleRequest& request, const Schedule& schedule,
                                const ScheduleCost& cost, const Options& opt) {
  const int w = request.world_size;
  const auto world = comm::make_thread_group(w, "world", std::chrono::seconds(600));
  std::vector<RankResult> results(static_cast<std::size_t>(w));
  std::vector<std::thread> threads;
  for (int r = 0; r < w; ++r) {
    threads.emplace_back([&, r] {
      RankResult& out = results[static_cast<std::size_t>(r)];
      try {
        std::vector<std::size_t> mine;
        for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
          const auto& ranks = schedule.slots[s].ranks;
          if (std::find(ranks.begin(), ranks.end(), r) != ranks.end()) mine.push_back(s);
        }
        std::stable_sort(mine.begin(), mine.end(), [&](std::size_t a, std::size_t b) {
          return schedule.slots[a].wave < schedule.slots[b].wave;
        });
        for (const std::size_t s : mine) {
          const ScheduleSlot& slot = schedule.slots[s];
          const CpWorkload row = slot_workload(request, slot);
          double start = bench::thread_cpu_ms();
          auto attention = SlotAttention::create(row, slot.plan, slot.ranks, world[r]);
          out.setup_cpu_ms += bench::thread_cpu_ms() - start;
          if (!attention) throw std::runtime_error(attention.status().message());
          const std::int32_t m = (*attention)->member();
          const auto opts = at::TensorOptions().dtype(at::kFloat);
          const at::Tensor q = at::randn({slot.plan.shard_len, opt.heads, opt.dim}, opts);
          const at::Tensor k = at::randn({slot.plan.shard_len, opt.heads, opt.dim}, opts);
          const at::Tensor v = at::randn({slot.plan.shard_len, opt.heads, opt.dim}, opts);
          const at::Tensor dout = at::randn({slot.plan.shard_len, opt.heads, opt.dim}, opts);
          start = bench::thread_cpu_ms();
          const SlotForward f = (*attention)->forward(q, k, v);
          (*attention)->backward(q, f, dout);
          out.attention_cpu_ms += bench::thread_cpu_ms() - start;
          out.received += (*attention)->last_forward().bytes_received;
          out.predicted += cost.slots[s].members[static_cast<std::size_t>(m)].bytes_received;
          ++out.slots;
        }
      } catch (const std::exception& e) {
        out.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// The command line; false (after one line on stderr) when it is not valid.
bool parse_options(int argc, char** argv, Options& opt) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--ranks" && has_value) {
      opt.ranks = split_ints(argv[++i]);
    } else if (arg == "--tokens" && has_value) {
      opt.tokens = std::atoll(argv[++i]);
    } else if (arg == "--batches" && has_value) {
      opt.batches = std::atoi(argv[++i]);
    } else if (arg == "--heads" && has_value) {
      opt.heads = std::atoll(argv[++i]);
    } else if (arg == "--dim" && has_value) {
      opt.dim = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "fulcrum_bench_slot_exchange: unknown or incomplete option '%s'; options: "
                   "--ranks 4,8 --tokens N --batches N --heads N --dim N\n",
                   arg.c_str());
      return false;
    }
  }
  if (opt.tokens < 16 || opt.batches < 1 || opt.heads < 1 || opt.dim < 1 || opt.ranks.empty()) {
    std::fprintf(stderr,
                 "fulcrum_bench_slot_exchange: --tokens must be >= 16 and --batches, --heads, "
                 "--dim >= 1; got %lld, %d, %lld, %lld\n",
                 static_cast<long long>(opt.tokens), opt.batches, static_cast<long long>(opt.heads),
                 static_cast<long long>(opt.dim));
    return false;
  }
  return true;
}

// The ranks' figures of one schedule: bytes summed and at the busiest rank,
// the slowest setup and attention, and the worst bookkeeping / attention.
struct Totals {
  std::int64_t received = 0, predicted = 0, most = 0;
  double worst_ratio = 0, setup_max = 0, attention_max = 0;
};

Totals summarize(const std::vector<RankResult>& ranks, double plan_ms) {
  Totals t;
  for (const RankResult& r : ranks) {
    t.received += r.received;
    t.predicted += r.predicted;
    t.most = std::max(t.most, r.received);
    t.setup_max = std::max(t.setup_max, r.setup_cpu_ms);
    t.attention_max = std::max(t.attention_max, r.attention_cpu_ms);
    if (r.attention_cpu_ms > 0) {
      t.worst_ratio = std::max(t.worst_ratio, (plan_ms + r.setup_cpu_ms) / r.attention_cpu_ms);
    }
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_options(argc, argv, opt)) return 2;
  std::printf("%s\n", bench::use_one_core().c_str());
  std::string source;
  std::vector<bench::LengthSet> mixes = bench::document_mixes(source);
  if (mixes.size() == 1 && mixes[0].name == "synthetic") {
    mixes = {{"lognormal", lognormal_mix(20000, 5)}};
  }
  std::printf("%s\n", source.c_str());
  std::printf(
      "heads %lld, head dim %lld, float32, B 128, causal; T = %lld tokens per rank; "
      "a batch is documents drawn until it holds at least W x T tokens\n\n",
      static_cast<long long>(opt.heads), static_cast<long long>(opt.dim),
      static_cast<long long>(opt.tokens));
  std::printf(
      "| mix | W | batch | scheduler | slots (max g) | received = model | received MiB (max rank) "
      "| all-gather of same slots MiB | fixed's all-gather MiB | schedule CPU ms | slot setup CPU "
      "ms (max rank) | attention CPU ms (max rank) | bookkeeping / attention (worst rank) "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool all_equal = true;
  for (const bench::LengthSet& mix : mixes) {
    for (const std::int64_t w : opt.ranks) {
      std::mt19937_64 rng(11 + static_cast<std::uint64_t>(w));
      for (int b = 0; b < opt.batches; ++b) {
        ScheduleRequest request;
        request.world_size = static_cast<std::int32_t>(w);
        request.max_tokens_per_rank = opt.tokens;
        request.block_size = 128;
        request.mask = MaskSpec::causal();
        request.profile = builtin_cost_profile("cpu_gloo").value();
        request.profile.kv_bytes_per_token = static_cast<double>(opt.heads * 2 * opt.dim * 4);
        request.doc_lengths = bench::draw_batch(mix.lengths, w * opt.tokens, rng);
        double fixed_allgather = 0;
        for (const std::string& name : schedule_strategy_names()) {
          const double plan_start = bench::thread_cpu_ms();
          const Result<Schedule> schedule = run_schedule_strategy(name, request);
          const double plan_ms = bench::thread_cpu_ms() - plan_start;
          if (!schedule) {
            std::fprintf(stderr, "%s W=%lld batch %d: %s failed: %s\n", mix.name.c_str(),
                         static_cast<long long>(w), b, name.c_str(),
                         schedule.status().message().c_str());
            return 1;
          }
          const ScheduleCost cost = evaluate_schedule(request, *schedule);
          if (name == "fixed") fixed_allgather = static_cast<double>(cost.allgather_bytes);
          const std::vector<RankResult> ranks = execute(request, *schedule, cost, opt);
          for (std::size_t r = 0; r < ranks.size(); ++r) {
            if (ranks[r].error.empty()) continue;
            std::fprintf(stderr, "rank %zu: %s\n", r, ranks[r].error.c_str());
            return 1;
          }
          const Totals t = summarize(ranks, plan_ms);
          std::size_t widest = 0;
          for (const ScheduleSlot& s : schedule->slots) widest = std::max(widest, s.ranks.size());
          const bool equal = t.received == t.predicted && t.received == cost.bytes_moved;
          all_equal = all_equal && equal;
          const double mib = 1024.0 * 1024.0;
          std::printf(
              "| %s | %lld | %d | %s | %zu (%zu) | %s | %.2f (%.2f) | %.2f | %.2f | %.2f | %.2f | "
              "%.0f | "
              "%.2f%% |\n",
              mix.name.c_str(), static_cast<long long>(w), b, name.c_str(), schedule->slots.size(),
              widest, equal ? "yes" : "NO", static_cast<double>(t.received) / mib,
              static_cast<double>(t.most) / mib, static_cast<double>(cost.allgather_bytes) / mib,
              fixed_allgather / mib, plan_ms, t.setup_max, t.attention_max, 100.0 * t.worst_ratio);
          std::fflush(stdout);
        }
      }
    }
  }
  return all_equal ? 0 : 1;
}
