// A schedule through the plugin's table, or the host's fixed one built from
// the plugin's CP plans and DP partitions when it has no scheduler.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "builtin_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/text.h"
#include "fulcrum/core/workload.h"
#include "plugin_balancer.h"

namespace fulcrum::host::detail {
namespace {

// Hands a FULCRUM_OK schedule back to the plugin when the copy is done.
class ScheduleRelease {
 public:
  ScheduleRelease(const fulcrum_plugin_v1* table, void* instance, fulcrum_schedule* schedule)
      : table_(table), instance_(instance), schedule_(schedule) {}
  ScheduleRelease(const ScheduleRelease&) = delete;
  ScheduleRelease& operator=(const ScheduleRelease&) = delete;
  ~ScheduleRelease() { table_->release_schedule(instance_, schedule_); }

 private:
  const fulcrum_plugin_v1* table_;
  void* instance_;
  fulcrum_schedule* schedule_;
};

}  // namespace

Result<Schedule> PluginBalancer::schedule(std::string_view strategy,
                                          const ScheduleRequest& request) {
  // The plugin reads doc_lengths at the size the request states; only a
  // valid request is handed over.
  if (Status s = validate_schedule_request(request); !s) return s;
  const std::string name(strategy);
  if (schedule_names_.empty()) return host_fixed_schedule(name, request);

  LentMemory lent;
  fulcrum_schedule_request c_request{};
  c_request.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_6_SIZE;
  c_request.world_size = request.world_size;
  c_request.max_tokens_per_rank = request.max_tokens_per_rank;
  c_request.doc_lengths = lent.lend("doc_lengths", request.doc_lengths);
  c_request.num_docs = static_cast<std::int64_t>(request.doc_lengths.size());
  c_request.mask_kind = static_cast<std::int32_t>(request.mask.kind);
  c_request.cp_size = request.cp_size;
  c_request.mask_param = request.mask.param;
  c_request.block_size = request.block_size;
  c_request.strategy = lent.lend("strategy", name);
  const CostProfile& profile = request.profile;
  c_request.profile_name = lent.lend("profile_name", profile.name);
  c_request.tile_seconds = profile.tile_seconds;
  c_request.token_seconds = profile.token_seconds;
  c_request.slot_seconds = profile.slot_seconds;
  c_request.kv_bytes_per_token = profile.kv_bytes_per_token;
  c_request.intra_node_bytes_per_second = profile.intra_node_bytes_per_second;
  c_request.inter_node_bytes_per_second = profile.inter_node_bytes_per_second;
  c_request.latency_seconds = profile.latency_seconds;
  c_request.ranks_per_node = profile.ranks_per_node;
  c_request.exchange_overlap = profile.exchange_overlap;  // ABI 1.3; a 1.2 plugin reads no further
  // ABI 1.4; a 1.3 plugin reads no further and plans without the row term
  // (the host still prices and validates what it returns with it).
  c_request.row_token_seconds = profile.row_token_seconds;
  // ABI 1.6; likewise a 1.5 plugin plans without the partial-tile term.
  c_request.partial_tile_seconds = profile.partial_tile_seconds;
  // ABI 1.2. A 1.1 plugin does not see the shapes; the schedule it returns
  // is validated against them below all the same.
  const GroupShapes& shapes = request.group_shapes;
  c_request.group_sizes = shapes.sizes;
  c_request.group_flags = (shapes.world ? FULCRUM_GROUPS_WORLD : 0) |
                          (shapes.aligned ? FULCRUM_GROUPS_ALIGNED : 0) |
                          (shapes.every_wave ? FULCRUM_GROUPS_EVERY_WAVE : 0);
  c_request.wave_multiple = shapes.wave_multiple;
  // ABI 1.4: a 1.3 plugin does not see the flag and answers in full, which
  // the host takes as before.
  c_request.answer_flags = request.compact ? FULCRUM_ANSWER_COMPACT : 0;
  lent.watch("fulcrum_schedule_request", c_request);

  Schedule schedule;
  bool compact = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fulcrum_schedule answer{};
    answer.struct_size = FULCRUM_SCHEDULE_V1_5_SIZE;
    const fulcrum_status status = table_->schedule(instance_.get(), &c_request, &answer);
    std::optional<ScheduleRelease> release;
    if (status == FULCRUM_OK) release.emplace(table_, instance_.get(), &answer);
    if (Status s = check_lent(lent, "scheduler", name); !s) return s;
    if (status != FULCRUM_OK) return plugin_failure(status, name);
    Result<bool> by_rule = answer_is_compact(answer, request, name);
    if (!by_rule) return with_fix(by_rule.status(), "schedulers");
    compact = *by_rule;
    if (Status s = copy_schedule(answer, request, name, compact, schedule); !s) {
      return with_fix(s, "schedulers");
    }
  }
  // A compact answer's plans are judged by their shape here, and in full by
  // the rank that expands them (fulcrum/core/compact_schedule.h).
  if (Status s = validate_schedule(request, schedule,
                                   compact ? PlanCheck::kByRule : PlanCheck::kPositions);
      !s) {
    return with_fix(plugin_fault("plugin '" + name_ + "' scheduler " + quote_text(name) +
                                 " returned an invalid schedule: " + s.message()),
                    "schedulers");
  }
  return schedule;
}

// A plugin without a scheduler still gets a schedule, the host's fixed one
// built from the plugin's own CP plans and DP partitions; the answer says
// so. A row the plugin cannot plan is sharded contiguously, as plan_cp's
// callers fall back elsewhere.
Result<Schedule> PluginBalancer::host_fixed_schedule(const std::string& requested,
                                                     const ScheduleRequest& request) {
  const std::string cp = detail::fixed_schedule_strategy(cp_names_);
  const std::string dp = detail::fixed_schedule_strategy(dp_names_);
  const bool abi_1_0 = !FULCRUM_HAS_FIELD(fulcrum_plugin_v1, release_schedule, table_->struct_size);
  std::string why = "plugin '" + name_ + "' " +
                    (abi_1_0 ? "speaks ABI 1." + std::to_string(table_->abi_minor) +
                                   ", which has no schedule hook"
                             : std::string("has no scheduler")) +
                    "; the host's built-in fixed schedule served";
  if (requested != detail::kFixedScheduler) why += " instead of " + quote_text(requested);
  why += " (CP plans from its " + quote_text(cp) + ", DP from its " + quote_text(dp) + ")";
  PlanFn plan = [this, cp](const CpWorkload& w) -> Result<ShardPlan> {
    if (!cp.empty()) {
      Result<ShardPlan> planned = plan_cp(cp, w);
      if (planned) return planned;
    }
    ShardPlan fallback = contiguous_plan(w);
    fallback.fallback_reason = "the plugin's CP planner could not serve this row";
    return fallback;
  };
  PartitionFn partition = [this, dp](const DpRequest& r) -> Result<DpPartition> {
    if (dp.empty()) return builtin_balancer()->partition_dp("round_robin", r);
    return partition_dp(dp, r);
  };
  return detail::builtin_fixed_schedule(request, plan, partition, why);
}

// Copies what the plugin owns into host memory, checking only what the
// copy itself needs: offsets in order and within bounds the batch implies,
// so that no array is read past what a valid schedule could hold.
// validate_schedule judges the rest.
Status PluginBalancer::copy_schedule(const fulcrum_schedule& answer, const ScheduleRequest& request,
                                     const std::string& strategy, bool compact,
                                     Schedule& schedule) const {
  const std::string bad = "plugin '" + name_ + "' scheduler " + quote_text(strategy) +
                          " returned an invalid schedule: ";
  const auto num_pieces = static_cast<std::int64_t>(schedule_pieces(request).size());
  const std::int64_t world = request.world_size;
  std::int64_t batch_tokens = 0;
  for (std::int64_t length : request.doc_lengths) batch_tokens += length;
  // Every slot runs at least one piece, so a valid schedule has no more
  // slots than pieces.
  if (answer.num_slots < 0 || answer.num_slots > num_pieces) {
    return plugin_fault(bad + "num_slots " + std::to_string(answer.num_slots) + " is outside [0, " +
                        std::to_string(num_pieces) + "], the batch's piece count");
  }
  const auto slots = static_cast<std::size_t>(answer.num_slots);
  if (answer.slot_rank_offsets == nullptr || answer.slot_piece_offsets == nullptr ||
      (slots > 0 &&
       (answer.ranks == nullptr || answer.piece_docs == nullptr || answer.piece_starts == nullptr ||
        answer.piece_lengths == nullptr || answer.slot_waves == nullptr ||
        answer.slot_shard_lens == nullptr || answer.slot_padding == nullptr))) {
    return plugin_fault(bad + "an array it needs is null (" + std::to_string(slots) + " slots)");
  }
  if (answer.slot_rank_offsets[0] != 0 || answer.slot_piece_offsets[0] != 0) {
    return plugin_fault(bad + "its offset arrays do not start at 0");
  }
  schedule.slots.resize(slots);
  if (compact && slots > 0 && answer.slot_plan_strategies == nullptr) {
    return plugin_fault(bad +
                        "a compact answer needs slot_plan_strategies, the rule of every "
                        "slot's plan, and it is null");
  }
  const ScheduleBounds bounds{num_pieces, world, batch_tokens, request.max_tokens_per_rank,
                              compact};
  std::int64_t position_at = 0;
  for (std::size_t s = 0; s < slots; ++s) {
    if (Status st = copy_slot(answer, s, bounds, strategy, bad, position_at, schedule.slots[s]);
        !st) {
      return st;
    }
  }
  if (Status st = copy_weights(answer, compact, bad, schedule); !st) return st;
  schedule.strategy_used = strategy;
  if (answer.strategy_used != nullptr) {
    Result<std::string> used =
        answer_text(answer.strategy_used, kMaxNameBytes, bad, "strategy_used");
    if (!used) return used.status();
    schedule.strategy_used = std::move(used).value();
  }
  if (answer.fallback_reason != nullptr) {
    Result<std::string> reason =
        answer_text(answer.fallback_reason, kMaxTextBytes, bad, "fallback_reason");
    if (!reason) return reason.status();
    schedule.fallback_reason = std::move(reason).value();
  }
  return Status::ok();
}

// One slot of the plugin's schedule copied into `slot`, its offsets and
// lengths held to `bounds` before they index the plugin's arrays;
// `position_at` is where its positions start and moves past them.
Status PluginBalancer::copy_slot(const fulcrum_schedule& answer, std::size_t s,
                                 const ScheduleBounds& bounds, const std::string& strategy,
                                 const std::string& bad, std::int64_t& position_at,
                                 ScheduleSlot& slot) const {
  const std::string where = "slot " + std::to_string(s) + ": ";
  const std::int64_t rank_begin = answer.slot_rank_offsets[s];
  const std::int64_t rank_end = answer.slot_rank_offsets[s + 1];
  if (rank_end - rank_begin < 1 || rank_end - rank_begin > bounds.world) {
    return plugin_fault(bad + where + "rank offsets [" + std::to_string(rank_begin) + ", " +
                        std::to_string(rank_end) + ") give a group of " +
                        std::to_string(rank_end - rank_begin) + " ranks, expected 1 to " +
                        std::to_string(bounds.world));
  }
  const std::int64_t piece_begin = answer.slot_piece_offsets[s];
  const std::int64_t piece_end = answer.slot_piece_offsets[s + 1];
  if (piece_end < piece_begin || piece_end > bounds.pieces) {
    return plugin_fault(bad + where + "piece offsets [" + std::to_string(piece_begin) + ", " +
                        std::to_string(piece_end) + ") are out of order or past the batch's " +
                        std::to_string(bounds.pieces) + " pieces");
  }
  slot.ranks.assign(answer.ranks + rank_begin, answer.ranks + rank_end);
  std::int64_t row_tokens = 0;
  for (std::int64_t p = piece_begin; p < piece_end; ++p) {
    const DocPiece piece{answer.piece_docs[p], answer.piece_starts[p], answer.piece_lengths[p]};
    if (piece.length < 1 || piece.length > bounds.batch_tokens) {
      return plugin_fault(bad + where + "piece " + std::to_string(p - piece_begin) +
                          " has length " + std::to_string(piece.length) + ", outside [1, " +
                          std::to_string(bounds.batch_tokens) + "]");
    }
    row_tokens += piece.length;  // at most pieces * batch_tokens: no overflow
    slot.pieces.push_back(piece);
  }
  slot.wave = answer.slot_waves[s];
  const auto g = static_cast<std::int32_t>(rank_end - rank_begin);
  const std::int64_t shard_len = answer.slot_shard_lens[s];
  // Bounds the copy only: a valid plan holds at most T per member, and
  // validate_schedule names a shard past T; past row + T it is garbage.
  const std::int64_t longest = row_tokens + bounds.budget;
  if (shard_len < 0 || shard_len > longest) {
    return plugin_fault(bad + where + "shard_len " + std::to_string(shard_len) +
                        " is outside [0, " + std::to_string(longest) +
                        "], the row plus the budget");
  }
  slot.plan.cp_size = g;
  slot.plan.shard_len = shard_len;
  slot.plan.padding = answer.slot_padding[s];
  const std::int64_t entries = shard_len * g;
  if (bounds.compact) {
    // By rule: the positions stay unwritten until a member expands them;
    // the plan's rule is required below.
  } else if (entries > 0 && answer.positions == nullptr) {
    return plugin_fault(bad + where + "positions is null with shard_len " +
                        std::to_string(shard_len));
  }
  if (!bounds.compact) {
    slot.plan.positions.assign(answer.positions + position_at,
                               answer.positions + position_at + entries);
    position_at += entries;
  }
  const char* plan_strategy =
      answer.slot_plan_strategies != nullptr ? answer.slot_plan_strategies[s] : nullptr;
  slot.plan.strategy_used = strategy;
  if (bounds.compact && plan_strategy == nullptr) {
    return plugin_fault(bad + where +
                        "a compact answer's slot names no CP rule "
                        "(slot_plan_strategies[" +
                        std::to_string(s) + "] is null)");
  }
  if (plan_strategy != nullptr) {
    Result<std::string> used = answer_text(plan_strategy, kMaxNameBytes, bad + where,
                                           "slot_plan_strategies[" + std::to_string(s) + "]");
    if (!used) return used.status();
    slot.plan.strategy_used = std::move(used).value();
  }
  return Status::ok();
}

// A 1.4 plugin leaves both arrays NULL (zeroed by the host): no weights.
Status PluginBalancer::copy_weights(const fulcrum_schedule& answer, bool compact,
                                    const std::string& bad, Schedule& schedule) const {
  if (answer.slot_weight_offsets == nullptr && answer.slot_weights == nullptr) {
    return Status::ok();
  }
  if (answer.slot_weight_offsets == nullptr || answer.slot_weights == nullptr) {
    return plugin_fault(bad +
                        "slot_weight_offsets and slot_weights must be both NULL or both "
                        "set, and " +
                        (answer.slot_weights == nullptr ? "slot_weights" : "slot_weight_offsets") +
                        " is NULL");
  }
  if (!compact) {
    return plugin_fault(bad +
                        "a full answer (positions written) with member weights; weights come "
                        "only with plans by rule (FULCRUM_ANSWER_COMPACT)");
  }
  const std::int64_t* offsets = answer.slot_weight_offsets;
  if (offsets[0] != 0) {
    return plugin_fault(bad + "slot_weight_offsets[0] is " + std::to_string(offsets[0]) +
                        ", not 0");
  }
  for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
    ScheduleSlot& slot = schedule.slots[s];
    // offsets[s] is in [0, the members so far]; offsets[s + 1] is the
    // plugin's, compared before it is subtracted (INT64_MIN would overflow).
    if (offsets[s + 1] < offsets[s]) {
      return plugin_fault(bad + "slot " + std::to_string(s) + ": slot_weight_offsets [" +
                          std::to_string(offsets[s]) + ", " + std::to_string(offsets[s + 1]) +
                          ") go backwards; they must be non-decreasing from 0");
    }
    const std::int64_t count = offsets[s + 1] - offsets[s];
    const auto g = static_cast<std::int64_t>(slot.ranks.size());
    if (count != 0 && count != g) {
      return plugin_fault(bad + "slot " + std::to_string(s) + ": slot_weight_offsets [" +
                          std::to_string(offsets[s]) + ", " + std::to_string(offsets[s + 1]) +
                          ") give " + std::to_string(count) + " member weights for " +
                          std::to_string(g) + " members; give none or one per member");
    }
    slot.member_weights.assign(answer.slot_weights + offsets[s],
                               answer.slot_weights + offsets[s + 1]);
    if (Status st = validate_member_weights(slot.member_weights, g); !st) {
      return plugin_fault(bad + "slot " + std::to_string(s) + ": " + st.message());
    }
  }
  return Status::ok();
}

// Whether the answer is compact (ABI 1.4): only when the request asked, the
// flag is one this host knows and positions is NULL as the flag says.
Result<bool> PluginBalancer::answer_is_compact(const fulcrum_schedule& answer,
                                               const ScheduleRequest& request,
                                               const std::string& strategy) const {
  const std::string bad = "plugin '" + name_ + "' scheduler " + quote_text(strategy) +
                          " returned an invalid schedule: ";
  const std::uint32_t flags = answer.answer_flags;
  if ((flags & ~std::uint32_t{FULCRUM_ANSWER_COMPACT}) != 0 || (flags != 0 && !request.compact)) {
    return plugin_fault(bad + "answer_flags " + std::to_string(flags) +
                        (request.compact ? " holds bits this host does not know"
                                         : " marks a compact answer the host did not ask for"));
  }
  const bool compact = flags != 0;
  if (compact && answer.positions != nullptr) {
    return plugin_fault(bad +
                        "a compact answer (FULCRUM_ANSWER_COMPACT) with positions; "
                        "its plans are by rule and positions must be NULL");
  }
  return compact;
}

}  // namespace fulcrum::host::detail
