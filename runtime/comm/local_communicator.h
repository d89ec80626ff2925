// A communicator of one rank: every collective is the identity. For
// single-process runs, size-1 subgroups (cp_size = 1 or dp_size = 1) and
// tests.
#pragma once

#include <string>

#include "comm/communicator.h"

namespace fulcrum::comm {

class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(std::string name = "local",
                             Timeout default_timeout = std::chrono::seconds(300))
      : Communicator(std::move(name), default_timeout) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }

 protected:
  std::vector<at::Tensor> do_all_gather(const at::Tensor& input, Timeout timeout) override;
  void do_all_reduce_sum(std::vector<at::Tensor>& tensors, Timeout timeout) override;
  at::Tensor do_reduce_scatter_sum(const at::Tensor& input, Timeout timeout) override;
  void do_broadcast(at::Tensor& tensor, int root, Timeout timeout) override;
  void do_barrier(Timeout timeout) override;
};

// World, DP and CP groups of a single-process job (world_size = 1).
ProcessGroups local_process_groups(Timeout default_timeout = std::chrono::seconds(300));

}  // namespace fulcrum::comm
