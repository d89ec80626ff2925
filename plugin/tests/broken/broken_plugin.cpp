// Deliberately broken plugins, one source compiled five ways (see
// CMakeLists.txt). Each is broken in one way the host must catch and report
// clearly instead of crashing:
//   FULCRUM_BROKEN_wrong_major      table says ABI major 2
//   FULCRUM_BROKEN_short_table      struct_size smaller than the v1.0 table
//   FULCRUM_BROKEN_null_pointer     plan_cp is NULL
//   FULCRUM_BROKEN_throwing         the C++ plan_cp / partition_dp throw
//   FULCRUM_BROKEN_non_permutation  plans repeat a position, partitions a sample
// The first three are written by hand in C style, because the SDK cannot
// produce them; the last two use the SDK, whose adapter is what is under test.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/c_api.h"
#include "fulcrum/plugin_sdk.h"

#if defined(FULCRUM_BROKEN_wrong_major) || defined(FULCRUM_BROKEN_short_table) || \
    defined(FULCRUM_BROKEN_null_pointer)

namespace {

const char* const kCpStrategies[] = {"contiguous"};
const char* const kDpStrategies[] = {"round_robin"};
int instance_token = 0;

fulcrum_status broken_create(const fulcrum_host_services* /*host*/, void** instance) {
  *instance = &instance_token;
  return FULCRUM_OK;
}
void broken_destroy(void* /*instance*/) {}
[[maybe_unused]] fulcrum_status broken_plan_cp(void* /*instance*/,
                                               const fulcrum_cp_request* /*request*/,
                                               fulcrum_cp_plan* /*plan*/) {
  return FULCRUM_INTERNAL;
}
void broken_release_plan(void* /*instance*/, fulcrum_cp_plan* /*plan*/) {}
fulcrum_status broken_partition_dp(void* /*instance*/, const fulcrum_dp_request* /*request*/,
                                   fulcrum_dp_result* /*result*/) {
  return FULCRUM_INTERNAL;
}
const char* broken_last_error(void* /*instance*/) { return "this plugin is broken on purpose"; }

#if defined(FULCRUM_BROKEN_wrong_major)
constexpr std::uint32_t kStructSize = FULCRUM_PLUGIN_V1_0_SIZE;
constexpr std::uint16_t kAbiMajor = FULCRUM_ABI_MAJOR + 1;
constexpr const char* kName = "broken_wrong_major";
#elif defined(FULCRUM_BROKEN_short_table)
// As if built against a header that lacked the last two functions.
constexpr std::uint32_t kStructSize = offsetof(fulcrum_plugin_v1, partition_dp);
constexpr std::uint16_t kAbiMajor = FULCRUM_ABI_MAJOR;
constexpr const char* kName = "broken_short_table";
#else
constexpr std::uint32_t kStructSize = FULCRUM_PLUGIN_V1_0_SIZE;
constexpr std::uint16_t kAbiMajor = FULCRUM_ABI_MAJOR;
constexpr const char* kName = "broken_null_pointer";
#endif

#if defined(FULCRUM_BROKEN_null_pointer)
constexpr auto kPlanCp = nullptr;
#else
constexpr auto kPlanCp = &broken_plan_cp;
#endif

const fulcrum_plugin_v1 kTable = {
    kStructSize,
    kAbiMajor,
    FULCRUM_ABI_MINOR,
    kName,
    kCpStrategies,
    1,
    1,
    kDpStrategies,
    &broken_create,
    &broken_destroy,
    kPlanCp,
    &broken_release_plan,
    &broken_partition_dp,
    &broken_last_error,
};

}  // namespace

extern "C" FULCRUM_PLUGIN_API const fulcrum_plugin_v1* fulcrum_get_plugin(void) { return &kTable; }

#elif defined(FULCRUM_BROKEN_throwing)

namespace {

class ThrowingBalancer final : public fulcrum::LoadBalancer {
 public:
  ThrowingBalancer() = default;
  explicit ThrowingBalancer(fulcrum::sdk::Host host) : host_(host) {}

  std::string name() const override { return "broken_throwing"; }
  std::vector<std::string> cp_strategies() const override { return {"contiguous"}; }
  std::vector<std::string> dp_strategies() const override { return {"round_robin"}; }

  fulcrum::Result<fulcrum::ShardPlan> plan_cp(std::string_view strategy,
                                              const fulcrum::CpWorkload& /*workload*/) override {
    // Says so through the host first, so tests can see the log callback work.
    host_.log(FULCRUM_LOG_WARNING, "about to throw from plan_cp");
    throw std::runtime_error("broken_throwing plan_cp always throws (strategy " +
                             std::string(strategy) + ")");
  }

  fulcrum::Result<fulcrum::DpPartition> partition_dp(
      std::string_view /*strategy*/, const fulcrum::DpRequest& /*request*/) override {
    throw std::logic_error("broken_throwing partition_dp always throws");
  }

 private:
  fulcrum::sdk::Host host_;
};

}  // namespace

FULCRUM_EXPORT_PLUGIN(ThrowingBalancer)

#elif defined(FULCRUM_BROKEN_non_permutation)

namespace {

// Contiguous sharding and round-robin dispatch, each with one entry wrong.
class NonPermutationBalancer final : public fulcrum::LoadBalancer {
 public:
  std::string name() const override { return "broken_non_permutation"; }
  std::vector<std::string> cp_strategies() const override { return {"contiguous"}; }
  std::vector<std::string> dp_strategies() const override { return {"round_robin"}; }

  fulcrum::Result<fulcrum::ShardPlan> plan_cp(std::string_view strategy,
                                              const fulcrum::CpWorkload& workload) override {
    if (strategy != "contiguous") return fulcrum::not_found("no strategy " + std::string(strategy));
    fulcrum::ShardPlan plan;
    plan.cp_size = workload.cp_size;
    plan.shard_len = (workload.tokens + workload.cp_size - 1) / workload.cp_size;
    plan.positions.assign(static_cast<std::size_t>(plan.shard_len * plan.cp_size),
                          fulcrum::kPadPosition);
    for (std::int64_t i = 0; i < workload.tokens; ++i) plan.positions[i] = i;
    plan.padding = plan.shard_len * plan.cp_size - workload.tokens;
    // Position 0 twice, position 1 never.
    if (workload.tokens >= 2) plan.positions[1] = 0;
    plan.strategy_used = "contiguous";
    return plan;
  }

  fulcrum::Result<fulcrum::DpPartition> partition_dp(std::string_view strategy,
                                                     const fulcrum::DpRequest& request) override {
    if (strategy != "round_robin") {
      return fulcrum::not_found("no strategy " + std::string(strategy));
    }
    fulcrum::DpPartition part;
    part.strategy = "round_robin";
    part.ranks.resize(static_cast<std::size_t>(request.num_ranks));
    for (std::size_t i = 0; i < request.lengths.size(); ++i) {
      // Sample 0 where sample 1 belongs.
      part.ranks[i % part.ranks.size()].push_back(i == 1 ? 0 : static_cast<std::int64_t>(i));
    }
    return part;
  }
};

}  // namespace

FULCRUM_EXPORT_PLUGIN(NonPermutationBalancer)

#else
#error "define one FULCRUM_BROKEN_<kind> (see plugin/tests/broken/CMakeLists.txt)"
#endif
