// The placement hook across the plugin boundary: the host validates every
// schedule a plugin returns (broken fixtures refused by name and rule),
// serves its built-in fixed schedule to a balancer without a scheduler and
// says so, and refuses a table whose scheduler cannot be released.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fulcrum/c_api.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/host/plugin_loader.h"
#include "loader_test_support.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum::host {
namespace {

namespace fs = std::filesystem;
using test::test_plugin;

LoaderOptions quiet_options() {
  LoaderOptions o;
  o.check_permissions = false;
  o.log = nullptr;
  return o;
}

#define ASSERT_BUILT(file) \
  ASSERT_TRUE(fs::exists(test_plugin(file))) << test_plugin(file) << " is missing: build it"

// W = 4, T = 1000: the fixed scheduler needs CP groups of 4 for the
// 2500-token document, so its rows run on every rank, one wave each.
ScheduleRequest batch_request() {
  ScheduleRequest r;
  r.doc_lengths = {2500, 1800, 900, 700, 400};
  r.world_size = 4;
  r.max_tokens_per_rank = 1000;
  r.block_size = 64;
  auto profile = builtin_cost_profile("h100_7b");
  if (profile) r.profile = *profile;
  return r;
}

std::vector<std::string> slot_plan_strategies(const Schedule& s) {
  std::vector<std::string> names;
  for (const ScheduleSlot& slot : s.slots) names.push_back(slot.plan.strategy_used);
  return names;
}

// --- the real plugin's schedulers ------------------------------------------

// Through the C table and back, a schedule must be the one the scheduler
// made: same slots, ranks, pieces, waves and plan positions.
void expect_same_schedule(const Schedule& through, const Schedule& direct) {
  EXPECT_EQ(through.strategy_used, direct.strategy_used);
  EXPECT_EQ(through.fallback_reason, direct.fallback_reason);
  ASSERT_EQ(through.slots.size(), direct.slots.size());
  for (std::size_t i = 0; i < direct.slots.size(); ++i) {
    SCOPED_TRACE("slot " + std::to_string(i));
    const ScheduleSlot& a = through.slots[i];
    const ScheduleSlot& b = direct.slots[i];
    EXPECT_EQ(a.ranks, b.ranks);
    EXPECT_EQ(a.wave, b.wave);
    ASSERT_EQ(a.pieces.size(), b.pieces.size());
    for (std::size_t p = 0; p < b.pieces.size(); ++p) {
      EXPECT_EQ(a.pieces[p].doc, b.pieces[p].doc);
      EXPECT_EQ(a.pieces[p].offset, b.pieces[p].offset);
      EXPECT_EQ(a.pieces[p].length, b.pieces[p].length);
    }
    EXPECT_EQ(a.plan.cp_size, b.plan.cp_size);
    EXPECT_EQ(a.plan.shard_len, b.plan.shard_len);
    EXPECT_EQ(a.plan.padding, b.plan.padding);
    EXPECT_EQ(a.plan.positions, b.plan.positions);
    EXPECT_EQ(a.plan.strategy_used, b.plan.strategy_used);
  }
}

TEST(PluginScheduleTest, EverySchedulerCrossesTheBoundaryUnchangedAndValid) {
  auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  LoadBalancer& plugin = **loaded;
  EXPECT_EQ(plugin.schedule_strategies(), schedule_strategy_names());
  ASSERT_FALSE(plugin.schedule_strategies().empty());

  std::vector<ScheduleRequest> requests;
  requests.push_back(batch_request());
  ScheduleRequest cut = batch_request();  // one document longer than W x T
  cut.doc_lengths = {9000, 300, 1500, 64, 2200, 777};
  cut.world_size = 3;
  cut.max_tokens_per_rank = 1200;
  cut.mask = MaskSpec{MaskKind::kSliding, 256, {}};
  requests.push_back(cut);
  ScheduleRequest wide = batch_request();
  wide.doc_lengths.clear();
  for (int i = 0; i < 40; ++i) wide.doc_lengths.push_back(100 + (i * 733) % 3100);
  wide.world_size = 16;
  wide.max_tokens_per_rank = 2048;
  requests.push_back(wide);
  // ABI 1.2 group shapes cross too (Megatron-core's at 16 ranks: aligned
  // 1, 2, 4 and 8, the world, every rank in every wave, waves a multiple of 2).
  ScheduleRequest shaped = wide;
  shaped.group_shapes.sizes = 0b1111;
  shaped.group_shapes.world = true;
  shaped.group_shapes.aligned = true;
  shaped.group_shapes.every_wave = true;
  shaped.group_shapes.wave_multiple = 2;
  requests.push_back(shaped);

  for (std::size_t r = 0; r < requests.size(); ++r) {
    const ScheduleRequest& request = requests[r];
    ASSERT_TRUE(validate_schedule_request(request).is_ok())
        << validate_schedule_request(request).message();
    for (const std::string& name : plugin.schedule_strategies()) {
      SCOPED_TRACE("request " + std::to_string(r) + ", scheduler " + name);
      auto through = plugin.schedule(name, request);
      auto direct = run_schedule_strategy(name, request);
      ASSERT_EQ(through.is_ok(), direct.is_ok())
          << (through.is_ok() ? direct.status().message() : through.status().message());
      if (!direct.is_ok()) {
        EXPECT_EQ(through.status().code(), direct.status().code());
        continue;
      }
      EXPECT_TRUE(validate_schedule(request, *through).is_ok());
      expect_same_schedule(*through, *direct);
    }
  }
  auto unknown = plugin.schedule("no_such_scheduler", batch_request());
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(unknown.status().message(), "plugin 'fulcrum' strategy 'no_such_scheduler'");
}

// --- broken schedules ------------------------------------------------------

struct BrokenCase {
  const char* kind;
  const char* rule;  // what the refusal must say
};

class BrokenScheduleTest : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenScheduleTest, IsRefusedNamingPluginSchedulerAndRule) {
  const std::string file = std::string("fulcrum_broken_schedule_") + GetParam().kind;
  ASSERT_BUILT(file);
  auto loaded = load_plugin(test_plugin(file), quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ((*loaded)->schedule_strategies(), std::vector<std::string>{"fixed"});
  const ScheduleRequest request = batch_request();
  ASSERT_TRUE(validate_schedule_request(request).is_ok());
  auto schedule = (*loaded)->schedule("fixed", request);
  ASSERT_FALSE(schedule.is_ok());
  EXPECT_EQ(schedule.status().code(), StatusCode::kPluginFault);
  const std::string message = schedule.status().message();
  EXPECT_HAS(message, "plugin 'broken_schedule' scheduler 'fixed' returned an invalid schedule: ");
  EXPECT_HAS(message, GetParam().rule);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Rules, BrokenScheduleTest,
    ::testing::Values(BrokenCase{"missing_piece", "never places document 1"},
                      BrokenCase{"over_budget", "more than 1 x T = 1000"},
                      BrokenCase{"wave_clash", "a rank runs one slot per wave"},
                      BrokenCase{"bad_plan", "slot 0: plan rank 0 index 1 repeats position 0"}),
    [](const auto& test) { return std::string(test.param.kind); });

TEST(BrokenScheduleTableTest, SchedulerWithoutReleaseIsRefusedAtLoad) {
  ASSERT_BUILT("fulcrum_broken_schedule_no_release");
  auto loaded = load_plugin(test_plugin("fulcrum_broken_schedule_no_release"), quiet_options());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInternal);
  EXPECT_HAS(loaded.status().message(), "schedule is set but release_schedule is null");
}

// --- balancers without a scheduler -----------------------------------------

// The compat plugin's table ends at v1.0 with poison after it: the host must
// not read a schedule hook there, and serves its own fixed schedule from the
// plugin's CP plans.
TEST(BuiltinScheduleTest, Abi10PluginGetsTheHostsFixedScheduleAndIsToldSo) {
  ASSERT_BUILT("fulcrum_compat_v1_0");
  auto loaded = load_plugin(test_plugin("fulcrum_compat_v1_0"), quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ((*loaded)->schedule_strategies(), std::vector<std::string>{"fixed"});
  const ScheduleRequest request = batch_request();
  for (const char* asked : {"fixed", "hybrid"}) {
    SCOPED_TRACE(asked);
    auto schedule = (*loaded)->schedule(asked, request);
    ASSERT_TRUE(schedule.is_ok()) << schedule.status().message();
    EXPECT_TRUE(validate_schedule(request, *schedule).is_ok());
    EXPECT_EQ(schedule->strategy_used, "fixed");
    EXPECT_HAS(schedule->fallback_reason,
               "plugin 'compat_v1_0' speaks ABI 1.0, which has no schedule hook; the host's "
               "built-in fixed schedule served");
    EXPECT_EQ(schedule->fallback_reason.find("instead of") != std::string::npos,
              std::string(asked) != "fixed");
    // Every row was planned by the plugin, not the host's fallback.
    for (const std::string& name : slot_plan_strategies(*schedule)) EXPECT_EQ(name, "contiguous");
  }
}

TEST(BuiltinScheduleTest, TheBuiltinBalancerServesFixed) {
  auto balancer = builtin_balancer();
  EXPECT_EQ(balancer->schedule_strategies(), std::vector<std::string>{"fixed"});
  const ScheduleRequest request = batch_request();
  auto fixed = balancer->schedule("fixed", request);
  ASSERT_TRUE(fixed.is_ok()) << fixed.status().message();
  EXPECT_TRUE(validate_schedule(request, *fixed).is_ok());
  EXPECT_TRUE(fixed->fallback_reason.empty()) << fixed->fallback_reason;
  auto hybrid = balancer->schedule("hybrid", request);
  ASSERT_TRUE(hybrid.is_ok()) << hybrid.status().message();
  EXPECT_EQ(hybrid->strategy_used, "fixed");
  EXPECT_HAS(hybrid->fallback_reason, "the built-in balancer has no scheduler 'hybrid'");
}

TEST(BuiltinScheduleTest, InvalidRequestIsRefusedBeforeAnyPluginCall) {
  ASSERT_BUILT("fulcrum_compat_v1_0");
  auto loaded = load_plugin(test_plugin("fulcrum_compat_v1_0"), quiet_options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  ScheduleRequest request = batch_request();
  request.doc_lengths.push_back(0);
  auto schedule = (*loaded)->schedule("fixed", request);
  ASSERT_FALSE(schedule.is_ok());
  EXPECT_EQ(schedule.status().code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(schedule.status().message(), "document 5 has length 0");
}

}  // namespace
}  // namespace fulcrum::host
