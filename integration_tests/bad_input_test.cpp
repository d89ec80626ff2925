// Bad input, end to end: flags, variables, network settings and data files
// that `fulcrum train` or a worker refuses, each with one line that names
// the cause and exit 2, before or while the workers start, and no worker
// left behind. Children run under fault_driver.h's deadline and marker.
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

// --- bad input ---------------------------------------------------------------

// One rank, the host's own balancer: nothing to warn about, so a refusal is
// the only line a worker prints.
constexpr const char* kOneRank = "balancer: {plugin: builtin, dp: {strategy: round_robin}}\n";

struct BadInput {
  std::string name;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string expected;  // in the stderr line
};

// Each refusal: exit 2, fast, nothing on stdout, one line on stderr holding
// the expected text,
// no crash, no worker left behind. Cases run two at a time: most of a
// refused worker's second is spent loading LibTorch.
// Runs `children` two at a time (more only queue on a small machine's cores),
// each with the run's marker variable; results in the same order.
std::vector<ChildResult> run_in_pairs(std::vector<Child> children, const std::string& marker,
                                      seconds timeout) {
  std::vector<ChildResult> results;
  for (std::size_t first = 0; first < children.size(); first += 2) {
    std::vector<Child> pair;
    for (std::size_t i = first; i < std::min(children.size(), first + 2); ++i) {
      children[i].env.push_back(std::string(kMarkerVariable) + "=" + marker);
      pair.push_back(std::move(children[i]));
    }
    for (ChildResult& r : run_all(pair, timeout)) results.push_back(std::move(r));
  }
  return results;
}

void expect_refused(const std::vector<BadInput>& cases, const std::string& marker) {
  std::vector<Child> children;
  for (const BadInput& c : cases) children.push_back({c.argv, c.env});
  const std::vector<ChildResult> results = run_in_pairs(std::move(children), marker, seconds(30));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const BadInput& c = cases[i];
    const ChildResult& r = results[i];
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r;
    EXPECT_FALSE(r.timed_out) << c.name;
    EXPECT_LT(r.wall_s, 10.0) << c.name << ": " << r;
    EXPECT_EQ(r.out, "") << c.name << ": " << r;
    const std::vector<std::string> lines = lines_of(r.err);
    if (lines.empty()) {
      ADD_FAILURE() << c.name << ": nothing on stderr: " << r;
      continue;
    }
    EXPECT_EQ(lines.size(), 1u) << c.name << ": " << r;
    EXPECT_TRUE(contains(lines[0], c.expected)) << c.name << ": " << r;
    for (const char* crash :
         {"terminate called", "what()", "Segmentation", "Aborted", "core dumped"}) {
      EXPECT_FALSE(contains(r.err, crash)) << c.name << ": " << r;
    }
    std::printf("[ refused ] %-34s %s\n", c.name.c_str(), lines[0].c_str());
  }
}

// The launch variables a worker reads, end to end: one case per kind of
// mistake. Every variable and value form is covered, without starting a
// process, by runtime/launch/tests/worker_env_test.cpp; docs/RELIABILITY.md
// lists the messages.
std::vector<BadInput> worker_environment_cases(const std::string& config) {
  const std::vector<std::string> w = {FULCRUM_WORKER, "--config", config};
  return {
      {"RANK not a number",
       w,
       {"RANK=abc", "WORLD_SIZE=2"},
       "RANK='abc' is not a non-negative decimal integer"},
      {"RANK not below WORLD_SIZE",
       w,
       {"RANK=2", "WORLD_SIZE=2"},
       "RANK='2' is not below WORLD_SIZE='2'"},
      {"WORLD_SIZE zero", w, {"RANK=0", "WORLD_SIZE=0"}, "WORLD_SIZE='0' is not a world size"},
      {"WORLD_SIZE not the config's",
       w,
       {"RANK=0", "WORLD_SIZE=3"},
       "the launcher started 3 workers (torchrun) but parallel.dp_size x parallel.cp_size"},
      {"MASTER_PORT not a number", w, {"MASTER_PORT=http"}, "MASTER_PORT='http' is not a TCP port"},
      {"MASTER_ADDR empty", w, {"MASTER_ADDR="}, "MASTER_ADDR='' is not a host name or address"},
      {"SLURM_PROCID not a number", w, {"SLURM_PROCID=x", "SLURM_NTASKS=2"}, "SLURM_PROCID='x'"},
      {"FULCRUM_TEST_FAULT unknown",
       w,
       {"FULCRUM_TEST_FAULT=explode"},
       "FULCRUM_TEST_FAULT='explode' is not one of kill, throw, stall"},
  };
}

TEST(BadInput, WorkerEnvironmentIsRefusedInOneLine) {
  TempDir dir;
  // A one-rank job, so a variable that is fine lets the worker go on: the
  // case then fails on its exit code instead of training for long.
  const std::string config = dir.write("one.yaml", kOneRank);
  const std::string marker = new_marker();
  expect_refused(worker_environment_cases(config), marker);
  expect_no_orphans(marker);
}

TEST(BadInput, WorkerFlagsAreRefused) {
  TempDir dir;
  const std::string config = dir.write("one.yaml", kOneRank);
  const std::string marker = new_marker();
  const std::string w = FULCRUM_WORKER;
  const std::vector<BadInput> cases = {
      {"worker: no --config", {w}, {}, "fulcrum-worker: --config is required"},
      {"worker: unknown flag",
       {w, "--config", config, "--nproc", "2"},
       {},
       "unknown argument '--nproc'"},
      {"worker: --resume without value",
       {w, "--config", config, "--resume"},
       {},
       "--resume needs a value"},
      {"worker: --save-params unwritable",
       {w, "--config", config, "--save-params", dir.file("no/dir/p.bin")},
       {},
       "cannot write --save-params " + dir.file("no/dir/p.bin") + ": directory"},
      {"worker: --resume missing file",
       {w, "--config", config, "--resume", dir.file("absent.ckpt")},
       {},
       "absent.ckpt"},
      {"worker: missing config file", {w, "--config", dir.file("absent.yaml")}, {}, "absent.yaml"},
      {"worker: --set unknown key",
       {w, "--config", config, "--set", "train.stpes=3"},
       {},
       "train.steps"},
      {"worker: metrics unwritable",
       {w, "--config", config, "--metrics", dir.file("no/dir/m.jsonl")},
       {},
       "no/dir/m.jsonl"},
  };
  expect_refused(cases, marker);
  expect_no_orphans(marker);
}

// Long for a reason: it is one table of cases, one per refused flag or
// setting, run by expect_refused; splitting it would only split the table.
TEST(BadInput, TrainFlagsAreRefusedBeforeAnyWorkerStarts) {
  TempDir dir;
  const std::string config = dir.write("job.yaml", kConfig);
  const std::string marker = new_marker();
  const std::string f = FULCRUM_BIN;
  auto train = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {f, "train"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  const std::vector<BadInput> cases = {
      {"--nproc not a number",
       train({"--config", config, "--nproc", "four"}),
       {},
       "fulcrum train: --nproc must be an integer from 1 to"},
      {"--nproc zero", train({"--config", config, "--nproc", "0"}), {}, "--nproc must be"},
      {"--nproc negative", train({"--config", config, "--nproc", "-4"}), {}, "--nproc"},
      {"--nproc overflows",
       train({"--config", config, "--nproc", "99999999999999999999"}),
       {},
       "--nproc must be"},
      {"--nproc not the config's",
       train({"--config", config, "--nproc", "3"}),
       {},
       "--nproc 3 does not match parallel.dp_size x parallel.cp_size = 2 x 2 = 4"},
      {"--nproc without value", train({"--config", config, "--nproc"}), {}, "--nproc"},
      {"--nproc not the hybrid world",
       train({"--config", config, "--nproc", "4", "--set", "parallel.mode=hybrid", "--set",
              "parallel.dp_size=1", "--set", "parallel.cp_size=1", "--set",
              "parallel.world_size=6"}),
       {},
       "--nproc 4 does not match parallel.world_size = 6"},
      {"world size against dp x cp in fixed mode",
       train({"--config", config, "--set", "parallel.world_size=4", "--nproc", "4", "--set",
              "parallel.dp_size=4"}),
       {},
       "fulcrum train: parallel.world_size = 4 (from --set parallel.world_size=4) disagrees with"},
      {"hybrid T too small for a piece",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "parallel.max_tokens_per_rank=8"}),
       {},
       "fulcrum train: parallel.max_tokens_per_rank = 8 (from --set "
       "parallel.max_tokens_per_rank=8) x 4 ranks holds fewer"},
      {"hybrid over NCCL",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set", "dist.backend=nccl",
              "--set", "train.device=cuda"}),
       {},
       "fulcrum train: parallel.mode: hybrid exchanges K/V point-to-point over Gloo only"},
      {"hybrid profile file missing",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "balancer.schedule.profile=" + dir.file("absent_profile.yaml")}),
       {},
       "fulcrum train: balancer.schedule.profile (from --set balancer.schedule.profile=" +
           dir.file("absent_profile.yaml") + "): cost profile file"},
      {"hybrid scheduler unknown",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "balancer.schedule.strategy=zigzag"}),
       {},
       "fulcrum train: balancer.schedule.strategy = 'zigzag' is not a scheduler of"},
      {"hybrid world beyond 2^20",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "parallel.world_size=99999999999"}),
       {},
       "parallel.world_size must be an integer in [0, 1048576]"},
      {"hybrid T beyond 2^31",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "parallel.max_tokens_per_rank=4611686018427387904"}),
       {},
       "parallel.max_tokens_per_rank must be an integer in [0, 2147483648]"},
      {"hybrid over a dp x cp beyond 2^20",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "parallel.dp_size=1000000", "--set", "parallel.cp_size=2"}),
       {},
       "fulcrum train: parallel.mode: hybrid over 2000000 ranks is more than the 2^20"},
      {"parallel.mode unknown",
       train({"--config", config, "--set", "parallel.mode=pooled"}),
       {},
       "parallel.mode"},

      {"no --config", train({}), {}, "--config is required"},
      {"missing config file", train({"--config", dir.file("absent.yaml")}), {}, "absent.yaml"},
      {"config is a directory", train({"--config", dir.file("")}), {}, "fulcrum train"},
      {"config not YAML",
       train({"--config", dir.write("bad.yaml", "parallel: [1, 2\n")}),
       {},
       "bad.yaml"},
      {"unknown flag", train({"--config", config, "--steps", "3"}), {}, "--steps"},
      {"stray argument", train({"--config", config, "extra"}), {}, "too many positional options"},
      {"--set without '='", train({"--config", config, "--set", "train.steps"}), {}, "train.steps"},
      {"--set unknown key",
       train({"--config", config, "--set", "dist.op_timeout=3"}),
       {},
       "dist.op_timeout_s"},
      {"--set timeout not a number",
       train({"--config", config, "--set", "dist.timeout_s=soon"}),
       {},
       "dist.timeout_s"},
      {"--set timeout zero",
       train({"--config", config, "--set", "dist.op_timeout_s=0"}),
       {},
       "dist.op_timeout_s"},
      {"--set plan_consensus not a bool",
       train({"--config", config, "--set", "dist.plan_consensus=maybe"}),
       {},
       "dist.plan_consensus"},
      {"--set master_port too large",
       train({"--config", config, "--set", "dist.master_port=70000"}),
       {},
       "dist.master_port"},
      // Paths the run writes or reads at its end or on every rank: checked
      // by the launcher before it starts anything.
      {"--save-params in a missing directory",
       train({"--config", config, "--save-params", dir.file("no/dir/p.bin")}),
       {},
       "fulcrum train: cannot write --save-params " + dir.file("no/dir/p.bin") + ": directory " +
           dir.file("no/dir") + " does not exist"},
      {"--save-params is a directory",
       train({"--config", config, "--save-params", dir.file("")}),
       {},
       "is a directory"},
      {"--metrics in a missing directory",
       train({"--config", config, "--metrics", dir.file("no/m.jsonl")}),
       {},
       "cannot write --metrics"},
      {"--resume missing file",
       train({"--config", config, "--resume", dir.file("absent.ckpt")}),
       {},
       "checkpoint (train.resume) " + dir.file("absent.ckpt") + " does not exist"},
      {"--resume without value", train({"--config", config, "--resume"}), {}, "--resume"},
      {"train.resume a directory",
       train({"--config", config, "--set", "train.resume=" + dir.file("")}),
       {},
       "is not a regular file"},
      {"train.checkpoint_dir under a file",
       train({"--config", config, "--set", "train.checkpoint_every=1", "--set",
              "train.checkpoint_dir=" + config + "/ckpt"}),
       {},
       "train.checkpoint_dir"},
      // Sizes no host holds: refused by the memory bound, not by
      // std::bad_alloc in every worker or hours of swapping.
      {"data.seq_length beyond any host",
       train({"--config", config, "--set", "data.seq_length=100000000000"}),
       {},
       "fulcrum train: the job needs at least"},
      {"data.num_samples beyond any host",
       train({"--config", config, "--set", "data.num_samples=100000000000"}),
       {},
       "sample index"},
  };
  expect_refused(cases, marker);
  expect_no_orphans(marker);
}

// Every refusal about a config value names what set it: the file's line,
// the --set as typed, or the flag (fulcrum train's and fulcrum-worker's
// --compare-schedulers, --compare-repetitions, --resume), never another.
TEST(BadInput, ConfigValuesNameTheirSource) {
  TempDir dir;
  const std::string hybrid = "parallel: {mode: hybrid, world_size: 2}\n";
  const std::string in_file =
      dir.write("compare.yaml", hybrid + "train:\n  compare_schedulers: fixed,fixed\n");
  const std::string plain = dir.write("hybrid.yaml", hybrid);
  const std::string one = dir.write("one.yaml", kOneRank);
  const std::string marker = new_marker();
  const std::string f = FULCRUM_BIN;
  const std::string w = FULCRUM_WORKER;
  const std::string twice = "train.compare_schedulers = fixed,fixed (from ";
  const std::vector<BadInput> cases = {
      {"compare list in the file",
       {f, "train", "--config", in_file},
       {},
       twice + in_file + ":3:23) names fixed twice"},
      {"compare list by --set",
       {f, "train", "--config", plain, "--set", "train.compare_schedulers=fixed,fixed"},
       {},
       twice + "--set train.compare_schedulers=fixed,fixed) names fixed twice"},
      {"compare list by its flag",
       {f, "train", "--config", plain, "--compare-schedulers", "fixed,fixed"},
       {},
       twice + "--compare-schedulers) names fixed twice"},
      {"compare flag over the file's list",
       {f, "train", "--config", in_file, "--compare-schedulers", "hybrid,hybrid"},
       {},
       "(from --compare-schedulers) names hybrid twice"},
      {"compare flag in fixed mode",
       {f, "train", "--config", one, "--compare-schedulers", "fixed"},
       {},
       "train.compare_schedulers = fixed (from --compare-schedulers) needs parallel.mode"},
      {"repetitions flag not a number",
       {f, "train", "--config", plain, "--compare-schedulers", "fixed", "--compare-repetitions",
        "many"},
       {},
       "fulcrum train: --compare-repetitions: train.compare_repetitions must be an integer in "
       "[1, 100], got 'many'; correct the --compare-repetitions value"},
      {"worker: checkpoint_every by --set",
       {w, "--config", one, "--set", "train.checkpoint_every=2"},
       {},
       "train.checkpoint_every = 2 (from --set train.checkpoint_every=2) needs"},
      {"worker: compare flag in fixed mode",
       {w, "--config", one, "--compare-schedulers", "fixed"},
       {},
       "train.compare_schedulers = fixed (from --compare-schedulers) needs parallel.mode"},
      {"worker: repetitions flag not a number",
       {w, "--config", one, "--compare-repetitions", "many"},
       {},
       "--compare-repetitions: train.compare_repetitions must be an integer in [1, 100], got "
       "'many'; correct the --compare-repetitions value"},
      {"worker: --resume auto without a directory",
       {w, "--config", one, "--resume", "auto"},
       {},
       "train.resume = auto (from --resume) needs train.checkpoint_dir"},
  };
  expect_refused(cases, marker);
  expect_no_orphans(marker);
}

// An empty --nproc (an unset shell variable, say) is refused, not read as
// "not given".
TEST(BadInput, TrainEmptyNprocIsRefused) {
  TempDir dir;
  const std::string marker = new_marker();
  expect_refused(
      {{"--nproc empty",
        {FULCRUM_BIN, "train", "--config", dir.write("job.yaml", kConfig), "--nproc", ""},
        {},
        "--nproc must be"}},
      marker);
  expect_no_orphans(marker);
}

// GLOO_SOCKET_IFNAME passes through fulcrum train to its workers: the
// launcher refuses an interface this host lacks before starting any, and a
// worker started by another launcher refuses it before the rendezvous, so no
// rank waits there for one that refused.
TEST(BadInput, NetworkSettingsAreRefusedBeforeTheRendezvous) {
  TempDir dir;
  const std::string config = dir.write("job.yaml", kConfig);
  const std::string marker = new_marker();
  const std::string bogus = "GLOO_SOCKET_IFNAME=fulcrum-bogus0";
  const std::string expected =
      "GLOO_SOCKET_IFNAME='fulcrum-bogus0' is not a network interface of this host; this host "
      "has lo";
  expect_refused({{"fulcrum train", {FULCRUM_BIN, "train", "--config", config}, {bogus}, expected},
                  {"a worker of a 4-rank job",
                   {FULCRUM_WORKER, "--config", config},
                   {bogus, "RANK=1", "WORLD_SIZE=4"},
                   expected},
                  // Not an interface but the same kind of mistake: an address
                  // no resolver knows, said at once, not after dist.timeout_s.
                  {"MASTER_ADDR that does not resolve",
                   {FULCRUM_WORKER, "--config", config},
                   {"MASTER_ADDR=fulcrum-no-such-host.invalid", "RANK=1", "WORLD_SIZE=4"},
                   "MASTER_ADDR='fulcrum-no-such-host.invalid' does not resolve on rank 1 of 4"}},
                 marker);
  expect_no_orphans(marker);
}

// Data and lengths files: fulcrum train opens the data as the workers would,
// before any of them starts. The job ends with exit 2 and one line.
TEST(BadInput, DataFilesEndTheJobWithOneCauseLine) {
  TempDir dir;
  const std::string config = dir.write("job.yaml", kConfig);
  const std::string marker = new_marker();
  const std::string object_line = dir.write("object.jsonl", "[1, 2, 3]\n{\"tokens\": [4]}\n");
  const std::string empty = dir.write("empty.jsonl", "\n");
  const std::string not_json = dir.write("lengths.txt", "12\nabc\n");
  const std::string negative = dir.write("negative.json", "[5, -5]\n");
  dir.write("garbage.idx", "garbagegarbagegarbage");
  dir.write("garbage.bin", "zz");
  struct Case {
    std::string name;
    std::vector<std::string> sets;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"JSONL line not a list",
       {"data.source=jsonl", "data.path=" + object_line},
       object_line + ":2: found a JSON object, expected a list of token ids"},
      {"JSONL without tokens",
       {"data.source=jsonl", "data.path=" + empty},
       "has no sample with at least one token"},
      {"JSONL path a directory",
       {"data.source=jsonl", "data.path=" + dir.file("")},
       "is a directory, not a file; data.path must name the JSONL token file"},
      {"lengths file not JSON",
       {"data.source=synthetic", "data.path=" + not_json},
       not_json + ": byte 4: invalid JSON"},
      {"lengths file with a negative length",
       {"data.source=synthetic", "data.path=" + negative},
       negative + ":"},
      {"Megatron prefix missing",
       {"data.source=megatron", "data.path=" + dir.file("absent")},
       dir.file("absent") + ".idx does not exist"},
      {"Megatron .idx not an index",
       {"data.source=megatron", "data.path=" + dir.file("garbage")},
       dir.file("garbage") + ".idx: byte offset 0: expected the magic"},
  };
  std::vector<Child> children;
  for (const Case& c : cases) {
    std::vector<std::string> argv = {FULCRUM_BIN, "train", "--config", config};
    for (const std::string& set : c.sets) argv.insert(argv.end(), {"--set", set});
    children.push_back({argv, {}});
  }
  const std::vector<ChildResult> results = run_in_pairs(std::move(children), marker, seconds(60));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const ChildResult& r = results[i];
    EXPECT_FALSE(r.timed_out) << c.name;
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r;
    EXPECT_FALSE(contains(r.out, "step 1/")) << c.name << ": " << r;
    const std::vector<std::string> lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << c.name << ": one line, before any worker: " << r;
    EXPECT_EQ(lines[0].rfind("fulcrum train: data.path", 0), 0u) << c.name << ": " << r;
    EXPECT_TRUE(contains(lines[0], c.expected)) << c.name << ": " << r;
    for (const char* crash : {"terminate called", "what()", "Segmentation", "Aborted"}) {
      EXPECT_FALSE(contains(r.err, crash)) << c.name << ": " << r;
    }
    std::printf("[ refused ] %-34s %s\n", c.name.c_str(), lines[0].c_str());
  }
  expect_no_orphans(marker);
}

TEST(BadInput, TrainReplacesTheLaunchVariablesItInherits) {
  // `fulcrum train` is the launcher: garbage in the variables it sets for
  // its workers (a shell left over from another job) is replaced, not read.
  TempDir dir;
  const std::string config = dir.write("one.yaml",
                                       "balancer: {plugin: builtin}\n"
                                       "data: {num_samples: 8, max_length: 40, seq_length: 32}\n"
                                       "model: {hidden_size: 8, num_layers: 1, num_heads: 2, "
                                       "vocab_size: 32}\ntrain: {steps: 1}\n");
  const std::string marker = new_marker();
  const ChildResult r =
      run_one({FULCRUM_BIN, "train", "--config", config}, seconds(60),
              {"RANK=abc", "WORLD_SIZE=-1", "LOCAL_RANK=x", "MASTER_ADDR=", "MASTER_PORT=http",
               std::string(kMarkerVariable) + "=" + marker});
  EXPECT_EQ(r.exit_code, 0) << r;
  expect_no_orphans(marker);
}

}  // namespace
