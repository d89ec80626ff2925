// hybrid's moves after rule 7's search (docs/HYBRID.md rule 10): rows and
// pieces moved off the ranks that end last, and the widest slot over
// several nodes narrowed to whole nodes.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"
#include "strategies/schedule_hybrid_draft.h"

namespace fulcrum::hybrid {

// Runs `search` (rule 7's moves) on the planned schedule and evens its
// tail; where the planned schedule's widest slot spans several nodes and
// holds only part of one, also tries it with that node's members dropped
// from the slot, its tail evened and (where it then ends sooner) searched;
// keeps the better (the step, then the rank-seconds; ties: the first).
// `length` holds every slot's exact length and is kept current;
// `token_budget` is what all of it may re-plan, in tokens.
using TimelineSearch = std::function<Status(Schedule&, std::vector<double>&, std::int64_t&)>;

Status search_with_narrowed_slot(const ScheduleRequest& request, Schedule& schedule,
                                 std::vector<double>& length, const SlotPlanner& plan,
                                 std::int64_t& token_budget, const TimelineSearch& search);

}  // namespace fulcrum::hybrid
