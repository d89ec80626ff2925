#include "train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attention/cp_attention.h"
#include "attention/sharding.h"
#include "data/indexed_dataset.h"
#include "data/jsonl_dataset.h"
#include "data/loader.h"
#include "data/synthetic_dataset.h"
#include "dist/gloo_communicator.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/log.h"
#include "fulcrum/host/open_balancer.h"
#include "fulcrum/host/plugin_loader.h"
#include "fulcrum/host/selection.h"
#include "launch/worker_env.h"
#include "train/checkpoint.h"
#include "train/consensus.h"
#include "train/job_schema.h"
#include "train/metrics.h"
#include "train/model.h"
#include "train/options.h"

namespace fulcrum::train {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Bad input found while training (a token outside the vocabulary): exit 2,
// like a configuration error, not 1 like a crash.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writing a checkpoint or the metrics failed (disk full, permissions changed): exit 1, as a
// runtime failure, with the checkpoint's own message rather than "internal
// error".
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The loss stopped being a number: exit 1, a failure of the run rather than
// of its input, with the step and the rank.
class NumericError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where this process's messages come from; set once the rank is known.
std::string g_who = "fulcrum-worker";

void print_error(const std::string& message) {
  std::string line = g_who + ": " + message;
  std::replace(line.begin(), line.end(), '\n', ' ');
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

// Host warnings, each distinct message once per process and only where
// `enabled`: replicated decisions (a missing plugin, a fallback of a row that
// every CP rank planned alike) would otherwise be printed by every rank.
host::LogFn make_log(bool enabled) {
  auto seen = std::make_shared<std::set<std::string>>();
  return [seen, enabled](host::LogLevel level, const std::string& message) {
    if (!enabled || !seen->insert(message).second) return;
    host::log_to_stderr(level, message);
  };
}

struct Balancer {
  std::shared_ptr<LoadBalancer> plugin;  // null: the host's built-in balancer serves
  std::string description;
};

// The plugin, or the built-in balancer when there is no plugin to load, by
// the policy the CLI applies (host::open_balancer).
Result<Balancer> load_balancer(const TrainOptions& o, const host::LogFn& log) {
  if (o.plugin == "builtin") return Balancer{nullptr, "builtin (contiguous CP, round_robin DP)"};
  Result<host::OpenedBalancer> opened =
      host::open_balancer(o.plugin, o.plugin_dirs, o.check_permissions, log);
  if (!opened) return invalid_argument(opened.status().message());
  if (!opened->is_builtin) return Balancer{opened->balancer, opened->balancer->name()};
  log(host::LogLevel::kWarning,
      opened->not_found +
          "; training with the host's built-in balancer (contiguous CP sharding, round_robin "
          "DP); set balancer.plugin or balancer.plugin_dirs to use the plugin");
  return Balancer{nullptr, "builtin (plugin '" + o.plugin + "' not found)"};
}

Result<std::unique_ptr<data::TokenDataset>> open_dataset(const TrainOptions& o) {
  switch (o.source) {
    case DataSource::kJsonl: {
      Result<data::JsonlDataset> d = data::JsonlDataset::open(o.data_path);
      if (!d) return d.status();
      return std::unique_ptr<data::TokenDataset>(
          std::make_unique<data::JsonlDataset>(std::move(d).value()));
    }
    case DataSource::kMegatron: {
      Result<data::IndexedDataset> d = data::IndexedDataset::open(o.data_path);
      if (!d) return d.status();
      return std::unique_ptr<data::TokenDataset>(
          std::make_unique<data::IndexedDataset>(std::move(d).value()));
    }
    case DataSource::kSynthetic:
      break;
  }
  data::SyntheticOptions s;
  s.lengths_file = o.data_path;
  s.num_samples = o.data_path.empty() || o.num_samples_set ? o.num_samples : 0;
  s.seed = o.data_seed;
  s.max_length = o.max_length;
  s.vocab_size = o.model.vocab_size;
  Result<data::SyntheticDataset> d = data::SyntheticDataset::create(s);
  if (!d) return d.status();
  return std::unique_ptr<data::TokenDataset>(
      std::make_unique<data::SyntheticDataset>(std::move(d).value()));
}

at::Device device_of(const TrainOptions& o) {
  return o.device == Device::kCuda
             ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(o.cuda_device))
             : at::Device(at::kCPU);
}

// train.device: cuda on a LibTorch or a machine without a GPU, and NCCL with
// fewer GPUs than ranks on this host, are settings to fix: refused before
// the rendezvous, so no rank waits for one that has already given up.
Status resolve_device(TrainOptions& o, const launch::WorkerIdentity& id) {
#ifndef FULCRUM_WITH_NCCL
  if (o.backend == Backend::kNccl) {
    return invalid_argument(
        "dist.backend is nccl, but this fulcrum was built against a LibTorch without NCCL; set "
        "dist.backend: gloo, or rebuild against a CUDA LibTorch with NCCL (docs/RESULTS_GPU.md)");
  }
#endif
  if (o.device == Device::kCpu) return Status::ok();
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus == 0) {
    return invalid_argument(
        "train.device is cuda, but this LibTorch sees no GPU (it was built without CUDA, or "
        "no GPU is visible); set train.device: cpu, or build against a CUDA LibTorch "
        "(docs/RESULTS_GPU.md)");
  }
  const int local = id.local_world_size.value_or(id.world_size);
  if (o.backend == Backend::kNccl && local > gpus) {
    return invalid_argument("dist.backend: nccl needs one GPU per rank, but this host runs " +
                            std::to_string(local) + " ranks on " + std::to_string(gpus) +
                            " GPUs; set dist.backend: gloo (ranks then share GPUs) or start "
                            "fewer ranks per host");
  }
  o.cuda_device = id.local_rank % gpus;
  return Status::ok();
}

int default_threads(const launch::WorkerIdentity& id) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int local = id.local_world_size.value_or(id.world_size);
  return std::max(1, cores / std::max(1, local));
}

// The sequence buffers of one row as columns of one int64 tensor, so that a
// single shard() call moves all of them the same way: tokens, positions,
// labels, loss mask, document ids.
enum Column { kTokens = 0, kPositions, kLabels, kLossMask, kDocIds, kColumns };

at::Tensor row_buffers(const data::PackedRow& row) {
  const std::int64_t n = row.size();
  at::Tensor t = at::empty({n, kColumns}, at::kLong);
  auto a = t.accessor<std::int64_t, 2>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    a[i][kTokens] = row.tokens[u];
    a[i][kPositions] = row.positions[u];
    a[i][kLabels] = row.labels[u];
    a[i][kLossMask] = row.loss_mask[u];
    a[i][kDocIds] = row.document_ids[u];
  }
  return t;
}

// Out-of-vocabulary tokens would index past the embedding table (a crash
// deep in ATen); refuse them with the sample that holds them.
void check_vocabulary(const data::PackedRow& row, std::int64_t vocab,
                      const data::TokenDataset& dataset) {
  for (std::size_t i = 0; i < row.tokens.size(); ++i) {
    if (row.tokens[i] >= 0 && row.tokens[i] < vocab) continue;
    throw InputError("token " + std::to_string(row.tokens[i]) + " of sample " +
                     std::to_string(row.document_ids[i]) + " in " + dataset.describe() +
                     " is outside model.vocab_size = " + std::to_string(vocab) +
                     "; raise model.vocab_size above the largest token id");
  }
}

// (offset + 1)-weighted token sum of a piece: catches lost, repeated and
// reordered tokens, which a plain sum would not.
std::int64_t piece_checksum(const data::PackedRow& row, std::size_t start,
                            const data::TokenRange& piece) {
  std::int64_t sum = 0;
  for (std::int64_t t = piece.begin; t < piece.end; ++t) {
    sum += (t + 1) * row.tokens[start + static_cast<std::size_t>(t - piece.begin)];
  }
  return sum;
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

// Written whole to a temporary file, synced and renamed over `path`: a full
// disk or an I/O error leaves the previous file in place and names the cause.
Status save_parameters(const std::string& path, const GptModel& model) {
  std::ostringstream out;
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    out << model.parameter_names()[i] << ' ' << model.parameters()[i].numel() << '\n';
  }
  out << '\n';
  for (const at::Tensor& p : model.parameters()) {
    const at::Tensor d = p.detach().to(at::kCPU, at::kDouble).contiguous();
    out.write(reinterpret_cast<const char*>(d.data_ptr<double>()),
              static_cast<std::streamsize>(d.numel() * sizeof(double)));
  }
  const Status written = write_file_atomically(path, out.str());
  if (!written) {
    // The writer's own advice names train.checkpoint_dir; keep only its cause.
    const std::string cause = written.message().substr(0, written.message().find("; "));
    return invalid_argument("cannot write parameters to --save-params " + path + " (" + cause +
                            "); free space there or choose another path");
  }
  return Status::ok();
}

// A tensor as a checkpoint blob (see checkpoint.h): the raw contiguous
// elements, so a float64 value comes back bitwise.
std::string tensor_to_blob(const at::Tensor& tensor) {
  const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
  TensorBlob blob;
  switch (t.scalar_type()) {
    case at::kFloat:
      blob.dtype = BlobDtype::kFloat32;
      break;
    case at::kDouble:
      blob.dtype = BlobDtype::kFloat64;
      break;
    case at::kByte:
      blob.dtype = BlobDtype::kUint8;
      break;
    case at::kLong:
      blob.dtype = BlobDtype::kInt64;
      break;
    default:
      throw std::logic_error(std::string("no checkpoint dtype for ") +
                             at::toString(t.scalar_type()));
  }
  blob.shape = t.sizes().vec();
  blob.data.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
  return encode_tensor_blob(blob);
}

at::ScalarType scalar_type_of(BlobDtype dtype) {
  switch (dtype) {
    case BlobDtype::kFloat32:
      return at::kFloat;
    case BlobDtype::kFloat64:
      return at::kDouble;
    case BlobDtype::kUint8:
      return at::kByte;
    case BlobDtype::kInt64:
      return at::kLong;
  }
  return at::kDouble;
}

// Blob `name` of checkpoint `source` as a tensor shaped and typed like
// `like`.
Result<at::Tensor> blob_to_tensor(const Checkpoint& checkpoint, const std::string& name,
                                  const std::string& source, const at::Tensor& like) {
  const std::string* bytes = checkpoint.find(name);
  if (bytes == nullptr) {
    return invalid_argument("checkpoint " + source + " has no '" + name +
                            "' entry; it was not written for this model");
  }
  Result<TensorBlob> blob = decode_tensor_blob(*bytes, name, source);
  if (!blob) return blob.status();
  const at::ScalarType type = scalar_type_of(blob->dtype);
  if (type != like.scalar_type() || blob->shape != like.sizes().vec()) {
    auto shape = [](const std::vector<std::int64_t>& dims) {
      std::string text;
      for (std::int64_t d : dims) text += (text.empty() ? "" : ", ") + std::to_string(d);
      return "[" + text + "]";
    };
    return invalid_argument("checkpoint " + source + " entry '" + name + "' is " +
                            blob_dtype_name(blob->dtype) + " " + shape(blob->shape) +
                            ", this run's is " + at::toString(like.scalar_type()) + " " +
                            shape(like.sizes().vec()) + "; resume with the model it was made for");
  }
  at::Tensor t = at::empty(blob->shape, at::TensorOptions().dtype(type));
  if (!blob->data.empty()) std::memcpy(t.data_ptr(), blob->data.data(), blob->data.size());
  return t;
}

std::string exact(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// What a checkpoint's meaning rests on: the model, the optimizer's settings,
// the mask and everything that decides which samples each step trains on.
// Its FNV-1a hash is the header's config fingerprint; a resumed run must
// match it. Not here: train.steps (a run may be extended), the layout (see
// layout_settings) and settings that change no number (threads, timeouts,
// paths of the plugin).
std::string trajectory_settings(const TrainOptions& o, std::int64_t loader_samples) {
  const ModelOptions& m = o.model;
  std::string t;
  auto line = [&t](const std::string& key, const std::string& value) {
    t += key + "=" + value + "\n";
  };
  line("model.hidden_size", std::to_string(m.hidden_size));
  line("model.num_layers", std::to_string(m.num_layers));
  line("model.num_heads", std::to_string(m.num_heads));
  line("model.vocab_size", std::to_string(m.vocab_size));
  line("model.ffn_size", std::to_string(m.ffn_size));
  line("model.position", m.position == PositionKind::kLearned ? "learned" : "rope");
  line("model.rope_base", exact(m.rope_base));
  line("model.max_positions", std::to_string(m.max_positions));
  line("train.seed", std::to_string(o.seed));
  line("train.dtype", dtype_name(o.dtype));
  line("train.lr", exact(o.lr));
  line("train.weight_decay", exact(o.weight_decay));
  line("balancer.cp.mask", mask_to_string(o.mask));
  line("data.source", o.source == DataSource::kJsonl      ? "jsonl"
                      : o.source == DataSource::kMegatron ? "megatron"
                                                          : "synthetic");
  line("data.path", o.data_path);
  line("data.samples", std::to_string(loader_samples));
  const bool synthetic = o.source == DataSource::kSynthetic;
  line("data.num_samples", synthetic ? std::to_string(o.num_samples) : "-");
  line("data.max_length", synthetic ? std::to_string(o.max_length) : "-");
  line("data.seed", std::to_string(o.data_seed));
  line("data.shuffle", o.shuffle ? "true" : "false");
  line("data.seq_length", std::to_string(o.seq_length));
  line("data.packing", o.packing ? "true" : "false");
  line("data.global_batch_size", std::to_string(o.global_batch_size));
  return t;
}

// How the work is spread: a run may resume under another layout or
// balancer and still train every sample exactly once, but rows are formed
// and sums taken in another order, so its losses are no longer bitwise those
// of the uninterrupted run. Differences are warned about, not refused.
std::string layout_settings(const TrainOptions& o, const std::string& balancer) {
  std::string t;
  auto line = [&t](const std::string& key, const std::string& value) {
    t += key + "=" + value + "\n";
  };
  line("parallel.dp_size", std::to_string(o.dp_size));
  line("parallel.cp_size", std::to_string(o.cp_size));
  line("balancer", balancer);
  line("balancer.dp.strategy", o.dp_strategy);
  line("balancer.dp.cost", host::cost_model_to_string(o.dp_cost));
  line("balancer.dp.equal_count", o.dp_equal_count ? "true" : "false");
  line("balancer.cp.strategy", o.cp_strategy);
  line("balancer.cp.fallback", o.cp_fallback);
  line("balancer.cp.block_size", std::to_string(o.block_size));
  line("data.micro_batch_size", std::to_string(o.micro_batch_size));
  return t;
}

class Worker {
 public:
  Worker(TrainOptions options, CheckpointOptions checkpoints, launch::WorkerIdentity id,
         WorkerArgs args)
      : o_(std::move(options)),
        ck_(std::move(checkpoints)),
        id_(std::move(id)),
        args_(std::move(args)) {}

  // Everything that can be checked locally, before meeting the other ranks,
  // so bad input fails fast instead of after a rendezvous.
  Status prepare();
  void connect();
  void train();

  // Plan consensus and test-only faults (consensus.h); set by run_worker.
  ReliabilityHooks reliability;

 private:
  struct StepResult {
    RankStepFigures figures;
    double loss_sum = 0.0;
    std::int64_t loss_tokens = 0;
  };
  StepResult run_micro_batches(const data::StepBatch& batch);
  MicroBatchFigures run_micro_batch(const data::MicroBatch& mb, std::int64_t index,
                                    at::Tensor& loss_sum, std::int64_t& loss_tokens,
                                    RankStepFigures& step);
  void reduce_and_step(double& loss_sum, std::int64_t& loss_tokens);
  void check_replicas();
  std::string header() const;
  Status restore_checkpoint();
  Status apply_checkpoint(const Checkpoint& checkpoint, const std::string& path);
  void check_same_checkpoint();
  void write_checkpoint(std::int64_t step);

  TrainOptions o_;
  CheckpointOptions ck_;
  launch::WorkerIdentity id_;
  WorkerArgs args_;
  int dp_rank_ = 0;
  int cp_rank_ = 0;
  Balancer balancer_;
  std::unique_ptr<data::TokenDataset> dataset_;
  std::optional<data::DataLoader> loader_;
  std::unique_ptr<host::CpSelector> selector_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  dist::ProcessGroups groups_;
  std::unique_ptr<MetricsFile> metrics_;
  // Checkpoints: the settings texts (computed once the loader exists), the
  // step training resumes after (0 = from the start) and the resumed file's
  // payload CRC, which every rank must agree on.
  std::string trajectory_text_;
  std::string layout_text_;
  std::int64_t start_step_ = 0;
  std::uint32_t resumed_crc_ = 0;
};

Status Worker::prepare() {
  cp_rank_ = id_.rank % o_.cp_size;
  dp_rank_ = id_.rank / o_.cp_size;
  const bool rank0 = id_.rank == 0;

  Result<Balancer> balancer = load_balancer(o_, make_log(rank0));
  if (!balancer) return balancer.status();
  balancer_ = std::move(balancer).value();
  LoadBalancer& dp_balancer = balancer_.plugin ? *balancer_.plugin : *host::builtin_balancer();
  if (!balancer_.plugin) {
    const auto offered = dp_balancer.dp_strategies();
    if (std::find(offered.begin(), offered.end(), o_.dp_strategy) == offered.end()) {
      if (rank0) {
        host::log_to_stderr(host::LogLevel::kWarning,
                            "DP strategy " + quote_text(o_.dp_strategy) +
                                " needs the fulcrum plugin, which is not loaded; using "
                                "round_robin");
      }
      o_.dp_strategy = "round_robin";
    }
  }
  Result<std::unique_ptr<data::TokenDataset>> dataset = open_dataset(o_);
  if (!dataset) return dataset.status();
  dataset_ = std::move(dataset).value();

  data::LoaderOptions lo;
  lo.global_batch_size = o_.global_batch_size;
  lo.micro_batch_size = o_.micro_batch_size;
  lo.seq_length = o_.seq_length;
  lo.packing = o_.packing;
  lo.dp_size = o_.dp_size;
  lo.dp_rank = dp_rank_;
  lo.seed = o_.data_seed;
  lo.shuffle = o_.shuffle;
  lo.num_epochs = std::nullopt;  // train.steps decides when to stop, epochs wrap
  lo.dp_strategy = o_.dp_strategy;
  lo.cost = o_.dp_cost;
  lo.equal_count = o_.dp_equal_count;
  lo.dp_window = static_cast<std::int32_t>(o_.dp_window);  // bounded by options.cpp
  Result<data::DataLoader> loader = data::DataLoader::create(*dataset_, dp_balancer, lo);
  if (!loader) return loader.status();
  loader_.emplace(std::move(loader).value());

  host::SelectorOptions so;
  so.preferred = o_.cp_strategy;
  so.fallback = o_.cp_fallback;
  so.log = make_log(cp_rank_ == 0);
  selector_ = std::make_unique<host::CpSelector>(balancer_.plugin, so);

  if (o_.model.position == PositionKind::kLearned) {
    // A position is an offset within a document (continuing across a split
    // piece) or within the padding: below the longest sample and below
    // seq_length.
    std::int64_t longest = o_.seq_length;
    for (std::int64_t i = 0; i < dataset_->size(); ++i) {
      longest = std::max(longest, dataset_->length(i));
    }
    o_.model.max_positions = longest;
  }
  model_ = std::make_unique<GptModel>(o_.model, o_.dtype, o_.seed, device_of(o_));
  AdamW::Options ao;
  ao.lr = o_.lr;
  ao.weight_decay = o_.weight_decay;
  optimizer_ = std::make_unique<AdamW>(model_->parameters(), ao);

  trajectory_text_ = trajectory_settings(o_, loader_->num_samples());
  layout_text_ = layout_settings(o_, balancer_.description);
  if (Status s = restore_checkpoint(); !s) return s;

  if (rank0 && !args_.metrics_path.empty()) {
    Result<std::unique_ptr<MetricsFile>> file = MetricsFile::open(args_.metrics_path);
    if (!file) return file.status();
    metrics_ = std::move(file).value();
  }
  return Status::ok();
}

void Worker::connect() {
  dist::GlooOptions g;
  g.rank = id_.rank;
  g.world_size = id_.world_size;
  g.dp_size = o_.dp_size;
  g.cp_size = o_.cp_size;
  g.master_addr = id_.master_addr;
  g.master_port = id_.master_port;
  g.rendezvous_timeout = o_.rendezvous_timeout;
  g.op_timeout = o_.op_timeout;
  g.backend = o_.backend == Backend::kNccl ? dist::CommBackend::kNccl : dist::CommBackend::kGloo;
  g.cuda_device = o_.cuda_device;
  reliability.before_rendezvous();
  groups_ = dist::init_gloo_process_groups(g);
  reliability.connect(consensus_group(groups_.world, groups_.layout.world),
                      consensus_group(groups_.cp, groups_.layout.cp));
}

std::string Worker::header() const {
  return "DP " + std::to_string(o_.dp_size) + " x CP " + std::to_string(o_.cp_size) + ", " +
         dtype_name(o_.dtype) + ", " + std::to_string(model_->num_parameters()) +
         " parameters, mask " + mask_to_string(o_.mask) + ", balancer " + balancer_.description;
}

MicroBatchFigures Worker::run_micro_batch(const data::MicroBatch& mb, std::int64_t index,
                                          at::Tensor& loss_sum, std::int64_t& loss_tokens,
                                          RankStepFigures& step) {
  const auto p = static_cast<std::size_t>(o_.cp_size);
  MicroBatchFigures f;
  f.dp_rank = dp_rank_;
  f.cp_rank = cp_rank_;
  f.microbatch = index;
  f.pairs.assign(p, 0);
  f.tiles.assign(p, 0);
  f.contiguous_pairs.assign(p, 0);
  f.contiguous_tiles.assign(p, 0);

  std::vector<std::shared_ptr<attention::CpAttention>> used;
  at::Tensor mb_loss;
  for (const data::PackedRow& row : mb.rows) {
    check_vocabulary(row, o_.model.vocab_size, *dataset_);
    CpWorkload w;
    w.tokens = row.size();
    w.doc_lengths = row.doc_lengths;
    w.mask = o_.mask;
    w.block_size = o_.block_size;
    w.cp_size = o_.cp_size;
    reliability.begin_row(w);

    const auto plan_start = Clock::now();
    Result<ShardPlan> plan = selector_->plan(w);
    step.plan_ms += ms_since(plan_start);
    if (!plan)
      throw std::runtime_error("planning a row of " + std::to_string(w.tokens) +
                               " tokens failed: " + plan.status().message());
    if (!reliability.check_row(w, *plan)) break;  // this CP group diverged: see end_step
    // What contiguous sharding would have cost this row: the baseline of
    // the summary, from the work model (no extra attention is run).
    std::vector<RankWork> contiguous = plan->work;
    if (plan->strategy_used != "contiguous") {
      host::PreferenceScope scope(*selector_, "contiguous");
      Result<ShardPlan> base = selector_->plan(w);
      if (base) contiguous = base->work;
    }
    for (std::size_t r = 0; r < p; ++r) {
      f.pairs[r] += plan->work[r].pairs;
      f.tiles[r] += plan->work[r].tiles;
      f.contiguous_pairs[r] += contiguous[r].pairs;
      f.contiguous_tiles[r] += contiguous[r].tiles;
    }
    f.row_tokens.push_back(w.tokens);
    f.strategies.push_back(plan->strategy_used);
    f.fallback_reasons.push_back(plan->fallback_reason);
    if (o_.log_samples && cp_rank_ == 0) {
      std::size_t start = 0;
      for (const data::TokenRange& piece : row.pieces) {
        f.pieces.push_back(
            {piece.sample, piece.begin, piece.end, piece_checksum(row, start, piece)});
        start += static_cast<std::size_t>(piece.end - piece.begin);
      }
    }

    const auto shard_start = Clock::now();
    const at::Tensor local = attention::shard(row_buffers(row), *plan, cp_rank_).to(device_of(o_));
    step.shard_ms += ms_since(shard_start);

    std::vector<std::shared_ptr<attention::CpAttention>> layers;
    for (std::int64_t l = 0; l < o_.model.num_layers; ++l) {
      Result<std::shared_ptr<attention::CpAttention>> a =
          attention::CpAttention::create(w, *plan, groups_.cp);
      if (!a) throw std::runtime_error("cp attention: " + a.status().message());
      layers.push_back(*a);
      used.push_back(*a);
    }
    const at::Tensor logits =
        model_->forward(local.select(1, kTokens), local.select(1, kPositions), layers);
    const at::Tensor mask = local.select(1, kLossMask);
    const at::Tensor row_loss = model_->loss_sum(logits, local.select(1, kLabels), mask);
    loss_tokens += mask.sum().item<std::int64_t>();
    mb_loss = mb_loss.defined() ? mb_loss + row_loss : row_loss;
  }
  if (mb_loss.defined()) {
    mb_loss.backward();
    loss_sum = loss_sum.defined() ? loss_sum + mb_loss.detach() : mb_loss.detach();
  }
  for (const auto& a : used) {
    f.attention_ms += a->last_forward().compute_ms + a->last_backward().compute_ms;
    f.attention_comm_ms += a->last_forward().comm_ms + a->last_backward().comm_ms;
  }
  return f;
}

void Worker::reduce_and_step(double& loss_sum, std::int64_t& loss_tokens) {
  // One float64 buffer for every gradient plus the loss and its token count:
  // a single collective per step, exact counts, and no float32 rounding in
  // the cross-rank sum.
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& p : model_->parameters()) {
    pieces.push_back(p.grad().defined() ? p.grad().to(at::kDouble).reshape({-1})
                                        : at::zeros({p.numel()}, p.options().dtype(at::kDouble)));
  }
  pieces.push_back(
      at::tensor({loss_sum, static_cast<double>(loss_tokens)}, at::kDouble).to(device_of(o_)));
  at::Tensor flat = at::cat(pieces);
  groups_.world->all_reduce_sum(flat);

  const std::int64_t n = flat.numel();
  loss_sum = flat[n - 2].item<double>();
  loss_tokens = static_cast<std::int64_t>(flat[n - 1].item<double>());
  const double scale = loss_tokens > 0 ? 1.0 / static_cast<double>(loss_tokens) : 0.0;
  std::int64_t offset = 0;
  for (const at::Tensor& p : model_->parameters()) {
    at::Tensor g = flat.narrow(0, offset, p.numel()).view(p.sizes()) * scale;
    p.mutable_grad() = g.to(p.scalar_type());
    offset += p.numel();
  }
  optimizer_->step();
  for (const at::Tensor& p : model_->parameters()) p.mutable_grad() = at::Tensor();
}

// Every rank applies the same update to the same parameters, so they stay
// bitwise equal; a difference means a rank trained on something else.
void Worker::check_replicas() {
  at::Tensor sum = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_of(o_)));
  std::int64_t i = 0;
  for (const at::Tensor& p : model_->parameters()) {
    sum += p.detach().to(at::kDouble).sum() * static_cast<double>(++i);
  }
  const std::vector<at::Tensor> all = groups_.world->all_gather(sum);
  if (id_.rank != 0) return;
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (!at::equal(all[r], all[0])) {
      host::log_to_stderr(host::LogLevel::kWarning,
                          "the parameters of rank " + std::to_string(r) +
                              " differ from rank 0's after training; the replicas diverged");
      return;
    }
  }
}

// Chooses the checkpoint to resume from (train.resume) and restores it. Every
// rank reads the file itself (train.checkpoint_dir must be visible to all
// ranks); check_same_checkpoint() then proves they read the same one.
Status Worker::restore_checkpoint() {
  const bool rank0 = id_.rank == 0;
  using Resume = CheckpointOptions::Resume;
  if (ck_.every > 0) {
    if (Status s = prepare_checkpoint_dir(ck_.dir); !s) return s;
  }
  if (ck_.resume == Resume::kNo) {
    if (ck_.every == 0) return Status::ok();
    // Writing into a directory that holds another run's checkpoints would
    // interleave the two runs' files, and a later resume could pick the
    // wrong one.
    Result<std::vector<CheckpointFile>> files = list_checkpoints(ck_.dir);
    if (!files) return files.status();
    if (!files->empty()) {
      return invalid_argument("train.checkpoint_dir " + ck_.dir +
                              " already holds checkpoints (the newest: " + files->front().path +
                              "); set train.resume=auto to continue that run, or choose an empty "
                              "directory");
    }
    return Status::ok();
  }
  if (ck_.resume == Resume::kPath) {
    Result<Checkpoint> read = read_checkpoint(ck_.resume_path);
    if (!read) {
      return invalid_argument(read.status().message() +
                              "; set train.resume to an intact checkpoint, or to auto for the "
                              "newest intact one in train.checkpoint_dir");
    }
    return apply_checkpoint(*read, ck_.resume_path);
  }
  Result<std::optional<ResumePoint>> point = latest_good_checkpoint(ck_.dir);
  if (!point) return point.status();
  if (!point->has_value()) {
    if (rank0) {
      host::log_to_stderr(host::LogLevel::kInfo, "train.resume = auto: no checkpoint in " +
                                                     ck_.dir + " yet; training from step 1");
    }
    return Status::ok();
  }
  const ResumePoint& p = **point;
  if (rank0) {
    for (const std::string& refused : p.refused) {
      host::log_to_stderr(host::LogLevel::kWarning,
                          refused + "; refused it, resuming from the older " + p.path);
    }
  }
  return apply_checkpoint(p.checkpoint, p.path);
}

Status Worker::apply_checkpoint(const Checkpoint& c, const std::string& path) {
  const bool rank0 = id_.rank == 0;
  const std::string* trajectory = c.find("config");
  if (trajectory == nullptr || c.header.config_fingerprint != fnv1a64(trajectory_text_)) {
    const std::string what = trajectory == nullptr
                                 ? std::string("it holds no settings")
                                 : describe_difference(*trajectory, trajectory_text_);
    return invalid_argument("checkpoint " + path + " was made with other settings (" + what +
                            "); resume with the settings it was made with, or start a new run "
                            "with another train.checkpoint_dir");
  }
  // The loader first: a window state that does not fit this run is refused
  // before the layout warning could promise an exactly-once resume.
  Result<std::vector<std::int64_t>> position = c.i64s("loader/position", 2, path);
  if (!position) return position.status();
  if (Status s = loader_->seek({(*position)[0], (*position)[1]}); !s) {
    return invalid_argument("checkpoint " + path + ": " + s.message());
  }
  // The DP window it was taken with (balancer.dp.window > 1): the window is
  // part of the data order, so a resume with another is refused.
  const std::string* window = c.find("loader/dp_window");
  if (Status s = loader_->restore_window_state(window ? *window : std::string_view()); !s) {
    return invalid_argument("checkpoint " + path + ": " + s.message());
  }

  const std::string* layout = c.find("layout");
  const std::string layout_change = layout ? describe_difference(*layout, layout_text_) : "";
  if (rank0 && !layout_change.empty()) {
    host::log_to_stderr(
        host::LogLevel::kWarning,
        "resuming " + path + " (made by DP " + std::to_string(c.header.dp_size) + " x CP " +
            std::to_string(c.header.cp_size) + ") with another layout: " + layout_change +
            "; every sample is still trained exactly once, but rows are formed and summed in "
            "another order, so losses will not be bitwise those of an uninterrupted run");
  }

  // Read everything before changing anything: a refused checkpoint must
  // leave the fresh model as it was.
  const std::vector<at::Tensor>& params = model_->parameters();
  const std::vector<std::string>& names = model_->parameter_names();
  std::vector<at::Tensor> values;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Result<at::Tensor> t = blob_to_tensor(c, "model/" + names[i], path, params[i]);
    if (!t) return t.status();
    values.push_back(*t);
  }
  Result<std::vector<std::int64_t>> optim_step = c.i64s("optim/step", 1, path);
  if (!optim_step) return optim_step.status();
  AdamW::State state;
  state.step = (*optim_step)[0];
  if (state.step > 0) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      Result<at::Tensor> m = blob_to_tensor(c, "optim/m/" + names[i], path, params[i]);
      if (!m) return m.status();
      Result<at::Tensor> v = blob_to_tensor(c, "optim/v/" + names[i], path, params[i]);
      if (!v) return v.status();
      // Checkpoints hold CPU tensors; the moments live with their parameter.
      state.m.push_back(m->to(params[i].device()));
      state.v.push_back(v->to(params[i].device()));
    }
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  Result<at::Tensor> rng = [&]() -> Result<at::Tensor> {
    std::lock_guard<std::mutex> lock(generator.mutex());
    return blob_to_tensor(c, "rng/torch_cpu", path, generator.get_state());
  }();
  if (!rng) return rng.status();
  {
    c10::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]);
  }
  optimizer_->set_state(std::move(state));
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(*rng);
  }
  start_step_ = c.header.step;
  resumed_crc_ = c.header.payload_crc32;
  if (rank0) {
    host::log_to_stderr(host::LogLevel::kInfo,
                        "resuming from " + path + ": step " + std::to_string(start_step_) +
                            " done, data at epoch " + std::to_string((*position)[0]) + " step " +
                            std::to_string((*position)[1]));
  }
  return Status::ok();
}

// Ranks that resumed from different files (a checkpoint_dir that is not
// shared, a file replaced between two ranks' reads) would train diverging
// replicas; compare before the first collective that depends on the state.
void Worker::check_same_checkpoint() {
  if (ck_.resume == CheckpointOptions::Resume::kNo) return;
  char mine[64];
  std::snprintf(mine, sizeof(mine), "step %" PRId64 " (payload CRC-32 0x%08x)", start_step_,
                static_cast<unsigned>(resumed_crc_));
  const std::string text = start_step_ == 0 ? std::string("no checkpoint") : std::string(mine);
  const std::vector<std::vector<std::uint8_t>> all =
      groups_.world->all_gather_bytes(std::vector<std::uint8_t>(text.begin(), text.end()));
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    throw InputError("rank " + std::to_string(r) + " resumed from " +
                     std::string(all[r].begin(), all[r].end()) + " but rank 0 from " +
                     std::string(all[0].begin(), all[0].end()) +
                     "; every rank must read the same checkpoint: put train.checkpoint_dir on a "
                     "file system all ranks share");
  }
}

// Rank 0 writes one file for the whole job: parameters, optimizer state,
// RNG and loader position are replicated on every rank (the DP partition and
// the CP plans are recomputed from them), so one copy is the complete state.
void Worker::write_checkpoint(std::int64_t step) {
  Checkpoint c;
  c.header.step = step;
  c.header.dp_size = o_.dp_size;
  c.header.cp_size = o_.cp_size;
  c.header.config_fingerprint = fnv1a64(trajectory_text_);
  c.add("config", trajectory_text_);
  c.add("layout", layout_text_);
  // The loader's state: its shuffle is a pure function of (data.seed,
  // epoch) and its steps of (shuffle, balancer.dp.window), so the position is
  // all it needs; with a window > 1 one more entry names the window, so that
  // a resume with another is refused. The balancer keeps nothing between
  // steps (the plugin is deterministic and stateless, the CP selector's
  // preference is restored by scope).
  const data::LoaderPosition position = loader_->position();
  c.add_i64s("loader/position", {position.epoch, position.step});
  if (std::string window = loader_->window_state(); !window.empty()) {
    c.add("loader/dp_window", std::move(window));
  }
  {
    // Unused by training today (no dropout); saved so that a model that
    // draws from it resumes the same stream.
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    c.add("rng/torch_cpu", tensor_to_blob(generator.get_state()));
  }
  const std::vector<std::string>& names = model_->parameter_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    c.add("model/" + names[i], tensor_to_blob(model_->parameters()[i]));
  }
  const AdamW::State state = optimizer_->state();
  c.add_i64s("optim/step", {state.step});
  for (std::size_t i = 0; i < state.m.size(); ++i) {
    c.add("optim/m/" + names[i], tensor_to_blob(state.m[i]));
    c.add("optim/v/" + names[i], tensor_to_blob(state.v[i]));
  }
  Result<std::string> path = save_checkpoint(ck_.dir, c, ck_.keep);
  if (!path) {
    throw CheckpointError("checkpoint of step " + std::to_string(step) + ": " +
                          path.status().message());
  }
}

void Worker::train() {
  const bool rank0 = id_.rank == 0;
  Progress progress(Progress::detect(), o_.steps);
  RunSummary summary;
  const auto start = Clock::now();
  check_same_checkpoint();
  if (rank0 && start_step_ >= o_.steps) {
    host::log_to_stderr(host::LogLevel::kInfo,
                        "the checkpoint is at step " + std::to_string(start_step_) +
                            ", train.steps = " + std::to_string(o_.steps) +
                            ": nothing left to train; raise train.steps to continue");
  }
  for (std::int64_t step = start_step_ + 1; step <= o_.steps; ++step) {
    const auto step_start = Clock::now();
    std::optional<data::StepBatch> batch = loader_->next_step();
    if (!batch) throw std::runtime_error("the data loader ended although epochs are unbounded");
    reliability.begin_step(step, *batch, *dataset_);

    RankStepFigures figures;
    figures.rank = id_.rank;
    at::Tensor loss = at::zeros({}, at::kDouble);
    std::int64_t tokens = 0;
    for (std::size_t m = 0; m < batch->micro_batches.size(); ++m) {
      at::Tensor mb_loss;
      figures.micro_batches.push_back(run_micro_batch(
          batch->micro_batches[m], static_cast<std::int64_t>(m), mb_loss, tokens, figures));
      if (mb_loss.defined()) loss = loss + mb_loss.to(at::kDouble);
    }
    double loss_sum = loss.item<double>();
    // Checked on each rank before the all-reduce spreads it: a NaN would
    // otherwise train on silently and surface, if at all, as replicas whose
    // parameters differ.
    if (!std::isfinite(loss_sum)) {
      throw NumericError("the loss of step " + std::to_string(step) + " is " +
                         (std::isnan(loss_sum) ? "NaN" : "infinite") + " on rank " +
                         std::to_string(id_.rank) +
                         " (its micro-batches' loss sum, before the all-reduce); lower train.lr, "
                         "check the data, or train with train.dtype: float64");
    }
    reliability.end_step();
    reduce_and_step(loss_sum, tokens);
    figures.step_ms = ms_since(step_start);

    const std::vector<std::vector<std::uint8_t>> gathered =
        groups_.world->all_gather_bytes(encode_figures(figures));
    if (!rank0) continue;
    std::vector<RankStepFigures> ranks;
    for (const auto& bytes : gathered) {
      Result<RankStepFigures> decoded = decode_figures(bytes);
      if (!decoded) throw std::runtime_error(decoded.status().message());
      ranks.push_back(std::move(decoded).value());
    }
    StepReport report;
    report.step = step;
    report.loss = tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0.0;
    report.loss_tokens = tokens;
    report.samples = static_cast<std::int64_t>(batch->global_samples.size());
    report.dp_strategy = batch->stats.strategy;
    report.dp_fallback_reason = batch->stats.fallback_reason;
    report.dp_imbalance = batch->stats.imbalance;
    report.dp_round_robin_imbalance =
        round_robin_imbalance(batch->global_samples, *dataset_, o_.dp_cost, o_.dp_size);
    report.wall_ms = figures.step_ms;
    if (metrics_) {
      if (Status s = metrics_->write(metrics_lines(report, ranks, o_.dp_size, o_.cp_size)); !s) {
        throw CheckpointError(s.message());
      }
    }
    summary.add(report, ranks, o_.cp_size);
    progress.update(report, std::chrono::duration<double>(Clock::now() - start).count());
    // After the step's metrics: a crash while writing loses no record.
    if (ck_.every > 0 && step % ck_.every == 0) write_checkpoint(step);
  }
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  check_replicas();
  if (!rank0) return;
  progress.finish();
  // A resumed run with no step left has nothing to summarise (the info line
  // above said so); an all-zero summary would read as a broken run.
  std::string text = start_step_ < o_.steps ? summary.render(header(), wall_s) : "";
  if (o_.source == DataSource::kSynthetic && !text.empty()) {
    // Without this, a flat loss reads as a broken trainer.
    text +=
        "  note           synthetic tokens are uniform random: the loss cannot fall below "
        "ln(model.vocab_size) = " +
        std::to_string(std::log(static_cast<double>(o_.model.vocab_size))) + "\n";
  }
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (!args_.save_params_path.empty()) {
    if (Status s = save_parameters(args_.save_params_path, *model_); !s) {
      throw InputError(s.message());
    }
  }
}

}  // namespace

int run_worker(const WorkerArgs& args) noexcept {
  try {
    Result<launch::WorkerIdentity> id = launch::detect_worker_identity();
    if (!id) {
      print_error(id.status().message() + "; check the launcher's environment variables");
      return 2;
    }
    g_who = "fulcrum-worker: rank " + std::to_string(id->rank);
    Result<host::Config> config = load_job_config(args.config_path, args.overrides);
    if (!config) {
      print_error(config.status().message());
      return 2;
    }
    Result<TrainOptions> options = train_options_from_config(*config);
    if (!options) {
      print_error(options.status().message());
      return 2;
    }
    const int world = options->dp_size * options->cp_size;
    if (id->world_size != world) {
      print_error(
          "the launcher started " + std::to_string(id->world_size) + " workers (" +
          launch::launcher_kind_name(id->launcher) +
          ") but parallel.dp_size x parallel.cp_size = " + std::to_string(options->dp_size) +
          " x " + std::to_string(options->cp_size) + " = " + std::to_string(world) + "; start " +
          std::to_string(world) + " workers or change the config");
      return 2;
    }
    if (Status s = resolve_device(*options, *id); !s) {
      print_error(s.message());
      return 2;
    }
    at::set_num_threads(options->threads > 0 ? options->threads : default_threads(*id));

    Result<CheckpointOptions> checkpoints = checkpoint_options_from_config(*config);
    if (!checkpoints) {
      print_error(checkpoints.status().message());
      return 2;
    }
    Result<ReliabilityOptions> reliability = reliability_options(*config, id->world_size);
    if (!reliability) {
      print_error(reliability.status().message());
      return 2;
    }
    Worker worker(std::move(options).value(), std::move(checkpoints).value(), *id, args);
    worker.reliability = ReliabilityHooks(std::move(reliability).value(), id->rank);
    if (Status s = worker.prepare(); !s) {
      print_error(s.message());
      return 2;
    }
    worker.connect();
    worker.train();
    return 0;
  } catch (const InputError& e) {
    print_error(e.what());
    return 2;
  } catch (const CheckpointError& e) {
    print_error(e.what());
    return 1;
  } catch (const ConsensusError& e) {
    print_error(e.what());
    return 1;
  } catch (const NumericError& e) {
    print_error(e.what());
    return 1;
  } catch (const dist::ConfigError& e) {
    print_error(dist::first_line(e));
    return 2;
  } catch (const dist::CommError& e) {
    print_error(dist::first_line(e));
    return 1;
  } catch (const std::exception& e) {
    // c10 errors carry a backtrace after the first line.
    print_error("internal error: " + dist::first_line(e));
    return 1;
  } catch (...) {
    print_error("internal error: unknown exception");
    return 1;
  }
}

}  // namespace fulcrum::train
