// The row term of the cost model (CostProfile::row_token_seconds, ABI 1.4):
// every member of a slot pays it per token of the slot's whole row, priced by
// price_slot_counts on both pricing paths, carried across the C ABI only in
// a request long enough to hold it.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/core/slot_runs.h"
#include "fulcrum/plugin_sdk.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

// Round numbers, so expected times are exact in binary.
ScheduleRequest round_request(std::vector<std::int64_t> docs) {
  ScheduleRequest r;
  r.doc_lengths = std::move(docs);
  r.world_size = 4;
  r.max_tokens_per_rank = 8;
  r.block_size = 4;
  CostProfile& p = r.profile;
  p.name = "round";
  p.tile_seconds = 1.0;
  p.token_seconds = 0.5;
  p.slot_seconds = 4.0;
  p.kv_bytes_per_token = 2.0;
  p.intra_node_bytes_per_second = 8.0;
  p.inter_node_bytes_per_second = 2.0;
  p.latency_seconds = 0.25;
  p.ranks_per_node = 2;
  return r;
}

// Contiguous shards of the slot's row over its members.
ScheduleSlot contiguous_slot(std::vector<std::int32_t> ranks, DocPiece piece) {
  ScheduleSlot slot;
  const auto g = static_cast<std::int64_t>(ranks.size());
  slot.ranks = std::move(ranks);
  slot.pieces = {piece};
  slot.plan.cp_size = static_cast<std::int32_t>(g);
  slot.plan.shard_len = (piece.length + g - 1) / g;
  for (std::int64_t i = 0; i < g * slot.plan.shard_len; ++i) {
    slot.plan.positions.push_back(i < piece.length ? i : kPadPosition);
  }
  slot.plan.padding = g * slot.plan.shard_len - piece.length;
  return slot;
}

// Causal, B = 4: a document of 8 tokens over ranks 0 and 2 (other nodes),
// member 0 holding block 0 and member 1 block 1; a document of 4 on rank 1.
// Without the row term the members compute 7 s and 8 s and exchange 4.25 s
// each (schedule_known_test's HandComputedTwoMemberSlot). With r = 0.125
// each member of the pair pays it on the row's 8 tokens, not on its own 4:
// 1 s more each; the single member pays it on its 4 tokens, the whole row.
TEST(RowTerm, EveryMemberPaysItOnTheWholeRow) {
  ScheduleRequest r = round_request({8, 4});
  r.profile.row_token_seconds = 0.125;
  Schedule s;
  s.slots.push_back(contiguous_slot({0, 2}, {0, 0, 8}));
  s.slots.push_back(contiguous_slot({1}, {1, 0, 4}));
  ASSERT_TRUE(validate_schedule(r, s));
  const ScheduleCost c = evaluate_schedule(r, s);
  const std::vector<SlotMemberCost>& pair = c.slots[0].members;
  EXPECT_DOUBLE_EQ(pair[0].compute_seconds, 7.0 + 8 * 0.125);
  EXPECT_DOUBLE_EQ(pair[1].compute_seconds, 8.0 + 8 * 0.125);
  EXPECT_DOUBLE_EQ(pair[0].comm_seconds, 4.25);  // the exchange does not change
  EXPECT_DOUBLE_EQ(pair[1].comm_seconds, 4.25);
  EXPECT_DOUBLE_EQ(c.step_seconds, 9.0 + 4.25);
  // One tile (4 causal tokens in one block), 4 tokens, the slot, the row.
  EXPECT_DOUBLE_EQ(c.slots[1].members[0].compute_seconds, 1.0 + 2.0 + 4.0 + 0.5);
  // The run path prices the same counts with the same function.
  std::vector<RunShardPlan> runs;
  for (const ScheduleSlot& slot : s.slots) runs.push_back(runs_of_plan(slot.plan));
  EXPECT_DOUBLE_EQ(evaluate_schedule_runs(r, s, runs).step_seconds, c.step_seconds);
  // Negative is refused in one line naming the field.
  r.profile.row_token_seconds = -0.125;
  const Status bad = validate_schedule_request(r);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("row_token_seconds = -0.125 must be >= 0"), std::string::npos);
}

TEST(RowTerm, CrossesTheAbiOnlyWhenTheRequestIsLongEnough) {
  const std::int64_t docs[] = {100, 50};
  fulcrum_schedule_request c{};
  c.world_size = 4;
  c.max_tokens_per_rank = 100;
  c.doc_lengths = docs;
  c.num_docs = 2;
  c.block_size = 16;
  c.tile_seconds = 1e-4;
  c.kv_bytes_per_token = 64;
  c.intra_node_bytes_per_second = 1e9;
  c.inter_node_bytes_per_second = 1e9;
  c.ranks_per_node = 8;
  c.exchange_overlap = 0.5;
  c.row_token_seconds = 3e-6;
  // A 1.3 host's request ends before the field: no row term, whatever
  // follows; the 1.3 field still reads.
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_3_SIZE;
  Result<ScheduleRequest> old = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(old) << old.status().message();
  EXPECT_EQ(old->profile.row_token_seconds, 0.0);
  EXPECT_EQ(old->profile.exchange_overlap, 0.5);
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_4_SIZE;
  Result<ScheduleRequest> now = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(now) << now.status().message();
  EXPECT_EQ(now->profile.row_token_seconds, 3e-6);
  // Served to a 1.3 host, a 1.4 plugin plans as the 1.3 model (no row term)
  // does: the same schedule as a 1.4 request with the term at 0.
  ScheduleRequest without = *now;
  without.profile.row_token_seconds = 0;
  Result<Schedule> a = run_schedule_strategy("hybrid", *old);
  Result<Schedule> b = run_schedule_strategy("hybrid", without);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(evaluate_schedule(*old, *a).step_seconds, evaluate_schedule(without, *b).step_seconds);
}

}  // namespace
}  // namespace fulcrum
