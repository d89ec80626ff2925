// The structures that let hybrid's large answers skip work without changing
// them (issue 25 item 4), each held to a full recount on seeded random
// input: rule 10's ranks by finish (FinishOrder) against a scan of every
// rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "fulcrum/core/random.h"
#include "strategies/schedule_hybrid_refine.h"

namespace fulcrum {
namespace {

// Finishes drawn from a few values, so that ties (which the order breaks by
// rank) are common.
double random_finish(SplitMix64& rng) { return 0.25 * static_cast<double>(rng.uniform(0, 6)); }

TEST(HybridDraw, FinishOrderIsAFullRecount) {
  SplitMix64 rng(3301);
  for (int c = 0; c < 200; ++c) {
    const auto world = static_cast<std::size_t>(rng.uniform(1, 40));
    std::vector<double> finish(world);
    for (double& f : finish) f = random_finish(rng);
    hybrid::FinishOrder order;
    order.reset(finish);
    std::vector<std::int32_t> firsts;
    for (int move = 0; move < 60; ++move) {
      const auto last = static_cast<std::int32_t>(std::max_element(finish.begin(), finish.end()) -
                                                  finish.begin());
      const auto first = static_cast<std::int32_t>(std::min_element(finish.begin(), finish.end()) -
                                                   finish.begin());
      ASSERT_EQ(order.last(), last) << "case " << c << " move " << move;
      ASSERT_EQ(order.first(), first) << "case " << c << " move " << move;
      std::vector<std::int32_t> by(world);
      std::iota(by.begin(), by.end(), 0);
      std::sort(by.begin(), by.end(), [&](std::int32_t x, std::int32_t y) {
        return finish[x] < finish[y] || (finish[x] == finish[y] && x < y);
      });
      const std::size_t n = std::min<std::size_t>(world, 8);
      order.firsts(n, firsts);
      ASSERT_EQ(firsts, std::vector<std::int32_t>(by.begin(), by.begin() + n)) << "case " << c;
      const auto a = static_cast<std::int32_t>(rng.uniform(0, world - 1));
      const auto b = static_cast<std::int32_t>(rng.uniform(0, world - 1));
      double latest = -std::numeric_limits<double>::infinity();
      for (std::size_t x = 0; x < world; ++x) {
        if (static_cast<std::int32_t>(x) != a && static_cast<std::int32_t>(x) != b) {
          latest = std::max(latest, finish[x]);
        }
      }
      ASSERT_EQ(order.latest_without(a, b), latest) << "case " << c << " move " << move;
      // A move: one or two ranks' finishes change.
      const double fa = random_finish(rng);
      order.set(a, finish[a], fa);
      finish[a] = fa;
      if (b != a) {
        const double fb = random_finish(rng);
        order.set(b, finish[b], fb);
        finish[b] = fb;
      }
    }
  }
}

}  // namespace
}  // namespace fulcrum
