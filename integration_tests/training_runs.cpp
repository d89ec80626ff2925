// The integration drivers' training runs: `fulcrum train` with --set
// overrides, its metrics and parameters read back, and the comparison of two
// runs' float64 results (training_runs.h).
#include "training_runs.h"

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace fulcrum::it {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

}  // namespace

std::vector<json> read_metrics(const std::string& path) {
  std::vector<json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(json::parse(line));
  }
  return lines;
}

std::vector<json> step_records(const std::vector<json>& metrics) {
  std::vector<json> out;
  for (const json& j : metrics) {
    if (j.contains("loss")) out.push_back(j);
  }
  return out;
}

std::vector<json> micro_batch_records(const std::vector<json>& metrics) {
  std::vector<json> out;
  for (const json& j : metrics) {
    if (j.contains("microbatch")) out.push_back(j);
  }
  return out;
}

std::vector<std::string> train_command(const std::string& config,
                                       const std::vector<std::string>& sets,
                                       const std::string& metrics, const std::string& params) {
  std::vector<std::string> argv = {FULCRUM_BIN, "train", "--config", config};
  for (const std::string& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  if (!metrics.empty()) argv.insert(argv.end(), {"--metrics", metrics});
  if (!params.empty()) argv.insert(argv.end(), {"--save-params", params});
  return argv;
}

std::string source_file(const std::string& relative) {
  return (fs::path(FULCRUM_SOURCE_DIR) / relative).string();
}

// (b) ---------------------------------------------------------------------

// The invariance suite: a balancer never changes what is learned. Packing is
// on, samples are longer than a row (one spans four rows) and rows hold
// several documents, so a cut that depended on the row being filled, or a
// label lost at a cut, would show as a different loss or token count. float64
// leaves summation order as the only source of difference.
constexpr const char* kEquivalenceConfig = R"(
parallel: {dp_size: 1, cp_size: 1}
balancer:
  cp: {strategy: auto, fallback: contiguous, block_size: 16, mask: causal}
  dp: {strategy: auto, cost: attention}
data:
  source: synthetic
  path: LENGTHS
  seq_length: 64
  packing: true
  global_batch_size: 8
  micro_batch_size: 2
  seed: 3
model: {hidden_size: 32, num_layers: 2, num_heads: 2, vocab_size: 96}
train: {steps: 3, dtype: float64, lr: 1.0e-2, seed: 7}
dist: {timeout_s: 60, op_timeout_s: 60}
)";

// 24 samples: short ones that share rows, some just over a row, one of 230
// tokens (four pieces of 64, 64, 64, 38).
const char* const kEquivalenceLengths =
    "[5, 70, 12, 230, 3, 33, 64, 9, 130, 1, 17, 66, 40, 2, 95, 7, 28, 150, 11, 4, 63, 21, 80, 6]";

std::string equivalence_config(const TempDir& dir) {
  std::string config = kEquivalenceConfig;
  config.replace(config.find("LENGTHS"), 7, dir.write("lengths.json", kEquivalenceLengths));
  return dir.write("equivalence.yaml", config);
}

Trained train_layout(const TempDir& dir, const std::string& config, int dp, int cp,
                     const std::vector<std::string>& extra, const std::vector<std::string>& env) {
  std::string tag = "dp" + std::to_string(dp) + "cp" + std::to_string(cp);
  std::vector<std::string> named = extra;
  named.insert(named.end(), env.begin(), env.end());
  for (const std::string& e : named) {
    tag += "_";
    for (char c : e) tag += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  }
  std::vector<std::string> sets = {"parallel.dp_size=" + std::to_string(dp),
                                   "parallel.cp_size=" + std::to_string(cp)};
  sets.insert(sets.end(), extra.begin(), extra.end());
  const RunResult r =
      run(train_command(config, sets, dir.file(tag + ".jsonl"), dir.file(tag + ".params")),
          seconds(150), env);
  EXPECT_EQ(r.exit_code, 0) << tag << ": " << r;
  Trained t;
  const std::vector<json> metrics = read_metrics(dir.file(tag + ".jsonl"));
  t.steps = step_records(metrics);
  for (const json& s : t.steps) {
    t.losses.push_back(s.at("loss").get<double>());
    t.tokens.push_back(s.at("tokens").get<std::int64_t>());
  }
  t.micro_batches = micro_batch_records(metrics);
  for (const json& j : metrics) {
    if (j.contains("scheduler") && j.contains("ranks")) t.hybrid.push_back(j);
  }
  t.params = read_params(dir.file(tag + ".params"));
  EXPECT_FALSE(t.params.empty()) << tag;
  return t;
}

void expect_same(const Trained& expected, const Trained& got, const std::string& what) {
  ASSERT_EQ(expected.losses.size(), got.losses.size()) << what;
  EXPECT_EQ(got.tokens, expected.tokens) << what << ": loss tokens per step differ";
  for (std::size_t i = 0; i < expected.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], expected.losses[i], 1e-10 * std::abs(expected.losses[i]))
        << what << " step " << i + 1;
  }
  ASSERT_EQ(expected.params.size(), got.params.size()) << what;
  double worst = 0.0;
  std::string where;
  for (const auto& [name, values] : expected.params) {
    const auto it = got.params.find(name);
    ASSERT_NE(it, got.params.end()) << what << ": no parameter " << name;
    ASSERT_EQ(it->second.size(), values.size()) << what << " " << name;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double d = std::abs(it->second[i] - values[i]);
      if (!(d <= worst)) {
        worst = d;
        where = name + "[" + std::to_string(i) + "]";
      }
    }
  }
  EXPECT_LT(worst, 1e-9) << what << ": parameters differ most at " << where;
}

}  // namespace fulcrum::it
