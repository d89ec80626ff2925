#include "fulcrum/core/fixed_schedule.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"

namespace fulcrum {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// Best fit, longest piece first, ties by piece index (docs/PACKING.md rule 3):
// rows of `capacity` tokens, each a list of piece indices.
std::vector<std::vector<std::size_t>> pack_rows(const std::vector<DocPiece>& pieces,
                                                std::vector<std::size_t> members,
                                                std::int64_t capacity) {
  std::stable_sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
    return pieces[a].length > pieces[b].length;
  });
  std::vector<std::vector<std::size_t>> rows;
  std::multimap<std::int64_t, std::size_t> room;  // free tokens -> row, oldest first
  for (const std::size_t i : members) {
    const std::int64_t len = pieces[i].length;
    auto it = room.lower_bound(len);
    std::size_t row = rows.size();
    std::int64_t left = capacity - len;
    if (it != room.end()) {
      row = it->second;
      left = it->first - len;
      room.erase(it);
    } else {
      rows.emplace_back();
    }
    rows[row].push_back(i);
    room.emplace(left, row);
  }
  return rows;
}

}  // namespace

ShardPlan contiguous_plan(const CpWorkload& w) {
  ShardPlan plan;
  plan.cp_size = w.cp_size;
  plan.shard_len = ceil_div(w.tokens, w.cp_size);
  plan.positions.assign(static_cast<std::size_t>(plan.shard_len * w.cp_size), kPadPosition);
  std::iota(plan.positions.begin(), plan.positions.begin() + w.tokens, std::int64_t{0});
  plan.padding = plan.shard_len * w.cp_size - w.tokens;
  plan.strategy_used = "contiguous";
  plan.work = compute_work(w, plan);
  return plan;
}

Result<std::int32_t> fixed_cp_size(const ScheduleRequest& request) {
  return fixed_cp_size(request, schedule_pieces(request));
}

Result<std::int32_t> fixed_cp_size(const ScheduleRequest& request,
                                   const std::vector<DocPiece>& pieces) {
  std::int64_t longest = 0;
  for (const DocPiece& piece : pieces) longest = std::max(longest, piece.length);
  const std::int64_t budget = request.max_tokens_per_rank;
  if (request.cp_size > 0) {
    if (request.cp_size * budget < longest) {
      return unsupported("fixed: cp " + str(request.cp_size) + " rows hold " +
                         str(request.cp_size * budget) + " tokens but a document piece has " +
                         str(longest) + "; use a cp of at least " + str(ceil_div(longest, budget)) +
                         " that divides " + str(request.world_size) + ", or let fixed choose");
    }
    return request.cp_size;
  }
  for (std::int32_t cp = 1; cp <= request.world_size; ++cp) {
    if (request.world_size % cp == 0 && cp * budget >= longest) return cp;
  }
  return request.world_size;  // pieces never exceed W x T
}

Result<FixedPartition> fixed_partition(const ScheduleRequest& request,
                                       const PartitionFn& partition_dp) {
  if (Status status = validate_schedule_request(request); !status) return status;
  FixedPartition out;
  out.pieces = schedule_pieces(request);
  const Result<std::int32_t> cp_or = fixed_cp_size(request, out.pieces);
  if (!cp_or) return cp_or.status();
  out.cp = *cp_or;
  const std::int32_t dp = request.world_size / out.cp;

  DpRequest dp_request;
  dp_request.num_ranks = dp;
  dp_request.cost = CostModel{CostKind::kAttention, kDefaultAttentionA};
  dp_request.lengths.reserve(out.pieces.size());
  for (const DocPiece& piece : out.pieces) dp_request.lengths.push_back(piece.length);
  Result<DpPartition> partition = partition_dp(dp_request);
  if (!partition) return partition.status();
  if (partition->ranks.size() != static_cast<std::size_t>(dp)) {
    return internal_error("fixed: the DP partition returned " +
                          str(static_cast<std::int64_t>(partition->ranks.size())) + " ranks for " +
                          str(dp) + "; the partitioner is broken");
  }
  std::vector<char> dealt(out.pieces.size(), 0);
  for (const auto& group : partition->ranks) {
    for (const std::int64_t i : group) {
      if (i < 0 || i >= static_cast<std::int64_t>(out.pieces.size()) || dealt[i]) {
        return internal_error("fixed: the DP partition deals piece " + str(i) +
                              " twice or out of range; the partitioner is broken");
      }
      dealt[i] = 1;
    }
  }
  if (std::find(dealt.begin(), dealt.end(), 0) != dealt.end()) {
    return internal_error(
        "fixed: the DP partition leaves a piece undealt; the partitioner is broken");
  }
  out.groups = std::move(partition->ranks);
  return out;
}

Schedule fixed_rows(const ScheduleRequest& request, const FixedPartition& partition) {
  const std::int32_t cp = partition.cp;
  const std::int64_t budget = request.max_tokens_per_rank;
  Schedule schedule;
  schedule.strategy_used = "fixed";
  for (std::size_t d = 0; d < partition.groups.size(); ++d) {
    const std::vector<std::int64_t>& group = partition.groups[d];
    std::vector<std::size_t> members(group.begin(), group.end());
    const auto rows = pack_rows(partition.pieces, std::move(members), cp * budget);
    const auto first_rank = static_cast<std::int32_t>(d) * cp;
    for (std::size_t wave = 0; wave < rows.size(); ++wave) {
      ScheduleSlot slot;
      slot.wave = static_cast<std::int32_t>(wave);
      slot.ranks.resize(static_cast<std::size_t>(cp));
      std::iota(slot.ranks.begin(), slot.ranks.end(), first_rank);
      slot.pieces.reserve(rows[wave].size());
      for (const std::size_t i : rows[wave]) slot.pieces.push_back(partition.pieces[i]);
      schedule.slots.push_back(std::move(slot));
    }
  }
  return schedule;
}

Result<Schedule> fixed_slots(const ScheduleRequest& request, const PartitionFn& partition_dp) {
  Result<FixedPartition> partition = fixed_partition(request, partition_dp);
  if (!partition) return partition.status();
  return fixed_rows(request, *partition);
}

Status plan_fixed_slots(const ScheduleRequest& request, Schedule& schedule, const PlanFn& plan_cp) {
  const std::int64_t budget = request.max_tokens_per_rank;
  for (ScheduleSlot& slot : schedule.slots) {
    const CpWorkload w = slot_workload(request, slot);
    Result<ShardPlan> plan = plan_cp(w);
    if (!plan) return plan.status();
    if (plan->shard_len > budget) {
      const std::string why = plan->strategy_used + " needs " + str(plan->shard_len) +
                              " tokens per rank, more than T = " + str(budget);
      slot.plan = contiguous_plan(w);
      slot.plan.fallback_reason = why;
    } else {
      slot.plan = std::move(*plan);
    }
  }
  return Status::ok();
}

Result<Schedule> fixed_schedule(const ScheduleRequest& request, const PlanFn& plan_cp,
                                const PartitionFn& partition_dp) {
  Result<Schedule> schedule = fixed_slots(request, partition_dp);
  if (!schedule) return schedule;
  if (Status status = plan_fixed_slots(request, *schedule, plan_cp); !status) return status;
  return schedule;
}

}  // namespace fulcrum
