// The host's logging seam: one callback, injected wherever the host needs to
// warn (a missing plugin, a fallback). Defaults to one line on stderr.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace fulcrum::host {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

using LogFn = std::function<void(LogLevel, const std::string&)>;

// Writes "fulcrum: warning: <message>" (and so on) to stderr as one line;
// drops kDebug.
void log_to_stderr(LogLevel level, const std::string& message);

// The text with every control character made a space: a message naming a
// path or a peer's text with a line break, a carriage return or an escape
// sequence then stays one line and cannot rewrite what the terminal shows.
std::string one_line(std::string_view text);

}  // namespace fulcrum::host
