// What the multi-process integration drivers share: running a command under
// a deadline with its output captured, a temporary directory per test, and
// reading the parameter files of `fulcrum train --save-params`. No LibTorch:
// the processes under test carry it, the drivers only read what they write.
#pragma once

#include <csignal>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace fulcrum::it {

struct RunResult {
  int exit_code = -1;  // 128 + signal when killed
  bool timed_out = false;
  bool stopped = false;  // killed by the caller's stop condition
  std::string output;    // stdout and stderr together
  double wall_s = 0.0;
};

std::ostream& operator<<(std::ostream& out, const RunResult& r);

// Runs argv[0] (a path) in its own process group with its output captured,
// `env` ("NAME=value") over the test's environment. Past the deadline it gets
// SIGTERM (fulcrum train forwards it and stops its workers), then SIGKILL.
// When `stop_when` turns true the whole group gets `stop_signal` once:
// SIGKILL, as a crashed node would (the launcher's workers die with it: they
// hold PR_SET_PDEATHSIG), or SIGTERM/SIGINT, as a user or a scheduler would.
// A test can fail but never hang.
RunResult run(const std::vector<std::string>& argv, std::chrono::seconds deadline,
              const std::vector<std::string>& env = {}, const std::function<bool()>& stop_when = {},
              int stop_signal = SIGKILL);

// A fresh directory under the system's temporary directory, removed with
// everything in it at the end of the test unless FULCRUM_KEEP_TEST_DIRS is set.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fulcrum_it_");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes `text` to file(name) and returns that path.
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

// The --save-params format: "name numel" lines, a blank line, float64s.
std::map<std::string, std::vector<double>> read_params(const std::string& path);

}  // namespace fulcrum::it
