// What the launcher's tests share (launch_test.cpp, launch_report_test.cpp):
// /proc state of the workers, a harness that runs /bin/sh one-liners as
// workers and records their pids and lines, and capturing the launcher's
// own stdout or stderr.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "host/input_file.h"
#include "launch/launch.h"

namespace fulcrum::launch::test_support {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Polls `done` every 10 ms for at most `limit_s`.
inline bool eventually(const std::function<bool()>& done, double limit_s) {
  const auto start = Clock::now();
  while (seconds_since(start) < limit_s) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// "R" (running), "S" (sleeping), "Z" (zombie)... or "" when gone.
inline std::string process_state(pid_t pid) {
  const std::string stat =
      host::read_transient_file("/proc/" + std::to_string(pid) + "/stat", 4096).value_or("");
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "";
  return stat.substr(paren + 2, 1);
}

// A zombie has finished running; whether init reaped it yet is not the
// launcher's business.
inline bool running(pid_t pid) {
  const std::string state = process_state(pid);
  return !state.empty() && state != "Z";
}

// Processes of process group `pgid` that are still running (zombies excluded).
inline std::vector<pid_t> running_in_group(pid_t pgid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const std::string stat =
        host::read_transient_file((entry.path() / "stat").string(), 4096).value_or("");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 2));
    std::string state;
    long ppid = 0, pgrp = 0;
    fields >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != "Z") out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

struct Line {
  int rank;
  OutputStream stream;
  std::string text;
};

// Options that run `script` under /bin/sh in every worker and record pids
// and output lines.
struct Harness {
  std::vector<pid_t> pids;
  std::vector<Line> lines;

  LaunchOptions options(int nproc, const std::string& script) {
    LaunchOptions o;
    o.nproc = nproc;
    o.program = "/bin/sh";
    o.args = {"-c", script};
    o.failure_grace_s = 2;
    o.on_spawn = [this](int, pid_t pid) { pids.push_back(pid); };
    o.on_line = [this](int rank, OutputStream stream, std::string_view text) {
      lines.push_back({rank, stream, std::string(text)});
    };
    return o;
  }

  std::vector<std::string> lines_of(int rank, OutputStream stream) const {
    std::vector<std::string> out;
    for (const Line& l : lines) {
      if (l.rank == rank && l.stream == stream) out.push_back(l.text);
    }
    return out;
  }

  void expect_no_survivors() const {
    for (pid_t pid : pids) {
      EXPECT_TRUE(eventually([&] { return running_in_group(pid).empty(); }, 3.0))
          << "process group " << pid << " still has running members";
      EXPECT_FALSE(running(pid)) << "worker " << pid << " outlived the launcher";
      // The launcher reaped its own children: the pid is gone, not a zombie.
      EXPECT_EQ(::kill(pid, 0), -1) << "worker " << pid << " was not reaped";
    }
  }
};

// Redirects one of the launcher's own descriptors (1 or 2) into a file.
class CaptureFd {
 public:
  explicit CaptureFd(int fd) : fd_(fd) {
    std::fflush(nullptr);
    path_ = (fs::temp_directory_path() /
             ("fulcrum_capture_" + std::to_string(::getpid()) + "_" + std::to_string(fd)))
                .string();
    saved_ = ::dup(fd);
    const int file = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(file, fd);
    ::close(file);
  }
  ~CaptureFd() { restore(); }
  std::string finish() {
    restore();
    std::ifstream in(path_);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fs::remove(path_);
    return text;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(nullptr);
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
  }
  int fd_;
  int saved_ = -1;
  std::string path_;
};

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace fulcrum::launch::test_support
