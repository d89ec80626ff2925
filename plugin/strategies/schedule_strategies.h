// Every hybrid-placement scheduler of the fulcrum plugin (docs/HYBRID.md):
// `fixed` (fixed CP groups, fulcrum before hybrid placement),
// `megatron_dcp` (Megatron-LM's dynamic CP scheduler, re-derived) and
// `hybrid` (fulcrum's own). Each validates its request and returns a schedule
// validate_schedule accepts, or a Status saying why it cannot.
//
// A scheduler works in two phases, timed apart by the benchmark: deciding
// (which pieces run where and when: slots with ranks, pieces and waves,
// plans left empty) and planning (materialising every slot's ShardPlan,
// O(total tokens)).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum {

struct ScheduleStrategyInfo {
  std::string_view name;
  Result<Schedule> (*decide)(const ScheduleRequest&);  // slots without plans
  Status (*plan)(const ScheduleRequest&, Schedule&);   // fills every slot's plan
  std::string_view summary;
  // Both phases in one call where the scheduler shares work between them
  // (hybrid: the drafts deciding draws are the ones planning tries);
  // nullptr: decide, then plan.
  Result<Schedule> (*run)(const ScheduleRequest&) = nullptr;
};

// In the order tables print them: anchors first, fulcrum's own last.
std::span<const ScheduleStrategyInfo> schedule_strategies();
std::vector<std::string> schedule_strategy_names();

// Decides and plans with `name`; kNotFound for an unknown name.
Result<Schedule> run_schedule_strategy(std::string_view name, const ScheduleRequest& request);

Result<Schedule> decide_fixed(const ScheduleRequest& request);
// decide_fixed's first step (fixed_partition with the plugin's DP `auto`):
// the pieces dealt to the DP groups, before any row is packed; decide_fixed
// = fixed_rows of it.
Result<FixedPartition> decide_fixed_groups(const ScheduleRequest& request);
Status plan_fixed(const ScheduleRequest& request, Schedule& schedule);
Result<Schedule> decide_megatron_dcp(const ScheduleRequest& request);
// Megatron's own decision, as hybrid's guard needs it: kUnsupported where
// Megatron fails (decide_megatron_dcp then serves fixed's schedule, which
// the guard weighs as fixed anyway). `enough`, when set, is asked after each
// micro-batch (one wave) with the slots decided so far, in wave order,
// whether they already suffice; where it says so the decision stops there
// and `stopped` is set. With a wave multiple (Megatron's alignment splits
// micro-batches once all are formed) it is never asked.
using WavesCheck = std::function<bool(const Schedule&)>;
Result<Schedule> decide_megatron_dcp_waves(const ScheduleRequest& request, const WavesCheck& enough,
                                           bool& stopped);
Status plan_megatron_dcp(const ScheduleRequest& request, Schedule& schedule);
Result<Schedule> decide_hybrid(const ScheduleRequest& request);
// plan_hybrid = plan_hybrid_slots (hybrid's own slots) then
// keep_fastest_of_baselines: the planned schedule is replaced by fixed's or
// megatron_dcp's for the same request when the cost model prices that one
// strictly lower (fallback_reason then names it and both step times;
// strategy_used stays "hybrid"). Apart so that the benchmark times them apart.
Status plan_hybrid(const ScheduleRequest& request, Schedule& schedule);
// decide_hybrid then plan_hybrid, the same schedule, with every draft drawn
// once (planning tries the drafts deciding drew, instead of drawing them
// again).
Result<Schedule> run_hybrid(const ScheduleRequest& request);
Status plan_hybrid_slots(const ScheduleRequest& request, Schedule& schedule);
Status keep_fastest_of_baselines(const ScheduleRequest& request, Schedule& schedule);
// The same with hybrid's step known (`own_step`, as evaluate_schedule would
// price `schedule`): the guard then needs no positions of hybrid's slots.
// `trace`, when given, gets what the guard did with each baseline, in its
// order (fixed, megatron_dcp): "bound" (fixed: ruled out before any
// decision), "groups" (fixed: ruled out from its DP groups, before rows),
// "decided" (ruled out by its decided slots' bound; megatron_dcp's by the
// micro-batches decided until it is reached), "priced" (priced from runs,
// not cheaper), "planned" (priced cheaper and planned in full); a baseline
// that refuses the request is left out, and so is megatron_dcp where
// Megatron fails (its fallback, fixed's schedule, is weighed as fixed).
struct GuardTrace {
  std::vector<std::pair<std::string, std::string>> steps;  // (baseline, what)
};
Status keep_fastest_of_baselines(const ScheduleRequest& request, Schedule& schedule,
                                 double own_step, GuardTrace* trace = nullptr);
// hybrid's own slots (plan_hybrid_slots) planned compactly: every slot's
// plan names its CP rule (strategy_used, fallback_reason), cp_size and
// shard_len, without positions; `step` gets the schedule's exact step.
// expand_hybrid_plans writes the positions of every slot that has none.
// plan_hybrid_slots = the two in turn.
Status plan_hybrid_compact(const ScheduleRequest& request, Schedule& schedule, double& step);
Status expand_hybrid_plans(const ScheduleRequest& request, Schedule& schedule);
// `hybrid` under a request's group_shapes (schedule_shaped.cpp): decide_hybrid
// and plan_hybrid hand a request that restricts groups to these.
Result<Schedule> decide_hybrid_shaped(const ScheduleRequest& request);
Status plan_hybrid_shaped(const ScheduleRequest& request, Schedule& schedule);
// No plan of a decided schedule (slots without plans) ends sooner than this:
// the guard plans a baseline only when this is below hybrid's step.
double decided_step_lower_bound(const ScheduleRequest& request, const Schedule& schedule);
// No schedule fixed_rows packs from these DP groups ends sooner than this
// (each group's rows at least its pieces' mean compute over cp plus a fixed
// cost per row, at least ceil(tokens / (cp T)) rows and one per piece
// longer than half a row): the guard rules fixed out before packing rows.
double fixed_groups_step_lower_bound(const ScheduleRequest& request, const FixedPartition& groups);
// Its per-slot part: no plan of `slot` (its pieces over its ranks) lasts
// less than its members' mean compute, the fixed cost plus the tokens' and
// the tiles' time shared over them (as sums: compare with a margin).
double slot_length_lower_bound(const ScheduleRequest& request, const ScheduleSlot& slot);

}  // namespace fulcrum
