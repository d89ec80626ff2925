// Which balancer a command uses: the one policy of `fulcrum plan`,
// `fulcrum dp-partition`, `fulcrum train` and its workers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fulcrum/host/log.h"
#include "fulcrum/load_balancer.h"
#include "fulcrum/status.h"

namespace fulcrum::host {

struct OpenedBalancer {
  std::shared_ptr<LoadBalancer> balancer;  // never null
  // The host's own balancer serves: chosen with "builtin", or because no
  // plugin of that name was found (then `not_found` says where it looked).
  bool is_builtin = false;
  std::string not_found;
};

// `name` is balancer.plugin (or --plugin): "builtin", a plugin name searched
// in `plugin_dirs` and then default_search_dirs(), or a path. A plugin that
// is absent gives way to the built-in balancer (the caller says so, loudly);
// one that is there but cannot be used (unsafe permissions, a truncated or
// foreign file, a wrong ABI, a failing create) is an error: training or
// planning with another balancer than the one named would make every figure
// misleading.
Result<OpenedBalancer> open_balancer(const std::string& name,
                                     const std::vector<std::string>& plugin_dirs,
                                     bool check_permissions, const LogFn& log);

// balancer.plugin_dirs, colon-separated, empty entries skipped.
std::vector<std::string> split_plugin_dirs(const std::string& text);

}  // namespace fulcrum::host
