// Private to fulcrum::host: the schedule the host serves itself when a
// balancer has no scheduler of its own (an ABI 1.0 plugin, a 1.1 plugin that
// leaves the hook unset, the built-in balancer).
#pragma once

#include <string>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum::host::detail {

inline constexpr const char* kFixedScheduler = "fixed";

// `fixed` from the given CP and DP hooks, validated; its fallback_reason is
// `why` (the answer says the host served it, and why).
Result<Schedule> builtin_fixed_schedule(const ScheduleRequest& request, const PlanFn& plan_cp,
                                        const PartitionFn& partition_dp, const std::string& why);

// The CP and DP strategies the built-in fixed schedule asks a plugin for:
// "auto" when it lists one, else its first.
std::string fixed_schedule_strategy(const std::vector<std::string>& listed);

}  // namespace fulcrum::host::detail
