// The attention of one slot of a hybrid schedule (DESIGN.md section 6): g
// members of the world group run one row sharded by a ShardPlan, and move
// over point-to-point messages only the K/V rows their tiles touch
// (kv_exchange.h), where CpAttention all-gathers the whole row over a fixed
// CP group.
//
//   forward:  each member sends each peer the K/V rows that peer needs and
//             receives its own needs, all in one exchange; its own rows and
//             the received ones are placed at their global positions of a
//             key buffer; blocked attention of the local queries over the
//             tiles its TileSchedule lists. Key blocks no tile touches are
//             never filled and never read.
//   backward: recompute tiles from (O, L); dK/dV of the received keys go back
//             to their owners in one exchange, the mirror of the forward
//             one, and each owner adds them to the gradient of its own keys.
//
// Both sides derive what travels from the replicated row and plan, so no
// sizes or positions go over the wire. A slot of one member communicates
// nothing. Only the slot's members call forward and backward, in the same
// order; the other ranks of the world are not involved.
//
//   auto a = SlotAttention::create(row, slot.plan, slot.ranks, world).value();
//   at::Tensor out = a->apply(q, k, v);   // differentiable, [S, H, D]
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/blocked_attention.h"
#include "attention/kv_exchange.h"
#include "attention/row_attention.h"
#include "attention/tile_schedule.h"
#include "comm/communicator.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::attention {

struct SlotAttentionOptions {
  KernelOptions kernel;
  // Where this slot is in the schedule, e.g. "slot 3 (wave 1)": a failed
  // exchange's CommError starts with it and the pass ("slot 3 (wave 1)
  // forward: exchange on group world timed out ..."), so a stalled peer is
  // named with the slot and wave it failed in. Empty: "slot".
  std::string label;
};

// What the last forward or backward call did on this member.
struct SlotAttentionStats {
  std::int64_t tiles = 0;  // equals compute_work's tiles for the member
  std::int64_t heads = 0;
  std::int64_t bytes_sent = 0;  // tensor bytes handed to the exchange
  std::int64_t bytes_received = 0;
  std::int32_t peers = 0;   // members it sent to or received from
  double compute_ms = 0.0;  // the blocked attention
  double comm_ms = 0.0;     // the exchange, with gathering and placing rows
};

struct SlotForward {
  at::Tensor out;       // [S, H, D], local rows in plan order; zero on pad rows
  at::Tensor lse;       // [S, H]
  at::Tensor k_global;  // [N, H, D], global order; only touched key blocks are filled
  at::Tensor v_global;  // [N, H, D]
};

struct SlotGrads {
  at::Tensor dq;  // [S, H, D]
  at::Tensor dk;  // [S, H, D]: this member's keys, summed over every member's queries
  at::Tensor dv;
};

class SlotAttention final : public RowAttention,
                            public std::enable_shared_from_this<SlotAttention> {
 public:
  // `row` and `plan` are the slot's (cp_size = g = ranks.size()); plan rank
  // i runs on world rank ranks[i], and world->rank() must be one of them.
  // The world group carries the messages; it may have any size >= the
  // largest rank listed.
  static Result<std::shared_ptr<SlotAttention>> create(const CpWorkload& row, const ShardPlan& plan,
                                                       std::vector<std::int32_t> ranks,
                                                       std::shared_ptr<comm::Communicator> world,
                                                       const SlotAttentionOptions& options = {});

  // Differentiable attention of local q, k, v ([S, H, D], float32/float64).
  at::Tensor apply(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) override;

  // The two passes without autograd, for tests and benchmarks.
  SlotForward forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
  SlotGrads backward(const at::Tensor& q, const SlotForward& forward, const at::Tensor& dout);

  std::int32_t member() const { return member_; }
  const std::vector<std::int32_t>& ranks() const { return ranks_; }
  const TileSchedule& schedule() const { return schedule_; }
  const KvExchangePlan& exchange_plan() const { return exchange_; }
  // Not synchronised: one SlotAttention belongs to one rank's thread.
  const SlotAttentionStats& last_forward() const { return last_forward_; }
  const SlotAttentionStats& last_backward() const { return last_backward_; }
  // Every forward and every backward call so far, summed (one SlotAttention
  // serving all layers of a slot: the slot's figures); peers is the largest.
  const SlotAttentionStats& total_forward() const { return total_forward_; }
  const SlotAttentionStats& total_backward() const { return total_backward_; }

 private:
  SlotAttention() = default;

  // The world's exchange, its CommError prefixed with the label and pass.
  void exchange(const char* pass, const std::vector<comm::PeerMessage>& sends,
                const std::vector<comm::PeerMessage>& receives);

  // Rows and global positions of one transfer, as index tensors.
  struct TransferIndex {
    std::int32_t peer_rank = 0;  // world rank of the other member
    at::Tensor rows;             // int64, the sender's local rows
    at::Tensor positions;        // int64, their global positions
  };

  ShardPlan plan_;
  std::vector<std::int32_t> ranks_;
  std::int32_t member_ = 0;
  TileSchedule schedule_;
  KvExchangePlan exchange_;
  std::shared_ptr<comm::Communicator> world_;
  SlotAttentionOptions options_;
  at::Tensor own_rows_;                  // int64: this member's non-pad local rows
  at::Tensor own_positions_;             // int64: their global positions
  std::vector<TransferIndex> incoming_;  // keys this member receives, by peer
  std::vector<TransferIndex> outgoing_;  // keys this member sends, by peer
  SlotAttentionStats last_forward_;
  SlotAttentionStats last_backward_;
  SlotAttentionStats total_forward_;
  SlotAttentionStats total_backward_;
};

}  // namespace fulcrum::attention
