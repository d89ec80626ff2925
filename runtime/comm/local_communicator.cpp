#include "comm/local_communicator.h"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace fulcrum::comm {

std::vector<at::Tensor> LocalCommunicator::do_all_gather(const at::Tensor& input, Timeout) {
  return {input.clone()};
}

void LocalCommunicator::do_all_reduce_sum(std::vector<at::Tensor>&, Timeout) {}

at::Tensor LocalCommunicator::do_reduce_scatter_sum(const at::Tensor& input, Timeout) {
  return input.clone();
}

void LocalCommunicator::do_broadcast(at::Tensor&, int, Timeout) {}

void LocalCommunicator::do_barrier(Timeout) {}

ProcessGroups local_process_groups(Timeout default_timeout) {
  ProcessGroups groups;
  Result<GroupLayout> layout = make_group_layout(0, 1, 1, 1);
  groups.layout = layout.value();
  groups.world = std::make_shared<LocalCommunicator>(groups.layout.world.name, default_timeout);
  groups.dp = std::make_shared<LocalCommunicator>(groups.layout.dp.name, default_timeout);
  groups.cp = std::make_shared<LocalCommunicator>(groups.layout.cp.name, default_timeout);
  return groups;
}

}  // namespace fulcrum::comm
