#include "launch/last_line.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "comm/progress.h"

namespace fulcrum::launch {
namespace {

// The failed rank gave up waiting in a collective: name the rank it waited
// for, from the ranks found stopped or else from the stall reports.
void name_the_stall(LaunchReport& report, const WorkerExit& e, const std::vector<int>& stopped,
                    const JobDir& dir) {
  if (!stopped.empty() && e.exit_status != 0) {
    report.stalled_ranks = stopped;
    report.summary =
        "fulcrum: " + comm::ranks_phrase(stopped) + " " + (stopped.size() == 1 ? "was" : "were") +
        " stopped (by SIGSTOP, SIGTSTP or a debugger) when rank " + std::to_string(e.rank) +
        " failed with exit status " + std::to_string(e.exit_status) +
        "; a stopped rank answers no collective: its peers time out "
        "(dist.op_timeout_s); stopped all ranks";
    return;
  }
  const auto stalls = dir.read(e.rank);
  if (!stalls) return;
  const std::optional<std::string> line = comm::stall_summary(*stalls);
  if (!line) return;
  report.summary = *line;
  for (const comm::StallReport& r : *stalls) {
    report.stalled_ranks.insert(report.stalled_ranks.end(), r.stalled.begin(), r.stalled.end());
  }
  std::sort(report.stalled_ranks.begin(), report.stalled_ranks.end());
  report.stalled_ranks.erase(std::unique(report.stalled_ranks.begin(), report.stalled_ranks.end()),
                             report.stalled_ranks.end());
}

void describe_failure(LaunchReport& report, const std::vector<int>& stopped, const LineRelay& relay,
                      const JobDir& dir) {
  const WorkerExit& e = report.workers[static_cast<std::size_t>(*report.failed_rank)];
  if (e.left_early) {
    report.exit_code = 1;
    report.summary = "fulcrum: rank " + std::to_string(e.rank) +
                     " exited with status 0 before its run finished (it left no completion "
                     "note); stopped all ranks: the run did not complete";
  } else if (e.signal != 0) {
    report.exit_code = 128 + e.signal;
    report.summary =
        "fulcrum: rank " + std::to_string(e.rank) + " killed by signal " + signal_name(e.signal);
  } else {
    report.exit_code = e.exit_status;
    report.summary = "fulcrum: rank " + std::to_string(e.rank) + " failed with exit status " +
                     std::to_string(e.exit_status);
    if (const std::vector<int> same = relay.same_error_as(e.rank); !same.empty()) {
      report.summary += " (the same error on " + comm::ranks_phrase(same) + ")";
    }
    name_the_stall(report, e, stopped, dir);
  }
}

void describe_interrupt(LaunchReport& report) {
  report.exit_code = 128 + report.interrupted_by;
  // Every worker exiting 128 + the signal handled it: they stopped at one
  // step boundary after rank 0 wrote a checkpoint (train/worker_base.cpp).
  const int handled = 128 + report.interrupted_by;
  const bool checkpointed =
      std::all_of(report.workers.begin(), report.workers.end(),
                  [&](const WorkerExit& e) { return e.signal == 0 && e.exit_status == handled; });
  report.summary = "fulcrum: interrupted by " + signal_name(report.interrupted_by) +
                   (checkpointed ? "; the workers stopped after the same step and rank 0 "
                                   "wrote a checkpoint (its line above says where); "
                                   "continue with --resume auto"
                                 : "; forwarded it to the workers and stopped them");
}

}  // namespace

void describe_ending(LaunchReport& report, const std::vector<int>& stopped, const LineRelay& relay,
                     const JobDir& dir) {
  if (report.failed_rank) {
    describe_failure(report, stopped, relay, dir);
  } else if (report.interrupted_by != 0) {
    describe_interrupt(report);
  }
}

}  // namespace fulcrum::launch
