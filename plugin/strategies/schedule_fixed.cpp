// `fixed`: fulcrum's placement before hybrid, the core's fixed scheduler with
// the plugin's own `auto` CP planner and `auto` DP partitioner.
#include "fulcrum/core/fixed_schedule.h"
#include "strategies/cp_strategies.h"
#include "strategies/dp_strategies.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {

Result<Schedule> decide_fixed(const ScheduleRequest& request) {
  return fixed_slots(request, &dp::partition_auto);
}

Status plan_fixed(const ScheduleRequest& request, Schedule& schedule) {
  if (Status status = plan_fixed_slots(request, schedule, &cp::plan_auto); !status) return status;
  // A compact answer names each plan by the rule that gives it again: auto
  // (whose strategy_used may name a planner with no registry entry of its
  // own, balanced_token), or contiguous where auto needed more than T.
  if (request.compact) {
    for (ScheduleSlot& slot : schedule.slots) {
      if (slot.plan.fallback_reason.empty()) slot.plan.strategy_used = "auto";
    }
  }
  return Status::ok();
}

}  // namespace fulcrum
