// Rule 5 under a ceiling (plan_slot_compact, schedule_hybrid_plan.cpp)
// against a recount of it as it chose before the exchange floor: every
// candidate plan of the slot priced in full (evaluate_slot_runs), skipped
// where its floor of compute and peers' latency alone reaches the end to
// beat, per_document_weighted tried only after per_document was priced and
// while the best end leaves it room. The exchange floor skips more plans;
// the answer must stay the same, bit for bit, rule for rule. And where
// plan_slot_compact says no lower ceiling gives a length (none_below, which
// hybrid's slot table trusts to answer later ceilings unplanned), the
// recount gives none for lower ceilings either. A one-rank slot, priced
// from its pieces, answers as its contiguous plan priced from runs did.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/slot_runs.h"
#include "schedule_random_inputs.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/schedule_hybrid_draft.h"

namespace fulcrum {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  ScheduleRequest request;
  ScheduleSlot slot;
};

// Slots over 2 to 48 members on nodes of 2 to 8 ranks (most span several
// nodes, where weighting applies), a few rows of documents, every dense
// mask, both bundled profiles with random link speeds and overlap.
// `size`: the slot's members (0: random).
Case random_case(SplitMix64& rng, std::int32_t size = 0) {
  Case c;
  ScheduleRequest& r = c.request;
  const auto g = size > 0 ? size : static_cast<std::int32_t>(rng.uniform(2, 48));
  r.world_size = g + static_cast<std::int32_t>(rng.uniform(0, 16));
  r.block_size = rng.uniform(0, 2) == 0 ? 128 : rng.uniform(8, 256);
  r.profile = *builtin_cost_profile(rng.uniform(0, 1) == 0 ? "h100_7b" : "cpu_gloo");
  r.profile.ranks_per_node = static_cast<std::int32_t>(rng.uniform(2, 8));
  r.profile.inter_node_bytes_per_second *= static_cast<double>(rng.uniform(1, 20)) / 10;
  r.profile.exchange_overlap = static_cast<double>(rng.uniform(0, 4)) / 4;
  const std::int64_t docs = rng.uniform(1, rng.uniform(0, 1) == 0 ? 4 : 40);
  std::int64_t n = 0;
  for (std::int64_t d = 0; d < docs; ++d) {
    const std::int64_t len = rng.uniform(1, 12000);
    r.doc_lengths.push_back(len);
    c.slot.pieces.push_back({d, 0, len});
    n += len;
  }
  r.mask = schedule_tests::random_dense_mask(rng, r.block_size);
  r.max_tokens_per_rank = rng.uniform(0, 1) == 0 ? (n + g - 1) / g + rng.uniform(0, 64) : n;
  // Members scattered over the world (random ranks, ascending).
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(r.world_size));
  for (std::size_t k = 0; k < ranks.size(); ++k) ranks[k] = static_cast<std::int32_t>(k);
  for (std::size_t k = ranks.size(); k > 1; --k) {
    std::swap(ranks[k - 1], ranks[static_cast<std::size_t>(rng.uniform(0, k - 1))]);
  }
  c.slot.ranks.assign(ranks.begin(), ranks.begin() + g);
  std::sort(c.slot.ranks.begin(), c.slot.ranks.end());
  return c;
}

struct Choice {
  double length = kInf;  // kNoEnd: none below the ceiling
  std::string rule;
};

// Rule 5 as chosen before the exchange floor, recounted.
Choice recount(const ScheduleRequest& request, const ScheduleSlot& slot, double ceiling) {
  const CpWorkload w = slot_workload(request, slot);
  const std::int64_t budget = request.max_tokens_per_rank;
  const auto peers_floor = [&](const RunShardPlan& runs) {
    return slot_end_runs_below(request, slot, runs, 0.0, false).end;
  };
  std::optional<RunShardPlan> first = hybrid::slot_rule_runs("balanced", w);
  std::string rule = "balanced";
  if (first->shard_len > budget) {
    first = hybrid::slot_rule_runs("per_document", w);
    rule = "per_document";
  }
  std::optional<SlotCost> per_document;
  double best = kInf;
  if (peers_floor(*first) < ceiling) {
    const SlotCost cost = evaluate_slot_runs(request, slot, *first);
    best = cost.end_seconds;
    if (rule == "per_document") per_document = cost;
  }
  const auto consider = [&](const std::string& name, const std::optional<RunShardPlan>& runs) {
    if (!runs || runs->shard_len > budget) return;
    if (peers_floor(*runs) >= std::min(best, ceiling)) return;
    const SlotCost cost = evaluate_slot_runs(request, slot, *runs);
    if (name == "per_document") per_document = cost;
    if (cost.end_seconds < best) {
      best = cost.end_seconds;
      rule = name;
    }
  };
  if (rule != "per_document") consider("per_document", hybrid::slot_rule_runs("per_document", w));
  if (w.tokens <= (std::int64_t{1} << 18)) {
    consider("head_tail", hybrid::slot_rule_runs("head_tail", w));
    consider("per_document_padded", hybrid::slot_rule_runs("per_document_padded", w));
  }
  const std::int32_t node = request.profile.ranks_per_node;
  const bool nodes = slot.ranks.front() / node != slot.ranks.back() / node;
  if (per_document && nodes) {
    double total = 0;
    for (const SlotMemberCost& m : per_document->members) {
      total += m.compute_seconds + m.comm_seconds;
    }
    const double mean = total / static_cast<double>(per_document->members.size());
    const double start = per_document->start_seconds;
    if (mean > 0 && !(best < kInf && start + mean >= best - 0.005 * (best - start))) {
      std::vector<double> weight;
      for (const SlotMemberCost& m : per_document->members) {
        weight.push_back(std::max(mean / 2, mean - m.comm_seconds));
      }
      consider("per_document_weighted", cp::detail::per_document_weighted_runs(w, weight));
    }
  }
  consider("contiguous", cp::detail::contiguous_runs(w.tokens, w.cp_size));
  if (!(best < ceiling)) return {kInf, ""};
  return {best, rule};
}

TEST(HybridSlotCeiling, TheExchangeFloorChangesNoChoiceAndNoneBelowHolds) {
  SplitMix64 rng(20261126);
  int capped = 0;
  int none_below = 0;
  int weighted = 0;
  for (int i = 0; i < 400; ++i) {
    const Case c = random_case(rng);
    const Choice free = recount(c.request, c.slot, kInf);
    ASSERT_LT(free.length, kInf);
    weighted += free.rule == "per_document_weighted" ? 1 : 0;
    for (const double scale : {0.0, 0.9, 0.999, 1.0, 1.001, 1.1, 2.0}) {
      const double ceiling = scale == 0.0 ? kInf : free.length * scale;
      SCOPED_TRACE("case " + std::to_string(i) + ", ceiling x " + std::to_string(scale));
      ScheduleSlot slot = c.slot;
      bool none = false;
      const Result<double> got = hybrid::plan_slot_compact(c.request, slot, ceiling, &none);
      ASSERT_TRUE(got.is_ok()) << got.status().message();
      const Choice want = recount(c.request, c.slot, ceiling);
      EXPECT_EQ(*got, want.length);
      if (want.length < kInf) {
        EXPECT_EQ(slot.plan.strategy_used, want.rule);
      }
      capped += want.length == kInf ? 1 : 0;
      if (!none) continue;
      EXPECT_EQ(*got, hybrid::kNoEnd);
      ++none_below;
      for (const double lower : {ceiling * 0.999, ceiling * 0.5, free.length * 0.9}) {
        if (lower <= ceiling) {
          EXPECT_EQ(recount(c.request, c.slot, lower).length, kInf);
        }
      }
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(capped, 500);      // ceilings at or below the length: none below them
  EXPECT_GT(none_below, 500);  // and most of those are certain for lower ceilings
  EXPECT_GT(weighted, 5);      // weighting chosen on some slots
}

// Rule 5's lean choice (a draft planned past the budget, docs/HYBRID.md
// rule 7) against its recount: balanced priced in full (contiguous where
// balanced needs more than T per member), then contiguous, the sooner kept
// (ties: balanced); under every ceiling the same length or kNoEnd, the
// rule recorded, its length what the expanded plan prices at, never
// sooner than rule 5's full choice, and none_below only where no lower
// ceiling gives a length either.
TEST(HybridSlotCeiling, LeanChoiceIsTheSoonerOfBalancedAndContiguous) {
  SplitMix64 rng(20261129);
  int contiguous = 0;
  int capped = 0;
  for (int i = 0; i < 300; ++i) {
    const Case c = random_case(rng);
    const ScheduleRequest& r = c.request;
    const CpWorkload w = slot_workload(r, c.slot);
    const RunShardPlan balanced = *hybrid::slot_rule_runs("balanced", w);
    const RunShardPlan contig = cp::detail::contiguous_runs(w.tokens, w.cp_size);
    Choice free{evaluate_slot_runs(r, c.slot, contig).end_seconds, "contiguous"};
    if (balanced.shard_len <= r.max_tokens_per_rank) {
      const double b = evaluate_slot_runs(r, c.slot, balanced).end_seconds;
      if (!(free.length < b)) free = {b, "balanced"};
    }
    contiguous += free.rule == "contiguous" ? 1 : 0;
    const Choice full = recount(r, c.slot, kInf);
    EXPECT_GE(free.length, full.length) << "case " << i;
    for (const double scale : {0.0, 0.9, 1.0, 1.1}) {
      const double ceiling = scale == 0.0 ? kInf : free.length * scale;
      SCOPED_TRACE("case " + std::to_string(i) + ", ceiling x " + std::to_string(scale));
      ScheduleSlot slot = c.slot;
      bool none = false;
      const Result<double> got =
          hybrid::plan_slot_compact(r, slot, ceiling, &none, nullptr, /*lean=*/true);
      ASSERT_TRUE(got.is_ok()) << got.status().message();
      if (!(free.length < ceiling)) {
        EXPECT_EQ(*got, hybrid::kNoEnd);
        ++capped;
        continue;
      }
      EXPECT_EQ(*got, free.length);
      EXPECT_EQ(slot.plan.strategy_used, free.rule);
      EXPECT_FALSE(none);
      ASSERT_TRUE(hybrid::expand_slot_plan(r, slot));
      EXPECT_EQ(evaluate_slot(r, slot).end_seconds, free.length);
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(contiguous, 10);  // contiguous chosen on some slots
  EXPECT_GT(capped, 300);     // ceilings at or below the length
}

// A one-rank slot (priced from its pieces, one_rank_slot_end) against the
// generic path it replaced: its one plan, contiguous, priced from runs
// (evaluate_slot_runs). Under ceilings above, at and below its length: the
// same length or kNoEnd, none_below exactly when kNoEnd, and the plan
// recorded over whatever the slot held before (another rule, weights).
TEST(HybridSlotCeiling, OneRankSlotAsTheGenericPathUnderEveryCeiling) {
  SplitMix64 rng(20261128);
  int capped = 0;
  for (int i = 0; i < 600; ++i) {
    Case c = random_case(rng, 1);
    const CpWorkload w = slot_workload(c.request, c.slot);
    const double want =
        evaluate_slot_runs(c.request, c.slot, cp::detail::contiguous_runs(w.tokens, 1)).end_seconds;
    c.slot.plan.strategy_used = "per_document_weighted";
    c.slot.plan.fallback_reason = "a plan chosen before";
    c.slot.member_weights = {1.0};
    for (const double ceiling : {kInf, want * 1.1, want, want * 0.9}) {
      SCOPED_TRACE("case " + std::to_string(i) + ", ceiling " + std::to_string(ceiling));
      ScheduleSlot slot = c.slot;
      bool none = false;
      const Result<double> got = hybrid::plan_slot_compact(c.request, slot, ceiling, &none);
      ASSERT_TRUE(got.is_ok()) << got.status().message();
      EXPECT_EQ(*got, want < ceiling ? want : hybrid::kNoEnd);
      EXPECT_EQ(none, !(want < ceiling));
      EXPECT_EQ(slot.plan.strategy_used, "contiguous");
      EXPECT_EQ(slot.plan.cp_size, 1);
      EXPECT_EQ(slot.plan.shard_len, w.tokens);
      EXPECT_EQ(slot.plan.fallback_reason, "");
      EXPECT_TRUE(slot.plan.positions.empty());
      EXPECT_TRUE(slot.member_weights.empty());
      capped += none ? 1 : 0;
    }
    if (HasFailure()) return;
  }
  EXPECT_EQ(capped, 1200);  // at and below its length, every case
}

// One answer's table of counted plans (RowPlans) shared by every try of a
// row: the row over other rank sets (other nodes), under other ceilings,
// interleaved with other rows, gives what planning it afresh gives, bit for
// bit (length, rule, size, shard length, reason, none_below).
TEST(HybridSlotCeiling, RowPlansSharedAcrossTriesGiveTheFreshAnswer) {
  SplitMix64 rng(20261127);
  hybrid::RowPlans rows;
  std::vector<Case> cases;
  // Rows of three sizes, so that rows of one size interleave.
  for (int i = 0; i < 12; ++i) cases.push_back(random_case(rng, 4 + 8 * (i % 3)));
  int shared = 0;
  for (int i = 0; i < 600; ++i) {
    Case c = cases[static_cast<std::size_t>(rng.uniform(0, 11))];
    // Another rank set of the same size, on other nodes.
    std::vector<std::int32_t> ranks(static_cast<std::size_t>(c.request.world_size));
    for (std::size_t k = 0; k < ranks.size(); ++k) ranks[k] = static_cast<std::int32_t>(k);
    for (std::size_t k = ranks.size(); k > 1; --k) {
      std::swap(ranks[k - 1], ranks[static_cast<std::size_t>(rng.uniform(0, k - 1))]);
    }
    std::copy(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(c.slot.ranks.size()),
              c.slot.ranks.begin());
    std::sort(c.slot.ranks.begin(), c.slot.ranks.end());
    ScheduleSlot fresh = c.slot;
    bool fresh_none = false;
    const Result<double> want = hybrid::plan_slot_compact(c.request, fresh, kInf, &fresh_none);
    ASSERT_TRUE(want.is_ok());
    const double ceiling = rng.uniform(0, 2) == 0 ? kInf : *want * (0.9 + 0.05 * rng.uniform(0, 4));
    fresh = c.slot;
    const Result<double> capped = hybrid::plan_slot_compact(c.request, fresh, ceiling, &fresh_none);
    ScheduleSlot slot = c.slot;
    bool none = false;
    const Result<double> got = hybrid::plan_slot_compact(c.request, slot, ceiling, &none, &rows);
    SCOPED_TRACE("try " + std::to_string(i));
    ASSERT_TRUE(capped.is_ok() && got.is_ok());
    EXPECT_EQ(*got, *capped);
    EXPECT_EQ(none, fresh_none);
    EXPECT_EQ(slot.plan.strategy_used, fresh.plan.strategy_used);
    EXPECT_EQ(slot.plan.cp_size, fresh.plan.cp_size);
    EXPECT_EQ(slot.plan.shard_len, fresh.plan.shard_len);
    EXPECT_EQ(slot.plan.fallback_reason, fresh.plan.fallback_reason);
    shared += i >= 12 ? 1 : 0;
    if (HasFailure()) return;
  }
  EXPECT_GT(shared, 500);
}

}  // namespace
}  // namespace fulcrum
