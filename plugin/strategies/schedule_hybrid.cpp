// `hybrid`: fulcrum's own placement of a global batch over the pool of W
// ranks, by the cost model of docs/HYBRID.md.
//
// Why it is built this way:
// 1. A piece that fits one rank (L <= T) stays on one rank: any group would
//    add K/V traffic, latency and tile waste for no memory it needs. Short
//    pieces are therefore bin packing, where longest-processing-time first
//    is within 4/3 of optimal and cheap. Except a piece whose work alone on
//    one rank exceeds the mean load per rank: it would set the step by
//    itself, so it is placed like a long piece (g >= 1 by the rules below).
// 2. A longer piece needs g >= ceil(L / T) ranks, any integer g. More ranks
//    shorten its slot (compute / g) but cost more rank-seconds (each member
//    pays the fixed slot cost, latency per peer, and the K/V of the other
//    members' blocks). So a piece takes the smallest g whose estimated slot
//    ends within the batch's mean load per rank (it then cannot be the
//    critical path by itself), or, when no g does, the g that ends soonest.
//    Whether "ends" counts from time 0 or from when g ranks are free, or
//    whether every piece simply takes the g that ends soonest, or whether
//    a piece too long for the mean load at any g spreads only as far as the
//    rank-seconds its group spends beyond its work (fixed costs, K/V,
//    latency) leave the other ranks room, depends on the batch: all four
//    are drafted and the draft that finishes first by the estimate is kept.
// 3. Multi-rank slots are placed first, largest first, on the ranks'
//    timeline. Candidate members: the g ranks free earliest, and every run
//    of g ranks of one node in the order they free up (intra-node bandwidth
//    is several times the inter-node one). A member free before the last
//    one idles, and idle rank-time is capacity lost; so among candidates
//    that end within the mean load the one spending the fewest rank-seconds
//    (g x slot time + idle) wins, else the one that ends soonest.
// 4. Short pieces first fill those waits (best fit by time, longest first,
//    one row per wait), then every rank up to a common finish: LPT on the
//    ranks' loads, best fit into rows of at most T tokens, each row one
//    single-rank slot paying the fixed cost once; then moves and swaps from
//    the most to the least loaded rank close the gap LPT leaves.
// 5. Inside a multi-rank slot the row is sharded by the `balanced` CP
//    planner, or by `per_document` (head-tail), `head_tail`,
//    `per_document_padded` or `contiguous` when the cost model says that
//    ends the slot sooner (head-tail members need fewer keys; a sliding
//    window's contiguous shards touch only their window's), and a member
//    receives only the key blocks its tiles touch.
// 6. The rules above are estimates, and a baseline can win a batch they
//    misjudge (one extra row on one rank is the difference when every
//    document fits one rank). So the planned schedule is priced exactly
//    (evaluate_schedule's model, from runs) against the schedules `fixed`
//    and `megatron_dcp` give for the same request, and the cheapest is
//    returned (ties: hybrid's own, then fixed): hybrid is never slower than
//    either by the cost model. A baseline is priced only when a lower bound
//    on its decided slots (each slot's mean member compute over a
//    per-query tile count, on the slots' timeline) is below hybrid's step,
//    from the runs its planner writes; its positions only when it wins.
// 7. The estimate picks among drafts, and misjudges small batches most. So
//    every draft (each group rule, with and without rule 1's heavy pieces
//    as groups, and rule 8's) is planned and priced exactly, without
//    positions (schedule_hybrid_plan.cpp), the soonest kept; a draft whose
//    decided-slots bound (rule 6) is not below the best so far is not
//    planned, nor the rest of one a slot of which cannot end before it. The kept one is improved by
//    moves on the exact timeline (schedule_hybrid_search.cpp): a small slot merged into another's
//    spare room or over both slots' ranks, the last slot re-placed over the ranks that finish
//    first.
// 8. Equal groups: for g = 1, 2, 4, ... and W, floor(W / g) groups of g
//    consecutive ranks, pieces best fit into rows of g x T (a longer piece
//    over the groups it needs), rows LPT onto the groups. Many long pieces
//    of similar size share rows better this way than one piece per group.
//    Rule 7 tries them by estimated finish, the soonest right after the
//    estimate's draft, so the planning budget reaches it first.
// Waves follow the estimated time order, every slot's wave above its
// members' earlier ones, so a rank's wave order is its time order (no
// deadlock, docs/HYBRID.md). Deterministic: no clock, no randomness, ties
// broken by index.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_hybrid_draft.h"
#include "strategies/schedule_hybrid_draw.h"
#include "strategies/schedule_hybrid_nodes.h"
#include "strategies/schedule_hybrid_refine.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

using hybrid::DraftSet;

// Rule 5's slots of one answer, planned once: drafts share slots (the same
// row over the same group, or a group placed alike on another node) and the
// search re-plans rows it tried before. A slot's plan and length depend on
// its pieces' lengths in order, its size and which members share a node
// (the bandwidth of each pair; nothing else of the ranks is priced), so
// that is the key. Only exact lengths are kept (a plan capped by a ceiling
// is not rule 5's choice); one kept answers any later ceiling as
// plan_slot_compact would: the length when below it, else kNoEnd. A slot
// that ended no sooner than a ceiling for certain (plan_slot_compact's
// none_below) answers kNoEnd to any ceiling up to that one, as planning it
// again would.
class SlotMemo {
 public:
  // `lean`: every slot planned with balanced and contiguous only (rule 5's
  // lean choice, plan_slot_compact), for a draft planned past the budget.
  explicit SlotMemo(bool lean = false) : lean_(lean) {}

  Result<double> plan(const ScheduleRequest& request, ScheduleSlot& slot, double ceiling) {
    // A one-rank slot has one plan, priced from its pieces without
    // allocating (one_rank_slot_end): cheaper than its key and a lookup, so
    // it is planned afresh each time, with the answer a kept one would give.
    if (slot.ranks.size() == 1) return hybrid::plan_slot_compact(request, slot, ceiling);
    // The key built in a buffer kept across calls: most calls find it kept,
    // and a lookup then allocates nothing.
    std::vector<std::int64_t>& key = key_;
    key.clear();
    key.push_back(static_cast<std::int64_t>(slot.ranks.size()));
    // Each member's node, numbered by first appearance: per node, its first
    // member (a table kept across calls, its entries reset after use).
    const std::int32_t node = request.profile.ranks_per_node;
    for (std::size_t m = 0; m < slot.ranks.size(); ++m) {
      const auto n = static_cast<std::size_t>(slot.ranks[m] / node);
      if (n >= first_of_node_.size()) first_of_node_.resize(n + 1, -1);
      if (first_of_node_[n] < 0) first_of_node_[n] = static_cast<std::int64_t>(m);
      key.push_back(first_of_node_[n]);
    }
    for (const std::int32_t a : slot.ranks) first_of_node_[static_cast<std::size_t>(a / node)] = -1;
    for (const DocPiece& piece : slot.pieces) key.push_back(piece.length);
    const auto it = kept_.find(key);
    if (it != kept_.end()) {
      slot.plan = it->second.record;
      slot.member_weights = it->second.weights;
      return it->second.length < ceiling ? it->second.length : hybrid::kNoEnd;
    }
    const auto none = none_below_.find(key);
    if (none != none_below_.end() && ceiling <= none->second) return hybrid::kNoEnd;
    bool none_below = false;
    const Result<double> planned =
        hybrid::plan_slot_compact(request, slot, ceiling, &none_below, &rows_, lean_);
    if (planned && *planned < ceiling) {
      kept_.emplace(key, Kept{*planned, slot.plan, slot.member_weights});
    } else if (planned && none_below) {
      double& highest = none_below_[key];
      highest = std::max(highest, ceiling);
    }
    return planned;
  }

 private:
  struct Kept {
    double length = 0;
    ShardPlan record;             // the rule's name, cp_size and shard_len; no positions
    std::vector<double> weights;  // its member weights, where its rule takes them
  };
  std::map<std::vector<std::int64_t>, Kept> kept_;
  // Key -> the highest ceiling no plan of the slot ends before.
  std::map<std::vector<std::int64_t>, double> none_below_;
  hybrid::RowPlans rows_;                    // rule 5's candidate plans of each row, counted
  std::vector<std::int64_t> key_;            // plan's key, built here
  std::vector<std::int64_t> first_of_node_;  // per node: its first member in plan's slot, or -1
  bool lean_ = false;
};

// Every slot planned compactly (rule 5, schedule_hybrid_plan.cpp): `length`
// gets each slot's exact length. Stops at the first slot that cannot end
// before `ceiling` (a step no later than its length cannot beat one that
// ends at the ceiling) and leaves `length` short.
Status plan_slots(const ScheduleRequest& request, SlotMemo& memo, Schedule& schedule,
                  std::vector<double>& length, double ceiling = hybrid::kNoEnd) {
  length.clear();
  for (ScheduleSlot& slot : schedule.slots) {
    const Result<double> planned = memo.plan(request, slot, ceiling);
    if (!planned) return planned.status();
    if (*planned >= ceiling) return Status::ok();
    length.push_back(*planned);
  }
  return Status::ok();
}

// The wave order of a schedule's slots (by wave, then index): the
// timeline's order, in which each slot starts when its last member is free
// (hybrid::wave_order's counting sort).
std::vector<std::size_t> wave_order(const Schedule& schedule) {
  std::vector<std::size_t> order;
  std::vector<std::size_t> counts;
  hybrid::wave_order(schedule, order, counts);
  return order;
}

// The step of slots of these lengths on the timeline (`start`, when not
// null, gets each slot's start).
double replay_lengths(const ScheduleRequest& request, const Schedule& schedule,
                      const std::vector<std::size_t>& order, const std::vector<double>& length,
                      std::vector<double>* start) {
  std::vector<double> free_at(static_cast<std::size_t>(request.world_size), 0.0);
  double step = 0;
  for (const std::size_t k : order) {
    double begin = 0;
    for (const std::int32_t a : schedule.slots[k].ranks) begin = std::max(begin, free_at[a]);
    for (const std::int32_t a : schedule.slots[k].ranks) free_at[a] = begin + length[k];
    if (start != nullptr) (*start)[k] = begin;
    step = std::max(step, begin + length[k]);
  }
  return step;
}

// Another draft's slots planned under `ceiling` (the best step so far):
// `length` gets each slot's exact length, and `complete` whether every slot
// was planned. A slot lasts at least slot_length_lower_bound and the
// timeline only grows with the slots' lengths, so the step is at least the
// timeline of the lengths planned so far and the bounds of the others; once
// that reaches the ceiling the draft cannot beat it and the rest is not
// planned. The multi-rank slots go first (their bound leaves out their
// exchange, so they are the likeliest to reach the ceiling: often one long
// group planned last in slot order), each kind by its bound's end on that
// timeline, latest first. Which drafts
// are kept is as when every slot is planned in order (only a draft whose
// step reaches the ceiling stops early); the memo makes the order free.
Status plan_slots_below(const ScheduleRequest& request, SlotMemo& memo, Schedule& schedule,
                        std::vector<double>& length, double ceiling, bool& complete) {
  complete = false;
  const std::size_t n = schedule.slots.size();
  const std::vector<std::size_t> timeline = wave_order(schedule);
  std::vector<double> bound(n);
  for (std::size_t k = 0; k < n; ++k)
    bound[k] = slot_length_lower_bound(request, schedule.slots[k]);
  std::vector<double> start(n, 0.0);
  replay_lengths(request, schedule, timeline, bound, &start);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    const bool wide_x = schedule.slots[x].ranks.size() > 1;
    const bool wide_y = schedule.slots[y].ranks.size() > 1;
    if (wide_x != wide_y) return wide_x;
    return start[x] + bound[x] > start[y] + bound[y];
  });
  // The sums' rounding: the same margin as the drafts' bound.
  const auto reaches = [&](double step) { return step * (1 - 1e-9) >= ceiling; };
  length = bound;
  for (const std::size_t k : order) {
    ScheduleSlot& slot = schedule.slots[k];
    const Result<double> planned = memo.plan(request, slot, ceiling);
    if (!planned) return planned.status();
    if (*planned >= ceiling) return Status::ok();
    length[k] = *planned;
    if (reaches(start[k] + *planned)) return Status::ok();
    // A multi-rank slot costs far more to plan than the timeline to replay.
    if (slot.ranks.size() > 1 &&
        reaches(replay_lengths(request, schedule, timeline, length, nullptr))) {
      return Status::ok();
    }
  }
  complete = true;
  return Status::ok();
}

bool same_slots(const Schedule& a, const Schedule& b) {
  if (a.slots.size() != b.slots.size()) return false;
  for (std::size_t i = 0; i < a.slots.size(); ++i) {
    const ScheduleSlot& x = a.slots[i];
    const ScheduleSlot& y = b.slots[i];
    if (x.ranks != y.ranks || x.wave != y.wave || x.pieces.size() != y.pieces.size()) return false;
    for (std::size_t k = 0; k < x.pieces.size(); ++k) {
      if (x.pieces[k].doc != y.pieces[k].doc || x.pieces[k].offset != y.pieces[k].offset) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

Result<Schedule> decide_hybrid(const ScheduleRequest& request) {
  if (request.group_shapes.restricts()) return decide_hybrid_shaped(request);
  if (Status status = validate_schedule_request(request); !status) return status;
  DraftSet drafts(request, false);
  return std::move(drafts.at(0));
}

// Planning a draft prices its slots from runs, O(runs + blocks) per slot
// (schedule_hybrid_plan.cpp), and balances each multi-rank row: the other
// drafts are planned while their planning costs (hybrid::slot_planning_cost:
// tokens, rows over more than hybrid::kWideSlot members weighted by their
// width), the decided draft's tokens included, stay within this; a draft
// that does not fit is skipped and the next tried, but for the soonest
// equal-groups draft, planned lean past it where its estimate with its
// rows' exchange still wins (DraftSet::worth_planning_past_budget). Beyond
// half of it the search does not run and no other draft is planned but
// that one (where the batch is within the budget). 32M and 8M win 96% of
// the suite's 400 batches on h100_7b
// before the guard (82% of 100 with the 4M and 1M of position-based
// pricing); docs/HYBRID.md section 6, "Issue 25", gives the plan time they
// cost.
constexpr std::int64_t kDraftTokenBudget = std::int64_t{32} << 20;
// The rows rule 7's search may re-plan, in tokens, whatever the batch.
constexpr std::int64_t kSearchTokenBudget = std::int64_t{8} << 20;

namespace {

// The drafts plan_compact may plan for a batch of `tokens`, the decided
// one first: every draft within half the budget (the first draft's tokens
// are planned first, the others have the rest of the budget); past half
// of it the decided one, and within the budget the soonest equal-groups
// draft after it, which may still be planned past the budget
// (worth_planning_past_budget). Past the budget drawing even that one
// would cost O(pieces log W) per group size with no draft planned: at
// W = 8192 with 64,000 documents, about 40 ms more (108 against 67 ms)
// for a gate that stays shut (docs/HYBRID.md section 6).
void draw_drafts(const ScheduleRequest& request, std::int64_t tokens,
                 std::optional<DraftSet>& into) {
  const bool every = 2 * tokens <= kDraftTokenBudget;
  into.emplace(request, every, kDraftTokenBudget - tokens, !every && tokens <= kDraftTokenBudget);
}

// The decided draft is the estimate's bet; the other drafts (the other
// group rules, heavy pieces within T kept on one rank, equal groups) are
// planned and priced exactly too, within kDraftTokenBudget (the soonest
// equal-groups draft, lean, past it where worth_planning_past_budget says
// so), and the soonest is kept (ties: the decided one, then the drafts'
// order). The estimate
// misjudges small batches most, where this costs least. Then rule 7's
// search. Every slot stays compact (no positions); `step` gets the exact
// step of the schedule kept. `drawn`: the batch's drafts (draw_drafts),
// the decided one first and `schedule`
// made from it, when the caller drew them already (run_hybrid); nullptr:
// drawn here when needed. A draft is made a schedule only once its
// planning cost fits the budget, or it is to be planned past it.
Status plan_compact(const ScheduleRequest& request, Schedule& schedule, double& step,
                    DraftSet* drawn) {
  std::vector<double> length;
  SlotMemo memo;
  SlotMemo lean_memo(true);  // a draft planned past the budget
  if (Status status = plan_slots(request, memo, schedule, length); !status) return status;
  double best = hybrid::step_of_lengths(request, schedule, length);
  step = best;
  std::int64_t tokens = 0;
  for (const std::int64_t len : request.doc_lengths) tokens += len;
  // Past half the budget there is no search, and no other draft is drawn
  // but the soonest equal-groups one within the budget (draw_drafts).
  if (tokens > kDraftTokenBudget) return Status::ok();  // nothing else is planned
  const bool over_half = 2 * tokens > kDraftTokenBudget;
  std::int64_t planned = tokens;
  // While `schedule` is the caller's draws' first draft, a draft known to
  // be that one (DraftSet::same_as_first) is the same as it slot for slot
  // (same_slots) without being made.
  bool first_kept = drawn != nullptr;
  std::optional<DraftSet> own_draw;
  if (drawn == nullptr) {
    draw_drafts(request, tokens, own_draw);
    drawn = &*own_draw;
  }
  for (std::size_t k = 0; k < drawn->size(); ++k) {
    // The first is the decided draft (drawn again, or the one drawn once).
    if (k == 0) continue;
    const std::int64_t cost = drawn->cost(k);
    // Past the budget (or half of it), only the soonest equal-groups draft where its
    // estimate with its rows' exchange still beats the decided draft's,
    // and lean: its wide rows are what the budget weighs (g / kWideSlot
    // times their tokens), and rule 5's other plans of them, per_document's
    // above all (two runs per member per document), cost most.
    const bool past_budget = over_half || planned + cost > kDraftTokenBudget;
    if (past_budget && !drawn->worth_planning_past_budget(k)) continue;
    if (first_kept && drawn->same_as_first(k)) continue;
    Schedule& other = drawn->at(k);
    if (same_slots(other, schedule)) continue;
    if (decided_step_lower_bound(request, other) * (1 - 1e-9) >= best) continue;
    std::vector<double> other_length;
    bool complete = false;
    if (Status status = plan_slots_below(request, past_budget ? lean_memo : memo, other,
                                         other_length, best, complete);
        !status) {
      return status;
    }
    if (!past_budget) planned += cost;
    if (!complete) continue;  // a slot alone reaches `best`
    const double other_step = hybrid::step_of_lengths(request, other, other_length);
    if (other_step < best) {
      best = other_step;
      schedule = std::move(other);
      length = std::move(other_length);
      first_kept = false;
    }
  }
  if (over_half) {
    step = best;
    return Status::ok();
  }
  // The search replays the same timeline; a schedule it made slower (it
  // cannot: it keeps only moves that do not delay the step) is not kept.
  const hybrid::SlotPlanner planner = [&memo](const ScheduleRequest& r, ScheduleSlot& slot,
                                              double ceiling) {
    return memo.plan(r, slot, ceiling);
  };
  Schedule searched = schedule;
  std::vector<double> searched_length = length;
  if (Status status = hybrid::improve_on_timeline(request, schedule, length, searched,
                                                  searched_length, planner, kSearchTokenBudget);
      !status) {
    return status;
  }
  const double searched_step = hybrid::step_of_lengths(request, searched, searched_length);
  if (searched_step <= best) {
    schedule = std::move(searched);
    best = searched_step;
  }
  step = best;
  return Status::ok();
}

// After planning hybrid's own slots (unshaped): the guard, then positions
// unless the answer is compact.
Status guard_and_expand(const ScheduleRequest& request, Schedule& schedule, double step) {
  if (Status status = keep_fastest_of_baselines(request, schedule, step); !status) return status;
  // A compact answer's plans stay by rule; the host expands its own slots.
  if (request.compact) return Status::ok();
  return expand_hybrid_plans(request, schedule);
}

}  // namespace

Status plan_hybrid_compact(const ScheduleRequest& request, Schedule& schedule, double& step) {
  return plan_compact(request, schedule, step, nullptr);
}

Result<Schedule> run_hybrid(const ScheduleRequest& request) {
  if (request.group_shapes.restricts()) {
    Result<Schedule> shaped = decide_hybrid_shaped(request);
    if (!shaped) return shaped;
    if (Status status = plan_hybrid(request, *shaped); !status) return status;
    return shaped;
  }
  if (Status status = validate_schedule_request(request); !status) return status;
  // decide_hybrid's draft is the first of every draft (DraftSet puts the
  // estimate's choice first either way); the others are drawn only where
  // plan_compact may plan them (draw_drafts).
  std::int64_t tokens = 0;
  for (const std::int64_t len : request.doc_lengths) tokens += len;
  std::optional<DraftSet> drawn;
  draw_drafts(request, tokens, drawn);
  Schedule schedule = std::move(drawn->at(0));
  double step = 0;
  if (Status status = plan_compact(request, schedule, step, &*drawn); !status) return status;
  if (Status status = guard_and_expand(request, schedule, step); !status) return status;
  return schedule;
}

Status expand_hybrid_plans(const ScheduleRequest& request, Schedule& schedule) {
  for (ScheduleSlot& slot : schedule.slots) {
    if (Status status = hybrid::expand_slot_plan(request, slot); !status) return status;
  }
  return Status::ok();
}

Status plan_hybrid_slots(const ScheduleRequest& request, Schedule& schedule) {
  double step = 0;
  if (Status status = plan_hybrid_compact(request, schedule, step); !status) return status;
  return expand_hybrid_plans(request, schedule);
}

Status plan_hybrid(const ScheduleRequest& request, Schedule& schedule) {
  if (request.group_shapes.restricts()) {
    // Shaped plans are priced from positions (evaluate_schedule), so they
    // are planned in full; a compact answer's are dropped by the registry.
    ScheduleRequest full = request;
    full.compact = false;
    if (Status status = plan_hybrid_shaped(full, schedule); !status) return status;
    return keep_fastest_of_baselines(request, schedule);
  }
  double step = 0;
  if (Status status = plan_hybrid_compact(request, schedule, step); !status) return status;
  return guard_and_expand(request, schedule, step);
}

}  // namespace fulcrum
