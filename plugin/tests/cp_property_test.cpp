// Property tests of every registered CP strategy over seeded random
// workloads: documents of 1 to 1M tokens, P from 1 to 64, B in {16, 64, 128},
// every mask kind. Each plan must be refused exactly when
// inapplicable_reason() says so, and otherwise be a valid permutation plus
// padding whose restore index inverts it and whose work figures equal an
// independent recount (brute force up to a few thousand tokens, key intervals
// beyond). Strategies come from the registry, so new ones are covered as they
// land.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "brute_force.h"
#include "cp_random_workloads.h"
#include "cp_test_fixtures.h"
#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

using fixtures::Rng;

using namespace random_workloads;

std::vector<std::int64_t> documents(const CpWorkload& w) {
  return w.doc_lengths.empty() ? std::vector<std::int64_t>{w.tokens} : w.doc_lengths;
}

enum class Recount { kBruteForce, kIntervals };

std::vector<RankWork> recount(Recount how, const CpWorkload& w, const ShardPlan& plan) {
  return how == Recount::kBruteForce ? brute_work(w, plan) : interval_work(w, plan);
}

// Per-block tiles by the independent recount: a plan with one "rank" per
// aligned block of B tokens (the last one padded) makes interval_work report
// each block's tiles.
std::vector<std::int64_t> recount_block_tiles(const CpWorkload& w) {
  const std::int64_t blocks = ceil_div(w.tokens, w.block_size);
  ShardPlan per_block;
  per_block.cp_size = static_cast<std::int32_t>(blocks);
  per_block.shard_len = w.block_size;
  per_block.positions.assign(static_cast<std::size_t>(blocks * w.block_size), kPadPosition);
  std::iota(per_block.positions.begin(), per_block.positions.begin() + w.tokens, std::int64_t{0});
  std::vector<std::int64_t> tiles;
  for (const RankWork& work : interval_work(w, per_block)) tiles.push_back(work.tiles);
  return tiles;
}

// Shape rules of the anchors, stated independently of their code.
::testing::AssertionResult check_anchor_shape(std::string_view name, const CpWorkload& w,
                                              const ShardPlan& plan) {
  const std::int64_t n = w.tokens;
  const std::int64_t p = w.cp_size;
  auto fail = [&]() { return ::testing::AssertionFailure() << name << ": "; };
  std::vector<std::int64_t> real(static_cast<std::size_t>(p), 0);
  for (std::int64_t r = 0; r < p; ++r) {
    real[r] = std::count_if(plan.rank_begin(static_cast<std::int32_t>(r)),
                            plan.rank_end(static_cast<std::int32_t>(r)),
                            [](std::int64_t pos) { return pos >= 0; });
  }
  const auto [least, most] = std::minmax_element(real.begin(), real.end());
  if (name == "contiguous" || name == "striped" || name == "per_document") {
    if (plan.shard_len != ceil_div(n, p))
      return fail() << "shard_len=" << plan.shard_len << " != ceil(N/P)";
    if (plan.padding >= p) return fail() << "padding=" << plan.padding << " >= P";
  }
  if (name == "striped" || name == "per_document") {
    if (*most - *least > 1) return fail() << "real tokens per rank differ by " << *most - *least;
  }
  if (name == "striped") {
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(plan.positions.size()); ++i) {
      const std::int64_t pos = plan.positions[i];
      if (pos >= 0 && pos % p != i / plan.shard_len)
        return fail() << "token " << pos << " on rank " << i / plan.shard_len;
    }
  }
  if (name == "head_tail" || name == "ptrr") {
    if (plan.padding != 0 || plan.shard_len * p != n) return fail() << "expected no padding";
  }
  if (name == "per_document_padded") {
    std::int64_t pad = 0;
    std::int64_t slots = 0;
    for (std::int64_t length : documents(w)) {
      pad += (2 * p - length % (2 * p)) % (2 * p);
      slots += length + (2 * p - length % (2 * p)) % (2 * p);
    }
    if (plan.padding != pad) return fail() << "padding=" << plan.padding << ", formula " << pad;
    if (plan.shard_len * p != slots) return fail() << "shard_len=" << plan.shard_len;
  }
  if (name == "ptrr") {
    // Snake deal of the independently recounted block costs, heaviest first,
    // ties by block index; each rank's blocks in ascending order.
    const std::vector<std::int64_t> cost = recount_block_tiles(w);
    std::vector<std::int64_t> order(cost.size());
    std::iota(order.begin(), order.end(), std::int64_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return cost[a] > cost[b]; });
    std::vector<std::vector<std::int64_t>> owned(static_cast<std::size_t>(p));
    for (std::size_t i = 0; i < order.size(); ++i) {
      const std::int64_t round = static_cast<std::int64_t>(i) / p;
      const std::int64_t seat = static_cast<std::int64_t>(i) % p;
      owned[round % 2 == 0 ? seat : p - 1 - seat].push_back(order[i]);
    }
    std::vector<std::int64_t> want;
    for (auto& blocks : owned) {
      std::sort(blocks.begin(), blocks.end());
      for (std::int64_t b : blocks) {
        for (std::int64_t t = 0; t < w.block_size; ++t) want.push_back(b * w.block_size + t);
      }
    }
    if (want != plan.positions)
      return fail() << "positions differ from the snake deal of block costs";
  }
  return ::testing::AssertionSuccess();
}

// Everything one (strategy, workload) pair must satisfy.
::testing::AssertionResult check_strategy(const StrategyInfo& info, const CpWorkload& w,
                                          Recount how) {
  auto fail = [&]() { return ::testing::AssertionFailure() << info.name << ": "; };
  const Result<ShardPlan> result = info.plan(w);
  if (const auto reason = inapplicable_reason(info.name, w)) {
    if (result.is_ok()) return fail() << "planned although inapplicable: " << *reason;
    if (result.status().code() != StatusCode::kUnsupported) {
      return fail() << "inapplicable (" << *reason << ") but returned "
                    << status_code_name(result.status().code()) << ": "
                    << result.status().message();
    }
    if (result.status().message().find(*reason) == std::string::npos) {
      return fail() << "kUnsupported message '" << result.status().message()
                    << "' does not give the reason '" << *reason << "'";
    }
    return ::testing::AssertionSuccess();
  }
  if (!result.is_ok()) {
    return fail() << "applicable but returned " << status_code_name(result.status().code()) << ": "
                  << result.status().message();
  }
  const ShardPlan& plan = *result;

  if (const BruteCheck check = brute_check(w, plan); !check.ok()) {
    return fail() << "invalid plan: " << check.error;
  }
  if (const Status status = validate_plan(w, plan); !status.is_ok()) {
    return fail() << "validate_plan rejects a plan the brute check accepts: " << status.message();
  }
  const std::vector<std::int64_t> restore = restore_index(plan, w.tokens);
  if (static_cast<std::int64_t>(restore.size()) != w.tokens) {
    return fail() << "restore_index has " << restore.size() << " entries";
  }
  for (std::int64_t pos = 0; pos < w.tokens; ++pos) {
    const std::int64_t at = restore[static_cast<std::size_t>(pos)];
    if (at < 0 || at >= static_cast<std::int64_t>(plan.positions.size()) ||
        plan.positions[static_cast<std::size_t>(at)] != pos) {
      return fail() << "restore_index[" << pos << "]=" << at << " does not hold position " << pos;
    }
  }

  if (info.name == "auto") {
    // auto names the planner it chose; AutoNamesThePlanItReturns checks the
    // name against the registry.
    if (plan.strategy_used.empty() || plan.strategy_used == "auto") {
      return fail() << "strategy_used='" << plan.strategy_used << "' does not name the choice";
    }
  } else if (plan.strategy_used != info.name || !plan.fallback_reason.empty()) {
    return fail() << "strategy_used='" << plan.strategy_used << "' fallback_reason='"
                  << plan.fallback_reason << "'";
  }

  if (auto shape = check_anchor_shape(info.name, w, plan); !shape) return shape;

  if (auto work = same_work(plan.work, recount(how, w, plan)); !work) {
    return fail() << work.message();
  }

  // Every rank must derive the same plan from the same inputs, also through
  // the name lookup.
  const Result<ShardPlan> again = cp::plan(info.name, w);
  if (!again.is_ok() || again->positions != plan.positions || again->shard_len != plan.shard_len ||
      again->strategy_used != plan.strategy_used) {
    return fail() << "planning the same workload twice gave different plans";
  }
  return ::testing::AssertionSuccess();
}

// Runs every registered strategy on `count` workloads drawn from `seed`.
void check_all_strategies(std::uint64_t seed, int count, const Limits& limits, Recount how) {
  Rng rng(seed);
  for (int i = 0; i < count; ++i) {
    const CpWorkload w = random_workload(rng, limits);
    ASSERT_TRUE(validate_workload(w).is_ok())
        << describe(w) << ": " << validate_workload(w).message();
    for (const StrategyInfo& info : strategies()) {
      ASSERT_TRUE(check_strategy(info, w, how))
          << "seed " << seed << " case " << i << ": " << describe(w);
    }
  }
}

TEST(CpPropertyTest, IntervalRecountAgreesWithBruteForceOnArbitraryPlans) {
  // interval_work stands in for brute force on long rows, so it is checked
  // first on random permutations with pads scattered through the shards.
  Rng rng(101);
  for (int i = 0; i < 150; ++i) {
    const CpWorkload w =
        random_workload(rng, {.min_tokens = 1, .max_tokens = 1200, .unusual_blocks = i % 3 == 0});
    ShardPlan plan;
    plan.cp_size = w.cp_size;
    plan.shard_len = ceil_div(w.tokens, w.cp_size) + rng.uniform(0, 40);
    plan.positions.assign(static_cast<std::size_t>(plan.cp_size * plan.shard_len), kPadPosition);
    std::iota(plan.positions.begin(), plan.positions.begin() + w.tokens, std::int64_t{0});
    for (std::size_t k = plan.positions.size(); k > 1; --k) {
      std::swap(plan.positions[k - 1],
                plan.positions[static_cast<std::size_t>(rng.uniform(0, k - 1))]);
    }
    plan.padding = plan.cp_size * plan.shard_len - w.tokens;
    std::vector<std::int64_t> brute_full;
    std::vector<std::int64_t> interval_full;
    std::vector<std::int64_t> core_full;
    const auto brute = brute_work(w, plan, &brute_full);
    ASSERT_TRUE(same_work(interval_work(w, plan, &interval_full), brute)) << describe(w);
    // The core's work model must agree on such plans too, not only on the
    // shapes the strategies happen to produce.
    ASSERT_TRUE(same_work(compute_work(w, plan, &core_full), brute))
        << "compute_work, " << describe(w);
    // Full tiles (dense masks; block-sparse counts none full) alike.
    if (w.mask.kind == MaskKind::kBlockSparse) brute_full.assign(brute_full.size(), 0);
    ASSERT_EQ(interval_full, brute_full) << describe(w);
    ASSERT_EQ(core_full, brute_full) << describe(w);
  }
}

TEST(CpPropertyTest, BruteAllowedFollowsTheMaskDefinitions) {
  // Two documents [0,5) and [5,12), spot checks written out by hand.
  CpWorkload w{.tokens = 12, .doc_lengths = {5, 7}, .mask = MaskSpec::causal(), .block_size = 4};
  EXPECT_TRUE(brute_allowed(w, 4, 0));
  EXPECT_FALSE(brute_allowed(w, 5, 4));  // other document
  EXPECT_FALSE(brute_allowed(w, 6, 7));  // future key
  w.mask = MaskSpec::sliding(2);
  EXPECT_TRUE(brute_allowed(w, 8, 7));
  EXPECT_FALSE(brute_allowed(w, 8, 6));
  w.mask = MaskSpec::prefix(3);  // document-local prefix: positions 5, 6, 7
  EXPECT_TRUE(brute_allowed(w, 5, 7));
  EXPECT_FALSE(brute_allowed(w, 5, 8));
  EXPECT_TRUE(brute_allowed(w, 9, 8));
  w.mask = MaskSpec::full();
  EXPECT_TRUE(brute_allowed(w, 5, 11));
  EXPECT_FALSE(brute_allowed(w, 4, 11));
  w.mask.kind = MaskKind::kBlockSparse;
  w.mask.block_sparse = {.offsets = {0, 1, 2, 4}, .kv_blocks = {0, 2, 0, 1}};
  EXPECT_TRUE(brute_allowed(w, 8, 7));   // block 2 sees block 1, same document
  EXPECT_FALSE(brute_allowed(w, 8, 3));  // block 2 sees block 0, but another document
  EXPECT_TRUE(brute_allowed(w, 7, 10));  // block 1 sees block 2
  EXPECT_FALSE(brute_allowed(w, 7, 5));  // block 1 does not see itself
}

TEST(CpPropertyTest, EveryStrategyOnShortRowsMatchesBruteForce) {
  for (std::uint64_t seed : {1, 2, 3, 4, 5, 6, 8, 9}) {
    check_all_strategies(seed, 50, {.min_tokens = 1, .max_tokens = 3000}, Recount::kBruteForce);
    if (HasFatalFailure()) return;
  }
}

TEST(CpPropertyTest, EveryStrategyWithUnusualBlockSizesMatchesBruteForce) {
  // B = 1 (every token a tile), odd B, and B larger than the row.
  check_all_strategies(7, 60, {.min_tokens = 1, .max_tokens = 2000, .unusual_blocks = true},
                       Recount::kBruteForce);
}

TEST(CpPropertyTest, EveryStrategyOnMediumRowsMatchesIntervalRecount) {
  for (std::uint64_t seed : {11, 12, 13, 14}) {
    check_all_strategies(seed, 30, {.min_tokens = 3000, .max_tokens = 200000, .max_doc = 100000},
                         Recount::kIntervals);
    if (HasFatalFailure()) return;
  }
}

TEST(CpPropertyTest, EveryStrategyOnLongRowsMatchesIntervalRecount) {
  // Rows of one to two and a half million tokens, documents up to 1M.
  check_all_strategies(21, 8, {.min_tokens = 1 << 20, .max_tokens = 5 << 19, .max_doc = 1 << 20},
                       Recount::kIntervals);
}

TEST(CpPropertyTest, AutoNamesThePlanItReturns) {
  // auto may choose an internal variant (a finer-grained balanced plan) that
  // is not a registry entry; but when strategy_used names a registered
  // strategy, the positions must be that strategy's plan, or step records
  // and --compare tables would attribute one layout's work to another.
  const StrategyInfo* automatic = find_strategy("auto");
  ASSERT_NE(automatic, nullptr);
  Rng rng(71);
  int mislabelled = 0;
  for (int i = 0; i < 300 && mislabelled < 3; ++i) {
    const CpWorkload w = random_workload(rng, {.min_tokens = 1, .max_tokens = 4000});
    const Result<ShardPlan> chosen = automatic->plan(w);
    ASSERT_TRUE(chosen.is_ok()) << chosen.status().message();
    const StrategyInfo* used = find_strategy(chosen->strategy_used);
    if (used == nullptr) continue;
    const Result<ShardPlan> direct = used->plan(w);
    const bool same = direct.is_ok() && direct->positions == chosen->positions;
    EXPECT_TRUE(same) << "auto reports strategy_used='" << chosen->strategy_used
                      << "' but returns other positions than that strategy: " << describe(w);
    mislabelled += same ? 0 : 1;
  }
}

TEST(CpPropertyTest, FewerTokensThanRanksGivesPaddedPlans) {
  Rng rng(31);
  for (int i = 0; i < 60; ++i) {
    CpWorkload w = random_workload(rng, {.min_tokens = 1, .max_tokens = 63, .min_cp = 2});
    w.cp_size = static_cast<std::int32_t>(rng.uniform(w.tokens + 1, 64));
    for (const StrategyInfo& info : strategies()) {
      ASSERT_TRUE(check_strategy(info, w, Recount::kBruteForce)) << describe(w);
      // head_tail and ptrr need N to split into at least 2P (P*B) tokens;
      // everything else must serve a row shorter than the CP group.
      if (info.name != "head_tail" && info.name != "ptrr") {
        const Result<ShardPlan> plan = info.plan(w);
        ASSERT_TRUE(plan.is_ok()) << info.name << ": " << plan.status().message();
        EXPECT_GE(plan->padding, w.cp_size - w.tokens) << info.name;
      }
    }
  }
}

TEST(CpPropertyTest, HugeWindowsAndPrefixesCoverWholeDocuments) {
  // sliding:W and prefix:L accept any W >= 1 and L >= 0; a value past every
  // document (up to INT64_MAX) must mean "the whole document" and must not
  // overflow position arithmetic.
  {
    // A second document starting at 4: its first query must see all 200 keys
    // (13 key blocks of 16), exactly as under a full mask.
    CpWorkload w;
    w.tokens = 204;
    w.doc_lengths = {4, 200};
    w.block_size = 16;
    w.mask = MaskSpec::prefix(std::numeric_limits<std::int64_t>::max());
    CpWorkload full = w;
    full.mask = MaskSpec::full();
    const Result<ShardPlan> plan = plan_contiguous(w);
    ASSERT_TRUE(plan.is_ok());
    EXPECT_TRUE(same_work(plan->work, brute_work(w, *plan)));
    EXPECT_EQ(unsharded_tiles(w), unsharded_tiles(full));
  }
  Rng rng(81);
  for (const std::int64_t huge :
       {std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::max()}) {
    for (int i = 0; i < 10; ++i) {
      CpWorkload w = random_workload(rng, {.min_tokens = 2, .max_tokens = 1500});
      if (w.doc_lengths.size() < 2) w.doc_lengths = random_documents(rng, w.tokens, 300);
      CpWorkload reference = w;
      for (const bool sliding : {true, false}) {
        w.mask = sliding ? MaskSpec::sliding(huge) : MaskSpec::prefix(huge);
        reference.mask = sliding ? MaskSpec::causal() : MaskSpec::full();
        for (const StrategyInfo& info : strategies()) {
          EXPECT_TRUE(check_strategy(info, w, Recount::kBruteForce)) << describe(w);
        }
        const Result<ShardPlan> plan = plan_striped(w);
        ASSERT_TRUE(plan.is_ok());
        EXPECT_TRUE(same_work(plan->work, compute_work(reference, *plan))) << describe(w);
        if (HasFailure()) return;  // one workload's report is enough
      }
    }
  }
}

}  // namespace
}  // namespace fulcrum::cp
