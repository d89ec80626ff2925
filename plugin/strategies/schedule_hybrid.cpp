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
//    planner, or by `per_document` (head-tail) or `contiguous` when the cost
//    model says that ends the slot sooner (head-tail members need fewer
//    keys; a sliding window's contiguous shards touch only their window's),
//    and a member receives only the key blocks its tiles touch.
// 6. The rules above are estimates, and a baseline can win a batch they
//    misjudge (one extra row on one rank is the difference when every
//    document fits one rank). So the planned schedule is priced exactly
//    (evaluate_schedule) against the schedules `fixed` and `megatron_dcp`
//    give for the same request, and the cheapest is returned (ties: hybrid's
//    own, then fixed): hybrid is never slower than either by the cost model.
//    A baseline is planned only when a lower bound on its decided slots
//    (each slot's mean member compute over a per-query tile count, on the
//    slots' timeline) is below hybrid's step: positions are the costly part.
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
  double start = 0;  // estimated
};

// A member's wait for the last member of its next multi-rank slot: room for
// one single-rank row that ends before the slot starts.
struct Gap {
  std::int32_t rank = 0;
  double begin = 0;
  double seconds = 0;  // left for pieces (the row's fixed cost taken off)
  std::int64_t room = 0;
  std::vector<std::size_t> pieces;
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
  // The g whose slot end, or the mean load once the rank-seconds its
  // groups spend beyond their work (fixed costs, K/V, latency) are added,
  // whichever is later, is least: a piece too long for the mean load at
  // any g is spread only as far as the ranks it takes from the others pay.
  kBalancedEnd,
};

struct Draft {
  std::vector<LongSlot> long_slots;
  std::vector<Gap> gaps;               // rows run while waiting for a group
  std::vector<std::vector<Row>> rows;  // per rank, its rows after its groups
  double makespan = 0;                 // estimated
};

struct Batch {
  const ScheduleRequest& request;
  const std::vector<DocPiece>& pieces;
  const std::vector<double>& work;
  const std::vector<std::size_t>& order;  // by work, largest first
  double mean_load = 0;
  // Placed as groups: longer than T, or too much work for one rank within
  // the mean load (such a piece alone would set the step on one rank).
  std::vector<char> grouped;
};

// LPT leaves the most loaded rank up to one piece above the others; moving
// a piece from it to the least loaded rank, or swapping one for a smaller
// one there, closes much of that gap. Rows keep their T budget; a row left
// empty is dropped (its fixed slot cost with it), a piece that fits no row
// of its new rank opens one. Stops when neither lowers the pair's maximum.
void rebalance(const Batch& batch, std::vector<std::vector<Row>>& rows, std::vector<double>& load) {
  const std::int64_t budget = batch.request.max_tokens_per_rank;
  const double slot_cost = batch.request.profile.slot_seconds;
  const auto& pieces = batch.pieces;
  const auto& work = batch.work;
  const auto world = static_cast<std::int32_t>(load.size());
  const auto fits_row = [&](const std::vector<Row>& mine, std::int64_t len, std::size_t skip_row) {
    for (std::size_t r = 0; r < mine.size(); ++r) {
      if (r != skip_row && mine[r].room >= len) return static_cast<std::int64_t>(r);
    }
    return std::int64_t{-1};
  };
  for (std::int32_t round = 0; round < 4 * world + 16; ++round) {
    std::int32_t hi = 0;
    std::int32_t lo = 0;
    for (std::int32_t a = 1; a < world; ++a) {
      if (load[a] > load[hi]) hi = a;
      if (load[a] < load[lo]) lo = a;
    }
    if (hi == lo) return;
    std::vector<Row>& from = rows[hi];
    std::vector<Row>& to = rows[lo];
    double best = load[hi];
    // (row in hi, index in row, row in lo or -1, index in row or -1 for a move)
    std::int64_t fr = -1, fi = -1, tr = -1, ti = -1;
    for (std::size_t r = 0; r < from.size(); ++r) {
      for (std::size_t k = 0; k < from[r].pieces.size(); ++k) {
        const std::size_t p = from[r].pieces[k];
        const std::int64_t len = pieces[p].length;
        const double freed = work[p] + (from[r].pieces.size() == 1 ? slot_cost : 0.0);
        // Move.
        const std::int64_t dest = fits_row(to, len, to.size());
        const double added = work[p] + (dest < 0 ? slot_cost : 0.0);
        const double moved = std::max(load[hi] - freed, load[lo] + added);
        if (moved < best - 1e-12) {
          best = moved;
          fr = static_cast<std::int64_t>(r), fi = static_cast<std::int64_t>(k), tr = dest, ti = -1;
        }
        // Swap with a lighter piece of lo.
        for (std::size_t r2 = 0; r2 < to.size(); ++r2) {
          for (std::size_t k2 = 0; k2 < to[r2].pieces.size(); ++k2) {
            const std::size_t q = to[r2].pieces[k2];
            if (work[q] >= work[p]) continue;
            const std::int64_t lq = pieces[q].length;
            if (from[r].room + len < lq || to[r2].room + lq < len) continue;
            const double swapped =
                std::max(load[hi] - work[p] + work[q], load[lo] - work[q] + work[p]);
            if (swapped < best - 1e-12) {
              best = swapped;
              fr = static_cast<std::int64_t>(r), fi = static_cast<std::int64_t>(k);
              tr = static_cast<std::int64_t>(r2), ti = static_cast<std::int64_t>(k2);
            }
          }
        }
      }
    }
    if (fr < 0) return;
    Row& source = from[static_cast<std::size_t>(fr)];
    const std::size_t p = source.pieces[static_cast<std::size_t>(fi)];
    if (ti >= 0) {
      Row& target = to[static_cast<std::size_t>(tr)];
      const std::size_t q = target.pieces[static_cast<std::size_t>(ti)];
      source.pieces[static_cast<std::size_t>(fi)] = q;
      source.room += pieces[p].length - pieces[q].length;
      target.pieces[static_cast<std::size_t>(ti)] = p;
      target.room += pieces[q].length - pieces[p].length;
      load[hi] += work[q] - work[p];
      load[lo] += work[p] - work[q];
      continue;
    }
    source.pieces.erase(source.pieces.begin() + fi);
    source.room += pieces[p].length;
    load[hi] -= work[p];
    if (source.pieces.empty()) {
      from.erase(from.begin() + fr);
      load[hi] -= slot_cost;
    }
    if (tr < 0) {
      to.push_back({budget, {}});
      tr = static_cast<std::int64_t>(to.size()) - 1;
      load[lo] += slot_cost;
    }
    to[static_cast<std::size_t>(tr)].pieces.push_back(p);
    to[static_cast<std::size_t>(tr)].room -= pieces[p].length;
    load[lo] += work[p];
  }
}

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
  // Ranks by the time they are free (ties by index), kept sorted as slots
  // are placed: only a slot's members move.
  std::vector<std::int32_t> by_free(static_cast<std::size_t>(world));
  std::iota(by_free.begin(), by_free.end(), 0);
  std::vector<char> is_member(static_cast<std::size_t>(world), 0);
  const auto earlier = [&](std::int32_t a, std::int32_t b) {
    return free_at[a] < free_at[b] || (free_at[a] == free_at[b] && a < b);
  };

  double overhead = 0;  // rank-seconds long slots spend beyond their work
  for (const std::size_t i : batch.order) {
    const std::int64_t len = pieces[i].length;
    if (!batch.grouped[i]) continue;
    // Room for the balanced planner's padding (at most a block per member)
    // where the world allows it; plan_hybrid falls back when it does not.
    auto g_min = static_cast<std::int32_t>(ceil_div(len, budget));
    if (budget > request.block_size) {
      const std::int64_t roomy = ceil_div(len, budget - request.block_size);
      if (roomy <= world) g_min = static_cast<std::int32_t>(roomy);
    }
    std::int32_t g = g_min;
    double best = std::numeric_limits<double>::infinity();
    for (std::int32_t c = g_min; c <= world; ++c) {
      // No slot of c or more ranks ends before its fixed cost and latency;
      // once that alone reaches the best, no larger c can win (nor, for the
      // mean-load rules, fit, since the best then exceeds the mean load).
      if (prof.slot_seconds + prof.latency_seconds * (c - 1) >= best) break;
      const double start = rule == GroupRule::kMeanLoad ? 0.0 : free_at[by_free[c - 1]];
      const double length = est.slot_time(work[i], len, c, std::min(c, node));
      const double end = start + length;
      if (rule == GroupRule::kBalancedEnd) {
        const double finish =
            std::max(end, batch.mean_load + (overhead + c * length - work[i]) / world);
        if (finish < best) {
          best = finish;
          g = c;
        }
        continue;
      }
      if (end < best) {
        best = end;
        g = c;
      }
      if (rule != GroupRule::kSoonestEnd && end <= batch.mean_load) {
        g = c;
        break;
      }
    }

    // Members. Candidates: the g ranks free earliest in the world, and,
    // when a node can hold the group, every run of g ranks of one node in
    // the order they free up. A member that frees up before the slot starts
    // idles until then, and that idle time is capacity no later piece gets
    // back; so among the candidates that end within the mean load the one
    // costing the fewest rank-seconds (g x slot time + idle) wins, and when
    // none does, the one that ends soonest.
    const auto together_of = [&](const std::vector<std::int32_t>& ranks) {
      std::int32_t least = g;
      for (const std::int32_t a : ranks) {
        std::int32_t same = 0;
        for (const std::int32_t b : ranks) same += (a / node == b / node);
        least = std::min(least, same);
      }
      return least;
    };
    std::vector<std::int32_t> members(by_free.begin(), by_free.begin() + g);
    double start = free_at[members.back()];
    double slot_time = est.slot_time(work[i], len, g, together_of(members));
    const auto idle_of = [&](const std::vector<std::int32_t>& ranks, double at) {
      double idle = 0;
      for (const std::int32_t a : ranks) idle += at - free_at[a];
      return idle;
    };
    double best_start = start;
    double best_end = start + slot_time;
    double best_cost = g * slot_time + idle_of(members, start);
    bool best_fits = best_end <= batch.mean_load;
    if (g > 1 && g <= node) {
      const double local_time = est.slot_time(work[i], len, g, g);
      std::vector<std::int32_t> local;
      for (std::int32_t first = 0; first < world; first += node) {
        local.clear();
        for (std::int32_t a = first; a < std::min(world, first + node); ++a) local.push_back(a);
        if (static_cast<std::int32_t>(local.size()) < g) continue;
        std::sort(local.begin(), local.end(), earlier);
        for (std::size_t k = 0; k + g <= local.size(); ++k) {
          const std::vector<std::int32_t> run(local.begin() + k, local.begin() + k + g);
          const double at = free_at[run.back()];
          const double end_here = at + local_time;
          const double cost = g * local_time + idle_of(run, at);
          const bool fits = end_here <= batch.mean_load;
          const bool better =
              fits ? (!best_fits || cost < best_cost) : (!best_fits && end_here < best_end);
          if (better) {
            members = run;
            best_start = at;
            best_end = end_here;
            best_cost = cost;
            best_fits = fits;
          }
        }
      }
    }
    overhead += g * (best_end - best_start) - work[i];
    std::sort(members.begin(), members.end());
    LongSlot slot;
    slot.piece = i;
    slot.start = best_start;
    for (const std::int32_t a : members) {
      const double wait = best_start - free_at[a] - prof.slot_seconds;
      if (wait > 0) d.gaps.push_back({a, free_at[a], wait, budget, {}});
      free_at[a] = best_end;
      is_member[a] = 1;
    }
    by_free.erase(std::remove_if(by_free.begin(), by_free.end(),
                                 [&](std::int32_t a) { return is_member[a] != 0; }),
                  by_free.end());
    for (const std::int32_t a : members) {
      by_free.insert(std::lower_bound(by_free.begin(), by_free.end(), a, earlier), a);
      is_member[a] = 0;
    }
    slot.ranks = std::move(members);
    d.long_slots.push_back(std::move(slot));
  }

  // Short pieces into the waits first, longest first, each into the gap it
  // fills best (least time left); a gap is one row, within T tokens.
  std::vector<char> in_gap(pieces.size(), 0);
  if (!d.gaps.empty()) {
    std::multimap<double, std::size_t> by_time;
    for (std::size_t k = 0; k < d.gaps.size(); ++k) by_time.emplace(d.gaps[k].seconds, k);
    for (const std::size_t i : batch.order) {
      const std::int64_t len = pieces[i].length;
      if (batch.grouped[i]) continue;
      auto it = by_time.lower_bound(work[i]);
      for (int tries = 0; it != by_time.end() && tries < 8; ++it, ++tries) {
        if (d.gaps[it->second].room >= len) break;
      }
      if (it == by_time.end() || d.gaps[it->second].room < len) continue;
      Gap& gap = d.gaps[it->second];
      const std::size_t k = it->second;
      by_time.erase(it);
      gap.seconds -= work[i];
      gap.room -= len;
      gap.pieces.push_back(i);
      in_gap[i] = 1;
      by_time.emplace(gap.seconds, k);
    }
  }

  // Short pieces: LPT onto the least loaded rank, best fit into its rows.
  d.rows.assign(static_cast<std::size_t>(world), {});
  using Load = std::pair<double, std::int32_t>;
  std::priority_queue<Load, std::vector<Load>, std::greater<>> lightest;
  for (std::int32_t a = 0; a < world; ++a) lightest.emplace(free_at[a], a);
  for (const std::size_t i : batch.order) {
    const std::int64_t len = pieces[i].length;
    if (batch.grouped[i] || in_gap[i]) continue;
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
  std::vector<double> load(static_cast<std::size_t>(world), 0.0);
  while (!lightest.empty()) {
    load[lightest.top().second] = lightest.top().first;
    lightest.pop();
  }
  rebalance(batch, d.rows, load);
  d.makespan = *std::max_element(load.begin(), load.end());
  return d;
}

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

}  // namespace

// No plan of these decided slots ends sooner than this: every slot lasts at
// least its members' mean compute (the fixed cost, the tokens and the tile
// count above, shared over g), and the slots run on the same timeline the
// cost model uses (wave order, a slot starting when its last member is
// free), which only grows with the slots' lengths.
double decided_step_lower_bound(const ScheduleRequest& request, const Schedule& schedule) {
  const CostProfile& p = request.profile;
  std::vector<std::size_t> order(schedule.slots.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return schedule.slots[x].wave < schedule.slots[y].wave;
  });
  std::vector<double> free_at(static_cast<std::size_t>(request.world_size), 0.0);
  double step = 0;
  for (const std::size_t s : order) {
    const ScheduleSlot& slot = schedule.slots[s];
    double key_blocks = 0;
    std::int64_t tokens = 0;
    for (const DocPiece& piece : slot.pieces) {
      key_blocks += query_key_blocks(request.mask, piece.length, request.block_size);
      tokens += piece.length;
    }
    const double g = static_cast<double>(slot.ranks.size());
    const double length =
        p.slot_seconds + (p.tile_seconds * key_blocks / static_cast<double>(request.block_size) +
                          p.token_seconds * static_cast<double>(tokens)) /
                             g;
    double start = 0;
    for (const std::int32_t a : slot.ranks) start = std::max(start, free_at[a]);
    for (const std::int32_t a : slot.ranks) free_at[a] = start + length;
    step = std::max(step, start + length);
  }
  return step;
}

namespace {

// `group_heavy`: also place as groups the pieces within T whose work alone
// exceeds the mean load (rule 1's exception).
Result<Schedule> decide_hybrid_with(const ScheduleRequest& request, bool group_heavy) {
  if (Status status = validate_schedule_request(request); !status) return status;
  const std::vector<DocPiece> pieces = schedule_pieces(request);
  const Estimator est(request);
  const CostProfile& prof = request.profile;
  const std::int32_t world = request.world_size;

  std::vector<double> work(pieces.size());
  double total = 0;
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    work[i] = est.work(pieces[i].length);
    total += work[i];
    tokens += pieces[i].length;
  }
  std::vector<std::size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return work[a] > work[b]; });
  Batch batch{request,
              pieces,
              work,
              order,
              (total + prof.slot_seconds *
                           static_cast<double>(ceil_div(tokens, request.max_tokens_per_rank))) /
                  world,
              std::vector<char>(pieces.size(), 0)};
  bool any_long = false;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    batch.grouped[i] = pieces[i].length > request.max_tokens_per_rank ||
                       (group_heavy && work[i] + prof.slot_seconds > batch.mean_load);
    any_long = any_long || batch.grouped[i];
  }

  // The rules differ only in the long pieces' groups: draft each (one when
  // there is no long piece) and keep the soonest estimated finish, the
  // first of equals.
  Draft best = draft(batch, est, GroupRule::kMeanLoad);
  if (any_long) {
    for (const GroupRule rule :
         {GroupRule::kTimelineMeanLoad, GroupRule::kSoonestEnd, GroupRule::kBalancedEnd}) {
      Draft other = draft(batch, est, rule);
      if (other.makespan < best.makespan) best = std::move(other);
    }
  }

  // Waves: every slot after its members' earlier slots, in the estimated
  // time order (groups and the rows in their waits by start, then each
  // rank's trailing rows), so that each rank's wave order is its time order.
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

Status plan_slots(const ScheduleRequest& request, Schedule& schedule) {
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
    // Head-tail per document often ends a slot sooner than balanced when
    // communication matters: a member's tail chunk needs only the keys
    // before it, where balanced units spread every member over the whole
    // document. Contiguous moves least of all. Keep whichever the cost
    // model says ends first (ties: balanced, then per_document).
    double best_end = evaluate_slot(request, slot).end_seconds;
    for (const bool head_tail : {true, false}) {
      ScheduleSlot other = slot;
      if (head_tail) {
        Result<ShardPlan> plan = cp::plan_per_document(w);
        if (!plan || plan->shard_len > budget) continue;
        other.plan = std::move(*plan);
      } else {
        other.plan = contiguous_plan(w);
      }
      const double end = evaluate_slot(request, other).end_seconds;
      if (end < best_end) {
        best_end = end;
        slot.plan = std::move(other.plan);
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<Schedule> decide_hybrid(const ScheduleRequest& request) {
  if (request.group_shapes.restricts()) return decide_hybrid_shaped(request);
  return decide_hybrid_with(request, true);
}

Status plan_hybrid_slots(const ScheduleRequest& request, Schedule& schedule) {
  if (Status status = plan_slots(request, schedule); !status) return status;
  // A piece within T spread over a group is the estimate's bet that the
  // group's tile waste, K/V and latency cost less than the load it takes
  // off one rank; on small pieces it can lose. Price the placement without
  // such groups exactly and keep it unless the bet won (ties: without).
  const std::int64_t budget = request.max_tokens_per_rank;
  const bool bet = std::any_of(schedule.slots.begin(), schedule.slots.end(), [&](const auto& slot) {
    std::int64_t tokens = 0;
    for (const DocPiece& piece : slot.pieces) tokens += piece.length;
    return slot.ranks.size() > 1 && tokens <= budget;
  });
  if (!bet) return Status::ok();
  Result<Schedule> plain = decide_hybrid_with(request, false);
  if (!plain) return plain.status();
  if (Status status = plan_slots(request, *plain); !status) return status;
  if (evaluate_schedule(request, *plain).step_seconds <=
      evaluate_schedule(request, schedule).step_seconds) {
    schedule = std::move(*plain);
  }
  return Status::ok();
}

Status keep_fastest_of_baselines(const ScheduleRequest& request, Schedule& schedule) {
  const double own = evaluate_schedule(request, schedule).step_seconds;
  double best = own;
  Schedule winner;
  std::string winner_name;
  struct Baseline {
    const char* name;
    Result<Schedule> (*decide)(const ScheduleRequest&);
    Status (*plan)(const ScheduleRequest&, Schedule&);
  };
  for (const Baseline& baseline :
       {Baseline{"fixed", &decide_fixed, &plan_fixed},
        Baseline{"megatron_dcp", &decide_megatron_dcp, &plan_megatron_dcp}}) {
    // A baseline that refuses the request (megatron_dcp's padding, a set
    // cp_size fixed cannot use) is no candidate.
    Result<Schedule> other = baseline.decide(request);
    if (!other) continue;
    // The bound sums in another order than the exact price: a margin far
    // above rounding keeps "cannot be cheaper" certain.
    if (decided_step_lower_bound(request, *other) * (1 - 1e-9) >= best) continue;
    if (Status status = baseline.plan(request, *other); !status) continue;
    // Under group_shapes a baseline is a candidate only where it keeps them.
    if (request.group_shapes.restricts() && !validate_schedule(request, *other)) continue;
    const double step = evaluate_schedule(request, *other).step_seconds;
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

Status plan_hybrid(const ScheduleRequest& request, Schedule& schedule) {
  if (request.group_shapes.restricts()) {
    if (Status status = plan_hybrid_shaped(request, schedule); !status) return status;
    return keep_fastest_of_baselines(request, schedule);
  }
  if (Status status = plan_hybrid_slots(request, schedule); !status) return status;
  return keep_fastest_of_baselines(request, schedule);
}

}  // namespace fulcrum
