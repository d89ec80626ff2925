// Rule 5's candidate plans priced by the core's run counting against the
// counting it replaced (core/tests/slot_runs_reference.h), bit for bit: the
// members' tokens and tiles, the exact price (every member's bytes, peers
// and times) and both floors, on random rows (documents of one token to
// many blocks, 1 to 64 members, every dense mask, random nodes) under every
// CP rule hybrid prices: balanced, per_document, head_tail,
// per_document_padded, contiguous, per_document_weighted, and ptrr's plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
#include "fulcrum/core/slot_runs.h"
#include "fulcrum/core/workload.h"
#include "schedule_random_inputs.h"
#include "slot_runs_reference.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_hybrid_draft.h"

namespace fulcrum {
namespace {

// Bit-equal doubles (EXPECT_EQ on doubles would pass 0.0 against -0.0).
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same(const SlotCost& want, const SlotCost& got) {
  ASSERT_EQ(want.members.size(), got.members.size());
  EXPECT_TRUE(same_bits(want.start_seconds, got.start_seconds));
  EXPECT_TRUE(same_bits(want.end_seconds, got.end_seconds));
  for (std::size_t m = 0; m < want.members.size(); ++m) {
    const SlotMemberCost& a = want.members[m];
    const SlotMemberCost& b = got.members[m];
    EXPECT_EQ(a.rank, b.rank) << "member " << m;
    EXPECT_EQ(a.tokens, b.tokens) << "member " << m;
    EXPECT_EQ(a.tiles, b.tiles) << "member " << m;
    EXPECT_EQ(a.bytes_received, b.bytes_received) << "member " << m;
    EXPECT_EQ(a.bytes_sent, b.bytes_sent) << "member " << m;
    EXPECT_EQ(a.peers, b.peers) << "member " << m;
    EXPECT_TRUE(same_bits(a.compute_seconds, b.compute_seconds)) << "member " << m;
    EXPECT_TRUE(same_bits(a.comm_seconds, b.comm_seconds)) << "member " << m;
  }
}

struct Row {
  ScheduleRequest request;
  ScheduleSlot slot;
};

// Documents of 1 token to many blocks (log-uniform), g members on random
// ranks of a world cut into nodes of random size, random block and mask.
Row random_row(SplitMix64& rng) {
  Row row;
  ScheduleRequest& r = row.request;
  const auto g =
      static_cast<std::int32_t>(rng.uniform(0, 4) == 0 ? rng.uniform(1, 4) : rng.uniform(1, 64));
  r.world_size = g + static_cast<std::int32_t>(rng.uniform(0, 64));
  r.block_size = rng.uniform(0, 2) == 0 ? 128 : rng.uniform(1, 256);
  r.profile = *builtin_cost_profile(rng.uniform(0, 1) == 0 ? "h100_7b" : "cpu_gloo");
  r.profile.ranks_per_node = static_cast<std::int32_t>(rng.uniform(1, 16));
  r.profile.exchange_overlap =
      rng.uniform(0, 2) == 0 ? 0.0 : static_cast<double>(rng.uniform(0, 100)) / 100;
  const auto docs = rng.uniform(1, rng.uniform(0, 1) == 0 ? 4 : 48);
  const std::int64_t most = r.block_size * rng.uniform(1, 40);
  for (std::int64_t d = 0; d < docs; ++d) {
    // Log-uniform over 1 .. most: many short documents and a few long ones.
    std::int64_t len = 1;
    for (const std::int64_t cap = rng.uniform(1, most); len * 2 <= cap;) len *= 2;
    len = std::min(most, len + rng.uniform(0, len));
    r.doc_lengths.push_back(len);
    row.slot.pieces.push_back({d, 0, len});
  }
  r.mask = schedule_tests::random_dense_mask(rng, r.block_size);
  std::int64_t n = 0;
  for (const std::int64_t len : r.doc_lengths) n += len;
  r.max_tokens_per_rank = n;
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(r.world_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  for (std::size_t i = ranks.size(); i > 1; --i) {
    std::swap(ranks[i - 1],
              ranks[static_cast<std::size_t>(rng.uniform(0, static_cast<std::int64_t>(i) - 1))]);
  }
  row.slot.ranks.assign(ranks.begin(), ranks.begin() + g);
  return row;
}

// Every rule's runs on the row that can shard it.
std::vector<std::pair<std::string, RunShardPlan>> rule_plans(SplitMix64& rng, const CpWorkload& w) {
  std::vector<std::pair<std::string, RunShardPlan>> out;
  for (const char* rule :
       {"balanced", "per_document", "head_tail", "per_document_padded", "contiguous"}) {
    if (std::optional<RunShardPlan> runs = hybrid::slot_rule_runs(rule, w)) {
      out.emplace_back(rule, std::move(*runs));
    }
  }
  std::vector<double> weight(static_cast<std::size_t>(w.cp_size));
  for (double& x : weight) x = 0.5 + static_cast<double>(rng.uniform(0, 1000)) / 1000;
  out.emplace_back("per_document_weighted", cp::detail::per_document_weighted_runs(w, weight));
  if (Result<ShardPlan> ptrr = cp::plan_ptrr(w); ptrr.is_ok()) {
    out.emplace_back("ptrr", runs_of_plan(ptrr.value()));
  }
  return out;
}

TEST(RuleCounts, EveryRulesPlanCountedAndPricedAsTheReference) {
  SplitMix64 rng(20261126);
  std::int64_t plans = 0;
  std::int64_t exchanging = 0;
  std::int64_t stopped = 0;  // answers without the exchange totals, their floor weaker
  for (int i = 0; i < 600; ++i) {
    const Row row = random_row(rng);
    const CpWorkload w = slot_workload(row.request, row.slot);
    for (const auto& [rule, runs] : rule_plans(rng, w)) {
      SCOPED_TRACE("row " + std::to_string(i) + ", " + rule + ", g = " + std::to_string(w.cp_size) +
                   ", B = " + std::to_string(w.block_size) + ", mask " + mask_to_string(w.mask));
      const std::vector<RankWork> want_work = reference::run_tokens_and_tiles(w, runs);
      const std::vector<RankWork> got_work = run_tokens_and_tiles(w, runs);
      ASSERT_EQ(want_work.size(), got_work.size());
      for (std::size_t m = 0; m < want_work.size(); ++m) {
        EXPECT_EQ(want_work[m].tokens, got_work[m].tokens) << "member " << m;
        EXPECT_EQ(want_work[m].tiles, got_work[m].tiles) << "member " << m;
      }
      const SlotCost want = reference::evaluate_slot_runs(row.request, row.slot, runs);
      expect_same(want, evaluate_slot_runs(row.request, row.slot, runs));
      for (const bool exchange : {false, true}) {
        const double floor = reference::slot_end_floor_runs(row.request, row.slot, runs, exchange);
        EXPECT_TRUE(same_bits(floor, slot_end_floor_runs(row.request, row.slot, runs, exchange)))
            << "exchange floor " << exchange;
        // The shared-count path: the floor where it reaches the end to
        // beat, else the exact end, for ends to beat around both.
        const CountedRuns counted = count_runs(row.request, row.slot, runs);
        const double peers = reference::slot_end_floor_runs(row.request, row.slot, runs, false);
        for (const double beat : {floor, want.end_seconds, 0.5 * (floor + want.end_seconds), peers,
                                  0.5 * (peers + floor)}) {
          const SlotEnd e = slot_end_counted_below(row.request, row.slot, counted, beat, exchange);
          EXPECT_EQ(e.exact, !(floor >= beat));
          EXPECT_TRUE(same_bits(e.end, e.exact ? want.end_seconds : floor));
          if (e.exact) expect_same(want, e.cost);
          // Without the floor's value: the same answer to "can it beat";
          // where the exchange totals were not counted, a weaker floor
          // (compute alone, or with peers' latency) that reaches `beat`
          // too, as its peers' floor; else the same floors.
          const SlotEnd q =
              slot_end_counted_below(row.request, row.slot, counted, beat, exchange, false);
          EXPECT_EQ(q.exact, e.exact);
          if (q.exact) {
            EXPECT_TRUE(same_bits(q.end, e.end));
            expect_same(want, q.cost);
          } else {
            const bool counted_all = same_bits(q.end, floor);
            if (counted_all) {
              EXPECT_TRUE(same_bits(q.peers_floor, e.peers_floor));
            } else {
              EXPECT_TRUE(q.end >= beat && q.end <= floor) << q.end << " " << beat;
              EXPECT_TRUE(q.peers_floor >= beat && q.peers_floor <= e.peers_floor);
            }
            stopped += counted_all ? 0 : 1;
          }
        }
      }
      ++plans;
      exchanging += w.cp_size > 1 && want.end_seconds > 0 ? 1 : 0;
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(plans, 3000);
  EXPECT_GT(exchanging, 2000);
  EXPECT_GT(stopped, 500);
}

}  // namespace
}  // namespace fulcrum
