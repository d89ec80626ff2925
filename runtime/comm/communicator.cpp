#include "comm/communicator.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/progress.h"

namespace fulcrum::comm {

std::string format_timeout(Timeout timeout) { return format_duration_ms(timeout.count()); }

std::string timeout_message(const std::string& op, const std::string& group, Timeout timeout) {
  return op + " on group " + group + " timed out after " + format_timeout(timeout);
}

std::string first_line(const std::exception& error) {
  // c10::Error::what() appends a multi-line backtrace; the message is what a
  // user can act on.
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : error.what();
  const auto newline = text.find('\n');
  if (newline != std::string::npos) text.resize(newline);
  // Our messages go on after it: drop its closing period and spaces.
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r' || text.back() == '.')) {
    text.pop_back();
  }
  return text;
}

void Communicator::fail(const std::string& op, const std::string& what) const {
  throw CommError(op + " on group " + name_ + ": " + what);
}

std::vector<at::Tensor> Communicator::all_gather(const at::Tensor& input, OptTimeout timeout) {
  if (!input.defined()) fail("all_gather", "the input tensor is undefined");
  return do_all_gather(input, resolve(timeout));
}

at::Tensor Communicator::all_gather_cat(const at::Tensor& input, OptTimeout timeout) {
  if (!input.defined()) fail("all_gather", "the input tensor is undefined");
  if (input.dim() == 0) fail("all_gather", "a 0-dim tensor cannot be concatenated along dim 0");
  return at::cat(do_all_gather(input, resolve(timeout)), 0);
}

void Communicator::all_reduce_sum(std::vector<at::Tensor>& tensors, OptTimeout timeout) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) {
      fail("all_reduce_sum", "tensor " + std::to_string(i) + " of " +
                                 std::to_string(tensors.size()) + " is undefined");
    }
  }
  if (tensors.empty()) return;
  do_all_reduce_sum(tensors, resolve(timeout));
}

void Communicator::all_reduce_sum(at::Tensor& tensor, OptTimeout timeout) {
  std::vector<at::Tensor> one{tensor};
  all_reduce_sum(one, timeout);
}

at::Tensor Communicator::reduce_scatter_sum(const at::Tensor& input, OptTimeout timeout) {
  if (!input.defined()) fail("reduce_scatter_sum", "the input tensor is undefined");
  if (input.dim() == 0 || input.size(0) % size() != 0) {
    fail("reduce_scatter_sum",
         "the input's first dimension (" +
             (input.dim() == 0 ? std::string("0-dim tensor") : std::to_string(input.size(0))) +
             ") must be a multiple of the group size " + std::to_string(size()));
  }
  return do_reduce_scatter_sum(input, resolve(timeout));
}

void Communicator::broadcast(at::Tensor& tensor, int root, OptTimeout timeout) {
  if (!tensor.defined()) fail("broadcast", "the tensor is undefined");
  if (root < 0 || root >= size()) {
    fail("broadcast",
         "root " + std::to_string(root) + " is outside [0, " + std::to_string(size()) + ")");
  }
  do_broadcast(tensor, root, resolve(timeout));
}

void Communicator::barrier(OptTimeout timeout) { do_barrier(resolve(timeout)); }

std::vector<std::vector<std::uint8_t>> Communicator::all_gather_bytes(
    const std::vector<std::uint8_t>& bytes, OptTimeout timeout) {
  const Timeout t = resolve(timeout);
  // Two rounds: the lengths, then the payloads padded to the longest, because
  // the collectives below need equal shapes on every rank.
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  at::Tensor length = at::full({1}, static_cast<std::int64_t>(bytes.size()), i64);
  std::vector<at::Tensor> lengths = do_all_gather(length, t);
  std::int64_t longest = 0;
  for (const at::Tensor& l : lengths) longest = std::max(longest, l.item<std::int64_t>());
  at::Tensor payload = at::zeros({std::max<std::int64_t>(longest, 1)}, at::kByte);
  if (!bytes.empty()) std::memcpy(payload.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  std::vector<at::Tensor> payloads = do_all_gather(payload, t);
  std::vector<std::vector<std::uint8_t>> result(payloads.size());
  for (std::size_t r = 0; r < payloads.size(); ++r) {
    const at::Tensor p = payloads[r].contiguous();
    const auto* data = p.data_ptr<std::uint8_t>();
    result[r].assign(data, data + lengths[r].item<std::int64_t>());
  }
  return result;
}

void Communicator::exchange(const std::vector<PeerMessage>& sends,
                            const std::vector<PeerMessage>& receives, OptTimeout timeout) {
  auto check = [&](const std::vector<PeerMessage>& messages, const char* kind) {
    std::vector<bool> seen(static_cast<std::size_t>(size()), false);
    for (const PeerMessage& m : messages) {
      const std::string what = std::string(kind) + (kind[0] == 's' ? " to" : " from") + " rank " +
                               std::to_string(m.peer);
      if (m.peer < 0 || m.peer >= size()) {
        fail("exchange", std::string(kind) + " peer " + std::to_string(m.peer) +
                             " is outside [0, " + std::to_string(size()) + ")");
      }
      if (m.peer == rank()) {
        fail("exchange", std::string(kind) + " peer " + std::to_string(m.peer) +
                             " is this rank; keep local data local");
      }
      if (seen[static_cast<std::size_t>(m.peer)]) {
        fail("exchange", "two " + std::string(kind) + "s with rank " + std::to_string(m.peer) +
                             " in one call; concatenate them into one tensor");
      }
      seen[static_cast<std::size_t>(m.peer)] = true;
      if (!m.tensor.defined()) fail("exchange", "the " + what + " has an undefined tensor");
    }
  };
  check(sends, "send");
  check(receives, "receive");
  for (const PeerMessage& m : receives) {
    if (!m.tensor.is_contiguous()) {
      fail("exchange", "the receive from rank " + std::to_string(m.peer) +
                           " needs a contiguous tensor to write into");
    }
  }
  if (sends.empty() && receives.empty()) return;
  do_exchange(sends, receives, resolve(timeout));
}

void Communicator::send(const at::Tensor& tensor, int peer, OptTimeout timeout) {
  exchange({PeerMessage{peer, tensor}}, {}, timeout);
}

void Communicator::recv(at::Tensor& tensor, int peer, OptTimeout timeout) {
  exchange({}, {PeerMessage{peer, tensor}}, timeout);
}

void Communicator::do_exchange(const std::vector<PeerMessage>&, const std::vector<PeerMessage>&,
                               Timeout) {
  fail("exchange", std::string("the ") + backend() +
                       " backend has no point-to-point messages; use a backend that has");
}

}  // namespace fulcrum::comm
