#include "fulcrum/host/open_balancer.h"

#include <string_view>
#include <utility>

#include "fulcrum/host/plugin_loader.h"

namespace fulcrum::host {

std::vector<std::string> split_plugin_dirs(const std::string& text) {
  std::vector<std::string> dirs;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    if (colon != 0) dirs.emplace_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return dirs;
}

Result<OpenedBalancer> open_balancer(const std::string& name,
                                     const std::vector<std::string>& plugin_dirs,
                                     bool check_permissions, const LogFn& log,
                                     PluginChoice choice) {
  if (name == "builtin") return OpenedBalancer{builtin_balancer(), true, ""};
  LoaderOptions options;
  options.check_permissions = check_permissions;
  options.log = log;
  // A job's own directories first, then the environment and the install.
  options.search_dirs = plugin_dirs;
  for (std::string& dir : default_search_dirs()) options.search_dirs.push_back(std::move(dir));
  Result<std::shared_ptr<LoadBalancer>> loaded = load_plugin(name, options);
  if (loaded) return OpenedBalancer{std::move(loaded).value(), false, ""};
  if (loaded.status().code() == StatusCode::kNotFound && choice == PluginChoice::kDefault) {
    return OpenedBalancer{builtin_balancer(), true, loaded.status().message()};
  }
  if (loaded.status().code() == StatusCode::kNotFound) {
    // The loader's text says what is missing and where it looked; the
    // remedy is this policy's, so the loader's own is replaced.
    const std::string why = loaded.status().message();
    return Status(StatusCode::kNotFound,
                  why.substr(0, why.find("; ")) +
                      "; correct the name or path, add its directory to balancer.plugin_dirs or "
                      "FULCRUM_PLUGIN_PATH, or ask for the built-in contiguous / round-robin "
                      "balancer with balancer.plugin: builtin (--plugin builtin)");
  }
  // status() returns by value: keep copies, not references into it.
  const std::string why = loaded.status().message();
  return Status(loaded.status().code(),
                "cannot use balancer plugin '" + name + "': " + why +
                    (why.find("; ") == std::string::npos
                         ? "; fix or rebuild the plugin, or set balancer.plugin: builtin"
                         : ""));
}

}  // namespace fulcrum::host
