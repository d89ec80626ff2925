// Feeding the DP partition from a stream of samples.
//
// WindowedDispatcher (in fulcrum::core, shared with the runtime's data
// loader) balances several dispatch batches together; make_windowed_dispatcher
// gives it this plugin's DP registry as its partition function.
//
// LengthBucketedSampler orders an epoch so that each batch holds samples of
// similar length, which keeps packing and padding cheap; it is deterministic
// by (seed, epoch) on every platform.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "fulcrum/core/dp_dispatch.h"
#include "fulcrum/dp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::dp {

// The windowed dispatcher (fulcrum/core/dp_dispatch.h) partitioning with
// this registry's strategy options.strategy; kNotFound for an unknown name.
Result<WindowedDispatcher> make_windowed_dispatcher(DispatchOptions options);

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
