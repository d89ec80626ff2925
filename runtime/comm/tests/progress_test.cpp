// Progress records, the stall analysis and the report to the launcher,
// without LibTorch: jobs are simulated by entering collectives in the order
// a real step would, then one rank stops.
#include "comm/progress.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace fulcrum::comm {
namespace {

// A DP x CP job's records, advanced collective by collective.
struct SimulatedJob {
  int dp, cp;
  std::vector<std::optional<ProgressRecord>> records;

  SimulatedJob(int dp_size, int cp_size)
      : dp(dp_size), cp(cp_size), records(static_cast<std::size_t>(dp_size * cp_size)) {
    for (auto& r : records) r = ProgressRecord();
  }
  std::string cp_group(int rank) const { return "cp[dp=" + std::to_string(rank / cp) + "]"; }
  std::string dp_group(int rank) const { return "dp[cp=" + std::to_string(rank % cp) + "]"; }
  std::int64_t enter(int rank, const std::string& group, const std::string& op) {
    return records[static_cast<std::size_t>(rank)]->enter(group, op);
  }
  // One step's collectives on every rank but those in `skip`.
  void step(const std::vector<int>& skip = {}) {
    for (int r = 0; r < dp * cp; ++r) {
      if (std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
      enter(r, "world", "all_gather");              // DP check
      enter(r, cp_group(r), "all_gather");          // CP check
      enter(r, cp_group(r), "reduce_scatter_sum");  // attention
      enter(r, dp_group(r), "all_reduce_sum");      // gradients
      enter(r, "world", "all_gather");              // verdict
    }
  }
  CollectiveRef last(int rank) const {
    const ProgressRecord& r = *records[static_cast<std::size_t>(rank)];
    const auto& g = r.groups.at(r.last_group);
    return {g.last_op, g.entered, r.last_group};
  }
  StallAnalysis analyse(int reporter, const std::vector<int>& members) const {
    return analyse_stall(reporter, last(reporter), members, records, job_groups(dp * cp, dp, cp));
  }
};

// Step 1 complete; in step 2 every rank passes the DP check, then `stalled`
// stops; the others go on until they wait.
SimulatedJob dp2_cp2_stall_in_step_two(int stalled) {
  SimulatedJob job(2, 2);
  job.step();
  for (int r = 0; r < 4; ++r) job.enter(r, "world", "all_gather");
  for (int r = 0; r < 4; ++r) {
    if (r == stalled) continue;
    job.enter(r, job.cp_group(r), "all_gather");
    // The CP peer of the stalled rank waits there; the other group finishes
    // its rows and waits in the verdict.
    if (r / 2 != stalled / 2) {
      job.enter(r, job.cp_group(r), "reduce_scatter_sum");
      job.enter(r, "world", "all_gather");
    }
  }
  return job;
}

TEST(ProgressRecord, CountsPerGroupAndRoundTrips) {
  ProgressRecord r;
  EXPECT_EQ(r.enter("world", "all_gather"), 1);
  EXPECT_EQ(r.enter("cp[dp=1]", "reduce_scatter_sum"), 1);
  EXPECT_EQ(r.enter("world", "barrier"), 2);
  const ProgressRecord back = ProgressRecord::decode(r.encode()).value();
  EXPECT_EQ(back.last_group, "world");
  EXPECT_EQ(back.groups.at("world").entered, 2);
  EXPECT_EQ(back.groups.at("world").last_op, "barrier");
  EXPECT_EQ(back.groups.at("cp[dp=1]").entered, 1);
  EXPECT_EQ(back.encode(), r.encode());
  // Nothing entered yet is a record too, distinct from "unreadable".
  const ProgressRecord empty = ProgressRecord::decode(ProgressRecord().encode()).value();
  EXPECT_TRUE(empty.groups.empty());
  EXPECT_TRUE(empty.last_group.empty());
  for (const char* bad : {"", "g world x all_gather\nlast world\n", "last cp[dp=0]\n",
                          "g world 1 all_gather\n", "hello\nlast -\n"}) {
    EXPECT_FALSE(ProgressRecord::decode(bad)) << bad;
  }
}

TEST(JobGroups, NamesMatchTheLayout) {
  const MembersOf members_of = job_groups(8, 2, 4);
  for (int rank = 0; rank < 8; ++rank) {
    const GroupLayout l = make_group_layout(rank, 8, 2, 4).value();
    EXPECT_EQ(members_of(l.world.name), l.world.ranks);
    EXPECT_EQ(members_of(l.cp.name), l.cp.ranks);
    EXPECT_EQ(members_of(l.dp.name), l.dp.ranks);
  }
  EXPECT_TRUE(members_of("cp[dp=2]").empty());
  EXPECT_TRUE(members_of("dp[cp=x]").empty());
  EXPECT_TRUE(members_of("tp[dp=0]").empty());
}

TEST(StallAnalysis, TheCpPeerNamesTheStalledRank) {
  const SimulatedJob job = dp2_cp2_stall_in_step_two(3);
  const StallAnalysis a = job.analyse(2, {2, 3});
  EXPECT_EQ(a.missing, std::vector<int>{3});
  EXPECT_EQ(a.stalled, std::vector<int>{3});
  EXPECT_EQ(a.last_seen.at(3).describe(), "all_gather #3 on group world");
  ASSERT_EQ(a.waiting.size(), 3u);
  EXPECT_EQ(a.waiting[0].rank, 0);
  EXPECT_EQ(a.waiting[0].in.describe(), "all_gather #4 on group world");
  EXPECT_EQ(a.waiting[0].for_ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(a.waiting[2].rank, 2);
  EXPECT_EQ(a.waiting[2].in.describe(), "all_gather #3 on group cp[dp=1]");
  EXPECT_EQ(describe_stall(a),
            "; rank 3 never entered it (last seen in all_gather #3 on group world); rank 3 has "
            "stopped entering collectives: check what it is doing");
}

TEST(StallAnalysis, AWorldRankFollowsTheWaitsToTheStalledRank) {
  const SimulatedJob job = dp2_cp2_stall_in_step_two(3);
  // Rank 0 waits in the verdict for ranks 2 and 3; rank 2 itself waits for 3.
  const StallAnalysis a = job.analyse(0, {0, 1, 2, 3});
  EXPECT_EQ(a.missing, (std::vector<int>{2, 3}));
  EXPECT_EQ(a.stalled, std::vector<int>{3});
  EXPECT_EQ(describe_stall(a),
            "; ranks 2, 3 never entered it (rank 2 is waiting for rank 3 in all_gather #3 on "
            "group cp[dp=1]; rank 3 was last seen in all_gather #3 on group world); rank 3 has "
            "stopped entering collectives: check what it is doing");
}

// Hybrid mode, W = 4 as dp 4 x cp 1: one step done; in the next, every rank
// passes the schedule check, then rank 3 stops. Ranks 1 and 2 share a slot
// with rank 3 and wait in their exchanges with it (each pair group entered
// once per exchange, rank 2 having moved on to waiting for rank 3 after its
// message from rank 1 arrived); rank 0, whose slot ran alone, waits in the
// gradient all-reduce.
SimulatedJob hybrid_stall_in_a_slot() {
  SimulatedJob job(4, 1);
  for (int r = 0; r < 4; ++r) job.enter(r, "world", "all_gather");  // schedule check
  for (int r : {1, 2}) {
    job.enter(r, pair_group(r, 3), "exchange");
    job.enter(r, pair_group(1, 2), "exchange");
  }
  job.records[1]->wait_in(pair_group(1, 3));
  job.records[2]->wait_in(pair_group(2, 3));
  job.enter(0, "world", "all_reduce_sum");
  return job;
}

TEST(StallAnalysis, PointToPointWaitsAreFollowedToTheStalledRank) {
  const SimulatedJob job = hybrid_stall_in_a_slot();
  // Rank 0 timed out in the all-reduce: ranks 1 and 2 are behind it, but
  // blocked in exchanges with rank 3, which is the one that stopped.
  const StallAnalysis a = job.analyse(0, {0, 1, 2, 3});
  EXPECT_EQ(a.missing, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(a.stalled, std::vector<int>{3});
  EXPECT_EQ(a.last_seen.at(3).describe(), "all_gather #1 on group world");
  // Rank 1 timed out in its exchange with rank 3.
  const StallAnalysis b =
      analyse_stall(1, {"exchange", 1, pair_group(1, 3)}, {1, 3}, job.records, job_groups(4, 4, 1));
  EXPECT_EQ(b.missing, std::vector<int>{3});
  EXPECT_EQ(b.stalled, std::vector<int>{3});
  EXPECT_EQ(describe_stall(b),
            "; rank 3 never entered it (last seen in all_gather #1 on group world); rank 3 has "
            "stopped entering collectives: check what it is doing");
}

TEST(JobGroups, PairGroupsNameTwoRanksOfTheWorld) {
  const MembersOf members_of = job_groups(6, 6, 1);
  EXPECT_EQ(pair_group(4, 1), "p2p[1,4]");
  EXPECT_EQ(pair_group(1, 4), "p2p[1,4]");
  EXPECT_EQ(members_of("p2p[1,4]"), (std::vector<int>{1, 4}));
  for (const char* bad : {"p2p[4,1]", "p2p[1,1]", "p2p[1,6]", "p2p[-1,2]", "p2p[1]", "p2p[a,b]"}) {
    EXPECT_TRUE(members_of(bad).empty()) << bad;
  }
}

TEST(StallAnalysis, TheStoreHostStallingIsNamedLikeAnyRank) {
  const SimulatedJob job = dp2_cp2_stall_in_step_two(0);
  EXPECT_EQ(job.analyse(1, {0, 1}).stalled, std::vector<int>{0});
  EXPECT_EQ(job.analyse(3, {0, 1, 2, 3}).stalled, std::vector<int>{0});
}

TEST(StallAnalysis, ARankStalledBeforeItsFirstCollective) {
  SimulatedJob job(1, 2);
  job.enter(0, "world", "all_gather");
  const StallAnalysis a = job.analyse(0, {0, 1});
  EXPECT_EQ(a.stalled, std::vector<int>{1});
  EXPECT_EQ(a.last_seen.count(1), 0u);
  EXPECT_EQ(describe_stall(a).substr(0, 48), "; rank 1 never entered it (it entered no collect");
}

TEST(StallAnalysis, CollectivesCalledInDifferentOrdersNameNoStalledRank) {
  // Rank 0 is in world, rank 1 in cp: each waits for the other (a bug in
  // the caller, not a stall). Both are reported waiting; nobody stalled.
  SimulatedJob job(1, 2);
  job.enter(0, "world", "all_reduce_sum");
  job.enter(1, "cp[dp=0]", "all_gather");
  const StallAnalysis a = job.analyse(0, {0, 1});
  EXPECT_EQ(a.missing, std::vector<int>{1});
  EXPECT_TRUE(a.stalled.empty());
  EXPECT_EQ(describe_stall(a),
            "; rank 1 never entered it (rank 1 is waiting for rank 0 in all_gather #1 on group "
            "cp[dp=0])");
}

TEST(StallAnalysis, UnreadableRecordsAreSaidSo) {
  SimulatedJob job = dp2_cp2_stall_in_step_two(3);
  job.records[3].reset();
  const StallAnalysis a = job.analyse(2, {2, 3});
  EXPECT_TRUE(a.stalled.empty());
  EXPECT_EQ(a.unknown, std::vector<int>{3});
  EXPECT_EQ(describe_stall(a), "; rank 3 never entered it (rank 3's progress could not be read)");
}

TEST(StallAnalysis, NothingToSayWhenEveryMemberEntered) {
  SimulatedJob job(1, 2);
  job.enter(0, "world", "barrier");
  job.enter(1, "world", "barrier");
  const StallAnalysis a = job.analyse(0, {0, 1});
  EXPECT_TRUE(a.missing.empty());
  EXPECT_EQ(describe_stall(a), "");
}

TEST(Ranks, ListsAndRanges) {
  EXPECT_EQ(format_ranks({2, 0, 1}), "0, 1, 2");
  EXPECT_EQ(format_ranks({0, 1, 2, 3, 6, 9, 10}), "0-3, 6, 9, 10");
  EXPECT_EQ(format_ranks({5, 5}), "5");
  EXPECT_EQ(ranks_phrase({3}), "rank 3");
  EXPECT_EQ(ranks_phrase({3, 1}), "ranks 1, 3");
  EXPECT_EQ(format_duration_ms(3000), "3 s");
  EXPECT_EQ(format_duration_ms(1500), "1.5 s");
  EXPECT_EQ(format_duration_ms(250), "250 ms");
}

StallReport report_of(const SimulatedJob& job, int reporter, const std::vector<int>& members) {
  const StallAnalysis a = job.analyse(reporter, members);
  StallReport r;
  r.reporter = reporter;
  r.timeout_ms = 3000;
  r.timed_out = job.last(reporter);
  r.stalled = a.stalled;
  r.waiting = a.waiting;
  return r;
}

TEST(StallReport, RoundTripsAndRefusesPartialFiles) {
  const StallReport r = report_of(dp2_cp2_stall_in_step_two(3), 2, {2, 3});
  const std::string text = r.encode();
  const StallReport back = StallReport::decode(text).value();
  EXPECT_EQ(back.reporter, 2);
  EXPECT_EQ(back.timeout_ms, 3000);
  EXPECT_EQ(back.timed_out.describe(), "all_gather #3 on group cp[dp=1]");
  EXPECT_EQ(back.stalled, std::vector<int>{3});
  ASSERT_EQ(back.waiting.size(), 3u);
  EXPECT_EQ(back.waiting[1].rank, 1);
  EXPECT_EQ(back.waiting[1].in.describe(), "all_gather #4 on group world");
  EXPECT_EQ(back.encode(), text);
  // Every prefix that ends before the "end" line (a writer stopped half
  // way) is refused.
  for (std::size_t n = 0; n + 1 < text.size(); ++n) {
    EXPECT_FALSE(StallReport::decode(text.substr(0, n))) << n;
  }
  EXPECT_FALSE(StallReport::decode("fulcrum-stall-report 2\nreporter 1\nend\n"));
}

TEST(StallSummary, NamesTheStalledRankAndWhoWaited) {
  const SimulatedJob job = dp2_cp2_stall_in_step_two(3);
  EXPECT_EQ(stall_summary({report_of(job, 2, {2, 3})}).value(),
            "fulcrum: rank 3 stalled (ranks 0, 1, 2 were waiting for it in all_gather on group "
            "cp[dp=1] and all_gather on group world; rank 2 timed out after 3 s); stopped all "
            "ranks");
  // Rank 0's report arriving too changes only who timed out.
  EXPECT_EQ(stall_summary({report_of(job, 0, {0, 1, 2, 3}), report_of(job, 2, {2, 3})}).value(),
            "fulcrum: rank 3 stalled (ranks 0, 1, 2 were waiting for it in all_gather on group "
            "world and all_gather on group cp[dp=1]; ranks 0, 2 timed out after 3 s); stopped "
            "all ranks");
}

TEST(StallSummary, NoneWithoutAStalledRank) {
  StallReport r;
  r.reporter = 1;
  r.timed_out = {"barrier", 1, "world"};
  EXPECT_FALSE(stall_summary({r}));
  // A rank that itself timed out is never the one named.
  r.stalled = {0};
  StallReport other = r;
  other.reporter = 0;
  other.stalled = {1};
  EXPECT_FALSE(stall_summary({r, other}));
}

}  // namespace
}  // namespace fulcrum::comm
