// Loading YAML configuration against a ConfigSchema, and command-line
// overrides ("--set section.key=value").
//
// Every error is one line a user can act on: where (FILE:LINE:COL or --set),
// which key, the offending value and what is allowed. Values are checked once,
// at load time, and stored normalised, so the typed accessors cannot fail on
// user input; they only reject programming errors (a key outside the schema).

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "fulcrum/host/config.h"

#include "fulcrum/core/text.h"

#include "input_file.h"

namespace fulcrum::host {
namespace {

// Numbers in messages: integral bounds print as integers ("1", not "1.000000").
std::string number_text(double value) {
  if (std::nearbyint(value) == value && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<long long>(value));
  }
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(value);
}

// A value as quoted in a message: one line (control characters escaped),
// bounded length.
std::string quote_value(std::string_view value) { return quote_text(value); }

// Text shown unquoted in a message (a file name before ":LINE:COL", a
// yaml-cpp message that may carry a character of the input): escaped the same
// way, never cut.
std::string one_line(std::string_view text) {
  const std::string quoted = quote_text(text, text.size());
  return quoted.substr(1, quoted.size() - 2);
}

// What a key accepts, as in "parallel.cp_size must be <this>".
std::string describe(const KeySpec& spec) {
  switch (spec.type) {
    case ValueType::kInt:
    case ValueType::kDouble: {
      std::string what = spec.type == ValueType::kInt ? "an integer" : "a number";
      if (spec.min && spec.max) {
        return what + " in [" + number_text(*spec.min) + ", " + number_text(*spec.max) + "]";
      }
      if (spec.min) return what + (spec.min_exclusive ? " > " : " >= ") + number_text(*spec.min);
      if (spec.max) return what + " <= " + number_text(*spec.max);
      return what;
    }
    case ValueType::kBool:
      return "true or false";
    case ValueType::kString:
      if (!spec.choices.empty()) return "one of " + join(spec.choices, ", ");
      // The help text is "what it is; what is allowed".
      if (const auto semicolon = spec.help.find("; "); semicolon != std::string::npos) {
        return spec.help.substr(semicolon + 2);
      }
      return "a string";
  }
  return "a value";
}

std::optional<std::int64_t> parse_int(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_double(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<bool> parse_bool(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // YAML 1.2 spells booleans true/false; yes/no/on/off are YAML 1.1 spellings
  // people still write, and they are unambiguous here.
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

bool in_range(const KeySpec& spec, double value) {
  if (spec.min && (spec.min_exclusive ? value <= *spec.min : value < *spec.min)) return false;
  if (spec.max && value > *spec.max) return false;
  return true;
}

// Checks `raw` against `spec`; returns the normalised value or the message
// (without its location prefix).
Result<std::string> check_value(const KeySpec& spec, const std::string& raw) {
  const auto wrong = [&](const std::string& detail = "") -> Status {
    return invalid_argument(spec.key + " must be " + describe(spec) + ", got " + quote_value(raw) +
                            detail);
  };
  switch (spec.type) {
    case ValueType::kInt: {
      const auto value = parse_int(raw);
      if (!value || !in_range(spec, static_cast<double>(*value))) return wrong();
      return std::to_string(*value);
    }
    case ValueType::kDouble: {
      const auto value = parse_double(raw);
      if (!value || !in_range(spec, *value)) return wrong();
      return raw.front() == '+' ? raw.substr(1) : raw;
    }
    case ValueType::kBool: {
      const auto value = parse_bool(raw);
      if (!value) return wrong();
      return std::string(*value ? "true" : "false");
    }
    case ValueType::kString: {
      if (!spec.choices.empty() &&
          std::find(spec.choices.begin(), spec.choices.end(), raw) == spec.choices.end()) {
        return wrong();
      }
      if (spec.check) {
        if (auto problem = spec.check(raw)) {
          // When the schema says what is allowed, that is the clearer line;
          // otherwise the check's own "what is wrong" (without its "what to
          // do") is all there is to go on.
          if (spec.help.find("; ") != std::string::npos) return wrong();
          std::string detail = *problem;
          if (const auto cut = detail.find("; "); cut != std::string::npos) detail.resize(cut);
          return wrong(" (" + detail + ")");
        }
      }
      return raw;
    }
  }
  return wrong();
}

bool is_section(const ConfigSchema& schema, const std::string& path) {
  const std::string prefix = path + ".";
  return std::any_of(schema.keys().begin(), schema.keys().end(), [&](const KeySpec& s) {
    return s.key.compare(0, prefix.size(), prefix) == 0;
  });
}

// Direct children of a section ("" = the top level), in schema order.
std::vector<std::string> children(const ConfigSchema& schema, const std::string& section) {
  const std::string prefix = section.empty() ? "" : section + ".";
  std::vector<std::string> names;
  for (const auto& spec : schema.keys()) {
    if (spec.key.compare(0, prefix.size(), prefix) != 0) continue;
    std::string rest = spec.key.substr(prefix.size());
    rest = rest.substr(0, rest.find('.'));
    if (std::find(names.begin(), names.end(), rest) == names.end()) names.push_back(rest);
  }
  return names;
}

Status unknown_key(const std::string& where, const std::string& path, const ConfigSchema& schema) {
  std::string message = where + ": unknown key " + quote_value(path);
  const std::string suggestion = schema.nearest(path);
  if (!suggestion.empty()) {
    message += "; did you mean '" + suggestion + "'?";
  } else {
    const auto dot = path.rfind('.');
    const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
    const auto known = children(schema, is_section(schema, section) ? section : "");
    message += "; known keys " +
               std::string(section.empty() || !is_section(schema, section) ? "at the top level"
                                                                           : "of " + section) +
               ": " + join(known, ", ");
  }
  return invalid_argument(message);
}

const char* node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Null:
      return "an empty value";
    default:
      return "a scalar";
  }
}

// FILE:LINE:COL of a mark, or FILE when the mark is unknown.
std::string where(const std::string& file, const YAML::Mark& mark) {
  if (mark.line < 0 || mark.column < 0) return file;
  return file + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// Where each document of a stream starts, from the parser's events alone
// (no nodes are built).
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

struct DocumentCount {
  std::size_t count = 0;
  bool stuck = false;  // the parser stopped consuming input at `mark`
  YAML::Mark mark;     // where the second document starts, or where it stuck
};

// How many documents a stream holds. yaml-cpp 0.7 (Debian 12) cannot get
// past some malformed streams (a file holding just ","): its parser then
// reports one empty document after another, all starting at the same mark,
// and YAML::LoadAll collects them until memory runs out (jbeder/yaml-cpp#1040,
// fixed upstream after 0.8.0). Here a document that starts where the
// previous one did ends the count as `stuck`. Throws YAML::Exception on a
// syntax error, as YAML::Load would.
DocumentCount count_documents(const std::string& yaml) {
  std::istringstream stream(yaml);
  YAML::Parser parser(stream);
  DocumentStarts starts;
  DocumentCount result;
  // Every document that makes progress consumes at least one byte, so a
  // stream of n bytes holds at most n + 1 of them; the bound is a second
  // guard against a parser that loops.
  while (starts.marks.size() <= yaml.size() + 1 && parser.HandleNextDocument(starts)) {
    const auto& m = starts.marks;
    if (m.size() >= 2 && m[m.size() - 1].pos == m[m.size() - 2].pos) {
      result.count = m.size() - 1;
      result.stuck = true;
      result.mark = m.back();
      return result;
    }
  }
  result.count = starts.marks.size();
  if (result.count > yaml.size() + 1) {
    result.stuck = true;
    result.mark = starts.marks.back();
  } else if (result.count > 1) {
    result.mark = starts.marks[1];
  }
  return result;
}

struct Value {
  std::string value;
  std::string origin;
  std::string file;  // the YAML file that set it, "" for an override
};
using Values = std::map<std::string, Value>;

class YamlWalker {
 public:
  YamlWalker(const std::string& name, const std::string& text, const ConfigSchema& schema,
             Values& out)
      : name_(name), text_(text), schema_(schema), out_(out) {}

  Status walk_top(const YAML::Node& root) {
    if (root.IsNull()) return Status::ok();  // an empty file: all defaults
    if (!root.IsMap()) {
      return invalid_argument(where(root.Mark()) + ": the config must be a mapping of sections (" +
                              join(children(schema_, ""), ", ") + "), got " + node_kind(root));
    }
    return walk_map(root, "");
  }

 private:
  std::string where(const YAML::Mark& mark) const { return host::where(name_, mark); }

  // A null value node ("key:" with nothing after it) carries no mark, or the
  // mark of whatever follows it; point at its key then.
  std::string where(const YAML::Node& value, const YAML::Node& key) const {
    const YAML::Mark mark = value.Mark();
    return where(mark.line < 0 || value.IsNull() ? key.Mark() : mark);
  }

  Status walk_map(const YAML::Node& map, const std::string& prefix) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      if (!key.IsScalar()) {
        return invalid_argument(where(key.Mark()) + ": keys must be plain names, got " +
                                node_kind(key));
      }
      const std::string path = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
      const std::string here = where(key.Mark());
      if (auto [previous, fresh] = seen_.emplace(path, here); !fresh) {
        return invalid_argument(here + ": duplicate key " + quote_value(path) + " (first set at " +
                                previous->second + "); keep one of them");
      }
      if (const KeySpec* spec = schema_.find(path)) {
        if (Status s = take_leaf(*spec, key, value); !s) return s;
      } else if (is_section(schema_, path)) {
        if (value.IsNull()) continue;  // "data:" with nothing under it
        if (!value.IsMap()) {
          std::string got = node_kind(value);
          if (value.IsScalar()) got += " " + quote_value(value.Scalar());
          return invalid_argument(where(value, key) + ": " + path +
                                  " must be a mapping of its keys (" +
                                  join(children(schema_, path), ", ") + "), got " + got);
        }
        if (Status s = walk_map(value, path); !s) return s;
      } else {
        return unknown_key(here, path, schema_);
      }
    }
    return Status::ok();
  }

  // yaml-cpp ends a quoted scalar left open at the end of the file there,
  // as if it had been closed: a value cut short would be taken as it stands.
  bool quote_left_open(const YAML::Node& value) const {
    const YAML::Mark mark = value.Mark();
    if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return false;
    const char quote = text_[static_cast<std::size_t>(mark.pos)];
    if (quote != '"' && quote != '\'') return false;
    for (std::size_t i = static_cast<std::size_t>(mark.pos) + 1; i < text_.size(); ++i) {
      if (quote == '"' && text_[i] == '\\') {
        ++i;  // an escape: the next character is not the end
      } else if (text_[i] == quote) {
        // In single quotes '' is a quote inside the value.
        if (quote == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
          ++i;
          continue;
        }
        return false;
      }
    }
    return true;
  }

  Status take_leaf(const KeySpec& spec, const YAML::Node& key, const YAML::Node& value) {
    std::string raw;
    if (value.IsScalar() && value.Tag() == "!" && quote_left_open(value)) {
      return invalid_argument(where(value, key) + ": the quoted value of " + spec.key +
                              " is never closed; add the closing quote");
    }
    if (value.IsScalar()) {
      raw = value.Scalar();
    } else if (value.IsNull() && spec.type == ValueType::kString) {
      raw = "";  // "path:" reads naturally as an empty string
    } else {
      return invalid_argument(where(value, key) + ": " + spec.key + " must be " + describe(spec) +
                              ", got " + node_kind(value));
    }
    auto checked = check_value(spec, raw);
    if (!checked) return invalid_argument(where(value, key) + ": " + checked.status().message());
    out_[spec.key] = Value{std::move(checked).value(), where(value, key), name_};
    return Status::ok();
  }

  const std::string& name_;
  const std::string& text_;
  const ConfigSchema& schema_;
  Values& out_;
  std::map<std::string, std::string> seen_;  // path -> where it was set
};

// What set an override, as its errors begin: --set, or the command's flag.
Status apply_override(const Override& o, const ConfigSchema& schema, Values& out) {
  const std::string& text = o.text;
  const std::string origin_label = o.source.empty() ? "--set" : one_line(o.source);
  const auto equals = text.find('=');
  std::string key = equals == std::string::npos ? "" : text.substr(0, equals);
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.front()))) key.erase(0, 1);
  if (key.empty()) {
    return invalid_argument(origin_label + ": " + quote_value(text) +
                            " is not KEY=VALUE; write it like --set parallel.cp_size=4");
  }
  const std::string value = text.substr(equals + 1);
  const KeySpec* spec = schema.find(key);
  if (spec == nullptr) {
    if (is_section(schema, key)) {
      return invalid_argument(origin_label + ": '" + key +
                              "' is a section, not a key; set one of its keys (" +
                              join(children(schema, key), ", ") + "), e.g. --set " + key + "." +
                              children(schema, key).front() + "=...");
    }
    return unknown_key(origin_label, key, schema);
  }
  auto checked = check_value(*spec, value);
  if (!checked) return invalid_argument(origin_label + ": " + checked.status().message());
  const std::string origin =
      o.source.empty() ? "--set " + one_line(key + "=" + value) : origin_label;
  out[spec->key] = Value{std::move(checked).value(), origin, ""};
  return Status::ok();
}

}  // namespace

const KeySpec& Config::spec(const std::string& key, ValueType type) const {
  const KeySpec* found = schema_ != nullptr ? schema_->find(key) : nullptr;
  if (found == nullptr) {
    throw std::logic_error("config: key '" + key + "' is not in the schema");
  }
  if (found->type != type) {
    throw std::logic_error("config: key '" + key + "' read with the wrong type");
  }
  return *found;
}

namespace {
template <typename Map>
const std::string& stored_or_default(const Map& values, const KeySpec& spec) {
  const auto it = values.find(spec.key);
  return it == values.end() ? spec.default_value : it->second.value;
}
}  // namespace

std::int64_t Config::get_int(const std::string& key) const {
  const KeySpec& s = spec(key, ValueType::kInt);
  const auto value = parse_int(stored_or_default(values_, s));
  if (!value) throw std::logic_error("config: default of '" + key + "' is not an integer");
  return *value;
}

double Config::get_double(const std::string& key) const {
  const KeySpec& s = spec(key, ValueType::kDouble);
  const auto value = parse_double(stored_or_default(values_, s));
  if (!value) throw std::logic_error("config: default of '" + key + "' is not a number");
  return *value;
}

bool Config::get_bool(const std::string& key) const {
  const KeySpec& s = spec(key, ValueType::kBool);
  const auto value = parse_bool(stored_or_default(values_, s));
  if (!value) throw std::logic_error("config: default of '" + key + "' is not a boolean");
  return *value;
}

std::string Config::get_string(const std::string& key) const {
  return stored_or_default(values_, spec(key, ValueType::kString));
}

std::string Config::origin(const std::string& key) const {
  if (schema_ == nullptr || schema_->find(key) == nullptr) {
    throw std::logic_error("config: key '" + key + "' is not in the schema");
  }
  const auto it = values_.find(key);
  return it == values_.end() ? "default" : it->second.origin;
}

std::string Config::source(const std::string& key) const {
  return is_set(key) ? "from " + origin(key) : std::string("the default");
}

std::string Config::origin_file(const std::string& key) const {
  const auto it = is_set(key) ? values_.find(key) : values_.end();
  return it == values_.end() ? std::string() : it->second.file;
}

std::string with_config_advice(std::string message) {
  if (message.find("; ") != std::string::npos) return message;
  if (message.rfind("--", 0) == 0) {
    return message + "; correct the " + message.substr(0, message.find(':')) + " value";
  }
  return message + "; correct the config file";
}

std::vector<Override> set_overrides(const std::vector<std::string>& texts) {
  return {texts.begin(), texts.end()};
}

bool Config::is_set(const std::string& key) const {
  if (schema_ == nullptr || schema_->find(key) == nullptr) {
    throw std::logic_error("config: key '" + key + "' is not in the schema");
  }
  return values_.count(key) != 0;
}

Result<Config> load_config_string(const std::string& yaml, const std::string& name,
                                  const std::vector<Override>& overrides,
                                  const ConfigSchema& schema) {
  const std::string file = name.empty() ? "<config>" : one_line(name);
  Values values;
  try {
    // Never YAML::LoadAll on user text: see count_documents.
    const DocumentCount documents = count_documents(yaml);
    if (documents.stuck) {
      const std::size_t at = documents.mark.pos;
      const bool comma = at < yaml.size() && yaml[at] == ',';
      return invalid_argument(where(file, documents.mark) + ": malformed YAML: " +
                              (comma ? std::string("',' outside a flow collection ([...] or {...})")
                                     : std::string("a document that the parser cannot read past")) +
                              "; fix the syntax (indent with spaces, 'key: value')");
    }
    if (documents.count > 1) {
      return invalid_argument(where(file, documents.mark) + ": the file holds " +
                              std::to_string(documents.count) +
                              " YAML documents; keep one (remove the extra '---')");
    }
    if (documents.count == 1) {
      YamlWalker walker(file, yaml, schema, values);
      if (Status s = walker.walk_top(YAML::Load(yaml)); !s) return s;
    }
  } catch (const YAML::Exception& e) {
    // yaml-cpp's what() spans a "yaml-cpp: error at line..." prefix; rebuild
    // the line in our own FILE:LINE:COL form from its mark and bare message.
    return invalid_argument(where(file, e.mark) + ": malformed YAML: " + one_line(e.msg) +
                            "; fix the syntax (indent with spaces, 'key: value')");
  }
  for (const auto& text : overrides) {
    if (Status s = apply_override(text, schema, values); !s) return s;
  }
  Config config;
  config.schema_ = &schema;
  for (auto& [key, value] : values) {
    config.values_[key] =
        Config::Entry{std::move(value.value), std::move(value.origin), std::move(value.file)};
  }
  return config;
}

Result<Config> load_config(const std::string& path, const std::vector<Override>& overrides,
                           const ConfigSchema& schema) {
  if (path.empty()) return load_config_string("", "", overrides, schema);
  // A config is a page of YAML; anything this large is the wrong file.
  constexpr std::uint64_t kMaxConfigBytes = 16u << 20;
  const std::string what = "config file " + quote_text(path, path.size());
  // No "leave out --config" here: fulcrum train and fulcrum-worker require it.
  Result<std::string> text =
      read_input_file(path, {what, "check the path and give a YAML file", kMaxConfigBytes});
  if (!text) return text.status();
  if (const std::size_t nul = text.value().find('\0'); nul != std::string::npos) {
    return invalid_argument(what + " holds a NUL byte at byte " + std::to_string(nul) +
                            "; a config is YAML text: give a YAML file");
  }
  return load_config_string(text.value(), path, overrides, schema);
}

}  // namespace fulcrum::host
