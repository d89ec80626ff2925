// The settings a checkpoint records, as "key=value" lines: what its meaning
// rests on (refused on resume when they differ) and how the work was spread
// (warned about). No LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "train/options.h"

namespace fulcrum::train {

// What a checkpoint's meaning rests on: the model, the optimizer's settings,
// the mask and everything that decides which samples each step trains on.
// Its FNV-1a hash is the header's config fingerprint; a resumed run must
// match it. Not here: train.steps (a run may be extended), the layout (see
// layout_settings) and settings that change no number (threads, timeouts,
// paths of the plugin). `loader_samples`: the samples the loader draws from.
std::string trajectory_settings(const TrainOptions& options, std::int64_t loader_samples);

// How the work is spread: a run may resume under another layout or
// balancer and still train every sample exactly once, but rows are formed
// and sums taken in another order, so its losses are no longer bitwise those
// of the uninterrupted run. Differences are warned about, not refused.
// `balancer`: BalancerChoice::description.
std::string layout_settings(const TrainOptions& options, const std::string& balancer);

}  // namespace fulcrum::train
