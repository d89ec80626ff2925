// YAML configuration, validated against a schema.
//
// Every key is "section.key" (nesting deeper is allowed: "balancer.cp.strategy").
// Loading checks the file against the schema: an unknown key is an error with
// file:line:column and the nearest known key ("did you mean cp_size?"), a wrong
// type or out-of-range value names the key, the value and what is allowed.
// Command-line overrides ("section.key=value") are checked the same way and
// win over the file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/dp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::host {

enum class ValueType { kInt, kDouble, kBool, kString };

// One "section.key=value" override and what set it, which messages name:
// `--set section.key=value` unless `source` says otherwise (a command's own
// flag for a key: "--compare-schedulers").
struct Override {
  Override(std::string set) : text(std::move(set)) {}  // NOLINT: a --set, implicitly
  Override(const char* set) : text(set) {}             // NOLINT
  Override(std::string set, std::string by) : text(std::move(set)), source(std::move(by)) {}
  std::string text;
  std::string source;  // "" = --set
};
// Every text as a --set.
std::vector<Override> set_overrides(const std::vector<std::string>& texts);
// A loader's message that does not yet say what to do, ended with it: an
// override's ("--set: ...", "--resume: ...") "; correct the --set value",
// else "; correct the config file". The CLI and the workers say the same.
std::string with_config_advice(std::string message);

struct KeySpec {
  std::string key;  // dotted path
  ValueType type = ValueType::kString;
  std::string default_value;  // as it would be written in YAML
  std::optional<double> min;  // inclusive, numbers only
  std::optional<double> max;
  bool min_exclusive = false;        // min is a strict bound: "a number > 0"
  std::vector<std::string> choices;  // strings only; empty = any
  // Extra check for strings: returns what is wrong, or nullopt when fine.
  using Check = std::function<std::optional<std::string>(const std::string&)>;
  Check check;
  std::string help;  // "what it is; what is allowed"
};

class ConfigSchema {
 public:
  void add(KeySpec spec);
  const KeySpec* find(const std::string& key) const;
  // The known key closest (edit distance on the whole dotted path and on the
  // last component) to an unknown one, or "" when nothing is close.
  std::string nearest(const std::string& key) const;
  const std::vector<KeySpec>& keys() const { return keys_; }

 private:
  std::vector<KeySpec> keys_;
};

// Builders that make one key of a schema's table one line. min and max are
// inclusive bounds (std::nullopt: none); `exclusive` makes min strict.
KeySpec int_key(std::string key, std::int64_t def, std::optional<double> min,
                std::optional<double> max, std::string help);
KeySpec double_key(std::string key, std::string def, std::optional<double> min, bool exclusive,
                   std::string help);
KeySpec bool_key(std::string key, bool def, std::string help);
KeySpec string_key(std::string key, std::string def, std::vector<std::string> choices,
                   KeySpec::Check check, std::string help);

class Config {
 public:
  // Accessors for keys of the schema; a key absent from file and overrides
  // yields its default. Asking for a key outside the schema, or with the wrong
  // type, is a programming error (std::logic_error).
  std::int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  // Where a key's value came from: "FILE:LINE:COL", "--set section.key=value",
  // the flag that set it ("--compare-schedulers"), or "default".
  std::string origin(const std::string& key) const;
  // The same as messages put it after the key and its value: "from
  // FILE:LINE:COL", "from --set section.key=value", "from --resume", or "the
  // default".
  std::string source(const std::string& key) const;
  // The file that set the key, or "" (an override, or the default).
  std::string origin_file(const std::string& key) const;
  // True when the file or an override set the key.
  bool is_set(const std::string& key) const;

  const ConfigSchema& schema() const { return *schema_; }

 private:
  friend Result<Config> load_config(const std::string&, const std::vector<Override>&,
                                    const ConfigSchema&);
  friend Result<Config> load_config_string(const std::string&, const std::string&,
                                           const std::vector<Override>&, const ConfigSchema&);
  struct Entry {
    std::string value;
    std::string origin;
    std::string file;  // the YAML file that set it, "" for an override
  };
  const KeySpec& spec(const std::string& key, ValueType type) const;
  const ConfigSchema* schema_ = nullptr;
  std::map<std::string, Entry> values_;
};

// Loads `path` (may be empty: defaults plus overrides) and applies overrides
// of the form "section.key=value". Errors are one line: kInvalidArgument for
// bad content, kNotFound for a missing file.
// The schema is the caller's: the trainer's job schema (train/job_schema.h),
// a cost profile's, a test's.
Result<Config> load_config(const std::string& path, const std::vector<Override>& overrides,
                           const ConfigSchema& schema);

// The same, from YAML text; `name` stands for the file in messages.
Result<Config> load_config_string(const std::string& yaml, const std::string& name,
                                  const std::vector<Override>& overrides,
                                  const ConfigSchema& schema);

// DP cost model as written in balancer.dp.cost and on the command line:
// "tokens", "attention" (a = kDefaultAttentionA) or "attention:A" with A in [0, 2^40].
Result<CostModel> parse_cost_model(std::string_view text);
std::string cost_model_to_string(const CostModel& cost);

}  // namespace fulcrum::host
