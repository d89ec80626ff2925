// The DP strategy table, request validation, the lower bound and the shared
// bookkeeping every strategy ends with.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "fulcrum/core/dp_dispatch.h"
#include "fulcrum/core/text.h"
#include "fulcrum/core/workload.h"
#include "strategies/dp_strategies.h"

namespace fulcrum::dp {
namespace {

// Names in the order users see them listed; "auto" last because it is built
// from the others.
constexpr std::array<StrategyInfo, 4> kStrategies = {{
    {"round_robin", &partition_round_robin,
     "sample i to rank i % k; the usual data-loader baseline"},
    {"lpt", &partition_lpt, "longest processing time first, at most ceil(n/k) samples per rank"},
    {"karmarkar_karp", &partition_karmarkar_karp,
     "k-way largest differencing; balanced counts when equal_count is set"},
    {"auto", &partition_auto,
     "best of round_robin, lpt and karmarkar_karp, then improved by moves and swaps"},
}};

std::string known_names() {
  std::vector<std::string> names;
  for (const StrategyInfo& info : kStrategies) names.emplace_back(info.name);
  return join(names, ", ");
}

// True when every cost is an integer that doubles represent exactly, so any
// rank's cost is an integer too and a fractional bound can be rounded up.
bool costs_are_exact_integers(const std::vector<double>& costs) {
  constexpr double kExactLimit = 9007199254740992.0;  // 2^53
  double total = 0.0;
  for (double c : costs) {
    if (c != std::floor(c)) return false;
    total += c;
  }
  return total < kExactLimit;
}

}  // namespace

std::span<const StrategyInfo> strategies() { return kStrategies; }

const StrategyInfo* find_strategy(std::string_view name) {
  for (const StrategyInfo& info : kStrategies) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

Status validate_request(const DpRequest& request) {
  if (request.lengths.empty()) {
    return invalid_argument("dp request has no samples; pass at least one length");
  }
  for (std::size_t i = 0; i < request.lengths.size(); ++i) {
    if (request.lengths[i] < 1) {
      return invalid_argument("dp request: lengths[" + std::to_string(i) + "] is " +
                              std::to_string(request.lengths[i]) +
                              "; every sample length must be >= 1 token");
    }
    if (request.lengths[i] > kMaxRowTokens) {
      return invalid_argument("dp request: lengths[" + std::to_string(i) + "] is " +
                              std::to_string(request.lengths[i]) + ", more than the " +
                              std::to_string(kMaxRowTokens) +
                              " (2^31) tokens of the longest row fulcrum plans; split or "
                              "truncate the sample");
    }
  }
  if (request.num_ranks < 1) {
    return invalid_argument("dp request: num_ranks is " + std::to_string(request.num_ranks) +
                            "; pass at least one data-parallel rank");
  }
  if (request.num_ranks > kMaxGroupSize) {
    return invalid_argument("dp request: num_ranks is " + std::to_string(request.num_ranks) +
                            ", more than the " + std::to_string(kMaxGroupSize) +
                            " (2^20) ranks fulcrum partitions for; use a smaller "
                            "data-parallel group");
  }
  return check_cost_model(request.cost, "dp request");
}

Result<DpPartition> partition(std::string_view name, const DpRequest& request) {
  const StrategyInfo* info = find_strategy(name);
  if (info == nullptr) {
    return not_found("dp strategy " + quote_text(name) +
                     " does not exist; known: " + known_names());
  }
  return info->partition(request);
}

double lower_bound(const DpRequest& request) {
  if (request.lengths.empty() || request.num_ranks < 1) return 0.0;
  return detail::lower_bound(detail::order_by_cost(request),
                             static_cast<std::size_t>(request.num_ranks), request.equal_count);
}

// Each candidate below is a cost that some rank must reach in every feasible
// partition, so their maximum is still a valid lower bound.
namespace {

// What equal counts (floor or ceil of n/k samples a rank) add to the bound,
// given the costs ascending and their prefix sums (prefix[j]: the j
// cheapest); `bound` is the bound so far, returned raised.
double equal_count_bound(const std::vector<double>& ascending, const std::vector<double>& prefix,
                         std::size_t k, double bound) {
  const std::size_t n = ascending.size();
  const double largest = ascending.back();
  const std::size_t floor_count = n / k;
  const std::size_t ceil_count = (n + k - 1) / k;
  // Every rank holds at least floor(n/k) samples, so the rank holding the
  // largest one also holds floor(n/k) - 1 others, each no cheaper than the
  // cheapest samples other than the largest.
  if (floor_count >= 1) {
    bound = std::max(bound, largest + prefix[floor_count - 1]);
  }
  // With n samples over k ranks and at most ceil(n/k) each, some rank holds
  // exactly ceil(n/k) of them; at best they are the ceil(n/k) cheapest.
  bound = std::max(bound, prefix[ceil_count]);
  // The pigeonhole rank above holds j+1 of the top samples and, being a
  // rank, at least floor(n/k) samples in all: add the cheapest samples
  // outside the top group for the rest.
  for (std::size_t j = 1; j * k + 1 <= n && j + 1 < floor_count; ++j) {
    const std::size_t top = j * k + 1;
    const std::size_t first = n - top;
    const std::size_t others = floor_count - (j + 1);
    if (others > first) break;
    bound = std::max(bound, prefix[first + j + 1] - prefix[first] + prefix[others]);
  }
  // The j largest samples, j = 2..k. Either two of them share a rank, which
  // then costs at least the two smallest of them plus floor(n/k) - 2 of the
  // cheapest others (`shared`); or they sit on j distinct ranks, each of
  // which also holds floor(n/k) - 1 other samples, j * (floor(n/k) - 1) in
  // all (`apart`). In the second case the busiest of those ranks is at
  // least their average, and at least the smallest of the j (c_j) plus the
  // heaviest group of others, which is no lighter than the groups' average
  // and holds at least one sample no cheaper than the j*(floor-1)-th
  // cheapest of the rest (t-th cheapest: ascending[t-1]). The bound is the
  // weaker of the two cases.
  if (floor_count >= 1) {
    const std::size_t group = floor_count - 1;  // others per rank
    double top_sum = largest;
    for (std::size_t j = 2; j <= k && j <= n; ++j) {
      const double c_j = ascending[n - j];
      const double c_before = ascending[n - j + 1];
      top_sum += c_j;
      const std::size_t others = j * group;  // <= n - j because j <= k
      double apart = (top_sum + prefix[others]) / static_cast<double>(j);
      if (group >= 1) {
        const double heaviest_group = std::max(prefix[others] / static_cast<double>(j),
                                               ascending[others - 1] + prefix[group - 1]);
        apart = std::max(apart, c_j + heaviest_group);
      }
      const double shared = c_before + c_j + (group >= 1 ? prefix[group - 1] : 0.0);
      bound = std::max(bound, std::min(apart, shared));
    }
  }
  return bound;
}

}  // namespace

double detail::lower_bound(const CostOrder& order, std::size_t k, bool equal_count) {
  const std::size_t n = order.descending.size();
  if (n == 0 || k == 0) return 0.0;
  std::vector<double> ascending(n);
  for (std::size_t j = 0; j < n; ++j) {
    ascending[j] = order.cost[static_cast<std::size_t>(order.descending[n - 1 - j])];
  }
  const double total = std::accumulate(ascending.begin(), ascending.end(), 0.0);
  const double largest = ascending.back();
  // prefix[j] = sum of the j smallest costs.
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t j = 0; j < n; ++j) prefix[j + 1] = prefix[j] + ascending[j];

  // Some rank holds the largest sample; and the busiest rank is at least as
  // busy as the average one.
  double bound = std::max(largest, total / static_cast<double>(k));

  // Pigeonhole on the j*k+1 largest samples: some rank holds j+1 of them, so
  // its cost is at least the sum of the j+1 smallest among those. (j = 1 is
  // the classic c_k + c_{k+1}.) Costs of that rank's other samples are >= 0.
  for (std::size_t j = 1; j * k + 1 <= n; ++j) {
    const std::size_t top = j * k + 1;  // the top-`top` samples
    const std::size_t first = n - top;  // ascending index of the smallest of them
    bound = std::max(bound, prefix[first + j + 1] - prefix[first]);
  }

  if (equal_count) bound = equal_count_bound(ascending, prefix, k, bound);

  // Integer costs make every rank's cost an integer, so the bound rounds up.
  // A bound within float noise of an integer is taken as that integer rather
  // than pushed one unit up by the noise; either way it stays valid (an
  // integer optimum at or above a bound is at or above its ceiling).
  if (costs_are_exact_integers(ascending)) {
    const double nearest = std::round(bound);
    bound =
        std::fabs(bound - nearest) <= 1e-9 * std::max(1.0, nearest) ? nearest : std::ceil(bound);
  }
  return bound;
}

void finish_partition(const DpRequest& request, DpPartition& partition) {
  const auto k = static_cast<std::size_t>(std::max<std::int32_t>(request.num_ranks, 0));
  partition.ranks.resize(k);
  partition.cost.assign(k, 0.0);
  double total = 0.0;
  double busiest = 0.0;
  for (std::size_t r = 0; r < k; ++r) {
    double sum = 0.0;
    for (std::int64_t index : partition.ranks[r]) {
      sum += request.cost(request.lengths[static_cast<std::size_t>(index)]);
    }
    partition.cost[r] = sum;
    total += sum;
    busiest = std::max(busiest, sum);
  }
  const double mean = k == 0 ? 0.0 : total / static_cast<double>(k);
  partition.imbalance = mean > 0.0 ? busiest / mean : 1.0;
  // A partition that ignores equal_count (capped LPT may leave a rank below
  // floor(n/k)) is held to the bound of the rule it does follow, so that its
  // max / bound never drops below 1.
  const std::size_t n = request.lengths.size();
  const bool counts_equal =
      k > 0 && std::all_of(partition.ranks.begin(), partition.ranks.end(),
                           [&](const std::vector<std::int64_t>& samples) {
                             return samples.size() >= n / k && samples.size() <= (n + k - 1) / k;
                           });
  if (request.equal_count && !counts_equal) {
    DpRequest free_request = request;
    free_request.equal_count = false;
    partition.lower_bound = lower_bound(free_request);
  } else {
    partition.lower_bound = lower_bound(request);
  }
}

}  // namespace fulcrum::dp
