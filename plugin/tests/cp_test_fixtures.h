// What the CP strategy tests share: a seeded generator with the draws their
// random workloads want, and a planner's plan unwrapped (a failed plan is a
// test failure, not a crash). Header-only; a test names what it uses
// (using fixtures::Rng).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "fulcrum/core/random.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp::fixtures {

// The core's SplitMix64 (the same stream on every platform, so a failing
// seed reproduces everywhere) with the draws these tests want.
class Rng : public SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  // Log-uniform in [lo, hi], lo >= 1: short and long values equally likely.
  std::int64_t log_uniform(std::int64_t lo, std::int64_t hi) {
    const double u = static_cast<double>(next() >> 11) / static_cast<double>(1ULL << 53);
    const double v =
        std::exp(std::log(static_cast<double>(lo)) +
                 u * (std::log(static_cast<double>(hi) + 1.0) - std::log(static_cast<double>(lo))));
    return std::clamp(static_cast<std::int64_t>(v), lo, hi);
  }
  // Uniform in a uniformly drawn octave of [lo, hi]: as many draws per
  // octave, an integer stream with no floating point.
  std::int64_t octave_uniform(std::int64_t lo, std::int64_t hi) {
    const int top = std::bit_width(static_cast<std::uint64_t>(hi)) - 1;
    const int bottom = std::bit_width(static_cast<std::uint64_t>(lo)) - 1;
    const int octave = static_cast<int>(uniform(bottom, top));
    const std::int64_t a = std::max(lo, std::int64_t{1} << octave);
    const std::int64_t b = std::min(hi, (std::int64_t{1} << (octave + 1)) - 1);
    return uniform(a, std::max(a, b));
  }
  bool chance(int percent) { return uniform(0, 99) < percent; }
  template <typename T>
  T pick(std::initializer_list<T> values) {
    return values.begin()[uniform(0, static_cast<std::int64_t>(values.size()) - 1)];
  }
};

// The plan, or an empty one after a failed expectation naming the status.
inline ShardPlan plan_or_die(Planner planner, const CpWorkload& w) {
  Result<ShardPlan> plan = planner(w);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  return plan.is_ok() ? *std::move(plan) : ShardPlan{};
}

// Each rank's attention pairs, as the plan reports them.
inline std::vector<std::int64_t> pairs_of(const ShardPlan& plan) {
  std::vector<std::int64_t> pairs;
  for (const RankWork& w : plan.work) pairs.push_back(w.pairs);
  return pairs;
}

}  // namespace fulcrum::cp::fixtures
