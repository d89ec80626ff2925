// A shard plan held as runs of consecutive row positions, and the step-time
// cost model priced from those runs without writing a position per token
// (docs/HYBRID.md section 2 states the model; "Pricing from runs" in
// section 5 says why). A scheduler compares many plans of a slot and many
// placements of a batch; each ShardPlan is one int64 per token, and pricing
// it walks them all. A planner that builds its plan from runs (balanced,
// per-document, head-tail, contiguous) describes it in O(runs), and the run
// pricing below counts the same tokens, tiles, bytes and peers as
// evaluate_slot in O(runs + blocks), then forms the times with the same
// function (price_slot_counts), so both give bit-equal figures. No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/schedule_types.h"

namespace fulcrum {

// Row positions [begin, begin + length), or `length` pad entries when
// begin == kPadPosition.
struct PositionRun {
  std::int64_t begin = 0;
  std::int64_t length = 0;
};

// A plan over `ranks` members: member r's local order is runs[rank_offset[r]
// .. rank_offset[r + 1]) followed by padding up to shard_len entries.
struct RunShardPlan {
  std::int32_t ranks = 1;
  std::int64_t shard_len = 0;
  std::vector<PositionRun> runs;
  std::vector<std::int64_t> rank_offset;  // ranks + 1 entries
};

// The positions of a run plan: cp_size, shard_len, positions and padding
// (strategy_used, fallback_reason and work are left to the caller).
ShardPlan materialize_runs(const RunShardPlan& runs);

// The runs of a plan's positions (maximal runs of consecutive positions and
// of padding, per member); materialize_runs gives the plan back.
RunShardPlan runs_of_plan(const ShardPlan& plan);

// Per member of `runs`: real tokens and tiles under the work model, equal to
// compute_work on the materialised plan, and with `full_tiles` its full
// tiles, equal to compute_work's. Requires a dense mask.
std::vector<RankWork> run_tokens_and_tiles(const CpWorkload& workload, const RunShardPlan& runs,
                                           std::vector<std::int64_t>* full_tiles = nullptr);

// A one-rank slot's row on its member in row order, without padding (the
// contiguous plan of one member, the run [0, N)), counted straight from the
// slot's pieces: its real tokens and tiles (and with `full_tiles` its full
// tiles), equal to run_tokens_and_tiles on that plan, in O(pieces) without
// allocating. Requires a dense mask.
RankWork one_rank_row_work(const ScheduleRequest& request, const ScheduleSlot& slot,
                           std::int64_t* full_tiles = nullptr);

// evaluate_slot_runs(...).end_seconds of a one-rank slot under that plan,
// exactly: its member's compute (member_compute_seconds), no exchange. Most
// slots of a large batch run on one rank, and a scheduler prices them again
// and again: this is their price without the runs, counts and SlotCost.
double one_rank_slot_end(const ScheduleRequest& request, const ScheduleSlot& slot);

// evaluate_slot of the slot whose plan materialize_runs(runs) would be: the
// same members' tokens, tiles, bytes, peers and times, exactly, and their
// partial tiles where the profile prices them (0 elsewhere: counting them
// costs the planner a twentieth of its time and moves no price). The slot's
// own `plan` is not read. Requires runs that form a valid plan of the slot's
// row (as validate_schedule checks for a plan).
SlotCost evaluate_slot_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                            const RunShardPlan& runs);

// A floor on evaluate_slot_runs(...).end_seconds in O(runs + blocks log
// blocks + holders), without the member-by-member table of the exchange:
// the slot priced with its tokens and tiles, each member adding its
// exchange from its totals per link (the K/V it receives from and sends to
// members on its node, and to the others: the same sums as the table's) and
// the latency of the peers it has at least (the other holders of the
// most-held key block it touches, or the other members touching one block
// it holds), less what the overlap can hide. A
// planner comparing plans skips counting the exchange member by member for
// a plan whose floor already reaches the best end. `exchange_floor` false:
// without the exchange totals (compute and peers' latency alone; it costs
// O(blocks x nodes) more, worth it where it rules plans out).
double slot_end_floor_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                           const RunShardPlan& runs, bool exchange_floor = true);

// The two above for one plan, each count taken once (the members' tokens
// and tiles, the key blocks' holders, the blocks each member touches): when
// slot_end_floor_runs already reaches `beat`, that floor, `exact` false;
// else evaluate_slot_runs(...).end_seconds, `exact` true, and `cost` that
// price (empty when not exact). With `beat` +infinity the floor is not
// computed and the end is always exact. `exchange_floor` false: the floor
// is the weaker one of compute and peers' latency alone, without the bytes
// (a caller whose later choices depend on which plans were priced in full
// keeps them as they were). When not exact, `peers_floor` is that weaker
// floor either way.
struct SlotEnd {
  double end = 0;
  bool exact = false;
  SlotCost cost;
  double peers_floor = 0;
};
SlotEnd slot_end_runs_below(const ScheduleRequest& request, const ScheduleSlot& slot,
                            const RunShardPlan& runs, double beat, bool exchange_floor = true);
namespace detail {
struct SlotRunsCounts;
}

// A run plan with what pricing it counts (the members' tokens and tiles,
// the key blocks' holders, the blocks each member touches). These depend on
// the slot's row (its pieces' lengths in order), its size and the request's
// mask and block, not on which ranks run it: a planner that prices one row
// over several rank sets counts each of its plans once.
struct CountedRuns {
  RunShardPlan runs;
  std::shared_ptr<const detail::SlotRunsCounts> counts;
};
CountedRuns count_runs(const ScheduleRequest& request, const ScheduleSlot& slot, RunShardPlan runs);

// count_runs of a plan whose members' tokens and tiles its planner has
// counted already (`work`, equal to run_tokens_and_tiles(slot_workload(...),
// runs): the balanced planner's exact work is). The same counts, with the
// runs walked only for the key blocks each member touches: one interval per
// run and document, not one per local block. Dense masks (block-sparse
// counts as count_runs does). `work` has no full tiles: under a profile
// with partial_tile_seconds, this is count_runs without it.
CountedRuns count_runs(const ScheduleRequest& request, const ScheduleSlot& slot, RunShardPlan runs,
                       const std::vector<RankWork>& work);

// slot_end_runs_below of a counted plan, on any slot of the same row and
// size as the one it was counted for. `floor_value` false: for a caller
// that needs only whether the plan can end before `beat`: where compute
// alone, or with peers' latency, reaches `beat`, the exchange totals (and
// then the peers) are not counted, and `end` and `peers_floor` are that
// weaker floor (both still reach `beat`).
SlotEnd slot_end_counted_below(const ScheduleRequest& request, const ScheduleSlot& slot,
                               const CountedRuns& counted, double beat, bool exchange_floor = true,
                               bool floor_value = true);

// evaluate_schedule with slot s priced from runs[s] (its plan not read).
ScheduleCost evaluate_schedule_runs(const ScheduleRequest& request, const Schedule& schedule,
                                    const std::vector<RunShardPlan>& runs);

}  // namespace fulcrum
