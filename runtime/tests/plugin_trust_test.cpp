// The plugin as a trust boundary: who may own the file and the directories
// above it, memory the host lends a plugin, the counts and text a plugin
// answers with. Each broken fixture breaks one promise of c_api.h; the host
// must refuse it naming the plugin, and keep its own data as it was.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/host/plugin_loader.h"
#include "fulcrum/host/selection.h"
#include "loader_test_support.h"

namespace fulcrum::host {
namespace {

namespace fs = std::filesystem;
using test::broken_plugin;
using test::refused_as_fault;
using test::TempDir;
using Logged = test::LogCapture;

constexpr uid_t kNobody = 65534;

// The broken plugin of `kind`, loaded with `options`; null (and a failure)
// when it cannot be.
std::shared_ptr<LoadBalancer> load_broken(const std::string& kind, const LoaderOptions& options) {
  const std::string path = broken_plugin(kind);
  EXPECT_TRUE(fs::exists(path)) << path << " is missing: build fulcrum_broken_" << kind;
  auto loaded = load_plugin(path, options);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().message();
  return loaded.is_ok() ? *loaded : nullptr;
}

// The same, its log dropped: for the tests that look only at answers.
std::shared_ptr<LoadBalancer> load_broken(const std::string& kind) {
  LoaderOptions options;
  options.check_permissions = false;  // the build tree's mode depends on the umask
  options.log = [](LogLevel, const std::string&) {};
  return load_broken(kind, options);
}

// Whether `text` is one line a terminal shows as it is: UTF-8 (checked here
// on its own, not with the loader's decoder) without C0 controls or DEL.
bool printable_line(const std::string& text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return false;
    std::size_t follow = 0;
    if (c >= 0xf0 && c <= 0xf4) {
      follow = 3;
    } else if (c >= 0xe0) {
      follow = 2;
    } else if (c >= 0xc2 && c <= 0xdf) {
      follow = 1;
    } else if (c >= 0x80) {
      return false;
    }
    if (follow > 0 && i + follow >= text.size()) return false;
    for (std::size_t k = 1; k <= follow; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return false;
    }
    i += follow + 1;
  }
  return true;
}

CpWorkload packed_row() {
  CpWorkload w;
  w.tokens = 4500;
  w.cp_size = 4;
  w.doc_lengths = {2000, 1500, 1000};
  return w;
}

ScheduleRequest batch_request() {
  ScheduleRequest r;
  r.doc_lengths = {2500, 1800, 200};
  r.world_size = 4;
  r.max_tokens_per_rank = 1000;
  r.block_size = 64;
  auto profile = builtin_cost_profile("h100_7b");
  EXPECT_TRUE(profile.is_ok());
  if (profile) r.profile = *profile;
  return r;
}

// --- ownership --------------------------------------------------------------

// A copy of the real plugin at dir/p/libx.so, modes 0755 / 0644, owned by
// this user: loadable until a test hands something to another user.
struct OwnedCopy {
  TempDir dir;
  fs::path inner = dir.path() / "p";
  fs::path file = inner / "libx.so";
  OwnedCopy() {
    EXPECT_EQ(chmod(dir.path().c_str(), 0755), 0);
    fs::create_directory(inner);
    EXPECT_EQ(chmod(inner.c_str(), 0755), 0);
    fs::copy_file(FULCRUM_PLUGIN_PATH, file);
    EXPECT_EQ(chmod(file.c_str(), 0644), 0);
  }
  ~OwnedCopy() {
    // Back to this user, so that TempDir can remove everything.
    for (const fs::path& p : {dir.path(), inner, file}) {
      [[maybe_unused]] const int ignored = lchown(p.c_str(), ::geteuid(), static_cast<gid_t>(-1));
    }
  }
};

Status load_checked(const fs::path& path) {
  LoaderOptions options;
  options.log = nullptr;
  auto loaded = load_plugin(path.string(), options);
  return loaded.is_ok() ? Status::ok() : loaded.status();
}

#define SKIP_UNLESS_ROOT()                                                                      \
  if (::geteuid() != 0) {                                                                       \
    GTEST_SKIP() << "giving a file to another user (uid 65534) needs root; the mode rules are " \
                    "tested without it";                                                        \
  }

TEST(PluginOwnershipTest, MatchingModesAloneDoNotTrustAnotherUsersDirectory) {
  SKIP_UNLESS_ROOT();
  OwnedCopy copy;
  ASSERT_TRUE(load_checked(copy.file).is_ok());

  // 0755 and 0644 are fine modes, but the owner of p/ may replace libx.so.
  ASSERT_EQ(chown(copy.inner.c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  Status refused = load_checked(copy.file);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.code(), StatusCode::kPermission);
  EXPECT_HAS(refused.message(), "its directory " + copy.inner.string() + " is owned by uid 65534");
  EXPECT_HAS(refused.message(), "neither root nor this user");
  ASSERT_EQ(chown(copy.inner.c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);
  EXPECT_TRUE(load_checked(copy.file).is_ok());

  // The file itself: its owner may chmod and rewrite it.
  ASSERT_EQ(chown(copy.file.c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  refused = load_checked(copy.file);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.code(), StatusCode::kPermission);
  EXPECT_HAS(refused.message(), "the file " + copy.file.string() + " is owned by uid 65534");
  ASSERT_EQ(chown(copy.file.c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);

  // Any ancestor: its owner may rename p/ away and put another in its place.
  ASSERT_EQ(chown(copy.dir.path().c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  refused = load_checked(copy.file);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_HAS(refused.message(),
             "the directory on its path " + copy.dir.path().string() + " is owned by uid 65534");
  ASSERT_EQ(chown(copy.dir.path().c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);
  EXPECT_TRUE(load_checked(copy.file).is_ok());
}

TEST(PluginOwnershipTest, StickyDirectoryOfAnotherUserAndLinksThroughOneAreRefused) {
  SKIP_UNLESS_ROOT();
  OwnedCopy copy;
  // A link in a 0755 directory that another user owns: they can repoint it.
  const fs::path other = copy.dir.path() / "other";
  fs::create_directory(other);
  ASSERT_EQ(chmod(other.c_str(), 0755), 0);
  const fs::path link = other / "libx.so";
  fs::create_symlink(copy.file, link);
  ASSERT_TRUE(load_checked(link).is_ok());
  ASSERT_EQ(chown(other.c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  Status refused = load_checked(link);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.code(), StatusCode::kPermission);
  EXPECT_HAS(refused.message(), other.string() + " is owned by uid 65534");
  ASSERT_EQ(chown(other.c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);

  // Sticky helps only when root or this user owns the directory.
  ASSERT_EQ(chmod(copy.dir.path().c_str(), 01777), 0);
  EXPECT_TRUE(load_checked(copy.file).is_ok());
  ASSERT_EQ(chown(copy.dir.path().c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  refused = load_checked(copy.file);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_HAS(refused.message(), copy.dir.path().string() + " is owned by uid 65534");
  ASSERT_EQ(chown(copy.dir.path().c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);
}

// A plugin found by name is checked as found, `dir/file`: the search
// directory and any link on the way to it, not only the file it resolves to.
TEST(PluginOwnershipTest, PluginFoundByNameIsCheckedWhereItWasFound) {
  SKIP_UNLESS_ROOT();
  OwnedCopy copy;
  const fs::path search = copy.dir.path() / "search";
  fs::create_directory(search);
  ASSERT_EQ(chmod(search.c_str(), 0755), 0);
  fs::create_symlink(copy.file, search / "libx.so");
  LoaderOptions options;
  options.log = nullptr;
  options.search_dirs = {search.string()};
  ASSERT_TRUE(load_plugin("x", options).is_ok());

  // The search directory handed to another user: they can repoint the link.
  ASSERT_EQ(chown(search.c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  auto refused = load_plugin("x", options);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermission);
  EXPECT_HAS(refused.status().message(), search.string() + " is owned by uid 65534");

  // A search directory reached through a link in that directory.
  const fs::path linked = search / "lnk";
  fs::create_symlink(copy.inner, linked);
  options.search_dirs = {linked.string()};
  refused = load_plugin("x", options);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_HAS(refused.status().message(), search.string() + " is owned by uid 65534");
  ASSERT_EQ(chown(search.c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);
  ASSERT_TRUE(load_plugin("x", options).is_ok());

  // A link another user owns in a sticky directory of this user's: the
  // sticky bit lets its owner remove and recreate it.
  ASSERT_EQ(chmod(search.c_str(), 01777), 0);
  ASSERT_EQ(lchown(linked.c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  refused = load_plugin("x", options);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_HAS(refused.status().message(),
             "the symbolic link on its path " + linked.string() + " is owned by uid 65534");
  ASSERT_EQ(lchown(linked.c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);
  ASSERT_EQ(chmod(search.c_str(), 0755), 0);
}

// A link of this user's reached only inside another link's target is as
// good as its directory's: whoever may write that directory may put a link
// of theirs in its place, and the plugin it names runs in every rank.
TEST(PluginOwnershipTest, TheDirectoryHoldingALinkInsideALinksTargetIsChecked) {
  SKIP_UNLESS_ROOT();
  OwnedCopy copy;
  const fs::path scratch = copy.dir.path() / "scratch";
  const fs::path opt = copy.dir.path() / "opt";
  fs::create_directory(scratch);
  fs::create_directory(opt);
  ASSERT_EQ(chmod(opt.c_str(), 0755), 0);
  ASSERT_EQ(chmod(scratch.c_str(), 0755), 0);
  fs::create_directory_symlink(copy.inner, scratch / "inner");     // scratch/inner -> p
  fs::create_directory_symlink(scratch / "inner", opt / "outer");  // opt/outer -> scratch/inner
  const fs::path given = opt / "outer" / "libx.so";
  EXPECT_TRUE(load_checked(given).is_ok());

  ASSERT_EQ(chmod(scratch.c_str(), 0777), 0);
  Status refused = load_checked(given);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.code(), StatusCode::kPermission);
  EXPECT_HAS(refused.message(), scratch.string() + " has mode 0777");
  ASSERT_EQ(chmod(scratch.c_str(), 01777), 0);  // sticky, this user's: the link stays put
  EXPECT_TRUE(load_checked(given).is_ok());

  ASSERT_EQ(chmod(scratch.c_str(), 0755), 0);
  ASSERT_EQ(chown(scratch.c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  refused = load_checked(given);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_HAS(refused.message(), scratch.string() + " is owned by uid 65534");
  ASSERT_EQ(chown(scratch.c_str(), ::geteuid(), static_cast<gid_t>(-1)), 0);
  EXPECT_TRUE(load_checked(given).is_ok());
}

// --- work the plugin reports --------------------------------------------------

// The host recounts every plan's work; a plugin whose own figures differ is
// refused, naming it, whichever array it gave.
TEST(PluginReportedWorkTest, WorkThatDisagreesWithTheRecountIsRefused) {
  auto balancer = load_broken("lying_work");
  ASSERT_NE(balancer, nullptr);
  CpWorkload row;
  row.tokens = 600;
  row.cp_size = 2;
  row.doc_lengths = {100, 200, 300};
  auto plan = balancer->plan_cp("contiguous", row);
  EXPECT_TRUE(refused_as_fault(
      plan, "plugin 'broken_lying_work' strategy 'contiguous' reports 1 pairs for rank 0"));
  EXPECT_HAS(plan.status().message(), "fix the plugin (");

  // Pairs alone, below zero.
  row.cp_size = 3;
  plan = balancer->plan_cp("contiguous", row);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_HAS(plan.status().message(), "reports -1000 pairs for rank 0");

  // The selector serves the built-in plan, whose work is the recount.
  SelectorOptions options;
  options.preferred = "contiguous";
  options.fallback = "contiguous";
  CpSelector selector(balancer, options);
  row.cp_size = 2;
  auto served = selector.plan(row);
  ASSERT_TRUE(served.is_ok()) << served.status().message();
  EXPECT_HAS(served->fallback_reason, "reports 1 pairs for rank 0");
  EXPECT_EQ(served->work.size(), 2u);
  const auto counted = compute_work(row, *served);
  for (std::size_t r = 0; r < counted.size(); ++r) {
    EXPECT_EQ(served->work[r].pairs, counted[r].pairs);
    EXPECT_EQ(served->work[r].tiles, counted[r].tiles);
  }
}

// --- memory lent to the plugin ----------------------------------------------

TEST(PluginLentMemoryTest, PlanThatWroteIntoTheRowIsRefusedAndTheRowKept) {
  auto balancer = load_broken("scribble");
  ASSERT_NE(balancer, nullptr);
  const CpWorkload row = packed_row();
  CpWorkload used = row;
  auto plan = balancer->plan_cp("contiguous", used);
  EXPECT_TRUE(refused_as_fault(plan,
                               "plugin 'broken_scribble' strategy 'contiguous' wrote into "
                               "doc_lengths[0] (2000 lent, 1999 after the call)"));
  EXPECT_HAS(plan.status().message(),
             "fix the plugin (" + fs::canonical(broken_plugin("scribble")).string() + ")");
  EXPECT_EQ(used.doc_lengths, row.doc_lengths);

  // One document: the strategy name is what it writes into.
  CpWorkload single;
  single.tokens = 100;
  single.cp_size = 2;
  auto named = balancer->plan_cp("contiguous", single);
  EXPECT_TRUE(refused_as_fault(named, "wrote into the string strategy"));
  // Each call gets its own copy: the next call reads the name as asked.
  auto again = balancer->plan_cp("contiguous", single);
  EXPECT_HAS(again.status().message(), "strategy 'contiguous' wrote into the string strategy");
}

TEST(PluginLentMemoryTest, SelectorServesTheBuiltinPlanAndSaysWhichPluginFailed) {
  auto balancer = load_broken("scribble");
  ASSERT_NE(balancer, nullptr);
  std::vector<std::string> warnings;
  SelectorOptions options;
  options.preferred = "contiguous";
  options.fallback = "contiguous";
  options.log = [&](LogLevel, const std::string& text) { warnings.push_back(text); };
  CpSelector selector(balancer, options);
  const CpWorkload row = packed_row();
  auto plan = selector.plan(row);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(row.doc_lengths, packed_row().doc_lengths);
  EXPECT_HAS(plan->fallback_reason, "plugin 'broken_scribble' strategy 'contiguous' wrote into");
  ASSERT_FALSE(warnings.empty());
  EXPECT_HAS(warnings.front(), "wrote into doc_lengths[0]");
}

TEST(PluginLentMemoryTest, PartitionThatWroteIntoTheLengthsIsRefused) {
  auto balancer = load_broken("scribble");
  ASSERT_NE(balancer, nullptr);
  const DpRequest request{{40, 30, 20, 10, 5}, 2, {}, false};
  DpRequest used = request;
  auto part = balancer->partition_dp("round_robin", used);
  EXPECT_TRUE(refused_as_fault(part,
                               "plugin 'broken_scribble' strategy 'round_robin' wrote into "
                               "lengths[0] (40 lent, 1 after the call)"));
  EXPECT_EQ(used.lengths, request.lengths);
}

TEST(PluginLentMemoryTest, ScheduleThatShrankTheBatchIsRefusedAndTheBatchKept) {
  auto balancer = load_broken("scribble");
  ASSERT_NE(balancer, nullptr);
  const ScheduleRequest request = batch_request();
  ScheduleRequest used = request;
  // The answer is a valid schedule of a batch of 1-token documents: only the
  // comparison with what was lent can tell.
  auto schedule = balancer->schedule("hybrid", used);
  EXPECT_TRUE(refused_as_fault(schedule,
                               "plugin 'broken_scribble' scheduler 'hybrid' wrote into "
                               "doc_lengths[0] (2500 lent, 1 after the call)"));
  EXPECT_EQ(used.doc_lengths, request.doc_lengths);
}

TEST(PluginLentMemoryTest, WritesIntoTheRequestStructAreRefused) {
  // Each hook writes one field of its request struct (no array, no string)
  // and answers validly for the request as given: only the byte comparison
  // of the struct can tell.
  auto balancer = load_broken("scribble_struct");
  ASSERT_NE(balancer, nullptr);
  const std::string tail = ", which the host lent it read-only";
  auto plan = balancer->plan_cp("contiguous", packed_row());
  EXPECT_TRUE(refused_as_fault(
      plan,
      "plugin 'broken_scribble_struct' strategy 'contiguous' wrote into the request "
      "struct fulcrum_cp_request" +
          tail));
  const DpRequest request{{40, 30, 20, 10, 5}, 2, {}, false};
  auto part = balancer->partition_dp("round_robin", request);
  ASSERT_FALSE(part.is_ok());
  EXPECT_HAS(part.status().message(),
             "plugin 'broken_scribble_struct' strategy 'round_robin' wrote into the request "
             "struct fulcrum_dp_request" +
                 tail);
  ScheduleRequest batch = batch_request();
  batch.doc_lengths = {700, 500, 200};
  auto schedule = balancer->schedule("hybrid", batch);
  ASSERT_FALSE(schedule.is_ok());
  EXPECT_HAS(schedule.status().message(),
             "plugin 'broken_scribble_struct' scheduler 'hybrid' wrote into the request "
             "struct fulcrum_schedule_request" +
                 tail);
}

// --- counts that promise more than the buffers hold ------------------------

TEST(PluginAnswerCountsTest, CountsAreCheckedBeforeAnyBufferIsRead) {
  auto balancer = load_broken("lying_counts");
  ASSERT_NE(balancer, nullptr);
  CpWorkload row;
  row.tokens = 1000;
  row.cp_size = 4;
  auto plan = balancer->plan_cp("contiguous", row);
  EXPECT_TRUE(refused_as_fault(plan,
                               "4 shards of 64000 positions hold 255000 pads for 1000 "
                               "tokens, but it reports padding 0"));

  for (std::int32_t k : {2, 3, 8}) {
    auto part = balancer->partition_dp("round_robin", DpRequest{{5, 4, 3, 2, 1}, k, {}, false});
    ASSERT_FALSE(part.is_ok()) << "k = " << k;
    EXPECT_EQ(part.status().code(), StatusCode::kPluginFault);
    EXPECT_HAS(part.status().message(), "rank " + std::to_string(k) +
                                            " starts at offset 5, before "
                                            "rank " +
                                            std::to_string(k - 1) + "'s offset 1099511627776");
  }
  // One rank: it writes sample n + 1 into the host's buffer of n.
  auto past = balancer->partition_dp("round_robin", DpRequest{{5, 4, 3}, 1, {}, false});
  EXPECT_TRUE(refused_as_fault(past,
                               "plugin 'broken_lying_counts' strategy 'round_robin' wrote "
                               "past the end of samples (3 entries, written at entry 3)"));
}

// --- text from the plugin ----------------------------------------------------

struct TextCase {
  const char* strategy;
  const char* field;
  const char* rule;
};

class PluginAnswerTextTest : public ::testing::TestWithParam<TextCase> {};

TEST_P(PluginAnswerTextTest, IsRefusedNamingPluginFieldAndRule) {
  auto balancer = load_broken("bad_text");
  ASSERT_NE(balancer, nullptr);
  CpWorkload row;
  row.tokens = 64;
  row.cp_size = 2;
  auto plan = balancer->plan_cp(GetParam().strategy, row);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kPluginFault);
  const std::string message = plan.status().message();
  EXPECT_HAS(message, std::string("plugin 'broken_bad_text' strategy '") + GetParam().strategy +
                          "' returned an invalid plan: " + GetParam().field + " " +
                          GetParam().rule);
  EXPECT_TRUE(printable_line(message)) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Rules, PluginAnswerTextTest,
    ::testing::Values(TextCase{"latin1", "strategy_used", "is not UTF-8 (byte 7 is 0xe9)"},
                      TextCase{"newline", "strategy_used",
                               "holds the control character U+000A at byte 10"},
                      TextCase{"control_reason", "fallback_reason",
                               "holds the control character U+001B at byte 4"}),
    [](const auto& test) { return std::string(test.param.strategy); });

TEST(PluginTextTest, ErrorsAndLogLinesAreEscapedToOneLine) {
  Logged logged;
  auto balancer = load_broken("bad_text", logged.options());
  ASSERT_NE(balancer, nullptr);
  CpWorkload row;
  row.tokens = 64;
  row.cp_size = 2;
  auto plan = balancer->plan_cp("noisy", row);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kPluginFault);
  const std::string message = plan.status().message();
  EXPECT_TRUE(printable_line(message)) << message;
  EXPECT_HAS(message,
             "plugin 'broken_bad_text' strategy 'noisy': failed \\x1b[31mred\\x1b[0m"
             "\\nfulcrum: forged line \\xc3");
  ASSERT_EQ(logged.lines.size(), 2u);  // the load line, then the plugin's
  EXPECT_EQ(logged.lines[1].text, "plugin 'broken_bad_text': log \\x1b[2J line\\nsecond \\xff");
}

TEST(PluginTextTest, ScheduleNamesAreChecked) {
  auto balancer = load_broken("bad_text");
  ASSERT_NE(balancer, nullptr);
  auto schedule = balancer->schedule("fixed", batch_request());
  EXPECT_TRUE(
      refused_as_fault(schedule,
                       "plugin 'broken_bad_text' scheduler 'fixed' returned an invalid schedule: "
                       "strategy_used is not UTF-8 (byte 5 is 0xc3)"));
}

TEST(PluginTextTest, TableNamesAreCheckedAtLoad) {
  const std::string path = broken_plugin("bad_name");
  ASSERT_TRUE(fs::exists(path)) << path << " is missing: build fulcrum_broken_bad_name";
  LoaderOptions options;
  options.check_permissions = false;
  options.log = nullptr;
  auto loaded = load_plugin(path, options);
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInternal);
  EXPECT_HAS(loaded.status().message(),
             "its cp_strategies[1] holds the control character U+001B "
             "at byte 3");
  EXPECT_TRUE(printable_line(loaded.status().message())) << loaded.status().message();
}

// The real plugin passes every one of these checks.
TEST(PluginTrustTest, RealPluginAnswersPassTheBoundary) {
  Logged logged;
  auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, logged.options());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  const CpWorkload row = packed_row();
  for (const std::string& strategy : (*loaded)->cp_strategies()) {
    auto plan = (*loaded)->plan_cp(strategy, row);
    EXPECT_TRUE(plan.is_ok() || plan.status().code() == StatusCode::kUnsupported)
        << strategy << ": " << plan.status().message();
  }
  auto part = (*loaded)->partition_dp("auto", DpRequest{{40, 30, 20, 10, 5}, 2, {}, false});
  EXPECT_TRUE(part.is_ok()) << part.status().message();
  for (const std::string& scheduler : (*loaded)->schedule_strategies()) {
    auto schedule = (*loaded)->schedule(scheduler, batch_request());
    EXPECT_TRUE(schedule.is_ok()) << scheduler << ": " << schedule.status().message();
  }
}

}  // namespace
}  // namespace fulcrum::host
