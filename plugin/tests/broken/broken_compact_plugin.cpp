// A scheduler whose compact answers (ABI 1.4) promise a plan they do not
// give; the host must refuse it on the rank that expands the slot. One
// build per kind, FULCRUM_BROKEN_<kind>:
//   compact_out_of_range  slot 0's rule plans a position past its row
//   compact_repeat        slot 0's rule plans one position twice
//   compact_shard_len     slot 0's rule plans one more pad per member than
//                         the schedule stated (a valid plan of another shape)
//   compact_rank_plan     slot rules plan a valid plan of the stated shape,
//                         but another one on a rank whose RANK is odd (each
//                         member's shard in reverse order): the members of
//                         a slot expand it differently
//   compact_unknown_rule  slot 0's rule names a CP strategy the plugin does
//                         not have
//   compact_weights_<w>   slot 0 states member weights (ABI 1.5) the host
//                         must refuse when it copies the answer: nan, inf,
//                         negative, zero_sum (all 0), count (one more than
//                         its members), overflow (each 1e308: finite, their
//                         sum is not)
// and answers the host must refuse before any slot is expanded (the SDK's
// table with its schedule hook wrapped, as a plugin written without the
// SDK could answer):
//   compact_unasked       a full request answered compactly (flag set,
//                         positions NULL)
//   compact_unknown_bit   answer_flags holds a bit no ABI defines
//   compact_with_positions a compact answer with a positions array
//   compact_null_rule     a compact answer whose slot 0 names no rule
//   compact_weights_alone slot_weights without slot_weight_offsets (ABI 1.5)
//   compact_weights_full  a full answer (positions written) with weights
//   compact_weight_offsets_back  slot 0's weights, then an offset of
//                         INT64_MIN (not non-decreasing; subtracting it
//                         from the offset before overflows)
// Asked for the full answer, it gives a valid fixed schedule (contiguous
// plans, round-robin groups), as a 1.3 host would see it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/load_balancer.h"
#include "fulcrum/plugin_sdk.h"

namespace {

constexpr std::string_view kBrokenRule = "broken_rule";

class BrokenCompactBalancer final : public fulcrum::LoadBalancer {
 public:
  std::string name() const override { return "broken_compact"; }
  std::vector<std::string> cp_strategies() const override {
    return {"contiguous", std::string(kBrokenRule)};
  }
  std::vector<std::string> dp_strategies() const override { return {"round_robin"}; }
  std::vector<std::string> schedule_strategies() const override { return {"fixed"}; }

  fulcrum::Result<fulcrum::ShardPlan> plan_cp(std::string_view strategy,
                                              const fulcrum::CpWorkload& workload) override {
    if (strategy != "contiguous" && strategy != kBrokenRule) {
      return fulcrum::unsupported("no CP strategy '" + std::string(strategy) + "'");
    }
    fulcrum::ShardPlan plan = fulcrum::contiguous_plan(workload);
    if (strategy != kBrokenRule) return plan;
    plan.strategy_used = std::string(kBrokenRule);
    plan.work.clear();
#if defined(FULCRUM_BROKEN_compact_out_of_range)
    plan.positions[0] = workload.tokens;
#elif defined(FULCRUM_BROKEN_compact_repeat)
    if (workload.tokens > 1) plan.positions[1] = plan.positions[0];
#elif defined(FULCRUM_BROKEN_compact_rank_plan)
    const char* rank = std::getenv("RANK");
    if (rank != nullptr && std::atoi(rank) % 2 == 1) {
      for (std::int32_t r = 0; r < plan.cp_size; ++r) {
        const auto begin = plan.positions.begin() + r * plan.shard_len;
        std::reverse(begin, begin + plan.shard_len);
      }
    }
#else
    // Each member's shard one pad longer: valid, but not the stated shape.
    std::vector<std::int64_t> longer;
    for (std::int32_t r = 0; r < plan.cp_size; ++r) {
      const auto begin = plan.positions.begin() + r * plan.shard_len;
      longer.insert(longer.end(), begin, begin + plan.shard_len);
      longer.push_back(fulcrum::kPadPosition);
    }
    plan.positions = std::move(longer);
    plan.shard_len += 1;
    plan.padding += plan.cp_size;
#endif
    return plan;
  }

  fulcrum::Result<fulcrum::DpPartition> partition_dp(std::string_view /*strategy*/,
                                                     const fulcrum::DpRequest& request) override {
    fulcrum::DpPartition part;
    part.strategy = "round_robin";
    part.ranks.resize(static_cast<std::size_t>(request.num_ranks));
    for (std::size_t i = 0; i < request.lengths.size(); ++i) {
      part.ranks[i % part.ranks.size()].push_back(static_cast<std::int64_t>(i));
    }
    return part;
  }

  fulcrum::Result<fulcrum::Schedule> schedule(std::string_view /*strategy*/,
                                              const fulcrum::ScheduleRequest& request) override {
    auto built = fulcrum::fixed_schedule(
        request, [this](const fulcrum::CpWorkload& w) { return plan_cp("contiguous", w); },
        [this](const fulcrum::DpRequest& r) { return partition_dp("round_robin", r); });
    if (!built || !request.compact) return built;
    fulcrum::Schedule s = std::move(built).value();
    for (fulcrum::ScheduleSlot& slot : s.slots) {
      slot.plan.positions.clear();
      slot.plan.work.clear();
    }
#if defined(FULCRUM_BROKEN_compact_unknown_rule)
    s.slots[0].plan.strategy_used = "no_such_rule";
#else
    s.slots[0].plan.strategy_used = std::string(kBrokenRule);
#if defined(FULCRUM_BROKEN_compact_weights_nan) || defined(FULCRUM_BROKEN_compact_weights_inf) || \
    defined(FULCRUM_BROKEN_compact_weights_negative) ||                                           \
    defined(FULCRUM_BROKEN_compact_weights_zero_sum) ||                                           \
    defined(FULCRUM_BROKEN_compact_weights_count) ||                                              \
    defined(FULCRUM_BROKEN_compact_weights_overflow)
    std::vector<double>& weights = s.slots[0].member_weights;
    weights.assign(s.slots[0].ranks.size(), 1.0);
#if defined(FULCRUM_BROKEN_compact_weights_nan)
    weights[0] = std::numeric_limits<double>::quiet_NaN();
#elif defined(FULCRUM_BROKEN_compact_weights_inf)
    weights[0] = std::numeric_limits<double>::infinity();
#elif defined(FULCRUM_BROKEN_compact_weights_negative)
    weights[0] = -1.0;
#elif defined(FULCRUM_BROKEN_compact_weights_zero_sum)
    weights.assign(weights.size(), 0.0);
#elif defined(FULCRUM_BROKEN_compact_weights_overflow)
    weights.assign(weights.size(), 1e308);
#else
    weights.push_back(1.0);
#endif
#endif
#endif
    return s;
  }
};

#if defined(FULCRUM_BROKEN_compact_unasked) || defined(FULCRUM_BROKEN_compact_unknown_bit) ||      \
    defined(FULCRUM_BROKEN_compact_with_positions) || defined(FULCRUM_BROKEN_compact_null_rule) || \
    defined(FULCRUM_BROKEN_compact_weights_alone) ||                                               \
    defined(FULCRUM_BROKEN_compact_weights_full) ||                                                \
    defined(FULCRUM_BROKEN_compact_weight_offsets_back)
#define FULCRUM_BROKEN_FLAGS 1

using ScheduleHook = fulcrum_status (*)(void*, const fulcrum_schedule_request*, fulcrum_schedule*);

// The SDK's hook; tampered_schedule damages what it answers.
ScheduleHook sdk_schedule = nullptr;
const std::int64_t kStrayPositions[4] = {0, 1, 2, 3};
// Weights for the tampered answers: more than any slot of the tests has
// members, and offsets for up to 64 slots (written per call).
const double kOnes[64] = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
                          1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
                          1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
                          1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,
                          1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
std::int64_t weight_offsets[65] = {};

fulcrum_status tampered_schedule(void* instance, const fulcrum_schedule_request* request,
                                 fulcrum_schedule* out) {
  const fulcrum_status status = sdk_schedule(instance, request, out);
  if (status != FULCRUM_OK ||
      !FULCRUM_HAS_FIELD(fulcrum_schedule, reserved_v1_4, out->struct_size)) {
    return status;
  }
  const bool asked =
      FULCRUM_HAS_FIELD(fulcrum_schedule_request, reserved_v1_4, request->struct_size) &&
      (request->answer_flags & FULCRUM_ANSWER_COMPACT) != 0;
#if defined(FULCRUM_BROKEN_compact_unasked)
  if (!asked) {
    out->answer_flags = FULCRUM_ANSWER_COMPACT;
    out->positions = nullptr;
  }
#elif defined(FULCRUM_BROKEN_compact_unknown_bit)
  out->answer_flags |= 0x4u;
#elif defined(FULCRUM_BROKEN_compact_with_positions)
  if (asked) out->positions = kStrayPositions;
#elif defined(FULCRUM_BROKEN_compact_weights_alone)
  if (asked) out->slot_weights = kOnes;
#elif defined(FULCRUM_BROKEN_compact_weights_full) || \
    defined(FULCRUM_BROKEN_compact_weight_offsets_back)
  if (out->num_slots > 64) return FULCRUM_OK;
  const std::int64_t slots = out->num_slots;
  const std::int64_t first = out->num_slots > 0 ? out->slot_rank_offsets[1] : 0;
  for (std::int64_t s = 1; s <= slots; ++s) weight_offsets[s] = first;  // slot 0's only
#if defined(FULCRUM_BROKEN_compact_weight_offsets_back)
  if (slots > 1) weight_offsets[2] = std::numeric_limits<std::int64_t>::min();
  if (!asked) return FULCRUM_OK;
#else
  if (asked) return FULCRUM_OK;
#endif
  out->slot_weight_offsets = weight_offsets;
  out->slot_weights = kOnes;
#else
  if (asked && out->num_slots > 0) {
    // The SDK's own array of names (the answer's buffers are the plugin's).
    const_cast<const char**>(out->slot_plan_strategies)[0] = nullptr;
  }
#endif
  return FULCRUM_OK;
}
#endif

}  // namespace

#if defined(FULCRUM_BROKEN_FLAGS)
extern "C" FULCRUM_PLUGIN_API const fulcrum_plugin_v1* fulcrum_get_plugin(void) {
  static const fulcrum_plugin_v1 table = [] {
    fulcrum_plugin_v1 t = *::fulcrum::sdk::PluginAdapter<BrokenCompactBalancer>::table();
    sdk_schedule = t.schedule;
    t.schedule = &tampered_schedule;
    return t;
  }();
  return &table;
}
#else
FULCRUM_EXPORT_PLUGIN(BrokenCompactBalancer)
#endif
