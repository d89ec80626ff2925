// Finding a plugin: a path as given, or a name looked up in the search
// directories (FULCRUM_PLUGIN_PATH, then beside the executable).
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "fulcrum/core/text.h"
#include "fulcrum/host/plugin_loader.h"
#include "plugin_loader_internal.h"

#ifndef FULCRUM_PLUGIN_SUBDIR
#define FULCRUM_PLUGIN_SUBDIR "lib/fulcrum"
#endif

namespace fulcrum::host {

namespace fs = std::filesystem;

namespace {

std::string library_file_name(std::string_view name) {
  if (name.size() > 3 && name.substr(name.size() - 3) == ".so") return std::string(name);
  return "lib" + std::string(name) + ".so";
}

}  // namespace

std::vector<std::string> default_search_dirs() {
  std::vector<std::string> dirs;
  auto add = [&dirs](std::string dir) {
    if (dir.empty()) return;
    for (const std::string& known : dirs) {
      if (known == dir) return;
    }
    dirs.push_back(std::move(dir));
  };
  if (const char* env = std::getenv("FULCRUM_PLUGIN_PATH"); env != nullptr) {
    std::string_view rest(env);
    while (!rest.empty()) {
      const std::size_t colon = rest.find(':');
      add(std::string(rest.substr(0, colon)));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  // Build and install trees alike: <prefix>/bin/<exe> and <prefix>/<libdir>/fulcrum.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.has_parent_path()) {
    const fs::path prefix = exe.parent_path().parent_path();
    add((prefix / "lib" / "fulcrum").lexically_normal().string());
    add((prefix / FULCRUM_PLUGIN_SUBDIR).lexically_normal().string());
  }
  return dirs;
}

namespace detail {

Result<ResolvedPlugin> resolve_plugin_path(std::string_view name_or_path,
                                           const LoaderOptions& options) {
  std::error_code ec;
  if (name_or_path.empty()) {
    return invalid_argument(
        "empty plugin name; give a name such as 'fulcrum_balancer' or a path to a .so file");
  }
  fs::path path;
  if (name_or_path.find('/') != std::string_view::npos) {
    path = fs::path(name_or_path);
    const fs::file_status status = fs::status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) {
      // A link loop or a file used as a directory: there, but unusable.
      return invalid_argument("plugin path " + path.string() + " cannot be resolved (" +
                              ec.message() + "); give the path of the plugin's .so file");
    }
    if (!fs::exists(status)) {
      return not_found("plugin file " + path.string() +
                       " does not exist; check the path, or give a plugin name to search "
                       "FULCRUM_PLUGIN_PATH and the install directories");
    }
  } else {
    const std::string file = library_file_name(name_or_path);
    const std::vector<std::string> dirs =
        options.search_dirs.empty() ? default_search_dirs() : options.search_dirs;
    for (const std::string& dir : dirs) {
      fs::path candidate = fs::path(dir) / file;
      if (fs::exists(candidate, ec)) {
        path = std::move(candidate);
        break;
      }
    }
    if (path.empty()) {
      return not_found("plugin '" + std::string(name_or_path) + "' not found: no " + file + " in " +
                       (dirs.empty() ? std::string("(no search directories)") : join(dirs, ", ")) +
                       "; install it there, add its directory to FULCRUM_PLUGIN_PATH, or give "
                       "the plugin's path");
    }
  }
  fs::path canonical = fs::canonical(path, ec);
  if (ec) {
    return not_found("cannot resolve plugin path " + path.string() + ": " + ec.message());
  }
  if (!fs::is_regular_file(canonical, ec)) {
    return invalid_argument("plugin path " + canonical.string() +
                            " is not a regular file; give the path of the plugin's .so file");
  }
  return ResolvedPlugin{path.string(), canonical.string()};
}

}  // namespace detail
}  // namespace fulcrum::host
