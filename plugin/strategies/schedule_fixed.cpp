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
  return plan_fixed_slots(request, schedule, &cp::plan_auto);
}

}  // namespace fulcrum
