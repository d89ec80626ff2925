#include "attention/cp_attention.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>

#include "attention/sharding.h"

namespace fulcrum::attention {
namespace {

// Fixed mode's exchange: every rank of the CP group gathers the whole row.
class AllGatherKvExchange final : public KvExchange {
 public:
  AllGatherKvExchange(const ShardPlan& plan, std::shared_ptr<comm::Communicator> group)
      : plan_(plan), group_(std::move(group)), restore_(restore_tensor(plan)) {}

  at::Tensor gather(const at::Tensor& kv, AttentionStats& /*stats*/) override {
    const at::Tensor gathered = group_->all_gather_cat(kv);  // [P * S, H, 2D], rank-major
    return gathered.index_select(0, restore_.to(gathered.device()));
  }

  // Back to plan order, then reduce-scatter (sum): each rank's share of its
  // own keys. Pad rows receive zeros.
  at::Tensor return_grads(const at::Tensor& dkv_global, AttentionStats& /*stats*/) override {
    const at::Tensor dkv_plan = shard_all(dkv_global, plan_);  // [P * S, H, 2D]
    return group_->reduce_scatter_sum(dkv_plan);               // [S, H, 2D]
  }

 private:
  ShardPlan plan_;
  std::shared_ptr<comm::Communicator> group_;
  at::Tensor restore_;  // int64 [N]: row of the gathered buffer holding global position pos
};

}  // namespace

CpAttention::CpAttention(const ShardPlan& plan, TileSchedule schedule,
                         std::shared_ptr<comm::Communicator> group,
                         const CpAttentionOptions& options)
    : ShardedAttention("cp attention", plan, std::move(schedule), options.kernel,
                       std::make_unique<AllGatherKvExchange>(plan, group)),
      group_(std::move(group)) {}

Result<std::shared_ptr<CpAttention>> CpAttention::create(const CpWorkload& workload,
                                                         const ShardPlan& plan,
                                                         std::shared_ptr<comm::Communicator> group,
                                                         const CpAttentionOptions& options) {
  if (!group) return invalid_argument("cp attention needs a CP group communicator; got none");
  if (group->size() != plan.cp_size) {
    return invalid_argument("cp attention: group " + group->name() + " has " +
                            std::to_string(group->size()) + " ranks but the plan has cp_size " +
                            std::to_string(plan.cp_size) + "; plan with the CP group's size");
  }
  Result<TileSchedule> schedule = make_tile_schedule(workload, plan, group->rank());
  if (!schedule) return schedule.status();
  return std::shared_ptr<CpAttention>(
      new CpAttention(plan, std::move(schedule).value(), std::move(group), options));
}

}  // namespace fulcrum::attention
