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
  const std::string line = std::string("fulcrum: ") + tag + ": " + one_line(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

std::string one_line(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

}  // namespace fulcrum::host
