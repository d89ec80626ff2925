#include "train/profile_refit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <utility>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"

namespace fulcrum::train {
namespace {

std::uint64_t bits(double value) {
  std::uint64_t out = 0;
  std::memcpy(&out, &value, sizeof out);
  return out;
}

Bytes words_to_bytes(std::uint64_t a, std::uint64_t b) {
  Bytes out(16);
  std::memcpy(out.data(), &a, 8);
  std::memcpy(out.data() + 8, &b, 8);
  return out;
}

std::string hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

SlotCounts sample_slot(const calibrate::SlotSample& s, double kv_bytes_per_token) {
  // A member without tokens exchanges nothing; no slot has more than 2^20
  // members.
  const std::int64_t peers =
      s.tokens > 0 ? std::clamp<std::int64_t>(s.peers, 0, std::int64_t{1} << 20) : 0;
  SlotCounts counts;
  counts.tokens.push_back(s.tokens);
  counts.tiles.push_back(s.tiles);
  // An older record without its partial tiles: priced as if all were
  // partial, what fit_slots assumes of it.
  counts.partial.push_back(s.partial_tiles >= 0 ? s.partial_tiles : s.tiles);
  // Each peer holds at least one token; the rest of the row is shared among
  // them.
  const std::int64_t rest = std::max(s.row_tokens - s.tokens, peers);
  for (std::int64_t j = 0; j < peers; ++j) {
    counts.tokens.push_back(rest / peers + (j < rest % peers ? 1 : 0));
    counts.tiles.push_back(0);
    counts.partial.push_back(0);
  }
  if (peers == 0) return counts;
  start_exchange(counts);
  const std::size_t a = counts.active.size();
  const auto kv = std::max<std::int64_t>(
      std::llround(static_cast<double>(s.kv_bytes) / kv_bytes_per_token), peers);
  // The member's K/V tokens (in and out together) from each peer; only
  // their sum and the peer count price, where every peer shares a node.
  for (std::size_t y = 1; y < a; ++y) {
    const auto j = static_cast<std::int64_t>(y - 1);
    counts.received[y] = kv / peers + (j < kv % peers ? 1 : 0);
  }
  return counts;
}

double predicted_seconds(const CostProfile& p, const calibrate::SlotSample& s,
                         double kv_bytes_per_token) {
  const SlotCounts counts = sample_slot(s, kv_bytes_per_token);
  // Every member on one node (rank 0): a sample does not say where its
  // peers were; fitted profiles set both bandwidths the same.
  const std::vector<std::int32_t> ranks(counts.tokens.size(), 0);
  const SlotCost cost = price_slot_counts(p, ranks, counts);
  return cost.members[0].compute_seconds + cost.members[0].comm_seconds;
}

ErrorSummary prediction_errors(const CostProfile& profile,
                               const std::vector<calibrate::SlotSample>& samples,
                               double kv_bytes_per_token) {
  std::vector<double> errors;
  for (const calibrate::SlotSample& s : samples) {
    if (!(s.seconds > 0)) continue;
    errors.push_back(std::abs(predicted_seconds(profile, s, kv_bytes_per_token) - s.seconds) /
                     s.seconds);
  }
  ErrorSummary out;
  out.samples = static_cast<std::int64_t>(errors.size());
  if (errors.empty()) return out;
  std::sort(errors.begin(), errors.end());
  const std::size_t n = errors.size();
  out.median = n % 2 ? errors[n / 2] : 0.5 * (errors[n / 2 - 1] + errors[n / 2]);
  out.max = errors.back();
  return out;
}

std::uint64_t profile_fingerprint(const CostProfile& p) {
  Fingerprint f;
  f.add(p.name);
  for (double v : {p.tile_seconds, p.token_seconds, p.slot_seconds, p.kv_bytes_per_token,
                   p.intra_node_bytes_per_second, p.inter_node_bytes_per_second, p.latency_seconds,
                   p.exchange_overlap, p.row_token_seconds, p.partial_tile_seconds}) {
    f.add(bits(v));
  }
  f.add(static_cast<std::int64_t>(p.ranks_per_node));
  return f.value();
}

void check_same_profile(const ConsensusGroup& world, const CostProfile& profile,
                        std::int64_t step) {
  const std::uint64_t mine = profile_fingerprint(profile);
  const std::vector<Bytes> all =
      world.gather(words_to_bytes(static_cast<std::uint64_t>(step), mine));
  std::vector<std::uint64_t> prints;
  for (const Bytes& b : all) {
    std::uint64_t s = 0, f = 0;
    if (b.size() == 16) {
      std::memcpy(&s, b.data(), 8);
      std::memcpy(&f, b.data() + 8, 8);
    }
    if (b.size() != 16 || s != static_cast<std::uint64_t>(step)) {
      throw ConsensusError("profile check after step " + std::to_string(step) + " on group " +
                           world.name +
                           ": a rank is at another point of training; the ranks' "
                           "control flow diverged (check that every rank runs the same build)");
    }
    prints.push_back(f);
  }
  std::string odd;
  for (std::size_t i = 1; i < prints.size(); ++i) {
    if (prints[i] == prints[0]) continue;
    odd += (odd.empty() ? "" : ", ") + std::to_string(world.ranks[i]) + " (" + hex(prints[i]) + ")";
  }
  if (odd.empty()) return;
  throw ConsensusError(
      "balancer.schedule.profile: auto: the profile refitted after step " + std::to_string(step) +
      " on rank(s) " + odd + " differs from rank " + std::to_string(world.ranks[0]) + "'s (" +
      hex(prints[0]) +
      "); every rank must fit the same samples with the same build: check that the ranks run "
      "one fulcrum build, or set a fixed balancer.schedule.profile");
}

ProfileRefit::ProfileRefit(CostProfile start, std::int64_t every, double kv_bytes_per_token)
    : profile_(std::move(start)), every_(every), kv_bytes_per_token_(kv_bytes_per_token) {}

void ProfileRefit::restore(State state) {
  profile_ = std::move(state.profile);
  refits_ = state.refits;
  window_.assign(std::make_move_iterator(state.window.begin()),
                 std::make_move_iterator(state.window.end()));
  while (static_cast<std::int64_t>(window_.size()) > 2 * every_) window_.pop_front();
}

RefitOutcome ProfileRefit::add_step(std::int64_t step, std::vector<calibrate::SlotSample> samples) {
  RefitOutcome out;
  out.predicted = prediction_errors(profile_, samples, kv_bytes_per_token_);
  window_.push_back(std::move(samples));
  while (static_cast<std::int64_t>(window_.size()) > 2 * every_) window_.pop_front();
  if (step % every_ != 0) return out;
  out.due = true;
  out.window_steps = static_cast<std::int64_t>(window_.size());
  std::vector<calibrate::SlotSample> all;
  for (const auto& one : window_) {
    for (const calibrate::SlotSample& s : one) {
      if (s.seconds > 0) all.push_back(s);
    }
  }
  Result<calibrate::SlotFit> fit = calibrate::fit_slots(all, profile_, kv_bytes_per_token_);
  if (!fit) {
    out.note = "kept: " + fit.status().message();
    return out;
  }
  if (Status valid = validate_cost_profile(fit->profile); !valid) {
    out.note = "kept: the fit is no valid profile: " + valid.message();
    return out;
  }
  profile_ = fit->profile;
  ++refits_;
  out.refitted = true;
  out.fitted = {static_cast<std::int64_t>(all.size()), fit->median_abs_error, fit->max_abs_error};
  return out;
}

}  // namespace fulcrum::train
