#include "train/checkpoint_profile.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/core/bytes.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/log.h"

namespace fulcrum::train {
namespace {

constexpr std::size_t kMaxNameBytes = 255;
// i32 group, four i64 counts, f64 seconds, i64 row tokens; and (version 2)
// i64 partial tiles.
constexpr std::size_t kSampleBytesV1 = 4 + 4 * 8 + 8 + 8;
constexpr std::size_t kSampleBytes = kSampleBytesV1 + 8;

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// The profile's fields after its name, in the entry's order (version 1:
// without the last).
std::vector<double*> profile_doubles(CostProfile& p, std::uint32_t version) {
  std::vector<double*> fields = {&p.tile_seconds,
                                 &p.token_seconds,
                                 &p.slot_seconds,
                                 &p.kv_bytes_per_token,
                                 &p.intra_node_bytes_per_second,
                                 &p.inter_node_bytes_per_second,
                                 &p.latency_seconds,
                                 &p.exchange_overlap,
                                 &p.row_token_seconds};
  if (version >= 2) fields.push_back(&p.partial_tile_seconds);
  return fields;
}

Status read_profile(ByteReader& in, CostProfile& p, std::uint32_t version) {
  const std::uint64_t length = in.u64();
  if (!in.ok() || length > kMaxNameBytes) {
    return invalid_argument("its profile name is " + std::to_string(length) +
                            " bytes long, more than the " + std::to_string(kMaxNameBytes) +
                            " allowed");
  }
  std::string_view name;
  in.get_bytes(static_cast<std::size_t>(length), name);
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return invalid_argument("its profile name holds a control byte");
    }
  }
  p.name = std::string(name);
  for (double* field : profile_doubles(p, version)) in.get(*field);
  in.get(p.ranks_per_node);
  if (!in.ok()) return invalid_argument("it ends inside the profile");
  if (Status valid = validate_cost_profile(p); !valid) {
    return invalid_argument("its profile is not valid: " + valid.message());
  }
  return Status::ok();
}

Status read_sample(ByteReader& in, calibrate::SlotSample& s, std::uint32_t version) {
  in.get(s.group);
  in.get(s.tokens);
  in.get(s.tiles);
  in.get(s.peers);
  in.get(s.kv_bytes);
  in.get(s.seconds);
  in.get(s.row_tokens);
  s.partial_tiles = -1;
  if (version >= 2) in.get(s.partial_tiles);
  if (!in.ok()) return invalid_argument("it ends inside a sample");
  if (s.group < 1 || s.tokens < 0 || s.tiles < 0 || s.peers < 0 || s.kv_bytes < 0 ||
      s.row_tokens < 0 || s.partial_tiles < -1 || s.partial_tiles > s.tiles) {
    return invalid_argument(
        "a sample has group " + std::to_string(s.group) + ", tokens " + std::to_string(s.tokens) +
        ", tiles " + std::to_string(s.tiles) + ", peers " + std::to_string(s.peers) +
        ", kv_bytes " + std::to_string(s.kv_bytes) + ", row tokens " +
        std::to_string(s.row_tokens) + ", partial tiles " + std::to_string(s.partial_tiles) +
        " (a group >= 1, counts >= 0 and partial tiles -1 or at most the tiles expected)");
  }
  // A member exchanges with its slot's other members at most.
  if (s.group > kMaxGroupSize || s.peers >= s.group) {
    return invalid_argument("a sample has group " + std::to_string(s.group) + " and peers " +
                            std::to_string(s.peers) + " (a group of at most 2^20 ranks and " +
                            "fewer peers than its group expected)");
  }
  if (!std::isfinite(s.seconds) || s.seconds < 0) {
    return invalid_argument("a sample's time is " + number(s.seconds) +
                            " s (finite and >= 0 expected)");
  }
  return Status::ok();
}

// A count that must fit in what is left, `each` bytes an item.
Result<std::uint64_t> read_count(ByteReader& in, std::size_t each, const char* what) {
  const std::uint64_t n = in.u64();
  if (!in.ok()) return invalid_argument(std::string("it ends before its count of ") + what);
  if (n > in.left() / each) {
    return invalid_argument(std::string("it counts ") + std::to_string(n) + " " + what +
                            ", more than its " + std::to_string(in.left()) +
                            " remaining bytes hold");
  }
  return n;
}

}  // namespace

std::string encode_refit_state(const ProfileRefit::State& state, double kv_bytes_per_token) {
  ByteWriter<std::string> out;
  out.put(kProfileRefitVersion).put(kv_bytes_per_token).i64(state.refits).str(state.profile.name);
  CostProfile p = state.profile;
  for (double* field : profile_doubles(p, kProfileRefitVersion)) out.put(*field);
  out.put(p.ranks_per_node);
  out.u64(state.window.size());
  for (const std::vector<calibrate::SlotSample>& step : state.window) {
    out.u64(step.size());
    for (const calibrate::SlotSample& s : step) {
      out.put(s.group).i64(s.tokens).i64(s.tiles).i64(s.peers).i64(s.kv_bytes).put(s.seconds);
      out.i64(s.row_tokens).i64(s.partial_tiles);
    }
  }
  return out.take();
}

Result<ProfileRefit::State> decode_refit_state(std::string_view bytes, double kv_bytes_per_token) {
  ByteReader in(bytes);
  std::uint32_t version = 0;
  double kv = 0;
  in.get(version);
  if (!in.ok()) return invalid_argument("it is " + std::to_string(bytes.size()) + " bytes long");
  if (version < 1 || version > kProfileRefitVersion) {
    return invalid_argument("it is version " + std::to_string(version) +
                            ", this fulcrum reads 1 to " + std::to_string(kProfileRefitVersion));
  }
  in.get(kv);
  ProfileRefit::State state;
  state.refits = in.i64();
  if (!in.ok()) return invalid_argument("it ends inside its header");
  // Bitwise: the model's figure comes out of the same arithmetic each run.
  if (!(kv == kv_bytes_per_token)) {
    return invalid_argument("it was written for a model with " + number(kv) +
                            " K/V bytes per token, this one has " + number(kv_bytes_per_token));
  }
  if (state.refits < 0) {
    return invalid_argument("it counts " + std::to_string(state.refits) + " refits");
  }
  if (Status s = read_profile(in, state.profile, version); !s) return s;
  Result<std::uint64_t> steps = read_count(in, 8, "steps");
  if (!steps) return steps.status();
  for (std::uint64_t i = 0; i < *steps; ++i) {
    Result<std::uint64_t> samples =
        read_count(in, version >= 2 ? kSampleBytes : kSampleBytesV1, "samples");
    if (!samples) return samples.status();
    std::vector<calibrate::SlotSample>& step = state.window.emplace_back();
    for (std::uint64_t j = 0; j < *samples; ++j) {
      if (Status s = read_sample(in, step.emplace_back(), version); !s) return s;
    }
  }
  if (!in.done()) {
    return invalid_argument(std::to_string(in.left()) + " bytes follow its last sample");
  }
  return state;
}

RefitCheckpoint::RefitCheckpoint(ProfileRefit& refit, double kv_bytes_per_token, std::string start)
    : refit_(refit), kv_bytes_per_token_(kv_bytes_per_token), start_(std::move(start)) {}

void RefitCheckpoint::save(Checkpoint& checkpoint) const {
  checkpoint.add(kProfileRefitEntry, encode_refit_state(refit_.state(), kv_bytes_per_token_));
}

Status RefitCheckpoint::read(const Checkpoint& checkpoint, const std::string& path, bool rank0) {
  pending_.reset();
  const std::string* bytes = checkpoint.find(kProfileRefitEntry);
  if (bytes == nullptr) {
    if (rank0) {
      host::log_to_stderr(host::LogLevel::kInfo,
                          "checkpoint " + path +
                              " holds no refitted cost profile (an older fulcrum or a job with "
                              "a fixed balancer.schedule.profile wrote it): "
                              "balancer.schedule.profile: auto starts again from " +
                              start_ + "; the schedules will differ from an uninterrupted run's");
    }
    return Status::ok();
  }
  Result<ProfileRefit::State> state = decode_refit_state(*bytes, kv_bytes_per_token_);
  if (!state) {
    return invalid_argument("checkpoint " + path + " entry '" + kProfileRefitEntry +
                            "' is not a refitted profile of this job: " + state.status().message() +
                            "; resume from another checkpoint (train.resume), or set a fixed "
                            "balancer.schedule.profile to resume without it");
  }
  pending_ = std::move(state).value();
  return Status::ok();
}

void RefitCheckpoint::install() {
  if (!pending_) return;
  refit_.restore(std::move(*pending_));
  pending_.reset();
  restored_ = true;
}

}  // namespace fulcrum::train
