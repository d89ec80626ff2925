// Loading a balancer plugin and presenting it as a fulcrum::LoadBalancer:
// the steps in order, each in its own file (plugin_loader_internal.h says
// which), and the trust boundary they keep written there.
#include "fulcrum/host/plugin_loader.h"

#include <dlfcn.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "fulcrum/c_api.h"
#include "plugin_balancer.h"
#include "plugin_loader_internal.h"

namespace fulcrum::host {

using detail::LibraryHandle;
using detail::PluginBalancer;
using detail::ResolvedPlugin;

Result<std::shared_ptr<LoadBalancer>> load_plugin(std::string_view name_or_path,
                                                  const LoaderOptions& options) {
  Result<ResolvedPlugin> resolved = detail::resolve_plugin_path(name_or_path, options);
  if (!resolved) return resolved.status();
  const std::string& path = resolved->canonical;
  if (options.check_permissions) {
    if (Status s = detail::check_permissions(resolved->found, path); !s) return s;
  }
  if (Status s = detail::check_elf_complete(path); !s) return s;
  Result<LibraryHandle> library = detail::open_library(path);
  if (!library) return library.status();

  dlerror();
  void* entry = dlsym(library->get(), FULCRUM_PLUGIN_ENTRY);
  if (entry == nullptr) {
    const char* why = dlerror();
    return internal_error("plugin " + path + " does not export " + FULCRUM_PLUGIN_ENTRY + " (" +
                          (why != nullptr ? why : "symbol is null") +
                          "); is it a fulcrum plugin? Export one with FULCRUM_EXPORT_PLUGIN");
  }
  const fulcrum_plugin_v1* table = nullptr;
  try {
    table = reinterpret_cast<fulcrum_get_plugin_fn>(entry)();
  } catch (...) {
    return internal_error("plugin " + path + ": " + FULCRUM_PLUGIN_ENTRY +
                          "() threw an exception; it must not, fix the plugin");
  }
  if (Status s = detail::check_table(table, path); !s) return s;

  auto balancer = std::make_shared<PluginBalancer>(*library, table, path, options.log);
  if (Status s = balancer->create_instance(); !s) return s;
  if (options.log) {
    std::string message = "loaded plugin '" + balancer->name() + "' (ABI " +
                          std::to_string(table->abi_major) + "." +
                          std::to_string(table->abi_minor) + ") from " + path;
    if (table->abi_minor > FULCRUM_ABI_MINOR) {
      message += "; it is newer than this host's ABI " + std::to_string(FULCRUM_ABI_MAJOR) + "." +
                 std::to_string(FULCRUM_ABI_MINOR) + ", so its newer functions go unused";
    }
    if (!detail::has_schedule_hook(table)) {
      message += "; it has no scheduler, so schedules come from the host's built-in fixed one";
    }
    options.log(LogLevel::kDebug, message);
  }
  return std::shared_ptr<LoadBalancer>(std::move(balancer));
}

}  // namespace fulcrum::host
