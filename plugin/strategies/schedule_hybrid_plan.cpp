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
#include <cstddef>
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
#include "strategies/schedule_hybrid_nodes.h"

namespace fulcrum::hybrid {
namespace {

using cp::detail::Run;
using cp::detail::RunPlan;

// Each member's runs, gathered in one list as they come (document by
// document) with their member, then put in member order by one counting
// pass (stable: each member's in the order they came) into the plan's flat
// list; two allocations where a list per member was one per member, and no
// more entries than runs.
class MemberRuns {
 public:
  explicit MemberRuns(std::int32_t members) : count_(static_cast<std::size_t>(members) + 1, 0) {}

  void add(std::int32_t r, Run run) {
    runs_.emplace_back(r, run);
    ++count_[static_cast<std::size_t>(r) + 1];
  }

  void into(RunPlan& plan) {
    for (std::size_t m = 1; m < count_.size(); ++m) count_[m] += count_[m - 1];
    plan.rank_offset.assign(count_.begin(), count_.end());
    plan.runs.resize(runs_.size());
    for (const auto& [r, run] : runs_) plan.runs[count_[static_cast<std::size_t>(r)]++] = run;
  }

 private:
  std::vector<std::int64_t> count_;  // then each member's next place
  std::vector<std::pair<std::int32_t, Run>> runs_;
};

// per_document's plan (cp_per_document.cpp) as runs: document by document,
// member r takes chunks r and 2P - 1 - r, the extra tokens dealt round-robin
// across documents; the row is padded to ceil(N / P) per member.
RunPlan per_document_runs(const CpWorkload& w) {
  const std::int32_t p = w.cp_size;
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(p);
  RunPlan plan;
  plan.ranks = p;
  plan.shard_len = ceil_div(w.tokens, p);
  MemberRuns member(p);
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
        if (size[k] > 0) member.add(r, {start[k], size[k]});
      }
    }
    doc_start += length;
  }
  member.into(plan);
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
  MemberRuns member(p);
  std::int64_t doc_start = 0;
  for (const std::int64_t length : w.doc_lengths) {
    const std::int64_t chunk = ceil_div(length, chunks);
    for (std::int32_t r = 0; r < p; ++r) {
      for (const std::int64_t c : {static_cast<std::int64_t>(r), chunks - 1 - r}) {
        const std::int64_t real = std::clamp<std::int64_t>(length - c * chunk, 0, chunk);
        if (real > 0) member.add(r, {doc_start + c * chunk, real});
        if (chunk > real) member.add(r, {kPadPosition, chunk - real});
      }
    }
    doc_start += length;
  }
  member.into(plan);
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

// Whether per_document_weighted can apply to the slot: it spans two or more
// nodes (on one, per_document's exchange is even) and has members to weigh.
bool weighs_members(const ScheduleRequest& request, const ScheduleSlot& slot, const CpWorkload& w) {
  const std::int32_t node = std::max(1, request.profile.ranks_per_node);
  const bool one_node = std::all_of(slot.ranks.begin(), slot.ranks.end(), [&](std::int32_t a) {
    return a / node == slot.ranks.front() / node;
  });
  return !one_node && w.cp_size >= 2;
}

// Whether per_document_weighted is worth pricing against `beat`, from
// per_document's members' times: their mean is positive and finite, and
// even members ending at it would end 0.5% before `beat`. Monotone in beat:
// true from some beat up.
bool weighting_may_pay(const SlotCost& per_document, double beat) {
  double total = 0;
  for (const SlotMemberCost& m : per_document.members) total += m.compute_seconds + m.comm_seconds;
  const double mean = total / static_cast<double>(per_document.members.size());
  if (!(mean > 0) || !std::isfinite(mean)) return false;
  const double start = per_document.start_seconds;
  return !(beat < kNoEnd && start + mean >= beat - 0.005 * (beat - start));
}

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
  if (!weighs_members(request, slot, w)) return std::nullopt;
  const SlotCost cost = priced ? *priced : evaluate_slot_runs(request, slot, per_document_runs(w));
  if (!weighting_may_pay(cost, beat)) return std::nullopt;
  double total = 0;
  for (const SlotMemberCost& m : cost.members) total += m.compute_seconds + m.comm_seconds;
  const double mean = total / static_cast<double>(cost.members.size());
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

// Rows up to this many tokens also try head_tail and per_document_padded,
// and their plans are kept for the answer (RowPlans).
constexpr std::int64_t kManyPlannersTokens = std::int64_t{1} << 18;

void record(ScheduleSlot& slot, const char* rule, std::int32_t cp_size, std::int64_t shard_len,
            std::string reason) {
  slot.plan = ShardPlan{};
  slot.member_weights.clear();
  slot.plan.cp_size = cp_size;
  slot.plan.shard_len = shard_len;
  slot.plan.strategy_used = rule;
  slot.plan.fallback_reason = std::move(reason);
}

constexpr const char* kRowRules[] = {"balanced", "per_document", "head_tail", "per_document_padded",
                                     "contiguous"};

}  // namespace

const CountedRuns* RowPlans::plan(std::string_view rule, const ScheduleRequest& request,
                                  const ScheduleSlot& slot, const CpWorkload& w) {
  std::size_t r = 0;
  while (r < kRules && rule != kRowRules[r]) ++r;
  if (r == kRules) return nullptr;  // not a row rule: nothing it could keep
  std::vector<std::int64_t> key;
  key.reserve(slot.pieces.size() + 1);
  key.push_back(w.cp_size);
  for (const DocPiece& piece : slot.pieces) key.push_back(piece.length);
  std::optional<std::optional<CountedRuns>>& kept = rows_[std::move(key)][r];
  if (!kept) {
    kept.emplace();
    if (rule == "balanced") {
      // balanced's exact work is the members' tokens and tiles its runs
      // would be walked for again: counted, only their touched key blocks.
      cp::detail::Balanced b = cp::detail::balance_row(w, RowLayout(w));
      if (b.runs.shard_len > request.max_tokens_per_rank) {
        *kept = CountedRuns{std::move(b.runs), nullptr};
      } else {
        *kept = count_runs(request, slot, std::move(b.runs), b.work);
      }
      return &**kept;
    }
    std::optional<RunShardPlan> runs = slot_rule_runs(rule, w);
    // A plan over T per member is never priced: its runs only.
    if (runs && runs->shard_len > request.max_tokens_per_rank) {
      *kept = CountedRuns{std::move(*runs), nullptr};
    } else if (runs) {
      *kept = count_runs(request, slot, std::move(*runs));
    }
  }
  return *kept ? &**kept : nullptr;
}

namespace {

// Rule 5's choice among a slot's plans, one plan at a time in rule order:
// each plan's floor and price share their counts (slot_end_counted_below),
// and a plan whose floor reaches the end to beat is not priced in full.
//
// Which plans are priced in full decides whether per_document_weighted is
// tried (only after per_document was, and only while the best end so far
// leaves it room: weighting_may_pay), so the floor that skips a plan must
// not change that. On a slot it can apply to, per_document is floored by
// compute and peers' latency alone, as before the exchange floor; another
// plan that the exchange floor skips where that weaker floor would not have
// is kept aside with its floor, and priced in full only when its exact end
// could change weighting_may_pay's answer (docs/HYBRID.md rule 5).
class RuleChoice {
 public:
  RuleChoice(const ScheduleRequest& request, const ScheduleSlot& slot, const CpWorkload& w,
             double ceiling)
      : request_(request),
        slot_(slot),
        w_(w),
        ceiling_(ceiling),
        weighs_(weighs_members(request, slot, w)),
        exchange_floor_(w.tokens <= kManyPlannersTokens) {}

  // The first plan: its end sets the end to beat even when the ceiling caps it.
  void first(const char* rule, const CountedRuns& plan, std::string reason) {
    choose(rule, plan);
    reason_ = std::move(reason);
    const SlotEnd e = price(rule, plan, ceiling_);
    best_end_ = e.exact ? e.end : kNoEnd;
  }

  void consider(const char* other, const CountedRuns* plan) {
    if (!plan || plan->runs.shard_len > request_.max_tokens_per_rank) return;
    // Its compute alone already ends no sooner than the end to beat: the
    // exchange need not be counted (it only adds time).
    const SlotEnd e = price(other, *plan, std::min(best_end_, ceiling_));
    if (!e.exact) return;
    if (e.end < best_end_) {
      best_end_ = e.end;
      choose(other, *plan);
      reason_.clear();
    }
  }

  // per_document_weighted, where per_document was priced in full.
  void consider_weighted() {
    if (!per_document_) return;
    const double beat = weighting_beat();
    aside_open_ = false;  // no later plan can change whether weighting is tried
    declined_ = weighs_ && !weighting_may_pay(*per_document_, beat);
    std::vector<double> weights;
    std::optional<RunShardPlan> runs =
        weighted_runs(request_, slot_, w_, &*per_document_, beat, &weights);
    if (!runs) return;
    const CountedRuns plan = count_runs(request_, slot_, std::move(*runs));
    consider("per_document_weighted", &plan);
    // The weights the plan was made with travel with it (ABI 1.5).
    if (rule_ == std::string_view("per_document_weighted")) weights_ = std::move(weights);
  }

  // Whether a lower ceiling could give a length where this one gave none:
  // only by weighting, declined here for want of room below a best end
  // that a lower ceiling may leave higher.
  bool declined_weighting() const { return declined_; }

  // The choice on the slot's plan: rule, size, shard length, reason.
  void record_on(ScheduleSlot& slot) {
    record(slot, rule_, w_.cp_size, shard_len_, std::move(reason_));
    if (rule_ == std::string_view("per_document_weighted"))
      slot.member_weights = std::move(weights_);
  }
  const char* rule() const { return rule_; }
  double best_end() const { return best_end_; }

 private:
  struct Aside {
    const CountedRuns* plan;
    double floor;
  };

  void choose(const char* rule, const CountedRuns& plan) {
    rule_ = rule;
    shard_len_ = plan.runs.shard_len;
  }

  SlotEnd price(const char* rule, const CountedRuns& plan, double beat) {
    const bool per_document = std::string_view(rule) == "per_document";
    const bool exchange = exchange_floor_ && !(weighs_ && per_document);
    // Only whether a plan can beat `beat` is read (and, kept aside, its
    // floor where the weaker floor leaves it room): past the weaker floor
    // the exchange totals are not counted.
    SlotEnd e = plan.counts ? slot_end_counted_below(request_, slot_, plan, beat, exchange, false)
                            : slot_end_runs_below(request_, slot_, plan.runs, beat, exchange);
    if (!e.exact && weighs_ && aside_open_ && e.peers_floor < beat) {
      aside_.push_back({&plan, e.end});
    }
    if (e.exact && per_document) per_document_ = e.cost;
    return e;
  }

  // The best end the weaker floor alone would have left when weighting is
  // tried: the plans kept aside each end at or past their floor, so only
  // one whose floor leaves weighting_may_pay's answer open is priced.
  double weighting_beat() {
    double beat = best_end_;
    for (const Aside& a : aside_) {
      if (weighting_may_pay(*per_document_, std::min(beat, a.floor)) ==
          weighting_may_pay(*per_document_, beat)) {
        continue;
      }
      beat = std::min(beat, slot_end_counted_below(request_, slot_, *a.plan, kNoEnd).end);
    }
    return beat;
  }

  const ScheduleRequest& request_;
  const ScheduleSlot& slot_;
  const CpWorkload& w_;
  const double ceiling_;
  const bool weighs_;
  // The exchange floor costs O(blocks x nodes) a plan: on longer rows it
  // rules out too few plans to pay.
  const bool exchange_floor_;
  const char* rule_ = "balanced";
  std::int64_t shard_len_ = 0;
  std::string reason_;
  double best_end_ = kNoEnd;              // +infinity: "ends no sooner than the ceiling"
  std::optional<SlotCost> per_document_;  // its members' times, once priced in full
  std::vector<Aside> aside_;
  bool aside_open_ = true;
  bool declined_ = false;
  std::vector<double> weights_;  // per_document_weighted's, when it is chosen
};

}  // namespace

// Rule 5 for one slot: balanced (per_document when balanced needs more
// than T per member), then whichever plan of the other rules (among them,
// on slots over several nodes, per_document weighted by each member's
// exchange) that holds at most T per member the cost model says ends the
// slot soonest (ties: the earlier; contiguous last, it moves least). A
// plan whose floor (its compute and what it must exchange at least)
// reaches the end to beat is not priced in full: it cannot end strictly
// sooner. The end to beat is also capped by `ceiling`: a slot that cannot
// end before it gets +infinity (its caller's schedule cannot win), and
// below it the choice is exactly the uncapped one, but for
// per_document_weighted: it is tried only where per_document's plan was
// priced in full (which the ceiling may skip) and its members' mean time
// ends 0.5% before the end to beat.
Result<double> plan_slot_compact(const ScheduleRequest& request, ScheduleSlot& slot, double ceiling,
                                 bool* none_below, RowPlans* rows, bool lean) {
  if (none_below) *none_below = false;
  const std::int64_t budget = request.max_tokens_per_rank;
  slot.member_weights.clear();  // a plan chosen before, on these or other ranks
  if (slot.ranks.size() == 1) {
    // Its one plan, contiguous (shard_len N), priced from its pieces: no
    // workload, runs or counts built (one_rank_slot_end).
    std::int64_t tokens = 0;
    for (const DocPiece& piece : slot.pieces) tokens += piece.length;
    record(slot, "contiguous", 1, tokens, "");
    const double end = one_rank_slot_end(request, slot);
    if (none_below) *none_below = !(end < ceiling);
    return end < ceiling ? end : kNoEnd;
  }
  const CpWorkload w = slot_workload(request, slot);
  if (Status status = validate_workload(w); !status) return status;
  RowPlans own;
  RowPlans& plans = rows && w.tokens <= kManyPlannersTokens ? *rows : own;
  RuleChoice choice(request, slot, w, ceiling);
  const CountedRuns* balanced = plans.plan("balanced", request, slot, w);
  if (balanced->runs.shard_len <= budget) {
    choice.first("balanced", *balanced, "");
  } else {
    // per_document and contiguous hold at most ceil(N / g) <= T tokens per member.
    const char* rule = lean ? "contiguous" : "per_document";
    choice.first(rule, *plans.plan(rule, request, slot, w),
                 "balanced needs " + std::to_string(balanced->runs.shard_len) +
                     " tokens per rank, more than T = " + std::to_string(budget));
  }
  if (lean) {
    // A draft planned past the budget: contiguous against balanced, no more.
    if (std::string_view(choice.rule()) != "contiguous") {
      choice.consider("contiguous", plans.plan("contiguous", request, slot, w));
    }
  } else {
    // The same plan again cannot end strictly sooner.
    if (std::string_view(choice.rule()) != "per_document") {
      choice.consider("per_document", plans.plan("per_document", request, slot, w));
    }
    if (w.tokens <= kManyPlannersTokens) {
      choice.consider("head_tail", plans.plan("head_tail", request, slot, w));
      choice.consider("per_document_padded", plans.plan("per_document_padded", request, slot, w));
    }
    choice.consider_weighted();
    choice.consider("contiguous", plans.plan("contiguous", request, slot, w));
  }
  choice.record_on(slot);
  if (choice.best_end() < ceiling) return choice.best_end();
  // Every plan but a declined weighting ends at or past the ceiling, so a
  // lower ceiling gives none either.
  if (none_below) *none_below = !choice.declined_weighting();
  return kNoEnd;
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
  // price_timeline's arithmetic on the slots' lengths alone: the same step,
  // the slots in the same order (a stable sort by wave, as a counting sort).
  std::vector<std::size_t> order;
  std::vector<std::size_t> counts;
  wave_order(schedule, order, counts);
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
