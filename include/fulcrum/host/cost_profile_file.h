// Step-time cost profiles from the command line: a bundled profile by name,
// or a user's YAML file holding one mapping whose keys are exactly
// CostProfile's fields (docs/PLUGIN_ABI.md shows one). The file is hostile
// input: it must be a regular file of a few KiB, hold one document, set
// every field once and nothing else, with finite numbers in range. Every
// refusal is one line naming the file, the line and column where it can,
// the value and what to write instead.
#pragma once

#include <string>

#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum::host {

// Larger than any real profile by two orders of magnitude; a bigger "profile"
// is a wrong path (a dataset, a device file), not a profile.
inline constexpr std::size_t kMaxCostProfileFileBytes = 64 * 1024;

Result<CostProfile> load_cost_profile_file(const std::string& path);

// The same checks on YAML text; `name` stands for the file in messages.
Result<CostProfile> load_cost_profile_string(const std::string& yaml, const std::string& name);

// A bundled profile's name (builtin_cost_profile_names()), else a file path.
Result<CostProfile> resolve_cost_profile(const std::string& name_or_path);

}  // namespace fulcrum::host
