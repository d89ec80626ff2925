#include "strategies/dp_dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "strategies/dp_strategies.h"

namespace fulcrum::dp {
namespace {

// A group of one window's partition: the samples one rank gets in one batch.
struct Group {
  std::vector<std::int64_t> members;  // positions in the window
  double cost = 0.0;
};

// Chooses which groups make up each batch. Groups of the same size are
// handed out as consecutive runs in cost order, so each batch gets k groups
// of nearly the same cost (its ranks finish together); per size class the
// batch with the fewest samples so far gets the next group, so batch sizes
// differ by at most one sample when the partition's counts are equal.
std::vector<std::vector<std::size_t>> groups_per_batch(const std::vector<Group>& groups,
                                                       std::size_t num_batches,
                                                       std::size_t per_batch) {
  std::vector<std::size_t> order(groups.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (groups[a].members.size() != groups[b].members.size()) {
      return groups[a].members.size() > groups[b].members.size();
    }
    return groups[a].cost > groups[b].cost;
  });

  std::vector<std::vector<std::size_t>> batches(num_batches);
  std::vector<std::size_t> samples(num_batches, 0);
  std::size_t start = 0;
  while (start < order.size()) {
    const std::size_t size = groups[order[start]].members.size();
    std::size_t end = start;
    while (end < order.size() && groups[order[end]].members.size() == size) ++end;

    std::vector<std::size_t> quota(num_batches, 0);
    for (std::size_t g = start; g < end; ++g) {
      std::size_t pick = num_batches;
      for (std::size_t b = 0; b < num_batches; ++b) {
        if (batches[b].size() + quota[b] >= per_batch) continue;
        if (pick == num_batches || samples[b] < samples[pick]) pick = b;
      }
      ++quota[pick];
      samples[pick] += size;
    }
    std::size_t next = start;
    for (std::size_t b = 0; b < num_batches; ++b) {
      for (std::size_t q = 0; q < quota[b]; ++q) batches[b].push_back(order[next++]);
    }
    start = end;
  }
  return batches;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Uniform in [0, bound): rejects the low 2^64 mod bound draws so every value
// is equally likely. Written out because std::uniform_int_distribution is
// implementation-defined, and epochs must replay identically everywhere.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound) {
  const std::uint64_t reject_below = (0 - bound) % bound;
  std::uint64_t draw = rng();
  while (draw < reject_below) draw = rng();
  return draw % bound;
}

template <typename T>
void fisher_yates(std::vector<T>& values, std::mt19937_64& rng) {
  for (std::size_t i = values.size(); i > 1; --i) {
    const std::size_t j = uniform_below(rng, i);
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace

// --- WindowedDispatcher -----------------------------------------------------

Result<WindowedDispatcher> WindowedDispatcher::create(DispatchOptions options) {
  if (options.num_ranks < 1) {
    return invalid_argument("dispatcher: num_ranks is " + std::to_string(options.num_ranks) +
                            "; pass at least one data-parallel rank");
  }
  if (options.window < 1) {
    return invalid_argument("dispatcher: window is " + std::to_string(options.window) +
                            "; pass at least 1 batch per window");
  }
  if (options.batch_size < 1) {
    return invalid_argument("dispatcher: batch_size is " + std::to_string(options.batch_size) +
                            "; pass at least 1 sample per batch");
  }
  if (find_strategy(options.strategy) == nullptr) {
    return not_found("dispatcher: dp strategy '" + options.strategy +
                     "' does not exist; pick one of round_robin, lpt, karmarkar_karp, auto");
  }
  // Let the request validator judge the cost model, on a one-sample request.
  DpRequest probe;
  probe.lengths = {1};
  probe.cost = options.cost;
  if (Status status = validate_request(probe); !status) {
    return invalid_argument("dispatcher: " + status.message());
  }
  return WindowedDispatcher(std::move(options));
}

std::size_t WindowedDispatcher::window_capacity() const {
  return static_cast<std::size_t>(options_.window) * static_cast<std::size_t>(options_.batch_size);
}

Status WindowedDispatcher::push(std::int64_t sample_id, std::int64_t length) {
  if (length < 1) {
    return invalid_argument("dispatcher: sample " + std::to_string(sample_id) + " has length " +
                            std::to_string(length) + "; every sample needs >= 1 token");
  }
  buffered_.push_back({sample_id, length});
  if (buffered_.size() < window_capacity()) return Status::ok();
  return form_window(static_cast<std::size_t>(options_.window));
}

std::optional<DispatchBatch> WindowedDispatcher::next() {
  if (pending_.empty()) return std::nullopt;
  DispatchBatch batch = std::move(pending_.front());
  pending_.pop_front();
  return batch;
}

Status WindowedDispatcher::flush() {
  if (buffered_.empty()) return Status::ok();
  const auto batch_size = static_cast<std::size_t>(options_.batch_size);
  return form_window((buffered_.size() + batch_size - 1) / batch_size);
}

Status WindowedDispatcher::form_window(std::size_t num_batches) {
  const auto k = static_cast<std::size_t>(options_.num_ranks);
  const std::size_t num_groups = num_batches * k;
  if (num_groups > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    return invalid_argument("dispatcher: window * num_ranks = " + std::to_string(num_groups) +
                            " groups is too many; lower window or num_ranks");
  }
  DpRequest request;
  request.num_ranks = static_cast<std::int32_t>(num_groups);
  request.cost = options_.cost;
  request.equal_count = true;
  request.lengths.reserve(buffered_.size());
  for (const BufferedSample& sample : buffered_) request.lengths.push_back(sample.length);

  Result<DpPartition> split = partition(options_.strategy, request);
  if (!split) return split.status();
  if (split->ranks.size() != num_groups) {
    return internal_error("dispatcher: strategy '" + options_.strategy + "' returned " +
                          std::to_string(split->ranks.size()) + " groups, expected " +
                          std::to_string(num_groups));
  }

  std::vector<Group> groups(num_groups);
  for (std::size_t g = 0; g < num_groups; ++g) {
    groups[g].members = std::move(split->ranks[g]);
    groups[g].cost = split->cost[g];
  }
  const std::vector<std::vector<std::size_t>> batches = groups_per_batch(groups, num_batches, k);

  for (std::size_t b = 0; b < num_batches; ++b) {
    DispatchBatch batch;
    batch.window = next_window_;
    batch.ranks.resize(k);
    batch.cost.resize(k);
    // Rotate which rank gets the batch's heaviest group so no rank is always
    // the one holding the slightly heavier share.
    const std::size_t rotation = (next_window_ * num_batches + b) % k;
    for (std::size_t slot = 0; slot < k; ++slot) {
      const Group& group = groups[batches[b][slot]];
      const std::size_t rank = (slot + rotation) % k;
      batch.cost[rank] = group.cost;
      for (std::int64_t position : group.members) {
        batch.ranks[rank].push_back(buffered_[static_cast<std::size_t>(position)].id);
      }
    }
    pending_.push_back(std::move(batch));
  }
  ++next_window_;
  buffered_.clear();
  return Status::ok();
}

DispatcherState WindowedDispatcher::save_state() const {
  DispatcherState state;
  state.next_window = next_window_;
  state.buffered = buffered_;
  state.pending.assign(pending_.begin(), pending_.end());
  return state;
}

Status WindowedDispatcher::restore_state(const DispatcherState& state) {
  if (state.buffered.size() >= window_capacity()) {
    return invalid_argument(
        "dispatcher: snapshot buffers " + std::to_string(state.buffered.size()) +
        " samples, but a window of these options holds " + std::to_string(window_capacity()) +
        "; restore into a dispatcher with the snapshot's options");
  }
  for (const BufferedSample& sample : state.buffered) {
    if (sample.length < 1) {
      return invalid_argument("dispatcher: snapshot sample " + std::to_string(sample.id) +
                              " has length " + std::to_string(sample.length) +
                              "; the snapshot is corrupt");
    }
  }
  const auto k = static_cast<std::size_t>(options_.num_ranks);
  for (const DispatchBatch& batch : state.pending) {
    if (batch.ranks.size() != k || batch.cost.size() != k) {
      return invalid_argument(
          "dispatcher: snapshot batch of window " + std::to_string(batch.window) + " has " +
          std::to_string(batch.ranks.size()) + " ranks, these options have " + std::to_string(k) +
          "; restore into a dispatcher with the snapshot's options");
    }
  }
  next_window_ = state.next_window;
  buffered_ = state.buffered;
  pending_.assign(state.pending.begin(), state.pending.end());
  return Status::ok();
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
  std::mt19937_64 rng(splitmix64(options_.seed ^ splitmix64(epoch)));
  std::vector<std::vector<std::int64_t>> members(static_cast<std::size_t>(options_.num_buckets));
  for (std::size_t i = 0; i < bucket_.size(); ++i) {
    members[static_cast<std::size_t>(bucket_[i])].push_back(static_cast<std::int64_t>(i));
  }
  const auto batch_size = static_cast<std::size_t>(options_.batch_size);
  std::vector<std::vector<std::int64_t>> batches;
  for (std::vector<std::int64_t>& in_bucket : members) {
    fisher_yates(in_bucket, rng);
    for (std::size_t start = 0; start < in_bucket.size(); start += batch_size) {
      const std::size_t end = std::min(in_bucket.size(), start + batch_size);
      batches.emplace_back(in_bucket.begin() + static_cast<std::ptrdiff_t>(start),
                           in_bucket.begin() + static_cast<std::ptrdiff_t>(end));
    }
  }
  fisher_yates(batches, rng);
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
