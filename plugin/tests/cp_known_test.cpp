// Known answers for the registry and the anchor strategies: exact plans on
// small rows worked out by hand, and closed-form work figures on large ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "brute_force.h"
#include "cp_test_fixtures.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

using fixtures::pairs_of;
using fixtures::plan_or_die;

using Positions = std::vector<std::int64_t>;
constexpr std::int64_t X = kPadPosition;

CpWorkload causal_row(std::int64_t n, std::int32_t p, std::int64_t block = kDefaultBlockSize) {
  CpWorkload w;
  w.tokens = n;
  w.block_size = block;
  w.cp_size = p;
  return w;
}

CpWorkload packed_row(std::vector<std::int64_t> docs, std::int32_t p,
                      MaskSpec mask = MaskSpec::causal()) {
  CpWorkload w;
  for (std::int64_t length : docs) w.tokens += length;
  w.doc_lengths = std::move(docs);
  w.mask = std::move(mask);
  w.cp_size = p;
  return w;
}

TEST(CpRegistryTest, ListsTheStrategiesInTableOrder) {
  std::vector<std::string> names;
  for (const StrategyInfo& info : strategies()) {
    names.emplace_back(info.name);
    EXPECT_NE(info.plan, nullptr) << info.name;
    EXPECT_FALSE(info.summary.empty()) << info.name;
    EXPECT_EQ(info.summary.find('\n'), std::string_view::npos) << info.name;
    EXPECT_EQ(find_strategy(info.name), &info) << info.name;
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"contiguous", "head_tail", "striped", "per_document_padded",
                                      "per_document", "ptrr", "balanced", "auto"}));
  EXPECT_EQ(find_strategy("zigzag"), nullptr);
  EXPECT_EQ(find_strategy(""), nullptr);
}

TEST(CpRegistryTest, UnknownNameIsNotFoundAndListsTheKnownNames) {
  const Result<ShardPlan> plan = cp::plan("zigzag", causal_row(16, 2));
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
  EXPECT_NE(plan.status().message().find("zigzag"), std::string::npos);
  for (const StrategyInfo& info : strategies()) {
    EXPECT_NE(plan.status().message().find(info.name), std::string::npos) << info.name;
  }
}

TEST(CpRegistryTest, UnknownNameIsQuotedOnOneLine) {
  const Result<ShardPlan> plan = cp::plan("bal\nanced", causal_row(16, 2));
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(plan.status().message().find('\n'), std::string::npos);
  EXPECT_EQ(plan.status().message().rfind("unknown CP strategy 'bal\\nanced'; use one of: ", 0), 0u)
      << plan.status().message();
}

// Every strategy refuses a row beyond validate_workload's bounds with a
// Result, before allocating anything: one causal document of 2^33 tokens
// once overflowed the pair count, and longer rows threw std::bad_alloc.
TEST(CpRegistryTest, RowsBeyondTheBoundsAreRefusedByEveryStrategy) {
  CpWorkload w = causal_row(std::int64_t{1} << 33, 8, 128);
  for (const StrategyInfo& info : strategies()) {
    const Result<ShardPlan> plan = cp::plan(info.name, w);
    ASSERT_FALSE(plan.is_ok()) << info.name;
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << info.name;
    EXPECT_NE(plan.status().message().find("8589934592 tokens"), std::string::npos)
        << info.name << ": " << plan.status().message();
  }
  w = causal_row(1024, 8, std::int64_t{1} << 40);
  for (const StrategyInfo& info : strategies()) {
    EXPECT_EQ(cp::plan(info.name, w).status().code(), StatusCode::kInvalidArgument) << info.name;
  }
}

TEST(CpRegistryTest, PlanDispatchesByName) {
  const CpWorkload w = causal_row(64, 4, 16);
  for (const StrategyInfo& info : strategies()) {
    const Result<ShardPlan> by_name = cp::plan(info.name, w);
    const Result<ShardPlan> direct = info.plan(w);
    ASSERT_EQ(by_name.is_ok(), direct.is_ok()) << info.name;
    if (by_name.is_ok()) {
      EXPECT_EQ(by_name->positions, direct->positions) << info.name;
    }
  }
}

TEST(CpRegistryTest, InapplicableReasonsNameTheRule) {
  const CpWorkload odd = causal_row(131000, 8);
  EXPECT_EQ(inapplicable_reason("head_tail", odd), "N=131000 is not a multiple of 2*cp_size=16");
  EXPECT_EQ(inapplicable_reason("ptrr", odd),
            "N=131000 is not a multiple of cp_size*block_size=1024");
  for (std::string_view name : {"contiguous", "striped", "per_document_padded", "per_document",
                                "balanced", "auto", "no_such_strategy"}) {
    EXPECT_EQ(inapplicable_reason(name, odd), std::nullopt) << name;
  }
  // 131072 = 128 * 1024: both rules hold; 16 * 1000 suits head_tail only.
  EXPECT_EQ(inapplicable_reason("head_tail", causal_row(131072, 8)), std::nullopt);
  EXPECT_EQ(inapplicable_reason("ptrr", causal_row(131072, 8)), std::nullopt);
  EXPECT_EQ(inapplicable_reason("head_tail", causal_row(16000, 8)), std::nullopt);
  EXPECT_TRUE(inapplicable_reason("ptrr", causal_row(16000, 8)).has_value());

  const Result<ShardPlan> refused = plan_head_tail(odd);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("N=131000 is not a multiple of 2*cp_size=16"),
            std::string::npos)
      << refused.status().message();
}

TEST(CpKnownTest, HeadTailTakesTheHeadChunkThenTheTailChunk) {
  const ShardPlan plan = plan_or_die(plan_head_tail, causal_row(8, 2));
  EXPECT_EQ(plan.positions, (Positions{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(plan.shard_len, 4);
  EXPECT_EQ(plan.padding, 0);
  EXPECT_EQ(plan.strategy_used, "head_tail");
  // Causal pairs: 1+2+7+8 = 18 and 3+4+5+6 = 18.
  EXPECT_EQ(pairs_of(plan), (std::vector<std::int64_t>{18, 18}));
  // One rank: chunk 0 then chunk 1, the identity.
  EXPECT_EQ(plan_or_die(plan_head_tail, causal_row(6, 1)).positions, (Positions{0, 1, 2, 3, 4, 5}));
}

TEST(CpKnownTest, HeadTailTilesAreIdealWhenChunksAlignToBlocks) {
  // With C = K*B every local block lies inside one chunk, so local block l of
  // chunk c is global block c*K + l and touches c*K + l + 1 key blocks: rank r
  // pays K*K*(2P-1) + K*(K+1) = 2P*K*K + K tiles, exactly the unsharded
  // row's (2PK)(2PK+1)/2 tiles over P.
  for (const std::int32_t p : {1, 2, 8}) {
    for (const std::int64_t k : {1, 3, 64}) {
      constexpr std::int64_t b = 128;
      const CpWorkload w = causal_row(2 * p * k * b, p, b);
      const ShardPlan plan = plan_or_die(plan_head_tail, w);
      ASSERT_EQ(plan.work.size(), static_cast<std::size_t>(p));
      for (const RankWork& r : plan.work) EXPECT_EQ(r.tiles, 2 * p * k * k + k);
      EXPECT_EQ(summarize(w, plan.work).tiles_over_ideal, 1.0) << "P=" << p << " K=" << k;
    }
  }
}

TEST(CpKnownTest, HeadTailBalancesCausalPairsExactly) {
  for (const std::int32_t p : {1, 2, 3, 5, 8, 13, 64}) {
    for (const std::int64_t chunk : {1, 2, 7, 128, 1000}) {
      const ShardPlan plan = plan_or_die(plan_head_tail, causal_row(2 * p * chunk, p));
      ASSERT_EQ(plan.work.size(), static_cast<std::size_t>(p));
      // Chunks r and 2P-1-r hold (2P-1)*C*C + C*(C+1) pairs together, whatever r.
      for (const RankWork& w : plan.work) EXPECT_EQ(w.pairs, 2 * p * chunk * chunk + chunk);
      EXPECT_EQ(summarize(causal_row(2 * p * chunk, p), plan.work).pairs_imbalance, 1.0)
          << "P=" << p << " C=" << chunk;
    }
  }
}

TEST(CpKnownTest, ContiguousCausalImbalanceApproachesFifteenEighths) {
  constexpr std::int32_t p = 8;
  constexpr std::int64_t s = 4096;
  constexpr std::int64_t n = p * s;
  constexpr std::int64_t b = 128;
  const CpWorkload w = causal_row(n, p, b);
  const ShardPlan plan = plan_or_die(plan_contiguous, w);
  ASSERT_EQ(plan.work.size(), static_cast<std::size_t>(p));
  for (std::int64_t r = 0; r < p; ++r) {
    // Queries r*S .. r*S+S-1 see q+1 keys each.
    EXPECT_EQ(plan.work[r].pairs, s * (r * s) + s * (s + 1) / 2) << "rank " << r;
    // Local block l is global block g = r*S/B + l, which touches g+1 key blocks.
    const std::int64_t first = r * s / b;
    const std::int64_t count = s / b;
    EXPECT_EQ(plan.work[r].tiles, count * (first + 1) + count * (count - 1) / 2) << "rank " << r;
  }
  // max/mean = (S^2 (P-1) + S(S+1)/2) / (N(N+1) / 2P), which tends to (2P-1)/P.
  const double max_pairs = static_cast<double>(s * s * (p - 1) + s * (s + 1) / 2);
  const double mean_pairs = static_cast<double>(n * (n + 1) / 2) / p;
  const WorkSummary summary = summarize(w, plan.work);
  EXPECT_DOUBLE_EQ(summary.pairs_imbalance, max_pairs / mean_pairs);
  EXPECT_NEAR(summary.pairs_imbalance, 15.0 / 8.0, 0.001 * 15.0 / 8.0);
}

TEST(CpKnownTest, ContiguousPadsTheLastRanks) {
  const ShardPlan plan = plan_or_die(plan_contiguous, causal_row(10, 4));
  EXPECT_EQ(plan.positions, (Positions{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, X, X}));
  EXPECT_EQ(plan.padding, 2);
  // Fewer tokens than ranks: the trailing ranks hold only padding.
  const ShardPlan tiny = plan_or_die(plan_contiguous, causal_row(3, 5));
  EXPECT_EQ(tiny.positions, (Positions{0, 1, 2, X, X}));
  EXPECT_EQ(tiny.padding, 2);
  EXPECT_EQ(tiny.work[4].tokens, 0);
  EXPECT_EQ(tiny.work[4].tiles, 0);
}

TEST(CpKnownTest, StripedDealsTokensRoundRobin) {
  const ShardPlan plan = plan_or_die(plan_striped, causal_row(10, 4));
  EXPECT_EQ(plan.positions, (Positions{0, 4, 8, 1, 5, 9, 2, 6, X, 3, 7, X}));
  EXPECT_EQ(plan.shard_len, 3);
  EXPECT_EQ(plan.padding, 2);
  EXPECT_EQ(plan.strategy_used, "striped");
  // Causal: rank r holds queries r, r+4, ... each seeing q+1 keys.
  EXPECT_EQ(pairs_of(plan), (std::vector<std::int64_t>{1 + 5 + 9, 2 + 6 + 10, 3 + 7, 4 + 8}));
}

TEST(CpKnownTest, PtrrDealsBlocksInSnakeOrder) {
  // Causal, B=2: block b has b+1 non-empty KV tiles. Sorted 3,2,1,0; dealt
  // rank 0, 1, then 1, 0.
  const ShardPlan two = plan_or_die(plan_ptrr, causal_row(8, 2, 2));
  EXPECT_EQ(two.positions, (Positions{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(two.work[0].tiles, 1 + 4);
  EXPECT_EQ(two.work[1].tiles, 2 + 3);
  EXPECT_EQ(pairs_of(two), (std::vector<std::int64_t>{1 + 2 + 7 + 8, 3 + 4 + 5 + 6}));

  // P=3: sorted 5..0, dealt 0,1,2 then 2,1,0.
  const ShardPlan three = plan_or_die(plan_ptrr, causal_row(12, 3, 2));
  EXPECT_EQ(three.positions, (Positions{0, 1, 10, 11, 2, 3, 8, 9, 4, 5, 6, 7}));

  // Full mask: all six blocks cost the same; ties keep block order, so the
  // deal is 0->r0, 1->r1, 2->r1, 3->r0, 4->r0, 5->r1.
  CpWorkload full = causal_row(12, 2, 2);
  full.mask = MaskSpec::full();
  const ShardPlan tied = plan_or_die(plan_ptrr, full);
  EXPECT_EQ(tied.positions, (Positions{0, 1, 6, 7, 8, 9, 2, 3, 4, 5, 10, 11}));

  const Result<ShardPlan> refused = plan_ptrr(causal_row(10, 2, 2));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("N=10 is not a multiple of cp_size*block_size=4"),
            std::string::npos)
      << refused.status().message();
}

TEST(CpKnownTest, PerDocumentPaddedLayout) {
  // P=2: documents padded to multiples of 4. Doc [0,3) -> chunks {0},{1},{2},{pad};
  // doc [3,8) -> chunks {3,4},{5,6},{7,pad},{pad,pad}. Rank 0 takes chunks 0
  // and 3 of each, rank 1 chunks 1 and 2.
  const ShardPlan plan = plan_or_die(plan_per_document_padded, packed_row({3, 5}, 2));
  EXPECT_EQ(plan.positions, (Positions{0, X, 3, 4, X, X, 1, 2, 5, 6, 7, X}));
  EXPECT_EQ(plan.padding, 4);
  EXPECT_EQ(plan.strategy_used, "per_document_padded");
}

TEST(CpKnownTest, PerDocumentPaddedPaddingFollowsTheFormula) {
  // Each document pads to the next multiple of 2P: (2P - L mod 2P) mod 2P.
  const std::vector<std::int64_t> docs = {1, 16, 17, 31, 1000, 2};
  const ShardPlan plan = plan_or_die(plan_per_document_padded, packed_row(docs, 8));
  EXPECT_EQ(plan.padding, 15 + 0 + 15 + 1 + 8 + 14);
  EXPECT_EQ(plan.shard_len * 8, 1067 + plan.padding);
}

TEST(CpKnownTest, PerDocumentSplitsWithoutPerDocumentPadding) {
  // L=5, 2P=4: one chunk of 2 (rank 0's head) and three of 1.
  EXPECT_EQ(plan_or_die(plan_per_document, packed_row({5}, 2)).positions,
            (Positions{0, 1, 4, 2, 3, X}));
  // The second document's extra token rotates to rank 1's head chunk.
  const ShardPlan two = plan_or_die(plan_per_document, packed_row({5, 5}, 2));
  EXPECT_EQ(two.positions, (Positions{0, 1, 4, 5, 9, 2, 3, 6, 7, 8}));
  EXPECT_EQ(two.padding, 0);

  // Thirteen one-token documents on eight ranks: the padded layout spends 15
  // pad tokens per document, the padding-free one fewer than P in all.
  const CpWorkload singles = packed_row(std::vector<std::int64_t>(13, 1), 8);
  EXPECT_EQ(plan_or_die(plan_per_document_padded, singles).padding, 13 * 15);
  const ShardPlan compact = plan_or_die(plan_per_document, singles);
  EXPECT_EQ(compact.shard_len, 2);
  EXPECT_EQ(compact.padding, 3);
}

TEST(CpKnownTest, PerDocumentStrategiesBalanceCausalPairsOfEvenDocuments) {
  // When every document splits into 2P equal chunks, head-tail per document
  // gives every rank the same pairs, and both variants coincide.
  const CpWorkload w = packed_row({8 * 3, 8 * 50, 8, 8 * 7}, 4);
  const ShardPlan padded = plan_or_die(plan_per_document_padded, w);
  const ShardPlan compact = plan_or_die(plan_per_document, w);
  EXPECT_EQ(padded.positions, compact.positions);
  EXPECT_EQ(compact.padding, 0);
  for (const RankWork& r : compact.work) EXPECT_EQ(r.pairs, compact.work[0].pairs);
  EXPECT_EQ(summarize(w, compact.work).pairs_imbalance, 1.0);
}

TEST(CpKnownTest, WorkMatchesBruteForceOnTheKnownPlans) {
  // The closed forms above and the brute-force recount agree on small rows.
  CpWorkload w = packed_row({3, 9, 1, 19}, 3, MaskSpec::sliding(4));
  w.block_size = 4;
  for (const StrategyInfo& info : strategies()) {
    const Result<ShardPlan> plan = info.plan(w);
    if (!plan.is_ok()) continue;
    const std::vector<RankWork> want = brute_work(w, *plan);
    ASSERT_EQ(plan->work.size(), want.size()) << info.name;
    for (std::size_t r = 0; r < want.size(); ++r) {
      EXPECT_EQ(plan->work[r].pairs, want[r].pairs) << info.name << " rank " << r;
      EXPECT_EQ(plan->work[r].tiles, want[r].tiles) << info.name << " rank " << r;
      EXPECT_EQ(plan->work[r].tokens, want[r].tokens) << info.name << " rank " << r;
    }
  }
}

// per_document_weighted (ABI 1.5): a rule found by name but not listed,
// planned from the row and member_weights: member r holds the r-th share
// of each document's head and the r-th from the end of its tail, sized by
// the cumulative weights (floor at each boundary); refused without weights,
// with weights no plan can take, and any other strategy refuses weights.
TEST(CpRegistryTest, PerDocumentWeightedPlansFromTheMemberWeights) {
  for (const StrategyInfo& info : strategies()) EXPECT_NE(info.name, "per_document_weighted");
  ASSERT_NE(find_strategy("per_document_weighted"), nullptr);
  CpWorkload w = packed_row({10, 7}, 2);
  w.member_weights = {3.0, 1.0};
  const Result<ShardPlan> got = plan("per_document_weighted", w);
  ASSERT_TRUE(got) << got.status().message();
  // Document 0: head [0, 5) cut at floor(5 x 3/4) = 3, tail [5, 10) cut at
  // 10 - 3 = 7; document 1 (at 10): head [10, 13) at 10 + 2, tail [13, 17)
  // at 17 - 3. Member 0: 0..2, 7..9, 10..11, 14..16; member 1 the rest.
  const Positions member0 = {0, 1, 2, 7, 8, 9, 10, 11, 14, 15, 16};
  const Positions member1 = {3, 4, 5, 6, 12, 13};
  ASSERT_EQ(got->shard_len, 11);
  EXPECT_EQ(Positions(got->rank_begin(0), got->rank_end(0)), member0);
  Positions second(got->rank_begin(1), got->rank_end(1));
  EXPECT_EQ(Positions(second.begin(), second.begin() + 6), member1);
  EXPECT_EQ(got->padding, 5);
  EXPECT_EQ(got->strategy_used, "per_document_weighted");

  const auto refused = [](const CpWorkload& x, std::string_view name, const std::string& says) {
    const Result<ShardPlan> r = plan(name, x);
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  };
  CpWorkload none = w;
  none.member_weights.clear();
  refused(none, "per_document_weighted", "needs member_weights");
  for (const auto& [weights, says] : std::vector<std::pair<std::vector<double>, std::string>>{
           {{1.0, std::numeric_limits<double>::quiet_NaN()}, "member weight 1 is nan"},
           {{std::numeric_limits<double>::infinity(), 1.0}, "member weight 0 is inf"},
           {{1.0, -0.5}, "member weight 1 is -0.5"},
           {{0.0, 0.0}, "sum to 0"},
           {{1.0, 1.0, 1.0}, "3 entries for 2 members"},
           {{1e308, 1e308}, "sum to inf"}}) {
    CpWorkload bad = w;
    bad.member_weights = weights;
    refused(bad, "per_document_weighted", says);
  }
  for (const StrategyInfo& info : strategies()) refused(w, info.name, "takes no member_weights");
}

}  // namespace
}  // namespace fulcrum::cp
