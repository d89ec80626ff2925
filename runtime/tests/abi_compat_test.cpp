// ABI minor-version compatibility in both directions (c_api.h, rules 2 and 3):
// plugins of an older and of a newer minor version under this tree's host,
// and this tree's plugin under an older and a newer host. The other-version
// plugins are plain C (plugin/tests/abi/compat_plugin.c); the other-version
// hosts are written here against the raw table.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fulcrum/c_api.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/host/plugin_loader.h"
#include "loader_test_support.h"

#ifndef FULCRUM_COMPAT_PLUGIN_DIR
#error "FULCRUM_COMPAT_PLUGIN_DIR must name the directory of the compat test plugins"
#endif

namespace fulcrum::host {
namespace {

using Captured = test::LogCapture;

std::string compat_plugin(const std::string& kind) {
  return std::string(FULCRUM_COMPAT_PLUGIN_DIR) + "/libfulcrum_compat_" + kind + ".so";
}

CpWorkload causal_row(std::int64_t tokens, std::int32_t cp_size) {
  CpWorkload w;
  w.tokens = tokens;
  w.cp_size = cp_size;
  return w;
}

// The host's CP and DP paths through a plugin, checked against the layouts
// the compat plugins promise (contiguous, round robin).
void expect_serves_cp_and_dp(LoadBalancer& balancer) {
  const CpWorkload row = causal_row(1001, 4);
  auto plan = balancer.plan_cp("contiguous", row);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_TRUE(validate_plan(row, *plan).is_ok());
  EXPECT_EQ(plan->shard_len, 251);
  EXPECT_EQ(plan->positions[251], 251);  // rank 1 starts where rank 0 ends
  EXPECT_EQ(plan->padding, 3);

  DpRequest request;
  request.lengths = {5, 1, 9, 3, 3, 7, 2};
  request.num_ranks = 3;
  auto part = balancer.partition_dp("round_robin", request);
  ASSERT_TRUE(part.is_ok()) << part.status().message();
  ASSERT_EQ(part->ranks.size(), 3u);
  EXPECT_EQ(part->ranks[0], (std::vector<std::int64_t>{0, 3, 6}));
  EXPECT_EQ(part->ranks[1], (std::vector<std::int64_t>{1, 4}));
  EXPECT_EQ(part->ranks[2], (std::vector<std::int64_t>{2, 5}));
}

// --- older and newer plugins under this host ---------------------------------

// Every byte past its v1.0 table is poison: reading a newer field would crash.
TEST(AbiCompatTest, Abi10PluginLoadsAndServesCpAndDp) {
  Captured captured;
  auto loaded = load_plugin(compat_plugin("v1_0"), captured.options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ((*loaded)->name(), "compat_v1_0");
  EXPECT_TRUE(captured.saw("(ABI 1.0)")) << (captured.lines.empty() ? "" : captured.lines[0].text);
  expect_serves_cp_and_dp(**loaded);
}

TEST(AbiCompatTest, NewerMinorPluginLoadsAndIsServedTodaysRequests) {
  Captured captured;
  auto loaded = load_plugin(compat_plugin("next_minor"), captured.options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ((*loaded)->name(), "compat_next_minor");
  EXPECT_TRUE(captured.saw("newer than this host's ABI"));
  expect_serves_cp_and_dp(**loaded);
  // The plugin saw this host's requests as the shorter ones they are and did
  // not read the fields it knows past them.
  EXPECT_TRUE(captured.saw("cp request struct_size " +
                           std::to_string(FULCRUM_CP_REQUEST_V1_5_SIZE) + ": next_field absent"));
  EXPECT_TRUE(captured.saw("dp request struct_size " +
                           std::to_string(FULCRUM_DP_REQUEST_V1_0_SIZE) + ": next_field absent"));
  // Its table is longer than 1.1's but leaves the schedule hook unset: the
  // host's fixed schedule serves, from the plugin's plans, and says so.
  EXPECT_EQ((*loaded)->schedule_strategies(), std::vector<std::string>{"fixed"});
  ScheduleRequest request;
  request.doc_lengths = {700, 300, 1200};
  request.world_size = 2;
  request.max_tokens_per_rank = 800;
  request.profile = builtin_cost_profile("h100_7b").value();
  auto schedule = (*loaded)->schedule("fixed", request);
  ASSERT_TRUE(schedule.is_ok()) << schedule.status().message();
  EXPECT_TRUE(validate_schedule(request, *schedule).is_ok());
  EXPECT_HAS(schedule->fallback_reason, "plugin 'compat_next_minor' has no scheduler");
}

// --- this tree's plugin under older and newer hosts --------------------------

// The raw table of the real plugin, as a host of another version sees it.
class RawPlugin {
 public:
  RawPlugin() {
    handle_ = dlopen(FULCRUM_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) return;
    auto entry = reinterpret_cast<fulcrum_get_plugin_fn>(dlsym(handle_, FULCRUM_PLUGIN_ENTRY));
    if (entry != nullptr) table_ = entry();
  }
  ~RawPlugin() {
    if (table_ != nullptr && instance_ != nullptr) table_->destroy(instance_);
    if (handle_ != nullptr) dlclose(handle_);
  }
  RawPlugin(const RawPlugin&) = delete;
  RawPlugin& operator=(const RawPlugin&) = delete;

  const fulcrum_plugin_v1* table() const { return table_; }
  void* create(const fulcrum_host_services* services) {
    if (table_->create(services, &instance_) != FULCRUM_OK) instance_ = nullptr;
    return instance_;
  }

 private:
  void* handle_ = nullptr;
  const fulcrum_plugin_v1* table_ = nullptr;
  void* instance_ = nullptr;
};

constexpr std::int64_t kPoison = 0x5a5a5a5a5a5a5a5a;

// A struct as a host of the next minor version passes it: today's fields,
// then one appended after them, and a struct_size that says so.
template <typename Today>
struct Next {
  Today today;
  std::int64_t next_field;
};
// Zeroed but for its struct_size, which covers next_field, and next_field,
// poisoned: a plugin that writes past what it knows changes it.
template <typename NextStruct>
NextStruct poisoned() {
  NextStruct n{};
  n.today.struct_size = FULCRUM_STRUCT_SIZE(NextStruct, next_field);
  n.next_field = kPoison;
  return n;
}
using NextCpRequest = Next<fulcrum_cp_request>;
using NextCpPlan = Next<fulcrum_cp_plan>;
using NextDpRequest = Next<fulcrum_dp_request>;
using NextDpResult = Next<fulcrum_dp_result>;
using NextHostServices = Next<fulcrum_host_services>;
using NextScheduleRequest = Next<fulcrum_schedule_request>;
using NextSchedule = Next<fulcrum_schedule>;

TEST(AbiCompatTest, TodaysPluginServesANewerHostAndLeavesItsNewFieldsAlone) {
  RawPlugin plugin;
  ASSERT_NE(plugin.table(), nullptr) << dlerror();
  const fulcrum_plugin_v1& t = *plugin.table();
  ASSERT_GE(t.struct_size, FULCRUM_PLUGIN_V1_0_SIZE);

  auto services = poisoned<NextHostServices>();
  void* instance = plugin.create(&services.today);
  ASSERT_NE(instance, nullptr);

  const std::int64_t docs[] = {300, 700};
  auto request = poisoned<NextCpRequest>();
  request.today.cp_size = 4;
  request.today.tokens = 1000;
  request.today.block_size = 16;
  request.today.doc_lengths = docs;
  request.today.num_docs = 2;
  request.today.mask_kind = FULCRUM_MASK_CAUSAL;
  request.today.strategy = "head_tail";

  auto answer = poisoned<NextCpPlan>();
  ASSERT_EQ(t.plan_cp(instance, &request.today, &answer.today), FULCRUM_OK)
      << t.last_error(instance);
  EXPECT_EQ(answer.next_field, kPoison) << "the plugin wrote past the fields it knows";
  ShardPlan plan;
  plan.cp_size = answer.today.cp_size;
  plan.shard_len = answer.today.shard_len;
  plan.positions.assign(answer.today.positions,
                        answer.today.positions + plan.shard_len * plan.cp_size);
  plan.padding = answer.today.padding;
  t.release_plan(instance, &answer.today);
  CpWorkload row = causal_row(1000, 4);
  row.doc_lengths = {300, 700};
  row.block_size = 16;
  EXPECT_TRUE(validate_plan(row, plan).is_ok()) << validate_plan(row, plan).message();

  const std::int64_t lengths[] = {4, 8, 1, 6, 2};
  auto dp = poisoned<NextDpRequest>();
  dp.today.num_ranks = 2;
  dp.today.lengths = lengths;
  dp.today.num_samples = 5;
  dp.today.cost_kind = FULCRUM_COST_TOKENS;
  dp.today.strategy = "round_robin";
  std::int64_t offsets[3] = {-1, -1, -1};
  std::int64_t samples[5] = {-1, -1, -1, -1, -1};
  auto result = poisoned<NextDpResult>();
  result.today.num_ranks = 2;
  result.today.rank_offsets = offsets;
  result.today.samples = samples;
  ASSERT_EQ(t.partition_dp(instance, &dp.today, &result.today), FULCRUM_OK)
      << t.last_error(instance);
  EXPECT_EQ(result.next_field, kPoison);
  EXPECT_EQ((std::vector<std::int64_t>(offsets, offsets + 3)),
            (std::vector<std::int64_t>{0, 3, 5}));
  EXPECT_EQ((std::vector<std::int64_t>(samples, samples + 5)),
            (std::vector<std::int64_t>{0, 2, 4, 1, 3}));
}

// A host built at ABI 1.0 knows only the v1.0 table and sends v1.0 structs.
TEST(AbiCompatTest, TodaysPluginServesAnAbi10Host) {
  RawPlugin plugin;
  ASSERT_NE(plugin.table(), nullptr) << dlerror();
  // An ABI 1.0 host copies no more of the table than v1.0 holds.
  fulcrum_plugin_v1 t{};
  std::memcpy(&t, plugin.table(), FULCRUM_PLUGIN_V1_0_SIZE);
  EXPECT_EQ(t.abi_major, 1);
  EXPECT_GE(t.abi_minor, 0);

  fulcrum_host_services services{};
  services.struct_size = FULCRUM_HOST_SERVICES_V1_0_SIZE;
  void* instance = plugin.create(&services);
  ASSERT_NE(instance, nullptr);

  fulcrum_cp_request request{};
  request.struct_size = FULCRUM_CP_REQUEST_V1_0_SIZE;
  request.cp_size = 2;
  request.tokens = 8;
  request.block_size = 128;
  request.mask_kind = FULCRUM_MASK_CAUSAL;
  request.strategy = "contiguous";
  fulcrum_cp_plan answer{};
  answer.struct_size = FULCRUM_CP_PLAN_V1_0_SIZE;
  ASSERT_EQ(t.plan_cp(instance, &request, &answer), FULCRUM_OK) << t.last_error(instance);
  ASSERT_EQ(answer.shard_len, 4);
  EXPECT_EQ((std::vector<std::int64_t>(answer.positions, answer.positions + 8)),
            (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  t.release_plan(instance, &answer);
}

// The placement hook under a newer host, and its structs shorter than the
// version that introduced them refused.
TEST(AbiCompatTest, TodaysSchedulerServesANewerHostAndRefusesShortStructs) {
  RawPlugin plugin;
  ASSERT_NE(plugin.table(), nullptr) << dlerror();
  const fulcrum_plugin_v1& t = *plugin.table();
  ASSERT_TRUE(FULCRUM_HAS_FIELD(fulcrum_plugin_v1, release_schedule, t.struct_size));
  ASSERT_NE(t.schedule, nullptr);
  void* instance = plugin.create(nullptr);
  ASSERT_NE(instance, nullptr);

  const CostProfile profile = builtin_cost_profile("h100_7b").value();
  const std::int64_t docs[] = {2500, 1800, 900, 700, 400};
  auto request = poisoned<NextScheduleRequest>();
  request.today.world_size = 4;
  request.today.max_tokens_per_rank = 1000;
  request.today.doc_lengths = docs;
  request.today.num_docs = 5;
  request.today.mask_kind = FULCRUM_MASK_CAUSAL;
  request.today.block_size = 64;
  request.today.strategy = "hybrid";
  request.today.profile_name = profile.name.c_str();
  request.today.tile_seconds = profile.tile_seconds;
  request.today.token_seconds = profile.token_seconds;
  request.today.slot_seconds = profile.slot_seconds;
  request.today.kv_bytes_per_token = profile.kv_bytes_per_token;
  request.today.intra_node_bytes_per_second = profile.intra_node_bytes_per_second;
  request.today.inter_node_bytes_per_second = profile.inter_node_bytes_per_second;
  request.today.latency_seconds = profile.latency_seconds;
  request.today.ranks_per_node = profile.ranks_per_node;

  auto answer = poisoned<NextSchedule>();
  ASSERT_EQ(t.schedule(instance, &request.today, &answer.today), FULCRUM_OK)
      << t.last_error(instance);
  EXPECT_EQ(answer.next_field, kPoison) << "the plugin wrote past the fields it knows";
  EXPECT_GT(answer.today.num_slots, 0);
  EXPECT_STREQ(answer.today.strategy_used, "hybrid");
  // Every token of the batch is in exactly one piece.
  std::int64_t placed = 0;
  for (std::int64_t p = 0; p < answer.today.slot_piece_offsets[answer.today.num_slots]; ++p) {
    placed += answer.today.piece_lengths[p];
  }
  EXPECT_EQ(placed, 2500 + 1800 + 900 + 700 + 400);
  t.release_schedule(instance, &answer.today);
  EXPECT_EQ(answer.today.plugin_data, nullptr);
  EXPECT_EQ(answer.next_field, kPoison);

  request.today.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE - 8;
  fulcrum_schedule short_answer{};
  short_answer.struct_size = FULCRUM_SCHEDULE_V1_1_SIZE;
  EXPECT_EQ(t.schedule(instance, &request.today, &short_answer), FULCRUM_INVALID_ARGUMENT);
  EXPECT_HAS(t.last_error(instance),
             "schedule request struct_size 128 is smaller than the v1.1 "
             "size 136");
  EXPECT_EQ(short_answer.plugin_data, nullptr);
  request.today.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE;
  short_answer.struct_size = FULCRUM_SCHEDULE_V1_1_SIZE - 8;
  EXPECT_EQ(t.schedule(instance, &request.today, &short_answer), FULCRUM_INVALID_ARGUMENT);
  EXPECT_HAS(t.last_error(instance), "schedule struct_size 112 is smaller than the v1.1 size 120");
}

// ABI 1.4's compact answer in both directions. A 1.3 host sends a 160-byte
// request and a 120-byte answer: whatever lies past them (here the compact
// flag) is not the plugin's to read or write, so it answers in full. A 1.4
// host that asks gets positions NULL and the flag set.
TEST(AbiCompatTest, TodaysSchedulerAnswersA13HostInFullAndA14HostCompactly) {
  RawPlugin plugin;
  ASSERT_NE(plugin.table(), nullptr) << dlerror();
  const fulcrum_plugin_v1& t = *plugin.table();
  EXPECT_EQ(t.abi_minor, 6);
  void* instance = plugin.create(nullptr);
  ASSERT_NE(instance, nullptr);
  const CostProfile profile = builtin_cost_profile("h100_7b").value();
  const std::int64_t docs[] = {2500, 1800, 900, 700, 400};
  fulcrum_schedule_request request{};
  request.world_size = 4;
  request.max_tokens_per_rank = 1000;
  request.doc_lengths = docs;
  request.num_docs = 5;
  request.block_size = 64;
  request.strategy = "hybrid";
  request.tile_seconds = profile.tile_seconds;
  request.token_seconds = profile.token_seconds;
  request.slot_seconds = profile.slot_seconds;
  request.kv_bytes_per_token = profile.kv_bytes_per_token;
  request.intra_node_bytes_per_second = profile.intra_node_bytes_per_second;
  request.inter_node_bytes_per_second = profile.inter_node_bytes_per_second;
  request.latency_seconds = profile.latency_seconds;
  request.ranks_per_node = profile.ranks_per_node;
  request.answer_flags = FULCRUM_ANSWER_COMPACT;  // past a 1.3 host's struct: not sent

  request.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_3_SIZE;
  fulcrum_schedule old_answer{};
  old_answer.struct_size = FULCRUM_SCHEDULE_V1_1_SIZE;
  old_answer.answer_flags = 0x5a5a5a5a;  // past the 1.3 host's struct: poison
  ASSERT_EQ(t.schedule(instance, &request, &old_answer), FULCRUM_OK) << t.last_error(instance);
  EXPECT_NE(old_answer.positions, nullptr);
  EXPECT_EQ(old_answer.answer_flags, 0x5a5a5a5au) << "the plugin wrote past a 1.3 answer";
  t.release_schedule(instance, &old_answer);
  EXPECT_EQ(old_answer.answer_flags, 0x5a5a5a5au);

  request.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_4_SIZE;
  fulcrum_schedule answer{};
  answer.struct_size = FULCRUM_SCHEDULE_V1_4_SIZE;
  ASSERT_EQ(t.schedule(instance, &request, &answer), FULCRUM_OK) << t.last_error(instance);
  EXPECT_EQ(answer.positions, nullptr);
  EXPECT_EQ(answer.answer_flags, static_cast<std::uint32_t>(FULCRUM_ANSWER_COMPACT));
  ASSERT_GT(answer.num_slots, 0);
  ASSERT_NE(answer.slot_plan_strategies, nullptr);
  for (std::int32_t s = 0; s < answer.num_slots; ++s) {
    EXPECT_NE(answer.slot_plan_strategies[s], nullptr);
  }
  t.release_schedule(instance, &answer);
  EXPECT_EQ(answer.answer_flags, 0u);
}

// A hybrid request as a 1.4 (or 1.5: the request did not grow) host sends
// it, compact asked, over `docs`.
fulcrum_schedule_request hybrid_request(const CostProfile& profile,
                                        const std::vector<std::int64_t>& docs, std::int32_t world,
                                        std::int64_t budget) {
  fulcrum_schedule_request request{};
  request.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_4_SIZE;
  request.world_size = world;
  request.max_tokens_per_rank = budget;
  request.doc_lengths = docs.data();
  request.num_docs = static_cast<std::int64_t>(docs.size());
  request.block_size = 128;
  request.strategy = "hybrid";
  request.tile_seconds = profile.tile_seconds;
  request.token_seconds = profile.token_seconds;
  request.slot_seconds = profile.slot_seconds;
  request.kv_bytes_per_token = profile.kv_bytes_per_token;
  request.intra_node_bytes_per_second = profile.intra_node_bytes_per_second;
  request.inter_node_bytes_per_second = profile.inter_node_bytes_per_second;
  request.latency_seconds = profile.latency_seconds;
  request.ranks_per_node = profile.ranks_per_node;
  request.row_token_seconds = profile.row_token_seconds;
  request.answer_flags = FULCRUM_ANSWER_COMPACT;
  return request;
}

// Each weighted slot of a 1.5 compact answer: its weights (one per member;
// none on other slots) plan, through a 1.5 cp request, the shape the answer
// states; a 1.4 cp request, whose struct ends before member_weights, has
// none and is refused. Returns how many slots had weights.
int expect_weighted_slots_plan_as_stated(const fulcrum_plugin_v1& t, void* instance,
                                         const fulcrum_schedule& answer, std::int64_t block) {
  int weighted = 0;
  for (std::int32_t s = 0; s < answer.num_slots; ++s) {
    const std::int64_t count = answer.slot_weight_offsets[s + 1] - answer.slot_weight_offsets[s];
    const std::int64_t g = answer.slot_rank_offsets[s + 1] - answer.slot_rank_offsets[s];
    const bool rule = std::string(answer.slot_plan_strategies[s]) == "per_document_weighted";
    EXPECT_EQ(count, rule ? g : 0) << "slot " << s;
    if (!rule || count != g) continue;
    ++weighted;
    std::vector<std::int64_t> lengths(answer.piece_lengths + answer.slot_piece_offsets[s],
                                      answer.piece_lengths + answer.slot_piece_offsets[s + 1]);
    fulcrum_cp_request cp{};
    cp.struct_size = FULCRUM_CP_REQUEST_V1_5_SIZE;
    cp.cp_size = static_cast<std::int32_t>(g);
    for (const std::int64_t length : lengths) cp.tokens += length;
    cp.block_size = block;
    cp.doc_lengths = lengths.data();
    cp.num_docs = static_cast<std::int64_t>(lengths.size());
    cp.strategy = "per_document_weighted";
    cp.member_weights = answer.slot_weights + answer.slot_weight_offsets[s];
    fulcrum_cp_plan plan{};
    plan.struct_size = FULCRUM_CP_PLAN_V1_0_SIZE;
    EXPECT_EQ(t.plan_cp(instance, &cp, &plan), FULCRUM_OK) << t.last_error(instance);
    EXPECT_EQ(plan.shard_len, answer.slot_shard_lens[s]);
    EXPECT_EQ(plan.padding, answer.slot_padding[s]);
    t.release_plan(instance, &plan);
    cp.struct_size = FULCRUM_CP_REQUEST_V1_0_SIZE;  // a 1.4 host: no weights
    EXPECT_EQ(t.plan_cp(instance, &cp, &plan), FULCRUM_INVALID_ARGUMENT);
    EXPECT_HAS(t.last_error(instance), "per_document_weighted needs member_weights");
  }
  return weighted;
}

// ABI 1.5's member weights in both directions, on a batch where hybrid
// plans a slot over two nodes (12,000 tokens on 14 ranks) by
// per_document_weighted. A 1.4 host's answer (128 bytes) cannot carry the
// weights: the plugin answers in full and leaves the bytes past it alone.
// A 1.5 host gets the compact answer with the slot's weights.
TEST(AbiCompatTest, TodaysSchedulerAnswersA14HostInFullAndA15HostWithWeights) {
  RawPlugin plugin;
  ASSERT_NE(plugin.table(), nullptr) << dlerror();
  const fulcrum_plugin_v1& t = *plugin.table();
  void* instance = plugin.create(nullptr);
  ASSERT_NE(instance, nullptr);
  const std::vector<std::int64_t> docs = {12000, 900, 700, 400};
  const fulcrum_schedule_request request =
      hybrid_request(builtin_cost_profile("h100_7b").value(), docs, 16, 1000);

  fulcrum_schedule old_answer{};
  old_answer.struct_size = FULCRUM_SCHEDULE_V1_4_SIZE;
  const auto* poison = reinterpret_cast<const std::int64_t*>(kPoison);
  old_answer.slot_weight_offsets = poison;  // past the 1.4 host's struct
  ASSERT_EQ(t.schedule(instance, &request, &old_answer), FULCRUM_OK) << t.last_error(instance);
  EXPECT_NE(old_answer.positions, nullptr);
  EXPECT_EQ(old_answer.answer_flags, 0u);
  EXPECT_EQ(old_answer.slot_weight_offsets, poison) << "the plugin wrote past a 1.4 answer";
  bool weighted_in_full = false;
  for (std::int32_t s = 0; s < old_answer.num_slots; ++s) {
    weighted_in_full = weighted_in_full ||
                       std::string(old_answer.slot_plan_strategies[s]) == "per_document_weighted";
  }
  EXPECT_TRUE(weighted_in_full) << "the batch no longer has a weighted slot: choose another";
  t.release_schedule(instance, &old_answer);
  EXPECT_EQ(old_answer.slot_weight_offsets, poison);

  fulcrum_schedule answer{};
  answer.struct_size = FULCRUM_SCHEDULE_V1_5_SIZE;
  ASSERT_EQ(t.schedule(instance, &request, &answer), FULCRUM_OK) << t.last_error(instance);
  EXPECT_EQ(answer.positions, nullptr);
  EXPECT_EQ(answer.answer_flags, static_cast<std::uint32_t>(FULCRUM_ANSWER_COMPACT));
  ASSERT_NE(answer.slot_weight_offsets, nullptr);
  ASSERT_NE(answer.slot_weights, nullptr);
  EXPECT_GT(expect_weighted_slots_plan_as_stated(t, instance, answer, request.block_size), 0);
  t.release_schedule(instance, &answer);
  EXPECT_EQ(answer.slot_weight_offsets, nullptr);
  EXPECT_EQ(answer.slot_weights, nullptr);
}

// Shorter than v1.0 is no version at all: refused, with the sizes named.
TEST(AbiCompatTest, TodaysPluginRefusesStructsShorterThanV10) {
  RawPlugin plugin;
  ASSERT_NE(plugin.table(), nullptr) << dlerror();
  const fulcrum_plugin_v1& t = *plugin.table();
  void* instance = plugin.create(nullptr);
  ASSERT_NE(instance, nullptr);
  fulcrum_cp_request request{};
  request.struct_size = FULCRUM_CP_REQUEST_V1_0_SIZE - 8;
  request.cp_size = 2;
  request.tokens = 8;
  request.block_size = 128;
  request.strategy = "contiguous";
  fulcrum_cp_plan answer{};
  answer.struct_size = FULCRUM_CP_PLAN_V1_0_SIZE;
  EXPECT_EQ(t.plan_cp(instance, &request, &answer), FULCRUM_INVALID_ARGUMENT);
  EXPECT_HAS(t.last_error(instance), "cp request struct_size 72 is smaller than the v1.0 size 80");

  request.struct_size = FULCRUM_CP_REQUEST_V1_0_SIZE;
  answer.struct_size = FULCRUM_CP_PLAN_V1_0_SIZE - 8;
  EXPECT_EQ(t.plan_cp(instance, &request, &answer), FULCRUM_INVALID_ARGUMENT);
  EXPECT_HAS(t.last_error(instance), "cp plan struct_size 64 is smaller than the v1.0 size 72");
}

}  // namespace
}  // namespace fulcrum::host
