#include "attention/exchange_thread.h"

#include <chrono>
#include <utility>

namespace fulcrum::attention {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

ExchangeThread::ExchangeThread(std::shared_ptr<comm::Communicator> world, std::string label,
                               std::vector<Step> steps)
    : world_(std::move(world)), label_(std::move(label)), steps_(std::move(steps)) {
  for (const Step& s : steps_) provided_.push_back(!s.sends_later);
  thread_ = std::thread([this] { run(); });
}

ExchangeThread::~ExchangeThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ExchangeThread::provide(std::size_t i, std::vector<comm::PeerMessage> sends) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    steps_[i].sends = std::move(sends);
    provided_[i] = true;
  }
  cv_.notify_all();
}

void ExchangeThread::run() {
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return provided_[i] || cancelled_; });
      if (!provided_[i]) return;  // cancelled: the owner is unwinding
    }
    const auto start = Clock::now();
    try {
      world_->exchange(steps_[i].sends, steps_[i].receives);
    } catch (const comm::CommError& e) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::make_exception_ptr(comm::CommError(label_ + ": " + e.what()));
      cv_.notify_all();
      return;
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    const double ms = ms_between(start, Clock::now());
    {
      std::lock_guard<std::mutex> lock(mu_);
      exchange_ms_ += ms;
      done_ = i + 1;
    }
    cv_.notify_all();
  }
}

void ExchangeThread::wait(std::size_t i) {
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ > i || error_; });
  wait_ms_ += ms_between(start, Clock::now());
  if (done_ <= i) std::rethrow_exception(error_);
}

void ExchangeThread::finish() {
  if (!steps_.empty()) wait(steps_.size() - 1);
  if (thread_.joinable()) thread_.join();
}

}  // namespace fulcrum::attention
