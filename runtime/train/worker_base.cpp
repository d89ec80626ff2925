#include "train/worker_base.h"

#include <ATen/ATen.h>

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

#include "fulcrum/core/text.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/log.h"
#include "train/run_settings.h"
#include "train/worker_errors.h"

namespace fulcrum::train {
namespace {

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

}  // namespace

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

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

std::vector<std::array<std::int64_t, 4>> row_pieces(const data::PackedRow& row) {
  std::vector<std::array<std::int64_t, 4>> pieces;
  std::size_t start = 0;
  for (const data::TokenRange& piece : row.pieces) {
    std::int64_t sum = 0;
    for (std::int64_t t = piece.begin; t < piece.end; ++t) {
      sum += (t + 1) * row.tokens[start + static_cast<std::size_t>(t - piece.begin)];
    }
    pieces.push_back({piece.sample, piece.begin, piece.end, sum});
    start += static_cast<std::size_t>(piece.end - piece.begin);
  }
  return pieces;
}

void check_finite(double loss_sum, std::int64_t step, int rank) {
  if (std::isfinite(loss_sum)) return;
  throw NumericError("the loss of step " + std::to_string(step) + " is " +
                     (std::isnan(loss_sum) ? "NaN" : "infinite") + " on rank " +
                     std::to_string(rank) +
                     " (its micro-batches' loss sum, before the all-reduce); lower train.lr, "
                     "check the data, or train with train.dtype: float64");
}

Worker::Worker(WorkerSetup setup)
    : options_(std::move(setup.options)),
      id_(std::move(setup.id)),
      reliability_(std::move(setup.reliability)),
      checkpoints_(std::move(setup.checkpoints)),
      args_(std::move(setup.args)) {}

void Worker::set_loss(StepResult& result, const at::Tensor& loss, std::int64_t step) const {
  result.loss_sum = loss.item<double>();
  check_finite(result.loss_sum, step, id_.rank);
}

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
  if (Status s = prepare_mode(); !s) return s;
  build_model();

  state_ = {model_.get(),
            optimizer_.get(),
            &*loader_,
            trajectory_settings(options_, loader_->num_samples()),
            layout_settings(options_, balancer_.description),
            mode_checkpoint()};
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
  reliability_.connect(consensus_group(groups_.world, groups_.layout.world), row_group());
}

std::string Worker::header() const {
  return layout() + ", " + dtype_name(options_.dtype) + ", " +
         std::to_string(model_->num_parameters()) + " parameters, mask " +
         mask_to_string(options_.mask) + ", balancer " + balancer_.description;
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
                         double step_ms, const std::vector<RankStepFigures>& ranks) {
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
  add_to_report(report);
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
  if (resumed_.step > 0) after_resume(resumed_.step);
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
    StepResult result = run_step(step, *batch);
    result.figures.compute_cpu_ms = thread_cpu_ms() - cpu_start;
    reliability_.end_step();
    const GlobalLoss loss = reduce_and_step(result.loss_sum, result.loss_tokens);
    result.figures.step_ms = ms_since(step_start);
    // Every rank decodes every rank's figures: a mode may act on them
    // (hybrid's profile refit) before rank 0 reports them.
    std::vector<RankStepFigures> ranks;
    for (const auto& bytes : groups_.world->all_gather_bytes(encode_figures(result.figures))) {
      Result<RankStepFigures> decoded = decode_figures(bytes);
      if (!decoded) throw std::runtime_error(decoded.status().message());
      ranks.push_back(std::move(decoded).value());
    }
    after_step(step, ranks);
    std::string written;
    if (rank0) {
      report_step(step, *batch, loss, result.figures.step_ms, ranks);
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

}  // namespace fulcrum::train
