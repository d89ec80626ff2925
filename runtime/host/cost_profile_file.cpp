// Cost profile files (cost_profile_file.h). The YAML is read by the config
// loader against a schema of CostProfile's fields, so a profile gets the
// config's checks for free: file:line:column, duplicate keys, the nearest
// field for a misspelt one, strict and finite numbers. What a config allows
// and a profile must not (an empty file, a missing field, a file that is not
// a small regular file) is refused here first.
#include "fulcrum/host/cost_profile_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/host/config.h"
#include "input_file.h"
#include "yaml-cpp/yaml.h"

namespace fulcrum::host {
namespace {

struct Field {
  const char* key;
  double CostProfile::*member;
  const char* help;
  bool positive;  // > 0, not only >= 0: a divisor or a size
};

const Field kDoubleFields[] = {
    {"tile_seconds", &CostProfile::tile_seconds,
     "seconds for one (query block, key block) tile, forward and backward; a number >= 0", false},
    {"token_seconds", &CostProfile::token_seconds,
     "seconds per token for everything linear in a rank's tokens; a number >= 0", false},
    {"slot_seconds", &CostProfile::slot_seconds,
     "fixed seconds to run one slot (launches, synchronisation); a number >= 0", false},
    {"kv_bytes_per_token", &CostProfile::kv_bytes_per_token,
     "bytes of K and V of one token over all layers; a number > 0", true},
    {"intra_node_bytes_per_second", &CostProfile::intra_node_bytes_per_second,
     "bandwidth between ranks of one node, bytes per second; a number > 0", true},
    {"inter_node_bytes_per_second", &CostProfile::inter_node_bytes_per_second,
     "bandwidth between nodes, bytes per second; a number > 0", true},
    {"latency_seconds", &CostProfile::latency_seconds,
     "seconds per peer a member exchanges with; a number >= 0", false},
    {"exchange_overlap", &CostProfile::exchange_overlap,
     "share of min(compute, exchange) a member's exchange hides behind its compute, in [0, 1]; "
     "optional, 0 when absent",
     false},
    {"row_token_seconds", &CostProfile::row_token_seconds,
     "seconds per token of a slot's whole row that every member of the slot pays; a number >= 0; "
     "optional, 0 when absent",
     false},
    {"partial_tile_seconds", &CostProfile::partial_tile_seconds,
     "seconds per partial tile (some pair masked or a row padded) on top of tile_seconds; a number "
     ">= 0; optional, 0 when absent",
     false},
};

// Keys a profile may leave out (default 0): later terms, so that older files
// keep their meaning.
bool optional_key(const std::string& key) {
  return key == "exchange_overlap" || key == "row_token_seconds" || key == "partial_tile_seconds";
}

const ConfigSchema& profile_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s;
    // Built by aggregate initialisation: GCC 12 misreads assignments of
    // string literals to these members as overlapping copies (-Wrestrict).
    s.add(KeySpec{std::string("name"),
                  ValueType::kString,
                  std::string(),
                  std::nullopt,
                  std::nullopt,
                  false,
                  {},
                  {},
                  std::string("the profile's name, shown in reports")});
    for (const Field& f : kDoubleFields) {
      s.add(KeySpec{std::string(f.key),
                    ValueType::kDouble,
                    std::string("0"),
                    0.0,
                    std::nullopt,
                    f.positive,
                    {},
                    {},
                    std::string(f.help)});
    }
    s.add(KeySpec{std::string("ranks_per_node"),
                  ValueType::kInt,
                  std::string("8"),
                  1.0,
                  static_cast<double>(std::numeric_limits<std::int32_t>::max()),
                  false,
                  {},
                  {},
                  std::string("ranks that share a node (r and s do iff r / n == s / n); an "
                              "integer >= 1")});
    return s;
  }();
  return schema;
}

std::string field_list() {
  std::string out;
  for (const KeySpec& spec : profile_schema().keys()) {
    if (!out.empty()) out += ", ";
    out += spec.key;
  }
  return out;
}

}  // namespace

Result<CostProfile> load_cost_profile_string(const std::string& yaml, const std::string& name) {
  const std::string file = quote_text(name, 200);
  // An empty file (or one of comments) is a config of defaults but no
  // profile: every coefficient would silently be 0.
  bool empty = true;
  try {
    const YAML::Node root = YAML::Load(yaml);
    empty = root.IsNull();
    if (!empty && !root.IsMap()) {
      return invalid_argument("cost profile " + file +
                              " must be one YAML mapping of CostProfile's fields (" + field_list() +
                              "); it holds something else");
    }
  } catch (const YAML::Exception&) {
    empty = false;  // the config loader below reports the syntax error with its place
  }
  if (empty) {
    return invalid_argument("cost profile " + file + " is empty; write one mapping setting " +
                            field_list());
  }
  Result<Config> loaded = load_config_string(yaml, name, {}, profile_schema());
  if (!loaded) {
    std::string message = "cost profile " + loaded.status().message();
    // A value out of range says what is allowed but not what to do.
    if (message.find("; ") == std::string::npos) message += "; fix that value in the file";
    return invalid_argument(message);
  }
  const Config& config = *loaded;
  for (const KeySpec& spec : profile_schema().keys()) {
    if (!config.is_set(spec.key) && !optional_key(spec.key)) {
      return invalid_argument("cost profile " + file + " does not set " + spec.key + " (" +
                              spec.help + "); a profile sets every one of " + field_list());
    }
  }
  CostProfile profile;
  profile.name = config.get_string("name");
  if (profile.name.empty()) {
    return invalid_argument("cost profile " + file + ": name (" + config.origin("name") +
                            ") is empty; give the profile a name");
  }
  for (const Field& f : kDoubleFields) profile.*f.member = config.get_double(f.key);
  profile.ranks_per_node = static_cast<std::int32_t>(config.get_int("ranks_per_node"));
  if (Status s = validate_cost_profile(profile); !s) {
    return invalid_argument("cost profile file " + file + ": " + s.message());
  }
  return profile;
}

Result<CostProfile> load_cost_profile_file(const std::string& path) {
  const std::string file = quote_text(path, 200);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return not_found("cost profile file " + file +
                       " not found; check the path, or name a bundled profile (" +
                       [] {
                         std::string names;
                         for (const std::string& n : builtin_cost_profile_names()) {
                           if (!names.empty()) names += ", ";
                           names += n;
                         }
                         return names;
                       }() +
                       ")");
    }
    return invalid_argument("cost profile file " + file + " cannot be read: " +
                            std::strerror(error) + "; check its path and permissions");
  }
  // A FIFO or a device would block or never end; a directory is a wrong path.
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument("cost profile file " + file +
                            " is not a regular file (a directory, device or pipe); give the path "
                            "of a YAML file");
  }
  if (static_cast<std::uint64_t>(st.st_size) > kMaxCostProfileFileBytes) {
    return invalid_argument("cost profile file " + file + " is " + std::to_string(st.st_size) +
                            " bytes, more than the " + std::to_string(kMaxCostProfileFileBytes) +
                            " a profile of nine fields could need; check the path");
  }
  // Opened and read by descriptor: a path swapped for a FIFO after the stat
  // above is refused instead of blocking, and a failed read is an error, not
  // an exception (host/input_file.h).
  const std::string what = "cost profile file " + file;
  Result<std::string> read =
      read_input_file(path, {what, "check the path", kMaxCostProfileFileBytes});
  if (!read) return invalid_argument(read.status().message());
  const std::string& text = read.value();
  if (text.find('\0') != std::string::npos) {
    return invalid_argument("cost profile file " + file +
                            " holds a NUL byte, so it is not YAML text; check the path");
  }
  return load_cost_profile_string(text, path);
}

Result<CostProfile> resolve_cost_profile(const std::string& name_or_path) {
  std::string names;
  for (const std::string& known : builtin_cost_profile_names()) {
    if (known == name_or_path) return builtin_cost_profile(name_or_path);
    if (!names.empty()) names += ", ";
    names += known;
  }
  // A bare word that names no file was meant as a bundled name.
  struct stat st {};
  const bool bare = name_or_path.find_first_of("/.") == std::string::npos;
  if (bare && stat(name_or_path.c_str(), &st) != 0) {
    return not_found("unknown cost profile " + quote_text(name_or_path) +
                     "; the bundled ones are " + names +
                     ", or give the path of a YAML profile file");
  }
  return load_cost_profile_file(name_or_path);
}

}  // namespace fulcrum::host
