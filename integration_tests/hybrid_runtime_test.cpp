// Hybrid mode's runtime features end to end (float64, real worker
// processes over Gloo): free single slots, the refitted profile and the
// comparison of schedulers inside one job. Each must leave what is learned
// exactly as one process (or a run without the feature) learns it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "harness.h"
#include "training_runs.h"

namespace {

using fulcrum::it::equivalence_config;
using fulcrum::it::expect_same;
using fulcrum::it::kEquivalenceLengths;
using fulcrum::it::micro_batch_records;
using fulcrum::it::read_metrics;
using fulcrum::it::read_params;
using fulcrum::it::run;
using fulcrum::it::RunResult;
using fulcrum::it::source_file;
using fulcrum::it::step_records;
using fulcrum::it::TempDir;
using fulcrum::it::train_command;
using fulcrum::it::train_layout;
using fulcrum::it::Trained;
namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;

// Over an epoch every sample trains on each of its tokens but the last,
// wherever it was cut: the loss-token count is fixed by the data alone.
// parallel.hybrid.free_single_slots: the one-rank slots after the last
// multi-rank wave go to whichever rank claims them first, from a counter on
// the job's store. The float64 losses and parameters must match one process
// wherever the slots ran. A first run finds a step S with a free slot
// planned for rank R; a second has R claim only after every other rank has
// stopped (the test-only `late` fault), so the others must run all of step
// S's free slots, R's among them, and the results must not move.
TEST(Hybrid, FreeSingleSlotsRunOnAnyRankAndMatchOneProcess) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const Trained single = train_layout(dir, config, 1, 1);
  const std::vector<std::string> sets = {
      "parallel.mode=hybrid", "parallel.world_size=4", "parallel.max_tokens_per_rank=16",
      "balancer.schedule.strategy=hybrid", "parallel.hybrid.free_single_slots=true"};
  const Trained free = train_layout(dir, config, 1, 1, sets);
  expect_same(single, free, "free single slots");
  // Every slot is reported once by each of its g members, a free one by the
  // one rank that ran it.
  std::int64_t step = 0;
  int planned = -1;
  for (const json& line : free.hybrid) {
    std::map<std::int64_t, std::int64_t> reports;
    for (const json& rank : line.at("ranks")) {
      for (const json& slot : rank.at("slots")) {
        ++reports[slot.at("slot").get<std::int64_t>()];
        if (slot.contains("planned_rank") && planned < 0) {
          step = line.at("step").get<std::int64_t>();
          planned = slot.at("planned_rank").get<int>();
        }
      }
    }
    const json& groups = line.at("groups");
    ASSERT_EQ(reports.size(), groups.size()) << "step " << line.at("step");
    for (const auto& [slot, count] : reports) {
      EXPECT_EQ(count, groups.at(static_cast<std::size_t>(slot)).get<std::int64_t>())
          << "slot " << slot << " of step " << line.at("step");
    }
  }
  ASSERT_GE(planned, 0) << "no free single slot in any step: the test proves nothing";
  const Trained late =
      train_layout(dir, config, 1, 1, sets,
                   {"FULCRUM_TEST_FAULT=late", "FULCRUM_TEST_FAULT_RANK=" + std::to_string(planned),
                    "FULCRUM_TEST_FAULT_STEP=" + std::to_string(step)});
  expect_same(single, late, "free single slots, rank " + std::to_string(planned) + " late");
  int taken = 0;
  for (const json& line : late.hybrid) {
    if (line.at("step").get<std::int64_t>() != step) continue;
    for (const json& rank : line.at("ranks")) {
      for (const json& slot : rank.at("slots")) {
        if (!slot.contains("planned_rank")) continue;
        EXPECT_NE(rank.at("rank").get<int>(), planned) << "the late rank ran a free slot";
        taken += slot.at("planned_rank").get<int>() == planned;
      }
    }
  }
  EXPECT_GE(taken, 1) << "no slot planned for rank " << planned << " ran elsewhere";
}

// balancer.schedule.profile: auto refits the cost profile from the slots'
// measured times after every step but the first (refit_every = 1; the first
// is a warm-up) and plans the next step
// with it, on every rank the same: the profile moves where documents run,
// never what is learned, so the float64 losses and parameters equal a run
// that plans with the start profile throughout. The metrics must show that
// refits happened and changed the profile, or the run proved nothing.
// Whether a refitted profile moves a placement of these small batches
// depends on the times this machine measures (it does in about one run in
// three here), so the placements are not compared: that another schedule
// of a batch trains alike is what
// Hybrid.EverySchedulerAtFourAndSixRanksMatchesOneProcessAndFixedMode shows.
TEST(Hybrid, ProfileAutoRefitsOnEveryRankAndTrainsAsAFixedProfile) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const std::vector<std::string> base = {"parallel.mode=hybrid", "parallel.world_size=4",
                                         "parallel.max_tokens_per_rank=16", "train.threads=1"};
  std::vector<std::string> fixed_sets = base;
  fixed_sets.push_back("balancer.schedule.profile=cpu_gloo");
  std::vector<std::string> auto_sets = base;
  auto_sets.insert(auto_sets.end(),
                   {"balancer.schedule.profile=auto", "balancer.schedule.profile_start=cpu_gloo",
                    "balancer.schedule.refit_every=1"});
  const Trained fixed_profile = train_layout(dir, config, 1, 1, fixed_sets);
  const Trained refitted = train_layout(dir, config, 1, 1, auto_sets);
  ASSERT_EQ(refitted.losses.size(), 3u);
  expect_same(fixed_profile, refitted, "profile auto against cpu_gloo");
  const auto tag_of = [](const std::vector<std::string>& sets) {
    std::string tag = "dp1cp1";
    for (const std::string& e : sets) {
      tag += "_";
      for (char c : e) tag += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    }
    return tag;
  };
  const std::string tag = tag_of(auto_sets);
  int refits = 0;
  std::set<double> slot_seconds;
  for (const json& line : read_metrics(dir.file(tag + ".jsonl"))) {
    if (!line.contains("scheduler")) continue;
    ASSERT_TRUE(line.at("profile_fit").is_object()) << line;
    const json& fit = line.at("profile_fit");
    EXPECT_TRUE(fit.at("refit_due").get<bool>()) << fit;
    // The first step (a warm-up) gives the refit no samples; every later
    // one all its ranks' slot members.
    const bool first = line.at("step").get<int>() == 1;
    EXPECT_EQ(fit.at("samples").get<std::size_t>(), first ? 0 : line.at("fit_samples").size())
        << fit;
    EXPECT_GT(line.at("fit_samples").size(), 0u) << line;
    refits += fit.at("refitted").get<bool>() ? 1 : 0;
    slot_seconds.insert(fit.at("profile").at("slot_seconds").get<double>());
    EXPECT_NE(line.at("profile").get<std::string>().find("auto (start cpu_gloo"), std::string::npos)
        << line.at("profile");
  }
  EXPECT_EQ(refits, 2) << "a refit after every step but the warm-up";
  // Step 1 keeps cpu_gloo's 6.6 ms per slot; the refits after steps 2 and 3
  // moved it to what this machine measures.
  EXPECT_EQ(slot_seconds.count(6.6e-3), 1u);
  EXPECT_GE(slot_seconds.size(), 2u) << "the refits left the profile as it started";
}

// The schedule fingerprint of every hybrid step line of a metrics file.
std::map<std::int64_t, std::string> schedules_of(const std::string& metrics) {
  std::map<std::int64_t, std::string> out;
  for (const json& line : read_metrics(metrics)) {
    if (!line.contains("scheduler") || !line.contains("ranks")) continue;
    out[line.at("step").get<std::int64_t>()] = line.at("schedule_fingerprint").get<std::string>();
  }
  return out;
}

// balancer.schedule.profile: auto keeps its refitted profile and the samples
// of its window in the checkpoint: a job stopped after step 2 and resumed
// plans steps 3 and 4 with the profiles the uninterrupted job refitted, so
// its schedules and its float64 losses and parameters are that job's. The
// slots' times come from the test-only clock (FULCRUM_TEST_SLOT_SECONDS) so
// that both runs refit the same profiles; the clock's terms differ from
// cpu_gloo's enough to move placements, which a run that plans with cpu_gloo
// throughout shows (else a resume that forgot the profile would pass too).
TEST(Hybrid, ProfileAutoResumedRunPlansAndTrainsAsTheUninterruptedOne) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const std::vector<std::string> clock = {"FULCRUM_TEST_SLOT_SECONDS=2e-3,1e-5,5e-2,1e-6,0"};
  const std::vector<std::string> base = {"parallel.mode=hybrid", "parallel.world_size=4",
                                         "parallel.max_tokens_per_rank=16", "train.threads=1",
                                         "train.steps=4"};
  const std::vector<std::string> refit = {"balancer.schedule.profile=auto",
                                          "balancer.schedule.profile_start=cpu_gloo",
                                          "balancer.schedule.refit_every=1"};
  const auto train = [&](const std::string& tag, const std::vector<std::string>& more,
                         const std::vector<std::string>& flags = {}) {
    std::vector<std::string> sets = base;
    if (tag != "start") sets.insert(sets.end(), refit.begin(), refit.end());
    sets.insert(sets.end(), more.begin(), more.end());
    std::vector<std::string> argv =
        train_command(config, sets, dir.file(tag + ".jsonl"), dir.file(tag + ".params"));
    argv.insert(argv.end(), flags.begin(), flags.end());
    const RunResult r = run(argv, seconds(200), clock);
    EXPECT_EQ(r.exit_code, 0) << tag << ": " << r;
    return r;
  };
  train("whole", {});
  train("start", {"balancer.schedule.profile=cpu_gloo"});
  const std::string ckpt = "train.checkpoint_dir=" + dir.file("ckpt");
  train("first", {"train.steps=2", "train.checkpoint_every=2", ckpt});
  const RunResult resumed = train("rest", {ckpt}, {"--resume", "auto"});
  EXPECT_EQ(resumed.output.find("holds no refitted cost profile"), std::string::npos) << resumed;

  const std::map<std::int64_t, std::string> whole = schedules_of(dir.file("whole.jsonl"));
  const std::map<std::int64_t, std::string> start = schedules_of(dir.file("start.jsonl"));
  const std::map<std::int64_t, std::string> rest = schedules_of(dir.file("rest.jsonl"));
  ASSERT_EQ(whole.size(), 4u);
  ASSERT_EQ(rest.size(), 2u) << "the resumed run trains steps 3 and 4 only";
  EXPECT_EQ(schedules_of(dir.file("first.jsonl")).at(2), whole.at(2));
  bool moved = false;
  for (std::int64_t step : {3, 4}) {
    EXPECT_EQ(rest.at(step), whole.at(step)) << "step " << step << " was planned otherwise";
    moved = moved || start.at(step) != whole.at(step);
  }
  EXPECT_TRUE(moved) << "the refitted profiles placed steps 3 and 4 as cpu_gloo does: the test "
                        "cannot tell a restored profile from a lost one";
  const std::vector<json> whole_steps = step_records(read_metrics(dir.file("whole.jsonl")));
  const std::vector<json> rest_steps = step_records(read_metrics(dir.file("rest.jsonl")));
  ASSERT_EQ(rest_steps.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rest_steps[i].at("loss").get<double>(), whole_steps[i + 2].at("loss").get<double>())
        << "step " << i + 3;
  }
  EXPECT_TRUE(read_params(dir.file("rest.params")) == read_params(dir.file("whole.params")))
      << "the resumed run's final parameters are not bitwise the uninterrupted run's";
}

// parallel.hybrid.free_single_slots claims from one store counter per step;
// each is deleted once the step's all-reduce is done, so the store's key
// count stays where it was after the first step, however many steps run.
TEST(Hybrid, FreeSingleSlotsKeepTheStoreBounded) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const Trained run = train_layout(
      dir, config, 1, 1,
      {"parallel.mode=hybrid", "parallel.world_size=4", "parallel.max_tokens_per_rank=16",
       "parallel.hybrid.free_single_slots=true", "train.steps=7"});
  ASSERT_EQ(run.hybrid.size(), 7u);
  std::set<std::int64_t> counts;
  for (const json& line : run.hybrid) {
    ASSERT_TRUE(line.at("store_keys").is_number_integer()) << line;
    counts.insert(line.at("store_keys").get<std::int64_t>());
  }
  EXPECT_GT(*counts.begin(), 0) << "the store holds at least the rendezvous's keys";
  EXPECT_EQ(counts.size(), 1u) << "the store's keys grew with the steps: " << *counts.begin()
                               << " to " << *counts.rbegin();
}

// --compare-schedulers runs every listed scheduler's schedule of each batch
// three times, forward and backward from the step's parameters, before the
// step: the run must train exactly as one without it (the same losses and,
// byte for byte, the same float64 parameters), and its metrics must hold one
// record per scheduler and step with every rank's figures.
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Hybrid, CompareSchedulersLeavesTheTrainingBitIdenticalAndReportsEveryScheduler) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const std::vector<std::string> sets = {"parallel.mode=hybrid", "parallel.world_size=4",
                                         "parallel.max_tokens_per_rank=16", "train.threads=1"};
  const auto train = [&](const std::string& tag, const std::vector<std::string>& flags) {
    std::vector<std::string> argv =
        train_command(config, sets, dir.file(tag + ".jsonl"), dir.file(tag + ".params"));
    argv.insert(argv.end(), flags.begin(), flags.end());
    const RunResult r = run(argv, seconds(150));
    EXPECT_EQ(r.exit_code, 0) << tag << ": " << r;
    return r;
  };
  train("plain", {});
  const RunResult compared =
      train("compared", {"--compare-schedulers", "fixed,megatron_dcp,hybrid"});
  const std::string plain_params = file_bytes(dir.file("plain.params"));
  ASSERT_FALSE(plain_params.empty());
  EXPECT_TRUE(plain_params == file_bytes(dir.file("compared.params")))
      << "the comparison runs changed the trained parameters";
  const std::vector<json> plain = read_metrics(dir.file("plain.jsonl"));
  const std::vector<json> metrics = read_metrics(dir.file("compared.jsonl"));
  const std::vector<json> plain_steps = step_records(plain);
  const std::vector<json> steps = step_records(metrics);
  ASSERT_EQ(steps.size(), 3u);
  ASSERT_EQ(plain_steps.size(), steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].at("loss").get<double>(), plain_steps[i].at("loss").get<double>())
        << "step " << i + 1;
  }
  std::map<std::string, int> records;
  for (const json& line : plain) EXPECT_FALSE(line.contains("compare")) << line;
  for (const json& line : metrics) {
    if (!line.contains("compare")) continue;
    const std::string name = line.at("compare").get<std::string>();
    ++records[name];
    EXPECT_EQ(line.at("repetitions"), 3) << line;
    EXPECT_EQ(line.at("clock"), "thread CPU") << line;
    EXPECT_GT(line.at("critical_path_wall_ms").get<double>(), 0.0) << line;
    EXPECT_EQ(line.at("critical_path_ms_by_repetition").size(), 3u) << line;
    for (const char* key :
         {"rank_min_ms", "rank_median_ms", "predicted_rank_ms", "prediction_error"}) {
      ASSERT_EQ(line.at(key).size(), 4u) << key << ": " << line;
    }
    for (std::size_t r = 0; r < 4; ++r) {
      // Every rank took part and measured something; min <= median.
      EXPECT_GT(line.at("rank_median_ms")[r].get<double>(), 0.0) << line;
      EXPECT_LE(line.at("rank_min_ms")[r].get<double>(), line.at("rank_median_ms")[r].get<double>())
          << line;
    }
    // Each repetition's replayed critical path holds every rank's slots of
    // that repetition, so it is at least every rank's fastest repetition.
    double slowest_min = 0.0;
    for (const json& ms : line.at("rank_min_ms"))
      slowest_min = std::max(slowest_min, ms.get<double>());
    for (const json& path : line.at("critical_path_ms_by_repetition")) {
      EXPECT_GE(path.get<double>() + 2e-3, slowest_min) << line;
    }
    EXPECT_EQ(line.contains("measured_speedup_over_fixed"), name != "fixed") << line;
    EXPECT_EQ(line.contains("predicted_speedup_over_fixed"), name != "fixed") << line;
  }
  EXPECT_EQ(records,
            (std::map<std::string, int>{{"fixed", 3}, {"hybrid", 3}, {"megatron_dcp", 3}}));
  EXPECT_NE(compared.output.find("compared       3 runs of each schedule"), std::string::npos)
      << compared.output;
  EXPECT_NE(compared.output.find("scheduler hybrid"), std::string::npos) << compared.output;
  EXPECT_EQ(compared.output.find(" dp auto "), std::string::npos) << compared.output;
}

// With T = 32 the planner's fixed places 64-token rows on two CP groups of
// 2, whose compact plans ("auto") each rank expands only where it runs them
// (rank 0 everywhere): the schedule check must compare the answer as every
// rank got it, before expansion, for the compared schedules and for the
// configured one reused from them (fingerprinted after expansion, these
// runs stop at step 1 with "plan consensus failed", plain ones included).
TEST(Hybrid, ComparedSchedulesOfSeveralGroupsAgreeOnEveryRank) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  for (const std::string configured : {"hybrid", "fixed"}) {
    const std::vector<std::string> sets = {"parallel.mode=hybrid", "parallel.world_size=4",
                                           "parallel.max_tokens_per_rank=32", "train.threads=1",
                                           "balancer.schedule.strategy=" + configured};
    const auto train = [&](const std::string& tag, const std::vector<std::string>& flags) {
      std::vector<std::string> argv =
          train_command(config, sets, dir.file(tag + ".jsonl"), dir.file(tag + ".params"));
      argv.insert(argv.end(), flags.begin(), flags.end());
      const RunResult r = run(argv, seconds(150));
      EXPECT_EQ(r.exit_code, 0) << configured << " " << tag << ": " << r;
    };
    train(configured + "_plain", {});
    train(configured + "_compared",
          {"--compare-schedulers", "fixed,megatron_dcp,hybrid", "--compare-repetitions", "1"});
    const std::string plain = file_bytes(dir.file(configured + "_plain.params"));
    ASSERT_FALSE(plain.empty()) << configured;
    EXPECT_TRUE(plain == file_bytes(dir.file(configured + "_compared.params"))) << configured;
  }
}

}  // namespace
