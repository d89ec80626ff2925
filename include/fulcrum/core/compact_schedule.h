// Compact schedules (ABI 1.4, docs/PLUGIN_ABI.md "The compact answer"): a
// schedule whose slot plans are by rule (ScheduleSlot::compact) carries no
// positions; a rank writes those of the slots it runs, each with the CP
// strategy the slot names on the slot's row, and judges them in full then.
// So a rank receives and writes O(its own rows), not O(the batch).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "fulcrum/cp_types.h"
#include "fulcrum/load_balancer.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum {

// The planner of a compact answer's rules: the CP plan of `rule` for a row
// (for a plugin, its plan_cp hook, whose answer the host has validated).
using RulePlanFn = std::function<Result<ShardPlan>(std::string_view rule, const CpWorkload&)>;

// Writes slot `index`'s plan by rule (a slot with positions is left as it
// is): the rule's plan for slot_workload, which must be a valid plan of the
// row with exactly the shape the schedule stated (cp_size, shard_len,
// padding); the slot then holds that plan, strategy_used as the planner
// says (`auto` names the planner it chose). Any other answer, or a planner that cannot
// plan the rule, is a plugin fault naming the slot, its rule and the first
// field that differs: the schedule promised a plan it does not give.
Status expand_slot(const ScheduleRequest& request, ScheduleSlot& slot, std::size_t index,
                   const RulePlanFn& plan);

// expand_slot for every slot `rank` is a member of (every slot: rank < 0).
Status expand_slots_of_rank(const ScheduleRequest& request, Schedule& schedule, std::int32_t rank,
                            const RulePlanFn& plan);

// The same with `balancer`'s plan_cp, the planner of its own compact
// answers (a plugin's plans come back validated by the host); a refusal
// names the balancer.
Status expand_slots_of_rank(const ScheduleRequest& request, Schedule& schedule, std::int32_t rank,
                            LoadBalancer& balancer);

// Whether any slot's plan is by rule.
bool has_compact_slots(const Schedule& schedule);

}  // namespace fulcrum
