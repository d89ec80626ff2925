#include "calibrate/calibration_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace fulcrum::calibrate {
namespace {

// Solves the normal equations (A^T A) x = A^T y by Gaussian elimination with
// partial pivoting: the systems here have three unknowns at most.
bool solve_least_squares(const std::vector<std::vector<double>>& columns,
                         const std::vector<double>& y, std::vector<double>& x) {
  const std::size_t n = columns.size();
  std::vector<std::vector<double>> m(n, std::vector<double>(n + 1, 0.0));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t s = 0; s < y.size(); ++s) m[i][j] += columns[i][s] * columns[j][s];
    }
    for (std::size_t s = 0; s < y.size(); ++s) m[i][n] += columns[i][s] * y[s];
  }
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < n; ++r) {
      if (std::abs(m[r][c]) > std::abs(m[pivot][c])) pivot = r;
    }
    if (std::abs(m[pivot][c]) < 1e-300) return false;
    std::swap(m[c], m[pivot]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (std::size_t k = c; k <= n; ++k) m[r][k] -= f * m[c][k];
    }
  }
  x.assign(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) x[i] = m[i][n] / m[i][i];
  return true;
}

std::string number(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.6e", value);
  return text;
}

}  // namespace

Result<LinearFit> fit_nonnegative(const std::vector<std::vector<double>>& columns,
                                  const std::vector<double>& y, bool relative) {
  if (columns.empty() || y.size() < columns.size()) {
    return invalid_argument("calibration has " + std::to_string(y.size()) + " measurements for " +
                            std::to_string(columns.size()) + " coefficients; measure more shapes");
  }
  // Each sample's equation is divided by its measurement, so the fit
  // minimises relative errors: the samples span orders of magnitude (4 KiB to
  // 32 MiB messages), and an absolute fit would leave the small ones at
  // several times their measured time.
  std::vector<std::vector<double>> scaled = columns;
  std::vector<double> ones(y.size(), 1.0);  // with !relative: y itself
  for (std::size_t s = 0; s < y.size(); ++s) {
    if (!(y[s] > 0)) {
      return invalid_argument("calibration measurement " + std::to_string(s) + " is " +
                              std::to_string(y[s]) + " s; times must be positive");
    }
    if (!relative) {
      ones[s] = y[s];
      continue;
    }
    for (auto& column : scaled) column[s] /= y[s];
  }
  // Plain errors: each column scaled to a largest magnitude of 1 (bytes run
  // to millions where peers are a few), so the normal equations stay well
  // conditioned; the coefficients are scaled back below.
  std::vector<double> unit(columns.size(), 1.0);
  for (std::size_t i = 0; i < columns.size() && !relative; ++i) {
    double largest = 0;
    for (double v : columns[i]) largest = std::max(largest, std::abs(v));
    if (largest > 0) unit[i] = largest;
    for (double& v : scaled[i]) v /= unit[i];
  }
  std::vector<std::size_t> active(columns.size());
  for (std::size_t i = 0; i < active.size(); ++i) active[i] = i;
  LinearFit fit;
  fit.coefficients.assign(columns.size(), 0.0);
  while (!active.empty()) {
    std::vector<std::vector<double>> chosen;
    for (std::size_t i : active) chosen.push_back(scaled[i]);
    std::vector<double> x;
    if (!solve_least_squares(chosen, ones, x)) {
      return invalid_argument(
          "calibration measurements do not separate the coefficients (a column is constant "
          "or repeats another); measure shapes that differ in tiles and in tokens");
    }
    const auto worst = std::min_element(x.begin(), x.end());
    if (*worst >= 0) {
      for (std::size_t i = 0; i < active.size(); ++i) {
        fit.coefficients[active[i]] = x[i] / unit[active[i]];
      }
      break;
    }
    active.erase(active.begin() + (worst - x.begin()));
  }
  for (std::size_t s = 0; s < y.size(); ++s) {
    double predicted = 0;
    for (std::size_t i = 0; i < columns.size(); ++i) {
      predicted += fit.coefficients[i] * columns[i][s];
    }
    fit.max_relative_error = std::max(fit.max_relative_error, std::abs(predicted - y[s]) / y[s]);
  }
  return fit;
}

Result<ComputeFit> fit_compute(const std::vector<ComputeSample>& samples) {
  std::vector<std::vector<double>> columns(3);
  std::vector<double> forward, backward;
  for (const ComputeSample& s : samples) {
    columns[0].push_back(static_cast<double>(s.tiles));
    columns[1].push_back(static_cast<double>(s.tokens));
    columns[2].push_back(1.0);
    forward.push_back(s.forward_seconds);
    backward.push_back(s.backward_seconds);
  }
  auto f = fit_nonnegative(columns, forward);
  if (!f) return f.status();
  auto b = fit_nonnegative(columns, backward);
  if (!b) return b.status();
  return ComputeFit{*f, *b};
}

Result<TransferFit> fit_transfer(const std::vector<TransferSample>& samples) {
  std::vector<std::vector<double>> columns(2);
  std::vector<double> y;
  for (const TransferSample& s : samples) {
    columns[0].push_back(1.0);
    columns[1].push_back(static_cast<double>(s.bytes));
    y.push_back(s.seconds);
  }
  auto fit = fit_nonnegative(columns, y);
  if (!fit) return fit.status();
  if (fit->coefficients[1] <= 0) {
    return invalid_argument(
        "transfer times do not grow with the message size, so no bandwidth can be fitted; "
        "run again on an idle machine or with more --repetitions");
  }
  return TransferFit{fit->coefficients[0], 1.0 / fit->coefficients[1], fit->max_relative_error};
}

namespace {

// The whole-slot fit's columns, in this order in every fit.
enum SlotColumn : std::size_t {
  kTiles,
  kTokens,
  kSlot,
  kRow,
  kBytes,
  kPeers,
  kPartial,
  kSlotColumns
};

// The fitted terms of fit_slots into `p` (x indexed by SlotColumn).
void set_slot_terms(const std::vector<double>& x, bool exchange, bool row, bool partial,
                    double kv_bytes_per_token, CostProfile& p) {
  p.tile_seconds = x[kTiles];
  p.token_seconds = x[kTokens];
  p.slot_seconds = x[kSlot];
  if (row) p.row_token_seconds = x[kRow];
  if (partial) p.partial_tile_seconds = x[kPartial];
  if (!exchange) return;
  constexpr double kFastest = 1e15;  // validate_cost_profile's largest bandwidth
  const double bandwidth = x[kBytes] > 1.0 / kFastest ? 1.0 / x[kBytes] : kFastest;
  p.kv_bytes_per_token = kv_bytes_per_token;
  p.intra_node_bytes_per_second = bandwidth;
  p.inter_node_bytes_per_second = bandwidth;
  p.latency_seconds = x[kPeers];
}

// Non-negative least squares of y on the columns `kept`, without dropping
// any: the coefficients indexed by SlotColumn (0 for the others).
Result<LinearFit> fit_columns(const std::vector<std::vector<double>>& columns,
                              const std::vector<std::size_t>& kept, const std::vector<double>& y) {
  std::vector<std::vector<double>> chosen;
  for (std::size_t i : kept) chosen.push_back(columns[i]);
  Result<LinearFit> fit = fit_nonnegative(chosen, y, false);
  if (!fit) return fit;
  std::vector<double> x(kSlotColumns, 0.0);
  for (std::size_t i = 0; i < kept.size(); ++i) x[kept[i]] = fit->coefficients[i];
  fit->coefficients = x;
  return fit;
}

// fit_columns on `kept`, where the terms it cannot separate from the others
// are dropped from `kept`, held at 0 (the others absorb them), in this
// order: latency (every slot of two members has one peer, so peers repeats
// the constant), then the bytes, the row, tokens.
Result<LinearFit> fit_kept(const std::vector<std::vector<double>>& columns,
                           std::vector<std::size_t>& kept, const std::vector<double>& y) {
  Result<LinearFit> fit = fit_columns(columns, kept, y);
  for (std::size_t drop : {kPeers, kBytes, kRow, kTokens}) {
    const auto at = std::find(kept.begin(), kept.end(), drop);
    if (fit || at == kept.end()) continue;
    kept.erase(at);
    fit = fit_columns(columns, kept, y);
  }
  return fit;
}

}  // namespace

Result<SlotFit> fit_slots(const std::vector<SlotSample>& samples, const CostProfile& start,
                          double kv_bytes_per_token) {
  bool exchange = false, multi = false, recorded = true;
  bool partial_recorded = true, some_partial = false, some_full = false;
  for (const SlotSample& s : samples) {
    exchange = exchange || s.kv_bytes > 0 || s.peers > 0;
    multi = multi || s.group > 1;
    recorded = recorded && s.row_tokens > 0;
    partial_recorded = partial_recorded && s.partial_tiles >= 0;
    some_partial = some_partial || s.partial_tiles > 0;
    some_full = some_full || s.partial_tiles < s.tiles;
  }
  // Partial tiles are told from tiles only where some sample has each kind:
  // where none is partial (no term to see) or every tile is (a sliding
  // window under 2B - 1 keys has no full tile, and the column repeats the
  // tiles'), the start's term is kept.
  const bool partial = partial_recorded && some_partial && some_full;
  // The row term is told from tokens only by members of bigger slots (in a
  // slot of one the row is the member's tokens); without them, or with rows
  // from records that lack the row's length, the start's row term is kept
  // and the rest fitted to what it leaves, unless it leaves some row no
  // time: then it is dropped (0) and tokens take it.
  const bool row = multi && recorded;
  const auto row_of = [](const SlotSample& s) {
    return static_cast<double>(s.row_tokens > 0 ? s.row_tokens : s.tokens);
  };
  double kept_row = row ? 0.0 : start.row_token_seconds;
  for (const SlotSample& s : samples) {
    if (!(s.seconds - kept_row * row_of(s) > 0)) kept_row = 0.0;
  }
  // Partial tiles likewise: without them on every sample (older records)
  // the start's term is kept, priced on the tiles a sample has at most.
  const auto partial_of = [](const SlotSample& s) {
    return static_cast<double>(s.partial_tiles >= 0 ? s.partial_tiles : s.tiles);
  };
  double start_partial = start.partial_tile_seconds;
  for (const SlotSample& s : samples) {
    if (!(s.seconds - kept_row * row_of(s) - start_partial * partial_of(s) > 0)) {
      start_partial = 0.0;
    }
  }
  std::vector<std::vector<double>> columns(kSlotColumns);
  std::vector<double> y;          // the time the fit explains, kept terms taken out
  std::vector<double> y_partial;  // the same, the start's partial-tile term taken out too
  for (const SlotSample& s : samples) {
    const double n = row_of(s);
    columns[kTiles].push_back(static_cast<double>(s.tiles));
    columns[kTokens].push_back(static_cast<double>(s.tokens));
    columns[kSlot].push_back(1.0);
    columns[kRow].push_back(n);
    columns[kBytes].push_back(static_cast<double>(s.kv_bytes));
    columns[kPeers].push_back(static_cast<double>(s.peers));
    columns[kPartial].push_back(partial_of(s));
    y.push_back(s.seconds - kept_row * n);
    y_partial.push_back(y.back() - start_partial * partial_of(s));
  }
  std::vector<std::size_t> kept = {kTiles, kTokens, kSlot};
  if (row) kept.push_back(kRow);
  if (exchange) kept.insert(kept.end(), {kBytes, kPeers});
  if (y.size() < kept.size()) {
    return invalid_argument("the whole-slot fit has " + std::to_string(y.size()) + " rows for " +
                            std::to_string(kept.size()) +
                            " terms; time more slots (more steps, or a bigger batch)");
  }
  // First without partial tiles (the start's term kept); then, where the
  // rows have both kinds, the same terms and partial tiles beside them,
  // dropping none: partial tiles are fitted only where they separate from
  // the terms the rows fit without them (a column proportional to another,
  // e.g. whole blocks of fixed-length sequences, where partial tiles are
  // tokens / B, would otherwise cost the fit its exchange terms).
  Result<LinearFit> fit = fit_kept(columns, kept, y_partial);
  if (!fit) return fit.status();
  double kept_partial = start_partial;
  bool partial_fitted = false;
  if (partial) {
    std::vector<std::size_t> with = kept;
    with.push_back(kPartial);
    Result<LinearFit> separated = fit_columns(columns, with, y);
    if (separated) {
      fit = std::move(separated);
      kept_partial = 0.0;
      partial_fitted = true;
    }
  }
  SlotFit out;
  out.profile = start;
  out.exchange_fitted = exchange;
  out.row_fitted = row;
  out.partial_fitted = partial_fitted;
  set_slot_terms(fit->coefficients, exchange, row, partial_fitted, kv_bytes_per_token, out.profile);
  if (!row) out.profile.row_token_seconds = kept_row;
  if (!partial_fitted) out.profile.partial_tile_seconds = kept_partial;
  std::vector<double> magnitudes;
  for (std::size_t s = 0; s < y.size(); ++s) {
    double predicted = kept_row * columns[kRow][s] + kept_partial * columns[kPartial][s];
    for (std::size_t i = 0; i < columns.size(); ++i) {
      predicted += fit->coefficients[i] * columns[i][s];
    }
    out.errors.push_back((predicted - samples[s].seconds) / samples[s].seconds);
    magnitudes.push_back(std::abs(out.errors.back()));
  }
  std::sort(magnitudes.begin(), magnitudes.end());
  const std::size_t n = magnitudes.size();
  out.median_abs_error =
      n % 2 ? magnitudes[n / 2] : 0.5 * (magnitudes[n / 2 - 1] + magnitudes[n / 2]);
  out.max_abs_error = magnitudes.back();
  return out;
}

std::string profile_yaml(const CostProfile& p, const std::vector<std::string>& provenance) {
  std::ostringstream out;
  for (const std::string& line : provenance) out << "# " << line << "\n";
  out << "name: " << p.name << "\n"
      << "tile_seconds: " << number(p.tile_seconds) << "\n"
      << "token_seconds: " << number(p.token_seconds) << "\n"
      << "slot_seconds: " << number(p.slot_seconds) << "\n"
      << "kv_bytes_per_token: " << number(p.kv_bytes_per_token) << "\n"
      << "intra_node_bytes_per_second: " << number(p.intra_node_bytes_per_second) << "\n"
      << "inter_node_bytes_per_second: " << number(p.inter_node_bytes_per_second) << "\n"
      << "latency_seconds: " << number(p.latency_seconds) << "\n"
      << "ranks_per_node: " << p.ranks_per_node << "\n";
  // Optional keys (0 when absent): written only when set, so that a profile
  // without them reads as it did before they existed.
  if (p.exchange_overlap != 0) out << "exchange_overlap: " << number(p.exchange_overlap) << "\n";
  if (p.row_token_seconds != 0) out << "row_token_seconds: " << number(p.row_token_seconds) << "\n";
  if (p.partial_tile_seconds != 0) {
    out << "partial_tile_seconds: " << number(p.partial_tile_seconds) << "\n";
  }
  return out.str();
}

}  // namespace fulcrum::calibrate
