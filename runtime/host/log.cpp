#include "fulcrum/host/log.h"

#include <cstdio>
#include <string>

namespace fulcrum::host {

void log_to_stderr(LogLevel level, const std::string& message) {
  const char* tag = nullptr;
  switch (level) {
    case LogLevel::kDebug:
      return;
    case LogLevel::kInfo:
      tag = "info";
      break;
    case LogLevel::kWarning:
      tag = "warning";
      break;
    case LogLevel::kError:
      tag = "error";
      break;
  }
  if (tag == nullptr) tag = "warning";
  // One write per line, so lines from concurrent ranks sharing a terminal do
  // not interleave mid-line.
  std::string line = std::string("fulcrum: ") + tag + ": " + message;
  // One line whatever the message holds: a path or a peer's text with a
  // line break, a carriage return or an escape sequence could otherwise
  // split the line or rewrite what the terminal shows.
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace fulcrum::host
