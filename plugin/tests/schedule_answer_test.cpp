// One answer at the least cost (issue 25 item 4): the registry's one-call
// hybrid (run_hybrid: every draft drawn once, the decided one first) gives
// exactly the schedule of decide_hybrid then plan_hybrid, full and compact;
// and fixed's and megatron_dcp's compact plans (no positions) are the shape
// and rule of their full plans, whose positions the named rule writes again.
// Seeded random batches: W from 1 to 64 (primes and non-powers of two, where
// megatron_dcp falls back to fixed or shards contiguously), every dense
// mask, random profiles and node sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/schedule_types.h"
#include "schedule_expect_same.h"
#include "schedule_random_inputs.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_hybrid_draft.h"
#include "strategies/schedule_hybrid_draw.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

using schedule_tests::expect_same;

ScheduleRequest random_request(SplitMix64& rng) {
  return schedule_tests::random_schedule_request(rng, {1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 24, 31, 64},
                                                 60);
}

std::string describe(const ScheduleRequest& r) {
  std::string out = "W=" + std::to_string(r.world_size) +
                    " T=" + std::to_string(r.max_tokens_per_rank) +
                    " B=" + std::to_string(r.block_size) +
                    " node=" + std::to_string(r.profile.ranks_per_node) + " docs=[";
  for (std::size_t i = 0; i < r.doc_lengths.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(r.doc_lengths[i]);
  }
  return out + "]";
}

TEST(ScheduleAnswer, HybridInOneCallIsDecideThenPlan) {
  SplitMix64 rng(2511);
  int with_others = 0;
  for (int c = 0; c < 300; ++c) {
    ScheduleRequest r = random_request(rng);
    r.compact = c % 2 == 1;
    const std::string where = describe(r) + (r.compact ? " compact" : " full");
    Result<Schedule> once = run_hybrid(r);
    Result<Schedule> apart = decide_hybrid(r);
    ASSERT_TRUE(once) << where << ": " << once.status().message();
    ASSERT_TRUE(apart) << where;
    ASSERT_TRUE(plan_hybrid(r, *apart)) << where;
    expect_same(*once, *apart, where);
    if (::testing::Test::HasFailure()) return;
    // Batches whose answer is not the decided draft as it was decided
    // (another draft, the search or a baseline): the drafts drawn once
    // were tried.
    Result<Schedule> decided = decide_hybrid(r);
    ASSERT_TRUE(decided) << where;
    bool moved = decided->slots.size() != once->slots.size();
    for (std::size_t s = 0; !moved && s < once->slots.size(); ++s) {
      moved = decided->slots[s].ranks != once->slots[s].ranks ||
              decided->slots[s].wave != once->slots[s].wave;
    }
    with_others += moved ? 1 : 0;
  }
  EXPECT_GT(with_others, 30);
}

// A compact plan of fixed or megatron_dcp against the full plan of the same
// decided slot: no positions, the full plan's shape and reason, a rule the
// CP registry knows that writes the full plan's positions again.
void expect_compact_is_full(const ScheduleRequest& r, const Schedule& compact, const Schedule& full,
                            const std::string& where) {
  ASSERT_EQ(compact.slots.size(), full.slots.size()) << where;
  for (std::size_t s = 0; s < full.slots.size(); ++s) {
    const ShardPlan& c = compact.slots[s].plan;
    const ShardPlan& f = full.slots[s].plan;
    const std::string at = where + " slot " + std::to_string(s) + " (" + f.strategy_used + ")";
    EXPECT_TRUE(c.positions.empty()) << at;
    EXPECT_EQ(c.cp_size, f.cp_size) << at;
    EXPECT_EQ(c.shard_len, f.shard_len) << at;
    EXPECT_EQ(c.padding, f.padding) << at;
    EXPECT_EQ(c.fallback_reason, f.fallback_reason) << at;
    ASSERT_NE(cp::find_strategy(c.strategy_used), nullptr) << at << ": " << c.strategy_used;
    const Result<ShardPlan> again = cp::plan(c.strategy_used, slot_workload(r, full.slots[s]));
    ASSERT_TRUE(again) << at;
    EXPECT_EQ(again->positions, f.positions) << at;
    EXPECT_EQ(again->strategy_used, f.strategy_used) << at;
  }
}

TEST(ScheduleAnswer, BaselinesPlanCompactlyWithoutPositions) {
  SplitMix64 rng(2512);
  int fell_back = 0;
  int contiguous = 0;
  for (int c = 0; c < 300; ++c) {
    const ScheduleRequest r = random_request(rng);
    ScheduleRequest compact = r;
    compact.compact = true;
    for (const auto& [name, decide, plan] :
         {std::tuple{"fixed", &decide_fixed, &plan_fixed},
          std::tuple{"megatron_dcp", &decide_megatron_dcp, &plan_megatron_dcp}}) {
      const std::string where = std::string(name) + " " + describe(r);
      Result<Schedule> full = decide(r);
      if (!full) continue;  // refused alike either way
      Schedule by_rule = *full;
      ASSERT_TRUE(plan(r, *full)) << where;
      ASSERT_TRUE(plan(compact, by_rule)) << where;
      expect_compact_is_full(r, by_rule, *full, where);
      if (::testing::Test::HasFailure()) return;
      fell_back += full->strategy_used == "fixed" && std::string(name) == "megatron_dcp";
      for (const ScheduleSlot& slot : full->slots) {
        contiguous += !slot.plan.fallback_reason.empty();
      }
      // The registry's compact answer is the same, and validates by rule.
      Result<Schedule> answer = run_schedule_strategy(name, compact);
      ASSERT_TRUE(answer) << where;
      EXPECT_TRUE(validate_schedule(compact, *answer, PlanCheck::kByRule)) << where;
      expect_compact_is_full(r, *answer, *full, where);
      if (::testing::Test::HasFailure()) return;
    }
  }
  // Both departures from the rule's plan are exercised.
  EXPECT_GT(fell_back, 0);
  EXPECT_GT(contiguous, 0);
}

// per_document_weighted's slots (ABI 1.5) keep the weights their members'
// nodes give: the full answer's positions are what rule 5 wrote before the
// weights were kept (expand_slot_plan pricing per_document again on the
// slot's ranks, from no weights) and what the CP rule plans from the row
// and the kept weights; the compact answer keeps the slot by rule with the
// same weights.
TEST(ScheduleAnswer, WeightedSlotsKeepTheWeightsTheirNodesGive) {
  SplitMix64 rng(2515);
  int weighted = 0;
  for (int c = 0; c < 300; ++c) {
    ScheduleRequest r = random_request(rng);
    const std::string where = describe(r);
    Result<Schedule> full = run_schedule_strategy("hybrid", r);
    ASSERT_TRUE(full) << where;
    r.compact = true;
    Result<Schedule> compact = run_schedule_strategy("hybrid", r);
    r.compact = false;
    ASSERT_TRUE(compact) << where;
    ASSERT_EQ(compact->slots.size(), full->slots.size()) << where;
    for (std::size_t s = 0; s < full->slots.size(); ++s) {
      const ScheduleSlot& slot = full->slots[s];
      const std::string at = where + " slot " + std::to_string(s);
      EXPECT_EQ(compact->slots[s].member_weights, slot.member_weights) << at;
      if (slot.plan.strategy_used != "per_document_weighted") {
        EXPECT_TRUE(slot.member_weights.empty()) << at;
        continue;
      }
      ++weighted;
      EXPECT_TRUE(compact->slots[s].compact()) << at;
      ASSERT_EQ(slot.member_weights.size(), slot.ranks.size()) << at;
      ScheduleSlot before = slot;
      before.plan.positions.clear();
      before.member_weights.clear();
      ASSERT_TRUE(hybrid::expand_slot_plan(r, before)) << at;
      EXPECT_EQ(before.plan.positions, slot.plan.positions) << at;
      const Result<ShardPlan> rule = cp::plan("per_document_weighted", slot_workload(r, slot));
      ASSERT_TRUE(rule) << at << ": " << rule.status().message();
      EXPECT_EQ(rule->positions, slot.plan.positions) << at;
      EXPECT_EQ(rule->shard_len, compact->slots[s].plan.shard_len) << at;
      EXPECT_EQ(rule->padding, compact->slots[s].plan.padding) << at;
      if (::testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(weighted, 10);
}

// hybrid's equal-groups drafts keep their groups ordered by load
// (hybrid::LoadOrder): against the scan it replaced (the least loaded by
// min_element, the m least by a stable sort of every group, ties by index)
// on random loads with many ties, after every change.
TEST(ScheduleAnswer, LoadOrderIsTheScanOfEveryGroup) {
  SplitMix64 rng(2513);
  for (int c = 0; c < 200; ++c) {
    const auto count = static_cast<std::int32_t>(rng.uniform(1, 300));
    hybrid::LoadOrder order(count);
    std::vector<double> load(static_cast<std::size_t>(count), 0.0);
    for (int step = 0; step < 400; ++step) {
      const auto m = static_cast<std::int32_t>(rng.uniform(1, std::min<std::int64_t>(count, 9)));
      std::vector<std::int32_t> scan(static_cast<std::size_t>(count));
      std::iota(scan.begin(), scan.end(), 0);
      std::stable_sort(scan.begin(), scan.end(),
                       [&](std::int32_t x, std::int32_t y) { return load[x] < load[y]; });
      scan.resize(static_cast<std::size_t>(m));
      std::sort(scan.begin(), scan.end());
      ASSERT_EQ(order.earliest(m), scan) << "case " << c << " step " << step;
      const auto least = std::min_element(load.begin(), load.end()) - load.begin();
      ASSERT_EQ(order.earliest(1).front(), least) << "case " << c << " step " << step;
      ASSERT_EQ(order.latest(), *std::max_element(load.begin(), load.end()));
      // A few distinct values, so that ties are common; the chosen groups
      // move to one later load, as the drafts move them.
      const double later = load[static_cast<std::size_t>(scan.back())] +
                           static_cast<double>(rng.uniform(0, 3)) * 0.25;
      for (const std::int32_t k : scan) {
        load[static_cast<std::size_t>(k)] = later;
        order.set(k, later);
        ASSERT_EQ(order.at(k), later);
      }
    }
  }
}

// A draft left unpacked for a `beat` (hybrid::draft's finish bound) is one
// whose packed makespan is no sooner than it; any other is the draft drawn
// without a beat, unchanged. Beats around each draft's own makespan, on
// batches of up to 3,000 pieces over up to 256 ranks.
TEST(ScheduleAnswer, DraftLeftUnpackedCannotFinishBeforeTheBeat) {
  SplitMix64 rng(2514);
  int skipped = 0;
  int kept = 0;
  for (int c = 0; c < 60; ++c) {
    ScheduleRequest r = random_request(rng);
    r.world_size = static_cast<std::int32_t>(rng.uniform(1, 256));
    const std::int64_t docs = rng.uniform(1, 3000);
    r.doc_lengths.clear();
    for (std::int64_t i = 0; i < docs; ++i) {
      r.doc_lengths.push_back(rng.uniform(
          1, rng.uniform(0, 9) == 0 ? 4 * r.max_tokens_per_rank : r.max_tokens_per_rank));
    }
    const hybrid::Estimator est(r);
    const hybrid::PreparedBatch prep = hybrid::prepare_batch(r, est);
    const hybrid::Batch batch = hybrid::grouped_batch(r, prep, true);
    for (const hybrid::GroupRule rule :
         {hybrid::GroupRule::kMeanLoad, hybrid::GroupRule::kTimelineMeanLoad,
          hybrid::GroupRule::kSoonestEnd, hybrid::GroupRule::kBalancedEnd}) {
      const hybrid::Draft full = hybrid::draft(batch, est, rule);
      for (const double f : {0.5, 0.9, 0.99, 1.0, 1.01, 1.5}) {
        const double beat = f * full.makespan;
        const hybrid::Draft cut = hybrid::draft(batch, est, rule, beat);
        const std::string where = describe(r) + " beat " + std::to_string(f);
        if (cut.makespan == hybrid::kNoEnd) {
          ++skipped;
          EXPECT_GE(full.makespan, beat) << where;
          continue;
        }
        ++kept;
        EXPECT_EQ(cut.makespan, full.makespan) << where;
        ASSERT_EQ(cut.ranks(), full.ranks()) << where;
        EXPECT_EQ(cut.rank_first, full.rank_first) << where;
        EXPECT_EQ(cut.row_pieces, full.row_pieces) << where;
        ASSERT_EQ(cut.rows.size(), full.rows.size()) << where;
        for (std::size_t k = 0; k < full.rows.size(); ++k) {
          EXPECT_EQ(cut.rows[k].first, full.rows[k].first) << where;
          EXPECT_EQ(cut.rows[k].size, full.rows[k].size) << where;
          EXPECT_EQ(cut.rows[k].room, full.rows[k].room) << where;
        }
        ASSERT_EQ(cut.long_slots.size(), full.long_slots.size()) << where;
        for (std::size_t k = 0; k < full.long_slots.size(); ++k) {
          EXPECT_EQ(cut.long_slots[k].ranks, full.long_slots[k].ranks) << where;
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
  // Both outcomes occur.
  EXPECT_GT(skipped, 100);
  EXPECT_GT(kept, 100);
}

}  // namespace
}  // namespace fulcrum
