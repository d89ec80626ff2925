// Loading balancer plugins (shared libraries exporting the table of
// fulcrum/c_api.h) and presenting them as fulcrum::LoadBalancer.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/host/log.h"
#include "fulcrum/load_balancer.h"
#include "fulcrum/status.h"

namespace fulcrum::host {

struct LoaderOptions {
  // Directories searched, in order, for a plugin given by name ("fulcrum_balancer"
  // -> libfulcrum_balancer.so). A name containing '/' is a path and is not searched.
  std::vector<std::string> search_dirs;
  // Refuse a plugin file, or the directory holding it, that group or others
  // may write: anyone who can write it can run code in every rank.
  bool check_permissions = true;
  LogFn log = log_to_stderr;
};

// Directories searched when none are configured: $FULCRUM_PLUGIN_PATH (colon
// separated), then the directories next to the running executable where a
// build or an install puts the plugin.
std::vector<std::string> default_search_dirs();

// Loads a plugin: dlopen(RTLD_NOW | RTLD_LOCAL), resolves fulcrum_get_plugin,
// checks abi_major, struct_size and every required pointer, creates an
// instance. The returned balancer keeps the library loaded (a shared,
// reference-counted handle) for as long as it or any balancer from the same
// file lives. Every plan, partition and schedule it returns has been
// validated; an invalid one is an error naming the plugin and strategy. A
// plugin without a scheduler (ABI 1.0, or `schedule` left NULL) lists
// "fixed" and is served the host's fixed schedule, built from its own plans
// and partitions, with a fallback_reason saying so.
Result<std::shared_ptr<LoadBalancer>> load_plugin(std::string_view name_or_path,
                                                  const LoaderOptions& options = {});

// The host's own balancer, used when no plugin is configured or loading one
// failed: CP "contiguous", DP "round_robin" and the "fixed" schedule only.
std::shared_ptr<LoadBalancer> builtin_balancer();

}  // namespace fulcrum::host
