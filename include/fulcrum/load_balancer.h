// The C++ face of a balancer: the interface the host programs against and the
// class a plugin author implements (see plugin_sdk.h for turning such a class
// into a loadable plugin).
//
// Two hooks:
//   * the data-loader hook, partition_dp: which samples of a global batch go
//     to which data-parallel rank;
//   * the attention-step hook, plan_cp: which tokens of a row go to which
//     context-parallel rank.
// Implementations must be deterministic: every rank asks the same question
// with replicated inputs and must get the same answer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fulcrum/dp_types.h"
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
};

}  // namespace fulcrum
