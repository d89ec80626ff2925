// The host's own balancer: what serves when no plugin is configured, a plugin
// cannot be loaded, or a plugin fails. Deliberately minimal and independent of
// the strategies library, so the host works without the plugin.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "builtin_schedule.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/plugin_loader.h"
#include "partition_summary.h"

namespace fulcrum::host {
namespace {

constexpr std::string_view kContiguous = "contiguous";
constexpr std::string_view kRoundRobin = "round_robin";

class BuiltinBalancer final : public LoadBalancer {
 public:
  std::string name() const override { return "builtin"; }
  std::vector<std::string> cp_strategies() const override { return {std::string(kContiguous)}; }
  std::vector<std::string> dp_strategies() const override { return {std::string(kRoundRobin)}; }

  Result<ShardPlan> plan_cp(std::string_view strategy, const CpWorkload& workload) override {
    if (strategy != kContiguous) {
      return not_found("the built-in balancer has no CP strategy " + quote_text(strategy) +
                       "; it knows only 'contiguous' (load the fulcrum plugin for more)");
    }
    if (Status s = validate_workload(workload); !s) return s;

    // Rank r holds [r*S, min((r+1)*S, N)), S = ceil(N/P). Rank-major storage
    // with shard_len S makes that the identity for the first N entries; the
    // tail is padding on the last ranks.
    const std::int64_t n = workload.tokens;
    const std::int32_t p = workload.cp_size;
    ShardPlan plan;
    plan.cp_size = p;
    plan.shard_len = ceil_div(n, p);
    plan.positions.assign(static_cast<std::size_t>(plan.shard_len * p), kPadPosition);
    for (std::int64_t i = 0; i < n; ++i) plan.positions[static_cast<std::size_t>(i)] = i;
    plan.padding = plan.shard_len * p - n;
    plan.strategy_used = std::string(kContiguous);
    plan.work = compute_work(workload, plan);
    return plan;
  }

  Result<DpPartition> partition_dp(std::string_view strategy, const DpRequest& request) override {
    if (strategy != kRoundRobin) {
      return not_found("the built-in balancer has no DP strategy " + quote_text(strategy) +
                       "; it knows only 'round_robin' (load the fulcrum plugin for more)");
    }
    if (request.num_ranks < 1) {
      return invalid_argument("DP request has num_ranks " + std::to_string(request.num_ranks) +
                              "; it must be at least 1");
    }
    if (request.lengths.empty()) {
      return invalid_argument("DP request has no samples; give at least one length");
    }
    for (std::size_t i = 0; i < request.lengths.size(); ++i) {
      if (request.lengths[i] < 1) {
        return invalid_argument("DP request sample " + std::to_string(i) + " has length " +
                                std::to_string(request.lengths[i]) + "; lengths must be >= 1");
      }
    }
    DpPartition part;
    part.strategy = std::string(kRoundRobin);
    part.ranks.resize(static_cast<std::size_t>(request.num_ranks));
    for (std::size_t i = 0; i < request.lengths.size(); ++i) {
      part.ranks[i % part.ranks.size()].push_back(static_cast<std::int64_t>(i));
    }
    detail::summarize_partition(request, part);
    return part;
  }

  std::vector<std::string> schedule_strategies() const override {
    return {detail::kFixedScheduler};
  }

  // Fixed CP groups over the host's own contiguous plans and round-robin
  // dispatch: what a job without the plugin runs.
  Result<Schedule> schedule(std::string_view strategy, const ScheduleRequest& request) override {
    const std::string why = strategy == detail::kFixedScheduler
                                ? std::string()
                                : "the built-in balancer has no scheduler " + quote_text(strategy) +
                                      "; it serves only 'fixed' (load the fulcrum plugin for more)";
    return detail::builtin_fixed_schedule(
        request, [this](const CpWorkload& w) { return plan_cp(kContiguous, w); },
        [this](const DpRequest& r) { return partition_dp(kRoundRobin, r); }, why);
  }
};

}  // namespace

std::shared_ptr<LoadBalancer> builtin_balancer() {
  // Stateless, so one instance serves every caller and thread.
  static const std::shared_ptr<LoadBalancer> instance = std::make_shared<BuiltinBalancer>();
  return instance;
}

}  // namespace fulcrum::host
