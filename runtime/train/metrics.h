// What a training run reports: per-rank figures of every step, gathered to
// rank 0 once per step; the --metrics JSON lines; the progress display; and
// the end-of-run summary. No LibTorch.
//
// Metrics file, one JSON object per line (docs/CONFIGS.md lists every field):
//   per micro-batch  {"step", "dp_rank", "microbatch", "tokens", "cp_strategy",
//                     "cp_fallback_reason", "pairs", "tiles", "attention_ms",
//                     "imbalance": {"pairs", "tiles"}, "contiguous_imbalance": {...}}
//                    with the per-rank arrays over the micro-batch's CP group;
//   per step         {"step", "loss", "tokens", "dp_strategy", "dp_imbalance", ...}
//                    written after the step's micro-batches.
// Steps count from 1, micro-batches from 0 within their DP rank's step.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "calibrate/calibration_fit.h"
#include "fulcrum/status.h"

namespace fulcrum::train {

// One micro-batch as one CP rank saw it. The plan figures (pairs, tiles, the
// contiguous baseline) cover every rank of the CP group: plans are replicated.
struct MicroBatchFigures {
  int dp_rank = 0;
  int cp_rank = 0;
  std::int64_t microbatch = 0;
  std::vector<std::int64_t> row_tokens;        // N of every row
  std::vector<std::string> strategies;         // strategy_used of every row
  std::vector<std::string> fallback_reasons;   // of every row; "" = none
  std::vector<std::int64_t> pairs;             // per CP rank, summed over rows
  std::vector<std::int64_t> tiles;             // per CP rank, summed over rows
  std::vector<std::int64_t> contiguous_pairs;  // the same under contiguous sharding
  std::vector<std::int64_t> contiguous_tiles;
  double attention_ms = 0.0;       // this rank: forward + backward kernels, all layers and rows
  double attention_comm_ms = 0.0;  // this rank: all-gather + reduce-scatter, with reordering
  // With train.log_samples: (sample, begin, end, checksum) of every document
  // piece, checksum = sum over the piece of (offset in sample + 1) * token.
  std::vector<std::array<std::int64_t, 4>> pieces;
};

// One slot of a hybrid step as one of its members ran it.
struct SlotFigures {
  std::int64_t slot = 0;  // index in the schedule
  std::int32_t wave = 0;
  std::int32_t group = 1;   // g, the slot's members
  std::int32_t member = 0;  // this rank's index among them
  // A free single slot this rank claimed: the rank the schedule planned it
  // for (which may be this one); -1 = run where planned.
  std::int32_t planned_rank = -1;
  std::int64_t tokens = 0;      // real tokens this member held
  std::int64_t tiles = 0;       // forward tiles, summed over layers
  std::int64_t bytes_sent = 0;  // K/V forward and dK/dV backward, all layers
  std::int64_t bytes_received = 0;
  std::int64_t kv_sent = 0;      // K/V forward only, all layers: the cost model's bytes_sent
  std::int64_t kv_received = 0;  // and bytes_received
  double busy_ms = 0.0;          // the slot from its row's assembly to its backward's end
  double cpu_ms = 0.0;           // the same span in this thread's CPU time
  double setup_ms = 0.0;         // building its SlotAttentions (tile schedules, exchange plan)
  double compute_ms = 0.0;       // attention kernels, forward + backward, all layers
  double comm_ms = 0.0;          // exchanges not hidden by compute: gathering, placing, waiting
  // Overlapped exchanges (docs/HYBRID_RUNTIME.md, "Overlap"), forward +
  // backward, all layers: their own wall time on the background thread and
  // the part this rank waited for; exchange_ms - exchange_wait_ms was hidden.
  double exchange_ms = 0.0;
  double exchange_wait_ms = 0.0;
  // The cost model's figures for this member (evaluate_schedule): compute
  // and exchange time by the profile, and K/V bytes with the profile's
  // kv_bytes_per_token replaced by this model's (2 x hidden x layers x dtype).
  double predicted_compute_ms = 0.0;
  double predicted_comm_ms = 0.0;
  std::int64_t predicted_kv_sent = 0;
  std::int64_t predicted_kv_received = 0;
  // With train.log_samples, on member 0: as MicroBatchFigures::pieces.
  std::vector<std::array<std::int64_t, 4>> pieces;
};

// With train.compare_schedulers: one comparison run of one scheduler's
// schedule on this rank, its slots' measured times (thread CPU time on CPU,
// wall time on CUDA) in the order it ran them.
struct CompareRunFigures {
  std::int32_t scheduler = 0;  // index in train.compare_schedulers
  std::int32_t repetition = 0;
  std::vector<std::int64_t> slots;   // indices in that scheduler's schedule
  std::vector<double> slot_ms;       // measured, one per entry of `slots`
  std::vector<double> slot_wall_ms;  // the same slots' wall time (waits for peers included)
};

// What one rank sends to rank 0 after a step.
struct RankStepFigures {
  int rank = 0;
  double step_ms = 0.0;
  double plan_ms = 0.0;   // the CP selector, for every row
  double shard_ms = 0.0;  // sharding the row buffers by the plans
  // This thread's CPU time from the step's batch to the gradient all-reduce:
  // planning or scheduling, forward and backward of every row or slot.
  double compute_cpu_ms = 0.0;
  std::vector<MicroBatchFigures> micro_batches;
  std::vector<SlotFigures> slots;  // hybrid mode: this rank's slots, in wave order
  // With train.compare_schedulers: every comparison run of this rank, and
  // their wall time together (not part of the step the optimizer takes).
  std::vector<CompareRunFigures> compare;
  double compare_ms = 0.0;
  // Hybrid mode: this rank's members of slots as the cost model counts them,
  // with their measured time (with a comparison: the median over its
  // repetitions of every compared schedule's slots; else the step's own),
  // what balancer.schedule.profile: auto and fulcrum calibrate fit.
  std::vector<calibrate::SlotSample> fit_samples;
};

std::vector<std::uint8_t> encode_figures(const RankStepFigures& figures);
Result<RankStepFigures> decode_figures(const std::vector<std::uint8_t>& bytes);

// The step as a whole, known on rank 0 after the gradient all-reduce.
struct StepReport {
  std::int64_t step = 0;  // from 1
  double loss = 0.0;      // summed token loss / loss_tokens, over the global batch
  std::int64_t loss_tokens = 0;
  std::int64_t samples = 0;  // in the global batch
  std::string dp_strategy;
  std::string dp_fallback_reason;
  double dp_imbalance = 1.0;
  double dp_round_robin_imbalance = 1.0;  // sample i to rank i % dp_size, same cost model
  double wall_ms = 0.0;                   // rank 0's step time
  // Hybrid mode: the scheduler that served, why another than the one asked
  // for ("" = none), every slot's group size and the cost model's step time.
  struct Hybrid {
    std::string scheduler;
    std::string fallback_reason;
    std::vector<std::int32_t> groups;
    double predicted_ms = 0.0;
    // The cost model's step time for fixed mode's schedule of the same batch
    // (the `fixed` scheduler), for comparison; 0 = not known.
    double fixed_predicted_ms = 0.0;
    // The step's measured time without its comparison runs (rank 0's wall
    // time from the batch to the optimizer step's end).
    double measured_ms = 0.0;
    // consensus.h's schedule_fingerprint of the step's schedule, 16 hex
    // digits: two runs placed a step alike when these agree.
    std::string schedule_fingerprint{};
    // With free single slots: the keys of the job's store after the step
    // (-1: not counted), which must not grow with the steps.
    std::int64_t store_keys = -1;
  };
  std::optional<Hybrid> hybrid;
  // With train.compare_schedulers: each compared scheduler's schedule of the
  // batch (rank 0 made the same ones as every rank) and its prediction.
  struct Compared {
    std::string scheduler;                              // as listed
    std::string used;                                   // strategy_used (a fallback may differ)
    std::vector<std::vector<std::int32_t>> slot_ranks;  // members of every slot
    std::vector<std::int32_t> waves;                    // wave of every slot
    double predicted_ms = 0.0;                          // the cost model's step time
    std::vector<double> predicted_rank_ms;              // its busy time of every rank
  };
  std::vector<Compared> compared;
  std::int64_t repetitions = 0;
  std::string clock;    // what the comparison's slot times are: "thread CPU" or "wall"
  std::string profile;  // hybrid mode: the cost profile's source (bundled name or file)
  // balancer.schedule.profile: auto: the step's samples by the profile it
  // planned with, and the refit when one was due (profile_refit.h).
  struct ProfileFit {
    std::int64_t samples = 0;
    double median_error = 0, max_error = 0;  // |predicted - measured| / measured
    bool due = false, refitted = false;
    std::int64_t fit_samples = 0, window_steps = 0;
    double fit_median_error = 0, fit_max_error = 0;
    std::string note;     // why a due refit kept the profile
    CostProfile profile;  // what the next step plans with
  };
  std::optional<ProfileFit> profile_fit;
};

// One compared scheduler's figures for one step, from every rank's runs
// (docs/HYBRID_RUNTIME.md, "Comparing schedulers"). Rank times are the sums
// of a rank's measured slot times in one run; min and median are over the
// repetitions. The critical path replays the schedule's own timeline: slots
// in (wave, index) order, each starting when all its members are free and
// lasting its slowest member's measured time.
struct CompareResult {
  std::string scheduler;
  std::string used;
  std::vector<std::int32_t> groups;
  // The schedule's slots (members, wave): with the step's fit_samples (each
  // rank's members in wave order, schedulers in the list's order) they place
  // every sample in its slot, so a profile can be re-priced offline.
  std::vector<std::vector<std::int32_t>> slot_ranks;
  std::vector<std::int32_t> waves;
  double predicted_ms = 0.0;
  std::vector<double> rank_min_ms, rank_median_ms, rank_predicted_ms;
  std::vector<double> prediction_error;             // per rank: (median - predicted) / predicted
  double max_rank_ms = 0.0;                         // max over ranks of the median rank time
  double critical_path_ms = 0.0;                    // replayed with each member's median slot time
  std::vector<double> repetition_critical_path_ms;  // replayed with each repetition's times
  // The same replay with median wall times: includes waiting for peers and,
  // on a shared machine, for a CPU.
  double critical_path_wall_ms = 0.0;
  // Against the `fixed` scheduler when it is compared (0 = not known):
  // fixed's critical path / this one's, with the min and max of the same
  // ratio taken repetition by repetition, and the cost model's ratio.
  double measured_speedup_over_fixed = 0.0;
  double speedup_min = 0.0, speedup_max = 0.0;
  double predicted_speedup_over_fixed = 0.0;
};

// The critical path of slots with members `slot_ranks`, run in (wave,
// index) order, slot s lasting the max of `member_ms[s]` over its members.
double replay_critical_path(const std::vector<std::vector<std::int32_t>>& slot_ranks,
                            const std::vector<std::int32_t>& waves,
                            const std::vector<std::vector<double>>& member_ms);

// Every compared scheduler's figures for the step; `ranks` indexed by
// global rank.
std::vector<CompareResult> compare_results(const StepReport& step,
                                           const std::vector<RankStepFigures>& ranks);

// The metrics JSON lines of one step. `ranks` is indexed by global rank.
std::vector<std::string> metrics_lines(const StepReport& step,
                                       const std::vector<RankStepFigures>& ranks, int dp_size,
                                       int cp_size);

class MetricsFile {
 public:
  // Truncates `path`; an error names the path and the system's reason. A
  // symbolic link on the way that another user owns is refused (they would
  // choose the file written), and the last component is opened without
  // following a link unless it was one of root's or this user's. A regular
  // file is locked (flock) while this lives: a file another run holds is
  // refused, and left as it was.
  static Result<std::unique_ptr<MetricsFile>> open(const std::string& path);
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  ~MetricsFile();
  // Appends each line whole (no buffer held back), so a crashed run keeps
  // its complete steps; a failed write (a full disk, an I/O error) is an
  // error naming the file and the cause, never a silently short file.
  Status write(const std::vector<std::string>& lines);

 private:
  MetricsFile() = default;
  int fd_ = -1;
  std::string path_;
};

// Accumulates the run for the closing summary.
class RunSummary {
 public:
  void add(const StepReport& step, const std::vector<RankStepFigures>& ranks, int cp_size);
  // A few lines; `header` says what ran (layout, dtype).
  std::string render(const std::string& header, double wall_s) const;

 private:
  void add_hybrid(const StepReport& step, const std::vector<RankStepFigures>& ranks);
  void add_compare(const std::vector<CompareResult>& results);
  std::string render_hybrid() const;
  std::string render_compare() const;

  std::vector<double> losses_;
  // The steps this run trained (a resumed run starts after its checkpoint's).
  std::int64_t first_step_ = 0, last_step_ = 0;
  std::int64_t tokens_ = 0;
  std::map<std::string, std::int64_t> strategy_rows_;
  std::int64_t fallback_rows_ = 0;
  std::string first_fallback_;
  // Sums over micro-batches of the max and the mean over CP ranks.
  double tiles_max_ = 0, tiles_mean_ = 0, pairs_max_ = 0, pairs_mean_ = 0;
  double ctiles_max_ = 0, ctiles_mean_ = 0, cpairs_max_ = 0, cpairs_mean_ = 0;
  double ms_max_ = 0, ms_mean_ = 0;
  double dp_imbalance_ = 0, dp_round_robin_ = 0;
  std::map<std::string, std::int64_t> dp_strategies_;
  double step_ms_ = 0, overhead_ms_ = 0;
  std::int64_t steps_ = 0;
  // Hybrid mode.
  std::int64_t hybrid_steps_ = 0;
  std::map<std::string, std::int64_t> schedulers_;
  std::map<std::int32_t, std::int64_t> group_slots_;  // group size -> slots
  double predicted_ms_ = 0, fixed_predicted_ms_ = 0, busy_max_ = 0, busy_mean_ = 0;
  double measured_ms_ = 0;  // the configured schedule's step, comparisons left out
  std::int64_t bytes_moved_ = 0;
  std::string profile_;
  // With train.compare_schedulers, per scheduler in the order listed.
  struct CompareTotals {
    std::string scheduler;
    std::int64_t steps = 0;
    double critical_ms = 0, wall_ms = 0, max_rank_ms = 0, predicted_ms = 0, min_rank_sum_ms = 0;
    double abs_error = 0;  // sum over steps and ranks of |prediction_error|
    std::int64_t errors = 0;
    double fixed_critical_ms = 0, fixed_predicted_ms = 0;  // the same steps' fixed figures
    double speedup_min = 0, speedup_max = 0;               // over steps' repetitions
  };
  std::vector<CompareTotals> compare_;
  std::int64_t repetitions_ = 0;
  std::string time_kind_;
};

// Progress of rank 0: a bar redrawn in place when it writes to a terminal;
// "@progress" lines that `fulcrum train` turns into a bar on its own terminal
// (FULCRUM_PROGRESS=protocol, set by it); otherwise one plain line per step.
// `value` with `decimals` digits after the point, as the reports print it.
std::string fixed(double value, int decimals);

class Progress {
 public:
  enum class Mode { kBar, kProtocol, kLines };
  // From the environment and whether stdout is a terminal.
  static Mode detect();

  // `first_step`: the step this run starts after (a resume's), so that the
  // rate and the ETA count this run's steps only.
  Progress(Mode mode, std::int64_t steps, std::int64_t first_step = 0)
      : mode_(mode), steps_(steps), first_step_(first_step) {}
  // `elapsed_s`: since this run's first step began.
  void update(const StepReport& step, double elapsed_s);
  // A line of its own (a checkpoint written), below the bar in bar mode.
  void note(const std::string& line);
  // Ends a bar's line before other output follows.
  void finish();

 private:
  Mode mode_;
  std::int64_t steps_;
  std::int64_t first_step_;
  std::int64_t tokens_ = 0;  // loss tokens of this run's steps so far
  bool drawn_ = false;
};

// What follows a progress line's step and loss: this run's loss tokens per
// second and the time left at this run's mean step time, e.g.
// "  5210 tokens/s  eta 12 s" (eta 3m 05s, 1h 02m). Empty before a step ran.
std::string render_rate_and_eta(std::int64_t tokens, std::int64_t steps_done,
                                std::int64_t steps_left, double elapsed_s);

// What a plain progress line says of the step's balance: fixed mode's DP
// strategy and imbalance ("dp auto 1.012"); hybrid mode's scheduler, its
// slots by group size, measured and predicted step time.
std::string render_balance(const StepReport& step);

// "[#########.........] step 3/10  loss 6.9123  1.2 s". In protocol mode a
// line is kProgressPrefix + this text (and render_rate_and_eta's):
// `fulcrum train` redraws it in place without knowing how it was made;
// kProgressPrefix alone ends the bar.
std::string render_progress_bar(std::int64_t step, std::int64_t steps, double loss,
                                double elapsed_s, int width = 30);
inline constexpr const char* kProgressPrefix = "@progress ";
inline constexpr const char* kProgressEnv = "FULCRUM_PROGRESS";  // "protocol", "bar" or "lines"

}  // namespace fulcrum::train
