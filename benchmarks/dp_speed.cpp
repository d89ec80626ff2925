// Planner speed of the DP strategies on one global batch of 1,024 samples
// over 8 ranks (the project's target: auto in at most 1 ms).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "strategies/dp_strategies.h"
#include "workloads.h"

namespace {

using fulcrum::CostKind;
using fulcrum::DpRequest;
namespace dp = fulcrum::dp;

// 64 batches of 1,024 samples from the first document mix (or the
// synthetic one), drawn with a fixed seed.
std::vector<DpRequest> requests(CostKind kind, bool equal_count) {
  std::string source;
  const std::vector<std::int64_t> pool = fulcrum::bench::document_mixes(source).front().lengths;
  std::mt19937_64 rng(7);
  std::vector<DpRequest> out;
  for (int b = 0; b < 64; ++b) {
    DpRequest request;
    request.num_ranks = 8;
    request.cost.kind = kind;
    request.equal_count = equal_count;
    for (int i = 0; i < 1024; ++i) request.lengths.push_back(pool[rng() % pool.size()]);
    out.push_back(std::move(request));
  }
  return out;
}

void run(benchmark::State& state, const char* strategy) {
  const auto kind = static_cast<CostKind>(state.range(0));
  const bool equal_count = state.range(1) != 0;
  const std::vector<DpRequest> batch = requests(kind, equal_count);
  std::size_t next = 0;
  for (auto _ : state) {
    auto result = dp::partition(strategy, batch[next++ % batch.size()]);
    benchmark::DoNotOptimize(result);
  }
  state.SetLabel(std::string(kind == CostKind::kTokens ? "tokens" : "attention") +
                 (equal_count ? ", equal_count" : ""));
}

void BM_Auto(benchmark::State& state) { run(state, "auto"); }
void BM_Lpt(benchmark::State& state) { run(state, "lpt"); }
void BM_KarmarkarKarp(benchmark::State& state) { run(state, "karmarkar_karp"); }

BENCHMARK(BM_Auto)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Lpt)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KarmarkarKarp)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
