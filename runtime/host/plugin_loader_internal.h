// Private to fulcrum::host and its tests: a view of the loader's shared
// library handles, so tests can check that balancers loaded from one file
// share one handle.
#pragma once

#include <string>

namespace fulcrum::host::detail {

// Owners of the shared handle of the plugin file at `path` (canonicalised):
// one per live balancer loaded from it; 0 when no balancer holds it.
long library_use_count(const std::string& path);

}  // namespace fulcrum::host::detail
