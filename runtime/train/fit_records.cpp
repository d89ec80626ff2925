#include "train/fit_records.h"

#include <stdexcept>
#include <string>

namespace fulcrum::train {

using json = nlohmann::ordered_json;

json fit_samples_json(const std::vector<calibrate::SlotSample>& samples) {
  json out = json::array();
  for (const calibrate::SlotSample& s : samples) {
    out.push_back(json::array({s.group, s.tokens, s.tiles, s.peers, s.kv_bytes, s.seconds,
                               s.row_tokens, s.partial_tiles}));
  }
  return out;
}

std::vector<calibrate::SlotSample> fit_samples_from_json(const json& j) {
  std::vector<calibrate::SlotSample> out;
  for (const json& row : j) {
    // Six entries: a record from before row_tokens (read as 0, not
    // recorded); seven: from before partial_tiles (read as -1, not recorded).
    if (!row.is_array() || row.size() < 6 || row.size() > 8) {
      throw std::runtime_error(
          "a fit sample is not [g, tokens, tiles, peers, kv_bytes, seconds, row_tokens, "
          "partial_tiles]");
    }
    out.push_back({row[0].get<std::int32_t>(), row[1].get<std::int64_t>(),
                   row[2].get<std::int64_t>(), row[3].get<std::int64_t>(),
                   row[4].get<std::int64_t>(), row[5].get<double>(),
                   row.size() >= 7 ? row[6].get<std::int64_t>() : 0,
                   row.size() == 8 ? row[7].get<std::int64_t>() : -1});
    const calibrate::SlotSample& s = out.back();
    if (s.partial_tiles < -1 || s.partial_tiles > s.tiles) {
      throw std::runtime_error("a fit sample has " + std::to_string(s.partial_tiles) +
                               " partial tiles of " + std::to_string(s.tiles) +
                               " (-1, not recorded, up to its tiles expected)");
    }
  }
  return out;
}

json all_fit_samples_json(const std::vector<RankStepFigures>& ranks) {
  json out = json::array();
  for (const RankStepFigures& r : ranks) {
    for (json& row : fit_samples_json(r.fit_samples)) out.push_back(std::move(row));
  }
  return out;
}

json profile_fit_json(const StepReport::ProfileFit& f) {
  const CostProfile& p = f.profile;
  json out = {{"samples", f.samples},
              {"median_abs_error", f.median_error},
              {"max_abs_error", f.max_error},
              {"refit_due", f.due},
              {"refitted", f.refitted}};
  if (f.refitted) {
    out["fit_samples"] = f.fit_samples;
    out["window_steps"] = f.window_steps;
    out["fit_median_abs_error"] = f.fit_median_error;
    out["fit_max_abs_error"] = f.fit_max_error;
  }
  if (!f.note.empty()) out["note"] = f.note;
  out["profile"] = {{"tile_seconds", p.tile_seconds},
                    {"token_seconds", p.token_seconds},
                    {"slot_seconds", p.slot_seconds},
                    {"row_token_seconds", p.row_token_seconds},
                    {"partial_tile_seconds", p.partial_tile_seconds},
                    {"kv_bytes_per_token", p.kv_bytes_per_token},
                    {"bytes_per_second", p.intra_node_bytes_per_second},
                    {"latency_seconds", p.latency_seconds}};
  return out;
}

}  // namespace fulcrum::train
