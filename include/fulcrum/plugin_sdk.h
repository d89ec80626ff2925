// Header-only plugin SDK: write an ordinary C++ class derived from
// fulcrum::LoadBalancer, then export it with one macro:
//
//     class MyBalancer final : public fulcrum::LoadBalancer { ... };
//     FULCRUM_EXPORT_PLUGIN(MyBalancer)
//
// The class is default-constructible or constructible from fulcrum::sdk::Host
// (to log through the host). The adapter below turns it into the C function
// table of c_api.h: it converts requests and answers, owns plan buffers until
// the host releases them, and turns every exception into a status plus a
// last_error line, so nothing C++ crosses the boundary.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fulcrum/c_api.h"
#include "fulcrum/load_balancer.h"

namespace fulcrum::sdk {

// The host's services as a plugin sees them. Cheap to copy; valid while the
// plugin instance lives.
class Host {
 public:
  Host() = default;
  // Services from a host that set a struct_size short of v1.0 are not
  // trusted: the plugin then logs nowhere rather than read past them.
  explicit Host(const fulcrum_host_services* services)
      : services_(services != nullptr && services->struct_size >= FULCRUM_HOST_SERVICES_V1_0_SIZE
                      ? services
                      : nullptr) {}

  void log(fulcrum_log_level level, const std::string& message) const {
    if (services_ != nullptr && services_->log != nullptr) {
      services_->log(services_->user_data, level, message.c_str());
    }
  }

 private:
  const fulcrum_host_services* services_ = nullptr;
};

// Converts a C request into the C++ workload, checking what the C side cannot:
// null pointers paired with non-zero counts.
inline Result<CpWorkload> workload_from_c(const fulcrum_cp_request& req) {
  // The pinned v1.0 size, not sizeof: a host built before a later minor
  // version sends the smaller request and must still be served.
  if (req.struct_size < FULCRUM_CP_REQUEST_V1_0_SIZE) {
    return invalid_argument("cp request struct_size " + std::to_string(req.struct_size) +
                            " is smaller than the v1.0 size " +
                            std::to_string(FULCRUM_CP_REQUEST_V1_0_SIZE) +
                            "; the host is broken, rebuild it against a released c_api.h");
  }
  CpWorkload w;
  w.tokens = req.tokens;
  w.cp_size = req.cp_size;
  w.block_size = req.block_size;
  if (req.num_docs < 0 || (req.num_docs > 0 && req.doc_lengths == nullptr)) {
    return invalid_argument("cp request has num_docs " + std::to_string(req.num_docs) +
                            " but doc_lengths is null");
  }
  w.doc_lengths.assign(req.doc_lengths, req.doc_lengths + req.num_docs);
  // ABI 1.5: a 1.4 host sends no weights; they read as none.
  if (FULCRUM_HAS_FIELD(fulcrum_cp_request, member_weights, req.struct_size) &&
      req.member_weights != nullptr) {
    if (req.cp_size < 1) {
      return invalid_argument("cp request has member_weights but cp_size " +
                              std::to_string(req.cp_size) + "; cp_size must be at least 1");
    }
    w.member_weights.assign(req.member_weights, req.member_weights + req.cp_size);
  }
  w.mask.kind = static_cast<MaskKind>(req.mask_kind);
  w.mask.param = req.mask_param;
  if (w.mask.kind == MaskKind::kBlockSparse) {
    if (req.block_size < 1 || req.tokens < 1 || req.sparse_offsets == nullptr) {
      return invalid_argument(
          "block-sparse cp request needs tokens, block_size and sparse_offsets");
    }
    // ceil(N/B) without forming N + B - 1, which overflows for a B near
    // int64's end (found by fuzz/).
    const std::int64_t blocks =
        req.tokens / req.block_size + (req.tokens % req.block_size != 0 ? 1 : 0);
    w.mask.block_sparse.offsets.assign(req.sparse_offsets, req.sparse_offsets + blocks + 1);
    const std::int64_t nnz = w.mask.block_sparse.offsets.back();
    if (nnz < 0 || (nnz > 0 && req.sparse_kv_blocks == nullptr)) {
      return invalid_argument("block-sparse cp request has " + std::to_string(nnz) +
                              " kv blocks but sparse_kv_blocks is null");
    }
    w.mask.block_sparse.kv_blocks.assign(req.sparse_kv_blocks, req.sparse_kv_blocks + nnz);
  }
  return w;
}

inline Result<DpRequest> dp_request_from_c(const fulcrum_dp_request& req) {
  if (req.struct_size < FULCRUM_DP_REQUEST_V1_0_SIZE) {
    return invalid_argument("dp request struct_size " + std::to_string(req.struct_size) +
                            " is smaller than the v1.0 size " +
                            std::to_string(FULCRUM_DP_REQUEST_V1_0_SIZE) +
                            "; the host is broken, rebuild it against a released c_api.h");
  }
  if (req.num_samples < 0 || (req.num_samples > 0 && req.lengths == nullptr)) {
    return invalid_argument("dp request has num_samples " + std::to_string(req.num_samples) +
                            " but lengths is null");
  }
  DpRequest r;
  r.lengths.assign(req.lengths, req.lengths + req.num_samples);
  r.num_ranks = req.num_ranks;
  r.cost.kind = static_cast<CostKind>(req.cost_kind);
  r.cost.a = req.attention_a;
  r.equal_count = req.equal_count != 0;
  return r;
}

inline Result<ScheduleRequest> schedule_request_from_c(const fulcrum_schedule_request& req) {
  if (req.struct_size < FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE) {
    return invalid_argument("schedule request struct_size " + std::to_string(req.struct_size) +
                            " is smaller than the v1.1 size " +
                            std::to_string(FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE) +
                            "; the host is broken, rebuild it against a released c_api.h");
  }
  if (req.num_docs < 0 || (req.num_docs > 0 && req.doc_lengths == nullptr)) {
    return invalid_argument("schedule request has num_docs " + std::to_string(req.num_docs) +
                            " but doc_lengths is null");
  }
  ScheduleRequest r;
  r.doc_lengths.assign(req.doc_lengths, req.doc_lengths + req.num_docs);
  r.world_size = req.world_size;
  r.max_tokens_per_rank = req.max_tokens_per_rank;
  r.mask.kind = static_cast<MaskKind>(req.mask_kind);
  r.mask.param = req.mask_param;
  r.block_size = req.block_size;
  r.cp_size = req.cp_size;
  CostProfile& p = r.profile;
  p.name = req.profile_name != nullptr ? req.profile_name : "";
  p.tile_seconds = req.tile_seconds;
  p.token_seconds = req.token_seconds;
  p.slot_seconds = req.slot_seconds;
  p.kv_bytes_per_token = req.kv_bytes_per_token;
  p.intra_node_bytes_per_second = req.intra_node_bytes_per_second;
  p.inter_node_bytes_per_second = req.inter_node_bytes_per_second;
  p.latency_seconds = req.latency_seconds;
  p.ranks_per_node = req.ranks_per_node;
  // ABI 1.2: a shorter (older) request restricts no group.
  if (FULCRUM_HAS_FIELD(fulcrum_schedule_request, wave_multiple, req.struct_size)) {
    if (req.wave_multiple < 0 ||
        (req.group_flags &
         ~(FULCRUM_GROUPS_WORLD | FULCRUM_GROUPS_ALIGNED | FULCRUM_GROUPS_EVERY_WAVE)) != 0) {
      return invalid_argument("schedule request group_flags " + std::to_string(req.group_flags) +
                              " or wave_multiple " + std::to_string(req.wave_multiple) +
                              " is not one this plugin knows; flags are FULCRUM_GROUPS_* bits, "
                              "wave_multiple >= 0");
    }
    GroupShapes& shapes = r.group_shapes;
    shapes.sizes = req.group_sizes;
    shapes.world = (req.group_flags & FULCRUM_GROUPS_WORLD) != 0;
    shapes.aligned = (req.group_flags & FULCRUM_GROUPS_ALIGNED) != 0;
    shapes.every_wave = (req.group_flags & FULCRUM_GROUPS_EVERY_WAVE) != 0;
    shapes.wave_multiple = req.wave_multiple > 1 ? req.wave_multiple : 1;
  }
  // ABI 1.3: a 1.2 host sends no overlap term; it reads as 0.
  if (FULCRUM_HAS_FIELD(fulcrum_schedule_request, exchange_overlap, req.struct_size)) {
    p.exchange_overlap = req.exchange_overlap;
  }
  // ABI 1.4: a 1.3 host sends no answer flags; it takes the full answer.
  if (FULCRUM_HAS_FIELD(fulcrum_schedule_request, reserved_v1_4, req.struct_size)) {
    r.compact = (req.answer_flags & FULCRUM_ANSWER_COMPACT) != 0;
  }
  // ABI 1.4: a 1.3 host sends no row-length term; it reads as 0.
  if (FULCRUM_HAS_FIELD(fulcrum_schedule_request, row_token_seconds, req.struct_size)) {
    p.row_token_seconds = req.row_token_seconds;
  }
  // ABI 1.6: a 1.5 host sends no partial-tile term; it reads as 0.
  if (FULCRUM_HAS_FIELD(fulcrum_schedule_request, partial_tile_seconds, req.struct_size)) {
    p.partial_tile_seconds = req.partial_tile_seconds;
  }
  return r;
}

inline fulcrum_status to_c_status(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return FULCRUM_OK;
    case StatusCode::kInvalidArgument:
      return FULCRUM_INVALID_ARGUMENT;
    case StatusCode::kUnsupported:
      return FULCRUM_UNSUPPORTED;
    case StatusCode::kNotFound:
      return FULCRUM_NOT_FOUND;
    default:
      return FULCRUM_INTERNAL;
  }
}

template <typename Balancer>
class PluginAdapter {
  static_assert(std::is_base_of_v<LoadBalancer, Balancer>,
                "FULCRUM_EXPORT_PLUGIN needs a class derived from fulcrum::LoadBalancer");

  struct Instance {
    std::unique_ptr<Balancer> balancer;
    std::string last_error;
  };

  // Owns what a fulcrum_cp_plan points to, until release_plan.
  struct PlanBuffers {
    std::vector<std::int64_t> positions;
    std::string strategy_used;
    std::string fallback_reason;
    std::vector<std::int64_t> pairs;
    std::vector<std::int64_t> tiles;
  };

  // Owns what a fulcrum_schedule points to, until release_schedule.
  struct ScheduleBuffers {
    std::vector<std::int64_t> rank_offsets{0};
    std::vector<std::int32_t> ranks;
    std::vector<std::int64_t> piece_offsets{0};
    std::vector<std::int64_t> piece_docs, piece_starts, piece_lengths;
    std::vector<std::int32_t> waves;
    std::vector<std::int64_t> shard_lens, padding, positions;
    std::vector<std::string> plan_strategies;
    std::vector<const char*> plan_strategies_c;
    std::vector<std::int64_t> weight_offsets{0};  // ABI 1.5
    std::vector<double> weights;
    std::string strategy_used;
    std::string fallback_reason;
  };

  static std::unique_ptr<Balancer> make(Host host) {
    if constexpr (std::is_constructible_v<Balancer, Host>) {
      return std::make_unique<Balancer>(host);
    } else {
      return std::make_unique<Balancer>();
    }
  }

  // Runs body; turns a thrown exception into FULCRUM_INTERNAL and a message.
  template <typename Body>
  static fulcrum_status guarded(Instance* inst, Body&& body) noexcept {
    try {
      return body();
    } catch (const std::bad_alloc&) {
      inst->last_error = "out of memory";
    } catch (const std::exception& e) {
      try {
        inst->last_error = std::string("exception: ") + e.what();
      } catch (...) {
      }
    } catch (...) {
      inst->last_error = "unknown exception";
    }
    return FULCRUM_INTERNAL;
  }

  static fulcrum_status fail(Instance* inst, const Status& s) {
    inst->last_error = s.message();
    return to_c_status(s.code());
  }

  static fulcrum_status create(const fulcrum_host_services* host, void** out) noexcept {
    if (out == nullptr) return FULCRUM_INVALID_ARGUMENT;
    *out = nullptr;
    try {
      auto inst = std::make_unique<Instance>();
      inst->balancer = make(Host(host));
      *out = inst.release();
      return FULCRUM_OK;
    } catch (...) {
      return FULCRUM_INTERNAL;
    }
  }

  static void destroy(void* instance) noexcept { delete static_cast<Instance*>(instance); }

  static fulcrum_status plan_cp(void* instance, const fulcrum_cp_request* req,
                                fulcrum_cp_plan* plan) noexcept {
    auto* inst = static_cast<Instance*>(instance);
    if (inst == nullptr) return FULCRUM_INVALID_ARGUMENT;
    return guarded(inst, [&]() -> fulcrum_status {
      if (req == nullptr || plan == nullptr || req->strategy == nullptr) {
        return fail(inst, invalid_argument("plan_cp called with a null request, plan or strategy"));
      }
      if (plan->struct_size < FULCRUM_CP_PLAN_V1_0_SIZE) {
        return fail(inst,
                    invalid_argument("cp plan struct_size " + std::to_string(plan->struct_size) +
                                     " is smaller than the v1.0 size " +
                                     std::to_string(FULCRUM_CP_PLAN_V1_0_SIZE)));
      }
      auto workload = workload_from_c(*req);
      if (!workload) return fail(inst, workload.status());
      auto result = inst->balancer->plan_cp(req->strategy, *workload);
      if (!result) return fail(inst, result.status());
      auto buffers = std::make_unique<PlanBuffers>();
      ShardPlan& p = *result;
      buffers->positions = std::move(p.positions);
      buffers->strategy_used = std::move(p.strategy_used);
      buffers->fallback_reason = std::move(p.fallback_reason);
      if (static_cast<std::int32_t>(p.work.size()) == p.cp_size) {
        for (const RankWork& w : p.work) {
          buffers->pairs.push_back(w.pairs);
          buffers->tiles.push_back(w.tiles);
        }
      }
      plan->cp_size = p.cp_size;
      plan->shard_len = p.shard_len;
      plan->positions = buffers->positions.data();
      plan->padding = p.padding;
      plan->strategy_used = buffers->strategy_used.c_str();
      plan->fallback_reason =
          buffers->fallback_reason.empty() ? nullptr : buffers->fallback_reason.c_str();
      plan->rank_pairs = buffers->pairs.empty() ? nullptr : buffers->pairs.data();
      plan->rank_tiles = buffers->tiles.empty() ? nullptr : buffers->tiles.data();
      plan->plugin_data = buffers.release();
      return FULCRUM_OK;
    });
  }

  static void release_plan(void* /*instance*/, fulcrum_cp_plan* plan) noexcept {
    if (plan == nullptr) return;
    delete static_cast<PlanBuffers*>(plan->plugin_data);
    plan->plugin_data = nullptr;
    plan->positions = nullptr;
    plan->strategy_used = nullptr;
    plan->fallback_reason = nullptr;
    plan->rank_pairs = nullptr;
    plan->rank_tiles = nullptr;
  }

  static fulcrum_status partition_dp(void* instance, const fulcrum_dp_request* req,
                                     fulcrum_dp_result* out) noexcept {
    auto* inst = static_cast<Instance*>(instance);
    if (inst == nullptr) return FULCRUM_INVALID_ARGUMENT;
    return guarded(inst, [&]() -> fulcrum_status {
      if (req == nullptr || out == nullptr || req->strategy == nullptr ||
          out->rank_offsets == nullptr || out->samples == nullptr) {
        return fail(inst, invalid_argument("partition_dp called with a null argument"));
      }
      if (out->struct_size < FULCRUM_DP_RESULT_V1_0_SIZE) {
        return fail(inst,
                    invalid_argument("dp result struct_size " + std::to_string(out->struct_size) +
                                     " is smaller than the v1.0 size " +
                                     std::to_string(FULCRUM_DP_RESULT_V1_0_SIZE)));
      }
      auto request = dp_request_from_c(*req);
      if (!request) return fail(inst, request.status());
      auto result = inst->balancer->partition_dp(req->strategy, *request);
      if (!result) return fail(inst, result.status());
      const DpPartition& part = *result;
      if (static_cast<std::int32_t>(part.ranks.size()) != req->num_ranks) {
        return fail(inst, internal_error("partition has " + std::to_string(part.ranks.size()) +
                                         " ranks, expected " + std::to_string(req->num_ranks)));
      }
      std::int64_t at = 0;
      out->num_ranks = req->num_ranks;
      for (std::size_t r = 0; r < part.ranks.size(); ++r) {
        out->rank_offsets[r] = at;
        for (std::int64_t s : part.ranks[r]) {
          if (at >= req->num_samples) {
            return fail(inst, internal_error("partition lists more samples than requested"));
          }
          out->samples[at++] = s;
        }
      }
      out->rank_offsets[part.ranks.size()] = at;
      return FULCRUM_OK;
    });
  }

  // The slots as flat arrays (rule 6), their names moved out.
  static void fill_buffers(std::vector<ScheduleSlot>& slots, ScheduleBuffers& b) {
    for (ScheduleSlot& slot : slots) {
      b.ranks.insert(b.ranks.end(), slot.ranks.begin(), slot.ranks.end());
      b.rank_offsets.push_back(static_cast<std::int64_t>(b.ranks.size()));
      for (const DocPiece& piece : slot.pieces) {
        b.piece_docs.push_back(piece.doc);
        b.piece_starts.push_back(piece.offset);
        b.piece_lengths.push_back(piece.length);
      }
      b.piece_offsets.push_back(static_cast<std::int64_t>(b.piece_docs.size()));
      b.waves.push_back(slot.wave);
      b.shard_lens.push_back(slot.plan.shard_len);
      b.padding.push_back(slot.plan.padding);
      b.positions.insert(b.positions.end(), slot.plan.positions.begin(), slot.plan.positions.end());
      b.plan_strategies.push_back(std::move(slot.plan.strategy_used));
      b.weights.insert(b.weights.end(), slot.member_weights.begin(), slot.member_weights.end());
      b.weight_offsets.push_back(static_cast<std::int64_t>(b.weights.size()));
    }
  }

  static fulcrum_status schedule(void* instance, const fulcrum_schedule_request* req,
                                 fulcrum_schedule* out) noexcept {
    auto* inst = static_cast<Instance*>(instance);
    if (inst == nullptr) return FULCRUM_INVALID_ARGUMENT;
    return guarded(inst, [&]() -> fulcrum_status {
      if (req == nullptr || out == nullptr || req->strategy == nullptr) {
        return fail(inst,
                    invalid_argument("schedule called with a null request, answer or strategy"));
      }
      if (out->struct_size < FULCRUM_SCHEDULE_V1_1_SIZE) {
        return fail(inst,
                    invalid_argument("schedule struct_size " + std::to_string(out->struct_size) +
                                     " is smaller than the v1.1 size " +
                                     std::to_string(FULCRUM_SCHEDULE_V1_1_SIZE)));
      }
      auto request = schedule_request_from_c(*req);
      if (!request) return fail(inst, request.status());
      // The compact answer only where the host's struct holds the flag
      // that says so.
      request->compact =
          request->compact && FULCRUM_HAS_FIELD(fulcrum_schedule, reserved_v1_4, out->struct_size);
      // Slots' member weights only where the host's struct holds them (ABI 1.5).
      const bool weights_fit = FULCRUM_HAS_FIELD(fulcrum_schedule, slot_weights, out->struct_size);
      request->compact_weights = weights_fit;
      auto result = inst->balancer->schedule(req->strategy, *request);
      if (!result) return fail(inst, result.status());
      std::size_t by_rule = 0;
      for (const ScheduleSlot& slot : result->slots) by_rule += slot.compact() ? 1 : 0;
      const bool compact = by_rule > 0 && by_rule == result->slots.size();
      if (by_rule > 0 && !(compact && request->compact)) {
        return fail(inst, internal_error("scheduler " + quote_text(req->strategy) + " left " +
                                         std::to_string(by_rule) + " of " +
                                         std::to_string(result->slots.size()) +
                                         " slot plans without positions; a compact answer needs "
                                         "every slot by rule and a host that asked for one"));
      }
      auto buffers = std::make_unique<ScheduleBuffers>();
      ScheduleBuffers& b = *buffers;
      fill_buffers(result->slots, b);
      // Pointers into plan_strategies only once it stops growing.
      for (const std::string& name : b.plan_strategies) b.plan_strategies_c.push_back(name.c_str());
      b.strategy_used = std::move(result->strategy_used);
      b.fallback_reason = std::move(result->fallback_reason);
      out->num_slots = static_cast<std::int32_t>(result->slots.size());
      out->slot_rank_offsets = b.rank_offsets.data();
      out->ranks = b.ranks.data();
      out->slot_piece_offsets = b.piece_offsets.data();
      out->piece_docs = b.piece_docs.data();
      out->piece_starts = b.piece_starts.data();
      out->piece_lengths = b.piece_lengths.data();
      out->slot_waves = b.waves.data();
      out->slot_shard_lens = b.shard_lens.data();
      out->slot_padding = b.padding.data();
      out->positions = compact ? nullptr : b.positions.data();
      out->slot_plan_strategies = b.plan_strategies_c.data();
      out->strategy_used = b.strategy_used.c_str();
      out->fallback_reason = b.fallback_reason.empty() ? nullptr : b.fallback_reason.c_str();
      if (FULCRUM_HAS_FIELD(fulcrum_schedule, reserved_v1_4, out->struct_size)) {
        out->answer_flags = compact ? FULCRUM_ANSWER_COMPACT : 0;
      }
      if (weights_fit) {
        // Weights only with plans by rule: positions need none.
        const bool weighted = compact && !b.weights.empty();
        out->slot_weight_offsets = weighted ? b.weight_offsets.data() : nullptr;
        out->slot_weights = weighted ? b.weights.data() : nullptr;
      }
      out->plugin_data = buffers.release();
      return FULCRUM_OK;
    });
  }

  static void release_schedule(void* /*instance*/, fulcrum_schedule* out) noexcept {
    if (out == nullptr) return;
    delete static_cast<ScheduleBuffers*>(out->plugin_data);
    // Field by field, never the whole struct: a later SDK's struct is longer
    // than the one an older host allocated.
    out->num_slots = 0;
    out->slot_rank_offsets = nullptr;
    out->ranks = nullptr;
    out->slot_piece_offsets = nullptr;
    out->piece_docs = nullptr;
    out->piece_starts = nullptr;
    out->piece_lengths = nullptr;
    out->slot_waves = nullptr;
    out->slot_shard_lens = nullptr;
    out->slot_padding = nullptr;
    out->positions = nullptr;
    out->slot_plan_strategies = nullptr;
    out->strategy_used = nullptr;
    out->fallback_reason = nullptr;
    out->plugin_data = nullptr;
    if (FULCRUM_HAS_FIELD(fulcrum_schedule, reserved_v1_4, out->struct_size)) out->answer_flags = 0;
    if (FULCRUM_HAS_FIELD(fulcrum_schedule, slot_weights, out->struct_size)) {
      out->slot_weight_offsets = nullptr;
      out->slot_weights = nullptr;
    }
  }

  static const char* last_error(void* instance) noexcept {
    auto* inst = static_cast<Instance*>(instance);
    return inst == nullptr ? "null plugin instance" : inst->last_error.c_str();
  }

 public:
  // The table exported by FULCRUM_EXPORT_PLUGIN. Built once; static storage.
  static const fulcrum_plugin_v1* table() noexcept {
    static const Names names = [] {
      Names n;
      try {
        auto probe = make(Host());
        n.name = probe->name();
        n.cp = probe->cp_strategies();
        n.dp = probe->dp_strategies();
        n.schedule = probe->schedule_strategies();
      } catch (...) {
        n.ok = false;
      }
      for (const auto& s : n.cp) n.cp_c.push_back(s.c_str());
      for (const auto& s : n.dp) n.dp_c.push_back(s.c_str());
      for (const auto& s : n.schedule) n.schedule_c.push_back(s.c_str());
      return n;
    }();
    if (!names.ok) return nullptr;
    static const fulcrum_plugin_v1 t = {
        FULCRUM_PLUGIN_V1_1_SIZE,
        FULCRUM_ABI_MAJOR,
        FULCRUM_ABI_MINOR,
        names.name.c_str(),
        names.cp_c.data(),
        static_cast<int32_t>(names.cp_c.size()),
        static_cast<int32_t>(names.dp_c.size()),
        names.dp_c.data(),
        &create,
        &destroy,
        &plan_cp,
        &release_plan,
        &partition_dp,
        &last_error,
        names.schedule_c.empty() ? nullptr : names.schedule_c.data(),
        static_cast<int32_t>(names.schedule_c.size()),
        0,
        // A balancer that lists no scheduler leaves the hook unset, and the
        // host serves its built-in fixed schedule from this plugin's plans.
        names.schedule_c.empty() ? nullptr : &schedule,
        names.schedule_c.empty() ? nullptr : &release_schedule,
    };
    return &t;
  }

 private:
  struct Names {
    bool ok = true;
    std::string name;
    std::vector<std::string> cp, dp, schedule;
    std::vector<const char*> cp_c, dp_c, schedule_c;
  };
};

}  // namespace fulcrum::sdk

// Exports `Class` (derived from fulcrum::LoadBalancer) as this library's plugin.
// Use once per shared library, at namespace scope.
#define FULCRUM_EXPORT_PLUGIN(Class)                                                \
  extern "C" FULCRUM_PLUGIN_API const fulcrum_plugin_v1* fulcrum_get_plugin(void) { \
    return ::fulcrum::sdk::PluginAdapter<Class>::table();                           \
  }
