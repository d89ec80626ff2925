// Private to fulcrum::host: the figures of a DP partition that the C ABI does
// not carry (per-rank cost, imbalance, lower bound), recomputed by the host
// for partitions that come from a plugin or from the built-in balancer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fulcrum/dp_types.h"

namespace fulcrum::host::detail {

// Fills cost, imbalance and lower_bound of a partition whose ranks are set and
// whose samples index request.lengths.
inline void summarize_partition(const DpRequest& request, DpPartition& partition) {
  const CostModel& cost = request.cost;
  partition.cost.assign(partition.ranks.size(), 0.0);
  for (std::size_t r = 0; r < partition.ranks.size(); ++r) {
    for (std::int64_t s : partition.ranks[r]) {
      partition.cost[r] += cost(request.lengths[static_cast<std::size_t>(s)]);
    }
  }
  double total = 0.0;
  double largest_rank = 0.0;
  for (double c : partition.cost) {
    total += c;
    largest_rank = std::max(largest_rank, c);
  }
  const double k = static_cast<double>(std::max<std::size_t>(partition.ranks.size(), 1));
  const double mean = total / k;
  partition.imbalance = mean > 0.0 ? largest_rank / mean : 1.0;

  std::vector<double> items;
  items.reserve(request.lengths.size());
  for (std::int64_t length : request.lengths) items.push_back(cost(length));
  double bound = mean;
  if (!items.empty()) bound = std::max(bound, *std::max_element(items.begin(), items.end()));
  if (request.equal_count && request.num_ranks >= 1 && !items.empty()) {
    // Some rank holds ceil(n/k) samples, so it costs at least the sum of the
    // ceil(n/k) cheapest ones.
    const std::size_t most = (items.size() + static_cast<std::size_t>(request.num_ranks) - 1) /
                             static_cast<std::size_t>(request.num_ranks);
    std::sort(items.begin(), items.end());
    double cheapest = 0.0;
    for (std::size_t i = 0; i < most && i < items.size(); ++i) cheapest += items[i];
    bound = std::max(bound, cheapest);
  }
  partition.lower_bound = bound;
}

}  // namespace fulcrum::host::detail
