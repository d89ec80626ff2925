#include "train_preflight.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "cli_common.h"
#include "data/indexed_dataset.h"
#include "data/jsonl_dataset.h"
#include "data/synthetic_dataset.h"
#include "data/token_dataset.h"
#include "fulcrum/core/schedule.h"
#include "host/input_file.h"
#include "train/checkpoint.h"
#include "train/options.h"

namespace fulcrum::cli {
namespace {

namespace fs = std::filesystem;

train::TrainOptions options_or_throw(const host::Config& config) {
  Result<train::TrainOptions> options = train::train_options_from_config(config);
  if (!options) {
    std::string message = options.status().message();
    if (message.find("; ") == std::string::npos) message += "; correct the config";
    throw UsageError(message);
  }
  return std::move(options).value();
}

// Hybrid mode schedules a global batch's rows, one piece each, and a
// schedule takes at most kMaxPiecesPerRank pieces per rank
// (validate_schedule_request). A batch has at most global_batch_size x
// ceil(longest sample / seq_length) rows, so that bound is checked here,
// before the workers would refuse step 1.
void check_hybrid_rows(const train::TrainOptions& o, std::int64_t longest) {
  if (o.mode != train::ParallelMode::kHybrid || longest < 1) return;
  const std::int64_t cuts = (longest + o.seq_length - 1) / o.seq_length;
  const std::int64_t allowed = kMaxPiecesPerRank * o.dp_size;
  if (cuts <= allowed / o.global_batch_size) return;
  const std::int64_t seq_needed = (longest + allowed / o.global_batch_size - 1) /
                                  std::max<std::int64_t>(1, allowed / o.global_batch_size);
  throw UsageError(
      "parallel.mode: hybrid cuts a global batch of data.global_batch_size = " +
      std::to_string(o.global_batch_size) + " samples of up to " + std::to_string(longest) +
      " tokens at data.seq_length = " + std::to_string(o.seq_length) + " into up to " +
      std::to_string(o.global_batch_size) + " x " + std::to_string(cuts) + " rows, more than the " +
      std::to_string(kMaxPiecesPerRank) + " per rank a schedule takes on " +
      std::to_string(o.dp_size) + " ranks; raise data.seq_length" +
      (allowed >= o.global_batch_size ? " to at least " + std::to_string(seq_needed)
                                      : std::string()) +
      " or lower data.global_batch_size");
}

}  // namespace

void check_train_options(const host::Config& config) { options_or_throw(config); }

void check_train_data(const host::Config& config) {
  const train::TrainOptions o = options_or_throw(config);
  if (o.source == train::DataSource::kSynthetic) {
    if (o.data_path.empty()) {
      check_hybrid_rows(o, o.max_length);
      return;
    }
    // Synthetic tokens are drawn below the vocabulary; only the lengths are read.
    Result<std::vector<std::int64_t>> lengths = data::read_lengths_file(o.data_path);
    if (!lengths) throw UsageError("data.path: " + lengths.status().message());
    check_hybrid_rows(o, *std::max_element(lengths->begin(), lengths->end()));
    return;
  }
  std::unique_ptr<data::TokenDataset> dataset;
  if (o.source == train::DataSource::kJsonl) {
    Result<data::JsonlDataset> d = data::JsonlDataset::open(o.data_path);
    if (!d) throw UsageError("data.path: " + d.status().message());
    dataset = std::make_unique<data::JsonlDataset>(std::move(d).value());
  } else {
    Result<data::IndexedDataset> d = data::IndexedDataset::open(o.data_path);
    if (!d) throw UsageError("data.path: " + d.status().message());
    dataset = std::make_unique<data::IndexedDataset>(std::move(d).value());
  }
  std::int64_t longest = 0;
  for (std::int64_t i = 0; i < dataset->size(); ++i)
    longest = std::max(longest, dataset->length(i));
  check_hybrid_rows(o, longest);
  const std::int64_t vocab = o.model.vocab_size;
  std::int64_t scanned = 0;
  bool any_tokens = false;
  for (std::int64_t i = 0; i < dataset->size() && scanned < kMaxScannedTokens; ++i) {
    std::vector<std::int64_t> tokens;
    try {
      tokens = dataset->tokens(i);
    } catch (const data::DatasetChanged& e) {
      throw UsageError(std::string("data.path: ") + e.what());
    }
    for (std::size_t j = 0; j < tokens.size(); ++j) {
      if (tokens[j] >= 0 && tokens[j] < vocab) continue;
      throw UsageError("data.path " + o.data_path + ": sample " + std::to_string(i) + ", token " +
                       std::to_string(j) + " is id " + std::to_string(tokens[j]) +
                       ", outside model.vocab_size = " + std::to_string(vocab) +
                       "; raise model.vocab_size above the largest token id or fix the data");
    }
    scanned += static_cast<std::int64_t>(tokens.size());
    any_tokens = any_tokens || !tokens.empty();
  }
  if (!any_tokens && scanned < kMaxScannedTokens) {
    throw UsageError("data.path: " + dataset->describe() +
                     " has no sample with at least one token; give a dataset with tokens");
  }
}

void check_config_not_empty(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (!ec && size == 0) {
    throw UsageError("config file " + path +
                     " is empty; fulcrum train needs a training config, e.g. "
                     "configs/quickstart.yaml");
  }
}

void check_resume(const host::Config& config) {
  const std::string resume = config.get_string("train.resume");
  if (resume == "none") return;
  if (resume == "auto") {
    if (config.get_string("train.checkpoint_dir").empty()) {
      throw UsageError(
          "train.resume = auto needs train.checkpoint_dir, the directory to resume from; set "
          "it, or name a checkpoint file in train.resume");
    }
    return;
  }
  const std::string fix = "give a checkpoint file written by fulcrum train, or train.resume: auto";
  Result<host::InputFile> opened = host::open_input_file(resume, {"checkpoint " + resume, fix});
  if (!opened) throw UsageError(opened.status().message());
  if (Status s = train::check_checkpoint_owner(opened.value().fd(), resume); !s) {
    throw UsageError(s.message());
  }
  char magic[sizeof train::kCheckpointMagic - 1] = {};
  const ssize_t got = ::pread(opened.value().fd(), magic, sizeof magic, 0);
  if (got != static_cast<ssize_t>(sizeof magic) ||
      std::memcmp(magic, train::kCheckpointMagic, sizeof magic) != 0) {
    throw UsageError("checkpoint " + resume +
                     " is not a fulcrum checkpoint (it does not start with '" +
                     std::string(train::kCheckpointMagic) + "'); " + fix);
  }
}

int lock_checkpoint_dir(const host::Config& config) {
  const std::string dir = config.get_string("train.checkpoint_dir");
  // Set, the directory may be written (periodically, or once when the run
  // is interrupted by SIGINT/SIGTERM) or read (train.resume: auto).
  if (dir.empty()) return -1;
  // Made as the workers make it (no directory wider than 0755) and refused
  // here, once, where any user may write it.
  if (Status status = train::prepare_checkpoint_dir(dir); !status) {
    throw UsageError(status.message());
  }
  // The directory itself is locked: no file is left in it, and the lock goes
  // with the descriptor however the run ends.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw UsageError("cannot open train.checkpoint_dir " + dir + " (" + std::strerror(errno) +
                     "); choose a directory this user can read and write");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      throw UsageError("train.checkpoint_dir " + dir +
                       " is in use by another fulcrum train run (it holds a lock on the "
                       "directory); wait for it to end or give this run its own "
                       "train.checkpoint_dir");
    }
    throw UsageError("cannot lock train.checkpoint_dir " + dir + " (" + std::strerror(err) +
                     "); choose a directory on a local file system");
  }
  return fd;
}

}  // namespace fulcrum::cli
