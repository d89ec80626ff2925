// Compact schedules in the core: a plan by rule judged by its shape
// (validate_schedule with PlanCheck::kByRule), and expand_slot holding the
// planner to the shape the schedule stated.
#include "fulcrum/core/compact_schedule.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"

namespace fulcrum {
namespace {

// W = 2, T = 8: documents of 5 and 7 tokens, each alone on two ranks.
ScheduleRequest request() {
  ScheduleRequest r;
  r.doc_lengths = {5, 7};
  r.world_size = 2;
  r.max_tokens_per_rank = 8;
  r.block_size = 4;
  r.profile.kv_bytes_per_token = 1;
  r.profile.intra_node_bytes_per_second = 1;
  r.profile.inter_node_bytes_per_second = 1;
  return r;
}

// Two slots by rule ("contiguous"), each over both ranks in its own wave.
Schedule compact_schedule() {
  Schedule s;
  s.strategy_used = "test";
  for (std::int64_t d = 0; d < 2; ++d) {
    ScheduleSlot slot;
    slot.ranks = {0, 1};
    slot.wave = static_cast<std::int32_t>(d);
    const std::int64_t n = d == 0 ? 5 : 7;
    slot.pieces = {DocPiece{d, 0, n}};
    slot.plan.cp_size = 2;
    slot.plan.shard_len = (n + 1) / 2;
    slot.plan.padding = 2 * slot.plan.shard_len - n;
    slot.plan.strategy_used = "contiguous";
    s.slots.push_back(slot);
  }
  return s;
}

const RulePlanFn kContiguous = [](std::string_view rule, const CpWorkload& w) -> Result<ShardPlan> {
  if (rule != "contiguous") return not_found("no rule " + std::string(rule));
  return contiguous_plan(w);
};

TEST(CompactScheduleCore, PlansByRuleAreJudgedByTheirShape) {
  const ScheduleRequest r = request();
  const Schedule s = compact_schedule();
  EXPECT_TRUE(validate_schedule(r, s, PlanCheck::kByRule));
  // Without kByRule a plan needs its positions.
  EXPECT_FALSE(validate_schedule(r, s));
  struct Case {
    void (*damage)(ShardPlan&);
    const char* says;
  };
  const Case cases[] = {
      {[](ShardPlan& p) { p.padding += 1; }, "plan has padding 2, expected 1"},
      {[](ShardPlan& p) { p.shard_len = 2; }, "plan has shard_len 2"},
      {[](ShardPlan& p) { p.shard_len = 9, p.padding = 13; }, "more than T = 8"},
      {[](ShardPlan& p) { p.cp_size = 1; }, "plan has cp_size 1, expected 2"},
      {[](ShardPlan& p) { p.strategy_used.clear(); }, "names no CP strategy"},
  };
  for (const Case& c : cases) {
    Schedule damaged = s;
    c.damage(damaged.slots[0].plan);
    const Status status = validate_schedule(r, damaged, PlanCheck::kByRule);
    ASSERT_FALSE(status) << c.says;
    EXPECT_NE(status.message().find(c.says), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("schedule slot 0"), std::string::npos) << status.message();
  }
}

TEST(CompactScheduleCore, ExpansionWritesOnlyTheRanksSlotsAndHoldsThePlannerToTheShape) {
  ScheduleRequest r = request();
  r.world_size = 3;
  Schedule s = compact_schedule();
  s.slots[1].ranks = {1, 2};
  Schedule mine = s;
  ASSERT_TRUE(expand_slots_of_rank(r, mine, 0, kContiguous));
  EXPECT_FALSE(mine.slots[0].compact());
  EXPECT_TRUE(mine.slots[1].compact());
  EXPECT_EQ(mine.slots[0].plan.positions, (std::vector<std::int64_t>{0, 1, 2, 3, 4, -1}));
  ASSERT_TRUE(expand_slots_of_rank(r, mine, -1, kContiguous));
  EXPECT_TRUE(validate_schedule(r, mine));
  EXPECT_FALSE(has_compact_slots(mine));

  Schedule wrong = s;
  wrong.slots[1].plan.shard_len = 5;
  wrong.slots[1].plan.padding = 3;
  const Status shape = expand_slots_of_rank(r, wrong, 2, kContiguous);
  ASSERT_FALSE(shape);
  EXPECT_EQ(shape.code(), StatusCode::kPluginFault);
  EXPECT_NE(shape.message().find("schedule slot 1 (CP rule 'contiguous' on 2 ranks) expanded to "
                                 "a plan with shard_len 4, the schedule said 5"),
            std::string::npos)
      << shape.message();
  Schedule unknown = s;
  unknown.slots[0].plan.strategy_used = "nowhere";
  const Status missing = expand_slots_of_rank(r, unknown, 0, kContiguous);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.code(), StatusCode::kPluginFault);
  EXPECT_NE(missing.message().find("cannot be expanded: no rule nowhere"), std::string::npos)
      << missing.message();
  // A rank outside the slot never expands it, so never sees the fault.
  EXPECT_TRUE(expand_slots_of_rank(r, unknown, 2, kContiguous));
}

}  // namespace
}  // namespace fulcrum
