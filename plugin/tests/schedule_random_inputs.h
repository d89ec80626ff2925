// Random inputs for the schedule property tests: one of the dense masks
// (causal, full, a sliding window or a prefix, the last two up to four
// blocks long), and a whole schedule request.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/random.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/schedule_types.h"

namespace fulcrum::schedule_tests {

inline MaskSpec random_dense_mask(SplitMix64& rng, std::int64_t block_size) {
  switch (rng.uniform(0, 3)) {
    case 0:
      return MaskSpec::causal();
    case 1:
      return MaskSpec::full();
    case 2:
      return MaskSpec::sliding(rng.uniform(1, 4 * block_size));
    default:
      return MaskSpec::prefix(rng.uniform(0, 4 * block_size));
  }
}

// A request of one of `worlds`, B = 16 or 64, T = 1..16 blocks, a random
// dense mask, h100_7b or cpu_gloo with 1..8 ranks a node and a slower link
// between nodes, and 1..max_docs documents log-uniform over 1 .. 2 W T
// (mostly short, some over many ranks), stopping at the first past 3 W T
// tokens.
inline ScheduleRequest random_schedule_request(SplitMix64& rng,
                                               const std::vector<std::int32_t>& worlds,
                                               std::int64_t max_docs) {
  ScheduleRequest r;
  r.world_size = worlds[rng.next() % worlds.size()];
  r.block_size = rng.uniform(0, 1) == 0 ? 16 : 64;
  r.max_tokens_per_rank = r.block_size * rng.uniform(1, 16);
  r.mask = random_dense_mask(rng, r.block_size);
  r.profile = *builtin_cost_profile(rng.uniform(0, 1) == 0 ? "h100_7b" : "cpu_gloo");
  r.profile.ranks_per_node = static_cast<std::int32_t>(rng.uniform(1, 8));
  r.profile.inter_node_bytes_per_second =
      r.profile.intra_node_bytes_per_second / static_cast<double>(rng.uniform(1, 16));
  const std::int64_t cap = 3 * r.world_size * r.max_tokens_per_rank;
  const std::int64_t docs = rng.uniform(1, max_docs);
  std::int64_t tokens = 0;
  for (std::int64_t i = 0; i < docs && tokens <= cap; ++i) {
    const double u = static_cast<double>(rng.next() >> 11) / 9007199254740992.0;
    const double top = std::log(static_cast<double>(2 * r.world_size * r.max_tokens_per_rank));
    r.doc_lengths.push_back(std::max<std::int64_t>(1, std::llround(std::exp(u * top))));
    tokens += r.doc_lengths.back();
  }
  return r;
}

}  // namespace fulcrum::schedule_tests
