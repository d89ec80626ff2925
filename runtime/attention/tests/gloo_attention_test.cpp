// CP attention across real processes over Gloo: the all-gather and
// reduce-scatter plumbing on c10d, and the point-to-point exchange of hybrid
// schedules' slots, against dense attention.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "spawn.h"

namespace fulcrum::attention {
namespace {

using namespace std::chrono_literals;

void run_job(const std::string& mask, int dp, int cp) {
  const int port = fulcrum::testing::free_port();
  ASSERT_GT(port, 0);
  const auto results = fulcrum::testing::run_children(
      fulcrum::testing::rank_children(FULCRUM_GLOO_ATTENTION_WORKER,
                                      {mask, std::to_string(dp), std::to_string(cp)}, dp * cp,
                                      port),
      60s);
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].exit_code, 0)
        << "rank " << i << (results[i].timed_out ? " (killed at the deadline)" : "") << "\n"
        << results[i].output;
  }
}

TEST(GlooCpAttention, CausalPackedDocumentsOnThreeRanks) { run_job("causal", 1, 3); }

TEST(GlooCpAttention, SlidingWindowOnTwoCpGroupsOfTwo) { run_job("sliding:9", 2, 2); }

// Every rank runs its own slots of one schedule in wave order; slots of
// different sizes exchange K/V over the world group at the same time.
void run_schedule(const std::string& scheduler, int world) {
  const int port = fulcrum::testing::free_port();
  ASSERT_GT(port, 0);
  const auto results = fulcrum::testing::run_children(
      fulcrum::testing::rank_children(FULCRUM_GLOO_SLOT_WORKER, {scheduler, std::to_string(world)},
                                      world, port),
      60s);
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].exit_code, 0)
        << "rank " << i << (results[i].timed_out ? " (killed at the deadline)" : "") << "\n"
        << results[i].output;
  }
}

TEST(GlooSlotAttention, APeerThatNeverComesIsNamedWithTheSlotAndWave) {
  const int port = fulcrum::testing::free_port();
  ASSERT_GT(port, 0);
  const auto results = fulcrum::testing::run_children(
      fulcrum::testing::rank_children(FULCRUM_GLOO_SLOT_WORKER, {"hybrid", "4", "stall"}, 4, port),
      60s);
  int stalled = -1;
  int named = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_FALSE(results[i].timed_out) << "rank " << i << "\n" << results[i].output;
    if (results[i].output.find("stalls") != std::string::npos) stalled = static_cast<int>(i);
  }
  ASSERT_GE(stalled, 0);
  const std::string peer = "(waiting for the receive from rank " + std::to_string(stalled);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::string& out = results[i].output;
    if (static_cast<int>(i) == stalled) {
      EXPECT_EQ(results[i].exit_code, 0) << out;
    } else if (out.find(peer) != std::string::npos) {
      // "slot 0 (wave 0) forward: exchange on group world timed out after 2 s on rank 1 (...)"
      EXPECT_EQ(results[i].exit_code, 2) << out;
      EXPECT_NE(out.find(") forward: exchange on group world timed out after 2 s on rank " +
                         std::to_string(i)),
                std::string::npos)
          << out;
      EXPECT_NE(out.find("ERROR: slot "), std::string::npos) << out;
      EXPECT_NE(out.find(" (wave "), std::string::npos) << out;
      ++named;
    }
  }
  EXPECT_GE(named, 1) << "no rank named the stalled rank " << stalled;
}

TEST(GlooSlotAttention, HybridScheduleOnFourRanks) { run_schedule("hybrid", 4); }

TEST(GlooSlotAttention, MegatronDcpScheduleOnSixRanks) { run_schedule("megatron_dcp", 6); }

}  // namespace
}  // namespace fulcrum::attention
