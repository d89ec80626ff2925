// The launcher against real processes: /bin/sh one-liners as workers.
// Every wait here is bounded, so a launcher that fails to tear down makes a
// test fail, not hang: the workers' own sleeps (10 s) are far longer than the
// bounds asserted, and short enough that a broken teardown still ends.
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
#include "launch_test_util.h"

namespace fulcrum::launch {
namespace {

using namespace test_support;  // launch_test_util.h

TEST(Launch, AllWorkersSucceed) {
  Harness h;
  auto report = run_workers(h.options(3, "echo hello from $RANK; echo to stderr >&2"));
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->exit_code, 0);
  EXPECT_TRUE(report->summary.empty());
  EXPECT_FALSE(report->failed_rank.has_value());
  ASSERT_EQ(report->workers.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(report->workers[static_cast<std::size_t>(r)].ok());
    EXPECT_EQ(h.lines_of(r, OutputStream::kStdout),
              std::vector<std::string>{"hello from " + std::to_string(r)});
    EXPECT_EQ(h.lines_of(r, OutputStream::kStderr), std::vector<std::string>{"to stderr"});
  }
  h.expect_no_survivors();
}

TEST(Launch, EnvironmentReachesWorkers) {
  // An identity inherited from an enclosing job must not leak through.
  ::setenv("RANK", "99", 1);
  Harness h;
  LaunchOptions o = h.options(
      2, "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $EXTRA");
  o.master_addr = "10.1.2.3";
  o.master_port = 23456;
  o.extra_env = {"EXTRA=yes"};
  auto report = run_workers(o);
  ::unsetenv("RANK");
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->exit_code, 0);
  EXPECT_EQ(report->master_port, 23456);
  EXPECT_EQ(h.lines_of(0, OutputStream::kStdout),
            std::vector<std::string>{"0 2 0 2 10.1.2.3 23456 yes"});
  EXPECT_EQ(h.lines_of(1, OutputStream::kStdout),
            std::vector<std::string>{"1 2 1 2 10.1.2.3 23456 yes"});
}

TEST(Launch, PicksAFreePortWhenNoneIsGiven) {
  Harness h;
  auto report = run_workers(h.options(2, "echo $MASTER_PORT"));
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_GT(report->master_port, 0);
  EXPECT_LE(report->master_port, 65535);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(h.lines_of(r, OutputStream::kStdout),
              std::vector<std::string>{std::to_string(report->master_port)});
  }
}

TEST(Launch, OneFailureStopsTheOthersQuickly) {
  Harness h;
  // Rank 2 fails after the others are asleep; they would sleep for 10 s.
  LaunchOptions o = h.options(
      4, "if [ \"$RANK\" = 2 ]; then sleep 0.3; echo dying >&2; exit 3; fi; echo up; sleep 10");
  o.failure_grace_s = 5;
  const auto start = Clock::now();
  auto report = run_workers(o);
  const double elapsed = seconds_since(start);
  ASSERT_TRUE(report) << report.status().message();
  // SIGTERM ends a sleeping shell at once: no need to wait for the grace.
  EXPECT_LT(elapsed, 4.0);
  ASSERT_TRUE(report->failed_rank.has_value());
  EXPECT_EQ(*report->failed_rank, 2);
  EXPECT_EQ(report->exit_code, 3);
  EXPECT_EQ(report->summary, "fulcrum: rank 2 failed with exit status 3");
  for (int r : {0, 1, 3}) {
    const WorkerExit& e = report->workers[static_cast<std::size_t>(r)];
    EXPECT_FALSE(e.ok()) << "rank " << r << " should have been stopped";
    EXPECT_EQ(e.signal, SIGTERM) << "rank " << r;
  }
  EXPECT_EQ(h.lines_of(2, OutputStream::kStderr), std::vector<std::string>{"dying"});
  ASSERT_EQ(h.pids.size(), 4u);
  h.expect_no_survivors();
}

TEST(Launch, WorkerIgnoringSigtermIsKilledAfterTheGrace) {
  Harness h;
  // The stubborn rank ignores SIGTERM (and its children inherit that).
  LaunchOptions o =
      h.options(2,
                "if [ \"$RANK\" = 0 ]; then sleep 0.2; exit 1; fi; "
                "trap '' TERM; i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done");
  o.failure_grace_s = 0.5;
  const auto start = Clock::now();
  auto report = run_workers(o);
  const double elapsed = seconds_since(start);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_GE(elapsed, 0.6);
  EXPECT_LT(elapsed, 4.0);
  EXPECT_EQ(report->summary, "fulcrum: rank 0 failed with exit status 1");
  EXPECT_EQ(report->workers[1].signal, SIGKILL);
  h.expect_no_survivors();
}

TEST(Launch, WorkerKilledBySignalIsReportedByName) {
  Harness h;
  auto report = run_workers(h.options(2, "if [ \"$RANK\" = 1 ]; then kill -KILL $$; fi; sleep 10"));
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->failed_rank, 1);
  EXPECT_EQ(report->exit_code, 128 + SIGKILL);
  EXPECT_EQ(report->summary, "fulcrum: rank 1 killed by signal SIGKILL");
  h.expect_no_survivors();
}

TEST(Launch, LeftoverChildrenOfAFinishedWorkerAreKilled) {
  Harness h;
  // The worker exits 0 but leaves a background process holding its stdout.
  const auto start = Clock::now();
  auto report = run_workers(h.options(1, "sleep 10 & echo started"));
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->exit_code, 0);
  EXPECT_LT(seconds_since(start), 4.0);
  h.expect_no_survivors();
}

TEST(Launch, DefaultOutputIsPrefixedAndLinesDoNotInterleave) {
  // Four workers race to print many long lines; a partial last line too.
  const std::string script =
      "i=0; while [ $i -lt 200 ]; do "
      "echo \"$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK$RANK\"; "
      "i=$((i+1)); done; printf 'tail %s' $RANK";
  LaunchOptions o;
  o.nproc = 4;
  o.program = "/bin/sh";
  o.args = {"-c", script};
  CaptureFd out(STDOUT_FILENO);
  const int code = launch_workers(o);
  const std::string text = out.finish();
  EXPECT_EQ(code, 0);
  std::map<int, int> full_lines, tails;
  for (const std::string& line : split_lines(text)) {
    ASSERT_EQ(line.rfind("[rank ", 0), 0u) << "unprefixed line: " << line;
    const int rank = line[6] - '0';
    ASSERT_GE(rank, 0);
    ASSERT_LT(rank, 4);
    const std::string body = line.substr(std::string("[rank 0] ").size());
    if (body == "tail " + std::to_string(rank)) {
      ++tails[rank];
    } else {
      ASSERT_EQ(body, std::string(16, static_cast<char>('0' + rank))) << "mangled: " << line;
      ++full_lines[rank];
    }
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(full_lines[r], 200) << "rank " << r;
    EXPECT_EQ(tails[r], 1) << "rank " << r;
  }
}

TEST(Launch, FailureSummaryIsOneLineOnStderr) {
  LaunchOptions o;
  o.nproc = 2;
  o.program = "/bin/sh";
  o.args = {"-c", "if [ \"$RANK\" = 1 ]; then exit 7; fi; sleep 10"};
  o.failure_grace_s = 2;
  CaptureFd err(STDERR_FILENO);
  const int code = launch_workers(o);
  const std::string text = err.finish();
  EXPECT_EQ(code, 7);
  const auto lines = split_lines(text);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "fulcrum: rank 1 failed with exit status 7"), 1)
      << text;
}

TEST(Launch, ForwardsSigtermToTheWorkers) {
  Harness h;
  LaunchOptions o = h.options(3, "sleep 10");
  const auto base_spawn = o.on_spawn;
  // Once the last worker is started, the launcher is asked to stop.
  o.on_spawn = [&](int rank, pid_t pid) {
    base_spawn(rank, pid);
    if (rank == 2) ::kill(::getpid(), SIGTERM);
  };
  const auto start = Clock::now();
  auto report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_LT(seconds_since(start), 4.0);
  EXPECT_EQ(report->interrupted_by, SIGTERM);
  EXPECT_EQ(report->exit_code, 128 + SIGTERM);
  EXPECT_FALSE(report->failed_rank.has_value());
  for (const WorkerExit& e : report->workers) EXPECT_EQ(e.signal, SIGTERM);
  h.expect_no_survivors();
  // The handler is gone again: SIGTERM's disposition is what it was before.
  struct sigaction now {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// The launcher is itself killed outright (no chance to clean up): its workers
// must die with it.
TEST(Launch, WorkersDieWithAKilledLauncher) {
  int pid_pipe[2];
  ASSERT_EQ(::pipe(pid_pipe), 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::close(pid_pipe[0]);
    LaunchOptions o;
    o.nproc = 2;
    o.program = "/bin/sleep";
    o.args = {"10"};
    o.on_spawn = [&](int, pid_t pid) {
      [[maybe_unused]] ssize_t n = ::write(pid_pipe[1], &pid, sizeof pid);
    };
    o.on_line = [](int, OutputStream, std::string_view) {};
    (void)run_workers(o);
    ::_exit(0);
  }
  ::close(pid_pipe[1]);
  std::vector<pid_t> workers;
  const auto start = Clock::now();
  while (workers.size() < 2 && seconds_since(start) < 5.0) {
    pollfd p{pid_pipe[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    pid_t pid = 0;
    if (::read(pid_pipe[0], &pid, sizeof pid) != static_cast<ssize_t>(sizeof pid)) break;
    workers.push_back(pid);
  }
  ::close(pid_pipe[0]);
  ::kill(launcher, SIGKILL);
  int st = 0;
  ::waitpid(launcher, &st, 0);
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t w : workers) {
    EXPECT_TRUE(eventually([&] { return !running(w); }, 3.0)) << "worker " << w << " survived";
  }
}

TEST(Launch, RefusesBadOptions) {
  LaunchOptions o;
  o.program = "/bin/true";
  o.nproc = 0;
  auto r = run_workers(o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--nproc is 0"), std::string::npos) << r.status().message();

  o.nproc = 1;
  o.master_port = 70000;
  r = run_workers(o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("70000"), std::string::npos);

  o.master_port = 0;
  o.failure_grace_s = -1;
  EXPECT_FALSE(run_workers(o));

  o.failure_grace_s = 1;
  o.program = "";
  EXPECT_FALSE(run_workers(o));
}

TEST(Launch, RefusesAProgramThatCannotRun) {
  LaunchOptions o;
  o.nproc = 2;
  o.program = "fulcrum-no-such-program-anywhere";
  auto r = run_workers(o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("not in PATH"), std::string::npos) << r.status().message();

  // Executable bit but not a program: exec itself fails, and the launcher
  // says so instead of reporting a mysterious exit status.
  const fs::path junk = fs::temp_directory_path() / ("fulcrum_junk_" + std::to_string(::getpid()));
  {
    std::ofstream out(junk);
    out << "\x7f\x01\x02 not an executable";
  }
  fs::permissions(junk, fs::perms::owner_all);
  o.program = junk.string();
  r = run_workers(o);
  fs::remove(junk);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("cannot start worker 0"), std::string::npos)
      << r.status().message();
}

TEST(Launch, PickFreePortCanBeBound) {
  auto port = pick_free_port();
  ASSERT_TRUE(port) << port.status().message();
  EXPECT_GT(*port, 0);
  EXPECT_LE(*port, 65535);
}

TEST(Launch, SignalNames) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(1000), "signal 1000");
}

}  // namespace
}  // namespace fulcrum::launch
