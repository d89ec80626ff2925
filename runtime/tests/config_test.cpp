// Tests of the YAML configuration: schema, loader, overrides and the one-line
// error messages users see.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "train/job_schema.h"

namespace fulcrum::host {
namespace {

// Substring checks without gmock (the test links gtest only).
testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}
testing::AssertionResult Lacks(const std::string& text, const std::string& part) {
  if (text.find(part) == std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' contains '" << part << "'";
}

Config load_ok(const std::string& yaml, const std::vector<host::Override>& overrides = {}) {
  auto config = train::load_job_config_string(yaml, "test.yaml", overrides);
  EXPECT_TRUE(config.is_ok()) << config.status().message();
  if (!config) return Config();
  return std::move(config).value();
}

std::string load_error(const std::string& yaml, const std::vector<host::Override>& overrides = {}) {
  auto config = train::load_job_config_string(yaml, "test.yaml", overrides);
  EXPECT_FALSE(config.is_ok()) << "expected an error for:\n" << yaml;
  if (config) return "";
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  const std::string message = config.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  return message;
}

TEST(ConfigSchemaTest, EveryDefaultPassesItsOwnCheck) {
  // Each default, set explicitly, must load: a bad default would otherwise
  // only surface when someone reads the key.
  for (const auto& spec : train::job_schema().keys()) {
    auto config = train::load_job_config_string("", "x", {spec.key + "=" + spec.default_value});
    EXPECT_TRUE(config.is_ok()) << spec.key << ": " << config.status().message();
    EXPECT_FALSE(spec.help.empty()) << spec.key;
  }
}

TEST(ConfigSchemaTest, NearestSuggestsCloseKeysOnly) {
  const auto& schema = train::job_schema();
  EXPECT_EQ(schema.nearest("parallel.cp_sise"), "parallel.cp_size");
  EXPECT_EQ(schema.nearest("parallel.dp_szie"), "parallel.dp_size");
  EXPECT_EQ(schema.nearest("paralel"), "parallel");
  // The right word in the wrong section.
  EXPECT_EQ(schema.nearest("train.block_size"), "balancer.cp.block_size");
  EXPECT_EQ(schema.nearest("data.seq_len"), "data.seq_length");
  // A swap of two letters is one edit.
  EXPECT_EQ(schema.nearest("balancer.cp.stratgey"), "balancer.cp.strategy");
  // A shared section prefix does not make unrelated words close ("moat" is
  // not "mask")...
  EXPECT_EQ(schema.nearest("balancer.cp.moat"), "");
  // ... and a word of another section is found there, not near a look-alike
  // of this one ("mode" is parallel.mode, not balancer.cp.mask).
  EXPECT_EQ(schema.nearest("balancer.cp.mode"), "parallel.mode");
  EXPECT_EQ(schema.nearest("completely.unrelated"), "");
  EXPECT_EQ(schema.nearest("zzz"), "");
}

TEST(ConfigTest, DefaultsWithoutFileOrOverrides) {
  auto config = train::load_job_config("", {});
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  EXPECT_EQ(config->get_int("parallel.dp_size"), 1);
  EXPECT_EQ(config->get_int("parallel.cp_size"), 1);
  EXPECT_EQ(config->get_string("balancer.plugin"), "fulcrum_balancer");
  EXPECT_EQ(config->get_string("balancer.plugin_dirs"), "");
  EXPECT_TRUE(config->get_bool("balancer.check_permissions"));
  EXPECT_EQ(config->get_string("balancer.cp.strategy"), "auto");
  EXPECT_EQ(config->get_string("balancer.cp.fallback"), "contiguous");
  EXPECT_EQ(config->get_int("balancer.cp.block_size"), 128);
  EXPECT_EQ(config->get_string("balancer.cp.mask"), "causal");
  EXPECT_EQ(config->get_string("balancer.dp.cost"), "tokens");
  EXPECT_FALSE(config->get_bool("balancer.dp.equal_count"));
  EXPECT_EQ(config->get_string("data.source"), "synthetic");
  EXPECT_EQ(config->get_int("data.seq_length"), 4096);
  EXPECT_EQ(config->get_string("train.dtype"), "float32");
  EXPECT_DOUBLE_EQ(config->get_double("train.lr"), 1e-3);
  EXPECT_EQ(config->origin("parallel.cp_size"), "default");
  EXPECT_FALSE(config->is_set("parallel.cp_size"));
}

TEST(ConfigTest, FileValuesAndOrigins) {
  const Config config = load_ok(
      "parallel:\n"
      "  cp_size: 8\n"
      "  dp_size: 2\n"
      "balancer:\n"
      "  cp:\n"
      "    strategy: head_tail\n"
      "    mask: sliding:512\n"
      "  dp:\n"
      "    cost: attention:1000\n"
      "    equal_count: true\n"
      "train:\n"
      "  lr: 3e-4\n"
      "  dtype: float64\n");
  EXPECT_EQ(config.get_int("parallel.cp_size"), 8);
  EXPECT_EQ(config.get_int("parallel.dp_size"), 2);
  EXPECT_EQ(config.get_string("balancer.cp.strategy"), "head_tail");
  EXPECT_EQ(config.get_string("balancer.cp.mask"), "sliding:512");
  EXPECT_EQ(config.get_string("balancer.dp.cost"), "attention:1000");
  EXPECT_TRUE(config.get_bool("balancer.dp.equal_count"));
  EXPECT_DOUBLE_EQ(config.get_double("train.lr"), 3e-4);
  EXPECT_EQ(config.get_string("train.dtype"), "float64");
  EXPECT_EQ(config.origin("parallel.cp_size"), "test.yaml:2:12");
  EXPECT_EQ(config.origin("balancer.cp.strategy"), "test.yaml:6:15");
  EXPECT_TRUE(config.is_set("parallel.cp_size"));
  EXPECT_EQ(config.origin("data.seq_length"), "default");
  EXPECT_EQ(config.get_int("data.seq_length"), 4096);
}

TEST(ConfigTest, DottedKeysAndEmptySectionsAreAccepted) {
  const Config config = load_ok("parallel.cp_size: 4\nbalancer.cp: {block_size: 64}\ndata:\n");
  EXPECT_EQ(config.get_int("parallel.cp_size"), 4);
  EXPECT_EQ(config.get_int("balancer.cp.block_size"), 64);
}

TEST(ConfigTest, EmptyFileMeansDefaults) {
  const Config config = load_ok("");
  EXPECT_EQ(config.get_int("parallel.cp_size"), 1);
  const Config comments = load_ok("# nothing here\n");
  EXPECT_EQ(comments.get_int("parallel.dp_size"), 1);
}

TEST(ConfigTest, UnknownKeySuggestsNearestWithLineAndColumn) {
  EXPECT_EQ(load_error("parallel:\n  dp_size: 2\n  cp_sise: 4\n"),
            "test.yaml:3:3: unknown key 'parallel.cp_sise'; did you mean 'parallel.cp_size'?");
  EXPECT_EQ(load_error("paralel:\n  cp_size: 4\n"),
            "test.yaml:1:1: unknown key 'paralel'; did you mean 'parallel'?");
}

TEST(ConfigTest, UnknownKeyFarFromEverythingListsKnownKeys) {
  const std::string message = load_error("parallel:\n  frobnicate: 4\n");
  EXPECT_TRUE(Contains(message, "test.yaml:2:3: unknown key 'parallel.frobnicate'"));
  EXPECT_TRUE(Lacks(message, "did you mean"));
  EXPECT_TRUE(Contains(message, "dp_size, cp_size"));
}

TEST(ConfigTest, WrongTypeNamesKeyValueAndWhatIsAllowed) {
  EXPECT_EQ(load_error("parallel:\n  cp_size: abc\n"),
            "test.yaml:2:12: parallel.cp_size must be an integer >= 1, got 'abc'");
  EXPECT_EQ(load_error("parallel:\n  cp_size: 12abc\n"),
            "test.yaml:2:12: parallel.cp_size must be an integer >= 1, got '12abc'");
  EXPECT_EQ(load_error("parallel:\n  cp_size: 2.5\n"),
            "test.yaml:2:12: parallel.cp_size must be an integer >= 1, got '2.5'");
  EXPECT_EQ(load_error("balancer:\n  check_permissions: maybe\n"),
            "test.yaml:2:22: balancer.check_permissions must be true or false, got 'maybe'");
  EXPECT_EQ(load_error("train:\n  lr: fast\n"),
            "test.yaml:2:7: train.lr must be a number > 0, got 'fast'");
}

// yaml-cpp closes a quoted scalar left open at the end of the file itself;
// the loader refuses it instead of taking a value that was cut short.
TEST(ConfigTest, QuotedValueLeftOpenIsRefused) {
  EXPECT_EQ(load_error("balancer:\n  plugin: \"abc\n"),
            "test.yaml:2:11: the quoted value of balancer.plugin is never closed; add the "
            "closing quote");
  EXPECT_TRUE(Contains(load_error("balancer:\n  plugin: 'abc\n"), "is never closed"));
  EXPECT_TRUE(Contains(load_error("balancer:\n  plugin: \"ab\\\"\n"), "is never closed"));
  // Closed ones, escapes and doubled single quotes included, are values.
  EXPECT_EQ(load_ok("balancer:\n  plugin: \"a\\\"b\"\n").get_string("balancer.plugin"), "a\"b");
  EXPECT_EQ(load_ok("balancer:\n  plugin: 'it''s'\n").get_string("balancer.plugin"), "it's");
  EXPECT_EQ(load_ok("balancer:\n  plugin: \"abc\"\n").get_string("balancer.plugin"), "abc");
}

TEST(ConfigTest, IntegerOverflowIsAnErrorNotAWrap) {
  EXPECT_TRUE(Contains(load_error("parallel:\n  cp_size: 99999999999999999999999\n"),
                       "parallel.cp_size must be an integer >= 1"));
}

TEST(ConfigTest, OutOfRange) {
  EXPECT_EQ(load_error("parallel:\n  cp_size: 0\n"),
            "test.yaml:2:12: parallel.cp_size must be an integer >= 1, got '0'");
  EXPECT_EQ(load_error("train:\n  lr: 0\n"),
            "test.yaml:2:7: train.lr must be a number > 0, got '0'");
  EXPECT_EQ(load_error("train:\n  checkpoint_every: -1\n"),
            "test.yaml:2:21: train.checkpoint_every must be an integer >= 0, got '-1'");
  // The bound of plan --block-size: past it the workers failed with an
  // internal error.
  EXPECT_EQ(load_error("balancer:\n  cp:\n    block_size: 1099511627776\n"),
            "test.yaml:3:17: balancer.cp.block_size must be an integer in [1, 2147483648], got "
            "'1099511627776'");
  EXPECT_EQ(load_ok("", {"balancer.cp.block_size=2147483648"}).get_int("balancer.cp.block_size"),
            std::int64_t{1} << 31);
}

TEST(ConfigTest, NotOneOfTheChoices) {
  EXPECT_EQ(load_error("data:\n  source: csv\n"),
            "test.yaml:2:11: data.source must be one of synthetic, jsonl, megatron, got 'csv'");
  EXPECT_EQ(load_error("train:\n  dtype: float16\n"),
            "test.yaml:2:10: train.dtype must be one of float32, float64, got 'float16'");
}

TEST(ConfigTest, CheckFunctionsRejectBadMaskAndCost) {
  EXPECT_EQ(load_error("balancer:\n  cp:\n    mask: diagonal\n"),
            "test.yaml:3:11: balancer.cp.mask must be causal, full, sliding:W with W >= 1, or "
            "prefix:L with L >= 0, got 'diagonal'");
  EXPECT_TRUE(Contains(load_error("balancer:\n  cp:\n    mask: sliding:0\n"), "got 'sliding:0'"));
  EXPECT_TRUE(Contains(load_error("balancer:\n  dp:\n    cost: attention:-1\n"),
                       "test.yaml:3:11: balancer.dp.cost must be tokens, attention or "
                       "attention:A with A from 0 to 2^40, got 'attention:-1'"));
  EXPECT_TRUE(Contains(load_error("balancer:\n  dp:\n    cost: attention:1e307\n"),
                       "balancer.dp.cost must be tokens, attention or attention:A with A from 0 "
                       "to 2^40, got 'attention:1e307'"));
  EXPECT_TRUE(Contains(load_error("balancer:\n  dp:\n    cost: flops\n"), "got 'flops'"));
}

TEST(ConfigTest, MappingWhereScalarExpectedAndViceVersa) {
  EXPECT_EQ(load_error("parallel:\n  cp_size:\n    a: 1\n"),
            "test.yaml:3:5: parallel.cp_size must be an integer >= 1, got a mapping");
  EXPECT_EQ(load_error("parallel:\n  cp_size: [1, 2]\n"),
            "test.yaml:2:12: parallel.cp_size must be an integer >= 1, got a sequence");
  EXPECT_EQ(load_error("parallel: 4\n"),
            "test.yaml:1:11: parallel must be a mapping of its keys (dp_size, cp_size, mode, "
            "world_size, max_tokens_per_rank, hybrid), got a scalar '4'");
  EXPECT_TRUE(Contains(load_error("- a\n- b\n"),
                       "test.yaml:1:1: the config must be a mapping of sections (parallel, "
                       "balancer, data, model, train, dist), got a sequence"));
  // A key with no value points at the key, not at whatever follows it.
  EXPECT_EQ(load_error("parallel:\n  cp_size:\nmodel:\n  num_layers: 2\n"),
            "test.yaml:2:3: parallel.cp_size must be an integer >= 1, got an empty value");
}

TEST(ConfigTest, DuplicateKeyIsAnError) {
  EXPECT_TRUE(Contains(load_error("parallel:\n  cp_size: 2\nparallel.cp_size: 4\n"),
                       "test.yaml:3:1: duplicate key 'parallel.cp_size' (first set at "
                       "test.yaml:2:3)"));
}

TEST(ConfigTest, OverridesWinOverFileAndDefaults) {
  const Config config =
      load_ok("parallel:\n  cp_size: 8\n", {"parallel.cp_size=4", "balancer.cp.strategy=ptrr",
                                            "balancer.dp.equal_count=yes", "data.path="});
  EXPECT_EQ(config.get_int("parallel.cp_size"), 4);
  EXPECT_EQ(config.origin("parallel.cp_size"), "--set parallel.cp_size=4");
  EXPECT_EQ(config.get_string("balancer.cp.strategy"), "ptrr");
  EXPECT_TRUE(config.get_bool("balancer.dp.equal_count"));
  EXPECT_EQ(config.get_string("data.path"), "");
  EXPECT_TRUE(config.is_set("data.path"));
  // The last of two overrides of one key wins.
  const Config twice = load_ok("", {"parallel.dp_size=2", "parallel.dp_size=3"});
  EXPECT_EQ(twice.get_int("parallel.dp_size"), 3);
}

// Every value says what set it, in the words a user would look for: the
// file's line, the --set as typed (key trimmed), or the command's flag.
TEST(ConfigTest, EveryValueNamesItsSource) {
  const std::vector<Override> overrides = {
      " train.steps =5",
      "data.path=a\nb",
      {"train.resume=auto", "--resume"},
      {"train.compare_repetitions=4", "--compare-repetitions"}};
  const Config config = load_ok("parallel:\n  cp_size: 8\ntrain:\n  steps: 2\n", overrides);
  EXPECT_EQ(config.source("parallel.cp_size"), "from test.yaml:2:12");
  EXPECT_EQ(config.origin_file("parallel.cp_size"), "test.yaml");
  EXPECT_EQ(config.source("train.steps"), "from --set train.steps=5");
  EXPECT_EQ(config.origin_file("train.steps"), "") << "an override wins over the file's line";
  EXPECT_EQ(config.source("data.path"), "from --set data.path=a\\nb") << "one line";
  EXPECT_EQ(config.source("train.resume"), "from --resume");
  EXPECT_EQ(config.origin("train.compare_repetitions"), "--compare-repetitions");
  EXPECT_EQ(config.source("data.seq_length"), "the default");
  EXPECT_EQ(config.origin_file("data.seq_length"), "");
  // A bad value is blamed on what set it.
  EXPECT_EQ(load_error("", {{"train.compare_repetitions=many", "--compare-repetitions"}}),
            "--compare-repetitions: train.compare_repetitions must be an integer in [1, 100], got "
            "'many'");
  EXPECT_EQ(load_error("", {"train.compare_repetitions=many"}),
            "--set: train.compare_repetitions must be an integer in [1, 100], got 'many'");
}

TEST(ConfigTest, OverridesAreCheckedLikeTheFile) {
  EXPECT_EQ(load_error("", {"parallel.cp_size=abc"}),
            "--set: parallel.cp_size must be an integer >= 1, got 'abc'");
  EXPECT_EQ(load_error("", {"parallel.cp_sise=4"}),
            "--set: unknown key 'parallel.cp_sise'; did you mean 'parallel.cp_size'?");
  EXPECT_TRUE(Contains(load_error("", {"parallel=4"}), "--set: 'parallel' is a section"));
}

TEST(ConfigTest, MalformedOverride) {
  EXPECT_EQ(load_error("", {"foo"}),
            "--set: 'foo' is not KEY=VALUE; write it like --set parallel.cp_size=4");
  EXPECT_TRUE(Contains(load_error("", {"=4"}), "is not KEY=VALUE"));
}

TEST(ConfigTest, MalformedYamlReportsLineAndColumn) {
  const std::string message = load_error("parallel:\n  cp_size: [1, 2\n");
  EXPECT_TRUE(Contains(message, "test.yaml:"));
  EXPECT_TRUE(Contains(message, "malformed YAML"));
  const std::string tabs = load_error("parallel:\n  cp_size: 1\n dp_size: 2\n");
  EXPECT_TRUE(Contains(tabs, "test.yaml:3:"));
}

// yaml-cpp 0.7's YAML::LoadAll never returns on some of these (a file
// holding just ",": jbeder/yaml-cpp#1040, one empty document after another
// until memory runs out); the loader must answer each at once, in one line.
TEST(ConfigTest, DegenerateStreamsAreRefusedOrReadAsEmpty) {
  const std::string fix = "; fix the syntax (indent with spaces, 'key: value')";
  const std::string comma = "malformed YAML: ',' outside a flow collection ([...] or {...})";
  EXPECT_EQ(load_error(","), "test.yaml:1:1: " + comma + fix);
  EXPECT_EQ(load_error(",,"), "test.yaml:1:1: " + comma + fix);
  EXPECT_EQ(load_error("---\n---\n,"), "test.yaml:3:1: " + comma + fix);
  EXPECT_EQ(load_error("- a\n,"), "test.yaml:2:1: " + comma + fix);
  EXPECT_EQ(load_error("parallel: {cp_size: 2}\n...\n,\n"), "test.yaml:3:1: " + comma + fix);
  EXPECT_EQ(load_error("]"), "test.yaml:1:1: malformed YAML: illegal flow end" + fix);
  EXPECT_EQ(load_error("{"), "test.yaml:1:1: malformed YAML: end of map flow not found" + fix);
  EXPECT_EQ(load_error("- ,"), "test.yaml:1:3: malformed YAML: end of sequence not found" + fix);
  // Nothing, a comment or an empty document: all defaults.
  for (const char* empty : {"", "# only a comment\n", "...", "---\n", "---\n...\n"}) {
    const Config config = load_ok(empty);
    EXPECT_EQ(config.get_int("parallel.cp_size"), 1) << empty;
    EXPECT_EQ(config.origin("parallel.cp_size"), "default") << empty;
  }
  // The overrides still apply after an empty document.
  EXPECT_EQ(load_ok("...", {"parallel.cp_size=4"}).get_int("parallel.cp_size"), 4);
}

TEST(ConfigTest, MoreThanOneDocumentIsRefusedAtTheSecond) {
  EXPECT_EQ(load_error("parallel: {cp_size: 2}\n---\nparallel: {cp_size: 4}\n"),
            "test.yaml:2:1: the file holds 2 YAML documents; keep one (remove the extra '---')");
  EXPECT_EQ(load_error("---\n---\n---\n"),
            "test.yaml:2:1: the file holds 3 YAML documents; keep one (remove the extra '---')");
  // The one document is read as before.
  EXPECT_EQ(load_ok("---\nparallel: {cp_size: 2}\n...\n").get_int("parallel.cp_size"), 2);
}

// Keys and values are quoted with their control characters escaped, so a
// refusal stays one line whatever the user typed.
TEST(ConfigTest, UserTextWithLineBreaksIsQuotedOnOneLine) {
  EXPECT_EQ(load_error("\"par\\nallel\": 1\n"),
            "test.yaml:1:1: unknown key 'par\\nallel'; did you mean 'parallel'?");
  EXPECT_EQ(load_error("", {"par\nallel.cp_size=2"}),
            "--set: unknown key 'par\\nallel.cp_size'; did you mean 'parallel.cp_size'?");
  EXPECT_EQ(load_error("\"data\\x01\": {}\n"),
            "test.yaml:1:1: unknown key 'data\\x01'; did you mean 'data'?");
  EXPECT_TRUE(Contains(load_error("parallel: \"a\\tb\"\n"), "got a scalar 'a\\tb'"));
  EXPECT_EQ(load_error("", {"parallel.cp_size=2\r"}),
            "--set: parallel.cp_size must be an integer >= 1, got '2\\r'");
  const std::string mask = load_error("", {"balancer.cp.mask=sliding:\x1b[2J"});
  EXPECT_TRUE(Contains(mask, "'sliding:\\x1b[2J'")) << mask;
  const std::string cost = load_error("balancer: {dp: {cost: \"atten\\ntion\"}}\n");
  EXPECT_TRUE(Contains(cost, "'atten\\ntion'")) << cost;
  for (const std::string& message : {mask, cost}) {
    EXPECT_TRUE(Lacks(message, "\n"));
    EXPECT_TRUE(Lacks(message, "\r"));
    EXPECT_TRUE(Lacks(message, "\x1b"));
  }
}

TEST(ConfigTest, MissingFileIsNotFound) {
  auto config = train::load_job_config("/nonexistent/x.yaml", {});
  ASSERT_FALSE(config.is_ok());
  EXPECT_EQ(config.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      Contains(config.status().message(), "config file '/nonexistent/x.yaml' does not exist"));
}

// The loader serves commands where --config is optional (plan) and required
// (train, fulcrum-worker), so a file it cannot read gets advice every one of
// them can follow: leaving --config out is an error in fulcrum train.
TEST(ConfigTest, UnreadableFileAdviceHoldsForEveryCommand) {
  const std::string directory = std::filesystem::temp_directory_path().string();
  for (const std::string& path : {std::string("/nonexistent/x.yaml"), directory}) {
    auto config = train::load_job_config(path, {});
    ASSERT_FALSE(config.is_ok()) << path;
    const std::string message = config.status().message();
    EXPECT_TRUE(Contains(message, "config file '" + path + "'")) << message;
    EXPECT_TRUE(Contains(message, "; check the path and give a YAML file")) << message;
    EXPECT_TRUE(Lacks(message, "leave out --config")) << message;
  }
}

TEST(ConfigTest, LoadsFromAFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("fulcrum_config_test_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << "parallel:\n  cp_size: 2\n";
  }
  auto config = train::load_job_config(path.string(), {"parallel.dp_size=4"});
  std::filesystem::remove(path);
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  EXPECT_EQ(config->get_int("parallel.cp_size"), 2);
  EXPECT_EQ(config->origin("parallel.cp_size"), path.string() + ":2:12");
  EXPECT_EQ(config->get_int("parallel.dp_size"), 4);
}

TEST(ConfigTest, AccessorMisuseIsALogicError) {
  const Config config = load_ok("");
  EXPECT_THROW(config.get_int("parallel.nope"), std::logic_error);
  EXPECT_THROW(config.get_string("parallel.cp_size"), std::logic_error);
}

TEST(CostModelTest, ParsesAndPrints) {
  auto tokens = parse_cost_model("tokens");
  ASSERT_TRUE(tokens.is_ok());
  EXPECT_EQ(tokens->kind, CostKind::kTokens);
  auto attention = parse_cost_model("attention");
  ASSERT_TRUE(attention.is_ok());
  EXPECT_EQ(attention->kind, CostKind::kAttention);
  EXPECT_DOUBLE_EQ(attention->a, kDefaultAttentionA);
  auto custom = parse_cost_model("attention:0");
  ASSERT_TRUE(custom.is_ok());
  EXPECT_DOUBLE_EQ(custom->a, 0.0);
  EXPECT_EQ(cost_model_to_string(*custom), "attention:0");
  EXPECT_EQ(cost_model_to_string(*attention), "attention:24576");
  for (const char* bad : {"", "attention:", "attention:-1", "attention:x", "attention:1e999",
                          "Tokens", "attention:nan"}) {
    EXPECT_FALSE(parse_cost_model(bad).is_ok()) << bad;
  }
}

}  // namespace
}  // namespace fulcrum::host
