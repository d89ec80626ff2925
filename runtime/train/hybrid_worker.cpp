// Hybrid mode's step: every rank schedules the whole global batch with the
// balancer's scheduler, checks that the others made the same schedule, and
// runs its own slots in wave order, each with SlotAttention (point-to-point
// K/V within the slot) over the world group, backward at once.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attention/sharding.h"
#include "attention/slot_attention.h"
#include "fulcrum/core/compact_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/text.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/cost_profile_file.h"
#include "fulcrum/host/log.h"
#include "fulcrum/host/plugin_loader.h"
#include "train/checkpoint_profile.h"
#include "train/hybrid_slots.h"
#include "train/profile_refit.h"
#include "train/test_faults.h"
#include "train/worker_base.h"
#include "train/worker_errors.h"

namespace fulcrum::train {
namespace {

class HybridWorker final : public Worker {
 public:
  using Worker::Worker;

 private:
  // A slot's summed token loss on this member and its loss-token count.
  struct SlotResult {
    at::Tensor loss;
    std::int64_t loss_tokens = 0;
  };

  Status prepare_mode() override;
  // The schedule, not a CP group, says who shares a row: the per-row check
  // becomes the schedule check over WORLD, and the DP check sees one DP
  // rank (every rank holds the whole global batch).
  ConsensusGroup row_group() const override {
    return consensus_group(groups_.world, groups_.layout.world);
  }
  std::string layout() const override {
    return "hybrid over " + std::to_string(options_.dp_size) +
           " ranks (T = " + std::to_string(options_.max_tokens_per_rank) + ", scheduler " +
           options_.schedule_strategy + ", profile " + options_.profile.name + ")";
  }
  StepResult run_step(std::int64_t step, const data::StepBatch& batch) override;
  void after_step(std::int64_t step, const std::vector<RankStepFigures>& ranks) override;
  void add_to_report(StepReport& report) const override;
  ModeCheckpoint* mode_checkpoint() override {
    return refit_checkpoint_ ? &*refit_checkpoint_ : nullptr;
  }
  void after_resume(std::int64_t step) override;

  // One schedule's slots of this rank, in wave order: the summed loss, its
  // loss tokens and every slot's figures (the gradients accumulate in the
  // parameters).
  struct Run {
    at::Tensor loss;
    std::int64_t loss_tokens = 0;
    std::vector<SlotFigures> slots;
    std::vector<calibrate::SlotSample> samples;  // one per slot, as the cost model counts it
  };
  Schedule make_schedule(const std::string& name, const ScheduleRequest& request,
                         std::int64_t step) const;
  std::string expand_schedule(Schedule& schedule, const ScheduleRequest& request,
                              std::int64_t step) const;
  std::uint64_t check_schedule(Schedule& schedule, const ScheduleRequest& request,
                               std::int64_t step);
  // claim_step > 0: free single slots are claimed (free_slots below) under
  // that step's counter; 0: every slot runs on its planned rank.
  Run run_schedule(const Schedule& schedule, const ScheduleRequest& request,
                   const std::vector<const data::PackedRow*>& rows, std::int64_t claim_step = 0);
  void run_free_slots(const Schedule& schedule, const std::vector<std::size_t>& free,
                      const ScheduleCost& cost, const ScheduleCost& bytes,
                      const ScheduleRequest& request,
                      const std::vector<const data::PackedRow*>& rows, std::int64_t step, Run& run);
  void wait_for_claims(const std::string& key, std::int64_t target) const;
  bool claiming() const { return options_.free_single_slots && groups_.shared_add != nullptr; }
  void release_claims(std::int64_t step);
  std::vector<Schedule> compare(std::int64_t step, const ScheduleRequest& request,
                                const std::vector<const data::PackedRow*>& rows,
                                StepResult& result);

  double fixed_prediction_ms(const ScheduleRequest& request) const;
  double model_kv_bytes_per_token() const;
  calibrate::SlotSample sample_of(const SlotCost& cost, const SlotCost& bytes,
                                  const SlotFigures& f) const;
  ScheduleRequest exact_kv_request(const ScheduleRequest& request) const;
  void predict(const SlotCost& cost, const SlotCost& bytes, SlotFigures& f) const;
  SlotResult run_slot(std::int64_t index, const ScheduleSlot& slot, const ScheduleRequest& request,
                      const std::vector<const data::PackedRow*>& rows, SlotFigures& figures);
  std::shared_ptr<attention::SlotAttention> slot_attention(const CpWorkload& w,
                                                           const ScheduleSlot& slot,
                                                           std::int64_t index) const;

  // The balancer that schedules, and the step's schedule for its report.
  std::shared_ptr<LoadBalancer> scheduler_;
  std::optional<StepReport::Hybrid> hybrid_report_;
  std::vector<StepReport::Compared> compared_;  // rank 0, with train.compare_schedulers
  // The compared schedules' fingerprints as answered (before expansion).
  std::vector<std::uint64_t> compared_fingerprints_;
  double compare_ms_ = 0.0;  // this step's comparison runs, wall time
  // balancer.schedule.profile: auto: the refit, and what the last step's did.
  std::optional<ProfileRefit> refit_;
  std::optional<RefitCheckpoint> refit_checkpoint_;  // refit_'s state in checkpoints
  std::optional<SlotClock> slot_clock_;              // test-only FULCRUM_TEST_SLOT_SECONDS
  std::optional<StepReport::ProfileFit> profile_fit_;
  ErrorSummary last_fit_;         // the last refit's error on its rows
  bool warmed_up_ = false;        // this process has run a step: its first one's times are left out
  std::int64_t store_keys_ = -1;  // rank 0, free single slots: the store's keys after a step
};

// The store counter that step `step`'s claims of free single slots share.
std::string claim_key(std::int64_t step) { return "free_slots/step" + std::to_string(step); }

// Hybrid mode: the balancer that schedules (the plugin, else the built-in
// one, whose fixed schedule the host serves) and that it offers the
// scheduler asked for; options.cpp has read the cost profile.
Status HybridWorker::prepare_mode() {
  scheduler_ = balancer_.plugin ? balancer_.plugin : host::builtin_balancer();
  const std::vector<std::string> offered = scheduler_->schedule_strategies();
  if (std::find(offered.begin(), offered.end(), options_.schedule_strategy) == offered.end()) {
    return invalid_argument("balancer.schedule.strategy " + quote_text(options_.schedule_strategy) +
                            " is not offered by balancer " + quote_text(balancer_.description) +
                            " (it offers: " + join(offered, ", ") + ")");
  }
  for (const std::string& name : options_.compare_schedulers) {
    if (std::find(offered.begin(), offered.end(), name) != offered.end()) continue;
    return invalid_argument(
        "train.compare_schedulers (" + options_.compare_source + ") names " + quote_text(name) +
        ", which balancer " + quote_text(balancer_.description) +
        " does not offer (it offers: " + join(offered, ", ") + "); list only those");
  }
  if (options_.profile_auto) {
    refit_.emplace(options_.profile, options_.refit_every, model_kv_bytes_per_token());
    refit_checkpoint_.emplace(*refit_, model_kv_bytes_per_token(), options_.schedule_profile);
  }
  Result<std::optional<SlotClock>> clock = slot_clock_from_environment(process_environment);
  if (!clock) return clock.status();
  slot_clock_ = *clock;
  if (slot_clock_ && id_.rank == 0) {
    host::log_to_stderr(host::LogLevel::kWarning,
                        "test-only FULCRUM_TEST_SLOT_SECONDS is set: the profile's fit samples "
                        "carry made-up times, not measured ones");
  }
  return Status::ok();
}

// A resumed balancer.schedule.profile: auto job plans with the profile its
// checkpoint held, checked to be the same on every rank like a refit's. Its
// first step's samples count: the uninterrupted job's would (its warm-up
// was the job's first step), and leaving them out would make the next
// refit, and so the schedules, differ from that job's.
void HybridWorker::after_resume(std::int64_t step) {
  if (!refit_) return;
  if (refit_checkpoint_->restored()) {
    warmed_up_ = true;
    options_.profile = refit_->profile();
  }
  check_same_profile(row_group(), refit_->profile(), step);
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
  f.exchange_ms = fwd.exchange_ms + bwd.exchange_ms;
  f.exchange_wait_ms = fwd.wait_ms + bwd.wait_ms;
}

// This member's SlotAttention for `slot`, over the world; every layer uses
// it (its exchanges pair up in layer order on every member).
std::shared_ptr<attention::SlotAttention> HybridWorker::slot_attention(const CpWorkload& w,
                                                                       const ScheduleSlot& slot,
                                                                       std::int64_t index) const {
  attention::SlotAttentionOptions slot_options;
  slot_options.label =
      "slot " + std::to_string(index) + " (wave " + std::to_string(slot.wave) + ")";
  slot_options.overlap = options_.overlap;
  slot_options.overlap_calls = options_.overlap_two_calls ? attention::OverlapCalls::kOwnThenRemote
                                                          : attention::OverlapCalls::kPerPeer;
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
HybridWorker::SlotResult HybridWorker::run_slot(std::int64_t index, const ScheduleSlot& slot,
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
  if (options_.log_samples && member == 0) f.pieces = row_pieces(row);
  f.busy_ms = ms_since(start);
  f.cpu_ms = thread_cpu_ms() - cpu_start;
  return {loss.detach(), mask.sum().item<std::int64_t>()};
}

// The request with kv_bytes_per_token set to what this model's K and V of
// one token are over all layers, so that the cost model's bytes are the
// bytes the exchanges move.
double HybridWorker::model_kv_bytes_per_token() const {
  const double dtype_bytes = options_.dtype == Dtype::kFloat64 ? 8.0 : 4.0;
  return 2.0 * static_cast<double>(options_.model.hidden_size) *
         static_cast<double>(options_.model.num_layers) * dtype_bytes;
}

ScheduleRequest HybridWorker::exact_kv_request(const ScheduleRequest& request) const {
  ScheduleRequest exact = request;
  exact.profile.kv_bytes_per_token = model_kv_bytes_per_token();
  return exact;
}

// This rank's member of a slot that ran as a fit sample: the cost model's
// tokens, tiles and peers, its K/V bytes at the model's bytes per token, and
// the time measured (thread CPU time on CPU, wall time on CUDA, as the
// comparison measures).
calibrate::SlotSample HybridWorker::sample_of(const SlotCost& cost, const SlotCost& bytes,
                                              const SlotFigures& f) const {
  calibrate::SlotSample s;
  s.group = f.group;
  const auto m = static_cast<std::size_t>(f.member);
  s.tokens = cost.members[m].tokens;
  s.tiles = cost.members[m].tiles;
  s.partial_tiles = cost.members[m].partial_tiles;
  s.peers = cost.members[m].peers;
  s.kv_bytes = bytes.members[m].bytes_sent + bytes.members[m].bytes_received;
  s.seconds = (options_.device == Device::kCpu ? f.cpu_ms : f.busy_ms) / 1e3;
  for (const SlotMemberCost& mc : cost.members) s.row_tokens += mc.tokens;
  if (slot_clock_) s.seconds = slot_clock_->seconds(s.tiles, s.tokens, s.kv_bytes, s.peers);
  return s;
}

// This rank's member of a slot as the cost model sees it.
void HybridWorker::predict(const SlotCost& cost, const SlotCost& bytes, SlotFigures& f) const {
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
double HybridWorker::fixed_prediction_ms(const ScheduleRequest& request) const {
  Result<Schedule> fixed = scheduler_->schedule("fixed", request);
  return fixed ? evaluate_schedule(request, *fixed).step_seconds * 1e3 : 0.0;
}

// `name`'s schedule of the batch (the caller checks it against every
// rank's); a refusal is a bad setting or a failed run (below).
Schedule HybridWorker::make_schedule(const std::string& name, const ScheduleRequest& request,
                                     std::int64_t step) const {
  // The compact answer (ABI 1.4) where the scheduler gives one: slot plans
  // by rule, positions written by the ranks that need them
  // (expand_schedule) before the schedule check compares the answer.
  ScheduleRequest compact = request;
  compact.compact = true;
  Result<Schedule> schedule = scheduler_->schedule(name, compact);
  if (!schedule) {
    const std::string why = "scheduling step " + std::to_string(step) + " with " +
                            quote_text(name) + " failed: " + schedule.status().message();
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
  return std::move(schedule).value();
}

// Writes the positions of a compact answer's plans: this rank's slots
// first, so that a plan by rule that does not expand to a valid plan of
// the shape the schedule stated is refused on a rank that would run it,
// before any of its exchanges, as a plugin fault. Then what the cost model
// prices here: on rank 0, which reports the predicted step, every slot; on
// the others, the free
// single slots when they are claimed (any rank may run one, and every rank
// orders them by their price). The other slots stay by rule. Returns the
// refusal ("" = none), which check_schedule shares.
std::string HybridWorker::expand_schedule(Schedule& schedule, const ScheduleRequest& request,
                                          std::int64_t step) const {
  const auto refusal = [&](const Status& s) {
    return "scheduling step " + std::to_string(step) + " with " +
           quote_text(schedule.strategy_used) + " failed on rank " + std::to_string(id_.rank) +
           ": " + s.message();
  };
  if (Status s = expand_slots_of_rank(request, schedule, id_.rank, *scheduler_); !s) {
    return refusal(s);
  }
  if (id_.rank == 0) {
    Status s = expand_slots_of_rank(request, schedule, -1, *scheduler_);
    return s ? "" : refusal(s);
  }
  if (!options_.free_single_slots) return "";
  const RulePlanFn plan = [this](std::string_view rule, const CpWorkload& w) {
    return scheduler_->plan_cp(rule, w);
  };
  for (const std::size_t i : free_single_slots(schedule)) {
    if (Status s = expand_slot(request, schedule.slots[i], i, plan); !s) {
      return refusal({s.code(), "balancer '" + scheduler_->name() + "': " + s.message()});
    }
  }
  return "";
}

// The step's schedule expanded where this rank needs it, then checked over
// WORLD: the same schedule on every rank, and no rank refusing it. A
// refusal (a plugin fault) stops every rank with the refusing rank's line,
// exit 2, before any slot's exchange.
std::uint64_t HybridWorker::check_schedule(Schedule& schedule, const ScheduleRequest& request,
                                           std::int64_t step) {
  // The answer's fingerprint, before this rank writes its own slots.
  const std::uint64_t fingerprint = schedule_fingerprint(schedule);
  const std::string refused = expand_schedule(schedule, request, step);
  if (const std::string why = reliability_.check_schedule(schedule, fingerprint, refused);
      !why.empty()) {
    throw InputError(why);
  }
  return fingerprint;
}

// The test-only `late` fault: wait until the counter shows every other rank's
// last, failed claim, so that they have run every free slot.
void HybridWorker::wait_for_claims(const std::string& key, std::int64_t target) const {
  const auto deadline = Clock::now() + groups_.world->default_timeout();
  while (groups_.shared_add(key, 0) < target) {
    if (Clock::now() > deadline) {
      throw std::runtime_error(
          "test-only FULCRUM_TEST_FAULT=late: the other ranks did not "
          "finish claiming free slots (" +
          key + ") in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Claims free slots one at a time from the step's shared counter until none
// is left: the n-th claim of the job (over every rank) takes free[n], so each
// runs exactly once, on whichever rank asked first. A rank that dies after a
// claim leaves its slot unrun, but it also never enters the gradient
// all-reduce, which then fails on every rank as any lost rank does.
void HybridWorker::run_free_slots(const Schedule& schedule, const std::vector<std::size_t>& free,
                                  const ScheduleCost& cost, const ScheduleCost& bytes,
                                  const ScheduleRequest& request,
                                  const std::vector<const data::PackedRow*>& rows,
                                  std::int64_t step, Run& run) {
  const std::string key = claim_key(step);
  const auto count = static_cast<std::int64_t>(free.size());
  if (reliability_.late_claims()) wait_for_claims(key, count + groups_.world->size() - 1);
  for (;;) {
    const std::int64_t n = groups_.shared_add(key, 1) - 1;
    reliability_.after_claim();
    if (n >= count) break;
    const std::size_t i = free[static_cast<std::size_t>(n)];
    ScheduleSlot slot = schedule.slots[i];  // run here, as its only member
    SlotFigures f;
    f.planned_rank = slot.ranks[0];
    slot.ranks = {id_.rank};
    f.predicted_compute_ms = cost.slots[i].members[0].compute_seconds * 1e3;
    f.predicted_kv_sent = bytes.slots[i].members[0].bytes_sent;
    f.predicted_kv_received = bytes.slots[i].members[0].bytes_received;
    const SlotResult result = run_slot(static_cast<std::int64_t>(i), slot, request, rows, f);
    run.loss = run.loss + result.loss.to(at::kDouble);
    run.loss_tokens += result.loss_tokens;
    run.samples.push_back(sample_of(cost.slots[i], bytes.slots[i], f));
    run.slots.push_back(std::move(f));
  }
}

HybridWorker::Run HybridWorker::run_schedule(const Schedule& schedule,
                                             const ScheduleRequest& request,
                                             const std::vector<const data::PackedRow*>& rows,
                                             std::int64_t claim_step) {
  const ScheduleCost cost = price_expanded(request, schedule);
  const ScheduleCost bytes = price_expanded(exact_kv_request(request), schedule);
  const std::vector<std::size_t> free =
      claim_step > 0 ? free_slots(schedule, cost) : std::vector<std::size_t>();
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < schedule.slots.size(); ++i) {
    const ScheduleSlot& slot = schedule.slots[i];
    if (std::find(free.begin(), free.end(), i) != free.end()) continue;
    if (std::find(slot.ranks.begin(), slot.ranks.end(), id_.rank) != slot.ranks.end()) {
      mine.push_back(i);
    }
  }
  std::stable_sort(mine.begin(), mine.end(), [&](std::size_t a, std::size_t b) {
    return schedule.slots[a].wave < schedule.slots[b].wave;
  });
  Run run;
  run.loss = at::zeros({}, at::kDouble);
  for (std::size_t i : mine) {
    SlotFigures f;
    predict(cost.slots[i], bytes.slots[i], f);
    const SlotResult slot =
        run_slot(static_cast<std::int64_t>(i), schedule.slots[i], request, rows, f);
    run.loss = run.loss + slot.loss.to(at::kDouble);
    run.loss_tokens += slot.loss_tokens;
    run.samples.push_back(sample_of(cost.slots[i], bytes.slots[i], f));
    run.slots.push_back(std::move(f));
  }
  if (claim_step > 0) {
    run_free_slots(schedule, free, cost, bytes, request, rows, claim_step, run);
  }
  return run;
}

// With train.compare_schedulers: every listed scheduler's schedule of the
// batch, run compare_repetitions times in rotating order (repetition r
// starts with the r-th name), forward and backward from the step's
// parameters; after each run the gradients are dropped, so the parameters
// and the step that follows are exactly those of a run without comparison.
// Returns the schedules, in the list's order.
std::vector<Schedule> HybridWorker::compare(std::int64_t step, const ScheduleRequest& request,
                                            const std::vector<const data::PackedRow*>& rows,
                                            StepResult& result) {
  const auto start = Clock::now();
  const std::vector<std::string>& names = options_.compare_schedulers;
  std::vector<Schedule> schedules;
  compared_.clear();
  compared_fingerprints_.clear();
  for (const std::string& name : names) {
    schedules.push_back(make_schedule(name, request, step));
    compared_fingerprints_.push_back(check_schedule(schedules.back(), request, step));
    if (id_.rank != 0) continue;
    const Schedule& s = schedules.back();
    const ScheduleCost cost = evaluate_schedule(request, s);
    StepReport::Compared c;
    c.scheduler = name;
    c.used = s.strategy_used;
    for (const ScheduleSlot& slot : s.slots) {
      c.slot_ranks.push_back(slot.ranks);
      c.waves.push_back(slot.wave);
    }
    c.predicted_ms = cost.step_seconds * 1e3;
    for (double busy : cost.busy_seconds) c.predicted_rank_ms.push_back(busy * 1e3);
    compared_.push_back(std::move(c));
  }
  // Thread CPU time on CPU (free of the shared machine's other load; with
  // train.threads: 1 it is all of the rank's compute), wall time on CUDA,
  // whose kernels run off this thread.
  const bool cpu = options_.device == Device::kCpu;
  const auto n = static_cast<std::int64_t>(names.size());
  // Per scheduler, this rank's slots' samples, their times over the runs.
  std::vector<std::vector<calibrate::SlotSample>> samples(names.size());
  std::vector<std::vector<std::vector<double>>> seconds(names.size());
  for (std::int64_t rep = 0; rep < options_.compare_repetitions; ++rep) {
    for (std::int64_t j = 0; j < n; ++j) {
      const auto k = static_cast<std::size_t>((j + rep) % n);
      const Run run = run_schedule(schedules[k], request, rows);
      if (samples[k].empty()) {
        samples[k] = run.samples;
        seconds[k].resize(run.samples.size());
      }
      for (std::size_t i = 0; i < run.samples.size(); ++i) {
        seconds[k][i].push_back(run.samples[i].seconds);
      }
      for (const at::Tensor& p : model_->parameters()) p.mutable_grad() = at::Tensor();
      CompareRunFigures figures;
      figures.scheduler = static_cast<std::int32_t>(k);
      figures.repetition = static_cast<std::int32_t>(rep);
      for (const SlotFigures& f : run.slots) {
        figures.slots.push_back(f.slot);
        figures.slot_ms.push_back(cpu ? f.cpu_ms : f.busy_ms);
        figures.slot_wall_ms.push_back(f.busy_ms);
      }
      result.figures.compare.push_back(std::move(figures));
    }
  }
  // The fit's samples: each slot member's median over the repetitions.
  for (std::size_t k = 0; k < samples.size(); ++k) {
    for (std::size_t i = 0; i < samples[k].size(); ++i) {
      std::vector<double>& t = seconds[k][i];
      std::sort(t.begin(), t.end());
      const std::size_t r = t.size();
      samples[k][i].seconds = r % 2 ? t[r / 2] : 0.5 * (t[r / 2 - 1] + t[r / 2]);
      result.figures.fit_samples.push_back(samples[k][i]);
    }
  }
  compare_ms_ = ms_since(start);
  result.figures.compare_ms = compare_ms_;
  return schedules;
}

void HybridWorker::add_to_report(StepReport& report) const {
  report.hybrid = hybrid_report_;
  if (report.hybrid) {
    report.hybrid->measured_ms = std::max(0.0, report.wall_ms - compare_ms_);
    report.hybrid->store_keys = store_keys_;
  }
  report.compared = compared_;
  report.repetitions = compared_.empty() ? 0 : options_.compare_repetitions;
  report.clock = options_.device == Device::kCpu ? "thread CPU" : "wall";
  report.profile = options_.schedule_profile;
  if (refit_) {
    report.profile = "auto (start " + options_.schedule_profile + ", refit every " +
                     std::to_string(options_.refit_every) + " steps, " +
                     std::to_string(refit_->refits()) + " refits so far" +
                     (refit_->refits() == 0
                          ? std::string(")")
                          : ", the last on " + std::to_string(last_fit_.samples) +
                                " slot members: median |error| " +
                                std::to_string(std::lround(100 * last_fit_.median)) + "%, max " +
                                std::to_string(std::lround(100 * last_fit_.max)) + "%)");
    report.profile_fit = profile_fit_;
  }
}

// Free single slots: a rank enters the step's gradient all-reduce only
// after its last claim, so once the all-reduce has returned no rank will
// touch the step's counter again, and rank 0 deletes it: the store holds
// one such key at a time, not one per step the job has run.
void HybridWorker::release_claims(std::int64_t step) {
  if (!claiming() || id_.rank != 0) return;
  groups_.shared_delete(claim_key(step));
  store_keys_ = groups_.store_keys();
}

// After the step's all-reduce and all-gather, on every rank: the claims'
// counter released, then with balancer.schedule.profile: auto the step's
// samples of every rank, in rank order, into the refit; on a refit step the
// new profile, checked to be the same on every rank, is the next step's.
void HybridWorker::after_step(std::int64_t step, const std::vector<RankStepFigures>& ranks) {
  release_claims(step);
  if (!refit_) return;
  // The first step this process runs warms its allocator and caches up:
  // its times are no sample of the job's (fulcrum calibrate leaves it out
  // too).
  std::vector<calibrate::SlotSample> samples;
  for (const RankStepFigures& r : ranks) {
    if (warmed_up_) samples.insert(samples.end(), r.fit_samples.begin(), r.fit_samples.end());
  }
  warmed_up_ = true;
  const RefitOutcome out = refit_->add_step(step, std::move(samples));
  if (out.due) check_same_profile(row_group(), refit_->profile(), step);
  options_.profile = refit_->profile();
  StepReport::ProfileFit f;
  f.samples = out.predicted.samples;
  f.median_error = out.predicted.median;
  f.max_error = out.predicted.max;
  f.due = out.due;
  f.refitted = out.refitted;
  f.fit_samples = out.fitted.samples;
  f.window_steps = out.window_steps;
  f.fit_median_error = out.fitted.median;
  f.fit_max_error = out.fitted.max;
  f.note = out.note;
  f.profile = refit_->profile();
  profile_fit_ = f;
  if (out.refitted) last_fit_ = out.fitted;
}

// Hybrid mode: every rank schedules the whole global batch itself (the
// pieces the loader cut), checks that the others made the same schedule,
// then runs its own slots in wave order. With train.compare_schedulers the
// comparison runs come first, from the same parameters.
Worker::StepResult HybridWorker::run_step(std::int64_t step, const data::StepBatch& batch) {
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
  compare_ms_ = 0.0;
  std::vector<Schedule> compared;
  if (!options_.compare_schedulers.empty()) compared = compare(step, request, rows, result);
  const auto plan_start = Clock::now();
  // The configured scheduler's schedule, made once: a compared one is
  // reused, already checked over WORLD and expanded where this rank needs
  // it (its fingerprint is the one taken before that expansion).
  const std::vector<std::string>& names = options_.compare_schedulers;
  const auto listed = std::find(names.begin(), names.end(), options_.schedule_strategy);
  const bool reused = listed != names.end();
  const auto k = static_cast<std::size_t>(listed - names.begin());
  Schedule schedule =
      reused ? compared[k] : make_schedule(options_.schedule_strategy, request, step);
  result.figures.plan_ms = ms_since(plan_start);
  const std::uint64_t fingerprint =
      reused ? compared_fingerprints_[k] : check_schedule(schedule, request, step);
  const ScheduleCost cost = price_expanded(request, schedule);
  hybrid_report_ = StepReport::Hybrid{
      schedule.strategy_used, schedule.fallback_reason, {}, cost.step_seconds * 1e3};
  hybrid_report_->schedule_fingerprint = hex_fingerprint(fingerprint);
  if (id_.rank == 0) hybrid_report_->fixed_predicted_ms = fixed_prediction_ms(request);
  for (const ScheduleSlot& slot : schedule.slots) {
    hybrid_report_->groups.push_back(static_cast<std::int32_t>(slot.ranks.size()));
  }
  Run run = run_schedule(schedule, request, rows, claiming() ? step : 0);
  if (options_.compare_schedulers.empty()) result.figures.fit_samples = run.samples;
  result.loss_tokens = run.loss_tokens;
  result.figures.slots = std::move(run.slots);
  set_loss(result, run.loss, step);
  return result;
}

}  // namespace

std::unique_ptr<Worker> make_hybrid_worker(WorkerSetup setup) {
  return std::make_unique<HybridWorker>(std::move(setup));
}

}  // namespace fulcrum::train
