// The table of CP strategies, name lookup, applicability rules and the common
// last step of every planner (padding count and per-rank work).
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/core/slot_runs.h"
#include "fulcrum/core/text.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

// Order matters: tables and --compare print strategies in this order, anchors
// first (the baselines every result is compared with), fulcrum's own last.
constexpr std::array<StrategyInfo, 8> kStrategies = {{
    {"contiguous", &plan_contiguous,
     "rank r takes the r-th contiguous slice; under a causal mask the last rank does the most "
     "work"},
    {"head_tail", &plan_head_tail,
     "PyTorch's zigzag: rank r takes chunk r, then chunk 2P-1-r, of 2P equal chunks; needs "
     "N % 2P == 0"},
    {"striped", &plan_striped, "token i goes to rank i % P"},
    {"per_document_padded", &plan_per_document_padded,
     "Megatron/TE THD: every document padded to a multiple of 2P, then head-tail per document"},
    {"per_document", &plan_per_document,
     "head-tail within every document without per-document padding (fewer than P pad tokens)"},
    {"ptrr", &plan_ptrr,
     "PTRR: query blocks sorted by non-empty KV tiles, dealt to ranks in snake order; needs "
     "N % (P*B) == 0"},
    {"balanced", &plan_balanced,
     "fulcrum: work-aware sharding that balances attention pairs and kernel tiles together"},
    {"auto", &plan_auto, "fulcrum: picks the best applicable strategy for each workload"},
}};

// Rules a schedule names for its slots and plan_cp answers by name, not
// offered for a row on its own (not in tables, --compare, the plugin's
// strategy list): their inputs come from the schedule.
constexpr std::array<StrategyInfo, 1> kRules = {{
    {"per_document_weighted", &plan_per_document_weighted,
     "hybrid's rule for a slot over several nodes: per_document with each member's share of every "
     "document set by member_weights"},
}};

std::string known_names() {
  std::vector<std::string> names;
  for (const StrategyInfo& info : kStrategies) names.emplace_back(info.name);
  return join(names, ", ");
}

}  // namespace

std::span<const StrategyInfo> strategies() { return kStrategies; }

const StrategyInfo* find_strategy(std::string_view name) {
  const auto named = [name](const StrategyInfo& info) { return info.name == name; };
  const auto it = std::find_if(kStrategies.begin(), kStrategies.end(), named);
  if (it != kStrategies.end()) return &*it;
  const auto rule = std::find_if(kRules.begin(), kRules.end(), named);
  return rule == kRules.end() ? nullptr : &*rule;
}

bool takes_member_weights(std::string_view name) { return name == "per_document_weighted"; }

std::optional<std::string> inapplicable_reason(std::string_view name, const CpWorkload& workload) {
  // A malformed workload is the planner's to report (kInvalidArgument); the
  // guard only keeps the divisions below defined.
  if (workload.cp_size < 1 || workload.block_size < 1) return std::nullopt;
  const std::int64_t n = workload.tokens;
  const std::int64_t p = workload.cp_size;
  if (name == "head_tail") {
    if (n % (2 * p) != 0) {
      return "N=" + std::to_string(n) + " is not a multiple of 2*cp_size=" + std::to_string(2 * p);
    }
  } else if (name == "ptrr") {
    // PTRR also needs equal query and KV block sizes; a CpWorkload has a
    // single block_size for both (block-sparse masks included), so only the
    // divisibility rule can fail here.
    // P*B overflows for a B near int64's end (validate_workload has no upper
    // bound; found by fuzz/); such a unit exceeds any N, so N is no multiple.
    std::int64_t unit = 0;
    const bool overflow = __builtin_mul_overflow(p, workload.block_size, &unit);
    if (overflow || n % unit != 0) {
      return "N=" + std::to_string(n) + " is not a multiple of cp_size*block_size=" +
             (overflow ? std::to_string(p) + "*" + std::to_string(workload.block_size)
                       : std::to_string(unit));
    }
  }
  return std::nullopt;
}

Result<ShardPlan> plan(std::string_view name, const CpWorkload& workload) {
  const StrategyInfo* info = find_strategy(name);
  if (info == nullptr) {
    return not_found("unknown CP strategy " + quote_text(name) + "; use one of: " + known_names());
  }
  if (!workload.member_weights.empty() && !takes_member_weights(name)) {
    return invalid_argument("CP strategy " + quote_text(name) + " takes no member_weights, and " +
                            std::to_string(workload.member_weights.size()) +
                            " were given; send none (only per_document_weighted takes them)");
  }
  return info->plan(workload);
}

Result<ShardPlan> plan_per_document_weighted(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  if (workload.member_weights.empty()) {
    return invalid_argument(
        "per_document_weighted needs member_weights, one per member (cp_size " +
        std::to_string(workload.cp_size) +
        "); it is a schedule's rule for a slot, planned with the weights the schedule states");
  }
  ShardPlan plan =
      materialize_runs(detail::per_document_weighted_runs(workload, workload.member_weights));
  plan.strategy_used = "per_document_weighted";
  finish_plan(workload, plan);
  return plan;
}

void finish_plan(const CpWorkload& workload, ShardPlan& plan) {
  plan.padding = std::count(plan.positions.begin(), plan.positions.end(), kPadPosition);
  plan.work = compute_work(workload, plan);
}

Status check_servable(std::string_view name, const CpWorkload& workload, std::string_view advice) {
  if (Status status = validate_workload(workload); !status) return status;
  if (auto reason = inapplicable_reason(name, workload)) {
    return unsupported(std::string(name) + " cannot shard this row: " + *reason + "; " +
                       std::string(advice));
  }
  return Status::ok();
}

ShardPlan padded_plan(const CpWorkload& workload, std::string_view name, std::int64_t shard_len) {
  ShardPlan plan;
  plan.cp_size = workload.cp_size;
  plan.shard_len = shard_len;
  plan.positions.assign(static_cast<std::size_t>(workload.cp_size * shard_len), kPadPosition);
  plan.strategy_used = std::string(name);
  return plan;
}

}  // namespace fulcrum::cp
