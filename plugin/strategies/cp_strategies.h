// Every CP strategy of the fulcrum plugin. Each planner validates its workload,
// returns kUnsupported with a reason when its applicability rule fails, and
// otherwise returns a valid plan with per-rank work filled in.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::cp {

using Planner = Result<ShardPlan> (*)(const CpWorkload&);

struct StrategyInfo {
  std::string_view name;
  Planner plan;
  std::string_view summary;  // one line for --help and docs
};

// In the order tables and --compare print them.
std::span<const StrategyInfo> strategies();
// One of strategies(), or a rule a schedule names for a slot (planned by
// name, not listed: per_document_weighted, whose weights come from the
// schedule; docs/HYBRID.md "compact answer"); nullptr for an unknown name.
const StrategyInfo* find_strategy(std::string_view name);
// Whether `name` takes CpWorkload::member_weights (any other refuses them).
bool takes_member_weights(std::string_view name);

// Why `name` cannot serve this (valid) workload, or nullopt when it can.
// head_tail: N % 2P == 0; ptrr: N % (P*B) == 0 and not block-sparse with
// unequal block sizes. Unknown names yield nullopt (the planner reports them).
std::optional<std::string> inapplicable_reason(std::string_view name, const CpWorkload& workload);

// Plans with `name`; kNotFound for an unknown name.
Result<ShardPlan> plan(std::string_view name, const CpWorkload& workload);

Result<ShardPlan> plan_contiguous(const CpWorkload& workload);
Result<ShardPlan> plan_head_tail(const CpWorkload& workload);
Result<ShardPlan> plan_striped(const CpWorkload& workload);
Result<ShardPlan> plan_per_document(const CpWorkload& workload);         // padding-free
Result<ShardPlan> plan_per_document_padded(const CpWorkload& workload);  // Megatron/TE THD
Result<ShardPlan> plan_ptrr(const CpWorkload& workload);
Result<ShardPlan> plan_balanced(const CpWorkload& workload);
Result<ShardPlan> plan_auto(const CpWorkload& workload);
// per_document with member r's share of each document's head and tail in
// proportion to member_weights[r] (which it needs: refused without them).
Result<ShardPlan> plan_per_document_weighted(const CpWorkload& workload);

// Fills plan.work and plan.padding from the work model; used by every planner.
void finish_plan(const CpWorkload& workload, ShardPlan& plan);

// A valid workload that `name` can serve: the validation error, or
// kUnsupported "<name> cannot shard this row: <reason>; <advice>" when its
// applicability rule fails, or ok.
Status check_servable(std::string_view name, const CpWorkload& workload, std::string_view advice);

// A plan of `shard_len` slots per rank, all padding, named `name`: the
// planners write their positions over it.
ShardPlan padded_plan(const CpWorkload& workload, std::string_view name, std::int64_t shard_len);

}  // namespace fulcrum::cp
