// The host's logging seam: one callback, injected wherever the host needs to
// warn (a missing plugin, a fallback). Defaults to one line on stderr.
#pragma once

#include <functional>
#include <string>

namespace fulcrum::host {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

using LogFn = std::function<void(LogLevel, const std::string&)>;

// Writes "fulcrum: warning: <message>" (and so on) to stderr; drops kDebug.
void log_to_stderr(LogLevel level, const std::string& message);

}  // namespace fulcrum::host
