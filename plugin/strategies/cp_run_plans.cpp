// Run plans: a shard plan held as runs of consecutive positions, their
// exact work, and the plan they materialise into.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_segment.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp::detail {

RunPlan contiguous_runs(std::int64_t tokens, std::int32_t ranks) {
  RunPlan plan;
  plan.ranks = ranks;
  plan.shard_len = ceil_div(tokens, ranks);
  plan.rank_offset.assign(static_cast<std::size_t>(ranks) + 1, 0);
  for (std::int32_t r = 0; r < ranks; ++r) {
    const std::int64_t begin = std::min(tokens, r * plan.shard_len);
    const std::int64_t end = std::min(tokens, begin + plan.shard_len);
    if (end > begin) plan.runs.push_back(Run{begin, end - begin});
    plan.rank_offset[r + 1] = static_cast<std::int64_t>(plan.runs.size());
  }
  return plan;
}

RunPlan head_tail_runs(std::int64_t tokens, std::int32_t ranks) {
  RunPlan plan;
  plan.ranks = ranks;
  const std::int64_t chunk = tokens / (2 * static_cast<std::int64_t>(ranks));
  plan.shard_len = 2 * chunk;
  plan.rank_offset.assign(static_cast<std::size_t>(ranks) + 1, 0);
  for (std::int32_t r = 0; r < ranks; ++r) {
    plan.runs.push_back(Run{r * chunk, chunk});
    plan.runs.push_back(Run{(2 * static_cast<std::int64_t>(ranks) - 1 - r) * chunk, chunk});
    plan.rank_offset[r + 1] = static_cast<std::int64_t>(plan.runs.size());
  }
  return plan;
}

RunPlan per_document_weighted_runs(const CpWorkload& workload, const std::vector<double>& weight) {
  const std::int32_t g = workload.cp_size;
  const auto size = static_cast<std::size_t>(g);
  std::vector<double> cumulative(size + 1, 0.0);
  for (std::size_t r = 0; r < size; ++r) cumulative[r + 1] = cumulative[r] + weight[r];
  // Boundary k of a half of n tokens: floor(n x share before member k),
  // exactly n at k = g, so the chunks tile the half in member order.
  const auto boundary = [&](std::int64_t n, std::size_t k) {
    if (k == size) return n;
    const double share = cumulative[k] / cumulative[size];
    return std::min(n, static_cast<std::int64_t>(std::floor(static_cast<double>(n) * share)));
  };
  const std::vector<std::int64_t> whole = {workload.tokens};  // no lengths: one document
  const std::vector<std::int64_t>& docs =
      workload.doc_lengths.empty() ? whole : workload.doc_lengths;
  // Member by member, each document's two chunks in row order, straight into
  // the flat list (no list per member).
  RunPlan plan;
  plan.ranks = g;
  plan.rank_offset.reserve(size + 1);
  plan.rank_offset.push_back(0);
  for (std::size_t r = 0; r < size; ++r) {
    std::int64_t held = 0;
    std::int64_t doc_start = 0;
    for (const std::int64_t length : docs) {
      // Member r: the r-th chunk of the head [0, head) and the r-th from
      // the end of the tail [head, length), mirrored.
      const std::int64_t head = length / 2;
      const std::int64_t tail = length - head;
      const std::int64_t h0 = boundary(head, r);
      const std::int64_t h1 = boundary(head, r + 1);
      const std::int64_t t0 = length - boundary(tail, r + 1);
      const std::int64_t t1 = length - boundary(tail, r);
      if (h1 > h0) plan.runs.push_back(Run{doc_start + h0, h1 - h0});
      if (t1 > t0) plan.runs.push_back(Run{doc_start + t0, t1 - t0});
      held += std::max<std::int64_t>(0, h1 - h0) + std::max<std::int64_t>(0, t1 - t0);
      doc_start += length;
    }
    plan.shard_len = std::max(plan.shard_len, held);
    plan.rank_offset.push_back(static_cast<std::int64_t>(plan.runs.size()));
  }
  return plan;
}

std::vector<RankWork> run_work(const CpWorkload& workload, const RowLayout& layout,
                               const RunPlan& plan) {
  const std::int64_t block = workload.block_size;
  std::vector<RankWork> work(static_cast<std::size_t>(plan.ranks));
  // Key-block intervals of the current local block; they come from anywhere
  // in the row, so they are merged after sorting when there is more than one.
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  spans.reserve(static_cast<std::size_t>(std::min<std::int64_t>(block, 1024)));
  const auto flush = [&spans](RankWork& w) {
    if (spans.empty()) return;
    if (spans.size() > 1) std::sort(spans.begin(), spans.end());
    std::int64_t covered = -1;
    for (const auto& [lo, hi] : spans) {
      const std::int64_t from = std::max(lo, covered + 1);
      if (hi >= from) {
        w.tiles += hi - from + 1;
        covered = hi;
      }
    }
    spans.clear();
  };
  for (std::int32_t r = 0; r < plan.ranks; ++r) {
    RankWork& w = work[static_cast<std::size_t>(r)];
    std::int64_t used = 0;  // rows of the current local block filled so far
    for (std::int64_t i = plan.rank_offset[r]; i < plan.rank_offset[r + 1]; ++i) {
      const Run& run = plan.runs[static_cast<std::size_t>(i)];
      if (run.begin == kPadPosition) {
        for (std::int64_t left = run.length; left > 0;) {
          const std::int64_t take = std::min(left, block - used);
          left -= take;
          used += take;
          if (used == block) {
            flush(w);
            used = 0;
          }
        }
        continue;
      }
      const std::int64_t end = run.begin + run.length;
      std::int64_t doc = layout.doc_of(run.begin);
      w.tokens += run.length;
      for (std::int64_t x = run.begin; x < end;) {
        // Not min(end, x + (block - used)): that overflows for a B near
        // int64's end (found by fuzz/).
        const std::int64_t piece_end = x + std::min(end - x, block - used);
        for (std::int64_t y = x; y < piece_end;) {
          const std::int64_t db = layout.doc_begin(doc);
          const std::int64_t de = layout.doc_end(doc);
          const std::int64_t e = std::min(piece_end, de);
          const Segment s = segment(workload.mask, db, de, y, e);
          w.pairs += s.pairs;
          spans.emplace_back(s.lo / block, s.hi / block);
          y = e;
          if (y == de) ++doc;
        }
        used += piece_end - x;
        x = piece_end;
        if (used == block) {
          flush(w);
          used = 0;
        }
      }
    }
    flush(w);
  }
  return work;
}

ShardPlan materialize(const RunPlan& runs) { return materialize_runs(runs); }

double plan_score(const std::vector<RankWork>& work, std::int64_t total_pairs,
                  std::int64_t unsharded_tiles) {
  std::int64_t max_pairs = 0;
  std::int64_t max_tiles = 0;
  for (const RankWork& w : work) {
    max_pairs = std::max(max_pairs, w.pairs);
    max_tiles = std::max(max_tiles, w.tiles);
  }
  const double p = static_cast<double>(work.size());
  const double pairs = total_pairs > 0 ? max_pairs * p / total_pairs : 1.0;
  const double tiles = unsharded_tiles > 0 ? max_tiles * p / unsharded_tiles : 1.0;
  return std::max(pairs, tiles);
}

}  // namespace fulcrum::cp::detail
