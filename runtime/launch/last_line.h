// The launcher's last line (internal to fulcrum_launch): how the job ended,
// told from the workers' exits, the ranks found stopped, the error lines
// every rank shared and the stall reports; and the exit code that goes
// with it.
#pragma once

#include <vector>

#include "launch/job_dir.h"
#include "launch/launch.h"
#include "launch/line_relay.h"

namespace fulcrum::launch {

// Fills report.exit_code, summary and stalled_ranks from report.workers,
// failed_rank and interrupted_by. `stopped`: the ranks found stopped when
// the first failure arrived.
void describe_ending(LaunchReport& report, const std::vector<int>& stopped, const LineRelay& relay,
                     const JobDir& dir);

}  // namespace fulcrum::launch
