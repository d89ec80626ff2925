// The comparison's figures from every rank's measured slot times
// (docs/HYBRID_RUNTIME.md, "Comparing schedulers"): per-rank min and median,
// the critical path replayed on the schedule's own timeline, speed-ups over
// the planner's fixed with their spread. No LibTorch.
#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "train/metrics.h"

namespace fulcrum::train {

double replay_critical_path(const std::vector<std::vector<std::int32_t>>& slot_ranks,
                            const std::vector<std::int32_t>& waves,
                            const std::vector<std::vector<double>>& member_ms) {
  std::vector<std::size_t> order(slot_ranks.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return waves[a] < waves[b]; });
  std::map<std::int32_t, double> free_at;  // rank -> when its last slot ends
  double end = 0.0;
  for (const std::size_t s : order) {
    double start = 0.0, length = 0.0;
    for (std::size_t m = 0; m < slot_ranks[s].size(); ++m) {
      start = std::max(start, free_at[slot_ranks[s][m]]);
      if (m < member_ms[s].size()) length = std::max(length, member_ms[s][m]);
    }
    for (const std::int32_t r : slot_ranks[s]) free_at[r] = start + length;
    end = std::max(end, start + length);
  }
  return end;
}

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// [rep][slot][member] times of one compared scheduler.
using SlotTimes = std::vector<std::vector<std::vector<double>>>;

// What every rank measured for compared scheduler k, placed by repetition,
// slot and member: CPU (or device) times, wall times, and each rank's sum
// per repetition.
struct MeasuredRuns {
  SlotTimes times, walls;
  std::vector<std::vector<double>> rank_ms;  // [rank][rep]
};

MeasuredRuns measured_runs(const StepReport::Compared& c, std::size_t k, std::size_t reps,
                           const std::vector<RankStepFigures>& ranks) {
  MeasuredRuns out;
  out.times.assign(reps, std::vector<std::vector<double>>(c.slot_ranks.size()));
  for (auto& per_rep : out.times) {
    for (std::size_t s = 0; s < c.slot_ranks.size(); ++s) {
      per_rep[s].assign(c.slot_ranks[s].size(), 0.0);
    }
  }
  out.walls = out.times;
  out.rank_ms.assign(ranks.size(), std::vector<double>(reps, 0.0));
  for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
    for (const CompareRunFigures& run : ranks[rank].compare) {
      if (run.scheduler != static_cast<std::int32_t>(k) || run.repetition < 0 ||
          static_cast<std::size_t>(run.repetition) >= reps) {
        continue;
      }
      const auto rep = static_cast<std::size_t>(run.repetition);
      for (std::size_t i = 0; i < run.slots.size(); ++i) {
        const auto s = static_cast<std::size_t>(run.slots[i]);
        if (s >= c.slot_ranks.size()) continue;
        const auto& members = c.slot_ranks[s];
        const auto m = static_cast<std::size_t>(
            std::find(members.begin(), members.end(), static_cast<std::int32_t>(rank)) -
            members.begin());
        if (m < members.size()) {
          out.times[rep][s][m] = run.slot_ms[i];
          out.walls[rep][s][m] = run.slot_wall_ms[i];
        }
        out.rank_ms[rank][rep] += run.slot_ms[i];
      }
    }
  }
  return out;
}

// Each member's median slot time over the repetitions: [slot][member].
std::vector<std::vector<double>> member_medians(const SlotTimes& t) {
  std::vector<std::vector<double>> per_slot(t.empty() ? 0 : t.front().size());
  for (std::size_t s = 0; s < per_slot.size(); ++s) {
    for (std::size_t m = 0; m < t.front()[s].size(); ++m) {
      std::vector<double> v;
      for (const auto& rep : t) v.push_back(rep[s][m]);
      per_slot[s].push_back(median_of(v));
    }
  }
  return per_slot;
}

CompareResult one_scheduler(const StepReport::Compared& c, const MeasuredRuns& runs) {
  CompareResult r;
  r.scheduler = c.scheduler;
  r.used = c.used;
  r.predicted_ms = c.predicted_ms;
  for (const auto& members : c.slot_ranks) {
    r.groups.push_back(static_cast<std::int32_t>(members.size()));
  }
  r.slot_ranks = c.slot_ranks;
  r.waves = c.waves;
  for (std::size_t rank = 0; rank < runs.rank_ms.size(); ++rank) {
    const std::vector<double>& mine = runs.rank_ms[rank];
    const double median = median_of(mine);
    const double predicted = rank < c.predicted_rank_ms.size() ? c.predicted_rank_ms[rank] : 0;
    r.rank_min_ms.push_back(*std::min_element(mine.begin(), mine.end()));
    r.rank_median_ms.push_back(median);
    r.rank_predicted_ms.push_back(predicted);
    r.prediction_error.push_back(predicted > 0 ? (median - predicted) / predicted : 0.0);
    r.max_rank_ms = std::max(r.max_rank_ms, median);
  }
  r.critical_path_ms = replay_critical_path(c.slot_ranks, c.waves, member_medians(runs.times));
  r.critical_path_wall_ms = replay_critical_path(c.slot_ranks, c.waves, member_medians(runs.walls));
  for (const auto& rep : runs.times) {
    r.repetition_critical_path_ms.push_back(replay_critical_path(c.slot_ranks, c.waves, rep));
  }
  return r;
}

// Speed-ups over `base` (the planner's fixed): of the median critical paths,
// their min and max repetition by repetition, and the cost model's.
void add_speedups(const CompareResult& base, CompareResult& r) {
  if (r.critical_path_ms > 0)
    r.measured_speedup_over_fixed = base.critical_path_ms / r.critical_path_ms;
  if (r.predicted_ms > 0) r.predicted_speedup_over_fixed = base.predicted_ms / r.predicted_ms;
  bool first = true;
  for (std::size_t rep = 0; rep < r.repetition_critical_path_ms.size(); ++rep) {
    if (!(r.repetition_critical_path_ms[rep] > 0)) continue;
    const double ratio = base.repetition_critical_path_ms[rep] / r.repetition_critical_path_ms[rep];
    r.speedup_min = first ? ratio : std::min(r.speedup_min, ratio);
    r.speedup_max = first ? ratio : std::max(r.speedup_max, ratio);
    first = false;
  }
}

}  // namespace

std::vector<CompareResult> compare_results(const StepReport& step,
                                           const std::vector<RankStepFigures>& ranks) {
  std::vector<CompareResult> out;
  const auto reps = static_cast<std::size_t>(std::max<std::int64_t>(step.repetitions, 1));
  for (std::size_t k = 0; k < step.compared.size(); ++k) {
    const StepReport::Compared& c = step.compared[k];
    out.push_back(one_scheduler(c, measured_runs(c, k, reps, ranks)));
  }
  const auto fixed = std::find_if(out.begin(), out.end(),
                                  [](const CompareResult& r) { return r.scheduler == "fixed"; });
  if (fixed == out.end()) return out;
  const CompareResult base = *fixed;
  for (CompareResult& r : out) add_speedups(base, r);
  return out;
}

}  // namespace fulcrum::train
