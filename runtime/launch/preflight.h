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

}  // namespace fulcrum::launch
