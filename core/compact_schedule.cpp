#include "fulcrum/core/compact_schedule.h"

#include <algorithm>
#include <string>
#include <utility>

#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/schedule.h"

namespace fulcrum {

Status expand_slot(const ScheduleRequest& request, ScheduleSlot& slot, std::size_t index,
                   const RulePlanFn& plan) {
  if (!slot.compact()) return Status::ok();
  const std::string where = "schedule slot " + std::to_string(index) + " (CP rule " +
                            quote_text(slot.plan.strategy_used) + " on " +
                            std::to_string(slot.ranks.size()) +
                            (slot.ranks.size() == 1 ? " rank)" : " ranks)");
  const CpWorkload w = slot_workload(request, slot);
  Result<ShardPlan> expanded = plan(slot.plan.strategy_used, w);
  if (!expanded) {
    return plugin_fault(where + " cannot be expanded: " + expanded.status().message() +
                        "; fix the plugin: a plan by rule must name a CP strategy that plans the "
                        "slot's row");
  }
  const ShardPlan& got = *expanded;
  const auto differs = [&](const char* field, const std::string& said, const std::string& gave) {
    return plugin_fault(where + " expanded to a plan with " + field + " " + gave +
                        ", the schedule said " + said +
                        "; fix the plugin: a plan by rule must be what its rule plans for the "
                        "slot's row");
  };
  if (got.cp_size != slot.plan.cp_size) {
    return differs("cp_size", std::to_string(slot.plan.cp_size), std::to_string(got.cp_size));
  }
  if (got.shard_len != slot.plan.shard_len) {
    return differs("shard_len", std::to_string(slot.plan.shard_len), std::to_string(got.shard_len));
  }
  if (got.padding != slot.plan.padding) {
    return differs("padding", std::to_string(slot.plan.padding), std::to_string(got.padding));
  }
  // The planner's answer is judged again here, whatever judged it before:
  // the positions are what attention will use.
  if (Status status = validate_plan(w, got); !status) {
    return plugin_fault(where + " expanded to an invalid plan: " + status.message());
  }
  std::string reason = std::move(slot.plan.fallback_reason);
  slot.plan = std::move(expanded).value();
  if (slot.plan.fallback_reason.empty()) slot.plan.fallback_reason = std::move(reason);
  return Status::ok();
}

Status expand_slots_of_rank(const ScheduleRequest& request, Schedule& schedule, std::int32_t rank,
                            const RulePlanFn& plan) {
  for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
    ScheduleSlot& slot = schedule.slots[s];
    if (!slot.compact()) continue;
    if (rank >= 0 && std::find(slot.ranks.begin(), slot.ranks.end(), rank) == slot.ranks.end()) {
      continue;
    }
    if (Status status = expand_slot(request, slot, s, plan); !status) return status;
  }
  return Status::ok();
}

Status expand_slots_of_rank(const ScheduleRequest& request, Schedule& schedule, std::int32_t rank,
                            LoadBalancer& balancer) {
  const RulePlanFn plan = [&balancer](std::string_view rule, const CpWorkload& w) {
    return balancer.plan_cp(rule, w);
  };
  Status status = expand_slots_of_rank(request, schedule, rank, plan);
  if (status) return status;
  return {status.code(), "balancer '" + balancer.name() + "': " + status.message()};
}

bool has_compact_slots(const Schedule& schedule) {
  return std::any_of(schedule.slots.begin(), schedule.slots.end(),
                     [](const ScheduleSlot& slot) { return slot.compact(); });
}

}  // namespace fulcrum
