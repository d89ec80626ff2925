// The row term of the cost model (CostProfile::row_token_seconds, ABI 1.4):
// every member of a slot pays it per token of the slot's whole row, priced by
// price_slot_counts on both pricing paths, carried across the C ABI only in
// a request long enough to hold it. The partial-tile term
// (CostProfile::partial_tile_seconds, ABI 1.6) likewise: a member pays it
// per tile of its that is not full, on every pricing path and the one-rank
// shortcut, and hybrid plans with it: the never-slower guard holds under it.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/cost_profile.h"
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
// Documents 8 and 4: the first over ranks 0 and 2 (other nodes), the
// second on rank 1.
Schedule pair_and_single() {
  Schedule s;
  s.slots.push_back(contiguous_slot({0, 2}, {0, 0, 8}));
  s.slots.push_back(contiguous_slot({1}, {1, 0, 4}));
  return s;
}

TEST(RowTerm, EveryMemberPaysItOnTheWholeRow) {
  ScheduleRequest r = round_request({8, 4});
  r.profile.row_token_seconds = 0.125;
  const Schedule s = pair_and_single();
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
  c.partial_tile_seconds = 2e-4;
  // A 1.3 host's request ends before the field: no row term, whatever
  // follows; the 1.3 field still reads.
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_3_SIZE;
  Result<ScheduleRequest> old = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(old) << old.status().message();
  EXPECT_EQ(old->profile.row_token_seconds, 0.0);
  EXPECT_EQ(old->profile.partial_tile_seconds, 0.0);
  EXPECT_EQ(old->profile.exchange_overlap, 0.5);
  // A 1.4 or 1.5 host's (1.5 grew no request field): the row term, not
  // the partial-tile term of 1.6.
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_4_SIZE;
  Result<ScheduleRequest> now = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(now) << now.status().message();
  EXPECT_EQ(now->profile.row_token_seconds, 3e-6);
  EXPECT_EQ(now->profile.partial_tile_seconds, 0.0);
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_6_SIZE;
  Result<ScheduleRequest> newest = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(newest) << newest.status().message();
  EXPECT_EQ(newest->profile.partial_tile_seconds, 2e-4);
  EXPECT_EQ(newest->profile.row_token_seconds, 3e-6);
  // Served to a 1.3 host, a 1.4 plugin plans as the 1.3 model (no row term)
  // does: the same schedule as a 1.4 request with the term at 0.
  ScheduleRequest without = *now;
  without.profile.row_token_seconds = 0;
  Result<Schedule> a = run_schedule_strategy("hybrid", *old);
  Result<Schedule> b = run_schedule_strategy("hybrid", without);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(evaluate_schedule(*old, *a).step_seconds, evaluate_schedule(without, *b).step_seconds);
}

// round_request under `mask`, pricing each partial tile 0.5 s on top of
// its 1 s.
ScheduleRequest partial_request(std::vector<std::int64_t> docs, MaskSpec mask) {
  ScheduleRequest r = round_request(std::move(docs));
  r.mask = mask;
  r.profile.partial_tile_seconds = 0.5;
  return r;
}

// Causal, B = 4: a document of 8 tokens over ranks 0 and 2, member 0
// holding queries 0..3 (key block 0, its diagonal: partial) and member 1
// queries 4..7 (key block 0, every pair allowed: full; key block 1, its
// diagonal: partial); a document of 4 on rank 1 (one diagonal tile). Without
// the term the pair computes 7 s and 8 s (schedule_known_test's
// HandComputedTwoMemberSlot); with 0.5 s per partial tile each pays 0.5 s
// more, and so does the single member.
TEST(PartialTerm, EachPartialTilePaysItOnTopOfATile) {
  ScheduleRequest r = partial_request({8, 4}, MaskSpec::causal());
  const Schedule s = pair_and_single();
  ASSERT_TRUE(validate_schedule(r, s));
  const ScheduleCost c = evaluate_schedule(r, s);
  const std::vector<SlotMemberCost>& pair = c.slots[0].members;
  EXPECT_EQ(pair[0].tiles, 1);
  EXPECT_EQ(pair[0].partial_tiles, 1);
  EXPECT_EQ(pair[1].tiles, 2);
  EXPECT_EQ(pair[1].partial_tiles, 1);
  EXPECT_DOUBLE_EQ(pair[0].compute_seconds, 7.0 + 0.5);
  EXPECT_DOUBLE_EQ(pair[1].compute_seconds, 8.0 + 0.5);
  EXPECT_DOUBLE_EQ(pair[0].comm_seconds, 4.25);  // the exchange does not change
  EXPECT_EQ(c.slots[1].members[0].partial_tiles, 1);
  EXPECT_DOUBLE_EQ(c.slots[1].members[0].compute_seconds, 1.0 + 2.0 + 4.0 + 0.5);
  EXPECT_DOUBLE_EQ(c.step_seconds, 8.5 + 4.25);
  // The run path and the one-rank shortcut price the same counts.
  std::vector<RunShardPlan> runs;
  for (const ScheduleSlot& slot : s.slots) runs.push_back(runs_of_plan(slot.plan));
  EXPECT_DOUBLE_EQ(evaluate_schedule_runs(r, s, runs).step_seconds, c.step_seconds);
  EXPECT_DOUBLE_EQ(one_rank_slot_end(r, s.slots[1]), 7.5);
  // The full mask: every tile of 4 real queries is full; none pays.
  ScheduleRequest full = partial_request({8, 4}, MaskSpec::full());
  const ScheduleCost f = evaluate_schedule(full, s);
  EXPECT_EQ(f.slots[0].members[0].tiles, 2);
  EXPECT_EQ(f.slots[0].members[0].partial_tiles, 0);
  EXPECT_EQ(f.slots[1].members[0].partial_tiles, 0);
  // A query block with a pad row is partial whatever its keys: 6 tokens over
  // two members of 3 rows each, block 4.
  ScheduleRequest short_rows = partial_request({6}, MaskSpec::full());
  Schedule padded;
  padded.slots.push_back(contiguous_slot({0, 1}, {0, 0, 6}));
  ASSERT_TRUE(validate_schedule(short_rows, padded));
  const ScheduleCost padded_cost = evaluate_schedule(short_rows, padded);
  for (const SlotMemberCost& m : padded_cost.slots[0].members) {
    EXPECT_EQ(m.partial_tiles, m.tiles);
  }
  // Negative is refused in one line naming the field.
  r.profile.partial_tile_seconds = -0.5;
  const Status bad = validate_schedule_request(r);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("partial_tile_seconds = -0.5 must be >= 0"), std::string::npos);
}

// Hybrid under profiles that price partial tiles (up to three times a
// tile's price on top of it), on random batches: valid, and never slower
// than either baseline by the model with the term (the guard prices
// exactly, so the term must reach every path it compares).
TEST(PartialTerm, HybridStaysNeverSlowerUnderIt) {
  std::mt19937_64 rng(20261127);
  int compared = 0;
  for (int i = 0; i < 40; ++i) {
    ScheduleRequest r;
    r.world_size = static_cast<std::int32_t>(2 + rng() % 30);
    r.block_size = std::int64_t{1} << (4 + rng() % 4);
    r.max_tokens_per_rank = r.block_size * static_cast<std::int64_t>(4 + rng() % 32);
    r.mask = rng() % 3 == 0 ? MaskSpec::full() : MaskSpec::causal();
    r.profile = *builtin_cost_profile(rng() % 2 ? "h100_7b" : "cpu_gloo");
    r.profile.partial_tile_seconds =
        r.profile.tile_seconds * static_cast<double>(rng() % 301) / 100;
    const auto docs = 1 + rng() % 60;
    for (std::uint64_t d = 0; d < docs; ++d) {
      r.doc_lengths.push_back(1 + static_cast<std::int64_t>(rng() % (4 * r.max_tokens_per_rank)));
    }
    SCOPED_TRACE("batch " + std::to_string(i) + ", W = " + std::to_string(r.world_size));
    Result<Schedule> hybrid = run_schedule_strategy("hybrid", r);
    ASSERT_TRUE(hybrid) << hybrid.status().message();
    ASSERT_TRUE(validate_schedule(r, *hybrid));
    const double step = evaluate_schedule(r, *hybrid).step_seconds;
    for (const char* baseline : {"fixed", "megatron_dcp"}) {
      Result<Schedule> other = run_schedule_strategy(baseline, r);
      if (!other || !other->fallback_reason.empty()) continue;
      EXPECT_LE(step, evaluate_schedule(r, *other).step_seconds * (1 + 1e-12)) << baseline;
      ++compared;
    }
  }
  EXPECT_GT(compared, 40);
}

}  // namespace
}  // namespace fulcrum
