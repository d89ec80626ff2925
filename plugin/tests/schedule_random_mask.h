// One of the dense masks at random for the schedule property tests: causal,
// full, a sliding window or a prefix, the last two up to four blocks long.
#pragma once

#include <cstdint>

#include "fulcrum/core/random.h"
#include "fulcrum/cp_types.h"

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

}  // namespace fulcrum::schedule_tests
