#include "fulcrum/core/plan_check.h"

#include <string>
#include <vector>

namespace fulcrum {
namespace {
std::string str(std::int64_t v) { return std::to_string(v); }
}  // namespace

Status validate_plan(const CpWorkload& w, const ShardPlan& plan) {
  if (plan.cp_size != w.cp_size) {
    return invalid_argument("plan has " + str(plan.cp_size) + " shards for cp_size " +
                            str(w.cp_size));
  }
  if (plan.shard_len < 0 ||
      (plan.cp_size > 0 && plan.shard_len > (w.tokens + 1) * kMaxShardFactor)) {
    return invalid_argument("plan shard length " + str(plan.shard_len) +
                            " is out of range for a row of " + str(w.tokens) + " tokens");
  }
  const std::int64_t expected = static_cast<std::int64_t>(plan.cp_size) * plan.shard_len;
  if (static_cast<std::int64_t>(plan.positions.size()) != expected) {
    return invalid_argument("plan holds " + str(static_cast<std::int64_t>(plan.positions.size())) +
                            " positions; " + str(plan.cp_size) + " shards of " +
                            str(plan.shard_len) + " need " + str(expected));
  }
  std::vector<bool> seen(static_cast<std::size_t>(w.tokens), false);
  std::int64_t pads = 0;
  for (std::int64_t i = 0; i < expected; ++i) {
    const std::int64_t pos = plan.positions[i];
    if (pos == kPadPosition) {
      ++pads;
      continue;
    }
    // Built only on the error paths: this loop runs for every token of every row.
    const auto where = [&] {
      return "rank " + str(i / plan.shard_len) + " index " + str(i % plan.shard_len);
    };
    if (pos < 0 || pos >= w.tokens) {
      return invalid_argument("plan " + where() + " holds position " + str(pos) + ", outside [0, " +
                              str(w.tokens) + ") and not -1 padding");
    }
    if (seen[pos]) {
      return invalid_argument("plan " + where() + " repeats position " + str(pos));
    }
    seen[pos] = true;
  }
  if (expected - pads != w.tokens) {
    for (std::int64_t pos = 0; pos < w.tokens; ++pos) {
      if (!seen[pos]) {
        return invalid_argument("plan never places position " + str(pos) + " (" +
                                str(w.tokens - (expected - pads)) + " positions missing)");
      }
    }
  }
  if (plan.padding != pads) {
    return invalid_argument("plan reports " + str(plan.padding) + " padding tokens but holds " +
                            str(pads));
  }
  return Status::ok();
}

std::vector<std::int64_t> restore_index(const ShardPlan& plan, std::int64_t tokens) {
  std::vector<std::int64_t> restore(static_cast<std::size_t>(tokens), -1);
  for (std::size_t i = 0; i < plan.positions.size(); ++i) {
    const std::int64_t pos = plan.positions[i];
    if (pos != kPadPosition) restore[pos] = static_cast<std::int64_t>(i);
  }
  return restore;
}

}  // namespace fulcrum
