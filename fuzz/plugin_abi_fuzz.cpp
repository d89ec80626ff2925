// Fuzz target: the plugin C ABI through the real exported table.
//
// plugin/fulcrum_balancer.cpp is compiled into this binary, so
// fulcrum_get_plugin() is the very function libfulcrum_balancer.so exports
// (PluginAdapter<FulcrumBalancer> over every strategy). Each input makes an
// instance and issues a few plan_cp / partition_dp / schedule calls whose requests carry
// nonsense: wrong struct sizes, negative or inconsistent counts, out-of-enum
// kinds, NaN coefficients, null pointers with non-zero counts. What it never
// does is lie about memory: every array is allocated with exactly the length
// the request claims (ASan then catches a read past it), and a claimed length
// too large to allocate travels with a null pointer instead.
//
// Promises checked: no crash, no leak (LeakSanitizer), a status from the enum,
// a last_error line after every failure, a returned plan or partition that
// validates, a schedule that validate_schedule accepts, release_plan and
// release_schedule for every FULCRUM_OK answer, and, for a request the
// plugin's own validation accepts within the bounds, never FULCRUM_INTERNAL.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fulcrum/c_api.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fuzz_input.h"
#include "workload_gen.h"

extern "C" const fulcrum_plugin_v1* fulcrum_get_plugin(void);

namespace fulcrum::fuzz {
namespace {

// Longest array built for a claimed count; larger claims get a null pointer.
constexpr std::int64_t kMaxArray = 1 << 16;
constexpr std::int32_t kMaxRanks = 4096;

const fulcrum_plugin_v1& table() {
  static const fulcrum_plugin_v1* t = fulcrum_get_plugin();
  FUZZ_CHECK(t != nullptr, "fulcrum_get_plugin returned null");
  return *t;
}

void check_status(int status, const std::string& call) {
  FUZZ_CHECK(status >= FULCRUM_OK && status <= FULCRUM_INTERNAL,
             call + " returned status " + std::to_string(status) + ", outside fulcrum_status");
}

void check_last_error(void* instance, const std::string& call) {
  const char* message = table().last_error(instance);
  FUZZ_CHECK(message != nullptr, call + ": last_error returned null");
  // strlen walks to the NUL: ASan flags a message that is not terminated
  // inside its allocation.
  FUZZ_CHECK(std::strlen(message) > 0, call + ": failed with an empty last_error");
}

// A struct_size as a confused host might send it; `actual` is the v1.0 size.
std::uint32_t struct_size(FuzzInput& in, std::uint32_t actual) {
  const std::uint8_t pick = in.u8();
  if (pick < 0xd0) return actual;
  switch (pick % 4) {
    case 0:
      return 0;
    case 1:
      return actual - 8;
    case 2:
      return actual / 2;
    default:
      return actual + 8 * (pick % 8);  // a newer host: a larger struct
  }
}

// Places `value` at the start of a buffer of max(claimed, sizeof) bytes, so a
// plugin that trusts a larger claimed struct_size reads allocated memory.
template <typename T>
struct Sized {
  std::vector<std::byte> bytes;
  T* get() { return reinterpret_cast<T*>(bytes.data()); }
};

template <typename T>
Sized<T> sized(const T& value) {
  Sized<T> out;
  out.bytes.resize(std::max<std::size_t>(value.struct_size, sizeof(T)));
  std::memcpy(out.bytes.data(), &value, sizeof(T));
  return out;
}

// Exactly `count` entries (no spare capacity, so ASan sees one past the end).
std::unique_ptr<std::int64_t[]> array(std::int64_t count) {
  return std::unique_ptr<std::int64_t[]>(new std::int64_t[static_cast<std::size_t>(count)]());
}

const char* strategy_name(FuzzInput& in, const char* const* names, std::int32_t count,
                          std::string& storage) {
  const std::uint8_t pick = in.u8();
  if (pick < 0xe0 && count > 0) return names[pick % count];
  if (pick % 8 == 0) return nullptr;
  storage = in.string(16);
  return storage.c_str();
}

// ceil(n/b) + 1 when both are >= 1, else -1; unsigned so that no N overflows.
std::int64_t sparse_offset_count(std::int64_t n, std::int64_t b) {
  if (n < 1 || b < 1) return -1;
  const std::uint64_t blocks =
      static_cast<std::uint64_t>(n) / static_cast<std::uint64_t>(b) +
      (static_cast<std::uint64_t>(n) % static_cast<std::uint64_t>(b) != 0 ? 1 : 0);
  return blocks + 1 > static_cast<std::uint64_t>(kMaxArray)
             ? std::numeric_limits<std::int64_t>::max()
             : static_cast<std::int64_t>(blocks + 1);
}

// The workload a request describes, when its arrays are all present (the
// fields themselves may still be nonsense); nullopt when the plugin has no
// consistent workload to read from it.
std::optional<CpWorkload> described(const fulcrum_cp_request& req, const std::int64_t* docs,
                                    const std::int64_t* offsets, const std::int64_t* kv) {
  if (req.struct_size < FULCRUM_CP_REQUEST_V1_0_SIZE) return std::nullopt;
  if (req.num_docs < 0 || (req.num_docs > 0 && docs == nullptr)) return std::nullopt;
  CpWorkload w;
  w.tokens = req.tokens;
  w.cp_size = req.cp_size;
  w.block_size = req.block_size;
  if (req.num_docs > 0) w.doc_lengths.assign(docs, docs + req.num_docs);
  w.mask.kind = static_cast<MaskKind>(req.mask_kind);
  w.mask.param = req.mask_param;
  if (w.mask.kind == MaskKind::kBlockSparse) {
    const std::int64_t want = sparse_offset_count(req.tokens, req.block_size);
    if (offsets == nullptr || want < 1 || want > kMaxArray) return std::nullopt;
    const std::int64_t nnz = offsets[want - 1];
    if (nnz < 0 || nnz > kMaxArray || (nnz > 0 && kv == nullptr)) return std::nullopt;
    w.mask.block_sparse.offsets.assign(offsets, offsets + want);
    w.mask.block_sparse.kv_blocks.assign(kv, kv + nnz);
  }
  return w;
}

bool bounded(const CpWorkload& w) {
  return w.tokens >= 1 && w.tokens <= kMaxTokens && w.cp_size >= 1 && w.cp_size <= kMaxCpSize;
}

// Beyond validate_workload's documented bounds (workload.h).
bool beyond_limits(const CpWorkload& w) {
  return w.tokens > kMaxRowTokens || w.cp_size > kMaxGroupSize || w.block_size > kMaxBlockSize;
}

bool listed(const char* name, const char* const* names, std::int32_t count) {
  if (name == nullptr) return false;
  for (std::int32_t i = 0; i < count; ++i) {
    if (std::strcmp(name, names[i]) == 0) return true;
  }
  return false;
}

void fuzz_plan_cp(FuzzInput& in, void* instance) {
  const fulcrum_plugin_v1& t = table();
  // Start from a plausible workload, then lie in the C fields.
  CpWorkload w = plausible_workload(in);
  if (in.u8() >= 0xa0) corrupt_workload(in, w);

  fulcrum_cp_request req{};
  req.struct_size = struct_size(in, FULCRUM_CP_REQUEST_V1_0_SIZE);
  req.cp_size = w.cp_size;
  req.tokens = w.tokens;
  req.block_size = w.block_size;
  req.mask_kind = static_cast<std::int32_t>(w.mask.kind);
  req.mask_param = w.mask.param;
  if (in.u8() >= 0xf0) req.reserved0 = static_cast<std::int32_t>(in.u32());

  // Documents: as generated, a claimed count with no array, or a negative count.
  std::unique_ptr<std::int64_t[]> docs;
  switch (in.u8() % 8) {
    case 0:
      req.num_docs = static_cast<std::int64_t>(w.doc_lengths.size()) + in.range(1, 4);
      req.doc_lengths = nullptr;
      break;
    case 1:
      req.num_docs = in.nasty_int64(-3, -1);
      if (req.num_docs < 0) {
        docs = array(1);
        req.doc_lengths = docs.get();
      }
      break;
    default:
      req.num_docs = static_cast<std::int64_t>(w.doc_lengths.size());
      if (!w.doc_lengths.empty()) {
        docs = array(req.num_docs);
        std::copy(w.doc_lengths.begin(), w.doc_lengths.end(), docs.get());
        req.doc_lengths = docs.get();
      }
  }
  if (req.num_docs == 0 && req.doc_lengths == nullptr && in.u8() >= 0xf0) {
    docs = array(1);  // a stray pointer with a zero count must not be read
    req.doc_lengths = docs.get();
  }

  // Block-sparse arrays, sized by what N and B claim (not by the mask).
  std::unique_ptr<std::int64_t[]> offsets, kv;
  if (req.mask_kind == FULCRUM_MASK_BLOCK_SPARSE) {
    const std::int64_t want = sparse_offset_count(req.tokens, req.block_size);
    if (want >= 1 && want <= kMaxArray && in.u8() < 0xf0) {
      offsets = array(want);
      const auto& bs = w.mask.block_sparse;
      for (std::int64_t i = 0; i < want; ++i) {
        offsets[i] = i < static_cast<std::int64_t>(bs.offsets.size())
                         ? bs.offsets[static_cast<std::size_t>(i)]
                         : (bs.offsets.empty() ? 0 : bs.offsets.back());
      }
      if (in.u8() >= 0xf0) offsets[want - 1] = in.nasty_int64(-2, 8);
      req.sparse_offsets = offsets.get();
      const std::int64_t nnz = offsets[want - 1];
      if (nnz >= 1 && nnz <= kMaxArray) {
        kv = array(nnz);
        for (std::int64_t i = 0; i < nnz; ++i) {
          kv[i] = i < static_cast<std::int64_t>(bs.kv_blocks.size())
                      ? bs.kv_blocks[static_cast<std::size_t>(i)]
                      : in.nasty_int64(0, 8);
        }
        req.sparse_kv_blocks = kv.get();
      }
    }
  }

  std::string name_storage;
  req.strategy = strategy_name(in, t.cp_strategies, t.num_cp_strategies, name_storage);

  // A request beyond validate_workload's bounds (N or B over 2^31, P over
  // 2^20) is sent and must be refused as FULCRUM_INVALID_ARGUMENT (checked
  // below). One between the fuzz bounds and those (N = 2^31 - 1 or 2^31) is
  // valid and takes gigabytes to plan: not sent.
  const std::optional<CpWorkload> sent = described(req, docs.get(), offsets.get(), kv.get());
  if (sent && validate_workload(*sent).is_ok() && !bounded(*sent)) return;

  fulcrum_cp_plan plan_init{};
  plan_init.struct_size = struct_size(in, FULCRUM_CP_PLAN_V1_0_SIZE);
  Sized<fulcrum_cp_plan> plan = sized(plan_init);
  Sized<fulcrum_cp_request> request = sized(req);

  const fulcrum_status status = t.plan_cp(instance, request.get(), plan.get());
  check_status(status, "plan_cp");
  if (verbose()) {
    std::fprintf(stderr, "plan_cp: N=%lld P=%d B=%lld docs=%lld mask=%d:%lld '%s' -> %d %s\n",
                 static_cast<long long>(req.tokens), req.cp_size,
                 static_cast<long long>(req.block_size), static_cast<long long>(req.num_docs),
                 req.mask_kind, static_cast<long long>(req.mask_param),
                 req.strategy != nullptr ? req.strategy : "(null)", status,
                 status == FULCRUM_OK ? plan.get()->strategy_used : t.last_error(instance));
  }
  fulcrum_cp_plan& p = *plan.get();
  if (status != FULCRUM_OK) {
    check_last_error(instance, "plan_cp");
    FUZZ_CHECK(p.plugin_data == nullptr && p.positions == nullptr,
               "plan_cp failed but left buffers in the plan (never released)");
    // Within the bounds, a request that is well-formed at the C level and as
    // a workload fails only as the strategy's refusal or an unknown name.
    if (status == FULCRUM_INTERNAL && sent && plan_init.struct_size >= FULCRUM_CP_PLAN_V1_0_SIZE) {
      FUZZ_CHECK(false, std::string("plan_cp: FULCRUM_INTERNAL on a bounded request: ") +
                            t.last_error(instance));
    }
    // A known strategy refuses a row beyond the bounds as the caller's error.
    if (sent && beyond_limits(*sent) &&
        listed(req.strategy, t.cp_strategies, t.num_cp_strategies)) {
      FUZZ_CHECK(status == FULCRUM_INVALID_ARGUMENT,
                 "plan_cp: status " + std::to_string(status) +
                     " for a request beyond the bounds: " + t.last_error(instance));
    }
    return;
  }

  // The plugin accepted: the request must have been a valid workload. Rebuild
  // it from what was sent (not from `w`: the C fields are the truth).
  FUZZ_CHECK(sent.has_value(), "plan_cp accepted a request with missing arrays or struct_size " +
                                   std::to_string(req.struct_size));
  const Status sent_ok = validate_workload(*sent);
  FUZZ_CHECK(sent_ok.is_ok(), "plan_cp accepted a malformed request: " + sent_ok.message());
  FUZZ_CHECK(p.cp_size == req.cp_size, "plan cp_size differs from the request");
  FUZZ_CHECK(p.shard_len >= 0, "plan shard_len " + std::to_string(p.shard_len) + " is negative");
  FUZZ_CHECK(p.positions != nullptr || p.shard_len == 0, "plan without positions");
  FUZZ_CHECK(p.strategy_used != nullptr && std::strlen(p.strategy_used) > 0,
             "plan names no strategy");
  ShardPlan copy;
  copy.cp_size = p.cp_size;
  copy.shard_len = p.shard_len;
  copy.padding = p.padding;
  copy.positions.assign(p.positions, p.positions + p.cp_size * p.shard_len);
  const Status valid = validate_plan(*sent, copy);
  FUZZ_CHECK(valid.is_ok(), std::string("plan_cp returned an invalid plan (") + p.strategy_used +
                                "): " + valid.message());
  if (p.rank_pairs != nullptr || p.rank_tiles != nullptr) {
    const std::vector<RankWork> work = compute_work(*sent, copy);
    for (std::int32_t r = 0; r < p.cp_size; ++r) {
      FUZZ_CHECK(p.rank_pairs == nullptr || p.rank_pairs[r] == work[r].pairs,
                 "rank_pairs[" + std::to_string(r) + "] differs from the recount");
      FUZZ_CHECK(p.rank_tiles == nullptr || p.rank_tiles[r] == work[r].tiles,
                 "rank_tiles[" + std::to_string(r) + "] differs from the recount");
    }
  }
  t.release_plan(instance, plan.get());
  FUZZ_CHECK(p.plugin_data == nullptr && p.positions == nullptr,
             "release_plan left pointers in the plan");
}

double coefficient(FuzzInput& in) {
  static constexpr double kValues[] = {0.0,
                                       1.0,
                                       24576.0,
                                       -1.0,
                                       std::numeric_limits<double>::quiet_NaN(),
                                       std::numeric_limits<double>::infinity(),
                                       -std::numeric_limits<double>::infinity(),
                                       1e300,
                                       std::numeric_limits<double>::denorm_min()};
  const std::uint8_t pick = in.u8();
  if (pick < 0xf0) return kValues[pick % (sizeof(kValues) / sizeof(kValues[0]))];
  return in.f64();
}

void fuzz_partition_dp(FuzzInput& in, void* instance) {
  const fulcrum_plugin_v1& t = table();
  fulcrum_dp_request req{};
  req.struct_size = struct_size(in, FULCRUM_DP_REQUEST_V1_0_SIZE);
  req.num_ranks = static_cast<std::int32_t>(in.nasty_int64(1, 64));
  req.cost_kind = static_cast<std::int32_t>(in.nasty_int64(0, 1));
  req.equal_count = static_cast<std::int32_t>(in.u8() % 3);
  req.attention_a = coefficient(in);

  // Samples: a claimed count with an array of exactly that many lengths, a
  // count with no array, or a negative count.
  std::unique_ptr<std::int64_t[]> lengths;
  const std::uint8_t shape = in.u8();
  if (shape % 8 == 0) {
    req.num_samples = in.nasty_int64(-3, 300);
  } else {
    req.num_samples = in.range(1, 256);
    lengths = array(req.num_samples);
    for (std::int64_t i = 0; i < req.num_samples; ++i) {
      lengths[i] = shape % 8 == 1 ? in.nasty_int64(1, 1 << 20) : in.range(1, 1 << 17);
    }
    req.lengths = lengths.get();
  }
  std::string name_storage;
  req.strategy = strategy_name(in, t.dp_strategies, t.num_dp_strategies, name_storage);

  // The host owns the result buffers: num_ranks + 1 offsets and num_samples
  // sample slots. A count that cannot be honoured gets a null buffer.
  fulcrum_dp_result res{};
  res.struct_size = struct_size(in, FULCRUM_DP_RESULT_V1_0_SIZE);
  res.num_ranks = req.num_ranks;
  std::unique_ptr<std::int64_t[]> offsets, samples;
  if (req.num_ranks <= kMaxRanks && in.u8() < 0xf8) {
    offsets = array(std::max<std::int64_t>(req.num_ranks, 0) + 1);
    res.rank_offsets = offsets.get();
  }
  if (req.num_samples >= 0 && req.num_samples <= kMaxArray && in.u8() < 0xf8) {
    samples = array(std::max<std::int64_t>(req.num_samples, 1));
    std::fill(samples.get(), samples.get() + std::max<std::int64_t>(req.num_samples, 1), -7);
    res.samples = samples.get();
  }
  Sized<fulcrum_dp_request> request = sized(req);

  const fulcrum_status status = t.partition_dp(instance, request.get(), &res);
  check_status(status, "partition_dp");
  if (verbose()) {
    std::fprintf(stderr, "partition_dp: n=%lld k=%d cost=%d equal=%d a=%g '%s' -> %d %s\n",
                 static_cast<long long>(req.num_samples), req.num_ranks, req.cost_kind,
                 req.equal_count, req.attention_a,
                 req.strategy != nullptr ? req.strategy : "(null)", status,
                 status == FULCRUM_OK ? "" : t.last_error(instance));
  }
  if (status != FULCRUM_OK) {
    check_last_error(instance, "partition_dp");
    if (status == FULCRUM_INTERNAL && req.struct_size >= FULCRUM_DP_REQUEST_V1_0_SIZE &&
        req.num_ranks >= 1 && req.num_ranks <= 64 && req.num_samples >= 1) {
      FUZZ_CHECK(false, std::string("partition_dp: FULCRUM_INTERNAL on a bounded request: ") +
                            t.last_error(instance));
    }
    return;
  }
  FUZZ_CHECK(lengths != nullptr && offsets != nullptr && samples != nullptr,
             "partition_dp succeeded without the buffers it needs");
  FUZZ_CHECK(req.num_ranks >= 1 && req.num_samples >= 1,
             "partition_dp accepted num_ranks " + std::to_string(req.num_ranks) + ", num_samples " +
                 std::to_string(req.num_samples));
  for (std::int64_t i = 0; i < req.num_samples; ++i) {
    FUZZ_CHECK(lengths[i] >= 1, "partition_dp accepted length " + std::to_string(lengths[i]));
  }
  FUZZ_CHECK(res.num_ranks == req.num_ranks, "partition has another rank count");
  FUZZ_CHECK(offsets[0] == 0 && offsets[req.num_ranks] == req.num_samples,
             "rank offsets do not span [0, n)");
  std::vector<bool> seen(static_cast<std::size_t>(req.num_samples), false);
  for (std::int32_t r = 0; r < req.num_ranks; ++r) {
    FUZZ_CHECK(offsets[r] <= offsets[r + 1], "rank offsets decrease");
  }
  for (std::int64_t i = 0; i < req.num_samples; ++i) {
    const std::int64_t s = samples[i];
    FUZZ_CHECK(s >= 0 && s < req.num_samples && !seen[static_cast<std::size_t>(s)],
               "partition samples are not a permutation of [0, n)");
    seen[static_cast<std::size_t>(s)] = true;
  }
}

// Largest batch handed to the schedulers: they materialise every slot's plan,
// so a valid request of 2^40 tokens would only measure the allocator.
constexpr std::int64_t kMaxScheduleTokens = 1 << 18;

void fuzz_schedule(FuzzInput& in, void* instance) {
  const fulcrum_plugin_v1& t = table();
  FUZZ_CHECK(FULCRUM_HAS_FIELD(fulcrum_plugin_v1, release_schedule, t.struct_size) &&
                 t.schedule != nullptr && t.release_schedule != nullptr,
             "the fulcrum plugin's table has no schedule hook");
  const CostProfile base = builtin_cost_profile("h100_7b").value();
  ScheduleRequest described;
  fulcrum_schedule_request req{};
  req.struct_size = struct_size(in, FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE);
  req.world_size = static_cast<std::int32_t>(in.nasty_int64(1, 16));
  req.max_tokens_per_rank = in.nasty_int64(1, 4096);
  req.mask_kind = static_cast<std::int32_t>(in.nasty_int64(0, 4));
  req.mask_param = in.nasty_int64(0, 512);
  req.block_size = in.nasty_int64(1, 256);
  req.cp_size = static_cast<std::int32_t>(in.nasty_int64(0, 4));
  // Coefficients: the bundled profile's, or nonsense in one of them.
  req.profile_name = in.flag() ? nullptr : "fuzzed";
  req.tile_seconds = base.tile_seconds;
  req.token_seconds = base.token_seconds;
  req.slot_seconds = base.slot_seconds;
  req.kv_bytes_per_token = base.kv_bytes_per_token;
  req.intra_node_bytes_per_second = base.intra_node_bytes_per_second;
  req.inter_node_bytes_per_second = base.inter_node_bytes_per_second;
  req.latency_seconds = base.latency_seconds;
  req.ranks_per_node = base.ranks_per_node;
  if (in.u8() >= 0xe0) {
    double* fields[] = {&req.tile_seconds,
                        &req.token_seconds,
                        &req.slot_seconds,
                        &req.kv_bytes_per_token,
                        &req.intra_node_bytes_per_second,
                        &req.inter_node_bytes_per_second,
                        &req.latency_seconds};
    *fields[in.u8() % 7] = coefficient(in);
    req.ranks_per_node = static_cast<std::int32_t>(in.nasty_int64(1, 16));
  }
  // The terms later minor versions append (1.3, 1.4, 1.6), read only where
  // struct_size covers them: valid or nonsense, under a request of that
  // size or one cut or grown around it.
  if (in.u8() >= 0xc0) {
    req.struct_size = struct_size(in, FULCRUM_SCHEDULE_REQUEST_V1_6_SIZE);
    req.exchange_overlap = in.flag() ? 0.5 : coefficient(in);
    req.row_token_seconds = in.flag() ? 0.0 : coefficient(in);
    req.partial_tile_seconds = in.flag() ? base.tile_seconds : coefficient(in);
  }

  std::unique_ptr<std::int64_t[]> docs;
  const std::uint8_t shape = in.u8();
  if (shape % 8 == 0) {
    req.num_docs = in.nasty_int64(-3, 300);  // a count with no array
  } else {
    req.num_docs = in.range(1, 64);
    docs = array(req.num_docs);
    for (std::int64_t i = 0; i < req.num_docs; ++i) {
      docs[i] = shape % 8 == 1 ? in.nasty_int64(1, 1 << 14) : in.range(1, 1 << 12);
    }
    req.doc_lengths = docs.get();
  }
  std::string name_storage;
  req.strategy = strategy_name(in, t.schedule_strategies, t.num_schedule_strategies, name_storage);

  // The request as the core sees it, when its array is there to read.
  bool readable = req.struct_size >= FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE && docs != nullptr;
  if (readable) {
    described.doc_lengths.assign(docs.get(), docs.get() + req.num_docs);
    described.world_size = req.world_size;
    described.max_tokens_per_rank = req.max_tokens_per_rank;
    described.mask.kind = static_cast<MaskKind>(req.mask_kind);
    described.mask.param = req.mask_param;
    described.block_size = req.block_size;
    described.cp_size = req.cp_size;
    described.profile = base;
    described.profile.name = req.profile_name != nullptr ? req.profile_name : "";
    described.profile.tile_seconds = req.tile_seconds;
    described.profile.token_seconds = req.token_seconds;
    described.profile.slot_seconds = req.slot_seconds;
    described.profile.kv_bytes_per_token = req.kv_bytes_per_token;
    described.profile.intra_node_bytes_per_second = req.intra_node_bytes_per_second;
    described.profile.inter_node_bytes_per_second = req.inter_node_bytes_per_second;
    described.profile.latency_seconds = req.latency_seconds;
    described.profile.ranks_per_node = req.ranks_per_node;
  }
  const bool valid = readable && validate_schedule_request(described).is_ok();
  if (valid) {
    std::int64_t total = 0;
    for (std::int64_t length : described.doc_lengths) total += length;
    if (total > kMaxScheduleTokens) return;  // valid, and only slow: not sent
  }

  fulcrum_schedule answer_init{};
  answer_init.struct_size = struct_size(in, FULCRUM_SCHEDULE_V1_1_SIZE);
  Sized<fulcrum_schedule> answer = sized(answer_init);
  Sized<fulcrum_schedule_request> request = sized(req);

  const fulcrum_status status = t.schedule(instance, request.get(), answer.get());
  check_status(status, "schedule");
  if (verbose()) {
    std::fprintf(stderr, "schedule: W=%d T=%lld docs=%lld mask=%d:%lld cp=%d '%s' -> %d %s\n",
                 req.world_size, static_cast<long long>(req.max_tokens_per_rank),
                 static_cast<long long>(req.num_docs), req.mask_kind,
                 static_cast<long long>(req.mask_param), req.cp_size,
                 req.strategy != nullptr ? req.strategy : "(null)", status,
                 status == FULCRUM_OK ? "" : t.last_error(instance));
    for (std::int64_t length : described.doc_lengths) {
      std::fprintf(stderr, " %lld", static_cast<long long>(length));
    }
    std::fprintf(stderr, "\n");
  }
  fulcrum_schedule& a = *answer.get();
  if (status != FULCRUM_OK) {
    check_last_error(instance, "schedule");
    FUZZ_CHECK(a.plugin_data == nullptr, "schedule failed but left buffers (never released)");
    if (status == FULCRUM_INTERNAL && valid &&
        answer_init.struct_size >= FULCRUM_SCHEDULE_V1_1_SIZE) {
      FUZZ_CHECK(false, std::string("schedule: FULCRUM_INTERNAL on a valid request: ") +
                            t.last_error(instance));
    }
    return;
  }
  FUZZ_CHECK(valid, "schedule accepted a request validate_schedule_request refuses");
  // Read back the way the host does, trusting the plugin's offsets (it is
  // this tree's own adapter under test), then judged by the core.
  Schedule schedule;
  schedule.strategy_used = a.strategy_used != nullptr ? a.strategy_used : "";
  std::int64_t at = 0;
  for (std::int32_t slot_index = 0; slot_index < a.num_slots; ++slot_index) {
    ScheduleSlot slot;
    slot.ranks.assign(a.ranks + a.slot_rank_offsets[slot_index],
                      a.ranks + a.slot_rank_offsets[slot_index + 1]);
    for (std::int64_t p = a.slot_piece_offsets[slot_index];
         p < a.slot_piece_offsets[slot_index + 1]; ++p) {
      slot.pieces.push_back({a.piece_docs[p], a.piece_starts[p], a.piece_lengths[p]});
    }
    slot.wave = a.slot_waves[slot_index];
    slot.plan.cp_size = static_cast<std::int32_t>(slot.ranks.size());
    slot.plan.shard_len = a.slot_shard_lens[slot_index];
    slot.plan.padding = a.slot_padding[slot_index];
    const std::int64_t entries = slot.plan.shard_len * slot.plan.cp_size;
    slot.plan.positions.assign(a.positions + at, a.positions + at + entries);
    at += entries;
    schedule.slots.push_back(std::move(slot));
  }
  const Status judged = validate_schedule(described, schedule);
  FUZZ_CHECK(judged.is_ok(), "schedule returned an invalid schedule: " + judged.message());
  t.release_schedule(instance, &a);
  FUZZ_CHECK(a.plugin_data == nullptr && a.positions == nullptr,
             "release_schedule left pointers behind");
}

void log_sink(void*, std::int32_t, const char* message) {
  FUZZ_CHECK(message != nullptr, "the plugin logged a null message");
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fulcrum::fuzz;
  FuzzInput in(data, size);
  const fulcrum_plugin_v1& t = table();

  fulcrum_host_services services{};
  services.struct_size = FULCRUM_HOST_SERVICES_V1_0_SIZE;
  services.log = in.flag() ? &log_sink : nullptr;
  void* instance = nullptr;
  const fulcrum_status created = t.create(&services, &instance);
  FUZZ_CHECK(created == FULCRUM_OK && instance != nullptr, "create failed");

  // A null instance is refused, never dereferenced.
  FUZZ_CHECK(t.plan_cp(nullptr, nullptr, nullptr) == FULCRUM_INVALID_ARGUMENT,
             "plan_cp accepted a null instance");
  FUZZ_CHECK(t.last_error(nullptr) != nullptr, "last_error(null) returned null");

  for (int call = in.u8() % 4 + 1; call > 0 && !in.empty(); --call) {
    switch (in.u8() % 5) {
      case 4:
        fuzz_schedule(in, instance);
        break;
      case 0:
        check_status(t.plan_cp(instance, nullptr, nullptr), "plan_cp(null)");
        check_last_error(instance, "plan_cp(null)");
        break;
      case 1:
        fuzz_partition_dp(in, instance);
        break;
      default:
        fuzz_plan_cp(in, instance);
    }
  }
  t.destroy(instance);
  return 0;
}
