// What the tests that load plugins share (loader, trust, schedule, ABI
// compatibility, selection): the built plugins' paths, a log capture, and the
// small workloads and layouts they plan.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/host/log.h"
#include "fulcrum/host/plugin_loader.h"
#include "fulcrum/status.h"
#include "test_support.h"

#ifndef FULCRUM_PLUGIN_PATH
#error "FULCRUM_PLUGIN_PATH must name the built libfulcrum_balancer.so"
#endif

namespace fulcrum::test {

// The log lines of the plugins loaded with options(), which also skips the
// permission check: the build directory's mode depends on the umask, and
// only the permission tests are about that.
struct LogCapture {
  struct Line {
    host::LogLevel level;
    std::string text;
  };
  std::vector<Line> lines;

  host::LoaderOptions options() {
    host::LoaderOptions o;
    o.check_permissions = false;
    o.log = [this](host::LogLevel level, const std::string& text) {
      lines.push_back({level, text});
    };
    return o;
  }
  bool any_at_least(host::LogLevel level) const {
    return std::any_of(lines.begin(), lines.end(),
                       [level](const Line& l) { return l.level >= level; });
  }
  // Whether any line holds `part`.
  bool saw(const std::string& part) const {
    return std::any_of(lines.begin(), lines.end(),
                       [&](const Line& l) { return l.text.find(part) != std::string::npos; });
  }
};

// Whether the host refused `result` as the plugin's fault (kPluginFault)
// with `part` in its message; says what it got when not.
template <typename T>
::testing::AssertionResult refused_as_fault(const Result<T>& result, const std::string& part) {
  if (result.is_ok()) return ::testing::AssertionFailure() << "the call succeeded";
  const Status status = result.status();  // by value: status() returns a copy
  const std::string& message = status.message();
  if (status.code() != StatusCode::kPluginFault) {
    return ::testing::AssertionFailure() << "refused with code " << static_cast<int>(status.code())
                                         << ", not kPluginFault: " << message;
  }
  if (message.find(part) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message \"" << message << "\" lacks \"" << part << "\"";
  }
  return ::testing::AssertionSuccess();
}

// With FULCRUM_BROKEN_PLUGIN_DIR, the directory of the broken and other test
// plugins (fulcrum_host_tests is built with it; a test that names a plugin
// there without it does not compile).
#ifdef FULCRUM_BROKEN_PLUGIN_DIR
// The built test plugin lib<file>.so, beside the broken plugins.
inline std::string test_plugin(const std::string& file) {
  return std::string(FULCRUM_BROKEN_PLUGIN_DIR) + "/lib" + file + ".so";
}
// The broken plugin of `kind`, libfulcrum_broken_<kind>.so.
inline std::string broken_plugin(const std::string& kind) {
  return test_plugin("fulcrum_broken_" + kind);
}
#endif

// A causal row of `tokens` over `cp_size` ranks.
inline CpWorkload causal_row(std::int64_t tokens, std::int32_t cp_size) {
  CpWorkload w;
  w.tokens = tokens;
  w.cp_size = cp_size;
  return w;
}

// The positions of a contiguous plan: rank r holds [r*S, min((r+1)*S, N)),
// S = ceil(N/P), padded with -1.
inline std::vector<std::int64_t> contiguous_positions(std::int64_t n, std::int64_t p) {
  const std::int64_t s = (n + p - 1) / p;
  std::vector<std::int64_t> out(static_cast<std::size_t>(s * p), kPadPosition);
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = i;
  return out;
}

}  // namespace fulcrum::test
