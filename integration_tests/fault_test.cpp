// Faults and bad input, end to end: real workers, started by `fulcrum train`
// or directly as torchrun would, fail on purpose through the test-only
// FULCRUM_TEST_* variables (runtime/train/consensus.h). Every scenario checks
// what a user would see: the exit code, the one line that names the cause,
// how long it took, and that no worker outlived the job.
//
// Every child runs under fault_driver.h's deadline and marker. Bad input,
// refused before or while the workers start, is bad_input_test.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fault_driver.h"
#include "harness.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;
using namespace fulcrum::it;  // the fault driver (fault_driver.h)

// --- faults ------------------------------------------------------------------

// From the end of step 1 (rank 0's progress line) to the launcher's exit.
double seconds_after_step_one(const ChildResult& r) {
  const std::optional<double> at = r.seen_at("[rank 0] step 1/3");
  return at ? r.wall_s - *at : 1e9;
}

// Test-only fault `kind` on `rank` in step 2 of `job`, with `sets`.
ChildResult inject(const FaultJob& job, const std::string& kind, int rank,
                   const std::vector<std::string>& sets = {}) {
  return job.train({"FULCRUM_TEST_FAULT=" + kind, "FULCRUM_TEST_FAULT_RANK=" + std::to_string(rank),
                    "FULCRUM_TEST_FAULT_STEP=2"},
                   sets);
}

// Rank 1 died in step 2: the launcher saw it at once, without waiting for
// any collective or exchange to time out, and left nothing behind.
void expect_killed_rank_ends_the_job_at_once(const FaultJob& job, const ChildResult& r) {
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r;
  EXPECT_EQ(last_line(r.err), "fulcrum: rank 1 killed by signal SIGKILL") << r;
  EXPECT_LT(seconds_after_step_one(r), kOpTimeoutS) << r;
  expect_no_orphans(job.marker);
}

TEST(Fault, KilledWorkerEndsTheJobAtOnce) {
  FaultJob job;
  const ChildResult r = inject(job, "kill", 1);
  expect_killed_rank_ends_the_job_at_once(job, r);
  std::printf("[ figure ] kill: launcher exit %.2f s after step 1, %.2f s in all\n",
              seconds_after_step_one(r), r.wall_s);
}

// A rank that quits with status 0 in the middle of the run: the job fails,
// naming it, instead of reporting success with nothing trained.
TEST(Fault, AWorkerThatExitsZeroMidRunFailsTheJob) {
  FaultJob job;
  const ChildResult r = inject(job, "exit0", 2);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(last_line(r.err),
            "fulcrum: rank 2 exited with status 0 before its run finished (it left no completion "
            "note); stopped all ranks: the run did not complete")
      << r;
  expect_no_orphans(job.marker);
}

TEST(Fault, ThrowingWorkerEndsTheJobWithItsMessage) {
  FaultJob job;
  const ChildResult r = inject(job, "throw", 2);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  // Rank 2 unwinds (closing its connections) before it prints, so a peer
  // that lost the connection may exit first; it noted the lost peer, and the
  // launcher names rank 2, the first rank to fail on its own
  // (docs/RELIABILITY.md, "The launcher's last line"). Under LeakSanitizer a
  // rank that is exiting is briefly in tracing stop, which the launcher
  // reports as a stopped peer, so the line is matched on the failed rank.
  EXPECT_TRUE(contains(last_line(r.err), "rank 2 failed with exit status 1")) << r;
  EXPECT_TRUE(contains(r.err,
                       "[rank 2] fulcrum-worker: rank 2: internal error: injected failure "
                       "(test-only FULCRUM_TEST_FAULT=throw) in step 2"))
      << r;
  for (int peer : {0, 1, 3}) {
    const std::string prefix =
        "[rank " + std::to_string(peer) + "] fulcrum-worker: rank " + std::to_string(peer) + ": ";
    for (const std::string& l : lines_of(r.err)) {
      if (l.rfind(prefix, 0) == 0) {
        EXPECT_TRUE(contains(l, "failed: ") && contains(l, "a peer rank may have exited"))
            << "rank " << peer << " reported something other than the lost peer: " << l;
      }
    }
  }
  EXPECT_LT(seconds_after_step_one(r), kOpTimeoutS) << r;
  expect_no_orphans(job.marker);
  std::printf("[ figure ] throw: launcher exit %.2f s after step 1, %.2f s in all\n",
              seconds_after_step_one(r), r.wall_s);
}

// The launcher's verdict on a stall of `rank` in step 2 (the others wait in
// the row's plan check on its CP group and in the step's verdict on world),
// and the timing and cleanup of every fault.
void expect_stall_named(const ChildResult& r, const FaultJob& job, int rank) {
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  const std::string cp_group = "cp[dp=" + std::to_string(rank / 2) + "]";
  std::vector<int> others;
  for (int o = 0; o < 4; ++o) {
    if (o != rank) others.push_back(o);
  }
  std::string others_text;
  for (int o : others) others_text += (others_text.empty() ? "" : ", ") + std::to_string(o);
  // The final line names the stalled rank, whoever gave up first; then the
  // ranks that waited, where, and which of them timed out.
  const std::string last = last_line(r.err);
  EXPECT_EQ(last.rfind("fulcrum: rank " + std::to_string(rank) + " stalled (ranks " + others_text +
                           " were waiting for it in ",
                       0),
            0u)
      << r;
  EXPECT_TRUE(contains(last, "all_gather on group " + cp_group)) << r;
  EXPECT_TRUE(contains(last, "all_gather on group world")) << r;
  EXPECT_TRUE(contains(last, " timed out after 3 s); stopped all ranks")) << r;
  // The first rank to give up said it in its own line too: the CP peer in
  // the plan check, or a rank of the other CP group in the verdict.
  const std::string who = "rank " + std::to_string(rank);
  bool named = false;
  for (const std::string& l : lines_of(r.err)) {
    if (contains(l, "timed out after 3 s") &&
        (contains(l, who + " never entered it (last seen in ") ||
         contains(l, who + " was last seen in ")) &&
        contains(l, who + " has stopped entering collectives")) {
      named = true;
    }
  }
  EXPECT_TRUE(named) << r;
  EXPECT_FALSE(contains(r.err, "[rank " + std::to_string(rank) + "] fulcrum-worker"))
      << "rank " << rank << " stalled silently: " << r;
  const double after = seconds_after_step_one(r);
  EXPECT_GT(after, kOpTimeoutS - 0.5) << r;
  EXPECT_LT(after, kOpTimeoutS + 5) << r;
  expect_no_orphans(job.marker);
}

TEST(Fault, StalledWorkerIsEndedByTheCollectiveTimeout) {
  FaultJob job;
  const ChildResult r = inject(job, "stall", 3);
  // Rank 3 never answers: its CP peer (rank 2) times out in the row's plan
  // check on cp[dp=1], ranks 0 and 1 in the step's verdict on world. Each
  // reads the others' progress from the store, follows who waits for whom
  // to rank 3, and the launcher names it.
  expect_stall_named(r, job, 3);
  std::printf(
      "[ figure ] stall: launcher exit %.2f s after step 1 (op timeout %.0f s), %.2f s in all\n",
      seconds_after_step_one(r), kOpTimeoutS, r.wall_s);
  std::printf("[ figure ] stall: %s\n", last_line(r.err).c_str());
}

TEST(Fault, StalledStoreHostIsNamedToo) {
  // Rank 0 hosts the store. Its training thread stalls, but the store runs
  // on a thread of its own and still answers the others' reads.
  FaultJob job;
  const ChildResult r = inject(job, "stall", 0);
  expect_stall_named(r, job, 0);
  std::printf(
      "[ figure ] stall of rank 0: launcher exit %.2f s after step 1 (op timeout %.0f s), %.2f s "
      "in all\n",
      seconds_after_step_one(r), kOpTimeoutS, r.wall_s);
}

TEST(Fault, WorkerStalledBeforeTheRendezvousIsEndedByItsTimeout) {
  FaultJob job;
  const ChildResult r = job.train(
      {"FULCRUM_TEST_FAULT=stall", "FULCRUM_TEST_FAULT_RANK=1", "FULCRUM_TEST_FAULT_STEP=0"},
      {"dist.timeout_s=" + std::to_string(static_cast<int>(kRendezvousTimeoutS))});
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  // fulcrum train's ranks meet in the launcher's private directory.
  EXPECT_TRUE(contains(r.err, "rendezvous at directory /")) << r;
  EXPECT_TRUE(contains(r.err, "timed out after 3 s")) << r;
  // Every rank that came counts who came, and names who did not.
  EXPECT_TRUE(contains(r.err, "3 of 4 ranks joined (rank 1 has not joined)")) << r;
  EXPECT_LT(r.wall_s, kRendezvousTimeoutS + 10) << r;
  expect_no_orphans(job.marker);
  std::printf("[ figure ] stall before rendezvous: launcher exit after %.2f s (timeout %.0f s)\n",
              r.wall_s, kRendezvousTimeoutS);
}

// --- hybrid mode -------------------------------------------------------------

// The same job as one pool of four ranks placed by the hybrid scheduler
// (T = 16: the 64-token pieces run on four ranks, shorter ones on fewer):
// faults now meet the ranks in a slot's point-to-point exchange.
const std::vector<std::string> kHybrid = {"parallel.mode=hybrid", "parallel.dp_size=1",
                                          "parallel.cp_size=1", "parallel.world_size=4",
                                          "parallel.max_tokens_per_rank=16"};

TEST(HybridFault, KilledWorkerEndsTheJobAtOnce) {
  FaultJob job;
  expect_killed_rank_ends_the_job_at_once(job, inject(job, "kill", 1, kHybrid));
}

// parallel.hybrid.free_single_slots: rank 1 dies right after its first
// claim of step 2 (a free slot taken and never run, or its last, failed
// claim). Its slot is lost with it, but the job ends at once as for any
// killed rank: the others never wait for a claim, only in the gradient
// all-reduce, where the launcher has already stopped them.
TEST(HybridFault, RankKilledAfterClaimingAFreeSlotEndsTheJobAtOnce) {
  FaultJob job;
  std::vector<std::string> sets = kHybrid;
  sets.push_back("parallel.hybrid.free_single_slots=true");
  expect_killed_rank_ends_the_job_at_once(job, inject(job, "kill_claim", 1, sets));
}

TEST(HybridFault, ThrowingWorkerEndsTheJobWithItsMessage) {
  FaultJob job;
  const ChildResult r = inject(job, "throw", 1, kHybrid);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(contains(r.err,
                       "[rank 1] fulcrum-worker: rank 1: internal error: injected failure "
                       "(test-only FULCRUM_TEST_FAULT=throw) in step 2"))
      << r;
  // The others lost their peer in a slot's exchange, and say where.
  for (int peer : {0, 2, 3}) {
    const std::string prefix =
        "[rank " + std::to_string(peer) + "] fulcrum-worker: rank " + std::to_string(peer) + ": ";
    for (const std::string& l : lines_of(r.err)) {
      if (l.rfind(prefix, 0) != 0) continue;
      EXPECT_TRUE(contains(l, "slot ") && contains(l, "(wave ") && contains(l, "exchange") &&
                  contains(l, "a peer rank may have exited"))
          << "rank " << peer << ": " << l;
    }
  }
  EXPECT_LT(seconds_after_step_one(r), kOpTimeoutS) << r;
  expect_no_orphans(job.marker);
}

TEST(HybridFault, StalledWorkerIsNamedWithTheSlotTheWaveAndThePeer) {
  FaultJob job;
  const ChildResult r = inject(job, "stall", 3, kHybrid);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  // Rank 3 never runs its first slot of step 2; the members waiting for it
  // time out in that slot's exchange, each naming the slot, its wave, the
  // pass and rank 3 (and, from the progress board, that rank 3 stopped).
  int named = 0;
  for (const std::string& l : lines_of(r.err)) {
    if (!contains(l, "fulcrum-worker: rank ")) continue;
    EXPECT_TRUE(contains(l, "exchange on group world timed out after 3 s")) << l;
    if (contains(l, "slot ") && contains(l, " (wave ") && contains(l, ") forward: ") &&
        contains(l, "waiting for the receive from rank 3")) {
      ++named;
    }
  }
  EXPECT_GE(named, 1) << r;
  // The waits are in the progress board as pair groups: the launcher
  // follows them to rank 3 and names it.
  const std::string last = last_line(r.err);
  EXPECT_EQ(last.rfind("fulcrum: rank 3 stalled (ranks ", 0), 0u) << r;
  EXPECT_TRUE(contains(last, "were waiting for it in exchange on group p2p[")) << r;
  EXPECT_TRUE(contains(last, " timed out after 3 s); stopped all ranks")) << r;
  EXPECT_FALSE(contains(r.err, "[rank 3] fulcrum-worker")) << "rank 3 stalled silently: " << r;
  const double after = seconds_after_step_one(r);
  EXPECT_GT(after, kOpTimeoutS - 0.5) << r;
  EXPECT_LT(after, kOpTimeoutS + 5) << r;
  expect_no_orphans(job.marker);
}

TEST(HybridConsensus, DivergentScheduleEndsTheJobNamingTheRank) {
  FaultJob job;
  const ChildResult r =
      job.train({"FULCRUM_TEST_PERTURB=plan", "FULCRUM_TEST_PERTURB_RANK=2"}, kHybrid);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(contains(r.err,
                       "plan consensus failed at step 1 on group world: the schedule of rank 2 "
                       "(scheduler hybrid, "))
      << r;
  EXPECT_TRUE(contains(r.err, "differs from that of ranks 0, 1, 3 (scheduler hybrid, ")) << r;
  EXPECT_LT(r.wall_s, kOpTimeoutS + 20) << r;
  expect_no_orphans(job.marker);
}

// A plugin whose compact answer (ABI 1.4) names a rule that plans another
// shape than it stated: the ranks that expand slot 0 refuse it as the
// plugin's fault before any exchange, the schedule check shares the
// refusal, and every rank ends with that line and exit 2.
TEST(HybridFault, CompactAnswerWithABadRuleEndsTheJobNamingTheSlot) {
  FaultJob job;
  std::vector<std::string> sets = kHybrid;
  for (const char* set :
       {"balancer.plugin=" FULCRUM_BROKEN_COMPACT_PLUGIN, "balancer.schedule.strategy=fixed",
        "balancer.cp.strategy=contiguous", "balancer.dp.strategy=round_robin"}) {
    sets.push_back(set);
  }
  const ChildResult r = job.train({}, sets);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err,
                       "scheduling step 1 with 'fixed' failed on rank 0: balancer "
                       "'broken_compact': schedule slot 0 (CP rule 'broken_rule' on "))
      << r;
  EXPECT_TRUE(contains(r.err, "the schedule said")) << r;
  // Every rank stops on the refusing rank's line (the schedule check shares it).
  EXPECT_TRUE(contains(r.err, "failed with exit status 2 (the same error on ranks ")) << r;
  expect_no_orphans(job.marker);
}

// A plugin whose rules plan a slot's row one way on even ranks and another
// on odd ones (both valid, of the stated shape): the members of a CP slot
// would attend with different plans, silently. The schedule check compares
// the plans each member expanded, and every rank stops naming the slot,
// exit 2, before any exchange.
TEST(HybridFault, CompactRuleExpandedDifferentlyByTheSlotsMembersEndsTheJob) {
  FaultJob job;
  std::vector<std::string> sets = kHybrid;
  for (const char* set :
       {"balancer.plugin=" FULCRUM_BROKEN_RANK_PLAN_PLUGIN, "balancer.schedule.strategy=fixed",
        "balancer.cp.strategy=contiguous", "balancer.dp.strategy=round_robin"}) {
    sets.push_back(set);
  }
  const ChildResult r = job.train({}, sets);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(contains(r.err, "(CP rule 'broken_rule' on ")) << r;
  EXPECT_TRUE(contains(r.err, " ranks) expanded to plan 0x")) << r;
  EXPECT_TRUE(contains(r.err, "a plan by rule must be the same on every rank")) << r;
  expect_no_orphans(job.marker);
}

// Not a fault but the one input only the workers check: the Gloo interface.
// Every rank refuses it before the rendezvous, with exit status 2.
// --- plan consensus -----------------------------------------------------------

// Each rank's stderr holds the error, once, as its last line.
void expect_every_rank(const std::vector<ChildResult>& ranks, const std::string& what) {
  ASSERT_EQ(ranks.size(), 4u);
  std::string first;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const ChildResult& c = ranks[r];
    EXPECT_FALSE(c.timed_out) << "rank " << r << ": " << c;
    EXPECT_EQ(c.exit_code, 1) << "rank " << r << ": " << c;
    const std::string line = last_line(c.err);
    EXPECT_TRUE(contains(line, "fulcrum-worker: rank " + std::to_string(r) + ": " + what))
        << "rank " << r << ": " << c;
    // The same cause on every rank, whoever noticed it first.
    const std::string cause = line.substr(std::min(line.size(), line.find("plan consensus")));
    if (r == 0) first = cause;
    EXPECT_EQ(cause, first) << "rank " << r;
  }
}

// --- started without fulcrum train ---------------------------------------------

// The launch docs/CONFIGS.md gives for torchrun, done by a shell: the four
// workers get what `torchrun --nproc_per_node 4 --rdzv_backend c10d
// --no_python fulcrum-worker` sets, meet at the TCPStore rank 0 hosts on
// MASTER_ADDR:MASTER_PORT (no FULCRUM_RENDEZVOUS_DIR, no completion note),
// and train. Debian's torchrun 1.13 fails before it starts a worker, so the
// shell stands in for it.
TEST(DirectLaunch, WorkersStartedWithTorchrunsVariablesTrain) {
  FaultJob job;
  const std::string script =
      "for r in 0 1 2 3; do RANK=$r LOCAL_RANK=$r \"$WORKER\" --config \"$CONFIG\" "
      ">\"$DIR/out.$r\" 2>\"$DIR/err.$r\" & pids+=($!); done; "
      "status=0; for p in \"${pids[@]}\"; do wait \"$p\" || status=1; done; "
      "cat \"$DIR\"/err.*; exit $status";
  const ChildResult r =
      run_one({"/bin/bash", "-c", script}, seconds(90),
              job.env({"WORKER=" + std::string(FULCRUM_WORKER), "CONFIG=" + job.config,
                       "DIR=" + job.dir.file(""), "MASTER_ADDR=127.0.0.1",
                       "MASTER_PORT=" + std::to_string(free_port()), "WORLD_SIZE=4",
                       "LOCAL_WORLD_SIZE=4"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<std::string> out(4);
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream in(job.dir.file("out." + std::to_string(rank)));
    out[static_cast<std::size_t>(rank)].assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_TRUE(contains(out[0], "step 3/3")) << out[0];
  EXPECT_TRUE(contains(out[0], "fulcrum train: ")) << out[0];
  EXPECT_TRUE(contains(out[0], ": 3 steps in ")) << out[0];
  for (int rank = 1; rank < 4; ++rank) {
    EXPECT_FALSE(contains(out[static_cast<std::size_t>(rank)], "fulcrum train: ")) << rank;
  }
  expect_no_orphans(job.marker);
}

// srun's and mpirun's variables start the same job (their launchers are not
// installed here; the workers read what they would set).
TEST(DirectLaunch, WorkersStartedWithSrunsAndMpirunsVariablesTrain) {
  FaultJob job;
  const std::vector<std::array<const char*, 4>> flavours = {
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"}};
  for (const auto& [rank_var, size_var, local_var, local_size_var] : flavours) {
    const int port = free_port();
    std::vector<Child> children;
    for (int r = 0; r < 4; ++r) {
      const std::string n = std::to_string(r);
      children.push_back(
          {{FULCRUM_WORKER, "--config", job.config},
           job.env({std::string(rank_var) + "=" + n, std::string(size_var) + "=4",
                    std::string(local_var) + "=" + n, std::string(local_size_var) + "=4",
                    "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)})});
    }
    const std::vector<ChildResult> ranks = run_all(children, seconds(90));
    for (const ChildResult& c : ranks) EXPECT_EQ(c.exit_code, 0) << rank_var << ": " << c;
    EXPECT_TRUE(contains(ranks[0].out, ": 3 steps in ")) << rank_var << ": " << ranks[0];
  }
  expect_no_orphans(job.marker);
}

TEST(Consensus, OneRankWithOtherDocumentLengthsFailsEveryRank) {
  FaultJob job;
  const std::vector<ChildResult> ranks = job.ranks(
      {"FULCRUM_TEST_PERTURB=cp", "FULCRUM_TEST_PERTURB_RANK=1", "FULCRUM_TEST_PERTURB_STEP=2"});
  // Rank 1's first row of step 2 holds the same tokens split into other
  // documents. Its CP group sees it before the attention; ranks 2 and 3
  // learn it at the step's verdict: nobody waits for a timeout.
  expect_every_rank(ranks,
                    "plan consensus failed at step 2, row 0 of group cp[dp=0]: the CP workload "
                    "differs between rank 0 (N=64, ");
  for (const ChildResult& c : ranks) {
    EXPECT_TRUE(contains(c.err, ") and rank 1 (N=64, ")) << c;
    EXPECT_LT(c.wall_s, kOpTimeoutS + 20) << c;
  }
  expect_no_orphans(job.marker);
}

TEST(Consensus, OneRankWithOtherSampleLengthsFailsEveryRankAtTheDpCheck) {
  FaultJob job;
  const std::vector<ChildResult> ranks =
      job.ranks({"FULCRUM_TEST_PERTURB=dp", "FULCRUM_TEST_PERTURB_RANK=3"});
  expect_every_rank(ranks,
                    "plan consensus failed at step 1 on group world: the DP workload (the global "
                    "batch's sample ids and lengths) of rank 3 (4 samples, ");
  for (const ChildResult& c : ranks)
    EXPECT_TRUE(contains(c.err, "from that of ranks 0, 1, 2")) << c;
  expect_no_orphans(job.marker);
}

TEST(Consensus, DivergentPlanEndsTheJobThroughTheLauncher) {
  FaultJob job;
  const ChildResult r = job.train({"FULCRUM_TEST_PERTURB=plan", "FULCRUM_TEST_PERTURB_RANK=2"});
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(contains(r.err,
                       "plan consensus failed at step 1, row 0 of group cp[dp=1]: the CP "
                       "workload agrees"))
      << r;
  EXPECT_TRUE(contains(r.err, "but the plan differs between rank 2 (strategy ")) << r;
  EXPECT_TRUE(contains(last_line(r.err), " failed with exit status 1")) << r;
  EXPECT_LT(r.wall_s, kOpTimeoutS + 20) << r;
  expect_no_orphans(job.marker);
}

TEST(Consensus, CanBeSwitchedOff) {
  FaultJob job;
  // The DP perturbation changes only what the check hashes: with the check
  // off, nothing differs and the run completes.
  const ChildResult r = job.train({"FULCRUM_TEST_PERTURB=dp", "FULCRUM_TEST_PERTURB_RANK=3"},
                                  {"dist.plan_consensus=false"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_FALSE(contains(r.err, "plan consensus")) << r;
  expect_no_orphans(job.marker);
}

}  // namespace
