// Planner speed of `auto`: one packed row of 128K tokens at P=16 (B=128)
// against writing the same row's N int64 positions into a preallocated
// vector (the least any planner must do), and auto's plan time as the row
// grows. Run from the project root with
//   --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// for medians; the last line gives auto / write_index on the 128K row (CPU
// time, medians when repeated).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "fulcrum/cp_types.h"
#include "strategies/cp_strategies.h"
#include "workloads.h"

namespace {

using fulcrum::CpWorkload;

// One packed row of `tokens` from the first document mix (seed 1).
CpWorkload packed_row(std::int64_t tokens, std::int32_t ranks) {
  std::string source;
  static const std::vector<fulcrum::bench::LengthSet> mixes = [] {
    std::string s;
    auto m = fulcrum::bench::document_mixes(s);
    std::printf("%s\n", s.c_str());
    return m;
  }();
  CpWorkload w;
  w.tokens = tokens;
  w.doc_lengths = fulcrum::bench::packed_rows(mixes.front().lengths, tokens, 1, 1).front();
  w.block_size = 128;
  w.cp_size = ranks;
  return w;
}

void BM_auto(benchmark::State& state) {
  const CpWorkload w = packed_row(state.range(0), 16);
  for (auto _ : state) {
    auto plan = fulcrum::cp::plan_auto(w);
    benchmark::DoNotOptimize(plan->positions.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * w.tokens);
}

void BM_write_index(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  std::vector<std::int64_t> index(static_cast<std::size_t>(n));
  for (auto _ : state) {
    std::int64_t* out = index.data();
    for (std::int64_t i = 0; i < n; ++i) out[i] = i;
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

}  // namespace

BENCHMARK(BM_auto)->Arg(131072)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_write_index)->Arg(131072)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_auto)
    ->Name("BM_auto_scaling")
    ->Arg(8192)
    ->Arg(32768)
    ->Arg(131072)
    ->Arg(524288)
    ->Arg(1048576)
    ->Unit(benchmark::kMicrosecond);

namespace {

// The console output, plus the CPU time of every run kept by name (the
// median when repetitions are aggregated), for the ratio line at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  RatioReporter() : ConsoleReporter(OO_Tabular) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name != "median") continue;
      cpu_us_[run.run_name.str()] = run.GetAdjustedCPUTime();
    }
  }
  const std::map<std::string, double>& cpu_us() const { return cpu_us_; }

 private:
  std::map<std::string, double> cpu_us_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto& t = reporter.cpu_us();
  const auto planned = t.find("BM_auto/131072");
  const auto written = t.find("BM_write_index/131072");
  if (planned != t.end() && written != t.end() && written->second > 0) {
    std::printf(
        "auto / write_index on the 128K row at P=16: %.1f us / %.1f us = %.2fx (CPU time)\n",
        planned->second, written->second, planned->second / written->second);
  }
  benchmark::Shutdown();
  return 0;
}
