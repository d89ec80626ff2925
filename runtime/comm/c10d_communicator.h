// Private to fulcrum::comm: one c10d process group behind Communicator, its
// collectives and its point-to-point exchange, and how a failed or timed-out
// call is named. Built by init_gloo_process_groups (gloo_communicator.cpp).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/group_layout.h"
#include "comm/progress.h"
#include "comm/progress_board.h"

namespace fulcrum::comm {

inline bool mentions_timeout(const std::string& text) {
  return text.find("timed out") != std::string::npos ||
         text.find("Timed out") != std::string::npos || text.find("timeout") != std::string::npos;
}

// One c10d process group behind Communicator: ProcessGroupGloo (CPU tensors,
// or CUDA tensors where LibTorch has CUDA) or, with dist.backend: nccl,
// ProcessGroupNCCL. Both take the same c10d calls. NCCL moves only device
// tensors, while some callers (plan consensus, byte all-gathers) hand CPU
// ones: with a staging device, such tensors travel through it and come back.
template <class Group>
class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<Group> group, const char* backend_name, const GroupSpec& spec,
                   Timeout timeout, std::shared_ptr<ProgressBoard> board,
                   std::optional<at::Device> staging = std::nullopt)
      : Communicator(spec.name, timeout),
        group_(std::move(group)),
        backend_name_(backend_name),
        staging_(staging),
        members_(spec.ranks),
        board_(std::move(board)) {}

  // A group whose collective failed is abandoned, not destroyed: its Gloo
  // worker thread may still be blocked in I/O until Gloo's own deadline, and
  // ~ProcessGroupGloo joins that thread, which would hang the exit the
  // caller is heading for. The process is ending; the leak is deliberate.
  // The rank's other groups are kept too: destroying them would close their
  // connections while the error unwinds, and a peer waiting on one would
  // fail (and exit) before this rank, taking the blame in the launcher.
  ~C10dCommunicator() override {
    if (failed_ || (board_ && board_->abandoned())) static_cast<void>(group_.release());
  }

  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }
  const char* backend() const override { return backend_name_; }

 protected:
  std::vector<at::Tensor> do_all_gather(const at::Tensor& input, Timeout timeout) override {
    std::vector<at::Tensor> inputs{staged(input).contiguous()};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(inputs[0]));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout;
    run("all_gather", timeout, [&] { return group_->allgather(outputs, inputs, opts); });
    for (at::Tensor& out : outputs[0]) out = back_to(out, input);
    return outputs[0];
  }

  void do_all_reduce_sum(std::vector<at::Tensor>& tensors, Timeout timeout) override {
    // c10d reads a list of tensors as copies of one tensor (one per device)
    // and would sum them together; the contract here is one reduction per
    // tensor. One flat buffer per dtype keeps it to few Gloo calls (the
    // gradient all-reduce passes every parameter at once).
    std::map<at::ScalarType, std::vector<std::size_t>> by_dtype;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      by_dtype[tensors[i].scalar_type()].push_back(i);
    }
    for (const auto& [dtype, indices] : by_dtype) {
      std::vector<at::Tensor> flat;
      for (std::size_t i : indices) flat.push_back(tensors[i].reshape({-1}));
      std::vector<at::Tensor> buffer{
          staged(flat.size() == 1 ? flat[0].contiguous().clone() : at::cat(flat, 0))};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      opts.timeout = timeout;
      run("all_reduce_sum", timeout, [&] { return group_->allreduce(buffer, opts); });
      std::int64_t offset = 0;
      for (std::size_t i : indices) {
        const std::int64_t n = tensors[i].numel();
        tensors[i].copy_(buffer[0].narrow(0, offset, n).view(tensors[i].sizes()));
        offset += n;
      }
    }
  }

  at::Tensor do_reduce_scatter_sum(const at::Tensor& input, Timeout timeout) override {
    // ProcessGroupGloo in LibTorch 1.13 has no reduce_scatter: all-reduce the
    // whole buffer and keep this rank's chunk. It moves size() times the
    // bytes of a ring reduce-scatter, acceptable on CPU; an NCCL backend
    // would call reduce_scatter directly.
    std::vector<at::Tensor> buffer{staged(input.contiguous().clone())};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = timeout;
    run("reduce_scatter_sum", timeout, [&] { return group_->allreduce(buffer, opts); });
    const std::int64_t chunk = input.size(0) / size();
    return back_to(buffer[0].narrow(0, rank() * chunk, chunk).clone(), input);
  }

  void do_broadcast(at::Tensor& tensor, int root, Timeout timeout) override {
    std::vector<at::Tensor> buffer{staged(tensor.is_contiguous() ? tensor : tensor.contiguous())};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.rootTensor = 0;
    opts.timeout = timeout;
    run("broadcast", timeout, [&] { return group_->broadcast(buffer, opts); });
    if (!buffer[0].is_same(tensor)) tensor.copy_(buffer[0]);
  }

  void do_barrier(Timeout timeout) override {
    c10d::BarrierOptions opts;
    opts.timeout = timeout;
    run("barrier", timeout, [&] { return group_->barrier(opts); });
  }

  // Every receive, then every send, is posted before the first wait, so the
  // order peers list their messages in cannot matter. In the progress board
  // the call is an operation of the pair group of each peer (pair_group,
  // progress.h), entered at once; before each wait the rank says which pair
  // it waits in. A timeout names the message it was waiting for and, from
  // the peers' records, the rank at the end of the chain of waits.
  void do_exchange(const std::vector<PeerMessage>& sends, const std::vector<PeerMessage>& receives,
                   Timeout timeout) override {
    struct Posted {
      const char* kind;
      int peer;
      std::vector<at::Tensor> buffer;  // c10d keeps a reference; kept alive here too
      c10::intrusive_ptr<c10d::Work> work;
    };
    std::vector<Posted> posted;
    posted.reserve(sends.size() + receives.size());
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout;
    std::size_t waiting = 0;  // sends and receives before it have completed
    bool all_posted = false;
    // The pair group of each peer, and this call's sequence number there.
    std::map<int, std::pair<std::string, std::int64_t>> pairs;
    if (board_) {
      for (const auto* list : {&receives, &sends}) {
        for (const PeerMessage& m : *list) {
          if (pairs.count(m.peer) != 0) continue;
          const std::string group = pair_group(global_rank(rank()), global_rank(m.peer));
          pairs[m.peer] = {group, board_->enter(group, "exchange")};
        }
      }
    }
    try {
      for (const PeerMessage& r : receives) {
        posted.push_back({"receive from", r.peer, {r.tensor}, {}});
        posted.back().work = group_->recv(posted.back().buffer, r.peer, kExchangeTag);
      }
      for (const PeerMessage& s : sends) {
        posted.push_back({"send to", s.peer, {s.tensor.contiguous()}, {}});
        posted.back().work = group_->send(posted.back().buffer, s.peer, kExchangeTag);
      }
      all_posted = true;
      for (; waiting < posted.size(); ++waiting) {
        if (board_) board_->wait_in(pairs.at(posted[waiting].peer).first);
        const auto left =
            std::chrono::duration_cast<Timeout>(deadline - std::chrono::steady_clock::now());
        posted[waiting].work->wait(std::max(left, Timeout(1)));
      }
    } catch (const std::exception& e) {
      failed_ = true;
      if (board_) board_->abandon();
      const std::string what = first_line(e);
      // The message whose wait failed is the one known to be stuck. The later
      // ones were not waited for; c10d marks a send or receive completed only
      // once waited for, so they are listed as unchecked, not as stuck.
      auto describe = [&](std::size_t i) {
        return std::string(posted[i].kind) + " rank " + std::to_string(posted[i].peer);
      };
      std::string unchecked;
      for (std::size_t i = waiting + 1; all_posted && i < posted.size(); ++i) {
        unchecked += (unchecked.empty() ? "" : ", ") + describe(i);
      }
      const std::string where =
          "on rank " + std::to_string(rank()) +
          (all_posted ? " (waiting for the " + describe(waiting) +
                            (unchecked.empty() ? std::string() : "; not yet checked: " + unchecked)
                      : " (posting the " + describe(posted.size() - 1)) +
          ")";
      if (mentions_timeout(what) || std::chrono::steady_clock::now() - start >= timeout) {
        const int peer = posted[std::min(waiting, posted.size() - 1)].peer;
        std::string stall;
        if (board_ && all_posted) {
          const auto& [group, seq] = pairs.at(peer);
          stall = board_->explain_timeout({"exchange", seq, group},
                                          {global_rank(rank()), global_rank(peer)}, timeout);
        }
        throw CommError(timeout_message("exchange", name(), timeout) + " " + where +
                        (stall.empty()
                             ? "; that peer failed, exited or did not post the matching message"
                             : stall));
      }
      if (board_) board_->note_lost_peer();
      throw CommError("exchange on group " + name() + " failed " + where + ": " + what +
                      "; a peer rank may have exited, check its log");
    }
  }

 private:
  // The global rank of this group's rank `r`.
  int global_rank(int r) const {
    return r >= 0 && static_cast<std::size_t>(r) < members_.size()
               ? members_[static_cast<std::size_t>(r)]
               : r;
  }
  // One tag for every message: an exchange holds at most one message per
  // direction and peer, and completes before the next begins.
  static constexpr int kExchangeTag = 0;
  // On the staging device when there is one (a no-op for Gloo).
  at::Tensor staged(const at::Tensor& t) const {
    return staging_ && t.device() != *staging_ ? t.to(*staging_) : t;
  }
  at::Tensor back_to(const at::Tensor& t, const at::Tensor& like) const {
    return t.device() != like.device() ? t.to(like.device()) : t;
  }

  // Launches one c10d operation and waits at most `timeout`. c10d reports a
  // timeout in several ways (its own wait, Gloo's I/O deadline); all become
  // the same one-line CommError.
  void run(const std::string& op, Timeout timeout,
           const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) {
    const std::int64_t seq = board_ ? board_->enter(name(), op) : 0;
    const auto start = std::chrono::steady_clock::now();
    try {
      c10::intrusive_ptr<c10d::Work> work = launch();
      work->wait(timeout);
    } catch (const std::exception& e) {
      failed_ = true;
      if (board_) board_->abandon();
      const std::string what = first_line(e);
      const auto elapsed = std::chrono::steady_clock::now() - start;
      if (mentions_timeout(what) || elapsed >= timeout) {
        const std::string stall =
            board_ ? board_->explain_timeout({op, seq, name()}, members_, timeout) : "";
        if (!stall.empty()) {
          throw CommError(timeout_message(op, name(), timeout) + " (collective #" +
                          std::to_string(seq) + " of the group)" + stall);
        }
        throw CommError(timeout_message(op, name(), timeout) + " (" + what +
                        "); a peer rank failed, exited or skipped this collective");
      }
      if (board_) board_->note_lost_peer();
      throw CommError(op + " on group " + name() + " failed: " + what +
                      "; a peer rank may have exited, check its log");
    }
  }

  c10::intrusive_ptr<Group> group_;
  const char* backend_name_;  // "gloo" or "nccl"
  std::optional<at::Device> staging_;
  std::vector<int> members_;  // global ranks, group-rank order
  std::shared_ptr<ProgressBoard> board_;
  bool failed_ = false;
};

}  // namespace fulcrum::comm
