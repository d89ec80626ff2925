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
// Typical use inside a model (one CpAttention per row and plan; reuse it for
// every layer of the step):
//
//   auto attention = CpAttention::create(workload, plan, groups.cp).value();
//   at::Tensor out = attention->apply(q, k, v);   // differentiable, [S, H, D]
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "attention/blocked_attention.h"
#include "attention/row_attention.h"
#include "attention/tile_schedule.h"
#include "comm/communicator.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::attention {

struct CpAttentionOptions {
  KernelOptions kernel;
};

// What the last forward or backward call of a CpAttention did on this rank.
struct AttentionStats {
  std::int64_t tiles = 0;  // tiles computed, each for all heads: equals compute_work's tiles
  std::int64_t heads = 0;
  double compute_ms = 0.0;  // the blocked attention
  double comm_ms = 0.0;     // all-gather (forward) or reduce-scatter (backward), with reordering
};

struct CpForward {
  at::Tensor out;       // [S, H, D], local rows in plan order; zero on pad rows
  at::Tensor lse;       // [S, H]
  at::Tensor k_global;  // [N, H, D], the gathered keys in global order (kept for backward)
  at::Tensor v_global;  // [N, H, D]
};

struct CpGrads {
  at::Tensor dq;  // [S, H, D], this rank's rows
  at::Tensor dk;  // [S, H, D], the gradient of this rank's keys, summed over every rank's queries
  at::Tensor dv;  // [S, H, D]
};

class CpAttention final : public RowAttention, public std::enable_shared_from_this<CpAttention> {
 public:
  // Validates the workload and plan, checks that the group has cp_size
  // ranks, and builds this rank's (= cp_group->rank()) tile schedule.
  static Result<std::shared_ptr<CpAttention>> create(const CpWorkload& workload,
                                                     const ShardPlan& plan,
                                                     std::shared_ptr<comm::Communicator> cp_group,
                                                     const CpAttentionOptions& options = {});

  // Differentiable attention of local q, k, v ([S, H, D], float32/float64):
  // a torch::autograd::Function whose backward runs `backward` below.
  at::Tensor apply(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) override;

  // The same two passes without autograd, for tests and benchmarks.
  CpForward forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
  CpGrads backward(const at::Tensor& q, const CpForward& forward, const at::Tensor& dout);

  const TileSchedule& schedule() const { return schedule_; }
  const ShardPlan& plan() const { return plan_; }
  comm::Communicator& group() const { return *group_; }
  // Not synchronised: one CpAttention belongs to one rank's thread.
  const AttentionStats& last_forward() const { return last_forward_; }
  const AttentionStats& last_backward() const { return last_backward_; }

 private:
  CpAttention() = default;

  ShardPlan plan_;
  TileSchedule schedule_;
  std::shared_ptr<comm::Communicator> group_;
  CpAttentionOptions options_;
  at::Tensor restore_;  // int64 [N]: row of the gathered buffer holding global position pos
  AttentionStats last_forward_;
  AttentionStats last_backward_;
};

}  // namespace fulcrum::attention
