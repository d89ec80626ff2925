// Command-line values the benchmarks share: a value is taken whole or
// refused, never read as far as it parses.
#pragma once

#include <cerrno>
#include <cstdlib>

namespace fulcrum::bench {

// A whole integer in [lo, hi], or false.
inline bool parse_int(const char* text, int lo, int hi, int& out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace fulcrum::bench
