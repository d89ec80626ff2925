// The communication seam of the runtime: the few collectives the trainer and
// the CP attention need, behind a thin interface so that a backend (Gloo
// today, NCCL later, an in-process fake in tests) can be swapped without
// touching callers.
//
// Every collective must be called by every member of the group, in the same
// order, with tensors of the same shape and dtype. A communicator is used by
// one thread at a time (the rank's training thread). Every collective has a
// deadline: the timeout given, else the communicator's default. A collective
// that fails throws CommError with one line naming the operation, the group
// and what to do, e.g.
//   "all_gather on group cp[dp=0] timed out after 30 s: ...".
// Communication failures are not recoverable inside a step (peers are left in
// an unknown state), hence exceptions rather than Status: the caller logs the
// line and ends the process.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/group_layout.h"

namespace fulcrum::comm {

using Timeout = std::chrono::milliseconds;
using OptTimeout = std::optional<Timeout>;

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A setting of this rank's own (an environment variable such as
// GLOO_SOCKET_IFNAME) makes communication impossible; found before the
// rendezvous. Input to fix, not a fault of the job: workers exit with 2.
class ConfigError : public CommError {
 public:
  using CommError::CommError;
};

// "30 s", "1.5 s", "250 ms".
std::string format_timeout(Timeout timeout);
// "<op> on group <group> timed out after <timeout>".
std::string timeout_message(const std::string& op, const std::string& group, Timeout timeout);
// The first line of an exception's text, without c10's backtrace.
std::string first_line(const std::exception& error);

// One message of a point-to-point exchange: to or from `peer` (a rank of the
// communicator's group). A send's tensor is read; a receive's tensor is
// written in place and must be contiguous, with the sender's shape and dtype.
struct PeerMessage {
  int peer = 0;
  at::Tensor tensor;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name in messages: "world", "cp[dp=0]", "dp[cp=1]".
  const std::string& name() const { return name_; }
  // "gloo", "local", "thread".
  virtual const char* backend() const = 0;

  Timeout default_timeout() const { return default_timeout_; }
  void set_default_timeout(Timeout timeout) { default_timeout_ = timeout; }

  // One tensor per rank, rank order; `input` has the same shape and dtype on
  // every rank. The results never alias `input`.
  std::vector<at::Tensor> all_gather(const at::Tensor& input, OptTimeout timeout = std::nullopt);
  // The same, concatenated along dim 0: [size * input.size(0), ...].
  at::Tensor all_gather_cat(const at::Tensor& input, OptTimeout timeout = std::nullopt);
  // Sums each tensor over the ranks, in place. The tensors may differ in
  // shape and dtype from each other; the list must match across ranks.
  void all_reduce_sum(std::vector<at::Tensor>& tensors, OptTimeout timeout = std::nullopt);
  void all_reduce_sum(at::Tensor& tensor, OptTimeout timeout = std::nullopt);
  // `input` is [size * chunk, ...] on every rank; rank r receives
  // [chunk, ...], the sum over ranks of rows [r * chunk, (r + 1) * chunk).
  at::Tensor reduce_scatter_sum(const at::Tensor& input, OptTimeout timeout = std::nullopt);
  // Overwrites `tensor` on every rank with root's.
  void broadcast(at::Tensor& tensor, int root, OptTimeout timeout = std::nullopt);
  void barrier(OptTimeout timeout = std::nullopt);
  // Small payloads (plan fingerprints, names): one byte vector per rank, in
  // rank order; lengths may differ between ranks.
  std::vector<std::vector<std::uint8_t>> all_gather_bytes(const std::vector<std::uint8_t>& bytes,
                                                          OptTimeout timeout = std::nullopt);

  // Point to point. Unlike the collectives, only the ranks named take part:
  // a rank exchanging with peer p needs p to post the matching receive (or
  // send) in its own exchange, and no one else. Every send and receive of
  // one call is posted before any is waited for (as c10d's
  // batch_isend_irecv), so two ranks that each send to and receive from the
  // other in one call cannot deadlock, whatever order they list them in.
  // At most one send and one receive per peer in a call, never to oneself:
  // then messages pair up by (sender, receiver) alone. Returns when all have
  // completed; a timeout names the operation, the group and the peers still
  // outstanding.
  void exchange(const std::vector<PeerMessage>& sends, const std::vector<PeerMessage>& receives,
                OptTimeout timeout = std::nullopt);
  void send(const at::Tensor& tensor, int peer, OptTimeout timeout = std::nullopt);
  // `tensor` is written in place (contiguous, the sender's shape and dtype).
  void recv(at::Tensor& tensor, int peer, OptTimeout timeout = std::nullopt);

 protected:
  Communicator(std::string name, Timeout default_timeout)
      : name_(std::move(name)), default_timeout_(default_timeout) {}

  // Backends implement these; the public methods above resolve the timeout
  // and check arguments first. Inputs are CPU or device tensors as the
  // backend supports; `input` of do_reduce_scatter_sum has a first dimension
  // divisible by size().
  virtual std::vector<at::Tensor> do_all_gather(const at::Tensor& input, Timeout timeout) = 0;
  virtual void do_all_reduce_sum(std::vector<at::Tensor>& tensors, Timeout timeout) = 0;
  virtual at::Tensor do_reduce_scatter_sum(const at::Tensor& input, Timeout timeout) = 0;
  virtual void do_broadcast(at::Tensor& tensor, int root, Timeout timeout) = 0;
  virtual void do_barrier(Timeout timeout) = 0;
  // Called with checked messages (peers in range, not this rank, at most one
  // send and one receive per peer, receives contiguous). The default fails
  // loudly: a backend without point-to-point still builds and says so.
  virtual void do_exchange(const std::vector<PeerMessage>& sends,
                           const std::vector<PeerMessage>& receives, Timeout timeout);

  // "<op> on group <name>: <what>" as a CommError.
  [[noreturn]] void fail(const std::string& op, const std::string& what) const;

 private:
  Timeout resolve(OptTimeout timeout) const { return timeout.value_or(default_timeout_); }

  std::string name_;
  Timeout default_timeout_;
};

// The groups of one rank of a DP x CP job (see group_layout.h).
struct ProcessGroups {
  GroupLayout layout;
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> dp;
  std::shared_ptr<Communicator> cp;
  // A counter every rank of the job shares: adds `delta` to `key` and
  // returns the new value, atomically across ranks (the rendezvous store's
  // add; one process: a counter of its own). Throws CommError when the store
  // fails. Unset for groups built by hand (tests).
  std::function<std::int64_t(const std::string& key, std::int64_t delta)> shared_add;
  // Removes a counter of shared_add from the store (false: it was not
  // there), so that a job that makes one per step does not grow the store
  // without bound. Throws CommError when the store fails. Unset with
  // shared_add.
  std::function<bool(const std::string& key)> shared_delete;
  // How many keys the job's store holds, the rendezvous's and every
  // group's included (c10d's getNumKeys): a figure that must stay bounded
  // while the job runs. Throws CommError when the store fails.
  std::function<std::int64_t()> store_keys;
};

}  // namespace fulcrum::comm
