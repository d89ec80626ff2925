// Which tiles one rank's blocked attention computes, decided once per
// (workload, plan, rank) and reused by the forward and backward passes of
// every layer. No LibTorch.
//
// The rank's local queries, in plan order, are cut into blocks of B rows; the
// keys are the whole row in global order, cut into blocks of B. A tile (local
// query block, key block) is computed iff at least one (q, k) pair in it is
// allowed, the tile work model of docs/WORK_MODELS.md, so the count of
// computed tiles equals fulcrum::compute_work's `tiles` for the rank.
//
// For every mask but block-sparse, query q sees one contiguous range of keys
// [lo, hi] (fulcrum::key_range), so a query block touches the union of its
// rows' ranges: a few runs of consecutive key blocks, found in O(B) per
// block. Inside a tile the exact mask is lo <= k <= hi per row. Block-sparse
// rows see the listed key blocks of their global query block, clipped to
// their document.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::attention {

// A run of consecutive key blocks [first, last] (inclusive) one query block
// computes.
struct KeyBlockRun {
  std::int64_t first = 0;
  std::int64_t last = -1;
  std::int64_t blocks() const { return last - first + 1; }
};

struct TileSchedule {
  std::int32_t rank = 0;
  std::int64_t tokens = 0;      // N: keys, in global order
  std::int64_t shard_len = 0;   // local query rows, padding included
  std::int64_t block_size = 0;  // B
  std::int64_t num_query_blocks = 0;
  std::int64_t num_key_blocks = 0;
  MaskSpec mask;

  // Per local row: its global position (-1 = pad) and the inclusive range of
  // keys it may see. Pad rows have lo > hi. For block-sparse masks [lo, hi]
  // is the row's document and `query_block` (= position / B) selects the
  // listed key blocks.
  std::vector<std::int64_t> position;
  std::vector<std::int64_t> lo;
  std::vector<std::int64_t> hi;

  // Runs of local query block b: runs[run_offsets[b] .. run_offsets[b+1]),
  // ascending and disjoint, not adjacent.
  std::vector<std::int64_t> run_offsets;
  std::vector<KeyBlockRun> runs;

  // Per local query block, its full key blocks: those every one of its B
  // rows may see whole (no pad row, no short block; never under a
  // block-sparse mask), one run, empty (last < first) when there is none.
  // The kernel computes them without a mask; the other touched tiles are
  // partial (docs/HYBRID.md, section 2). In make_tile_schedule's schedule
  // it lies inside the block's touched runs; a restricted one
  // (restrict_schedule) keeps it whole, so intersect it with the runs.
  std::vector<KeyBlockRun> full;

  std::int64_t tiles = 0;       // sum of the runs' blocks over all query blocks
  std::int64_t full_tiles = 0;  // full tiles among the runs: compute_work's full tiles
  std::int64_t pairs = 0;       // allowed (q, k) pairs of the rank's queries

  bool sparse() const { return mask.kind == MaskKind::kBlockSparse; }
  // Exact mask of local row `row` and global key `key`.
  bool allowed(std::int64_t row, std::int64_t key) const;
  // Inside a tile row, the keys [k0, k1) (k1 exclusive) a row may see, as
  // at most a handful of sub-ranges; calls fn(a, b) for each allowed
  // [a, b) within [k0, k1).
  template <typename Fn>
  void for_each_allowed(std::int64_t row, std::int64_t k0, std::int64_t k1, Fn&& fn) const;
  // The listed key blocks of global query block qb (block-sparse only).
  const std::int64_t* listed_begin(std::int64_t qb) const {
    return mask.block_sparse.kv_blocks.data() + mask.block_sparse.offsets[qb];
  }
  const std::int64_t* listed_end(std::int64_t qb) const {
    return mask.block_sparse.kv_blocks.data() + mask.block_sparse.offsets[qb + 1];
  }
};

// Validates the workload and the plan (validate_workload, validate_plan) and
// builds the schedule of `rank`. O(shard_len) for dense masks.
Result<TileSchedule> make_tile_schedule(const CpWorkload& workload, const ShardPlan& plan,
                                        std::int32_t rank);

// Packed-document lengths from per-position document ids (a row whose
// documents are contiguous runs of equal ids, as a packing loader writes
// them). Fails when an id reappears after another document.
Result<std::vector<std::int64_t>> doc_lengths_from_ids(const std::vector<std::int64_t>& doc_ids);

template <typename Fn>
void TileSchedule::for_each_allowed(std::int64_t row, std::int64_t k0, std::int64_t k1,
                                    Fn&& fn) const {
  const std::int64_t a = std::max(lo[row], k0);
  const std::int64_t b = std::min(hi[row] + 1, k1);
  if (a >= b) return;
  if (!sparse()) {
    fn(a, b);
    return;
  }
  const std::int64_t qb = position[row] / block_size;
  for (const std::int64_t* it = listed_begin(qb); it != listed_end(qb); ++it) {
    const std::int64_t ka = std::max(a, *it * block_size);
    const std::int64_t kb = std::min(b, (*it + 1) * block_size);
    if (ka < kb) fn(ka, kb);
  }
}

}  // namespace fulcrum::attention
