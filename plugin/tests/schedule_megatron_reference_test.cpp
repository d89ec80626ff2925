// megatron_dcp's decision against the scan it replaced (issue 25 item 4):
// the scheduler decides each piece's group through per-size indexes;
// Megatron scans every open group for every piece. The reference below is
// that scan, kept as the implementation had it (next_micro_batch before the
// indexes), and the test holds megatron_dcp to it group for group, rank for
// rank and piece for piece on thousands of random batches made to tie:
// few distinct lengths, budgets that lengths fill exactly, worlds that are
// and are not powers of two, and a least CP size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/schedule_types.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

constexpr double kWorkloadCapDelta = 0.05;

std::int64_t padded_length(std::int64_t len, std::int32_t world) {
  const std::int64_t granularity = 2 * static_cast<std::int64_t>(world);
  return (len + granularity - 1) / granularity * granularity;
}

std::int64_t gpus_needed(std::int64_t padded, std::int64_t budget, std::int64_t min_cp) {
  std::int64_t c = 1;
  while (c * budget < padded) c *= 2;
  return std::max(c, min_cp);
}

double workload(std::int64_t padded, std::int64_t c) {
  return static_cast<double>(padded * padded) / static_cast<double>(c);
}

struct Group {
  std::int32_t first_rank = 0;
  std::int32_t size = 0;
  double packed = 0;
  double workload = 0;
  std::vector<std::size_t> pieces;
};

struct MicroBatch {
  std::vector<Group> groups;
  std::vector<std::size_t> leftovers;
};

// The scan megatron_dcp used before its per-size indexes, verbatim but for
// the failure, which needs no message here.
std::optional<MicroBatch> reference_micro_batch(const std::vector<std::int64_t>& padded,
                                                const std::vector<std::size_t>& remaining,
                                                std::int32_t world, std::int64_t budget,
                                                std::int64_t min_cp) {
  const auto t = static_cast<double>(budget);
  MicroBatch mb;
  const std::int64_t tall = padded[remaining[0]];
  const double cap = static_cast<double>(tall) * t * (1.0 + kWorkloadCapDelta);
  std::int32_t used = 0;  // groups hold ranks [0, used), in creation order
  double highest = 0;     // max workload over all ranks

  const auto open_group = [&](std::size_t piece, std::int64_t c) {
    Group g;
    g.first_rank = used;
    g.size = static_cast<std::int32_t>(c);
    g.packed = static_cast<double>(padded[piece]) / static_cast<double>(c);
    g.workload = workload(padded[piece], c);
    g.pieces.push_back(piece);
    used += g.size;
    highest = std::max(highest, g.workload);
    mb.groups.push_back(std::move(g));
  };
  // decide_exactly has refused a batch whose longest piece needs more
  // than W ranks (Megatron's assertion on the first sample).
  open_group(remaining[0], gpus_needed(tall, budget, min_cp));

  for (std::size_t k = 1; k < remaining.size(); ++k) {
    const std::size_t piece = remaining[k];
    const std::int64_t p = padded[piece];
    double best = 0;
    std::int64_t best_size = 0;
    std::size_t best_group = 0;
    bool found = false;
    for (std::int64_t c = gpus_needed(p, budget, min_cp); c <= world; c *= 2) {
      const double cost = workload(p, c);
      const double share = static_cast<double>(p) / static_cast<double>(c);
      for (std::size_t gi = 0; gi < mb.groups.size(); ++gi) {
        const Group& g = mb.groups[gi];
        if (g.size != c || g.packed + share > t) continue;
        // Members share one workload, so the projected maximum over all
        // ranks is the larger of today's and this group's new one.
        const double projected = std::max(highest, g.workload + cost);
        if (projected <= cap && (!found || projected < best)) {
          best = projected;
          best_size = c;
          best_group = gi;
          found = true;
        }
      }
      if (world - used >= c) {
        // The free ranks all have zero workload: the lowest c of them.
        const double projected = std::max(highest, 0.0 + cost);
        if (projected <= cap && (!found || projected < best)) {
          best = projected;
          best_size = c;
          best_group = mb.groups.size();
          found = true;
        }
      }
    }
    if (!found) {
      mb.leftovers.push_back(piece);
      continue;
    }
    if (best_group == mb.groups.size()) {
      open_group(piece, best_size);
    } else {
      Group& g = mb.groups[best_group];
      g.packed += static_cast<double>(p) / static_cast<double>(best_size);
      g.workload += workload(p, best_size);
      g.pieces.push_back(piece);
      highest = std::max(highest, g.workload);
    }
  }

  // fill_empty_gpus_once, while a rank is empty and a group can grow.
  while (used < world) {
    std::int32_t smallest = std::numeric_limits<std::int32_t>::max();
    for (const Group& g : mb.groups) smallest = std::min(smallest, g.size);
    const std::int32_t next = static_cast<std::int32_t>(
        std::min<std::int64_t>(2 * static_cast<std::int64_t>(smallest), world));
    const std::int32_t extra = next - smallest;
    bool grown = false;
    for (std::size_t gi = 0; gi < mb.groups.size() && !grown; ++gi) {
      Group& g = mb.groups[gi];
      const std::int32_t end = g.first_rank + g.size - 1;
      if (g.size != smallest || end + extra >= world) continue;
      if (end + 1 < used && used + extra > world) {
        // Megatron writes ranks [end + 1, used) to [end + extra + 1,
        // used + extra), past its list of W ranks.
        return std::nullopt;  // Megatron raises IndexError
      }
      g.size = next;
      g.workload = 0;
      for (const std::size_t p : g.pieces) g.workload += workload(padded[p], next);
      for (Group& other : mb.groups) {
        if (other.first_rank > end) other.first_rank += extra;
      }
      used += extra;
      grown = true;
    }
    if (grown) continue;
    // fill_with_full_dpxcp_group: the whole call's input, longest first.
    Group all;
    all.first_rank = 0;
    all.size = world;
    std::vector<std::size_t> rest;
    for (const std::size_t piece : remaining) {
      const double share = static_cast<double>(padded[piece]) / static_cast<double>(world);
      if (all.packed + share <= t) {
        all.packed += share;
        all.pieces.push_back(piece);
      } else {
        rest.push_back(piece);
      }
    }
    // The first piece always fits: P / W <= P / need <= T.
    mb.groups.assign(1, std::move(all));
    mb.leftovers = std::move(rest);
    break;
  }
  return mb;
}

// The reference's schedule: per micro-batch (a wave), its groups as slots;
// nullopt where Megatron fails (its assertion or its IndexError).
std::optional<Schedule> reference_schedule(const ScheduleRequest& request, std::int64_t min_cp) {
  const std::vector<DocPiece> pieces = schedule_pieces(request);
  const std::int32_t world = request.world_size;
  const std::int64_t budget = request.max_tokens_per_rank;
  std::vector<std::int64_t> padded(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    padded[i] = padded_length(pieces[i].length, world);
  }
  std::vector<std::size_t> remaining(pieces.size());
  for (std::size_t i = 0; i < remaining.size(); ++i) remaining[i] = i;
  std::stable_sort(remaining.begin(), remaining.end(),
                   [&](std::size_t a, std::size_t b) { return padded[a] > padded[b]; });
  if (gpus_needed(padded[remaining[0]], budget, min_cp) > world) return std::nullopt;
  Schedule schedule;
  for (std::int32_t wave = 0; !remaining.empty(); ++wave) {
    std::optional<MicroBatch> mb = reference_micro_batch(padded, remaining, world, budget, min_cp);
    if (!mb) return std::nullopt;
    for (const Group& g : mb->groups) {
      ScheduleSlot slot;
      slot.wave = wave;
      for (std::int32_t r = 0; r < g.size; ++r) slot.ranks.push_back(g.first_rank + r);
      for (const std::size_t p : g.pieces) slot.pieces.push_back(pieces[p]);
      schedule.slots.push_back(std::move(slot));
    }
    remaining = std::move(mb->leftovers);
  }
  return schedule;
}

// A batch made to tie: lengths from a few values (many pad alike), some of
// them exact multiples of the budget, so that workloads tie and packed
// lengths land on T exactly.
ScheduleRequest tied_request(SplitMix64& rng) {
  static constexpr std::int32_t kWorlds[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 31, 32, 64};
  ScheduleRequest r;
  r.world_size = kWorlds[rng.uniform(0, std::size(kWorlds) - 1)];
  r.max_tokens_per_rank = 2 * r.world_size * rng.uniform(1, 8);
  r.block_size = 16;
  r.profile = *builtin_cost_profile("h100_7b");
  std::vector<std::int64_t> values(static_cast<std::size_t>(rng.uniform(1, 5)));
  for (std::int64_t& v : values) {
    switch (rng.uniform(0, 2)) {
      case 0:  // a divisor or multiple of T
        v = r.max_tokens_per_rank * rng.uniform(1, 4) / rng.uniform(1, 4);
        break;
      case 1:  // short
        v = rng.uniform(1, r.max_tokens_per_rank);
        break;
      default:  // up to the whole world
        v = rng.uniform(1, r.max_tokens_per_rank * r.world_size);
        break;
    }
    v = std::max<std::int64_t>(v, 1);
  }
  const std::int64_t docs = rng.uniform(1, 12 * r.world_size);
  for (std::int64_t i = 0; i < docs; ++i) {
    r.doc_lengths.push_back(values[static_cast<std::size_t>(rng.uniform(0, values.size() - 1))]);
  }
  return r;
}

// Megatron's min_cp_size as a request's group_shapes carry it: every power
// of two from it up to W.
GroupShapes least_size(std::int32_t world, std::int64_t min_cp) {
  GroupShapes shapes;
  for (std::int64_t g = min_cp, k = 0; g <= world; g *= 2) {
    while ((std::int64_t{1} << k) < g) ++k;
    shapes.sizes |= std::uint64_t{1} << k;
  }
  return shapes;
}

// `got`'s slots are `want`'s first `count`, group for group.
void expect_slots(const Schedule& got, const Schedule& want, std::size_t count, int n) {
  EXPECT_EQ(got.slots.size(), count) << "batch " << n;
  for (std::size_t s = 0; s < std::min(count, got.slots.size()); ++s) {
    const ScheduleSlot& a = got.slots[s];
    const ScheduleSlot& b = want.slots[s];
    EXPECT_EQ(a.wave, b.wave) << "batch " << n << " slot " << s;
    EXPECT_EQ(a.ranks, b.ranks) << "batch " << n << " slot " << s;
    EXPECT_EQ(a.pieces.size(), b.pieces.size()) << "batch " << n << " slot " << s;
    for (std::size_t k = 0; k < std::min(a.pieces.size(), b.pieces.size()); ++k) {
      EXPECT_EQ(a.pieces[k].doc, b.pieces[k].doc) << "batch " << n << " slot " << s;
      EXPECT_EQ(a.pieces[k].offset, b.pieces[k].offset) << "batch " << n << " slot " << s;
    }
  }
}

// The guard's form of the decision (decide_megatron_dcp_waves) on the same
// batch: kUnsupported where Megatron fails; asked after every micro-batch
// but the last, each time with the whole micro-batches so far; and, stopped
// after micro-batch `stop`, the scan's slots up to it.
void expect_the_waves(const ScheduleRequest& r, const std::optional<Schedule>& want,
                      std::int32_t stop, int n) {
  std::int32_t asked = 0;
  bool stopped = true;
  const WavesCheck never = [&](const Schedule& so_far) {
    EXPECT_FALSE(so_far.slots.empty()) << "batch " << n;
    if (!so_far.slots.empty()) EXPECT_EQ(so_far.slots.back().wave, asked) << "batch " << n;
    ++asked;
    return false;
  };
  const Result<Schedule> all = decide_megatron_dcp_waves(r, never, stopped);
  EXPECT_FALSE(stopped) << "batch " << n;
  if (!want) {
    EXPECT_FALSE(all) << "batch " << n;
    if (!all) EXPECT_EQ(all.status().code(), StatusCode::kUnsupported) << "batch " << n;
    return;
  }
  ASSERT_TRUE(all) << "batch " << n << ": " << all.status().message();
  const std::int32_t waves = want->slots.back().wave + 1;
  EXPECT_EQ(asked, waves - 1) << "batch " << n;
  expect_slots(*all, *want, want->slots.size(), n);
  const WavesCheck at_stop = [&](const Schedule& so_far) {
    return so_far.slots.back().wave >= stop;
  };
  const Result<Schedule> part = decide_megatron_dcp_waves(r, at_stop, stopped);
  ASSERT_TRUE(part) << "batch " << n;
  EXPECT_EQ(stopped, stop < waves - 1) << "batch " << n;
  std::size_t count = 0;
  while (count < want->slots.size() && want->slots[count].wave <= stop) ++count;
  expect_slots(*part, *want, count, n);
}

// Holds megatron_dcp to the scan on one batch, group for group; the scan's
// micro-batches, or 0 where Megatron fails.
std::int32_t expect_the_scan(const ScheduleRequest& r, std::int64_t min_cp, int n) {
  const std::optional<Schedule> want = reference_schedule(r, min_cp);
  const Result<Schedule> got = decide_megatron_dcp(r);
  expect_the_waves(r, want, static_cast<std::int32_t>(n % 3), n);
  if (!want) {
    // Megatron fails: megatron_dcp falls back to fixed, or refuses where
    // fixed's schedule breaks the shapes too.
    if (got) {
      EXPECT_EQ(got->strategy_used, "fixed") << "batch " << n;
    }
    return 0;
  }
  EXPECT_TRUE(got) << "batch " << n << ": " << got.status().message();
  if (!got) return 0;
  EXPECT_EQ(got->strategy_used, "megatron_dcp") << "batch " << n << ": " << got->fallback_reason;
  expect_slots(*got, *want, want->slots.size(), n);
  return want->slots.back().wave + 1;
}

TEST(MegatronDcpReference, IndexedDecisionIsTheScanGroupForGroup) {
  SplitMix64 rng(20261126);
  int compared = 0;
  int failed = 0;
  int multi_wave = 0;
  for (int n = 0; n < 4000 && !HasFailure(); ++n) {
    ScheduleRequest r = tied_request(rng);
    std::int64_t min_cp = 1;
    if (rng.uniform(0, 3) == 0) {
      min_cp = std::int64_t{1} << rng.uniform(0, 2);
      if (min_cp > r.world_size) min_cp = 1;
      if (min_cp > 1) r.group_shapes = least_size(r.world_size, min_cp);
    }
    const std::int32_t waves = expect_the_scan(r, min_cp, n);
    failed += waves == 0 ? 1 : 0;
    compared += waves > 0 ? 1 : 0;
    multi_wave += waves > 1 ? 1 : 0;
  }
  // The batches reach every path: Megatron's schedules over several
  // micro-batches, and its failures.
  EXPECT_GT(compared, 3000);
  EXPECT_GT(multi_wave, 500);
  EXPECT_GT(failed, 10);
}

// Batches of many distinct lengths, tens of documents per rank: once every
// rank holds a group, a piece that no group of its own size takes within
// the highest workload tries larger sizes, where a group whose least
// workload cannot beat the best so far is not searched (Forming::candidate).
TEST(MegatronDcpReference, LargerSizesAreTriedAsTheScanTriesThem) {
  SplitMix64 rng(2517);
  static constexpr std::int32_t kWorlds[] = {2, 4, 6, 8, 16, 32, 64};
  for (int n = 0; n < 600 && !HasFailure(); ++n) {
    ScheduleRequest r;
    r.world_size = kWorlds[rng.uniform(0, std::size(kWorlds) - 1)];
    r.max_tokens_per_rank = 2 * r.world_size * rng.uniform(4, 64);
    r.block_size = 16;
    r.profile = *builtin_cost_profile("h100_7b");
    const std::int64_t docs = rng.uniform(1, 40 * r.world_size);
    const std::int64_t longest = r.max_tokens_per_rank * rng.uniform(1, r.world_size);
    for (std::int64_t i = 0; i < docs; ++i) {
      // Mostly short, a few long: log-uniform-ish by a random shift.
      const std::int64_t cap = std::max<std::int64_t>(1, longest >> rng.uniform(0, 8));
      r.doc_lengths.push_back(rng.uniform(1, cap));
    }
    expect_the_scan(r, 1, n);
  }
}

}  // namespace
}  // namespace fulcrum
