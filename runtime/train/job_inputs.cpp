#include "train/job_inputs.h"

#include <algorithm>
#include <set>
#include <thread>
#include <utility>

#include "data/indexed_dataset.h"
#include "data/jsonl_dataset.h"
#include "data/synthetic_dataset.h"
#include "fulcrum/host/open_balancer.h"
#include "fulcrum/host/plugin_loader.h"

namespace fulcrum::train {

Result<BalancerChoice> choose_balancer(const TrainOptions& options, const host::LogFn& log) {
  if (options.plugin == "builtin") {
    return BalancerChoice{nullptr, "builtin (contiguous CP, round_robin DP)"};
  }
  Result<host::OpenedBalancer> opened = host::open_balancer(
      options.plugin, options.plugin_dirs, options.check_permissions, log,
      options.plugin_named ? host::PluginChoice::kNamed : host::PluginChoice::kDefault);
  if (!opened) return invalid_argument(opened.status().message());
  if (!opened->is_builtin) return BalancerChoice{opened->balancer, opened->balancer->name()};
  log(host::LogLevel::kWarning,
      opened->not_found +
          "; training with the host's built-in balancer (contiguous CP sharding, round_robin "
          "DP); set balancer.plugin or balancer.plugin_dirs to use the plugin");
  return BalancerChoice{nullptr, "builtin (default plugin '" + options.plugin + "' not found)"};
}

LoadBalancer& dp_balancer(const BalancerChoice& choice, TrainOptions& options,
                          const host::LogFn& log) {
  if (choice.plugin) return *choice.plugin;
  LoadBalancer& builtin = *host::builtin_balancer();
  const auto offered = builtin.dp_strategies();
  if (std::find(offered.begin(), offered.end(), options.dp_strategy) == offered.end()) {
    log(host::LogLevel::kWarning, "DP strategy " + quote_text(options.dp_strategy) +
                                      " needs the fulcrum plugin, which is not loaded; using "
                                      "round_robin");
    options.dp_strategy = "round_robin";
  }
  return builtin;
}

Result<std::unique_ptr<data::TokenDataset>> open_dataset(const TrainOptions& options) {
  switch (options.source) {
    case DataSource::kJsonl: {
      Result<data::JsonlDataset> d = data::JsonlDataset::open(options.data_path);
      if (!d) return d.status();
      return std::unique_ptr<data::TokenDataset>(
          std::make_unique<data::JsonlDataset>(std::move(d).value()));
    }
    case DataSource::kMegatron: {
      Result<data::IndexedDataset> d = data::IndexedDataset::open(options.data_path);
      if (!d) return d.status();
      return std::unique_ptr<data::TokenDataset>(
          std::make_unique<data::IndexedDataset>(std::move(d).value()));
    }
    case DataSource::kSynthetic:
      break;
  }
  data::SyntheticOptions s;
  s.lengths_file = options.data_path;
  s.num_samples = options.data_path.empty() || options.num_samples_set ? options.num_samples : 0;
  s.seed = options.data_seed;
  s.max_length = options.max_length;
  s.vocab_size = options.model.vocab_size;
  Result<data::SyntheticDataset> d = data::SyntheticDataset::create(s);
  if (!d) return d.status();
  return std::unique_ptr<data::TokenDataset>(
      std::make_unique<data::SyntheticDataset>(std::move(d).value()));
}

data::LoaderOptions loader_options(const TrainOptions& options, int dp_rank) {
  data::LoaderOptions loader;
  loader.global_batch_size = options.global_batch_size;
  loader.micro_batch_size = options.micro_batch_size;
  loader.seq_length = options.seq_length;
  loader.packing = options.packing;
  loader.dp_size = options.dp_size;
  loader.dp_rank = dp_rank;
  loader.seed = options.data_seed;
  loader.shuffle = options.shuffle;
  loader.num_epochs = std::nullopt;
  loader.dp_strategy = options.dp_strategy;
  loader.cost = options.dp_cost;
  loader.equal_count = options.dp_equal_count;
  loader.dp_window = static_cast<std::int32_t>(options.dp_window);  // bounded by options.cpp
  if (options.mode == ParallelMode::kHybrid) {
    // Every rank reads the whole global batch, cut into the same pieces as
    // fixed mode (at multiples of data.seq_length), one piece a row: the
    // schedule, not the loader, says who computes which.
    loader.dp_size = 1;
    loader.dp_rank = 0;
    loader.packing = false;
    loader.micro_batch_size = 1;
  }
  return loader;
}

CpWorkload row_workload(const data::PackedRow& row, const TrainOptions& options) {
  CpWorkload w;
  w.tokens = row.size();
  w.doc_lengths = row.doc_lengths;
  w.mask = options.mask;
  w.block_size = options.block_size;
  w.cp_size = options.cp_size;
  return w;
}

host::LogFn once_per_message_log(bool enabled) {
  auto seen = std::make_shared<std::set<std::string>>();
  return [seen, enabled](host::LogLevel level, const std::string& message) {
    if (!enabled || !seen->insert(message).second) return;
    host::log_to_stderr(level, message);
  };
}

int default_threads(const launch::WorkerIdentity& id) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int local = id.local_world_size.value_or(id.world_size);
  return std::max(1, cores / std::max(1, local));
}

double round_robin_imbalance(const std::vector<std::int64_t>& samples,
                             const data::TokenDataset& dataset, const CostModel& cost, int dp) {
  std::vector<double> rank(static_cast<std::size_t>(dp), 0.0);
  double total = 0.0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const double c = cost(dataset.length(samples[i]));
    rank[i % rank.size()] += c;
    total += c;
  }
  const double mean = total / static_cast<double>(dp);
  return mean > 0 ? *std::max_element(rank.begin(), rank.end()) / mean : 1.0;
}

}  // namespace fulcrum::train
