// `megatron_dcp`: Megatron-LM's dynamic context-parallel scheduler,
// re-derived from DefaultDynamicCPScheduler.get_groups_and_subsamples in
// megatron/core/datasets/data_schedule.py and next_hdp_group_packing_aware
// in megatron/core/datasets/data_schedule_utils.py. Each call of
// next_hdp_group_packing_aware forms one micro-batch over all W ranks; here
// that micro-batch is one wave and each of its CP groups one slot.
//
// Per micro-batch, from the remaining pieces, longest first (stable):
//   * group sizes are get_valid_dynamic_context_parallel_group_sizes(W): the
//     powers of two below W that divide W, then W itself;
//   * a piece needs the smallest size whose ranks hold it (dcp_gpus_needed);
//     its workload on a group of c ranks is L^2 / c per member;
//   * the first piece opens a group on ranks [0, c); the cap is
//     1.05 x (first length) x T (_DYNAMIC_CP_WORKLOAD_CAP_DELTA);
//   * every later piece tries, sizes ascending from its need, joining each
//     open group of that size (its members' packed length stays within T)
//     and then opening one on the lowest free ranks; the candidate with the
//     smallest projected maximum workload over all ranks, within the cap,
//     wins (strictly smaller, so the first of equals); none: the piece waits
//     for the next micro-batch;
//   * ranks left empty are filled by growing a smallest group to the next
//     size (fill_empty_gpus_once, shifting the groups after it), repeatedly;
//     when that cannot fill them, the micro-batch is rebuilt as one group of
//     all W ranks holding the pieces that fit (fill_with_full_dpxcp_group).
// Inside each group Megatron shards with TransformerEngine's THD layout:
// every document padded to a multiple of 2c and cut head-tail, fulcrum's
// `per_document_padded` (c = 1: no CP, the row as it is).
//
// Where fulcrum departs, and why: Megatron checks its per-rank length budget
// on lengths the dataset padded beforehand; fulcrum's budget T counts the
// padding a member holds, so "fits" here means the group's per_document_padded
// shard (sum of 2 ceil(L / 2c) per piece) stays within T, and a piece needs
// the smallest valid size for which its own padded shard fits.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

constexpr double kWorkloadCapDelta = 0.05;

std::vector<std::int32_t> valid_group_sizes(std::int32_t world) {
  std::vector<std::int32_t> sizes;
  for (std::int64_t p = 1; p < world; p *= 2) {
    if (world % p == 0) sizes.push_back(static_cast<std::int32_t>(p));
  }
  sizes.push_back(world);
  return sizes;
}

// Tokens a member of a group of c ranks holds for a piece of `len` tokens.
std::int64_t member_tokens(std::int64_t len, std::int32_t c) {
  return c == 1 ? len : 2 * ceil_div(len, 2 * static_cast<std::int64_t>(c));
}

struct Group {
  std::int32_t first_rank = 0;
  std::int32_t size = 0;
  std::int64_t packed = 0;  // tokens per member
  double workload = 0;      // per member, sum of L^2 / c
  std::vector<std::size_t> pieces;
};

struct MicroBatch {
  std::vector<Group> groups;
  std::vector<std::size_t> leftovers;
};

double workload(std::int64_t len, std::int32_t c) {
  const double l = static_cast<double>(len);
  return l * l / c;
}

// One call of next_hdp_group_packing_aware over `remaining` (longest first).
MicroBatch next_micro_batch(const std::vector<DocPiece>& pieces,
                            const std::vector<std::size_t>& remaining,
                            const std::vector<std::int32_t>& sizes, std::int32_t world,
                            std::int64_t budget) {
  const auto need = [&](std::int64_t len) {
    for (const std::int32_t c : sizes) {
      if (member_tokens(len, c) <= budget) return c;
    }
    return std::numeric_limits<std::int32_t>::max();
  };
  MicroBatch mb;
  const std::int64_t tall = pieces[remaining[0]].length;
  const double cap =
      static_cast<double>(tall) * static_cast<double>(budget) * (1 + kWorkloadCapDelta);
  std::int32_t used = 0;  // groups hold ranks [0, used), in order
  double highest = 0;     // max workload over all ranks

  const auto open_group = [&](std::size_t piece, std::int32_t c) {
    Group g;
    g.first_rank = used;
    g.size = c;
    g.packed = member_tokens(pieces[piece].length, c);
    g.workload = workload(pieces[piece].length, c);
    g.pieces.push_back(piece);
    used += c;
    highest = std::max(highest, g.workload);
    mb.groups.push_back(std::move(g));
  };
  open_group(remaining[0], need(tall));

  for (std::size_t k = 1; k < remaining.size(); ++k) {
    const std::size_t piece = remaining[k];
    const std::int64_t len = pieces[piece].length;
    const std::int32_t min_needed = need(len);
    double best = std::numeric_limits<double>::infinity();
    std::int32_t best_size = 0;
    std::size_t best_group = mb.groups.size();  // == size(): open a new group
    bool found = false;
    for (const std::int32_t c : sizes) {
      if (c < min_needed) continue;
      const double cost = workload(len, c);
      const std::int64_t held = member_tokens(len, c);
      for (std::size_t gi = 0; gi < mb.groups.size(); ++gi) {
        const Group& g = mb.groups[gi];
        if (g.size != c || g.packed + held > budget) continue;
        // Members share one workload, so the projected maximum over all
        // ranks is the larger of today's and this group's new one.
        const double projected = std::max(highest, g.workload + cost);
        if (projected <= cap && projected < best) {
          best = projected;
          best_size = c;
          best_group = gi;
          found = true;
        }
      }
      if (world - used >= c) {
        const double projected = std::max(highest, cost);
        if (projected <= cap && projected < best) {
          best = projected;
          best_size = c;
          best_group = mb.groups.size();
          found = true;
        }
      }
    }
    if (!found) {
      mb.leftovers.push_back(piece);
      continue;
    }
    if (best_group == mb.groups.size()) {
      open_group(piece, best_size);
    } else {
      Group& g = mb.groups[best_group];
      g.packed += member_tokens(len, best_size);
      g.workload += workload(len, best_size);
      g.pieces.push_back(piece);
      highest = std::max(highest, g.workload);
    }
  }

  // fill_empty_gpus_once, until no rank is empty or it cannot.
  while (used < world) {
    std::int32_t smallest = std::numeric_limits<std::int32_t>::max();
    for (const Group& g : mb.groups) smallest = std::min(smallest, g.size);
    const auto at = std::find(sizes.begin(), sizes.end(), smallest);
    bool grown = false;
    if (at != sizes.end() && at + 1 != sizes.end()) {
      const std::int32_t next = *(at + 1);
      const std::int32_t extra = next - smallest;
      for (std::size_t gi = 0; gi < mb.groups.size() && !grown; ++gi) {
        Group& g = mb.groups[gi];
        const std::int32_t end = g.first_rank + g.size - 1;
        if (g.size != smallest || end + extra >= world) continue;
        g.size = next;
        g.workload = 0;
        g.packed = 0;
        for (const std::size_t p : g.pieces) {
          g.workload += workload(pieces[p].length, next);
          g.packed += member_tokens(pieces[p].length, next);
        }
        for (Group& other : mb.groups) {
          if (other.first_rank > end) other.first_rank += extra;
        }
        used += extra;
        grown = true;
      }
    }
    if (grown) continue;
    // fill_with_full_dpxcp_group: the whole call's input, longest first.
    Group all;
    all.first_rank = 0;
    all.size = world;
    std::vector<std::size_t> rest;
    for (const std::size_t piece : remaining) {
      const std::int64_t held = member_tokens(pieces[piece].length, world);
      if (all.packed + held <= budget) {
        all.packed += held;
        all.workload += workload(pieces[piece].length, world);
        all.pieces.push_back(piece);
      } else {
        rest.push_back(piece);
      }
    }
    mb.groups.assign(1, std::move(all));
    mb.leftovers = std::move(rest);
    break;
  }
  return mb;
}

}  // namespace

Result<Schedule> decide_megatron_dcp(const ScheduleRequest& request) {
  if (Status status = validate_schedule_request(request); !status) return status;
  const std::vector<DocPiece> pieces = schedule_pieces(request);
  const std::vector<std::int32_t> sizes = valid_group_sizes(request.world_size);
  const std::int64_t budget = request.max_tokens_per_rank;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (member_tokens(pieces[i].length, request.world_size) > budget) {
      return unsupported("megatron_dcp: document " + std::to_string(pieces[i].doc) + " piece of " +
                         std::to_string(pieces[i].length) +
                         " tokens, padded to a multiple of 2W, exceeds W x T; raise T");
    }
  }
  std::vector<std::size_t> remaining(pieces.size());
  for (std::size_t i = 0; i < remaining.size(); ++i) remaining[i] = i;
  std::stable_sort(remaining.begin(), remaining.end(), [&](std::size_t a, std::size_t b) {
    return pieces[a].length > pieces[b].length;
  });

  Schedule schedule;
  schedule.strategy_used = "megatron_dcp";
  for (std::int32_t wave = 0; !remaining.empty(); ++wave) {
    MicroBatch mb = next_micro_batch(pieces, remaining, sizes, request.world_size, budget);
    for (const Group& g : mb.groups) {
      ScheduleSlot slot;
      slot.wave = wave;
      for (std::int32_t r = 0; r < g.size; ++r) slot.ranks.push_back(g.first_rank + r);
      for (const std::size_t p : g.pieces) slot.pieces.push_back(pieces[p]);
      schedule.slots.push_back(std::move(slot));
    }
    remaining = std::move(mb.leftovers);
  }
  return schedule;
}

Status plan_megatron_dcp(const ScheduleRequest& request, Schedule& schedule) {
  for (ScheduleSlot& slot : schedule.slots) {
    const CpWorkload w = slot_workload(request, slot);
    if (w.cp_size == 1) {
      slot.plan = contiguous_plan(w);
      continue;
    }
    Result<ShardPlan> plan = cp::plan_per_document_padded(w);
    if (!plan) return plan.status();
    slot.plan = std::move(*plan);
  }
  return Status::ok();
}

}  // namespace fulcrum
