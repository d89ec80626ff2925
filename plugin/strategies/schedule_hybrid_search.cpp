// hybrid's local search on the exact timeline (rule 7 of
// schedule_hybrid.cpp). A slot's length does not depend on when it starts
// (the cost model prices its members' compute and traffic alone), so a
// planned schedule is its slots' lengths on the wave order: a move changes
// one or two slots, re-plans and re-prices only those, and replays the
// timeline (O(slots x g); a merge into a slot on the same ranks replays
// only the slots after the two, through each rank's chain of slots).
// Moves:
// - merge: a slot's pieces join another slot whose row has room for them
//   (g x T tokens), and the slot is dropped (its fixed cost and its ranks'
//   time with it);
// - re-place: the slot that ends last leaves its ranks and runs after the
//   g' ranks that finish first without it, for g' of 1 up to a few times
//   its g (a lone row at the tail spread over idle ranks, or moved to one),
//   or on g' ranks that span fewer nodes than those: ranks free no later
//   than the g'-th first (equal free time), or among the next R ranks to
//   free up (R ranks per node), whole nodes first; a slot over fewer nodes
//   moves more of its K/V over the faster link (docs/HYBRID.md rule 7).
//   These rank sets have a budget of tries of their own, a quarter of the
//   other moves'.
// A move is kept when it ends the step sooner, or ends it no later and
// spends fewer rank-seconds; so the step never grows, the rank-seconds
// strictly fall when the step does not, and the search cannot cycle. It
// stops when no move helps or after a budget of tries fixed by the slot
// count, at most 512, or when the rows it has re-planned reach a token
// budget (no clock). Deterministic: candidates in index order, ties kept.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "strategies/schedule_hybrid_draft.h"
#include "strategies/schedule_hybrid_nodes.h"
#include "strategies/schedule_hybrid_refine.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum::hybrid {
namespace {

constexpr std::int64_t kMaxTries = 512;
constexpr std::int64_t kNarrow = 8;

struct Timeline {
  double step = 0;
  double busy = 0;                      // rank-seconds: sum of g x length
  std::size_t last = 0;                 // the slot ending last (ties: the later index)
  std::vector<double> finish;           // per rank (replay's; empty where not needed)
  std::vector<std::int32_t> next_wave;  // per rank: after its last slot (likewise)
};

class Search {
 public:
  Search(const ScheduleRequest& request, Schedule& schedule, std::vector<double>& length,
         const SlotPlanner& plan, std::int64_t token_budget)
      : r_(request), s_(schedule), plan_(plan), length_(length), tokens_left_(token_budget) {}

  Status run() {
    // Each try replays the timeline (O(slots log slots)): the budget grows
    // with the slots up to a ceiling, so that large batches stay fast.
    std::int64_t tries =
        std::min<std::int64_t>(64 + 8 * static_cast<std::int64_t>(s_.slots.size()), kMaxTries);
    // The re-placed slot's rank sets on fewer nodes have a budget of their
    // own, as large, so that they take no tries from the other moves.
    node_tries_ = tries / 4;
    sort_by_wave();
    Timeline now = replay_all();
    while (tries > 0 && tokens_left_ > 0 && s_.slots.size() > 1) {
      bool moved = false;
      if (Status st = try_replace(now, tries, moved); !st) return st;
      if (!moved) {
        if (Status st = try_merge(now, tries, moved); !st) return st;
      }
      if (!moved) break;
    }
    return Status::ok();
  }

  std::int64_t tokens_left() const { return tokens_left_; }

 private:
  static std::int64_t tokens_of(const ScheduleSlot& slot) {
    std::int64_t n = 0;
    for (const DocPiece& p : slot.pieces) n += p.length;
    return n;
  }

  // Takes a row's tokens from the budget; false (and the budget spent)
  // when they do not fit in what is left.
  bool charge(const ScheduleSlot& slot) {
    const std::int64_t n = tokens_of(slot);
    if (n > tokens_left_) {
      tokens_left_ = 0;
      return false;
    }
    tokens_left_ -= n;
    return true;
  }

  // The slots in wave order (stable), kept for replay: a move that is
  // tried keeps every wave but the re-placed slot's, which replay leaves
  // out and try_replace prices apart.
  void sort_by_wave() { wave_order(s_, order_, wave_at_); }

  // The timeline without slot `skip` (skip = size: all of them).
  Timeline replay(std::size_t skip) const {
    Timeline t;
    const auto world = static_cast<std::size_t>(r_.world_size);
    t.finish.assign(world, 0.0);
    t.next_wave.assign(world, 0);
    for (const std::size_t k : order_) {
      if (k == skip) continue;
      const ScheduleSlot& slot = s_.slots[k];
      double start = 0;
      for (const std::int32_t a : slot.ranks) start = std::max(start, t.finish[a]);
      const double end = start + length_[k];
      for (const std::int32_t a : slot.ranks) {
        t.finish[a] = end;
        t.next_wave[a] = std::max(t.next_wave[a], slot.wave + 1);
      }
      t.busy += static_cast<double>(slot.ranks.size()) * length_[k];
      if (end >= t.step) {
        t.step = end;
        t.last = k;
      }
    }
    return t;
  }

  // replay(skip) without its per-rank tables: the step, the rank-seconds
  // and the slot ending last, which is what the search reads of a timeline.
  // The ranks' free times are in a table kept for the search, of which only
  // the slots' ranks are written and cleared again, so a replay costs the
  // slots' members, not W.
  Timeline replay_sparse(std::size_t skip) {
    free_at_.resize(static_cast<std::size_t>(r_.world_size), 0.0);
    Timeline t;
    for (const std::size_t k : order_) {
      if (k == skip) continue;
      const ScheduleSlot& slot = s_.slots[k];
      double start = 0;
      for (const std::int32_t a : slot.ranks) start = std::max(start, free_at_[a]);
      const double end = start + length_[k];
      for (const std::int32_t a : slot.ranks) free_at_[a] = end;
      t.busy += static_cast<double>(slot.ranks.size()) * length_[k];
      if (end >= t.step) {
        t.step = end;
        t.last = k;
      }
    }
    for (const std::size_t k : order_) {
      for (const std::int32_t a : s_.slots[k].ranks) free_at_[a] = 0.0;
    }
    return t;
  }
  // The whole timeline (replay(size) without its per-rank tables), kept
  // for without_last.
  Timeline replay_all() {
    const TimelineReplay::Ends e = whole_.run(s_, order_, length_, r_.world_size);
    Timeline t;
    t.step = e.step;
    t.busy = e.busy;
    t.last = e.last;
    return t;
  }

  // replay(c) for the slot c that ends last, read off replay_all's
  // timeline (TimelineReplay::without); replayed where it cannot be.
  Timeline without_last(std::size_t c) {
    Timeline t;
    TimelineReplay::Ends e;
    if (!whole_.without(s_, order_, length_, c, e, t.finish, t.next_wave)) return replay(c);
    t.step = e.step;
    t.busy = e.busy;
    t.last = e.last;
    return t;
  }

  // The least length above `step`: a slot that long or longer ends the
  // timeline later than `step`.
  static double above(double step) {
    return std::nextafter(step, std::numeric_limits<double>::infinity());
  }

  static bool better(double step, double busy, const Timeline& b) {
    return better(
        step, [busy] { return busy; }, b);
  }
  static bool better(const Timeline& a, const Timeline& b) { return better(a.step, a.busy, b); }
  // The same test with the rank-seconds asked of `busy()` only where the
  // steps leave them to decide.
  template <class Busy>
  static bool better(double step, const Busy& busy, const Timeline& b) {
    const double eps = 1e-12 * std::max(1.0, b.step);
    if (step < b.step - eps) return true;
    return step <= b.step && busy() < b.busy - eps;
  }

  // The least length at which `improves` is false, where it is false from
  // some length up (improves(+infinity) must be false): positive doubles'
  // bit patterns grow with them, so bisect those.
  template <typename Improves>
  static double least_not_improving(const Improves& improves) {
    std::uint64_t lo = 0;  // 0.0
    std::uint64_t hi = std::bit_cast<std::uint64_t>(kNoEnd);
    if (!improves(0.0)) return 0.0;
    while (hi - lo > 1) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (improves(std::bit_cast<double>(mid))) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return std::bit_cast<double>(hi);
  }

  // The slot that ends last, re-placed after the g' ranks that finish
  // first without it, or on ranks a little later to free that span fewer
  // nodes (fewest_nodes).
  Status try_replace(Timeline& now, std::int64_t& tries, bool& moved) {
    const std::size_t c = now.last;
    const ScheduleSlot& original = s_.slots[c];
    Replace best{without_last(c), now, {}, 0};
    // In order only as far as the tries below read it.
    RanksByFinish by_finish(best.without.finish);
    // The pools of ranks on few nodes, counted once for every g below.
    NodePool pool(by_finish.order(), r_.world_size,
                  std::max<std::int32_t>(1, r_.profile.ranks_per_node));
    const std::int64_t tokens = tokens_of(original);
    const auto g0 = static_cast<std::int32_t>(original.ranks.size());
    // No wider than the row has key blocks (widest_useful_group), but a
    // lone row may always try up to kNarrow ranks: pricing that few members
    // costs little, and a row of a few blocks may still gain there.
    const auto most = static_cast<std::int32_t>(std::min<std::int64_t>(
        {r_.world_size, 4 * static_cast<std::int64_t>(g0) + 4,
         std::max<std::int64_t>({g0, kNarrow, widest_useful_group(tokens, r_.block_size)})}));
    for (std::int32_t g = 1; g <= most && tries > 0; g = g < 8 ? g + 1 : g + g / 4) {
      if (static_cast<std::int64_t>(g) * r_.max_tokens_per_rank < tokens) continue;
      by_finish.sort_to(static_cast<std::size_t>(g));
      std::vector<std::int32_t> first(by_finish.order().begin(), by_finish.order().begin() + g);
      std::sort(first.begin(), first.end());
      bool spent = false;
      if (Status st = try_ranks(c, first, best, tries, spent); !st || spent) return st;
      for (std::vector<std::int32_t>& ranks :
           fewer_node_sets(by_finish, best.without.finish, g, pool)) {
        if (node_tries_ <= 0) break;
        if (Status st = try_ranks(c, ranks, best, node_tries_, spent); !st || spent) return st;
      }
    }
    if (best.slot.ranks.empty()) return Status::ok();
    s_.slots[c] = std::move(best.slot);
    length_[c] = best.length;
    chains_.invalidate();
    sort_by_wave();
    now = replay_all();
    moved = true;
    return Status::ok();
  }

  // try_replace's best candidate so far; `without` is the timeline without
  // the slot re-placed.
  struct Replace {
    Timeline without;
    Timeline timeline;
    ScheduleSlot slot;
    double length = 0;
  };

  static std::int32_t nodes_of(const std::vector<std::int32_t>& ranks, std::int32_t per_node) {
    std::int32_t n = 0;
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      n += k == 0 || ranks[k] / per_node != ranks[k - 1] / per_node ? 1 : 0;
    }
    return n;
  }

  // Slot c's pieces on `ranks` (sorted), after their other slots: priced
  // and kept in `best` when its timeline is better. `spent`: the token
  // budget ran out.
  Status try_ranks(std::size_t c, const std::vector<std::int32_t>& ranks, Replace& best,
                   std::int64_t& tries, bool& spent) {
    if (ranks == s_.slots[c].ranks) return Status::ok();
    ScheduleSlot slot;
    slot.pieces = s_.slots[c].pieces;
    slot.ranks = ranks;
    for (const std::int32_t a : ranks) slot.wave = std::max(slot.wave, best.without.next_wave[a]);
    --tries;
    if (!charge(slot)) {
      spent = true;
      return Status::ok();
    }
    // It starts when its last member is free; when no plan of it can end
    // by the best step so far, it cannot make a better timeline and is
    // not planned (the try and its tokens still count: the search goes
    // on exactly as if it had been).
    double start = 0;
    for (const std::int32_t a : ranks) start = std::max(start, best.without.finish[a]);
    // It runs after its members' other slots (its wave is above theirs),
    // so the timeline is the one without it plus this slot: its step and
    // rank-seconds grow with the slot's length, and whether they are
    // better than the best so far holds below some length and not from it
    // up. Not planned when no plan of it is better (its members' mean
    // compute is not); else planned under that length (a plan that long or
    // longer is not better either), without copying the timeline.
    const auto g = static_cast<double>(ranks.size());
    const auto improves = [&](double length) {
      const double end = start + length;
      const double step = end >= best.without.step ? end : best.without.step;
      return better(step, best.without.busy + g * length, best.timeline);
    };
    if (!improves(slot_length_lower_bound(r_, slot) * (1 - 1e-9))) return Status::ok();
    const Result<double> length = plan_(r_, slot, least_not_improving(improves));
    if (!length) return length.status();
    if (improves(*length)) {
      // The timeline without the slot, plus it: its step, rank-seconds and
      // last slot (not its per-rank tables, which nothing reads).
      Timeline t;
      t.step = best.without.step;
      t.busy = best.without.busy;
      t.last = best.without.last;
      t.busy += g * *length;
      if (start + *length >= t.step) {
        t.step = start + *length;
        t.last = c;
      }
      best.timeline = std::move(t);
      best.slot = std::move(slot);
      best.length = *length;
    }
    return Status::ok();
  }

  // Rank sets of g members on fewer nodes than the g ranks that free up
  // first: from the ranks free by the g-th one's finish (equal free time),
  // then from a pool of R more ranks in free-time order (R ranks per
  // node), whole nodes' pool ranks first (the most first), the
  // rest from the node that holds them with the fewest to spare, earliest
  // free first. Each set spans the fewest nodes its pool allows; sets no
  // narrower than the first g ranks, or repeated, are left out.
  std::vector<std::vector<std::int32_t>> fewer_node_sets(RanksByFinish& by_finish,
                                                         const std::vector<double>& finish,
                                                         std::int32_t g, NodePool& pool) const {
    std::vector<std::vector<std::int32_t>> out;
    const std::int32_t per_node = std::max<std::int32_t>(1, r_.profile.ranks_per_node);
    const auto world = static_cast<std::int32_t>(by_finish.order().size());
    if (g < 2 || per_node < 2 || per_node >= world) return out;
    by_finish.sort_to(static_cast<std::size_t>(g));
    const std::vector<std::int32_t>& order = by_finish.order();
    std::vector<std::int32_t> first(order.begin(), order.begin() + g);
    std::sort(first.begin(), first.end());
    const std::int32_t first_nodes = nodes_of(first, per_node);
    if (first_nodes <= (g + per_node - 1) / per_node) return out;
    // The ranks free no later than the g-th: in free-time order, they end
    // where the later ones begin.
    const double gth = finish[order[g - 1]];
    const auto tied =
        static_cast<std::int32_t>(by_finish.count_to(gth, static_cast<std::size_t>(g)));
    for (const std::int32_t m : {tied, tied + per_node}) {
      // The pool reads the first m ranks of the order.
      by_finish.sort_to(static_cast<std::size_t>(std::min(m, world)));
      std::vector<std::int32_t> ranks = pool.packed(std::min(m, world), g);
      if (nodes_of(ranks, per_node) >= first_nodes) continue;
      if (std::find(out.begin(), out.end(), ranks) == out.end()) out.push_back(std::move(ranks));
    }
    return out;
  }

  // Slot x's pieces into slot y; `widen`: over the union of both slots'
  // (disjoint) ranks, at the later of their waves. Kept when it helps.
  Status try_pair(std::size_t x, std::size_t y, bool widen, Timeline& now, bool& moved) {
    if (!chains_.valid()) {
      chains_.build(s_, order_, length_, static_cast<std::int32_t>(r_.world_size));
    }
    ScheduleSlot merged = s_.slots[y];
    merged.pieces.insert(merged.pieces.end(), s_.slots[x].pieces.begin(), s_.slots[x].pieces.end());
    if (widen) {
      merged.ranks.insert(merged.ranks.end(), s_.slots[x].ranks.begin(), s_.slots[x].ranks.end());
      std::sort(merged.ranks.begin(), merged.ranks.end());
      merged.wave = std::max(s_.slots[x].wave, s_.slots[y].wave);
      // No rank of the pair may run another slot of the merged slot's wave.
      for (const std::int32_t a : merged.ranks) {
        if (chains_.holds_wave(a, merged.wave, x, y)) return Status::ok();
      }
    }
    if (tokens_of(merged) >
        static_cast<std::int64_t>(merged.ranks.size()) * r_.max_tokens_per_rank) {
      return Status::ok();
    }
    if (!charge(merged)) return Status::ok();
    std::swap(s_.slots[y], merged);
    const double kept_length = length_[y];
    const bool rewaved = s_.slots[y].wave != merged.wave;
    if (rewaved) sort_by_wave();  // slot y moved in the wave order
    // The timeline only grows with a slot's length: with the merged slot as
    // short as any plan of it can be, a step past the current one means no
    // plan of it helps, and it is not planned (the try still counts).
    const double least = slot_length_lower_bound(r_, s_.slots[y]) * (1 - 1e-9);
    length_[y] = least;
    // Unless widened, slot y keeps its ranks and wave: its chains still
    // hold, and only the slots after x and y are replayed.
    // Whether the timeline with slot x left out and slot y as long as
    // length_[y] is better than now (the chains' rank-seconds, a sum over
    // every slot after x and y, summed only where the steps tie).
    const auto improves = [&] {
      if (widen) return better(replay_sparse(x), now);
      return better(
          chains_.step_without(x, y, length_[y]),
          [&] { return chains_.busy_without(x, y, length_[y]); }, now);
    };
    if (improves()) {
      // Planned under the step, and under the length at which the pair's
      // rank-seconds reach theirs before the move (slot x's and slot y's),
      // where the timeline with the merged slot that long is not better:
      // it is not at any longer length either (its step and rank-seconds
      // only grow), and that is checked by a replay, not assumed.
      double ceiling = above(now.step);
      const double pair = static_cast<double>(s_.slots[x].ranks.size()) * length_[x] +
                          static_cast<double>(merged.ranks.size()) * kept_length;
      const double even = pair / static_cast<double>(s_.slots[y].ranks.size()) * (1 + 1e-9);
      if (even > least && even < ceiling) {
        length_[y] = even;
        if (!improves()) ceiling = even;
      }
      const Result<double> planned = plan_(r_, s_.slots[y], ceiling);
      if (!planned) {
        std::swap(s_.slots[y], merged);
        length_[y] = kept_length;
        if (rewaved) sort_by_wave();
        return planned.status();
      }
      length_[y] = *planned;
      if (improves()) {
        s_.slots.erase(s_.slots.begin() + static_cast<std::ptrdiff_t>(x));
        length_.erase(length_.begin() + static_cast<std::ptrdiff_t>(x));
        chains_.invalidate();
        sort_by_wave();
        now = replay_all();
        moved = true;
        return Status::ok();
      }
    }
    std::swap(s_.slots[y], merged);
    length_[y] = kept_length;
    if (rewaved) sort_by_wave();
    return Status::ok();
  }

  static bool disjoint(const ScheduleSlot& a, const ScheduleSlot& b) {
    for (const std::int32_t r : a.ranks) {
      if (std::find(b.ranks.begin(), b.ranks.end(), r) != b.ranks.end()) return false;
    }
    return true;
  }

  // The smallest slots (by tokens) into the slot with the least room that
  // holds them, or over the union of ranks with a slot of a neighbouring
  // wave, a few candidates each; the first that helps is kept.
  Status try_merge(Timeline& now, std::int64_t& tries, bool& moved) {
    std::vector<std::int64_t> tokens(s_.slots.size());
    std::vector<std::int64_t> room(s_.slots.size());
    for (std::size_t k = 0; k < s_.slots.size(); ++k) {
      tokens[k] = tokens_of(s_.slots[k]);
      room[k] =
          static_cast<std::int64_t>(s_.slots[k].ranks.size()) * r_.max_tokens_per_rank - tokens[k];
    }
    std::vector<std::size_t> small(s_.slots.size());
    std::iota(small.begin(), small.end(), std::size_t{0});
    std::stable_sort(small.begin(), small.end(),
                     [&](std::size_t x, std::size_t y) { return tokens[x] < tokens[y]; });
    std::vector<std::size_t> hosts(s_.slots.size());
    std::iota(hosts.begin(), hosts.end(), std::size_t{0});
    std::stable_sort(hosts.begin(), hosts.end(),
                     [&](std::size_t x, std::size_t y) { return room[x] < room[y]; });
    for (std::size_t n = 0; n < small.size() && n < 32 && tries > 0; ++n) {
      const std::size_t x = small[n];
      auto it = std::lower_bound(hosts.begin(), hosts.end(), tokens[x],
                                 [&](std::size_t h, std::int64_t need) { return room[h] < need; });
      for (int tried = 0; it != hosts.end() && tried < 3 && tries > 0; ++it) {
        if (*it == x) continue;
        ++tried;
        --tries;
        if (Status st = try_pair(x, *it, false, now, moved); !st || moved) return st;
      }
      const std::int32_t wx = s_.slots[x].wave;
      for (std::size_t y = 0, tried = 0; y < s_.slots.size() && tried < 4 && tries > 0; ++y) {
        const std::int32_t wy = s_.slots[y].wave;
        if (y == x || wy < wx - 1 || wy > wx + 1 || !disjoint(s_.slots[x], s_.slots[y])) continue;
        ++tried;
        --tries;
        if (Status st = try_pair(x, y, true, now, moved); !st || moved) return st;
      }
    }
    return Status::ok();
  }

  const ScheduleRequest& r_;
  Schedule& s_;
  const SlotPlanner& plan_;
  std::vector<double>& length_;       // per slot, as evaluate_slot prices it
  std::vector<std::size_t> order_;    // sort_by_wave
  std::vector<std::size_t> wave_at_;  // sort_by_wave's counts, kept to spare allocations
  std::int64_t tokens_left_;          // rows the tries may still plan, in tokens
  std::int64_t node_tries_ = 0;       // fewer_node_sets' tries left
  std::vector<double> free_at_;       // replay_sparse's free times, all 0 between calls
  TimelineReplay whole_;              // replay_all's timeline, for without_last
  SlotChains chains_;                 // try_pair's partial replays, built before a try
};

}  // namespace

namespace {

Status search_and_narrow(const ScheduleRequest& request, Schedule& schedule,
                         std::vector<double>& length, const SlotPlanner& plan,
                         std::int64_t token_budget, const Schedule* planned,
                         const std::vector<double>* planned_length) {
  // Rule 7's moves, on the schedule as planned and on it with its widest
  // slot narrowed (schedule_hybrid_refine.cpp), within one token budget.
  const TimelineSearch search = [&](Schedule& s, std::vector<double>& l, std::int64_t& budget) {
    Search moves(request, s, l, plan, budget);
    const Status st = moves.run();
    budget = moves.tokens_left();
    return st;
  };
  return search_with_narrowed_slot(request, schedule, length, plan, token_budget, search, planned,
                                   planned_length);
}

}  // namespace

Status improve_on_timeline(const ScheduleRequest& request, Schedule& schedule,
                           std::vector<double>& length, const SlotPlanner& plan,
                           std::int64_t token_budget) {
  return search_and_narrow(request, schedule, length, plan, token_budget, nullptr, nullptr);
}

Status improve_on_timeline(const ScheduleRequest& request, const Schedule& planned,
                           const std::vector<double>& planned_length, Schedule& schedule,
                           std::vector<double>& length, const SlotPlanner& plan,
                           std::int64_t token_budget) {
  return search_and_narrow(request, schedule, length, plan, token_budget, &planned,
                           &planned_length);
}

}  // namespace fulcrum::hybrid
