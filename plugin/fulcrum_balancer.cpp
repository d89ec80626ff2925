// libfulcrum_balancer.so: every CP and DP strategy and every scheduler of
// fulcrum behind the C ABI of c_api.h. The class only forwards to the strategy registries; the
// SDK's adapter does the C conversion and keeps exceptions inside the library.
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/load_balancer.h"
#include "fulcrum/plugin_sdk.h"
#include "strategies/cp_strategies.h"
#include "strategies/dp_strategies.h"
#include "strategies/schedule_strategies.h"

namespace {

class FulcrumBalancer final : public fulcrum::LoadBalancer {
 public:
  std::string name() const override { return "fulcrum"; }

  std::vector<std::string> cp_strategies() const override {
    std::vector<std::string> names;
    for (const auto& info : fulcrum::cp::strategies()) names.emplace_back(info.name);
    return names;
  }

  std::vector<std::string> dp_strategies() const override {
    std::vector<std::string> names;
    for (const auto& info : fulcrum::dp::strategies()) names.emplace_back(info.name);
    return names;
  }

  fulcrum::Result<fulcrum::ShardPlan> plan_cp(std::string_view strategy,
                                              const fulcrum::CpWorkload& workload) override {
    return fulcrum::cp::plan(strategy, workload);
  }

  fulcrum::Result<fulcrum::DpPartition> partition_dp(std::string_view strategy,
                                                     const fulcrum::DpRequest& request) override {
    return fulcrum::dp::partition(strategy, request);
  }

  std::vector<std::string> schedule_strategies() const override {
    return fulcrum::schedule_strategy_names();
  }

  fulcrum::Result<fulcrum::Schedule> schedule(std::string_view strategy,
                                              const fulcrum::ScheduleRequest& request) override {
    return fulcrum::run_schedule_strategy(strategy, request);
  }
};

}  // namespace

FULCRUM_EXPORT_PLUGIN(FulcrumBalancer)
