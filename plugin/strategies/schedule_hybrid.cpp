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
#include <queue>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_hybrid_draft.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

using hybrid::Batch;
using hybrid::Draft;
using hybrid::Estimator;
using hybrid::GroupRule;
using hybrid::Row;

// The batch's pieces, their estimated work and mean load; `group_heavy`:
// also place as groups the pieces within T whose work alone exceeds the
// mean load (rule 1's exception).
struct Prepared {
  std::vector<DocPiece> pieces;
  std::vector<double> work;
  std::vector<std::size_t> order;  // by work, largest first
  double mean_load = 0;
};

Prepared prepare(const ScheduleRequest& request, const Estimator& est) {
  Prepared prep;
  prep.pieces = schedule_pieces(request);
  prep.work.resize(prep.pieces.size());
  double total = 0;
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < prep.pieces.size(); ++i) {
    prep.work[i] = est.work(prep.pieces[i].length);
    total += prep.work[i];
    tokens += prep.pieces[i].length;
  }
  prep.order.resize(prep.pieces.size());
  std::iota(prep.order.begin(), prep.order.end(), std::size_t{0});
  std::stable_sort(prep.order.begin(), prep.order.end(),
                   [&](std::size_t a, std::size_t b) { return prep.work[a] > prep.work[b]; });
  prep.mean_load =
      (total + request.profile.slot_seconds *
                   static_cast<double>(ceil_div(tokens, request.max_tokens_per_rank))) /
      request.world_size;
  return prep;
}

// Waves: every slot after its members' earlier slots, in the estimated
// time order (groups and the rows in their waits by start, then each
// rank's trailing rows), so that each rank's wave order is its time order.
Schedule to_schedule(const Draft& best, const std::vector<DocPiece>& pieces, std::int32_t world) {
  Schedule schedule;
  schedule.strategy_used = "hybrid";
  struct Timed {
    double start;
    std::size_t index;
    bool group;
  };
  std::vector<Timed> timed;
  for (std::size_t k = 0; k < best.long_slots.size(); ++k) {
    timed.push_back({best.long_slots[k].start, k, true});
  }
  for (std::size_t k = 0; k < best.gaps.size(); ++k) {
    if (!best.gaps[k].pieces.empty()) timed.push_back({best.gaps[k].begin, k, false});
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const Timed& x, const Timed& y) { return x.start < y.start; });
  std::vector<std::int32_t> next_wave(static_cast<std::size_t>(world), 0);
  const auto add = [&](ScheduleSlot slot) {
    for (const std::int32_t a : slot.ranks) slot.wave = std::max(slot.wave, next_wave[a]);
    for (const std::int32_t a : slot.ranks) next_wave[a] = slot.wave + 1;
    schedule.slots.push_back(std::move(slot));
  };
  for (const Timed& t : timed) {
    ScheduleSlot slot;
    if (t.group) {
      slot.ranks = best.long_slots[t.index].ranks;
      slot.pieces.push_back(pieces[best.long_slots[t.index].piece]);
    } else {
      slot.ranks.push_back(best.gaps[t.index].rank);
      for (const std::size_t i : best.gaps[t.index].pieces) slot.pieces.push_back(pieces[i]);
    }
    add(std::move(slot));
  }
  for (std::int32_t a = 0; a < world; ++a) {
    for (const Row& row : best.rows[a]) {
      ScheduleSlot slot;
      slot.ranks.push_back(a);
      for (const std::size_t i : row.pieces) slot.pieces.push_back(pieces[i]);
      add(std::move(slot));
    }
  }
  return schedule;
}

// Drafts of equal groups (rule 8): for g = 1, 2, 4, ... and W, the world
// as floor(W / g) groups of g consecutive ranks. A piece longer than g x T
// runs over the m groups it needs that free up first (longest first); the
// other pieces are best fit, longest first, into rows of g x T tokens, and
// the rows, by estimated time, longest first, go to the group that frees
// up first. Batches of many long pieces of similar size pack better into
// shared rows than one piece per group.
Schedule packed_draft(const ScheduleRequest& request, const Estimator& est, const Prepared& prep,
                      const std::vector<std::size_t>& by_length, std::int32_t g, double& finish) {
  const std::int64_t capacity = static_cast<std::int64_t>(g) * request.max_tokens_per_rank;
  const std::int32_t groups = request.world_size / g;
  // Groups by load, ties by index, kept as loads change (a scan of every
  // group per row was O(W) a row).
  hybrid::LoadOrder load(groups);
  std::vector<std::int32_t> wave(static_cast<std::size_t>(groups), 0);
  Schedule schedule;
  schedule.strategy_used = "hybrid";
  const auto earliest = [&](std::int32_t m) { return load.earliest(m); };
  const auto place = [&](const std::vector<std::int32_t>& chosen, std::vector<DocPiece> pieces,
                         double time) {
    ScheduleSlot slot;
    double start = 0;
    for (const std::int32_t k : chosen) {
      start = std::max(start, load.at(k));
      slot.wave = std::max(slot.wave, wave[k]);
      for (std::int32_t a = 0; a < g; ++a) slot.ranks.push_back(k * g + a);
    }
    for (const std::int32_t k : chosen) {
      load.set(k, start + time);
      wave[k] = slot.wave + 1;
    }
    slot.pieces = std::move(pieces);
    schedule.slots.push_back(std::move(slot));
  };
  std::vector<Row> rows;
  std::multimap<std::int64_t, std::size_t> by_room;  // room -> row
  for (const std::size_t i : by_length) {
    const std::int64_t len = prep.pieces[i].length;
    if (len > capacity) {
      const auto m = static_cast<std::int32_t>(ceil_div(len, capacity));
      if (m > groups) return {};
      const std::int32_t n = m * g;
      place(earliest(m), {prep.pieces[i]},
            est.slot_time(prep.work[i], len, n, std::min(n, request.profile.ranks_per_node)));
      continue;
    }
    auto it = by_room.lower_bound(len);
    std::size_t k = rows.size();
    if (it == by_room.end()) {
      rows.push_back({capacity, {}});
    } else {
      k = it->second;
      by_room.erase(it);
    }
    rows[k].room -= len;
    rows[k].pieces.push_back(i);
    by_room.emplace(rows[k].room, k);
  }
  std::vector<double> time(rows.size());
  for (std::size_t k = 0; k < rows.size(); ++k) {
    double work = 0;
    for (const std::size_t i : rows[k].pieces) work += prep.work[i];
    time[k] = work / g + request.profile.slot_seconds;
  }
  std::vector<std::size_t> order(rows.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return time[a] > time[b]; });
  for (const std::size_t k : order) {
    std::vector<DocPiece> pieces;
    for (const std::size_t i : rows[k].pieces) pieces.push_back(prep.pieces[i]);
    place(earliest(1), std::move(pieces), time[k]);
  }
  finish = load.latest();
  return schedule;
}

std::vector<Schedule> packed_drafts(const ScheduleRequest& request, const Estimator& est,
                                    const Prepared& prep) {
  std::vector<std::size_t> by_length(prep.pieces.size());
  std::iota(by_length.begin(), by_length.end(), std::size_t{0});
  std::stable_sort(by_length.begin(), by_length.end(), [&](std::size_t a, std::size_t b) {
    return prep.pieces[a].length > prep.pieces[b].length;
  });
  std::vector<std::pair<double, Schedule>> drafts;
  const std::int32_t world = request.world_size;
  // A group wider than the batch has key blocks is wider than any row it
  // runs (hybrid::kBlocksPerMember), and pricing it costs g^2.
  std::int64_t tokens = 0;
  for (const DocPiece& piece : prep.pieces) tokens += piece.length;
  const std::int64_t widest = hybrid::widest_useful_group(tokens, request.block_size);
  for (std::int32_t g = 1; g <= world; g = (g == world ? world + 1 : std::min(world, 2 * g))) {
    if (g > 1 && g > widest) break;
    double finish = 0;
    Schedule s = packed_draft(request, est, prep, by_length, g, finish);
    if (!s.slots.empty()) drafts.emplace_back(finish, std::move(s));
  }
  // Soonest estimated finish first (ties: the smaller g), so that the
  // planning budget goes to the likeliest of them.
  std::stable_sort(drafts.begin(), drafts.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<Schedule> out;
  for (auto& d : drafts) out.push_back(std::move(d.second));
  return out;
}

// Every draft of the batch: with and without rule 1's heavy pieces as
// groups, under each group rule (one when no piece is grouped), the
// estimate's choice (soonest estimated finish, first of equals) first.
std::vector<Schedule> hybrid_drafts(const ScheduleRequest& request, bool every) {
  const Estimator est(request);
  const Prepared prep = prepare(request, est);
  std::vector<Schedule> out;
  std::vector<Draft> drafts;
  for (const bool group_heavy : {true, false}) {
    Batch batch{request,    prep.pieces,    prep.work,
                prep.order, prep.mean_load, std::vector<char>(prep.pieces.size(), 0)};
    bool any_long = false;
    bool any_heavy = false;
    for (std::size_t i = 0; i < prep.pieces.size(); ++i) {
      const bool heavy = prep.work[i] + request.profile.slot_seconds > batch.mean_load;
      const bool long_piece = prep.pieces[i].length > request.max_tokens_per_rank;
      batch.grouped[i] = long_piece || (group_heavy && heavy);
      any_long = any_long || batch.grouped[i];
      any_heavy = any_heavy || (heavy && !long_piece);
    }
    if (!group_heavy && !any_heavy) break;  // the same batch again
    std::size_t first = drafts.size();
    drafts.push_back(draft(batch, est, GroupRule::kMeanLoad));
    if (any_long) {
      for (const GroupRule rule :
           {GroupRule::kTimelineMeanLoad, GroupRule::kSoonestEnd, GroupRule::kBalancedEnd}) {
        // Only the soonest is used without `every`: a draft that cannot
        // finish before it is not packed (its makespan then kNoEnd).
        Draft other = draft(batch, est, rule, every ? hybrid::kNoEnd : drafts[first].makespan);
        if (other.makespan < drafts[first].makespan) std::swap(other, drafts[first]);
        drafts.push_back(std::move(other));
      }
    }
    if (!every) break;
  }
  // Without `every` only the estimate's choice is used: the others stay drafts.
  for (std::size_t k = 0; k < (every ? drafts.size() : 1); ++k) {
    out.push_back(to_schedule(drafts[k], prep.pieces, request.world_size));
  }
  if (every) {
    // The equal-groups draft of soonest estimated finish right after the
    // estimate's choice, the others after the group rules' drafts.
    std::vector<Schedule> packed = packed_drafts(request, est, prep);
    for (std::size_t k = 0; k < packed.size(); ++k) {
      const auto at = k == 0 ? out.begin() + 1 : out.end();
      out.insert(at, std::move(packed[k]));
    }
  }
  return out;
}

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
  Result<double> plan(const ScheduleRequest& request, ScheduleSlot& slot, double ceiling) {
    std::vector<std::int64_t> key;
    key.reserve(slot.ranks.size() + slot.pieces.size() + 1);
    key.push_back(static_cast<std::int64_t>(slot.ranks.size()));
    // Each member's node, numbered by first appearance.
    const std::int32_t node = request.profile.ranks_per_node;
    std::unordered_map<std::int32_t, std::int64_t> first;  // node -> first member on it
    for (std::size_t m = 0; m < slot.ranks.size(); ++m) {
      key.push_back(
          first.emplace(slot.ranks[m] / node, static_cast<std::int64_t>(m)).first->second);
    }
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
        hybrid::plan_slot_compact(request, slot, ceiling, &none_below, &rows_);
    if (planned && *planned < ceiling) {
      kept_.emplace(std::move(key), Kept{*planned, slot.plan, slot.member_weights});
    } else if (planned && none_below) {
      double& highest = none_below_[std::move(key)];
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
  hybrid::RowPlans rows_;  // rule 5's candidate plans of each row, counted
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

// What planning a draft costs, in tokens: a slot of g members is balanced
// over g and its exchange counted over g^2 member pairs, so a row of more
// than kWideSlot members counts g / kWideSlot times its tokens.
constexpr std::int64_t kWideSlot = 64;

std::int64_t planning_cost(const Schedule& schedule) {
  std::int64_t cost = 0;
  for (const ScheduleSlot& slot : schedule.slots) {
    std::int64_t n = 0;
    for (const DocPiece& piece : slot.pieces) n += piece.length;
    cost += n * std::max<std::int64_t>(1, static_cast<std::int64_t>(slot.ranks.size()) / kWideSlot);
  }
  return cost;
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
  return std::move(hybrid_drafts(request, false).front());
}

// Planning a draft prices its slots from runs, O(runs + blocks) per slot
// (schedule_hybrid_plan.cpp), and balances each multi-rank row: the other
// drafts are planned while their planning costs (planning_cost: tokens,
// rows over more than kWideSlot members weighted by their width), the
// decided draft's tokens included, stay within this; a draft that does not
// fit is skipped and the next tried. Beyond half of it neither they nor
// the search run, and the estimate's draft is the answer. 32M and 8M win
// 99% of the suite's batches on h100_7b before the guard (82% with the 4M
// and 1M of position-based pricing); docs/HYBRID.md section 6, "Issue 25",
// gives the plan time they cost.
constexpr std::int64_t kDraftTokenBudget = std::int64_t{32} << 20;
// The rows rule 7's search may re-plan, in tokens, whatever the batch.
constexpr std::int64_t kSearchTokenBudget = std::int64_t{8} << 20;

namespace {

// The decided draft is the estimate's bet; the other drafts (the other
// group rules, heavy pieces within T kept on one rank, equal groups) are
// planned and priced exactly too, within kDraftTokenBudget, and the soonest
// is kept (ties: the decided one, then the drafts' order). The estimate
// misjudges small batches most, where this costs least. Then rule 7's
// search. Every slot stays compact (no positions); `step` gets the exact
// step of the schedule kept. `drawn`: every draft of the batch as
// hybrid_drafts(request, true) draws them, the decided one first, when the
// caller drew them already (run_hybrid); nullptr: drawn here when needed.
Status plan_compact(const ScheduleRequest& request, Schedule& schedule, double& step,
                    std::vector<Schedule>* drawn) {
  std::vector<double> length;
  SlotMemo memo;
  if (Status status = plan_slots(request, memo, schedule, length); !status) return status;
  double best = hybrid::step_of_lengths(request, schedule, length);
  step = best;
  std::int64_t tokens = 0;
  for (const std::int64_t len : request.doc_lengths) tokens += len;
  if (2 * tokens > kDraftTokenBudget) return Status::ok();
  std::int64_t planned = tokens;
  std::vector<Schedule> own_draw;
  if (drawn == nullptr) {
    own_draw = hybrid_drafts(request, true);
    drawn = &own_draw;
  }
  for (std::size_t k = 0; k < drawn->size(); ++k) {
    // The first is the decided draft (drawn again, or the one drawn once).
    if (k == 0) continue;
    Schedule& other = (*drawn)[k];
    const std::int64_t cost = planning_cost(other);
    if (planned + cost > kDraftTokenBudget) continue;
    if (same_slots(other, schedule)) continue;
    if (decided_step_lower_bound(request, other) * (1 - 1e-9) >= best) continue;
    std::vector<double> other_length;
    if (Status status = plan_slots(request, memo, other, other_length, best); !status)
      return status;
    planned += cost;
    if (other_length.size() < other.slots.size()) continue;  // a slot alone reaches `best`
    const double other_step = hybrid::step_of_lengths(request, other, other_length);
    if (other_step < best) {
      best = other_step;
      schedule = std::move(other);
      length = std::move(other_length);
    }
  }
  // The search replays the same timeline; a schedule it made slower (it
  // cannot: it keeps only moves that do not delay the step) is not kept.
  const hybrid::SlotPlanner planner = [&memo](const ScheduleRequest& r, ScheduleSlot& slot,
                                              double ceiling) {
    return memo.plan(r, slot, ceiling);
  };
  Schedule searched = schedule;
  std::vector<double> searched_length = length;
  if (Status status = hybrid::improve_on_timeline(request, searched, searched_length, planner,
                                                  kSearchTokenBudget);
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
  // decide_hybrid's draft is the first of every draft (hybrid_drafts puts
  // the estimate's choice first either way); the others are drawn only
  // where plan_compact will plan them.
  std::int64_t tokens = 0;
  for (const std::int64_t len : request.doc_lengths) tokens += len;
  std::vector<Schedule> drawn = hybrid_drafts(request, 2 * tokens <= kDraftTokenBudget);
  Schedule schedule = std::move(drawn.front());
  double step = 0;
  if (Status status = plan_compact(request, schedule, step, &drawn); !status) return status;
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
