// Two structures of hybrid's search (rule 7, schedule_hybrid_search.cpp),
// kept apart so that tests can hold them to a recount: the rank sets on few
// nodes (from a pool of ranks, the first m of an order by free time, g
// ranks on the fewest nodes), and the slots' chains on each rank, which
// replay a merge's timeline without the slots it cannot move.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fulcrum/schedule_types.h"

namespace fulcrum::hybrid {

// The pools of one order of ranks. A pool is the order's first m ranks; per
// node, how many of them it holds, and its nodes by that count (most first;
// ties: the node whose first rank comes first in the order). Both are
// counted once per m (O(m)) and kept while this lives: the search asks for
// several group sizes from the same one or two pools, and at a large W a
// pool of idle ranks is most of the world.
class NodePool {
 public:
  // `order`: every rank at most once, each below `world`; it must outlive
  // this and not change. `per_node` >= 1.
  NodePool(const std::vector<std::int32_t>& order, std::int32_t world, std::int32_t per_node);

  // g (<= m <= order's size) of the pool's m ranks on the fewest nodes:
  // whole nodes' pool ranks while they fit (the most first), then the rest
  // from the last node in that order that still holds them (the fewest to
  // spare), each node's ranks taken in the order's order; ascending.
  std::vector<std::int32_t> packed(std::int32_t m, std::int32_t g);

 private:
  struct Counted {
    std::int32_t m = 0;
    std::vector<std::int32_t> count;  // per node: pool ranks on it
    std::vector<std::int32_t> nodes;  // pool nodes by count, most first
  };
  const Counted& counted(std::int32_t m);

  const std::vector<std::int32_t>& order_;
  std::int32_t per_node_;
  std::size_t nodes_;
  std::vector<Counted> kept_;
  std::vector<std::int32_t> want_;  // per node, ranks still to take; all 0 between calls
};

// The ranks in the order of ranks_by_finish (schedule_hybrid_refine.h: by
// finish, ties by rank), put in order only as far as asked: the search
// reads the first few ranks of it (up to a few times the re-placed slot's
// g, and those tied with the g-th), not all W; idle ranks (finish 0) are
// in order from the start, in rank order, so that a small batch at large W
// sorts only its few busy ranks. order()'s first sorted() ranks are those
// of ranks_by_finish; the rest are the other ranks, in no set order.
// Finishes must not be NaN.
class RanksByFinish {
 public:
  // `finish` must outlive this and not change.
  explicit RanksByFinish(const std::vector<double>& finish);
  // Puts the first n (<= W) ranks in order.
  void sort_to(std::size_t n);
  // How many ranks finish no later than t (the first that many in order),
  // where some rank among the first `from` does (t >= the from-th's finish).
  std::size_t count_to(double t, std::size_t from);
  const std::vector<std::int32_t>& order() const { return order_; }
  std::size_t sorted() const { return sorted_; }

 private:
  bool before(std::int32_t x, std::int32_t y) const {
    const double fx = finish_[static_cast<std::size_t>(x)];
    const double fy = finish_[static_cast<std::size_t>(y)];
    return fx < fy || (fx == fy && x < y);
  }
  const std::vector<double>& finish_;
  std::vector<std::int32_t> order_;
  std::size_t sorted_ = 0;
};

// The schedule's slots in wave order, index order within a wave: what a
// stable sort of 0..slots-1 by wave gives, by a counting sort where the
// waves span no more than a few per slot (they do in hybrid's schedules),
// in O(slots + waves) and no allocation once `counts` has grown.
void wave_order(const Schedule& schedule, std::vector<std::size_t>& order,
                std::vector<std::size_t>& counts);

// Each rank's slots in slot order, for rule 10's moves: those of the
// schedule as built flat by rank (a counting pass, no list per rank), and
// the slots added since (higher indices, so after them) in a list of their
// rank's, which stays empty for most ranks.
class RankSlots {
 public:
  void build(const Schedule& schedule, std::int32_t world);
  // Slot k, above every slot so far, now runs on `rank`.
  void add(std::int32_t rank, std::size_t k) {
    added_[static_cast<std::size_t>(rank)].push_back(k);
  }
  // Rank a's slots, in slot order.
  void of(std::int32_t a, std::vector<std::size_t>& out) const;

 private:
  std::vector<std::size_t> start_;  // per rank: where its slots begin in slots_
  std::vector<std::size_t> slots_;
  std::vector<std::vector<std::size_t>> added_;  // per rank
};

// A schedule's timeline (slots in wave order, each starting when its last
// member is free and lasting its length) replayed once, each rank's finish,
// next wave (one above its slots' waves) and last slot kept, and each
// slot's end; then the timeline without one slot c read off them, bit for
// bit a replay of every other slot, where no slot after c runs on c's
// ranks: as for the slot that ends last (one after it on its ranks would
// end no sooner and come later in the order, so it would be the last).
// Every other slot then ends as it did, and c's ranks finish as they did
// before c (each rank's finish and next wave before its last slot are
// kept too), so that the search's re-placed slot costs no second replay.
class TimelineReplay {
 public:
  struct Ends {
    double step = 0;
    double busy = 0;       // sum of g x length, in wave order
    std::size_t last = 0;  // the slot ending last (ties: the later in the order)
  };

  // `order`: every slot once, in wave order; `length` per slot.
  Ends run(const Schedule& schedule, const std::vector<std::size_t>& order,
           const std::vector<double>& length, std::int32_t world);
  // The timeline without slot c, and per rank its finish and next wave, on
  // the schedule, order and lengths of the last run (unchanged since);
  // false, and nothing written, where a slot after c runs on c's ranks.
  bool without(const Schedule& schedule, const std::vector<std::size_t>& order,
               const std::vector<double>& length, std::size_t c, Ends& ends,
               std::vector<double>& finish, std::vector<std::int32_t>& next_wave);

 private:
  std::vector<double> rank_end_;           // per rank: its finish
  std::vector<std::int32_t> rank_wave_;    // per rank: its next wave
  std::vector<double> end_before_;         // per rank: its finish before its last slot
  std::vector<std::int32_t> wave_before_;  // and its next wave
  std::vector<std::size_t> last_on_;       // per rank: its last slot (none: the slot count)
  std::vector<double> slot_end_;           // per slot
};

// A schedule's timeline (slots in wave order, each starting when its last
// member is free and lasting its length) with each member's slots before
// and after it on its rank. step_without(x, y, l) and busy_without(x, y, l)
// are the timeline's step and rank-seconds (sum of g x length, in wave
// order) with slot x left out and slot y lasting l, bit for bit as a replay
// of every slot: the step replays only the slots whose start can move (those
// after x or y on one of their ranks, and after those, as far as an end
// changes). The rank-seconds are a sum over every slot after x and y, asked
// for apart: a caller comparing timelines reads them only where the steps
// tie. Built from the slots as they stand; slot y must keep its ranks and
// place in the order. holds_wave: a walk along one rank's chain in place of
// a pass over every slot.
class SlotChains {
 public:
  // `order`: every slot once, in wave order; `length` per slot.
  void build(const Schedule& schedule, const std::vector<std::size_t>& order,
             const std::vector<double>& length, std::int32_t world);
  bool valid() const { return valid_; }
  void invalidate() { valid_ = false; }
  double step_without(std::size_t x, std::size_t y, double length);
  double busy_without(std::size_t x, std::size_t y, double length) const;
  // Whether `rank` runs a slot of wave `wave` other than slots x and y.
  bool holds_wave(std::int32_t rank, std::int32_t wave, std::size_t x, std::size_t y) const;

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  bool valid_ = false;
  std::vector<std::size_t> order_;
  std::vector<std::size_t> pos_, at_;  // per slot: its place in order_, its first entry
  std::vector<double> length_, end_;   // per slot
  std::vector<std::int32_t> wave_;     // per slot
  std::vector<std::size_t> head_;      // per rank: the entry of its first slot, or kNone
  std::vector<std::size_t> slot_;      // per entry (slot, member): the slot
  std::vector<std::size_t> prev_;      // per entry: the entry of the rank's slot before
  std::vector<std::size_t> next_;      // and after, or kNone
  std::vector<double> weighted_;       // per place in order_: g x length
  std::vector<double> busy_before_;    // per place: weighted_'s sum before it, in order
  std::vector<std::size_t> latest_;    // a few slots of the latest ends, latest first
  std::vector<std::size_t> heap_;      // places in order_ still to replay
  std::vector<std::uint64_t> seen_;    // per slot: the call (epoch_) that moved its end
  std::vector<double> moved_end_;      // per slot: that end
  std::uint64_t epoch_ = 0;
};

}  // namespace fulcrum::hybrid
