#include "data/loader.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/seeded_random.h"

namespace fulcrum::data {
namespace {

// What is wrong with a partition of m batch positions over k ranks, or "".
// The loader's exactly-once guarantee rests on this, so it does not trust
// the balancer (a plugin) to get it right.
std::string partition_problem(const DpPartition& part, std::size_t m, std::size_t k) {
  if (part.ranks.size() != k) {
    return "it has " + std::to_string(part.ranks.size()) + " ranks, expected " + std::to_string(k);
  }
  std::vector<char> seen(m, 0);
  for (const auto& rank : part.ranks) {
    for (std::int64_t i : rank) {
      if (i < 0 || static_cast<std::size_t>(i) >= m) {
        return "it names sample " + std::to_string(i) + " of a batch of " + std::to_string(m);
      }
      if (seen[static_cast<std::size_t>(i)]++) {
        return "it gives sample " + std::to_string(i) + " to more than one rank";
      }
    }
  }
  const auto missing = std::find(seen.begin(), seen.end(), 0);
  if (missing != seen.end()) {
    return "it leaves out sample " + std::to_string(missing - seen.begin());
  }
  return "";
}

// Positions 0..m-1 dealt to k ranks in turn.
std::vector<std::vector<std::int64_t>> round_robin_positions(std::size_t m, std::size_t k) {
  std::vector<std::vector<std::int64_t>> positions(k);
  for (std::size_t i = 0; i < m; ++i) positions[i % k].push_back(static_cast<std::int64_t>(i));
  return positions;
}

// A dispatched batch's strategy is "<strategy>" or, when the loader fell
// back, "round_robin" + kFallbackMark + the reason: the reason travels with
// the batch (and through a checkpoint) to the step that serves it.
constexpr char kFallbackMark = '\n';

// The window state's bytes: little-endian int64 fields, strings as a length
// and their bytes.
class StateWriter {
 public:
  void i64(std::int64_t v) {
    auto u = static_cast<std::uint64_t>(v);
    for (int b = 0; b < 8; ++b, u >>= 8) bytes_.push_back(static_cast<char>(u & 0xFF));
  }
  void text(const std::string& t) {
    i64(static_cast<std::int64_t>(t.size()));
    bytes_ += t;
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class StateReader {
 public:
  explicit StateReader(std::string_view bytes) : bytes_(bytes) {}
  // False once a read ran past the end; every later read then fails too.
  bool i64(std::int64_t& v) {
    if (bytes_.size() - at_ < 8) return ok_ = false;
    std::uint64_t u = 0;
    for (int b = 7; b >= 0; --b) {
      u = (u << 8) | static_cast<unsigned char>(bytes_[at_ + static_cast<std::size_t>(b)]);
    }
    at_ += 8;
    v = static_cast<std::int64_t>(u);
    return ok_;
  }
  // A count of items of at least `item_bytes` each that the rest can hold.
  bool count(std::int64_t& v, std::size_t item_bytes) {
    if (!i64(v)) return false;
    if (v < 0 || static_cast<std::uint64_t>(v) > (bytes_.size() - at_) / item_bytes) {
      return ok_ = false;
    }
    return true;
  }
  bool text(std::string& t) {
    std::int64_t n = 0;
    if (!count(n, 1)) return false;
    t.assign(bytes_.substr(at_, static_cast<std::size_t>(n)));
    at_ += static_cast<std::size_t>(n);
    return true;
  }
  bool at_end() const { return ok_ && at_ == bytes_.size(); }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

constexpr std::int64_t kWindowStateVersion = 1;

}  // namespace

Result<DataLoader> DataLoader::create(const TokenDataset& dataset, LoadBalancer& balancer,
                                      LoaderOptions options) {
  auto at_least_one = [](const char* name, std::int64_t v) -> Status {
    if (v >= 1) return Status::ok();
    return invalid_argument(std::string("data loader ") + name + " is " + std::to_string(v) +
                            "; it must be at least 1");
  };
  if (Status s = at_least_one("global_batch_size", options.global_batch_size); !s) return s;
  if (Status s = at_least_one("micro_batch_size", options.micro_batch_size); !s) return s;
  if (Status s = at_least_one("seq_length", options.seq_length); !s) return s;
  if (Status s = at_least_one("dp_size", options.dp_size); !s) return s;
  if (options.dp_rank < 0 || options.dp_rank >= options.dp_size) {
    return invalid_argument("data loader dp_rank is " + std::to_string(options.dp_rank) +
                            "; it must be in [0, dp_size = " + std::to_string(options.dp_size) +
                            ")");
  }
  if (options.num_epochs && *options.num_epochs < 1) {
    return invalid_argument("data loader num_epochs is " + std::to_string(*options.num_epochs) +
                            "; give at least 1, or leave it unset for no end");
  }
  if (Status s = at_least_one("dp_window", options.dp_window); !s) return s;
  if (options.dp_window > 1 &&
      options.global_batch_size > std::numeric_limits<std::int32_t>::max()) {
    return invalid_argument("data loader global_batch_size is " +
                            std::to_string(options.global_batch_size) + "; with dp_window " +
                            std::to_string(options.dp_window) + " it must be at most " +
                            std::to_string(std::numeric_limits<std::int32_t>::max()));
  }
  if (!std::isfinite(options.cost.a) || options.cost.a < 0) {
    return invalid_argument("data loader cost model has a = " + std::to_string(options.cost.a) +
                            "; it must be a finite number >= 0");
  }
  const std::vector<std::string> offered = balancer.dp_strategies();
  if (std::find(offered.begin(), offered.end(), options.dp_strategy) == offered.end()) {
    std::string list;
    for (const std::string& s : offered) list += (list.empty() ? "" : ", ") + s;
    return not_found("DP strategy " + quote_text(options.dp_strategy) +
                     " is not offered by balancer " + quote_text(balancer.name()) +
                     " (it offers: " + list + ")");
  }

  DataLoader loader(dataset, balancer, std::move(options));
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    if (dataset.length(i) > 0) loader.samples_.push_back(i);
  }
  if (loader.samples_.empty()) {
    return invalid_argument(dataset.describe() +
                            " has no sample with at least one token; nothing to train on");
  }
  if (loader.options_.dp_window > 1) {
    const LoaderOptions& o = loader.options_;
    dp::DispatchOptions d;
    d.num_ranks = o.dp_size;
    d.window = o.dp_window;
    d.batch_size = static_cast<std::int32_t>(o.global_batch_size);
    d.cost = o.cost;
    d.strategy = o.dp_strategy;
    // Captures the balancer, not the loader: the loader is moved around.
    LoadBalancer* b = &balancer;
    auto partition = [b,
                      strategy = o.dp_strategy](const DpRequest& request) -> Result<DpPartition> {
      Result<DpPartition> part = b->partition_dp(strategy, request);
      std::string problem;
      if (!part) {
        problem = part.status().message();
      } else {
        problem = partition_problem(*part, request.lengths.size(),
                                    static_cast<std::size_t>(request.num_ranks));
        if (!problem.empty()) problem = "its partition is invalid: " + problem;
      }
      if (problem.empty()) {
        if (part->strategy.empty()) part->strategy = strategy;
        return part;
      }
      // Deterministic, so every rank falls back the same way.
      DpPartition fallback;
      fallback.ranks = round_robin_positions(request.lengths.size(),
                                             static_cast<std::size_t>(request.num_ranks));
      fallback.strategy = std::string("round_robin") + kFallbackMark + "balancer " +
                          quote_text(b->name()) + " DP strategy " + quote_text(strategy) +
                          " failed on this step's window (" + problem + "); used round_robin";
      return fallback;
    };
    Result<dp::WindowedDispatcher> dispatcher =
        dp::WindowedDispatcher::create(std::move(d), std::move(partition));
    if (!dispatcher) return invalid_argument("data loader " + dispatcher.status().message());
    loader.dispatcher_.emplace(std::move(dispatcher).value());
  }
  return loader;
}

std::int64_t DataLoader::steps_per_epoch() const {
  const std::int64_t n = num_samples();
  return (n + options_.global_batch_size - 1) / options_.global_batch_size;
}

std::vector<std::int64_t> DataLoader::epoch_order(std::int64_t epoch) const {
  std::vector<std::int64_t> order = samples_;
  if (!options_.shuffle) return order;
  std::mt19937_64 rng(derive_seed(options_.seed, static_cast<std::uint64_t>(epoch)));
  for (std::size_t i = order.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(draw_below(rng, i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

Status DataLoader::seek(LoaderPosition position) {
  const std::int64_t steps = steps_per_epoch();
  if (position.epoch < 0 || position.step < 0 || position.step > steps) {
    return invalid_argument("data loader position (epoch " + std::to_string(position.epoch) +
                            ", step " + std::to_string(position.step) +
                            ") is outside an epoch of " + std::to_string(steps) +
                            " steps; was the checkpoint made with another dataset or batch size?");
  }
  if (position.step == steps) position = {position.epoch + 1, 0};
  if (options_.num_epochs && position.epoch > *options_.num_epochs) {
    return invalid_argument("data loader position epoch " + std::to_string(position.epoch) +
                            " is past num_epochs " + std::to_string(*options_.num_epochs));
  }
  position_ = position;
  // Dispatched batches belong to the old position; a checkpoint's come back
  // with restore_window_state().
  if (dispatcher_ && !dispatcher_->restore_state({})) {
    throw std::logic_error("data loader: an empty dispatcher state was refused");
  }
  return Status::ok();
}

std::optional<StepBatch> DataLoader::next_step() {
  if (options_.num_epochs && position_.epoch >= *options_.num_epochs) return std::nullopt;
  load_order();
  StepBatch step;
  step.position = position_;
  std::vector<std::vector<std::int64_t>> ranks;
  if (dispatcher_) {
    ranks = dispatch(step);
  } else {
    const auto n = order_.size();
    const auto begin = static_cast<std::size_t>(position_.step * options_.global_batch_size);
    const auto end = std::min(n, begin + static_cast<std::size_t>(options_.global_batch_size));
    step.global_samples.assign(order_.begin() + static_cast<std::ptrdiff_t>(begin),
                               order_.begin() + static_cast<std::ptrdiff_t>(end));
    ranks = partition(step.global_samples, step.stats);
  }
  step.samples = std::move(ranks[static_cast<std::size_t>(options_.dp_rank)]);

  std::vector<PackedRow> rows = pack(step.samples);
  const auto per_micro = static_cast<std::size_t>(options_.micro_batch_size);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (r % per_micro == 0) step.micro_batches.emplace_back();
    step.tokens += rows[r].size() - rows[r].padding;
    step.padding += rows[r].padding;
    step.micro_batches.back().rows.push_back(std::move(rows[r]));
  }

  ++position_.step;
  if (position_.step == steps_per_epoch()) position_ = {position_.epoch + 1, 0};
  return step;
}

std::vector<std::vector<std::int64_t>> DataLoader::partition(const std::vector<std::int64_t>& batch,
                                                             StepStats& stats) const {
  const auto k = static_cast<std::size_t>(options_.dp_size);
  DpRequest request;
  request.lengths.reserve(batch.size());
  for (std::int64_t s : batch) request.lengths.push_back(dataset_->length(s));
  request.num_ranks = options_.dp_size;
  request.cost = options_.cost;
  request.equal_count = options_.equal_count;

  std::vector<std::vector<std::int64_t>> positions;  // batch positions per rank
  Result<DpPartition> part = balancer_->partition_dp(options_.dp_strategy, request);
  std::string problem;
  if (!part) {
    problem = part.status().message();
  } else {
    problem = partition_problem(*part, batch.size(), k);
    if (!problem.empty()) problem = "its partition is invalid: " + problem;
  }
  if (problem.empty()) {
    positions = std::move(part->ranks);
    stats.strategy = part->strategy.empty() ? options_.dp_strategy : part->strategy;
  } else {
    // Every rank sees the same failure (the balancer is deterministic), so
    // every rank falls back the same way and they still agree.
    positions = round_robin_positions(batch.size(), k);
    stats.strategy = "round_robin";
    stats.fallback_reason = "balancer " + quote_text(balancer_->name()) + " DP strategy " +
                            quote_text(options_.dp_strategy) + " failed on this step (" + problem +
                            "); used round_robin";
  }

  std::vector<std::vector<std::int64_t>> samples(k);
  for (std::size_t r = 0; r < k; ++r) {
    for (std::int64_t i : positions[r]) samples[r].push_back(batch[static_cast<std::size_t>(i)]);
  }
  fill_rank_stats(samples, stats);
  return samples;
}

void DataLoader::fill_rank_stats(const std::vector<std::vector<std::int64_t>>& samples,
                                 StepStats& stats) const {
  const std::size_t k = samples.size();
  stats.rank_cost.assign(k, 0.0);
  stats.rank_tokens.assign(k, 0);
  stats.rank_samples.assign(k, 0);
  double largest_item = 0.0;
  double total = 0.0;
  for (std::size_t r = 0; r < k; ++r) {
    for (std::int64_t s : samples[r]) {
      const std::int64_t length = dataset_->length(s);
      const double cost = options_.cost(length);
      stats.rank_cost[r] += cost;
      stats.rank_tokens[r] += length;
      ++stats.rank_samples[r];
      largest_item = std::max(largest_item, cost);
      total += cost;
    }
  }
  const double mean = total / static_cast<double>(k);
  const double largest_rank = *std::max_element(stats.rank_cost.begin(), stats.rank_cost.end());
  stats.imbalance = mean > 0.0 ? largest_rank / mean : 1.0;
  stats.lower_bound = std::max(largest_item, mean);
}

void DataLoader::load_order() {
  if (order_epoch_ == position_.epoch) return;
  order_ = epoch_order(position_.epoch);
  order_epoch_ = position_.epoch;
}

std::vector<std::vector<std::int64_t>> DataLoader::dispatch(StepBatch& step) {
  if (dispatcher_->ready() == 0) {
    // The next window: up to dp_window global batches, never past the epoch.
    const std::int64_t last = std::min(steps_per_epoch(), position_.step + options_.dp_window);
    const auto begin = static_cast<std::size_t>(position_.step * options_.global_batch_size);
    const auto end =
        std::min(order_.size(), static_cast<std::size_t>(last * options_.global_batch_size));
    for (std::size_t i = begin; i < end; ++i) {
      if (Status s = dispatcher_->push(order_[i], dataset_->length(order_[i])); !s) {
        throw std::logic_error("data loader: " + s.message());
      }
    }
    // A full window was dispatched by its last push; a short one (the end
    // of the epoch) gives ceil(samples / global_batch_size) = the steps left.
    if (Status s = dispatcher_->flush(); !s) throw std::logic_error("data loader: " + s.message());
  }
  std::optional<dp::DispatchBatch> batch = dispatcher_->next();
  if (!batch) throw std::logic_error("data loader: the dispatcher formed no batch");

  StepStats& stats = step.stats;
  const std::size_t mark = batch->strategy.find(kFallbackMark);
  stats.strategy = batch->strategy.substr(0, mark);
  if (mark != std::string::npos) stats.fallback_reason = batch->strategy.substr(mark + 1);
  for (const std::vector<std::int64_t>& rank : batch->ranks) {
    step.global_samples.insert(step.global_samples.end(), rank.begin(), rank.end());
  }
  std::sort(step.global_samples.begin(), step.global_samples.end());
  fill_rank_stats(batch->ranks, stats);
  return std::move(batch->ranks);
}

std::string DataLoader::window_state() const {
  if (!dispatcher_) return "";
  const dp::DispatcherState state = dispatcher_->save_state();
  StateWriter w;
  w.i64(kWindowStateVersion);
  w.i64(options_.dp_window);
  w.i64(options_.dp_size);
  w.i64(options_.global_batch_size);
  w.i64(position_.epoch);
  w.i64(position_.step);
  w.i64(static_cast<std::int64_t>(state.next_window));
  w.i64(static_cast<std::int64_t>(state.buffered.size()));
  for (const dp::BufferedSample& b : state.buffered) {
    w.i64(b.id);
    w.i64(b.length);
  }
  w.i64(static_cast<std::int64_t>(state.pending.size()));
  for (const dp::DispatchBatch& batch : state.pending) {
    w.i64(static_cast<std::int64_t>(batch.window));
    w.text(batch.strategy);
    for (std::size_t r = 0; r < batch.ranks.size(); ++r) {
      w.i64(static_cast<std::int64_t>(batch.ranks[r].size()));
      for (std::int64_t id : batch.ranks[r]) w.i64(id);
      w.i64(static_cast<std::int64_t>(std::bit_cast<std::uint64_t>(batch.cost[r])));
    }
  }
  return w.take();
}

Status DataLoader::restore_window_state(std::string_view bytes) {
  if (bytes.empty()) {
    if (!dispatcher_) return Status::ok();
    return invalid_argument(
        "it holds no DP dispatcher state: it was made with balancer.dp.window "
        "= 1 and this run has " +
        std::to_string(options_.dp_window) + "; resume with balancer.dp.window: 1");
  }
  const std::string corrupt = "its DP dispatcher state is malformed; the checkpoint is corrupt";
  StateReader in(bytes);
  std::int64_t version = 0, window = 0, dp_size = 0, batch_size = 0, epoch = 0, step = 0;
  if (!in.i64(version) || !in.i64(window) || !in.i64(dp_size) || !in.i64(batch_size) ||
      !in.i64(epoch) || !in.i64(step)) {
    return invalid_argument(corrupt);
  }
  if (version != kWindowStateVersion) {
    return invalid_argument("its DP dispatcher state has version " + std::to_string(version) +
                            ", this build reads " + std::to_string(kWindowStateVersion));
  }
  if (window != options_.dp_window) {
    return invalid_argument("it was made with balancer.dp.window = " + std::to_string(window) +
                            " and this run has " + std::to_string(options_.dp_window) +
                            "; resume with balancer.dp.window: " + std::to_string(window));
  }
  if (!dispatcher_) return invalid_argument(corrupt);
  if (dp_size != options_.dp_size) {
    return invalid_argument("its DP dispatcher holds batches split over " +
                            std::to_string(dp_size) + " DP ranks and this run has " +
                            std::to_string(options_.dp_size) +
                            " (balancer.dp.window = " + std::to_string(window) +
                            "); resume with parallel.dp_size: " + std::to_string(dp_size));
  }
  if (batch_size != options_.global_batch_size || epoch != position_.epoch ||
      step != position_.step) {
    return invalid_argument(
        "its DP dispatcher state belongs to epoch " + std::to_string(epoch) + " step " +
        std::to_string(step) + " with global batches of " + std::to_string(batch_size) +
        ", not to epoch " + std::to_string(position_.epoch) + " step " +
        std::to_string(position_.step) + " with " + std::to_string(options_.global_batch_size) +
        "; the checkpoint is corrupt");
  }
  dp::DispatcherState state;
  std::int64_t next_window = 0, count = 0;
  if (!in.i64(next_window) || !in.count(count, 16)) return invalid_argument(corrupt);
  state.next_window = static_cast<std::uint64_t>(next_window);
  state.buffered.resize(static_cast<std::size_t>(count));
  for (dp::BufferedSample& b : state.buffered) {
    if (!in.i64(b.id) || !in.i64(b.length)) return invalid_argument(corrupt);
  }
  const auto k = static_cast<std::size_t>(options_.dp_size);
  if (!in.count(count, 8 + 8 * 2 * k)) return invalid_argument(corrupt);
  state.pending.resize(static_cast<std::size_t>(count));
  for (dp::DispatchBatch& batch : state.pending) {
    std::int64_t from = 0;
    if (!in.i64(from) || !in.text(batch.strategy)) return invalid_argument(corrupt);
    batch.window = static_cast<std::uint64_t>(from);
    batch.ranks.resize(k);
    batch.cost.resize(k);
    for (std::size_t r = 0; r < k; ++r) {
      std::int64_t size = 0, cost = 0;
      if (!in.count(size, 8)) return invalid_argument(corrupt);
      batch.ranks[r].resize(static_cast<std::size_t>(size));
      for (std::int64_t& id : batch.ranks[r]) {
        if (!in.i64(id)) return invalid_argument(corrupt);
      }
      if (!in.i64(cost)) return invalid_argument(corrupt);
      batch.cost[r] = std::bit_cast<double>(static_cast<std::uint64_t>(cost));
    }
  }
  if (!in.at_end()) return invalid_argument(corrupt);

  // Between steps the loader never leaves samples buffered, and the batches
  // still to serve are the rest of one window: at most dp_window of them,
  // within this epoch, each sample once and from the global batches of that
  // window (the dp_window batches up to the window's end).
  if (!state.buffered.empty()) return invalid_argument(corrupt);
  const auto pending = static_cast<std::int64_t>(state.pending.size());
  if (pending > options_.dp_window || position_.step + pending > steps_per_epoch()) {
    return invalid_argument("its DP dispatcher holds " + std::to_string(pending) +
                            " batches at epoch " + std::to_string(epoch) + " step " +
                            std::to_string(step) + " of " + std::to_string(steps_per_epoch()) +
                            "; the checkpoint is corrupt");
  }
  if (pending > 0) {
    load_order();
    const std::int64_t gbs = options_.global_batch_size;
    const auto lo = static_cast<std::size_t>(
        std::max<std::int64_t>(0, position_.step + pending - options_.dp_window) * gbs);
    const auto hi =
        std::min(order_.size(), static_cast<std::size_t>((position_.step + pending) * gbs));
    std::vector<std::int64_t> in_window(order_.begin() + static_cast<std::ptrdiff_t>(lo),
                                        order_.begin() + static_cast<std::ptrdiff_t>(hi));
    std::sort(in_window.begin(), in_window.end());
    std::vector<std::int64_t> held;
    for (const dp::DispatchBatch& batch : state.pending) {
      for (const auto& rank : batch.ranks) held.insert(held.end(), rank.begin(), rank.end());
    }
    std::sort(held.begin(), held.end());
    const bool repeated = std::adjacent_find(held.begin(), held.end()) != held.end();
    if (repeated || !std::includes(in_window.begin(), in_window.end(), held.begin(), held.end())) {
      return invalid_argument(
          "its DP dispatcher holds samples that are not the rest of the current window of epoch " +
          std::to_string(epoch) +
          "; the checkpoint is corrupt or was made with another data order");
    }
  }
  if (Status s = dispatcher_->restore_state(state); !s) return invalid_argument(s.message());
  return Status::ok();
}

std::vector<PackedRow> DataLoader::pack(const std::vector<std::int64_t>& samples) const {
  const std::int64_t seq = options_.seq_length;
  const std::int64_t pad = options_.pad_token;
  std::vector<PackedRow> rows;
  PackedRow row;

  auto finish_row = [&] {
    rows.push_back(std::move(row));
    row = PackedRow{};
  };
  // Appends tokens [b, e) of sample s (whose tokens are `toks`) as one piece.
  auto append_piece = [&](std::int64_t s, const std::vector<std::int64_t>& toks, std::int64_t b,
                          std::int64_t e) {
    const auto len = static_cast<std::int64_t>(toks.size());
    row.pieces.push_back({s, b, e});
    row.doc_lengths.push_back(e - b);
    for (std::int64_t t = b; t < e; ++t) {
      const auto ut = static_cast<std::size_t>(t);
      const bool last_of_piece = t + 1 == e;
      row.tokens.push_back(toks[ut]);
      row.labels.push_back(t + 1 < len ? toks[ut + 1] : pad);
      row.loss_mask.push_back(last_of_piece ? 0 : 1);
      row.positions.push_back(t);
      row.document_ids.push_back(s);
    }
  };

  for (std::int64_t s : samples) {
    const std::vector<std::int64_t> toks = dataset_->tokens(s);
    const auto len = static_cast<std::int64_t>(toks.size());
    std::int64_t offset = 0;
    while (offset < len) {
      const std::int64_t take = std::min(len - offset, seq - row.size());
      append_piece(s, toks, offset, offset + take);
      offset += take;
      // Without packing a piece is a row of its own, whatever its length.
      if (!options_.packing || row.size() == seq) finish_row();
    }
  }
  if (options_.packing && row.size() > 0) {
    const std::int64_t p = seq - row.size();
    for (std::int64_t t = 0; t < p; ++t) {
      row.tokens.push_back(pad);
      row.labels.push_back(pad);
      row.loss_mask.push_back(0);
      row.positions.push_back(t);
      row.document_ids.push_back(kPadDocument);
    }
    if (p > 0) row.doc_lengths.push_back(p);
    row.padding = p;
    finish_row();
  }
  return rows;
}

}  // namespace fulcrum::data
