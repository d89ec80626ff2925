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
  // The host's own balancer serves: chosen with "builtin", or because the
  // default plugin was not found and none was named (then `not_found` says
  // where it looked).
  bool is_builtin = false;
  std::string not_found;
};

// How the name reached open_balancer: named by the user (balancer.plugin
// set in the file or by --set, or --plugin), or the schema's default.
enum class PluginChoice { kNamed, kDefault };

// `name` is balancer.plugin (or --plugin): "builtin", a plugin name searched
// in `plugin_dirs` and then default_search_dirs(), or a path. The built-in
// balancer serves only when asked for ("builtin") or when the default plugin
// is absent and none was named (the caller says so, loudly). A named plugin
// that is absent is an error (kNotFound) whose message gives the search path,
// and so is one that is there but cannot be used (unsafe permissions, a
// truncated or foreign file, a wrong ABI, a failing create): training or
// planning with another balancer than the one named would make every figure
// misleading.
Result<OpenedBalancer> open_balancer(const std::string& name,
                                     const std::vector<std::string>& plugin_dirs,
                                     bool check_permissions, const LogFn& log,
                                     PluginChoice choice = PluginChoice::kNamed);

// balancer.plugin_dirs, colon-separated, empty entries skipped.
std::vector<std::string> split_plugin_dirs(const std::string& text);

}  // namespace fulcrum::host
