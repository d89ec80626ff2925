#include "attention/tile_schedule.h"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/workload.h"

namespace fulcrum::attention {

bool TileSchedule::allowed(std::int64_t row, std::int64_t key) const {
  if (key < lo[row] || key > hi[row]) return false;
  if (!sparse()) return true;
  const std::int64_t qb = position[row] / block_size;
  return std::binary_search(listed_begin(qb), listed_end(qb), key / block_size);
}

Result<TileSchedule> make_tile_schedule(const CpWorkload& w, const ShardPlan& plan,
                                        std::int32_t rank) {
  if (Status s = validate_workload(w); !s) return s;
  if (Status s = validate_plan(w, plan); !s) return s;
  if (rank < 0 || rank >= plan.cp_size) {
    return invalid_argument("rank " + std::to_string(rank) + " is outside the plan's [0, " +
                            std::to_string(plan.cp_size) + ")");
  }
  TileSchedule s;
  s.rank = rank;
  s.tokens = w.tokens;
  s.shard_len = plan.shard_len;
  s.block_size = w.block_size;
  s.num_query_blocks = ceil_div(plan.shard_len, w.block_size);
  s.num_key_blocks = ceil_div(w.tokens, w.block_size);
  s.mask = w.mask;
  s.position.assign(plan.rank_begin(rank), plan.rank_end(rank));
  s.lo.assign(static_cast<std::size_t>(plan.shard_len), 0);
  s.hi.assign(static_cast<std::size_t>(plan.shard_len), -1);

  const RowLayout layout(w);
  const std::int64_t b = w.block_size;
  for (std::int64_t row = 0; row < plan.shard_len; ++row) {
    const std::int64_t q = s.position[row];
    if (q == kPadPosition) continue;
    const std::int64_t doc = layout.doc_of(q);
    const std::int64_t doc_begin = layout.doc_begin(doc);
    const std::int64_t doc_end = layout.doc_end(doc);
    if (s.sparse()) {
      s.lo[row] = doc_begin;
      s.hi[row] = doc_end - 1;
      s.for_each_allowed(row, doc_begin, doc_end,
                         [&](std::int64_t ka, std::int64_t kb) { s.pairs += kb - ka; });
    } else {
      const KeyRange range = key_range(w.mask, doc_begin, doc_end, q);
      s.lo[row] = range.lo;
      s.hi[row] = range.hi;
      s.pairs += range.size();
    }
  }

  // Key blocks touched by each query block: dense rows add an interval of
  // blocks, sparse rows single blocks; sort and merge into runs.
  std::vector<KeyBlockRun> touched;
  s.run_offsets.push_back(0);
  for (std::int64_t qblk = 0; qblk < s.num_query_blocks; ++qblk) {
    touched.clear();
    const std::int64_t row_end = std::min((qblk + 1) * b, plan.shard_len);
    for (std::int64_t row = qblk * b; row < row_end; ++row) {
      if (s.lo[row] > s.hi[row]) continue;
      if (!s.sparse()) {
        touched.push_back({s.lo[row] / b, s.hi[row] / b});
        continue;
      }
      s.for_each_allowed(row, s.lo[row], s.hi[row] + 1, [&](std::int64_t ka, std::int64_t) {
        touched.push_back({ka / b, ka / b});
      });
    }
    // Full key blocks: B real rows, each seeing the block's every key, by
    // compute_work's rule on the rows' own key ranges (a pad row or a short
    // block holds fewer than B real ones: none).
    FullTileEnds ends;
    for (std::int64_t row = qblk * b; row < row_end && !s.sparse(); ++row) {
      if (s.lo[row] > s.hi[row]) continue;
      const KeyRange keys{s.lo[row], s.hi[row]};
      ends.add(1, keys, keys);
    }
    const auto [first, end] = ends.key_blocks(b);
    s.full.push_back(end > first ? KeyBlockRun{first, end - 1} : KeyBlockRun{0, -1});
    s.full_tiles += s.full.back().blocks();
    std::sort(touched.begin(), touched.end(), [](const KeyBlockRun& x, const KeyBlockRun& y) {
      return x.first < y.first || (x.first == y.first && x.last < y.last);
    });
    for (const KeyBlockRun& run : touched) {
      // Adjacent runs merge too: one wider matmul instead of two.
      if (s.runs.size() > static_cast<std::size_t>(s.run_offsets.back()) &&
          run.first <= s.runs.back().last + 1) {
        s.runs.back().last = std::max(s.runs.back().last, run.last);
      } else {
        s.runs.push_back(run);
      }
    }
    s.run_offsets.push_back(static_cast<std::int64_t>(s.runs.size()));
  }
  for (const KeyBlockRun& run : s.runs) s.tiles += run.blocks();
  return s;
}

Result<std::vector<std::int64_t>> doc_lengths_from_ids(const std::vector<std::int64_t>& doc_ids) {
  std::vector<std::int64_t> lengths;
  std::unordered_set<std::int64_t> seen;
  for (std::size_t i = 0; i < doc_ids.size(); ++i) {
    if (i > 0 && doc_ids[i] == doc_ids[i - 1]) {
      ++lengths.back();
      continue;
    }
    if (!seen.insert(doc_ids[i]).second) {
      return invalid_argument("document id " + std::to_string(doc_ids[i]) + " at position " +
                              std::to_string(i) +
                              " reappears after another document; documents must be "
                              "contiguous runs of positions");
    }
    lengths.push_back(1);
  }
  return lengths;
}

}  // namespace fulcrum::attention
