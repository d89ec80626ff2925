// hybrid's moves after rule 7's search (docs/HYBRID.md rule 10): rows and
// pieces moved off the ranks that end last, and the widest slot over
// several nodes narrowed to whole nodes.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"
#include "strategies/schedule_hybrid_draft.h"

namespace fulcrum::hybrid {

// The ranks ordered by their finish (ties: the lower rank), kept as a move
// changes one or two ranks' finishes, so that rule 10 finds the rank that
// ends last and those that end first in O(log W) a move instead of a pass
// over every rank. Its answers are those of std::max_element (the last
// rank), std::min_element (the first) and a sort by (finish, rank) over
// the same finishes.
//
// Two tournament trees over the ranks (a node holds the rank of least and
// of greatest finish below it), built in O(W) at the first question after
// a reset and updated along one path a move: an order reset and moved
// allocates nothing once its tables have grown (each replay's order grows
// them once), where an ordered set took a node per rank.
class FinishOrder {
 public:
  void reset(const std::vector<double>& finish);
  // Rank a's finish is now `after`.
  void set(std::int32_t a, double after);
  // The rank that ends last (ties: the lower rank).
  std::int32_t last() {
    build();
    return high_[1];
  }
  // The rank that ends first (ties: the lower rank).
  std::int32_t first() {
    build();
    return low_[1];
  }
  // The n ranks that end first, in that order; n <= W.
  void firsts(std::size_t n, std::vector<std::int32_t>& out);
  // firsts one at a time: the rank that ends first of those not taken, each
  // taken until put_back (at most W). set may be called while ranks are
  // taken (a taken rank's finish included); first() and take_first then
  // answer over the ranks not taken, last() and latest_without over all.
  std::int32_t take_first();
  void put_back();
  // The latest finish of any rank but a and b (-infinity when there is none).
  double latest_without(std::int32_t a, std::int32_t b);

 private:
  // The rank of the two that ends first, or last (ties: the lower rank).
  std::int32_t earlier(std::int32_t x, std::int32_t y) const {
    const double fx = finish_[static_cast<std::size_t>(x)];
    const double fy = finish_[static_cast<std::size_t>(y)];
    return fx < fy || (fx == fy && x < y) ? x : y;
  }
  std::int32_t later(std::int32_t x, std::int32_t y) const {
    const double fx = finish_[static_cast<std::size_t>(x)];
    const double fy = finish_[static_cast<std::size_t>(y)];
    return fx > fy || (fx == fy && x < y) ? x : y;
  }
  // The trees from finish_, where reset left them to build: the timelines
  // rule 10 replays to price a move are mostly dropped unread, so a reset
  // costs a copy of the finishes, and the O(W) build waits for a question.
  void build();
  // Node v's two answers from its children's.
  void pull(std::size_t v) {
    low_[v] = earlier(low_[2 * v], low_[2 * v + 1]);
    high_[v] = later(high_[2 * v], high_[2 * v + 1]);
  }
  // Node v's two answers again from its children's, from leaf v's parent up.
  void update_from(std::size_t v);
  // Leaf a's rank of least finish set to `leaf` (a, or world_ where taken),
  // and its path's again.
  void put_low(std::int32_t a, std::int32_t leaf);

  // Leaves at world_ + a (node v's children: 2v and 2v + 1, the root 1),
  // each node's answers over the ranks below it. A rank's finish at
  // finish_[a]; finish_[world_] is +infinity, a leaf that take_first puts in
  // place of each rank it has taken, for the tree to find the next.
  std::vector<double> finish_;
  std::vector<std::int32_t> low_;    // per node: the rank that ends first
  std::vector<std::int32_t> high_;   // per node: the rank that ends last
  std::vector<std::int32_t> taken_;  // take_first's ranks, until put_back
  bool built_ = false;               // low_ and high_ answer for finish_
  std::size_t world_ = 0;
};

// Every rank by finish, ties by rank (a stable sort of 0..W-1 by finish),
// in O(W + B log B) for the B ranks whose finish is not 0: the others, most
// of them in a small batch at large W, keep rank order where the order
// reaches 0.
std::vector<std::int32_t> ranks_by_finish(const std::vector<double>& finish);

// Runs `search` (rule 7's moves) on the planned schedule and evens its
// tail; where the planned schedule's widest slot spans several nodes and
// holds only part of one, also tries it with that node's members dropped
// from the slot, its tail evened and (where it then ends sooner) searched;
// keeps the better (the step, then the rank-seconds; ties: the first).
// `length` holds every slot's exact length and is kept current;
// `token_budget` is what all of it may re-plan, in tokens.
using TimelineSearch = std::function<Status(Schedule&, std::vector<double>&, std::int64_t&)>;

// `planned` and `planned_length`, where given: a copy of `schedule` and
// `length` as passed, that the caller keeps unchanged until this returns;
// the narrowed schedule is then copied from them only where it is tried,
// not always before the search.
Status search_with_narrowed_slot(const ScheduleRequest& request, Schedule& schedule,
                                 std::vector<double>& length, const SlotPlanner& plan,
                                 std::int64_t& token_budget, const TimelineSearch& search,
                                 const Schedule* planned = nullptr,
                                 const std::vector<double>* planned_length = nullptr);

// improve_on_timeline (schedule_hybrid_draft.h) on `schedule` and `length`,
// a copy of `planned` and `planned_length`, which the caller keeps
// unchanged until this returns (search_with_narrowed_slot copies from them
// only what it tries).
Status improve_on_timeline(const ScheduleRequest& request, const Schedule& planned,
                           const std::vector<double>& planned_length, Schedule& schedule,
                           std::vector<double>& length, const SlotPlanner& plan,
                           std::int64_t token_budget);

}  // namespace fulcrum::hybrid
