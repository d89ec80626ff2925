// Bounded before it starts: every planning command estimates, from its
// arguments alone, the seconds and bytes its work will take, and refuses in
// one line, before any of it, what would not finish in a few seconds within
// about 2 GB. One estimator per command, in one place, instead of a limit
// per flag: whether a row is too long depends on the block size, the rank
// count and the strategies asked for together.
//
// The coefficients are upper envelopes of /usr/bin/time measurements of the
// release build on the development machine (docs/RELIABILITY.md, "Bounded
// before it starts", lists the points). An estimate errs high: near the
// bound a little work that would have fitted is refused, never the other
// way round.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "fulcrum/core/schedule.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/dp_types.h"

namespace fulcrum::cli {

// What one command may take.
inline constexpr double kMaxCommandSeconds = 4.0;
inline constexpr double kMaxCommandBytes = 1.5e9;

struct WorkEstimate {
  std::string work;  // what is estimated, e.g. "a row of 8388608 tokens ..."
  double seconds = 0.0;
  double bytes = 0.0;
};

// fulcrum plan: `strategies` plans of `w`, each planned `repeats` times;
// `positions_json` when every position is written as JSON.
WorkEstimate estimate_plan(const CpWorkload& w, int strategies, int repeats, bool positions_json);

// fulcrum schedule: `schedulers` schedules of `r`, each made `repeats` times,
// `hybrid` when hybrid is one of them (it prices a forced-wide slot's
// member-pair table about four times: drafts, search, refinement, guard).
WorkEstimate estimate_schedule(const ScheduleRequest& r, int schedulers, int repeats, bool hybrid);

// fulcrum dp-partition with `strategy` (its cost depends on which).
WorkEstimate estimate_dp_partition(const DpRequest& r, std::string_view strategy);

// Throws UsageError "<work> would take about S s and B GB, more than the
// 4 s and 1.5 GB fulcrum <command> allows; <advice>" when either is past
// its bound.
void refuse_beyond_bounds(std::string_view command, const WorkEstimate& estimate,
                          std::string_view advice);

}  // namespace fulcrum::cli
