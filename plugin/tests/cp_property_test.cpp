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

struct Limits {
  std::int64_t min_tokens = 1;
  std::int64_t max_tokens = 3000;
  std::int64_t max_doc = 1 << 20;
  std::int32_t min_cp = 1;
  std::int32_t max_cp = 64;
  bool unusual_blocks = false;  // B from {1, 2, 3, 5, 7, 100, 1000} instead of {16, 64, 128}
};

std::vector<std::int64_t> random_documents(Rng& rng, std::int64_t n, std::int64_t max_doc) {
  std::vector<std::int64_t> docs;
  const int shape = static_cast<int>(rng.uniform(0, 5));
  if (shape == 0) return docs;  // implicit single document
  if (shape == 1) return {n};   // explicit single document
  std::int64_t left = n;
  while (left > 0) {
    std::int64_t length = 1;
    switch (shape) {
      case 2:  // short documents, many shorter than a tile or than 2P
        length = rng.uniform(1, 64);
        break;
      case 3:  // heavy-tailed mix, as in long-context training data
        length = rng.log_uniform(1, max_doc);
        break;
      case 4:  // a few long documents among short ones
        length = rng.chance(20) ? rng.log_uniform(1, max_doc) : rng.uniform(1, 16);
        break;
      default:  // every length, uniformly
        length = rng.uniform(1, std::min(max_doc, n));
        break;
    }
    length = std::min(length, left);
    docs.push_back(length);
    left -= length;
  }
  return docs;
}

BlockSparseMask random_block_sparse(Rng& rng, std::int64_t n, std::int64_t block) {
  const std::int64_t blocks = ceil_div(n, block);
  // Dense shapes list O(blocks^2) tiles: only for rows of a few hundred blocks.
  const bool long_row = blocks > 256;
  BlockSparseMask mask;
  mask.offsets.push_back(0);
  const int shape =
      long_row ? static_cast<int>(rng.uniform(0, 1)) : static_cast<int>(rng.uniform(0, 4));
  const int density = static_cast<int>(rng.uniform(5, 95));
  std::vector<std::int64_t> row;
  for (std::int64_t qb = 0; qb < blocks; ++qb) {
    row.clear();
    switch (shape) {
      case 0:  // a few random blocks anywhere in the row
        for (std::int64_t e = rng.uniform(0, 4); e > 0; --e)
          row.push_back(rng.uniform(0, blocks - 1));
        break;
      case 1:  // a local band below the diagonal
        for (std::int64_t kb = std::max<std::int64_t>(0, qb - 3); kb <= qb; ++kb) {
          if (kb == qb || rng.chance(density)) row.push_back(kb);
        }
        break;
      case 2:  // block-causal with random holes
        for (std::int64_t kb = 0; kb <= qb; ++kb) {
          if (rng.chance(density)) row.push_back(kb);
        }
        break;
      case 3:  // every block: the full mask, cut at document boundaries
        for (std::int64_t kb = 0; kb < blocks; ++kb) row.push_back(kb);
        break;
      default:  // dense random
        for (std::int64_t kb = 0; kb < blocks; ++kb) {
          if (rng.chance(density)) row.push_back(kb);
        }
        break;
    }
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    mask.kv_blocks.insert(mask.kv_blocks.end(), row.begin(), row.end());
    mask.offsets.push_back(static_cast<std::int64_t>(mask.kv_blocks.size()));
  }
  return mask;
}

CpWorkload random_workload(Rng& rng, const Limits& limits) {
  CpWorkload w;
  w.cp_size = rng.chance(40) ? rng.pick<std::int32_t>({1, 2, 3, 4, 5, 7, 8, 16, 32, 48, 64})
                             : static_cast<std::int32_t>(rng.uniform(1, 64));
  w.cp_size = std::clamp(w.cp_size, limits.min_cp, limits.max_cp);
  w.block_size = limits.unusual_blocks ? rng.pick<std::int64_t>({1, 2, 3, 5, 7, 100, 1000})
                                       : rng.pick<std::int64_t>({16, 64, 128});
  std::int64_t n = rng.log_uniform(limits.min_tokens, limits.max_tokens);
  // A third of the rows are shaped so that head_tail, and where it fits ptrr,
  // can serve them; the rest mostly cannot.
  if (rng.chance(33)) {
    // With an even B a multiple of P*B is also one of 2P.
    const std::int64_t unit_ptrr = w.cp_size * w.block_size;
    const std::int64_t unit_head_tail = 2 * static_cast<std::int64_t>(w.cp_size);
    const std::int64_t unit =
        unit_ptrr <= limits.max_tokens && rng.chance(70) ? unit_ptrr : unit_head_tail;
    if (unit <= limits.max_tokens) n = std::max(unit, n / unit * unit);
  }
  w.tokens = n;
  w.doc_lengths = random_documents(rng, n, limits.max_doc);
  switch (rng.uniform(0, 4)) {
    case 0:
      w.mask = MaskSpec::causal();
      break;
    case 1:
      w.mask = MaskSpec::full();
      break;
    case 2:
      w.mask = MaskSpec::sliding(rng.chance(20) ? 1 : rng.log_uniform(1, n));
      break;
    case 3:
      w.mask = MaskSpec::prefix(rng.chance(20) ? 0 : rng.uniform(0, n));
      break;
    default:
      w.mask.kind = MaskKind::kBlockSparse;
      w.mask.block_sparse = random_block_sparse(rng, n, w.block_size);
      break;
  }
  return w;
}

std::string describe(const CpWorkload& w) {
  std::ostringstream out;
  out << "N=" << w.tokens << " P=" << w.cp_size << " B=" << w.block_size << " mask=";
  switch (w.mask.kind) {
    case MaskKind::kCausal:
      out << "causal";
      break;
    case MaskKind::kFull:
      out << "full";
      break;
    case MaskKind::kSliding:
      out << "sliding:" << w.mask.param;
      break;
    case MaskKind::kPrefix:
      out << "prefix:" << w.mask.param;
      break;
    case MaskKind::kBlockSparse:
      out << "block-sparse(" << w.mask.block_sparse.kv_blocks.size() << " tiles)";
      break;
  }
  out << " docs=" << w.doc_lengths.size() << "[";
  for (std::size_t i = 0; i < std::min<std::size_t>(w.doc_lengths.size(), 8); ++i) {
    out << (i ? "," : "") << w.doc_lengths[i];
  }
  out << (w.doc_lengths.size() > 8 ? ",...]" : "]");
  return out.str();
}

std::string describe(const std::vector<RankWork>& work) {
  std::ostringstream out;
  for (std::size_t r = 0; r < work.size(); ++r) {
    out << (r ? " " : "") << "r" << r << "{" << work[r].tokens << "," << work[r].pairs << ","
        << work[r].tiles << "}";
  }
  return out.str();
}

std::vector<std::int64_t> documents(const CpWorkload& w) {
  return w.doc_lengths.empty() ? std::vector<std::int64_t>{w.tokens} : w.doc_lengths;
}

enum class Recount { kBruteForce, kIntervals };

std::vector<RankWork> recount(Recount how, const CpWorkload& w, const ShardPlan& plan) {
  return how == Recount::kBruteForce ? brute_work(w, plan) : interval_work(w, plan);
}

::testing::AssertionResult same_work(const std::vector<RankWork>& got,
                                     const std::vector<RankWork>& want) {
  bool equal = got.size() == want.size();
  for (std::size_t r = 0; equal && r < got.size(); ++r) {
    equal = got[r].tokens == want[r].tokens && got[r].pairs == want[r].pairs &&
            got[r].tiles == want[r].tiles;
  }
  if (equal) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "work {tokens,pairs,tiles}\n  got:     " << describe(got)
                                       << "\n  recount: " << describe(want);
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
    const auto brute = brute_work(w, plan);
    ASSERT_TRUE(same_work(interval_work(w, plan), brute)) << describe(w);
    // The core's work model must agree on such plans too, not only on the
    // shapes the strategies happen to produce.
    ASSERT_TRUE(same_work(compute_work(w, plan), brute)) << "compute_work, " << describe(w);
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
