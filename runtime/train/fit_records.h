// The cost-model samples and profile refits in the step figures and the
// metrics records (metrics.cpp): JSON to and from. Internal to
// fulcrum_train_metrics.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "calibrate/calibration_fit.h"
#include "train/metrics.h"

namespace fulcrum::train {

// [[g, tokens, tiles, peers, kv_bytes, seconds, row_tokens], ...]: doubles as JSON
// writes them, which read back bit for bit (every rank fits the samples
// another rank sent).
nlohmann::ordered_json fit_samples_json(const std::vector<calibrate::SlotSample>& samples);
std::vector<calibrate::SlotSample> fit_samples_from_json(const nlohmann::ordered_json& j);

// Every rank's samples, in rank order: what fulcrum calibrate --config reads.
nlohmann::ordered_json all_fit_samples_json(const std::vector<RankStepFigures>& ranks);

nlohmann::ordered_json profile_fit_json(const StepReport::ProfileFit& fit);

}  // namespace fulcrum::train
