// The `auto` CP strategy: per micro-batch, the best plan by the work models.
//
// It builds the balanced plan (exact work from its unit sums), then compares
// it with head_tail (when N % 2P == 0) and contiguous, scoring those only
// when their pairs imbalance, a lower bound on their score that costs
// O(P + documents), leaves them a chance. When the row is too short for
// block units to balance (few blocks per rank) it also tries the balanced
// planner on smaller units. The score is max(pairs imbalance, tiles over
// ideal); a candidate replaces the current best only when strictly better,
// in the order balanced, balanced_token, head_tail, contiguous.
//
// strategy_used names the planner whose positions were returned, and when
// that is a registered strategy the positions are exactly its plan:
// "balanced", "head_tail" or "contiguous" (also for P == 1, where the
// identity is the only sensible plan); "balanced_token" is the balanced
// planner on units smaller than a block, which has no registry entry of its
// own. fallback_reason stays empty: auto chose, it did not fall back.
//
// auto fills plan.work itself from the unit sums or the run evaluator, both
// exact (the tests compare them with compute_work and brute-force recounts),
// so the hot path never walks the row token by token except to write the
// positions.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

// The promise: pairs imbalance and tiles over ideal both at most this.
constexpr double kTarget = 1.01;
// Below this many blocks per rank, block units may not balance: also try
// smaller units. Above it block units meet the target on real mixes and the
// extra candidates would only cost time.
constexpr std::int64_t kShortBlocksPerRank = 8;
// Finer units stop at this many per rank: past it the unit-level balancer
// and the exact recount grow with N for nothing a short row still gains.
constexpr std::int64_t kMaxTokenUnitsPerRank = 256;

using Candidate = detail::AutoChoice;

// pairs max / mean of a run plan: a lower bound on its score, from range sums.
double pairs_imbalance(const CpWorkload& w, const RowLayout& layout, const detail::RunPlan& plan,
                       std::int64_t total_pairs) {
  if (total_pairs <= 0) return 1.0;
  std::int64_t top = 0;
  for (std::int32_t r = 0; r < plan.ranks; ++r) {
    std::int64_t pairs = 0;
    for (std::int64_t i = plan.rank_offset[r]; i < plan.rank_offset[r + 1]; ++i) {
      const detail::Run& run = plan.runs[static_cast<std::size_t>(i)];
      if (run.begin != kPadPosition) {
        pairs += detail::range_pairs(w, layout, run.begin, run.begin + run.length);
      }
    }
    top = std::max(top, pairs);
  }
  return static_cast<double>(top) * plan.ranks / total_pairs;
}

}  // namespace

namespace detail {

Result<AutoChoice> auto_choice(const CpWorkload& w) {
  if (Status status = validate_workload(w); !status) return status;
  const RowLayout layout(w);
  const std::int64_t n = w.tokens;
  const std::int32_t p = w.cp_size;
  const bool sparse = w.mask.kind == MaskKind::kBlockSparse;
  if (p == 1) {
    Candidate only{"contiguous", detail::contiguous_runs(n, 1), {}, 1.0};
    if (sparse) {
      only.work = compute_work(w, detail::materialize(only.runs));
    } else {
      only.work = detail::run_work(w, layout, only.runs);
    }
    return only;
  }

  detail::Balanced balanced = detail::balance_row(w, layout);
  const std::int64_t total_pairs = balanced.total_pairs;
  const std::int64_t unsharded_tiles = balanced.unsharded_tiles;
  Candidate best{"balanced", std::move(balanced.runs), std::move(balanced.work), balanced.score};
  const auto take_if_better = [&best](Candidate&& candidate) {
    if (candidate.score < best.score) best = std::move(candidate);
  };

  const std::int64_t blocks = ceil_div(n, w.block_size);
  if (!sparse && best.score > kTarget && blocks < kShortBlocksPerRank * p) {
    // Smaller units balance pairs more finely, but distant units sharing a
    // local block pay for both key ranges: each is scored exactly. Halving
    // stops at the target, when a halving no longer helps, or at
    // kMaxTokenUnitsPerRank units per rank.
    double previous = best.score;
    for (std::int64_t unit = w.block_size / 2; unit >= 1; unit /= 2) {
      detail::Balanced t = detail::balance_units(w, layout, detail::aligned_units(w, layout, unit),
                                                 total_pairs, unsharded_tiles);
      const double score = t.score;
      take_if_better(Candidate{"balanced_token", std::move(t.runs), std::move(t.work), score});
      if (best.score <= kTarget || score >= previous ||
          ceil_div(n, unit) >= kMaxTokenUnitsPerRank * p) {
        break;
      }
      previous = score;
    }
  }

  // The anchors' own positions, as runs (head_tail_runs is plan_head_tail's
  // layout, contiguous_runs plan_contiguous's), so strategy_used names them
  // exactly. Their pairs are those of their token sets, a lower bound on
  // their score: only a row on which they might win pays for counting tiles.
  const auto consider = [&](const char* name, detail::RunPlan runs) {
    if (!sparse && pairs_imbalance(w, layout, runs, total_pairs) >= best.score) return;
    std::vector<RankWork> work =
        sparse ? compute_work(w, detail::materialize(runs)) : detail::run_work(w, layout, runs);
    const double score = detail::plan_score(work, total_pairs, unsharded_tiles);
    take_if_better(Candidate{name, std::move(runs), std::move(work), score});
  };
  if (n % (2 * static_cast<std::int64_t>(p)) == 0) {
    consider("head_tail", detail::head_tail_runs(n, p));
  }
  consider("contiguous", detail::contiguous_runs(n, p));
  return best;
}

}  // namespace detail

Result<ShardPlan> plan_auto(const CpWorkload& w) {
  Result<detail::AutoChoice> best = detail::auto_choice(w);
  if (!best) return best.status();
  ShardPlan plan = detail::materialize(best->runs);
  plan.strategy_used = std::move(best->name);
  plan.work = std::move(best->work);
  return plan;
}

}  // namespace fulcrum::cp
