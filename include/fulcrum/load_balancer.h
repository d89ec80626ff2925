// The C++ face of a balancer: the interface the host programs against and the
// class a plugin author implements (see plugin_sdk.h for turning such a class
// into a loadable plugin).
//
// Three hooks:
//   * the data-loader hook, partition_dp: which samples of a global batch go
//     to which data-parallel rank;
//   * the attention-step hook, plan_cp: which tokens of a row go to which
//     context-parallel rank;
//   * the placement hook, schedule (optional): which ranks run which
//     documents of a global batch, in which wave, sharded how (hybrid
//     placement, schedule_types.h).
// Implementations must be deterministic: every rank asks the same question
// with replicated inputs and must get the same answer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fulcrum/dp_types.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum {

class LoadBalancer {
 public:
  virtual ~LoadBalancer() = default;

  virtual std::string name() const = 0;
  virtual std::vector<std::string> cp_strategies() const = 0;
  virtual std::vector<std::string> dp_strategies() const = 0;

  // Attention-step hook. Returns kUnsupported (with the reason) when the
  // strategy cannot serve this workload, so the host can fall back; returns
  // kInvalidArgument for a malformed workload. ShardPlan::work may be left
  // empty: the host computes it.
  virtual Result<ShardPlan> plan_cp(std::string_view strategy, const CpWorkload& workload) = 0;

  // Data-loader hook.
  virtual Result<DpPartition> partition_dp(std::string_view strategy, const DpRequest& request) = 0;

  // Placement hook. Optional, so that a balancer written before it keeps
  // compiling: the defaults list no scheduler and refuse as unsupported.
  virtual std::vector<std::string> schedule_strategies() const { return {}; }
  virtual Result<Schedule> schedule(std::string_view strategy, const ScheduleRequest& request) {
    (void)request;
    return unsupported("balancer '" + name() + "' has no scheduler (asked for " +
                       quote_text(strategy) + "); it implements only plan_cp and partition_dp");
  }
};

}  // namespace fulcrum
