// The bundled step-time cost profiles (docs/HYBRID.md derives each) and the
// bounds every profile, bundled or read from a user's YAML file, must meet.
// Part of fulcrum::core (no LibTorch).
#pragma once

#include <cstdint>
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

// The most K/V bytes per token a profile may state (1 GiB; a 70B model with
// full multi-head attention in float32 needs about 5 MB).
inline constexpr std::int64_t kMaxKvBytesPerToken = std::int64_t{1} << 30;

// Every coefficient finite: times in [0, 3600] s, kv_bytes_per_token in
// (0, 2^30], both bandwidths in [1, 1e15] bytes/s, ranks_per_node in
// [1, 2^20]. The message names the profile, the field, the value and what
// to do.
Status validate_cost_profile(const CostProfile& profile);

}  // namespace fulcrum
