// Tests of fulcrum::core: workload checks, mask parsing, the work models and
// plan validation. The work models are checked against brute_force.h, which
// recounts pair by pair and shares no code with the core.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "brute_force.h"
#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/synthetic.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"

namespace fulcrum {
namespace {

CpWorkload row(std::int64_t n, std::vector<std::int64_t> docs, MaskSpec mask, std::int64_t b,
               std::int32_t p) {
  CpWorkload w;
  w.tokens = n;
  w.doc_lengths = std::move(docs);
  w.mask = std::move(mask);
  w.block_size = b;
  w.cp_size = p;
  return w;
}

ShardPlan identity_plan(std::int64_t n) {
  ShardPlan plan;
  plan.cp_size = 1;
  plan.shard_len = n;
  plan.positions.resize(static_cast<std::size_t>(n));
  std::iota(plan.positions.begin(), plan.positions.end(), 0);
  return plan;
}

// A random plan: shuffle positions with some padding mixed in.
ShardPlan random_plan(std::int64_t n, std::int32_t p, std::mt19937_64& rng) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  // Keep some sorted runs so that run detection is exercised too.
  std::sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2));
  ShardPlan plan;
  plan.cp_size = p;
  plan.shard_len = ceil_div(n, p) + static_cast<std::int64_t>(rng() % 3);
  plan.positions.assign(static_cast<std::size_t>(plan.shard_len * p), kPadPosition);
  std::vector<std::size_t> slots(plan.positions.size());
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::sort(slots.begin(), slots.begin() + static_cast<std::ptrdiff_t>(n));
  for (std::int64_t i = 0; i < n; ++i) plan.positions[slots[i]] = all[i];
  plan.padding = static_cast<std::int64_t>(plan.positions.size()) - n;
  return plan;
}

MaskSpec random_mask(std::mt19937_64& rng, std::int64_t n, std::int64_t b) {
  switch (rng() % 5) {
    case 0:
      return MaskSpec::causal();
    case 1:
      return MaskSpec::full();
    case 2:
      return MaskSpec::sliding(1 + static_cast<std::int64_t>(rng() % 40));
    case 3:
      return MaskSpec::prefix(static_cast<std::int64_t>(rng() % 40));
    default: {
      MaskSpec m;
      m.kind = MaskKind::kBlockSparse;
      const std::int64_t nb = ceil_div(n, b);
      m.block_sparse.offsets.push_back(0);
      for (std::int64_t q = 0; q < nb; ++q) {
        for (std::int64_t k = 0; k < nb; ++k) {
          if (rng() % 3 == 0) m.block_sparse.kv_blocks.push_back(k);
        }
        m.block_sparse.offsets.push_back(
            static_cast<std::int64_t>(m.block_sparse.kv_blocks.size()));
      }
      return m;
    }
  }
}

std::vector<std::int64_t> random_docs(std::int64_t n, std::mt19937_64& rng) {
  std::vector<std::int64_t> docs;
  std::int64_t left = n;
  while (left > 0) {
    const std::int64_t len =
        std::min<std::int64_t>(left, 1 + static_cast<std::int64_t>(rng() % 60));
    docs.push_back(len);
    left -= len;
  }
  return docs;
}

TEST(Workload, RejectsBadFieldsWithTheValue) {
  auto w = row(10, {4, 5}, MaskSpec::causal(), 4, 2);
  Status s = validate_workload(w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sum to 9"), std::string::npos) << s.message();

  w = row(0, {}, MaskSpec::causal(), 4, 2);
  EXPECT_NE(validate_workload(w).message().find("0 tokens"), std::string::npos);
  w = row(8, {}, MaskSpec::causal(), 0, 2);
  EXPECT_NE(validate_workload(w).message().find("block_size is 0"), std::string::npos);
  w = row(8, {}, MaskSpec::causal(), 4, 0);
  EXPECT_NE(validate_workload(w).message().find("cp_size is 0"), std::string::npos);
  w = row(8, {8, 0}, MaskSpec::causal(), 4, 2);
  EXPECT_NE(validate_workload(w).message().find("document 1 has length 0"), std::string::npos);
  w = row(8, {}, MaskSpec::sliding(0), 4, 2);
  EXPECT_FALSE(validate_workload(w).is_ok());
  w = row(8, {}, MaskSpec::prefix(-1), 4, 2);
  EXPECT_FALSE(validate_workload(w).is_ok());
  w = row(8, {3, 5}, MaskSpec::prefix(2), 4, 3);
  EXPECT_TRUE(validate_workload(w).is_ok());
}

// The documented bounds (workload.h): N and B up to 2^31, P up to 2^20. Past
// them a 2^33-token causal row overflowed the work model's pair count and
// planners asked for more memory than exists; now the caller hears why.
TEST(Workload, RefusesRowsAndGroupsBeyondTheBounds) {
  EXPECT_EQ(kMaxRowTokens, std::int64_t{1} << 31);
  EXPECT_EQ(kMaxBlockSize, std::int64_t{1} << 31);
  EXPECT_EQ(kMaxGroupSize, std::int64_t{1} << 20);

  // Validation only: nothing of the row's size is allocated.
  auto w = row(std::int64_t{1} << 33, {}, MaskSpec::causal(), 128, 8);
  Status s = validate_workload(w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "row has 8589934592 tokens, more than the 2147483648 (2^31) fulcrum plans; split it "
            "into rows of at most 2^31 tokens");
  w.doc_lengths = {std::int64_t{1} << 32, std::int64_t{1} << 32};  // consistent documents too
  EXPECT_EQ(validate_workload(w).code(), StatusCode::kInvalidArgument);
  w = row(kMaxRowTokens + 1, {}, MaskSpec::full(), 128, 8);
  EXPECT_NE(validate_workload(w).message().find("2147483649 tokens"), std::string::npos);
  w = row(kMaxRowTokens, {}, MaskSpec::causal(), 128, 8);
  EXPECT_TRUE(validate_workload(w).is_ok()) << validate_workload(w).message();

  w = row(1024, {}, MaskSpec::causal(), 128, static_cast<std::int32_t>(kMaxGroupSize + 1));
  s = validate_workload(w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cp_size is 1048577, more than the 1048576 (2^20)"), std::string::npos)
      << s.message();
  w.cp_size = std::numeric_limits<std::int32_t>::max();
  EXPECT_EQ(validate_workload(w).code(), StatusCode::kInvalidArgument);
  w.cp_size = static_cast<std::int32_t>(kMaxGroupSize);
  EXPECT_TRUE(validate_workload(w).is_ok());

  w = row(1024, {}, MaskSpec::causal(), kMaxBlockSize + 1, 2);
  s = validate_workload(w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block_size is 2147483649, more than 2147483648 (2^31)"),
            std::string::npos)
      << s.message();
  w.block_size = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(validate_workload(w).code(), StatusCode::kInvalidArgument);
  w.block_size = kMaxBlockSize;
  EXPECT_TRUE(validate_workload(w).is_ok());
}

// ceil_div never forms a + b - 1: the fuzzers found that overflowing for a
// block size near int64's end, which validate_workload now refuses before
// any planner runs; the helper itself stays exact over the whole range.
TEST(CeilDiv, ExactToTheEndOfInt64) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(ceil_div(1, kMax), 1);
  EXPECT_EQ(ceil_div(kMax, kMax), 1);
  EXPECT_EQ(ceil_div(kMax - 1, kMax), 1);
  EXPECT_EQ(ceil_div(kMax, 1), kMax);
  EXPECT_EQ(ceil_div(kMax, 2), kMax / 2 + 1);
  EXPECT_EQ(ceil_div(0, kMax), 0);
  for (std::int64_t a = 0; a < 50; ++a) {
    for (std::int64_t b = 1; b < 12; ++b) EXPECT_EQ(ceil_div(a, b), (a + b - 1) / b);
  }
}

TEST(Workload, RejectsMalformedBlockSparse) {
  auto w = row(8, {}, MaskSpec::causal(), 4, 2);
  w.mask.kind = MaskKind::kBlockSparse;
  w.mask.block_sparse.offsets = {0, 1};  // two query blocks need three offsets
  w.mask.block_sparse.kv_blocks = {0};
  EXPECT_FALSE(validate_workload(w).is_ok());
  w.mask.block_sparse.offsets = {0, 2, 2};
  w.mask.block_sparse.kv_blocks = {1, 0};  // not increasing
  EXPECT_NE(validate_workload(w).message().find("strictly increasing"), std::string::npos);
  w.mask.block_sparse.kv_blocks = {0, 2};  // block 2 does not exist
  EXPECT_NE(validate_workload(w).message().find("kv block 2"), std::string::npos);
  w.mask.block_sparse.kv_blocks = {0, 1};
  EXPECT_TRUE(validate_workload(w).is_ok());
}

TEST(Mask, ParsesEveryKindAndRejectsTheRest) {
  EXPECT_EQ(parse_mask("causal")->kind, MaskKind::kCausal);
  EXPECT_EQ(parse_mask("full")->kind, MaskKind::kFull);
  EXPECT_EQ(parse_mask("sliding:4096")->param, 4096);
  EXPECT_EQ(parse_mask("prefix:0")->kind, MaskKind::kPrefix);
  for (const char* bad : {"", "causal2", "sliding", "sliding:", "sliding:0", "sliding:x",
                          "prefix:-3", "prefix:1.5", "window:4"}) {
    auto m = parse_mask(bad);
    EXPECT_FALSE(m.is_ok()) << bad;
  }
  EXPECT_EQ(mask_to_string(*parse_mask("sliding:7")), "sliding:7");
}

TEST(Mask, QuotesWhatItRefusesOnOneLine) {
  auto m = parse_mask("cau\nsal");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(),
            "unknown mask 'cau\\nsal'; use causal, full, sliding:W or prefix:L");
  m = parse_mask("sliding:1\r\n");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(), "mask window '1\\r\\n' is not an integer");
}

TEST(QuoteText, EscapesControlCharactersAndCutsLongText) {
  EXPECT_EQ(quote_text("balanced"), "'balanced'");
  EXPECT_EQ(quote_text(""), "''");
  EXPECT_EQ(quote_text("a\nb\rc\td"), "'a\\nb\\rc\\td'");
  EXPECT_EQ(quote_text(std::string("x\0y\x1b\x7f", 5)), "'x\\x00y\\x1b\\x7f'");
  EXPECT_EQ(quote_text("caf\xc3\xa9"), "'caf\xc3\xa9'");  // UTF-8 passes through
  EXPECT_EQ(quote_text("abcdef", 3), "'abc...'");
  EXPECT_EQ(quote_text(std::string(200, '\n')).find('\n'), std::string::npos);
}

TEST(WorkModel, MatchesBruteForceOnRandomPlans) {
  std::mt19937_64 rng(20261121);
  std::int64_t full = 0;
  std::int64_t partial = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 300);
    const std::int64_t b = std::int64_t{1} << (rng() % 6);
    const auto p = static_cast<std::int32_t>(1 + rng() % 7);
    auto w = row(n, rng() % 4 == 0 ? std::vector<std::int64_t>{} : random_docs(n, rng),
                 random_mask(rng, n, b), b, p);
    ASSERT_TRUE(validate_workload(w).is_ok()) << validate_workload(w).message();
    const ShardPlan plan = random_plan(n, p, rng);
    ASSERT_TRUE(validate_plan(w, plan).is_ok());
    std::vector<std::int64_t> fast_full;
    std::vector<std::int64_t> slow_full;
    const auto fast = compute_work(w, plan, &fast_full);
    const auto slow = cp::brute_work(w, plan, &slow_full);
    ASSERT_EQ(fast.size(), slow.size());
    for (std::size_t r = 0; r < fast.size(); ++r) {
      EXPECT_EQ(fast[r].tokens, slow[r].tokens) << "iter " << iter << " rank " << r;
      EXPECT_EQ(fast[r].pairs, slow[r].pairs) << "iter " << iter << " rank " << r;
      EXPECT_EQ(fast[r].tiles, slow[r].tiles) << "iter " << iter << " rank " << r;
      // Block-sparse masks count every tile partial; dense ones as the
      // pair-by-pair recount.
      const bool sparse = w.mask.kind == MaskKind::kBlockSparse;
      EXPECT_EQ(fast_full[r], sparse ? 0 : slow_full[r]) << "iter " << iter << " rank " << r;
      full += sparse ? 0 : slow_full[r];
      partial += sparse ? 0 : slow[r].tiles - slow_full[r];
    }
  }
  EXPECT_GT(full, 1000);
  EXPECT_GT(partial, 1000);
}

TEST(WorkModel, BlockCostsSumToTheUnshardedRow) {
  std::mt19937_64 rng(7);
  std::int64_t row_full = 0;
  for (int iter = 0; iter < 200; ++iter) {
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 500);
    const std::int64_t b = 1 + static_cast<std::int64_t>(rng() % 64);
    auto w = row(n, random_docs(n, rng), random_mask(rng, n, b), b, 1);
    std::vector<std::int64_t> brute_full;
    std::vector<std::int64_t> full;
    const auto whole = cp::brute_work(w, identity_plan(n), &brute_full);
    compute_work(w, identity_plan(n), &full);
    // In row order most of a document's tiles are full: the full-tile count
    // against the pair-by-pair recount where there are many.
    const bool sparse = w.mask.kind == MaskKind::kBlockSparse;
    EXPECT_EQ(full[0], sparse ? 0 : brute_full[0]) << "iter " << iter;
    row_full += sparse ? 0 : brute_full[0];
    const BlockCosts costs = block_costs(w);
    EXPECT_EQ(std::accumulate(costs.pairs.begin(), costs.pairs.end(), std::int64_t{0}),
              whole[0].pairs);
    EXPECT_EQ(std::accumulate(costs.tiles.begin(), costs.tiles.end(), std::int64_t{0}),
              whole[0].tiles);
    EXPECT_EQ(total_pairs(w), whole[0].pairs);
    EXPECT_EQ(unsharded_tiles(w), whole[0].tiles);
  }
  EXPECT_GT(row_full, 10000);
}

TEST(WorkModel, CausalClosedForms) {
  // One causal document of N tokens has N(N+1)/2 pairs; with B | N its
  // unsharded tiles are nb(nb+1)/2.
  auto w = row(1 << 20, {}, MaskSpec::causal(), 128, 8);
  const std::int64_t n = w.tokens;
  const std::int64_t nb = n / 128;
  EXPECT_EQ(total_pairs(w), n * (n + 1) / 2);
  EXPECT_EQ(unsharded_tiles(w), nb * (nb + 1) / 2);
  // Sliding window W: every query past the first W-1 sees W keys.
  w.mask = MaskSpec::sliding(4096);
  EXPECT_EQ(total_pairs(w), 4095 * 4096 / 2 + (n - 4095) * 4096);
}

TEST(WorkModel, SummaryOfContiguousCausalApproachesFifteenEighths) {
  const std::int32_t p = 8;
  auto w = row(8 * 4096, {}, MaskSpec::causal(), 128, p);
  ShardPlan plan = identity_plan(w.tokens);
  plan.cp_size = p;
  plan.shard_len = w.tokens / p;
  const WorkSummary s = summarize(w, compute_work(w, plan));
  // Rank 7 holds queries [7S, 8S): pairs sum 7S*S + S(S+1)/2 over N(N+1)/2 / 8.
  const double big_s = 4096.0, big_n = 8 * 4096.0;
  const double expect =
      (7 * big_s * big_s + big_s * (big_s + 1) / 2) / (big_n * (big_n + 1) / 2 / 8);
  EXPECT_NEAR(s.pairs_imbalance, expect, 1e-12);
  EXPECT_NEAR(s.pairs_imbalance, 15.0 / 8.0, 1e-3);
}

TEST(PlanCheck, NamesTheFirstViolation) {
  auto w = row(4, {}, MaskSpec::causal(), 2, 2);
  ShardPlan plan;
  plan.cp_size = 2;
  plan.shard_len = 2;
  plan.positions = {0, 1, 2, 2};
  EXPECT_NE(validate_plan(w, plan).message().find("repeats position 2"), std::string::npos);
  plan.positions = {0, 1, 2, 9};
  EXPECT_NE(validate_plan(w, plan).message().find("position 9"), std::string::npos);
  plan.positions = {0, 1, 2, -1};
  plan.padding = 1;
  EXPECT_NE(validate_plan(w, plan).message().find("never places position 3"), std::string::npos);
  plan.positions = {0, 1, 2};
  EXPECT_FALSE(validate_plan(w, plan).is_ok());
  plan.positions = {3, 1, 2, 0};
  plan.padding = 0;
  EXPECT_TRUE(validate_plan(w, plan).is_ok());
  plan.padding = 2;
  EXPECT_NE(validate_plan(w, plan).message().find("reports 2 padding"), std::string::npos);
}

TEST(PlanCheck, RestoreInvertsTheSharding) {
  std::mt19937_64 rng(3);
  for (int iter = 0; iter < 50; ++iter) {
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 200);
    const auto p = static_cast<std::int32_t>(1 + rng() % 9);
    const ShardPlan plan = random_plan(n, p, rng);
    const auto restore = restore_index(plan, n);
    for (std::int64_t pos = 0; pos < n; ++pos) EXPECT_EQ(plan.positions[restore[pos]], pos);
  }
}

TEST(Synthetic, DeterministicBoundedAndHeavyTailed) {
  const auto a = synthetic_document_lengths(20000, 5);
  EXPECT_EQ(a, synthetic_document_lengths(20000, 5));
  EXPECT_NE(a, synthetic_document_lengths(20000, 6));
  double sum = 0, sq = 0, top = 0;
  std::vector<double> squares;
  for (std::int64_t len : a) {
    ASSERT_GE(len, 1);
    ASSERT_LE(len, 131072);
    sum += static_cast<double>(len);
    squares.push_back(static_cast<double>(len) * static_cast<double>(len));
    sq += squares.back();
  }
  std::sort(squares.rbegin(), squares.rend());
  for (std::size_t i = 0; i < squares.size() / 20; ++i) top += squares[i];
  EXPECT_GT(sum / static_cast<double>(a.size()), 1500.0);
  EXPECT_GT(top / sq, 0.5);  // the longest 5% carry most of the attention work
  const auto packed = synthetic_packed_row(131072, 1);
  EXPECT_EQ(std::accumulate(packed.begin(), packed.end(), std::int64_t{0}), 131072);
  EXPECT_GT(packed.size(), 3U);
}

}  // namespace
}  // namespace fulcrum
