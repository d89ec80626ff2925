// The bundled step-time cost profiles (docs/HYBRID.md derives each) and the
// bounds every profile, bundled or read from a user's YAML file, must meet.
// Part of fulcrum::core (no LibTorch).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum {

// "h100_7b": one H100 per rank, eight to a node, a 7B-class GQA model in
// bf16; "cpu_gloo": this kind of machine, the runtime's blocked attention
// kernel over Gloo on loopback, from the figures in docs/RESULTS_RUNTIME.md.
Result<CostProfile> builtin_cost_profile(std::string_view name);
std::vector<std::string> builtin_cost_profile_names();

// Every coefficient finite and >= 0, both bandwidths and kv_bytes_per_token
// > 0, ranks_per_node >= 1. The message names the profile, the field, the
// value and what to do.
Status validate_cost_profile(const CostProfile& profile);

}  // namespace fulcrum
