// `fixed`: fulcrum's placement before hybrid, the core's fixed scheduler with
// the plugin's own `auto` CP planner and `auto` DP partitioner.
#include <string>
#include <utility>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_strategies.h"
#include "strategies/dp_strategies.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {

Result<FixedPartition> decide_fixed_groups(const ScheduleRequest& request) {
  return fixed_partition(request, &dp::partition_auto);
}

Result<Schedule> decide_fixed(const ScheduleRequest& request) {
  Result<FixedPartition> groups = decide_fixed_groups(request);
  if (!groups) return groups.status();
  return fixed_rows(request, *groups);
}

namespace {

// A compact answer's plans without positions: auto's choice for each row
// (the planner plan_auto would write, by its runs), or contiguous where that
// needs more than T per member, with plan_fixed_slots' reason. Each is what
// expanding the rule gives (the compact property tests expand every
// scheduler's answer and compare it with the full one).
Status plan_fixed_compact(const ScheduleRequest& request, Schedule& schedule) {
  const std::int64_t budget = request.max_tokens_per_rank;
  for (ScheduleSlot& slot : schedule.slots) {
    const CpWorkload w = slot_workload(request, slot);
    Result<cp::detail::AutoChoice> choice = cp::detail::auto_choice(w);
    if (!choice) return choice.status();
    slot.plan = ShardPlan{};
    slot.plan.cp_size = w.cp_size;
    if (choice->runs.shard_len > budget) {
      slot.plan.fallback_reason = choice->name + " needs " +
                                  std::to_string(choice->runs.shard_len) +
                                  " tokens per rank, more than T = " + std::to_string(budget);
      slot.plan.strategy_used = "contiguous";
      slot.plan.shard_len = ceil_div(w.tokens, w.cp_size);
    } else {
      slot.plan.strategy_used = "auto";
      slot.plan.shard_len = choice->runs.shard_len;
    }
    slot.plan.padding = slot.plan.shard_len * w.cp_size - w.tokens;
  }
  return Status::ok();
}

}  // namespace

Status plan_fixed(const ScheduleRequest& request, Schedule& schedule) {
  if (request.compact) return plan_fixed_compact(request, schedule);
  if (Status status = plan_fixed_slots(request, schedule, &cp::plan_auto); !status) return status;
  return Status::ok();
}

}  // namespace fulcrum
