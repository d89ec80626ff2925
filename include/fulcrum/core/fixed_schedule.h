// The `fixed` scheduler: fulcrum's behaviour before hybrid placement, as one
// schedule. The world is DP groups of cp consecutive ranks (CP fastest
// varying); the DP partition deals the global batch's pieces to the groups,
// each group packs its pieces into rows of cp x T tokens (best fit, longest
// first) and runs them one row per wave, every row sharded over the whole
// group by the CP planner. It lives in core, with the planners injected, so
// that a host can build it from any plugin's plan and partition hooks (an
// ABI 1.0 plugin has no schedule hook of its own).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fulcrum/dp_types.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum {

using PlanFn = std::function<Result<ShardPlan>(const CpWorkload&)>;
using PartitionFn = std::function<Result<DpPartition>(const DpRequest&)>;

// request.cp_size when set; otherwise the smallest divisor of W whose rows
// (cp x T tokens) hold the longest piece, as a user of fixed CP must choose.
// kUnsupported when a set cp_size cannot hold the longest piece.
Result<std::int32_t> fixed_cp_size(const ScheduleRequest& request);
// The same from the request's pieces (schedule_pieces), counted once.
Result<std::int32_t> fixed_cp_size(const ScheduleRequest& request,
                                   const std::vector<DocPiece>& pieces);

// The deciding half: the slots (groups, pieces, waves) with empty plans.
Result<Schedule> fixed_slots(const ScheduleRequest& request, const PartitionFn& partition_dp);

// fixed_slots in its two steps, for a caller that may stop between them
// (hybrid's guard can rule fixed out from the groups' pieces alone, before
// any row is packed): the request checked, cp chosen and the pieces dealt to
// the W / cp DP groups (the partition checked: every piece once, in range);
// then each group's pieces packed into rows, one slot per row.
struct FixedPartition {
  std::int32_t cp = 0;
  std::vector<DocPiece> pieces;                   // schedule_pieces(request)
  std::vector<std::vector<std::int64_t>> groups;  // per DP group, indices into pieces
};
Result<FixedPartition> fixed_partition(const ScheduleRequest& request,
                                       const PartitionFn& partition_dp);
Schedule fixed_rows(const ScheduleRequest& request, const FixedPartition& partition);

// The planning half: every slot's plan from plan_cp. A row whose plan gives
// a member more than T tokens (padding included) is sharded contiguously
// instead (ceil(N / cp) <= T), and its plan says so in fallback_reason.
Status plan_fixed_slots(const ScheduleRequest& request, Schedule& schedule, const PlanFn& plan_cp);

// Both halves. A row whose plan gives a member more than T tokens (padding included) is
// sharded contiguously instead (ceil(N / cp) <= T), and its plan says so in
// fallback_reason. The request is validated first.
Result<Schedule> fixed_schedule(const ScheduleRequest& request, const PlanFn& plan_cp,
                                const PartitionFn& partition_dp);

// Contiguous sharding of a row: rank r holds [r * ceil(N/P), ...), the last
// rank padded. The host's own fallback, here so that core can use it too.
ShardPlan contiguous_plan(const CpWorkload& workload);

}  // namespace fulcrum
