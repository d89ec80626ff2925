// NodePool and SlotChains (schedule_hybrid_nodes.h): the search's rank sets
// on few nodes, counted once per pool, and its merges' partial replays.
#include "strategies/schedule_hybrid_nodes.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

namespace fulcrum::hybrid {

NodePool::NodePool(const std::vector<std::int32_t>& order, std::int32_t world,
                   std::int32_t per_node)
    : order_(order),
      per_node_(per_node),
      nodes_(static_cast<std::size_t>((world + per_node - 1) / per_node)),
      want_(nodes_, 0) {}

const NodePool::Counted& NodePool::counted(std::int32_t m) {
  for (const Counted& c : kept_) {
    if (c.m == m) return c;
  }
  Counted c;
  c.m = m;
  c.count.assign(nodes_, 0);
  std::vector<std::int32_t> seen;  // in order of first appearance
  for (std::int32_t k = 0; k < m; ++k) {
    const auto node = static_cast<std::size_t>(order_[k] / per_node_);
    if (c.count[node]++ == 0) seen.push_back(static_cast<std::int32_t>(node));
  }
  // Counts run from 1 to per_node: one counting pass puts the nodes in
  // order (most first, ties in order of appearance), no comparison sort.
  std::vector<std::int32_t> start(static_cast<std::size_t>(per_node_) + 1, 0);
  for (const std::int32_t n : seen) ++start[static_cast<std::size_t>(per_node_ - c.count[n]) + 1];
  for (std::size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  c.nodes.resize(seen.size());
  for (const std::int32_t n : seen) {
    c.nodes[static_cast<std::size_t>(start[static_cast<std::size_t>(per_node_ - c.count[n])]++)] =
        n;
  }
  // The search asks for one or two pools per order; a few are kept.
  if (kept_.size() >= 4) kept_.clear();
  kept_.push_back(std::move(c));
  return kept_.back();
}

std::vector<std::int32_t> NodePool::packed(std::int32_t m, std::int32_t g) {
  const Counted& c = counted(m);
  // Whole nodes while they fit; then best fit: the last node (fewest ranks)
  // that still holds the rest (the counts fall along c.nodes: bisection).
  std::int32_t taken = 0;
  std::size_t n = 0;
  while (taken < g && n < c.nodes.size()) {
    const std::int32_t left = g - taken;
    const std::int32_t node = c.nodes[n];
    if (c.count[node] <= left) {
      want_[static_cast<std::size_t>(node)] = c.count[node];
      taken += c.count[node];
      ++n;
      continue;
    }
    const auto holds =
        std::partition_point(c.nodes.begin() + static_cast<std::ptrdiff_t>(n), c.nodes.end(),
                             [&](std::int32_t x) { return c.count[x] >= left; });
    want_[static_cast<std::size_t>(*(holds - 1))] = left;
    taken += left;
  }
  // Each node's ranks in the order's order; every want is spent (the pool
  // holds them), so want_ is all 0 again after.
  std::vector<std::int32_t> ranks;
  ranks.reserve(static_cast<std::size_t>(taken));
  for (std::int32_t k = 0; k < m && static_cast<std::int32_t>(ranks.size()) < taken; ++k) {
    std::int32_t& want = want_[static_cast<std::size_t>(order_[k] / per_node_)];
    if (want > 0) {
      ranks.push_back(order_[k]);
      --want;
    }
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

RanksByFinish::RanksByFinish(const std::vector<double>& finish)
    : finish_(finish), order_(finish.size()) {
  // A small batch at large W leaves most ranks idle (finish 0): they come
  // in rank order after the negative finishes (sorted here, as few as
  // any) and before the positive ones, which alone are left to sort. One
  // pass counts the three, one places them.
  std::size_t negative = 0;
  std::size_t idle = 0;
  for (const double f : finish) {
    negative += f < 0 ? 1 : 0;
    idle += f == 0 ? 1 : 0;
  }
  if (negative + idle == 0) {  // every rank busy, as at a large batch
    std::iota(order_.begin(), order_.end(), 0);
    return;
  }
  std::size_t at[3] = {0, negative, negative + idle};
  for (std::size_t a = 0; a < finish.size(); ++a) {
    const std::size_t group = finish[a] < 0 ? 0 : finish[a] == 0 ? 1 : 2;
    order_[at[group]++] = static_cast<std::int32_t>(a);
  }
  const auto cmp = [this](std::int32_t x, std::int32_t y) { return before(x, y); };
  std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(negative), cmp);
  sorted_ = negative + idle;
}

void RanksByFinish::sort_to(std::size_t n) {
  if (n <= sorted_) return;
  // At least double what is in order, so that asks that grow one rank at
  // a time cost O(W) selections in all, not one each.
  const std::size_t m = std::min(order_.size(), std::max({n, 2 * sorted_, std::size_t{32}}));
  const auto cmp = [this](std::int32_t x, std::int32_t y) { return before(x, y); };
  const auto from = order_.begin() + static_cast<std::ptrdiff_t>(sorted_);
  const auto to = order_.begin() + static_cast<std::ptrdiff_t>(m);
  // The m - sorted_ least of the rest (all after the ranks in order), then
  // in order: (finish, rank) is a strict order, so any sort gives one.
  if (to != order_.end()) std::nth_element(from, to, order_.end(), cmp);
  std::sort(from, to, cmp);
  sorted_ = m;
}

std::size_t RanksByFinish::count_to(double t, std::size_t from) {
  sort_to(std::max<std::size_t>(from, 1));
  // In order until a rank finishes after t, or every rank is.
  while (sorted_ < order_.size() && !(t < finish_[static_cast<std::size_t>(order_[sorted_ - 1])])) {
    sort_to(sorted_ + 1);
  }
  return static_cast<std::size_t>(
      std::upper_bound(
          order_.begin() + static_cast<std::ptrdiff_t>(from),
          order_.begin() + static_cast<std::ptrdiff_t>(sorted_), t,
          [&](double v, std::int32_t a) { return v < finish_[static_cast<std::size_t>(a)]; }) -
      order_.begin());
}

void wave_order(const Schedule& schedule, std::vector<std::size_t>& order,
                std::vector<std::size_t>& counts) {
  const std::vector<ScheduleSlot>& slots = schedule.slots;
  const std::size_t n = slots.size();
  order.resize(n);
  if (n == 0) return;
  std::int32_t low = slots[0].wave;
  std::int32_t high = low;
  for (const ScheduleSlot& slot : slots) {
    low = std::min(low, slot.wave);
    high = std::max(high, slot.wave);
  }
  const std::int64_t span = static_cast<std::int64_t>(high) - low;
  if (span > 4 * static_cast<std::int64_t>(n) + 64) {  // sparse waves: a comparison sort
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return slots[x].wave < slots[y].wave; });
    return;
  }
  counts.assign(static_cast<std::size_t>(span) + 2, 0);
  for (const ScheduleSlot& slot : slots) ++counts[static_cast<std::size_t>(slot.wave - low) + 1];
  std::partial_sum(counts.begin(), counts.end(), counts.begin());
  for (std::size_t k = 0; k < n; ++k) {
    order[counts[static_cast<std::size_t>(slots[k].wave - low)]++] = k;
  }
}

void RankSlots::build(const Schedule& schedule, std::int32_t world) {
  const auto ranks = static_cast<std::size_t>(world);
  start_.assign(ranks + 1, 0);
  for (const ScheduleSlot& slot : schedule.slots) {
    for (const std::int32_t a : slot.ranks) ++start_[static_cast<std::size_t>(a) + 1];
  }
  std::partial_sum(start_.begin(), start_.end(), start_.begin());
  slots_.resize(start_.back());
  std::vector<std::size_t> next(start_.begin(), start_.end() - 1);
  for (std::size_t k = 0; k < schedule.slots.size(); ++k) {
    for (const std::int32_t a : schedule.slots[k].ranks) {
      slots_[next[static_cast<std::size_t>(a)]++] = k;
    }
  }
  added_.assign(ranks, {});
}

void RankSlots::of(std::int32_t a, std::vector<std::size_t>& out) const {
  const auto rank = static_cast<std::size_t>(a);
  out.assign(slots_.begin() + static_cast<std::ptrdiff_t>(start_[rank]),
             slots_.begin() + static_cast<std::ptrdiff_t>(start_[rank + 1]));
  out.insert(out.end(), added_[rank].begin(), added_[rank].end());
}

TimelineReplay::Ends TimelineReplay::run(const Schedule& schedule,
                                         const std::vector<std::size_t>& order,
                                         const std::vector<double>& length, std::int32_t world) {
  const auto ranks = static_cast<std::size_t>(world);
  rank_end_.assign(ranks, 0.0);
  rank_wave_.assign(ranks, 0);
  end_before_.resize(ranks);
  wave_before_.resize(ranks);
  last_on_.assign(ranks, schedule.slots.size());
  slot_end_.resize(schedule.slots.size());
  Ends out;
  for (const std::size_t k : order) {
    const ScheduleSlot& slot = schedule.slots[k];
    double start = 0;
    for (const std::int32_t a : slot.ranks) start = std::max(start, rank_end_[a]);
    const double end = start + length[k];
    for (const std::int32_t a : slot.ranks) {
      end_before_[a] = rank_end_[a];
      wave_before_[a] = rank_wave_[a];
      rank_end_[a] = end;
      rank_wave_[a] = std::max(rank_wave_[a], slot.wave + 1);
      last_on_[a] = k;
    }
    slot_end_[k] = end;
    out.busy += static_cast<double>(slot.ranks.size()) * length[k];
    if (end >= out.step) {
      out.step = end;
      out.last = k;
    }
  }
  return out;
}

bool TimelineReplay::without(const Schedule& schedule, const std::vector<std::size_t>& order,
                             const std::vector<double>& length, std::size_t c, Ends& ends,
                             std::vector<double>& finish, std::vector<std::int32_t>& next_wave) {
  const std::vector<std::int32_t>& ranks = schedule.slots[c].ranks;
  for (const std::int32_t a : ranks) {
    if (last_on_[a] != c) return false;
  }
  // c's ranks as they were before c, every other rank as it is.
  finish = rank_end_;
  next_wave = rank_wave_;
  for (const std::int32_t a : ranks) {
    finish[a] = end_before_[a];
    next_wave[a] = wave_before_[a];
  }
  // The other slots' ends as they were, summed and compared in the order
  // a replay takes them.
  ends = Ends{};
  for (const std::size_t k : order) {
    if (k == c) continue;
    ends.busy += static_cast<double>(schedule.slots[k].ranks.size()) * length[k];
    if (slot_end_[k] >= ends.step) {
      ends.step = slot_end_[k];
      ends.last = k;
    }
  }
  return true;
}

void SlotChains::build(const Schedule& schedule, const std::vector<std::size_t>& order,
                       const std::vector<double>& length, std::int32_t world) {
  const std::size_t n = schedule.slots.size();
  order_ = order;
  length_ = length;
  pos_.assign(n, 0);
  end_.assign(n, 0.0);
  at_.assign(n + 1, 0);
  for (std::size_t k = 0; k < n; ++k) at_[k + 1] = at_[k] + schedule.slots[k].ranks.size();
  slot_.assign(at_[n], 0);
  prev_.assign(at_[n], kNone);
  next_.assign(at_[n], kNone);
  weighted_.assign(n, 0.0);
  wave_.assign(n, 0);
  head_.assign(static_cast<std::size_t>(world), kNone);
  std::vector<std::size_t> last(static_cast<std::size_t>(world), kNone);  // per rank: its entry
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t k = order_[i];
    pos_[k] = i;
    wave_[k] = schedule.slots[k].wave;
    const std::vector<std::int32_t>& ranks = schedule.slots[k].ranks;
    double start = 0;
    for (std::size_t m = 0; m < ranks.size(); ++m) {
      const std::size_t e = at_[k] + m;
      std::size_t& before = last[static_cast<std::size_t>(ranks[m])];
      slot_[e] = k;
      prev_[e] = before;
      if (before != kNone) {
        next_[before] = e;
        start = std::max(start, end_[slot_[before]]);
      } else {
        head_[static_cast<std::size_t>(ranks[m])] = e;
      }
      before = e;
    }
    end_[k] = start + length_[k];
    weighted_[i] = static_cast<double>(ranks.size()) * length_[k];
  }
  busy_before_.assign(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) busy_before_[i + 1] = busy_before_[i] + weighted_[i];
  constexpr std::size_t kLatest = 8;
  latest_.resize(n);
  std::iota(latest_.begin(), latest_.end(), std::size_t{0});
  const auto keep = latest_.begin() + static_cast<std::ptrdiff_t>(std::min(kLatest, n));
  std::partial_sort(latest_.begin(), keep, latest_.end(),
                    [&](std::size_t a, std::size_t b) { return end_[a] > end_[b]; });
  latest_.erase(keep, latest_.end());
  seen_.assign(n, 0);
  moved_end_.assign(n, 0.0);
  epoch_ = 0;
  valid_ = true;
}

double SlotChains::step_without(std::size_t x, std::size_t y, double length) {
  ++epoch_;
  heap_.clear();
  const auto push = [&](std::size_t k) {
    heap_.push_back(pos_[k]);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  };
  const auto push_after = [&](std::size_t k) {
    for (std::size_t e = at_[k]; e < at_[k + 1]; ++e) {
      if (next_[e] != kNone) push(slot_[next_[e]]);
    }
  };
  const auto end_of = [&](std::size_t k) { return seen_[k] == epoch_ ? moved_end_[k] : end_[k]; };
  push(y);
  push_after(x);
  // In wave order: a slot's members' slots before it are final when it is
  // replayed (they come earlier, and only later slots are pushed).
  double step = 0;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const std::size_t k = order_[heap_.back()];
    heap_.pop_back();
    if (k == x || seen_[k] == epoch_) continue;
    double start = 0;
    for (std::size_t e = at_[k]; e < at_[k + 1]; ++e) {
      std::size_t before = prev_[e];
      if (before != kNone && slot_[before] == x) before = prev_[before];
      if (before != kNone) start = std::max(start, end_of(slot_[before]));
    }
    const double end = start + (k == y ? length : length_[k]);
    if (end == end_[k]) continue;  // nothing after it moves through it
    seen_[k] = epoch_;
    moved_end_[k] = end;
    step = std::max(step, end);
    push_after(k);
  }
  // The latest end that did not move (x's left out): among the few kept,
  // else among every slot.
  const auto kept = [&](std::size_t k) { return k != x && seen_[k] != epoch_; };
  const auto it = std::find_if(latest_.begin(), latest_.end(), kept);
  if (it != latest_.end()) {
    step = std::max(step, end_[*it]);
  } else {
    for (std::size_t k = 0; k < end_.size(); ++k) {
      if (kept(k)) step = std::max(step, end_[k]);
    }
  }
  return step;
}

double SlotChains::busy_without(std::size_t x, std::size_t y, double length) const {
  // Summed in wave order as a replay sums them: up to the first of x and y
  // the sum is the one kept at build.
  const std::size_t from = std::min(pos_[x], pos_[y]);
  double busy = busy_before_[from];
  for (std::size_t i = from; i < order_.size(); ++i) {
    const std::size_t k = order_[i];
    if (k == x) continue;
    busy += k == y ? static_cast<double>(at_[k + 1] - at_[k]) * length : weighted_[i];
  }
  return busy;
}

bool SlotChains::holds_wave(std::int32_t rank, std::int32_t wave, std::size_t x,
                            std::size_t y) const {
  // The rank's slots come in wave order: past `wave`, none can hold it.
  for (std::size_t e = head_[static_cast<std::size_t>(rank)]; e != kNone; e = next_[e]) {
    const std::size_t k = slot_[e];
    if (wave_[k] > wave) return false;
    if (wave_[k] == wave && k != x && k != y) return true;
  }
  return false;
}

}  // namespace fulcrum::hybrid
