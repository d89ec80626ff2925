// What the CP checks refuse, over seeded random workloads and plans: malformed
// workloads are invalid, validate_plan refuses what the brute-force check
// refuses, block-sparse lists are refused or counted as sets, and the summary
// figures follow their definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "brute_force.h"
#include "cp_random_workloads.h"
#include "cp_test_fixtures.h"
#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

using fixtures::Rng;
using namespace random_workloads;

TEST(CpPropertyTest, MalformedWorkloadsAreRejectedAsInvalid) {
  const CpWorkload good{.tokens = 64,
                        .doc_lengths = {40, 24},
                        .mask = MaskSpec::causal(),
                        .block_size = 16,
                        .cp_size = 2};
  std::vector<std::pair<std::string, CpWorkload>> bad;
  auto add = [&](std::string what, auto edit) {
    CpWorkload w = good;
    edit(w);
    bad.emplace_back(std::move(what), std::move(w));
  };
  add("N=0", [](CpWorkload& w) {
    w.tokens = 0;
    w.doc_lengths.clear();
  });
  add("cp_size=0", [](CpWorkload& w) { w.cp_size = 0; });
  add("cp_size=-2", [](CpWorkload& w) { w.cp_size = -2; });
  add("block_size=0", [](CpWorkload& w) { w.block_size = 0; });
  add("documents sum to 63", [](CpWorkload& w) { w.doc_lengths = {40, 23}; });
  add("documents sum to 65", [](CpWorkload& w) { w.doc_lengths = {40, 25}; });
  add("empty document", [](CpWorkload& w) { w.doc_lengths = {40, 0, 24}; });
  add("negative document", [](CpWorkload& w) { w.doc_lengths = {70, -6}; });
  add("sliding:0", [](CpWorkload& w) { w.mask = MaskSpec::sliding(0); });
  add("prefix:-1", [](CpWorkload& w) { w.mask = MaskSpec::prefix(-1); });
  add("block-sparse with no offsets", [](CpWorkload& w) { w.mask.kind = MaskKind::kBlockSparse; });
  add("block-sparse KV block out of range", [](CpWorkload& w) {
    w.mask.kind = MaskKind::kBlockSparse;
    w.mask.block_sparse = {.offsets = {0, 1, 1, 1, 1}, .kv_blocks = {4}};
  });
  add("block-sparse decreasing offsets", [](CpWorkload& w) {
    w.mask.kind = MaskKind::kBlockSparse;
    w.mask.block_sparse = {.offsets = {0, 2, 1, 2, 2}, .kv_blocks = {0, 1}};
  });
  add("block-sparse offsets past the list", [](CpWorkload& w) {
    w.mask.kind = MaskKind::kBlockSparse;
    w.mask.block_sparse = {.offsets = {0, 1, 1, 1, 3}, .kv_blocks = {0, 1}};
  });
  for (const auto& [what, w] : bad) {
    EXPECT_EQ(validate_workload(w).code(), StatusCode::kInvalidArgument) << what;
    for (const StrategyInfo& info : strategies()) {
      const Result<ShardPlan> plan = info.plan(w);
      EXPECT_FALSE(plan.is_ok()) << info.name << " planned a malformed workload: " << what;
      if (!plan.is_ok()) {
        EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument)
            << info.name << ", " << what << ": " << plan.status().message();
      }
    }
  }
}

TEST(CpPropertyTest, ValidatePlanRejectsWhatTheBruteCheckRejects) {
  Rng rng(41);
  for (int i = 0; i < 200; ++i) {
    const CpWorkload w = random_workload(rng, {.min_tokens = 2, .max_tokens = 500});
    const Result<ShardPlan> base = plan_contiguous(w);
    ASSERT_TRUE(base.is_ok()) << describe(w);
    ShardPlan plan = *base;
    const std::size_t at = static_cast<std::size_t>(
        rng.uniform(0, static_cast<std::int64_t>(plan.positions.size()) - 1));
    switch (rng.uniform(0, 6)) {
      case 0:  // a position twice
        plan.positions[at] = plan.positions[at] == 0 ? 1 : 0;
        break;
      case 1:  // out of range
        plan.positions[at] = w.tokens + rng.uniform(0, 3);
        break;
      case 2:  // negative but not the pad marker
        plan.positions[at] = -2 - rng.uniform(0, 3);
        break;
      case 3:  // a real token dropped to padding, count adjusted; contiguous
               // plans hold position pos at index pos
        plan.positions[static_cast<std::size_t>(rng.uniform(0, w.tokens - 1))] = kPadPosition;
        ++plan.padding;
        break;
      case 4:  // wrong padding count
        plan.padding += rng.chance(50) ? 1 : -1;
        break;
      case 5:  // ragged shards
        plan.positions.push_back(kPadPosition);
        ++plan.padding;
        break;
      default:  // wrong rank count
        plan.cp_size += 1;
        break;
    }
    const BruteCheck check = brute_check(w, plan);
    ASSERT_FALSE(check.ok()) << "mutation kept the plan valid: " << describe(w);
    EXPECT_FALSE(validate_plan(w, plan).is_ok())
        << describe(w) << ": brute check says " << check.error;
  }
}

TEST(CpPropertyTest, BlockSparseListsAreRefusedOrCountedAsSets) {
  // Unsorted lists and repeats spell the same set of tiles. The core may
  // insist on ascending, repeat-free lists (kInvalidArgument); if it accepts
  // a list, a repeated tile must not be counted twice.
  Rng rng(51);
  for (int i = 0; i < 40; ++i) {
    CpWorkload w = random_workload(rng, {.min_tokens = 16, .max_tokens = 1500});
    w.mask.kind = MaskKind::kBlockSparse;
    w.mask.block_sparse = random_block_sparse(rng, w.tokens, w.block_size);
    BlockSparseMask& sparse = w.mask.block_sparse;
    std::vector<std::int64_t> kv_blocks;
    std::vector<std::int64_t> offsets = {0};
    for (std::size_t qb = 0; qb + 1 < sparse.offsets.size(); ++qb) {
      std::vector<std::int64_t> row(sparse.kv_blocks.begin() + sparse.offsets[qb],
                                    sparse.kv_blocks.begin() + sparse.offsets[qb + 1]);
      if (i % 2 == 1 && !row.empty()) {
        row.push_back(row[static_cast<std::size_t>(
            rng.uniform(0, static_cast<std::int64_t>(row.size()) - 1))]);
      }
      std::reverse(row.begin(), row.end());
      kv_blocks.insert(kv_blocks.end(), row.begin(), row.end());
      offsets.push_back(static_cast<std::int64_t>(kv_blocks.size()));
    }
    sparse.kv_blocks = kv_blocks;
    sparse.offsets = offsets;
    const Result<ShardPlan> plan = plan_striped(w);
    if (!plan.is_ok()) {
      EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << plan.status().message();
      continue;
    }
    ASSERT_TRUE(same_work(plan->work, brute_work(w, *plan))) << describe(w);
  }
}

TEST(CpPropertyTest, SummaryFiguresFollowTheirDefinitions) {
  Rng rng(61);
  for (int i = 0; i < 60; ++i) {
    const CpWorkload w = random_workload(rng, {.min_tokens = 1, .max_tokens = 2000});
    const Result<ShardPlan> plan = plan_striped(w);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    const std::vector<RankWork> work = brute_work(w, *plan);
    std::int64_t pairs = 0, max_pairs = 0, tiles = 0, max_tiles = 0;
    for (const RankWork& r : work) {
      pairs += r.pairs;
      tiles += r.tiles;
      max_pairs = std::max(max_pairs, r.pairs);
      max_tiles = std::max(max_tiles, r.tiles);
    }
    ShardPlan whole;
    whole.cp_size = 1;
    whole.shard_len = w.tokens;
    whole.positions.resize(static_cast<std::size_t>(w.tokens));
    std::iota(whole.positions.begin(), whole.positions.end(), std::int64_t{0});
    const std::int64_t whole_tiles = brute_work(w, whole)[0].tiles;
    EXPECT_EQ(total_pairs(w), pairs) << describe(w);
    EXPECT_EQ(unsharded_tiles(w), whole_tiles) << describe(w);
    if (pairs == 0 || tiles == 0 || whole_tiles == 0) continue;  // an all-empty block-sparse mask
    const double p = w.cp_size;
    const WorkSummary summary = summarize(w, work);
    const double want_pairs = max_pairs / (pairs / p);
    const double want_tiles = max_tiles / (tiles / p);
    const double want_ideal = max_tiles / (whole_tiles / p);
    EXPECT_NEAR(summary.pairs_imbalance, want_pairs, 1e-12 * want_pairs) << describe(w);
    EXPECT_NEAR(summary.tiles_imbalance, want_tiles, 1e-12 * want_tiles) << describe(w);
    EXPECT_NEAR(summary.tiles_over_ideal, want_ideal, 1e-12 * want_ideal) << describe(w);
  }
}

}  // namespace
}  // namespace fulcrum::cp
