#include "launch/signal_forwarding.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>
#include <vector>

namespace fulcrum::launch {
namespace {

// The handler can only touch lock-free atomics and write(); it passes the
// signal number through a self-pipe that the poll loop watches.
std::atomic<int> g_signal_pipe{-1};
std::atomic<bool> g_launch_active{false};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void forward_signal_handler(int sig) {
  const int saved_errno = errno;
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

Result<SignalScope> SignalScope::enter() {
  if (g_launch_active.exchange(true)) {
    return invalid_argument(
        "another launch is already running in this process; run one job at a time");
  }
  SignalScope scope;
  scope.active_ = true;
  auto pipe = make_pipe("signal");
  if (!pipe) return pipe.status();
  set_nonblocking(pipe->read.get());
  set_nonblocking(pipe->write.get());
  scope.pipe_ = std::move(pipe).value();
  g_signal_pipe.store(scope.pipe_.write.get());
  for (std::size_t i = 0; i < std::size(kForwardedSignals); ++i) {
    struct sigaction old_action {};
    ::sigaction(kForwardedSignals[i], nullptr, &old_action);
    scope.old_[i] = old_action;
    if (old_action.sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = forward_signal_handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(kForwardedSignals[i], &action, nullptr);
    scope.installed_[i] = true;
  }
  return scope;
}

SignalScope::~SignalScope() {
  if (!active_) return;
  for (std::size_t i = 0; i < std::size(kForwardedSignals); ++i) {
    if (installed_[i]) ::sigaction(kForwardedSignals[i], &old_[i], nullptr);
  }
  g_signal_pipe.store(-1);
  g_launch_active.store(false);
}

std::vector<int> SignalScope::take() {
  std::vector<int> out;
  unsigned char buf[64];
  for (;;) {
    ssize_t n = ::read(pipe_.read.get(), buf, sizeof buf);
    if (n <= 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

}  // namespace fulcrum::launch
