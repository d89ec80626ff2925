// `hybrid`: fulcrum's own placement of a global batch over the pool of W
// ranks, by the cost model of docs/HYBRID.md.
//
// Why it is built this way:
// 1. A piece that fits one rank (L <= T) stays on one rank: any group would
//    add K/V traffic, latency and tile waste for no memory it needs. Short
//    pieces are therefore pure bin packing, where longest-processing-time
//    first is within 4/3 of optimal and cheap.
// 2. A longer piece needs g >= ceil(L / T) ranks, any integer g. More ranks
//    shorten its slot (compute / g) but cost more rank-seconds (each member
//    pays the fixed slot cost, latency per peer, and the K/V of the other
//    members' blocks). So a piece takes the smallest g whose estimated slot
//    time stays within the batch's mean load per rank — it then cannot be
//    the critical path by itself — or, when no g achieves that, the g with
//    the shortest slot.
// 3. Multi-rank slots are placed first, largest first, by list scheduling
//    on the ranks' free times: the members are the g ranks free earliest,
//    kept inside one node when that node frees them no later than the world
//    would, since intra-node bandwidth is several times the inter-node one.
//    Short pieces then fill every rank up to a common finish (LPT on the
//    ranks' loads, packed best-fit into rows of at most T tokens, each row
//    one single-rank slot paying the fixed slot cost once).
// 4. Inside a multi-rank slot the row is sharded by the `balanced` CP
//    planner, or by `contiguous` when the cost model says it ends the slot
//    sooner (a sliding window: contiguous shards touch only their window's
//    keys), and a member receives only the key blocks its tiles touch.
// Waves follow each rank's slot order, every slot's wave above its members'
// earlier ones, so a rank's wave order is its time order (no deadlock, see
// docs/HYBRID.md). Deterministic: no clock, no randomness, ties by index.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

// Tiles of a piece alone on one rank, at offset 0.
std::int64_t tiles_alone(const MaskSpec& mask, std::int64_t len, std::int64_t b) {
  const std::int64_t nb = ceil_div(len, b);
  if (mask.kind == MaskKind::kCausal) return nb * (nb + 1) / 2;
  if (mask.kind == MaskKind::kFull) return nb * nb;
  CpWorkload w;
  w.tokens = len;
  w.mask = mask;
  w.block_size = b;
  std::int64_t tiles = 0;
  for (const std::int64_t t : block_costs(w).tiles) tiles += t;
  return tiles;
}

class Estimator {
 public:
  explicit Estimator(const ScheduleRequest& r) : r_(r), p_(r.profile) {}

  double work(std::int64_t len) const {
    return p_.tile_seconds * static_cast<double>(tiles_alone(r_.mask, len, r_.block_size)) +
           p_.token_seconds * static_cast<double>(len);
  }

  // K/V tokens a member of a g-rank balanced group receives from one peer:
  // a balanced plan deals blocks from the whole piece to every member, so a
  // member touches about every key block before its last query (all of the
  // piece but a sliding window's reach).
  double tokens_per_peer(std::int64_t len, std::int32_t g) const {
    const double share = static_cast<double>(len) / g;
    if (r_.mask.kind != MaskKind::kSliding) return share;
    const double reach = share / static_cast<double>(r_.block_size) *
                         static_cast<double>(r_.mask.param + r_.block_size);
    return std::min(share, std::min(static_cast<double>(len) - share, reach) / (g - 1));
  }

  // Slowest member's time in a g-rank slot whose most isolated member has
  // `together` members on its node (itself included).
  double slot_time(double piece_work, std::int64_t len, std::int32_t g,
                   std::int32_t together) const {
    double t = piece_work / g + p_.slot_seconds;
    if (g == 1) return t;
    const double bytes = 2 * tokens_per_peer(len, g) * p_.kv_bytes_per_token;
    t += bytes * (together - 1) / p_.intra_node_bytes_per_second +
         bytes * (g - together) / p_.inter_node_bytes_per_second + p_.latency_seconds * (g - 1);
    return t;
  }

 private:
  const ScheduleRequest& r_;
  const CostProfile& p_;
};

struct LongSlot {
  std::vector<std::int32_t> ranks;
  std::size_t piece = 0;
  std::int32_t wave = 0;
};

struct Row {
  std::int64_t room = 0;
  std::vector<std::size_t> pieces;
};

// How a long piece's group size is chosen.
enum class GroupRule {
  // The smallest g whose slot alone fits in the mean load per rank (else
  // the g with the shortest slot): fewest rank-seconds, blind to the
  // timeline.
  kMeanLoad,
  // The smallest g whose slot, started when its g earliest ranks are free,
  // ends within the mean load (else the g that ends soonest).
  kTimelineMeanLoad,
  // The g that ends soonest on the timeline: long pieces spread wide.
  kSoonestEnd,
};

struct Draft {
  std::vector<LongSlot> long_slots;
  std::vector<std::vector<Row>> rows;  // per rank, its single-rank slots
  std::vector<std::int32_t> next_wave;
  double makespan = 0;  // estimated
};

struct Batch {
  const ScheduleRequest& request;
  const std::vector<DocPiece>& pieces;
  const std::vector<double>& work;
  const std::vector<std::size_t>& order;  // by work, largest first
  double mean_load = 0;
};

Draft draft(const Batch& batch, const Estimator& est, GroupRule rule) {
  const ScheduleRequest& request = batch.request;
  const CostProfile& prof = request.profile;
  const std::int32_t world = request.world_size;
  const std::int64_t budget = request.max_tokens_per_rank;
  const std::int32_t node = prof.ranks_per_node;
  const auto& pieces = batch.pieces;
  const auto& work = batch.work;

  Draft d;
  std::vector<double> free_at(static_cast<std::size_t>(world), 0.0);
  d.next_wave.assign(static_cast<std::size_t>(world), 0);
  std::vector<std::int32_t> by_free(static_cast<std::size_t>(world));
  std::vector<double> kth_free;  // kth_free[k - 1]: the k-th earliest free time
  const auto earlier = [&](std::int32_t a, std::int32_t b) {
    return free_at[a] < free_at[b] || (free_at[a] == free_at[b] && a < b);
  };

  for (const std::size_t i : batch.order) {
    const std::int64_t len = pieces[i].length;
    if (len <= budget) continue;
    // Room for the balanced planner's padding (at most a block per member)
    // where the world allows it; plan_hybrid falls back when it does not.
    auto g_min = static_cast<std::int32_t>(ceil_div(len, budget));
    if (budget > request.block_size) {
      const std::int64_t roomy = ceil_div(len, budget - request.block_size);
      if (roomy <= world) g_min = static_cast<std::int32_t>(roomy);
    }
    std::iota(by_free.begin(), by_free.end(), 0);
    std::sort(by_free.begin(), by_free.end(), earlier);
    std::int32_t g = g_min;
    double best = std::numeric_limits<double>::infinity();
    for (std::int32_t c = g_min; c <= world; ++c) {
      const double start = rule == GroupRule::kMeanLoad ? 0.0 : free_at[by_free[c - 1]];
      const double end = start + est.slot_time(work[i], len, c, std::min(c, node));
      if (end < best) {
        best = end;
        g = c;
      }
      if (rule != GroupRule::kSoonestEnd && end <= batch.mean_load) {
        g = c;
        break;
      }
    }

    // Members: the g ranks free earliest in the world, or in one node.
    std::vector<std::int32_t> members(by_free.begin(), by_free.begin() + g);
    const auto together_of = [&](const std::vector<std::int32_t>& ranks) {
      std::int32_t least = g;
      for (const std::int32_t a : ranks) {
        std::int32_t same = 0;
        for (const std::int32_t b : ranks) same += (a / node == b / node);
        least = std::min(least, same);
      }
      return least;
    };
    const auto start_of = [&](const std::vector<std::int32_t>& ranks) {
      double s = 0;
      for (const std::int32_t a : ranks) s = std::max(s, free_at[a]);
      return s;
    };
    double end = start_of(members) + est.slot_time(work[i], len, g, together_of(members));
    if (g > 1 && g <= node) {
      for (std::int32_t first = 0; first < world; first += node) {
        std::vector<std::int32_t> local;
        for (std::int32_t a = first; a < std::min(world, first + node); ++a) local.push_back(a);
        if (static_cast<std::int32_t>(local.size()) < g) continue;
        std::partial_sort(local.begin(), local.begin() + g, local.end(), earlier);
        local.resize(static_cast<std::size_t>(g));
        const double local_end = start_of(local) + est.slot_time(work[i], len, g, g);
        if (local_end < end) {
          end = local_end;
          members = std::move(local);
        }
      }
    }
    std::sort(members.begin(), members.end());
    LongSlot slot;
    slot.piece = i;
    for (const std::int32_t a : members) slot.wave = std::max(slot.wave, d.next_wave[a]);
    for (const std::int32_t a : members) {
      free_at[a] = end;
      d.next_wave[a] = slot.wave + 1;
    }
    slot.ranks = std::move(members);
    d.long_slots.push_back(std::move(slot));
  }

  // Short pieces: LPT onto the least loaded rank, best fit into its rows.
  d.rows.assign(static_cast<std::size_t>(world), {});
  using Load = std::pair<double, std::int32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<>> lightest;
  for (std::int32_t a = 0; a < world; ++a) lightest.emplace(free_at[a], a);
  for (const std::size_t i : batch.order) {
    const std::int64_t len = pieces[i].length;
    if (len > budget) continue;
    auto [load, a] = lightest.top();
    lightest.pop();
    std::vector<Row>& mine = d.rows[a];
    Row* fit = nullptr;
    for (Row& row : mine) {
      if (row.room >= len && (fit == nullptr || row.room < fit->room)) fit = &row;
    }
    if (fit == nullptr) {
      mine.push_back({budget, {}});
      fit = &mine.back();
      load += prof.slot_seconds;
    }
    fit->room -= len;
    fit->pieces.push_back(i);
    lightest.emplace(load + work[i], a);
  }
  while (!lightest.empty()) {
    d.makespan = std::max(d.makespan, lightest.top().first);
    lightest.pop();
  }
  return d;
}

}  // namespace

Result<Schedule> decide_hybrid(const ScheduleRequest& request) {
  if (Status status = validate_schedule_request(request); !status) return status;
  const std::vector<DocPiece> pieces = schedule_pieces(request);
  const Estimator est(request);
  const CostProfile& prof = request.profile;
  const std::int32_t world = request.world_size;

  std::vector<double> work(pieces.size());
  double total = 0;
  std::int64_t tokens = 0;
  bool any_long = false;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    work[i] = est.work(pieces[i].length);
    total += work[i];
    tokens += pieces[i].length;
    any_long = any_long || pieces[i].length > request.max_tokens_per_rank;
  }
  std::vector<std::size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return work[a] > work[b]; });
  const Batch batch{request, pieces, work, order,
                    (total + prof.slot_seconds * static_cast<double>(ceil_div(
                                                     tokens, request.max_tokens_per_rank))) /
                        world};

  // The rules differ only in the long pieces' groups: draft each (one when
  // there is no long piece) and keep the soonest estimated finish, the
  // first of equals.
  Draft best = draft(batch, est, GroupRule::kMeanLoad);
  if (any_long) {
    for (const GroupRule rule : {GroupRule::kTimelineMeanLoad, GroupRule::kSoonestEnd}) {
      Draft other = draft(batch, est, rule);
      if (other.makespan < best.makespan) best = std::move(other);
    }
  }

  Schedule schedule;
  schedule.strategy_used = "hybrid";
  for (const LongSlot& ls : best.long_slots) {
    ScheduleSlot slot;
    slot.ranks = ls.ranks;
    slot.pieces.push_back(pieces[ls.piece]);
    slot.wave = ls.wave;
    schedule.slots.push_back(std::move(slot));
  }
  for (std::int32_t a = 0; a < world; ++a) {
    for (const Row& row : best.rows[a]) {
      ScheduleSlot slot;
      slot.ranks.push_back(a);
      for (const std::size_t i : row.pieces) slot.pieces.push_back(pieces[i]);
      slot.wave = best.next_wave[a]++;
      schedule.slots.push_back(std::move(slot));
    }
  }
  return schedule;
}

Status plan_hybrid(const ScheduleRequest& request, Schedule& schedule) {
  const std::int64_t budget = request.max_tokens_per_rank;
  for (ScheduleSlot& slot : schedule.slots) {
    const CpWorkload w = slot_workload(request, slot);
    if (w.cp_size == 1) {
      slot.plan = contiguous_plan(w);
      continue;
    }
    Result<ShardPlan> balanced = cp::plan_balanced(w);
    if (!balanced) return balanced.status();
    if (balanced->shard_len > budget) {
      // per_document holds at most ceil(N / g) <= T tokens per member.
      Result<ShardPlan> even = cp::plan_per_document(w);
      if (!even) return even.status();
      even->fallback_reason = "balanced needs " + std::to_string(balanced->shard_len) +
                              " tokens per rank, more than T = " + std::to_string(budget);
      balanced = std::move(even);
    }
    slot.plan = std::move(*balanced);
    const double balanced_end = evaluate_slot(request, slot).end_seconds;
    ScheduleSlot contiguous = slot;
    contiguous.plan = contiguous_plan(w);
    if (evaluate_slot(request, contiguous).end_seconds < balanced_end) {
      slot.plan = std::move(contiguous.plan);
    }
  }
  return Status::ok();
}

}  // namespace fulcrum
