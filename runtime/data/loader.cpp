#include "data/loader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/bytes.h"
#include "fulcrum/core/random.h"

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

// Positions 0..m-1 dealt to k ranks in turn: the loader's own partition
// when the balancer's cannot be used, with the reason.
DpPartition round_robin_partition(std::size_t m, std::size_t k, std::string reason) {
  DpPartition part;
  part.strategy = "round_robin";
  part.fallback_reason = std::move(reason);
  part.ranks.resize(k);
  for (std::size_t i = 0; i < m; ++i) part.ranks[i % k].push_back(static_cast<std::int64_t>(i));
  return part;
}

// Version 1 held the dispatched batches of a DP-size-dependent window; a
// window now depends on the epoch order alone and its state is its identity.
constexpr std::int64_t kWindowStateVersion = 2;

// The options a loader can serve, and a DP strategy the balancer offers.
Status check_options(const LoaderOptions& options, LoadBalancer& balancer) {
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

  return Status::ok();
}

// --- packing ----------------------------------------------------------------

struct Piece {
  std::size_t sample_index;  // into the samples being packed
  std::int64_t begin;
  std::int64_t end;
};

// Every sample cut at the multiples of `seq` within it.
std::vector<Piece> cut_pieces(const std::vector<std::vector<std::int64_t>>& tokens,
                              std::int64_t seq) {
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto len = static_cast<std::int64_t>(tokens[i].size());
    for (std::int64_t b = 0; b < len; b += seq) pieces.push_back({i, b, std::min(len, b + seq)});
  }
  return pieces;
}

// Without packing every piece is a row of its own.
std::vector<std::vector<std::size_t>> one_row_each(const std::vector<Piece>& pieces) {
  std::vector<std::vector<std::size_t>> rows;
  for (std::size_t p = 0; p < pieces.size(); ++p) rows.push_back({p});
  return rows;
}

// Which row each piece goes to, with packing: best fit, longest piece first
// (ties in sample order), so rows are full but for what no remaining piece
// fits; deterministic.
std::vector<std::vector<std::size_t>> best_fit_rows(const std::vector<Piece>& pieces,
                                                    std::int64_t seq) {
  std::vector<std::size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return pieces[a].end - pieces[a].begin > pieces[b].end - pieces[b].begin;
  });
  std::vector<std::vector<std::size_t>> rows;
  std::multimap<std::int64_t, std::size_t> room;  // free tokens -> row
  for (std::size_t p : order) {
    const std::int64_t len = pieces[p].end - pieces[p].begin;
    auto fit = room.lower_bound(len);
    std::size_t row = 0;
    std::int64_t left = 0;
    if (fit == room.end()) {
      row = rows.size();
      rows.emplace_back();
      left = seq;
    } else {
      row = fit->second;
      left = fit->first;
      room.erase(fit);
    }
    rows[row].push_back(p);
    if (left > len) room.emplace(left - len, row);
  }
  return rows;
}

// A piece of sample `sample` (whose tokens are `toks`) appended to `row`:
// its tokens, their next tokens as labels (pad where the sample ends), their
// positions within the sample and its id.
void append_piece(const Piece& piece, std::int64_t sample, const std::vector<std::int64_t>& toks,
                  std::int64_t pad, PackedRow& row) {
  const auto len = static_cast<std::int64_t>(toks.size());
  row.pieces.push_back({sample, piece.begin, piece.end});
  row.doc_lengths.push_back(piece.end - piece.begin);
  for (std::int64_t t = piece.begin; t < piece.end; ++t) {
    const auto ut = static_cast<std::size_t>(t);
    const bool has_next = t + 1 < len;
    row.tokens.push_back(toks[ut]);
    row.labels.push_back(has_next ? toks[ut + 1] : pad);
    row.loss_mask.push_back(has_next ? 1 : 0);
    row.positions.push_back(t);
    row.document_ids.push_back(sample);
  }
}

// A packed row filled to `seq` tokens with padding, a document of its own.
void pad_row(std::int64_t seq, std::int64_t pad, PackedRow& row) {
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
}

// --- DP windows --------------------------------------------------------------

// Which of `num_steps` steps each sample of a window goes to: longest first
// (`longest`: indices into the window), dealt in snake order 0, 1, .., m-1,
// m-1, .., 0, 0, .. to the steps that still have room (`capacity`). True
// for the samples of step `wanted`.
std::vector<char> snake_deal(const std::vector<std::size_t>& longest,
                             std::vector<std::int64_t> capacity, std::size_t wanted) {
  const std::size_t num_steps = capacity.size();
  std::vector<char> mine(longest.size(), 0);
  std::size_t at = 0;  // position in the snake
  for (std::size_t i : longest) {
    std::size_t target = 0;
    do {
      const std::size_t lap = at / num_steps, k = at % num_steps;
      target = lap % 2 == 0 ? k : num_steps - 1 - k;
      ++at;
    } while (capacity[target] == 0);
    --capacity[target];
    if (target == wanted) mine[i] = 1;
  }
  return mine;
}

}  // namespace

Result<DataLoader> DataLoader::create(const TokenDataset& dataset, LoadBalancer& balancer,
                                      LoaderOptions options) {
  if (Status s = check_options(options, balancer); !s) return s;
  DataLoader loader(dataset, balancer, std::move(options));
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    if (dataset.length(i) > 0) loader.samples_.push_back(i);
  }
  if (loader.samples_.empty()) {
    return invalid_argument(dataset.describe() +
                            " has no sample with at least one token; nothing to train on");
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
  portable_shuffle(order, rng);
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
  return Status::ok();
}

std::optional<StepBatch> DataLoader::next_step() {
  if (options_.num_epochs && position_.epoch >= *options_.num_epochs) return std::nullopt;
  load_order();
  StepBatch step;
  step.position = position_;
  if (options_.dp_window > 1) {
    step.global_samples = window_step(position_.step);
  } else {
    const auto n = order_.size();
    const auto begin = static_cast<std::size_t>(position_.step * options_.global_batch_size);
    const auto end = std::min(n, begin + static_cast<std::size_t>(options_.global_batch_size));
    step.global_samples.assign(order_.begin() + static_cast<std::ptrdiff_t>(begin),
                               order_.begin() + static_cast<std::ptrdiff_t>(end));
  }
  std::vector<std::vector<std::int64_t>> ranks = partition(step.global_samples, step.stats);
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

  Result<DpPartition> part = balancer_->partition_dp(options_.dp_strategy, request);
  std::string problem;
  if (!part) {
    problem = part.status().message();
  } else {
    problem = partition_problem(*part, batch.size(), k);
    if (!problem.empty()) problem = "its partition is invalid: " + problem;
  }
  // Every rank sees the same failure (the balancer is deterministic), so
  // every rank falls back the same way and they still agree.
  const DpPartition chosen =
      problem.empty()
          ? std::move(*part)
          : round_robin_partition(batch.size(), k,
                                  "balancer " + quote_text(balancer_->name()) + " DP strategy " +
                                      quote_text(options_.dp_strategy) + " failed on this step (" +
                                      problem + "); used round_robin");
  stats.strategy = chosen.strategy.empty() ? options_.dp_strategy : chosen.strategy;
  stats.fallback_reason = chosen.fallback_reason;

  std::vector<std::vector<std::int64_t>> samples(k);
  for (std::size_t r = 0; r < k; ++r) {
    for (std::int64_t i : chosen.ranks[r]) {
      samples[r].push_back(batch[static_cast<std::size_t>(i)]);
    }
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

std::vector<std::int64_t> DataLoader::window_step(std::int64_t step) const {
  // The window of `step`: dp_window consecutive global batches of the epoch
  // order (fewer at the epoch's end; a window never spans two epochs).
  const std::int64_t gbs = options_.global_batch_size;
  const auto n = static_cast<std::int64_t>(order_.size());
  const std::int64_t first = step / options_.dp_window * options_.dp_window;
  const std::int64_t last = std::min(steps_per_epoch(), first + options_.dp_window);
  const auto num_steps = static_cast<std::size_t>(last - first);

  // Its samples, longest first (ties in epoch order), are dealt to its steps
  // in snake order, each step taking as many samples as its global batch had:
  // every step gets a like share of long and short samples. Every cost model
  // grows with length, so longest first is heaviest first under any of them.
  // The rule reads the epoch order and the lengths alone, never the DP size,
  // the DP strategy, the cost model or the layout: every layout trains the
  // same steps, and a resume under another of them stays exactly-once.
  std::vector<std::int64_t> window(
      order_.begin() + static_cast<std::ptrdiff_t>(first * gbs),
      order_.begin() + static_cast<std::ptrdiff_t>(std::min(n, last * gbs)));
  std::vector<std::int64_t> length(window.size());
  for (std::size_t i = 0; i < window.size(); ++i) length[i] = dataset_->length(window[i]);
  std::vector<std::size_t> longest(window.size());
  std::iota(longest.begin(), longest.end(), std::size_t{0});
  std::stable_sort(longest.begin(), longest.end(),
                   [&](std::size_t a, std::size_t b) { return length[a] > length[b]; });

  std::vector<std::int64_t> capacity(num_steps);
  for (std::size_t j = 0; j < num_steps; ++j) {
    capacity[j] = std::min(gbs, n - (first + static_cast<std::int64_t>(j)) * gbs);
  }
  const std::vector<char> mine =
      snake_deal(longest, std::move(capacity), static_cast<std::size_t>(step - first));
  std::vector<std::int64_t> samples;
  for (std::size_t i = 0; i < window.size(); ++i) {
    if (mine[i]) samples.push_back(window[i]);
  }
  return samples;
}

std::string DataLoader::window_state() const {
  if (options_.dp_window == 1) return "";
  // Little-endian int64 fields.
  return ByteWriter<std::string>()
      .i64(kWindowStateVersion)
      .i64(options_.dp_window)
      .i64(options_.global_batch_size)
      .i64(position_.epoch)
      .i64(position_.step)
      .take();
}

Status DataLoader::restore_window_state(std::string_view bytes) {
  if (bytes.empty()) {
    if (options_.dp_window == 1) return Status::ok();
    return invalid_argument(
        "it holds no DP window state: it was made with balancer.dp.window "
        "= 1 and this run has " +
        std::to_string(options_.dp_window) + "; resume with balancer.dp.window: 1");
  }
  const std::string corrupt = "its DP window state is malformed; the checkpoint is corrupt";
  ByteReader in(bytes);
  std::int64_t version = 0, window = 0, batch_size = 0, epoch = 0, step = 0;
  if (!in.get(version)) return invalid_argument(corrupt);
  if (version != kWindowStateVersion) {
    return invalid_argument("its DP window state has version " + std::to_string(version) +
                            ", this build reads " + std::to_string(kWindowStateVersion) +
                            "; resume with the build that wrote it");
  }
  if (!in.get(window) || !in.get(batch_size) || !in.get(epoch) || !in.get(step) || !in.done()) {
    return invalid_argument(corrupt);
  }
  if (window != options_.dp_window) {
    return invalid_argument("it was made with balancer.dp.window = " + std::to_string(window) +
                            " and this run has " + std::to_string(options_.dp_window) +
                            "; resume with balancer.dp.window: " + std::to_string(window));
  }
  if (batch_size != options_.global_batch_size || epoch != position_.epoch ||
      step != position_.step) {
    return invalid_argument(
        "its DP window state belongs to epoch " + std::to_string(epoch) + " step " +
        std::to_string(step) + " with global batches of " + std::to_string(batch_size) +
        ", not to epoch " + std::to_string(position_.epoch) + " step " +
        std::to_string(position_.step) + " with " + std::to_string(options_.global_batch_size) +
        "; the checkpoint is corrupt");
  }
  return Status::ok();
}

std::vector<PackedRow> DataLoader::pack(const std::vector<std::int64_t>& samples) const {
  // The math-neutral packing rule (docs/PACKING.md): a sample is cut only at
  // multiples of seq_length within the sample, whatever else shares the row,
  // and every token whose next token is in the same sample keeps its label
  // and its loss. The pieces are then placed whole into rows; where a piece
  // lands changes who computes it, never what it sees or predicts.
  std::vector<std::vector<std::int64_t>> tokens(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) tokens[i] = dataset_->tokens(samples[i]);
  const std::vector<Piece> pieces = cut_pieces(tokens, options_.seq_length);
  const std::vector<std::vector<std::size_t>> row_pieces =
      options_.packing ? best_fit_rows(pieces, options_.seq_length) : one_row_each(pieces);
  std::vector<PackedRow> rows(row_pieces.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t p : row_pieces[r]) {
      append_piece(pieces[p], samples[pieces[p].sample_index], tokens[pieces[p].sample_index],
                   options_.pad_token, rows[r]);
    }
    if (options_.packing) pad_row(options_.seq_length, options_.pad_token, rows[r]);
  }
  return rows;
}

}  // namespace fulcrum::data
