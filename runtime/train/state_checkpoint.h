// The training state in a checkpoint and back: what of the model, the
// optimizer, the RNG and the loader one checkpoint holds, how train.resume
// chooses the file, and what a resume must match. The file format itself is
// checkpoint.h's. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <string>

#include "fulcrum/status.h"
#include "train/checkpoint.h"
#include "train/options.h"

namespace fulcrum::data {
class DataLoader;
}

namespace fulcrum::train {

class GptModel;
class AdamW;

// The replicated state of a job (every rank holds the same), and the
// settings texts that say what it means (run_settings.h).
struct TrainingState {
  GptModel* model = nullptr;
  AdamW* optimizer = nullptr;
  data::DataLoader* loader = nullptr;
  std::string trajectory;          // trajectory_settings(): must match on resume
  std::string layout;              // layout_settings(): a difference is warned about
  ModeCheckpoint* mode = nullptr;  // the mode's own state (checkpoint.h); none when null
};

// Where training resumes: after `step` (0 = from the start), from a file
// whose payload CRC-32 every rank must agree on.
struct ResumedAt {
  std::int64_t step = 0;
  std::uint32_t payload_crc32 = 0;
};

// train.resume: none (and, when checkpoints are written, an empty
// train.checkpoint_dir), a file, or auto (the newest intact checkpoint in
// the directory, refused ones named). Restores the chosen checkpoint into
// `state`; a refused checkpoint leaves the state as it was. Every rank reads
// the file itself; `rank0` says whether this rank reports.
Result<ResumedAt> restore_training_state(const CheckpointOptions& checkpoints, TrainingState& state,
                                         bool rank0);

// One checkpoint of the whole job after `step`: parameters, optimizer
// state, RNG and loader position are replicated on every rank (the DP
// partition and the CP plans are recomputed from them), so rank 0's copy is
// the complete state. Returns the file's path; throws CheckpointError when
// the file cannot be written.
std::string write_training_state(const CheckpointOptions& checkpoints, const TrainingState& state,
                                 std::int64_t step, int dp_size, int cp_size);

// --save-params: for every parameter in model order a line "name numel",
// a blank line, then all values as little-endian float64; written whole to a
// temporary file, synced and renamed over `path`.
Status save_parameters(const std::string& path, const GptModel& model);

}  // namespace fulcrum::train
