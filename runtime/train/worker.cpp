#include "train/worker.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attention/cp_attention.h"
#include "attention/sharding.h"
#include "attention/slot_attention.h"
#include "comm/gloo_communicator.h"
#include "data/loader.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/text.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/cost_profile_file.h"
#include "fulcrum/host/log.h"
#include "fulcrum/host/plugin_loader.h"
#include "fulcrum/host/selection.h"
#include "train/job_inputs.h"
#include "train/metrics.h"
#include "train/model.h"
#include "train/run_settings.h"
#include "train/state_checkpoint.h"
#include "train/worker_errors.h"

namespace fulcrum::train {
namespace {

using Clock = std::chrono::steady_clock;

// SIGINT or SIGTERM while train.checkpoint_dir is set: noted here and acted
// on at the next step boundary, where the step's all-reduce tells every rank
// whether any rank was signalled; then rank 0 writes the checkpoint of that
// step and every rank exits. Without a checkpoint directory the signals keep
// their default action.
volatile std::sig_atomic_t g_interrupt = 0;

extern "C" void note_interrupt(int sig) {
  if (g_interrupt == 0) g_interrupt = sig;
}

void catch_interrupts() {
  struct sigaction action {};
  action.sa_handler = note_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    // Started with the signal ignored (a background job's SIGINT): the user
    // asked for that.
    if (old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &action, nullptr);
  }
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// This thread's CPU time in ms. With train.threads: 1 every ATen op runs on
// it, so it is the rank's compute, free of the shared machine's wall clock.
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

at::Device device_of(const TrainOptions& options) {
  return options.device == Device::kCuda
             ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(options.cuda_device))
             : at::Device(at::kCPU);
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

CpWorkload row_workload(const data::PackedRow& row, const TrainOptions& options) {
  CpWorkload w;
  w.tokens = row.size();
  w.doc_lengths = row.doc_lengths;
  w.mask = options.mask;
  w.block_size = options.block_size;
  w.cp_size = options.cp_size;
  return w;
}

// Checked on each rank before the all-reduce spreads it: a NaN would
// otherwise train on silently and surface, if at all, as replicas whose
// parameters differ.
void check_finite(double loss_sum, std::int64_t step, int rank) {
  if (std::isfinite(loss_sum)) return;
  throw NumericError("the loss of step " + std::to_string(step) + " is " +
                     (std::isnan(loss_sum) ? "NaN" : "infinite") + " on rank " +
                     std::to_string(rank) +
                     " (its micro-batches' loss sum, before the all-reduce); lower train.lr, "
                     "check the data, or train with train.dtype: float64");
}

// The slot's row: its pieces' columns in order. A piece is a whole loader
// row (documents longer than data.seq_length were cut there, labels kept)
// or, should a scheduler cut one, part of it.
data::PackedRow slot_row(const ScheduleSlot& slot,
                         const std::vector<const data::PackedRow*>& rows) {
  data::PackedRow out;
  for (const DocPiece& piece : slot.pieces) {
    const data::PackedRow& row = *rows[static_cast<std::size_t>(piece.doc)];
    const auto b = static_cast<std::ptrdiff_t>(piece.offset);
    const auto e = static_cast<std::ptrdiff_t>(piece.offset + piece.length);
    const auto append = [&](auto& to, const auto& from) {
      to.insert(to.end(), from.begin() + b, from.begin() + e);
    };
    append(out.tokens, row.tokens);
    append(out.labels, row.labels);
    append(out.loss_mask, row.loss_mask);
    append(out.positions, row.positions);
    append(out.document_ids, row.document_ids);
    out.doc_lengths.push_back(piece.length);
    std::int64_t at = 0;  // the row position where range r starts
    for (const data::TokenRange& r : row.pieces) {
      const std::int64_t lo = std::max(at, piece.offset);
      const std::int64_t hi = std::min(at + (r.end - r.begin), piece.offset + piece.length);
      if (lo < hi) out.pieces.push_back({r.sample, r.begin + (lo - at), r.begin + (hi - at)});
      at += r.end - r.begin;
    }
  }
  return out;
}

class Worker {
 public:
  Worker(TrainOptions options, CheckpointOptions checkpoints, launch::WorkerIdentity id,
         WorkerArgs args, ReliabilityHooks reliability)
      : options_(std::move(options)),
        checkpoints_(std::move(checkpoints)),
        id_(std::move(id)),
        args_(std::move(args)),
        reliability_(std::move(reliability)) {}

  // Everything that can be checked locally, before meeting the other ranks,
  // so bad input fails fast instead of after a rendezvous.
  Status prepare();
  void connect();
  void train();

 private:
  // One micro-batch of this rank: its figures, the summed token loss of its
  // rows (undefined when it ran none) and their loss-token count.
  struct MicroBatchResult {
    MicroBatchFigures figures;
    at::Tensor loss;
    std::int64_t loss_tokens = 0;
  };
  // This rank's step before the all-reduce.
  struct StepResult {
    RankStepFigures figures;
    double loss_sum = 0.0;
    std::int64_t loss_tokens = 0;
  };
  // The global batch's summed token loss and loss-token count, and the
  // signal that interrupts the job after this step (0: none).
  struct GlobalLoss {
    double sum = 0.0;
    std::int64_t tokens = 0;
    int interrupted_by = 0;
  };

  void build_model();
  Status prepare_scheduler();
  StepResult run_micro_batches(std::int64_t step, const data::StepBatch& batch);
  StepResult run_slots(std::int64_t step, const data::StepBatch& batch);
  double fixed_prediction_ms(const ScheduleRequest& request) const;
  ScheduleRequest exact_kv_request(const ScheduleRequest& request) const;
  void predict(const SlotCost& cost, const SlotCost& bytes, SlotFigures& f) const;
  // A slot's summed token loss on this member and its loss-token count.
  struct SlotResult {
    at::Tensor loss;
    std::int64_t loss_tokens = 0;
  };
  SlotResult run_slot(std::int64_t index, const ScheduleSlot& slot, const ScheduleRequest& request,
                      const std::vector<const data::PackedRow*>& rows, SlotFigures& figures);
  std::shared_ptr<attention::SlotAttention> slot_attention(const CpWorkload& w,
                                                           const ScheduleSlot& slot,
                                                           std::int64_t index) const;
  MicroBatchResult run_micro_batch(const data::MicroBatch& mb, std::int64_t index,
                                   RankStepFigures& step);
  void record_row(const data::PackedRow& row, const CpWorkload& w, const ShardPlan& plan,
                  MicroBatchFigures& f);
  GlobalLoss reduce_and_step(double loss_sum, std::int64_t loss_tokens);
  void report_step(std::int64_t step, const data::StepBatch& batch, const GlobalLoss& loss,
                   double step_ms, const std::vector<std::vector<std::uint8_t>>& gathered);
  void finish(double wall_s);
  [[noreturn]] void stop_interrupted(std::int64_t step, int sig, const std::string& checkpoint);
  void check_same_checkpoint();
  void check_replicas();
  std::string header() const;

  TrainOptions options_;
  CheckpointOptions checkpoints_;
  launch::WorkerIdentity id_;
  WorkerArgs args_;
  ReliabilityHooks reliability_;  // plan consensus and test-only faults (consensus.h)
  int dp_rank_ = 0;
  int cp_rank_ = 0;
  BalancerChoice balancer_;
  std::unique_ptr<data::TokenDataset> dataset_;
  std::optional<data::DataLoader> loader_;
  std::unique_ptr<host::CpSelector> selector_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  comm::ProcessGroups groups_;
  std::unique_ptr<MetricsFile> metrics_;
  // Hybrid mode: the balancer that schedules, and the step's schedule for
  // its report.
  std::shared_ptr<LoadBalancer> scheduler_;
  std::optional<StepReport::Hybrid> hybrid_report_;
  TrainingState state_;  // what a checkpoint holds and the settings it must match
  ResumedAt resumed_;    // the step training resumes after, and the file's CRC
  RunSummary summary_;
  std::optional<Progress> progress_;
  Clock::time_point start_;
};

Status Worker::prepare() {
  cp_rank_ = id_.rank % options_.cp_size;
  dp_rank_ = id_.rank / options_.cp_size;
  const bool rank0 = id_.rank == 0;

  const host::LogFn log = once_per_message_log(rank0);
  Result<BalancerChoice> balancer = choose_balancer(options_, log);
  if (!balancer) return balancer.status();
  balancer_ = std::move(balancer).value();
  LoadBalancer& partitioner = dp_balancer(balancer_, options_, log);
  Result<std::unique_ptr<data::TokenDataset>> dataset = open_dataset(options_);
  if (!dataset) return dataset.status();
  dataset_ = std::move(dataset).value();
  Result<data::DataLoader> loader =
      data::DataLoader::create(*dataset_, partitioner, loader_options(options_, dp_rank_));
  if (!loader) return loader.status();
  loader_.emplace(std::move(loader).value());

  host::SelectorOptions selector_options;
  selector_options.preferred = options_.cp_strategy;
  selector_options.fallback = options_.cp_fallback;
  selector_options.log = once_per_message_log(cp_rank_ == 0);
  selector_ = std::make_unique<host::CpSelector>(balancer_.plugin, selector_options);
  if (Status s = prepare_scheduler(); !s) return s;
  build_model();

  state_ = {model_.get(), optimizer_.get(), &*loader_,
            trajectory_settings(options_, loader_->num_samples()),
            layout_settings(options_, balancer_.description)};
  Result<ResumedAt> resumed = restore_training_state(checkpoints_, state_, rank0);
  if (!resumed) return resumed.status();
  resumed_ = *resumed;

  if (rank0 && !args_.metrics_path.empty()) {
    Result<std::unique_ptr<MetricsFile>> file = MetricsFile::open(args_.metrics_path);
    if (!file) return file.status();
    metrics_ = std::move(file).value();
  }
  return Status::ok();
}

void Worker::build_model() {
  if (options_.model.position == PositionKind::kLearned) {
    // A position is an offset within a document (continuing across a split
    // piece) or within the padding: below the longest sample and below
    // seq_length.
    std::int64_t longest = options_.seq_length;
    for (std::int64_t i = 0; i < dataset_->size(); ++i) {
      longest = std::max(longest, dataset_->length(i));
    }
    options_.model.max_positions = longest;
  }
  model_ = std::make_unique<GptModel>(options_.model, options_.dtype, options_.seed,
                                      device_of(options_));
  AdamW::Options adamw;
  adamw.lr = options_.lr;
  adamw.weight_decay = options_.weight_decay;
  optimizer_ = std::make_unique<AdamW>(model_->parameters(), adamw);
}

void Worker::connect() {
  comm::GlooOptions g;
  g.rank = id_.rank;
  g.world_size = id_.world_size;
  g.dp_size = options_.dp_size;
  g.cp_size = options_.cp_size;
  g.master_addr = id_.master_addr;
  g.master_port = id_.master_port;
  g.rendezvous_timeout = options_.rendezvous_timeout;
  g.op_timeout = options_.op_timeout;
  g.backend =
      options_.backend == Backend::kNccl ? comm::CommBackend::kNccl : comm::CommBackend::kGloo;
  g.cuda_device = options_.cuda_device;
  reliability_.before_rendezvous();
  groups_ = comm::init_gloo_process_groups(g);
  // In hybrid mode the schedule, not a CP group, says who shares a row: the
  // per-row check becomes the schedule check over WORLD, and the DP check
  // sees one DP rank (every rank holds the whole global batch).
  const bool hybrid = options_.mode == ParallelMode::kHybrid;
  reliability_.connect(consensus_group(groups_.world, groups_.layout.world),
                       hybrid ? consensus_group(groups_.world, groups_.layout.world)
                              : consensus_group(groups_.cp, groups_.layout.cp));
}

std::string Worker::header() const {
  const std::string layout =
      options_.mode == ParallelMode::kHybrid
          ? "hybrid over " + std::to_string(options_.dp_size) +
                " ranks (T = " + std::to_string(options_.max_tokens_per_rank) + ", scheduler " +
                options_.schedule_strategy + ", profile " + options_.profile.name + ")"
          : "DP " + std::to_string(options_.dp_size) + " x CP " + std::to_string(options_.cp_size);
  return layout + ", " + dtype_name(options_.dtype) + ", " +
         std::to_string(model_->num_parameters()) + " parameters, mask " +
         mask_to_string(options_.mask) + ", balancer " + balancer_.description;
}

// The row's work against what contiguous sharding would have cost (the
// summary's baseline, from the work model: no extra attention is run), its
// strategy, and with train.log_samples its pieces.
void Worker::record_row(const data::PackedRow& row, const CpWorkload& w, const ShardPlan& plan,
                        MicroBatchFigures& f) {
  std::vector<RankWork> contiguous = plan.work;
  if (plan.strategy_used != "contiguous") {
    host::PreferenceScope scope(*selector_, "contiguous");
    Result<ShardPlan> base = selector_->plan(w);
    if (base) contiguous = base->work;
  }
  for (std::size_t r = 0; r < plan.work.size(); ++r) {
    f.pairs[r] += plan.work[r].pairs;
    f.tiles[r] += plan.work[r].tiles;
    f.contiguous_pairs[r] += contiguous[r].pairs;
    f.contiguous_tiles[r] += contiguous[r].tiles;
  }
  f.row_tokens.push_back(w.tokens);
  f.strategies.push_back(plan.strategy_used);
  f.fallback_reasons.push_back(plan.fallback_reason);
  if (!options_.log_samples || cp_rank_ != 0) return;
  std::size_t start = 0;
  for (const data::TokenRange& piece : row.pieces) {
    f.pieces.push_back({piece.sample, piece.begin, piece.end, piece_checksum(row, start, piece)});
    start += static_cast<std::size_t>(piece.end - piece.begin);
  }
}

Worker::MicroBatchResult Worker::run_micro_batch(const data::MicroBatch& mb, std::int64_t index,
                                                 RankStepFigures& step) {
  const auto p = static_cast<std::size_t>(options_.cp_size);
  MicroBatchResult result;
  MicroBatchFigures& f = result.figures;
  f.dp_rank = dp_rank_;
  f.cp_rank = cp_rank_;
  f.microbatch = index;
  f.pairs.assign(p, 0);
  f.tiles.assign(p, 0);
  f.contiguous_pairs.assign(p, 0);
  f.contiguous_tiles.assign(p, 0);

  std::vector<std::shared_ptr<attention::CpAttention>> used;
  for (const data::PackedRow& row : mb.rows) {
    check_vocabulary(row, options_.model.vocab_size, *dataset_);
    CpWorkload w = row_workload(row, options_);
    reliability_.begin_row(w);
    const auto plan_start = Clock::now();
    Result<ShardPlan> plan = selector_->plan(w);
    step.plan_ms += ms_since(plan_start);
    if (!plan) {
      throw std::runtime_error("planning a row of " + std::to_string(w.tokens) +
                               " tokens failed: " + plan.status().message());
    }
    if (!reliability_.check_row(w, *plan)) break;  // this CP group diverged: see end_step
    record_row(row, w, *plan, f);

    const auto shard_start = Clock::now();
    const at::Tensor local =
        attention::shard(row_buffers(row), *plan, cp_rank_).to(device_of(options_));
    step.shard_ms += ms_since(shard_start);
    std::vector<std::shared_ptr<attention::RowAttention>> layers;
    for (std::int64_t l = 0; l < options_.model.num_layers; ++l) {
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
    result.loss_tokens += mask.sum().item<std::int64_t>();
    result.loss = result.loss.defined() ? result.loss + row_loss : row_loss;
  }
  if (result.loss.defined()) {
    result.loss.backward();
    result.loss = result.loss.detach();
  }
  for (const auto& a : used) {
    f.attention_ms += a->last_forward().compute_ms + a->last_backward().compute_ms;
    f.attention_comm_ms += a->last_forward().comm_ms + a->last_backward().comm_ms;
  }
  return result;
}

Worker::StepResult Worker::run_micro_batches(std::int64_t step, const data::StepBatch& batch) {
  StepResult result;
  result.figures.rank = id_.rank;
  at::Tensor loss = at::zeros({}, at::kDouble);
  for (std::size_t m = 0; m < batch.micro_batches.size(); ++m) {
    MicroBatchResult mb =
        run_micro_batch(batch.micro_batches[m], static_cast<std::int64_t>(m), result.figures);
    result.figures.micro_batches.push_back(std::move(mb.figures));
    result.loss_tokens += mb.loss_tokens;
    if (mb.loss.defined()) loss = loss + mb.loss.to(at::kDouble);
  }
  result.loss_sum = loss.item<double>();
  check_finite(result.loss_sum, step, id_.rank);
  return result;
}

Worker::GlobalLoss Worker::reduce_and_step(double loss_sum, std::int64_t loss_tokens) {
  // One float64 buffer for every gradient plus the loss and its token count:
  // a single collective per step, exact counts, and no float32 rounding in
  // the cross-rank sum.
  std::vector<at::Tensor> pieces;
  for (const at::Tensor& p : model_->parameters()) {
    pieces.push_back(p.grad().defined() ? p.grad().to(at::kDouble).reshape({-1})
                                        : at::zeros({p.numel()}, p.options().dtype(at::kDouble)));
  }
  // How many ranks were signalled (SIGINT, SIGTERM) rides along: the sum is
  // the same on every rank, so all stop after the same step.
  const int mine = g_interrupt;
  pieces.push_back(at::tensor({loss_sum, static_cast<double>(loss_tokens),
                               mine == SIGINT ? 1.0 : 0.0, mine == SIGTERM ? 1.0 : 0.0},
                              at::kDouble)
                       .to(device_of(options_)));
  at::Tensor flat = at::cat(pieces);
  groups_.world->all_reduce_sum(flat);

  const std::int64_t n = flat.numel();
  GlobalLoss global;
  global.sum = flat[n - 4].item<double>();
  global.tokens = static_cast<std::int64_t>(flat[n - 3].item<double>());
  const bool any_int = flat[n - 2].item<double>() > 0.0;
  const bool any_term = flat[n - 1].item<double>() > 0.0;
  if (any_int || any_term) global.interrupted_by = mine != 0 ? mine : any_term ? SIGTERM : SIGINT;
  const double scale = global.tokens > 0 ? 1.0 / static_cast<double>(global.tokens) : 0.0;
  std::int64_t offset = 0;
  for (const at::Tensor& p : model_->parameters()) {
    at::Tensor g = flat.narrow(0, offset, p.numel()).view(p.sizes()) * scale;
    p.mutable_grad() = g.to(p.scalar_type());
    offset += p.numel();
  }
  optimizer_->step();
  for (const at::Tensor& p : model_->parameters()) p.mutable_grad() = at::Tensor();
  return global;
}

// Rank 0: the step's metrics line, summary and progress from every rank's
// figures.
void Worker::report_step(std::int64_t step, const data::StepBatch& batch, const GlobalLoss& loss,
                         double step_ms, const std::vector<std::vector<std::uint8_t>>& gathered) {
  std::vector<RankStepFigures> ranks;
  for (const auto& bytes : gathered) {
    Result<RankStepFigures> decoded = decode_figures(bytes);
    if (!decoded) throw std::runtime_error(decoded.status().message());
    ranks.push_back(std::move(decoded).value());
  }
  StepReport report;
  report.step = step;
  report.loss = loss.tokens > 0 ? loss.sum / static_cast<double>(loss.tokens) : 0.0;
  report.loss_tokens = loss.tokens;
  report.samples = static_cast<std::int64_t>(batch.global_samples.size());
  report.dp_strategy = batch.stats.strategy;
  report.dp_fallback_reason = batch.stats.fallback_reason;
  report.dp_imbalance = batch.stats.imbalance;
  report.dp_round_robin_imbalance =
      round_robin_imbalance(batch.global_samples, *dataset_, options_.dp_cost, options_.dp_size);
  report.wall_ms = step_ms;
  report.hybrid = hybrid_report_;
  if (metrics_) {
    const auto lines = metrics_lines(report, ranks, options_.dp_size, options_.cp_size);
    if (Status s = metrics_->write(lines); !s) throw CheckpointError(s.message());
  }
  summary_.add(report, ranks, options_.cp_size);
  progress_->update(report, std::chrono::duration<double>(Clock::now() - start_).count());
}

void Worker::train() {
  const bool rank0 = id_.rank == 0;
  if (!checkpoints_.dir.empty()) catch_interrupts();
  progress_.emplace(Progress::detect(), options_.steps, resumed_.step);
  start_ = Clock::now();
  check_same_checkpoint();
  if (rank0 && resumed_.step >= options_.steps) {
    host::log_to_stderr(host::LogLevel::kInfo,
                        "the checkpoint is at step " + std::to_string(resumed_.step) +
                            ", train.steps = " + std::to_string(options_.steps) +
                            ": nothing left to train; raise train.steps to continue");
  }
  for (std::int64_t step = resumed_.step + 1; step <= options_.steps; ++step) {
    const auto step_start = Clock::now();
    std::optional<data::StepBatch> batch = loader_->next_step();
    if (!batch) throw std::runtime_error("the data loader ended although epochs are unbounded");
    reliability_.begin_step(step, *batch, *dataset_);
    const double cpu_start = thread_cpu_ms();
    StepResult result = options_.mode == ParallelMode::kHybrid ? run_slots(step, *batch)
                                                               : run_micro_batches(step, *batch);
    result.figures.compute_cpu_ms = thread_cpu_ms() - cpu_start;
    reliability_.end_step();
    const GlobalLoss loss = reduce_and_step(result.loss_sum, result.loss_tokens);
    result.figures.step_ms = ms_since(step_start);
    const std::vector<std::vector<std::uint8_t>> gathered =
        groups_.world->all_gather_bytes(encode_figures(result.figures));
    std::string written;
    if (rank0) {
      report_step(step, *batch, loss, result.figures.step_ms, gathered);
      // After the step's metrics: a crash while writing loses no record.
      if ((checkpoints_.every > 0 && step % checkpoints_.every == 0) || loss.interrupted_by != 0) {
        written =
            write_training_state(checkpoints_, state_, step, options_.dp_size, options_.cp_size);
        progress_->note("checkpoint step " + std::to_string(step) + ": " + written);
      }
    }
    if (loss.interrupted_by != 0) stop_interrupted(step, loss.interrupted_by, written);
  }
  finish(std::chrono::duration<double>(Clock::now() - start_).count());
}

// Every rank after the step the job was interrupted at; rank 0 has written
// `checkpoint` and says where it is (the others exit quietly: one line, not
// one per rank).
void Worker::stop_interrupted(std::int64_t step, int sig, const std::string& checkpoint) {
  if (id_.rank != 0) throw Interrupted(sig, "");
  progress_->finish();
  std::fflush(stdout);
  throw Interrupted(sig, std::string("interrupted by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
                             " after step " + std::to_string(step) + " of " +
                             std::to_string(options_.steps) + "; checkpoint written to " +
                             checkpoint + "; continue with --resume auto");
}

void Worker::finish(double wall_s) {
  check_replicas();
  if (id_.rank != 0) return;
  progress_->finish();
  // A resumed run with no step left has nothing to summarise (the info line
  // in train() said so); an all-zero summary would read as a broken run.
  std::string text = resumed_.step < options_.steps ? summary_.render(header(), wall_s) : "";
  if (options_.source == DataSource::kSynthetic && !text.empty()) {
    // Without this, a flat loss reads as a broken trainer.
    text +=
        "  note           synthetic tokens are uniform random: the loss cannot fall below "
        "ln(model.vocab_size) = " +
        std::to_string(std::log(static_cast<double>(options_.model.vocab_size))) + "\n";
  }
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (!args_.save_params_path.empty()) {
    if (Status s = save_parameters(args_.save_params_path, *model_); !s) {
      throw InputError(s.message());
    }
  }
}

// Hybrid mode: the balancer that schedules (the plugin, else the built-in
// one, whose fixed schedule the host serves) and that it offers the
// scheduler asked for; options.cpp has read the cost profile.
Status Worker::prepare_scheduler() {
  if (options_.mode != ParallelMode::kHybrid) return Status::ok();
  scheduler_ = balancer_.plugin ? balancer_.plugin : host::builtin_balancer();
  const std::vector<std::string> offered = scheduler_->schedule_strategies();
  if (std::find(offered.begin(), offered.end(), options_.schedule_strategy) == offered.end()) {
    return invalid_argument("balancer.schedule.strategy " + quote_text(options_.schedule_strategy) +
                            " is not offered by balancer " + quote_text(balancer_.description) +
                            " (it offers: " + join(offered, ", ") + ")");
  }
  return Status::ok();
}

// What a slot's SlotAttention did on this member over every layer.
void add_attention_figures(const attention::SlotAttention& a, SlotFigures& f) {
  const attention::SlotAttentionStats& fwd = a.total_forward();
  const attention::SlotAttentionStats& bwd = a.total_backward();
  f.tiles = fwd.tiles;
  f.bytes_sent = fwd.bytes_sent + bwd.bytes_sent;
  f.bytes_received = fwd.bytes_received + bwd.bytes_received;
  f.kv_sent = fwd.bytes_sent;
  f.kv_received = fwd.bytes_received;
  f.compute_ms = fwd.compute_ms + bwd.compute_ms;
  f.comm_ms = fwd.comm_ms + bwd.comm_ms;
}

// With train.log_samples, on a slot's first member: its row's pieces.
void add_pieces(const data::PackedRow& row, SlotFigures& f) {
  std::size_t at = 0;
  for (const data::TokenRange& piece : row.pieces) {
    f.pieces.push_back({piece.sample, piece.begin, piece.end, piece_checksum(row, at, piece)});
    at += static_cast<std::size_t>(piece.end - piece.begin);
  }
}

// This member's SlotAttention for `slot`, over the world; every layer uses
// it (its exchanges pair up in layer order on every member).
std::shared_ptr<attention::SlotAttention> Worker::slot_attention(const CpWorkload& w,
                                                                 const ScheduleSlot& slot,
                                                                 std::int64_t index) const {
  attention::SlotAttentionOptions slot_options;
  slot_options.label =
      "slot " + std::to_string(index) + " (wave " + std::to_string(slot.wave) + ")";
  Result<std::shared_ptr<attention::SlotAttention>> a =
      attention::SlotAttention::create(w, slot.plan, slot.ranks, groups_.world, slot_options);
  if (!a) throw std::runtime_error(slot_options.label + ": " + a.status().message());
  return *a;
}

// One slot on this member: its row assembled and sharded by the slot's plan,
// forward with SlotAttention over the world group, backward at once. Every
// member runs the slot's forward and backward exchanges in the same order
// before its next slot, which is what keeps wave order deadlock-free
// (docs/HYBRID_RUNTIME.md).
Worker::SlotResult Worker::run_slot(std::int64_t index, const ScheduleSlot& slot,
                                    const ScheduleRequest& request,
                                    const std::vector<const data::PackedRow*>& rows,
                                    SlotFigures& f) {
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_ms();
  reliability_.begin_slot();
  const data::PackedRow row = slot_row(slot, rows);
  check_vocabulary(row, options_.model.vocab_size, *dataset_);
  const auto member = static_cast<std::int32_t>(
      std::find(slot.ranks.begin(), slot.ranks.end(), id_.rank) - slot.ranks.begin());
  f.slot = index;
  f.wave = slot.wave;
  f.group = static_cast<std::int32_t>(slot.ranks.size());
  f.member = member;
  const auto shard_begin = slot.plan.positions.begin() + member * slot.plan.shard_len;
  f.tokens = std::count_if(shard_begin, shard_begin + slot.plan.shard_len,
                           [](std::int64_t position) { return position >= 0; });
  const at::Tensor local =
      attention::shard(row_buffers(row), slot.plan, member).to(device_of(options_));
  const auto setup_start = Clock::now();
  const auto attention = slot_attention(slot_workload(request, slot), slot, index);
  f.setup_ms = ms_since(setup_start);
  const std::vector<std::shared_ptr<attention::RowAttention>> layers(
      static_cast<std::size_t>(options_.model.num_layers), attention);
  const at::Tensor logits =
      model_->forward(local.select(1, kTokens), local.select(1, kPositions), layers);
  const at::Tensor mask = local.select(1, kLossMask);
  const at::Tensor loss = model_->loss_sum(logits, local.select(1, kLabels), mask);
  loss.backward();
  add_attention_figures(*attention, f);
  if (options_.log_samples && member == 0) add_pieces(row, f);
  f.busy_ms = ms_since(start);
  f.cpu_ms = thread_cpu_ms() - cpu_start;
  return {loss.detach(), mask.sum().item<std::int64_t>()};
}

// The request with kv_bytes_per_token set to what this model's K and V of
// one token are over all layers, so that the cost model's bytes are the
// bytes the exchanges move.
ScheduleRequest Worker::exact_kv_request(const ScheduleRequest& request) const {
  ScheduleRequest exact = request;
  const double dtype_bytes = options_.dtype == Dtype::kFloat64 ? 8.0 : 4.0;
  exact.profile.kv_bytes_per_token = 2.0 * static_cast<double>(options_.model.hidden_size) *
                                     static_cast<double>(options_.model.num_layers) * dtype_bytes;
  return exact;
}

// This rank's member of a slot as the cost model sees it.
void Worker::predict(const SlotCost& cost, const SlotCost& bytes, SlotFigures& f) const {
  for (std::size_t m = 0; m < cost.members.size(); ++m) {
    if (cost.members[m].rank != id_.rank) continue;
    f.predicted_compute_ms = cost.members[m].compute_seconds * 1e3;
    f.predicted_comm_ms = cost.members[m].comm_seconds * 1e3;
    f.predicted_kv_sent = bytes.members[m].bytes_sent;
    f.predicted_kv_received = bytes.members[m].bytes_received;
  }
}

// What fixed mode's schedule of the same batch would take by the cost
// model: the summary's baseline (0 when the balancer has no fixed schedule
// for it).
double Worker::fixed_prediction_ms(const ScheduleRequest& request) const {
  Result<Schedule> fixed = scheduler_->schedule("fixed", request);
  return fixed ? evaluate_schedule(request, *fixed).step_seconds * 1e3 : 0.0;
}

// Hybrid mode: every rank schedules the whole global batch itself (the
// pieces the loader cut), checks that the others made the same schedule,
// then runs its own slots in wave order.
Worker::StepResult Worker::run_slots(std::int64_t step, const data::StepBatch& batch) {
  StepResult result;
  result.figures.rank = id_.rank;
  std::vector<const data::PackedRow*> rows;
  for (const data::MicroBatch& mb : batch.micro_batches) {
    for (const data::PackedRow& row : mb.rows) rows.push_back(&row);
  }
  ScheduleRequest request;
  for (const data::PackedRow* row : rows) request.doc_lengths.push_back(row->size());
  request.world_size = options_.dp_size;
  request.max_tokens_per_rank = options_.max_tokens_per_rank;
  request.mask = options_.mask;
  request.block_size = options_.block_size;
  request.profile = options_.profile;
  const auto plan_start = Clock::now();
  Result<Schedule> schedule = scheduler_->schedule(options_.schedule_strategy, request);
  result.figures.plan_ms = ms_since(plan_start);
  if (!schedule) {
    const std::string why = "scheduling step " + std::to_string(step) + " with " +
                            quote_text(options_.schedule_strategy) +
                            " failed: " + schedule.status().message();
    // A plugin that broke the ABI's contract, or a request the schedule
    // refuses (the data's or the config's doing; the preflight checks the
    // bounds it can see), is a bad setting (exit 2), named in the message;
    // anything else is a failed run.
    if (schedule.status().code() == StatusCode::kPluginFault ||
        schedule.status().code() == StatusCode::kInvalidArgument) {
      throw InputError(why);
    }
    throw std::runtime_error(why);
  }
  reliability_.check_schedule(*schedule);
  const ScheduleCost cost = evaluate_schedule(request, *schedule);
  const ScheduleCost bytes = evaluate_schedule(exact_kv_request(request), *schedule);
  hybrid_report_ = StepReport::Hybrid{
      schedule->strategy_used, schedule->fallback_reason, {}, cost.step_seconds * 1e3};
  if (id_.rank == 0) hybrid_report_->fixed_predicted_ms = fixed_prediction_ms(request);
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < schedule->slots.size(); ++i) {
    const ScheduleSlot& slot = schedule->slots[i];
    hybrid_report_->groups.push_back(static_cast<std::int32_t>(slot.ranks.size()));
    if (std::find(slot.ranks.begin(), slot.ranks.end(), id_.rank) != slot.ranks.end()) {
      mine.push_back(i);
    }
  }
  std::stable_sort(mine.begin(), mine.end(), [&](std::size_t a, std::size_t b) {
    return schedule->slots[a].wave < schedule->slots[b].wave;
  });
  at::Tensor loss = at::zeros({}, at::kDouble);
  for (std::size_t i : mine) {
    SlotFigures f;
    predict(cost.slots[i], bytes.slots[i], f);
    const SlotResult slot =
        run_slot(static_cast<std::int64_t>(i), schedule->slots[i], request, rows, f);
    loss = loss + slot.loss.to(at::kDouble);
    result.loss_tokens += slot.loss_tokens;
    result.figures.slots.push_back(std::move(f));
  }
  result.loss_sum = loss.item<double>();
  check_finite(result.loss_sum, step, id_.rank);
  return result;
}

// Ranks that resumed from different files (a checkpoint_dir that is not
// shared, a file replaced between two ranks' reads) would train diverging
// replicas; compare before the first collective that depends on the state.
void Worker::check_same_checkpoint() {
  if (checkpoints_.resume == CheckpointOptions::Resume::kNo) return;
  char mine[64];
  std::snprintf(mine, sizeof(mine), "step %" PRId64 " (payload CRC-32 0x%08x)", resumed_.step,
                static_cast<unsigned>(resumed_.payload_crc32));
  const std::string text = resumed_.step == 0 ? std::string("no checkpoint") : std::string(mine);
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

// Every rank applies the same update to the same parameters, so they stay
// bitwise equal; a difference means a rank trained on something else.
void Worker::check_replicas() {
  at::Tensor sum =
      at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_of(options_)));
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

}  // namespace

Status configure_compute(TrainOptions& options, const launch::WorkerIdentity& id) {
#ifndef FULCRUM_WITH_NCCL
  if (options.backend == Backend::kNccl) {
    return invalid_argument(
        "dist.backend is nccl, but this fulcrum was built against a LibTorch without NCCL; set "
        "dist.backend: gloo, or rebuild against a CUDA LibTorch with NCCL (docs/RESULTS_GPU.md)");
  }
#endif
  if (options.device == Device::kCuda) {
    const auto gpus = static_cast<int>(torch::cuda::device_count());
    if (gpus == 0) {
      return invalid_argument(
          "train.device is cuda, but this LibTorch sees no GPU (it was built without CUDA, or "
          "no GPU is visible); set train.device: cpu, or build against a CUDA LibTorch "
          "(docs/RESULTS_GPU.md)");
    }
    const int local = id.local_world_size.value_or(id.world_size);
    if (options.backend == Backend::kNccl && local > gpus) {
      return invalid_argument("dist.backend: nccl needs one GPU per rank, but this host runs " +
                              std::to_string(local) + " ranks on " + std::to_string(gpus) +
                              " GPUs; set dist.backend: gloo (ranks then share GPUs) or start "
                              "fewer ranks per host");
    }
    options.cuda_device = id.local_rank % gpus;
  }
  at::set_num_threads(options.threads > 0 ? options.threads : default_threads(id));
  return Status::ok();
}

Status run_training(TrainOptions options, CheckpointOptions checkpoints,
                    const launch::WorkerIdentity& id, const WorkerArgs& args,
                    ReliabilityOptions reliability) {
  Worker worker(std::move(options), std::move(checkpoints), id, args,
                ReliabilityHooks(std::move(reliability), id.rank));
  if (Status s = worker.prepare(); !s) return s;
  worker.connect();
  worker.train();
  return Status::ok();
}

}  // namespace fulcrum::train
