// Fixed mode's step: every row of this rank's micro-batches planned by the
// CP selector, sharded over the fixed CP group and run through the model
// with CpAttention (all-gathered K/V); backward once per micro-batch.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attention/cp_attention.h"
#include "attention/sharding.h"
#include "fulcrum/host/selection.h"
#include "train/job_inputs.h"
#include "train/worker_base.h"

namespace fulcrum::train {
namespace {

class FixedWorker final : public Worker {
 public:
  using Worker::Worker;

 private:
  // One micro-batch of this rank: its figures, the summed token loss of its
  // rows (undefined when it ran none) and their loss-token count.
  struct MicroBatchResult {
    MicroBatchFigures figures;
    at::Tensor loss;
    std::int64_t loss_tokens = 0;
  };

  ConsensusGroup row_group() const override {
    return consensus_group(groups_.cp, groups_.layout.cp);
  }
  std::string layout() const override {
    return "DP " + std::to_string(options_.dp_size) + " x CP " + std::to_string(options_.cp_size);
  }
  StepResult run_step(std::int64_t step, const data::StepBatch& batch) override;
  MicroBatchResult run_micro_batch(const data::MicroBatch& mb, std::int64_t index,
                                   RankStepFigures& step);
  void record_row(const data::PackedRow& row, const CpWorkload& w, const ShardPlan& plan,
                  MicroBatchFigures& f);
};

// The row's work against what contiguous sharding would have cost (the
// summary's baseline, from the work model: no extra attention is run), its
// strategy, and with train.log_samples its pieces.
void FixedWorker::record_row(const data::PackedRow& row, const CpWorkload& w, const ShardPlan& plan,
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
  for (const auto& piece : row_pieces(row)) f.pieces.push_back(piece);
}

FixedWorker::MicroBatchResult FixedWorker::run_micro_batch(const data::MicroBatch& mb,
                                                           std::int64_t index,
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

Worker::StepResult FixedWorker::run_step(std::int64_t step, const data::StepBatch& batch) {
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
  set_loss(result, loss, step);
  return result;
}

}  // namespace

std::unique_ptr<Worker> make_fixed_worker(WorkerSetup setup) {
  return std::make_unique<FixedWorker>(std::move(setup));
}

}  // namespace fulcrum::train
