// Plan consensus without processes: the ranks of a DP x CP job are threads,
// and the groups' all-gathers an in-process rendezvous with a deadline, so a
// broken check fails the test instead of hanging it.
#include "train/consensus.h"
#include "train/job_schema.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fulcrum::train {
namespace {

using namespace std::chrono_literals;

// --- fingerprints ------------------------------------------------------------

TEST(Fingerprint, IsAPureFunctionOfItsWords) {
  EXPECT_EQ(Fingerprint().value(), Fingerprint::kOffsetBasis);
  EXPECT_EQ(Fingerprint().add(std::int64_t{7}).value(), Fingerprint().add(std::int64_t{7}).value());
  EXPECT_NE(Fingerprint().add(std::int64_t{7}).value(), Fingerprint().add(std::int64_t{8}).value());
  // Order, and the boundaries between arrays, count.
  EXPECT_NE(Fingerprint().add(std::int64_t{1}).add(std::int64_t{2}).value(),
            Fingerprint().add(std::int64_t{2}).add(std::int64_t{1}).value());
  EXPECT_NE(
      Fingerprint().add(std::vector<std::int64_t>{1, 2}).add(std::vector<std::int64_t>{3}).value(),
      Fingerprint().add(std::vector<std::int64_t>{1}).add(std::vector<std::int64_t>{2, 3}).value());
  EXPECT_NE(Fingerprint().add(std::vector<std::int64_t>{}).value(), Fingerprint().value());
  // Strings: every byte, and the length (a trailing NUL is not padding).
  EXPECT_NE(Fingerprint().add(std::string_view("head_tail")).value(),
            Fingerprint().add(std::string_view("head_tait")).value());
  EXPECT_NE(Fingerprint().add(std::string_view("ab")).value(),
            Fingerprint().add(std::string_view("ab\0", 3)).value());
  // Frozen (and re-derived independently, in Python, from the definition
  // in consensus.h): a change of the hash is a change of the wire format
  // between ranks, and must be deliberate.
  EXPECT_EQ(Fingerprint().add(std::vector<std::int64_t>{1, 2, 3}).value(), 0xebd6e14158a2d0cbull);
}

TEST(Fingerprint, EveryBitOfEveryPositionCounts) {
  std::vector<std::int64_t> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i);
  const std::uint64_t base = Fingerprint().add(v).value();
  std::set<std::uint64_t> seen{base};
  for (std::size_t i = 0; i < v.size(); i += 37) {
    for (int bit : {0, 17, 63}) {
      std::vector<std::int64_t> w = v;
      w[i] ^= std::int64_t{1} << bit;
      EXPECT_TRUE(seen.insert(Fingerprint().add(w).value()).second) << i << " " << bit;
    }
  }
}

CpWorkload row_workload(std::int64_t n = 64) {
  CpWorkload w;
  w.tokens = n;
  w.doc_lengths = {n};
  w.block_size = 16;
  w.cp_size = 2;
  return w;
}

ShardPlan contiguous_plan(std::int64_t n = 64) {
  ShardPlan p;
  p.cp_size = 2;
  p.shard_len = n / 2;
  for (std::int64_t i = 0; i < n; ++i) p.positions.push_back(i);
  p.strategy_used = "contiguous";
  return p;
}

TEST(Fingerprint, WorkloadAndPlanFieldsAllCount) {
  const CpWorkload w = row_workload();
  const std::uint64_t base = workload_fingerprint(w);
  std::vector<CpWorkload> changed(7, w);
  changed[0].tokens = 65;
  changed[1].doc_lengths = {1, 63};
  changed[2].mask = MaskSpec::full();
  changed[3].mask = MaskSpec::sliding(8);
  changed[4].block_size = 32;
  changed[5].cp_size = 4;
  changed[6].mask.kind = MaskKind::kBlockSparse;
  changed[6].mask.block_sparse.offsets = {0, 1, 2, 3, 4};
  for (std::size_t i = 0; i < changed.size(); ++i) {
    EXPECT_NE(workload_fingerprint(changed[i]), base) << "field " << i;
  }
  CpWorkload sparse = changed[6];
  sparse.mask.block_sparse.kv_blocks = {0, 1};
  EXPECT_NE(workload_fingerprint(sparse), workload_fingerprint(changed[6]));

  const ShardPlan p = contiguous_plan();
  ShardPlan swapped = p;
  std::swap(swapped.positions[3], swapped.positions[40]);
  ShardPlan renamed = p;
  renamed.strategy_used = "head_tail";
  ShardPlan reshaped = p;
  reshaped.shard_len = 16;
  reshaped.cp_size = 4;
  EXPECT_NE(plan_fingerprint(swapped), plan_fingerprint(p));
  EXPECT_NE(plan_fingerprint(renamed), plan_fingerprint(p));
  EXPECT_NE(plan_fingerprint(reshaped), plan_fingerprint(p));
  // The work figures are derived from the positions; they are not hashed.
  ShardPlan reworked = p;
  reworked.work.push_back(RankWork{1, 2, 3});
  EXPECT_EQ(plan_fingerprint(reworked), plan_fingerprint(p));
}

// --- options -----------------------------------------------------------------

host::Config defaults(const std::vector<host::Override>& overrides = {}) {
  auto config = load_job_config_string("", "test.yaml", overrides);
  EXPECT_TRUE(config.is_ok()) << config.status().message();
  return config.is_ok() ? std::move(config).value() : host::Config();
}

EnvFn env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ReliabilityOptions, OnByDefaultWithoutFaults) {
  auto o = reliability_options(defaults(), 4, env_of({}));
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_TRUE(o->plan_consensus);
  EXPECT_FALSE(o->fault);
  EXPECT_FALSE(o->perturb);
  auto off = reliability_options(defaults({"dist.plan_consensus=false"}), 4, env_of({}));
  ASSERT_TRUE(off.is_ok());
  EXPECT_FALSE(off->plan_consensus);
}

TEST(ReliabilityOptions, ReadsTheTestVariables) {
  auto o = reliability_options(defaults(), 4,
                               env_of({{"FULCRUM_TEST_FAULT", "stall"},
                                       {"FULCRUM_TEST_FAULT_RANK", "3"},
                                       {"FULCRUM_TEST_FAULT_STEP", "0"},
                                       {"FULCRUM_TEST_PERTURB", "plan"}}));
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  ASSERT_TRUE(o->fault);
  EXPECT_EQ(o->fault->kind, FaultKind::kStall);
  EXPECT_EQ(o->fault->rank, 3);
  EXPECT_EQ(o->fault->step, 0);
  ASSERT_TRUE(o->perturb);
  EXPECT_EQ(o->perturb->kind, PerturbKind::kCpPlan);
  EXPECT_EQ(o->perturb->rank, 0);
  EXPECT_EQ(o->perturb->step, 1);
}

TEST(ReliabilityOptions, RefusesWhatItDoesNotUnderstand) {
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"FULCRUM_TEST_FAULT", "boom"}},
       "FULCRUM_TEST_FAULT='boom' is not one of kill, throw, stall"},
      {{{"FULCRUM_TEST_FAULT", ""}}, "FULCRUM_TEST_FAULT=''"},
      {{{"FULCRUM_TEST_FAULT", "kill"}, {"FULCRUM_TEST_FAULT_RANK", "4"}},
       "FULCRUM_TEST_FAULT_RANK='4' is not an integer from 0 to 3"},
      {{{"FULCRUM_TEST_FAULT", "kill"}, {"FULCRUM_TEST_FAULT_RANK", "-1"}},
       "FULCRUM_TEST_FAULT_RANK='-1'"},
      {{{"FULCRUM_TEST_FAULT", "kill"}, {"FULCRUM_TEST_FAULT_STEP", "1x"}},
       "FULCRUM_TEST_FAULT_STEP='1x'"},
      {{{"FULCRUM_TEST_FAULT_RANK", "1"}}, "FULCRUM_TEST_FAULT_RANK is set but FULCRUM_TEST_FAULT"},
      {{{"FULCRUM_TEST_PERTURB", "dp"}, {"FULCRUM_TEST_PERTURB_STEP", "0"}},
       "FULCRUM_TEST_PERTURB_STEP='0' is not an integer from 1"},
      {{{"FULCRUM_TEST_PERTURB_STEP", "2"}}, "FULCRUM_TEST_PERTURB_STEP is set but"},
  };
  for (const auto& [vars, expected] : cases) {
    auto o = reliability_options(defaults(), 4, env_of(vars));
    ASSERT_FALSE(o.is_ok()) << expected;
    const std::string m = o.status().message();
    EXPECT_NE(m.find(expected), std::string::npos) << m;
    EXPECT_NE(m.find("test-only"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// --- hooks -------------------------------------------------------------------

// An in-process all-gather among threads. Gives up after a deadline.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), slots_(static_cast<std::size_t>(size)) {}

  std::vector<Bytes> gather(int member, const Bytes& bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++calls_;
    const std::uint64_t generation = generation_;
    slots_[static_cast<std::size_t>(member)] = bytes;
    if (++arrived_ == size_) {
      result_ = slots_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return result_;
    }
    if (!cv_.wait_for(lock, 10s, [&] { return generation_ != generation; })) {
      throw std::runtime_error("test all-gather timed out: a member never came");
    }
    return result_;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int size_;
  int arrived_ = 0;
  int calls_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<Bytes> slots_;
  std::vector<Bytes> result_;
};

class FakeDataset : public data::TokenDataset {
 public:
  std::int64_t size() const override { return 100; }
  std::int64_t length(std::int64_t i) const override { return 10 + i; }
  std::vector<std::int64_t> tokens(std::int64_t) const override { return {}; }
  std::string describe() const override { return "fake"; }
};

// A DP x CP job of threads running `steps` steps of `rows` rows each with
// the given options; returns each rank's error text ("" = none).
struct Job {
  int dp = 2;
  int cp = 2;
  int steps = 2;
  int rows = 2;
  ReliabilityOptions options;
  // Lets a test give one rank other inputs.
  std::function<void(int rank, std::int64_t step, data::StepBatch&)> edit_batch;
  std::function<void(int rank, std::int64_t step, std::int64_t row, CpWorkload&, ShardPlan&)>
      edit_row;

  std::vector<std::string> run() {
    const int world = dp * cp;
    ThreadGroup world_group(world);
    std::vector<std::unique_ptr<ThreadGroup>> cp_groups;
    for (int d = 0; d < dp; ++d) cp_groups.push_back(std::make_unique<ThreadGroup>(cp));
    std::vector<std::string> errors(static_cast<std::size_t>(world));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        const int d = rank / cp;
        std::vector<int> world_ranks(static_cast<std::size_t>(world));
        std::iota(world_ranks.begin(), world_ranks.end(), 0);
        std::vector<int> cp_ranks;
        for (int c = 0; c < cp; ++c) cp_ranks.push_back(d * cp + c);
        ReliabilityHooks hooks(options, rank);
        hooks.connect({"world", world_ranks,
                       [&, rank](const Bytes& b) { return world_group.gather(rank, b); }},
                      {"cp[dp=" + std::to_string(d) + "]", cp_ranks, [&, rank, d](const Bytes& b) {
                         return cp_groups[static_cast<std::size_t>(d)]->gather(rank % cp, b);
                       }});
        FakeDataset dataset;
        try {
          for (std::int64_t step = 1; step <= steps; ++step) {
            data::StepBatch batch;
            for (int i = 0; i < 2 * dp; ++i) batch.global_samples.push_back(4 * step + i);
            batch.stats.strategy = "lpt";
            batch.stats.rank_samples.assign(static_cast<std::size_t>(dp), 2);
            batch.samples = {4 * step + 2 * d, 4 * step + 2 * d + 1};
            if (edit_batch) edit_batch(rank, step, batch);
            hooks.begin_step(step, batch, dataset);
            for (std::int64_t row = 0; row < rows; ++row) {
              CpWorkload w = row_workload(64 + 2 * row);
              w.cp_size = cp;
              hooks.begin_row(w);
              ShardPlan p = contiguous_plan(w.tokens);
              if (edit_row) edit_row(rank, step, row, w, p);
              if (!hooks.check_row(w, p)) break;
            }
            hooks.end_step();
          }
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(rank)] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    world_calls = world_group.calls();
    return errors;
  }
  int world_calls = 0;
};

TEST(ReliabilityHooks, AgreeingRanksPass) {
  Job job;
  for (const std::string& e : job.run()) EXPECT_EQ(e, "");
  // Per step: the DP check and the CP verdict, on each of 4 ranks.
  EXPECT_EQ(job.world_calls, 2 * 2 * 4);
}

TEST(ReliabilityHooks, CpWorkloadDivergenceFailsEveryRankNamingTheRank) {
  Job job;
  job.options.perturb = PerturbSpec{PerturbKind::kCpWorkload, 1, 2};
  const std::vector<std::string> errors = job.run();
  for (std::size_t r = 0; r < errors.size(); ++r) {
    const std::string& e = errors[r];
    EXPECT_NE(e.find("plan consensus failed at step 2, row 0 of group cp[dp=0]"), std::string::npos)
        << "rank " << r << ": " << e;
    // Two ranks: no majority, so both sides are named.
    EXPECT_NE(e.find("the CP workload differs between rank 0 (N=64, 1 document, fingerprint"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find(") and rank 1 (N=64, 2 documents, fingerprint"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e, errors[0]) << "every rank reports the same cause";
  }
}

TEST(ReliabilityHooks, PlanDivergenceIsReportedAsThePlan) {
  Job job;
  job.options.perturb = PerturbSpec{PerturbKind::kCpPlan, 2, 1};
  for (const std::string& e : job.run()) {
    EXPECT_NE(e.find("row 0 of group cp[dp=1]: the CP workload agrees (N=64, 1 document) but "
                     "the plan differs between rank 2 (strategy contiguous, shard 32"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find(") and rank 3 (strategy contiguous, shard 32"), std::string::npos) << e;
  }
}

TEST(ReliabilityHooks, AnotherStrategyOnOneRankIsCaught) {
  Job job;
  job.dp = 1;
  job.cp = 4;
  job.edit_row = [](int rank, std::int64_t step, std::int64_t row, CpWorkload&, ShardPlan& p) {
    if (rank == 3 && step == 1 && row == 1) p.strategy_used = "head_tail";
  };
  for (const std::string& e : job.run()) {
    // One CP group is the whole job: the row check itself throws.
    EXPECT_NE(e.find("step 1, row 1 of group cp[dp=0]"), std::string::npos) << e;
    EXPECT_NE(e.find("the plan of rank 3 (strategy head_tail"), std::string::npos) << e;
    EXPECT_NE(e.find("ranks 0, 1, 2 (strategy contiguous"), std::string::npos) << e;
  }
}

TEST(ReliabilityHooks, DpLengthDivergenceFailsEveryRankBeforeAnyRow) {
  Job job;
  job.options.perturb = PerturbSpec{PerturbKind::kDpLengths, 3, 1};
  int rows_seen = 0;
  job.edit_row = [&](int, std::int64_t, std::int64_t, CpWorkload&, ShardPlan&) { ++rows_seen; };
  for (const std::string& e : job.run()) {
    EXPECT_NE(e.find("plan consensus failed at step 1 on group world: the DP workload"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("of rank 3 (4 samples, 63 tokens"), std::string::npos) << e;
    EXPECT_NE(e.find("from that of ranks 0, 1, 2 (4 samples, 62 tokens"), std::string::npos) << e;
  }
  EXPECT_EQ(rows_seen, 0);
}

TEST(ReliabilityHooks, DpPartitionAndShareDivergence) {
  Job job;
  job.edit_batch = [](int rank, std::int64_t, data::StepBatch& b) {
    if (rank == 2) b.stats.strategy = "round_robin";
  };
  for (const std::string& e : job.run()) {
    EXPECT_NE(e.find("the DP partition of rank 2 (strategy round_robin"), std::string::npos) << e;
  }
  Job share;
  share.edit_batch = [](int rank, std::int64_t step, data::StepBatch& b) {
    if (rank == 1 && step == 2) std::swap(b.samples[0], b.samples[1]);
  };
  for (const std::string& e : share.run()) {
    EXPECT_NE(e.find("the share of DP rank 0 differs between rank 0 (2 samples"), std::string::npos)
        << e;
  }
  Job count;
  count.edit_batch = [](int rank, std::int64_t, data::StepBatch& b) {
    if (rank / 2 == 1) b.samples.push_back(99);
  };
  for (const std::string& e : count.run()) {
    EXPECT_NE(e.find("ranks 2, 3 (DP rank 1) hold 3 samples but the agreed partition [2, 2]"),
              std::string::npos)
        << e;
  }
}

TEST(ReliabilityHooks, OffMeansNoCommunicationAndNoError) {
  Job job;
  job.options.plan_consensus = false;
  job.options.perturb = PerturbSpec{PerturbKind::kCpWorkload, 1, 1};
  for (const std::string& e : job.run()) EXPECT_EQ(e, "");
  EXPECT_EQ(job.world_calls, 0);
}

// Two ranks of one CP group run `body`; the world group of each is itself
// alone (no DP check), so only row checks meet, or with `shared_world` the
// same two ranks over the same exchange. Returns the errors.
std::vector<std::string> two_ranks(const std::function<void(int, ReliabilityHooks&)>& body,
                                   bool shared_world = false) {
  ThreadGroup g(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      ReliabilityHooks hooks(ReliabilityOptions{}, rank);
      GatherBytes gather = [&, rank](const Bytes& b) { return g.gather(rank, b); };
      if (shared_world) {
        hooks.connect({"world", {0, 1}, gather}, {"cp[dp=0]", {0, 1}, gather});
      } else {
        hooks.connect({"world", {rank}, [](const Bytes& b) { return std::vector<Bytes>{b}; }},
                      {"cp[dp=0]", {0, 1}, gather});
      }
      try {
        body(rank, hooks);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST(ReliabilityHooks, RanksAtDifferentStepsAreNamed) {
  const std::vector<std::string> errors = two_ranks([](int rank, ReliabilityHooks& hooks) {
    FakeDataset dataset;
    data::StepBatch batch;
    hooks.begin_step(rank == 1 ? 2 : 1, batch, dataset);
    static_cast<void>(hooks.check_row(row_workload(), contiguous_plan()));
  });
  for (const std::string& e : errors) {
    EXPECT_NE(
        e.find(
            "plan consensus failed on group cp[dp=0]: the point of training differs between rank 0 "
            "(step 1, row 0) and rank 1 (step 2, row 0)"),
        std::string::npos)
        << e;
  }
}

TEST(ReliabilityHooks, RanksInDifferentChecksAreNamed) {
  // Rank 1 reaches the end of the step (a verdict would be exchanged if the
  // job had several CP groups; here a row check of rank 0 meets a step
  // check of rank 1 through a shared group).
  const std::vector<std::string> errors = two_ranks(
      [](int rank, ReliabilityHooks& hooks) {
        if (rank == 0) {
          static_cast<void>(hooks.check_row(row_workload(), contiguous_plan()));
        } else {
          FakeDataset dataset;
          data::StepBatch batch;
          hooks.begin_step(1, batch, dataset);
        }
      },
      /*shared_world=*/true);
  EXPECT_NE(errors[0].find("rank 1 sent a record of"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("that is not a row check"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 sent a record of"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("that is not a step check"), std::string::npos) << errors[1];
}

TEST(ReliabilityHooks, GarbledRecordIsNamed) {
  ReliabilityHooks hooks(ReliabilityOptions{}, 0);
  hooks.connect({"world",
                 {0, 5},
                 [](const Bytes& b) {
                   return std::vector<Bytes>{b, Bytes{1, 2, 3}};
                 }},
                {"cp[dp=0]", {0, 5}, [](const Bytes& b) {
                   return std::vector<Bytes>{b, b};
                 }});
  const CpWorkload w = row_workload();
  const ShardPlan p = contiguous_plan();
  try {
    static_cast<void>(hooks.check_row(w, p));
    data::StepBatch batch;
    FakeDataset dataset;
    hooks.begin_step(1, batch, dataset);
    FAIL() << "a 3-byte record was accepted";
  } catch (const ConsensusError& e) {
    EXPECT_NE(
        std::string(e.what()).find("rank 5 sent a record of 3 bytes that is not a step check"),
        std::string::npos)
        << e.what();
  }
}

TEST(ReliabilityHooks, ThrowFaultFiresOnceOnItsRankAndStep) {
  ReliabilityOptions o;
  o.plan_consensus = false;
  o.fault = FaultSpec{FaultKind::kThrow, 1, 2};
  FakeDataset dataset;
  data::StepBatch batch;
  CpWorkload w = row_workload();
  for (int rank = 0; rank < 2; ++rank) {
    ReliabilityHooks hooks(o, rank);
    hooks.before_rendezvous();
    int thrown_at = 0;
    for (std::int64_t step = 1; step <= 3; ++step) {
      hooks.begin_step(step, batch, dataset);
      for (int row = 0; row < 2; ++row) {
        try {
          hooks.begin_row(w);
        } catch (const std::runtime_error& e) {
          EXPECT_EQ(thrown_at, 0) << "fired twice";
          thrown_at = static_cast<int>(step);
          EXPECT_NE(std::string(e.what()).find("FULCRUM_TEST_FAULT=throw"), std::string::npos);
        }
      }
      hooks.end_step();
    }
    EXPECT_EQ(thrown_at, rank == 1 ? 2 : 0) << "rank " << rank;
  }
  // A rank without a row in the faulty step fails at end_step.
  ReliabilityHooks idle(o, 1);
  idle.begin_step(2, batch, dataset);
  EXPECT_THROW(idle.end_step(), std::runtime_error);
}

TEST(ReliabilityHooks, CpPerturbationKeepsNAndChangesTheSplit) {
  ReliabilityOptions o;
  o.perturb = PerturbSpec{PerturbKind::kCpWorkload, 0, 1};
  ReliabilityHooks hooks(o, 0);
  FakeDataset dataset;
  data::StepBatch batch;
  hooks.begin_step(1, batch, dataset);
  CpWorkload one = row_workload(10);
  hooks.begin_row(one);
  EXPECT_EQ(one.doc_lengths, (std::vector<std::int64_t>{1, 9}));
  CpWorkload second = row_workload(10);
  hooks.begin_row(second);  // only the step's first row
  EXPECT_EQ(second.doc_lengths, (std::vector<std::int64_t>{10}));
  ReliabilityHooks merge(o, 0);
  merge.begin_step(1, batch, dataset);
  CpWorkload packed = row_workload(10);
  packed.doc_lengths = {3, 3, 4};
  merge.begin_row(packed);
  EXPECT_EQ(packed.doc_lengths, (std::vector<std::int64_t>{6, 4}));
}

// The schedule fingerprint is over the compact answer (ABI 1.4): a rank's
// expanded slots do not change it, every compact field does.
TEST(ScheduleFingerprintTest, CoversTheCompactAnswerNotPositions) {
  Schedule compact;
  compact.strategy_used = "hybrid";
  for (std::int32_t s = 0; s < 3; ++s) {
    ScheduleSlot slot;
    slot.ranks = {s, s + 1};
    slot.pieces = {DocPiece{s, 0, 10 + s}};
    slot.wave = s;
    slot.plan.cp_size = 2;
    slot.plan.shard_len = 6 + s;
    slot.plan.padding = 2 + s;
    slot.plan.strategy_used = "balanced";
    compact.slots.push_back(slot);
  }
  const std::uint64_t base = schedule_fingerprint(compact);
  Schedule expanded = compact;
  expanded.slots[1].plan.positions.assign(14, 0);
  std::iota(expanded.slots[1].plan.positions.begin(), expanded.slots[1].plan.positions.begin() + 11,
            std::int64_t{0});
  std::fill(expanded.slots[1].plan.positions.begin() + 11, expanded.slots[1].plan.positions.end(),
            std::int64_t{-1});
  EXPECT_EQ(schedule_fingerprint(expanded), base);
  const std::vector<std::function<void(Schedule&)>> changes = {
      [](Schedule& c) { c.strategy_used = "fixed"; },
      [](Schedule& c) { c.slots[2].wave = 5; },
      [](Schedule& c) {
        c.slots[0].ranks = {1, 0};
      },
      [](Schedule& c) { c.slots[0].pieces[0].length = 9; },
      [](Schedule& c) { c.slots[1].plan.strategy_used = "per_document"; },
      [](Schedule& c) { c.slots[1].plan.shard_len = 8; },
      [](Schedule& c) { c.slots[1].plan.padding = 4; },
      [](Schedule& c) { c.slots.pop_back(); },
      [](Schedule& c) {
        c.slots[1].member_weights = {1.0, 2.0};
      },
  };
  for (std::size_t i = 0; i < changes.size(); ++i) {
    Schedule changed = compact;
    changes[i](changed);
    EXPECT_NE(schedule_fingerprint(changed), base) << "change " << i;
  }
}

}  // namespace
}  // namespace fulcrum::train
