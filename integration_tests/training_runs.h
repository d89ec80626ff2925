// What the training scenarios of the integration drivers share: running
// `fulcrum train` with --set overrides and reading back its metrics and
// parameters, the equivalence job (packed rows, a long sample, float64) and
// the comparison of two runs' losses and parameters. No LibTorch.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness.h"

namespace fulcrum::it {

using nlohmann::json;

// One JSON object per non-empty line of a --metrics file.
std::vector<json> read_metrics(const std::string& path);
// The per-step records (those with "loss") and the per-micro-batch ones.
std::vector<json> step_records(const std::vector<json>& metrics);
std::vector<json> micro_batch_records(const std::vector<json>& metrics);
// `fulcrum train --config config --set ...`, with --metrics and
// --save-params when given.
std::vector<std::string> train_command(const std::string& config,
                                       const std::vector<std::string>& sets,
                                       const std::string& metrics = "",
                                       const std::string& params = "");
// A path under the source tree.
std::string source_file(const std::string& relative);

// The equivalence job's sample lengths (JSON), and its config written to
// `dir` (synthetic data of those lengths, float64, three steps).
extern const char* const kEquivalenceLengths;
std::string equivalence_config(const TempDir& dir);

struct Trained {
  std::vector<double> losses;
  std::vector<std::int64_t> tokens;  // loss tokens per step, over the global batch
  std::map<std::string, std::vector<double>> params;
  std::vector<json> steps;
  std::vector<json> micro_batches;
  std::vector<json> hybrid;  // hybrid mode's schedule lines
};

// `config` trained at DP x CP with `extra` --set overrides and `env` over
// the environment; metrics and parameters under `dir`, named by the layout.
Trained train_layout(const TempDir& dir, const std::string& config, int dp, int cp,
                     const std::vector<std::string>& extra = {},
                     const std::vector<std::string>& env = {});

// Losses to 1e-10 relative, loss tokens exactly, parameters to 1e-9.
void expect_same(const Trained& expected, const Trained& got, const std::string& what);

}  // namespace fulcrum::it
