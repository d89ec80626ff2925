// Multi-process integration scenarios: every test starts real worker
// processes (through `fulcrum train` or the launcher), under a deadline, and
// checks what they report. No LibTorch here: the processes under test carry
// it, this driver only reads their output, metrics and parameter files.
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
void expect_every_label_kept(const Trained& t) {
  std::int64_t trained = 0;
  for (std::int64_t n : t.tokens) trained += n;
  std::int64_t expected = 0;
  for (const json& length : json::parse(kEquivalenceLengths)) {
    expected += length.get<std::int64_t>() - 1;
  }
  EXPECT_EQ(trained, expected) << "an epoch trains on every label but each sample's last";
}

// Window 1 and window 3 (the window is part of the data order: each is
// compared with one process of the same window).
class Invariance : public ::testing::TestWithParam<int> {};

TEST_P(Invariance, EveryLayoutAndDpStrategyMatchesOneProcess) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const std::string window = "balancer.dp.window=" + std::to_string(GetParam());
  // Three steps of eight over 24 samples: one whole epoch.
  const Trained single = train_layout(dir, config, 1, 1, {window});
  ASSERT_EQ(single.losses.size(), 3u);
  // Training must have moved: equal losses of an idle model prove nothing.
  EXPECT_NE(single.losses.front(), single.losses.back());
  expect_every_label_kept(single);
  for (const auto& [dp, cp] :
       std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {2, 2}, {1, 4}, {4, 1}}) {
    expect_same(single, train_layout(dir, config, dp, cp, {window}),
                "DP" + std::to_string(dp) + "xCP" + std::to_string(cp));
  }
  for (const char* strategy : {"round_robin", "lpt", "karmarkar_karp"}) {
    const std::string set = std::string("balancer.dp.strategy=") + strategy;
    expect_same(single, train_layout(dir, config, 4, 1, {window, set}),
                std::string("DP4xCP1 ") + strategy);
    expect_same(single, train_layout(dir, config, 2, 2, {window, set}),
                std::string("DP2xCP2 ") + strategy);
  }
}

INSTANTIATE_TEST_SUITE_P(Window, Invariance, ::testing::Values(1, 3));

// Hybrid placement: the world as one pool, each piece of the global batch on
// a group of any size in a wave (parallel.mode: hybrid), trains to the same
// losses and parameters as one process and as fixed mode, for every
// scheduler, at W = 4 and at W = 6 (not a power of two). With T = 16 the
// 64-token pieces of the long samples need four ranks and the hybrid
// scheduler puts short samples on one; the metrics must show it, or the run
// proved nothing.
TEST(Hybrid, EverySchedulerAtFourAndSixRanksMatchesOneProcessAndFixedMode) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const Trained single = train_layout(dir, config, 1, 1);
  expect_same(single, train_layout(dir, config, 2, 2), "fixed DP2xCP2");
  for (int world : {4, 6}) {
    for (const char* scheduler : {"hybrid", "megatron_dcp", "fixed"}) {
      const std::string what =
          std::string("hybrid W=") + std::to_string(world) + " scheduler " + scheduler;
      const std::vector<std::string> sets = {
          "parallel.mode=hybrid", "parallel.world_size=" + std::to_string(world),
          "parallel.max_tokens_per_rank=16",
          std::string("balancer.schedule.strategy=") + scheduler};
      const Trained hybrid = train_layout(dir, config, 1, 1, sets);
      expect_same(single, hybrid, what);
      std::string tag = "dp1cp1";
      for (const std::string& e : sets) {
        tag += "_";
        for (char c : e) tag += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      }
      std::set<std::int64_t> groups;
      std::int64_t hybrid_lines = 0;
      for (const json& line : read_metrics(dir.file(tag + ".jsonl"))) {
        if (!line.contains("scheduler")) continue;
        ++hybrid_lines;
        EXPECT_EQ(line.at("ranks").size(), static_cast<std::size_t>(world)) << what;
        for (const json& g : line.at("groups")) groups.insert(g.get<std::int64_t>());
        // The K/V each member moved is, to the byte, what the cost model
        // says its slots need (with this model's bytes per token).
        for (const json& rank : line.at("ranks")) {
          for (const json& slot : rank.at("slots")) {
            EXPECT_EQ(slot.at("kv_received"), slot.at("predicted_kv_received")) << what;
            EXPECT_EQ(slot.at("kv_sent"), slot.at("predicted_kv_sent")) << what;
          }
        }
      }
      EXPECT_EQ(hybrid_lines, 3) << what << ": one schedule line per step";
      // hybrid's point: a short piece on one rank, moving nothing.
      if (std::string(scheduler) == "hybrid") {
        EXPECT_EQ(groups.count(1), 1u) << what;
      }
      EXPECT_GE(*groups.rbegin(), 4) << what << ": no slot of four ranks or more";
    }
  }
  // The runs above call the kernel two times a pass under overlap (the
  // default); a call per peer, and no overlap, train to the same losses.
  for (const char* calls :
       {"parallel.hybrid.overlap_calls=per_peer", "parallel.hybrid.overlap=false"}) {
    expect_same(single,
                train_layout(dir, config, 1, 1,
                             {"parallel.mode=hybrid", "parallel.world_size=6",
                              "parallel.max_tokens_per_rank=16",
                              "balancer.schedule.strategy=hybrid", calls}),
                std::string("hybrid W=6 ") + calls);
  }
}

// Every CP strategy, served and fallen back: at seq_length 64 and CP 2 every
// strategy serves; at seq_length 66 and CP 4 head_tail (66 % 8) and ptrr
// (66 % 64) cannot and the fallback serves.
TEST(Invariance, EveryCpStrategyMatchesOneProcess) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const std::vector<std::string> strategies = {
      "contiguous",   "head_tail", "striped",  "per_document_padded",
      "per_document", "ptrr",      "balanced", "auto"};
  for (const auto& [seq, cp, dp] : std::vector<std::tuple<int, int, int>>{{64, 2, 2}, {66, 4, 1}}) {
    const std::string seq_set = "data.seq_length=" + std::to_string(seq);
    const Trained single = train_layout(dir, config, 1, 1, {seq_set});
    bool fell_back = false;
    for (const std::string& strategy : strategies) {
      const std::string what = "DP" + std::to_string(dp) + "xCP" + std::to_string(cp) + " seq " +
                               std::to_string(seq) + " " + strategy;
      const Trained t =
          train_layout(dir, config, dp, cp, {seq_set, "balancer.cp.strategy=" + strategy});
      expect_same(single, t, what);
      for (const json& mb : t.micro_batches) {
        fell_back = fell_back || !mb.at("cp_fallback_reason").is_null();
      }
    }
    EXPECT_EQ(fell_back, seq == 66) << "seq " << seq
                                    << ": the fallback cases are not what the "
                                       "test claims";
  }
}

TEST(LayoutEquivalence, LearnedPositionsSlidingMaskMatchOneProcess) {
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const std::vector<std::string> extra = {"model.position=learned", "balancer.cp.mask=sliding:20",
                                          "balancer.cp.strategy=head_tail"};
  const Trained single = train_layout(dir, config, 1, 1, extra);
  expect_same(single, train_layout(dir, config, 2, 2, extra), "DP2xCP2 learned sliding");
}

TEST(LayoutEquivalence, IdleDpRanksNeitherDeadlockNorChangeTheResult) {
  // Three samples per step over four DP ranks: one rank has no micro-batch
  // at all, yet every rank must meet in the same collectives.
  TempDir dir;
  const std::string config = equivalence_config(dir);
  const std::vector<std::string> extra = {"data.global_batch_size=3", "train.steps=2"};
  const Trained single = train_layout(dir, config, 1, 1, extra);
  const Trained four = train_layout(dir, config, 4, 1, extra);
  expect_same(single, four, "DP4xCP1 with an idle rank");
  bool idle = false;
  for (const json& s : four.steps) {
    for (const json& count : s.at("micro_batches")) idle = idle || count.get<int>() == 0;
  }
  EXPECT_TRUE(idle) << "no DP rank was idle; the scenario does not test what it claims";
}

// (c) ---------------------------------------------------------------------

TEST(VariableLength, HeadTailFallsBackOnIndivisibleLengthsAndReturns) {
  TempDir dir;
  const std::string metrics = dir.file("variable.jsonl");
  const RunResult r =
      run(train_command(source_file("configs/variable_length.yaml"), {"train.steps=4"}, metrics),
          seconds(150));
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::vector<json> mbs = micro_batch_records(read_metrics(metrics));
  ASSERT_FALSE(mbs.empty());
  int head_tail = 0, fallback = 0, returned = 0;
  std::map<int, bool> fell_back;  // per DP rank: a fallback seen in its stream
  for (const json& m : mbs) {
    const std::int64_t cp = static_cast<std::int64_t>(m.at("pairs").size());
    ASSERT_EQ(m.at("tokens").size(), 1u) << m.dump();  // one sample per micro-batch
    const std::int64_t n = m.at("tokens")[0].get<std::int64_t>();
    const int dp = m.at("dp_rank").get<int>();
    if (n % (2 * cp) == 0) {
      EXPECT_EQ(m.at("cp_strategy"), "head_tail") << m.dump();
      EXPECT_TRUE(m.at("cp_fallback_reason").is_null()) << m.dump();
      ++head_tail;
      if (fell_back[dp]) ++returned;
    } else {
      EXPECT_EQ(m.at("cp_strategy"), "contiguous") << m.dump();
      ASSERT_TRUE(m.at("cp_fallback_reason").is_string()) << m.dump();
      EXPECT_NE(m.at("cp_fallback_reason").get<std::string>().find("N=" + std::to_string(n)),
                std::string::npos)
          << m.dump();
      ++fallback;
      fell_back[dp] = true;
    }
  }
  EXPECT_GT(head_tail, 0);
  EXPECT_GT(fallback, 0);
  EXPECT_GT(returned, 0) << "no divisible length followed a fallback";
}

// (d) ---------------------------------------------------------------------

const std::vector<std::string> kSmallQuickstart = {"train.steps=2", "data.seq_length=256",
                                                   "data.max_length=300"};

TEST(Plugin, NamedMissingPluginIsRefusedWithTheSearchPath) {
  TempDir dir;
  const std::string plugins = dir.file("plugins");
  std::vector<std::string> sets = kSmallQuickstart;
  sets.push_back("balancer.plugin=fulcrum_no_such_plugin");
  sets.push_back("balancer.plugin_dirs=" + plugins);
  const RunResult r = run(train_command(source_file("configs/quickstart.yaml"), sets), seconds(60));
  ASSERT_EQ(r.exit_code, 2) << r;
  EXPECT_NE(r.output.find("libfulcrum_no_such_plugin.so"), std::string::npos) << r;
  EXPECT_NE(r.output.find(plugins), std::string::npos) << r;
  EXPECT_NE(r.output.find("balancer.plugin: builtin"), std::string::npos) << r;
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << r;
}

TEST(Plugin, BuiltinWhenAskedForTrainsContiguousAndRoundRobin) {
  TempDir dir;
  const std::string metrics = dir.file("builtin.jsonl");
  std::vector<std::string> sets = kSmallQuickstart;
  sets.push_back("balancer.plugin=builtin");
  const RunResult r =
      run(train_command(source_file("configs/synthetic.yaml"), sets, metrics), seconds(150));
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::vector<json> mbs = micro_batch_records(read_metrics(metrics));
  ASSERT_FALSE(mbs.empty());
  for (const json& m : mbs) EXPECT_EQ(m.at("cp_strategy"), "contiguous") << m.dump();
  for (const json& s : step_records(read_metrics(metrics))) {
    EXPECT_EQ(s.at("dp_strategy"), "round_robin") << s.dump();
  }
}

TEST(Plugin, BrokenPluginIsAClearError) {
  const std::vector<std::string> sets = {"balancer.plugin=" FULCRUM_BROKEN_PLUGIN};
  const RunResult r = run(train_command(source_file("configs/synthetic.yaml"), sets), seconds(60));
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_NE(r.output.find("cannot use balancer plugin"), std::string::npos) << r;
  EXPECT_NE(r.output.find("ABI"), std::string::npos) << r;
  EXPECT_EQ(r.output.find("[rank"), std::string::npos) << "no worker should start: " << r;

  // A worker started by another launcher checks the plugin itself.
  TempDir dir;
  const std::string config =
      dir.write("broken.yaml", std::string("balancer: {plugin: ") + FULCRUM_BROKEN_PLUGIN + "}\n");
  const RunResult w = run({FULCRUM_WORKER, "--config", config}, seconds(60));
  EXPECT_EQ(w.exit_code, 2) << w;
  EXPECT_NE(w.output.find("cannot use balancer plugin"), std::string::npos) << w;
}

// Launch-time checks that need no worker.
TEST(Launch, WrongProcessCountAndBadConfigExitTwo) {
  const RunResult n =
      run({FULCRUM_BIN, "train", "--config", source_file("configs/synthetic.yaml"), "--nproc", "3"},
          seconds(30));
  EXPECT_EQ(n.exit_code, 2) << n;
  EXPECT_NE(n.output.find("--nproc 3 does not match"), std::string::npos) << n;

  TempDir dir;
  const std::string bad = dir.write("bad.yaml", "parallel:\n  cp_sise: 2\n");
  const RunResult c = run({FULCRUM_BIN, "train", "--config", bad}, seconds(30));
  EXPECT_EQ(c.exit_code, 2) << c;
  EXPECT_NE(c.output.find("bad.yaml:2"), std::string::npos) << c;
  EXPECT_NE(c.output.find("cp_size"), std::string::npos) << c;
}

TEST(Launch, RendezvousTimeoutNamesTheAddress) {
  // Rank 1 of 2 whose rank 0 never comes: it must give up after
  // dist.timeout_s and say where it was waiting.
  TempDir dir;
  const std::string config = dir.write(
      "lonely.yaml", "parallel: {dp_size: 2}\nbalancer: {plugin: builtin}\ndist: {timeout_s: 3}\n");
  const RunResult r =
      run({FULCRUM_WORKER, "--config", config}, seconds(60),
          {"RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"});
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_NE(r.exit_code, 0) << r;
  EXPECT_NE(r.output.find("127.0.0.1:1"), std::string::npos) << r;
  EXPECT_LT(r.wall_s, 45.0) << r;
}

// (a) ---------------------------------------------------------------------

class CpAttentionEquality : public ::testing::TestWithParam<int> {};

TEST_P(CpAttentionEquality, EveryStrategyAndMaskMatchesDenseAttention) {
  const int p = GetParam();
  const RunResult r = run(
      {FULCRUM_IT_LAUNCH, std::to_string(p), FULCRUM_IT_ATTENTION, FULCRUM_PLUGIN}, seconds(200));
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r;
  EXPECT_NE(r.output.find(" 0 failed"), std::string::npos) << r;
}

INSTANTIATE_TEST_SUITE_P(P, CpAttentionEquality, ::testing::Values(2, 3, 4));

// (e) ---------------------------------------------------------------------

// Token ids of sample i, from a seed: the test knows every sample exactly.
std::vector<std::int64_t> sample_tokens(std::size_t i, std::int64_t length, std::int64_t vocab) {
  std::mt19937_64 rng(1000 + i);
  std::vector<std::int64_t> t(static_cast<std::size_t>(length));
  for (auto& x : t) x = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(vocab));
  return t;
}

std::int64_t checksum(const std::vector<std::int64_t>& tokens, std::int64_t b, std::int64_t e) {
  std::int64_t s = 0;
  for (std::int64_t t = b; t < e; ++t) s += (t + 1) * tokens[static_cast<std::size_t>(t)];
  return s;
}

// Every token of every non-empty sample was trained on exactly once (the
// pieces tile [0, length) without overlap) and is the token written.
void expect_exactly_once(const std::vector<json>& mbs,
                         const std::vector<std::vector<std::int64_t>>& samples) {
  std::map<std::int64_t, std::vector<std::array<std::int64_t, 2>>> seen;
  for (const json& m : mbs) {
    ASSERT_TRUE(m.contains("pieces")) << m.dump();
    for (const json& piece : m.at("pieces")) {
      const std::int64_t s = piece[0], b = piece[1], e = piece[2];
      ASSERT_GE(s, 0);
      ASSERT_LT(s, static_cast<std::int64_t>(samples.size()));
      const auto& tokens = samples[static_cast<std::size_t>(s)];
      ASSERT_LE(e, static_cast<std::int64_t>(tokens.size())) << "sample " << s;
      EXPECT_EQ(piece[3].get<std::int64_t>(), checksum(tokens, b, e))
          << "sample " << s << " tokens [" << b << ", " << e << ") differ from what was written";
      seen[s].push_back({b, e});
    }
  }
  for (std::size_t s = 0; s < samples.size(); ++s) {
    auto ranges = seen[static_cast<std::int64_t>(s)];
    if (samples[s].empty()) {
      EXPECT_TRUE(ranges.empty()) << "empty sample " << s << " was trained on";
      continue;
    }
    std::sort(ranges.begin(), ranges.end());
    std::int64_t next = 0;
    for (const auto& [b, e] : ranges) {
      EXPECT_EQ(b, next) << "sample " << s << ": tokens from " << next
                         << (b > next ? " skipped" : " repeated");
      next = e;
    }
    EXPECT_EQ(next, static_cast<std::int64_t>(samples[s].size())) << "sample " << s;
  }
}

TEST(ExactlyOnce, EpochWithDpBalancingTrainsEveryTokenOnce) {
  TempDir dir;
  // 37 samples, lengths from 1 to 300 (plus one empty): with seq_length 96
  // and packing, long samples split across rows and rank boundaries.
  std::vector<std::vector<std::int64_t>> samples;
  std::ofstream jsonl(dir.file("tokens.jsonl"));
  std::mt19937_64 rng(42);
  for (std::size_t i = 0; i < 38; ++i) {
    const std::int64_t length = i == 17 ? 0 : 1 + static_cast<std::int64_t>(rng() % 300);
    samples.push_back(sample_tokens(i, length, 200));
    jsonl << json(samples.back()).dump() << "\n";
  }
  jsonl.close();
  const std::string config = dir.write("once.yaml", R"(
parallel: {dp_size: 2, cp_size: 2}
balancer:
  cp: {strategy: auto, block_size: 16}
  dp: {strategy: auto, cost: attention}
data: {source: jsonl, path: tokens.jsonl, seq_length: 96, packing: true,
       global_batch_size: 8, micro_batch_size: 2, seed: 5}
model: {hidden_size: 16, num_layers: 1, num_heads: 2, vocab_size: 200}
train: {steps: 5, log_samples: true}
)");
  const std::string metrics = dir.file("once.jsonl");
  const RunResult r = run(train_command(config, {}, metrics), seconds(150));
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::vector<json> all = read_metrics(metrics);
  // 37 non-empty samples / 8 per step: steps 1-5 are exactly one epoch.
  std::int64_t served = 0;
  for (const json& s : step_records(all)) {
    served += s.at("samples").get<std::int64_t>();
    EXPECT_NE(s.at("dp_strategy"), "round_robin") << "DP balancing was not in use";
  }
  EXPECT_EQ(served, 37);
  expect_exactly_once(micro_batch_records(all), samples);
}

// (f) ---------------------------------------------------------------------

// A Megatron MMIDIDX pair written from the published layout, independently of
// fulcrum's reader: header, int32 sizes, int64 byte pointers, int64 document
// index; uint16 tokens (dtype code 8) in the .bin.
void write_megatron(const std::string& prefix, const std::vector<std::vector<std::int64_t>>& seqs) {
  std::ofstream bin(prefix + ".bin", std::ios::binary);
  std::vector<std::int64_t> pointers;
  std::int64_t offset = 0;
  for (const auto& seq : seqs) {
    pointers.push_back(offset);
    for (std::int64_t t : seq) {
      const std::uint16_t v = static_cast<std::uint16_t>(t);
      const unsigned char le[2] = {static_cast<unsigned char>(v & 0xff),
                                   static_cast<unsigned char>(v >> 8)};
      bin.write(reinterpret_cast<const char*>(le), 2);
    }
    offset += 2 * static_cast<std::int64_t>(seq.size());
  }
  std::ofstream idx(prefix + ".idx", std::ios::binary);
  auto put = [&idx](std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) idx.put(static_cast<char>((value >> (8 * i)) & 0xff));
  };
  idx.write("MMIDIDX\0\0", 9);
  put(1, 8);                // version
  put(8, 1);                // dtype: uint16
  put(seqs.size(), 8);      // sequences
  put(seqs.size() + 1, 8);  // document index entries
  for (const auto& seq : seqs) put(seq.size(), 4);
  for (std::int64_t p : pointers) put(static_cast<std::uint64_t>(p), 8);
  for (std::size_t d = 0; d <= seqs.size(); ++d) put(d, 8);
}

TEST(Megatron, IndexedDatasetIsReadBackExactlyInTraining) {
  TempDir dir;
  std::vector<std::vector<std::int64_t>> seqs;
  for (std::size_t i = 0; i < 12; ++i) {
    seqs.push_back(sample_tokens(i, 20 + static_cast<std::int64_t>(i) * 17, 500));
  }
  write_megatron(dir.file("corpus_text_document"), seqs);
  const std::string config = dir.write("megatron.yaml", R"(
parallel: {dp_size: 2, cp_size: 2}
balancer: {cp: {block_size: 16}}
data: {source: megatron, path: corpus_text_document, seq_length: 256, packing: false,
       global_batch_size: 4, seed: 9}
model: {hidden_size: 16, num_layers: 1, num_heads: 2, vocab_size: 500}
train: {steps: 3, log_samples: true}
)");
  const std::string metrics = dir.file("megatron.jsonl");
  const RunResult r = run(train_command(config, {}, metrics), seconds(150));
  ASSERT_EQ(r.exit_code, 0) << r;
  expect_exactly_once(micro_batch_records(read_metrics(metrics)), seqs);
}

}  // namespace
