// The table of schedulers and name lookup.
#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

// Anchors first (the baselines every result is compared with), fulcrum's own last.
constexpr std::array<ScheduleStrategyInfo, 3> kSchedulers = {{
    {"fixed", &decide_fixed, &plan_fixed,
     "fixed CP groups of cp ranks (--cp, or the smallest whose rows hold the longest document), "
     "DP auto over the groups, rows of cp x T tokens, CP auto inside each row"},
    {"megatron_dcp", &decide_megatron_dcp, &plan_megatron_dcp,
     "Megatron-LM's dynamic CP (DefaultDynamicCPScheduler, dev d48bd6be) on lengths padded to "
     "2W: power-of-two groups up to W by P / T, P^2 / cp balancing, per-document head-tail "
     "padded to 2 x cp"},
    {"hybrid", &decide_hybrid, &plan_hybrid,
     "fulcrum: any group size, short documents on one rank, groups placed and filled by the "
     "step-time cost model, balanced CP inside each group",
     &run_hybrid},
}};

}  // namespace

std::span<const ScheduleStrategyInfo> schedule_strategies() { return kSchedulers; }

std::vector<std::string> schedule_strategy_names() {
  std::vector<std::string> names;
  for (const ScheduleStrategyInfo& info : kSchedulers) names.emplace_back(info.name);
  return names;
}

Result<Schedule> run_schedule_strategy(std::string_view name, const ScheduleRequest& request) {
  const auto it =
      std::find_if(kSchedulers.begin(), kSchedulers.end(),
                   [name](const ScheduleStrategyInfo& info) { return info.name == name; });
  if (it == kSchedulers.end()) {
    std::string known;
    for (const ScheduleStrategyInfo& info : kSchedulers) {
      known += (known.empty() ? "" : ", ") + std::string(info.name);
    }
    return not_found("scheduler " + quote_text(name) + " is unknown; use one of " + known);
  }
  Result<Schedule> schedule = it->run != nullptr ? it->run(request) : it->decide(request);
  if (!schedule) return schedule;
  if (it->run == nullptr) {
    if (Status status = it->plan(request, *schedule); !status) return status;
  }
  // A scheduler that does not shape its groups answers a shaped request
  // only where its schedule happens to keep the shapes.
  if (request.group_shapes.restricts()) {
    // fixed's and megatron_dcp's compact plans have no positions: judged by
    // their shape (any plan with positions in full).
    const PlanCheck check = request.compact ? PlanCheck::kByRule : PlanCheck::kPositions;
    if (Status status = validate_schedule(request, *schedule, check); !status) {
      return unsupported(std::string(it->name) +
                         " cannot keep the request's group_shapes: " + status.message());
    }
  }
  // A compact answer (ABI 1.4): every slot's plan by its rule. Each plan
  // here is what the CP strategy it names plans for the slot's row and the
  // member weights the slot states (the property test expands every
  // scheduler's through plan_cp), so the positions a planner wrote anyway
  // are dropped, not sent. Weights travel in the answer from ABI 1.5 on: a
  // caller that cannot take them (a 1.4 host) gets a schedule with weighted
  // slots (hybrid's per_document_weighted) in full, every slot with its
  // positions, as does a plan whose rule no CP strategy knows.
  if (!request.compact) return schedule;
  const bool by_rule = std::all_of(
      schedule->slots.begin(), schedule->slots.end(), [&request](const ScheduleSlot& slot) {
        return cp::find_strategy(slot.plan.strategy_used) != nullptr &&
               (slot.member_weights.empty() || request.compact_weights);
      });
  if (!by_rule) {
    if (Status status = expand_hybrid_plans(request, *schedule); !status) return status;
    return schedule;
  }
  for (ScheduleSlot& slot : schedule->slots) {
    slot.plan.positions = {};
    slot.plan.work = {};
    // hybrid's compact plans state no padding; every plan's is the
    // entries its row's tokens leave.
    std::int64_t row = 0;
    for (const DocPiece& piece : slot.pieces) row += piece.length;
    slot.plan.padding = slot.plan.shard_len * slot.plan.cp_size - row;
  }
  return schedule;
}

}  // namespace fulcrum
