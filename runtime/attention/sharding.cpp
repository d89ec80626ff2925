#include "attention/sharding.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "fulcrum/core/plan_check.h"

namespace fulcrum::attention {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

at::Tensor to_tensor(const std::vector<std::int64_t>& values) {
  return at::tensor(at::ArrayRef<std::int64_t>(values), at::TensorOptions().dtype(at::kLong));
}

void check_rows(const at::Tensor& t, std::int64_t expected, const char* what, const char* fn) {
  if (!t.defined() || t.dim() < 1 || t.size(0) != expected) {
    throw std::invalid_argument(
        std::string(fn) + ": " + what + " has " +
        (!t.defined() ? std::string("no tensor")
                      : (t.dim() < 1 ? std::string("0 dims") : str(t.size(0)) + " rows")) +
        "; the plan needs " + str(expected) + " rows along dim 0");
  }
}

// Rows of `full` at `positions` (-1 -> pad_value).
at::Tensor gather_rows(const at::Tensor& full, const at::Tensor& positions, double pad_value) {
  const at::Tensor pad = positions.eq(kPadPosition).to(full.device());
  const at::Tensor index = positions.clamp_min(0).to(full.device());
  at::Tensor rows = full.index_select(0, index);
  // A differentiable select-then-overwrite, so gradients of pad rows vanish.
  if (pad.any().item<bool>()) {
    rows = rows.index_fill(0, pad.nonzero().squeeze(1), pad_value);
  }
  return rows;
}

}  // namespace

std::int64_t plan_tokens(const ShardPlan& plan) {
  return static_cast<std::int64_t>(plan.cp_size) * plan.shard_len - plan.padding;
}

at::Tensor plan_positions(const ShardPlan& plan) { return to_tensor(plan.positions); }

at::Tensor restore_tensor(const ShardPlan& plan) {
  return to_tensor(restore_index(plan, plan_tokens(plan)));
}

at::Tensor shard(const at::Tensor& full, const ShardPlan& plan, std::int32_t rank,
                 double pad_value) {
  if (rank < 0 || rank >= plan.cp_size) {
    throw std::invalid_argument("shard: rank " + str(rank) + " is outside the plan's [0, " +
                                str(plan.cp_size) + ")");
  }
  check_rows(full, plan_tokens(plan), "the full tensor", "shard");
  const std::vector<std::int64_t> positions(plan.rank_begin(rank), plan.rank_end(rank));
  return gather_rows(full, to_tensor(positions), pad_value);
}

at::Tensor shard_all(const at::Tensor& full, const ShardPlan& plan, double pad_value) {
  check_rows(full, plan_tokens(plan), "the full tensor", "shard_all");
  return gather_rows(full, plan_positions(plan), pad_value);
}

at::Tensor unshard(const at::Tensor& gathered, const ShardPlan& plan) {
  check_rows(gathered, static_cast<std::int64_t>(plan.cp_size) * plan.shard_len,
             "the gathered tensor", "unshard");
  return gathered.index_select(0, restore_tensor(plan).to(gathered.device()));
}

}  // namespace fulcrum::attention
