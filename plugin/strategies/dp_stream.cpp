#include "strategies/dp_stream.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "fulcrum/core/random.h"
#include "strategies/dp_strategies.h"

namespace fulcrum::dp {

// --- WindowedDispatcher over the registry ----------------------------------

Result<WindowedDispatcher> make_windowed_dispatcher(DispatchOptions options) {
  if (find_strategy(options.strategy) == nullptr) {
    return not_found("dispatcher: dp strategy " + quote_text(options.strategy) +
                     " does not exist; pick one of round_robin, lpt, karmarkar_karp, auto");
  }
  std::string strategy = options.strategy;
  return WindowedDispatcher::create(std::move(options),
                                    [strategy = std::move(strategy)](const DpRequest& request) {
                                      return partition(strategy, request);
                                    });
}

// --- LengthBucketedSampler --------------------------------------------------

Result<LengthBucketedSampler> LengthBucketedSampler::create(std::vector<std::int64_t> lengths,
                                                            SamplerOptions options) {
  if (options.num_buckets < 1) {
    return invalid_argument("sampler: num_buckets is " + std::to_string(options.num_buckets) +
                            "; pass at least 1");
  }
  if (options.batch_size < 1) {
    return invalid_argument("sampler: batch_size is " + std::to_string(options.batch_size) +
                            "; pass at least 1 sample per batch");
  }
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) {
      return invalid_argument("sampler: lengths[" + std::to_string(i) + "] is " +
                              std::to_string(lengths[i]) + "; every sample needs >= 1 token");
    }
  }

  // Bucket b holds lengths in [boundary[b-1], boundary[b]); boundaries are
  // values, so equal lengths never straddle two buckets.
  std::vector<std::int64_t> sorted = lengths;
  std::sort(sorted.begin(), sorted.end());
  const auto num_buckets = static_cast<std::size_t>(options.num_buckets);
  std::vector<std::int64_t> boundaries;
  for (std::size_t b = 1; b < num_buckets && !sorted.empty(); ++b) {
    boundaries.push_back(sorted[b * sorted.size() / num_buckets]);
  }
  std::vector<std::int32_t> bucket(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    bucket[i] = static_cast<std::int32_t>(
        std::upper_bound(boundaries.begin(), boundaries.end(), lengths[i]) - boundaries.begin());
  }
  return LengthBucketedSampler(std::move(bucket), options);
}

std::vector<std::vector<std::int64_t>> LengthBucketedSampler::epoch_batches(
    std::uint64_t epoch) const {
  std::mt19937_64 rng(derive_seed(options_.seed, epoch));
  std::vector<std::vector<std::int64_t>> members(static_cast<std::size_t>(options_.num_buckets));
  for (std::size_t i = 0; i < bucket_.size(); ++i) {
    members[static_cast<std::size_t>(bucket_[i])].push_back(static_cast<std::int64_t>(i));
  }
  const auto batch_size = static_cast<std::size_t>(options_.batch_size);
  std::vector<std::vector<std::int64_t>> batches;
  for (std::vector<std::int64_t>& in_bucket : members) {
    portable_shuffle(in_bucket, rng);
    for (std::size_t start = 0; start < in_bucket.size(); start += batch_size) {
      const std::size_t end = std::min(in_bucket.size(), start + batch_size);
      batches.emplace_back(in_bucket.begin() + static_cast<std::ptrdiff_t>(start),
                           in_bucket.begin() + static_cast<std::ptrdiff_t>(end));
    }
  }
  portable_shuffle(batches, rng);
  return batches;
}

std::vector<std::int64_t> LengthBucketedSampler::epoch(std::uint64_t epoch) const {
  std::vector<std::int64_t> order;
  order.reserve(bucket_.size());
  for (const auto& batch : epoch_batches(epoch))
    order.insert(order.end(), batch.begin(), batch.end());
  return order;
}

}  // namespace fulcrum::dp
