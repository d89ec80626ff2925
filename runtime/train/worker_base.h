// What the fixed and the hybrid step loops of a rank share (internal to
// fulcrum_train): the balancer, data, model and optimizer; the rendezvous
// and the consensus checks; the step loop itself with its gradient
// all-reduce, metrics, checkpoints and interrupts; and the summary at the
// end. A mode supplies only how one step's batch becomes this rank's loss
// and figures: FixedWorker (fixed_worker.cpp, rows over a fixed CP group)
// and HybridWorker (hybrid_worker.cpp, a schedule's slots over the world).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"
#include "data/loader.h"
#include "fulcrum/host/selection.h"
#include "launch/worker_env.h"
#include "train/checkpoint.h"
#include "train/consensus.h"
#include "train/job_inputs.h"
#include "train/metrics.h"
#include "train/model.h"
#include "train/options.h"
#include "train/state_checkpoint.h"
#include "train/trainer.h"

namespace fulcrum::train {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start);

// This thread's CPU time in ms. With train.threads: 1 every ATen op runs on
// it, so it is the rank's compute, free of the shared machine's wall clock.
double thread_cpu_ms();

at::Device device_of(const TrainOptions& options);

// The sequence buffers of one row as columns of one int64 tensor, so that a
// single shard() call moves all of them the same way: tokens, positions,
// labels, loss mask, document ids.
enum Column { kTokens = 0, kPositions, kLabels, kLossMask, kDocIds, kColumns };
at::Tensor row_buffers(const data::PackedRow& row);

// Out-of-vocabulary tokens would index past the embedding table (a crash
// deep in ATen); refuse them with the sample that holds them.
void check_vocabulary(const data::PackedRow& row, std::int64_t vocab,
                      const data::TokenDataset& dataset);

// Checked on each rank before the all-reduce spreads it: a NaN would
// otherwise train on silently and surface, if at all, as replicas whose
// parameters differ.
void check_finite(double loss_sum, std::int64_t step, int rank);

// With train.log_samples: the row's pieces {sample, begin, end, checksum},
// the checksum their (offset + 1)-weighted token sum, which catches lost,
// repeated and reordered tokens (a plain sum would not).
std::vector<std::array<std::int64_t, 4>> row_pieces(const data::PackedRow& row);

// What a worker is made from: the job's options, its checkpoints, this
// rank's identity, the worker's command line and the reliability hooks.
struct WorkerSetup {
  TrainOptions options;
  CheckpointOptions checkpoints;
  launch::WorkerIdentity id;
  WorkerArgs args;
  ReliabilityHooks reliability;
};

class Worker {
 public:
  explicit Worker(WorkerSetup setup);
  virtual ~Worker() = default;

  // Everything that can be checked locally, before meeting the other ranks,
  // so bad input fails fast instead of after a rendezvous.
  Status prepare();
  void connect();
  void train();

 protected:
  // This rank's step before the all-reduce.
  struct StepResult {
    RankStepFigures figures;
    double loss_sum = 0.0;
    std::int64_t loss_tokens = 0;
  };

  // What the mode checks locally before the model is built.
  virtual Status prepare_mode() { return Status::ok(); }
  // The group whose ranks share a row, for the per-row consensus check.
  virtual ConsensusGroup row_group() const = 0;
  // "DP 2 x CP 2" or the like, for the summary's header.
  virtual std::string layout() const = 0;
  // This rank's forward and backward of the step's batch (the gradients
  // left in the parameters), its summed token loss, checked finite.
  virtual StepResult run_step(std::int64_t step, const data::StepBatch& batch) = 0;
  // Every rank, after the step: every rank's figures, in rank order (the
  // same on every rank).
  virtual void after_step(std::int64_t /*step*/, const std::vector<RankStepFigures>& /*ranks*/) {}
  // What the mode adds to the step's report on rank 0.
  virtual void add_to_report(StepReport& /*report*/) const {}
  // The mode's own state in checkpoints (checkpoint.h), or null.
  virtual ModeCheckpoint* mode_checkpoint() { return nullptr; }
  // Every rank, once connected, when the job resumed after `step` (> 0).
  virtual void after_resume(std::int64_t /*step*/) {}
  // The step's summed float64 token loss into `result`, checked finite.
  void set_loss(StepResult& result, const at::Tensor& loss, std::int64_t step) const;

  TrainOptions options_;
  launch::WorkerIdentity id_;
  ReliabilityHooks reliability_;  // plan consensus and test-only faults (consensus.h)
  int dp_rank_ = 0;
  int cp_rank_ = 0;
  BalancerChoice balancer_;
  std::unique_ptr<data::TokenDataset> dataset_;
  std::unique_ptr<host::CpSelector> selector_;
  std::unique_ptr<GptModel> model_;
  comm::ProcessGroups groups_;

 private:
  // The global batch's summed token loss and loss-token count, and the
  // signal that interrupts the job after this step (0: none).
  struct GlobalLoss {
    double sum = 0.0;
    std::int64_t tokens = 0;
    int interrupted_by = 0;
  };

  void build_model();
  GlobalLoss reduce_and_step(double loss_sum, std::int64_t loss_tokens);
  void report_step(std::int64_t step, const data::StepBatch& batch, const GlobalLoss& loss,
                   double step_ms, const std::vector<RankStepFigures>& ranks);
  void finish(double wall_s);
  [[noreturn]] void stop_interrupted(std::int64_t step, int sig, const std::string& checkpoint);
  void check_same_checkpoint();
  void check_replicas();
  std::string header() const;

  CheckpointOptions checkpoints_;
  WorkerArgs args_;
  std::optional<data::DataLoader> loader_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<MetricsFile> metrics_;
  TrainingState state_;  // what a checkpoint holds and the settings it must match
  ResumedAt resumed_;    // the step training resumes after, and the file's CRC
  RunSummary summary_;
  std::optional<Progress> progress_;
  Clock::time_point start_;
};

// The worker of each mode (fixed_worker.cpp, hybrid_worker.cpp).
std::unique_ptr<Worker> make_fixed_worker(WorkerSetup setup);
std::unique_ptr<Worker> make_hybrid_worker(WorkerSetup setup);

}  // namespace fulcrum::train
