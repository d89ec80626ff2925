// The attention of one slot of a hybrid schedule (DESIGN.md section 6): g
// members of the world group run one row sharded by a ShardPlan, and move
// over point-to-point messages only the K/V rows their tiles touch
// (kv_exchange.h), where CpAttention all-gathers the whole row over a fixed
// CP group.
//
//   forward:  each member sends each peer the K/V rows that peer needs and
//             receives its own needs; its own rows and the received ones are
//             placed at their global positions of a key buffer; blocked
//             attention of the local queries over the tiles its TileSchedule
//             lists. Key blocks no tile touches are never filled and never
//             read. With overlap (the default) the exchange runs one peer at
//             a time on a background thread while the tiles of the member's
//             own keys compute, then the other tiles once the rows are
//             placed (all of them in one kernel call, or each peer's as its
//             rows arrive: OverlapCalls), the partial results merged by
//             log-sum-exp; without it, one exchange before the first tile.
//   backward: recompute tiles from (O, L); dK/dV of the received keys go back
//             to their owners (with overlap, once the tiles of their keys
//             are done, while the own keys' tiles compute; per peer, each
//             peer's while the next peer's compute), and each owner adds
//             them to the gradient of its own keys.
//
// Both sides derive what travels from the replicated row and plan, so no
// sizes or positions go over the wire. A slot of one member communicates
// nothing. Only the slot's members call forward and backward, in the same
// order; the other ranks of the world are not involved.
//
// The passes, their autograd Function and the figures are the
// ShardedAttention's (sharded_attention.h); this file is its point-to-point
// exchange within the slot.
//
//   auto a = SlotAttention::create(row, slot.plan, slot.ranks, world).value();
//   at::Tensor out = a->apply(q, k, v);   // differentiable, [S, H, D]
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/blocked_attention.h"
#include "attention/kv_exchange.h"
#include "attention/sharded_attention.h"
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
  // Overlap the exchange with compute (kv_exchange.h, OverlapPlan): one
  // peer at a time on a background thread, the tiles whose keys are here
  // first. Off: every row travels before the first tile, in one exchange.
  bool overlap = true;
  // Under overlap, two kernel calls a pass or one per peer (OverlapCalls).
  OverlapCalls overlap_calls = OverlapCalls::kOwnThenRemote;
};

// The names hybrid mode's callers know the shared types by.
using SlotAttentionStats = AttentionStats;
using SlotForward = ShardedForward;
using SlotGrads = ShardedGrads;

class SlotAttention final : public ShardedAttention {
 public:
  // `row` and `plan` are the slot's (cp_size = g = ranks.size()); plan rank
  // i runs on world rank ranks[i], and world->rank() must be one of them.
  // The world group carries the messages; it may have any size >= the
  // largest rank listed.
  static Result<std::shared_ptr<SlotAttention>> create(const CpWorkload& row, const ShardPlan& plan,
                                                       std::vector<std::int32_t> ranks,
                                                       std::shared_ptr<comm::Communicator> world,
                                                       const SlotAttentionOptions& options = {});

  std::int32_t member() const { return member_; }
  const std::vector<std::int32_t>& ranks() const { return ranks_; }
  const KvExchangePlan& exchange_plan() const { return exchange_; }

 private:
  SlotAttention(const ShardPlan& plan, TileSchedule schedule, std::unique_ptr<KvExchange> exchange,
                const SlotAttentionOptions& options);

  std::vector<std::int32_t> ranks_;
  std::int32_t member_ = 0;
  KvExchangePlan exchange_;
};

}  // namespace fulcrum::attention
