#include "calibrate/calibration_fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace fulcrum::calibrate {
namespace {

TEST(CalibrationFit, RecoversKnownComputeCoefficients) {
  std::vector<ComputeSample> samples;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 12; ++i) {
    const std::int64_t tiles = 10 + static_cast<std::int64_t>(rng() % 500);
    const std::int64_t tokens = 128 * (1 + static_cast<std::int64_t>(rng() % 32));
    samples.push_back(
        {tiles, tokens, 2e-4 * tiles + 3e-7 * tokens + 1e-3, 5e-4 * tiles + 1e-6 * tokens + 2e-3});
  }
  auto fit = fit_compute(samples);
  ASSERT_TRUE(fit) << fit.status().message();
  EXPECT_NEAR(fit->forward.coefficients[0], 2e-4, 1e-10);
  EXPECT_NEAR(fit->forward.coefficients[1], 3e-7, 1e-12);
  EXPECT_NEAR(fit->forward.coefficients[2], 1e-3, 1e-9);
  EXPECT_NEAR(fit->backward.coefficients[0], 5e-4, 1e-10);
  EXPECT_NEAR(fit->backward.coefficients[2], 2e-3, 1e-9);
  EXPECT_LT(fit->forward.max_relative_error, 1e-9);
}

TEST(CalibrationFit, NegativeCoefficientsAreHeldAtZero) {
  // Time falls with tiles here: no non-negative tile cost fits, so the tile
  // column is dropped and the rest refitted.
  std::vector<std::vector<double>> columns = {{1, 2, 3, 4}, {1, 1, 1, 1}};
  auto fit = fit_nonnegative(columns, {4, 3, 2, 1});
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->coefficients[0], 0.0);
  EXPECT_GT(fit->coefficients[1], 0.0);
  EXPECT_GT(fit->max_relative_error, 0.5);
}

TEST(CalibrationFit, RelativeErrorsKeepSmallMessagesRight) {
  // 20 us latency, 1 GB/s: an absolute least-squares fit is steered by the
  // large messages; the relative fit must get both ends within 1%.
  std::vector<TransferSample> samples;
  for (std::int64_t bytes = 4096; bytes <= (32LL << 20); bytes *= 8) {
    const double jitter = (bytes / 4096) % 2 ? 1.005 : 0.995;
    samples.push_back({bytes, (20e-6 + static_cast<double>(bytes) / 1e9) * jitter});
  }
  auto fit = fit_transfer(samples);
  ASSERT_TRUE(fit) << fit.status().message();
  EXPECT_NEAR(fit->latency_seconds, 20e-6, 0.5e-6);
  EXPECT_NEAR(fit->bytes_per_second, 1e9, 0.02e9);
  EXPECT_LT(fit->max_relative_error, 0.011);
}

TEST(CalibrationFit, RefusesWhatCannotBeFitted) {
  EXPECT_FALSE(fit_compute({{1, 1, 1, 1}}));  // one sample, three coefficients
  std::vector<ComputeSample> same(4, ComputeSample{10, 100, 1.0, 2.0});
  auto repeated = fit_compute(same);
  ASSERT_FALSE(repeated);
  EXPECT_NE(repeated.status().message().find("do not separate"), std::string::npos);
  auto flat = fit_transfer({{4096, 1e-3}, {32768, 1e-3}, {262144, 1e-3}});
  ASSERT_FALSE(flat);
  EXPECT_NE(flat.status().message().find("bandwidth"), std::string::npos);
  EXPECT_FALSE(fit_transfer({{4096, 0.0}, {8192, 1e-3}}));
}

// Whole-slot samples made from a known profile by the cost model's own
// formula (compute + bytes / bandwidth + latency x peers) give that profile
// back, and every sample's time to rounding.
TEST(CalibrationFit, SlotFitRecoversEveryTermOfAKnownProfile) {
  constexpr double kKv = 1024.0;  // the model's K/V bytes per token
  CostProfile truth;
  truth.tile_seconds = 4e-5;
  truth.token_seconds = 2e-6;
  truth.slot_seconds = 3e-3;
  truth.kv_bytes_per_token = kKv;
  truth.intra_node_bytes_per_second = 2e9;
  truth.inter_node_bytes_per_second = 2e9;
  truth.latency_seconds = 5e-4;
  std::vector<SlotSample> samples;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 60; ++i) {
    SlotSample s;
    s.group = 1 + static_cast<std::int32_t>(rng() % 4);
    s.tokens = 64 + static_cast<std::int64_t>(rng() % 2000);
    s.tiles = 1 + static_cast<std::int64_t>(rng() % 400);
    s.peers = s.group == 1 ? 0 : 1 + static_cast<std::int64_t>(rng() % (s.group - 1));
    const std::int64_t kv_tokens = s.peers * static_cast<std::int64_t>(rng() % 1500);
    s.kv_bytes = static_cast<std::int64_t>(kKv) * kv_tokens;
    s.seconds = truth.tile_seconds * s.tiles + truth.token_seconds * s.tokens + truth.slot_seconds +
                kv_tokens * kKv / truth.intra_node_bytes_per_second +
                truth.latency_seconds * s.peers;
    samples.push_back(s);
  }
  CostProfile start;
  start.name = "start";
  start.kv_bytes_per_token = 1.0;
  auto fit = fit_slots(samples, start, kKv);
  ASSERT_TRUE(fit) << fit.status().message();
  EXPECT_TRUE(fit->exchange_fitted);
  EXPECT_EQ(fit->profile.name, "start");
  EXPECT_NEAR(fit->profile.tile_seconds / truth.tile_seconds, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.token_seconds / truth.token_seconds, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.slot_seconds / truth.slot_seconds, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.intra_node_bytes_per_second / 2e9, 1.0, 1e-6);
  EXPECT_EQ(fit->profile.inter_node_bytes_per_second, fit->profile.intra_node_bytes_per_second);
  EXPECT_NEAR(fit->profile.latency_seconds / truth.latency_seconds, 1.0, 1e-6);
  EXPECT_EQ(fit->profile.kv_bytes_per_token, kKv);
  ASSERT_EQ(fit->errors.size(), samples.size());
  EXPECT_LT(fit->max_abs_error, 1e-8);
  EXPECT_LE(fit->median_abs_error, fit->max_abs_error);
  // The same samples again: the same bits (every rank fits them itself).
  auto again = fit_slots(samples, start, kKv);
  ASSERT_TRUE(again);
  EXPECT_EQ(std::memcmp(&again->profile.tile_seconds, &fit->profile.tile_seconds, sizeof(double)),
            0);
  EXPECT_EQ(again->profile.latency_seconds, fit->profile.latency_seconds);
}

// Slots of one member exchange nothing: the exchange terms cannot be told
// from the samples, so the start profile's stay, and a known 20% error on
// one sample shows in the reported errors.
TEST(CalibrationFit, SlotFitWithoutExchangeKeepsTheStartsExchangeTerms) {
  std::vector<SlotSample> samples;
  for (int i = 0; i < 10; ++i) {
    const std::int64_t tokens = 100 * (i + 1);
    const std::int64_t tiles = (i * i) % 7 + 1;
    samples.push_back({1, tokens, tiles, 0, 0, 1e-5 * tiles + 1e-6 * tokens + 1e-3});
  }
  CostProfile start;
  start.kv_bytes_per_token = 77;
  start.intra_node_bytes_per_second = 5e9;
  start.inter_node_bytes_per_second = 1e9;
  start.latency_seconds = 1e-4;
  auto fit = fit_slots(samples, start, 4096);
  ASSERT_TRUE(fit) << fit.status().message();
  EXPECT_FALSE(fit->exchange_fitted);
  EXPECT_EQ(fit->profile.kv_bytes_per_token, 77);
  EXPECT_EQ(fit->profile.intra_node_bytes_per_second, 5e9);
  EXPECT_EQ(fit->profile.inter_node_bytes_per_second, 1e9);
  EXPECT_EQ(fit->profile.latency_seconds, 1e-4);
  EXPECT_NEAR(fit->profile.slot_seconds, 1e-3, 1e-9);
  // Too few samples for the terms is refused, not guessed.
  samples.resize(2);
  EXPECT_FALSE(fit_slots(samples, start, 4096));
}

// Every slot of two members: one peer each, so latency cannot be told from
// the per-slot constant; it is held at 0 and the constant takes it, and the
// samples are still predicted exactly.
TEST(CalibrationFit, SlotFitFoldsATermItCannotSeparate) {
  std::vector<SlotSample> samples;
  for (int i = 0; i < 12; ++i) {
    const std::int64_t tokens = 50 * (i + 1), tiles = (i * 5) % 11 + 1, kv = 1000 * ((i * 7) % 5);
    samples.push_back(
        {2, tokens, tiles, 1, kv, 1e-5 * tiles + 1e-6 * tokens + 1e-3 + kv / 1e9 + 2e-4});
  }
  auto fit = fit_slots(samples, CostProfile{}, 100.0);
  ASSERT_TRUE(fit) << fit.status().message();
  EXPECT_EQ(fit->profile.latency_seconds, 0.0);
  EXPECT_NEAR(fit->profile.slot_seconds, 1.2e-3, 1e-9);
  EXPECT_NEAR(fit->profile.intra_node_bytes_per_second / 1e9, 1.0, 1e-6);
  EXPECT_LT(fit->max_abs_error, 1e-8);
}

// Planted slot times: each member's time exactly a x tiles + b x tokens + c
// + r x row tokens + e x partial tiles + its K/V bytes / bandwidth +
// latency x peers.
struct Planted {
  double a, b, c, r, e, latency, bandwidth, kv;
};

// 80 members of slots of 1, 2 and 4 under `t`, every term in play: with
// partial tiles (0 up to the tiles) when t.e is set, else not recorded.
std::vector<SlotSample> planted_samples(const Planted& t, std::uint64_t seed) {
  std::vector<SlotSample> samples;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 80; ++i) {
    SlotSample s;
    s.group = std::array<std::int32_t, 3>{1, 2, 4}[rng() % 3];
    s.tokens = 32 + static_cast<std::int64_t>(rng() % 600);
    s.row_tokens = s.tokens + (s.group - 1) * (16 + static_cast<std::int64_t>(rng() % 600));
    s.tiles = 1 + static_cast<std::int64_t>(rng() % 300);
    if (t.e > 0) {
      s.partial_tiles = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s.tiles + 1));
    }
    s.peers = s.group == 1 ? 0 : 1 + static_cast<std::int64_t>(rng() % (s.group - 1));
    const std::int64_t kv_tokens = s.peers * (1 + static_cast<std::int64_t>(rng() % 400));
    s.kv_bytes = static_cast<std::int64_t>(t.kv) * kv_tokens;
    s.seconds = t.a * s.tiles + t.b * s.tokens + t.c + t.r * s.row_tokens +
                t.e * static_cast<double>(std::max<std::int64_t>(s.partial_tiles, 0)) +
                kv_tokens * t.kv / t.bandwidth + t.latency * s.peers;
    samples.push_back(s);
  }
  return samples;
}

// A planted row term: every member pays r per token of its slot's whole row.
// The fit recovers it from members of slots of 1, 2 and 4 (the row is what
// tells it from the member's own tokens), with every other term.
TEST(CalibrationFit, SlotFitRecoversAPlantedRowTerm) {
  const Planted t{3e-5, 1e-6, 2e-3, 4e-6, 0.0, 3e-4, 1e9, 512.0};
  std::vector<SlotSample> samples = planted_samples(t, 11);
  auto fit = fit_slots(samples, CostProfile{}, t.kv);
  ASSERT_TRUE(fit) << fit.status().message();
  EXPECT_TRUE(fit->row_fitted);
  EXPECT_FALSE(fit->partial_fitted);  // the samples do not record partial tiles
  EXPECT_NEAR(fit->profile.row_token_seconds / t.r, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.token_seconds / t.b, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.tile_seconds / t.a, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.slot_seconds / t.c, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.latency_seconds / t.latency, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.intra_node_bytes_per_second / t.bandwidth, 1.0, 1e-6);
  EXPECT_LT(fit->max_abs_error, 1e-8);
  // Without the row's length (records from before it) the term cannot be
  // fitted: the start's is kept and the rest fitted to what it leaves.
  CostProfile start;
  start.row_token_seconds = t.r;
  for (SlotSample& s : samples) s.row_tokens = 0;
  auto kept = fit_slots(samples, start, t.kv);
  ASSERT_TRUE(kept) << kept.status().message();
  EXPECT_FALSE(kept->row_fitted);
  EXPECT_EQ(kept->profile.row_token_seconds, t.r);
}

// Partial tiles priced on top of every tile: recovered with the other terms
// where every sample has them; where one lacks them (a record from before
// them) the start's term is kept, priced on all of that sample's tiles, or
// dropped where it alone would leave a sample no time.
TEST(CalibrationFit, SlotFitRecoversAPlantedPartialTileTerm) {
  const Planted t{2e-5, 1e-6, 1e-3, 3e-6, 2.5e-5, 2e-4, 2e9, 256.0};
  const std::vector<SlotSample> samples = planted_samples(t, 13);
  auto fit = fit_slots(samples, CostProfile{}, t.kv);
  ASSERT_TRUE(fit) << fit.status().message();
  EXPECT_TRUE(fit->partial_fitted);
  EXPECT_NEAR(fit->profile.partial_tile_seconds / t.e, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.tile_seconds / t.a, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.token_seconds / t.b, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.row_token_seconds / t.r, 1.0, 1e-6);
  EXPECT_NEAR(fit->profile.latency_seconds / t.latency, 1.0, 1e-6);
  EXPECT_LT(fit->max_abs_error, 1e-8);
  // Without the term the same samples fit worse: it is what the fit found.
  std::vector<SlotSample> unrecorded = samples;
  for (SlotSample& s : unrecorded) s.partial_tiles = -1;
  auto without = fit_slots(unrecorded, CostProfile{}, t.kv);
  ASSERT_TRUE(without) << without.status().message();
  EXPECT_GT(without->max_abs_error, 1e-3);
  // One sample from an older record: the start's term is kept, and the
  // rest fitted to what it leaves.
  std::vector<SlotSample> older = samples;
  CostProfile start;
  start.partial_tile_seconds = t.e;
  older[5].seconds += t.e * static_cast<double>(older[5].tiles - older[5].partial_tiles);
  older[5].partial_tiles = -1;
  auto kept = fit_slots(older, start, t.kv);
  ASSERT_TRUE(kept) << kept.status().message();
  EXPECT_FALSE(kept->partial_fitted);
  EXPECT_EQ(kept->profile.partial_tile_seconds, t.e);
  EXPECT_NEAR(kept->profile.tile_seconds / t.a, 1.0, 1e-6);
  EXPECT_LT(kept->max_abs_error, 1e-8);
  // A start whose term alone exceeds a sample's time: dropped.
  start.partial_tile_seconds = 1.0;
  auto dropped = fit_slots(older, start, t.kv);
  ASSERT_TRUE(dropped) << dropped.status().message();
  EXPECT_EQ(dropped->profile.partial_tile_seconds, 0.0);
  // Columns that cannot tell partial tiles from tiles: none partial (a full
  // mask on whole blocks), or every tile partial (a sliding window under
  // 2B - 1 keys). Not fitted, the start's term kept, and the exchange terms
  // still recovered (trying to fit the term would drop them first).
  for (const bool every : {false, true}) {
    std::vector<SlotSample> alike = samples;
    for (SlotSample& s : alike) {
      s.seconds -= t.e * s.partial_tiles;
      s.partial_tiles = every ? s.tiles : 0;
      s.seconds += (every ? t.e : 0.0) * s.tiles;
    }
    CostProfile keep;
    keep.partial_tile_seconds = t.e;
    auto fitted = fit_slots(alike, keep, t.kv);
    ASSERT_TRUE(fitted) << fitted.status().message();
    EXPECT_FALSE(fitted->partial_fitted) << every;
    EXPECT_EQ(fitted->profile.partial_tile_seconds, t.e) << every;
    EXPECT_NEAR(fitted->profile.latency_seconds / t.latency, 1.0, 1e-6) << every;
    EXPECT_NEAR(fitted->profile.intra_node_bytes_per_second / t.bandwidth, 1.0, 1e-6) << every;
    // Every tile partial: the kept term prices them, a takes the rest.
    EXPECT_NEAR(fitted->profile.tile_seconds / t.a, 1.0, 1e-6) << every;
  }
  // Partial tiles proportional to another term (whole blocks of one
  // length: tokens / B): not told apart, so not fitted, the start's kept,
  // and every other term still recovered, exchange included.
  std::vector<SlotSample> proportional = samples;
  for (SlotSample& s : proportional) {
    s.seconds -= t.e * s.partial_tiles;
    s.tokens = 16 * (1 + s.tokens / 16);
    s.tiles = std::max(s.tiles, s.tokens / 16 + 1);  // some full tiles in every row
    s.partial_tiles = s.tokens / 16;
    s.seconds = t.a * s.tiles + t.b * s.tokens + t.c + t.r * s.row_tokens + t.e * s.partial_tiles +
                static_cast<double>(s.kv_bytes) / t.bandwidth + t.latency * s.peers;
  }
  CostProfile keep;
  keep.partial_tile_seconds = t.e;
  auto separated = fit_slots(proportional, keep, t.kv);
  ASSERT_TRUE(separated) << separated.status().message();
  EXPECT_NEAR(separated->profile.latency_seconds / t.latency, 1.0, 1e-6);
  EXPECT_NEAR(separated->profile.intra_node_bytes_per_second / t.bandwidth, 1.0, 1e-6);
  EXPECT_LT(separated->max_abs_error, 1e-8);
  EXPECT_FALSE(separated->partial_fitted);
  EXPECT_EQ(separated->profile.partial_tile_seconds, t.e);
}

// Members of one-rank slots only: the row is the member's tokens, so the
// start's row term is kept and token_seconds takes only what it leaves.
TEST(CalibrationFit, SlotFitKeepsTheStartsRowTermWithoutBiggerSlots) {
  std::vector<SlotSample> samples;
  for (int i = 0; i < 10; ++i) {
    const std::int64_t tokens = 100 * (i + 1);
    const std::int64_t tiles = (i * i) % 7 + 1;
    samples.push_back({1, tokens, tiles, 0, 0, 1e-5 * tiles + 3e-6 * tokens + 1e-3, tokens});
  }
  CostProfile start;
  start.row_token_seconds = 1e-6;
  auto fit = fit_slots(samples, start, 4096);
  ASSERT_TRUE(fit) << fit.status().message();
  EXPECT_FALSE(fit->row_fitted);
  EXPECT_EQ(fit->profile.row_token_seconds, 1e-6);
  EXPECT_NEAR(fit->profile.token_seconds, 2e-6, 1e-12);
  EXPECT_LT(fit->max_abs_error, 1e-8);
  // A start whose row term alone exceeds a sample's time leaves it nothing
  // to fit: the term is dropped and tokens take all of it.
  start.row_token_seconds = 1.0;
  auto dropped = fit_slots(samples, start, 4096);
  ASSERT_TRUE(dropped) << dropped.status().message();
  EXPECT_EQ(dropped->profile.row_token_seconds, 0.0);
  EXPECT_NEAR(dropped->profile.token_seconds, 3e-6, 1e-12);
}

TEST(CalibrationFit, ProfileYamlHasExactlyTheCostProfileKeys) {
  CostProfile p;
  p.name = "cpu_calibrated";
  p.tile_seconds = 1.5e-4;
  p.ranks_per_node = 2;
  const std::string text = profile_yaml(p, {"made by a test", "second line"});
  std::istringstream in(text);
  std::string line;
  std::vector<std::string> keys;
  int comments = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# ", 0) == 0) {
      ++comments;
      continue;
    }
    keys.push_back(line.substr(0, line.find(':')));
  }
  EXPECT_EQ(comments, 2);
  EXPECT_EQ(keys, (std::vector<std::string>{"name", "tile_seconds", "token_seconds", "slot_seconds",
                                            "kv_bytes_per_token", "intra_node_bytes_per_second",
                                            "inter_node_bytes_per_second", "latency_seconds",
                                            "ranks_per_node"}));
  EXPECT_NE(text.find("tile_seconds: 1.500000e-04\n"), std::string::npos);
  EXPECT_NE(text.find("ranks_per_node: 2\n"), std::string::npos);
  // The optional terms appear only when set, after the others.
  p.row_token_seconds = 2.5e-6;
  const std::string with_row = profile_yaml(p, {});
  const std::string last = "row_token_seconds: 2.500000e-06\n";
  ASSERT_GT(with_row.size(), last.size());
  EXPECT_EQ(with_row.substr(with_row.size() - last.size()), last);
  p.partial_tile_seconds = 4e-5;
  const std::string with_partial = profile_yaml(p, {});
  const std::string partial = "partial_tile_seconds: 4.000000e-05\n";
  ASSERT_GT(with_partial.size(), partial.size());
  EXPECT_EQ(with_partial.substr(with_partial.size() - partial.size()), partial);
}

}  // namespace
}  // namespace fulcrum::calibrate
