// hybrid's rule 5, planned without positions. A multi-rank slot's plan is
// chosen among CP planners by the cost model; each planner here builds its
// plan as runs of positions (the balanced planner's units, per-document
// head-tail chunks, head-tail, contiguous shards), and core prices the runs
// exactly as evaluate_slot prices the positions (fulcrum/core/slot_runs.h).
// So a slot is planned in O(runs + blocks) and recorded compactly: its plan
// names the rule (strategy_used, and fallback_reason when balanced needed
// more than T per member), cp_size and shard_len, with no positions. Drafts,
// the search and the guard compare compact schedules by their exact step;
// positions are written once, for the schedule returned (expand_slot_plan
// re-runs the named rule, which is deterministic).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/core/slot_runs.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_hybrid_draft.h"

namespace fulcrum::hybrid {
namespace {

using cp::detail::Run;
using cp::detail::RunPlan;

// Each member's runs, in member order, into the plan's flat list.
void append_members(const std::vector<std::vector<Run>>& member, RunPlan& plan) {
  plan.rank_offset.push_back(0);
  for (const auto& runs : member) {
    plan.runs.insert(plan.runs.end(), runs.begin(), runs.end());
    plan.rank_offset.push_back(static_cast<std::int64_t>(plan.runs.size()));
  }
}

// per_document's plan (cp_per_document.cpp) as runs: document by document,
// member r takes chunks r and 2P - 1 - r, the extra tokens dealt round-robin
// across documents; the row is padded to ceil(N / P) per member.
RunPlan per_document_runs(const CpWorkload& w) {
  const std::int32_t p = w.cp_size;
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(p);
  RunPlan plan;
  plan.ranks = p;
  plan.shard_len = ceil_div(w.tokens, p);
  std::vector<std::vector<Run>> member(static_cast<std::size_t>(p));
  std::vector<std::int64_t> size(static_cast<std::size_t>(chunks));
  std::vector<std::int64_t> start(static_cast<std::size_t>(chunks));
  std::int64_t rotation = 0;
  std::int64_t doc_start = 0;
  for (const std::int64_t length : w.doc_lengths) {
    const std::int64_t base = length / chunks;
    const std::int64_t extras = length % chunks;
    std::fill(size.begin(), size.end(), base);
    for (std::int64_t e = 0; e < extras; ++e) {
      const std::int64_t r = (rotation + e) % p;
      ++size[static_cast<std::size_t>(size[r] == base ? r : chunks - 1 - r)];
    }
    rotation = (rotation + extras) % p;
    std::int64_t offset = doc_start;
    for (std::int64_t c = 0; c < chunks; ++c) {
      start[static_cast<std::size_t>(c)] = offset;
      offset += size[static_cast<std::size_t>(c)];
    }
    for (std::int32_t r = 0; r < p; ++r) {
      for (const std::int64_t c : {static_cast<std::int64_t>(r), chunks - 1 - r}) {
        const auto k = static_cast<std::size_t>(c);
        if (size[k] > 0) member[static_cast<std::size_t>(r)].push_back({start[k], size[k]});
      }
    }
    doc_start += length;
  }
  append_members(member, plan);
  return plan;
}

// per_document_padded's (Megatron / TransformerEngine THD) as runs: each
// document padded to 2P chunks of ceil(L / 2P), member r taking chunks r and
// 2P - 1 - r, the padding at the tail of the document's last chunks.
RunPlan per_document_padded_runs(const CpWorkload& w) {
  const std::int32_t p = w.cp_size;
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(p);
  RunPlan plan;
  plan.ranks = p;
  for (const std::int64_t length : w.doc_lengths) plan.shard_len += 2 * ceil_div(length, chunks);
  std::vector<std::vector<Run>> member(static_cast<std::size_t>(p));
  std::int64_t doc_start = 0;
  for (const std::int64_t length : w.doc_lengths) {
    const std::int64_t chunk = ceil_div(length, chunks);
    for (std::int32_t r = 0; r < p; ++r) {
      auto& runs = member[static_cast<std::size_t>(r)];
      for (const std::int64_t c : {static_cast<std::int64_t>(r), chunks - 1 - r}) {
        const std::int64_t real = std::clamp<std::int64_t>(length - c * chunk, 0, chunk);
        if (real > 0) runs.push_back({doc_start + c * chunk, real});
        if (chunk > real) runs.push_back({kPadPosition, chunk - real});
      }
    }
    doc_start += length;
  }
  append_members(member, plan);
  return plan;
}

}  // namespace

std::optional<RunShardPlan> slot_rule_runs(std::string_view rule, const CpWorkload& w) {
  if (rule == "contiguous") return cp::detail::contiguous_runs(w.tokens, w.cp_size);
  if (rule == "balanced") return cp::detail::balance_row(w, RowLayout(w)).runs;
  if (rule == "per_document") return per_document_runs(w);
  if (rule == "per_document_padded") return per_document_padded_runs(w);
  if (rule == "head_tail" && !cp::inapplicable_reason("head_tail", w)) {
    return cp::detail::head_tail_runs(w.tokens, w.cp_size);
  }
  return std::nullopt;
}

namespace {

// per_document_weighted's plan of a slot over two or more nodes: member r's
// weight is D - comm_r under per_document's plan (`priced`, or priced here;
// D the mean of compute + comm over members, the weight at least D / 2), so
// members that exchange more (fewer node-mates) take less work. nullopt on
// one node, where per_document's exchange is even, and where even members
// ending at D would not end 0.5% before `beat` (not worth pricing).
std::optional<RunShardPlan> weighted_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                                          const CpWorkload& w, const SlotCost* priced = nullptr,
                                          double beat = kNoEnd,
                                          std::vector<double>* weights = nullptr) {
  const std::int32_t node = std::max(1, request.profile.ranks_per_node);
  const bool one_node = std::all_of(slot.ranks.begin(), slot.ranks.end(), [&](std::int32_t a) {
    return a / node == slot.ranks.front() / node;
  });
  if (one_node || w.cp_size < 2) return std::nullopt;
  const SlotCost cost = priced ? *priced : evaluate_slot_runs(request, slot, per_document_runs(w));
  double total = 0;
  for (const SlotMemberCost& m : cost.members) total += m.compute_seconds + m.comm_seconds;
  const double mean = total / static_cast<double>(cost.members.size());
  if (!(mean > 0) || !std::isfinite(mean)) return std::nullopt;
  if (beat < kNoEnd && cost.start_seconds + mean >= beat - 0.005 * (beat - cost.start_seconds)) {
    return std::nullopt;
  }
  std::vector<double> weight;
  for (const SlotMemberCost& m : cost.members) {
    weight.push_back(std::max(mean / 2, mean - m.comm_seconds));
  }
  RunShardPlan runs = cp::detail::per_document_weighted_runs(w, weight);
  if (weights != nullptr) *weights = std::move(weight);
  return runs;
}

// The runs of a recorded rule on this slot.
std::optional<RunShardPlan> rule_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                                      std::string_view rule, const CpWorkload& w) {
  if (rule == "per_document_weighted") {
    // The weights the slot states (ABI 1.5) are the ones plan_cp plans with.
    if (w.member_weights.empty()) return weighted_runs(request, slot, w);
    return cp::detail::per_document_weighted_runs(w, w.member_weights);
  }
  return slot_rule_runs(rule, w);
}

// Rows up to this many tokens also try head_tail and per_document_padded.
constexpr std::int64_t kManyPlannersTokens = std::int64_t{1} << 18;

void record(ScheduleSlot& slot, const char* rule, std::int32_t ranks, std::int64_t shard_len,
            std::string reason) {
  slot.plan = ShardPlan{};
  slot.member_weights.clear();
  slot.plan.cp_size = ranks;
  slot.plan.shard_len = shard_len;
  slot.plan.strategy_used = rule;
  slot.plan.fallback_reason = std::move(reason);
}

}  // namespace

// Rule 5 for one slot: balanced (per_document when balanced needs more
// than T per member), then whichever plan of the other rules (among them,
// on slots over several nodes, per_document weighted by each member's
// exchange) that holds at most T per member the cost model says ends the
// slot soonest (ties: the earlier; contiguous last, it moves least). A
// plan whose floor (its
// compute, no exchange) reaches the end to beat is not priced in full: it
// cannot end strictly sooner. The end to beat is also capped by `ceiling`:
// a slot that cannot end before it gets +infinity (its caller's schedule
// cannot win), and below it the choice is exactly the uncapped one, but
// for per_document_weighted: it is tried only where per_document's plan
// was priced in full (which the ceiling may skip) and its members' mean
// time ends 0.5% before the end to beat.
Result<double> plan_slot_compact(const ScheduleRequest& request, ScheduleSlot& slot,
                                 double ceiling) {
  const std::int64_t budget = request.max_tokens_per_rank;
  slot.member_weights.clear();  // a plan chosen before, on these or other ranks
  const CpWorkload w = slot_workload(request, slot);
  if (w.cp_size == 1) {
    const RunShardPlan runs = cp::detail::contiguous_runs(w.tokens, 1);
    record(slot, "contiguous", runs.ranks, runs.shard_len, "");
    const double end = evaluate_slot_runs(request, slot, runs).end_seconds;
    return end < ceiling ? end : kNoEnd;
  }
  if (Status status = validate_workload(w); !status) return status;
  RunShardPlan chosen = cp::detail::balance_row(w, RowLayout(w)).runs;
  const char* rule = "balanced";
  std::string reason;
  if (chosen.shard_len > budget) {
    // per_document holds at most ceil(N / g) <= T tokens per member.
    reason = "balanced needs " + std::to_string(chosen.shard_len) +
             " tokens per rank, more than T = " + std::to_string(budget);
    chosen = per_document_runs(w);
    rule = "per_document";
  }
  // The chosen plan's shape, kept as it is chosen (re-running the rule
  // only to record it planned the chosen plan twice).
  std::int32_t chosen_ranks = chosen.ranks;
  std::int64_t chosen_shard = chosen.shard_len;
  // Each plan's floor and price share their counts (slot_end_runs_below).
  std::optional<SlotCost> per_document;  // its members' times, once priced in full
  SlotEnd first = slot_end_runs_below(request, slot, chosen, ceiling);
  // +infinity stands for "ends no sooner than the ceiling".
  double best_end = first.exact ? first.end : kNoEnd;
  if (first.exact && std::string_view(rule) == "per_document") per_document = std::move(first.cost);
  const auto consider = [&](const char* other, const std::optional<RunShardPlan>& runs) {
    if (!runs || runs->shard_len > budget) return;
    // Its compute alone already ends no sooner than the end to beat: the
    // exchange need not be counted (it only adds time).
    SlotEnd priced = slot_end_runs_below(request, slot, *runs, std::min(best_end, ceiling));
    if (!priced.exact) return;
    const double end = priced.end;
    if (std::string_view(other) == "per_document") per_document = std::move(priced.cost);
    if (end < best_end) {
      best_end = end;
      rule = other;
      reason.clear();
      chosen_ranks = runs->ranks;
      chosen_shard = runs->shard_len;
    }
  };
  // The same plan again cannot end strictly sooner.
  if (std::string_view(rule) != "per_document") consider("per_document", per_document_runs(w));
  if (w.tokens <= kManyPlannersTokens) {
    consider("head_tail", slot_rule_runs("head_tail", w));
    consider("per_document_padded", per_document_padded_runs(w));
  }
  std::vector<double> weights;  // per_document_weighted's, kept with its plan
  if (per_document) {
    consider("per_document_weighted",
             weighted_runs(request, slot, w, &*per_document, best_end, &weights));
  }
  consider("contiguous", cp::detail::contiguous_runs(w.tokens, w.cp_size));
  record(slot, rule, chosen_ranks, chosen_shard, reason);
  if (std::string_view(rule) == "per_document_weighted") slot.member_weights = std::move(weights);
  return best_end < ceiling ? best_end : kNoEnd;
}

Status expand_slot_plan(const ScheduleRequest& request, ScheduleSlot& slot) {
  if (!slot.plan.positions.empty()) return Status::ok();
  const CpWorkload w = slot_workload(request, slot);
  const std::optional<RunShardPlan> runs = rule_runs(request, slot, slot.plan.strategy_used, w);
  if (!runs) {
    return internal_error("hybrid: slot plan rule '" + slot.plan.strategy_used +
                          "' cannot be expanded for this row");
  }
  ShardPlan plan = materialize_runs(*runs);
  plan.strategy_used = std::move(slot.plan.strategy_used);
  plan.fallback_reason = std::move(slot.plan.fallback_reason);
  plan.work = cp::detail::run_work(w, RowLayout(w), *runs);
  slot.plan = std::move(plan);
  return Status::ok();
}

double step_of_lengths(const ScheduleRequest& request, const Schedule& schedule,
                       const std::vector<double>& length) {
  // price_timeline's arithmetic on the slots' lengths alone: the same step.
  std::vector<std::size_t> order(schedule.slots.size());
  for (std::size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return schedule.slots[x].wave < schedule.slots[y].wave;
  });
  std::vector<double> free_at(static_cast<std::size_t>(request.world_size), 0.0);
  for (const std::size_t s : order) {
    double start = 0;
    for (const std::int32_t r : schedule.slots[s].ranks) start = std::max(start, free_at[r]);
    for (const std::int32_t r : schedule.slots[s].ranks) free_at[r] = start + length[s];
  }
  double step = 0;
  for (const double t : free_at) step = std::max(step, t);
  return step;
}

}  // namespace fulcrum::hybrid
