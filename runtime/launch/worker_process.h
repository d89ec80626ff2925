// A started worker as the launcher tracks it (internal to fulcrum_launch):
// its pid, pidfd and output channels, whether it was reaped and how it
// ended; and what the launcher does to it: look at its /proc state, signal
// its process group.
#pragma once

#include <sys/types.h>

#include "launch/launch.h"
#include "launch/line_relay.h"
#include "launch/unique_fd.h"

namespace fulcrum::launch {

struct WorkerProcess {
  int rank = 0;
  pid_t pid = -1;
  UniqueFd pidfd;  // readable when the worker exits; invalid on kernels without pidfd
  OutputChannel out, err;
  bool reaped = false;
  WorkerExit exit;
};

// Whether `pid` is stopped (SIGSTOP, SIGTSTP, a debugger): state T or t in
// /proc/PID/stat, the character after the parenthesised command name.
// A process that exits while it is looked at (the file vanishes, or the read
// fails with ESRCH) is not stopped: its exit is reaped and reported as usual.
bool is_stopped(pid_t pid);

// Signals a worker together with everything it started: it leads its own
// process group. Falls back to the worker alone if it moved itself to another
// group (setsid), where the group no longer exists.
void signal_worker(const WorkerProcess& worker, int sig);

}  // namespace fulcrum::launch
