// The host's own fixed schedule (builtin_schedule.h). The schedule the core
// builds is validated here like a plugin's: it runs plans that came from a
// plugin, and the host trusts no plan it has not checked.
#include "builtin_schedule.h"

#include <algorithm>
#include <utility>

#include "fulcrum/core/schedule.h"

namespace fulcrum::host::detail {

Result<Schedule> builtin_fixed_schedule(const ScheduleRequest& request, const PlanFn& plan_cp,
                                        const PartitionFn& partition_dp, const std::string& why) {
  if (Status s = validate_schedule_request(request); !s) return s;
  Result<Schedule> built = fixed_schedule(request, plan_cp, partition_dp);
  if (!built) return built.status();
  Schedule schedule = std::move(built).value();
  if (Status s = validate_schedule(request, schedule); !s) {
    return internal_error("the host's built-in fixed schedule is invalid: " + s.message() +
                          "; report this with the command that produced it");
  }
  schedule.strategy_used = kFixedScheduler;
  schedule.fallback_reason = why;
  return schedule;
}

std::string fixed_schedule_strategy(const std::vector<std::string>& listed) {
  if (std::find(listed.begin(), listed.end(), "auto") != listed.end()) return "auto";
  return listed.empty() ? std::string() : listed.front();
}

}  // namespace fulcrum::host::detail
