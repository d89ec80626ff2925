// Internals shared by the `balanced` and `auto` CP planners and their tests:
// the row's decomposition into units, the unit balancer, an exact work
// evaluator for plans made of runs of consecutive positions, and the writer
// that turns runs into a plan's position array. Not part of the plugin's
// interface; include only from plugin/strategies and plugin/tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/core/slot_runs.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::cp::detail {

// The row cut into units of at most `size` tokens: unit k is
// [cut[k], cut[k+1]). Units of exactly `size` tokens are "full", shorter ones
// are "pieces". Costs: the unit's allowed pairs, and the global key blocks
// (of block_size) its queries touch, i.e. its tiles when alone in a local
// block.
struct Units {
  std::int64_t size = 1;
  std::vector<std::int64_t> cut;  // count() + 1 entries, 0 .. N
  std::vector<std::int64_t> pairs;
  std::vector<std::int64_t> tiles;

  std::int64_t count() const { return static_cast<std::int64_t>(pairs.size()); }
  std::int64_t length(std::int64_t k) const {
    return cut[static_cast<std::size_t>(k) + 1] - cut[static_cast<std::size_t>(k)];
  }
};

// Aligned units [k*size, min((k+1)*size, N)). With size == block_size these
// are the row's query blocks and their costs equal core's block_costs. Any
// mask (block-sparse only with size == block_size). O(units + documents).
Units aligned_units(const CpWorkload& workload, const RowLayout& layout, std::int64_t size);

// Like aligned_units, except that every causal document whose last aligned
// block would hold a lump is cut into full units that end at its end (its
// short remainder becomes a piece at its start). An aligned block holding the last
// few tokens of a long causal document touches all of that document's key
// blocks with few pairs: one such block can unbalance a rank's tiles against
// its pairs by 10% at 32 blocks per rank. End-aligned, the document's last
// unit is a normal full block and its remainder, at the document start, sees
// only a key block or two. A document is end-aligned when the lump's excess
// tiles, reach * (size - tail) / size, is at least min_excess: each one
// end-aligned costs about one tile (the unit after it no longer shares its
// last key block), so small lumps are left to the balancer. Only for causal
// masks: under a sliding window an unaligned unit touches one key block more
// than an aligned one. Requires size == block_size.
Units document_units(const CpWorkload& workload, const RowLayout& layout, std::int64_t size,
                     std::int64_t min_excess);

// Allowed pairs of the queries [begin, end) (non-block-sparse masks).
std::int64_t range_pairs(const CpWorkload& workload, const RowLayout& layout, std::int64_t begin,
                         std::int64_t end);

// A run of consecutive global positions [begin, begin + length), or `length`
// pad entries when begin == kPadPosition; a plan described by runs: rank r's
// local order is runs[rank_offset[r] .. rank_offset[r+1]) followed by
// padding up to shard_len. core's types, so that core prices them directly
// (fulcrum/core/slot_runs.h).
using Run = PositionRun;
using RunPlan = RunShardPlan;

struct BalanceOptions {
  // Refinement stops once the score is within this of the achievable floor
  // (1, or the mean load when end-aligned documents and piece tails add
  // tiles): five times inside the 1% the product promises, and most rows
  // get there from the deal alone, so the hot path rarely refines.
  double tolerance = 3e-3;
  std::int64_t max_rounds = 0;  // refinement rounds; 0 = automatic, < 0 = none
  // A causal document is end-aligned when its last block's excess tiles
  // (see document_units) reach this fraction of a rank's ideal tiles.
  double lump_fraction = 0.01;
};

// A balanced plan: its runs, its per-rank work and its score.
struct Balanced {
  RunPlan runs;
  std::vector<RankWork> work;        // exact (see balance_units)
  double score = 1.0;                // max(pairs max/mean, tiles max/ideal)
  std::int64_t rounds = 0;           // refinement rounds used, for tests and tuning
  std::int64_t total_pairs = 0;      // of the row
  std::int64_t unsharded_tiles = 0;  // of the row: sum of its aligned blocks' tiles
};

// Deals the units to P ranks. Full units: each rank gets floor(F/P) or
// ceil(F/P) of them, placed first in its local order in ascending position,
// each on a local block of its own when size == block_size. Pieces follow,
// in ascending position; each, longest first, goes to the rank with the
// least piece cost among those it leaves within `size` tokens of the rank
// with the fewest, so no rank pads more than `size` tokens. The full units
// then minimise max over ranks of max(pairs_r / mean, tiles_r / ideal)
// (ideal = unsharded_tiles / P): a count-capped deal in rounds of P, largest
// combined cost first, then swaps between the rank that attains the maximum
// and the others. The returned work is exact: sums of the full units plus
// each rank's exactly counted piece tail when size == block_size, a recount
// of the runs otherwise. Deterministic.
Balanced balance_units(const CpWorkload& workload, const RowLayout& layout, const Units& units,
                       std::int64_t total_pairs, std::int64_t unsharded_tiles,
                       const BalanceOptions& options = {});

// The balanced plan of a row: block units (end-aligned in long causal
// documents, see document_units), totals from the aligned blocks.
Balanced balance_row(const CpWorkload& workload, const RowLayout& layout,
                     const BalanceOptions& options = {});

// Contiguous shards of ceil(N/P) tokens (the last ranks padded), and head-tail
// (requires N % 2P == 0): rank r holds chunk r, then chunk 2P-1-r, of N/2P
// tokens each.
RunPlan contiguous_runs(std::int64_t tokens, std::int32_t ranks);
RunPlan head_tail_runs(std::int64_t tokens, std::int32_t ranks);

// per_document's layout with chunks sized by weight (cp_size entries, each
// > 0 and finite): each document's first half is cut in member order at the
// cumulative weight shares, its second half likewise from the end, and
// member r takes the r-th chunk of each (head-tail per document). A causal
// document's two chunks of equal size s at any depth hold s x (L + 1) key
// pairs, so a member's attention work follows its weight. Every position
// once, no padding runs (shard_len is the largest member). Deterministic.
RunPlan per_document_weighted_runs(const CpWorkload& workload, const std::vector<double>& weight);

// Exact per-rank work of a run plan under both work models, equal to
// compute_work on the materialised plan. Non-block-sparse masks only.
// O(runs + local blocks + segments), independent of N for long runs.
std::vector<RankWork> run_work(const CpWorkload& workload, const RowLayout& layout,
                               const RunPlan& plan);

// `auto`'s choice for a row (cp_auto.cpp): the planner it names, that
// plan's runs (plan_auto writes exactly these positions), their exact work
// and score.
struct AutoChoice {
  std::string name;
  RunPlan runs;
  std::vector<RankWork> work;
  double score = 0.0;
};
Result<AutoChoice> auto_choice(const CpWorkload& workload);

// Writes the positions of a run plan: cp_size, shard_len, positions, padding.
// strategy_used, fallback_reason and work are left to the caller.
ShardPlan materialize(const RunPlan& plan);

// max(pairs max / (total_pairs / P), tiles max / (unsharded_tiles / P)); a
// zero total counts as balanced in that model.
double plan_score(const std::vector<RankWork>& work, std::int64_t total_pairs,
                  std::int64_t unsharded_tiles);

}  // namespace fulcrum::cp::detail
