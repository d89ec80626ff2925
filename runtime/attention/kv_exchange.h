// Which K/V rows the members of one slot send each other (DESIGN.md
// section 6): member m needs the keys of every key block its tiles touch,
// and receives, from each peer, the tokens that peer holds in those blocks.
// No LibTorch.
//
// Key blocks are the B-token blocks of the slot's row in global order, the
// blocks the tile work model counts. A tile (local query block, key block)
// is computed iff one of its (query, key) pairs is allowed, so the blocks a
// member's tiles touch are the union of its TileSchedule's runs. The whole
// block travels, not only the keys a query sees: the kernel reads whole
// tiles and masks inside them, and the cost model counts blocks alike, so the
// bytes moved equal its `bytes_received`.
//
// Every member computes the same plan from the replicated row and ShardPlan:
// a sender knows what each receiver needs without asking.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/tile_schedule.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::attention {

// K/V rows one member sends another: the sender's local rows (its plan
// order, ascending) and their global positions, in the same order.
struct KvTransfer {
  std::int32_t from = 0;  // member (plan rank) that holds the rows
  std::int32_t to = 0;    // member whose tiles touch them
  std::vector<std::int64_t> rows;
  std::vector<std::int64_t> positions;
  std::int64_t tokens() const { return static_cast<std::int64_t>(rows.size()); }
};

struct KvExchangePlan {
  std::int32_t members = 1;  // g = the plan's cp_size
  std::int64_t tokens = 0;   // N
  std::int64_t block_size = 0;
  // Per member: the key blocks its tiles touch, ascending, as merged runs.
  std::vector<std::vector<KeyBlockRun>> touched;
  // Only the non-empty ones, ordered by (to, from). g = 1: none.
  std::vector<KvTransfer> transfers;

  // Tokens member m receives (sends) in total, over all its peers.
  std::int64_t tokens_received(std::int32_t member) const;
  std::int64_t tokens_sent(std::int32_t member) const;
  // The transfers m receives (sends), ordered by peer.
  std::vector<const KvTransfer*> incoming(std::int32_t member) const;
  std::vector<const KvTransfer*> outgoing(std::int32_t member) const;
};

// Validates the workload and plan (as make_tile_schedule does). O(g x N / B +
// N) beyond the members' tile schedules.
Result<KvExchangePlan> make_kv_exchange_plan(const CpWorkload& workload, const ShardPlan& plan);

// How one member overlaps its exchange with compute (docs/HYBRID_RUNTIME.md
// section 10). It exchanges with its peers one at a time in ascending member
// order (the same order on every member, so two members never wait on each
// other's later peer), and splits its tiles by the peers their key blocks
// need:
//   forward:  group 0 holds the blocks whose tokens are all its own, computed
//             while the keys travel; group i + 1 the blocks whose last
//             needed peer (in exchange order) is peers[i], computed once
//             that peer's keys are placed;
//   backward: group i holds the blocks whose first needed peer is peers[i],
//             not in an earlier group, so after group i every tile that
//             touches peers[i]'s keys is done and its dK/dV can leave; the
//             last group holds the own-key blocks, computed while the
//             gradients travel.
// Every tile of the schedule is in exactly one group of each list.
struct OverlapPlan {
  std::vector<std::int32_t> peers;     // members exchanged with, ascending
  std::vector<TileSchedule> forward;   // peers.size() + 1 groups
  std::vector<TileSchedule> backward;  // peers.size() + 1 groups
};

// How many kernel calls a pass's tiles take under overlap. Each call
// pays work sized by the whole row and visits every query block with tiles
// in its group, so on a CPU many small groups cost more than the exchange
// they hide (docs/HYBRID_RUNTIME.md section 10, "Two calls a pass").
enum class OverlapCalls {
  // The groups above: a call per peer, each as early as its keys allow.
  kPerPeer,
  // Two calls a pass, the same exchange: forward, the own-key blocks while
  // every peer's keys travel, then every other block in group peers.size()
  // once all are placed; backward, every other block in group 0, after
  // which every peer's dK/dV may leave, then the own-key blocks while they
  // travel. The groups between are empty.
  kOwnThenRemote,
};

// `schedule` is member's; `exchange` the slot's plan over the same row.
OverlapPlan make_overlap_plan(const TileSchedule& schedule, const ShardPlan& plan,
                              const KvExchangePlan& exchange, std::int32_t member,
                              OverlapCalls calls);

// The schedule with only the key blocks `keep` marks (indexed by key block):
// the same rows and masks, fewer runs and tiles.
TileSchedule restrict_schedule(const TileSchedule& schedule, const std::vector<bool>& keep);

}  // namespace fulcrum::attention
