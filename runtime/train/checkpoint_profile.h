// balancer.schedule.profile: auto in a checkpoint. The refitted profile and
// the samples the next refits will use are state of the job like its
// parameters: a resumed job that started again from profile_start would
// plan other schedules than the uninterrupted one (its math would not
// change, its placements and step times would). So the refit's state is one
// more entry of the checkpoint, and a resumed job continues the refit where
// it stopped. No LibTorch.
//
// The entry "schedule/profile_refit", every value little-endian
// (fulcrum/core/bytes.h):
//
//   u32  version, kProfileRefitVersion
//   f64  the model's K/V bytes per token (2 x hidden x layers x dtype bytes):
//        the samples' bytes are counted in them
//   i64  refits so far
//   u64  name length, then the name's bytes (at most 255, no control byte)
//   f64  x 10: tile_seconds, token_seconds, slot_seconds, kv_bytes_per_token,
//        intra_node_bytes_per_second, inter_node_bytes_per_second,
//        latency_seconds, exchange_overlap, row_token_seconds,
//        partial_tile_seconds
//   i32  ranks_per_node
//   u64  steps in the window, oldest first; per step a u64 sample count,
//        then per sample: i32 group, i64 tokens, i64 tiles, i64 peers,
//        i64 kv_bytes, f64 seconds, i64 row tokens, i64 partial tiles (-1:
//        not recorded)
//
// Version 1 (before partial tiles) has no partial_tile_seconds (read as 0)
// and no partial tiles per sample (read as -1); it is read, and written back
// as version 2.
//
// The entry must end where its last sample ends. A checkpoint written
// without it (by an older fulcrum, or by a job with a fixed profile) resumes
// from profile_start, and rank 0 says so once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fulcrum/status.h"
#include "train/checkpoint.h"
#include "train/profile_refit.h"

namespace fulcrum::train {

inline constexpr char kProfileRefitEntry[] = "schedule/profile_refit";
inline constexpr std::uint32_t kProfileRefitVersion = 2;

std::string encode_refit_state(const ProfileRefit::State& state, double kv_bytes_per_token);

// The entry's bytes, checked: the version, the model's K/V bytes per token
// (`kv_bytes_per_token`: an entry for another model is foreign), a valid
// profile, samples with counts >= 0, g in [1, 2^20] (the most ranks a
// schedule places; not this job's world: a job may resume on another
// layout), fewer peers than g and finite seconds >= 0, nothing after the
// end. The error says what is wrong, without the file.
Result<ProfileRefit::State> decode_refit_state(std::string_view bytes, double kv_bytes_per_token);

// The refit of a job with balancer.schedule.profile: auto, saved in and
// restored from its checkpoints.
class RefitCheckpoint final : public ModeCheckpoint {
 public:
  // `refit` outlives this object; `start` names profile_start in messages.
  RefitCheckpoint(ProfileRefit& refit, double kv_bytes_per_token, std::string start);

  void save(Checkpoint& checkpoint) const override;
  Status read(const Checkpoint& checkpoint, const std::string& path, bool rank0) override;
  void install() override;

  // The checkpoint the job resumed from held the refit's state and it is in
  // place.
  bool restored() const { return restored_; }

 private:
  ProfileRefit& refit_;
  double kv_bytes_per_token_;
  std::string start_;
  std::optional<ProfileRefit::State> pending_;
  bool restored_ = false;
};

}  // namespace fulcrum::train
