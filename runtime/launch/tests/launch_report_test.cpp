// What the launcher says and whom it blames, against real processes: the
// last line when a rank stalls, stops, loses a peer or fails with the error
// every rank shares; /proc states read while processes exit; the private
// directory the workers meet in and the TMPDIR it trusts. Every wait is
// bounded, as in launch_test.cpp.
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
