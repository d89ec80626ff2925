// CP balance quality of every strategy on the shared document mixes.
//
// Rows of 64K and 128K tokens are packed from each mix (16 rows per
// workload, seeded), under a document-causal and a sliding:4096 mask, plus
// the two single causal rows of 131072 and 131000 tokens; each at P in
// {4, 8, 12, 16} with B = 128. Every cell is "pairs imbalance / tiles over
// ideal", the median over the workload's rows; auto's worst row is shown as
// well. The last line says whether auto meets 1.01 on both figures on every
// row of every workload.
//
//   fulcrum_bench_cp_balance            (run from the project root, so that
//                                        ../shared/workloads is found)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "strategies/cp_strategies.h"
#include "workloads.h"

namespace {

using fulcrum::CpWorkload;
using fulcrum::MaskSpec;

constexpr int kRowsPerWorkload = 16;
constexpr std::uint64_t kSeed = 7;
constexpr double kTarget = 1.01;

struct Column {
  const char* title;
  // "" = head_tail when applicable, else contiguous: PyTorch's default
  // (_create_default_load_balancer), head_tail in PyTorch's order.
  const char* strategy;
};

constexpr Column kColumns[] = {
    {"contiguous", "contiguous"},
    {"head_tail else contiguous", ""},
    {"per_document_padded", "per_document_padded"},
    {"per_document", "per_document"},
    {"striped", "striped"},
    {"ptrr", "ptrr"},
    {"balanced", "balanced"},
    {"auto", "auto"},
};
constexpr int kAuto = 7;

struct Figures {
  double pairs = 0.0;
  double tiles = 0.0;
};

struct Workload {
  std::string name;
  std::vector<CpWorkload> rows;  // cp_size filled in per P
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string cell(const std::vector<Figures>& figures) {
  if (figures.empty()) return "n/a";
  std::vector<double> pairs;
  std::vector<double> tiles;
  for (const Figures& f : figures) {
    pairs.push_back(f.pairs);
    tiles.push_back(f.tiles);
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.3f / %.3f", median(pairs), median(tiles));
  return text;
}

// The plan of one column, or nothing when the strategy cannot serve the row.
bool run_column(const Column& column, const CpWorkload& w, Figures& out) {
  std::string name = column.strategy;
  if (name.empty()) {
    name = fulcrum::cp::inapplicable_reason("head_tail", w) ? "contiguous" : "head_tail";
  }
  const fulcrum::Result<fulcrum::ShardPlan> plan = fulcrum::cp::plan(name, w);
  if (!plan.is_ok()) return false;
  const fulcrum::WorkSummary s = fulcrum::summarize(w, plan->work);
  out = {s.pairs_imbalance, s.tiles_over_ideal};
  return true;
}

}  // namespace

int main() {
  std::string source;
  const std::vector<fulcrum::bench::LengthSet> mixes = fulcrum::bench::document_mixes(source);
  std::printf("%s\n", source.c_str());
  std::printf(
      "rows per packed workload: %d (seed %llu), B = 128; cells: pairs imbalance / "
      "tiles over ideal, median over rows\n\n",
      kRowsPerWorkload, static_cast<unsigned long long>(kSeed));

  std::vector<Workload> workloads;
  for (const fulcrum::bench::LengthSet& mix : mixes) {
    for (const std::int64_t tokens : {65536, 131072}) {
      const auto packed = fulcrum::bench::packed_rows(mix.lengths, tokens, kRowsPerWorkload, kSeed);
      for (const MaskSpec& mask : {MaskSpec::causal(), MaskSpec::sliding(4096)}) {
        Workload wl;
        wl.name =
            mix.name + " " + std::to_string(tokens / 1024) + "K " + fulcrum::mask_to_string(mask);
        for (const auto& docs : packed) {
          CpWorkload w;
          w.tokens = tokens;
          w.doc_lengths = docs;
          w.mask = mask;
          wl.rows.push_back(w);
        }
        workloads.push_back(std::move(wl));
      }
    }
  }
  for (const std::int64_t tokens : {131072, 131000}) {
    Workload wl;
    wl.name = "single causal " + std::to_string(tokens);
    CpWorkload w;
    w.tokens = tokens;
    wl.rows.push_back(w);
    workloads.push_back(std::move(wl));
  }

  std::printf("| workload | P |");
  for (const Column& c : kColumns) std::printf(" %s |", c.title);
  std::printf(" auto worst row |\n|---|---|");
  for (std::size_t i = 0; i < std::size(kColumns); ++i) std::printf("---|");
  std::printf("---|\n");

  double worst = 0.0;
  std::string worst_where;
  for (const Workload& wl : workloads) {
    for (const std::int32_t p : {4, 8, 12, 16}) {
      std::vector<std::vector<Figures>> per_column(std::size(kColumns));
      Figures auto_worst;
      for (CpWorkload w : wl.rows) {
        w.cp_size = p;
        for (std::size_t c = 0; c < std::size(kColumns); ++c) {
          Figures f;
          if (run_column(kColumns[c], w, f)) per_column[c].push_back(f);
        }
        if (!per_column[kAuto].empty()) {
          const Figures& f = per_column[kAuto].back();
          auto_worst.pairs = std::max(auto_worst.pairs, f.pairs);
          auto_worst.tiles = std::max(auto_worst.tiles, f.tiles);
          const double score = std::max(f.pairs, f.tiles);
          if (score > worst) {
            worst = score;
            worst_where = wl.name + " P=" + std::to_string(p);
          }
        }
      }
      std::printf("| %s | %d |", wl.name.c_str(), p);
      for (const auto& figures : per_column) std::printf(" %s |", cell(figures).c_str());
      std::printf(" %.3f / %.3f |\n", auto_worst.pairs, auto_worst.tiles);
    }
  }
  std::printf(
      "\nauto <= %.2f on pairs imbalance and tiles over ideal on every row of every "
      "workload: %s (worst %.4f, %s)\n",
      kTarget, worst <= kTarget ? "YES" : "NO", worst, worst_where.c_str());
  return 0;
}
