#include "data/loader.h"

#include <algorithm>
#include <cmath>
#include <random>
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
  if (!std::isfinite(options.cost.a) || options.cost.a < 0) {
    return invalid_argument("data loader cost model has a = " + std::to_string(options.cost.a) +
                            "; it must be a finite number >= 0");
  }
  const std::vector<std::string> offered = balancer.dp_strategies();
  if (std::find(offered.begin(), offered.end(), options.dp_strategy) == offered.end()) {
    std::string list;
    for (const std::string& s : offered) list += (list.empty() ? "" : ", ") + s;
    return not_found("DP strategy '" + options.dp_strategy + "' is not offered by balancer '" +
                     balancer.name() + "' (it offers: " + list + ")");
  }

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
  return Status::ok();
}

std::optional<StepBatch> DataLoader::next_step() {
  if (options_.num_epochs && position_.epoch >= *options_.num_epochs) return std::nullopt;
  if (order_epoch_ != position_.epoch) {
    order_ = epoch_order(position_.epoch);
    order_epoch_ = position_.epoch;
  }
  StepBatch step;
  step.position = position_;
  const auto n = order_.size();
  const auto begin = static_cast<std::size_t>(position_.step * options_.global_batch_size);
  const auto end = std::min(n, begin + static_cast<std::size_t>(options_.global_batch_size));
  step.global_samples.assign(order_.begin() + static_cast<std::ptrdiff_t>(begin),
                             order_.begin() + static_cast<std::ptrdiff_t>(end));

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
    positions.assign(k, {});
    for (std::size_t i = 0; i < batch.size(); ++i) {
      positions[i % k].push_back(static_cast<std::int64_t>(i));
    }
    stats.strategy = "round_robin";
    stats.fallback_reason = "balancer '" + balancer_->name() + "' DP strategy '" +
                            options_.dp_strategy + "' failed on this step (" + problem +
                            "); used round_robin";
  }

  std::vector<std::vector<std::int64_t>> samples(k);
  stats.rank_cost.assign(k, 0.0);
  stats.rank_tokens.assign(k, 0);
  stats.rank_samples.assign(k, 0);
  double largest_item = 0.0;
  double total = 0.0;
  for (std::size_t r = 0; r < k; ++r) {
    for (std::int64_t i : positions[r]) {
      const std::int64_t length = request.lengths[static_cast<std::size_t>(i)];
      const double cost = options_.cost(length);
      samples[r].push_back(batch[static_cast<std::size_t>(i)]);
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
  return samples;
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
