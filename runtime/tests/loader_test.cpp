// The plugin loader against the real plugin, the deliberately broken ones and
// files it must refuse.
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "../host/plugin_loader_internal.h"
#include "fulcrum/c_api.h"
#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/host/open_balancer.h"
#include "fulcrum/host/plugin_loader.h"
#include "loader_test_support.h"

// With the strategies library linked in, plans through the plugin are compared
// with the direct call; without it, with the layouts the strategies promise.
#if __has_include("strategies/cp_strategies.h")
#include "strategies/cp_strategies.h"
#define FULCRUM_TEST_DIRECT_STRATEGIES 1
#endif

namespace fulcrum::host {
namespace {

namespace fs = std::filesystem;

// A missing broken plugin would pass as "refused"; make it fail as missing.
#define ASSERT_BUILT(kind)                                                         \
  ASSERT_TRUE(fs::exists(broken_plugin(kind)))                                     \
      << broken_plugin(kind) << " is missing: build the fulcrum_broken_" << (kind) \
      << " target (fulcrum_host_tests does not depend on it)"

// A fresh directory (mode 0700) removed with everything in it.
using test::broken_plugin;
using test::causal_row;
using test::refused_as_fault;
using test::TempDir;
using Captured = test::LogCapture;

// Rank r of a head-tail plan holds chunks r and 2P-1-r of 2P equal chunks (in
// an order the strategy chooses): the sorted positions of every rank.
std::vector<std::vector<std::int64_t>> head_tail_rank_sets(std::int64_t n, std::int64_t p) {
  const std::int64_t c = n / (2 * p);
  std::vector<std::vector<std::int64_t>> ranks(static_cast<std::size_t>(p));
  for (std::int64_t r = 0; r < p; ++r) {
    for (std::int64_t chunk : {r, 2 * p - 1 - r}) {
      for (std::int64_t i = 0; i < c; ++i) ranks[r].push_back(chunk * c + i);
    }
    std::sort(ranks[r].begin(), ranks[r].end());
  }
  return ranks;
}

std::vector<std::vector<std::int64_t>> sorted_rank_sets(const ShardPlan& plan) {
  std::vector<std::vector<std::int64_t>> ranks;
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    ranks.emplace_back(plan.rank_begin(r), plan.rank_end(r));
    std::sort(ranks.back().begin(), ranks.back().end());
  }
  return ranks;
}

// What the plugin must answer for these two strategies.
void expect_plan_of(const std::string& strategy, const CpWorkload& w, const ShardPlan& plan) {
#ifdef FULCRUM_TEST_DIRECT_STRATEGIES
  auto direct = cp::plan(strategy, w);
  ASSERT_TRUE(direct.is_ok()) << direct.status().message();
  EXPECT_EQ(plan.positions, direct->positions);
  EXPECT_EQ(plan.shard_len, direct->shard_len);
  EXPECT_EQ(plan.padding, direct->padding);
#endif
  if (strategy == "contiguous") {
    EXPECT_EQ(plan.positions, test::contiguous_positions(w.tokens, w.cp_size));
  } else {
    EXPECT_EQ(sorted_rank_sets(plan), head_tail_rank_sets(w.tokens, w.cp_size));
  }
}

std::shared_ptr<LoadBalancer> load_real(Captured& captured) {
  auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, captured.options());
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().message();
  return loaded.is_ok() ? *loaded : nullptr;
}

// --- the real plugin -------------------------------------------------------

TEST(LoaderTest, LoadsTheRealPluginByPath) {
  Captured captured;
  auto balancer = load_real(captured);
  ASSERT_NE(balancer, nullptr);
  EXPECT_EQ(balancer->name(), "fulcrum");
  const auto cp = balancer->cp_strategies();
  EXPECT_NE(std::find(cp.begin(), cp.end(), "contiguous"), cp.end());
  EXPECT_NE(std::find(cp.begin(), cp.end(), "head_tail"), cp.end());
  const auto dp = balancer->dp_strategies();
  EXPECT_NE(std::find(dp.begin(), dp.end(), "round_robin"), dp.end());
  // Loading says so at debug level only; the plugin itself logs nothing.
  ASSERT_EQ(captured.lines.size(), 1u);
  EXPECT_EQ(captured.lines[0].level, LogLevel::kDebug);
  EXPECT_HAS(captured.lines[0].text, "loaded plugin 'fulcrum'");
}

TEST(LoaderTest, LoadsByNameFromSearchDirs) {
  Captured captured;
  LoaderOptions options = captured.options();
  TempDir empty;
  options.search_dirs = {empty.path().string(), fs::path(FULCRUM_PLUGIN_PATH).parent_path()};
  auto loaded = load_plugin("fulcrum_balancer", options);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ((*loaded)->name(), "fulcrum");
  // The file name works as well as the short name.
  auto by_file = load_plugin("libfulcrum_balancer.so", options);
  ASSERT_TRUE(by_file.is_ok()) << by_file.status().message();
}

TEST(LoaderTest, DefaultSearchDirsHonourTheEnvironment) {
  const char* saved = std::getenv("FULCRUM_PLUGIN_PATH");
  const std::string saved_value = saved != nullptr ? saved : "";
  ASSERT_EQ(setenv("FULCRUM_PLUGIN_PATH", "/opt/a::/opt/b", 1), 0);
  const std::vector<std::string> dirs = default_search_dirs();
  if (saved != nullptr) {
    setenv("FULCRUM_PLUGIN_PATH", saved_value.c_str(), 1);
  } else {
    unsetenv("FULCRUM_PLUGIN_PATH");
  }
  ASSERT_GE(dirs.size(), 3u);
  EXPECT_EQ(dirs[0], "/opt/a");
  EXPECT_EQ(dirs[1], "/opt/b");
  // Then the directories beside the executable, e.g. <build>/bin/../lib/fulcrum.
  EXPECT_HAS(dirs[2], "fulcrum");
}

// The build tree mirrors the install tree (bin/ beside lib/fulcrum/), so a
// plugin name resolves with no configuration at all.
TEST(LoaderTest, DefaultSearchDirsFindTheBuiltPlugin) {
  const char* saved = std::getenv("FULCRUM_PLUGIN_PATH");
  const std::string saved_value = saved != nullptr ? saved : "";
  unsetenv("FULCRUM_PLUGIN_PATH");
  const std::vector<std::string> dirs = default_search_dirs();
  LoaderOptions options;
  options.check_permissions = false;
  options.log = nullptr;
  auto loaded = load_plugin("fulcrum_balancer", options);
  if (saved != nullptr) setenv("FULCRUM_PLUGIN_PATH", saved_value.c_str(), 1);

  const std::string plugin_dir = fs::path(FULCRUM_PLUGIN_PATH).parent_path().lexically_normal();
  EXPECT_NE(std::find(dirs.begin(), dirs.end(), plugin_dir), dirs.end()) << plugin_dir;
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ((*loaded)->name(), "fulcrum");
}

TEST(LoaderTest, ContiguousAndHeadTailPlansMatchTheStrategies) {
  Captured captured;
  auto balancer = load_real(captured);
  ASSERT_NE(balancer, nullptr);
  struct Case {
    const char* strategy;
    std::int64_t n;
    std::int32_t p;
  };
  for (const Case& c :
       {Case{"contiguous", 1000, 4}, Case{"contiguous", 1001, 4}, Case{"contiguous", 7, 8},
        Case{"head_tail", 4096, 4}, Case{"head_tail", 48, 3}}) {
    SCOPED_TRACE(std::string(c.strategy) + " N=" + std::to_string(c.n) +
                 " P=" + std::to_string(c.p));
    const CpWorkload w = causal_row(c.n, c.p);
    auto plan = balancer->plan_cp(c.strategy, w);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    EXPECT_TRUE(validate_plan(w, *plan).is_ok());
    EXPECT_EQ(plan->strategy_used, c.strategy);
    EXPECT_TRUE(plan->fallback_reason.empty());
    ASSERT_EQ(plan->work.size(), static_cast<std::size_t>(c.p));
    std::int64_t tokens = 0;
    for (const RankWork& rw : plan->work) tokens += rw.tokens;
    EXPECT_EQ(tokens, c.n);
    expect_plan_of(c.strategy, w, *plan);
  }
  EXPECT_FALSE(captured.any_at_least(LogLevel::kInfo));
}

TEST(LoaderTest, PluginFailuresComeBackWithPluginAndStrategyAndReasonsAsWritten) {
  Captured captured;
  auto balancer = load_real(captured);
  ASSERT_NE(balancer, nullptr);

  auto unsupported = balancer->plan_cp("head_tail", causal_row(1001, 4));
  ASSERT_FALSE(unsupported.is_ok());
  EXPECT_EQ(unsupported.status().code(), StatusCode::kUnsupported);
  // An answer, not a failure: the plugin's reason alone, which a plan's
  // fallback_reason then records as the plugin wrote it.
  EXPECT_EQ(unsupported.status().message(),
            "head_tail cannot shard this row: N=1001 is not a multiple of 2*cp_size=8; pad the "
            "row to a multiple of 2*cp_size or use per_document, balanced or auto");

  auto unknown = balancer->plan_cp("no_such_strategy", causal_row(1024, 4));
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(unknown.status().message(), "plugin 'fulcrum' strategy 'no_such_strategy': ");

  auto unknown_dp = balancer->partition_dp("no_such_strategy", DpRequest{{1, 2, 3}, 2, {}, false});
  ASSERT_FALSE(unknown_dp.is_ok());
  EXPECT_EQ(unknown_dp.status().code(), StatusCode::kNotFound);

  // An invalid workload never reaches the plugin.
  auto invalid = balancer->plan_cp("contiguous", causal_row(0, 4));
  ASSERT_FALSE(invalid.is_ok());
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
}

// The plugin's own C entry points, without the host's checks in front:
// requests beyond validate_workload's bounds (2^31 tokens or block size,
// 2^20 ranks, 2^31-token samples) are the caller's error, not an internal
// one (they were FULCRUM_INTERNAL, "out of memory", or overflowed).
TEST(LoaderTest, RealPluginRefusesRequestsBeyondTheBoundsAsInvalidArgument) {
  void* library = dlopen(FULCRUM_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  using GetPlugin = const fulcrum_plugin_v1* (*)();
  const auto get = reinterpret_cast<GetPlugin>(dlsym(library, "fulcrum_get_plugin"));
  ASSERT_NE(get, nullptr);
  const fulcrum_plugin_v1& table = *get();
  void* instance = nullptr;
  ASSERT_EQ(table.create(nullptr, &instance), FULCRUM_OK);

  const auto plan = [&](std::int64_t tokens, std::int32_t cp_size, std::int64_t block_size) {
    fulcrum_cp_request request{};
    request.struct_size = sizeof request;
    request.cp_size = cp_size;
    request.tokens = tokens;
    request.block_size = block_size;
    request.mask_kind = FULCRUM_MASK_CAUSAL;
    request.strategy = "balanced";
    fulcrum_cp_plan answer{};
    answer.struct_size = sizeof answer;
    const fulcrum_status status = table.plan_cp(instance, &request, &answer);
    if (status == FULCRUM_OK) table.release_plan(instance, &answer);
    return status;
  };
  EXPECT_EQ(plan(std::int64_t{1} << 33, 8, 128), FULCRUM_INVALID_ARGUMENT);
  EXPECT_HAS(table.last_error(instance), "row has 8589934592 tokens");
  EXPECT_EQ(plan(std::numeric_limits<std::int64_t>::max(), 8, 128), FULCRUM_INVALID_ARGUMENT);
  EXPECT_EQ(plan(4096, std::numeric_limits<std::int32_t>::max(), 128), FULCRUM_INVALID_ARGUMENT);
  EXPECT_HAS(table.last_error(instance), "cp_size is 2147483647");
  EXPECT_EQ(plan(4096, 8, std::int64_t{1} << 40), FULCRUM_INVALID_ARGUMENT);
  EXPECT_EQ(plan(4096, 8, 128), FULCRUM_OK);

  const std::int64_t lengths[] = {100, (std::int64_t{1} << 31) + 1};
  std::int64_t offsets[3] = {};
  std::int64_t samples[2] = {};
  fulcrum_dp_request request{};
  request.struct_size = sizeof request;
  request.num_ranks = 2;
  request.lengths = lengths;
  request.num_samples = 2;
  request.cost_kind = FULCRUM_COST_TOKENS;
  request.strategy = "lpt";
  fulcrum_dp_result result{};
  result.struct_size = sizeof result;
  result.num_ranks = 2;
  result.rank_offsets = offsets;
  result.samples = samples;
  EXPECT_EQ(table.partition_dp(instance, &request, &result), FULCRUM_INVALID_ARGUMENT);
  EXPECT_HAS(table.last_error(instance), "lengths[1] is 2147483649");

  table.destroy(instance);
  dlclose(library);
}

TEST(LoaderTest, DocumentsAndMasksCrossTheBoundary) {
  Captured captured;
  auto balancer = load_real(captured);
  ASSERT_NE(balancer, nullptr);
  CpWorkload w = causal_row(3000, 4);
  w.doc_lengths = {1000, 17, 1983};
  w.mask = MaskSpec::sliding(256);
  w.block_size = 64;
  auto plan = balancer->plan_cp("contiguous", w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_TRUE(validate_plan(w, *plan).is_ok());
  // The plugin's work figures, computed from the documents and mask it was
  // sent, agree with the host's own.
  const std::vector<RankWork> host_work = compute_work(w, *plan);
  ASSERT_EQ(plan->work.size(), host_work.size());
  for (std::size_t r = 0; r < host_work.size(); ++r) {
    EXPECT_EQ(plan->work[r].pairs, host_work[r].pairs) << "rank " << r;
    EXPECT_EQ(plan->work[r].tiles, host_work[r].tiles) << "rank " << r;
    EXPECT_EQ(plan->work[r].tokens, host_work[r].tokens) << "rank " << r;
  }
}

TEST(LoaderTest, DpPartitionIsAnExactCover) {
  Captured captured;
  auto balancer = load_real(captured);
  ASSERT_NE(balancer, nullptr);
  DpRequest request;
  request.lengths = {5, 1, 9, 3, 3, 7, 2, 8, 4, 6};
  request.num_ranks = 3;
  auto part = balancer->partition_dp("round_robin", request);
  ASSERT_TRUE(part.is_ok()) << part.status().message();
  EXPECT_EQ(part->strategy, "round_robin");
  ASSERT_EQ(part->ranks.size(), 3u);
  std::vector<std::int64_t> all;
  for (const auto& rank : part->ranks) all.insert(all.end(), rank.begin(), rank.end());
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> expected(request.lengths.size());
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<std::int64_t>(i);
  EXPECT_EQ(all, expected);
  // Costs are recomputed by the host: the C ABI does not carry them.
  ASSERT_EQ(part->cost.size(), 3u);
  double total = 0;
  for (double c : part->cost) total += c;
  EXPECT_DOUBLE_EQ(total, 48.0);
  EXPECT_GE(part->imbalance, 1.0);
  EXPECT_DOUBLE_EQ(part->lower_bound, 16.0);  // max(9, 48/3)
}

// --- finding the file ------------------------------------------------------

TEST(LoaderTest, MissingPluginIsNotFoundAndNamesTheSearchedDirs) {
  Captured captured;
  LoaderOptions options = captured.options();
  TempDir a;
  TempDir b;
  options.search_dirs = {a.path().string(), b.path().string()};
  auto loaded = load_plugin("no_such_plugin", options);
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(loaded.status().message(), "libno_such_plugin.so");
  EXPECT_HAS(loaded.status().message(), a.path().string());
  EXPECT_HAS(loaded.status().message(), b.path().string());
  EXPECT_HAS(loaded.status().message(), "FULCRUM_PLUGIN_PATH");

  auto by_path = load_plugin((a.path() / "libmissing.so").string(), options);
  ASSERT_FALSE(by_path.is_ok());
  EXPECT_EQ(by_path.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(by_path.status().message(), (a.path() / "libmissing.so").string());
}

TEST(LoaderTest, FileThatIsNotALibraryIsRefusedWithTheLoaderError) {
  Captured captured;
  TempDir dir;
  const fs::path junk = dir.path() / "libjunk.so";
  {
    std::FILE* f = std::fopen(junk.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("not an ELF file\n", f);
    std::fclose(f);
  }
  auto loaded = load_plugin(junk.string(), captured.options());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(loaded.status().message(), "plugin " + junk.string());
  EXPECT_HAS(loaded.status().message(), "is not a complete shared library (no ELF header");
}

// dlopen maps a cut-short library and faults (SIGBUS) on the first page past
// its end; the loader must refuse every such prefix before dlopen sees it.
TEST(LoaderTest, TruncatedLibraryIsRefusedAtEveryLength) {
  Captured captured;
  TempDir dir;
  std::string whole;
  {
    std::FILE* f = std::fopen(FULCRUM_PLUGIN_PATH, "rb");
    ASSERT_NE(f, nullptr);
    char buffer[1 << 16];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) whole.append(buffer, n);
    std::fclose(f);
  }
  ASSERT_GT(whole.size(), 4096u);
  const fs::path cut = dir.path() / "libcut.so";
  for (const std::size_t length :
       {std::size_t{0}, std::size_t{3}, std::size_t{63}, std::size_t{64}, std::size_t{200},
        std::size_t{4096}, whole.size() / 2, whole.size() - 4096, whole.size() - 1}) {
    {
      std::FILE* f = std::fopen(cut.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      std::fwrite(whole.data(), 1, length, f);
      std::fclose(f);
    }
    auto loaded = load_plugin(cut.string(), captured.options());
    ASSERT_FALSE(loaded.is_ok()) << "length " << length;
    EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument) << "length " << length;
    EXPECT_HAS(loaded.status().message(), "is not a complete shared library");
  }
}

TEST(LoaderTest, LinkLoopsAndFilesUsedAsDirectoriesAreNotCalledMissing) {
  Captured captured;
  TempDir dir;
  const fs::path loop = dir.path() / "libloop.so";
  fs::create_symlink(loop, loop);
  auto looped = load_plugin(loop.string(), captured.options());
  ASSERT_FALSE(looped.is_ok());
  EXPECT_NE(looped.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(looped.status().message(), "cannot be resolved");

  const fs::path file = dir.path() / "plain";
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  auto through_file = load_plugin((file / "libx.so").string(), captured.options());
  ASSERT_FALSE(through_file.is_ok());
  EXPECT_NE(through_file.status().code(), StatusCode::kNotFound);
}

TEST(LoaderTest, LibraryWithoutTheEntryPointIsRefused) {
  Captured captured;
  // Any shared library that is not a plugin: the plugin of this very test
  // suite's broken set would not do, they all export the entry point.
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(&dlopen), &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  auto loaded = load_plugin(fs::canonical(info.dli_fname).string(), captured.options());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInternal);
  EXPECT_HAS(loaded.status().message(), "does not export fulcrum_get_plugin");
}

// --- permissions -----------------------------------------------------------

TEST(LoaderPermissionTest, WritableFileOrDirectoryIsRefusedWithTheFix) {
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  const fs::path copy = dir.path() / "libfulcrum_balancer.so";
  fs::copy_file(FULCRUM_PLUGIN_PATH, copy);
  LoaderOptions options;
  options.log = nullptr;
  ASSERT_TRUE(options.check_permissions);

  ASSERT_EQ(chmod(copy.c_str(), 0664), 0);
  auto group_writable = load_plugin(copy.string(), options);
  ASSERT_FALSE(group_writable.is_ok());
  EXPECT_EQ(group_writable.status().code(), StatusCode::kPermission);
  EXPECT_HAS(group_writable.status().message(), copy.string());
  EXPECT_HAS(group_writable.status().message(), "0664");
  EXPECT_HAS(group_writable.status().message(), "`chmod go-w " + copy.string() + "`");

  ASSERT_EQ(chmod(copy.c_str(), 0646), 0);
  auto other_writable = load_plugin(copy.string(), options);
  ASSERT_FALSE(other_writable.is_ok());
  EXPECT_EQ(other_writable.status().code(), StatusCode::kPermission);
  EXPECT_HAS(other_writable.status().message(), "0646");

  // What the message says to do fixes it.
  ASSERT_EQ(chmod(copy.c_str(), 0644), 0);
  auto fixed = load_plugin(copy.string(), options);
  ASSERT_TRUE(fixed.is_ok()) << fixed.status().message();

  // The directory counts too: whoever can write it can swap the file.
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  auto open_dir = load_plugin(copy.string(), options);
  ASSERT_FALSE(open_dir.is_ok());
  EXPECT_EQ(open_dir.status().code(), StatusCode::kPermission);
  EXPECT_HAS(open_dir.status().message(), "0777");
  EXPECT_HAS(open_dir.status().message(), "`chmod go-w " + dir.path().string() + "`");

  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  auto fixed_dir = load_plugin(copy.string(), options);
  ASSERT_TRUE(fixed_dir.is_ok()) << fixed_dir.status().message();

  // Found by name through a search directory, the same check applies.
  ASSERT_EQ(chmod(copy.c_str(), 0666), 0);
  options.search_dirs = {dir.path().string()};
  auto by_name = load_plugin("fulcrum_balancer", options);
  ASSERT_FALSE(by_name.is_ok());
  EXPECT_EQ(by_name.status().code(), StatusCode::kPermission);
}

// Every directory from / down to the plugin counts, on the resolved path and
// on the path as given, where a link could be swapped; a sticky directory
// owned by root or this user (like /tmp) is the one exception.
TEST(LoaderPermissionTest, EveryDirectoryOnThePathIsChecked) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const fs::path inner = dir.path() / "a" / "b";
  fs::create_directories(inner);
  ASSERT_EQ(chmod((dir.path() / "a").c_str(), 0755), 0);
  ASSERT_EQ(chmod(inner.c_str(), 0755), 0);
  const fs::path copy = inner / "libfulcrum_balancer.so";
  fs::copy_file(FULCRUM_PLUGIN_PATH, copy);
  ASSERT_EQ(chmod(copy.c_str(), 0644), 0);
  LoaderOptions options;
  options.log = nullptr;
  ASSERT_TRUE(load_plugin(copy.string(), options).is_ok());

  // An ancestor writable by others: it could rename a/ away and put another there.
  ASSERT_EQ(chmod((dir.path() / "a").c_str(), 0777), 0);
  auto open_ancestor = load_plugin(copy.string(), options);
  ASSERT_FALSE(open_ancestor.is_ok());
  EXPECT_EQ(open_ancestor.status().code(), StatusCode::kPermission);
  EXPECT_HAS(open_ancestor.status().message(), "`chmod go-w " + (dir.path() / "a").string() + "`");

  // Sticky and owned by this user: others cannot move what they do not own.
  ASSERT_EQ(chmod((dir.path() / "a").c_str(), 01777), 0);
  auto sticky = load_plugin(copy.string(), options);
  EXPECT_TRUE(sticky.is_ok()) << sticky.status().message();
  ASSERT_EQ(chmod((dir.path() / "a").c_str(), 0755), 0);

  // A link in a directory others may write: the link could be pointed elsewhere.
  const fs::path open_dir = dir.path() / "open";
  fs::create_directory(open_dir);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  const fs::path link = open_dir / "libfulcrum_balancer.so";
  fs::create_symlink(copy, link);
  auto through_link = load_plugin(link.string(), options);
  ASSERT_FALSE(through_link.is_ok());
  EXPECT_EQ(through_link.status().code(), StatusCode::kPermission);
  EXPECT_HAS(through_link.status().message(), "`chmod go-w " + open_dir.string() + "`");
  ASSERT_EQ(chmod(open_dir.c_str(), 0755), 0);
  EXPECT_TRUE(load_plugin(link.string(), options).is_ok());
}

// --- the one policy: which balancer serves -----------------------------------

TEST(OpenBalancerTest, AbsentDefaultFallsBackAndNamedOrUnusableIsAnError) {
  Captured captured;
  auto builtin = open_balancer("builtin", {}, true, captured.options().log);
  ASSERT_TRUE(builtin.is_ok()) << builtin.status().message();
  EXPECT_TRUE(builtin->is_builtin);
  EXPECT_TRUE(builtin->not_found.empty());

  TempDir empty;
  auto absent = open_balancer("no_such_plugin", {empty.path().string()}, true,
                              captured.options().log, PluginChoice::kDefault);
  ASSERT_TRUE(absent.is_ok()) << absent.status().message();
  EXPECT_TRUE(absent->is_builtin);
  ASSERT_NE(absent->balancer, nullptr);
  EXPECT_HAS(absent->not_found, "libno_such_plugin.so");
  EXPECT_HAS(absent->not_found, empty.path().string());

  // Named and absent: refused with the search path, by name and by path.
  auto named = open_balancer("no_such_plugin", {empty.path().string()}, true,
                             captured.options().log, PluginChoice::kNamed);
  ASSERT_FALSE(named.is_ok());
  EXPECT_EQ(named.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(named.status().message(), "libno_such_plugin.so");
  EXPECT_HAS(named.status().message(), empty.path().string());
  EXPECT_HAS(named.status().message(), "balancer.plugin: builtin");
  const std::string absent_path = empty.path().string() + "/libabsent.so";
  auto named_path = open_balancer(absent_path, {}, true, captured.options().log);
  ASSERT_FALSE(named_path.is_ok());
  EXPECT_HAS(named_path.status().message(), absent_path);

  auto real = open_balancer(FULCRUM_PLUGIN_PATH, {}, true, captured.options().log);
  ASSERT_TRUE(real.is_ok()) << real.status().message();
  EXPECT_FALSE(real->is_builtin);

  const std::string broken = broken_plugin("wrong_major");
  auto unusable = open_balancer(broken, {}, false, captured.options().log);
  ASSERT_FALSE(unusable.is_ok());
  EXPECT_HAS(unusable.status().message(), "cannot use balancer plugin '" + broken + "'");
  EXPECT_EQ(split_plugin_dirs("a::b:"), (std::vector<std::string>{"a", "b"}));
}

// --- the shared library handle ---------------------------------------------

TEST(LoaderTest, BalancersFromOneFileShareOneHandle) {
  Captured captured;
  const std::string path = FULCRUM_PLUGIN_PATH;
  ASSERT_EQ(detail::library_use_count(path), 0);

  auto first = load_plugin(path, captured.options());
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  EXPECT_EQ(detail::library_use_count(path), 1);
  // The same file under another spelling is the same library.
  const std::string other_spelling =
      (fs::path(path).parent_path() / "." / fs::path(path).filename()).string();
  auto second = load_plugin(other_spelling, captured.options());
  ASSERT_TRUE(second.is_ok()) << second.status().message();
  EXPECT_EQ(detail::library_use_count(path), 2);

  std::shared_ptr<LoadBalancer> gone = std::move(*first);
  std::shared_ptr<LoadBalancer> survivor = std::move(*second);
  ASSERT_EQ(detail::library_use_count(path), 2);
  gone.reset();
  EXPECT_EQ(detail::library_use_count(path), 1);

  // The library stays loaded and usable for the balancer that is left.
  const CpWorkload w = causal_row(4096, 8);
  auto plan = survivor->plan_cp("head_tail", w);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_TRUE(validate_plan(w, *plan).is_ok());
  expect_plan_of("head_tail", w, *plan);

  survivor.reset();
  EXPECT_EQ(detail::library_use_count(path), 0);
  // And it loads again after everything was released.
  auto again = load_plugin(path, captured.options());
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(detail::library_use_count(path), 1);
}

// --- broken plugins --------------------------------------------------------

TEST(BrokenPluginTest, WrongAbiMajorIsRefused) {
  Captured captured;
  ASSERT_BUILT("wrong_major");
  auto loaded = load_plugin(broken_plugin("wrong_major"), captured.options());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInternal);
  EXPECT_HAS(loaded.status().message(), fs::canonical(broken_plugin("wrong_major")).string());
  EXPECT_HAS(loaded.status().message(),
             "was built for ABI major 2, this host speaks 1; rebuild it against this "
             "fulcrum");
}

TEST(BrokenPluginTest, ShortTableIsRefused) {
  Captured captured;
  ASSERT_BUILT("short_table");
  auto loaded = load_plugin(broken_plugin("short_table"), captured.options());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInternal);
  EXPECT_HAS(loaded.status().message(), "struct_size 72 bytes");
  EXPECT_HAS(loaded.status().message(), "smaller than the 88 bytes of ABI v1.0");
}

TEST(BrokenPluginTest, NullRequiredPointerIsRefusedByName) {
  Captured captured;
  ASSERT_BUILT("null_pointer");
  auto loaded = load_plugin(broken_plugin("null_pointer"), captured.options());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInternal);
  EXPECT_HAS(loaded.status().message(), "required function 'plan_cp' is null");
}

TEST(BrokenPluginTest, ThrowingPluginIsReportedNotFatal) {
  Captured captured;
  ASSERT_BUILT("throwing");
  auto loaded = load_plugin(broken_plugin("throwing"), captured.options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  auto balancer = *loaded;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto plan = balancer->plan_cp("contiguous", causal_row(64, 2));
    ASSERT_FALSE(plan.is_ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kPluginFault);
    EXPECT_HAS(plan.status().message(),
               "plugin 'broken_throwing' strategy 'contiguous': exception: "
               "broken_throwing plan_cp always throws");
  }
  auto part = balancer->partition_dp("round_robin", DpRequest{{1, 2, 3}, 2, {}, false});
  EXPECT_TRUE(refused_as_fault(part, "partition_dp always throws"));
  // The plugin's own log line reached the host's log, named.
  const bool logged = std::any_of(captured.lines.begin(), captured.lines.end(), [](const auto& l) {
    return l.level == LogLevel::kWarning &&
           l.text == "plugin 'broken_throwing': about to throw from plan_cp";
  });
  EXPECT_TRUE(logged);
}

TEST(BrokenPluginTest, NonPermutationPlanAndPartitionAreRejected) {
  Captured captured;
  ASSERT_BUILT("non_permutation");
  auto loaded = load_plugin(broken_plugin("non_permutation"), captured.options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  auto balancer = *loaded;
  auto plan = balancer->plan_cp("contiguous", causal_row(100, 4));
  EXPECT_TRUE(refused_as_fault(plan,
                               "plugin 'broken_non_permutation' strategy 'contiguous' returned an "
                               "invalid plan: "));

  auto part = balancer->partition_dp("round_robin", DpRequest{{4, 4, 4, 4, 4}, 2, {}, false});
  EXPECT_TRUE(refused_as_fault(part,
                               "plugin 'broken_non_permutation' strategy 'round_robin' returned an "
                               "invalid partition: sample 0 is listed twice"));
}

}  // namespace
}  // namespace fulcrum::host
