// The Gloo communicator across real processes on 127.0.0.1: collectives on
// the world, CP and DP groups, and the two ways a job fails to meet
// (rendezvous and collective timeouts), which must end with a one-line error,
// never a hang. Each child is killed past its deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/progress.h"
#include "spawn.h"

namespace fulcrum::comm {
namespace {

using namespace std::chrono_literals;
using testing::free_port;
using testing::rank_children;
using testing::run_children;

const std::string kWorker = FULCRUM_GLOO_WORKER;

std::string describe(const std::vector<testing::ChildResult>& results) {
  std::string text;
  for (std::size_t i = 0; i < results.size(); ++i) {
    text += "--- child " + std::to_string(i) + " exit " + std::to_string(results[i].exit_code) +
            (results[i].timed_out ? " (killed at the deadline)" : "") + "\n" + results[i].output;
  }
  return text;
}

// The ranks of a `world`-rank job of the worker with `args` (mode, dp, cp,
// rendezvous and op timeouts in ms) on a free port, `env` added to each
// rank's environment; none when no port was free.
std::vector<testing::ChildResult> run_job(const std::vector<std::string>& args, int world,
                                          std::chrono::seconds deadline,
                                          const std::vector<std::string>& env = {}) {
  const int port = free_port();
  EXPECT_GT(port, 0);
  if (port <= 0) return {};
  auto children = rank_children(kWorker, args, world, port);
  for (auto& c : children) c.env.insert(c.env.end(), env.begin(), env.end());
  return run_children(children, deadline);
}

// Every rank of a dp x cp job runs the worker's collectives and exits 0.
void expect_collectives_pass(int dp, int cp, const std::vector<std::string>& env = {}) {
  const auto results = run_job(
      {"collectives", std::to_string(dp), std::to_string(cp), "20000", "20000"}, dp * cp, 60s, env);
  ASSERT_EQ(results.size(), static_cast<std::size_t>(dp * cp));
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << describe(results);
}

TEST(Gloo, CollectivesOnWorldCpAndDpGroups) {
  // world 4 = dp 2 x cp 2: every group has two or four members.
  expect_collectives_pass(2, 2);
}

TEST(Gloo, CollectivesWithOnlyCp) { expect_collectives_pass(1, 3); }

TEST(Gloo, AClientAloneTimesOutNamingTheAddress) {
  // Rank 1 of 2 with nobody hosting the store.
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_children(
      rank_children(kWorker, {"rendezvous", "1", "2", "1500", "5000"}, 2, port, 1), 30s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].timed_out) << describe(results);
  EXPECT_EQ(results[0].exit_code, 2) << describe(results);
  EXPECT_NE(results[0].output.find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << describe(results);
  EXPECT_NE(results[0].output.find("rendezvous"), std::string::npos) << describe(results);
  EXPECT_LT(elapsed, 20s);
}

TEST(Gloo, TheHostAloneTimesOutNamingTheAddress) {
  // Rank 0 of 2 hosts the store and waits for a rank that never comes.
  const int port = free_port();
  ASSERT_GT(port, 0);
  const auto results = run_children(
      rank_children(kWorker, {"rendezvous", "1", "2", "1500", "5000"}, 2, port, 0), 30s);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].timed_out) << describe(results);
  EXPECT_EQ(results[0].exit_code, 2) << describe(results);
  EXPECT_NE(results[0].output.find("rendezvous at 127.0.0.1:" + std::to_string(port) +
                                   " timed out after 1.5 s for rank 0 of 2: 1 of 2 ranks joined"),
            std::string::npos)
      << describe(results);
}

TEST(Gloo, ACollectiveTimesOutNamingTheOperationAndGroup) {
  const auto results = run_job({"op_timeout", "1", "2", "20000", "2000"}, 2, 30s);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[0].timed_out) << describe(results);
  EXPECT_EQ(results[0].exit_code, 2) << describe(results);
  EXPECT_NE(results[0].output.find("all_reduce_sum on group world timed out after 1 s"),
            std::string::npos)
      << describe(results);
  // Rank 1 never called a collective.
  EXPECT_NE(results[0].output.find("; rank 1 never entered it (it entered no collective yet)"),
            std::string::npos)
      << describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
}

TEST(Gloo, PointToPointExchangesBetweenAnyPairsInAnyOrder) {
  const auto results = run_job({"p2p", "1", "3", "20000", "20000"}, 3, 60s);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    EXPECT_FALSE(r.timed_out) << describe(results);
    EXPECT_EQ(r.exit_code, 0) << describe(results);
  }
}

TEST(Gloo, AReceiveTimesOutNamingTheGroupAndThePeer) {
  const auto results = run_job({"p2p_timeout", "1", "2", "20000", "20000"}, 2, 30s);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[0].timed_out) << describe(results);
  EXPECT_EQ(results[0].exit_code, 2) << describe(results);
  EXPECT_NE(results[0].output.find("exchange on group world timed out after 1 s on rank 0 "
                                   "(waiting for the receive from rank 1)"),
            std::string::npos)
      << describe(results);
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
}

// A private directory, removed with its contents.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "fulcrum_gloo_XXXXXX");
    if (::mkdtemp(pattern.data()) != nullptr) path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// The ranks of fulcrum train's jobs meet in the launcher's private directory:
// collectives work, and no rank listens on anything but loopback. The same
// job over the TCPStore shows the check can fail: rank 0's store listens on
// every interface.
TEST(Gloo, APrivateRendezvousDirectoryListensOnNoPublicSocket) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path.empty());
  const int port = free_port();
  ASSERT_GT(port, 0);
  auto specs = rank_children(kWorker, {"collectives", "2", "2", "20000", "20000"}, 4, port);
  for (auto& spec : specs) spec.env.push_back("FULCRUM_RENDEZVOUS_DIR=" + dir.path.string());
  auto results = run_children(specs, 60s);
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << describe(results);

  // Every job has a directory of its own (the launcher makes one per launch).
  ScratchDir second;
  ASSERT_FALSE(second.path.empty());
  specs = rank_children(kWorker, {"listeners", "1", "2", "20000", "20000"}, 2, port);
  for (auto& spec : specs) spec.env.push_back("FULCRUM_RENDEZVOUS_DIR=" + second.path.string());
  results = run_children(specs, 60s);
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << describe(results);

  const int tcp_port = free_port();
  ASSERT_GT(tcp_port, 0);
  results = run_children(
      rank_children(kWorker, {"listeners", "1", "2", "20000", "20000"}, 2, tcp_port), 60s);
  EXPECT_EQ(results[0].exit_code, 4) << describe(results);
  EXPECT_NE(results[0].output.find("LISTEN"), std::string::npos) << describe(results);
}

TEST(Gloo, ARendezvousDirectoryOtherUsersCanReachIsRefused) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::filesystem::permissions(
      dir.path, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                    std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                    std::filesystem::perms::others_exec);
  auto specs = rank_children(kWorker, {"collectives", "1", "2", "5000", "5000"}, 2, 1);
  for (auto& spec : specs) spec.env.push_back("FULCRUM_RENDEZVOUS_DIR=" + dir.path.string());
  const auto results = run_children(specs, 30s);
  for (const auto& r : results) {
    EXPECT_NE(r.exit_code, 0) << describe(results);
    EXPECT_NE(r.output.find("has mode 0755: other users can reach it; it must be 0700"),
              std::string::npos)
        << describe(results);
  }
}

TEST(Gloo, ATimedOutCollectiveNamesTheRankThatStoppedAndReportsIt) {
  // world 3 = dp 1 x cp 3: after one barrier rank 2 stops; ranks 0 and 1
  // time out in their all-reduce and name it.
  const int port = free_port();
  ASSERT_GT(port, 0);
  ScratchDir reports;
  ASSERT_FALSE(reports.path.empty());
  auto children = rank_children(kWorker, {"stall", "1", "3", "20000", "1500"}, 3, port);
  for (auto& c : children) {
    c.env.push_back(std::string(kStallReportDirVariable) + "=" + reports.path.string());
  }
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_children(children, 30s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(results.size(), 3u);
  for (int r : {0, 1}) {
    EXPECT_EQ(results[r].exit_code, 2) << describe(results);
    EXPECT_NE(results[r].output.find(
                  "all_reduce_sum on group world timed out after 1.5 s (collective #2 of the "
                  "group); rank 2 never entered it (last seen in barrier #1 on group world); "
                  "rank 2 has stopped entering collectives: check what it is doing"),
              std::string::npos)
        << describe(results);
    std::ifstream in(reports.path / stall_report_name(r));
    std::stringstream text;
    text << in.rdbuf();
    const Result<StallReport> report = StallReport::decode(text.str());
    ASSERT_TRUE(report) << report.status().message() << "\n" << text.str();
    EXPECT_EQ(report->reporter, r);
    EXPECT_EQ(report->timeout_ms, 1500);
    EXPECT_EQ(report->timed_out.describe(), "all_reduce_sum #2 on group world");
    EXPECT_EQ(report->stalled, std::vector<int>{2});
  }
  EXPECT_EQ(results[2].exit_code, 0) << describe(results);
  EXPECT_FALSE(std::filesystem::exists(reports.path / stall_report_name(2)));
  // The stalled rank sleeps 1.5 + 3 s; the reads after the timeout are
  // bounded by 1 s and do not add to that.
  EXPECT_LT(elapsed, 15s);
}

TEST(Gloo, GlooSocketIfnameIsHonoured) { expect_collectives_pass(1, 2, {"GLOO_SOCKET_IFNAME=lo"}); }

TEST(Gloo, AnInterfaceThisHostLacksIsRefusedBeforeTheRendezvous) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  auto children = rank_children(kWorker, {"collectives", "1", "2", "20000", "20000"}, 2, port);
  for (auto& c : children) c.env.push_back("GLOO_SOCKET_IFNAME=fulcrum-bogus0");
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_children(children, 30s);
  // Refused at once, not after the 20 s rendezvous timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 2) << describe(results);
    EXPECT_NE(r.output.find("ERROR: GLOO_SOCKET_IFNAME='fulcrum-bogus0' is not a network "
                            "interface of this host; this host has lo"),
              std::string::npos)
        << describe(results);
  }
}

}  // namespace
}  // namespace fulcrum::comm
