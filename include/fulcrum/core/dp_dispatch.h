// Feeding the DP partition from a stream of samples, in windows. Part of
// fulcrum::core (no LibTorch), so the plugin's tests and benchmarks and the
// runtime's data loader share one implementation.
//
// WindowedDispatcher balances several dispatch batches together: a window of
// w batches gives the partitioner w times more samples to trade, so the
// per-rank work of every batch is closer to even than balancing each batch on
// its own, while no sample waits longer than one window.
//
// The partition itself is injected: the plugin passes its DP registry, the
// runtime the loaded balancer's partition_dp hook. The dispatcher asks it for
// an equal-count partition of the window into w * k groups and deals the
// groups out to the window's batches; it is as deterministic as the function.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/dp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::dp {

// Ok for a cost model fulcrum can weigh with: a known kind and, for
// attention, a finite coefficient a in [0, 2^40]. The message starts with
// `who` ("dp request", "dispatcher"). Shared by the DP registry's request
// check and the dispatcher's options check.
Status check_cost_model(const CostModel& cost, std::string_view who);

struct DispatchOptions {
  std::int32_t num_ranks = 1;     // k, data-parallel ranks
  std::int32_t window = 1;        // w, dispatch batches balanced together (>= 1)
  std::int32_t batch_size = 1;    // samples per dispatch batch (>= 1)
  CostModel cost;                 // what "balanced" means
  std::string strategy = "auto";  // the DP strategy the partition function runs, for messages
};

struct DispatchBatch {
  std::uint64_t window = 0;                      // the window it came from, 0-based
  std::vector<std::vector<std::int64_t>> ranks;  // sample ids per rank, k entries
  std::vector<double> cost;                      // per rank, under the dispatcher's cost model
  std::string strategy;                          // DpPartition::strategy of the window's partition
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
  // Partitions request.lengths into request.num_ranks groups (the window's
  // w * k groups; request.equal_count is always set). Must be deterministic.
  using PartitionFn = std::function<Result<DpPartition>(const DpRequest&)>;

  // Checks the options (k, w, batch_size >= 1, w * k groups within int32,
  // the cost model) and that a partition function is given.
  static Result<WindowedDispatcher> create(DispatchOptions options, PartitionFn partition);

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
  WindowedDispatcher(DispatchOptions options, PartitionFn partition)
      : options_(std::move(options)), partition_(std::move(partition)) {}
  std::size_t window_capacity() const;
  Status form_window(std::size_t num_batches);

  DispatchOptions options_;
  PartitionFn partition_;
  std::uint64_t next_window_ = 0;
  std::vector<BufferedSample> buffered_;
  std::deque<DispatchBatch> pending_;
};

}  // namespace fulcrum::dp
