// The single-host launcher behind `fulcrum train --nproc N`: starts N worker
// processes with torchrun-compatible variables, relays their output line by
// line with a "[rank N] " prefix, and tears the whole job down when one
// worker fails, so that a crashed rank never leaves the others hanging in a
// collective.
//
// Lifetime guarantees: every worker runs in its own process group (so the
// launcher can signal a worker together with anything it spawned, and a
// terminal Ctrl-C reaches the launcher, which forwards it) and has
// PR_SET_PDEATHSIG = SIGKILL (so a launcher killed outright takes its
// workers with it). PR_SET_PDEATHSIG fires when the *thread* that forked
// exits: call launch_workers from a thread that outlives the job (normally
// the main thread). When a worker exits, whatever it left running in its
// process group is killed: such leftovers would hold its output pipes open
// and outlive the job. Workers read stdin from /dev/null (a background
// process group reading the terminal would be stopped).
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/status.h"

namespace fulcrum::launch {

enum class OutputStream { kStdout, kStderr };

struct LaunchOptions {
  int nproc = 1;
  // Executable to run in every worker; searched in PATH when it has no '/'.
  std::string program;
  std::vector<std::string> args;  // argv[1..] of every worker
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0 = pick a free port (see pick_free_port)
  // After the first failure (or a forwarded SIGINT/SIGTERM), how long the
  // other workers get between SIGTERM and SIGKILL.
  double failure_grace_s = 5;
  // After a forwarded SIGINT/SIGTERM, how long the workers get to finish
  // their step and write a checkpoint (a fulcrum-worker with
  // train.checkpoint_dir set does) before SIGKILL; the larger of the two
  // graces applies. A second signal kills them at once.
  double interrupt_grace_s = 5;
  // A line written to stderr when the first SIGINT/SIGTERM arrives (none
  // when empty), e.g. that the workers finish their step first.
  std::string interrupt_note;
  // Whether a worker must say that its run finished (launch/worker_env.h,
  // note_completion): one that exits 0 without the note stopped early, and the
  // job fails instead of reporting success. fulcrum train sets it.
  bool require_completion_note = false;
  // Extra "NAME=value" variables for every worker, set after the launcher's own.
  std::vector<std::string> extra_env;

  // Hooks, mostly for tests and for embedding the launcher in a tool.
  // Called in the launcher right after worker `rank` was forked.
  std::function<void(int rank, pid_t pid)> on_spawn;
  // Receives every complete output line of a worker, without its newline and
  // without the prefix. Unset: "[rank N] line\n" is written to the launcher's
  // own stdout or stderr in one write, so lines of different workers never
  // interleave.
  std::function<void(int rank, OutputStream stream, std::string_view line)> on_line;
};

// How one worker ended.
struct WorkerExit {
  int rank = 0;
  pid_t pid = 0;
  int exit_status = 0;  // valid when signal == 0
  int signal = 0;       // the signal that killed it, 0 if it exited
  // Exited 0 without the completion note it was asked for (its run did not finish).
  bool left_early = false;
  bool ok() const { return signal == 0 && exit_status == 0 && !left_early; }
};

struct LaunchReport {
  std::vector<WorkerExit> workers;  // indexed by rank
  // The first worker to fail on its own; the others were then stopped by the
  // launcher, so their own exits are consequences, not causes. A rank that
  // failed because a peer went away (it noted a lost peer) is named only when
  // no other rank failed on its own within a short settling time.
  std::optional<int> failed_rank;
  int interrupted_by = 0;  // SIGINT or SIGTERM the launcher received and forwarded, else 0
  int master_port = 0;     // the port handed to the workers
  // What the launching command should exit with: 0 when every worker
  // succeeded; the failed rank's exit status, or 128 + signal (the shell's
  // convention) when it was killed or the launcher was interrupted.
  int exit_code = 0;
  // The ranks the failed rank's collective was waiting for, when it failed
  // by timing out and the workers' stall reports name them (see
  // comm/progress.h); empty otherwise.
  std::vector<int> stalled_ranks;
  // One line describing the failure, empty on success, e.g.
  // "fulcrum: rank 1 failed with exit status 3", or for a stall
  // "fulcrum: rank 3 stalled (ranks 0, 1, 2 were waiting for it in ...; rank
  // 2 timed out after 3 s); stopped all ranks".
  std::string summary;
};

// Runs the job to completion. Errors (not a failed worker, which is reported
// in LaunchReport) are for what prevents starting: bad options, a program
// that cannot be found, no free port, fork failing. If spawning fails half
// way, the workers already started are stopped and reaped first.
//
// Only one launch may run at a time in a process: SIGINT/SIGTERM are caught
// for its duration (and the previous handlers restored after).
Result<LaunchReport> run_workers(const LaunchOptions& options);

// run_workers for a command line: prints the summary line (or the error) to
// stderr and returns the process exit code (0 = all workers succeeded).
int launch_workers(const LaunchOptions& options);

// A TCP port on 127.0.0.1 that was free a moment ago: binds port 0 and reads
// back what the kernel chose. Another process may take it before the store
// binds it; rendezvous then fails loudly and a retry picks another.
Result<int> pick_free_port();

// Whether a /proc/PID/stat line says the process is stopped (state T, by
// SIGSTOP or SIGTSTP, or t, by a debugger). Text that is not such a line
// (empty: the process was gone before it could be read) is "not stopped".
bool process_state_is_stopped(std::string_view stat);

// "SIGKILL" for SIGKILL, "signal 77" for a number with no name.
std::string signal_name(int signal);

}  // namespace fulcrum::launch
