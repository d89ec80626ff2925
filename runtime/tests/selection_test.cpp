// Strategy selection per batch, the preference scope and the built-in
// balancer.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/host/plugin_loader.h"
#include "fulcrum/host/selection.h"
#include "loader_test_support.h"

namespace fulcrum::host {
namespace {

using test::causal_row;
using test::contiguous_positions;

ShardPlan contiguous_plan(const CpWorkload& w) {
  ShardPlan plan;
  plan.cp_size = w.cp_size;
  plan.shard_len = (w.tokens + w.cp_size - 1) / w.cp_size;
  plan.positions = contiguous_positions(w.tokens, w.cp_size);
  plan.padding = plan.shard_len * w.cp_size - w.tokens;
  plan.strategy_used = "contiguous";
  return plan;  // work left empty: the host fills it
}

// An in-process balancer whose answer per strategy each test chooses; it
// records what it was asked.
class FakeBalancer final : public LoadBalancer {
 public:
  using Answer = std::function<Result<ShardPlan>(const CpWorkload&)>;

  FakeBalancer() {
    cp_["contiguous"] = [](const CpWorkload& w) { return contiguous_plan(w); };
  }
  void answer(const std::string& strategy, Answer a) { cp_[strategy] = std::move(a); }
  const std::vector<std::string>& asked() const { return asked_; }

  std::string name() const override { return "fake"; }
  std::vector<std::string> cp_strategies() const override {
    std::vector<std::string> names;
    for (const auto& [name, answer] : cp_) names.push_back(name);
    return names;
  }
  std::vector<std::string> dp_strategies() const override { return {}; }
  Result<ShardPlan> plan_cp(std::string_view strategy, const CpWorkload& workload) override {
    asked_.emplace_back(strategy);
    auto found = cp_.find(std::string(strategy));
    if (found == cp_.end()) return not_found("fake has no strategy " + std::string(strategy));
    return found->second(workload);
  }
  Result<DpPartition> partition_dp(std::string_view, const DpRequest&) override {
    return not_found("fake has no DP strategies");
  }

 private:
  std::map<std::string, Answer> cp_;
  std::vector<std::string> asked_;
};

struct Warnings {
  std::vector<std::string> lines;
  LogFn sink() {
    return [this](LogLevel level, const std::string& text) {
      if (level >= LogLevel::kWarning) lines.push_back(text);
    };
  }
};

SelectorOptions options(const std::string& preferred, Warnings& warnings,
                        const std::string& fallback = "contiguous") {
  SelectorOptions o;
  o.preferred = preferred;
  o.fallback = fallback;
  o.log = warnings.sink();
  return o;
}

std::shared_ptr<LoadBalancer> real_plugin() {
  LoaderOptions o;
  o.check_permissions = false;  // the build tree's mode depends on the umask
  auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, o);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().message();
  return loaded.is_ok() ? *loaded : nullptr;
}

// Checks what every plan leaving the selector must satisfy.
void expect_servable(const CpWorkload& w, const ShardPlan& plan) {
  EXPECT_TRUE(validate_plan(w, plan).is_ok()) << validate_plan(w, plan).message();
  EXPECT_FALSE(plan.strategy_used.empty());
  ASSERT_EQ(plan.work.size(), static_cast<std::size_t>(w.cp_size));
  std::int64_t tokens = 0;
  for (const RankWork& rw : plan.work) tokens += rw.tokens;
  EXPECT_EQ(tokens, w.tokens);
}

// --- the decision per batch ------------------------------------------------

TEST(SelectionTest, HeadTailOnIndivisibleLengthFallsBackWithThePluginsReason) {
  Warnings warnings;
  auto plugin = real_plugin();
  ASSERT_NE(plugin, nullptr);
  CpSelector selector(plugin, options("head_tail", warnings));
  const CpWorkload w = causal_row(1001, 4);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->strategy_used, "contiguous");
  // The plugin's own kUnsupported answer, word for word, after the loader's
  // "plugin 'fulcrum' strategy 'head_tail': ".
  EXPECT_HAS(plan->fallback_reason,
             "head_tail cannot shard this row: N=1001 is not a multiple of 2*cp_size=8");
  EXPECT_EQ(plan->positions, contiguous_positions(1001, 4));
  EXPECT_TRUE(warnings.lines.empty());
}

// Applicability is the balancer's rule, not the host's: a third-party
// head_tail that pads any row is asked for, and serves, a row fulcrum's own
// head_tail refuses.
TEST(SelectionTest, TheHostKeepsNoCopyOfThePluginsRules) {
  Warnings warnings;
  auto fake = std::make_shared<FakeBalancer>();
  fake->answer("head_tail", [](const CpWorkload& w) -> Result<ShardPlan> {
    ShardPlan plan = contiguous_plan(w);
    plan.strategy_used = "head_tail";
    return plan;
  });
  CpSelector selector(fake, options("head_tail", warnings));
  const CpWorkload w = causal_row(1001, 4);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->strategy_used, "head_tail");
  EXPECT_EQ(plan->fallback_reason, "");
  EXPECT_EQ(fake->asked(), std::vector<std::string>{"head_tail"});
}

// A block-sparse mask described over blocks other than block_size (what ptrr
// would trip on) is a malformed workload: refused before any balancer.
TEST(SelectionTest, BlockSparseMaskOverOtherBlocksNeverReachesTheBalancer) {
  Warnings warnings;
  auto fake = std::make_shared<FakeBalancer>();
  CpSelector selector(fake, options("ptrr", warnings));
  CpWorkload sparse = causal_row(512, 2);
  sparse.block_size = 128;
  sparse.mask.kind = MaskKind::kBlockSparse;
  sparse.mask.block_sparse.offsets = {0, 1, 3};
  sparse.mask.block_sparse.kv_blocks = {0, 0, 1};
  auto plan = selector.plan(sparse);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fake->asked().empty());
}

TEST(SelectionTest, HeadTailServesDivisibleLengthsThroughThePlugin) {
  Warnings warnings;
  auto plugin = real_plugin();
  ASSERT_NE(plugin, nullptr);
  CpSelector selector(plugin, options("head_tail", warnings));
  const CpWorkload w = causal_row(1024, 4);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->strategy_used, "head_tail");
  EXPECT_EQ(plan->fallback_reason, "");
  // One causal document: head-tail balances the pairs exactly.
  for (const RankWork& rw : plan->work) EXPECT_EQ(rw.pairs, plan->work[0].pairs);
}

TEST(SelectionTest, PluginUnsupportedFallsBackWithThePluginsReason) {
  Warnings warnings;
  auto fake = std::make_shared<FakeBalancer>();
  fake->answer("picky", [](const CpWorkload&) -> Result<ShardPlan> {
    return unsupported("picky serves only rows of 4096 tokens");
  });
  CpSelector selector(fake, options("picky", warnings));
  const CpWorkload w = causal_row(1000, 4);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->strategy_used, "contiguous");
  EXPECT_EQ(plan->fallback_reason, "picky serves only rows of 4096 tokens");
  EXPECT_EQ(fake->asked(), (std::vector<std::string>{"picky", "contiguous"}));
  EXPECT_TRUE(warnings.lines.empty());
}

TEST(SelectionTest, UnknownStrategyIsAUserError) {
  Warnings warnings;
  auto plugin = real_plugin();
  ASSERT_NE(plugin, nullptr);
  CpSelector selector(plugin, options("zigzagg", warnings));
  auto plan = selector.plan(causal_row(1024, 4));
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(plan.status().message(), "unknown CP strategy 'zigzagg'");
  EXPECT_HAS(plan.status().message(), "contiguous");
  EXPECT_HAS(plan.status().message(), "head_tail");
}

TEST(SelectionTest, FailingPluginIsServedByTheBuiltinWithAWarning) {
  Warnings warnings;
  auto fake = std::make_shared<FakeBalancer>();
  fake->answer("fragile", [](const CpWorkload&) -> Result<ShardPlan> {
    return internal_error("fragile ran out of patience");
  });
  CpSelector selector(fake, options("fragile", warnings));
  const CpWorkload w = causal_row(1000, 4);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->strategy_used, "contiguous");
  EXPECT_EQ(plan->fallback_reason.rfind("plugin failed: ", 0), 0u) << plan->fallback_reason;
  EXPECT_HAS(plan->fallback_reason, "fragile ran out of patience");
  // Served by the host's own sharding, not the failing balancer's fallback.
  EXPECT_EQ(fake->asked(), std::vector<std::string>{"fragile"});
  ASSERT_EQ(warnings.lines.size(), 1u);
  EXPECT_HAS(warnings.lines[0], "fragile ran out of patience");
  EXPECT_HAS(warnings.lines[0], "built-in contiguous");
}

TEST(SelectionTest, InvalidPlanFromABalancerIsAFailure) {
  Warnings warnings;
  auto fake = std::make_shared<FakeBalancer>();
  fake->answer("sloppy", [](const CpWorkload& w) -> Result<ShardPlan> {
    ShardPlan plan = contiguous_plan(w);
    plan.positions[1] = 0;  // position 0 twice
    return plan;
  });
  CpSelector selector(fake, options("sloppy", warnings));
  const CpWorkload w = causal_row(64, 4);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->positions, contiguous_positions(64, 4));
  EXPECT_HAS(plan->fallback_reason, "invalid plan");
  EXPECT_EQ(warnings.lines.size(), 1u);
}

TEST(SelectionTest, ThrowingPluginThroughTheLoaderIsServedByTheBuiltin) {
  Warnings warnings;
  LoaderOptions lo;
  lo.check_permissions = false;
  lo.log = nullptr;
  auto loaded = load_plugin(test::broken_plugin("throwing"), lo);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  CpSelector selector(*loaded, options("contiguous", warnings));
  const CpWorkload w = causal_row(100, 4);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_HAS(plan->fallback_reason, "always throws");
  ASSERT_EQ(warnings.lines.size(), 1u);
  EXPECT_HAS(warnings.lines[0], "plugin 'broken_throwing' strategy 'contiguous'");
}

TEST(SelectionTest, FailingFallbackIsServedByTheBuiltin) {
  Warnings warnings;
  auto fake = std::make_shared<FakeBalancer>();
  fake->answer("picky", [](const CpWorkload& w) -> Result<ShardPlan> {
    return unsupported("N=" + std::to_string(w.tokens) +
                       " is not a multiple of 2*cp_size=" + std::to_string(2 * w.cp_size));
  });
  fake->answer("fragile", [](const CpWorkload&) -> Result<ShardPlan> {
    return internal_error("fragile gave up");
  });
  CpSelector selector(fake, options("picky", warnings, "fragile"));
  const CpWorkload w = causal_row(1001, 4);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->strategy_used, "contiguous");
  EXPECT_HAS(plan->fallback_reason, "N=1001 is not a multiple of 2*cp_size=8");
  EXPECT_HAS(plan->fallback_reason, "fragile gave up");
  ASSERT_EQ(warnings.lines.size(), 1u);
  EXPECT_HAS(warnings.lines[0], "fallback CP strategy 'fragile'");
}

TEST(SelectionTest, WorkAndStrategyAreFilledWhenTheBalancerLeavesThemOut) {
  Warnings warnings;
  auto fake = std::make_shared<FakeBalancer>();
  fake->answer("terse", [](const CpWorkload& w) -> Result<ShardPlan> {
    ShardPlan plan = contiguous_plan(w);
    plan.strategy_used.clear();
    return plan;
  });
  CpSelector selector(fake, options("terse", warnings));
  CpWorkload w = causal_row(1000, 4);
  w.doc_lengths = {600, 400};
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->strategy_used, "terse");
  const std::vector<RankWork> expected = compute_work(w, *plan);
  for (std::size_t r = 0; r < expected.size(); ++r) {
    EXPECT_EQ(plan->work[r].pairs, expected[r].pairs);
    EXPECT_EQ(plan->work[r].tiles, expected[r].tiles);
  }
}

TEST(SelectionTest, InvalidWorkloadIsAnErrorAndNeverReachesTheBalancer) {
  Warnings warnings;
  auto fake = std::make_shared<FakeBalancer>();
  CpSelector selector(fake, options("contiguous", warnings));
  CpWorkload w = causal_row(100, 4);
  w.doc_lengths = {50, 40};  // sums to 90, not 100
  auto plan = selector.plan(w);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fake->asked().empty());
}

TEST(SelectionTest, WithoutAPluginTheBuiltinServesEveryBatch) {
  Warnings warnings;
  CpSelector selector(nullptr, options("auto", warnings));
  const CpWorkload w = causal_row(4096, 8);
  auto plan = selector.plan(w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  expect_servable(w, *plan);
  EXPECT_EQ(plan->strategy_used, "contiguous");
  EXPECT_HAS(plan->fallback_reason, "needs the fulcrum plugin");

  selector.set_preferred("head_tail");
  auto odd = selector.plan(causal_row(4095, 8));
  ASSERT_TRUE(odd.is_ok()) << odd.status().message();
  EXPECT_EQ(odd->strategy_used, "contiguous");
  EXPECT_HAS(odd->fallback_reason, "'head_tail' needs the fulcrum plugin");
}

// A stream of batches of varying length: head_tail where it applies, the
// fallback (with its reason) where not, and the preference never drifts.
TEST(SelectionTest, VariableLengthStreamAlternatesHeadTailAndFallback) {
  Warnings warnings;
  auto plugin = real_plugin();
  ASSERT_NE(plugin, nullptr);
  CpSelector selector(plugin, options("head_tail", warnings));
  struct Record {
    std::int64_t tokens;
    std::string used;
    std::string reason;
  };
  std::vector<Record> records;
  for (std::int64_t n : {4096, 4100, 8192, 333, 1024, 1030, 16, 8}) {
    const CpWorkload w = causal_row(n, 4);
    auto plan = selector.plan(w);
    ASSERT_TRUE(plan.is_ok()) << "N=" << n << ": " << plan.status().message();
    expect_servable(w, *plan);
    records.push_back({n, plan->strategy_used, plan->fallback_reason});
    EXPECT_EQ(selector.preferred(), "head_tail");
  }
  for (const Record& r : records) {
    SCOPED_TRACE("N=" + std::to_string(r.tokens));
    if (r.tokens % 8 == 0) {
      EXPECT_EQ(r.used, "head_tail");
      EXPECT_EQ(r.reason, "");
    } else {
      EXPECT_EQ(r.used, "contiguous");
      EXPECT_HAS(r.reason, "N=" + std::to_string(r.tokens) + " is not a multiple of 2*cp_size=8");
    }
  }
  EXPECT_TRUE(warnings.lines.empty());
}

// --- the preference scope --------------------------------------------------

TEST(PreferenceScopeTest, RestoresOnNormalExit) {
  CpSelector selector(nullptr, SelectorOptions{});
  selector.set_preferred("head_tail");
  {
    PreferenceScope scope(selector, "contiguous");
    EXPECT_EQ(selector.preferred(), "contiguous");
  }
  EXPECT_EQ(selector.preferred(), "head_tail");
}

TEST(PreferenceScopeTest, RestoresOnException) {
  CpSelector selector(nullptr, SelectorOptions{});
  selector.set_preferred("head_tail");
  EXPECT_THROW(
      {
        PreferenceScope scope(selector, "contiguous");
        EXPECT_EQ(selector.preferred(), "contiguous");
        throw std::runtime_error("batch failed");
      },
      std::runtime_error);
  EXPECT_EQ(selector.preferred(), "head_tail");
}

TEST(PreferenceScopeTest, NestedScopesRestoreWhatEachFound) {
  CpSelector selector(nullptr, SelectorOptions{});
  selector.set_preferred("auto");
  {
    PreferenceScope outer(selector, "head_tail");
    {
      PreferenceScope middle(selector, "ptrr");
      try {
        PreferenceScope inner(selector, "contiguous");
        EXPECT_EQ(selector.preferred(), "contiguous");
        throw std::runtime_error("inner batch failed");
      } catch (const std::runtime_error&) {
      }
      EXPECT_EQ(selector.preferred(), "ptrr");
      // A scope body may itself change the preference; the scope still
      // restores what it found on entry.
      selector.set_preferred("striped");
    }
    EXPECT_EQ(selector.preferred(), "head_tail");
  }
  EXPECT_EQ(selector.preferred(), "auto");
}

// --- the built-in balancer -------------------------------------------------

TEST(BuiltinBalancerTest, ContiguousShardsArePaddedOnTheLastRanks) {
  auto builtin = builtin_balancer();
  EXPECT_EQ(builtin->name(), "builtin");
  EXPECT_EQ(builtin->cp_strategies(), std::vector<std::string>{"contiguous"});
  EXPECT_EQ(builtin->dp_strategies(), std::vector<std::string>{"round_robin"});
  const CpWorkload w = causal_row(10, 4);
  auto plan = builtin->plan_cp("contiguous", w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(plan->shard_len, 3);
  EXPECT_EQ(plan->positions, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -1}));
  EXPECT_EQ(plan->padding, 2);
  EXPECT_EQ(plan->strategy_used, "contiguous");
  ASSERT_EQ(plan->work.size(), 4u);
  EXPECT_EQ(plan->work[3].tokens, 1);
  // Causal: rank r's queries see q+1 keys each.
  EXPECT_EQ(plan->work[0].pairs, 1 + 2 + 3);
  EXPECT_EQ(plan->work[3].pairs, 10);
  EXPECT_TRUE(validate_plan(w, *plan).is_ok());

  auto more_ranks_than_tokens = builtin->plan_cp("contiguous", causal_row(3, 8));
  ASSERT_TRUE(more_ranks_than_tokens.is_ok());
  EXPECT_EQ(more_ranks_than_tokens->shard_len, 1);
  EXPECT_EQ(more_ranks_than_tokens->padding, 5);
}

TEST(BuiltinBalancerTest, RoundRobinDealsSamplesInTurn) {
  auto builtin = builtin_balancer();
  DpRequest request;
  request.lengths = {10, 20, 30, 40, 50, 60, 70};
  request.num_ranks = 3;
  auto part = builtin->partition_dp("round_robin", request);
  ASSERT_TRUE(part.is_ok()) << part.status().message();
  EXPECT_EQ(part->ranks, (std::vector<std::vector<std::int64_t>>{{0, 3, 6}, {1, 4}, {2, 5}}));
  EXPECT_EQ(part->cost, (std::vector<double>{120, 70, 90}));
  EXPECT_DOUBLE_EQ(part->imbalance, 120.0 / (280.0 / 3.0));
  EXPECT_DOUBLE_EQ(part->lower_bound, 280.0 / 3.0);
}

TEST(BuiltinBalancerTest, UnknownStrategiesAreNotFound) {
  auto builtin = builtin_balancer();
  auto cp = builtin->plan_cp("head_tail", causal_row(16, 2));
  ASSERT_FALSE(cp.is_ok());
  EXPECT_EQ(cp.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(cp.status().message(), "'head_tail'");
  auto dp = builtin->partition_dp("lpt", DpRequest{{1, 2}, 2, {}, false});
  ASSERT_FALSE(dp.is_ok());
  EXPECT_EQ(dp.status().code(), StatusCode::kNotFound);
}

// A log line is one line whatever its message holds: a path or a peer's
// text with a line break, a carriage return or an escape sequence would
// otherwise split it or rewrite what the terminal shows.
TEST(HostLog, ALineStaysOneLineWhateverTheMessageHolds) {
  testing::internal::CaptureStderr();
  log_to_stderr(LogLevel::kWarning, "checkpoint /tmp/ck\rX\x1b[2K\nnext\tend\x7f");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "fulcrum: warning: checkpoint /tmp/ck X [2K next end \n");
}

}  // namespace
}  // namespace fulcrum::host
