// The loader's shared library handles: one dlopen per canonical path while
// any balancer loaded from it lives, closed when the last one goes.
#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "plugin_loader_internal.h"

namespace fulcrum::host::detail {
namespace {

struct LibraryCache {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<void>> by_path;
};

LibraryCache& library_cache() {
  // Never destroyed: balancers held in static storage may outlive it otherwise.
  static auto* cache = new LibraryCache;
  return *cache;
}

}  // namespace

Result<LibraryHandle> open_library(const std::string& path) {
  LibraryCache& cache = library_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  for (auto it = cache.by_path.begin(); it != cache.by_path.end();) {
    it = it->second.expired() ? cache.by_path.erase(it) : std::next(it);
  }
  if (auto found = cache.by_path.find(path); found != cache.by_path.end()) {
    if (LibraryHandle shared = found->second.lock()) return shared;
  }
  dlerror();  // clear a stale error
  void* raw = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (raw == nullptr) {
    const char* why = dlerror();
    return internal_error("cannot load plugin " + path + ": " +
                          (why != nullptr ? why : "dlopen failed without a message") +
                          "; check that it is a fulcrum plugin built for this platform and that "
                          "its dependencies resolve (ldd " +
                          path + ")");
  }
  LibraryHandle handle(raw, [](void* h) { dlclose(h); });
  cache.by_path[path] = handle;
  return handle;
}

long library_use_count(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(path, ec);
  if (ec) return 0;
  LibraryCache& cache = library_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  const auto found = cache.by_path.find(canonical.string());
  return found == cache.by_path.end() ? 0 : found->second.use_count();
}

}  // namespace fulcrum::host::detail
