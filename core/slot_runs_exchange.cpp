// The exchange of one plan's counts (slot_runs_counts.h): the floor's
// totals (each member's K/V in and out per link and the peers it has at
// least, without the member-by-member table) and the price's table, both
// by one sweep over the key blocks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "slot_runs_counts.h"

namespace fulcrum::detail {

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

namespace {

// The members' touched intervals as events in block order: at `block`,
// `member` starts touching (step +1) or stops (-1, the block after its
// last). Swept with the holders block by block, they say at every block
// who touches it, and at every event what is held before it.
void touch_events(const SlotRunsCounts& c, std::vector<TouchEvent>& events) {
  events.clear();
  for (std::size_t r = 0; r + 1 < c.touched_at.size(); ++r) {
    for (const auto& [lo, hi] : c.touched_by(r)) {
      events.push_back({lo, static_cast<std::int32_t>(r), 1});
      events.push_back({hi + 1, static_cast<std::int32_t>(r), -1});
    }
  }
  // Events of one block may come in any order: all of them are applied
  // before the block's holders are read.
  std::sort(events.begin(), events.end(),
            [](const TouchEvent& x, const TouchEvent& y) { return x.block < y.block; });
}

// What member r receives over its touched intervals from the tokens held
// before each event: at a start, less what is held before it; at a stop,
// plus what is held before it (what the interval's blocks hold, summed at
// its two ends).
inline std::int64_t at_event(const TouchEvent& e, std::int64_t held_before) {
  return e.step > 0 ? -held_before : held_before;
}

}  // namespace

// One sweep over the blocks with the touch events: a member's K/V in is,
// per touched interval, what is held at its stop less what is held at its
// start (per node: in from its node; the rest from the others), less its
// own tokens in the blocks it touches; its K/V out is, per held entry, its
// tokens times the other members touching the block (on its node, and
// not). Between two events the touches stand still: where the entries are
// many to the events, each holder's tokens there are summed first and
// priced once. The same integer sums as the table's, in O(entries +
// intervals log intervals) with no table per node or block.
ExchangeTotals exchange_totals(const SlotRunsCounts& c, const std::vector<std::int32_t>& node) {
  const std::size_t g = c.work.size();
  const std::size_t nodes =
      static_cast<std::size_t>(*std::max_element(node.begin(), node.end())) + 1;
  Scratch& x = scratch();
  touch_events(c, x.events);
  // As the sweep passes block k: the tokens held before k, in all and per
  // node; the members touching k, in all and per node; and whether each
  // member does.
  std::int64_t held = 0;
  std::vector<std::int64_t>& node_held = x.node_held;
  node_held.assign(nodes, 0);
  std::int32_t touchers = 0;
  std::vector<std::int32_t>& node_touchers = x.node_touchers;
  node_touchers.assign(nodes, 0);
  std::vector<std::int32_t>& inside = x.inside;
  inside.assign(g, 0);
  ExchangeTotals t{std::vector<std::int64_t>(g, 0), std::vector<std::int64_t>(g, 0),
                   std::vector<std::int32_t>(g, 0)};
  // Through plain pointers: the compiler need not reload the tables'
  // addresses after each store.
  std::int64_t* const near_of = t.near.data();
  std::int64_t* const far_of = t.far.data();
  std::int32_t* const peers_of = t.peers.data();
  std::int64_t* const held_on = node_held.data();
  const std::int32_t* const node_of = node.data();
  const std::int32_t* const touching = inside.data();
  const std::int32_t* const touching_on = node_touchers.data();
  const HolderEntry* const entries = c.holders.entries.data();
  // Member j's n tokens in blocks the touches as they stand cover.
  const auto credit = [&](std::int32_t j, std::int64_t n) {
    const auto own = static_cast<std::size_t>(node_of[j]);
    const std::int32_t self = touching[j];  // 0 or 1: a member's intervals are disjoint
    const std::int32_t near = touching_on[own] - self;
    // Its own tokens are not received: less n where it touches the block.
    near_of[j] += n * (near - self);
    far_of[j] += n * (touchers - self - near);
    peers_of[j] = std::max(peers_of[j], touchers - self);
    held += n;
    held_on[own] += n;
  };
  // Summed per holder between events: each member's tokens since the last
  // event (0 where it holds none there; every entry holds some) and the
  // members with some, in order of first entry.
  const bool summed = c.holders.entries.size() >= 4 * x.events.size();
  std::vector<std::int64_t>& since = x.held_since;
  std::vector<std::int32_t>& holding = x.holding;
  if (summed) {
    since.assign(g, 0);
    holding.resize(g);
  }
  std::int64_t* const held_since = since.data();
  std::int32_t* const holders = holding.data();
  std::int64_t i = 0;
  for (const TouchEvent& ev : x.events) {
    // The holder entries before the event's block, read under the touches
    // as they stand (past the last stop no member touches a block: those
    // entries add nothing).
    const std::int64_t stop = c.holders.offset[static_cast<std::size_t>(ev.block)];
    if (summed) {
      std::size_t count = 0;
      for (; i < stop; ++i) {
        const auto& [j, n] = entries[i];
        if (held_since[j] == 0) holders[count++] = j;
        held_since[j] += n;
      }
      for (std::size_t h = 0; h < count; ++h) {
        const std::int32_t j = holders[h];
        credit(j, held_since[j]);
        held_since[j] = 0;
      }
    } else {
      for (; i < stop; ++i) credit(entries[i].member, entries[i].tokens);
    }
    const auto r = static_cast<std::size_t>(ev.member);
    const auto own = static_cast<std::size_t>(node[r]);
    t.near[r] += at_event(ev, node_held[own]);
    t.far[r] += at_event(ev, held - node_held[own]);
    touchers += ev.step;
    node_touchers[own] += ev.step;
    inside[r] += ev.step;
  }
  return t;
}

// The table by the same sweep: at each event of member x, x's row gains or
// loses what each active member holds before it; O(entries + events x a). Entry by entry instead
// (each holder entry of each block a member touches added to its row) where that is fewer steps.
// Both are exact integer sums.
void received_table(const SlotRunsCounts& c, const std::vector<std::int32_t>& index, std::size_t a,
                    std::int64_t* received) {
  std::int64_t by_entry = 0;
  for (std::size_t r = 0; r + 1 < c.touched_at.size(); ++r) {
    for (const auto& [lo, hi] : c.touched_by(r)) {
      by_entry += c.holders.offset[hi + 1] - c.holders.offset[lo];
    }
  }
  const auto by_event =
      static_cast<std::int64_t>(c.holders.entries.size() + 2 * c.touched.size() * a);
  if (by_entry <= by_event) {
    for (std::size_t r = 0; r + 1 < c.touched_at.size(); ++r) {
      if (index[r] < 0) continue;  // touches nothing
      std::int64_t* const from = received + static_cast<std::size_t>(index[r]) * a;
      for (const auto& [lo, hi] : c.touched_by(r)) {
        for (std::int64_t i = c.holders.offset[lo]; i < c.holders.offset[hi + 1]; ++i) {
          const auto& [j, count] = c.holders.entries[static_cast<std::size_t>(i)];
          from[index[static_cast<std::size_t>(j)]] += count;
        }
      }
    }
  } else {
    Scratch& x = scratch();
    touch_events(c, x.events);
    std::vector<std::int64_t>& held = x.member_held;  // per active member, before the sweep's block
    held.assign(a, 0);
    std::int64_t i = 0;
    for (const TouchEvent& ev : x.events) {
      for (const std::int64_t stop = c.holders.offset[static_cast<std::size_t>(ev.block)]; i < stop;
           ++i) {
        const auto& [j, n] = c.holders.entries[static_cast<std::size_t>(i)];
        held[static_cast<std::size_t>(index[static_cast<std::size_t>(j)])] += n;
      }
      std::int64_t* const from =
          received + static_cast<std::size_t>(index[static_cast<std::size_t>(ev.member)]) * a;
      if (ev.step > 0) {
        for (std::size_t y = 0; y < a; ++y) from[y] -= held[y];
      } else {
        for (std::size_t y = 0; y < a; ++y) from[y] += held[y];
      }
    }
  }
  for (std::size_t y = 0; y < a; ++y) received[y * a + y] = 0;  // its own
}

}  // namespace fulcrum::detail
