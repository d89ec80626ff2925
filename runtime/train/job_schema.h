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
                                     const std::vector<std::string>& overrides);
Result<host::Config> load_job_config_string(const std::string& yaml, const std::string& name,
                                            const std::vector<std::string>& overrides);

}  // namespace fulcrum::train
