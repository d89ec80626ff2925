#include "fulcrum/core/dp_dispatch.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>

namespace fulcrum::dp {
namespace {

// A coefficient as the user wrote it (1e+307, not 308 digits).
std::string shortest_text(double value) {
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  return ec == std::errc() ? std::string(text, end) : std::string("?");
}

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

}  // namespace

Status check_cost_model(const CostModel& cost, std::string_view who) {
  if (cost.kind != CostKind::kTokens && cost.kind != CostKind::kAttention) {
    return invalid_argument(std::string(who) + ": cost kind " +
                            std::to_string(static_cast<std::int32_t>(cost.kind)) +
                            " is unknown; use tokens (0) or attention (1)");
  }
  if (cost.kind == CostKind::kAttention &&
      (!std::isfinite(cost.a) || cost.a < 0.0 || cost.a > kMaxAttentionA)) {
    return invalid_argument(std::string(who) + ": attention cost coefficient a is " +
                            shortest_text(cost.a) +
                            "; pass a value from 0 to 2^40 (default 24576)");
  }
  return Status::ok();
}

// --- WindowedDispatcher -----------------------------------------------------

Result<WindowedDispatcher> WindowedDispatcher::create(DispatchOptions options,
                                                      PartitionFn partition) {
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
  // A window is partitioned into w * k groups, counted in int32 by DpRequest.
  const std::int64_t groups =
      static_cast<std::int64_t>(options.window) * static_cast<std::int64_t>(options.num_ranks);
  if (groups > std::numeric_limits<std::int32_t>::max()) {
    return invalid_argument("dispatcher: window * num_ranks = " + std::to_string(groups) +
                            " groups is too many; lower window or num_ranks");
  }
  if (Status status = check_cost_model(options.cost, "dispatcher"); !status) return status;
  if (!partition) {
    return invalid_argument("dispatcher: no partition function for dp strategy " +
                            quote_text(options.strategy) + "; pass one");
  }
  return WindowedDispatcher(std::move(options), std::move(partition));
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

  Result<DpPartition> split = partition_(request);
  if (!split) return split.status();
  if (split->ranks.size() != num_groups) {
    return internal_error("dispatcher: strategy " + quote_text(options_.strategy) + " returned " +
                          std::to_string(split->ranks.size()) + " groups, expected " +
                          std::to_string(num_groups));
  }

  // The function may come from a plugin: check that it placed every buffered
  // sample exactly once, and recount the costs under this cost model, before
  // anything is handed out.
  std::vector<char> placed(buffered_.size(), 0);
  std::vector<Group> groups(num_groups);
  for (std::size_t g = 0; g < num_groups; ++g) {
    groups[g].members = std::move(split->ranks[g]);
    for (std::int64_t position : groups[g].members) {
      if (position < 0 || static_cast<std::size_t>(position) >= buffered_.size() ||
          placed[static_cast<std::size_t>(position)]++ != 0) {
        return internal_error("dispatcher: strategy " + quote_text(options_.strategy) +
                              " placed sample " + std::to_string(position) + " of a window of " +
                              std::to_string(buffered_.size()) + " out of range or more than once");
      }
      groups[g].cost += options_.cost(buffered_[static_cast<std::size_t>(position)].length);
    }
  }
  if (const auto missing = std::find(placed.begin(), placed.end(), 0); missing != placed.end()) {
    return internal_error("dispatcher: strategy " + quote_text(options_.strategy) +
                          " left out sample " + std::to_string(missing - placed.begin()) +
                          " of a window of " + std::to_string(buffered_.size()));
  }
  const std::vector<std::vector<std::size_t>> batches = groups_per_batch(groups, num_batches, k);

  for (std::size_t b = 0; b < num_batches; ++b) {
    DispatchBatch batch;
    batch.window = next_window_;
    batch.ranks.resize(k);
    batch.cost.resize(k);
    batch.strategy = split->strategy;
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

}  // namespace fulcrum::dp
