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

namespace fulcrum::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Polls `done` every 10 ms for at most `limit_s`.
bool eventually(const std::function<bool()>& done, double limit_s) {
  const auto start = Clock::now();
  while (seconds_since(start) < limit_s) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// "R" (running), "S" (sleeping), "Z" (zombie)... or "" when gone.
std::string process_state(pid_t pid) {
  const std::string stat =
      host::read_transient_file("/proc/" + std::to_string(pid) + "/stat", 4096).value_or("");
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "";
  return stat.substr(paren + 2, 1);
}

// A zombie has finished running; whether init reaped it yet is not the
// launcher's business.
bool running(pid_t pid) {
  const std::string state = process_state(pid);
  return !state.empty() && state != "Z";
}

// Processes of process group `pgid` that are still running (zombies excluded).
std::vector<pid_t> running_in_group(pid_t pgid) {
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

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

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

// A worker whose collective timed out leaves a stall report (written here
// by the shell, as dist's ProgressBoard writes it) in the directory the
// launcher names; the launcher's line then names the stalled rank.
constexpr const char* kStallReportOfRank1 =
    "printf 'fulcrum-stall-report 1\nreporter 1\ntimeout_ms 3000\ntimed_out all_gather 9 "
    "cp[dp=0]\nstalled 0\nwaiting 1 all_gather 9 cp[dp=0]\nwaiting 2 all_reduce_sum 4 "
    "world\nwaiting 3 all_reduce_sum 4 world\nend\n' > \"$FULCRUM_STALL_REPORT_DIR/rank-1.stall\"";

// The same report, written by rank 2 and naming rank 0: what a rank may
// conclude when the stalled one stopped inside a collective.
constexpr const char* kStallReportOfRank1Elsewhere =
    "printf 'fulcrum-stall-report 1\nreporter 2\ntimeout_ms 3000\ntimed_out all_gather 9 "
    "cp[dp=0]\nstalled 0\nwaiting 2 all_gather 9 cp[dp=0]\nend\n' > "
    "\"$FULCRUM_STALL_REPORT_DIR/rank-2.stall\"";

TEST(Launch, AStalledRankNamedByTheTimedOutRankIsTheVerdict) {
  ::setenv("FULCRUM_STALL_REPORT_DIR", "/inherited/must/not/leak", 1);
  Harness h;
  LaunchOptions o = h.options(
      4, std::string("echo \"$FULCRUM_STALL_REPORT_DIR\"; if [ \"$RANK\" = 1 ]; then sleep 0.3; ") +
             kStallReportOfRank1 + "; exit 1; fi; sleep 10");
  auto report = run_workers(o);
  ::unsetenv("FULCRUM_STALL_REPORT_DIR");
  ASSERT_TRUE(report) << report.status().message();
  ASSERT_TRUE(report->failed_rank.has_value());
  EXPECT_EQ(*report->failed_rank, 1);
  EXPECT_EQ(report->exit_code, 1);
  EXPECT_EQ(report->stalled_ranks, std::vector<int>{0});
  EXPECT_EQ(report->summary,
            "fulcrum: rank 0 stalled (ranks 1, 2, 3 were waiting for it in all_gather on group "
            "cp[dp=0] and all_reduce_sum on group world; rank 1 timed out after 3 s); stopped all "
            "ranks");
  // One private directory for the job, removed with the reports after it.
  const std::vector<std::string> dir = h.lines_of(0, OutputStream::kStdout);
  ASSERT_EQ(dir.size(), 1u);
  EXPECT_NE(dir[0], "/inherited/must/not/leak");
  EXPECT_EQ(h.lines_of(3, OutputStream::kStdout), dir);
  EXPECT_FALSE(std::filesystem::exists(dir[0]));
  h.expect_no_survivors();
}

// A stopped rank is the cause however its peers' reports read: the launcher
// sees its state, names it, and does not wait out the grace for it (SIGTERM
// stays pending in a stopped process).
TEST(Launch, AStoppedRankIsNamedAndKilledAtOnce) {
  Harness h;
  LaunchOptions o = h.options(4, std::string("if [ \"$RANK\" = 1 ]; then kill -STOP $$; fi; ") +
                                     "if [ \"$RANK\" = 2 ]; then sleep 0.5; " +
                                     kStallReportOfRank1Elsewhere + "; exit 1; fi; sleep 10");
  o.failure_grace_s = 5;
  const auto start = Clock::now();
  auto report = run_workers(o);
  const double elapsed = seconds_since(start);
  ASSERT_TRUE(report) << report.status().message();
  ASSERT_TRUE(report->failed_rank.has_value());
  EXPECT_EQ(*report->failed_rank, 2);
  EXPECT_EQ(report->exit_code, 1);
  EXPECT_EQ(report->stalled_ranks, std::vector<int>{1});
  EXPECT_EQ(report->summary.rfind("fulcrum: rank 1 was stopped (by SIGSTOP", 0), 0u)
      << report->summary;
  EXPECT_LT(elapsed, 4.0);
  EXPECT_EQ(report->workers[1].signal, SIGKILL);
  h.expect_no_survivors();
}

TEST(Launch, AReportOfAnotherRankDoesNotOverrideTheFirstFailure) {
  // Rank 2 fails first, for its own reason; rank 1's report (a timeout that
  // came later) must not rename the cause.
  Harness h;
  LaunchOptions o = h.options(
      4, std::string("if [ \"$RANK\" = 1 ]; then ") + kStallReportOfRank1 +
             "; sleep 10; fi; if [ \"$RANK\" = 2 ]; then sleep 0.5; exit 4; fi; sleep 10");
  auto report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  ASSERT_TRUE(report->failed_rank.has_value());
  EXPECT_EQ(*report->failed_rank, 2);
  EXPECT_EQ(report->summary, "fulcrum: rank 2 failed with exit status 4");
  EXPECT_TRUE(report->stalled_ranks.empty());
  h.expect_no_survivors();
}

TEST(Launch, ARankThatLostItsPeerDefersToTheReportOfTheStall) {
  // Rank 1 timed out and reported; rank 3 lost its connection to it and
  // exited first. Rank 1 is the first to fail on its own, and the verdict is
  // its report's.
  Harness h;
  LaunchOptions o = h.options(
      4, std::string("if [ \"$RANK\" = 1 ]; then ") + kStallReportOfRank1 +
             "; sleep 0.6; exit 1; fi; if [ \"$RANK\" = 3 ]; then sleep 0.4; printf "
             "'fulcrum-lost-peer 1\n' > \"$FULCRUM_STALL_REPORT_DIR/rank-3.lost\"; exit 1; fi; "
             "sleep 10");
  auto report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  ASSERT_TRUE(report->failed_rank.has_value());
  EXPECT_EQ(*report->failed_rank, 1);
  EXPECT_EQ(report->exit_code, 1);
  EXPECT_EQ(report->stalled_ranks, std::vector<int>{0});
  EXPECT_EQ(report->summary.rfind("fulcrum: rank 0 stalled (ranks 1, 2, 3 were waiting", 0), 0u)
      << report->summary;
  h.expect_no_survivors();
}

TEST(Launch, AGarbledReportLeavesTheUsualVerdict) {
  Harness h;
  LaunchOptions o =
      h.options(2,
                "if [ \"$RANK\" = 1 ]; then printf 'fulcrum-stall-report 1\\nreporter 1\\n' > "
                "\"$FULCRUM_STALL_REPORT_DIR/rank-1.stall\"; exit 1; fi; sleep 10");
  auto report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->summary, "fulcrum: rank 1 failed with exit status 1");
  h.expect_no_survivors();
}

// Every rank refusing the same input prints the same error: it is relayed
// once, by the first rank to print it, and the summary names the others.
// Different errors, and lines that are not a worker's error, all pass.
TEST(Launch, AnErrorEveryRankPrintsIsRelayedOnce) {
  Harness h;
  LaunchOptions o =
      h.options(4,
                // Rank r prints after ranks below it have printed (each leaves
                // a mark in the job's directory), whatever the machine's load;
                // rank 3 then fails.
                "D=$FULCRUM_STALL_REPORT_DIR; i=0; while [ $i -lt $RANK ]; do "
                "while [ ! -e $D/printed.$i ]; do sleep 0.01; done; i=$((i+1)); done; "
                "echo \"fulcrum-worker: rank $RANK: data.bin: bad header\" >&2; "
                "echo \"fulcrum-worker: rank $RANK: note $RANK\" >&2; echo plain >&2; "
                ": > $D/printed.$RANK; [ \"$RANK\" = 3 ] && exit 2; sleep 10");
  auto report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->exit_code, 2);
  EXPECT_EQ(report->summary,
            "fulcrum: rank 3 failed with exit status 2 (the same error on ranks 0, 1, 2)");
  EXPECT_EQ(h.lines_of(0, OutputStream::kStderr),
            (std::vector<std::string>{"fulcrum-worker: rank 0: data.bin: bad header",
                                      "fulcrum-worker: rank 0: note 0", "plain"}));
  for (int r : {1, 2, 3}) {
    EXPECT_EQ(
        h.lines_of(r, OutputStream::kStderr),
        (std::vector<std::string>{
            "fulcrum-worker: rank " + std::to_string(r) + ": note " + std::to_string(r), "plain"}))
        << "rank " << r;
  }
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

// --- a process that exits while it is looked at ---------------------------------

TEST(ProcState, StoppedStatesAreReadAfterTheLastParenthesis) {
  EXPECT_TRUE(process_state_is_stopped("123 (sleep) T 1 123 123"));
  EXPECT_TRUE(process_state_is_stopped("123 (gdb target) t 1 123 123"));
  EXPECT_FALSE(process_state_is_stopped("123 (sleep) S 1 123 123"));
  // A command name holding ") T " does not fool it.
  EXPECT_FALSE(process_state_is_stopped("123 (a) T (b) R 1 123 123"));
  EXPECT_TRUE(process_state_is_stopped("123 (a) R (b) T 1 123 123"));
  // What a vanished or half-read file leaves: not stopped.
  EXPECT_FALSE(process_state_is_stopped(""));
  EXPECT_FALSE(process_state_is_stopped("123 (sleep)"));
  EXPECT_FALSE(process_state_is_stopped("123 (sleep) "));
}

// The race behind a launcher that threw "basic_filebuf::underflow error
// reading the file: No such process": /proc/PID/stat opened while the process
// lives, read after it was reaped. Made deterministic here: the read fails
// with ESRCH, and the reader answers "gone" instead of throwing.
TEST(ProcState, ReadingTheStatOfAProcessReapedAfterTheOpenIsAnAnswer) {
  for (int round = 0; round < 20; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::pause();
      ::_exit(0);
    }
    const std::string path = "/proc/" + std::to_string(child) + "/stat";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    int error = 0;
    std::optional<std::string> text;
    EXPECT_NO_THROW(text = host::read_transient_fd(fd, 4096, &error));
    ::close(fd);
    EXPECT_FALSE(text.has_value()) << "read " << text.value_or("");
    EXPECT_EQ(error, ESRCH) << std::strerror(error);
    // And by path, once it is gone.
    error = 0;
    EXPECT_FALSE(host::read_transient_file(path, 4096, &error).has_value());
    EXPECT_EQ(error, ENOENT) << std::strerror(error);
  }
}

// The launcher looks at every live worker's state when the first failure
// arrives (is a rank stopped?), while the others are exiting on their own.
// Whatever the interleaving, the report is the failed rank's real exit: no
// exception, no other rank blamed.
TEST(Launch, WorkersExitingWhileTheLauncherLooksAtThemKeepTheRealReport) {
  for (int round = 0; round < 15; ++round) {
    Harness h;
    auto report =
        run_workers(h.options(8,
                              "sleep 0.1; if [ \"$RANK\" = 0 ]; then exit 3; fi; i=0; "
                              "while [ $i -lt $((RANK * 20)) ]; do i=$((i+1)); done; exit 0"));
    ASSERT_TRUE(report) << report.status().message();
    EXPECT_EQ(report->exit_code, 3) << "round " << round << ": " << report->summary;
    EXPECT_EQ(report->failed_rank, 0) << "round " << round;
    EXPECT_EQ(report->summary, "fulcrum: rank 0 failed with exit status 3") << "round " << round;
    h.expect_no_survivors();
  }
}

// --- a launcher that tells the truth ----------------------------------------------

TEST(Launch, WorkersMeetInAPrivateDirectoryOfTheirOwn) {
  Harness h;
  auto report = run_workers(h.options(2,
                                      "stat -c '%a %u %F' \"$FULCRUM_RENDEZVOUS_DIR\"; "
                                      "test -z \"$FULCRUM_COMPLETION_NOTE\" && echo no-note"));
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->exit_code, 0) << report->summary;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(
        h.lines_of(rank, OutputStream::kStdout),
        (std::vector<std::string>{"700 " + std::to_string(::geteuid()) + " directory", "no-note"}));
  }
}

TEST(Launch, AWorkerThatExitsZeroWithoutItsCompletionNoteFailsTheJob) {
  Harness h;
  LaunchOptions o = h.options(
      3, "if [ \"$RANK\" != 1 ]; then : > \"$FULCRUM_COMPLETION_NOTE\"; sleep 0.3; fi; exit 0");
  o.require_completion_note = true;
  auto report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->failed_rank, 1);
  EXPECT_EQ(report->exit_code, 1);
  EXPECT_TRUE(report->workers[1].left_early);
  EXPECT_FALSE(report->workers[1].ok());
  EXPECT_EQ(report->summary,
            "fulcrum: rank 1 exited with status 0 before its run finished (it left no completion "
            "note); stopped all ranks: the run did not complete");
  h.expect_no_survivors();

  // Every rank noting its completion: success.
  Harness all;
  o = all.options(3, ": > \"$FULCRUM_COMPLETION_NOTE\"; exit 0");
  o.require_completion_note = true;
  report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->exit_code, 0) << report->summary;
  EXPECT_EQ(report->summary, "");
}

// Rank 0 fails on its own (a full disk), slowly; rank 1 loses it as a peer and
// exits first. The launcher names rank 0, with its status.
TEST(Launch, ARankThatLostAPeerIsNotBlamedForThePeersFailure) {
  Harness h;
  LaunchOptions o = h.options(
      3,
      "case $RANK in "
      "0) sleep 0.4; echo 'cannot write checkpoint: No space left on device' >&2; exit 2;; "
      "1) : > \"$FULCRUM_STALL_REPORT_DIR/rank-1.lost\"; exit 1;; "
      "*) sleep 10;; esac");
  auto report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->failed_rank, 0) << report->summary;
  EXPECT_EQ(report->exit_code, 2);
  EXPECT_EQ(report->summary, "fulcrum: rank 0 failed with exit status 2");
  h.expect_no_survivors();
}

// When no other rank turns out to be the cause, the rank that lost its peer
// is named after the settling time, and the job still ends.
TEST(Launch, ALostPeerAloneIsNamedAfterTheSettlingTime) {
  Harness h;
  LaunchOptions o =
      h.options(2,
                "if [ \"$RANK\" = 1 ]; then : > \"$FULCRUM_STALL_REPORT_DIR/rank-1.lost\"; exit 1; "
                "fi; sleep 10");
  o.failure_grace_s = 0.5;
  const auto start = Clock::now();
  auto report = run_workers(o);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_LT(seconds_since(start), 6.0);
  EXPECT_EQ(report->failed_rank, 1);
  EXPECT_EQ(report->summary, "fulcrum: rank 1 failed with exit status 1");
  h.expect_no_survivors();
}

// Without a private directory the job does not start (its ranks would have
// to meet on the network).
// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Launch, NoPrivateDirectoryMeansNoJob) {
  Harness h;
  Result<LaunchReport> report = [&] {
    ScopedEnv tmpdir("TMPDIR", "/proc");
    return run_workers(h.options(2, "exit 0"));
  }();
  ASSERT_FALSE(report);
  EXPECT_NE(report.status().message().find("cannot create the job's private directory"),
            std::string::npos)
      << report.status().message();
  EXPECT_TRUE(h.pids.empty());
}

// A TMPDIR another user could change (its owner, or anyone where it is
// writable without the sticky bit) could have the job's private directory
// swapped for theirs: the job does not start.
TEST(Launch, ATmpdirAnotherUserCanChangeIsRefused) {
  const fs::path base =
      fs::temp_directory_path() / ("fulcrum_tmpdir_" + std::to_string(::getpid()));
  fs::create_directories(base);
  const fs::path open_dir = base / "open";
  fs::create_directory(open_dir);
  ::chmod(base.c_str(), 0755);
  ::chmod(open_dir.c_str(), 0777);  // writable by all, not sticky
  Harness h;
  Result<LaunchReport> report = [&] {
    ScopedEnv tmpdir("TMPDIR", open_dir.string());
    return run_workers(h.options(2, "exit 0"));
  }();
  ASSERT_FALSE(report);
  EXPECT_NE(report.status().message().find("is writable by group or others without the sticky bit"),
            std::string::npos)
      << report.status().message();
  EXPECT_TRUE(h.pids.empty());

  ::chmod(open_dir.c_str(), 01777);  // sticky, like /tmp: accepted
  report = [&] {
    ScopedEnv tmpdir("TMPDIR", open_dir.string());
    return run_workers(h.options(1, "exit 0"));
  }();
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->exit_code, 0);

  if (::geteuid() == 0) {
    const fs::path foreign = base / "foreign";
    fs::create_directory(foreign);
    ASSERT_EQ(::chown(foreign.c_str(), 65534, 65534), 0);
    report = [&] {
      ScopedEnv tmpdir("TMPDIR", foreign.string());
      return run_workers(h.options(1, "exit 0"));
    }();
    ASSERT_FALSE(report);
    EXPECT_NE(report.status().message().find("is owned by uid 65534, neither root nor this user"),
              std::string::npos)
        << report.status().message();
  }
  std::error_code ec;
  fs::remove_all(base, ec);
}

}  // namespace
}  // namespace fulcrum::launch
