// The data loader, with the DP ranks simulated in one process: one loader per
// dp_rank, same dataset and seed. The central property is exactly-once: over
// an epoch, every token of every sample lands in exactly one row of exactly
// one rank, whatever the DP size, packing and balancer.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "data/loader.h"
#include "data/synthetic_dataset.h"
#include "fulcrum/host/plugin_loader.h"
#include "tests/test_support.h"

#ifndef FULCRUM_PLUGIN_PATH
#error "FULCRUM_PLUGIN_PATH must name the built libfulcrum_balancer.so"
#endif

namespace fulcrum::data {
namespace {

// Token t of sample s is 1000 * s + t: any row content can be traced back.
class TracedDataset final : public TokenDataset {
 public:
  explicit TracedDataset(std::vector<std::int64_t> lengths) : lengths_(std::move(lengths)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t length(std::int64_t i) const override {
    return lengths_[static_cast<std::size_t>(i)];
  }
  std::vector<std::int64_t> tokens(std::int64_t i) const override {
    std::vector<std::int64_t> out(static_cast<std::size_t>(length(i)));
    std::iota(out.begin(), out.end(), 1000 * i);
    return out;
  }
  std::string describe() const override { return "traced dataset"; }

 private:
  std::vector<std::int64_t> lengths_;
};

// Lengths with short, long (> seq_length 16, and > 2 x 16), exactly-seq and
// empty samples.
const std::vector<std::int64_t> kLengths = {5,  40, 16, 1, 0,  3, 17, 9,  2,  31, 8, 0,
                                            12, 6,  15, 4, 33, 7, 1,  20, 11, 2,  16};

LoaderOptions base_options() {
  LoaderOptions o;
  o.global_batch_size = 5;  // does not divide the 21 non-empty samples
  o.micro_batch_size = 2;
  o.seq_length = 16;
  o.seed = 1234;
  return o;
}

std::shared_ptr<LoadBalancer> real_plugin() {
  host::LoaderOptions lo;
  lo.check_permissions = false;  // the build tree's mode depends on the umask
  lo.log = [](host::LogLevel, const std::string&) {};
  auto plugin = host::load_plugin(FULCRUM_PLUGIN_PATH, lo);
  EXPECT_TRUE(plugin) << plugin.status().message();
  return plugin ? *plugin : nullptr;
}

// Checks one row's internal consistency against the dataset.
void check_row(const PackedRow& row, const TokenDataset& ds, const LoaderOptions& o) {
  const auto n = static_cast<std::size_t>(row.size());
  ASSERT_EQ(row.labels.size(), n);
  ASSERT_EQ(row.loss_mask.size(), n);
  ASSERT_EQ(row.positions.size(), n);
  ASSERT_EQ(row.document_ids.size(), n);
  ASSERT_GT(n, 0u);
  if (o.packing) {
    ASSERT_EQ(row.size(), o.seq_length);
  } else {
    ASSERT_LE(row.size(), o.seq_length);
    ASSERT_EQ(row.padding, 0);
    ASSERT_EQ(row.pieces.size(), 1u);
  }
  EXPECT_EQ(std::accumulate(row.doc_lengths.begin(), row.doc_lengths.end(), std::int64_t{0}),
            row.size());
  ASSERT_EQ(row.doc_lengths.size(), row.pieces.size() + (row.padding > 0 ? 1 : 0));

  std::size_t t = 0;
  for (std::size_t p = 0; p < row.pieces.size(); ++p) {
    const TokenRange& piece = row.pieces[p];
    ASSERT_LT(piece.begin, piece.end);
    ASSERT_EQ(row.doc_lengths[p], piece.end - piece.begin);
    const auto toks = ds.tokens(piece.sample);
    const auto len = static_cast<std::int64_t>(toks.size());
    // Cut only at multiples of seq_length within the sample.
    ASSERT_EQ(piece.begin % o.seq_length, 0) << "sample " << piece.sample;
    ASSERT_EQ(piece.end, std::min(len, piece.begin + o.seq_length)) << "sample " << piece.sample;
    for (std::int64_t k = piece.begin; k < piece.end; ++k, ++t) {
      const auto uk = static_cast<std::size_t>(k);
      ASSERT_EQ(row.tokens[t], toks[uk]);
      ASSERT_EQ(row.document_ids[t], piece.sample);
      ASSERT_EQ(row.positions[t], k) << "positions continue across a cut";
      // Every token whose next token is in the sample keeps label and loss.
      const bool has_next = k + 1 < len;
      ASSERT_EQ(row.loss_mask[t], has_next ? 1 : 0);
      ASSERT_EQ(row.labels[t], has_next ? toks[uk + 1] : o.pad_token);
    }
  }
  ASSERT_EQ(static_cast<std::int64_t>(n - t), row.padding);
  for (std::int64_t k = 0; t < n; ++t, ++k) {
    ASSERT_EQ(row.document_ids[t], kPadDocument);
    ASSERT_EQ(row.loss_mask[t], 0);
    ASSERT_EQ(row.tokens[t], o.pad_token);
    ASSERT_EQ(row.positions[t], k);
  }
}

// Runs one epoch on every DP rank and checks everything the loader promises.
void check_epoch(const TokenDataset& ds, LoadBalancer& balancer, LoaderOptions o) {
  SCOPED_TRACE("dp_size " + std::to_string(o.dp_size) + ", packing " + std::to_string(o.packing) +
               ", strategy " + o.dp_strategy);
  std::vector<DataLoader> loaders;
  for (std::int32_t r = 0; r < o.dp_size; ++r) {
    o.dp_rank = r;
    auto loader = DataLoader::create(ds, balancer, o);
    ASSERT_TRUE(loader) << loader.status().message();
    loaders.push_back(std::move(loader).value());
  }
  // seen[s][k]: how often token k of sample s was served.
  std::vector<std::vector<int>> seen(static_cast<std::size_t>(ds.size()));
  for (std::int64_t s = 0; s < ds.size(); ++s) {
    seen[static_cast<std::size_t>(s)].assign(static_cast<std::size_t>(ds.length(s)), 0);
  }
  std::int64_t steps = 0;
  for (;;) {
    std::vector<StepBatch> batches;
    for (DataLoader& l : loaders) {
      auto b = l.next_step();
      if (b) batches.push_back(std::move(*b));
    }
    if (batches.empty()) break;
    ASSERT_EQ(batches.size(), loaders.size()) << "ranks disagree on the end of the epoch";
    ++steps;
    const StepBatch& first = batches.front();
    std::vector<std::int64_t> union_of_ranks;
    for (std::size_t r = 0; r < batches.size(); ++r) {
      const StepBatch& b = batches[r];
      // Replicated decisions: identical on every rank.
      ASSERT_EQ(b.position, first.position);
      ASSERT_EQ(b.global_samples, first.global_samples);
      ASSERT_EQ(b.stats.rank_cost, first.stats.rank_cost);
      ASSERT_EQ(b.stats.strategy, first.stats.strategy);
      EXPECT_TRUE(b.stats.fallback_reason.empty()) << b.stats.fallback_reason;
      ASSERT_EQ(b.stats.rank_samples[r], static_cast<std::int64_t>(b.samples.size()));
      union_of_ranks.insert(union_of_ranks.end(), b.samples.begin(), b.samples.end());

      std::vector<std::int64_t> pieces_samples;
      std::vector<std::int64_t> row_padding, row_first_piece;
      std::int64_t tokens = 0;
      for (std::size_t m = 0; m < b.micro_batches.size(); ++m) {
        const auto& rows = b.micro_batches[m].rows;
        ASSERT_FALSE(rows.empty());
        if (m + 1 < b.micro_batches.size()) {
          ASSERT_EQ(static_cast<std::int64_t>(rows.size()), o.micro_batch_size);
        }
        ASSERT_LE(static_cast<std::int64_t>(rows.size()), o.micro_batch_size);
        for (const PackedRow& row : rows) {
          check_row(row, ds, o);
          row_padding.push_back(row.padding);
          row_first_piece.push_back(row.pieces.front().end - row.pieces.front().begin);
          for (const TokenRange& piece : row.pieces) {
            if (piece.begin == 0) pieces_samples.push_back(piece.sample);
            for (std::int64_t k = piece.begin; k < piece.end; ++k) {
              ++seen[static_cast<std::size_t>(piece.sample)][static_cast<std::size_t>(k)];
            }
            tokens += piece.end - piece.begin;
          }
        }
      }
      // A row is opened only for a piece that fits in no earlier row.
      for (std::size_t j = 0; o.packing && j < row_padding.size(); ++j) {
        for (std::size_t i = 0; i < j; ++i) {
          ASSERT_LT(row_padding[i], row_first_piece[j])
              << "row " << j << " opened for a piece that fits in row " << i;
        }
      }
      std::vector<std::int64_t> expected_samples = b.samples;
      std::sort(expected_samples.begin(), expected_samples.end());
      std::sort(pieces_samples.begin(), pieces_samples.end());
      ASSERT_EQ(pieces_samples, expected_samples) << "rows hold the rank's samples";
      ASSERT_EQ(tokens, b.tokens);
      ASSERT_EQ(tokens, b.stats.rank_tokens[r]);
    }
    std::sort(union_of_ranks.begin(), union_of_ranks.end());
    std::vector<std::int64_t> global = first.global_samples;
    std::sort(global.begin(), global.end());
    ASSERT_EQ(union_of_ranks, global) << "the ranks' shares partition the global batch";
    ASSERT_LE(static_cast<std::int64_t>(global.size()), o.global_batch_size);
  }
  EXPECT_EQ(steps, loaders.front().steps_per_epoch());
  for (std::size_t s = 0; s < seen.size(); ++s) {
    for (std::size_t k = 0; k < seen[s].size(); ++k) {
      ASSERT_EQ(seen[s][k], 1) << "token " << k << " of sample " << s;
    }
  }
}

TEST(DataLoader, ExactlyOnceWithTheBuiltinBalancer) {
  TracedDataset ds(kLengths);
  auto balancer = host::builtin_balancer();
  for (std::int32_t dp = 1; dp <= 4; ++dp) {
    for (bool packing : {true, false}) {
      LoaderOptions o = base_options();
      o.dp_size = dp;
      o.packing = packing;
      check_epoch(ds, *balancer, o);
    }
  }
}

TEST(DataLoader, ExactlyOnceWithEveryStrategyOfThePlugin) {
  TracedDataset ds(kLengths);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  const auto strategies = plugin->dp_strategies();
  ASSERT_FALSE(strategies.empty());
  for (const std::string& strategy : strategies) {
    for (std::int32_t dp = 1; dp <= 4; ++dp) {
      for (bool packing : {true, false}) {
        LoaderOptions o = base_options();
        o.dp_size = dp;
        o.packing = packing;
        o.dp_strategy = strategy;
        o.cost = CostModel{CostKind::kAttention, 16.0};
        o.equal_count = dp == 3;
        check_epoch(ds, *plugin, o);
      }
    }
  }
}

TEST(DataLoader, ExactlyOnceOnSyntheticData) {
  SyntheticOptions so;
  so.num_samples = 60;
  so.seed = 5;
  so.max_length = 3000;
  so.vocab_size = 32000;
  auto ds = SyntheticDataset::create(so);
  ASSERT_TRUE(ds);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  LoaderOptions o;
  o.global_batch_size = 16;
  o.micro_batch_size = 2;
  o.seq_length = 1024;
  o.dp_size = 4;
  o.dp_strategy = "lpt";
  check_epoch(*ds, *plugin, o);
}

std::vector<std::vector<std::int64_t>> all_samples(DataLoader& loader) {
  std::vector<std::vector<std::int64_t>> out;
  while (auto step = loader.next_step()) out.push_back(step->samples);
  return out;
}

TEST(DataLoader, DeterministicBySeed) {
  TracedDataset ds(kLengths);
  auto balancer = host::builtin_balancer();
  LoaderOptions o = base_options();
  o.dp_size = 2;
  o.dp_rank = 1;
  o.num_epochs = 2;
  auto a = DataLoader::create(ds, *balancer, o);
  auto b = DataLoader::create(ds, *balancer, o);
  o.seed += 1;
  auto c = DataLoader::create(ds, *balancer, o);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(all_samples(*a), all_samples(*b));
  EXPECT_NE(a->epoch_order(0), c->epoch_order(0));
  EXPECT_NE(a->epoch_order(0), a->epoch_order(1)) << "each epoch has its own order";
  // Pinned, so that a change of the shuffle (which would silently change
  // every run's data order) is a visible, deliberate decision.
  EXPECT_EQ(a->epoch_order(0), (std::vector<std::int64_t>{16, 21, 22, 12, 8,  14, 19, 15, 0, 6, 5,
                                                          9,  7,  17, 3,  20, 1,  10, 13, 2, 18}));

  o.shuffle = false;
  auto plain = DataLoader::create(ds, *balancer, o);
  ASSERT_TRUE(plain);
  const auto order = plain->epoch_order(3);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  EXPECT_EQ(static_cast<std::int64_t>(order.size()), plain->num_samples());
  EXPECT_EQ(plain->num_samples(), 21) << "the two empty samples are left out";
}

TEST(DataLoader, ServesEpochsThenEnds) {
  TracedDataset ds({3, 4, 5});
  auto balancer = host::builtin_balancer();
  LoaderOptions o = base_options();
  o.global_batch_size = 2;
  o.num_epochs = 3;
  auto loader = DataLoader::create(ds, *balancer, o);
  ASSERT_TRUE(loader);
  std::vector<LoaderPosition> positions;
  while (auto step = loader->next_step()) positions.push_back(step->position);
  const std::vector<LoaderPosition> expected = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}};
  EXPECT_EQ(positions, expected);
  EXPECT_FALSE(loader->next_step());

  o.num_epochs = std::nullopt;
  auto endless = DataLoader::create(ds, *balancer, o);
  ASSERT_TRUE(endless);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(endless->next_step());
}

TEST(DataLoader, ResumesFromASavedPosition) {
  TracedDataset ds(kLengths);
  auto balancer = host::builtin_balancer();
  LoaderOptions o = base_options();
  o.num_epochs = 2;
  o.dp_size = 3;
  o.dp_rank = 2;
  auto original = DataLoader::create(ds, *balancer, o);
  ASSERT_TRUE(original);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(original->next_step());  // into epoch 1
  const LoaderPosition saved = original->position();
  EXPECT_EQ(saved, (LoaderPosition{1, 1}));
  auto resumed = DataLoader::create(ds, *balancer, o);
  ASSERT_TRUE(resumed);
  ASSERT_TRUE(resumed->seek(saved));
  for (;;) {
    auto x = original->next_step();
    auto y = resumed->next_step();
    ASSERT_EQ(x.has_value(), y.has_value());
    if (!x) break;
    ASSERT_EQ(x->position, y->position);
    ASSERT_EQ(x->samples, y->samples);
    ASSERT_EQ(x->micro_batches.size(), y->micro_batches.size());
    for (std::size_t m = 0; m < x->micro_batches.size(); ++m) {
      for (std::size_t r = 0; r < x->micro_batches[m].rows.size(); ++r) {
        ASSERT_EQ(x->micro_batches[m].rows[r].tokens, y->micro_batches[m].rows[r].tokens);
      }
    }
  }

  // The end of an epoch is the start of the next.
  ASSERT_TRUE(resumed->seek({0, resumed->steps_per_epoch()}));
  EXPECT_EQ(resumed->position(), (LoaderPosition{1, 0}));
  EXPECT_FALSE(resumed->seek({0, resumed->steps_per_epoch() + 1}));
  EXPECT_FALSE(resumed->seek({-1, 0}));
  EXPECT_FALSE(resumed->seek({3, 0}));
  EXPECT_TRUE(resumed->seek({2, 0}));  // finished
  EXPECT_FALSE(resumed->next_step());
}

TEST(DataLoader, StatsDescribeThePartition) {
  TracedDataset ds(kLengths);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  LoaderOptions o = base_options();
  o.dp_size = 2;
  o.dp_strategy = "karmarkar_karp";
  auto loader = DataLoader::create(ds, *plugin, o);
  ASSERT_TRUE(loader);
  auto step = loader->next_step();
  ASSERT_TRUE(step);
  const StepStats& s = step->stats;
  EXPECT_EQ(s.strategy, "karmarkar_karp");
  ASSERT_EQ(s.rank_cost.size(), 2u);
  double total = 0;
  for (std::int64_t sample : step->global_samples) total += static_cast<double>(ds.length(sample));
  EXPECT_DOUBLE_EQ(s.rank_cost[0] + s.rank_cost[1], total);
  const double largest = std::max(s.rank_cost[0], s.rank_cost[1]);
  EXPECT_DOUBLE_EQ(s.imbalance, largest / (total / 2));
  EXPECT_LE(s.lower_bound, largest + 1e-9);
  EXPECT_GE(s.imbalance, 1.0);
}

TEST(DataLoader, RankWithoutSamplesGetsAnEmptyStep) {
  TracedDataset ds({4, 4, 4});
  auto balancer = host::builtin_balancer();
  LoaderOptions o = base_options();
  o.global_batch_size = 3;
  o.dp_size = 4;
  o.dp_rank = 3;
  auto loader = DataLoader::create(ds, *balancer, o);
  ASSERT_TRUE(loader);
  auto step = loader->next_step();
  ASSERT_TRUE(step);
  EXPECT_TRUE(step->samples.empty());
  EXPECT_TRUE(step->micro_batches.empty());
  EXPECT_EQ(step->stats.rank_samples, (std::vector<std::int64_t>{1, 1, 1, 0}));
  EXPECT_FALSE(loader->next_step());
}

// A balancer that answers wrongly: the loader must not lose or duplicate
// samples because of it, and must say it fell back.
class WrongBalancer final : public LoadBalancer {
 public:
  explicit WrongBalancer(bool fail) : fail_(fail) {}
  std::string name() const override { return "wrong"; }
  std::vector<std::string> cp_strategies() const override { return {}; }
  std::vector<std::string> dp_strategies() const override { return {"broken"}; }
  Result<ShardPlan> plan_cp(std::string_view, const CpWorkload&) override {
    return unsupported("no CP here");
  }
  Result<DpPartition> partition_dp(std::string_view, const DpRequest& request) override {
    if (fail_) return internal_error("the plugin crashed");
    DpPartition part;
    part.strategy = "broken";
    part.ranks.assign(static_cast<std::size_t>(request.num_ranks), {});
    part.ranks[0].push_back(0);  // sample 0 twice, the rest nowhere
    part.ranks.back().push_back(0);
    return part;
  }

 private:
  bool fail_;
};

TEST(DataLoader, FallsBackWhenTheBalancerFailsOrLies) {
  TracedDataset ds(kLengths);
  for (bool fail : {true, false}) {
    WrongBalancer wrong(fail);
    LoaderOptions o = base_options();
    o.dp_size = 2;
    o.dp_strategy = "broken";
    auto loader = DataLoader::create(ds, wrong, o);
    ASSERT_TRUE(loader);
    auto step = loader->next_step();
    ASSERT_TRUE(step);
    EXPECT_EQ(step->stats.strategy, "round_robin");
    EXPECT_HAS(step->stats.fallback_reason, fail ? "the plugin crashed" : "more than one rank");
    EXPECT_EQ(step->stats.rank_samples, (std::vector<std::int64_t>{3, 2}));
  }
}

TEST(DataLoader, RefusesBadOptions) {
  TracedDataset ds(kLengths);
  auto balancer = host::builtin_balancer();
  auto refused = [&](LoaderOptions o, const std::string& part) {
    auto r = DataLoader::create(ds, *balancer, o);
    ASSERT_FALSE(r) << "accepted options that should fail with '" << part << "'";
    EXPECT_HAS(r.status().message(), part);
  };
  LoaderOptions o = base_options();
  o.dp_size = 2;
  o.dp_rank = 2;
  refused(o, "dp_rank is 2");
  o = base_options();
  o.global_batch_size = 0;
  refused(o, "global_batch_size is 0");
  o = base_options();
  o.seq_length = -1;
  refused(o, "seq_length is -1");
  o = base_options();
  o.num_epochs = 0;
  refused(o, "num_epochs is 0");
  o = base_options();
  o.dp_strategy = "lpt";
  refused(o, "it offers: round_robin");

  TracedDataset empty({0, 0});
  auto r = DataLoader::create(empty, *balancer, base_options());
  ASSERT_FALSE(r);
  EXPECT_HAS(r.status().message(), "nothing to train on");
}

// --- balancer.dp.window > 1: the windowed DP dispatcher -------------------

TEST(DataLoaderWindow, ExactlyOncePerEpochWithWindows) {
  TracedDataset ds(kLengths);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  auto builtin = host::builtin_balancer();
  // 21 samples in batches of 5: 5 steps per epoch, so windows of 2, 3 and 4
  // all end in a partial window that must be flushed, not dropped.
  for (std::int32_t window : {2, 3, 4, 7}) {
    for (std::int32_t dp = 1; dp <= 4; dp += 1) {
      for (bool packing : {true, false}) {
        LoaderOptions o = base_options();
        o.dp_size = dp;
        o.packing = packing;
        o.dp_window = window;
        o.dp_strategy = "auto";
        o.cost = CostModel{CostKind::kAttention, 16.0};
        SCOPED_TRACE("window " + std::to_string(window));
        check_epoch(ds, *plugin, o);
        o.dp_strategy = "round_robin";
        check_epoch(ds, *builtin, o);
      }
    }
  }
}

// Several epochs in one loader: every epoch serves every sample once, the
// same number of steps as window 1, and the ranks agree on everything.
TEST(DataLoaderWindow, EveryEpochServesEverySampleOnceOnEveryRank) {
  TracedDataset ds(kLengths);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  LoaderOptions o = base_options();
  o.dp_size = 3;
  o.dp_window = 3;
  o.dp_strategy = "karmarkar_karp";
  o.equal_count = true;
  o.num_epochs = 4;
  std::vector<DataLoader> ranks;
  for (std::int32_t r = 0; r < o.dp_size; ++r) {
    o.dp_rank = r;
    auto loader = DataLoader::create(ds, *plugin, o);
    ASSERT_TRUE(loader) << loader.status().message();
    ranks.push_back(std::move(loader).value());
  }
  std::map<std::int64_t, std::vector<std::int64_t>> served;  // epoch -> samples
  std::map<std::int64_t, std::int64_t> steps;
  for (;;) {
    std::vector<StepBatch> step;
    for (DataLoader& l : ranks) {
      if (auto b = l.next_step()) step.push_back(std::move(*b));
    }
    if (step.empty()) break;
    ASSERT_EQ(step.size(), ranks.size());
    for (std::size_t r = 0; r < step.size(); ++r) {
      ASSERT_EQ(step[r].position, step[0].position);
      ASSERT_EQ(step[r].global_samples, step[0].global_samples);
      ASSERT_EQ(step[r].stats.rank_samples, step[0].stats.rank_samples);
      ASSERT_EQ(step[r].stats.rank_cost, step[0].stats.rank_cost);
      EXPECT_EQ(step[r].stats.strategy, "karmarkar_karp");
      // Equal counts within the step.
      const auto [lo, hi] =
          std::minmax_element(step[r].stats.rank_samples.begin(), step[r].stats.rank_samples.end());
      EXPECT_LE(*hi - *lo, 1);
      auto& epoch = served[step[r].position.epoch];
      epoch.insert(epoch.end(), step[r].samples.begin(), step[r].samples.end());
    }
    ++steps[step[0].position.epoch];
  }
  ASSERT_EQ(served.size(), 4u);
  for (auto& [epoch, samples] : served) {
    EXPECT_EQ(steps[epoch], ranks[0].steps_per_epoch()) << "epoch " << epoch;
    std::sort(samples.begin(), samples.end());
    std::vector<std::int64_t> expected = ranks[0].epoch_order(epoch);
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(samples, expected) << "epoch " << epoch;
  }
}

// The window is a pure function of the replicated inputs: two loaders of the
// same options serve the same steps; the window's samples come from its own
// global batches only, and a window of 1 is today's loader.
TEST(DataLoaderWindow, DeterministicAndWithinItsWindow) {
  TracedDataset ds(kLengths);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  LoaderOptions o = base_options();
  o.dp_size = 2;
  o.dp_rank = 1;
  o.num_epochs = 3;
  o.dp_strategy = "auto";
  o.dp_window = 2;
  auto a = DataLoader::create(ds, *plugin, o);
  auto b = DataLoader::create(ds, *plugin, o);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(all_samples(*a), all_samples(*b));

  auto c = DataLoader::create(ds, *plugin, o);
  ASSERT_TRUE(c);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<std::int64_t> order = c->epoch_order(epoch);
    for (std::int64_t step = 0; step < c->steps_per_epoch(); ++step) {
      auto batch = c->next_step();
      ASSERT_TRUE(batch);
      const std::int64_t first = step / 2 * 2 * o.global_batch_size;
      const std::int64_t last = std::min<std::int64_t>(static_cast<std::int64_t>(order.size()),
                                                       (step / 2 * 2 + 2) * o.global_batch_size);
      for (std::int64_t s : batch->global_samples) {
        const auto at = std::find(order.begin(), order.end(), s) - order.begin();
        EXPECT_GE(at, first) << "sample " << s << " of step " << step
                             << " is from an earlier window";
        EXPECT_LT(at, last) << "sample " << s << " of step " << step << " is from a later window";
      }
    }
  }

  o.dp_window = 1;
  o.dp_strategy = "karmarkar_karp";
  auto one = DataLoader::create(ds, *plugin, o);
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->window_state().empty()) << "window 1 has no state beyond its position";
  const std::vector<std::int64_t> order = one->epoch_order(0);
  for (std::int64_t step = 0; step < one->steps_per_epoch(); ++step) {
    auto x = one->next_step();
    ASSERT_TRUE(x);
    // Window 1 is the plain partition of the epoch-order batch.
    const auto begin = static_cast<std::size_t>(step * o.global_batch_size);
    const auto end = std::min(order.size(), begin + static_cast<std::size_t>(o.global_batch_size));
    const std::vector<std::int64_t> expected(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                             order.begin() + static_cast<std::ptrdiff_t>(end));
    EXPECT_EQ(x->global_samples, expected);
  }
}

// Stopped in the middle of a window: the saved state (position plus the
// window's batches not yet served) continues exactly like the loader that
// never stopped, on every rank, through the next epochs.
TEST(DataLoaderWindow, StateRestoredInTheMiddleOfAWindowContinuesIdentically) {
  TracedDataset ds(kLengths);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  LoaderOptions o = base_options();
  o.dp_size = 3;
  o.num_epochs = 3;
  o.dp_window = 3;
  o.dp_strategy = "auto";
  o.cost = CostModel{CostKind::kAttention, 16.0};
  for (int stop_after : {1, 2, 4, 6, 7}) {
    SCOPED_TRACE("stopped after " + std::to_string(stop_after) + " steps");
    for (std::int32_t r = 0; r < o.dp_size; ++r) {
      o.dp_rank = r;
      auto original = DataLoader::create(ds, *plugin, o);
      ASSERT_TRUE(original);
      for (int i = 0; i < stop_after; ++i) ASSERT_TRUE(original->next_step());
      const LoaderPosition saved = original->position();
      const std::string state = original->window_state();
      ASSERT_FALSE(state.empty());

      auto resumed = DataLoader::create(ds, *plugin, o);
      ASSERT_TRUE(resumed);
      ASSERT_TRUE(resumed->seek(saved));
      const Status restored = resumed->restore_window_state(state);
      ASSERT_TRUE(restored) << restored.message();
      EXPECT_EQ(resumed->window_state(), state);
      int steps = 0;
      for (;; ++steps) {
        auto x = original->next_step();
        auto y = resumed->next_step();
        ASSERT_EQ(x.has_value(), y.has_value());
        if (!x) break;
        ASSERT_EQ(x->position, y->position);
        ASSERT_EQ(x->samples, y->samples);
        ASSERT_EQ(x->global_samples, y->global_samples);
        ASSERT_EQ(x->stats.rank_cost, y->stats.rank_cost);
        ASSERT_EQ(x->micro_batches.size(), y->micro_batches.size());
        for (std::size_t m = 0; m < x->micro_batches.size(); ++m) {
          ASSERT_EQ(x->micro_batches[m].rows.size(), y->micro_batches[m].rows.size());
          for (std::size_t i = 0; i < x->micro_batches[m].rows.size(); ++i) {
            ASSERT_EQ(x->micro_batches[m].rows[i].tokens, y->micro_batches[m].rows[i].tokens);
          }
        }
      }
      EXPECT_EQ(steps, 15 - stop_after);

      // A window is a pure function of the position: a loader seeked there
      // without the state serves the same steps.
      auto plain = DataLoader::create(ds, *plugin, o);
      auto again = DataLoader::create(ds, *plugin, o);
      ASSERT_TRUE(plain && again);
      for (int i = 0; i < stop_after; ++i) ASSERT_TRUE(again->next_step());
      ASSERT_TRUE(plain->seek(saved));
      for (int i = 0; i < 3; ++i) {
        auto p = plain->next_step();
        auto q = again->next_step();
        ASSERT_EQ(p.has_value(), q.has_value());
        if (!p) break;
        EXPECT_EQ(p->global_samples, q->global_samples);
        EXPECT_EQ(p->samples, q->samples);
      }
    }
  }
}

// What is learned does not depend on the layout: with and without windows,
// every DP size and every DP strategy serve each step the same global batch,
// cut into the same pieces, with the same labels and loss masks; only which
// rank and which row holds a piece differs.
TEST(DataLoaderWindow, StepsAndPiecesDoNotDependOnTheLayoutOrStrategy) {
  TracedDataset ds(kLengths);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  using Example = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  for (std::int32_t window : {1, 3}) {
    for (bool packing : {true, false}) {
      // Per step: the sorted (sample, position, label, loss mask) of every
      // token any rank serves.
      std::vector<std::vector<Example>> reference;
      for (const std::string strategy : {"round_robin", "lpt", "karmarkar_karp", "auto"}) {
        for (std::int32_t dp = 1; dp <= 4; ++dp) {
          SCOPED_TRACE("window " + std::to_string(window) + " packing " + std::to_string(packing) +
                       " " + strategy + " dp " + std::to_string(dp));
          LoaderOptions o = base_options();
          o.dp_window = window;
          o.packing = packing;
          o.dp_size = dp;
          o.dp_strategy = strategy;
          o.cost = CostModel{CostKind::kAttention, 16.0};
          std::vector<DataLoader> ranks;
          for (std::int32_t r = 0; r < dp; ++r) {
            o.dp_rank = r;
            auto loader = DataLoader::create(ds, *plugin, o);
            ASSERT_TRUE(loader) << loader.status().message();
            ranks.push_back(std::move(loader).value());
          }
          std::vector<std::vector<Example>> steps;
          for (;;) {
            std::vector<Example> examples;
            bool any = false;
            for (DataLoader& l : ranks) {
              auto b = l.next_step();
              if (!b) continue;
              any = true;
              for (const MicroBatch& mb : b->micro_batches) {
                for (const PackedRow& row : mb.rows) {
                  for (std::size_t t = 0; t < row.tokens.size(); ++t) {
                    if (row.document_ids[t] == kPadDocument) continue;
                    examples.emplace_back(row.document_ids[t], row.positions[t], row.labels[t],
                                          row.loss_mask[t]);
                  }
                }
              }
            }
            if (!any) break;
            std::sort(examples.begin(), examples.end());
            steps.push_back(std::move(examples));
          }
          if (reference.empty()) {
            reference = steps;
            ASSERT_GT(reference.size(), 1u);
          } else {
            ASSERT_EQ(steps.size(), reference.size());
            for (std::size_t i = 0; i < steps.size(); ++i) {
              ASSERT_EQ(steps[i], reference[i]) << "step " << i;
            }
          }
        }
      }
    }
  }
}

TEST(DataLoaderWindow, RefusesStateThatDoesNotFit) {
  TracedDataset ds(kLengths);
  auto plugin = real_plugin();
  ASSERT_TRUE(plugin);
  LoaderOptions o = base_options();
  o.dp_size = 2;
  o.num_epochs = 2;
  o.dp_window = 3;
  o.dp_strategy = "auto";
  auto original = DataLoader::create(ds, *plugin, o);
  ASSERT_TRUE(original);
  ASSERT_TRUE(original->next_step());
  const LoaderPosition saved = original->position();
  const std::string state = original->window_state();

  auto refused = [&](LoaderOptions options, LoaderPosition at, const std::string& bytes,
                     const std::string& part) {
    auto loader = DataLoader::create(ds, *plugin, options);
    ASSERT_TRUE(loader) << loader.status().message();
    ASSERT_TRUE(loader->seek(at));
    const std::string before = loader->window_state();
    const Status s = loader->restore_window_state(bytes);
    ASSERT_FALSE(s) << "accepted a state that should fail with '" << part << "'";
    EXPECT_HAS(s.message(), part);
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line";
    EXPECT_EQ(loader->window_state(), before) << "a refused state changes nothing";
  };
  LoaderOptions other = o;
  other.dp_window = 2;
  refused(other, saved, state,
          "made with balancer.dp.window = 3 and this run has 2; resume with "
          "balancer.dp.window: 3");
  other = o;
  other.dp_window = 1;
  refused(other, saved, state, "made with balancer.dp.window = 3 and this run has 1");
  // Another DP size resumes: the window does not depend on it.
  other = o;
  other.dp_size = 3;
  {
    auto loader = DataLoader::create(ds, *plugin, other);
    ASSERT_TRUE(loader);
    ASSERT_TRUE(loader->seek(saved));
    const Status s = loader->restore_window_state(state);
    EXPECT_TRUE(s) << s.message();
  }
  // A window-1 checkpoint (no state) resumed with a window.
  refused(o, saved, "", "it was made with balancer.dp.window = 1 and this run has 3");
  // Another position than the one saved with it.
  refused(o, {0, 2}, state, "belongs to epoch 0 step 1");
  // Every truncation, and trailing bytes.
  for (std::size_t n = 1; n < state.size(); n += 7) {
    refused(o, saved, state.substr(0, n), "the checkpoint is corrupt");
  }
  refused(o, saved, state + std::string(8, '\0'), "the checkpoint is corrupt");
  // A state of another build's format.
  std::string old_version = state;
  old_version[0] = 1;
  refused(o, saved, old_version, "its DP window state has version 1, this build reads 2");
}

}  // namespace
}  // namespace fulcrum::data
