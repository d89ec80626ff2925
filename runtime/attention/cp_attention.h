// Context-parallel attention with all-gathered keys, the attention step of
// the runtime (DESIGN.md section 4). Each rank of the CP group holds its
// shard of the row (the plan's positions, in plan order); attention must
// equal single-process attention over the whole row.
//
//   forward:  all-gather K and V (one collective for both) -> global order by
//             the plan's restore index -> blocked attention of the local
//             queries over the tiles the TileSchedule lists.
//   backward: recompute tiles from (O, L) -> dQ for the local queries, dK and
//             dV for every key of the row -> back to plan order ->
//             reduce-scatter (sum) -> each rank's share of its own keys.
//
// The plan is replicated (every rank computed it from the same inputs), so
// no rank needs the others' positions over the wire. Every rank of the group
// must call forward and backward, in the same order.
//
// The passes, their autograd Function and the figures are the
// ShardedAttention's (sharded_attention.h); this file is its all-gather
// exchange over the CP group.
//
// Typical use inside a model (one CpAttention per row and plan; reuse it for
// every layer of the step):
//
//   auto attention = CpAttention::create(workload, plan, groups.cp).value();
//   at::Tensor out = attention->apply(q, k, v);   // differentiable, [S, H, D]
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "attention/blocked_attention.h"
#include "attention/sharded_attention.h"
#include "attention/tile_schedule.h"
#include "comm/communicator.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::attention {

struct CpAttentionOptions {
  KernelOptions kernel;
};

// The names fixed mode's callers know the shared types by.
using CpForward = ShardedForward;
using CpGrads = ShardedGrads;

class CpAttention final : public ShardedAttention {
 public:
  // Validates the workload and plan, checks that the group has cp_size
  // ranks, and builds this rank's (= cp_group->rank()) tile schedule.
  static Result<std::shared_ptr<CpAttention>> create(const CpWorkload& workload,
                                                     const ShardPlan& plan,
                                                     std::shared_ptr<comm::Communicator> cp_group,
                                                     const CpAttentionOptions& options = {});

  comm::Communicator& group() const { return *group_; }

 private:
  CpAttention(const ShardPlan& plan, TileSchedule schedule,
              std::shared_ptr<comm::Communicator> group, const CpAttentionOptions& options);

  std::shared_ptr<comm::Communicator> group_;
};

}  // namespace fulcrum::attention
