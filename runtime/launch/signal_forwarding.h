// SIGINT and SIGTERM while a launch runs (internal to fulcrum_launch):
// caught through a self-pipe the launcher's poll loop watches, forwarded to
// the workers by the loop, and blocked around fork.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <array>
#include <iterator>
#include <utility>
#include <vector>

#include "fulcrum/status.h"
#include "launch/descriptors.h"

namespace fulcrum::launch {

inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM};

// Catches SIGINT and SIGTERM while a launch runs and restores the previous
// dispositions after. A signal the launcher was started with ignored (a
// background job's SIGINT) stays ignored: the user asked for that.
class SignalScope {
 public:
  static Result<SignalScope> enter();

  SignalScope(SignalScope&& other) noexcept
      : pipe_(std::move(other.pipe_)),
        old_(other.old_),
        installed_(other.installed_),
        active_(std::exchange(other.active_, false)) {}
  SignalScope& operator=(SignalScope&&) = delete;
  ~SignalScope();

  int read_fd() const { return pipe_.read.get(); }

  // Signals received since the last call, in order.
  std::vector<int> take();

 private:
  SignalScope() = default;
  Pipe pipe_;
  std::array<struct sigaction, std::size(kForwardedSignals)> old_{};
  std::array<bool, std::size(kForwardedSignals)> installed_{};
  bool active_ = false;
};

// Blocks SIGINT/SIGTERM around fork, so the child cannot run the launcher's
// handler (and write into the launcher's signal pipe) before it has reset it.
class BlockForwardedSignals {
 public:
  BlockForwardedSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kForwardedSignals) sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockForwardedSignals() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockForwardedSignals(const BlockForwardedSignals&) = delete;
  BlockForwardedSignals& operator=(const BlockForwardedSignals&) = delete;

 private:
  sigset_t old_;
};

}  // namespace fulcrum::launch
