// balancer.schedule.profile: auto — the job's cost profile kept fitted to
// the job. The trainer starts from balancer.schedule.profile_start and,
// every refit_every steps, refits the profile's terms from the slot times
// its ranks measured (calibration_fit.h's fit_slots: a member's time =
// a tiles + b tokens + c + d K/V bytes + e peers, non-negative least
// squares). No LibTorch.
//
// Every rank must plan with the same profile, bit for bit, or their
// schedules differ: each rank receives every rank's samples in the per-step
// all-gather of figures, in rank order, fits the same window of steps with
// the same code, and then compares the result's fingerprint over WORLD
// (check_same_profile); a rank that fitted another profile is a
// ConsensusError naming it, never a silent divergence. The profile changes
// where documents run, not what is computed: the losses equal a run with a
// fixed profile (integration_tests, Hybrid.ProfileAuto*).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "calibrate/calibration_fit.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/schedule_types.h"
#include "train/consensus.h"

namespace fulcrum::train {

// The slot one sample's member stands for, as price_slot_counts counts it:
// member 0 is the sample's (its tokens and tiles); each of its peers is one
// more member holding an equal share of the rest of the row (row_tokens -
// tokens, at least one token each), and the member's K/V tokens (its bytes
// over `kv_bytes_per_token`, the model's; in and out together, at least one
// per peer) come from the peers in equal shares.
SlotCounts sample_slot(const calibrate::SlotSample& sample, double kv_bytes_per_token);

// The cost model's time for one sample's member under `profile`: its
// sample_slot priced by core/schedule.cpp's price_slot_counts, the one
// function that turns counts into seconds for the planners too (every term,
// the row term and exchange_overlap included), every member on one node.
double predicted_seconds(const CostProfile& profile, const calibrate::SlotSample& sample,
                         double kv_bytes_per_token);

// Median and largest |predicted - measured| / measured over `samples`.
struct ErrorSummary {
  std::int64_t samples = 0;
  double median = 0;
  double max = 0;
};
ErrorSummary prediction_errors(const CostProfile& profile,
                               const std::vector<calibrate::SlotSample>& samples,
                               double kv_bytes_per_token);

// Bit-exact: every double by its bits, the name by its bytes.
std::uint64_t profile_fingerprint(const CostProfile& profile);

// All-gathers `profile`'s fingerprint over `world`; throws ConsensusError
// naming the ranks whose profile differs from rank 0's.
void check_same_profile(const ConsensusGroup& world, const CostProfile& profile, std::int64_t step);

// What one step's refit did, for the metrics and the summary.
struct RefitOutcome {
  ErrorSummary predicted;         // the step's samples by the profile it planned with
  bool due = false;               // a refit step
  bool refitted = false;          // the profile changed (a due refit can keep it: see note)
  ErrorSummary fitted;            // the window's samples by the new profile
  std::string note;               // why a due refit kept the profile
  std::int64_t window_steps = 0;  // steps whose samples the fit used
};

class ProfileRefit {
 public:
  // `every` >= 1; the window is the samples of the last 2 x every steps.
  ProfileRefit(CostProfile start, std::int64_t every, double kv_bytes_per_token);

  // Step `step`'s samples of every rank, in rank order (identical on every
  // rank). Refits when step is a multiple of `every`.
  RefitOutcome add_step(std::int64_t step, std::vector<calibrate::SlotSample> samples);

  const CostProfile& profile() const { return profile_; }
  std::int64_t refits() const { return refits_; }

  // What a checkpoint keeps so that a resumed job refits as the
  // uninterrupted one would (checkpoint_profile.h): the profile, the refits
  // so far and the window's samples, oldest step first.
  struct State {
    CostProfile profile;
    std::int64_t refits = 0;
    std::vector<std::vector<calibrate::SlotSample>> window;
  };
  State state() const { return {profile_, refits_, {window_.begin(), window_.end()}}; }
  // Puts `state` in place; a window longer than 2 x every keeps its newest
  // steps.
  void restore(State state);

 private:
  CostProfile profile_;
  std::int64_t every_;
  double kv_bytes_per_token_;
  std::deque<std::vector<calibrate::SlotSample>> window_;
  std::int64_t refits_ = 0;
};

}  // namespace fulcrum::train
