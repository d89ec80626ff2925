#include "calibrate/calibration_fit.h"

#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace fulcrum::calibrate
