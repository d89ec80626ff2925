// hybrid's never-slower guard (rule 6 of schedule_hybrid.cpp): the bound on
// a decided schedule that spares planning a baseline that cannot win, and
// the exact comparison with fixed's and megatron_dcp's schedules.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/slot_runs.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/schedule_hybrid_draft.h"
#include "strategies/schedule_hybrid_nodes.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

// Sum over a piece's queries of ceil(keys / B): a local query block holds at
// most B queries and has at least ceil(keys(q) / B) tiles for each query q
// it holds, so a member's tiles are at least its queries' sum over B.
double query_key_blocks(const MaskSpec& mask, std::int64_t len, std::int64_t b) {
  // Causal over queries 1..n (query i sees i keys).
  const auto causal = [b](std::int64_t n) {
    const std::int64_t q = n / b;
    const std::int64_t r = n % b;
    return static_cast<double>(b) * static_cast<double>(q) * static_cast<double>(q + 1) / 2 +
           static_cast<double>(q + 1) * static_cast<double>(r);
  };
  switch (mask.kind) {
    case MaskKind::kCausal:
      return causal(len);
    case MaskKind::kFull:
      return static_cast<double>(len) * static_cast<double>(ceil_div(len, b));
    case MaskKind::kSliding: {
      const std::int64_t w = std::min(mask.param, len);
      return causal(w) + static_cast<double>(len - w) * static_cast<double>(ceil_div(w, b));
    }
    case MaskKind::kPrefix: {
      const std::int64_t f = std::min(mask.param, len);
      return static_cast<double>(f) * static_cast<double>(ceil_div(f, b)) + causal(len) - causal(f);
    }
    case MaskKind::kBlockSparse:
      break;
  }
  return 0;
}

// A baseline is ruled out when a lower bound on its step reaches hybrid's.
// The bounds sum in another order than the exact price: a margin far above
// rounding keeps "cannot be cheaper" certain.
constexpr double kBoundMargin = 1 - 1e-9;

// The step of a baseline's decided schedule once planned, priced from the
// runs its planner writes, without positions: plan_fixed shards a slot by
// CP `auto` (contiguously where auto needs more than T per member),
// plan_megatron_dcp by per_document_padded (contiguously on one rank, or
// where the padded plan needs more than T). Equal to evaluate_schedule of
// the planned schedule (the property test compares the guard's answer with
// both baselines planned and priced in full).
// Each slot's plan is counted once (count_runs) and priced from its counts
// in up to three steps, each only where the one before leaves the step
// below `beat`: the floors of compute and peers' latency; on slots of rows
// up to 2^18 tokens, the floors with their exchange totals (which rule out
// small batches' wide groups, and cost more than they save on longer
// rows); the exact price. The widest slots are counted first, and the
// timeline of their floors and the others' mean-compute bounds checked
// after 1, 2, 4, ... of them (small batches' groups that megatron_dcp's
// empty-rank filling widened are ruled out by the first). When floors reach
// `beat`, +infinity stands for "no sooner than beat".
constexpr std::int64_t kExchangeFloorTokens = std::int64_t{1} << 18;

// The slots to count first: the widest (the most peers, so the highest
// floors: small batches' groups widened to thousands of ranks), ties in
// slot order.
std::vector<std::size_t> widest_first(const Schedule& schedule) {
  std::vector<std::size_t> order(schedule.slots.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return schedule.slots[x].ranks.size() > schedule.slots[y].ranks.size();
  });
  return order;
}

Result<double> baseline_step(const ScheduleRequest& request, const Schedule& schedule,
                             bool fixed_rules, double beat) {
  const std::int64_t budget = request.max_tokens_per_rank;
  const std::size_t n = schedule.slots.size();
  std::vector<CountedRuns> plans(n);
  // Until a slot is counted its length is at least its members' mean
  // compute (with the bound's margin); counted, at least its floor.
  std::vector<double> length(n);
  for (std::size_t s = 0; s < n; ++s) {
    length[s] = slot_length_lower_bound(request, schedule.slots[s]) * kBoundMargin;
  }
  bool any_short = false;
  std::size_t counted = 0;
  std::size_t next_check = 1;
  for (const std::size_t s : widest_first(schedule)) {
    const ScheduleSlot& slot = schedule.slots[s];
    const CpWorkload w = slot_workload(request, slot);
    RunShardPlan runs;
    if (fixed_rules) {
      Result<cp::detail::AutoChoice> choice = cp::detail::auto_choice(w);
      if (!choice) return choice.status();
      runs = std::move(choice->runs);
    } else if (w.cp_size > 1) {
      runs = *hybrid::slot_rule_runs("per_document_padded", w);
    }
    if (runs.rank_offset.empty() || runs.shard_len > budget) {
      runs = cp::detail::contiguous_runs(w.tokens, w.cp_size);
    }
    any_short = any_short || w.tokens <= kExchangeFloorTokens;
    plans[s] = count_runs(request, slot, std::move(runs));
    length[s] = slot_end_counted_below(request, slot, plans[s], 0.0, false).end;
    // The timeline of the floors so far and the others' bounds, after 1,
    // 2, 4, ... slots: a few replays, and the rest left uncounted where the
    // widest slots' floors already reach `beat`.
    if (++counted == next_check && counted < n) {
      next_check *= 2;
      if (hybrid::step_of_lengths(request, schedule, length) >= beat) {
        return std::numeric_limits<double>::infinity();
      }
    }
  }
  const auto reaches = [&] { return hybrid::step_of_lengths(request, schedule, length) >= beat; };
  if (reaches()) return std::numeric_limits<double>::infinity();
  if (any_short) {
    for (std::size_t s = 0; s < plans.size(); ++s) {
      const ScheduleSlot& slot = schedule.slots[s];
      if (slot_workload(request, slot).tokens > kExchangeFloorTokens) continue;
      length[s] = slot_end_counted_below(request, slot, plans[s], 0.0).end;
    }
    if (reaches()) return std::numeric_limits<double>::infinity();
  }
  for (std::size_t s = 0; s < plans.size(); ++s) {
    length[s] = slot_end_counted_below(request, schedule.slots[s], plans[s],
                                       std::numeric_limits<double>::infinity())
                    .end;
  }
  return hybrid::step_of_lengths(request, schedule, length);
}

// A piece's compute on one rank, at least (slot_length_lower_bound's terms
// for one piece, before the fixed cost and the share over g).
double piece_compute(const ScheduleRequest& request, std::int64_t length) {
  const CostProfile& p = request.profile;
  return p.tile_seconds * query_key_blocks(request.mask, length, request.block_size) /
             static_cast<double>(request.block_size) +
         p.token_seconds * static_cast<double>(length);
}

// No schedule of fixed's ends sooner than this, and it needs no decision:
// fixed runs every piece in a row of at most cp x T tokens over one of the
// W / cp CP groups, each group's rows one after another. A row lasts at
// least its members' mean compute (decided_step_lower_bound's per-slot
// bound), so the group that finishes last runs at least the mean over the
// groups of all rows' lengths, with at least ceil(tokens / (cp T)) rows;
// and at least the longest piece's row. +infinity where fixed refuses the
// request (it is then no candidate).
double fixed_step_lower_bound(const ScheduleRequest& request) {
  const std::vector<DocPiece> pieces = schedule_pieces(request);
  const Result<std::int32_t> cp = fixed_cp_size(request, pieces);
  if (!cp) return std::numeric_limits<double>::infinity();
  const CostProfile& p = request.profile;
  const auto g = static_cast<double>(*cp);
  double work = 0;
  double longest = 0;
  std::int64_t tokens = 0;
  for (const DocPiece& piece : pieces) {
    const double w = piece_compute(request, piece.length);
    work += w;
    longest = std::max(longest, w);
    tokens += piece.length;
  }
  const std::int64_t rows = ceil_div(tokens, *cp * request.max_tokens_per_rank);
  const double groups = static_cast<double>(request.world_size / *cp);
  return std::max(p.slot_seconds + longest / g,
                  (static_cast<double>(rows) * p.slot_seconds + work / g) / groups);
}

// decided_step_lower_bound's timeline, fed slot by slot in wave order.
class StepFloor {
 public:
  explicit StepFloor(const ScheduleRequest& request)
      : request_(request), free_at_(static_cast<std::size_t>(request.world_size), 0.0) {}
  void add(const ScheduleSlot& slot) {
    const double length = slot_length_lower_bound(request_, slot);
    double start = 0;
    for (const std::int32_t a : slot.ranks) start = std::max(start, free_at_[a]);
    for (const std::int32_t a : slot.ranks) free_at_[a] = start + length;
    step_ = std::max(step_, start + length);
  }
  double step() const { return step_; }

 private:
  const ScheduleRequest& request_;
  std::vector<double> free_at_;
  double step_ = 0;
};

using Note = std::function<void(const char* what)>;

// fixed's decided schedule, or nothing where fixed refuses the request or
// cannot end before `best`: ruled out before any decision ("bound"), from
// its DP groups before their rows are packed ("groups"), or by its decided
// slots' bound ("decided").
std::optional<Schedule> fixed_candidate(const ScheduleRequest& request, double best,
                                        const Note& note) {
  if (fixed_step_lower_bound(request) * kBoundMargin >= best) {
    note("bound");
    return std::nullopt;
  }
  // A set cp_size fixed cannot use: no candidate.
  Result<FixedPartition> groups = decide_fixed_groups(request);
  if (!groups) return std::nullopt;
  if (fixed_groups_step_lower_bound(request, *groups) * kBoundMargin >= best) {
    note("groups");
    return std::nullopt;
  }
  Schedule decided = fixed_rows(request, *groups);
  if (decided_step_lower_bound(request, decided) * kBoundMargin >= best) {
    note("decided");
    return std::nullopt;
  }
  return decided;
}

// megatron_dcp's decided schedule, or nothing where Megatron fails (its
// fallback is fixed's schedule, which fixed_candidate has weighed: it could
// not be strictly cheaper than `best` a second time) or its decided slots'
// bound reaches `best` ("decided"). Its slots come wave by wave, so that
// bound is the timeline of the micro-batches decided so far, which only
// grows with the ones after: the decision stops at the first micro-batch
// whose timeline reaches `best`.
std::optional<Schedule> megatron_candidate(const ScheduleRequest& request, double best,
                                           const Note& note) {
  StepFloor floor(request);
  std::size_t fed = 0;
  const auto reaches = [&](const Schedule& so_far) {
    for (; fed < so_far.slots.size(); ++fed) floor.add(so_far.slots[fed]);
    return floor.step() * kBoundMargin >= best;
  };
  bool stopped = false;
  Result<Schedule> decided = decide_megatron_dcp_waves(request, reaches, stopped);
  if (!decided) return std::nullopt;
  if (stopped || reaches(*decided)) {
    note("decided");
    return std::nullopt;
  }
  return std::move(*decided);
}

}  // namespace

// No schedule fixed packs from these DP groups ends sooner than this, and
// it needs no rows: a group runs its rows one after another on its cp
// ranks, each at least its members' mean compute (decided_step_lower_bound's
// per-slot bound), so it ends no sooner than its rows' fixed costs plus its
// pieces' compute over cp; and it packs at least ceil(tokens / (cp T)) rows,
// and at least one per piece longer than half a row (no two share one).
double fixed_groups_step_lower_bound(const ScheduleRequest& request, const FixedPartition& groups) {
  const std::int64_t row = groups.cp * request.max_tokens_per_rank;
  const auto g = static_cast<double>(groups.cp);
  double step = 0;
  for (const std::vector<std::int64_t>& group : groups.groups) {
    double work = 0;
    std::int64_t tokens = 0;
    std::int64_t long_pieces = 0;
    for (const std::int64_t i : group) {
      const std::int64_t length = groups.pieces[static_cast<std::size_t>(i)].length;
      work += piece_compute(request, length);
      tokens += length;
      long_pieces += 2 * length > row ? 1 : 0;
    }
    const std::int64_t rows = std::max(ceil_div(tokens, row), long_pieces);
    step = std::max(step, static_cast<double>(rows) * request.profile.slot_seconds + work / g);
  }
  return step;
}

double slot_length_lower_bound(const ScheduleRequest& request, const ScheduleSlot& slot) {
  const CostProfile& p = request.profile;
  double key_blocks = 0;
  std::int64_t tokens = 0;
  for (const DocPiece& piece : slot.pieces) {
    key_blocks += query_key_blocks(request.mask, piece.length, request.block_size);
    tokens += piece.length;
  }
  const double g = static_cast<double>(slot.ranks.size());
  return p.slot_seconds + (p.tile_seconds * key_blocks / static_cast<double>(request.block_size) +
                           p.token_seconds * static_cast<double>(tokens)) /
                              g;
}

// No plan of these decided slots ends sooner than this: every slot lasts at
// least its members' mean compute (the fixed cost, the tokens and the tile
// count above, shared over g), and the slots run on the same timeline the
// cost model uses (wave order, a slot starting when its last member is
// free), which only grows with the slots' lengths.
double decided_step_lower_bound(const ScheduleRequest& request, const Schedule& schedule) {
  // In wave order (a stable sort by wave, as a counting sort).
  std::vector<std::size_t> order;
  std::vector<std::size_t> counts;
  hybrid::wave_order(schedule, order, counts);
  StepFloor floor(request);
  for (const std::size_t s : order) floor.add(schedule.slots[s]);
  return floor.step();
}

Status keep_fastest_of_baselines(const ScheduleRequest& request, Schedule& schedule) {
  return keep_fastest_of_baselines(request, schedule,
                                   evaluate_schedule(request, schedule).step_seconds);
}

namespace {

struct Baseline {
  const char* name;
  std::optional<Schedule> (*decide)(const ScheduleRequest&, double best, const Note& note);
  Status (*plan)(const ScheduleRequest&, Schedule&);
  bool fixed_rules;  // its plans: fixed's (CP auto), else megatron_dcp's
};

// The exact step of a baseline's decided schedule, planned (its plans by
// rule where the answer is compact); +infinity where it is not below `best`
// or cannot be planned (no candidate).
double planned_step(const ScheduleRequest& request, const Baseline& baseline, Schedule& other,
                    double best, GuardTrace* trace) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  const auto note = [&](const char* what) {
    if (trace) trace->steps.emplace_back(baseline.name, what);
  };
  if (!request.group_shapes.restricts()) {
    // Priced from runs first: its positions are written only when it wins.
    const Result<double> priced = baseline_step(request, other, baseline.fixed_rules, best);
    if (!priced || *priced >= best) {
      note("priced");
      return kNone;
    }
    note("planned");
    if (Status status = baseline.plan(request, other); !status) return kNone;
    return *priced;
  }
  note("planned");
  // Priced from positions here, so planned in full even for a compact
  // answer (whose positions the registry then drops).
  ScheduleRequest full = request;
  full.compact = false;
  if (Status status = baseline.plan(full, other); !status) return kNone;
  // Under group_shapes a baseline is a candidate only where it keeps them.
  if (!validate_schedule(request, other)) return kNone;
  const double step = evaluate_schedule(request, other).step_seconds;
  // A compact answer's winner is planned by rule (fixed's plans then name
  // `auto`, which the host can expand).
  if (step < best && request.compact) {
    if (Status status = baseline.plan(request, other); !status) return kNone;
  }
  return step;
}

}  // namespace

Status keep_fastest_of_baselines(const ScheduleRequest& request, Schedule& schedule, double own,
                                 GuardTrace* trace) {
  double best = own;
  Schedule winner;
  std::string winner_name;
  for (const Baseline& baseline :
       {Baseline{"fixed", &fixed_candidate, &plan_fixed, true},
        Baseline{"megatron_dcp", &megatron_candidate, &plan_megatron_dcp, false}}) {
    const Note note = [&](const char* what) {
      if (trace) trace->steps.emplace_back(baseline.name, what);
    };
    // A baseline that refuses the request (megatron_dcp's padding, a set
    // cp_size fixed cannot use) or cannot be cheaper is no candidate.
    std::optional<Schedule> other = baseline.decide(request, best, note);
    if (!other) continue;
    const double step = planned_step(request, baseline, *other, best, trace);
    if (step < best) {
      best = step;
      winner = std::move(*other);
      winner_name = baseline.name;
    }
  }
  if (winner_name.empty()) return Status::ok();
  std::ostringstream reason;
  reason.precision(6);
  reason << winner_name << "'s schedule is predicted to end at " << best
         << " s, before hybrid's own placement at " << own << " s; returned it";
  schedule.slots = std::move(winner.slots);
  schedule.fallback_reason = reason.str();
  return Status::ok();
}

}  // namespace fulcrum
