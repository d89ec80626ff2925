// Deliberately broken plugins, one source compiled nine ways (see
// CMakeLists.txt). Each is broken in one way the host must catch and report
// clearly instead of crashing:
//   FULCRUM_BROKEN_wrong_major      table says ABI major 2
//   FULCRUM_BROKEN_short_table      struct_size smaller than the v1.0 table
//   FULCRUM_BROKEN_null_pointer     plan_cp is NULL
//   FULCRUM_BROKEN_schedule_no_release  an ABI 1.1 table with schedule set
//                                   and release_schedule NULL
//   FULCRUM_BROKEN_throwing         the C++ plan_cp / partition_dp throw
//   FULCRUM_BROKEN_non_permutation  plans repeat a position, partitions a sample
//   FULCRUM_BROKEN_schedule_<how>   schedules that break one rule of the
//                                   contract: missing_piece, over_budget,
//                                   wave_clash (one rank, two slots, one
//                                   wave), bad_plan (a slot's plan repeats a
//                                   position)
//   FULCRUM_BROKEN_scribble         every hook writes into the arrays and the
//                                   strategy name it borrowed read-only, then
//                                   answers validly for what it now sees
//   FULCRUM_BROKEN_lying_counts     counts that promise more than the buffers
//                                   hold: a plan's shard_len, a partition's
//                                   rank offsets; a partition written one
//                                   entry past its buffer
//   FULCRUM_BROKEN_lying_work       valid contiguous plans with per-rank work
//                                   that is not theirs: 1 pair and 1 tile a
//                                   rank, or (cp_size 3) -1000 pairs alone
//   FULCRUM_BROKEN_bad_text         names and reasons that are not UTF-8 or
//                                   hold control characters, errors and log
//                                   lines with terminal escapes
//   FULCRUM_BROKEN_bad_name         a strategy name in its table with a
//                                   terminal escape
// The first four and scribble and lying_counts are written by hand in C
// style, because the SDK cannot produce them; the rest use the SDK, whose
// adapter is what is under test.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/c_api.h"
#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/plugin_sdk.h"

#if defined(FULCRUM_BROKEN_wrong_major) || defined(FULCRUM_BROKEN_short_table) || \
    defined(FULCRUM_BROKEN_null_pointer) || defined(FULCRUM_BROKEN_schedule_no_release)

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
[[maybe_unused]] fulcrum_status broken_schedule(void* /*instance*/,
                                                const fulcrum_schedule_request* /*request*/,
                                                fulcrum_schedule* /*schedule*/) {
  return FULCRUM_INTERNAL;
}
[[maybe_unused]] const char* const kScheduleStrategies[] = {"fixed"};

#if defined(FULCRUM_BROKEN_wrong_major)
constexpr std::uint32_t kStructSize = FULCRUM_PLUGIN_V1_0_SIZE;
constexpr std::uint16_t kAbiMajor = FULCRUM_ABI_MAJOR + 1;
constexpr const char* kName = "broken_wrong_major";
#elif defined(FULCRUM_BROKEN_short_table)
// As if built against a header that lacked the last two functions.
constexpr std::uint32_t kStructSize = offsetof(fulcrum_plugin_v1, partition_dp);
constexpr std::uint16_t kAbiMajor = FULCRUM_ABI_MAJOR;
constexpr const char* kName = "broken_short_table";
#elif defined(FULCRUM_BROKEN_schedule_no_release)
constexpr std::uint32_t kStructSize = FULCRUM_PLUGIN_V1_1_SIZE;
constexpr std::uint16_t kAbiMajor = FULCRUM_ABI_MAJOR;
constexpr const char* kName = "broken_schedule_no_release";
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
#if defined(FULCRUM_BROKEN_schedule_no_release)
    kScheduleStrategies,
    1,
    0,
    &broken_schedule,
    nullptr,
#endif
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

#elif defined(FULCRUM_BROKEN_schedule_missing_piece) ||                                            \
    defined(FULCRUM_BROKEN_schedule_over_budget) || defined(FULCRUM_BROKEN_schedule_wave_clash) || \
    defined(FULCRUM_BROKEN_schedule_bad_plan)

namespace {

// A valid fixed schedule (contiguous plans, round-robin groups), then one
// rule broken. The damage needs the request the loader tests send: at least
// two slots sharing a rank, and a row longer than T.
class BrokenScheduleBalancer final : public fulcrum::LoadBalancer {
 public:
  std::string name() const override { return "broken_schedule"; }
  std::vector<std::string> cp_strategies() const override { return {"contiguous"}; }
  std::vector<std::string> dp_strategies() const override { return {"round_robin"}; }
  std::vector<std::string> schedule_strategies() const override { return {"fixed"}; }

  fulcrum::Result<fulcrum::ShardPlan> plan_cp(std::string_view /*strategy*/,
                                              const fulcrum::CpWorkload& workload) override {
    return fulcrum::contiguous_plan(workload);
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
    if (!built) return built;
    fulcrum::Schedule s = std::move(built).value();
    if (s.slots.size() < 2) return fulcrum::internal_error("the damage needs two slots");
#if defined(FULCRUM_BROKEN_schedule_missing_piece)
    s.slots.pop_back();
#elif defined(FULCRUM_BROKEN_schedule_over_budget)
    // The whole of the longest row on its slot's first member alone.
    auto tokens = [](const fulcrum::ScheduleSlot& slot) {
      std::int64_t n = 0;
      for (const fulcrum::DocPiece& piece : slot.pieces) n += piece.length;
      return n;
    };
    fulcrum::ScheduleSlot& slot =
        *std::max_element(s.slots.begin(), s.slots.end(),
                          [&](const auto& a, const auto& b) { return tokens(a) < tokens(b); });
    const std::int64_t n = tokens(slot);
    slot.ranks.resize(1);
    slot.plan.cp_size = 1;
    slot.plan.shard_len = n;
    slot.plan.padding = 0;
    slot.plan.positions.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) slot.plan.positions[static_cast<std::size_t>(i)] = i;
#elif defined(FULCRUM_BROKEN_schedule_wave_clash)
    // The second slot holding the first slot's first rank joins its wave.
    const std::int32_t rank = s.slots[0].ranks[0];
    for (std::size_t i = 1; i < s.slots.size(); ++i) {
      const auto& ranks = s.slots[i].ranks;
      if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
        s.slots[i].wave = s.slots[0].wave;
        break;
      }
    }
#else
    // Position 0 twice, position 1 never.
    s.slots[0].plan.positions[1] = s.slots[0].plan.positions[0];
#endif
    return s;
  }
};

}  // namespace

FULCRUM_EXPORT_PLUGIN(BrokenScheduleBalancer)

#elif defined(FULCRUM_BROKEN_scribble) || defined(FULCRUM_BROKEN_scribble_struct) || \
    defined(FULCRUM_BROKEN_lying_counts) || defined(FULCRUM_BROKEN_lying_work)

namespace {

const char* const kCpStrategies[] = {"contiguous"};
const char* const kDpStrategies[] = {"round_robin"};
const char* const kScheduleStrategies[] = {"hybrid"};
int instance_token = 0;

fulcrum_status create(const fulcrum_host_services* /*host*/, void** instance) {
  *instance = &instance_token;
  return FULCRUM_OK;
}
void destroy(void* /*instance*/) {}
const char* last_error(void* /*instance*/) { return "this plugin is broken on purpose"; }

// Contiguous shards of a row of `tokens`, padded at the end.
fulcrum_status contiguous(std::int64_t tokens, std::int32_t cp, fulcrum_cp_plan* plan) {
  const std::int64_t shard = (tokens + cp - 1) / cp;
  auto* positions = new std::vector<std::int64_t>(static_cast<std::size_t>(shard * cp), -1);
  for (std::int64_t i = 0; i < tokens; ++i) (*positions)[static_cast<std::size_t>(i)] = i;
  plan->cp_size = cp;
  plan->shard_len = shard;
  plan->positions = positions->data();
  plan->padding = shard * cp - tokens;
  plan->strategy_used = "contiguous";
  plan->plugin_data = positions;
  return FULCRUM_OK;
}

void release_plan(void* /*instance*/, fulcrum_cp_plan* plan) {
  delete static_cast<std::vector<std::int64_t>*>(plan->plugin_data);
}

#if defined(FULCRUM_BROKEN_scribble)

// Writes through the const pointers: the row's first document loses a token
// (or, for one document, the strategy name is overwritten), then the plan is
// a valid one for the row as the request first stated it.
fulcrum_status plan_cp(void* /*instance*/, const fulcrum_cp_request* request,
                       fulcrum_cp_plan* plan) {
  const std::int64_t tokens = request->tokens;
  if (request->num_docs > 0) {
    const_cast<std::int64_t*>(request->doc_lengths)[0] -= 1;
  } else {
    const_cast<char*>(request->strategy)[0] = 'X';
  }
  return contiguous(tokens, request->cp_size, plan);
}

// Every sample's length becomes 1; the partition is a valid round robin.
fulcrum_status partition_dp(void* /*instance*/, const fulcrum_dp_request* request,
                            fulcrum_dp_result* result) {
  auto* lengths = const_cast<std::int64_t*>(request->lengths);
  const std::int64_t n = request->num_samples;
  const std::int32_t k = request->num_ranks;
  for (std::int64_t i = 0; i < n; ++i) lengths[i] = 1;
  std::int64_t at = 0;
  for (std::int32_t r = 0; r < k; ++r) {
    result->rank_offsets[r] = at;
    for (std::int64_t i = r; i < n; i += k) result->samples[at++] = i;
  }
  result->rank_offsets[k] = at;
  return FULCRUM_OK;
}

struct ScheduleBuffers {
  std::vector<std::int64_t> rank_offsets, piece_offsets, piece_docs, piece_starts, piece_lengths,
      shard_lens, padding, positions;
  std::vector<std::int32_t> ranks, waves;
};

// Every document becomes 1 token long, and the schedule is a valid one for
// that batch: one slot of one rank per document, dealt round robin.
fulcrum_status schedule(void* /*instance*/, const fulcrum_schedule_request* request,
                        fulcrum_schedule* out) {
  auto* lengths = const_cast<std::int64_t*>(request->doc_lengths);
  const std::int64_t docs = request->num_docs;
  for (std::int64_t d = 0; d < docs; ++d) lengths[d] = 1;
  auto* b = new ScheduleBuffers;
  b->rank_offsets.push_back(0);
  b->piece_offsets.push_back(0);
  for (std::int64_t d = 0; d < docs; ++d) {
    b->ranks.push_back(static_cast<std::int32_t>(d % request->world_size));
    b->waves.push_back(static_cast<std::int32_t>(d / request->world_size));
    b->rank_offsets.push_back(d + 1);
    b->piece_offsets.push_back(d + 1);
    b->piece_docs.push_back(d);
    b->piece_starts.push_back(0);
    b->piece_lengths.push_back(1);
    b->shard_lens.push_back(1);
    b->padding.push_back(0);
    b->positions.push_back(0);
  }
  out->num_slots = static_cast<std::int32_t>(docs);
  out->slot_rank_offsets = b->rank_offsets.data();
  out->ranks = b->ranks.data();
  out->slot_piece_offsets = b->piece_offsets.data();
  out->piece_docs = b->piece_docs.data();
  out->piece_starts = b->piece_starts.data();
  out->piece_lengths = b->piece_lengths.data();
  out->slot_waves = b->waves.data();
  out->slot_shard_lens = b->shard_lens.data();
  out->slot_padding = b->padding.data();
  out->positions = b->positions.data();
  out->strategy_used = "hybrid";
  out->plugin_data = b;
  return FULCRUM_OK;
}

void release_schedule(void* /*instance*/, fulcrum_schedule* out) {
  delete static_cast<ScheduleBuffers*>(out->plugin_data);
}

constexpr const char* kName = "broken_scribble";

#elif defined(FULCRUM_BROKEN_scribble_struct)

// The mask parameter, which a causal row does not read: the plan is the
// valid contiguous one, so only a byte comparison of the struct can tell.
fulcrum_status plan_cp(void* /*instance*/, const fulcrum_cp_request* request,
                       fulcrum_cp_plan* plan) {
  const_cast<fulcrum_cp_request*>(request)->mask_param += 999;
  return contiguous(request->tokens, request->cp_size, plan);
}

// The attention cost's coefficient; the partition is a valid round robin.
fulcrum_status partition_dp(void* /*instance*/, const fulcrum_dp_request* request,
                            fulcrum_dp_result* result) {
  const_cast<fulcrum_dp_request*>(request)->attention_a = 5.0;
  const std::int64_t n = request->num_samples;
  const std::int32_t k = request->num_ranks;
  std::int64_t at = 0;
  for (std::int32_t r = 0; r < k; ++r) {
    result->rank_offsets[r] = at;
    for (std::int64_t i = r; i < n; i += k) result->samples[at++] = i;
  }
  result->rank_offsets[k] = at;
  return FULCRUM_OK;
}

struct ScheduleBuffers {
  std::vector<std::int64_t> rank_offsets, piece_offsets, piece_docs, piece_starts, piece_lengths,
      shard_lens, padding, positions;
  std::vector<std::int32_t> ranks, waves;
};

// The profile's latency; the schedule puts each document whole on one rank,
// dealt round robin (valid while every document fits the budget).
fulcrum_status schedule(void* /*instance*/, const fulcrum_schedule_request* request,
                        fulcrum_schedule* out) {
  const_cast<fulcrum_schedule_request*>(request)->latency_seconds = 5.0;
  const std::int64_t docs = request->num_docs;
  auto* b = new ScheduleBuffers;
  b->rank_offsets.push_back(0);
  b->piece_offsets.push_back(0);
  for (std::int64_t d = 0; d < docs; ++d) {
    const std::int64_t length = request->doc_lengths[d];
    b->ranks.push_back(static_cast<std::int32_t>(d % request->world_size));
    b->waves.push_back(static_cast<std::int32_t>(d / request->world_size));
    b->rank_offsets.push_back(d + 1);
    b->piece_offsets.push_back(d + 1);
    b->piece_docs.push_back(d);
    b->piece_starts.push_back(0);
    b->piece_lengths.push_back(length);
    b->shard_lens.push_back(length);
    b->padding.push_back(0);
    for (std::int64_t i = 0; i < length; ++i) b->positions.push_back(i);
  }
  out->num_slots = static_cast<std::int32_t>(docs);
  out->slot_rank_offsets = b->rank_offsets.data();
  out->ranks = b->ranks.data();
  out->slot_piece_offsets = b->piece_offsets.data();
  out->piece_docs = b->piece_docs.data();
  out->piece_starts = b->piece_starts.data();
  out->piece_lengths = b->piece_lengths.data();
  out->slot_waves = b->waves.data();
  out->slot_shard_lens = b->shard_lens.data();
  out->slot_padding = b->padding.data();
  out->positions = b->positions.data();
  out->strategy_used = "hybrid";
  out->plugin_data = b;
  return FULCRUM_OK;
}

void release_schedule(void* /*instance*/, fulcrum_schedule* out) {
  delete static_cast<ScheduleBuffers*>(out->plugin_data);
}

constexpr const char* kName = "broken_scribble_struct";

#elif defined(FULCRUM_BROKEN_lying_work)

// A valid contiguous plan whose reported work is made up.
fulcrum_status plan_cp(void* /*instance*/, const fulcrum_cp_request* request,
                       fulcrum_cp_plan* plan) {
  static const std::vector<std::int64_t> kOnes(1024, 1);
  static const std::vector<std::int64_t> kNegative(1024, -1000);
  if (request->cp_size > 1024) return FULCRUM_INVALID_ARGUMENT;
  const fulcrum_status status = contiguous(request->tokens, request->cp_size, plan);
  if (request->cp_size == 3) {
    plan->rank_pairs = kNegative.data();
  } else {
    plan->rank_pairs = kOnes.data();
    plan->rank_tiles = kOnes.data();
  }
  return status;
}

fulcrum_status partition_dp(void* /*instance*/, const fulcrum_dp_request* request,
                            fulcrum_dp_result* result) {
  const std::int64_t n = request->num_samples;
  const std::int32_t k = request->num_ranks;
  std::int64_t at = 0;
  for (std::int32_t r = 0; r < k; ++r) {
    result->rank_offsets[r] = at;
    for (std::int64_t i = r; i < n; i += k) result->samples[at++] = i;
  }
  result->rank_offsets[k] = at;
  return FULCRUM_OK;
}

[[maybe_unused]] fulcrum_status schedule(void* /*instance*/,
                                         const fulcrum_schedule_request* /*request*/,
                                         fulcrum_schedule* /*out*/) {
  return FULCRUM_INTERNAL;
}
void release_schedule(void* /*instance*/, fulcrum_schedule* /*out*/) {}

constexpr const char* kName = "broken_lying_work";

#else  // lying_counts

// A plan whose shard_len promises 64 times the row per rank, from a buffer
// of one entry.
fulcrum_status plan_cp(void* /*instance*/, const fulcrum_cp_request* request,
                       fulcrum_cp_plan* plan) {
  static const std::int64_t kOne[] = {0};
  plan->cp_size = request->cp_size;
  plan->shard_len = request->tokens * 64;
  plan->positions = const_cast<std::int64_t*>(kOne);
  plan->padding = 0;
  plan->strategy_used = "contiguous";
  return FULCRUM_OK;
}

// Rank 0's offsets end far past the samples; the last offset is n again, so
// only offsets checked in order before use catch it. Asked for one rank, it
// writes one sample past the end of the buffer instead.
fulcrum_status partition_dp(void* /*instance*/, const fulcrum_dp_request* request,
                            fulcrum_dp_result* result) {
  const std::int32_t k = request->num_ranks;
  if (k == 1) {
    result->rank_offsets[0] = 0;
    result->rank_offsets[1] = request->num_samples;
    for (std::int64_t i = 0; i <= request->num_samples; ++i) result->samples[i] = i;
    return FULCRUM_OK;
  }
  result->rank_offsets[0] = 0;
  for (std::int32_t r = 1; r < k; ++r) result->rank_offsets[r] = std::int64_t{1} << 40;
  result->rank_offsets[k] = request->num_samples;
  for (std::int64_t i = 0; i < request->num_samples; ++i) result->samples[i] = i;
  return FULCRUM_OK;
}

[[maybe_unused]] fulcrum_status schedule(void* /*instance*/,
                                         const fulcrum_schedule_request* /*request*/,
                                         fulcrum_schedule* /*out*/) {
  return FULCRUM_INTERNAL;
}
void release_schedule(void* /*instance*/, fulcrum_schedule* /*out*/) {}

constexpr const char* kName = "broken_lying_counts";

#endif

const fulcrum_plugin_v1 kTable = {
    FULCRUM_PLUGIN_V1_1_SIZE,
    FULCRUM_ABI_MAJOR,
    FULCRUM_ABI_MINOR,
    kName,
    kCpStrategies,
    1,
    1,
    kDpStrategies,
    &create,
    &destroy,
    &plan_cp,
    &release_plan,
    &partition_dp,
    &last_error,
    kScheduleStrategies,
    1,
    0,
    &schedule,
    &release_schedule,
};

}  // namespace

extern "C" FULCRUM_PLUGIN_API const fulcrum_plugin_v1* fulcrum_get_plugin(void) { return &kTable; }

#elif defined(FULCRUM_BROKEN_bad_text) || defined(FULCRUM_BROKEN_bad_name)

namespace {

// Contiguous plans, round-robin partitions and the fixed schedule, each
// carrying text that breaks the ABI's string rules; the strategy asked for
// says which text.
class BadTextBalancer final : public fulcrum::LoadBalancer {
 public:
  BadTextBalancer() = default;
  explicit BadTextBalancer(fulcrum::sdk::Host host) : host_(host) {}

#if defined(FULCRUM_BROKEN_bad_name)
  std::string name() const override { return "broken_bad_name"; }
  std::vector<std::string> cp_strategies() const override { return {"contiguous", "red\x1b[31m"}; }
#else
  std::string name() const override { return "broken_bad_text"; }
  std::vector<std::string> cp_strategies() const override {
    return {"latin1", "newline", "noisy", "control_reason", "contiguous"};
  }
#endif
  std::vector<std::string> dp_strategies() const override { return {"round_robin"}; }
  std::vector<std::string> schedule_strategies() const override { return {"fixed"}; }

  fulcrum::Result<fulcrum::ShardPlan> plan_cp(std::string_view strategy,
                                              const fulcrum::CpWorkload& workload) override {
    fulcrum::ShardPlan plan = fulcrum::contiguous_plan(workload);
    if (strategy == "contiguous") {
      plan.strategy_used = "contiguous";
    } else if (strategy == "latin1") {
      plan.strategy_used = "contigu\xe9";  // Latin-1, not UTF-8
    } else if (strategy == "newline") {
      plan.strategy_used = "contiguous\nfulcrum: all good";
    } else if (strategy == "control_reason") {
      plan.strategy_used = "contiguous";
      plan.fallback_reason = "why \x1b]0;title\x07 not";
    } else {
      host_.log(FULCRUM_LOG_WARNING, "log \x1b[2J line\nsecond \xff");
      return fulcrum::internal_error("failed \x1b[31mred\x1b[0m\nfulcrum: forged line \xc3");
    }
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
        request, [](const fulcrum::CpWorkload& w) { return fulcrum::contiguous_plan(w); },
        [this](const fulcrum::DpRequest& r) { return partition_dp("round_robin", r); });
    if (!built) return built;
    fulcrum::Schedule s = std::move(built).value();
    s.strategy_used = "fixed\xc3";  // a UTF-8 sequence cut short
    return s;
  }

 private:
  fulcrum::sdk::Host host_;
};

}  // namespace

FULCRUM_EXPORT_PLUGIN(BadTextBalancer)

#else
#error "define one FULCRUM_BROKEN_<kind> (see plugin/tests/broken/CMakeLists.txt)"
#endif
