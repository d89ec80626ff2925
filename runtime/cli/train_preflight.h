// What `fulcrum train` checks before any worker starts, beyond single flags
// and keys: the configuration as the workers will read it, the data against
// the vocabulary, the rendezvous port and the checkpoint directory. Each
// throws UsageError with one line; a job that passes them can still fail, but
// not for a reason known before the rendezvous.
#pragma once

#include <cstdint>
#include <string>

#include "fulcrum/host/config.h"

namespace fulcrum::cli {

// The workers' own reading of the configuration (model shape, masks, sizes,
// timeouts), run once here so a mistake is one line, not one per rank.
void check_train_options(const host::Config& config);

// Opens data.path as a worker will and checks every token id against
// model.vocab_size, up to kMaxScannedTokens tokens (see docs/RELIABILITY.md
// for the cost); the rest is checked by the workers as rows are built.
inline constexpr std::int64_t kMaxScannedTokens = std::int64_t{1} << 28;
void check_train_data(const host::Config& config);

// A training run needs a configuration of its own: an empty --config file
// (an unfinished copy, a wrong path to an empty file) would silently train
// the defaults for hours.
void check_config_not_empty(const std::string& path);

// train.resume: auto needs train.checkpoint_dir; a named checkpoint must be
// one this version can read (its magic first, so that a huge file of
// something else is refused without reading it all).
void check_resume(const host::Config& config);

// An exclusive lock (flock) on the train.checkpoint_dir directory for the life of the returned
// descriptor (-1 when train.checkpoint_dir is empty): a second run into the
// same directory is refused instead of overwriting the first one's files.
int lock_checkpoint_dir(const host::Config& config);

}  // namespace fulcrum::cli
