// The exchange floor's totals (slot_runs_counts.h): each member's K/V in
// and out per link and the peers it has at least, from one plan's counts
// without the member-by-member table.
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

// Node n's running sum of held tokens: `block` ascending over its members'
// holder entries, `sum` the tokens of the entries up to each; [at[n],
// at[n + 1]) are node n's. Tokens node n holds in blocks before k.
std::int64_t held_before(const Scratch& x, std::size_t n, std::int64_t k) {
  const auto first = x.held_block.begin() + static_cast<std::ptrdiff_t>(x.at[n]);
  const auto last = x.held_block.begin() + static_cast<std::ptrdiff_t>(x.at[n + 1]);
  const auto i = static_cast<std::size_t>(std::lower_bound(first, last, k) - x.held_block.begin());
  return i == x.at[n] ? 0 : x.held_sum[i - 1];
}

// Each node's holder entries in block order with their running sums
// (held_before), and the running sum over all holders per block, in
// O(entries): per node only the blocks its members hold, where a table
// per node and block cost O(nodes x blocks).
void sum_held(const SlotRunsCounts& c, const std::vector<std::int32_t>& node, std::size_t nodes,
              bool per_node, Scratch& x) {
  const std::size_t blocks = c.holders.offset.size() - 1;
  x.sum.assign(blocks + 1, 0);
  for (std::size_t k = 0; k < blocks; ++k) {
    for (std::int64_t i = c.holders.offset[k]; i < c.holders.offset[k + 1]; ++i) {
      x.sum[k + 1] += c.holders.entries[static_cast<std::size_t>(i)].second;
    }
  }
  for (std::size_t k = 1; k <= blocks; ++k) x.sum[k] += x.sum[k - 1];
  if (!per_node) return;
  x.at.assign(nodes + 1, 0);
  for (const auto& [j, n] : c.holders.entries) ++x.at[static_cast<std::size_t>(node[j]) + 1];
  for (std::size_t n = 1; n <= nodes; ++n) x.at[n] += x.at[n - 1];
  x.place.assign(x.at.begin(), x.at.end() - 1);
  x.held_block.resize(c.holders.entries.size());
  x.held_sum.resize(c.holders.entries.size());
  for (std::size_t k = 0; k < blocks; ++k) {
    for (std::int64_t i = c.holders.offset[k]; i < c.holders.offset[k + 1]; ++i) {
      const auto& [j, n] = c.holders.entries[static_cast<std::size_t>(i)];
      const auto own = static_cast<std::size_t>(node[static_cast<std::size_t>(j)]);
      const std::size_t at = x.place[own]++;
      x.held_block[at] = static_cast<std::int64_t>(k);
      x.held_sum[at] = n + (at > x.at[own] ? x.held_sum[at - 1] : 0);
    }
  }
}

// Per node, the starts (+1) and ends (-1, the block after) of its members'
// touched intervals sorted by block: [ev_at[n], ev_at[n + 1]) are node n's
// (in `events`, the block and the step). Swept in block order they give how
// many of node n's members touch a block.
void touch_events(const SlotRunsCounts& c, const std::vector<std::int32_t>& node, std::size_t nodes,
                  Scratch& x) {
  const std::size_t g = c.work.size();
  x.ev_at.assign(nodes + 1, 0);
  for (std::size_t r = 0; r < g; ++r) {
    x.ev_at[static_cast<std::size_t>(node[r]) + 1] += 2 * c.touched_by(r).size();
  }
  for (std::size_t n = 1; n <= nodes; ++n) x.ev_at[n] += x.ev_at[n - 1];
  x.events.resize(x.ev_at[nodes]);
  x.place.assign(x.ev_at.begin(), x.ev_at.end() - 1);
  for (std::size_t r = 0; r < g; ++r) {
    std::size_t& at = x.place[static_cast<std::size_t>(node[r])];
    for (const auto& [lo, hi] : c.touched_by(r)) {
      x.events[at++] = {lo, 1};
      x.events[at++] = {hi + 1, -1};
    }
  }
  for (std::size_t n = 0; n < nodes; ++n) {
    std::sort(x.events.begin() + static_cast<std::ptrdiff_t>(x.ev_at[n]),
              x.events.begin() + static_cast<std::ptrdiff_t>(x.ev_at[n + 1]));
  }
}

// The same per node as a table per node and block (row n x (blocks + 1)):
// the running sum of the tokens node n's members hold (node_sum) and how
// many of them touch each block (node_touchers). O(nodes x blocks), cheaper
// than the sorted lists where the nodes are few.
void node_tables(const SlotRunsCounts& c, const std::vector<std::int32_t>& node, std::size_t nodes,
                 Scratch& x) {
  const std::size_t row = c.holders.offset.size();
  x.node_sum.assign(nodes * row, 0);
  x.node_touchers.assign(nodes * row, 0);
  for (std::size_t k = 0; k + 1 < row; ++k) {
    for (std::int64_t i = c.holders.offset[k]; i < c.holders.offset[k + 1]; ++i) {
      const auto& [j, n] = c.holders.entries[static_cast<std::size_t>(i)];
      x.node_sum[static_cast<std::size_t>(node[static_cast<std::size_t>(j)]) * row + k + 1] += n;
    }
  }
  for (std::size_t r = 0; r < c.work.size(); ++r) {
    std::int32_t* const mine = x.node_touchers.data() + static_cast<std::size_t>(node[r]) * row;
    for (const auto& [lo, hi] : c.touched_by(r)) {
      ++mine[lo];
      --mine[hi + 1];
    }
  }
  for (std::size_t n = 0; n < nodes; ++n) {
    std::int64_t* const held = x.node_sum.data() + n * row;
    std::int32_t* const touching = x.node_touchers.data() + n * row;
    for (std::size_t k = 1; k < row; ++k) {
      held[k] += held[k - 1];
      touching[k] += touching[k - 1];
    }
  }
}

}  // namespace

ExchangeTotals exchange_totals(const SlotRunsCounts& c, const std::vector<std::int32_t>& node) {
  const std::size_t g = c.work.size();
  const std::size_t blocks = c.holders.offset.size() - 1;
  const std::size_t row = blocks + 1;
  const std::size_t nodes =
      static_cast<std::size_t>(*std::max_element(node.begin(), node.end())) + 1;
  // Per block, the running sum of the real tokens held and how many
  // members' touched intervals cover the block (a difference array, then
  // summed); the same per node by node_tables, or where a table per node
  // would be the larger by sorted lists (sum_held, touch_events).
  Scratch& x = scratch();
  const bool tables = nodes * row <= 4 * (c.holders.entries.size() + c.touched.size());
  sum_held(c, node, nodes, !tables, x);
  if (tables) node_tables(c, node, nodes, x);
  const std::vector<std::int64_t>& sum = x.sum;
  std::vector<std::int32_t>& touchers = x.touchers;
  touchers.assign(row, 0);
  ExchangeTotals t{std::vector<std::int64_t>(g, 0), std::vector<std::int64_t>(g, 0),
                   std::vector<std::int32_t>(g, 0)};
  for (std::size_t r = 0; r < g; ++r) {
    const auto own = static_cast<std::size_t>(node[r]);
    for (const auto& [lo, hi] : c.touched_by(r)) {
      const auto l = static_cast<std::size_t>(lo);
      const auto h = static_cast<std::size_t>(hi) + 1;
      ++touchers[l];
      --touchers[h];
      const std::int64_t near = tables ? x.node_sum[own * row + h] - x.node_sum[own * row + l]
                                       : held_before(x, own, hi + 1) - held_before(x, own, lo);
      t.near[r] += near;
      t.far[r] += sum[h] - sum[l] - near;
    }
  }
  for (std::size_t k = 1; k < row; ++k) touchers[k] += touchers[k - 1];
  if (!tables) touch_events(c, node, nodes, x);
  x.count.assign(nodes, 0);
  std::vector<std::size_t>& next = x.place;
  if (!tables) next.assign(x.ev_at.begin(), x.ev_at.end() - 1);
  // Blocks ascend, so each member's place in its touched intervals, and
  // each node's in its events, only moves forward.
  std::vector<std::size_t>& place = x.member_at;
  place.assign(g, 0);
  for (std::size_t k = 0; k < blocks; ++k) {
    const auto block = static_cast<std::int64_t>(k);
    for (std::int64_t i = c.holders.offset[k]; i < c.holders.offset[k + 1]; ++i) {
      const auto& [j, n] = c.holders.entries[static_cast<std::size_t>(i)];
      const auto m = static_cast<std::size_t>(j);
      const std::span<const Interval> mine = c.touched_by(m);
      while (place[m] < mine.size() && mine[place[m]].second < block) ++place[m];
      const bool touches = place[m] < mine.size() && mine[place[m]].first <= block;
      const auto own = static_cast<std::size_t>(node[m]);
      while (!tables && next[own] < x.ev_at[own + 1] && x.events[next[own]].first <= block) {
        x.count[own] += x.events[next[own]++].second;
      }
      const std::int32_t self = touches ? 1 : 0;
      const std::int32_t near = (tables ? x.node_touchers[own * row + k] : x.count[own]) - self;
      t.near[m] += n * near;
      t.far[m] += n * (touchers[k] - self - near);
      t.peers[m] = std::max(t.peers[m], touchers[k] - self);
      if (touches) t.near[m] -= n;  // its own tokens are not received
    }
  }
  return t;
}

}  // namespace fulcrum::detail
