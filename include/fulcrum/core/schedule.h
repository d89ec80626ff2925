// Schedule checks and the step-time cost model (docs/HYBRID.md), shared by
// the schedulers, their tests and the host, which validates every schedule a
// plugin returns before using it. No LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum {

// Upper bound on a request's total tokens: every count the cost model and the
// lower bound form (tokens x W, tiles) stays far inside int64 and double.
inline constexpr std::int64_t kMaxBatchTokens = std::int64_t{1} << 40;
// The most document pieces a request may hold per rank of the world.
inline constexpr std::int64_t kMaxPiecesPerRank = 1024;

// Bounds and consistency of a request (W, T, B, lengths, mask, profile): one
// line naming the field, the value and what to do.
Status validate_schedule_request(const ScheduleRequest& request);

// The pieces every schedule of `request` must place exactly once: each
// document whole, or cut at multiples of W x T when longer.
std::vector<DocPiece> schedule_pieces(const ScheduleRequest& request);

// The row a slot runs: its pieces' lengths as documents (attention stays
// inside each piece), the request's mask and block size, cp_size = g.
CpWorkload slot_workload(const ScheduleRequest& request, const ScheduleSlot& slot);

// Whether `ranks` (a slot's members in plan order) is a group `shapes`
// allows on a world of `world` ranks: its size one of the set sizes (or the
// world, when allowed) and, when aligned, ranks k g, k g + 1, ... , k g + g - 1
// (the world group: 0 .. W - 1).
bool group_shape_allowed(const GroupShapes& shapes, std::int32_t world,
                         const std::vector<std::int32_t>& ranks);

// Exact cover of schedule_pieces, distinct in-range ranks per slot, at most T
// tokens per member, one slot per rank per wave, every slot's plan valid for
// its row, and the request's group_shapes (every slot's group allowed; with
// every_wave, every rank in a slot of every wave up to the last, and the
// wave count a multiple of wave_multiple). The message names the first
// violation (slot, rank, wave, value).
//
// How slot plans are judged: kPositions, every plan in full; kByRule, a
// plan without positions (a compact answer's, ScheduleSlot::compact) by its
// shape alone (cp_size = g, a rule named, g x shard_len covering the row,
// padding the rest) and any other in full. compact_schedule.h expands the
// plans by rule and judges them in full then.
enum class PlanCheck { kPositions, kByRule };
Status validate_schedule(const ScheduleRequest& request, const Schedule& schedule,
                         PlanCheck plans = PlanCheck::kPositions);

// A plan by rule's shape for its row (what kByRule checks): one line naming
// the first field that disagrees.
Status validate_plan_shape(const CpWorkload& workload, const ShardPlan& plan);

struct SlotMemberCost {
  std::int32_t rank = 0;
  std::int64_t tokens = 0;  // real tokens the member holds
  std::int64_t tiles = 0;   // its tiles under the work model
  // Of those, the partial ones (not every pair allowed): evaluate_slot's
  // always; the run pricing (slot_runs.h) counts them only under a profile
  // that prices them, 0 elsewhere.
  std::int64_t partial_tiles = 0;
  std::int64_t bytes_received = 0;  // K/V of key blocks its tiles touch that it does not hold
  std::int64_t bytes_sent = 0;      // what its peers receive from it (dK/dV come back alike)
  std::int32_t peers = 0;           // members it exchanges K/V or dK/dV with
  double compute_seconds = 0;
  double comm_seconds = 0;
};

struct SlotCost {
  double start_seconds = 0;             // when every member is free
  double end_seconds = 0;               // when its slowest member ends
  std::vector<SlotMemberCost> members;  // in the slot's rank order
};

struct ScheduleCost {
  std::vector<SlotCost> slots;       // in the schedule's slot order
  std::vector<double> busy_seconds;  // per rank: compute + communication
  std::vector<double> idle_seconds;  // per rank: step time - busy
  double step_seconds = 0;           // the last rank's finish
  std::int64_t bytes_moved = 0;      // sum of bytes_received over every member
  std::int64_t allgather_bytes = 0;  // the same rows with a full K/V all-gather
};

// What a slot's members do, counted: per member its real tokens, tiles and
// partial tiles (those of its tiles that are not full: work_model.h);
// `active`, the members holding real tokens (ascending: only they have
// queries and keys, so only they exchange), and received[x * a + y], the
// K/V tokens member active[x] receives from member active[y] (a = active
// members, zero diagonal). active and received are empty when g == 1, or
// when no exchange is counted: then the slot is priced as if it moved
// nothing, a floor on its price.
struct SlotCounts {
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> tiles;
  std::vector<std::int64_t> partial;
  std::vector<std::int32_t> active;
  std::vector<std::int64_t> received;
};

// Counts of a slot's members from their work and full tiles (one per
// member: tokens, tiles and partial tiles; no exchange counted yet).
// `full_tiles` null: none counted, every member's partial tiles 0.
SlotCounts slot_counts_of(const std::vector<RankWork>& work,
                          const std::vector<std::int64_t>* full_tiles);

// Fills counts.active from counts.tokens, sizes counts.received (a x a,
// zero) and returns each member's index among the active ones (-1: none).
std::vector<std::int32_t> start_exchange(SlotCounts& counts);

// A member's compute under the cost model: its tiles (`partial` of them
// partial) and tokens, the fixed cost of a slot and the row term (`row`:
// the slot's real tokens, every member's share together).
// price_slot_counts forms each member's with this; a one-member slot, which
// exchanges nothing, ends when it does.
double member_compute_seconds(const CostProfile& profile, std::int64_t tokens, std::int64_t tiles,
                              std::int64_t partial, std::int64_t row);

// Counts to seconds: the one place the cost model forms a slot's times
// (compute, communication, bytes, peers; start 0, end = its slowest member).
// Every pricing path (positions, runs) counts and then calls this, so a term
// added to the model is priced alike by all.
SlotCost price_slot_counts(const CostProfile& profile, const std::vector<std::int32_t>& ranks,
                           const SlotCounts& counts);

// The timeline of docs/HYBRID.md section 2 over slots priced by `slot_cost`
// (slot index -> its SlotCost with start 0): wave order, each slot starting
// when its last member is free. evaluate_schedule is this with evaluate_slot.
ScheduleCost price_timeline(const ScheduleRequest& request, const Schedule& schedule,
                            const std::function<SlotCost(std::size_t)>& slot_cost);

// One slot on its own (start 0, end = its slowest member's time): what a
// scheduler compares when it chooses between plans for a slot. Requires a
// slot whose plan validate_schedule accepts.
SlotCost evaluate_slot(const ScheduleRequest& request, const ScheduleSlot& slot);

// Requires a schedule that validate_schedule accepts.
ScheduleCost evaluate_schedule(const ScheduleRequest& request, const Schedule& schedule);

// No valid schedule of `request` has a step time below this (assumptions and
// proof in docs/HYBRID.md section 4; core/schedule_bound.cpp).
double step_time_lower_bound(const ScheduleRequest& request);

// The bound's parts (docs/HYBRID.md section 4). The first five are seconds
// summed over every member of every slot, which every valid schedule spends
// at least: the average is their sum over W; the per-piece term is one
// member's least time. The bound is the larger of the two, or more where
// the work caps bind: then it is the least S (to 1e-6 of it, rounded down) that is
// at least the per-piece term and average_at_bound, the average recomputed
// as if no member's time exceeded S.
struct BoundTerms {
  double tiles = 0;               // tile_seconds x the least tile count
  double tokens = 0;              // token_seconds x the batch's tokens
  double fixed = 0;               // slot_seconds x the least number of memberships
  double exchange = 0;            // the least K/V time (received and sent)
  double exchange_by_member = 0;  // the same by the per-member argument alone (no cross-node count)
  double latency = 0;             // latency_seconds x the least number of peers
  double average = 0;             // (tiles + tokens + fixed + exchange + latency) / W
  double per_piece = 0;
  double bound = 0;             // step_time_lower_bound: >= max(average, per_piece)
  double average_at_bound = 0;  // the average under the work caps of S = bound
};
BoundTerms step_time_lower_bound_terms(const ScheduleRequest& request);

}  // namespace fulcrum
