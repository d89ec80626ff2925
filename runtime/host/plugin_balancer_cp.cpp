// A CP plan through the plugin's table: the request lent, the answer copied
// out, validated and its work figures checked against the host's recount.
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/text.h"
#include "fulcrum/core/work_model.h"
#include "plugin_balancer.h"

namespace fulcrum::host::detail {
namespace {

// A per-rank work figure the plugin left out (its array was null).
constexpr std::int64_t kNotReported = std::numeric_limits<std::int64_t>::min();

// Hands a FULCRUM_OK plan back to the plugin when the copy is done.
class PlanRelease {
 public:
  PlanRelease(const fulcrum_plugin_v1* table, void* instance, fulcrum_cp_plan* plan)
      : table_(table), instance_(instance), plan_(plan) {}
  PlanRelease(const PlanRelease&) = delete;
  PlanRelease& operator=(const PlanRelease&) = delete;
  ~PlanRelease() { table_->release_plan(instance_, plan_); }

 private:
  const fulcrum_plugin_v1* table_;
  void* instance_;
  fulcrum_cp_plan* plan_;
};

}  // namespace

Result<ShardPlan> PluginBalancer::plan_cp(std::string_view strategy, const CpWorkload& workload) {
  // The plugin reads the request's arrays at the sizes N, B and the mask
  // imply; only a valid workload is safe to hand over.
  if (Status s = validate_workload(workload); !s) return s;
  const std::string name(strategy);

  LentMemory lent;
  fulcrum_cp_request request{};
  // ABI 1.5: a 1.4 plugin reads no further than v1.0's fields; it lists no
  // strategy that takes weights, so none is sent to it but by a caller's
  // mistake, which it answers as the row without them.
  request.struct_size = FULCRUM_CP_REQUEST_V1_5_SIZE;
  request.cp_size = workload.cp_size;
  request.tokens = workload.tokens;
  request.block_size = workload.block_size;
  request.doc_lengths = lent.lend("doc_lengths", workload.doc_lengths);
  request.num_docs = static_cast<std::int64_t>(workload.doc_lengths.size());
  request.mask_kind = static_cast<std::int32_t>(workload.mask.kind);
  request.mask_param = workload.mask.param;
  if (workload.mask.kind == MaskKind::kBlockSparse) {
    const BlockSparseMask& sparse = workload.mask.block_sparse;
    request.sparse_offsets = lent.lend("sparse_offsets", sparse.offsets);
    request.sparse_kv_blocks = lent.lend("sparse_kv_blocks", sparse.kv_blocks);
  }
  request.strategy = lent.lend("strategy", name);
  request.member_weights = lent.lend("member_weights", workload.member_weights);
  lent.watch("fulcrum_cp_request", request);

  ShardPlan plan;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fulcrum_cp_plan answer{};
    answer.struct_size = FULCRUM_CP_PLAN_V1_0_SIZE;
    const fulcrum_status status = table_->plan_cp(instance_.get(), &request, &answer);
    // Handed back exactly once, however the checks below end.
    std::optional<PlanRelease> release;
    if (status == FULCRUM_OK) release.emplace(table_, instance_.get(), &answer);
    if (Status s = check_lent(lent, "strategy", name); !s) return s;
    if (status != FULCRUM_OK) return plugin_failure(status, name);
    if (Status s = copy_plan(answer, workload, name, plan); !s) {
      return with_fix(s, "strategies");
    }
  }
  if (Status s = validate_plan(workload, plan); !s) {
    return with_fix(plugin_fault("plugin '" + name_ + "' strategy " + quote_text(name) +
                                 " returned an invalid plan: " + s.message()),
                    "strategies");
  }
  // The host reports only work it counted: a plugin's own figures are
  // checked against the recount and refused when they differ
  // (docs/PLUGIN_ABI.md, "What the host checks before use", step 6).
  std::vector<RankWork> counted = compute_work(workload, plan);
  for (std::size_t r = 0; r < plan.work.size() && r < counted.size(); ++r) {
    const RankWork& said = plan.work[r];
    const RankWork& real = counted[r];
    const bool pairs_wrong = said.pairs != kNotReported && said.pairs != real.pairs;
    const bool tiles_wrong = said.tiles != kNotReported && said.tiles != real.tiles;
    if (pairs_wrong || tiles_wrong) {
      const char* which = pairs_wrong ? "pairs" : "tiles";
      return with_fix(
          plugin_fault("plugin '" + name_ + "' strategy " + quote_text(name) + " reports " +
                       std::to_string(pairs_wrong ? said.pairs : said.tiles) + " " + which +
                       " for rank " + std::to_string(r) + ", but its plan gives that rank " +
                       std::to_string(pairs_wrong ? real.pairs : real.tiles) + " " + which +
                       "; the host refuses work it cannot confirm"),
          "strategies");
    }
  }
  plan.work = std::move(counted);
  return plan;
}

// Copies what the plugin owns into host memory; checks only what the copy
// itself needs (validate_plan judges the rest).
Status PluginBalancer::copy_plan(const fulcrum_cp_plan& answer, const CpWorkload& workload,
                                 const std::string& strategy, ShardPlan& plan) const {
  const std::string bad =
      "plugin '" + name_ + "' strategy " + quote_text(strategy) + " returned an invalid plan: ";
  if (answer.cp_size != workload.cp_size) {
    return plugin_fault(bad + "cp_size " + std::to_string(answer.cp_size) +
                        ", the workload has cp_size " + std::to_string(workload.cp_size));
  }
  // The counts say how much the host reads from the plugin's buffers: they
  // must agree with each other and stay within what validate_plan accepts
  // before anything is read.
  const std::int64_t longest = (workload.tokens + 1) * kMaxShardFactor;
  if (answer.shard_len < 0 || answer.shard_len > longest) {
    return plugin_fault(bad + "shard_len " + std::to_string(answer.shard_len) + " is outside [0, " +
                        std::to_string(longest) + "]");
  }
  const std::int64_t total = answer.shard_len * answer.cp_size;
  if (answer.padding < 0 || answer.padding != total - workload.tokens) {
    return plugin_fault(bad + std::to_string(answer.cp_size) + " shards of " +
                        std::to_string(answer.shard_len) + " positions hold " +
                        std::to_string(total - workload.tokens) + " pads for " +
                        std::to_string(workload.tokens) + " tokens, but it reports padding " +
                        std::to_string(answer.padding));
  }
  if (total > 0 && answer.positions == nullptr) {
    return plugin_fault(bad + "positions is null with shard_len " +
                        std::to_string(answer.shard_len));
  }
  plan.cp_size = answer.cp_size;
  plan.shard_len = answer.shard_len;
  plan.positions.assign(answer.positions, answer.positions + total);
  plan.padding = answer.padding;
  plan.strategy_used = strategy;
  if (answer.strategy_used != nullptr) {
    Result<std::string> used =
        answer_text(answer.strategy_used, kMaxNameBytes, bad, "strategy_used");
    if (!used) return used.status();
    plan.strategy_used = std::move(used).value();
  }
  if (answer.fallback_reason != nullptr) {
    Result<std::string> reason =
        answer_text(answer.fallback_reason, kMaxTextBytes, bad, "fallback_reason");
    if (!reason) return reason.status();
    plan.fallback_reason = std::move(reason).value();
  }
  // The work the plugin reports is kept only to be checked against the
  // host's own recount in plan_cp; an array it leaves null reads as
  // kNotReported. Either array may come alone.
  plan.work.clear();
  if (answer.rank_pairs != nullptr || answer.rank_tiles != nullptr) {
    plan.work.resize(static_cast<std::size_t>(answer.cp_size));
    for (std::int32_t r = 0; r < answer.cp_size; ++r) {
      RankWork& w = plan.work[static_cast<std::size_t>(r)];
      w.pairs = answer.rank_pairs != nullptr ? answer.rank_pairs[r] : kNotReported;
      w.tiles = answer.rank_tiles != nullptr ? answer.rank_tiles[r] : kNotReported;
    }
  }
  return Status::ok();
}

}  // namespace fulcrum::host::detail
