// The search's rank sets on few nodes (NodePool, schedule_hybrid_nodes.h)
// against a recount that counts and sorts every pool afresh for every
// call, as the search did before the pools were kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "strategies/schedule_hybrid_nodes.h"

namespace fulcrum {
namespace {

// g of the first m ranks of `order` on the fewest nodes, recounted: nodes by
// pool count (stable sort, most first), whole nodes while they fit, then the
// last node in that order that still holds the rest (a scan), each node's
// ranks in the order's order; ascending.
std::vector<std::int32_t> recount(const std::vector<std::int32_t>& order, std::int32_t m,
                                  std::int32_t g, std::int32_t per_node) {
  std::vector<std::int32_t> count;
  std::vector<std::int32_t> nodes;
  for (std::int32_t k = 0; k < m; ++k) {
    const auto node = static_cast<std::size_t>(order[k] / per_node);
    if (node >= count.size()) count.resize(node + 1, 0);
    if (count[node]++ == 0) nodes.push_back(static_cast<std::int32_t>(node));
  }
  std::stable_sort(nodes.begin(), nodes.end(),
                   [&](std::int32_t x, std::int32_t y) { return count[x] > count[y]; });
  std::vector<std::int32_t> take(count.size(), 0);
  std::int32_t taken = 0;
  std::size_t n = 0;
  while (taken < g && n < nodes.size()) {
    const std::int32_t left = g - taken;
    if (count[nodes[n]] <= left) {
      take[nodes[n]] = count[nodes[n]];
      taken += count[nodes[n]];
      ++n;
      continue;
    }
    std::size_t fit = n;
    while (fit + 1 < nodes.size() && count[nodes[fit + 1]] >= left) ++fit;
    take[nodes[fit]] = left;
    taken += left;
  }
  std::vector<std::int32_t> ranks;
  for (std::int32_t k = 0; k < m; ++k) {
    std::int32_t& want = take[static_cast<std::size_t>(order[k] / per_node)];
    if (want > 0) {
      ranks.push_back(order[k]);
      --want;
    }
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// Random orders (every rank, or a part of them; in runs of idle ranks in
// rank order as the search's free-time order has them, or shuffled), and
// many (m, g) asked of one pool in a random order, repeats included, so that
// kept counts are read back after other pools were counted.
TEST(NodePool, PackedEqualsARecountOfEveryPool) {
  std::mt19937_64 rng(20261126);
  std::int64_t checked = 0;
  std::int64_t split = 0;  // sets that took part of a node
  for (int trial = 0; trial < 600; ++trial) {
    const auto world = static_cast<std::int32_t>(2 + rng() % 300);
    const auto per_node = static_cast<std::int32_t>(1 + rng() % 9);
    std::vector<std::int32_t> order(static_cast<std::size_t>(world));
    std::iota(order.begin(), order.end(), 0);
    const auto idle = static_cast<std::size_t>(rng() % (order.size() + 1));
    std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(idle), order.end(), rng);
    if (trial % 3 == 0) std::shuffle(order.begin(), order.end(), rng);
    if (trial % 5 == 0) order.resize(1 + rng() % order.size());  // part of the world
    const auto size = static_cast<std::int32_t>(order.size());
    hybrid::NodePool pool(order, world, per_node);
    for (int ask = 0; ask < 30; ++ask) {
      const auto m = static_cast<std::int32_t>(1 + rng() % static_cast<std::uint64_t>(size));
      const auto g = static_cast<std::int32_t>(1 + rng() % static_cast<std::uint64_t>(m));
      const std::vector<std::int32_t> want = recount(order, m, g, per_node);
      SCOPED_TRACE("trial " + std::to_string(trial) + ", W = " + std::to_string(world) +
                   ", R = " + std::to_string(per_node) + ", m = " + std::to_string(m) +
                   ", g = " + std::to_string(g));
      ASSERT_EQ(pool.packed(m, g), want);
      ASSERT_EQ(static_cast<std::int32_t>(want.size()), g);
      ++checked;
      split += g % per_node != 0 ? 1 : 0;
    }
  }
  EXPECT_EQ(checked, 600 * 30);
  EXPECT_GT(split, 5000);
}

}  // namespace
}  // namespace fulcrum
