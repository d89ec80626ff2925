// The data loader, with the DP ranks simulated in one process: one loader per
// dp_rank, same dataset and seed. The central property is exactly-once: over
// an epoch, every token of every sample lands in exactly one row of exactly
// one rank, whatever the DP size, packing and balancer. The windowed
// dispatcher's tests are in loader_window_test.cpp.
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "data/loader.h"
#include "data/synthetic_dataset.h"
#include "data/tests/loader_test_support.h"
#include "fulcrum/host/plugin_loader.h"
#include "tests/test_support.h"

namespace fulcrum::data {
namespace {

using namespace loader_testing;

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

}  // namespace
}  // namespace fulcrum::data
