#include "train/profile_refit.h"

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace fulcrum::train {
namespace {

using calibrate::SlotSample;

constexpr double kKv = 512.0;  // the model's K/V bytes per token

CostProfile truth() {
  CostProfile p;
  p.name = "auto";
  p.tile_seconds = 3e-5;
  p.token_seconds = 4e-6;
  p.slot_seconds = 2e-3;
  p.kv_bytes_per_token = kKv;
  p.intra_node_bytes_per_second = 1e9;
  p.inter_node_bytes_per_second = 1e9;
  p.latency_seconds = 3e-4;
  p.ranks_per_node = 8;
  return p;
}

// One step's samples of a few slots, timed by `p` through the cost model's
// formula written out here (not predicted_seconds), times `scale`.
std::vector<SlotSample> step_samples(std::mt19937_64& rng, const CostProfile& p, double scale) {
  std::vector<SlotSample> out;
  for (int i = 0; i < 12; ++i) {
    SlotSample s;
    s.group = 1 + static_cast<std::int32_t>(rng() % 4);
    s.tokens = 32 + static_cast<std::int64_t>(rng() % 1000);
    s.tiles = 1 + static_cast<std::int64_t>(rng() % 300);
    s.peers = s.group - 1;
    const std::int64_t kv_tokens = s.peers * static_cast<std::int64_t>(rng() % 800);
    s.kv_bytes = kv_tokens * static_cast<std::int64_t>(kKv);
    s.seconds = scale * (p.tile_seconds * s.tiles + p.token_seconds * s.tokens + p.slot_seconds +
                         kv_tokens * p.kv_bytes_per_token / p.intra_node_bytes_per_second +
                         p.latency_seconds * s.peers);
    out.push_back(s);
  }
  return out;
}

TEST(ProfileRefit, PredictionMatchesTheCostModelsFormula) {
  std::mt19937_64 rng(1);
  const CostProfile p = truth();
  const std::vector<SlotSample> samples = step_samples(rng, p, 1.0);
  const ErrorSummary e = prediction_errors(p, samples, kKv);
  EXPECT_EQ(e.samples, 12);
  EXPECT_LT(e.max, 1e-12);
  // A profile priced at twice the K/V bytes per token predicts more
  // wherever a member exchanges, never less.
  CostProfile heavier = p;
  heavier.kv_bytes_per_token = 2 * kKv;
  for (const SlotSample& s : samples) {
    const double a = predicted_seconds(p, s, kKv);
    const double b = predicted_seconds(heavier, s, kKv);
    if (s.kv_bytes > 0) {
      EXPECT_GT(b, a);
    }
    if (s.kv_bytes == 0) {
      EXPECT_EQ(b, a);
    }
  }
}

// One pricing: a sample made from a real slot's member (as the trainer makes
// it: its tokens, tiles, peers, K/V bytes in and out, the row's tokens) is
// predicted at exactly the time evaluate_slot gives that member, with the row
// term and overlap in play, for every member of slots of 1 to 4 ranks.
TEST(ProfileRefit, PredictionIsTheCostModelsPriceOfTheSlot) {
  CostProfile p = truth();
  p.row_token_seconds = 2e-6;
  p.exchange_overlap = 0.5;
  ScheduleRequest request;
  request.doc_lengths = {700, 300, 90};
  request.world_size = 4;
  request.max_tokens_per_rank = 400;
  request.block_size = 32;
  request.profile = p;
  for (std::int32_t g = 1; g <= 4; ++g) {
    ScheduleSlot slot;
    for (std::int32_t r = 0; r < g; ++r) slot.ranks.push_back(r);
    slot.pieces = {{0, 0, 700}};
    if (g == 1) slot.pieces = {{1, 0, 300}};
    slot.plan = contiguous_plan(slot_workload(request, slot));
    const SlotCost cost = evaluate_slot(request, slot);
    std::int64_t row = 0;
    for (const SlotMemberCost& m : cost.members) row += m.tokens;
    for (const SlotMemberCost& m : cost.members) {
      SlotSample s;
      s.group = g;
      s.tokens = m.tokens;
      s.tiles = m.tiles;
      s.peers = m.peers;
      s.kv_bytes = m.bytes_sent + m.bytes_received;  // at the profile's kv_bytes_per_token
      s.row_tokens = row;
      EXPECT_NEAR(predicted_seconds(p, s, kKv), m.compute_seconds + m.comm_seconds, 1e-15)
          << "g " << g << " rank " << m.rank;
    }
  }
}

// Starting from a profile that is off by 3x, the first refit lands on the
// samples' profile, and only at multiples of `every`.
TEST(ProfileRefit, RefitsEveryKStepsAndFindsTheSamplesProfile) {
  std::mt19937_64 rng(2);
  const CostProfile target = truth();
  CostProfile start = target;
  start.tile_seconds *= 3;
  start.slot_seconds *= 3;
  ProfileRefit refit(start, 3, kKv);
  for (std::int64_t step = 1; step <= 6; ++step) {
    const RefitOutcome out = refit.add_step(step, step_samples(rng, target, 1.0));
    EXPECT_EQ(out.due, step % 3 == 0) << step;
    EXPECT_EQ(out.refitted, out.due) << step << " " << out.note;
    if (step < 3) {
      EXPECT_GT(out.predicted.median, 0.1) << "the start is off";
    }
    if (step > 3) {
      EXPECT_LT(out.predicted.max, 1e-6) << "after the refit";
    }
    if (out.refitted) {
      EXPECT_LT(out.fitted.max, 1e-8);
    }
  }
  EXPECT_EQ(refit.refits(), 2);
  EXPECT_NEAR(refit.profile().tile_seconds / target.tile_seconds, 1.0, 1e-6);
  EXPECT_NEAR(refit.profile().latency_seconds / target.latency_seconds, 1.0, 1e-6);
  EXPECT_EQ(profile_fingerprint(refit.profile()) == profile_fingerprint(start), false);
}

// The window is the last 2 x every steps: after the machine slows down 2x,
// two refits later the profile is the slower one.
TEST(ProfileRefit, OldStepsLeaveTheWindow) {
  std::mt19937_64 rng(3);
  ProfileRefit refit(truth(), 2, kKv);
  for (std::int64_t step = 1; step <= 4; ++step)
    refit.add_step(step, step_samples(rng, truth(), 1));
  for (std::int64_t step = 5; step <= 8; ++step)
    refit.add_step(step, step_samples(rng, truth(), 2));
  EXPECT_NEAR(refit.profile().slot_seconds / truth().slot_seconds, 2.0, 1e-6);
}

// A due refit without enough samples keeps the profile and says why.
TEST(ProfileRefit, TooFewSamplesKeepTheProfile) {
  ProfileRefit refit(truth(), 1, kKv);
  const RefitOutcome out = refit.add_step(1, {{1, 100, 3, 0, 0, 0.01}});
  EXPECT_TRUE(out.due);
  EXPECT_FALSE(out.refitted);
  EXPECT_NE(out.note.find("kept"), std::string::npos);
  EXPECT_EQ(profile_fingerprint(refit.profile()), profile_fingerprint(truth()));
}

// The fingerprint sees one bit of any field.
TEST(ProfileRefit, FingerprintSeesEveryField) {
  const CostProfile p = truth();
  const std::uint64_t base = profile_fingerprint(p);
  for (int field = 0; field < 12; ++field) {
    CostProfile q = p;
    double* d[] = {&q.tile_seconds,
                   &q.token_seconds,
                   &q.slot_seconds,
                   &q.kv_bytes_per_token,
                   &q.intra_node_bytes_per_second,
                   &q.inter_node_bytes_per_second,
                   &q.latency_seconds};
    if (field < 7) *d[field] = std::nextafter(*d[field], 1e300);
    if (field == 7) q.ranks_per_node += 1;
    if (field == 8) q.name = "auto2";
    if (field == 9) q.exchange_overlap = 0.5;
    if (field == 10) q.row_token_seconds = 1e-9;
    if (field == 11) q.partial_tile_seconds = 1e-9;
    EXPECT_NE(profile_fingerprint(q), base) << field;
  }
}

// Three ranks, the third with another profile: a ConsensusError naming it;
// the same profile everywhere passes.
TEST(ProfileRefit, CheckSameProfileNamesTheRankThatDiffers) {
  const CostProfile p = truth();
  CostProfile q = p;
  q.slot_seconds = std::nextafter(q.slot_seconds, 1.0);
  std::vector<CostProfile> per_rank = {p, p, q};
  auto group_for = [&](std::size_t me) {
    ConsensusGroup g;
    g.name = "world";
    g.ranks = {0, 1, 2};
    g.gather = [&, me](const Bytes& mine) {
      std::vector<Bytes> all;
      for (std::size_t r = 0; r < per_rank.size(); ++r) {
        if (r == me) {
          all.push_back(mine);
          continue;
        }
        Bytes other = mine;  // the same step, that rank's fingerprint
        const std::uint64_t f = profile_fingerprint(per_rank[r]);
        std::memcpy(other.data() + 8, &f, 8);
        all.push_back(other);
      }
      return all;
    };
    return g;
  };
  try {
    check_same_profile(group_for(0), p, 4);
    FAIL() << "no error";
  } catch (const ConsensusError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank(s) 2"), std::string::npos) << what;
    EXPECT_NE(what.find("after step 4"), std::string::npos) << what;
  }
  per_rank[2] = p;
  EXPECT_NO_THROW(check_same_profile(group_for(1), p, 4));
}

}  // namespace
}  // namespace fulcrum::train
