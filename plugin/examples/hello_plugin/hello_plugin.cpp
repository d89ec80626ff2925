// A minimal fulcrum plugin: an ordinary C++ class, exported with one macro.
//
// CP "reverse_contiguous": contiguous shards of ceil(N/P) tokens, dealt to the
// ranks in reverse order (rank 0 gets the last shard, so any padding lands
// on rank 0). DP "round_robin": sample i goes to rank i mod k.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/plugin_sdk.h"

namespace {

class HelloBalancer final : public fulcrum::LoadBalancer {
 public:
  HelloBalancer() = default;
  explicit HelloBalancer(fulcrum::sdk::Host host) : host_(host) {}

  std::string name() const override { return "hello"; }
  std::vector<std::string> cp_strategies() const override { return {"reverse_contiguous"}; }
  std::vector<std::string> dp_strategies() const override { return {"round_robin"}; }

  fulcrum::Result<fulcrum::ShardPlan> plan_cp(std::string_view strategy,
                                              const fulcrum::CpWorkload& workload) override {
    if (strategy != "reverse_contiguous") {
      return fulcrum::not_found("hello has no CP strategy '" + std::string(strategy) +
                                "'; it has reverse_contiguous");
    }
    if (workload.tokens < 1 || workload.cp_size < 1) {
      return fulcrum::invalid_argument("hello needs tokens >= 1 and cp_size >= 1");
    }
    const std::int64_t n = workload.tokens;
    const std::int64_t p = workload.cp_size;
    const std::int64_t shard = (n + p - 1) / p;
    fulcrum::ShardPlan plan;
    plan.cp_size = workload.cp_size;
    plan.shard_len = shard;
    plan.positions.assign(static_cast<std::size_t>(shard * p), fulcrum::kPadPosition);
    for (std::int64_t r = 0; r < p; ++r) {
      const std::int64_t first = (p - 1 - r) * shard;
      for (std::int64_t i = 0; i < shard && first + i < n; ++i) {
        plan.positions[static_cast<std::size_t>(r * shard + i)] = first + i;
      }
    }
    plan.padding = shard * p - n;
    plan.strategy_used = "reverse_contiguous";
    // plan.work stays empty: the host computes it.
    host_.log(FULCRUM_LOG_DEBUG, "planned " + std::to_string(n) + " tokens");
    return plan;
  }

  fulcrum::Result<fulcrum::DpPartition> partition_dp(std::string_view strategy,
                                                     const fulcrum::DpRequest& request) override {
    if (strategy != "round_robin") {
      return fulcrum::not_found("hello has no DP strategy '" + std::string(strategy) + "'");
    }
    fulcrum::DpPartition part;
    part.strategy = "round_robin";
    part.ranks.resize(static_cast<std::size_t>(request.num_ranks));
    for (std::size_t i = 0; i < request.lengths.size(); ++i) {
      part.ranks[i % part.ranks.size()].push_back(static_cast<std::int64_t>(i));
    }
    return part;
  }

 private:
  fulcrum::sdk::Host host_;
};

}  // namespace

FULCRUM_EXPORT_PLUGIN(HelloBalancer)
