// The run pricing of fulcrum/core/slot_runs.h as it stood before rule 5's
// counting was made lighter, kept for tests only: the same three answers
// (tokens and tiles, the exact price, the floor), which the core's counting
// must give bit for bit (core/tests/slot_runs_test.cpp,
// plugin/tests/schedule_rule_counts_test.cpp).
#pragma once

#include <vector>

#include "fulcrum/core/slot_runs.h"

namespace fulcrum::reference {

std::vector<RankWork> run_tokens_and_tiles(const CpWorkload& workload, const RunShardPlan& runs);
SlotCost evaluate_slot_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                            const RunShardPlan& runs);
double slot_end_floor_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                           const RunShardPlan& runs, bool exchange_floor = true);

}  // namespace fulcrum::reference
