// The structures that let hybrid's large answers skip work without changing
// them (issue 25 item 4), each held to a full recount on seeded random
// input: rule 10's ranks by finish (FinishOrder) against a scan of every
// rank; the drafts' LPT heap (LoadHeap) against a scan too; rule 8's best
// fit (best_fit_rows) against the ordered multimap it replaced; a draft's
// rows packed flat (rebalance_packed) against rebalance over lists; the
// drafts made only when planning asks (DraftSet) against their slots'
// costs counted here; and the bound that stops planning a draft early
// (slot_length_lower_bound) against every slot's exact length.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/schedule.h"
#include "schedule_random_inputs.h"
#include "strategies/schedule_hybrid_draft.h"
#include "strategies/schedule_hybrid_draw.h"
#include "strategies/schedule_hybrid_refine.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

// Finishes drawn from a few values, so that ties (which the order breaks by
// rank) are common.
double random_finish(SplitMix64& rng) { return 0.25 * static_cast<double>(rng.uniform(0, 6)); }

// Checks every answer of `order` against a scan of `finish`; the n of
// firsts and the pair left out by latest_without drawn from `rng`.
void expect_finish_order_is_the_scan(hybrid::FinishOrder& order, const std::vector<double>& finish,
                                     std::size_t most_firsts, SplitMix64& rng,
                                     const std::string& where) {
  const std::size_t world = finish.size();
  const auto last =
      static_cast<std::int32_t>(std::max_element(finish.begin(), finish.end()) - finish.begin());
  const auto first =
      static_cast<std::int32_t>(std::min_element(finish.begin(), finish.end()) - finish.begin());
  ASSERT_EQ(order.last(), last) << where;
  ASSERT_EQ(order.first(), first) << where;
  std::vector<std::int32_t> by(world);
  std::iota(by.begin(), by.end(), 0);
  std::sort(by.begin(), by.end(), [&](std::int32_t x, std::int32_t y) {
    return finish[x] < finish[y] || (finish[x] == finish[y] && x < y);
  });
  const std::size_t n = rng.uniform(0, 3) == 0 ? world : std::min(world, most_firsts);
  std::vector<std::int32_t> firsts;
  order.firsts(n, firsts);
  ASSERT_EQ(firsts, std::vector<std::int32_t>(by.begin(), by.begin() + n)) << where;
  const auto a = static_cast<std::int32_t>(rng.uniform(0, world - 1));
  const auto b = rng.uniform(0, 2) == 0 ? a : static_cast<std::int32_t>(rng.uniform(0, world - 1));
  double latest = -std::numeric_limits<double>::infinity();
  for (std::size_t x = 0; x < world; ++x) {
    if (static_cast<std::int32_t>(x) != a && static_cast<std::int32_t>(x) != b) {
      latest = std::max(latest, finish[x]);
    }
  }
  ASSERT_EQ(order.latest_without(a, b), latest) << where << " without " << a << ", " << b;
}

TEST(HybridDraw, FinishOrderIsAFullRecount) {
  SplitMix64 rng(3301);
  for (int c = 0; c < 200; ++c) {
    const auto world = static_cast<std::size_t>(rng.uniform(1, 40));
    std::vector<double> finish(world);
    for (double& f : finish) f = random_finish(rng);
    hybrid::FinishOrder order;
    order.reset(finish);
    // A move before any question: the trees are built after it.
    const auto first_moved = static_cast<std::int32_t>(rng.uniform(0, world - 1));
    finish[first_moved] = random_finish(rng);
    order.set(first_moved, finish[first_moved]);
    for (int move = 0; move < 60; ++move) {
      const std::string where = "case " + std::to_string(c) + " move " + std::to_string(move);
      expect_finish_order_is_the_scan(order, finish, 8, rng, where);
      if (testing::Test::HasFatalFailure()) return;
      // A move: one or two ranks' finishes change.
      const auto a = static_cast<std::int32_t>(rng.uniform(0, world - 1));
      const auto b = static_cast<std::int32_t>(rng.uniform(0, world - 1));
      const double fa = random_finish(rng);
      order.set(a, fa);
      finish[a] = fa;
      if (b != a) {
        const double fb = random_finish(rng);
        order.set(b, fb);
        finish[b] = fb;
      }
    }
  }
}

// A small batch at large W: most ranks idle (finish 0), a few busy, moves
// that make idle ranks busy and busy ones idle again; worlds of up to 700
// ranks (most not a power of two, so that the trees' leaves sit at two
// depths), finishes below 0 and -0 included so that the idle ranks sit
// inside the order.
double sparse_finish(SplitMix64& rng) {
  switch (rng.uniform(0, 9)) {
    case 0:
      return -0.25 * static_cast<double>(rng.uniform(1, 3));
    case 1:
      return -0.0;
    case 2:
    case 3:
    case 4:
      return 0.0;
    default:
      return random_finish(rng);
  }
}

TEST(HybridDraw, FinishOrderWithManyIdleRanksIsAFullRecount) {
  SplitMix64 rng(3305);
  for (int c = 0; c < 300; ++c) {
    const auto world = static_cast<std::size_t>(rng.uniform(1, 700));
    std::vector<double> finish(world, 0.0);
    const auto busy = static_cast<std::size_t>(rng.uniform(0, std::min<std::uint64_t>(world, 12)));
    for (std::size_t k = 0; k < busy; ++k) finish[rng.uniform(0, world - 1)] = sparse_finish(rng);
    hybrid::FinishOrder order;
    order.reset(finish);
    for (int move = 0; move < 40; ++move) {
      const std::string where = "case " + std::to_string(c) + " W " + std::to_string(world) +
                                " move " + std::to_string(move);
      expect_finish_order_is_the_scan(order, finish, 70, rng, where);
      if (testing::Test::HasFatalFailure()) return;
      const auto a = static_cast<std::int32_t>(rng.uniform(0, world - 1));
      const double fa = sparse_finish(rng);
      order.set(a, fa);
      finish[a] = fa;
    }
  }
}

// take_first one rank at a time, with moves between the takes as rule 10
// makes them (a taken rank's finish changed too): each take is the first by
// (finish, rank) of the ranks not taken, by a scan; last and
// latest_without still answer over every rank; after put_back, every
// answer is the scan's again.
TEST(HybridDraw, FinishOrderTakenFirstsAreTheScanOfTheRest) {
  SplitMix64 rng(3307);
  for (int c = 0; c < 300; ++c) {
    const auto world = static_cast<std::size_t>(rng.uniform(1, 80));
    std::vector<double> finish(world);
    for (double& f : finish) f = sparse_finish(rng);
    hybrid::FinishOrder order;
    order.reset(finish);
    for (int round = 0; round < 20; ++round) {
      const std::string where = "case " + std::to_string(c) + " round " + std::to_string(round);
      std::vector<bool> taken(world, false);
      const auto takes =
          static_cast<std::size_t>(rng.uniform(0, std::min<std::uint64_t>(world, 9)));
      for (std::size_t t = 0; t < takes; ++t) {
        std::int32_t want = -1;
        for (std::size_t x = 0; x < world; ++x) {
          if (!taken[x] && (want < 0 || finish[x] < finish[static_cast<std::size_t>(want)])) {
            want = static_cast<std::int32_t>(x);
          }
        }
        ASSERT_EQ(order.first(), want) << where;
        ASSERT_EQ(order.take_first(), want) << where << " take " << t;
        taken[static_cast<std::size_t>(want)] = true;
        if (rng.uniform(0, 1) == 0) {
          // A move between takes, of any rank (taken or not).
          const auto a = static_cast<std::int32_t>(rng.uniform(0, world - 1));
          const double fa = sparse_finish(rng);
          order.set(a, fa);
          finish[static_cast<std::size_t>(a)] = fa;
          const auto last = static_cast<std::int32_t>(
              std::max_element(finish.begin(), finish.end()) - finish.begin());
          ASSERT_EQ(order.last(), last) << where;
          double latest = -std::numeric_limits<double>::infinity();
          for (std::size_t x = 0; x < world; ++x) {
            if (static_cast<std::int32_t>(x) != a) latest = std::max(latest, finish[x]);
          }
          ASSERT_EQ(order.latest_without(a, a), latest) << where;
        }
      }
      order.put_back();
      expect_finish_order_is_the_scan(order, finish, 8, rng, where);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

// ranks_by_finish is the stable sort of every rank by finish, on worlds of
// up to 700 ranks, most idle or most busy, finishes below 0 and -0 among
// them.
TEST(HybridDraw, RanksByFinishIsTheStableSort) {
  SplitMix64 rng(3308);
  for (int c = 0; c < 400; ++c) {
    const auto world = static_cast<std::size_t>(rng.uniform(1, 700));
    const bool sparse = rng.uniform(0, 1) == 0;
    std::vector<double> finish(world);
    for (double& f : finish) f = sparse ? sparse_finish(rng) : random_finish(rng);
    std::vector<std::int32_t> want(world);
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(),
                     [&](std::int32_t x, std::int32_t y) { return finish[x] < finish[y]; });
    ASSERT_EQ(hybrid::ranks_by_finish(finish), want) << "case " << c;
  }
}

// Rule 8's rows go to the least loaded group (LoadOrder::least): the
// first of a scan by load, ties by index, after random changes with ties.
TEST(HybridDraw, LeastLoadedGroupIsTheScan) {
  SplitMix64 rng(3304);
  for (int c = 0; c < 200; ++c) {
    const auto count = static_cast<std::int32_t>(rng.uniform(1, 200));
    hybrid::LoadOrder order(count);
    std::vector<double> load(static_cast<std::size_t>(count), 0.0);
    for (int step = 0; step < 300; ++step) {
      const auto least = std::min_element(load.begin(), load.end()) - load.begin();
      ASSERT_EQ(order.least(), least) << "case " << c << " step " << step;
      const auto k = static_cast<std::int32_t>(rng.uniform(0, count - 1));
      load[static_cast<std::size_t>(k)] = random_finish(rng);
      order.set(k, load[static_cast<std::size_t>(k)]);
    }
  }
}

// Rule 8's best fit (best_fit_rows, rows by room in one sorted array)
// against the ordered multimap it replaced: the same rows, rooms, work
// summed in the same order, and pieces, on random lengths with many equal
// rooms (lengths from a few values) and few, pieces longer than the
// capacity among them.
struct MapRows {
  std::vector<std::int64_t> room;
  std::vector<double> work;
  std::vector<std::vector<std::size_t>> pieces;
};
MapRows best_fit_by_map(const std::vector<DocPiece>& pieces, const std::vector<double>& work,
                        const std::vector<std::size_t>& by_length, std::int64_t capacity) {
  MapRows rows;
  std::multimap<std::int64_t, std::size_t> by_room;
  for (const std::size_t i : by_length) {
    const std::int64_t len = pieces[i].length;
    if (len > capacity) continue;
    auto it = by_room.lower_bound(len);
    std::size_t k = rows.room.size();
    if (it == by_room.end()) {
      rows.room.push_back(capacity);
      rows.work.push_back(0.0);
      rows.pieces.emplace_back();
    } else {
      k = it->second;
      by_room.erase(it);
    }
    rows.room[k] -= len;
    rows.work[k] += work[i];
    rows.pieces[k].push_back(i);
    by_room.emplace(rows.room[k], k);
  }
  return rows;
}

TEST(HybridDraw, BestFitRowsIsTheMultimapBestFit) {
  SplitMix64 rng(3309);
  std::size_t long_moves = 0;
  for (int c = 0; c < 400; ++c) {
    const std::int64_t capacity = rng.uniform(1, 4) * rng.uniform(8, 200);
    const auto count = static_cast<std::size_t>(rng.uniform(0, 3000));
    const bool few_lengths = rng.uniform(0, 1) == 0;
    std::vector<DocPiece> pieces;
    std::vector<double> work;
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t len = few_lengths
                                   ? capacity / static_cast<std::int64_t>(rng.uniform(1, 6)) +
                                         static_cast<std::int64_t>(rng.uniform(0, 1))
                                   : rng.uniform(1, capacity + capacity / 8);
      pieces.push_back({static_cast<std::int64_t>(i), 0, std::max<std::int64_t>(1, len)});
      work.push_back(0.1 * static_cast<double>(rng.uniform(1, 1000)));
    }
    std::vector<std::size_t> by_length(count);
    std::iota(by_length.begin(), by_length.end(), std::size_t{0});
    std::stable_sort(by_length.begin(), by_length.end(), [&](std::size_t a, std::size_t b) {
      return pieces[a].length > pieces[b].length;
    });
    const MapRows want = best_fit_by_map(pieces, work, by_length, capacity);
    const std::string where = "case " + std::to_string(c);
    for (const bool with_pieces : {true, false}) {
      const hybrid::BestFitRows got =
          hybrid::best_fit_rows(pieces, work, by_length, capacity, with_pieces);
      ASSERT_EQ(got.room, want.room) << where;
      ASSERT_EQ(got.work, want.work) << where;
      if (!with_pieces) {
        EXPECT_TRUE(got.first.empty() && got.pieces.empty()) << where;
        continue;
      }
      ASSERT_EQ(got.first.size(), want.room.size() + 1) << where;
      for (std::size_t k = 0; k < want.pieces.size(); ++k) {
        const std::vector<std::size_t> row(got.pieces.begin() + got.first[k],
                                           got.pieces.begin() + got.first[k + 1]);
        ASSERT_EQ(row, want.pieces[k]) << where << " row " << k;
      }
    }
    long_moves += want.room.size() > 64 ? 1 : 0;
  }
  // Many rows: rows step past more rows than are stepped over one by one.
  EXPECT_GT(long_moves, 100u);
}

// The drafts' LPT takes the lightest rank (LoadHeap::top), raises its
// load and takes it again, and adds ranks one at a time: the top after
// every step is the least (load, rank) of a scan of every rank, and the
// entries are every rank at its load, on loads from a few values (ties
// broken by rank), raises by 0 among them.
TEST(HybridDraw, LoadHeapTopIsTheScan) {
  SplitMix64 rng(3310);
  for (int c = 0; c < 300; ++c) {
    std::vector<double> load(static_cast<std::size_t>(rng.uniform(0, 300)));
    for (double& l : load) l = random_finish(rng);
    hybrid::LoadHeap heap;
    heap.build(load);
    for (int step = 0; step < 500; ++step) {
      const std::string where = "case " + std::to_string(c) + " step " + std::to_string(step);
      ASSERT_EQ(heap.empty(), load.empty()) << where;
      if (!load.empty()) {
        const auto least =
            static_cast<std::int32_t>(std::min_element(load.begin(), load.end()) - load.begin());
        ASSERT_EQ(heap.top().second, least) << where;
        ASSERT_EQ(heap.top().first, load[static_cast<std::size_t>(least)]) << where;
      }
      if (load.empty() || rng.uniform(0, 9) == 0) {
        load.push_back(random_finish(rng));
        heap.push({load.back(), static_cast<std::int32_t>(load.size() - 1)});
      } else {
        const auto a = static_cast<std::size_t>(heap.top().second);
        load[a] += 0.25 * static_cast<double>(rng.uniform(0, 3));
        heap.raise_top(load[a]);
      }
    }
    std::vector<double> held(load.size(), -1.0);
    for (const auto& [l, a] : heap.entries()) held[static_cast<std::size_t>(a)] = l;
    ASSERT_EQ(held, load) << "case " << c;
  }
}

ScheduleRequest random_request(SplitMix64& rng) {
  return schedule_tests::random_schedule_request(rng, {1, 2, 3, 5, 8, 12, 16, 31, 64, 128}, 80);
}

// Planning cost recounted from a schedule's slots: tokens, times
// floor(g / 64) for a slot of more than 64 members.
std::int64_t recount_cost(const Schedule& s) {
  std::int64_t cost = 0;
  for (const ScheduleSlot& slot : s.slots) {
    std::int64_t tokens = 0;
    for (const DocPiece& p : slot.pieces) tokens += p.length;
    const auto g = static_cast<std::int64_t>(slot.ranks.size());
    cost += tokens * (g > 64 ? g / 64 : 1);
  }
  return cost;
}

TEST(HybridDraw, EveryDraftCostsWhatItsSlotsCostAndCoversTheBatch) {
  SplitMix64 rng(3302);
  int drafts = 0;
  for (int c = 0; c < 200; ++c) {
    const ScheduleRequest r = random_request(rng);
    const std::int64_t tokens =
        std::accumulate(r.doc_lengths.begin(), r.doc_lengths.end(), std::int64_t{0});
    hybrid::DraftSet every(r, true);
    hybrid::DraftSet decided(r, false);
    ASSERT_EQ(decided.size(), 1u);
    ASSERT_GE(every.size(), 1u);
    EXPECT_EQ(decided.cost(0), recount_cost(decided.at(0))) << "case " << c;
    EXPECT_EQ(recount_cost(decided.at(0)), recount_cost(every.at(0))) << "case " << c;
    EXPECT_EQ(decided.at(0).slots.size(), every.at(0).slots.size()) << "case " << c;
    for (std::size_t k = 0; k < every.size(); ++k) {
      const std::int64_t cost = every.cost(k);
      const Schedule& s = every.at(k);
      EXPECT_EQ(cost, recount_cost(s)) << "case " << c << " draft " << k;
      // Every draft runs every token once: its cost is at least the batch's.
      std::int64_t placed = 0;
      for (const ScheduleSlot& slot : s.slots) {
        for (const DocPiece& p : slot.pieces) placed += p.length;
      }
      EXPECT_EQ(placed, tokens) << "case " << c << " draft " << k;
      EXPECT_GE(cost, tokens) << "case " << c << " draft " << k;
      ++drafts;
    }
  }
  EXPECT_GT(drafts, 400);
}

// Past the planning budget only the soonest equal-groups draft (the one
// right after the decided draft) may be planned, and only where its rows'
// exchange and latency do not undo its estimate. Many short documents over
// all of W = 1024 ranks (h100_7b, T = 16K): the equal-groups draft whose
// rows' compute alone finishes soonest is the one over every rank, whose
// members are each other's peers, and with that latency and K/V it is far
// behind the decided draft (one rank a document).
TEST(HybridDraw, OnlyTheSoonestEqualGroupsDraftIsWorthPlanningPastTheBudget) {
  SplitMix64 rng(3310);
  int soonest = 0;
  for (int c = 0; c < 200; ++c) {
    const ScheduleRequest r = random_request(rng);
    hybrid::DraftSet every(r, true);
    soonest += every.size() > 1 && every.worth_planning_past_budget(1);
  }
  EXPECT_GT(soonest, 0);  // the estimate with the exchange lets some through
  ScheduleRequest r;
  r.world_size = 1024;
  r.max_tokens_per_rank = 16384;
  r.block_size = 128;
  r.mask = MaskSpec::causal();
  r.profile = *builtin_cost_profile("h100_7b");
  for (int i = 0; i < 1000; ++i) r.doc_lengths.push_back(2048 + 37 * (i % 100));
  hybrid::DraftSet every(r, true);
  ASSERT_GT(every.size(), 1u);
  // Entry 1, soonest by compute alone, is the draft over all 1,024 ranks.
  ASSERT_FALSE(every.at(1).slots.empty());
  EXPECT_EQ(every.at(1).slots[0].ranks.size(), 1024u);
  EXPECT_FALSE(every.worth_planning_past_budget(1));
}

// The same slots: ranks, wave and pieces, slot for slot.
bool same_slots(const Schedule& a, const Schedule& b) {
  if (a.slots.size() != b.slots.size()) return false;
  for (std::size_t k = 0; k < a.slots.size(); ++k) {
    const ScheduleSlot& x = a.slots[k];
    const ScheduleSlot& y = b.slots[k];
    if (x.ranks != y.ranks || x.wave != y.wave || x.pieces.size() != y.pieces.size()) return false;
    for (std::size_t i = 0; i < x.pieces.size(); ++i) {
      if (x.pieces[i].doc != y.pieces[i].doc || x.pieces[i].offset != y.pieces[i].offset ||
          x.pieces[i].length != y.pieces[i].length) {
        return false;
      }
    }
  }
  return true;
}

// A DraftSet given the planning room left (its group rules' drafts that
// cost more packed only where they may finish first, else when asked
// for) holds the drafts every draft packed holds: the same order, costs
// and schedules. And a draft it says is the first's has the first's slots.
TEST(HybridDraw, DraftsBeyondTheRoomAreTheSameWhenAskedFor) {
  SplitMix64 rng(3304);
  int beyond = 0;  // drafts that cost more than the room
  int first = 0;   // drafts said to be the first's
  for (int c = 0; c < 300; ++c) {
    const ScheduleRequest r = random_request(rng);
    const std::int64_t tokens =
        std::accumulate(r.doc_lengths.begin(), r.doc_lengths.end(), std::int64_t{0});
    hybrid::DraftSet every(r, true);
    for (const std::int64_t room : {std::int64_t{0}, tokens, rng.uniform(0, 3 * tokens)}) {
      hybrid::DraftSet cut(r, true, room);
      const std::string where = "case " + std::to_string(c) + " room " + std::to_string(room);
      ASSERT_EQ(cut.size(), every.size()) << where;
      for (std::size_t k = 0; k < every.size(); ++k) {
        ASSERT_EQ(cut.cost(k), every.cost(k)) << where << " draft " << k;
        beyond += cut.cost(k) > room ? 1 : 0;
        if (cut.same_as_first(k)) {
          EXPECT_TRUE(same_slots(every.at(k), every.at(0))) << where << " draft " << k;
          ++first;
        }
        EXPECT_TRUE(same_slots(cut.at(k), every.at(k))) << where << " draft " << k;
      }
    }
  }
  EXPECT_GT(beyond, 1000);
  EXPECT_GT(first, 100);
}

// Two drafts are the same: groups, waits with their rows, and trailing rows
// (a rank past either's rows runs none), the same estimated finish.
void expect_same_draft(const hybrid::Draft& got, const hybrid::Draft& want,
                       const std::string& where) {
  ASSERT_EQ(got.long_slots.size(), want.long_slots.size()) << where;
  for (std::size_t k = 0; k < want.long_slots.size(); ++k) {
    EXPECT_EQ(got.long_slots[k].ranks, want.long_slots[k].ranks) << where << " group " << k;
    EXPECT_EQ(got.long_slots[k].piece, want.long_slots[k].piece) << where << " group " << k;
    EXPECT_EQ(got.long_slots[k].start, want.long_slots[k].start) << where << " group " << k;
  }
  ASSERT_EQ(got.gaps.size(), want.gaps.size()) << where;
  for (std::size_t k = 0; k < want.gaps.size(); ++k) {
    EXPECT_EQ(got.gaps[k].rank, want.gaps[k].rank) << where << " gap " << k;
    EXPECT_EQ(got.gaps[k].begin, want.gaps[k].begin) << where << " gap " << k;
    EXPECT_EQ(got.gaps[k].seconds, want.gaps[k].seconds) << where << " gap " << k;
    EXPECT_EQ(got.gaps[k].pieces, want.gaps[k].pieces) << where << " gap " << k;
  }
  const std::size_t ranks = std::max(got.ranks(), want.ranks());
  for (std::size_t a = 0; a < ranks; ++a) {
    const auto g = a < got.ranks() ? got.rows_of(a) : std::span<const hybrid::RowSpan>();
    const auto w = a < want.ranks() ? want.rows_of(a) : std::span<const hybrid::RowSpan>();
    ASSERT_EQ(g.size(), w.size()) << where << " rank " << a;
    for (std::size_t k = 0; k < w.size(); ++k) {
      const auto gp = got.pieces_of(g[k]);
      const auto wp = want.pieces_of(w[k]);
      EXPECT_EQ(std::vector<std::size_t>(gp.begin(), gp.end()),
                std::vector<std::size_t>(wp.begin(), wp.end()))
          << where << " rank " << a << " row " << k;
      EXPECT_EQ(g[k].room, w[k].room) << where << " rank " << a << " row " << k;
    }
  }
  EXPECT_EQ(got.makespan, want.makespan) << where;
}

constexpr std::array kGroupRules = {
    hybrid::GroupRule::kMeanLoad, hybrid::GroupRule::kTimelineMeanLoad,
    hybrid::GroupRule::kSoonestEnd, hybrid::GroupRule::kBalancedEnd};

// 1 to 40 documents: one in `one_in` up to `most` x T tokens, the others up
// to 2 x T (a few groups, many pieces within T).
void draw_few_documents(SplitMix64& rng, ScheduleRequest& r, std::int64_t one_in,
                        std::int64_t most) {
  r.doc_lengths.clear();
  const std::int64_t docs = rng.uniform(1, 40);
  for (std::int64_t i = 0; i < docs; ++i) {
    const std::int64_t longest = rng.uniform(0, one_in - 1) == 0 ? most : 2;
    r.doc_lengths.push_back(rng.uniform(1, longest * r.max_tokens_per_rank));
  }
}

// A draft holds per-rank structures only for the nodes its groups and rows
// reach (the others are free at 0, read in place): the same draft as with
// every rank held from the start, on few pieces over up to 3,000 ranks
// (nodes of 1 to 16 ranks, not always dividing W), each group rule, heavy
// pieces grouped and not, with and without a beat.
TEST(HybridDraw, DraftHoldingTheRanksItReachesIsTheDraftOverEveryRank) {
  SplitMix64 rng(3306);
  int unheld = 0;
  for (int c = 0; c < 150; ++c) {
    ScheduleRequest r = random_request(rng);
    r.world_size = static_cast<std::int32_t>(rng.uniform(1, rng.uniform(0, 1) == 0 ? 64 : 3000));
    r.profile.ranks_per_node = static_cast<std::int32_t>(rng.uniform(1, 16));
    draw_few_documents(rng, r, 6, 64);
    const hybrid::Estimator est(r);
    const hybrid::PreparedBatch prep = hybrid::prepare_batch(r, est);
    for (const bool heavy : {true, false}) {
      const hybrid::Batch batch = hybrid::grouped_batch(r, prep, heavy);
      for (const hybrid::GroupRule rule : kGroupRules) {
        const std::string where = "case " + std::to_string(c) + " W " +
                                  std::to_string(r.world_size) + " rule " +
                                  std::to_string(static_cast<int>(rule)) + (heavy ? " heavy" : "");
        const hybrid::Draft every = hybrid::draft(batch, est, rule, hybrid::kNoEnd, true);
        const hybrid::Draft held = hybrid::draft(batch, est, rule);
        expect_same_draft(held, every, where);
        unheld += held.ranks() < every.ranks() ? 1 : 0;
        const double beat = every.makespan * (rng.uniform(0, 1) == 0 ? 0.99 : 1.01);
        expect_same_draft(hybrid::draft(batch, est, rule, beat),
                          hybrid::draft(batch, est, rule, beat, true), where + " beat");
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  // Most drafts leave ranks unheld.
  EXPECT_GT(unheld, 400);
}

// Rule 2's group size of a draft's groups, chosen again by a scan of every
// size from the least to the widest useful one (none skipped), on the
// ranks' timeline replayed from the draft's groups before it (each group
// starts where the draft says and lasts its estimated slot time).
TEST(HybridDraw, EveryGroupHasTheSizeAScanOfEverySizeGives) {
  SplitMix64 rng(3311);
  int groups = 0;
  for (int c = 0; c < 300; ++c) {
    ScheduleRequest r = random_request(rng);
    if (c % 2 == 0) r.world_size = static_cast<std::int32_t>(rng.uniform(1, 24));
    const hybrid::Estimator est(r);
    const hybrid::PreparedBatch prep = hybrid::prepare_batch(r, est);
    const std::int32_t world = r.world_size;
    const std::int32_t node = r.profile.ranks_per_node;
    for (const bool heavy : {true, false}) {
      const hybrid::Batch batch = hybrid::grouped_batch(r, prep, heavy);
      for (const hybrid::GroupRule rule : kGroupRules) {
        const hybrid::Draft d = hybrid::draft(batch, est, rule);
        std::vector<double> free(static_cast<std::size_t>(world), 0.0);
        double overhead = 0;
        for (const hybrid::LongSlot& slot : d.long_slots) {
          const std::int64_t len = batch.pieces[slot.piece].length;
          const double work = batch.work[slot.piece];
          const std::int64_t budget = r.max_tokens_per_rank;
          auto g_min = static_cast<std::int32_t>((len + budget - 1) / budget);
          if (budget > r.block_size) {
            const std::int64_t roomy = (len + budget - r.block_size - 1) / (budget - r.block_size);
            if (roomy <= world) g_min = static_cast<std::int32_t>(roomy);
          }
          const auto most = static_cast<std::int32_t>(std::clamp<std::int64_t>(
              hybrid::widest_useful_group(len, r.block_size), g_min, world));
          std::vector<std::int32_t> by_free(static_cast<std::size_t>(world));
          std::iota(by_free.begin(), by_free.end(), 0);
          std::sort(by_free.begin(), by_free.end(), [&](std::int32_t a, std::int32_t b) {
            return free[a] < free[b] || (free[a] == free[b] && a < b);
          });
          std::int32_t want = g_min;
          double best = std::numeric_limits<double>::infinity();
          for (std::int32_t g = g_min; g <= most; ++g) {
            const double start = rule == hybrid::GroupRule::kMeanLoad ? 0.0 : free[by_free[g - 1]];
            const double length = est.slot_time(work, len, g, std::min(g, node));
            const double end = start + length;
            if (rule == hybrid::GroupRule::kBalancedEnd) {
              const double finish =
                  std::max(end, batch.mean_load + (overhead + g * length - work) / world);
              if (finish < best) {
                best = finish;
                want = g;
              }
              continue;
            }
            if (end < best) {
              best = end;
              want = g;
            }
            if (rule != hybrid::GroupRule::kSoonestEnd && end <= batch.mean_load) {
              want = g;
              break;
            }
          }
          const auto g = static_cast<std::int32_t>(slot.ranks.size());
          ASSERT_EQ(g, want) << "case " << c << " rule " << static_cast<int>(rule)
                             << (heavy ? " heavy" : "") << " piece " << slot.piece;
          std::map<std::int32_t, std::int32_t> on_node;
          for (const std::int32_t a : slot.ranks) ++on_node[a / node];
          std::int32_t together = g;
          for (const auto& [n, count] : on_node) together = std::min(together, count);
          const double end = slot.start + est.slot_time(work, len, g, together);
          overhead += g * (end - slot.start) - work;
          for (const std::int32_t a : slot.ranks) free[static_cast<std::size_t>(a)] = end;
          ++groups;
        }
      }
    }
  }
  EXPECT_GT(groups, 5000);
}

// A draft whose groups are placed as those of a draft drawn before under
// another rule is a copy of that one (draft's `drawn`): the same draft as
// drawn afresh, whatever rules placed the groups alike, with and without a
// beat (the copy is packed where a beat would not pack it, and then no
// sooner than the beat). The drafts before may be unpacked (never copied).
TEST(HybridDraw, DraftCopiedFromOneWithTheSameGroupsIsTheDraftDrawnAfresh) {
  SplitMix64 rng(3310);
  int copied = 0;
  for (int c = 0; c < 300; ++c) {
    ScheduleRequest r = random_request(rng);
    if (c % 2 == 0) draw_few_documents(rng, r, 4, 16);
    const hybrid::Estimator est(r);
    const hybrid::PreparedBatch prep = hybrid::prepare_batch(r, est);
    for (const bool heavy : {true, false}) {
      const hybrid::Batch batch = hybrid::grouped_batch(r, prep, heavy);
      std::vector<hybrid::Draft> before;
      for (const hybrid::GroupRule rule : kGroupRules) {
        const std::string where = "case " + std::to_string(c) + " rule " +
                                  std::to_string(static_cast<int>(rule)) + (heavy ? " heavy" : "");
        const hybrid::Draft fresh = hybrid::draft(batch, est, rule);
        for (const hybrid::Draft& other : before) {
          const bool alike = std::equal(
              other.long_slots.begin(), other.long_slots.end(), fresh.long_slots.begin(),
              fresh.long_slots.end(), [](const hybrid::LongSlot& x, const hybrid::LongSlot& y) {
                return x.piece == y.piece && x.start == y.start && x.ranks == y.ranks;
              });
          if (alike && other.makespan != hybrid::kNoEnd) {
            ++copied;
            break;
          }
        }
        expect_same_draft(hybrid::draft(batch, est, rule, hybrid::kNoEnd, false, before), fresh,
                          where);
        const double beat = fresh.makespan * (rng.uniform(0, 1) == 0 ? 0.99 : 1.01);
        const hybrid::Draft beaten = hybrid::draft(batch, est, rule, beat, false, before);
        const hybrid::Draft alone = hybrid::draft(batch, est, rule, beat);
        if (alone.makespan != hybrid::kNoEnd || beaten.makespan == hybrid::kNoEnd) {
          expect_same_draft(beaten, alone, where + " beat");
        } else {
          expect_same_draft(beaten, fresh, where + " beat, copied");
          EXPECT_GE(beaten.makespan, beat) << where;
        }
        if (::testing::Test::HasFailure()) return;
        // Unpacked ones too, as the drafts of a pass drawn under a beat are.
        before.push_back(rng.uniform(0, 3) == 0 ? hybrid::draft(batch, est, rule, 0.0) : fresh);
      }
    }
  }
  EXPECT_GT(copied, 200);
}

// rebalance over the first ranks' rows and loads (every rank past them
// without rows, load 0) moves what it moves over every rank's, and over
// the rows as a draft keeps them while packing (rebalance_packed) too.
TEST(HybridDraw, RebalanceOverTheFirstRanksIsRebalanceOverEveryRank) {
  SplitMix64 rng(3307);
  int grown = 0;
  for (int c = 0; c < 400; ++c) {
    ScheduleRequest r = random_request(rng);
    r.world_size = static_cast<std::int32_t>(rng.uniform(2, 40));
    std::vector<DocPiece> pieces;
    std::vector<double> work;
    const auto held = static_cast<std::size_t>(rng.uniform(1, r.world_size));
    std::vector<std::vector<hybrid::Row>> rows(held);
    std::vector<double> load(held, 0.0);
    for (std::size_t a = 0; a < held; ++a) {
      // Loads mostly above 0; now and then below, so that a rank past the
      // first is the most loaded.
      load[a] = rng.uniform(0, 9) == 0 ? -0.5 : 0.25 * static_cast<double>(rng.uniform(0, 8));
      const std::int64_t n = rng.uniform(0, 4);
      if (n > 0) rows[a].push_back({r.max_tokens_per_rank, {}});
      for (std::int64_t k = 0; k < n; ++k) {
        const std::int64_t len = rng.uniform(1, r.max_tokens_per_rank / 4 + 1);
        if (rows[a].back().room < len) break;
        rows[a].back().room -= len;
        rows[a].back().pieces.push_back(pieces.size());
        pieces.push_back({static_cast<std::int64_t>(pieces.size()), 0, len});
        work.push_back(0.125 * static_cast<double>(rng.uniform(1, 8)));
        load[a] += work.back();
      }
    }
    const std::vector<std::size_t> order;
    const hybrid::Batch batch{r, pieces, work, order, 0.0, {}};
    std::vector<std::vector<hybrid::Row>> every_rows = rows;
    every_rows.resize(static_cast<std::size_t>(r.world_size));
    std::vector<double> every_load = load;
    every_load.resize(static_cast<std::size_t>(r.world_size), 0.0);
    std::vector<std::vector<hybrid::Row>> packed_rows = rows;
    std::vector<double> packed_load = load;
    hybrid::rebalance(batch, rows, load);
    hybrid::rebalance(batch, every_rows, every_load);
    // As a draft keeps its rows while it packs them: the same moves.
    hybrid::rebalance_packed(batch, packed_rows, packed_load);
    ASSERT_EQ(packed_load, load) << "case " << c;
    ASSERT_EQ(packed_rows.size(), rows.size()) << "case " << c;
    for (std::size_t a = 0; a < rows.size(); ++a) {
      ASSERT_EQ(packed_rows[a].size(), rows[a].size()) << "case " << c << " rank " << a;
      for (std::size_t k = 0; k < rows[a].size(); ++k) {
        EXPECT_EQ(packed_rows[a][k].pieces, rows[a][k].pieces) << "case " << c << " rank " << a;
        EXPECT_EQ(packed_rows[a][k].room, rows[a][k].room) << "case " << c << " rank " << a;
      }
    }
    grown += rows.size() > held ? 1 : 0;
    const std::string where = "case " + std::to_string(c);
    ASSERT_LE(rows.size(), every_rows.size()) << where;
    ASSERT_EQ(load.size(), rows.size()) << where;
    for (std::size_t a = 0; a < every_rows.size(); ++a) {
      const double got = a < load.size() ? load[a] : 0.0;
      ASSERT_EQ(got, every_load[a]) << where << " rank " << a;
      const std::size_t n = a < rows.size() ? rows[a].size() : 0;
      ASSERT_EQ(n, every_rows[a].size()) << where << " rank " << a;
      for (std::size_t k = 0; k < n; ++k) {
        EXPECT_EQ(rows[a][k].pieces, every_rows[a][k].pieces) << where << " rank " << a;
      }
    }
  }
  // Ranks past the first are reached.
  EXPECT_GT(grown, 40);
}

// The cut in planning another draft (schedule_hybrid.cpp,
// plan_slots_below) stops once the timeline of exact lengths and lower
// bounds reaches the best step: exact only where no slot ends before its
// bound.
TEST(HybridDraw, NoSlotEndsBeforeItsLowerBound) {
  SplitMix64 rng(3303);
  int slots = 0;
  for (int c = 0; c < 120; ++c) {
    const ScheduleRequest r = random_request(rng);
    hybrid::DraftSet every(r, true);
    for (std::size_t k = 0; k < every.size(); ++k) {
      Schedule s = every.at(k);
      for (ScheduleSlot& slot : s.slots) {
        const Result<double> length = hybrid::plan_slot_compact(r, slot);
        ASSERT_TRUE(length.is_ok()) << length.status().message();
        EXPECT_LE(slot_length_lower_bound(r, slot) * (1 - 1e-9), *length)
            << "case " << c << " draft " << k;
        ++slots;
      }
    }
  }
  EXPECT_GT(slots, 1000);
}

}  // namespace
}  // namespace fulcrum
