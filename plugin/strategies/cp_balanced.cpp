// The `balanced` CP strategy and the machinery it shares with `auto`.
//
// 1. Units. The row is cut into units of at most B tokens: its aligned query
//    blocks, except that a causal document whose last aligned block would
//    be a "lump" (a few of its tokens, seeing all its key blocks, with a
//    neighbour's) is cut back from its own end (document_units). Full units
//    (B tokens) are placed first in their rank's local order, in ascending
//    position, each on a local block of its own; the short units ("pieces")
//    follow. So a rank's pairs and tiles are the sums of its full units'
//    costs plus the exactly counted work of its piece tail, and balancing is
//    a two-dimensional number partitioning over a few hundred to a few
//    thousand items, cheap to optimise.
// 2. Pieces are dealt longest first, each to the cheapest rank it leaves
//    within one unit of the shortest: at most one unit of padding per rank.
// 3. Full units are dealt in rounds of P (counts fixed: floor or ceil of
//    F/P), largest combined normalised cost first, each to the rank among
//    the round's lightest few whose load vector has the least dot product
//    with the unit's (pair-heavy units to pair-light ranks).
// 4. Refinement: while the rank attaining max(pairs_r/mean, tiles_r/ideal)
//    is above the achievable floor plus a tolerance, swap one of its units
//    for one of a lighter rank's, choosing among the swaps that lower the
//    pair's maximum the one that leaves both nearest the mean.
// Deterministic: no clock, no randomness, ties broken by index.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace detail {

Balanced balance_row(const CpWorkload& workload, const RowLayout& layout,
                     const BalanceOptions& options) {
  const std::int64_t block = workload.block_size;
  if (workload.mask.kind != MaskKind::kCausal) {
    const Units units = aligned_units(workload, layout, block);
    std::int64_t total_pairs = 0;
    std::int64_t unsharded_tiles = 0;
    for (std::int64_t k = 0; k < units.count(); ++k) {
      total_pairs += units.pairs[static_cast<std::size_t>(k)];
      unsharded_tiles += units.tiles[static_cast<std::size_t>(k)];
    }
    return balance_units(workload, layout, units, total_pairs, unsharded_tiles, options);
  }
  // Causal totals in closed form, O(documents): a document of L tokens has
  // L(L+1)/2 pairs, and aligned block b, whose first row lies in a document
  // starting in block s, touches key blocks s..b (later documents of the
  // block start in it).
  std::int64_t total_pairs = 0;
  std::int64_t unsharded_tiles = 0;
  for (std::int64_t d = 0; d < layout.num_docs(); ++d) {
    const std::int64_t db = layout.doc_begin(d);
    const std::int64_t de = layout.doc_end(d);
    total_pairs += (de - db) * (de - db + 1) / 2;
    const std::int64_t s = db / block;
    const std::int64_t first = ceil_div(db, block);
    const std::int64_t last = (de - 1) / block;
    if (last >= first) {
      // sum over b in [first, last] of (b - s + 1)
      unsharded_tiles += (first - s + 1 + last - s + 1) * (last - first + 1) / 2;
    }
  }
  const std::int64_t min_excess = static_cast<std::int64_t>(
      options.lump_fraction * static_cast<double>(unsharded_tiles) / workload.cp_size);
  const Units units =
      document_units(workload, layout, block, std::max<std::int64_t>(1, min_excess));
  return balance_units(workload, layout, units, total_pairs, unsharded_tiles, options);
}

}  // namespace detail

Result<ShardPlan> plan_balanced(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  const RowLayout layout(workload);
  const detail::Balanced balanced = detail::balance_row(workload, layout);
  ShardPlan plan = detail::materialize(balanced.runs);
  plan.strategy_used = "balanced";
  finish_plan(workload, plan);
  return plan;
}

}  // namespace fulcrum::cp
