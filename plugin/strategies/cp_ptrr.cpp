// PTRR, process-time round robin (PyTorch PR 163617), re-derived as a
// baseline: cost every aligned query block of B rows by its non-empty KV
// tiles, sort the blocks by that cost and deal them to ranks in snake order.
// Blocks stay whole and aligned, so each rank's tiles are exactly the sum of
// its blocks' tiles; pairs are not what it balances.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string_view>
#include <vector>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {

constexpr std::string_view kPtrrAdvice =
    "pad the row to a multiple of cp_size*block_size or use balanced or auto";

Result<ShardPlan> plan_ptrr(const CpWorkload& workload) {
  if (Status status = check_servable("ptrr", workload, kPtrrAdvice); !status) return status;
  const std::int64_t block = workload.block_size;
  const std::int32_t p = workload.cp_size;
  const std::int64_t num_blocks = workload.tokens / block;
  const std::int64_t per_rank = num_blocks / p;

  const std::vector<std::int64_t> cost = block_costs(workload).tiles;
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_blocks));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  // Stable: equal costs keep block order, so every rank derives the same plan.
  std::stable_sort(order.begin(), order.end(),
                   [&cost](std::int64_t a, std::int64_t b) { return cost[a] > cost[b]; });

  // Snake order (0..P-1, then P-1..0, ...) gives the rank that took a round's
  // lightest block the next round's heaviest; any deal of sorted costs keeps
  // the spread within the heaviest block's cost, snake also cancels most of
  // the per-round drift.
  std::vector<std::vector<std::int64_t>> owned(static_cast<std::size_t>(p));
  for (auto& blocks : owned) blocks.reserve(static_cast<std::size_t>(per_rank));
  for (std::int64_t i = 0; i < num_blocks; ++i) {
    const std::int64_t round = i / p;
    const std::int64_t seat = i % p;
    owned[round % 2 == 0 ? seat : p - 1 - seat].push_back(order[i]);
  }

  ShardPlan plan;
  plan.cp_size = p;
  plan.shard_len = per_rank * block;
  plan.positions.reserve(static_cast<std::size_t>(workload.tokens));
  plan.strategy_used = "ptrr";
  for (auto& blocks : owned) {
    // Ascending block order keeps a rank's tokens in global order, which is
    // what the attention kernel's masks expect within a local block.
    std::sort(blocks.begin(), blocks.end());
    for (std::int64_t b : blocks) {
      for (std::int64_t t = 0; t < block; ++t) plan.positions.push_back(b * block + t);
    }
  }
  finish_plan(workload, plan);
  return plan;
}

}  // namespace fulcrum::cp
