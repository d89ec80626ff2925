// One attention over a ShardPlan, whatever moves the keys: each rank (or
// slot member) holds its shard of the row in plan order, gets the keys its
// tiles need from the others, runs blocked attention of its local queries
// over the tiles of its TileSchedule, and in backward sends the gradient of
// every key it used back to the key's owner. Only that K/V exchange differs
// between fixed mode and hybrid mode, so it is an interface:
//
//   AllGatherKvExchange (cp_attention.cpp)  the whole row all-gathered over a
//                                            fixed CP group, reduce-scatter back;
//   PeerKvExchange (slot_attention.cpp)      point-to-point within a slot, only
//                                            the rows the tiles touch.
//
// CpAttention and SlotAttention are this attention with one exchange each;
// forward, backward, their autograd Function and the figures are here once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "attention/blocked_attention.h"
#include "attention/kv_exchange.h"
#include "attention/row_attention.h"
#include "attention/tile_schedule.h"
#include "fulcrum/cp_types.h"

namespace fulcrum::attention {

// Merges the attention of the same queries over a further, disjoint set of
// keys (`part`) into (out, lse); undefined out and lse take part as it is. A
// row that sees no key in either keeps out = 0 and L = -inf.
void merge_partial(at::Tensor& out, at::Tensor& lse, LocalForward part);

// What a forward or backward pass did on this rank (or slot member).
struct AttentionStats {
  std::int64_t tiles = 0;  // tiles computed, each for all heads: equals compute_work's tiles
  std::int64_t heads = 0;
  // The point-to-point exchange only (0 for the all-gather): tensor bytes
  // handed to it, and the ranks it sent to or received from.
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
  std::int32_t peers = 0;
  double compute_ms = 0.0;  // the blocked attention
  // This rank's thread's time on the K/V exchange that compute did not
  // cover: gathering and placing rows, and waiting for the exchange.
  double comm_ms = 0.0;
  // Overlapped exchange only (0 otherwise): the exchange's own wall time on
  // its background thread, and the part of it this rank's thread waited
  // for; exchange_ms - wait_ms of it was hidden behind compute.
  double exchange_ms = 0.0;
  double wait_ms = 0.0;
  // Tile groups computed as separate kernel calls: 1 without overlap, more
  // when some of the tiles ran before (forward) or after (backward) peers'
  // keys travelled.
  std::int32_t groups = 0;
};

struct ShardedForward {
  at::Tensor out;       // [S, H, D], local rows in plan order; zero on pad rows
  at::Tensor lse;       // [S, H]
  at::Tensor k_global;  // [N, H, D], global order (kept for backward); rows no tile
  at::Tensor v_global;  // [N, H, D]  touches may be left unfilled by the exchange
};

struct ShardedGrads {
  at::Tensor dq;  // [S, H, D], this rank's rows
  at::Tensor dk;  // [S, H, D], the gradient of this rank's keys, summed over every rank's queries
  at::Tensor dv;  // [S, H, D]
};

// How K and V travel. Both directions take and give K and V concatenated
// on the last axis ([rows, H, 2D]), one message or collective for both.
class KvExchange {
 public:
  virtual ~KvExchange() = default;
  // This rank's local K/V [S, H, 2D] in plan order -> the row's K/V
  // [N, H, 2D] in global order (at least the rows this rank's tiles read).
  virtual at::Tensor gather(const at::Tensor& kv, AttentionStats& stats) = 0;
  // The gradient of every key of the row from this rank's queries
  // [N, H, 2D] -> the gradient of this rank's own keys [S, H, 2D], summed
  // over every rank's queries.
  virtual at::Tensor return_grads(const at::Tensor& dkv_global, AttentionStats& stats) = 0;

  // Overlap with compute (the point-to-point exchange; see OverlapPlan in
  // kv_exchange.h). nullptr: the exchange runs whole, as above.
  virtual const OverlapPlan* overlap() const { return nullptr; }
  // Places this rank's rows in the key buffer [N, H, 2D] it returns, starts
  // the exchange, and calls compute(i, buffer) for forward group i of
  // overlap() once the group's keys are in place.
  virtual at::Tensor gather_overlapped(
      const at::Tensor& kv, AttentionStats& stats,
      const std::function<void(std::size_t, const at::Tensor&)>& compute);
  // Calls compute(i) for backward group i of overlap(), which returns that
  // group's share of the row's dK/dV [N, H, 2D] (undefined: none); each
  // peer's rows leave once its group is done. `like` is a local [S, H, D]
  // tensor of the pass (heads, head_dim, dtype, device). Returns the
  // gradient of this rank's own keys [S, H, 2D], as return_grads.
  virtual at::Tensor return_grads_overlapped(const at::Tensor& like, AttentionStats& stats,
                                             const std::function<at::Tensor(std::size_t)>& compute);
};

class ShardedAttention : public RowAttention,
                         public std::enable_shared_from_this<ShardedAttention> {
 public:
  // Differentiable attention of local q, k, v ([S, H, D], float32/float64):
  // a torch::autograd::Function whose backward runs `backward` below.
  at::Tensor apply(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) override;

  // The same two passes without autograd, for tests and benchmarks.
  ShardedForward forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
  ShardedGrads backward(const at::Tensor& q, const ShardedForward& forward, const at::Tensor& dout);

  const TileSchedule& schedule() const { return schedule_; }
  const ShardPlan& plan() const { return plan_; }
  // Not synchronised: one attention belongs to one rank's thread.
  const AttentionStats& last_forward() const { return last_forward_; }
  const AttentionStats& last_backward() const { return last_backward_; }
  // Every forward and every backward call so far, summed (one attention
  // serving all layers of a row or slot); peers is the largest.
  const AttentionStats& total_forward() const { return total_forward_; }
  const AttentionStats& total_backward() const { return total_backward_; }

 protected:
  // `name` starts the messages of a bad input ("cp attention").
  ShardedAttention(std::string name, ShardPlan plan, TileSchedule schedule, KernelOptions kernel,
                   std::unique_ptr<KvExchange> exchange);

 private:
  ShardedForward forward_overlapped(const at::Tensor& q, const at::Tensor& kv,
                                    const OverlapPlan& overlap, AttentionStats& stats);
  ShardedGrads backward_overlapped(const at::Tensor& q, const ShardedForward& forward,
                                   const at::Tensor& dout, const OverlapPlan& overlap,
                                   AttentionStats& stats);
  void finish_forward(const AttentionStats& stats);
  void finish_backward(const AttentionStats& stats);

  std::string name_;
  ShardPlan plan_;
  TileSchedule schedule_;
  KernelOptions kernel_;
  std::unique_ptr<KvExchange> exchange_;
  AttentionStats last_forward_;
  AttentionStats last_backward_;
  AttentionStats total_forward_;
  AttentionStats total_backward_;
};

}  // namespace fulcrum::attention
