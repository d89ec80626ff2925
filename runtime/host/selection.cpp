// Per-batch choice of the CP strategy: preferred if it applies, else the
// configured fallback, else (when the balancer itself fails) the host's
// built-in contiguous sharding. Every rank reaches the same decision from the
// same workload, since nothing here depends on rank-local state.
#include "fulcrum/host/selection.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/text.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/plugin_loader.h"

namespace fulcrum::host {
namespace {

constexpr const char* kBuiltinStrategy = "contiguous";

std::string names_or_none(const std::vector<std::string>& items) {
  return items.empty() ? "(none)" : join(items, ", ");
}

void warn(const LogFn& log, const std::string& message) {
  if (log) log(LogLevel::kWarning, message);
}

// Makes a plan fit to leave the selector: named, validated, work filled.
Status finish_plan(const CpWorkload& workload, const std::string& asked, ShardPlan& plan) {
  if (plan.strategy_used.empty()) plan.strategy_used = asked;
  if (Status s = validate_plan(workload, plan); !s) {
    return internal_error("strategy " + quote_text(asked) +
                          " returned an invalid plan: " + s.message());
  }
  if (plan.work.size() != static_cast<std::size_t>(plan.cp_size)) {
    plan.work = compute_work(workload, plan);
  }
  return Status::ok();
}

}  // namespace

CpSelector::CpSelector(std::shared_ptr<LoadBalancer> balancer, SelectorOptions options)
    : balancer_(std::move(balancer)), builtin_(builtin_balancer()), options_(std::move(options)) {
  if (!balancer_) balancer_ = builtin_;
}

Result<ShardPlan> CpSelector::plan(const CpWorkload& workload) {
  if (Status s = validate_workload(workload); !s) return s;

  // The built-in contiguous sharding: the last resort, which cannot fail on a
  // valid workload.
  auto serve_builtin = [&](std::string reason) -> Result<ShardPlan> {
    Result<ShardPlan> plan = builtin_->plan_cp(kBuiltinStrategy, workload);
    if (!plan) return plan.status();
    if (Status s = finish_plan(workload, kBuiltinStrategy, *plan); !s) return s;
    plan->fallback_reason = std::move(reason);
    return plan;
  };

  // The configured fallback, for a batch the preferred strategy cannot serve.
  auto serve_fallback = [&](const std::string& reason) -> Result<ShardPlan> {
    const std::string& fallback = options_.fallback;
    Result<ShardPlan> plan = balancer_->plan_cp(fallback, workload);
    Status finished = plan ? finish_plan(workload, fallback, *plan) : plan.status();
    if (finished) {
      plan->fallback_reason =
          plan->fallback_reason.empty() ? reason : reason + "; " + plan->fallback_reason;
      return plan;
    }
    warn(options_.log, "fallback CP strategy " + quote_text(fallback) +
                           " failed: " + finished.message() +
                           "; serving this batch with the built-in contiguous sharding (check "
                           "the fallback setting)");
    return serve_builtin(reason + "; fallback " + quote_text(fallback) +
                         " failed: " + finished.message());
  };

  // Whether a strategy applies to a batch is the balancer's to say: its
  // kUnsupported answer carries the reason, which the plan records.
  const std::string preferred = options_.preferred;
  Result<ShardPlan> plan = balancer_->plan_cp(preferred, workload);
  Status failure = plan ? finish_plan(workload, preferred, *plan) : plan.status();
  if (failure) return plan;

  switch (failure.code()) {
    case StatusCode::kUnsupported:
      return serve_fallback(failure.message());
    case StatusCode::kNotFound:
      if (balancer_ == builtin_) {
        // No plugin is loaded (its loader already said why): a fulcrum
        // strategy name is not a user error here, only unavailable.
        return serve_builtin("strategy " + quote_text(preferred) +
                             " needs the fulcrum plugin, which is not loaded");
      }
      return invalid_argument("unknown CP strategy " + quote_text(preferred) + " for balancer '" +
                              balancer_->name() +
                              "'; known strategies: " + names_or_none(balancer_->cp_strategies()));
    default:
      break;
  }
  warn(options_.log, "CP strategy " + quote_text(preferred) + " of balancer '" + balancer_->name() +
                         "' failed: " + failure.message() +
                         "; serving this batch with the built-in contiguous sharding");
  return serve_builtin("plugin failed: " + failure.message());
}

PreferenceScope::PreferenceScope(CpSelector& selector, std::string strategy)
    : selector_(selector), previous_(selector.preferred()) {
  selector_.set_preferred(std::move(strategy));
}

PreferenceScope::~PreferenceScope() { selector_.set_preferred(std::move(previous_)); }

}  // namespace fulcrum::host
