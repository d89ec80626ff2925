// hybrid's search (rule 7, schedule_hybrid_search.cpp): the slot that ends
// last re-placed on ranks that span fewer nodes. The schedule it returns is
// checked by validate_schedule and priced again by evaluate_schedule on its
// expanded plans, apart from the lengths the search kept. Also rule 10's
// moves on random tails: undone moves leave rows as planned, and the search
// given the caller's copy of the planned schedule matches the one making
// its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "strategies/schedule_hybrid_draft.h"
#include "strategies/schedule_hybrid_refine.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

// 8 ranks, 4 to a node, K/V a thousand times slower between nodes. Wave
// 0: ranks 1, 2, 3, 6 and 7 run a long row each, ranks 4 and 5 a short
// one, rank 0 nothing. Wave 1: a 2T-token document on ranks 0 and 4, over
// both nodes. Ranks 4 and 5 free up together, one node: the document
// belongs there, and the g ranks that free up first (0 and 4, where it is)
// never reach it.
struct Tail {
  ScheduleRequest request;
  Schedule schedule;
  std::vector<double> length;
};

Tail two_node_tail(std::int32_t ranks_per_node) {
  Tail t;
  ScheduleRequest& r = t.request;
  r.world_size = 8;
  r.max_tokens_per_rank = 1024;
  r.block_size = 128;
  r.mask = MaskSpec::causal();
  r.profile.name = "test";
  r.profile.tile_seconds = 1e-4;
  r.profile.kv_bytes_per_token = 1e6;
  r.profile.intra_node_bytes_per_second = 1e12;
  r.profile.inter_node_bytes_per_second = 1e9;
  r.profile.ranks_per_node = ranks_per_node;
  r.doc_lengths = {2048};
  const std::vector<std::pair<std::int32_t, std::int64_t>> rows = {
      {1, 1024}, {2, 1024}, {3, 1024}, {4, 128}, {5, 128}, {6, 1024}, {7, 1024}};
  for (const auto& [rank, len] : rows) {
    ScheduleSlot slot;
    slot.ranks = {rank};
    slot.pieces = {{static_cast<std::int64_t>(r.doc_lengths.size()), 0, len}};
    r.doc_lengths.push_back(len);
    t.schedule.slots.push_back(slot);
  }
  ScheduleSlot tail;
  tail.ranks = {0, 4};
  tail.pieces = {{0, 0, 2048}};
  tail.wave = 1;
  t.schedule.slots.push_back(tail);
  for (ScheduleSlot& slot : t.schedule.slots) {
    const Result<double> len = hybrid::plan_slot_compact(r, slot);
    EXPECT_TRUE(len.is_ok());
    t.length.push_back(len.is_ok() ? *len : 0.0);
  }
  return t;
}

std::int32_t nodes_of(const ScheduleSlot& slot, std::int32_t per_node) {
  std::vector<std::int32_t> nodes;
  for (const std::int32_t r : slot.ranks) nodes.push_back(r / per_node);
  std::sort(nodes.begin(), nodes.end());
  return static_cast<std::int32_t>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

double searched_step(Tail& t, double& before) {
  before = hybrid::step_of_lengths(t.request, t.schedule, t.length);
  const hybrid::SlotPlanner plan = [](const ScheduleRequest& r, ScheduleSlot& slot,
                                      double ceiling) {
    return hybrid::plan_slot_compact(r, slot, ceiling);
  };
  EXPECT_TRUE(hybrid::improve_on_timeline(t.request, t.schedule, t.length, plan, 1 << 24).is_ok());
  const double step = hybrid::step_of_lengths(t.request, t.schedule, t.length);
  // Each compact slot's record is its own rule's, as planning it afresh
  // gives (a move undone must undo the record with the pieces).
  for (const ScheduleSlot& slot : t.schedule.slots) {
    ScheduleSlot again = slot;
    again.plan = {};
    EXPECT_TRUE(hybrid::plan_slot_compact(t.request, again).is_ok());
    EXPECT_EQ(again.plan.strategy_used, slot.plan.strategy_used);
    EXPECT_EQ(again.plan.shard_len, slot.plan.shard_len);
    EXPECT_EQ(again.plan.cp_size, slot.plan.cp_size);
  }
  Schedule expanded = t.schedule;
  for (ScheduleSlot& slot : expanded.slots) {
    EXPECT_TRUE(hybrid::expand_slot_plan(t.request, slot).is_ok());
  }
  EXPECT_TRUE(validate_schedule(t.request, expanded).is_ok());
  EXPECT_NEAR(evaluate_schedule(t.request, expanded).step_seconds, step, 1e-9 * step);
  return step;
}

const ScheduleSlot& slot_of_doc0(const Schedule& schedule) {
  for (const ScheduleSlot& slot : schedule.slots) {
    for (const DocPiece& p : slot.pieces) {
      if (p.doc == 0) return slot;
    }
  }
  ADD_FAILURE() << "document 0 is in no slot";
  return schedule.slots.front();
}

TEST(HybridSearch, LastSlotMovesOntoRanksOfOneNode) {
  Tail t = two_node_tail(4);
  double before = 0;
  const double step = searched_step(t, before);
  const ScheduleSlot& slot = slot_of_doc0(t.schedule);
  EXPECT_EQ(nodes_of(slot, 4), 1);
  // Ranks 4 and 5 free up together and before every rank but 0: the slot
  // starts no later there, and its K/V stays inside the node.
  EXPECT_EQ(slot.ranks, (std::vector<std::int32_t>{4, 5}));
  EXPECT_LT(step, 0.5 * before);
}

// On one node no rank set spans fewer nodes: the search's other moves
// alone, the step no later, the schedule valid and priced as kept.
TEST(HybridSearch, OneNodeKeepsTheSearchValid) {
  Tail t = two_node_tail(8);
  double before = 0;
  const double step = searched_step(t, before);
  EXPECT_LE(step, before);
  EXPECT_EQ(nodes_of(slot_of_doc0(t.schedule), 8), 1);
}

// Rule 10's tail moves (schedule_hybrid_refine.cpp). Two ranks: rank 0 runs
// two full rows of four 256-token pieces, rank 1 one row of two. Moving
// whole rows ends at six pieces' time at best (a row of four joins rank 1);
// moving pieces evens the ranks at five pieces each, the least any split of
// ten equal pieces over two ranks allows. K/V is so slow that no slot over
// both ranks can help. The schedule stays valid and priced as kept.
TEST(HybridSearch, TailPiecesMoveToTheRankThatEndsFirst) {
  Tail t;
  ScheduleRequest& r = t.request;
  r.world_size = 2;
  r.max_tokens_per_rank = 1024;
  r.block_size = 128;
  r.mask = MaskSpec::causal();
  r.profile.name = "test";
  r.profile.tile_seconds = 1e-4;
  r.profile.kv_bytes_per_token = 1e6;
  r.profile.intra_node_bytes_per_second = 1e6;
  r.profile.inter_node_bytes_per_second = 1e6;
  r.profile.ranks_per_node = 2;
  const std::vector<std::pair<std::int32_t, int>> rows = {{0, 4}, {0, 4}, {1, 2}};
  std::vector<std::int32_t> wave(2, 0);
  for (const auto& [rank, pieces] : rows) {
    ScheduleSlot slot;
    slot.ranks = {rank};
    slot.wave = wave[static_cast<std::size_t>(rank)]++;
    for (int k = 0; k < pieces; ++k) {
      slot.pieces.push_back({static_cast<std::int64_t>(r.doc_lengths.size()), 0, 256});
      r.doc_lengths.push_back(256);
    }
    t.schedule.slots.push_back(slot);
  }
  for (ScheduleSlot& slot : t.schedule.slots) {
    const Result<double> len = hybrid::plan_slot_compact(r, slot);
    ASSERT_TRUE(len.is_ok());
    t.length.push_back(*len);
  }
  ScheduleSlot one;
  one.ranks = {0};
  one.pieces = {{0, 0, 256}};
  const Result<double> piece = hybrid::plan_slot_compact(r, one);
  ASSERT_TRUE(piece.is_ok());
  double before = 0;
  const double step = searched_step(t, before);
  EXPECT_NEAR(before, 8 * *piece, 1e-12);
  EXPECT_NEAR(step, 5 * *piece, 1e-12);
}

// Found by `fulcrum schedule`: on this request rule 10 tries a piece swap
// and undoes it, and the rows' plan records must be undone with their
// pieces, or the answer carries a row's shard_len that cannot hold another
// row. The schedule hybrid returns is valid as returned, and planning it
// again from its records gives the same steps.
TEST(HybridSearch, UndoneSwapsLeaveValidRecords) {
  ScheduleRequest r;
  r.world_size = 2;
  r.max_tokens_per_rank = 128;
  r.doc_lengths = {100, 20};
  r.profile.name = "test_profile";
  r.profile.tile_seconds = 2.0e-4;
  r.profile.token_seconds = 1.0e-7;
  r.profile.slot_seconds = 6.6e-3;
  r.profile.kv_bytes_per_token = 512;
  r.profile.intra_node_bytes_per_second = 3.3e9;
  r.profile.inter_node_bytes_per_second = 1.0e9;
  r.profile.latency_seconds = 9.0e-4;
  r.profile.ranks_per_node = 4;
  for (const bool compact : {false, true}) {
    r.compact = compact;
    const Result<Schedule> s = run_schedule_strategy("hybrid", r);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    if (!compact) {
      const Status valid = validate_schedule(r, *s);
      EXPECT_TRUE(valid.is_ok()) << valid.message();
    }
    for (const ScheduleSlot& slot : s->slots) {
      std::int64_t tokens = 0;
      for (const DocPiece& p : slot.pieces) tokens += p.length;
      EXPECT_GE(slot.plan.shard_len * slot.plan.cp_size, tokens) << "compact " << compact;
    }
  }
}

// The one-rank rows of a random tail: on every rank, `least` to least + 2
// rows in waves from `first_wave`, each of 1 to `most_pieces` pieces of
// `shortest` to shortest + spread - 1 tokens, each piece a document.
struct RowShape {
  int least;
  std::int32_t first_wave;
  int most_pieces;
  std::int64_t shortest;
  std::int64_t spread;
};

void add_one_rank_rows(std::mt19937_64& rng, Tail& t, const RowShape& shape) {
  ScheduleRequest& r = t.request;
  for (std::int32_t a = 0; a < r.world_size; ++a) {
    const auto rows = static_cast<int>(shape.least + static_cast<int>(rng() % 3));
    for (int k = 0; k < rows; ++k) {
      ScheduleSlot row;
      row.ranks = {a};
      row.wave = shape.first_wave + k;
      const auto pieces =
          static_cast<int>(1 + rng() % static_cast<std::uint64_t>(shape.most_pieces));
      for (int p = 0; p < pieces; ++p) {
        const auto len = static_cast<std::int64_t>(
            shape.shortest +
            static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(shape.spread)));
        row.pieces.push_back({static_cast<std::int64_t>(r.doc_lengths.size()), 0, len});
        r.doc_lengths.push_back(len);
      }
      t.schedule.slots.push_back(row);
    }
  }
}

// Every slot of the tail planned (rule 5), its length kept.
void plan_every_slot(Tail& t) {
  for (ScheduleSlot& slot : t.schedule.slots) {
    const Result<double> len = hybrid::plan_slot_compact(t.request, slot);
    EXPECT_TRUE(len.is_ok());
    t.length.push_back(len.is_ok() ? *len : 0.0);
  }
}

// A random tail for the narrowed slot (rule 10): 4 ranks a node, a slot of
// one long document over a whole node and part of the next, and one-rank
// rows of a few pieces on the other ranks; K/V slow between nodes.
Tail narrowing_tail(std::mt19937_64& rng) {
  Tail t;
  ScheduleRequest& r = t.request;
  r.world_size = 12;
  r.max_tokens_per_rank = 1024;
  r.block_size = 128;
  r.mask = MaskSpec::causal();
  r.profile.name = "test";
  r.profile.tile_seconds = 1e-4;
  r.profile.slot_seconds = 1e-3 * static_cast<double>(rng() % 3);
  r.profile.kv_bytes_per_token = 1e3 * static_cast<double>(1 + rng() % 1000);
  r.profile.intra_node_bytes_per_second = 1e11;
  r.profile.inter_node_bytes_per_second = 1e8 * static_cast<double>(1 + rng() % 100);
  r.profile.ranks_per_node = 4;
  const auto g = static_cast<std::int32_t>(5 + rng() % 3);  // node 0 whole, 1 to 3 of node 1
  ScheduleSlot wide;
  for (std::int32_t a = 0; a < g; ++a) wide.ranks.push_back(a);
  const auto doc = static_cast<std::int64_t>(1024 + rng() % 3072);
  wide.pieces = {{0, 0, doc}};
  r.doc_lengths.push_back(doc);
  t.schedule.slots.push_back(wide);
  add_one_rank_rows(rng, t, {0, 1, 3, 64, 256});
  plan_every_slot(t);
  return t;
}

// The search given the caller's copy of the planned schedule (plan_compact
// keeps it; the narrowed schedule is copied from it only where tried)
// against the search making its own copy first: the same slots planned in
// the same order with the same ceilings, and the same schedule and lengths
// bit for bit. Token budgets from none to ample, so that the narrowed slot
// is tried, refused by its rank-seconds, or out of budget.
TEST(HybridSearch, CallersPlannedCopyEqualsTheSearchsOwn) {
  std::mt19937_64 rng(20261126);
  int narrowed_won = 0;
  int narrowed_tried = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Tail t = narrowing_tail(rng);
    const std::int64_t budgets[] = {0, 2048, 1 << 14, 1 << 24};
    const std::int64_t budget = budgets[trial % 4];
    std::vector<std::string> calls[2];
    Tail out[2] = {t, t};
    for (int way = 0; way < 2; ++way) {
      const hybrid::SlotPlanner plan = [&calls, way](const ScheduleRequest& r, ScheduleSlot& slot,
                                                     double ceiling) {
        std::string call = std::to_string(std::bit_cast<std::uint64_t>(ceiling)) + ":";
        for (const std::int32_t a : slot.ranks) call += std::to_string(a) + ",";
        for (const DocPiece& p : slot.pieces) call += std::to_string(p.doc) + ";";
        calls[way].push_back(call);
        return hybrid::plan_slot_compact(r, slot, ceiling);
      };
      const Status st =
          way == 0
              ? hybrid::improve_on_timeline(t.request, out[0].schedule, out[0].length, plan, budget)
              : hybrid::improve_on_timeline(t.request, t.schedule, t.length, out[1].schedule,
                                            out[1].length, plan, budget);
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_EQ(calls[0], calls[1]);
    ASSERT_EQ(out[0].length, out[1].length);
    ASSERT_EQ(out[0].schedule.slots.size(), out[1].schedule.slots.size());
    for (std::size_t k = 0; k < out[0].schedule.slots.size(); ++k) {
      const ScheduleSlot& a = out[0].schedule.slots[k];
      const ScheduleSlot& b = out[1].schedule.slots[k];
      ASSERT_EQ(a.ranks, b.ranks);
      ASSERT_EQ(a.wave, b.wave);
      ASSERT_EQ(a.pieces.size(), b.pieces.size());
      for (std::size_t j = 0; j < a.pieces.size(); ++j) {
        ASSERT_EQ(a.pieces[j].doc, b.pieces[j].doc);
        ASSERT_EQ(a.pieces[j].offset, b.pieces[j].offset);
        ASSERT_EQ(a.pieces[j].length, b.pieces[j].length);
      }
      ASSERT_EQ(a.plan.strategy_used, b.plan.strategy_used);
      ASSERT_EQ(a.plan.shard_len, b.plan.shard_len);
      ASSERT_EQ(a.member_weights, b.member_weights);
    }
    // The narrowed slot planned (a call on node 0's ranks alone for
    // document 0), and kept.
    const bool tried = std::any_of(calls[0].begin(), calls[0].end(), [](const std::string& c) {
      return c.find(":0,1,2,3,0;") != std::string::npos;
    });
    narrowed_tried += tried ? 1 : 0;
    narrowed_won += slot_of_doc0(out[0].schedule).ranks == std::vector<std::int32_t>{0, 1, 2, 3};
  }
  EXPECT_GT(narrowed_tried, 50);
  EXPECT_GT(narrowed_won, 20);
}

// A random tail of one-rank rows alone: 2 to 6 ranks, each with a few rows
// of a few pieces, a row's fixed cost up to a few pieces' work (a piece
// moved as a row of its own pays it, which rule 10's filter leaves out, so
// that many moves are priced and undone).
Tail rows_tail(std::mt19937_64& rng) {
  Tail t;
  ScheduleRequest& r = t.request;
  r.world_size = static_cast<std::int32_t>(2 + rng() % 5);
  r.max_tokens_per_rank = 1024;
  r.block_size = 128;
  r.mask = MaskSpec::causal();
  r.profile.name = "test";
  r.profile.tile_seconds = 1e-4;
  r.profile.token_seconds = 1e-7;
  r.profile.slot_seconds = 1e-3 * static_cast<double>(rng() % 6);
  r.profile.kv_bytes_per_token = 1e4;
  r.profile.intra_node_bytes_per_second = 1e10;
  r.profile.inter_node_bytes_per_second = 1e9;
  r.profile.ranks_per_node = 8;
  add_one_rank_rows(rng, t, {1, 0, 4, 32, 224});
  plan_every_slot(t);
  return t;
}

// Rule 10's moves change rows in place and undo the moves they do not keep
// (the piece put back where it was, the plan records set aside put back):
// on random tails, every document's pieces are each in exactly one slot
// after the search, and every slot's length and plan record are those of
// planning it afresh, bit for bit.
TEST(HybridSearch, UndoneTailMovesLeaveRowsAsPlanned) {
  std::mt19937_64 rng(20261129);
  std::int64_t rows_checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Tail t = trial % 2 == 0 ? narrowing_tail(rng) : rows_tail(rng);
    const hybrid::SlotPlanner plan = [](const ScheduleRequest& r, ScheduleSlot& slot,
                                        double ceiling) {
      return hybrid::plan_slot_compact(r, slot, ceiling);
    };
    ASSERT_TRUE(
        hybrid::improve_on_timeline(t.request, t.schedule, t.length, plan, 1 << 24).is_ok());
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::vector<int> seen(t.request.doc_lengths.size(), 0);
    ASSERT_EQ(t.length.size(), t.schedule.slots.size());
    for (std::size_t k = 0; k < t.schedule.slots.size(); ++k) {
      const ScheduleSlot& slot = t.schedule.slots[k];
      for (const DocPiece& p : slot.pieces) {
        ++seen[static_cast<std::size_t>(p.doc)];
        ASSERT_EQ(p.offset, 0);
        ASSERT_EQ(p.length, t.request.doc_lengths[static_cast<std::size_t>(p.doc)]);
      }
      ScheduleSlot again = slot;
      again.plan = {};
      again.member_weights = {1.0};
      const Result<double> len = hybrid::plan_slot_compact(t.request, again);
      ASSERT_TRUE(len.is_ok());
      ASSERT_EQ(*len, t.length[k])
          << "slot " << k << " pieces " << slot.pieces.size() << " ranks " << slot.ranks.size();
      ASSERT_EQ(again.plan.strategy_used, slot.plan.strategy_used) << "slot " << k;
      ASSERT_EQ(again.plan.shard_len, slot.plan.shard_len) << "slot " << k;
      ASSERT_EQ(again.plan.cp_size, slot.plan.cp_size) << "slot " << k;
      ASSERT_EQ(again.member_weights, slot.member_weights) << "slot " << k;
      rows_checked += slot.ranks.size() == 1 ? 1 : 0;
    }
    for (std::size_t d = 0; d < seen.size(); ++d) ASSERT_EQ(seen[d], 1) << "document " << d;
  }
  EXPECT_GT(rows_checked, 1000);
}
}  // namespace
}  // namespace fulcrum
