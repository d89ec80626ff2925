// Every DP strategy of the fulcrum plugin, plus the windowed dispatcher and the
// length-bucketed sampler that feed the data loader.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "fulcrum/dp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::dp {

using Partitioner = Result<DpPartition> (*)(const DpRequest&);

struct StrategyInfo {
  std::string_view name;
  Partitioner partition;
  std::string_view summary;
};

std::span<const StrategyInfo> strategies();
const StrategyInfo* find_strategy(std::string_view name);

// Checks n >= 1, every length >= 1, k >= 1, cost parameters finite and >= 0.
Status validate_request(const DpRequest& request);

// Partitions with `name`; kNotFound for an unknown name.
Result<DpPartition> partition(std::string_view name, const DpRequest& request);

Result<DpPartition> partition_round_robin(const DpRequest& request);
Result<DpPartition> partition_lpt(const DpRequest& request);             // capped at ceil(n/k)
Result<DpPartition> partition_karmarkar_karp(const DpRequest& request);  // honours equal_count
Result<DpPartition> partition_auto(const DpRequest& request);

// max(largest cost, total / k), tightened when equal_count holds.
double lower_bound(const DpRequest& request);

// Fills cost, imbalance and lower_bound of a partition whose ranks are set.
// Under equal_count, a partition whose counts break the rule (capped LPT can
// leave a rank below floor(n/k)) gets the bound computed without the rule.
void finish_partition(const DpRequest& request, DpPartition& partition);

// Building blocks the strategies share so that "auto" sorts and costs a
// request once instead of once per candidate. Not a stable interface; inputs
// are assumed valid (see validate_request).
namespace detail {

using Assignment = std::vector<std::vector<std::int64_t>>;  // sample indices per rank

// A request's per-sample costs, and its samples by cost, largest first, ties
// by index. Cost is strictly increasing in length, so this is a length sort.
struct CostOrder {
  std::vector<double> cost;
  std::vector<std::int64_t> descending;
};
CostOrder order_by_cost(const DpRequest& request);

Assignment assign_round_robin(std::size_t num_samples, std::size_t num_ranks);
// Capped LPT: at most ceil(n/k) per rank; under equal_count floor or ceil.
Assignment assign_lpt(const CostOrder& order, std::size_t num_ranks, bool equal_count);
Assignment assign_karmarkar_karp(const CostOrder& order, std::size_t num_ranks, bool equal_count);

// lower_bound() of a request given its order.
double lower_bound(const CostOrder& order, std::size_t num_ranks, bool equal_count);

// partition_auto with its settled cut on or off (the tests compare the two):
// the descent stops once no trade it may make can lower any pair of ranks;
// `stopped`, when given, says whether the cut fired.
Result<DpPartition> partition_auto_search(const DpRequest& request, bool stop_when_settled,
                                          bool* stopped);

}  // namespace detail

}  // namespace fulcrum::dp
