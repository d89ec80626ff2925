// What a worker opens before it trains, from its options: the balancer (by
// the host's one policy, host::open_balancer), the dataset, the loader's
// options. No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/token_dataset.h"
#include "fulcrum/host/log.h"
#include "fulcrum/load_balancer.h"
#include "fulcrum/status.h"
#include "launch/worker_env.h"
#include "train/options.h"

namespace fulcrum::train {

// The balancer a job trains with, and how the metrics and checkpoints name it.
struct BalancerChoice {
  std::shared_ptr<LoadBalancer> plugin;  // null: the host's built-in balancer serves
  std::string description;
};

// The plugin, or the built-in balancer when there is no plugin to load, by
// the policy the CLI applies (host::open_balancer); warns through `log`.
Result<BalancerChoice> choose_balancer(const TrainOptions& options, const host::LogFn& log);

// The balancer that partitions global batches: the plugin, or the built-in
// one, in which case a DP strategy only the plugin has becomes round_robin
// (said through `log`).
LoadBalancer& dp_balancer(const BalancerChoice& choice, TrainOptions& options,
                          const host::LogFn& log);

// data.source and data.path opened: JSONL, a Megatron .bin/.idx pair, or
// synthetic documents.
Result<std::unique_ptr<data::TokenDataset>> open_dataset(const TrainOptions& options);

// The loader's options for DP rank `dp_rank`; epochs are unbounded
// (train.steps decides when to stop, epochs wrap). In hybrid mode every rank
// loads the whole global batch as unpacked pieces.
data::LoaderOptions loader_options(const TrainOptions& options, int dp_rank);

// The CP workload of one packed row: its tokens and documents under the
// job's mask, block size and cp_size.
CpWorkload row_workload(const data::PackedRow& row, const TrainOptions& options);

// Host warnings, each distinct message once per process and only where
// `enabled`: replicated decisions (a missing plugin, a fallback of a row that
// every CP rank planned alike) would otherwise be printed by every rank.
host::LogFn once_per_message_log(bool enabled);

// Intra-op threads when train.threads is 0: this host's cores divided among
// its workers.
int default_threads(const launch::WorkerIdentity& id);

// The busiest DP rank's cost over the mean had the global batch been dealt
// round-robin: the summary's baseline for the DP partition.
double round_robin_imbalance(const std::vector<std::int64_t>& samples,
                             const data::TokenDataset& dataset, const CostModel& cost, int dp);

}  // namespace fulcrum::train
