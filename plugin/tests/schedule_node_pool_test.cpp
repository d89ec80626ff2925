// The search's structures of schedule_hybrid_nodes.h against recounts: the
// rank sets on few nodes (NodePool) against counting and sorting every pool
// afresh for every call, as the search did before the pools were kept; the
// merges' partial replays (SlotChains) and the timeline without its last
// slot (TimelineReplay) against replaying every slot; the wave order
// (wave_order) against a stable sort by wave; the ranks by finish put in
// order as far as asked (RanksByFinish) against ranks_by_finish, which
// sorts every rank; and each rank's slots (RankSlots) against a list per
// rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fulcrum/schedule_types.h"
#include "strategies/schedule_hybrid_nodes.h"
#include "strategies/schedule_hybrid_refine.h"

namespace fulcrum {
namespace {

// g of the first m ranks of `order` on the fewest nodes, recounted: nodes by
// pool count (stable sort, most first), whole nodes while they fit, then the
// last node in that order that still holds the rest (a scan), each node's
// ranks in the order's order; ascending.
std::vector<std::int32_t> recount(const std::vector<std::int32_t>& order, std::int32_t m,
                                  std::int32_t g, std::int32_t per_node) {
  std::vector<std::int32_t> count;
  std::vector<std::int32_t> nodes;
  for (std::int32_t k = 0; k < m; ++k) {
    const auto node = static_cast<std::size_t>(order[k] / per_node);
    if (node >= count.size()) count.resize(node + 1, 0);
    if (count[node]++ == 0) nodes.push_back(static_cast<std::int32_t>(node));
  }
  std::stable_sort(nodes.begin(), nodes.end(),
                   [&](std::int32_t x, std::int32_t y) { return count[x] > count[y]; });
  std::vector<std::int32_t> take(count.size(), 0);
  std::int32_t taken = 0;
  std::size_t n = 0;
  while (taken < g && n < nodes.size()) {
    const std::int32_t left = g - taken;
    if (count[nodes[n]] <= left) {
      take[nodes[n]] = count[nodes[n]];
      taken += count[nodes[n]];
      ++n;
      continue;
    }
    std::size_t fit = n;
    while (fit + 1 < nodes.size() && count[nodes[fit + 1]] >= left) ++fit;
    take[nodes[fit]] = left;
    taken += left;
  }
  std::vector<std::int32_t> ranks;
  for (std::int32_t k = 0; k < m; ++k) {
    std::int32_t& want = take[static_cast<std::size_t>(order[k] / per_node)];
    if (want > 0) {
      ranks.push_back(order[k]);
      --want;
    }
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// Random orders (every rank, or a part of them; in runs of idle ranks in
// rank order as the search's free-time order has them, or shuffled), and
// many (m, g) asked of one pool in a random order, repeats included, so that
// kept counts are read back after other pools were counted.
TEST(NodePool, PackedEqualsARecountOfEveryPool) {
  std::mt19937_64 rng(20261126);
  std::int64_t checked = 0;
  std::int64_t split = 0;  // sets that took part of a node
  for (int trial = 0; trial < 600; ++trial) {
    const auto world = static_cast<std::int32_t>(2 + rng() % 300);
    const auto per_node = static_cast<std::int32_t>(1 + rng() % 9);
    std::vector<std::int32_t> order(static_cast<std::size_t>(world));
    std::iota(order.begin(), order.end(), 0);
    const auto idle = static_cast<std::size_t>(rng() % (order.size() + 1));
    std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(idle), order.end(), rng);
    if (trial % 3 == 0) std::shuffle(order.begin(), order.end(), rng);
    if (trial % 5 == 0) order.resize(1 + rng() % order.size());  // part of the world
    const auto size = static_cast<std::int32_t>(order.size());
    hybrid::NodePool pool(order, world, per_node);
    for (int ask = 0; ask < 30; ++ask) {
      const auto m = static_cast<std::int32_t>(1 + rng() % static_cast<std::uint64_t>(size));
      const auto g = static_cast<std::int32_t>(1 + rng() % static_cast<std::uint64_t>(m));
      const std::vector<std::int32_t> want = recount(order, m, g, per_node);
      SCOPED_TRACE("trial " + std::to_string(trial) + ", W = " + std::to_string(world) +
                   ", R = " + std::to_string(per_node) + ", m = " + std::to_string(m) +
                   ", g = " + std::to_string(g));
      ASSERT_EQ(pool.packed(m, g), want);
      ASSERT_EQ(static_cast<std::int32_t>(want.size()), g);
      ++checked;
      split += g % per_node != 0 ? 1 : 0;
    }
  }
  EXPECT_EQ(checked, 600 * 30);
  EXPECT_GT(split, 5000);
}

// A timeline's step and rank-seconds.
struct StepBusy {
  double step = 0;
  double busy = 0;
};

// Every slot replayed in wave order (the search's replay_sparse): slot x
// left out, slot y lasting `length`; its step and its rank-seconds, summed
// in wave order.
StepBusy replay(const Schedule& s, const std::vector<std::size_t>& order,
                const std::vector<double>& length, std::int32_t world, std::size_t x, std::size_t y,
                double y_length) {
  std::vector<double> free_at(static_cast<std::size_t>(world), 0.0);
  StepBusy e;
  for (const std::size_t k : order) {
    if (k == x) continue;
    const double len = k == y ? y_length : length[k];
    double start = 0;
    for (const std::int32_t a : s.slots[k].ranks) start = std::max(start, free_at[a]);
    for (const std::int32_t a : s.slots[k].ranks) free_at[a] = start + len;
    e.busy += static_cast<double>(s.slots[k].ranks.size()) * len;
    e.step = std::max(e.step, start + len);
  }
  return e;
}

// Slots over `world` ranks in 1 to 5 waves, each wave's ranks dealt at
// random into slots of 1 to 3 ranks (any size with `wide`), one slot in
// `drop_one_in` left out (a rank idle that wave); `waves`, where given,
// gets how many.
Schedule random_waves(std::mt19937_64& rng, std::int32_t world, bool wide, int drop_one_in,
                      int* waves_out = nullptr) {
  Schedule s;
  const int waves = 1 + static_cast<int>(rng() % 5);
  if (waves_out != nullptr) *waves_out = waves;
  for (int wave = 0; wave < waves; ++wave) {
    std::vector<std::int32_t> free(static_cast<std::size_t>(world));
    std::iota(free.begin(), free.end(), 0);
    std::shuffle(free.begin(), free.end(), rng);
    while (!free.empty()) {
      const std::size_t g =
          1 + rng() % (wide ? free.size() : std::min<std::size_t>(3, free.size()));
      ScheduleSlot slot;
      slot.ranks.assign(free.end() - static_cast<std::ptrdiff_t>(g), free.end());
      std::sort(slot.ranks.begin(), slot.ranks.end());
      free.resize(free.size() - g);
      slot.wave = wave;
      if (rng() % static_cast<std::uint64_t>(drop_one_in) != 0) s.slots.push_back(std::move(slot));
    }
  }
  return s;
}

// `s`'s slots shuffled (slot order is not wave order), and their order by
// wave (a stable sort).
std::vector<std::size_t> shuffled_wave_order(std::mt19937_64& rng, Schedule& s) {
  std::shuffle(s.slots.begin(), s.slots.end(), rng);
  std::vector<std::size_t> order(s.slots.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return s.slots[a].wave < s.slots[b].wave; });
  return order;
}

// Random schedules (slots of 1 to all ranks over a few waves, lengths on a
// coarse grid so that ends tie, as equal rows' do), and many (x, y, length)
// asked of one build: y longer, shorter or as long as it was, x before or
// after y, on its ranks or not. Step and rank-seconds equal to the bit; and
// whether a rank runs another slot of a wave, against a pass over every
// slot.
TEST(SlotChains, WithoutEqualsAReplayOfEverySlot) {
  std::mt19937_64 rng(20261127);
  std::int64_t checked = 0;
  std::int64_t moved_step = 0;  // asks whose step differs from the built timeline's
  std::int64_t held = 0;        // asks of holds_wave answered true
  for (int trial = 0; trial < 400; ++trial) {
    const auto world = static_cast<std::int32_t>(1 + rng() % 12);
    int waves = 0;
    Schedule s = random_waves(rng, world, trial % 4 == 0, 5, &waves);
    if (s.slots.size() < 2) continue;
    const std::vector<std::size_t> order = shuffled_wave_order(rng, s);
    std::vector<double> length(s.slots.size());
    for (double& l : length) l = 0.25 * static_cast<double>(1 + rng() % 16);
    hybrid::SlotChains chains;
    chains.build(s, order, length, world);
    ASSERT_TRUE(chains.valid());
    const double built = replay(s, order, length, world, s.slots.size(), s.slots.size(), 0).step;
    for (int ask = 0; ask < 40; ++ask) {
      const std::size_t x = rng() % s.slots.size();
      std::size_t y = rng() % s.slots.size();
      if (y == x) y = (y + 1) % s.slots.size();
      const double choices[] = {length[y], 0.0, length[y] * 0.5, length[y] + 0.25,
                                0.25 * static_cast<double>(rng() % 40)};
      const double l = choices[rng() % 5];
      const StepBusy want = replay(s, order, length, world, x, y, l);
      const StepBusy got{chains.step_without(x, y, l), chains.busy_without(x, y, l)};
      SCOPED_TRACE("trial " + std::to_string(trial) + ", x " + std::to_string(x) + ", y " +
                   std::to_string(y) + ", length " + std::to_string(l));
      ASSERT_EQ(got.step, want.step);
      ASSERT_EQ(got.busy, want.busy);
      const auto rank = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(world));
      const auto wave = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(waves + 1));
      bool holds = false;  // recounted over every slot
      for (std::size_t k = 0; k < s.slots.size(); ++k) {
        const std::vector<std::int32_t>& r = s.slots[k].ranks;
        holds = holds || (k != x && k != y && s.slots[k].wave == wave &&
                          std::find(r.begin(), r.end(), rank) != r.end());
      }
      ASSERT_EQ(chains.holds_wave(rank, wave, x, y), holds) << "rank " << rank << ", wave " << wave;
      held += holds ? 1 : 0;
      ++checked;
      moved_step += want.step != built ? 1 : 0;
    }
  }
  EXPECT_GT(checked, 10000);
  EXPECT_GT(moved_step, 2000);
  EXPECT_GT(held, 2000);
  EXPECT_LT(held, checked - 2000);
}

// Every slot but `skip` replayed in wave order (the search's replay): the
// step, rank-seconds and slot ending last, and per rank its finish and next
// wave.
struct Replayed {
  hybrid::TimelineReplay::Ends ends;
  std::vector<double> finish;
  std::vector<std::int32_t> next_wave;
};
Replayed replay_without(const Schedule& s, const std::vector<std::size_t>& order,
                        const std::vector<double>& length, std::int32_t world, std::size_t skip) {
  Replayed t;
  t.finish.assign(static_cast<std::size_t>(world), 0.0);
  t.next_wave.assign(static_cast<std::size_t>(world), 0);
  for (const std::size_t k : order) {
    if (k == skip) continue;
    double start = 0;
    for (const std::int32_t a : s.slots[k].ranks) start = std::max(start, t.finish[a]);
    for (const std::int32_t a : s.slots[k].ranks) {
      t.finish[a] = start + length[k];
      t.next_wave[a] = std::max(t.next_wave[a], s.slots[k].wave + 1);
    }
    t.ends.busy += static_cast<double>(s.slots[k].ranks.size()) * length[k];
    if (start + length[k] >= t.ends.step) {
      t.ends.step = start + length[k];
      t.ends.last = k;
    }
  }
  return t;
}

// Random schedules (slots of 1 to all ranks over a few waves, some ranks
// idle, lengths on a coarse grid with 0 among them so that ends tie), one
// run and then every slot asked: where no later slot in the order runs on
// its ranks (found by a scan), the timeline without it equals a replay of
// every other slot to the bit, its per-rank tables too; else `without`
// declines. The slot that ends last never declines.
TEST(TimelineReplay, WithoutEqualsAReplayOfEveryOtherSlot) {
  std::mt19937_64 rng(20261128);
  std::int64_t read = 0;
  std::int64_t declined = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const auto world = static_cast<std::int32_t>(1 + rng() % 12);
    Schedule s = random_waves(rng, world, trial % 4 == 0, 4);
    if (s.slots.empty()) continue;
    const std::vector<std::size_t> order = shuffled_wave_order(rng, s);
    std::vector<double> length(s.slots.size());
    for (double& l : length) l = 0.25 * static_cast<double>(rng() % 8);
    hybrid::TimelineReplay whole;
    const hybrid::TimelineReplay::Ends all = whole.run(s, order, length, world);
    const Replayed want_all = replay_without(s, order, length, world, s.slots.size());
    ASSERT_EQ(all.step, want_all.ends.step) << "trial " << trial;
    ASSERT_EQ(all.busy, want_all.ends.busy) << "trial " << trial;
    ASSERT_EQ(all.last, want_all.ends.last) << "trial " << trial;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const std::size_t c = order[i];
      bool later = false;  // a slot after c in the order on one of its ranks
      for (std::size_t j = i + 1; j < order.size(); ++j) {
        for (const std::int32_t a : s.slots[order[j]].ranks) {
          const std::vector<std::int32_t>& r = s.slots[c].ranks;
          later = later || std::find(r.begin(), r.end(), a) != r.end();
        }
      }
      SCOPED_TRACE("trial " + std::to_string(trial) + ", slot " + std::to_string(c));
      hybrid::TimelineReplay::Ends got;
      std::vector<double> finish;
      std::vector<std::int32_t> next_wave;
      const bool read_off = whole.without(s, order, length, c, got, finish, next_wave);
      ASSERT_EQ(read_off, !later);
      if (c == all.last) {
        ASSERT_TRUE(read_off);
      }
      if (!read_off) {
        ++declined;
        continue;
      }
      const Replayed want = replay_without(s, order, length, world, c);
      ASSERT_EQ(got.step, want.ends.step);
      ASSERT_EQ(got.busy, want.ends.busy);
      ASSERT_EQ(got.last, want.ends.last);
      ASSERT_EQ(finish, want.finish);
      ASSERT_EQ(next_wave, want.next_wave);
      ++read;
    }
  }
  EXPECT_GT(read, 3000);
  EXPECT_GT(declined, 1000);
}

// RankSlots against a list per rank (each slot pushed onto its ranks' in
// slot order, as rule 10 kept them): random schedules, ranks left idle,
// rows added on random ranks between asks.
TEST(RankSlots, EqualsAListPerRank) {
  std::mt19937_64 rng(20261129);
  std::int64_t asked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto world = static_cast<std::int32_t>(1 + rng() % 20);
    Schedule s;
    const std::size_t slots = rng() % 30;
    for (std::size_t k = 0; k < slots; ++k) {
      ScheduleSlot slot;
      for (std::int32_t a = 0; a < world; ++a) {
        if (rng() % 3 == 0) slot.ranks.push_back(a);
      }
      s.slots.push_back(std::move(slot));
    }
    std::vector<std::vector<std::size_t>> want(static_cast<std::size_t>(world));
    for (std::size_t k = 0; k < s.slots.size(); ++k) {
      for (const std::int32_t a : s.slots[k].ranks) want[static_cast<std::size_t>(a)].push_back(k);
    }
    hybrid::RankSlots on;
    on.build(s, world);
    std::size_t next = s.slots.size();
    std::vector<std::size_t> got;
    for (int ask = 0; ask < 40; ++ask) {
      const auto a = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(world));
      if (rng() % 3 == 0) {
        on.add(a, next);
        want[static_cast<std::size_t>(a)].push_back(next++);
      }
      const auto b = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(world));
      on.of(b, got);
      ASSERT_EQ(got, want[static_cast<std::size_t>(b)]) << "trial " << trial << ", rank " << b;
      ++asked;
    }
  }
  EXPECT_EQ(asked, 300 * 40);
}

// wave_order against a stable sort by wave: random waves, dense (the
// counting sort), negative, or spread far apart (the comparison sort), with
// one counts buffer reused across calls as the search reuses it.
TEST(WaveOrder, EqualsAStableSortByWave) {
  std::mt19937_64 rng(20261126);
  std::vector<std::size_t> order;
  std::vector<std::size_t> counts;
  std::int64_t checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Schedule s;
    s.slots.resize(rng() % 60);
    const int kind = trial % 4;
    for (ScheduleSlot& slot : s.slots) {
      const auto draw = static_cast<std::int32_t>(rng() % 12);
      slot.wave = kind == 0   ? draw
                  : kind == 1 ? draw - 5
                  : kind == 2 ? draw * 100000
                              : static_cast<std::int32_t>(rng() % 3) * 1000000000 - 1000000000;
    }
    std::vector<std::size_t> want(s.slots.size());
    std::iota(want.begin(), want.end(), std::size_t{0});
    std::stable_sort(want.begin(), want.end(), [&](std::size_t a, std::size_t b) {
      return s.slots[a].wave < s.slots[b].wave;
    });
    order.assign(rng() % 5, 7);  // a stale order of another size
    hybrid::wave_order(s, order, counts);
    ASSERT_EQ(order, want) << "trial " << trial;
    checked += static_cast<std::int64_t>(want.size());
  }
  EXPECT_GT(checked, 40000);
}

// RanksByFinish against ranks_by_finish (every rank sorted): random
// finishes with many ties (a coarse grid), idle ranks (0 and -0.0),
// negative and infinite ones, asked for prefixes and tie counts in random
// order as the search asks; each prefix put in order equals the sorted
// order's, and each count its upper bound.
TEST(RanksByFinish, PrefixesEqualASortOfEveryRank) {
  std::mt19937_64 rng(20261128);
  std::int64_t checked = 0;
  std::int64_t past_asked = 0;  // counts that had to put more ranks in order
  for (int trial = 0; trial < 600; ++trial) {
    const std::size_t world = 1 + rng() % (trial % 3 == 0 ? 2000 : 70);
    std::vector<double> finish(world);
    const int grid = 1 + static_cast<int>(rng() % 20);
    for (double& f : finish) {
      const auto pick = rng() % 10;
      f = pick == 0                     ? 0.0
          : pick == 1                   ? -0.0
          : pick == 2                   ? -0.5 * static_cast<double>(rng() % 3)
          : pick == 3 && trial % 5 == 0 ? std::numeric_limits<double>::infinity()
                                        : 0.25 * static_cast<double>(rng() % grid);
    }
    const std::vector<std::int32_t> want = hybrid::ranks_by_finish(finish);
    hybrid::RanksByFinish got(finish);
    for (int ask = 0; ask < 12; ++ask) {
      const std::size_t n = 1 + rng() % world;
      if (rng() % 2 == 0) {
        got.sort_to(n);
      } else {
        const double t = finish[static_cast<std::size_t>(want[n - 1])];
        const std::size_t before = got.sorted();
        const std::size_t count = got.count_to(t, n);
        const auto upper = std::upper_bound(
            want.begin() + static_cast<std::ptrdiff_t>(n), want.end(), t,
            [&](double v, std::int32_t a) { return v < finish[static_cast<std::size_t>(a)]; });
        ASSERT_EQ(count, static_cast<std::size_t>(upper - want.begin()))
            << "trial " << trial << ", n " << n;
        past_asked += got.sorted() > std::max(before, n) ? 1 : 0;
      }
      ASSERT_GE(got.sorted(), std::min(n, world));
      ASSERT_LE(got.sorted(), world);
      ASSERT_TRUE(std::equal(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(got.sorted()),
                             got.order().begin()))
          << "trial " << trial << ", n " << n;
      // The rest are the other ranks.
      std::vector<std::int32_t> all = got.order();
      std::sort(all.begin(), all.end());
      for (std::size_t a = 0; a < world; ++a) ASSERT_EQ(all[a], static_cast<std::int32_t>(a));
      ++checked;
    }
  }
  EXPECT_GT(checked, 5000);
  EXPECT_GT(past_asked, 200);
}

}  // namespace
}  // namespace fulcrum
