// Checkpoint and resume, end to end: real `fulcrum train` jobs (DP 2 x CP 2,
// float64) are stopped or killed after a checkpoint and resumed, and must
// continue exactly where the uninterrupted run went: the same losses bit for
// bit, the same parameters, and every sample trained exactly once across the
// interruption. Damaged checkpoints must be refused with one line naming the
// file, and the previous good one used.
//
// No LibTorch here; the process runner, temporary directories and the
// parameter reader are the integration drivers' shared harness.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using fulcrum::it::read_params;
using fulcrum::it::run;
using fulcrum::it::RunResult;
using fulcrum::it::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A job's record, from its metrics: per step its loss and the document
// pieces [sample, begin, end, checksum] every DP rank (every hybrid slot)
// trained on.
struct Record {
  std::map<std::int64_t, double> loss;
  std::map<std::int64_t, std::vector<std::array<std::int64_t, 4>>> pieces;
  std::map<std::string, std::vector<double>> params;
};

Record read_record(const std::string& metrics, const std::string& params = "") {
  Record r;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    const std::int64_t step = j.at("step").get<std::int64_t>();
    if (j.contains("loss")) r.loss[step] = j.at("loss").get<double>();
    if (j.contains("pieces")) {
      for (const json& p : j.at("pieces"))
        r.pieces[step].push_back(p.get<std::array<std::int64_t, 4>>());
    }
    // Hybrid mode: each slot's pieces, on its first member's record.
    if (j.contains("scheduler")) {
      for (const json& rank : j.at("ranks")) {
        for (const json& slot : rank.at("slots")) {
          if (!slot.contains("pieces")) continue;
          for (const json& p : slot.at("pieces"))
            r.pieces[step].push_back(p.get<std::array<std::int64_t, 4>>());
        }
      }
    }
  }
  for (auto& [step, pieces] : r.pieces) std::sort(pieces.begin(), pieces.end());
  if (!params.empty()) r.params = read_params(params);
  return r;
}

// 24 samples of known tokens, lengths 1 to 200: with packing into rows of
// 96 tokens, long samples are split across rows and DP ranks. 4 samples per
// step make one epoch of exactly 6 steps, so every sample must be trained
// exactly once over steps 1-6, interrupted or not.
constexpr std::size_t kSamples = 24;

std::vector<std::vector<std::int64_t>> write_tokens(const TempDir& dir) {
  std::vector<std::vector<std::int64_t>> samples;
  std::ofstream out(dir.file("tokens.jsonl"));
  std::mt19937_64 rng(99);
  for (std::size_t i = 0; i < kSamples; ++i) {
    std::vector<std::int64_t> tokens(1 + rng() % 200);
    for (auto& t : tokens) t = static_cast<std::int64_t>(rng() % 200);
    out << json(tokens).dump() << "\n";
    samples.push_back(std::move(tokens));
  }
  return samples;
}

constexpr const char* kConfig = R"(
parallel: {dp_size: 2, cp_size: 2}
balancer:
  cp: {strategy: auto, block_size: 16}
  dp: {strategy: auto, cost: attention}
data: {source: jsonl, path: tokens.jsonl, seq_length: 96, packing: true,
       global_batch_size: 4, micro_batch_size: 2, seed: 5}
model: {hidden_size: 16, num_layers: 1, num_heads: 2, vocab_size: 200}
train: {steps: 6, dtype: float64, lr: 1.0e-2, seed: 7, log_samples: true, threads: 1}
dist: {timeout_s: 30, op_timeout_s: 30}
)";

// One training setup in its own directory. Every launch costs a few seconds
// of LibTorch start-up per worker on two cores, so only the bitwise scenario
// runs the full DP 2 x CP 2; the others use the smallest layout that still
// exercises what they test.
class Job {
 public:
  Job(int dp, int cp)
      : Job(std::vector<std::string>{"parallel.dp_size=" + std::to_string(dp),
                                     "parallel.cp_size=" + std::to_string(cp)}) {}
  explicit Job(std::vector<std::string> layout)
      : samples_(write_tokens(dir_)),
        config_(dir_.write("run.yaml", kConfig)),
        layout_(std::move(layout)) {}

  // `fulcrum train` with `sets` (after the layout, so they may change it);
  // metrics and parameters go to <tag>.jsonl and <tag>.params.
  RunResult train(const std::string& tag, const std::vector<std::string>& sets,
                  const std::function<bool()>& stop_when = {}, int stop_signal = SIGKILL) const {
    std::vector<std::string> argv = {FULCRUM_BIN, "train", "--config", config_};
    for (const std::string& s : layout_) argv.insert(argv.end(), {"--set", s});
    // KEY=VALUE goes through --set; a flag ("--resume=auto") as it is.
    for (const std::string& s : sets) {
      if (s.rfind("--", 0) == 0) {
        argv.push_back(s);
      } else {
        argv.insert(argv.end(), {"--set", s});
      }
    }
    argv.insert(argv.end(), {"--metrics", metrics(tag), "--save-params", params(tag)});
    return run(argv, seconds(120), {}, stop_when, stop_signal);
  }
  std::string metrics(const std::string& tag) const { return dir_.file(tag + ".jsonl"); }
  std::string params(const std::string& tag) const { return dir_.file(tag + ".params"); }
  std::string path(const std::string& name) const { return dir_.file(name); }
  const std::vector<std::vector<std::int64_t>>& samples() const { return samples_; }

 private:
  TempDir dir_{"fulcrum_ckpt_it_"};
  std::vector<std::vector<std::int64_t>> samples_;
  std::string config_;
  std::vector<std::string> layout_;
};

std::int64_t checksum(const std::vector<std::int64_t>& tokens, std::int64_t b, std::int64_t e) {
  std::int64_t s = 0;
  for (std::int64_t t = b; t < e; ++t) s += (t + 1) * tokens[static_cast<std::size_t>(t)];
  return s;
}

// The pieces of one epoch's steps (1-6 for `epoch` 0, 7-12 for 1, ...)
// taken from `first` up to and including `first_until` and from `second`
// after it: together they must tile every sample once, with the tokens
// written.
void expect_exactly_once(const Record& first, std::int64_t first_until, const Record& second,
                         const std::vector<std::vector<std::int64_t>>& samples,
                         std::int64_t epoch = 0) {
  std::map<std::int64_t, std::vector<std::array<std::int64_t, 2>>> seen;
  for (std::int64_t step = 6 * epoch + 1; step <= 6 * epoch + 6; ++step) {
    const Record& r = step <= first_until ? first : second;
    const auto it = r.pieces.find(step);
    ASSERT_NE(it, r.pieces.end()) << "no pieces logged for step " << step;
    for (const auto& [s, b, e, sum] : it->second) {
      ASSERT_GE(s, 0);
      ASSERT_LT(s, static_cast<std::int64_t>(samples.size()));
      const auto& tokens = samples[static_cast<std::size_t>(s)];
      ASSERT_LE(e, static_cast<std::int64_t>(tokens.size()));
      EXPECT_EQ(sum, checksum(tokens, b, e)) << "sample " << s << " [" << b << ", " << e << ")";
      seen[s].push_back({b, e});
    }
  }
  for (std::size_t s = 0; s < samples.size(); ++s) {
    auto ranges = seen[static_cast<std::int64_t>(s)];
    std::sort(ranges.begin(), ranges.end());
    std::int64_t next = 0;
    for (const auto& [b, e] : ranges) {
      EXPECT_EQ(b, next) << "sample " << s << ": tokens from " << next
                         << (b > next ? " skipped" : " repeated") << " across the interruption";
      next = e;
    }
    EXPECT_EQ(next, static_cast<std::int64_t>(samples[s].size())) << "sample " << s;
  }
}

// Losses of `steps` equal bit for bit (float64 through the JSON's
// round-trip formatting).
void expect_same_losses(const Record& expected, const Record& got,
                        const std::vector<std::int64_t>& steps, const std::string& what) {
  for (std::int64_t step : steps) {
    ASSERT_TRUE(expected.loss.count(step)) << what << ": reference has no step " << step;
    ASSERT_TRUE(got.loss.count(step)) << what << ": no step " << step;
    EXPECT_EQ(got.loss.at(step), expected.loss.at(step)) << what << " step " << step;
  }
}

// Final parameters equal bit for bit; the first difference is named.
void expect_same_params(const Record& expected, const Record& got, const std::string& what) {
  ASSERT_FALSE(expected.params.empty()) << what << ": no reference parameters";
  ASSERT_EQ(got.params.size(), expected.params.size()) << what;
  for (const auto& [name, values] : expected.params) {
    const auto it = got.params.find(name);
    ASSERT_NE(it, got.params.end()) << what << ": no parameter " << name;
    ASSERT_EQ(it->second.size(), values.size()) << what << ": " << name;
    for (std::size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(it->second[i], values[i])
          << what << ": final parameters differ first at " << name << "[" << i << "]";
    }
  }
}

std::string checkpoint_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld.ckpt", static_cast<long long>(step));
  return name;
}

std::vector<std::string> checkpoint_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// A run stopped after step 4 and resumed from its checkpoint of step 3
// trains steps 4-6 as the uninterrupted run did, bit for bit, and every
// sample exactly once.
void expect_stopped_run_resumes_bitwise(const Job& job) {
  const std::string ref_dir = job.path("ref_ckpt");
  const RunResult u =
      job.train("ref", {"train.checkpoint_every=3", "train.checkpoint_dir=" + ref_dir});
  ASSERT_EQ(u.exit_code, 0) << u;
  const Record ref = read_record(job.metrics("ref"), job.params("ref"));
  ASSERT_EQ(ref.loss.size(), 6u);
  ASSERT_NE(ref.loss.at(1), ref.loss.at(6))
      << "training did not move; the comparison proves nothing";
  expect_exactly_once(ref, 6, ref, job.samples());

  // Stopped after step 4: the checkpoint of step 3 is the last one, so
  // step 4's update is lost and must be redone from the same samples.
  const std::string dir = job.path("ckpt");
  const std::vector<std::string> sets = {"train.checkpoint_every=3", "train.checkpoint_dir=" + dir};
  std::vector<std::string> stop = sets;
  stop.push_back("train.steps=4");
  const RunResult a = job.train("a", stop);
  ASSERT_EQ(a.exit_code, 0) << a;
  const Record first = read_record(job.metrics("a"));
  // Writing checkpoints changes nothing in the run itself.
  expect_same_losses(ref, first, {1, 2, 3, 4}, "run with checkpoints");

  std::vector<std::string> resume = sets;
  resume.push_back("--resume=auto");  // fulcrum train's flag for train.resume
  const RunResult b = job.train("b", resume);
  ASSERT_EQ(b.exit_code, 0) << b;
  EXPECT_NE(b.output.find("resuming from " + dir + "/step-00000003.ckpt"), std::string::npos) << b;
  const Record second = read_record(job.metrics("b"), job.params("b"));
  EXPECT_EQ(second.loss.size(), 3u) << "the resumed run must train steps 4-6 only";
  expect_same_losses(ref, second, {4, 5, 6}, "resumed run");
  expect_same_params(ref, second, "resumed run");
  for (std::int64_t step = 4; step <= 6; ++step) {
    EXPECT_EQ(second.pieces.at(step), ref.pieces.at(step)) << "step " << step;
  }
  expect_exactly_once(first, 3, second, job.samples());
  // The newest two are kept.
  EXPECT_EQ(checkpoint_names(dir),
            (std::vector<std::string>{"step-00000003.ckpt", "step-00000006.ckpt"}));
}

TEST(CheckpointResume, StoppedRunResumesBitwiseAndTrainsEverySampleOnce) {
  expect_stopped_run_resumes_bitwise(Job(2, 2));
}

// The same in hybrid mode: four ranks as one pool, every step's schedule
// made again from the resumed loader's batch (T = 32: a 96-token piece on
// three ranks or more, short ones on one).
TEST(CheckpointResume, HybridStoppedRunResumesBitwiseAndTrainsEverySampleOnce) {
  expect_stopped_run_resumes_bitwise(
      Job({"parallel.mode=hybrid", "parallel.dp_size=1", "parallel.cp_size=1",
           "parallel.world_size=4", "parallel.max_tokens_per_rank=32"}));
}

TEST(CheckpointResume, KilledRunResumesFromItsNewestCheckpoint) {
  Job job(2, 1);
  const RunResult u = job.train("ref", {});
  ASSERT_EQ(u.exit_code, 0) << u;
  const Record ref = read_record(job.metrics("ref"), job.params("ref"));

  // SIGKILL to the launcher and every worker as soon as the checkpoint of
  // step 1 exists: the kill may land anywhere after it, even in the middle
  // of writing a later one; five steps remain for it to land in.
  const std::string dir = job.path("ckpt");
  const std::vector<std::string> sets = {"train.checkpoint_every=1", "train.checkpoint_dir=" + dir};
  const std::string first_ckpt = dir + "/step-00000001.ckpt";
  const RunResult a = job.train("a", sets, [&] { return fs::exists(first_ckpt); });
  ASSERT_TRUE(a.stopped) << a;
  const Record first = read_record(job.metrics("a"));

  std::vector<std::string> resume = sets;
  resume.push_back("train.resume=auto");
  const RunResult b = job.train("b", resume);
  ASSERT_EQ(b.exit_code, 0) << b;
  const Record second = read_record(job.metrics("b"), job.params("b"));
  ASSERT_FALSE(second.loss.empty()) << "the kill came after the last step; nothing was resumed";
  const std::int64_t resumed_after = second.loss.begin()->first - 1;
  EXPECT_GE(resumed_after, 1) << b;
  EXPECT_NE(b.output.find("resuming from " + dir + "/" + checkpoint_name(resumed_after)),
            std::string::npos)
      << b;
  std::vector<std::int64_t> later;
  for (std::int64_t s = resumed_after + 1; s <= 6; ++s) later.push_back(s);
  expect_same_losses(ref, second, later, "resumed after a kill");
  expect_same_params(ref, second, "resumed after a kill");
  expect_exactly_once(first, resumed_after, second, job.samples());
  // A temporary file the kill may have left is gone once the resumed run
  // has written its own checkpoints.
  for (const std::string& name : checkpoint_names(dir)) {
    EXPECT_NE(name.front(), '.') << "stale temporary file " << name;
  }
}

// SIGTERM to `fulcrum train` (no train.checkpoint_every: only the
// interruption writes): the launcher forwards it, the ranks agree at the next
// step boundary, rank 0 writes that step's checkpoint and says where, and the
// job exits 143. --resume auto then continues it bit for bit, every sample of
// the interrupted epoch trained once. The signal may land at any step, so the
// epoch checked is the one it landed in.
TEST(CheckpointResume, SigtermWritesACheckpointAtAStepBoundaryAndResumeContinues) {
  Job job(2, 1);
  const std::string dir = job.path("ckpt");
  const std::string metrics = job.metrics("a");
  const RunResult a = job.train(
      "a", {"train.checkpoint_dir=" + dir, "train.steps=600"},
      [&] { return fs::exists(metrics) && fs::file_size(metrics) > 0; }, SIGTERM);
  ASSERT_TRUE(a.stopped) << a;
  ASSERT_EQ(a.exit_code, 128 + SIGTERM) << a;
  const std::vector<std::string> written = checkpoint_names(dir);
  ASSERT_EQ(written.size(), 1u) << a;
  const std::int64_t k = std::stoll(written[0].substr(5, 8));
  const Record first = read_record(metrics);
  ASSERT_FALSE(first.loss.empty()) << a;
  EXPECT_EQ(first.loss.rbegin()->first, k) << "the checkpoint is not of the last step trained";
  ASSERT_LT(k, 600) << "the signal came after the last step" << a;
  EXPECT_NE(a.output.find("checkpoint step " + std::to_string(k) + ": " + dir + "/" + written[0]),
            std::string::npos)
      << a;
  EXPECT_NE(a.output.find("interrupted by SIGTERM after step " + std::to_string(k)),
            std::string::npos)
      << a;
  EXPECT_NE(a.output.find("continue with --resume auto"), std::string::npos) << a;

  // Continue to the end of the epoch after the interrupted one, and compare
  // with a run that was never interrupted.
  const std::int64_t epoch = (k - 1) / 6;
  const std::int64_t end = 6 * (epoch + 2);
  const std::string steps = "train.steps=" + std::to_string(end);
  const RunResult b = job.train("b", {"train.checkpoint_dir=" + dir, steps, "--resume=auto"});
  ASSERT_EQ(b.exit_code, 0) << b;
  EXPECT_NE(b.output.find("resuming from " + dir + "/" + written[0]), std::string::npos) << b;
  // The summary counts this run's steps, not the checkpoint's.
  EXPECT_NE(b.output.find(std::to_string(end - k) + " steps (" + std::to_string(k + 1) + "-" +
                          std::to_string(end) + ", resumed after step " + std::to_string(k) + ")"),
            std::string::npos)
      << b;
  EXPECT_NE(b.output.find("at step " + std::to_string(k + 1) + " -> "), std::string::npos) << b;
  EXPECT_NE(b.output.find(" tokens/s  eta "), std::string::npos) << b;
  const Record second = read_record(job.metrics("b"), job.params("b"));
  EXPECT_EQ(second.loss.begin()->first, k + 1) << b;
  EXPECT_EQ(second.loss.rbegin()->first, end) << b;

  const RunResult u = job.train("ref", {steps});
  ASSERT_EQ(u.exit_code, 0) << u;
  const Record ref = read_record(job.metrics("ref"), job.params("ref"));
  std::vector<std::int64_t> later;
  for (std::int64_t s = k + 1; s <= end; ++s) later.push_back(s);
  expect_same_losses(ref, first, {k}, "interrupted run");
  expect_same_losses(ref, second, later, "resumed after SIGTERM");
  expect_same_params(ref, second, "resumed after SIGTERM");
  expect_exactly_once(first, k, second, job.samples(), epoch);
}

// SIGINT (Ctrl-C) the same way, on one rank: exit 130 and the checkpoint of
// the last step trained.
TEST(CheckpointResume, SigintWritesACheckpointAtAStepBoundary) {
  Job job(1, 1);
  const std::string dir = job.path("ckpt");
  const std::string metrics = job.metrics("a");
  const RunResult a = job.train(
      "a", {"train.checkpoint_dir=" + dir, "train.steps=600"},
      [&] { return fs::exists(metrics) && fs::file_size(metrics) > 0; }, SIGINT);
  ASSERT_TRUE(a.stopped) << a;
  ASSERT_EQ(a.exit_code, 128 + SIGINT) << a;
  const std::vector<std::string> written = checkpoint_names(dir);
  ASSERT_EQ(written.size(), 1u) << a;
  const std::int64_t k = std::stoll(written[0].substr(5, 8));
  EXPECT_EQ(read_record(metrics).loss.rbegin()->first, k) << a;
  EXPECT_NE(a.output.find("interrupted by SIGINT after step " + std::to_string(k)),
            std::string::npos)
      << a;
  EXPECT_NE(a.output.find("fulcrum: interrupted by SIGINT; the workers stopped after the same "
                          "step and rank 0 wrote a checkpoint"),
            std::string::npos)
      << a;
}

TEST(CheckpointResume, CorruptNewestIsRefusedAndThePreviousUsed) {
  Job job(1, 2);
  const std::string dir = job.path("ckpt");
  const std::vector<std::string> sets = {"train.checkpoint_every=2", "train.checkpoint_dir=" + dir};
  std::vector<std::string> stop = sets;
  stop.push_back("train.steps=4");
  const RunResult a = job.train("a", stop);
  ASSERT_EQ(a.exit_code, 0) << a;
  const Record first = read_record(job.metrics("a"));

  // One flipped bit in the middle of the newest checkpoint's payload.
  const std::string newest = dir + "/step-00000004.ckpt";
  std::string bytes = read_bytes(newest);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() / 2] ^= 0x04;
  write_bytes(newest, bytes);

  std::vector<std::string> resume = sets;
  resume.push_back("train.resume=auto");
  const RunResult b = job.train("b", resume);
  ASSERT_EQ(b.exit_code, 0) << b;
  EXPECT_NE(b.output.find("checkpoint " + newest + " is corrupt: payload CRC-32"),
            std::string::npos)
      << b;
  EXPECT_NE(b.output.find("refused it, resuming from the older " + dir + "/step-00000002.ckpt"),
            std::string::npos)
      << b;
  const Record second = read_record(job.metrics("b"));
  EXPECT_EQ(second.loss.begin()->first, 3) << b;
  // Steps 3 and 4 ran in both jobs, from the same state.
  expect_same_losses(first, second, {3, 4}, "resumed from the older checkpoint");
  expect_exactly_once(first, 2, second, job.samples());
}

TEST(CheckpointResume, BadCheckpointsAndSettingsAreRefusedInOneLine) {
  Job job(1, 1);
  const std::string dir = job.path("ckpt");
  const RunResult a =
      job.train("a", {"train.steps=1", "train.checkpoint_every=1", "train.checkpoint_dir=" + dir});
  ASSERT_EQ(a.exit_code, 0) << a;
  const std::string good = dir + "/step-00000001.ckpt";
  ASSERT_TRUE(fs::exists(good)) << a;

  auto expect_refusal = [&](const std::vector<std::string>& sets, const std::string& text) {
    const RunResult r = job.train("refused", sets);
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_NE(r.output.find(text), std::string::npos) << "expected '" << text << "' in: " << r;
    EXPECT_LT(r.wall_s, 60.0) << r;
  };

  // Truncated, named explicitly: refused, nothing falls back.
  const std::string truncated = job.path("truncated.ckpt");
  const std::string bytes = read_bytes(good);
  write_bytes(truncated, bytes.substr(0, bytes.size() - 10));
  expect_refusal({"train.resume=" + truncated},
                 "checkpoint " + truncated + " is truncated: its header promises " +
                     std::to_string(bytes.size() - 56) + " payload bytes, the file holds " +
                     std::to_string(bytes.size() - 66));
  // Another model: the differing key is named.
  expect_refusal({"train.resume=" + good, "model.hidden_size=32"},
                 "model.hidden_size is 16 in the checkpoint and 32 now");
  // A fresh run into a directory that holds checkpoints would mix two runs.
  expect_refusal({"train.checkpoint_every=1", "train.checkpoint_dir=" + dir},
                 "already holds checkpoints");
  // Every checkpoint damaged: auto does not silently start afresh.
  write_bytes(good, bytes.substr(0, 40));
  expect_refusal({"train.resume=auto", "train.checkpoint_dir=" + dir},
                 "none of the 1 checkpoints in " + dir + " is intact");
}

TEST(CheckpointResume, AnotherLayoutResumesWithAWarningAndTrainsEverySampleOnce) {
  Job job(2, 1);
  const std::string dir = job.path("ckpt");
  const std::vector<std::string> sets = {"train.checkpoint_every=2", "train.checkpoint_dir=" + dir};
  std::vector<std::string> stop = sets;
  stop.push_back("train.steps=2");
  const RunResult a = job.train("a", stop);
  ASSERT_EQ(a.exit_code, 0) << a;
  const Record first = read_record(job.metrics("a"));

  std::vector<std::string> resume = sets;
  resume.insert(resume.end(), {"train.resume=auto", "parallel.dp_size=1", "parallel.cp_size=2"});
  const RunResult b = job.train("b", resume);
  ASSERT_EQ(b.exit_code, 0) << b;
  EXPECT_NE(b.output.find("parallel.dp_size is 2 in the checkpoint and 1 now"), std::string::npos)
      << b;
  EXPECT_NE(b.output.find("parallel.cp_size is 1 in the checkpoint and 2 now"), std::string::npos)
      << b;
  const Record second = read_record(job.metrics("b"));
  EXPECT_EQ(second.loss.begin()->first, 3) << b;
  expect_exactly_once(first, 2, second, job.samples());
}

// balancer.dp.window = 3 on DP 2: the checkpoint of step 4 falls in the
// middle of the second window (steps 4-6), so the dispatcher's batches of
// steps 5 and 6 are in it. Stopped after step 5 (its update lost), resumed:
// steps 5 and 6 and the final parameters are bitwise the uninterrupted run's,
// every sample is trained once across the interruption, a checkpoint of one
// window is refused by a run of another, and a run of another DP size
// continues the same steps.
TEST(CheckpointResume, StoppedRunInTheMiddleOfADpWindowResumesBitwise) {
  Job job(2, 1);
  const std::vector<std::string> windowed = {"balancer.dp.window=3"};
  std::vector<std::string> ref_sets = windowed;
  const RunResult u = job.train("ref", ref_sets);
  ASSERT_EQ(u.exit_code, 0) << u;
  EXPECT_EQ(u.output.find("balancer.dp.window"), std::string::npos)
      << "the window is used, not warned about: " << u;
  const Record ref = read_record(job.metrics("ref"), job.params("ref"));
  ASSERT_EQ(ref.loss.size(), 6u);
  expect_exactly_once(ref, 6, ref, job.samples());

  // The window changes which samples share a step: the run is not window 1's.
  const RunResult plain = job.train("plain", {});
  ASSERT_EQ(plain.exit_code, 0) << plain;
  const Record one = read_record(job.metrics("plain"));
  bool differs = false;
  for (std::int64_t step = 1; step <= 6; ++step) {
    differs = differs || one.pieces.at(step) != ref.pieces.at(step);
  }
  EXPECT_TRUE(differs) << "window 3 served the same steps as window 1; the test proves nothing";

  const std::string dir = job.path("ckpt");
  std::vector<std::string> sets = windowed;
  sets.insert(sets.end(), {"train.checkpoint_every=2", "train.checkpoint_dir=" + dir});
  std::vector<std::string> stop = sets;
  stop.push_back("train.steps=5");
  const RunResult a = job.train("a", stop);
  ASSERT_EQ(a.exit_code, 0) << a;
  const Record first = read_record(job.metrics("a"));
  expect_same_losses(ref, first, {1, 2, 3, 4, 5}, "run with checkpoints");

  std::vector<std::string> resume = sets;
  resume.push_back("train.resume=auto");
  const RunResult b = job.train("b", resume);
  ASSERT_EQ(b.exit_code, 0) << b;
  EXPECT_NE(b.output.find("resuming from " + dir + "/step-00000004.ckpt"), std::string::npos) << b;
  const Record second = read_record(job.metrics("b"), job.params("b"));
  EXPECT_EQ(second.loss.size(), 2u) << "the resumed run must train steps 5-6 only";
  expect_same_losses(ref, second, {5, 6}, "resumed in the middle of a window");
  expect_same_params(ref, second, "resumed in the middle of a window");
  for (std::int64_t step = 5; step <= 6; ++step) {
    EXPECT_EQ(second.pieces.at(step), ref.pieces.at(step)) << "step " << step;
  }
  expect_exactly_once(first, 4, second, job.samples());

  // Another window is another data order: one line, exit 2.
  auto expect_refusal = [&](const std::vector<std::string>& extra, const std::string& text) {
    std::vector<std::string> r = resume;
    r.insert(r.end(), extra.begin(), extra.end());
    const RunResult x = job.train("refused", r);
    EXPECT_EQ(x.exit_code, 2) << x;
    EXPECT_NE(x.output.find(text), std::string::npos) << "expected '" << text << "' in: " << x;
  };
  expect_refusal({"balancer.dp.window=2"},
                 "checkpoint " + dir +
                     "/step-00000006.ckpt: it was made with balancer.dp.window = 3 and this run "
                     "has 2; resume with balancer.dp.window: 3");

  // Another layout continues the same window: the window's steps do not
  // depend on the DP size, so steps 5 and 6 train the same pieces.
  std::vector<std::string> relayout = windowed;
  relayout.insert(relayout.end(), {"parallel.dp_size=1", "parallel.cp_size=2",
                                   "train.resume=" + dir + "/step-00000004.ckpt"});
  const RunResult c = job.train("c", relayout);
  ASSERT_EQ(c.exit_code, 0) << c;
  const Record third = read_record(job.metrics("c"));
  ASSERT_EQ(third.loss.size(), 2u) << c;
  for (std::int64_t step = 5; step <= 6; ++step) {
    EXPECT_EQ(third.pieces.at(step), ref.pieces.at(step)) << "step " << step << " on DP 1 x CP 2";
  }
  expect_exactly_once(first, 4, third, job.samples());
}

}  // namespace
