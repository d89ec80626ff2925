// A slot member's point-to-point exchanges, one per peer, run in order on a
// background thread while the member's own thread computes (the overlap of
// docs/HYBRID_RUNTIME.md). The rank's thread waits for step i only when it
// needs that peer's rows, and may hand a step its sends late (the backward
// sends a peer's dK/dV once the tiles of that peer's keys are done).
//
// The communicator is used by the background thread alone while steps run:
// the owner calls nothing else on it until finish() (or the destructor).
// A failed step's CommError (prefixed with `label`) is rethrown by every
// later wait; the steps after it never run.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace fulcrum::attention {

class ExchangeThread {
 public:
  struct Step {
    std::vector<comm::PeerMessage> sends;  // ignored when sends_later
    std::vector<comm::PeerMessage> receives;
    bool sends_later = false;  // wait for provide(i, ...) before exchanging
  };

  ExchangeThread(std::shared_ptr<comm::Communicator> world, std::string label,
                 std::vector<Step> steps);
  // Cancels steps still waiting for their sends and joins (a step in flight
  // ends by its timeout at the latest).
  ~ExchangeThread();
  ExchangeThread(const ExchangeThread&) = delete;
  ExchangeThread& operator=(const ExchangeThread&) = delete;

  // Step i's sends (a step made with sends_later), once.
  void provide(std::size_t i, std::vector<comm::PeerMessage> sends);
  // Blocks until step i has completed; rethrows a failed step's error.
  void wait(std::size_t i);
  // Every step; then the thread has ended.
  void finish();

  // Milliseconds the steps' exchanges took on the background thread, and
  // those the caller spent blocked in wait and finish.
  double exchange_ms() const { return exchange_ms_; }
  double wait_ms() const { return wait_ms_; }

 private:
  void run();

  std::shared_ptr<comm::Communicator> world_;
  std::string label_;
  std::vector<Step> steps_;
  std::vector<bool> provided_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t done_ = 0;  // steps completed
  bool cancelled_ = false;
  std::exception_ptr error_;
  double exchange_ms_ = 0.0;  // written by the thread, read after it ended
  double wait_ms_ = 0.0;
  std::thread thread_;
};

}  // namespace fulcrum::attention
