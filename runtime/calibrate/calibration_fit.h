// The fits behind `fulcrum calibrate`: from fulcrum-calibrate's measurements
// to the step-time cost model's coefficients (CostProfile), and the profile
// file. LibTorch-free, so the CLI and its unit tests build quickly.
//
// Compute: a member's kernel time = a x tiles + b x tokens + c, forward and
// backward fitted separately by least squares (on relative errors) over the
// measured ranks, every
// coefficient held >= 0 (a negative cost per tile would reward wasted tiles:
// a column whose coefficient comes out negative is dropped and the rest
// refitted). The profile's tile/token/slot seconds are forward + backward.
// Transfer: one-way time = latency + bytes / bandwidth over message sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum::calibrate {

struct ComputeSample {
  std::int64_t tiles = 0;
  std::int64_t tokens = 0;
  double forward_seconds = 0;
  double backward_seconds = 0;
};

struct TransferSample {
  std::int64_t bytes = 0;
  double seconds = 0;
};

struct LinearFit {
  std::vector<double> coefficients;  // one per column, in the columns' order
  double max_relative_error = 0;     // over the samples, |fit - measured| / measured
};

// Least squares of y ~ columns (each as long as y) on relative errors
// (each equation divided by its y), coefficients >= 0. Fails when there are
// fewer samples than columns, a y is not positive, or the columns do not
// separate the coefficients.
// With `relative` false the plain squared errors are minimised instead
// (every y must still be positive).
Result<LinearFit> fit_nonnegative(const std::vector<std::vector<double>>& columns,
                                  const std::vector<double>& y, bool relative = true);

struct ComputeFit {
  LinearFit forward;  // {a, b, c} in seconds per tile, per token, per call
  LinearFit backward;
};
Result<ComputeFit> fit_compute(const std::vector<ComputeSample>& samples);

struct TransferFit {
  double latency_seconds = 0;
  double bytes_per_second = 0;
  double max_relative_error = 0;
};
Result<TransferFit> fit_transfer(const std::vector<TransferSample>& samples);

// Whole slots: one member of one slot as the cost model counts it
// (core/schedule.cpp's cost_slot) and the time it measured. kv_bytes is the
// K/V the member received plus sent in the forward, at the model's own bytes
// per token (the exchange term's bytes).
struct SlotSample {
  std::int32_t group = 1;  // g, the slot's members
  std::int64_t tokens = 0;
  std::int64_t tiles = 0;
  std::int64_t peers = 0;
  std::int64_t kv_bytes = 0;
  double seconds = 0;
  // N, the real tokens of the slot's whole row (every member's together):
  // what the row-length work of each member scales with (docs/HYBRID.md
  // section 2, row_token_seconds). 0: not recorded (an older record).
  std::int64_t row_tokens = 0;
  // Of the member's tiles, the partial ones (core/work_model.h), what
  // partial_tile_seconds scales with. -1: not recorded (an older record),
  // priced as if every tile were partial.
  std::int64_t partial_tiles = -1;
};

struct SlotFit {
  CostProfile profile;
  std::vector<double> errors;  // per sample: (predicted - measured) / measured
  double median_abs_error = 0;
  double max_abs_error = 0;
  bool exchange_fitted = false;  // false: the samples had no exchange, start's terms kept
  bool row_fitted = false;       // false: no member of a bigger slot, start's row term kept (or 0)
  // false: some sample without partial tiles, no sample with a full and one
  // with a partial tile, or partial tiles that do not separate from the
  // other terms (e.g. tokens / B): the start's term kept (or 0).
  bool partial_fitted = false;
};

// Fits a member's slot time = a tiles + b tokens + c + r row_tokens +
// d kv_bytes + e peers + f partial_tiles (fit_nonnegative on plain, not
// relative, errors: a rank's time is the sum of its slots', and with noisy
// times a relative fit under-predicts the long slots that dominate the sum)
// and returns `start` with a, b, c, r, f as tile, token, slot, row-token and
// partial-tile seconds and, when some sample exchanged K/V,
// kv_bytes_per_token set to `kv_bytes_per_token` (the model's), both
// bandwidths to 1 / d (the largest a profile allows when d is 0) and latency
// to e. r is fitted only when some sample is a member of a slot of two or
// more and every sample has its row's length; otherwise the start's r is
// kept and the rest fitted to the time it leaves (r = 0 where it would leave
// a sample none). A term the samples cannot separate from the others
// (peers, then bytes, the row, then tokens) is held at 0 and the others
// absorb it. f is fitted last, beside the terms kept without it, and only
// when every sample has its partial tiles, some have full and some partial
// ones, and the column separates from those terms; else the start's f is
// kept (a sample without its partial tiles priced as if all its tiles were;
// 0 where it would leave a sample none).
// Deterministic: the same samples in the same order give bit-identical
// profiles on every rank.
Result<SlotFit> fit_slots(const std::vector<SlotSample>& samples, const CostProfile& start,
                          double kv_bytes_per_token);

// The profile as YAML: `provenance` lines as comments, then one mapping with
// exactly CostProfile's keys in declaration order.
std::string profile_yaml(const CostProfile& profile, const std::vector<std::string>& provenance);

}  // namespace fulcrum::calibrate
