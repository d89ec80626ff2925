// Checks made before a job starts, so that a path the job can never use is
// refused in one line at once instead of after hours of training: the files
// a run writes (--metrics, --save-params), the checkpoint it resumes from and
// the directory it checkpoints into. No LibTorch; the launcher and
// fulcrum-worker (when started by torchrun, srun or mpirun) both call these.
#pragma once

#include <string>
#include <string_view>

#include "fulcrum/status.h"

namespace fulcrum::launch {

// `path` can be created or overwritten by this process: not a directory, an
// existing file is writable, otherwise its parent directory exists and is
// writable. `what` names the flag or key in the message ("--save-params").
Status check_output_file(const std::string& path, std::string_view what);

// `path` is an existing regular file this process can read.
Status check_input_file(const std::string& path, std::string_view what, std::string_view fix);

// `path` is a writable directory, or can be created: its nearest existing
// ancestor is a writable directory.
Status check_output_dir(const std::string& path, std::string_view what);

// A lower bound on one rank's memory, from the sizes a config asks for: what
// no implementation of the model could do without. A job whose bound, times
// the ranks on this host, exceeds the host's memory can only fail later
// (std::bad_alloc mid-setup, or a machine thrashing for hours), so it is
// refused before it starts; everything smaller is left to run.
struct MemoryInputs {
  double vocab_size = 0, hidden_size = 0, ffn_size = 0, num_layers = 0;
  double seq_length = 0, micro_batch_size = 0, cp_size = 1;
  double num_samples = 0;  // samples in the sample index each rank keeps
  double dtype_bytes = 4;
};

struct MemoryNeed {
  double state_bytes = 0;       // parameters, gradients and AdamW's two moments
  double activation_bytes = 0;  // one micro-batch's layer inputs and logits on one rank
  double index_bytes = 0;       // the sample index
  double total() const { return state_bytes + activation_bytes + index_bytes; }
};

MemoryNeed minimum_memory(const MemoryInputs& in);

// Physical memory of this host in bytes (0 when unknown).
double host_memory_bytes();

// Refuses when `ranks` ranks of `need` cannot fit in `host_bytes` (never
// when host_bytes is 0), naming the parts and the keys that size them.
Status check_memory(const MemoryNeed& need, int ranks, double host_bytes);

}  // namespace fulcrum::launch
