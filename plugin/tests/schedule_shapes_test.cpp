// Group shapes (ScheduleRequest::group_shapes, ABI 1.2): validate_schedule
// refuses every kind of slot and wave that breaks them, naming it; `hybrid`
// keeps them on random batches (checked by a recount that shares nothing
// with validate_schedule), and the other schedulers answer a shaped request
// only with a schedule that keeps them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/plugin_sdk.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

// Megatron-core's dynamic-CP groups at W ranks: 2^k < 2^floor(log2 W), and
// the world; aligned; every rank in every wave.
GroupShapes megatron_like(std::int32_t world, std::int32_t min_size = 1,
                          std::int32_t multiple = 1) {
  GroupShapes s;
  std::int32_t floor_log = 0;
  while ((std::int64_t{2} << floor_log) <= world) ++floor_log;
  for (std::int32_t k = 0; k < floor_log; ++k) {
    if ((1 << k) >= min_size) s.sizes |= std::uint64_t{1} << k;
  }
  s.world = true;
  s.aligned = true;
  s.every_wave = true;
  s.wave_multiple = multiple;
  return s;
}

ScheduleRequest request_of(std::vector<std::int64_t> docs, std::int32_t world,
                           std::int64_t budget) {
  ScheduleRequest r;
  r.doc_lengths = std::move(docs);
  r.world_size = world;
  r.max_tokens_per_rank = budget;
  r.block_size = 16;
  r.profile = builtin_cost_profile("h100_7b").value();
  return r;
}

ScheduleSlot slot_of(const ScheduleRequest& r, std::vector<std::int32_t> ranks,
                     std::vector<DocPiece> pieces, std::int32_t wave) {
  ScheduleSlot slot;
  slot.ranks = std::move(ranks);
  slot.pieces = std::move(pieces);
  slot.wave = wave;
  slot.plan = contiguous_plan(slot_workload(r, slot));
  return slot;
}

// The recount: sizes, alignment, one slot per (rank, wave), no gap, wave count.
std::string shape_problem(const ScheduleRequest& r, const Schedule& s) {
  const GroupShapes& shapes = r.group_shapes;
  std::int32_t waves = 0;
  for (const ScheduleSlot& slot : s.slots) waves = std::max(waves, slot.wave + 1);
  std::vector<int> count(static_cast<std::size_t>(waves) * r.world_size, 0);
  for (const ScheduleSlot& slot : s.slots) {
    const auto g = static_cast<std::int32_t>(slot.ranks.size());
    bool size_ok = g == r.world_size && shapes.world;
    for (std::int32_t k = 0; k < 21; ++k) {
      if (((shapes.sizes >> k) & 1U) != 0 && (1 << k) == g) size_ok = true;
    }
    if (!size_ok) return "size " + std::to_string(g);
    if (slot.ranks[0] % g != 0) return "unaligned at " + std::to_string(slot.ranks[0]);
    for (std::int32_t i = 0; i < g; ++i) {
      if (slot.ranks[i] != slot.ranks[0] + i) return "not consecutive";
      ++count[static_cast<std::size_t>(slot.wave) * r.world_size + slot.ranks[i]];
    }
  }
  for (std::size_t k = 0; k < count.size(); ++k) {
    if (count[k] != 1)
      return "rank-wave " + std::to_string(k) + " held " + std::to_string(count[k]) + " times";
  }
  if (waves % shapes.wave_multiple != 0) return "waves " + std::to_string(waves);
  return "";
}

TEST(GroupShapes, AllowedGroupsAreTheSetSizesAlignedAndTheWorld) {
  const GroupShapes s = megatron_like(12);  // sizes 1, 2, 4 and 12
  EXPECT_TRUE(group_shape_allowed(s, 12, {4, 5, 6, 7}));
  EXPECT_FALSE(group_shape_allowed(s, 12, {2, 3, 4, 5}));              // unaligned
  EXPECT_FALSE(group_shape_allowed(s, 12, {0, 1, 2, 3, 4, 5, 6, 7}));  // 8 is no size here
  EXPECT_TRUE(group_shape_allowed(s, 12, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_FALSE(group_shape_allowed(s, 12, {1, 0}));  // out of order
  EXPECT_FALSE(group_shape_allowed(s, 12, {0, 1, 2}));
  GroupShapes any;
  EXPECT_TRUE(group_shape_allowed(any, 12, {3, 7, 1}));
}

TEST(GroupShapes, BrokenSchedulesAreRefusedNamingSlotRankOrWave) {
  ScheduleRequest r = request_of({100, 100, 100, 100}, 4, 100);
  r.group_shapes = megatron_like(4, 1, 2);
  const auto piece = [](std::int64_t d) { return DocPiece{d, 0, 100}; };
  Schedule gap;
  gap.slots = {slot_of(r, {0}, {piece(0)}, 0), slot_of(r, {1}, {piece(1)}, 0),
               slot_of(r, {2, 3}, {piece(2)}, 0), slot_of(r, {0, 1}, {piece(3)}, 1)};
  // Wave 1 misses ranks 2 and 3.
  Status status = validate_schedule(r, gap);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("rank 2 holds no slot in wave 1"), std::string::npos)
      << status.message();

  Schedule unaligned;
  unaligned.slots = {slot_of(r, {0}, {piece(0)}, 0), slot_of(r, {1, 2}, {piece(1)}, 0),
                     slot_of(r, {3}, {piece(2), piece(3)}, 0)};
  unaligned.slots[2].plan = contiguous_plan(slot_workload(r, unaligned.slots[2]));
  r.max_tokens_per_rank = 200;
  status = validate_schedule(r, unaligned);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("schedule slot 1 spans 2 ranks from rank 1"), std::string::npos)
      << status.message();

  Schedule one_wave;
  one_wave.slots = {slot_of(r, {0, 1}, {piece(0), piece(1)}, 0),
                    slot_of(r, {2, 3}, {piece(2), piece(3)}, 0)};
  status = validate_schedule(r, one_wave);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("1 waves; the request's group_shapes need a multiple of 2"),
            std::string::npos)
      << status.message();
  r.group_shapes.wave_multiple = 1;
  EXPECT_TRUE(validate_schedule(r, one_wave)) << validate_schedule(r, one_wave).message();
}

TEST(GroupShapes, BadShapesInARequestAreRefused) {
  ScheduleRequest r = request_of({100}, 4, 100);
  r.group_shapes.wave_multiple = 2;  // without every_wave
  EXPECT_FALSE(validate_schedule_request(r));
  r.group_shapes.every_wave = true;
  EXPECT_TRUE(validate_schedule_request(r));
  r.group_shapes.wave_multiple = 0;
  EXPECT_FALSE(validate_schedule_request(r));
  r.group_shapes.wave_multiple = 1;
  r.group_shapes.sizes = std::uint64_t{1} << 40;
  EXPECT_FALSE(validate_schedule_request(r));
}

TEST(GroupShapes, HybridKeepsTheShapesOnRandomBatches) {
  SplitMix64 rng(0x5eed5ba9e);
  int served = 0;
  for (int trial = 0; trial < 160; ++trial) {
    const std::int32_t worlds[] = {2, 4, 6, 8, 10, 12, 16, 24, 32};
    const auto world = static_cast<std::int32_t>(worlds[rng.uniform(0, 8)]);
    const std::int64_t budget = std::int64_t{64} << rng.uniform(0, 4);
    std::vector<std::int64_t> docs(static_cast<std::size_t>(rng.uniform(1, 3 * world)));
    for (std::int64_t& d : docs) {
      d = rng.uniform(0, 3) == 0 ? rng.uniform(1, budget * world) : rng.uniform(1, budget);
    }
    ScheduleRequest r = request_of(docs, world, budget);
    const std::int32_t min_sizes[] = {1, 1, 2, 4};
    const std::int32_t multiples[] = {1, 1, 2, 3};
    r.group_shapes =
        megatron_like(world, min_sizes[rng.uniform(0, 3)], multiples[rng.uniform(0, 3)]);
    Result<Schedule> s = run_schedule_strategy("hybrid", r);
    if (!s) {
      // Refusals say why, as unsupported (a batch too small for the waves).
      EXPECT_EQ(s.status().code(), StatusCode::kUnsupported) << s.status().message();
      continue;
    }
    ++served;
    EXPECT_TRUE(validate_schedule(r, *s)) << validate_schedule(r, *s).message();
    EXPECT_EQ(shape_problem(r, *s), "") << "world " << world << " trial " << trial;
  }
  EXPECT_GT(served, 120);
}

TEST(GroupShapes, OtherSchedulersAnswerOnlyWithinTheShapes) {
  // megatron_dcp at 6 ranks grows a pair to 4 ranks: no group of Megatron's.
  ScheduleRequest r = request_of({150, 150}, 6, 100);
  r.group_shapes = megatron_like(6);
  Result<Schedule> dcp = run_schedule_strategy("megatron_dcp", r);
  if (dcp) {
    EXPECT_EQ(shape_problem(r, *dcp), "");
  } else {
    EXPECT_EQ(dcp.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(dcp.status().message().find("group_shapes"), std::string::npos);
  }
  Result<Schedule> hybrid = run_schedule_strategy("hybrid", r);
  ASSERT_TRUE(hybrid) << hybrid.status().message();
  EXPECT_EQ(shape_problem(r, *hybrid), "");
  // fixed CP groups of 3 ranks: no size Megatron has at 6 ranks.
  r.cp_size = 3;
  r.doc_lengths = {250, 250};
  Result<Schedule> fixed = run_schedule_strategy("fixed", r);
  ASSERT_FALSE(fixed);
  EXPECT_EQ(fixed.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(fixed.status().message().find("fixed cannot keep the request's group_shapes"),
            std::string::npos)
      << fixed.status().message();
}

TEST(GroupShapes, CrossTheAbiOnlyWhenTheRequestIsLongEnough) {
  const std::int64_t docs[] = {100, 50};
  fulcrum_schedule_request c{};
  c.world_size = 4;
  c.max_tokens_per_rank = 100;
  c.doc_lengths = docs;
  c.num_docs = 2;
  c.block_size = 16;
  c.ranks_per_node = 8;
  c.group_sizes = 0b11;
  c.group_flags = FULCRUM_GROUPS_WORLD | FULCRUM_GROUPS_ALIGNED | FULCRUM_GROUPS_EVERY_WAVE;
  c.wave_multiple = 2;
  // A 1.1 host's request ends before the fields: no shapes, whatever follows.
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE;
  Result<ScheduleRequest> old = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(old) << old.status().message();
  EXPECT_FALSE(old->group_shapes.restricts());
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_2_SIZE;
  Result<ScheduleRequest> now = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(now) << now.status().message();
  const GroupShapes& s = now->group_shapes;
  EXPECT_EQ(s.sizes, 0b11U);
  EXPECT_TRUE(s.world && s.aligned && s.every_wave);
  EXPECT_EQ(s.wave_multiple, 2);
  c.group_flags = 8;  // a bit this plugin does not know
  EXPECT_FALSE(sdk::schedule_request_from_c(c));
  c.group_flags = 0;
  c.wave_multiple = -1;
  EXPECT_FALSE(sdk::schedule_request_from_c(c));
}

TEST(ExchangeOverlap, CrossesTheAbiOnlyWhenTheRequestIsLongEnough) {
  const std::int64_t docs[] = {100, 50};
  fulcrum_schedule_request c{};
  c.world_size = 4;
  c.max_tokens_per_rank = 100;
  c.doc_lengths = docs;
  c.num_docs = 2;
  c.block_size = 16;
  c.ranks_per_node = 8;
  c.exchange_overlap = 0.75;
  // A 1.2 host's request ends before the field: no overlap, whatever follows.
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_2_SIZE;
  Result<ScheduleRequest> old = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(old) << old.status().message();
  EXPECT_EQ(old->profile.exchange_overlap, 0.0);
  c.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_3_SIZE;
  Result<ScheduleRequest> now = sdk::schedule_request_from_c(c);
  ASSERT_TRUE(now) << now.status().message();
  EXPECT_EQ(now->profile.exchange_overlap, 0.75);
}

}  // namespace
}  // namespace fulcrum
