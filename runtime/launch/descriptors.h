// The launcher's descriptors (internal to fulcrum_launch): pipes whose ends
// sit above stdio, a worker's pidfd, non-blocking reads.
#pragma once

#include <sys/types.h>

#include <string>

#include "fulcrum/status.h"
#include "launch/unique_fd.h"

namespace fulcrum::launch {

std::string errno_text(int err);

// Moves a descriptor to >= 3 (close-on-exec), so that dup2 onto 0, 1, 2 in the
// child never clobbers another of our descriptors even when the launcher was
// started with some of its standard streams closed.
Result<UniqueFd> above_stdio(int fd, const char* what);

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// A close-on-exec pipe, both ends above stdio; `what` names it in errors.
Result<Pipe> make_pipe(const char* what);

// A descriptor that polls readable when `pid` exits, or -1 on kernels before
// 5.3.
int open_pidfd(pid_t pid);

void set_nonblocking(int fd);

}  // namespace fulcrum::launch
