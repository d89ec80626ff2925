#include "launch/descriptors.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace fulcrum::launch {

std::string errno_text(int err) { return std::strerror(err); }

Result<UniqueFd> above_stdio(int fd, const char* what) {
  UniqueFd owned(fd);
  if (fd > 2) return owned;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) {
    return internal_error(std::string("cannot move the ") + what +
                          " descriptor above stdio: " + errno_text(errno));
  }
  return UniqueFd(moved);
}

Result<Pipe> make_pipe(const char* what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return internal_error(std::string("cannot create the ") + what + " pipe: " + errno_text(errno) +
                          "; raise the open-file limit (ulimit -n)");
  }
  UniqueFd r(fds[0]), w(fds[1]);
  auto r3 = above_stdio(r.release(), what);
  if (!r3) return r3.status();
  auto w3 = above_stdio(w.release(), what);
  if (!w3) return w3.status();
  return Pipe{std::move(r3).value(), std::move(w3).value()};
}

// Called through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C".
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace fulcrum::launch
