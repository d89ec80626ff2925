// A scheduler whose compact answers (ABI 1.4) promise a plan they do not
// give; the host must refuse it on the rank that expands the slot. One
// build per kind, FULCRUM_BROKEN_<kind>:
//   compact_out_of_range  slot 0's rule plans a position past its row
//   compact_repeat        slot 0's rule plans one position twice
//   compact_shard_len     slot 0's rule plans one more pad per member than
//                         the schedule stated (a valid plan of another shape)
//   compact_weights_<w>   slot 0 states member weights (ABI 1.5) the host
//                         must refuse when it copies the answer: nan, inf,
//                         negative, zero_sum (all 0), count (one more than
//                         its members)
// Asked for the full answer, it gives a valid fixed schedule (contiguous
// plans, round-robin groups), as a 1.3 host would see it.
#include <cstddef>
#include <cstdint>
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
    fulcrum::ShardPlan plan = fulcrum::contiguous_plan(workload);
    if (strategy != kBrokenRule) return plan;
    plan.strategy_used = std::string(kBrokenRule);
    plan.work.clear();
#if defined(FULCRUM_BROKEN_compact_out_of_range)
    plan.positions[0] = workload.tokens;
#elif defined(FULCRUM_BROKEN_compact_repeat)
    if (workload.tokens > 1) plan.positions[1] = plan.positions[0];
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
    s.slots[0].plan.strategy_used = std::string(kBrokenRule);
#if defined(FULCRUM_BROKEN_compact_weights_nan) || defined(FULCRUM_BROKEN_compact_weights_inf) || \
    defined(FULCRUM_BROKEN_compact_weights_negative) ||                                           \
    defined(FULCRUM_BROKEN_compact_weights_zero_sum) ||                                           \
    defined(FULCRUM_BROKEN_compact_weights_count)
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
#else
    weights.push_back(1.0);
#endif
#endif
    return s;
  }
};

}  // namespace

FULCRUM_EXPORT_PLUGIN(BrokenCompactBalancer)
