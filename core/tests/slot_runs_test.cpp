// Run pricing (fulcrum/core/slot_runs.h) against the position-based
// evaluate_slot and compute_work: on thousands of random slots (every dense
// mask, g from 1 to 64, block sizes from 1 to 512, rows from one token to
// hundreds of thousands, plans of random runs of positions and padding in
// random order), every member's tokens, tiles, bytes, peers and times are
// exactly equal, and the schedules' timelines too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "../slot_runs_counts.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/slot_runs.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "slot_runs_reference.h"

namespace fulcrum {
namespace {

// The same double, bit for bit.
bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::int64_t below(std::mt19937_64& rng, std::int64_t bound) {
  return static_cast<std::int64_t>(draw_below(rng, static_cast<std::uint64_t>(bound)));
}

// Log-uniform in [lo, hi].
std::int64_t log_uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  const double u = static_cast<double>(below(rng, 1 << 20)) / (1 << 20);
  const double v = std::exp(std::log(static_cast<double>(lo)) +
                            u * (std::log(static_cast<double>(hi)) - std::log(lo)));
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(v), lo, hi);
}

MaskSpec random_mask(std::mt19937_64& rng, std::int64_t n) {
  MaskSpec mask;
  switch (below(rng, 4)) {
    case 0:
      mask.kind = MaskKind::kCausal;
      break;
    case 1:
      mask.kind = MaskKind::kFull;
      break;
    case 2:
      mask.kind = MaskKind::kSliding;
      mask.param = log_uniform(rng, 1, 2 * n);
      break;
    default:
      mask.kind = MaskKind::kPrefix;
      mask.param = below(rng, 3) == 0 ? 0 : log_uniform(rng, 1, 2 * n);
      break;
  }
  return mask;
}

// A random plan of the row [0, n) over g members: the row cut into chunks
// (some block-aligned, some of any length), dealt in random order to random
// members, with pad runs of random length between them and padding to the
// longest member at the end.
RunShardPlan random_runs(std::mt19937_64& rng, std::int64_t n, std::int32_t g, std::int64_t b) {
  std::vector<PositionRun> chunks;
  const std::int64_t scale = log_uniform(rng, 1, std::max<std::int64_t>(1, n / g));
  for (std::int64_t x = 0; x < n;) {
    std::int64_t len = below(rng, 2) == 0 ? b - x % b : 1 + below(rng, 2 * scale);
    len = std::min(len, n - x);
    chunks.push_back({x, len});
    x += len;
  }
  // Shuffle part of the chunks, keep others in order (consecutive chunks on
  // one member join into longer runs of the plan).
  for (std::size_t i = chunks.size(); i > 1; --i) {
    if (below(rng, 3) == 0) std::swap(chunks[i - 1], chunks[below(rng, i)]);
  }
  std::vector<std::vector<PositionRun>> member(static_cast<std::size_t>(g));
  const bool one_heavy = below(rng, 4) == 0;
  for (const PositionRun& c : chunks) {
    const std::int64_t m = one_heavy && below(rng, 2) == 0 ? 0 : below(rng, g);
    auto& runs = member[static_cast<std::size_t>(m)];
    if (below(rng, 6) == 0) runs.push_back({kPadPosition, 1 + below(rng, 2 * b)});
    runs.push_back(c);
  }
  RunShardPlan plan;
  plan.ranks = g;
  plan.rank_offset.push_back(0);
  for (const auto& runs : member) {
    std::int64_t len = 0;
    for (const PositionRun& r : runs) len += r.length;
    plan.shard_len = std::max(plan.shard_len, len);
    plan.runs.insert(plan.runs.end(), runs.begin(), runs.end());
    plan.rank_offset.push_back(static_cast<std::int64_t>(plan.runs.size()));
  }
  plan.shard_len += below(rng, 3);
  return plan;
}

struct RandomSlot {
  ScheduleRequest request;
  ScheduleSlot slot;
  RunShardPlan runs;
};

// Both floors (peers alone, and with the exchange) as the reference's, bit
// for bit.
void expect_floors_as_reference(const RandomSlot& s) {
  for (const bool exchange : {false, true}) {
    EXPECT_TRUE(same(reference::slot_end_floor_runs(s.request, s.slot, s.runs, exchange),
                     slot_end_floor_runs(s.request, s.slot, s.runs, exchange)))
        << "exchange floor " << exchange;
  }
}

RandomSlot random_slot(std::mt19937_64& rng, bool long_row) {
  RandomSlot out;
  ScheduleRequest& r = out.request;
  const auto g = static_cast<std::int32_t>(below(rng, 5) == 0 ? 1 : 1 + below(rng, 64));
  r.world_size = g + static_cast<std::int32_t>(below(rng, 64));
  r.block_size = below(rng, 3) == 0 ? 128 : log_uniform(rng, 1, 512);
  r.profile = *builtin_cost_profile(below(rng, 2) == 0 ? "h100_7b" : "cpu_gloo");
  r.profile.ranks_per_node = static_cast<std::int32_t>(1 + below(rng, 16));
  r.profile.inter_node_bytes_per_second = 1e9 * static_cast<double>(1 + below(rng, 100));
  // The overlap term (0 to 1 of the exchange hidden under compute) too.
  r.profile.exchange_overlap =
      below(rng, 3) == 0 ? 0.0 : static_cast<double>(below(rng, 101)) / 100;
  // And the row term (each member's compute grows with the slot's tokens),
  // which the builtin profiles leave at 0.
  r.profile.row_token_seconds =
      below(rng, 3) == 0 ? 0.0 : 1e-10 * static_cast<double>(1 + below(rng, 100));
  const std::int64_t n = long_row ? log_uniform(rng, 1 << 16, 1 << 19) : log_uniform(rng, 1, 20000);
  const auto docs = 1 + below(rng, below(rng, 2) == 0 ? 4 : 64);
  std::int64_t left = n;
  for (std::int64_t d = 0; d < docs && left > 0; ++d) {
    const std::int64_t len = d + 1 == docs ? left : 1 + below(rng, left);
    r.doc_lengths.push_back(len);
    out.slot.pieces.push_back({d, 0, len});
    left -= len;
  }
  if (left > 0) {
    r.doc_lengths.back() += left;
    out.slot.pieces.back().length += left;
  }
  r.mask = random_mask(rng, n);
  r.max_tokens_per_rank = n;
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(r.world_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  portable_shuffle(ranks, rng);
  out.slot.ranks.assign(ranks.begin(), ranks.begin() + g);
  out.runs = random_runs(rng, n, g, r.block_size);
  out.slot.plan = materialize_runs(out.runs);
  // And the partial-tile term (0 to twice a tile's price on top of it),
  // which the builtin profiles leave at 0.
  r.profile.partial_tile_seconds =
      below(rng, 3) == 0 ? 0.0
                         : r.profile.tile_seconds * static_cast<double>(below(rng, 201)) / 100;
  return out;
}

// `partial`: whether both counted partial tiles (the run pricing does only
// under a profile that prices them).
void expect_same(const SlotCost& want, const SlotCost& got, bool partial = true) {
  ASSERT_EQ(want.members.size(), got.members.size());
  EXPECT_EQ(want.start_seconds, got.start_seconds);
  EXPECT_EQ(want.end_seconds, got.end_seconds);
  for (std::size_t m = 0; m < want.members.size(); ++m) {
    const SlotMemberCost& a = want.members[m];
    const SlotMemberCost& b = got.members[m];
    EXPECT_EQ(a.rank, b.rank) << "member " << m;
    EXPECT_EQ(a.tokens, b.tokens) << "member " << m;
    EXPECT_EQ(a.tiles, b.tiles) << "member " << m;
    if (partial) {
      EXPECT_EQ(a.partial_tiles, b.partial_tiles) << "member " << m;
    }
    EXPECT_EQ(a.bytes_received, b.bytes_received) << "member " << m;
    EXPECT_EQ(a.bytes_sent, b.bytes_sent) << "member " << m;
    EXPECT_EQ(a.peers, b.peers) << "member " << m;
    EXPECT_EQ(a.compute_seconds, b.compute_seconds) << "member " << m;
    EXPECT_EQ(a.comm_seconds, b.comm_seconds) << "member " << m;
  }
}

TEST(SlotRuns, PricedFromRunsExactlyAsFromPositions) {
  std::mt19937_64 rng(20261126);
  std::int64_t multi = 0;
  std::int64_t lifted = 0;
  std::int64_t full_tiles = 0;
  std::int64_t partial_tiles = 0;
  for (int i = 0; i < 3000; ++i) {
    const RandomSlot s = random_slot(rng, i % 100 == 99);
    const SlotCost want = evaluate_slot(s.request, s.slot);
    ScheduleSlot no_plan = s.slot;
    no_plan.plan = ShardPlan{};  // the run path must not read it
    const SlotCost got = evaluate_slot_runs(s.request, no_plan, s.runs);
    SCOPED_TRACE("slot " + std::to_string(i) + ", g = " + std::to_string(s.runs.ranks) + ", B = " +
                 std::to_string(s.request.block_size) + ", mask " + mask_to_string(s.request.mask));
    expect_same(want, got, s.request.profile.partial_tile_seconds != 0);
    // The floor never passes the price, and its peers' latency lifts it
    // above the compute alone on most slots that exchange.
    const double floor = slot_end_floor_runs(s.request, no_plan, s.runs);
    EXPECT_LE(floor, got.end_seconds);
    double compute = 0;
    for (const SlotMemberCost& m : got.members) compute = std::max(compute, m.compute_seconds);
    lifted += floor > compute ? 1 : 0;
    std::vector<std::int64_t> full;
    std::vector<std::int64_t> counted_full;
    const std::vector<RankWork> work =
        compute_work(slot_workload(s.request, s.slot), s.slot.plan, &full);
    const std::vector<RankWork> counted =
        run_tokens_and_tiles(slot_workload(s.request, s.slot), s.runs, &counted_full);
    for (std::size_t m = 0; m < work.size(); ++m) {
      EXPECT_EQ(work[m].tokens, counted[m].tokens);
      EXPECT_EQ(work[m].tiles, counted[m].tiles);
      EXPECT_EQ(full[m], counted_full[m]) << "member " << m;
      full_tiles += full[m];
      partial_tiles += work[m].tiles - full[m];
    }
    multi += s.runs.ranks > 1 && want.end_seconds > 0 ? 1 : 0;
    if (HasFailure()) return;
  }
  EXPECT_GT(multi, 2000);  // most slots exchange K/V: the comparison covers communication
  EXPECT_GT(lifted, 1000);
  // Both kinds of tile are common: the comparison covers each.
  EXPECT_GT(full_tiles, 100000);
  EXPECT_GT(partial_tiles, 100000);
}

// The counting against the one it replaced (slot_runs_reference.h) on
// random plans of any shape (chunks of any length dealt in any order, pad
// runs between them): tokens, tiles, the exact price and both floors, bit
// for bit (memcmp: 0.0 and -0.0 differ).
TEST(SlotRuns, CountedAsTheReferenceBitForBit) {
  std::mt19937_64 rng(20261128);
  for (int i = 0; i < 2000; ++i) {
    const RandomSlot s = random_slot(rng, i % 100 == 99);
    SCOPED_TRACE("slot " + std::to_string(i) + ", g = " + std::to_string(s.runs.ranks));
    const CpWorkload w = slot_workload(s.request, s.slot);
    const std::vector<RankWork> want_work = reference::run_tokens_and_tiles(w, s.runs);
    const std::vector<RankWork> got_work = run_tokens_and_tiles(w, s.runs);
    for (std::size_t m = 0; m < want_work.size(); ++m) {
      EXPECT_EQ(want_work[m].tokens, got_work[m].tokens);
      EXPECT_EQ(want_work[m].tiles, got_work[m].tiles);
    }
    const SlotCost want = reference::evaluate_slot_runs(s.request, s.slot, s.runs);
    const SlotCost got = evaluate_slot_runs(s.request, s.slot, s.runs);
    expect_same(want, got, s.request.profile.partial_tile_seconds != 0);
    for (std::size_t m = 0; m < want.members.size(); ++m) {
      EXPECT_TRUE(same(want.members[m].comm_seconds, got.members[m].comm_seconds));
    }
    expect_floors_as_reference(s);
    if (HasFailure()) return;
  }
}

// count_runs given the members' tokens and tiles (walking only what each
// member touches, run by run) against count_runs walking every local block:
// the same counts, touched intervals included, and so the same floors and
// prices bit for bit.
TEST(SlotRuns, CountedWithGivenWorkAsByTheWalk) {
  std::mt19937_64 rng(20261129);
  std::int64_t touched = 0;
  std::int64_t given = 0;
  for (int i = 0; i < 2000; ++i) {
    RandomSlot s = random_slot(rng, i % 100 == 99);
    // Half the slots under a profile without the partial-tile term, where
    // the given work is used; under one with it, count_runs walks the runs
    // for the full tiles the given work lacks.
    if (i % 2 == 0) s.request.profile.partial_tile_seconds = 0;
    given += s.request.profile.partial_tile_seconds == 0 ? 1 : 0;
    SCOPED_TRACE("slot " + std::to_string(i) + ", g = " + std::to_string(s.runs.ranks));
    const CpWorkload w = slot_workload(s.request, s.slot);
    const CountedRuns want = count_runs(s.request, s.slot, s.runs);
    const CountedRuns got = count_runs(s.request, s.slot, s.runs, run_tokens_and_tiles(w, s.runs));
    const detail::SlotRunsCounts& a = *want.counts;
    const detail::SlotRunsCounts& b = *got.counts;
    ASSERT_EQ(a.work.size(), b.work.size());
    for (std::size_t m = 0; m < a.work.size(); ++m) {
      EXPECT_EQ(a.work[m].tokens, b.work[m].tokens) << "member " << m;
      EXPECT_EQ(a.work[m].tiles, b.work[m].tiles) << "member " << m;
      EXPECT_EQ(a.work[m].pairs, b.work[m].pairs) << "member " << m;
    }
    // Under the term both count full tiles (the given work has none), as
    // the positions do; without it neither counts them.
    if (s.request.profile.partial_tile_seconds != 0) {
      std::vector<std::int64_t> full;
      compute_work(w, s.slot.plan, &full);
      EXPECT_EQ(a.full, full);
      EXPECT_EQ(b.full, full);
    } else {
      EXPECT_TRUE(a.full.empty());
      EXPECT_TRUE(b.full.empty());
    }
    EXPECT_EQ(a.touched, b.touched);
    EXPECT_EQ(a.touched_at, b.touched_at);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.block, b.block);
    touched += static_cast<std::int64_t>(a.touched.size());
    const double exact = evaluate_slot_runs(s.request, s.slot, s.runs).end_seconds;
    for (const double beat : {std::numeric_limits<double>::infinity(), exact, exact * 0.9}) {
      const SlotEnd x = slot_end_counted_below(s.request, s.slot, want, beat);
      const SlotEnd y = slot_end_counted_below(s.request, s.slot, got, beat);
      EXPECT_EQ(x.exact, y.exact) << "beat " << beat;
      EXPECT_TRUE(same(x.end, y.end)) << "beat " << beat;
      EXPECT_TRUE(same(x.peers_floor, y.peers_floor)) << "beat " << beat;
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(touched, 20000);  // many members touch several intervals
  EXPECT_GT(given, 1000);
}

// The shared-count path against the two functions it stands for: the same
// floor, the same exact end, and the exact end exactly when the floor is
// below the end to beat, for ends to beat around both.
TEST(SlotRuns, EndBelowIsTheFloorOrTheExactEnd) {
  std::mt19937_64 rng(20261127);
  std::int64_t floored = 0;
  std::int64_t priced = 0;
  for (int i = 0; i < 1500; ++i) {
    const RandomSlot s = random_slot(rng, i % 100 == 99);
    const double exact = evaluate_slot_runs(s.request, s.slot, s.runs).end_seconds;
    const double floor = slot_end_floor_runs(s.request, s.slot, s.runs);
    SCOPED_TRACE("slot " + std::to_string(i) + ", g = " + std::to_string(s.runs.ranks));
    for (const double beat : {std::numeric_limits<double>::infinity(), exact * 1.5, exact, floor,
                              floor * 0.5, (floor + exact) / 2, 0.0}) {
      const SlotEnd got = slot_end_runs_below(s.request, s.slot, s.runs, beat);
      const bool inf = beat == std::numeric_limits<double>::infinity();
      EXPECT_EQ(got.exact, inf || floor < beat) << "beat " << beat;
      EXPECT_EQ(got.end, got.exact ? exact : floor) << "beat " << beat;
      EXPECT_EQ(got.cost.members.size(), got.exact ? s.slot.ranks.size() : 0u) << "beat " << beat;
      if (got.exact) {
        EXPECT_EQ(got.cost.end_seconds, exact) << "beat " << beat;
      }
      floored += got.exact ? 0 : 1;
      priced += got.exact ? 1 : 0;
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(floored, 3000);
  EXPECT_GT(priced, 3000);
}

// A row of many small key blocks over g members, each holding one stretch
// of it, with a few "hot" blocks cut position by position among random
// members: under a causal or full mask the members touch long intervals,
// and a peer latency far above the compute makes the peers floor read the
// most-held block of each. Against the reference, bit for bit, with the
// exchange floor and without.
RandomSlot hot_block_slot(std::mt19937_64& rng) {
  RandomSlot out;
  ScheduleRequest& r = out.request;
  const auto g = static_cast<std::int32_t>(2 + below(rng, 15));
  r.world_size = g;
  r.block_size = 2 + below(rng, 7);
  r.profile = *builtin_cost_profile("h100_7b");
  r.profile.ranks_per_node = static_cast<std::int32_t>(1 + below(rng, 8));
  r.profile.latency_seconds = 1.0;
  const std::int64_t n = log_uniform(rng, 500, 20000);
  const std::int64_t docs = 1 + below(rng, 3);
  std::int64_t left = n;
  for (std::int64_t d = 0; d < docs; ++d) {
    const std::int64_t len = d + 1 == docs ? left : 1 + below(rng, left - (docs - 1 - d));
    r.doc_lengths.push_back(len);
    out.slot.pieces.push_back({d, 0, len});
    left -= len;
  }
  r.mask.kind = below(rng, 2) == 0 ? MaskKind::kCausal : MaskKind::kFull;
  r.max_tokens_per_rank = n;
  std::vector<std::int32_t> owner(static_cast<std::size_t>(n));
  for (std::int64_t x = 0; x < n; ++x)
    owner[static_cast<std::size_t>(x)] = static_cast<std::int32_t>(x * g / n);
  const std::int64_t blocks = ceil_div(n, r.block_size);
  for (std::int64_t hot = 1 + below(rng, 4); hot > 0; --hot) {
    const std::int64_t k = below(rng, blocks);
    for (std::int64_t x = k * r.block_size; x < std::min(n, (k + 1) * r.block_size); ++x) {
      owner[static_cast<std::size_t>(x)] = static_cast<std::int32_t>(below(rng, g));
    }
  }
  RunShardPlan& plan = out.runs;
  plan.ranks = g;
  plan.rank_offset.push_back(0);
  for (std::int32_t m = 0; m < g; ++m) {
    std::int64_t len = 0;
    for (std::int64_t x = 0; x < n; ++x) {
      if (owner[static_cast<std::size_t>(x)] != m) continue;
      if (len > 0 && plan.runs.back().begin + plan.runs.back().length == x) {
        ++plan.runs.back().length;
      } else {
        plan.runs.push_back({x, 1});
      }
      ++len;
    }
    plan.shard_len = std::max(plan.shard_len, len);
    plan.rank_offset.push_back(static_cast<std::int64_t>(plan.runs.size()));
  }
  out.slot.ranks.resize(static_cast<std::size_t>(g));
  std::iota(out.slot.ranks.begin(), out.slot.ranks.end(), 0);
  out.slot.plan = materialize_runs(plan);
  return out;
}

TEST(SlotRuns, PeersFloorFindsTheMostHeldBlockOfLongIntervals) {
  std::mt19937_64 rng(20261130);
  for (int i = 0; i < 600; ++i) {
    const RandomSlot s = hot_block_slot(rng);
    SCOPED_TRACE("slot " + std::to_string(i) + ", g = " + std::to_string(s.runs.ranks));
    expect_floors_as_reference(s);
    if (HasFailure()) return;
  }
}

// One plan's counts floored and then priced, as rule 5 does: the holders'
// offsets counted for the peers floor, their entries only when the exchange
// floor or the price needs them. In every order of those needs, the same
// floors and the same exact price as the reference's, bit for bit.
TEST(SlotRuns, CountsFlooredThenPricedAsTheReference) {
  std::mt19937_64 rng(20261131);
  std::int64_t at_peers = 0;
  for (int i = 0; i < 1500; ++i) {
    const RandomSlot s = i % 2 == 0 ? random_slot(rng, i % 100 == 98) : hot_block_slot(rng);
    SCOPED_TRACE("slot " + std::to_string(i) + ", g = " + std::to_string(s.runs.ranks));
    const double peers = reference::slot_end_floor_runs(s.request, s.slot, s.runs, false);
    const double floor = reference::slot_end_floor_runs(s.request, s.slot, s.runs, true);
    const SlotCost exact = reference::evaluate_slot_runs(s.request, s.slot, s.runs);
    const CountedRuns counted = count_runs(s.request, s.slot, s.runs);
    // The peers floor alone, at an end to beat it reaches: no entries.
    const SlotEnd a = slot_end_counted_below(s.request, s.slot, counted, peers, false);
    EXPECT_FALSE(a.exact);
    EXPECT_TRUE(same(a.end, peers));
    at_peers += a.exact ? 0 : 1;
    // Then the exchange floor, then the price, on the same counts.
    const SlotEnd b = slot_end_counted_below(s.request, s.slot, counted, floor, true);
    EXPECT_TRUE(same(b.end, floor) || b.exact);
    const SlotEnd c = slot_end_counted_below(s.request, s.slot, counted,
                                             std::numeric_limits<double>::infinity(), true);
    ASSERT_TRUE(c.exact);
    expect_same(exact, c.cost, s.request.profile.partial_tile_seconds != 0);
    if (HasFailure()) return;
  }
  EXPECT_GT(at_peers, 1000);
}

// A one-rank slot priced from its pieces (one_rank_row_work,
// one_rank_slot_end) against the generic walk of its one plan, the run
// [0, N) on one member, and against the positions: on random rows of 1 to
// 300 pieces from one token to many blocks (some ending on a block edge,
// many blocks holding several documents), every dense mask, block sizes
// from 1 to 512 and profiles with every term of the compute priced, the
// same tokens and tiles and the same end, bit for bit.
TEST(SlotRuns, OneRankRowPricedFromItsPiecesAsByTheGenericWalk) {
  std::mt19937_64 rng(20261129);
  std::int64_t shared_blocks = 0;  // rows with a block holding two documents or more
  std::int64_t whole_blocks = 0;   // rows with a document covering a whole block
  for (int i = 0; i < 3000; ++i) {
    ScheduleRequest request;
    request.world_size = 1 + static_cast<std::int32_t>(below(rng, 64));
    const std::int64_t b = below(rng, 3) == 0 ? 128 : log_uniform(rng, 1, 512);
    request.block_size = b;
    request.profile = *builtin_cost_profile(below(rng, 2) == 0 ? "h100_7b" : "cpu_gloo");
    request.profile.row_token_seconds = below(rng, 2) == 0 ? 0.0 : 1e-9 * (1 + below(rng, 100));
    request.profile.partial_tile_seconds =
        below(rng, 2) == 0 ? 0.0 : request.profile.tile_seconds * (1 + below(rng, 100)) / 50;
    request.profile.slot_seconds *= static_cast<double>(below(rng, 4));
    ScheduleSlot slot;
    slot.ranks = {static_cast<std::int32_t>(below(rng, request.world_size))};
    const auto docs = 1 + below(rng, below(rng, 2) == 0 ? 8 : 300);
    const std::int64_t scale = log_uniform(rng, 1, 20 * b);
    std::int64_t n = 0;
    bool shared = false;
    bool whole = false;
    for (std::int64_t d = 0; d < docs; ++d) {
      std::int64_t len = 1 + below(rng, scale);
      if (below(rng, 4) == 0) len = b * (1 + below(rng, 4)) - n % b;  // ends on a block edge
      shared = shared || (d > 0 && n % b != 0);  // this document starts inside a block
      whole = whole || ceil_div(n, b) * b + b <= n + len;
      request.doc_lengths.push_back(len);
      slot.pieces.push_back({d, 0, len});
      n += len;
    }
    request.mask = random_mask(rng, n);
    request.max_tokens_per_rank = n;
    const RunShardPlan one{1, n, {{0, n}}, {0, 1}};
    slot.plan = materialize_runs(one);
    SCOPED_TRACE("row " + std::to_string(i) + ", B = " + std::to_string(b) +
                 ", N = " + std::to_string(n) + ", mask " + mask_to_string(request.mask));
    const CpWorkload w = slot_workload(request, slot);
    std::int64_t got_full = -1;
    std::vector<std::int64_t> walked_full;
    std::vector<std::int64_t> positions_full;
    const RankWork got = one_rank_row_work(request, slot, &got_full);
    const RankWork walked = run_tokens_and_tiles(w, one, &walked_full)[0];
    const RankWork positions = compute_work(w, slot.plan, &positions_full)[0];
    EXPECT_EQ(got.tokens, n);
    EXPECT_EQ(got.tokens, walked.tokens);
    EXPECT_EQ(got.tiles, walked.tiles);
    EXPECT_EQ(got.tiles, positions.tiles);
    EXPECT_EQ(got_full, walked_full[0]);
    EXPECT_EQ(got_full, positions_full[0]);
    const double end = one_rank_slot_end(request, slot);
    EXPECT_TRUE(same(end, evaluate_slot_runs(request, slot, one).end_seconds)) << end;
    EXPECT_TRUE(same(end, evaluate_slot(request, slot).end_seconds)) << end;
    shared_blocks += shared ? 1 : 0;
    whole_blocks += whole ? 1 : 0;
    if (HasFailure()) return;
  }
  EXPECT_GT(shared_blocks, 1500);
  EXPECT_GT(whole_blocks, 1500);
}

TEST(SlotRuns, RunsOfAPlanGiveThePlanBack) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    const RandomSlot s = random_slot(rng, false);
    const RunShardPlan runs = runs_of_plan(s.slot.plan);
    const ShardPlan back = materialize_runs(runs);
    EXPECT_EQ(back.positions, s.slot.plan.positions);
    EXPECT_EQ(back.padding, s.slot.plan.padding);
    EXPECT_EQ(back.shard_len, s.slot.plan.shard_len);
    // Maximal runs: no two neighbours of one member could join.
    for (std::int32_t r = 0; r < runs.ranks; ++r) {
      for (std::int64_t k = runs.rank_offset[r] + 1; k < runs.rank_offset[r + 1]; ++k) {
        const PositionRun& a = runs.runs[static_cast<std::size_t>(k - 1)];
        const PositionRun& b = runs.runs[static_cast<std::size_t>(k)];
        const bool both_pad = a.begin == kPadPosition && b.begin == kPadPosition;
        const bool join = a.begin != kPadPosition && b.begin == a.begin + a.length;
        EXPECT_FALSE(both_pad || join);
      }
    }
  }
}

TEST(SlotRuns, ScheduleTimelineEqualsEvaluateSchedule) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 200; ++i) {
    // Slots of one request over a shared world, in random waves.
    RandomSlot first = random_slot(rng, false);
    ScheduleRequest request = first.request;
    request.world_size = 64 + static_cast<std::int32_t>(below(rng, 64));
    Schedule schedule;
    std::vector<RunShardPlan> runs;
    const auto slots = 1 + below(rng, 12);
    for (std::int64_t k = 0; k < slots; ++k) {
      RandomSlot s = random_slot(rng, false);
      // Re-home the slot's pieces as documents of the shared request.
      for (DocPiece& p : s.slot.pieces) {
        p.doc = static_cast<std::int64_t>(request.doc_lengths.size());
        request.doc_lengths.push_back(p.length);
      }
      s.slot.wave = static_cast<std::int32_t>(below(rng, 4));
      for (std::int32_t& r : s.slot.ranks) r = static_cast<std::int32_t>(r % request.world_size);
      std::sort(s.slot.ranks.begin(), s.slot.ranks.end());
      s.slot.ranks.erase(std::unique(s.slot.ranks.begin(), s.slot.ranks.end()), s.slot.ranks.end());
      if (static_cast<std::int32_t>(s.slot.ranks.size()) != s.runs.ranks) continue;
      schedule.slots.push_back(s.slot);
      runs.push_back(s.runs);
    }
    const ScheduleCost want = evaluate_schedule(request, schedule);
    const ScheduleCost got = evaluate_schedule_runs(request, schedule, runs);
    EXPECT_EQ(want.step_seconds, got.step_seconds);
    EXPECT_EQ(want.bytes_moved, got.bytes_moved);
    EXPECT_EQ(want.allgather_bytes, got.allgather_bytes);
    EXPECT_EQ(want.busy_seconds, got.busy_seconds);
    ASSERT_EQ(want.slots.size(), got.slots.size());
    const bool partial = request.profile.partial_tile_seconds != 0;
    for (std::size_t s = 0; s < want.slots.size(); ++s) {
      expect_same(want.slots[s], got.slots[s], partial);
    }
  }
}

}  // namespace
}  // namespace fulcrum
