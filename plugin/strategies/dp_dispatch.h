// Feeding the DP partition from a stream of samples.
//
// WindowedDispatcher balances several dispatch batches together: a window of
// w batches gives the partitioner w times more samples to trade, so the
// per-rank work of every batch is closer to even than balancing each batch on
// its own, while no sample waits longer than one window.
//
// LengthBucketedSampler orders an epoch so that each batch holds samples of
// similar length, which keeps packing and padding cheap; it is deterministic
// by (seed, epoch) on every platform.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/dp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::dp {

struct DispatchOptions {
  std::int32_t num_ranks = 1;     // k, data-parallel ranks
  std::int32_t window = 1;        // w, dispatch batches balanced together (>= 1)
  std::int32_t batch_size = 1;    // samples per dispatch batch (>= 1)
  CostModel cost;                 // what "balanced" means
  std::string strategy = "auto";  // a DP strategy name (see strategies())
};

struct DispatchBatch {
  std::uint64_t window = 0;                      // the window it came from, 0-based
  std::vector<std::vector<std::int64_t>> ranks;  // sample ids per rank, k entries
  std::vector<double> cost;                      // per rank, under the dispatcher's cost model
};

struct BufferedSample {
  std::int64_t id = 0;
  std::int64_t length = 0;
};

// Everything a dispatcher holds between calls, for checkpoints: restore it
// into a dispatcher built with the same options and the stream resumes
// exactly where it stopped.
struct DispatcherState {
  std::uint64_t next_window = 0;         // index the next formed window will get
  std::vector<BufferedSample> buffered;  // pushed, not yet in a window
  std::vector<DispatchBatch> pending;    // formed, not yet returned by next()
};

class WindowedDispatcher {
 public:
  // Checks the options (k, w, batch_size >= 1, cost model, known strategy).
  static Result<WindowedDispatcher> create(DispatchOptions options);

  // Buffers one sample; when a full window (w * batch_size samples) is
  // buffered it is partitioned into w batches that next() then returns.
  Status push(std::int64_t sample_id, std::int64_t length);

  // The oldest ready batch, or nothing when no batch is ready.
  std::optional<DispatchBatch> next();

  // Forms batches from a partial window (end of epoch): ceil(buffered /
  // batch_size) batches of near-equal size. A no-op when nothing is buffered.
  Status flush();

  std::size_t buffered() const { return buffered_.size(); }
  std::size_t ready() const { return pending_.size(); }
  const DispatchOptions& options() const { return options_; }

  DispatcherState save_state() const;
  // Replaces this dispatcher's state; refuses (and keeps the old state) when
  // the snapshot cannot come from a dispatcher with these options.
  Status restore_state(const DispatcherState& state);

 private:
  explicit WindowedDispatcher(DispatchOptions options) : options_(std::move(options)) {}
  std::size_t window_capacity() const;
  Status form_window(std::size_t num_batches);

  DispatchOptions options_;
  std::uint64_t next_window_ = 0;
  std::vector<BufferedSample> buffered_;
  std::deque<DispatchBatch> pending_;
};

struct SamplerOptions {
  std::int32_t num_buckets = 1;  // quantile buckets of the lengths (>= 1)
  std::int32_t batch_size = 1;   // samples per batch (>= 1)
  std::uint64_t seed = 0;
};

class LengthBucketedSampler {
 public:
  // lengths: one per sample (>= 1). Buckets split at length quantiles, so
  // equal lengths always share a bucket and some buckets may stay empty.
  static Result<LengthBucketedSampler> create(std::vector<std::int64_t> lengths,
                                              SamplerOptions options);

  // The batches of epoch `epoch`: each holds indices of one bucket, at most
  // batch_size of them (a bucket's last batch may be short); every index
  // appears exactly once. Same (seed, epoch): same result everywhere.
  std::vector<std::vector<std::int64_t>> epoch_batches(std::uint64_t epoch) const;

  // epoch_batches(epoch), concatenated.
  std::vector<std::int64_t> epoch(std::uint64_t epoch) const;

  std::int32_t bucket_of(std::int64_t index) const {
    return bucket_[static_cast<std::size_t>(index)];
  }
  std::size_t size() const { return bucket_.size(); }

 private:
  LengthBucketedSampler(std::vector<std::int32_t> bucket, SamplerOptions options)
      : bucket_(std::move(bucket)), options_(options) {}

  std::vector<std::int32_t> bucket_;  // bucket of each sample
  SamplerOptions options_;
};

}  // namespace fulcrum::dp
