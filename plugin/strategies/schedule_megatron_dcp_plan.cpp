// megatron_dcp's planning (its decision: schedule_megatron_dcp.cpp): inside
// a group, TransformerEngine's THD layout as `per_document_padded` (every
// piece padded to a multiple of 2c and cut head-tail; c = 1: the row as it
// is), and where that shard exceeds T (a group size that does not divide
// W) the contiguous plan, saying so. A compact answer's plans are counted,
// not written.
#include <cstdint>
#include <string>
#include <utility>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// A compact answer's plans without positions: per_document_padded's shape
// (a member holds 2 ceil(L / 2c) of each piece of L tokens), contiguous on
// one rank or where that exceeds T, with plan_megatron_dcp's reason.
Status plan_megatron_dcp_compact(const ScheduleRequest& request, Schedule& schedule) {
  const std::int64_t budget = request.max_tokens_per_rank;
  for (ScheduleSlot& slot : schedule.slots) {
    const CpWorkload w = slot_workload(request, slot);
    if (Status status = validate_workload(w); !status) return status;
    slot.plan = ShardPlan{};
    slot.plan.cp_size = w.cp_size;
    slot.plan.strategy_used = "contiguous";
    slot.plan.shard_len = ceil_div(w.tokens, w.cp_size);
    if (w.cp_size > 1) {
      const std::int64_t chunks = 2 * static_cast<std::int64_t>(w.cp_size);
      std::int64_t shard = 0;
      for (const std::int64_t length : w.doc_lengths) shard += 2 * ceil_div(length, chunks);
      if (shard > budget) {
        slot.plan.fallback_reason =
            "per_document_padded needs " + str(shard) + " tokens per rank on " + str(w.cp_size) +
            " of " + str(request.world_size) + " ranks, more than T = " + str(budget);
      } else {
        slot.plan.strategy_used = "per_document_padded";
        slot.plan.shard_len = shard;
      }
    }
    slot.plan.padding = slot.plan.shard_len * w.cp_size - w.tokens;
  }
  return Status::ok();
}

}  // namespace

Status plan_megatron_dcp(const ScheduleRequest& request, Schedule& schedule) {
  if (schedule.strategy_used == "fixed") return plan_fixed(request, schedule);  // fell back
  if (request.compact) return plan_megatron_dcp_compact(request, schedule);
  const std::int64_t budget = request.max_tokens_per_rank;
  for (ScheduleSlot& slot : schedule.slots) {
    const CpWorkload w = slot_workload(request, slot);
    if (w.cp_size == 1) {
      slot.plan = contiguous_plan(w);
      continue;
    }
    Result<ShardPlan> plan = cp::plan_per_document_padded(w);
    if (!plan) return plan.status();
    if (plan->shard_len > budget) {
      // Only where the group size does not divide W (see the top): Megatron's
      // sum of P / c fits T, the THD shard padded to 2c does not.
      const std::string why = "per_document_padded needs " + str(plan->shard_len) +
                              " tokens per rank on " + str(w.cp_size) + " of " +
                              str(request.world_size) + " ranks, more than T = " + str(budget);
      slot.plan = contiguous_plan(w);
      slot.plan.fallback_reason = why;
      continue;
    }
    slot.plan = std::move(*plan);
  }
  return Status::ok();
}

}  // namespace fulcrum
