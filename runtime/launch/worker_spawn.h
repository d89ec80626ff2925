// What starting a worker takes (internal to fulcrum_launch): the program
// found in PATH, its environment (the launcher's variables replacing
// inherited ones), argv, and the child's side of fork + exec.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "fulcrum/status.h"
#include "launch/job_dir.h"
#include "launch/launch.h"

namespace fulcrum::launch {

// `program` itself when it has a '/', else the first executable of that
// name in PATH; an error naming what to fix when there is none.
Result<std::string> resolve_program(const std::string& program);

// The environment of worker `rank`: this process's, less the variables the
// launcher owns, then the worker's identity, the job directory's paths and
// options.extra_env.
std::vector<std::string> worker_environment(const LaunchOptions& options, int rank, int port,
                                            const JobDir& job_dir);

// A null-terminated argv over `strings` (which must outlive it).
std::vector<char*> as_argv(std::vector<std::string>& strings);

// In the child between fork and exec: async-signal-safe calls only. Reports
// a failure to the parent as an errno through `report_fd` (close-on-exec, so a
// successful exec reports nothing and the parent reads end of file).
[[noreturn]] void exec_worker(pid_t launcher, const char* path, char* const* argv,
                              char* const* envp, int stdin_fd, int out_fd, int err_fd,
                              int report_fd);

}  // namespace fulcrum::launch
