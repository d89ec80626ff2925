// Choosing the CP strategy of each micro-batch.
//
// The host holds a preferred strategy and asks the balancer for it on each
// workload. Whether a strategy applies is the balancer's rule alone (head_tail
// needs N % 2P == 0, ptrr N % (P*B) == 0, a third-party strategy its own);
// the host keeps no copy of such rules. When the balancer answers
// kUnsupported, the configured fallback serves and the plan records the
// balancer's reason. When the balancer fails outright, or the fallback does,
// the host's built-in contiguous sharding serves, with a warning. Every plan
// that leaves the selector is validated and carries its per-rank work.
#pragma once

#include <memory>
#include <string>

#include "fulcrum/cp_types.h"
#include "fulcrum/host/log.h"
#include "fulcrum/load_balancer.h"
#include "fulcrum/status.h"

namespace fulcrum::host {

struct SelectorOptions {
  std::string preferred = "auto";
  std::string fallback = "contiguous";
  LogFn log = log_to_stderr;
};

class CpSelector {
 public:
  CpSelector(std::shared_ptr<LoadBalancer> balancer, SelectorOptions options);

  const std::string& preferred() const { return options_.preferred; }
  void set_preferred(std::string strategy) { options_.preferred = std::move(strategy); }
  const std::string& fallback() const { return options_.fallback; }

  // A validated plan with strategy_used, fallback_reason and work filled in.
  // Errors only for an invalid workload or when even the built-in fallback
  // cannot serve it.
  Result<ShardPlan> plan(const CpWorkload& workload);

 private:
  std::shared_ptr<LoadBalancer> balancer_;
  std::shared_ptr<LoadBalancer> builtin_;
  SelectorOptions options_;
};

// Sets the selector's preference for the lifetime of the scope and restores
// the previous one when the scope exits, by return or by exception. Scopes
// nest; each restores what it found.
class PreferenceScope {
 public:
  PreferenceScope(CpSelector& selector, std::string strategy);
  ~PreferenceScope();
  PreferenceScope(const PreferenceScope&) = delete;
  PreferenceScope& operator=(const PreferenceScope&) = delete;

 private:
  CpSelector& selector_;
  std::string previous_;
};

}  // namespace fulcrum::host
