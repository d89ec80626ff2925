// The comparison's figures (train.compare_schedulers) and hybrid mode's
// progress line and summary, from hand-made step figures; the metrics file.
#include "train/metrics.h"

#include "tests/test_support.h"
#include "train/fit_records.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace fulcrum::train {
namespace {

// The critical path as a longest path: a slot's finish is its length plus
// the latest finish among the slots that each of its members ran just
// before it (in (wave, index) order).
double longest_path(const std::vector<std::vector<std::int32_t>>& slot_ranks,
                    const std::vector<std::int32_t>& waves,
                    const std::vector<std::vector<double>>& member_ms) {
  const std::size_t n = slot_ranks.size();
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return waves[a] < waves[b]; });
  std::vector<std::size_t> position(n);
  for (std::size_t i = 0; i < n; ++i) position[order[i]] = i;
  std::map<std::size_t, double> memo;
  std::function<double(std::size_t)> finish = [&](std::size_t s) -> double {
    if (auto it = memo.find(s); it != memo.end()) return it->second;
    double before = 0.0;
    for (std::int32_t r : slot_ranks[s]) {
      // The latest slot of rank r ordered before s.
      for (std::size_t p = position[s]; p-- > 0;) {
        const auto& members = slot_ranks[order[p]];
        if (std::find(members.begin(), members.end(), r) == members.end()) continue;
        before = std::max(before, finish(order[p]));
        break;
      }
    }
    const double length = *std::max_element(member_ms[s].begin(), member_ms[s].end());
    return memo[s] = before + length;
  };
  double end = 0.0;
  for (std::size_t s = 0; s < n; ++s) end = std::max(end, finish(s));
  return end;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The metrics file: truncated on open, each write appended whole, one run
// at a time; written through this user's own link, never through another
// user's (they would choose the file overwritten), whose target is left as
// it was.
TEST(MetricsFileTest, WritesLinesOneRunAtATimeAndFollowsOnlyTrustedLinks) {
  const test::TempDir scratch("fulcrum-metrics");
  const std::filesystem::path& dir = scratch.path();
  const std::string path = (dir / "m.jsonl").string();
  std::ofstream(path) << "old contents\n";
  {
    Result<std::unique_ptr<MetricsFile>> file = MetricsFile::open(path);
    ASSERT_TRUE(file) << file.status().message();
    ASSERT_TRUE((*file)->write({"{\"step\":1}", "{\"step\":2}"}));
    ASSERT_TRUE((*file)->write({"{\"step\":3}"}));
  }
  EXPECT_EQ(read_all(path), "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  {
    // A second run on the same file while the first writes it: refused, and
    // the first's records kept; the file is free again once it is closed.
    Result<std::unique_ptr<MetricsFile>> first = MetricsFile::open(path);
    ASSERT_TRUE(first) << first.status().message();
    ASSERT_TRUE((*first)->write({"{\"step\":1}"}));
    Result<std::unique_ptr<MetricsFile>> second = MetricsFile::open(path);
    ASSERT_FALSE(second);
    EXPECT_NE(second.status().message().find("the metrics file " + path +
                                             " is being written by another run"),
              std::string::npos)
        << second.status().message();
    EXPECT_EQ(read_all(path), "{\"step\":1}\n");
  }
  EXPECT_TRUE(MetricsFile::open(path));
  // /dev/null, chosen to discard the records, is neither locked nor emptied.
  Result<std::unique_ptr<MetricsFile>> null_one = MetricsFile::open("/dev/null");
  ASSERT_TRUE(null_one) << null_one.status().message();
  EXPECT_TRUE(MetricsFile::open("/dev/null"));

  const std::string victim = (dir / "victim").string();
  std::ofstream(victim) << "keep\n";
  const std::string link = (dir / "link.jsonl").string();
  std::filesystem::create_symlink(victim, link);
  {
    Result<std::unique_ptr<MetricsFile>> file = MetricsFile::open(link);
    ASSERT_TRUE(file) << file.status().message();
    ASSERT_TRUE((*file)->write({"x"}));
  }
  EXPECT_EQ(read_all(victim), "x\n");
  if (::geteuid() == 0) {
    std::ofstream(victim) << "keep\n";
    ASSERT_EQ(::lchown(link.c_str(), 65534, 65534), 0);
    Result<std::unique_ptr<MetricsFile>> file = MetricsFile::open(link);
    ASSERT_FALSE(file);
    EXPECT_NE(file.status().message().find("the symbolic link " + link +
                                           " on its path is owned by uid 65534"),
              std::string::npos)
        << file.status().message();
    EXPECT_EQ(file.status().message().find('\n'), std::string::npos);
    EXPECT_EQ(read_all(victim), "keep\n");
  }
}

// A FIFO at the metrics path that no process reads (one put there after
// the launcher looked, or given to a worker started directly) is refused
// at once, not waited on; one that is read is written to, neither locked
// nor emptied.
TEST(MetricsFileTest, AFifoNoProcessReadsIsRefusedAtOnce) {
  const test::TempDir scratch("fulcrum-metrics");
  const std::filesystem::path& dir = scratch.path();
  const std::string fifo = (dir / "m.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::unique_ptr<MetricsFile>> refused = MetricsFile::open(fifo);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("the metrics file " + fifo +
                                            ": it is a FIFO that no process reads"),
            std::string::npos)
      << refused.status().message();

  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  {
    Result<std::unique_ptr<MetricsFile>> file = MetricsFile::open(fifo);
    ASSERT_TRUE(file) << file.status().message();
    ASSERT_TRUE((*file)->write({"{\"step\":1}"}));
  }
  char got[32] = {};
  EXPECT_EQ(::read(reader, got, sizeof got), 11);
  EXPECT_EQ(std::string(got), "{\"step\":1}\n");
  ::close(reader);
}

// A metrics file another user owns, or one with other names (hard links),
// is refused and left as it was: the records would be theirs, or emptying
// it would empty the other names too.
TEST(MetricsFileTest, AnotherUsersFileOrOneWithOtherNamesIsLeftAlone) {
  const test::TempDir scratch("fulcrum-metrics");
  const std::filesystem::path& dir = scratch.path();
  const std::string path = (dir / "m.jsonl").string();
  std::ofstream(path) << "keep\n";
  const std::string other_name = (dir / "other").string();
  ASSERT_EQ(::link(path.c_str(), other_name.c_str()), 0);
  Result<std::unique_ptr<MetricsFile>> linked = MetricsFile::open(path);
  ASSERT_FALSE(linked);
  EXPECT_NE(linked.status().message().find("the metrics file " + path + " has 2 names"),
            std::string::npos)
      << linked.status().message();
  EXPECT_EQ(read_all(path), "keep\n");
  ASSERT_EQ(::unlink(other_name.c_str()), 0);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    Result<std::unique_ptr<MetricsFile>> theirs = MetricsFile::open(path);
    ASSERT_FALSE(theirs);
    EXPECT_NE(theirs.status().message().find("the metrics file " + path + " is owned by uid 65534"),
              std::string::npos)
        << theirs.status().message();
    EXPECT_EQ(read_all(path), "keep\n");
    ASSERT_EQ(::chown(path.c_str(), 0, 0), 0);
  }
  EXPECT_TRUE(MetricsFile::open(path));  // the file alone, this user's: written
  EXPECT_EQ(read_all(path), "");
}

TEST(CompareMetrics, ReplayWaitsForEveryMemberAndTakesTheSlowest) {
  // Rank 0 runs 10 ms, rank 1 runs 5 ms, then both share a slot whose
  // members take 3 and 4 ms: it starts at 10 and lasts 4.
  const std::vector<std::vector<std::int32_t>> ranks = {{0}, {1}, {0, 1}};
  EXPECT_DOUBLE_EQ(replay_critical_path(ranks, {0, 0, 1}, {{10}, {5}, {3, 4}}), 14.0);
  // Listed out of wave order: the wave, not the index, decides.
  EXPECT_DOUBLE_EQ(replay_critical_path({{0, 1}, {0}, {1}}, {1, 0, 0}, {{3, 4}, {10}, {5}}), 14.0);
}

TEST(CompareMetrics, ReplayEqualsTheLongestPathOfRandomSchedules) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int world = 1 + static_cast<int>(rng() % 6);
    const int slots = 1 + static_cast<int>(rng() % 12);
    std::vector<std::vector<std::int32_t>> ranks;
    std::vector<std::int32_t> waves;
    std::vector<std::vector<double>> ms;
    for (int s = 0; s < slots; ++s) {
      std::vector<std::int32_t> all(static_cast<std::size_t>(world));
      for (int r = 0; r < world; ++r) all[static_cast<std::size_t>(r)] = r;
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(1 + rng() % static_cast<unsigned>(world));
      std::vector<double> t;
      for (std::size_t m = 0; m < all.size(); ++m) t.push_back(0.5 + (rng() % 1000) / 10.0);
      ranks.push_back(all);
      waves.push_back(static_cast<std::int32_t>(rng() % 4));
      ms.push_back(t);
    }
    EXPECT_NEAR(replay_critical_path(ranks, waves, ms), longest_path(ranks, waves, ms), 1e-9)
        << "trial " << trial;
  }
}

// Two ranks, fixed (one slot of both) and hybrid (one slot each), three
// repetitions with known times.
struct TwoSchedulers {
  StepReport step;
  std::vector<RankStepFigures> ranks;
};

TwoSchedulers two_schedulers() {
  TwoSchedulers t;
  t.step.repetitions = 3;
  StepReport::Compared fixed{"fixed", "fixed", {{0, 1}}, {0}, 20.0, {20.0, 20.0}};
  StepReport::Compared hybrid{"hybrid", "hybrid", {{0}, {1}}, {0, 0}, 10.0, {10.0, 8.0}};
  t.step.compared = {fixed, hybrid};
  // fixed: rank 0 takes 30, 22, 26; rank 1 takes 24, 28, 20.
  // hybrid: rank 0 takes 12, 11, 16; rank 1 takes 9, 14, 10.
  const double f[2][3] = {{30, 22, 26}, {24, 28, 20}};
  const double h[2][3] = {{12, 11, 16}, {9, 14, 10}};
  for (int r = 0; r < 2; ++r) {
    RankStepFigures figures;
    figures.rank = r;
    for (int rep = 0; rep < 3; ++rep) {
      figures.compare.push_back({0, rep, {0}, {f[r][rep]}, {2 * f[r][rep]}});
      figures.compare.push_back({1, rep, {r}, {h[r][rep]}, {h[r][rep]}});
    }
    t.ranks.push_back(figures);
  }
  return t;
}

TEST(CompareMetrics, MediansErrorsAndSpeedupsFromEveryRepetition) {
  const TwoSchedulers t = two_schedulers();
  const std::vector<CompareResult> results = compare_results(t.step, t.ranks);
  ASSERT_EQ(results.size(), 2u);
  const CompareResult& fixed = results[0];
  const CompareResult& hybrid = results[1];
  EXPECT_EQ(fixed.rank_min_ms, (std::vector<double>{22, 20}));
  EXPECT_EQ(fixed.rank_median_ms, (std::vector<double>{26, 24}));
  EXPECT_DOUBLE_EQ(fixed.prediction_error[0], (26.0 - 20.0) / 20.0);
  EXPECT_DOUBLE_EQ(fixed.max_rank_ms, 26.0);
  // One slot of both: its length is the slower member's median, 26.
  EXPECT_DOUBLE_EQ(fixed.critical_path_ms, 26.0);
  EXPECT_DOUBLE_EQ(fixed.critical_path_wall_ms, 52.0);
  EXPECT_EQ(fixed.repetition_critical_path_ms, (std::vector<double>{30, 28, 26}));
  EXPECT_EQ(hybrid.rank_median_ms, (std::vector<double>{12, 10}));
  EXPECT_DOUBLE_EQ(hybrid.prediction_error[1], (10.0 - 8.0) / 8.0);
  EXPECT_DOUBLE_EQ(hybrid.critical_path_ms, 12.0);
  EXPECT_EQ(hybrid.repetition_critical_path_ms, (std::vector<double>{12, 14, 16}));
  EXPECT_DOUBLE_EQ(hybrid.measured_speedup_over_fixed, 26.0 / 12.0);
  EXPECT_DOUBLE_EQ(hybrid.predicted_speedup_over_fixed, 2.0);
  // Repetition by repetition: 30/12, 28/14, 26/16.
  EXPECT_DOUBLE_EQ(hybrid.speedup_min, 26.0 / 16.0);
  EXPECT_DOUBLE_EQ(hybrid.speedup_max, 30.0 / 12.0);
}

TEST(CompareMetrics, EveryComparedSchedulerHasARecordAndOnlyOthersASpeedup) {
  TwoSchedulers t = two_schedulers();
  t.step.step = 4;
  t.step.clock = "thread CPU";
  t.step.hybrid = StepReport::Hybrid{"hybrid", "", {1, 1}, 10.0};
  const std::vector<std::string> lines = metrics_lines(t.step, t.ranks, 2, 1);
  int fixed = 0, hybrid = 0;
  for (const std::string& line : lines) {
    if (line.find("\"compare\":\"fixed\"") != std::string::npos) {
      ++fixed;
      EXPECT_EQ(line.find("speedup"), std::string::npos) << line;
      EXPECT_NE(line.find("\"prediction_error\":[0.3,0.2]"), std::string::npos) << line;
      EXPECT_NE(line.find("\"critical_path_wall_ms\":52.0"), std::string::npos) << line;
      EXPECT_NE(line.find("\"clock\":\"thread CPU\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"slot_ranks\":[[0,1]],\"waves\":[0]"), std::string::npos) << line;
    }
    if (line.find("\"compare\":\"hybrid\"") != std::string::npos) {
      ++hybrid;
      EXPECT_NE(line.find("\"measured_speedup_over_fixed\":2.1667"), std::string::npos) << line;
      EXPECT_NE(line.find("\"predicted_speedup_over_fixed\":2.0"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(fixed, 1);
  EXPECT_EQ(hybrid, 1);
}

TEST(CompareMetrics, RunsSurviveTheGatherToRankZero) {
  const TwoSchedulers t = two_schedulers();
  RankStepFigures sent = t.ranks[1];
  sent.compare_ms = 12.5;
  sent.fit_samples = {{2, 300, 40, 1, 4096, 0.0125, 700, 17}, {1, 90, 3, 0, 0, 1e-3, 90}};
  const Result<RankStepFigures> got = decode_figures(encode_figures(sent));
  ASSERT_TRUE(got) << got.status().message();
  ASSERT_EQ(got->compare.size(), sent.compare.size());
  for (std::size_t i = 0; i < sent.compare.size(); ++i) {
    EXPECT_EQ(got->compare[i].scheduler, sent.compare[i].scheduler);
    EXPECT_EQ(got->compare[i].repetition, sent.compare[i].repetition);
    EXPECT_EQ(got->compare[i].slots, sent.compare[i].slots);
    EXPECT_EQ(got->compare[i].slot_ms, sent.compare[i].slot_ms);
    EXPECT_EQ(got->compare[i].slot_wall_ms, sent.compare[i].slot_wall_ms);
  }
  EXPECT_EQ(got->compare_ms, 12.5);
  ASSERT_EQ(got->fit_samples.size(), 2u);
  EXPECT_EQ(got->fit_samples[0].row_tokens, 700);
  EXPECT_EQ(got->fit_samples[0].seconds, 0.0125);
  EXPECT_EQ(got->fit_samples[1].row_tokens, 90);
  EXPECT_EQ(got->fit_samples[0].partial_tiles, 17);
  EXPECT_EQ(got->fit_samples[1].partial_tiles, -1);
}

// A sample row of six entries is a record from before row_tokens: read, with
// the row unknown (0, which the fit does not use); other lengths are refused.
TEST(CompareMetrics, FitSamplesFromBeforeTheRowReadWithTheRowUnknown) {
  const auto old = nlohmann::ordered_json::parse("[[2, 300, 40, 1, 4096, 0.0125]]");
  const std::vector<calibrate::SlotSample> read = fit_samples_from_json(old);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].tiles, 40);
  EXPECT_EQ(read[0].row_tokens, 0);
  EXPECT_EQ(read[0].partial_tiles, -1);
  EXPECT_THROW(fit_samples_from_json(nlohmann::ordered_json::parse("[[2, 300, 40, 1, 4096]]")),
               std::runtime_error);
}

// Seven entries: a record from before partial_tiles, read as not recorded
// (-1); eight: read; a count below -1 or past the tiles, or a ninth entry,
// refused.
TEST(CompareMetrics, FitSamplesCarryTheirPartialTiles) {
  const auto rows = nlohmann::ordered_json::parse(
      "[[2, 300, 40, 1, 4096, 0.0125, 700], [2, 300, 40, 1, 4096, 0.0125, 700, 12],"
      " [1, 90, 3, 0, 0, 0.001, 90, 0], [1, 90, 3, 0, 0, 0.001, 90, 3]]");
  const std::vector<calibrate::SlotSample> read = fit_samples_from_json(rows);
  ASSERT_EQ(read.size(), 4u);
  EXPECT_EQ(read[0].partial_tiles, -1);
  EXPECT_EQ(read[1].partial_tiles, 12);
  EXPECT_EQ(read[2].partial_tiles, 0);
  EXPECT_EQ(read[3].partial_tiles, 3);
  EXPECT_EQ(fit_samples_from_json(fit_samples_json(read)).size(), 4u);
  for (const char* bad : {"[[1, 90, 3, 0, 0, 0.001, 90, 4]]", "[[1, 90, 3, 0, 0, 0.001, 90, -2]]",
                          "[[1, 90, 3, 0, 0, 0.001, 90, 1, 5]]"}) {
    EXPECT_THROW(fit_samples_from_json(nlohmann::ordered_json::parse(bad)), std::runtime_error)
        << bad;
  }
}

TEST(HybridProgress, LineSaysWhichSchedulerRanItsGroupsAndBothTimes) {
  StepReport step;
  step.dp_strategy = "auto";
  step.hybrid = StepReport::Hybrid{"megatron_dcp", "", {4, 1, 1, 2}, 33.25};
  step.hybrid->measured_ms = 120.0;
  const std::string line = render_balance(step);
  EXPECT_EQ(line.find("dp auto"), std::string::npos) << line;
  EXPECT_NE(line.find("scheduler megatron_dcp"), std::string::npos) << line;
  EXPECT_NE(line.find("slots 2x1 1x2 1x4"), std::string::npos) << line;
  EXPECT_NE(line.find("measured 120.0 ms, predicted 33.2 ms"), std::string::npos) << line;
  step.hybrid.reset();
  EXPECT_EQ(render_balance(step).rfind("dp auto", 0), 0u);
}

std::string hybrid_summary(double measured_ms, double predicted_ms) {
  StepReport step;
  step.step = 1;
  step.profile = "/tmp/my profile.yaml";
  step.hybrid = StepReport::Hybrid{"hybrid", "", {1}, predicted_ms};
  step.hybrid->measured_ms = measured_ms;
  step.wall_ms = measured_ms;
  RunSummary summary;
  summary.add(step, {RankStepFigures{}}, 1);
  return summary.render("hybrid over 1 rank", 1.0);
}

TEST(HybridSummary, NamesTheProfileAndSaysHowToCalibrateOnlyPastTwentyPercent) {
  const std::string close = hybrid_summary(110.0, 100.0);
  EXPECT_NE(close.find("measured 110.0 ms, predicted 100.0 ms by profile /tmp/my profile.yaml"),
            std::string::npos)
      << close;
  EXPECT_EQ(close.find("fulcrum calibrate"), std::string::npos) << close;
  for (const double measured : {125.0, 70.0}) {
    const std::string far = hybrid_summary(measured, 100.0);
    EXPECT_NE(far.find("fulcrum calibrate"), std::string::npos) << far;
    EXPECT_NE(far.find("docs/HYBRID_RUNTIME.md"), std::string::npos) << far;
  }
}

}  // namespace
}  // namespace fulcrum::train
