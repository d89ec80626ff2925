#include "comm/thread_communicator.h"

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fulcrum::comm {
namespace {

// Shared by the members of one group. Each collective is two barrier phases:
// every member deposits a snapshot of its input, every member computes its
// own result from all snapshots, then a second barrier keeps the snapshots
// alive until everyone has read them.
class Rendezvous {
 public:
  Rendezvous(int size, std::string name)
      : size_(size), name_(std::move(name)), ops_(size), slots_(size) {}

  int size() const { return size_; }

  // Deposits `inputs` for `rank`, waits for every member, returns all
  // members' deposits (rank order) to `compute`, then waits again.
  void exchange(int rank, const std::string& op, std::vector<at::Tensor> inputs, Timeout timeout,
                const std::function<void(const std::vector<std::vector<at::Tensor>>&)>& compute) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ops_[rank] = op;
      slots_[rank] = std::move(inputs);
      wait_all(lock, op, timeout);
      for (int r = 0; r < size_; ++r) {
        if (ops_[r] != op) {
          throw CommError(op + " on group " + name_ + ": rank " + std::to_string(r) + " called " +
                          ops_[r] +
                          " instead; every rank must call the same collectives in the "
                          "same order");
        }
      }
    }
    // The snapshots are not written until the second barrier: read unlocked.
    compute(slots_);
    std::unique_lock<std::mutex> lock(mu_);
    wait_all(lock, op, timeout);
  }

  // Point to point: a send deposits a snapshot in the (sender, receiver)
  // mailbox and returns, so sends never wait and an exchange cannot deadlock
  // on them; a receive waits for its mailbox. Mailboxes are FIFO, so
  // successive exchanges between two ranks pair up in order.
  void post(int from, int to, at::Tensor tensor) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.empty()) throw CommError("exchange on group " + name_ + ": " + broken_);
    mail_[{from, to}].push_back(std::move(tensor));
    cv_.notify_all();
  }

  // Waits for one message per receive (all by one deadline) and hands each
  // to `deliver`. A receive still empty at the deadline breaks the group.
  void take(int to, const std::vector<PeerMessage>& receives, Timeout timeout,
            const std::function<void(const PeerMessage&, const at::Tensor&)>& deliver) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    for (const PeerMessage& r : receives) {
      std::deque<at::Tensor>& box = mail_[{r.peer, to}];
      const bool arrived =
          cv_.wait_until(lock, deadline, [&] { return !box.empty() || !broken_.empty(); });
      if (!broken_.empty() && box.empty()) {
        throw CommError("exchange on group " + name_ + ": " + broken_);
      }
      if (!arrived) {
        std::vector<int> missing;
        for (const PeerMessage& m : receives) {
          if (mail_[{m.peer, to}].empty()) missing.push_back(m.peer);
        }
        std::string peers;
        for (int p : missing) peers += (peers.empty() ? "" : ", ") + std::to_string(p);
        broken_ = "the group is broken after an earlier timeout of exchange";
        cv_.notify_all();
        throw CommError(timeout_message("exchange", name_, timeout) + " (rank " +
                        std::to_string(to) + " waiting to receive from rank" +
                        (missing.size() == 1 ? " " : "s ") + peers +
                        "); that peer failed or did not post the matching send");
      }
      at::Tensor message = std::move(box.front());
      box.pop_front();
      deliver(r, message);
    }
  }

 private:
  void wait_all(std::unique_lock<std::mutex>& lock, const std::string& op, Timeout timeout) {
    if (!broken_.empty()) throw CommError(op + " on group " + name_ + ": " + broken_);
    const long long generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const bool done =
        cv_.wait_for(lock, timeout, [&] { return generation_ != generation || !broken_.empty(); });
    if (!done) {
      const int arrived = arrived_;
      broken_ = "the group is broken after an earlier timeout of " + op;
      cv_.notify_all();
      throw CommError(timeout_message(op, name_, timeout) + " (" + std::to_string(arrived) +
                      " of " + std::to_string(size_) +
                      " ranks arrived); a rank failed or skipped it");
    }
    if (generation_ == generation) throw CommError(op + " on group " + name_ + ": " + broken_);
  }

  const int size_;
  const std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  long long generation_ = 0;
  std::string broken_;  // non-empty once a member timed out
  std::vector<std::string> ops_;
  std::vector<std::vector<at::Tensor>> slots_;
  std::map<std::pair<int, int>, std::deque<at::Tensor>> mail_;  // (from, to)
};

// Deposits are clones: a member writes its result into its own tensors while
// others may still be reading its input.
std::vector<at::Tensor> snapshot(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> copies;
  copies.reserve(tensors.size());
  for (const at::Tensor& t : tensors) copies.push_back(t.detach().clone());
  return copies;
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Rendezvous> rendezvous, int rank, std::string name,
                     Timeout timeout)
      : Communicator(std::move(name), timeout), rendezvous_(std::move(rendezvous)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return rendezvous_->size(); }
  const char* backend() const override { return "thread"; }

 protected:
  std::vector<at::Tensor> do_all_gather(const at::Tensor& input, Timeout timeout) override {
    std::vector<at::Tensor> out;
    rendezvous_->exchange(rank_, "all_gather", snapshot({input}), timeout,
                          [&](const std::vector<std::vector<at::Tensor>>& all) {
                            check_shapes("all_gather", all);
                            for (const auto& slot : all) out.push_back(slot[0].clone());
                          });
    return out;
  }

  void do_all_reduce_sum(std::vector<at::Tensor>& tensors, Timeout timeout) override {
    rendezvous_->exchange(rank_, "all_reduce_sum", snapshot(tensors), timeout,
                          [&](const std::vector<std::vector<at::Tensor>>& all) {
                            check_shapes("all_reduce_sum", all);
                            for (std::size_t i = 0; i < tensors.size(); ++i) {
                              // Sum in rank order on every member, so all
                              // members get bit-identical results.
                              at::Tensor sum = all[0][i].clone();
                              for (std::size_t r = 1; r < all.size(); ++r) sum.add_(all[r][i]);
                              tensors[i].copy_(sum);
                            }
                          });
  }

  at::Tensor do_reduce_scatter_sum(const at::Tensor& input, Timeout timeout) override {
    at::Tensor out;
    const std::int64_t chunk = input.size(0) / size();
    rendezvous_->exchange(rank_, "reduce_scatter_sum", snapshot({input}), timeout,
                          [&](const std::vector<std::vector<at::Tensor>>& all) {
                            check_shapes("reduce_scatter_sum", all);
                            out = all[0][0].narrow(0, rank_ * chunk, chunk).clone();
                            for (std::size_t r = 1; r < all.size(); ++r) {
                              out.add_(all[r][0].narrow(0, rank_ * chunk, chunk));
                            }
                          });
    return out;
  }

  void do_broadcast(at::Tensor& tensor, int root, Timeout timeout) override {
    rendezvous_->exchange(rank_, "broadcast", snapshot({tensor}), timeout,
                          [&](const std::vector<std::vector<at::Tensor>>& all) {
                            check_shapes("broadcast", all);
                            if (rank_ != root) tensor.copy_(all[root][0]);
                          });
  }

  void do_barrier(Timeout timeout) override {
    rendezvous_->exchange(rank_, "barrier", {}, timeout,
                          [](const std::vector<std::vector<at::Tensor>>&) {});
  }

  void do_exchange(const std::vector<PeerMessage>& sends, const std::vector<PeerMessage>& receives,
                   Timeout timeout) override {
    for (const PeerMessage& s : sends) {
      rendezvous_->post(rank_, s.peer, s.tensor.detach().clone());
    }
    rendezvous_->take(rank_, receives, timeout, [&](const PeerMessage& r, const at::Tensor& m) {
      // A real backend would write past the buffer or truncate: say so here.
      if (!m.sizes().equals(r.tensor.sizes()) || m.scalar_type() != r.tensor.scalar_type()) {
        fail("exchange", "rank " + std::to_string(r.peer) + " sent " + c10::str(m.sizes()) + " " +
                             std::string(c10::toString(m.scalar_type())) + ", rank " +
                             std::to_string(rank_) + " expected " + c10::str(r.tensor.sizes()) +
                             " " + std::string(c10::toString(r.tensor.scalar_type())));
      }
      at::Tensor target = r.tensor;
      target.copy_(m);
    });
  }

 private:
  // A real backend would corrupt memory or hang on mismatched shapes; here
  // the mismatch is reported.
  void check_shapes(const std::string& op, const std::vector<std::vector<at::Tensor>>& all) const {
    for (std::size_t r = 1; r < all.size(); ++r) {
      if (all[r].size() != all[0].size()) {
        fail(op, "rank " + std::to_string(r) + " passed " + std::to_string(all[r].size()) +
                     " tensors, rank 0 passed " + std::to_string(all[0].size()));
      }
      for (std::size_t i = 0; i < all[0].size(); ++i) {
        if (!all[r][i].sizes().equals(all[0][i].sizes()) ||
            all[r][i].scalar_type() != all[0][i].scalar_type()) {
          fail(op, "rank " + std::to_string(r) + " tensor " + std::to_string(i) + " has shape " +
                       c10::str(all[r][i].sizes()) + " " +
                       std::string(c10::toString(all[r][i].scalar_type())) + ", rank 0 has " +
                       c10::str(all[0][i].sizes()) + " " +
                       std::string(c10::toString(all[0][i].scalar_type())));
        }
      }
    }
  }

  std::shared_ptr<Rendezvous> rendezvous_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_thread_group(int size, const std::string& name,
                                                             Timeout default_timeout) {
  if (size < 1) {
    throw CommError("make_thread_group: size " + std::to_string(size) + " must be >= 1");
  }
  auto rendezvous = std::make_shared<Rendezvous>(size, name);
  std::vector<std::shared_ptr<Communicator>> members;
  for (int r = 0; r < size; ++r) {
    members.push_back(std::make_shared<ThreadCommunicator>(rendezvous, r, name, default_timeout));
  }
  return members;
}

}  // namespace fulcrum::comm
