// The job's configuration: the schema of every key a training job reads and
// loading a YAML file (plus "section.key=value" overrides) against it. Free
// of LibTorch, so the CLI's plan, dp-partition and schedule commands read the
// same keys on a machine without the training runtime.
#pragma once

#include <string>
#include <vector>

#include "fulcrum/host/config.h"
#include "fulcrum/status.h"

namespace fulcrum::train {

const host::ConfigSchema& job_schema();

// host::load_config and host::load_config_string with the job's schema.
Result<host::Config> load_job_config(const std::string& path,
                                     const std::vector<host::Override>& overrides);
Result<host::Config> load_job_config_string(const std::string& yaml, const std::string& name,
                                            const std::vector<host::Override>& overrides);

// fulcrum train's flags that set a key, winning over the file and every
// --set: the CLI reads them, hands them to its workers as the same flags,
// and the workers (fulcrum-worker accepts them too) read them back, so that
// a message about the key names the flag.
struct KeyFlag {
  const char* flag;  // "--compare-schedulers"
  const char* key;   // "train.compare_schedulers"
};
inline constexpr KeyFlag kTrainKeyFlags[] = {
    {"--resume", "train.resume"},
    {"--compare-schedulers", "train.compare_schedulers"},
    {"--compare-repetitions", "train.compare_repetitions"},
};
// The flag's override: "KEY=VALUE" that says it came from the flag.
host::Override flag_override(const KeyFlag& flag, const std::string& value);

// A path-valued key, absolute and normal: a relative path written in a config
// file means "next to this file", so a config and its data move together; on
// the command line (--set) or by default it means the working directory.
// Empty stays empty.
std::string config_path(const host::Config& config, const std::string& key);

// balancer.schedule.profile as the host resolves it: a bundled name as
// written, a value with '/' or '.' as a file (config_path). `fulcrum train`
// and `fulcrum schedule` both read it here, so they plan with one profile.
// With `auto`, the profile the job starts from: balancer.schedule.profile_start
// resolved the same way, or the bundled cpu_gloo when it is empty.
std::string schedule_profile(const host::Config& config);

}  // namespace fulcrum::train
