// The data loader with balancer.dp.window > 1 (the windowed DP dispatcher),
// the DP ranks simulated in one process: exactly once per epoch, determinism,
// the window's bounds, and its state across a checkpoint.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/loader.h"
#include "data/tests/loader_test_support.h"
#include "fulcrum/host/plugin_loader.h"
#include "tests/test_support.h"

namespace fulcrum::data {
namespace {

using namespace loader_testing;

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
