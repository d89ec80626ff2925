// The compact answer (ABI 1.4) across the plugin boundary: slot plans by
// rule, each rank expanding only its own slots through the plugin's plan_cp,
// must give bit for bit the positions of the full answer, for every
// scheduler (and hybrid under group shapes), weighted slots (ABI 1.5)
// included; a plugin whose rule does not give the plan its answer stated is
// refused on the rank that expands it, and member weights no plan can take
// are refused when the answer is copied.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "fulcrum/core/compact_schedule.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/host/plugin_loader.h"
#include "loader_test_support.h"

namespace fulcrum::host {
namespace {

namespace fs = std::filesystem;
using test::test_plugin;

LoaderOptions quiet_options() {
  LoaderOptions o;
  o.check_permissions = false;
  o.log = nullptr;
  return o;
}

// A random batch: W in [1, 12], T in [64, 2048], documents short and long
// (some longer than W x T, cut into pieces), every mask kind a schedule
// takes, B of 16 to 128; every fourth request under Megatron-core's shapes.
ScheduleRequest random_request(SplitMix64& rng) {
  ScheduleRequest r;
  r.world_size = static_cast<std::int32_t>(rng.uniform(1, 12));
  r.max_tokens_per_rank = rng.uniform(64, 2048);
  const std::int64_t docs = rng.uniform(1, 24);
  for (std::int64_t d = 0; d < docs; ++d) {
    const bool long_doc = rng.uniform(0, 5) == 0;
    r.doc_lengths.push_back(long_doc ? rng.uniform(1, 3 * r.world_size * r.max_tokens_per_rank)
                                     : rng.uniform(1, 900));
  }
  r.block_size = std::int64_t{16} << rng.uniform(0, 3);
  switch (rng.uniform(0, 3)) {
    case 0:
      r.mask = MaskSpec{MaskKind::kCausal, 0, {}};
      break;
    case 1:
      r.mask = MaskSpec{MaskKind::kFull, 0, {}};
      break;
    case 2:
      r.mask = MaskSpec{MaskKind::kSliding, rng.uniform(1, 300), {}};
      break;
    default:
      r.mask = MaskSpec{MaskKind::kPrefix, rng.uniform(0, 300), {}};
      break;
  }
  r.profile = builtin_cost_profile(rng.uniform(0, 1) == 0 ? "h100_7b" : "cpu_gloo").value();
  if (rng.uniform(0, 3) == 0) {
    r.group_shapes.sizes = 0b1111;
    r.group_shapes.world = true;
    r.group_shapes.aligned = true;
  }
  return r;
}

// Five documents on 8 ranks, at most 1000 tokens a rank, fixed's CP groups
// of 4, priced with h100_7b: the request the broken plugins are asked.
ScheduleRequest five_documents() {
  ScheduleRequest request;
  request.doc_lengths = {2500, 1800, 900, 700, 400};
  request.world_size = 8;
  request.max_tokens_per_rank = 1000;
  request.profile = builtin_cost_profile("h100_7b").value();
  request.cp_size = 4;
  return request;
}

TEST(CompactScheduleTest, EveryRanksExpansionIsTheFullAnswerBitForBit) {
  auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  LoadBalancer& plugin = **loaded;
  SplitMix64 rng(20261126);
  int compared = 0;
  int weighted_slots = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const ScheduleRequest full_request = random_request(rng);
    if (!validate_schedule_request(full_request)) continue;
    ScheduleRequest compact_request = full_request;
    compact_request.compact = true;
    for (const std::string& name : plugin.schedule_strategies()) {
      SCOPED_TRACE("trial " + std::to_string(trial) + ", scheduler " + name);
      auto full = plugin.schedule(name, full_request);
      auto compact = plugin.schedule(name, compact_request);
      ASSERT_EQ(full.is_ok(), compact.is_ok())
          << (full.is_ok() ? compact.status().message() : full.status().message());
      if (!full) continue;
      ASSERT_FALSE(has_compact_slots(*full));
      // per_document_weighted's slots (multi-node slots of hybrid) come by
      // rule too (ABI 1.5), their member weights stated; nothing else has
      // weights.
      for (std::size_t s = 0; s < compact->slots.size(); ++s) {
        const ScheduleSlot& slot = compact->slots[s];
        const bool weighted = slot.plan.strategy_used == "per_document_weighted";
        EXPECT_EQ(slot.member_weights.size(), weighted ? slot.ranks.size() : 0) << "slot " << s;
        weighted_slots += weighted ? 1 : 0;
      }
      // Every plan by rule, judged by its shape without positions.
      for (const ScheduleSlot& slot : compact->slots) ASSERT_TRUE(slot.compact());
      EXPECT_TRUE(validate_schedule(full_request, *compact, PlanCheck::kByRule));
      EXPECT_FALSE(validate_schedule(full_request, *compact));
      ASSERT_EQ(compact->slots.size(), full->slots.size());
      EXPECT_EQ(compact->strategy_used, full->strategy_used);
      for (std::int32_t rank = 0; rank < full_request.world_size; ++rank) {
        Schedule mine = *compact;
        const Status expanded = expand_slots_of_rank(full_request, mine, rank, plugin);
        ASSERT_TRUE(expanded) << expanded.message();
        for (std::size_t s = 0; s < mine.slots.size(); ++s) {
          const ScheduleSlot& a = mine.slots[s];
          const ScheduleSlot& b = full->slots[s];
          ASSERT_EQ(a.ranks, b.ranks);
          EXPECT_EQ(a.wave, b.wave);
          EXPECT_EQ(a.plan.shard_len, b.plan.shard_len);
          EXPECT_EQ(a.plan.padding, b.plan.padding);
          const bool member = std::find(a.ranks.begin(), a.ranks.end(), rank) != a.ranks.end();
          // Only this rank's slots are written, and exactly as in full.
          EXPECT_EQ(a.compact(), !member) << "slot " << s << ", rank " << rank;
          if (!member) continue;
          EXPECT_EQ(a.plan.positions, b.plan.positions) << "slot " << s;
          EXPECT_EQ(a.plan.strategy_used, b.plan.strategy_used) << "slot " << s;
        }
      }
      Schedule all = *compact;
      const Status expanded = expand_slots_of_rank(full_request, all, -1, plugin);
      ASSERT_TRUE(expanded) << expanded.message();
      EXPECT_TRUE(validate_schedule(full_request, all));
      ++compared;
    }
  }
  EXPECT_GT(compared, 60);       // most random requests are valid for every scheduler
  EXPECT_GT(weighted_slots, 0);  // per_document_weighted's slots happen here too
}

TEST(CompactScheduleTest, AHostThatDoesNotAskGetsTheFullAnswer) {
  auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  ScheduleRequest request;
  request.doc_lengths = {2500, 1800, 900, 700, 400};
  request.world_size = 4;
  request.max_tokens_per_rank = 1000;
  request.profile = builtin_cost_profile("h100_7b").value();
  auto schedule = (*loaded)->schedule("hybrid", request);
  ASSERT_TRUE(schedule.is_ok()) << schedule.status().message();
  EXPECT_FALSE(has_compact_slots(*schedule));
  EXPECT_TRUE(validate_schedule(request, *schedule));
}

struct FaultCase {
  const char* kind;
  const char* says;  // what the refusal must hold
};

class CompactFaultTest : public ::testing::TestWithParam<FaultCase> {};

// The answer itself is sound (slots, pieces, waves, shapes), so the host
// takes it; the rank that expands slot 0 refuses its plan, naming the plugin,
// the slot and its rule; a rank outside slot 0 never expands it.
TEST_P(CompactFaultTest, IsRefusedByTheRankThatExpandsIt) {
  const std::string file = std::string("fulcrum_broken_") + GetParam().kind;
  ASSERT_TRUE(fs::exists(test_plugin(file))) << test_plugin(file) << " is missing: build it";
  auto loaded = load_plugin(test_plugin(file), quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  ScheduleRequest request = five_documents();
  auto full = (*loaded)->schedule("fixed", request);
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  EXPECT_TRUE(validate_schedule(request, *full));
  request.compact = true;
  auto compact = (*loaded)->schedule("fixed", request);
  ASSERT_TRUE(compact.is_ok()) << compact.status().message();
  ASSERT_TRUE(has_compact_slots(*compact));
  const std::vector<std::int32_t> slot0 = compact->slots[0].ranks;
  for (std::int32_t rank = 0; rank < request.world_size; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    Schedule mine = *compact;
    const Status status = expand_slots_of_rank(request, mine, rank, **loaded);
    if (std::find(slot0.begin(), slot0.end(), rank) == slot0.end()) {
      EXPECT_TRUE(status) << status.message();
      continue;
    }
    ASSERT_FALSE(status);
    EXPECT_EQ(status.code(), StatusCode::kPluginFault);
    EXPECT_HAS(status.message(),
               "balancer 'broken_compact': schedule slot 0 (CP rule "
               "'broken_rule' on 4 ranks)");
    EXPECT_HAS(status.message(), GetParam().says);
    EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, CompactFaultTest,
                         ::testing::Values(FaultCase{"compact_out_of_range", "outside [0, "},
                                           FaultCase{"compact_repeat", "repeats position 0"},
                                           FaultCase{"compact_shard_len",
                                                     "expanded to a plan with shard_len "}),
                         [](const auto& test) { return std::string(test.param.kind); });

class WeightFaultTest : public ::testing::TestWithParam<FaultCase> {};

// Member weights (ABI 1.5) no plan can take are the plugin's fault, refused
// in one line when the host copies the answer, before any rank expands it.
TEST_P(WeightFaultTest, IsRefusedWhenTheAnswerIsCopied) {
  const std::string file = std::string("fulcrum_broken_") + GetParam().kind;
  ASSERT_TRUE(fs::exists(test_plugin(file))) << test_plugin(file) << " is missing: build it";
  auto loaded = load_plugin(test_plugin(file), quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  ScheduleRequest request = five_documents();
  EXPECT_TRUE((*loaded)->schedule("fixed", request).is_ok());  // the full answer has none
  request.compact = true;
  auto compact = (*loaded)->schedule("fixed", request);
  ASSERT_FALSE(compact.is_ok());
  EXPECT_EQ(compact.status().code(), StatusCode::kPluginFault);
  EXPECT_HAS(compact.status().message(), "scheduler 'fixed' returned an invalid schedule: slot 0");
  EXPECT_HAS(compact.status().message(), GetParam().says);
  EXPECT_EQ(compact.status().message().find('\n'), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Weights, WeightFaultTest,
    ::testing::Values(FaultCase{"compact_weights_nan", "member weight 0 is nan"},
                      FaultCase{"compact_weights_inf", "member weight 0 is inf"},
                      FaultCase{"compact_weights_negative", "member weight 0 is -1"},
                      FaultCase{"compact_weights_zero_sum", "member weights sum to 0"},
                      FaultCase{"compact_weights_count", "give 5 member weights for 4 members"},
                      FaultCase{"compact_weights_overflow", "member weights sum to inf"}),
    [](const auto& test) { return std::string(test.param.kind); });

// A compact hybrid answer of the plugin with a per_document_weighted slot,
// from the property test's random batches.
bool weighted_answer(LoadBalancer& plugin, ScheduleRequest& request, Schedule& schedule) {
  SplitMix64 rng(20261126);
  for (int trial = 0; trial < 200; ++trial) {
    request = random_request(rng);
    if (!validate_schedule_request(request)) continue;
    request.compact = true;
    auto answer = plugin.schedule("hybrid", request);
    if (!answer) continue;
    for (const ScheduleSlot& slot : answer->slots) {
      if (!slot.member_weights.empty()) {
        schedule = std::move(answer).value();
        return true;
      }
    }
  }
  return false;
}

// A slot's weights reach its rule and nothing else: weights stated for a
// rule that takes none, or a weighted slot whose stated shape is not its
// expansion's, are refused by the rank that expands it.
TEST(CompactScheduleTest, WeightsOnlyWhereTheirRuleTakesThemAndAsStated) {
  auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  ScheduleRequest request;
  Schedule answer;
  ASSERT_TRUE(weighted_answer(**loaded, request, answer));
  std::size_t weighted = 0;
  while (answer.slots[weighted].member_weights.empty()) ++weighted;
  const ScheduleSlot& slot = answer.slots[weighted];
  const std::string rule = "schedule slot " + std::to_string(weighted) +
                           " (CP rule 'per_document_weighted' on " +
                           std::to_string(slot.ranks.size()) + " ranks)";
  // As stated, it expands (the property test compares its positions).
  Schedule as_stated = answer;
  ASSERT_TRUE(expand_slots_of_rank(request, as_stated, -1, **loaded));

  Schedule longer = answer;
  longer.slots[weighted].plan.shard_len += 1;
  longer.slots[weighted].plan.padding += static_cast<std::int64_t>(slot.ranks.size());
  Status status = expand_slots_of_rank(request, longer, slot.ranks.front(), **loaded);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.code(), StatusCode::kPluginFault);
  EXPECT_HAS(status.message(), rule + " expanded to a plan with shard_len ");

  Schedule unweighted = answer;
  unweighted.slots[weighted].plan.strategy_used = "per_document";
  status = expand_slots_of_rank(request, unweighted, slot.ranks.front(), **loaded);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.code(), StatusCode::kPluginFault);
  EXPECT_HAS(status.message(), "CP strategy 'per_document' takes no member_weights");
  EXPECT_EQ(status.message().find('\n'), std::string::npos);

  Schedule none = answer;
  none.slots[weighted].member_weights.clear();
  status = expand_slots_of_rank(request, none, slot.ranks.front(), **loaded);
  ASSERT_FALSE(status);
  EXPECT_HAS(status.message(), "per_document_weighted needs member_weights");
}

// Answers the host refuses as they cross the boundary, before any slot is
// expanded: a flag it did not ask for or does not know, positions beside
// the flag, a slot without a rule.
struct AnswerCase {
  const char* kind;
  bool compact;      // the request asks for the compact answer
  const char* says;  // what the refusal must hold
};

class CompactAnswerTest : public ::testing::TestWithParam<AnswerCase> {};

TEST_P(CompactAnswerTest, IsRefusedAsAPluginFault) {
  const std::string file = std::string("fulcrum_broken_") + GetParam().kind;
  ASSERT_TRUE(fs::exists(test_plugin(file))) << test_plugin(file) << " is missing: build it";
  auto loaded = load_plugin(test_plugin(file), quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  ScheduleRequest request = five_documents();
  request.compact = GetParam().compact;
  auto answer = (*loaded)->schedule("fixed", request);
  ASSERT_FALSE(answer.is_ok());
  EXPECT_EQ(answer.status().code(), StatusCode::kPluginFault);
  EXPECT_HAS(answer.status().message(),
             "plugin 'broken_compact' scheduler 'fixed' returned an invalid schedule: ");
  EXPECT_HAS(answer.status().message(), GetParam().says);
  EXPECT_EQ(answer.status().message().find('\n'), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Answers, CompactAnswerTest,
    ::testing::Values(
        AnswerCase{"compact_unasked", false, "marks a compact answer the host did not ask for"},
        AnswerCase{"compact_unknown_bit", true, "answer_flags 5 holds bits this host does not"},
        AnswerCase{"compact_with_positions", true,
                   "a compact answer (FULCRUM_ANSWER_COMPACT) with"},
        AnswerCase{"compact_null_rule", true, "slot_plan_strategies[0] is null"},
        AnswerCase{"compact_weights_alone", true,
                   "slot_weight_offsets and slot_weights must be both NULL or both set, and "
                   "slot_weight_offsets is NULL"},
        AnswerCase{"compact_weights_full", false,
                   "a full answer (positions written) with member weights"},
        AnswerCase{"compact_weight_offsets_back", true,
                   "slot 1: slot_weight_offsets [4, -9223372036854775808) go backwards"}),
    [](const auto& test) { return std::string(test.param.kind); });

// A rule naming a CP strategy the plugin does not have: the host takes the
// answer (its shape is sound) and the rank that expands the slot refuses it.
TEST(CompactScheduleTest, ARuleThePluginCannotPlanIsRefusedOnExpansion) {
  const std::string file = "fulcrum_broken_compact_unknown_rule";
  ASSERT_TRUE(fs::exists(test_plugin(file))) << test_plugin(file) << " is missing: build it";
  auto loaded = load_plugin(test_plugin(file), quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  ScheduleRequest request = five_documents();
  request.compact = true;
  auto answer = (*loaded)->schedule("fixed", request);
  ASSERT_TRUE(answer.is_ok()) << answer.status().message();
  Schedule all = *answer;
  const Status status = expand_slots_of_rank(request, all, -1, **loaded);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.code(), StatusCode::kPluginFault);
  EXPECT_HAS(status.message(),
             "balancer 'broken_compact': schedule slot 0 (CP rule 'no_such_rule' on 4 ranks) "
             "cannot be expanded: ");
}

}  // namespace
}  // namespace fulcrum::host
