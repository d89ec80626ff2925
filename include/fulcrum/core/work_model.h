// The two work models every figure in fulcrum is stated in (see
// docs/WORK_MODELS.md): pairs and tiles, with all-gather CP (every rank's
// local queries attend to the whole row's keys in global order).
#pragma once

#include <cstdint>
#include <vector>

#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"

namespace fulcrum {

// Work of every rank of a plan. Pad positions contribute no pairs and no
// tiles but occupy rows of local query blocks. O(N log B).
//
// With `full_tiles`, also each rank's full tiles: those whose local query
// block holds B real queries that may each attend every key of the key
// block (a short last key block never is). The others are partial: a causal
// diagonal, a document edge, a padded row, a query block spanning runs
// that see different keys. Block-sparse masks count every tile partial.
std::vector<RankWork> compute_work(const CpWorkload& workload, const ShardPlan& plan,
                                   std::vector<std::int64_t>* full_tiles = nullptr);

// Total allowed pairs of the row, and the tiles of the unsharded row (one rank,
// queries in global order).
std::int64_t total_pairs(const CpWorkload& workload);
std::int64_t unsharded_tiles(const CpWorkload& workload);

// Costs of the row's aligned query blocks [b*B, min((b+1)*B, N)): allowed
// pairs and non-empty global key blocks of each. A plan that keeps every
// aligned block whole and aligned in its rank's local order has per-rank
// work equal to the sums of these.
struct BlockCosts {
  std::vector<std::int64_t> pairs;
  std::vector<std::int64_t> tiles;
};
BlockCosts block_costs(const CpWorkload& workload);

struct WorkSummary {
  double pairs_imbalance = 1.0;   // max / mean over ranks
  double tiles_imbalance = 1.0;   // max / mean over ranks
  double tiles_over_ideal = 1.0;  // max rank tiles / (unsharded tiles / P)
};
WorkSummary summarize(const CpWorkload& workload, const std::vector<RankWork>& work);

}  // namespace fulcrum
