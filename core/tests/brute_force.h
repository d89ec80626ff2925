// Independent recounts of the work models and of plan validity, for tests.
//
// Nothing here calls fulcrum's core (key_range, compute_work, block_costs,
// validate_plan, RowLayout): every figure is re-derived from the mask
// definitions in cp_types.h, so a test comparing the two catches a bug on
// either side instead of repeating it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/cp_types.h"

namespace fulcrum::cp {

// The mask of one row, evaluated pair by pair. Precomputes every position's
// document, so one query is O(1); building it is O(N) (and O(blocks^2) for a
// block-sparse mask), meant for rows of a few thousand tokens.
class BruteMask {
 public:
  explicit BruteMask(const CpWorkload& workload);

  // Whether query q may attend to key k (both global positions in [0, N)).
  bool allowed(std::int64_t q, std::int64_t k) const;

 private:
  CpWorkload workload_;
  std::vector<std::int64_t> doc_of_;     // document index of every position
  std::vector<std::int64_t> doc_start_;  // first position of every document
  std::int64_t num_blocks_ = 0;
  std::vector<char> block_allowed_;  // block-sparse only: [query block][key block]
};

// One pair, straight from the definitions: same document, then causal j <= i,
// full, sliding i-W < j <= i, prefix j <= i or j < L (document-local i, j), or
// block-sparse: key block k/B listed for query block q/B. O(N) per call.
bool brute_allowed(const CpWorkload& workload, std::int64_t q, std::int64_t k);

// Per-rank work by testing every (query, key) pair for pairs and every
// (local query block, key block) tile pair by pair for tiles. O(N^2). With
// `full_tiles`, each rank's tiles of B real queries and B keys whose every
// pair is allowed.
std::vector<RankWork> brute_work(const CpWorkload& workload, const ShardPlan& plan,
                                 std::vector<std::int64_t>* full_tiles = nullptr);

// Per-rank work from key intervals derived here (for the interval masks) or
// from the block lists (block-sparse): the tiles of a local query block are
// the union of its rows' key blocks. O(N log B), for rows too long for
// brute_work; tests check it against brute_work on short rows first.
// `full_tiles` as brute_work's, from the intersection of the rows'
// intervals (dense masks; block-sparse: none counted).
std::vector<RankWork> interval_work(const CpWorkload& workload, const ShardPlan& plan,
                                    std::vector<std::int64_t>* full_tiles = nullptr);

// Plan validity checked from scratch: cp_size shards of shard_len entries,
// every entry -1 or in [0, N), every position of [0, N) exactly once, and
// `padding` equal to the number of -1 entries.
struct BruteCheck {
  std::string error;  // the first violation; empty when the plan is valid
  bool ok() const { return error.empty(); }
};
BruteCheck brute_check(const CpWorkload& workload, const ShardPlan& plan);

}  // namespace fulcrum::cp
