// The certified lower bound (docs/HYBRID.md section 4) against the true
// optimum: every valid schedule of small random requests, enumerated and
// priced by the independent recount (brute_schedule.h). The bound must never
// exceed the optimum, must equal it where the optimum is reachable by the
// bound's own argument, and its latency term must lift it strictly above
// the bound without that term somewhere. Known answers where the latency
// term binds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "brute_schedule.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_strategies.h"

namespace fulcrum {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A plan of the row's positions over g members: owner[pos] = member. Block
// size 1, so a member's order and padding change no tile, and none is used.
ShardPlan plan_of(const CpWorkload& w, const std::vector<int>& owner, int g) {
  std::vector<std::vector<std::int64_t>> held(static_cast<std::size_t>(g));
  for (std::size_t pos = 0; pos < owner.size(); ++pos)
    held[static_cast<std::size_t>(owner[pos])].push_back(static_cast<std::int64_t>(pos));
  std::size_t len = 0;
  for (const auto& h : held) len = std::max(len, h.size());
  ShardPlan plan = cp::padded_plan(w, "enumerated", static_cast<std::int64_t>(len));
  for (std::size_t m = 0; m < held.size(); ++m)
    std::copy(held[m].begin(), held[m].end(), plan.positions.begin() + m * len);
  plan.padding = 0;
  for (const std::int64_t pos : plan.positions) plan.padding += pos == kPadPosition ? 1 : 0;
  cp::finish_plan(w, plan);
  return plan;
}

// The least duration of one slot holding `pieces` on `ranks`, over every
// assignment of its row's positions to members that leaves none empty and
// none above T (an empty member only adds its fixed cost and holds a rank,
// so no optimum needs one). Priced alone by the independent recount, as the
// one slot of a request of just these pieces (a slot's price depends on its
// row, ranks and plan only), which the independent check also holds it to.
double least_slot(const ScheduleRequest& r, const std::vector<DocPiece>& pieces,
                  const std::vector<std::int32_t>& ranks) {
  ScheduleRequest alone = r;
  alone.doc_lengths.clear();
  ScheduleSlot slot;
  slot.ranks = ranks;
  for (const DocPiece& piece : pieces) {
    slot.pieces.push_back({static_cast<std::int64_t>(alone.doc_lengths.size()), 0, piece.length});
    alone.doc_lengths.push_back(piece.length);
  }
  const CpWorkload w = slot_workload(alone, slot);
  const auto g = static_cast<int>(ranks.size());
  std::vector<int> owner(static_cast<std::size_t>(w.tokens), 0);
  double best = kInf;
  for (;;) {
    std::vector<std::int64_t> count(static_cast<std::size_t>(g), 0);
    for (const int m : owner) ++count[static_cast<std::size_t>(m)];
    const bool fits = std::all_of(count.begin(), count.end(), [&](std::int64_t c) {
      return c >= 1 && c <= r.max_tokens_per_rank;
    });
    if (fits) {
      slot.plan = plan_of(w, owner, g);
      Schedule s;
      s.slots.push_back(slot);
      EXPECT_EQ(cp::brute_schedule_check(alone, s), "");
      best = std::min(best, cp::brute_schedule_cost(alone, s).step);
    }
    std::size_t i = 0;  // the next assignment, counting in base g
    while (i < owner.size() && ++owner[i] == g) owner[i++] = 0;
    if (i == owner.size()) break;
  }
  return best;
}

struct Search {
  const ScheduleRequest& r;
  std::vector<DocPiece> pieces;
  std::vector<std::vector<std::int32_t>> subsets;  // every non-empty rank set
  std::map<std::pair<std::vector<std::size_t>, std::size_t>, double> memo;
  double best = kInf;

  double duration(const std::vector<std::size_t>& group, std::size_t subset) {
    auto [it, fresh] = memo.try_emplace({group, subset}, 0.0);
    if (fresh) {
      std::vector<DocPiece> mine;
      for (const std::size_t i : group) mine.push_back(pieces[i]);
      it->second = least_slot(r, mine, subsets[subset]);
    }
    return it->second;
  }

  // Every order of the slots (slot k runs in wave k: any valid schedule is
  // priced as its slots taken in wave order, so some order gives its
  // timeline), every rank set per slot; each slot at its least duration,
  // since an end time never falls when a duration rises.
  void timelines(const std::vector<std::vector<std::size_t>>& groups) {
    std::vector<std::size_t> order(groups.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<std::size_t> pick(groups.size(), 0);
    for (;;) {
      do {
        std::vector<double> free_at(static_cast<std::size_t>(r.world_size), 0.0);
        for (const std::size_t k : order) {
          double start = 0;
          for (const std::int32_t a : subsets[pick[k]]) start = std::max(start, free_at[a]);
          const double end = start + duration(groups[k], pick[k]);
          for (const std::int32_t a : subsets[pick[k]]) free_at[a] = end;
        }
        best = std::min(best, *std::max_element(free_at.begin(), free_at.end()));
      } while (std::next_permutation(order.begin(), order.end()));
      std::size_t i = 0;
      while (i < pick.size() && ++pick[i] == subsets.size()) pick[i++] = 0;
      if (i == pick.size()) break;
    }
  }

  // Every partition of the pieces into slots.
  void partitions(std::size_t next, std::vector<std::vector<std::size_t>>& groups) {
    if (next == pieces.size()) {
      timelines(groups);
      return;
    }
    for (std::size_t k = 0; k <= groups.size(); ++k) {
      if (k == groups.size()) groups.emplace_back();
      groups[k].push_back(next);
      partitions(next + 1, groups);
      groups[k].pop_back();
      if (groups[k].empty()) groups.pop_back();
    }
  }
};

// The least step time over every valid schedule of `r` (block size 1).
double optimum(const ScheduleRequest& r) {
  Search s{r, schedule_pieces(r), {}, {}, kInf};
  for (std::uint32_t bits = 1; bits < (1U << r.world_size); ++bits) {
    std::vector<std::int32_t> ranks;
    for (std::int32_t a = 0; a < r.world_size; ++a) {
      if ((bits >> a) & 1U) ranks.push_back(a);
    }
    s.subsets.push_back(ranks);
  }
  std::vector<std::vector<std::size_t>> groups;
  s.partitions(0, groups);
  return s.best;
}

CostProfile random_profile(SplitMix64& rng) {
  CostProfile p;
  p.name = "random";
  // Round figures, half of them zero at times, so that every term binds
  // somewhere.
  const auto pick = [&](std::int64_t hi) { return static_cast<double>(rng.uniform(0, hi)) / 4; };
  p.tile_seconds = pick(4);
  p.token_seconds = pick(4);
  p.slot_seconds = pick(8);
  p.kv_bytes_per_token = static_cast<double>(rng.uniform(1, 4));
  p.intra_node_bytes_per_second = static_cast<double>(rng.uniform(1, 8));
  p.inter_node_bytes_per_second = static_cast<double>(rng.uniform(1, 8));
  p.latency_seconds = pick(8);
  p.ranks_per_node = static_cast<std::int32_t>(rng.uniform(1, 3));
  return p;
}

MaskSpec random_mask(SplitMix64& rng) {
  switch (rng.uniform(0, 3)) {
    case 0:
      return MaskSpec::full();
    case 1:
      return MaskSpec::sliding(rng.uniform(1, 4));
    case 2:
      return MaskSpec::prefix(rng.uniform(1, 4));
    default:
      return MaskSpec::causal();
  }
}

// Requests of at most 6 tokens on at most 3 ranks, T from 1 to 4, block
// size 1, every dense mask, random profiles: the bound never exceeds the
// enumerated optimum; it equals it on some (so a bound raised by any amount
// fails there), and the latency term and the work caps each lift it
// strictly above the bound without them on some. The same requests with overlap 0.5 and 1 stay at
// or below their optimum. About 0.3 s.
TEST(LowerBound, NeverAboveTheEnumeratedOptimumAndTightSomewhere) {
  SplitMix64 rng(2511);
  int tight = 0;
  int lifted = 0;
  int capped = 0;
  for (int c = 0; c < 120; ++c) {
    ScheduleRequest r;
    r.world_size = static_cast<std::int32_t>(rng.uniform(1, 3));
    r.max_tokens_per_rank = rng.uniform(1, 4);
    r.block_size = 1;
    r.mask = random_mask(rng);
    r.profile = random_profile(rng);
    std::int64_t total = 0;
    const auto docs = rng.uniform(1, 3);
    for (std::int64_t d = 0; d < docs && total < 6; ++d) {
      const std::int64_t len = std::min<std::int64_t>(rng.uniform(1, 5), 6 - total);
      r.doc_lengths.push_back(len);
      total += len;
    }
    if (total > r.world_size * r.max_tokens_per_rank)
      r.max_tokens_per_rank = ceil_div(total, r.world_size);
    ASSERT_TRUE(validate_schedule_request(r)) << "case " << c;
    const double best = optimum(r);
    const BoundTerms terms = step_time_lower_bound_terms(r);
    ASSERT_LT(best, kInf) << "case " << c;
    EXPECT_LE(terms.bound, best * (1 + 1e-12)) << "case " << c;
    if (terms.bound >= best * (1 - 1e-12)) ++tight;
    const double without = std::max(terms.average - terms.latency / r.world_size, terms.per_piece);
    if (std::max(terms.average, terms.per_piece) > without * (1 + 1e-12)) ++lifted;
    if (terms.bound > std::max(terms.average, terms.per_piece) * (1 + 1e-12)) ++capped;
    // With overlap (f of the shorter of compute and exchange hidden) the
    // optimum may fall; the bound, charging (1 - f) of the exchange, stays
    // below it.
    for (const double f : {0.5, 1.0}) {
      ScheduleRequest overlapped = r;
      overlapped.profile.exchange_overlap = f;
      EXPECT_LE(step_time_lower_bound(overlapped), optimum(overlapped) * (1 + 1e-12))
          << "case " << c << ", overlap " << f;
    }
    // The row term (each member pays row_token_seconds per token of its
    // slot's whole row) is left out of the bound: a non-negative term it
    // omits can only raise the optimum.
    ScheduleRequest rowed = r;
    rowed.profile.row_token_seconds = r.profile.tile_seconds + r.profile.token_seconds + 1e-3;
    EXPECT_LE(step_time_lower_bound(rowed), optimum(rowed) * (1 + 1e-12)) << "case " << c;
    EXPECT_GT(optimum(rowed), best) << "case " << c;
  }
  EXPECT_GE(tight, 10);
  EXPECT_GE(lifted, 5);
  EXPECT_GE(capped, 5);
}

// The cross-node count (section 4): requests of at most 6 tokens on 3 or 4
// ranks, two to a node, the intra-node link faster than the inter-node one,
// pieces longer than T under masks that see every earlier position, and
// profiles that are K/V alone at times. The bound never exceeds the
// enumerated optimum; the cross-node count lifts the exchange above the
// per-member argument alone on some, and the bound equals the optimum on
// some of those, so a cross-node count raised by any amount fails there.
TEST(LowerBound, CrossNodePairsNeverAboveTheEnumeratedOptimum) {
  SplitMix64 rng(2531);
  int tight = 0;
  int lifted = 0;
  int lifted_and_tight = 0;
  for (int c = 0; c < 200; ++c) {
    ScheduleRequest r;
    r.world_size = c % 4 == 0 ? 3 : 4;
    r.max_tokens_per_rank = c % 4 == 2 ? 1 : rng.uniform(1, 2);
    r.block_size = 1;
    switch (rng.uniform(0, 2)) {
      case 0:
        r.mask = MaskSpec::full();
        break;
      case 1:
        r.mask = MaskSpec::prefix(rng.uniform(1, 3));
        break;
      default:
        r.mask = MaskSpec::causal();
    }
    r.profile = random_profile(rng);
    if (c % 2 == 0) {  // K/V alone
      r.profile.tile_seconds = r.profile.token_seconds = r.profile.slot_seconds = 0;
      r.profile.latency_seconds = 0;
    }
    r.profile.ranks_per_node = 2;
    r.profile.intra_node_bytes_per_second = static_cast<double>(rng.uniform(4, 8));
    r.profile.inter_node_bytes_per_second = static_cast<double>(rng.uniform(1, 3));
    const std::int64_t room = std::min<std::int64_t>(6, r.world_size * r.max_tokens_per_rank);
    const std::int64_t longest = rng.uniform(r.max_tokens_per_rank + 1, room);
    r.doc_lengths.push_back(c % 4 == 2 ? room : longest);
    if (r.doc_lengths[0] < room && c % 3 == 0) {
      r.doc_lengths.push_back(rng.uniform(1, room - r.doc_lengths[0]));
    }
    ASSERT_TRUE(validate_schedule_request(r)) << "case " << c;
    const double best = optimum(r);
    const BoundTerms terms = step_time_lower_bound_terms(r);
    ASSERT_LT(best, kInf) << "case " << c;
    EXPECT_LE(terms.bound, best * (1 + 1e-12)) << "case " << c;
    const bool at = terms.bound >= best * (1 - 1e-12);
    // Lifted: the average reaches the bound (ties with the per-piece term
    // included), and its exchange is the cross-node count's.
    const bool up = terms.exchange > terms.exchange_by_member * (1 + 1e-12) &&
                    terms.average >= terms.bound * (1 - 1e-12);
    tight += at ? 1 : 0;
    lifted += up ? 1 : 0;
    lifted_and_tight += at && up ? 1 : 0;
  }
  EXPECT_GE(tight, 5);
  EXPECT_GE(lifted, 5);
  EXPECT_GE(lifted_and_tight, 3);
  std::printf("tight %d, lifted %d, both %d\n", tight, lifted, lifted_and_tight);
}

// Only K/V costs and latency, one rank per node: a full-mask document of
// 4 T tokens over 4 ranks, contiguous shards. Each member needs all 16 keys
// and holds 4: 12 received and 12 sent, (4 + 4) x 2 bytes / 2 per peer, 24 s,
// plus 3 peers x 0.25 s. The bound: exchange 2 x 4 x 12 x 2 / 2 = 96 s and
// latency (16 / 4) x (4 - 1) x 0.25 = 3 s over 4 ranks: 24.75 s, reached.
// Without the latency term it was 24 s.
TEST(LowerBound, LatencyOfEveryPairOfHoldersIsCounted) {
  ScheduleRequest r;
  r.doc_lengths = {16};
  r.world_size = 4;
  r.max_tokens_per_rank = 4;
  r.block_size = 4;
  r.mask = MaskSpec::full();
  r.profile.tile_seconds = 0;
  r.profile.token_seconds = 0;
  r.profile.slot_seconds = 0;
  r.profile.kv_bytes_per_token = 2;
  r.profile.intra_node_bytes_per_second = 2;
  r.profile.inter_node_bytes_per_second = 2;
  r.profile.latency_seconds = 0.25;
  r.profile.ranks_per_node = 1;
  Schedule s;
  ScheduleSlot slot;
  slot.ranks = {0, 1, 2, 3};
  slot.pieces = {{0, 0, 16}};
  slot.plan = contiguous_plan(slot_workload(r, slot));
  s.slots.push_back(slot);
  ASSERT_TRUE(validate_schedule(r, s));
  EXPECT_DOUBLE_EQ(evaluate_schedule(r, s).step_seconds, 24.75);
  const BoundTerms terms = step_time_lower_bound_terms(r);
  EXPECT_DOUBLE_EQ(terms.latency, 3.0);
  EXPECT_DOUBLE_EQ(terms.bound, 24.75);
}

// The per-piece term: the member holding the last query of a causal piece
// of 3 T tokens receives 2 T keys from peers holding at most T each, so it
// has at least 2 peers. Only latency costs: one slot of 3 ranks, each with
// both others as peers (2 x 0.5 s); the bound is 2 x 0.5 s, reached. The
// average's latency term gives the same here: (12 / 4) x 2 x 0.5 / 3.
TEST(LowerBound, PerPieceCountsEveryPeerItsLastQueryNeeds) {
  ScheduleRequest r;
  r.doc_lengths = {12};
  r.world_size = 3;
  r.max_tokens_per_rank = 4;
  r.block_size = 4;
  r.profile.tile_seconds = 0;
  r.profile.token_seconds = 0;
  r.profile.slot_seconds = 0;
  r.profile.kv_bytes_per_token = 1;
  r.profile.intra_node_bytes_per_second = 1e15;
  r.profile.inter_node_bytes_per_second = 1e15;
  r.profile.latency_seconds = 0.5;
  Schedule s;
  ScheduleSlot slot;
  slot.ranks = {0, 1, 2};
  slot.pieces = {{0, 0, 12}};
  slot.plan = contiguous_plan(slot_workload(r, slot));
  s.slots.push_back(slot);
  ASSERT_TRUE(validate_schedule(r, s));
  const double step = evaluate_schedule(r, s).step_seconds;
  const BoundTerms terms = step_time_lower_bound_terms(r);
  EXPECT_NEAR(terms.per_piece, 1.0, 1e-9);
  EXPECT_LE(terms.bound, step * (1 + 1e-12));
  EXPECT_NEAR(step, 1.0, 1e-9);
}

// The cross-node count: a causal document of 4 tokens, T = 1, on 4 ranks two
// to a node, K/V alone (1 byte per token, 4 B/s inside a node, 1 B/s
// between). Contiguous shards, positions 1 and 2 on one node: every member
// sends or receives one token inside its node and two across, 1 / 4 + 2 =
// 2.25 s each. The members' receipts are 3, 2, 1 and 0 tokens; the
// per-member argument lets each take one of them over the fast link,
// 2 x (2.25 + 1.25 + 0.25) / 4 = 1.875 s. The cross-node count: any two
// members on different nodes, the one with the later last position
// receives all the other holds, and 4 of the 6 pairs are on different
// nodes, so 4 of the 6 tokens received cross nodes: 2 x (2 / 4 + 4) / 4 =
// 2.25 s, reached.
TEST(LowerBound, CrossNodePairsOfACausalDocument) {
  ScheduleRequest r;
  r.doc_lengths = {4};
  r.world_size = 4;
  r.max_tokens_per_rank = 1;
  r.block_size = 1;
  r.profile.tile_seconds = 0;
  r.profile.token_seconds = 0;
  r.profile.slot_seconds = 0;
  r.profile.kv_bytes_per_token = 1;
  r.profile.intra_node_bytes_per_second = 4;
  r.profile.inter_node_bytes_per_second = 1;
  r.profile.latency_seconds = 0;
  r.profile.ranks_per_node = 2;
  const BoundTerms terms = step_time_lower_bound_terms(r);
  EXPECT_DOUBLE_EQ(terms.exchange_by_member, 7.5);
  EXPECT_DOUBLE_EQ(terms.exchange, 9.0);
  EXPECT_DOUBLE_EQ(terms.bound, 2.25);
  Schedule s;
  ScheduleSlot slot;
  slot.ranks = {0, 1, 2, 3};
  slot.pieces = {{0, 0, 4}};
  slot.plan = contiguous_plan(slot_workload(r, slot));
  s.slots.push_back(slot);
  ASSERT_TRUE(validate_schedule(r, s));
  EXPECT_DOUBLE_EQ(evaluate_schedule(r, s).step_seconds, 2.25);
  EXPECT_DOUBLE_EQ(optimum(r), 2.25);
}

// The work caps: a causal document of 4 tokens (block size 1: 1 + 2 + 3 + 4
// = 10 tiles of 1 s) on 2 ranks with room for all of it, 1 s of latency per
// peer and nothing else. Without the caps the bound is 10 / 2 = 5 s. With
// them: in a step of S < 7 s no member holds both of the two last queries
// (4 + 3 s), so the document has 2 members, each with a peer, and every
// member's work is at most S: by work the peers sum to at least 10 / S x 1,
// so S >= (10 + 10 / S) / 2, whose least solution is (10 + sqrt 180) / 4 =
// 5.854 s. Two members holding queries {4, 1} and {3, 2} take 5 + 1 s each:
// 6 s, the optimum.
TEST(LowerBound, WorkCapsCountTheMembersAHeavyPieceNeeds) {
  ScheduleRequest r;
  r.doc_lengths = {4};
  r.world_size = 2;
  r.max_tokens_per_rank = 4;
  r.block_size = 1;
  r.profile.tile_seconds = 1;
  r.profile.token_seconds = 0;
  r.profile.slot_seconds = 0;
  r.profile.kv_bytes_per_token = 1;
  r.profile.intra_node_bytes_per_second = 1e15;
  r.profile.inter_node_bytes_per_second = 1e15;
  r.profile.latency_seconds = 1;
  const BoundTerms terms = step_time_lower_bound_terms(r);
  EXPECT_DOUBLE_EQ(terms.average, 5.0);
  EXPECT_NEAR(terms.bound, (10 + std::sqrt(180.0)) / 4, 1e-5);
  EXPECT_LE(terms.bound, (10 + std::sqrt(180.0)) / 4);
  Schedule s;
  ScheduleSlot slot;
  slot.ranks = {0, 1};
  slot.pieces = {{0, 0, 4}};
  const CpWorkload w = slot_workload(r, slot);
  slot.plan = plan_of(w, {0, 1, 1, 0}, 2);
  s.slots.push_back(slot);
  ASSERT_TRUE(validate_schedule(r, s));
  EXPECT_NEAR(evaluate_schedule(r, s).step_seconds, 6.0, 1e-9);
  EXPECT_LE(terms.bound, optimum(r) * (1 + 1e-12));
}

}  // namespace
}  // namespace fulcrum
