// Cost profile files (host/cost_profile_file.h): every bundled profile
// survives a round trip through YAML, and each kind of hostile file is
// refused with one line that names what is wrong and where.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/host/cost_profile_file.h"
#include "test_support.h"

namespace fulcrum::host {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::string yaml_of(const CostProfile& p) {
  char buffer[1024];
  std::snprintf(buffer, sizeof buffer,
                "name: %s\ntile_seconds: %.17g\ntoken_seconds: %.17g\nslot_seconds: %.17g\n"
                "kv_bytes_per_token: %.17g\nintra_node_bytes_per_second: %.17g\n"
                "inter_node_bytes_per_second: %.17g\nlatency_seconds: %.17g\n"
                "ranks_per_node: %d\n",
                p.name.c_str(), p.tile_seconds, p.token_seconds, p.slot_seconds,
                p.kv_bytes_per_token, p.intra_node_bytes_per_second, p.inter_node_bytes_per_second,
                p.latency_seconds, p.ranks_per_node);
  return buffer;
}

TEST(CostProfileFileTest, BundledProfilesRoundTripThroughAFile) {
  TempDir dir;
  ASSERT_FALSE(builtin_cost_profile_names().empty());
  for (const std::string& name : builtin_cost_profile_names()) {
    SCOPED_TRACE(name);
    const CostProfile bundled = builtin_cost_profile(name).value();
    const std::string path = dir.file(name + ".yaml", yaml_of(bundled));
    auto loaded = load_cost_profile_file(path);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_EQ(loaded->name, bundled.name);
    EXPECT_EQ(loaded->tile_seconds, bundled.tile_seconds);
    EXPECT_EQ(loaded->token_seconds, bundled.token_seconds);
    EXPECT_EQ(loaded->slot_seconds, bundled.slot_seconds);
    EXPECT_EQ(loaded->kv_bytes_per_token, bundled.kv_bytes_per_token);
    EXPECT_EQ(loaded->intra_node_bytes_per_second, bundled.intra_node_bytes_per_second);
    EXPECT_EQ(loaded->inter_node_bytes_per_second, bundled.inter_node_bytes_per_second);
    EXPECT_EQ(loaded->latency_seconds, bundled.latency_seconds);
    EXPECT_EQ(loaded->ranks_per_node, bundled.ranks_per_node);
    auto resolved = resolve_cost_profile(name);
    ASSERT_TRUE(resolved.is_ok()) << resolved.status().message();
    EXPECT_EQ(resolved->tile_seconds, bundled.tile_seconds);
  }
}

// exchange_overlap came later (ABI 1.3): a file without it is read as 0,
// the cost model before it; one that sets it is read exactly.
TEST(CostProfileFileTest, ExchangeOverlapIsOptionalAndReadWhenSet) {
  const CostProfile bundled = builtin_cost_profile("cpu_gloo").value();
  auto without = load_cost_profile_string(yaml_of(bundled), "p.yaml");
  ASSERT_TRUE(without.is_ok()) << without.status().message();
  EXPECT_EQ(without->exchange_overlap, 0.0);
  auto with = load_cost_profile_string(yaml_of(bundled) + "exchange_overlap: 0.625\n", "p.yaml");
  ASSERT_TRUE(with.is_ok()) << with.status().message();
  EXPECT_EQ(with->exchange_overlap, 0.625);
  EXPECT_EQ(with->tile_seconds, bundled.tile_seconds);
}

// row_token_seconds came later (ABI 1.4): absent it reads as 0, the model
// before it; set, it reads exactly, and a profile with it written as a file
// reads back equal.
TEST(CostProfileFileTest, RowTokenSecondsIsOptionalAndRoundTrips) {
  const CostProfile bundled = builtin_cost_profile("cpu_gloo").value();
  auto without = load_cost_profile_string(yaml_of(bundled), "p.yaml");
  ASSERT_TRUE(without.is_ok()) << without.status().message();
  EXPECT_EQ(without->row_token_seconds, 0.0);
  auto with = load_cost_profile_string(
      yaml_of(bundled) + "exchange_overlap: 0.25\nrow_token_seconds: 0.375\n", "p.yaml");
  ASSERT_TRUE(with.is_ok()) << with.status().message();
  EXPECT_EQ(with->row_token_seconds, 0.375);
  EXPECT_EQ(with->exchange_overlap, 0.25);
  EXPECT_EQ(with->tile_seconds, bundled.tile_seconds);
}

struct Hostile {
  const char* what;
  std::string yaml;
  const char* says;
};

TEST(CostProfileFileTest, HostileContentIsRefusedInOneLine) {
  const std::string good = yaml_of(builtin_cost_profile("h100_7b").value());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto at = text.find(from);
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
  };
  auto line_of = [&](const std::string& key) {
    const auto at = good.find(key + ":");
    return good.substr(at, good.find('\n', at) - at);
  };
  const std::vector<Hostile> cases = {
      {"empty", "", "is empty"},
      {"comments only", "# nothing\n", "is empty"},
      {"a list", "- 1\n- 2\n", "must be one YAML mapping"},
      {"a scalar", "h100_7b\n", "must be one YAML mapping"},
      {"misspelt key", replace("tile_seconds", "tile_secods"), "did you mean 'tile_seconds'?"},
      {"duplicate key", good + "slot_seconds: 1\n", "duplicate key 'slot_seconds'"},
      {"NaN", replace(line_of("token_seconds"), "token_seconds: .nan"), "token_seconds must be"},
      {"inf", replace(line_of("latency_seconds"), "latency_seconds: .inf"),
       "latency_seconds must be"},
      {"negative", replace(line_of("slot_seconds"), "slot_seconds: -1e-3"), "slot_seconds must be"},
      {"zero bandwidth",
       replace(line_of("intra_node_bytes_per_second"), "intra_node_bytes_per_second: 0"),
       "intra_node_bytes_per_second must be a number > 0"},
      {"not a number", replace(line_of("tile_seconds"), "tile_seconds: fast"),
       "tile_seconds must be"},
      {"fractional ranks", replace("ranks_per_node: 8", "ranks_per_node: 2.5"),
       "ranks_per_node must be an integer"},
      // Integers read as integers, not as %g's 1.04858e+06.
      {"too many ranks per node", replace("ranks_per_node: 8", "ranks_per_node: 1048577"),
       "ranks_per_node = 1048577 must be in [1, 1048576]"},
      {"huge KV bytes", replace(line_of("kv_bytes_per_token"), "kv_bytes_per_token: 2e9"),
       "kv_bytes_per_token = 2000000000 must be <= 1073741824"},
      {"missing field", replace(line_of("kv_bytes_per_token") + "\n", ""),
       "does not set kv_bytes_per_token"},
      {"empty name", replace(line_of("name"), "name:"), "is empty; give the profile a name"},
      {"nested value", replace(line_of("tile_seconds"), "tile_seconds: {a: 1}"),
       "tile_seconds must be"},
      {"two documents", good + "---\n" + good, "2 YAML documents"},
      {"malformed", "name: [unclosed\n", "malformed YAML"},
      {"overlap above 1", good + "exchange_overlap: 1.5\n", "exchange_overlap = 1.5 must be <= 1"},
      {"negative overlap", good + "exchange_overlap: -0.5\n",
       "exchange_overlap must be a number >= 0"},
      {"NaN overlap", good + "exchange_overlap: .nan\n", "exchange_overlap must be"},
      {"negative row term", good + "row_token_seconds: -1e-6\n",
       "row_token_seconds must be a number >= 0, got '-1e-6'"},
      {"row term past an hour", good + "row_token_seconds: 4000\n",
       "row_token_seconds = 4000 must be <= 3600"},
      {"NaN row term", good + "row_token_seconds: .nan\n", "row_token_seconds must be"},
  };
  for (const Hostile& c : cases) {
    SCOPED_TRACE(c.what);
    auto loaded = load_cost_profile_string(c.yaml, "p.yaml");
    ASSERT_FALSE(loaded.is_ok());
    EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
    const std::string message = loaded.status().message();
    EXPECT_HAS(message, c.says);
    EXPECT_HAS(message, "p.yaml");
    EXPECT_HAS(message, "; ");
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(CostProfileFileTest, FilesThatAreNotSmallRegularFilesAreRefusedUnread) {
  TempDir dir;
  const std::string fifo = (dir.path() / "fifo.yaml").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string huge = dir.file("huge.yaml", std::string(kMaxCostProfileFileBytes + 1, '#'));
  const std::string nul = dir.file("nul.yaml", std::string("name: a\0b\n", 10));
  struct Case {
    std::string path;
    const char* says;
  };
  for (const Case& c :
       {Case{dir.path().string(), "is not a regular file"}, Case{fifo, "is not a regular file"},
        Case{"/dev/zero", "is not a regular file"}, Case{huge, "bytes, more than the 65536"},
        Case{nul, "holds a NUL byte"}, Case{(dir.path() / "missing.yaml").string(), "not found"}}) {
    SCOPED_TRACE(c.path);
    auto loaded = load_cost_profile_file(c.path);
    ASSERT_FALSE(loaded.is_ok());
    EXPECT_HAS(loaded.status().message(), c.says);
  }
  // A symbolic link to a good file is a good file.
  const std::string good = dir.file("good.yaml", yaml_of(builtin_cost_profile("cpu_gloo").value()));
  const std::string link = (dir.path() / "link.yaml").string();
  ASSERT_EQ(symlink(good.c_str(), link.c_str()), 0);
  EXPECT_TRUE(load_cost_profile_file(link).is_ok());
}

TEST(CostProfileFileTest, AnUnknownBareNameListsTheBundledProfiles) {
  auto resolved = resolve_cost_profile("h200_70b");
  ASSERT_FALSE(resolved.is_ok());
  EXPECT_EQ(resolved.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(resolved.status().message(), "unknown cost profile 'h200_70b'");
  for (const std::string& name : builtin_cost_profile_names()) {
    EXPECT_HAS(resolved.status().message(), name);
  }
}

}  // namespace
}  // namespace fulcrum::host
