#include "cli_common.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "fulcrum/host/open_balancer.h"
#include "fulcrum/host/plugin_loader.h"
#include "host/input_file.h"
#include "train/job_schema.h"

namespace fulcrum::cli {

namespace po = boost::program_options;

namespace {

void print_error(std::string_view command, std::string_view message) {
  // One write, so the line is never interleaved with other output.
  const std::string line = "fulcrum " + std::string(command) + ": " + one_line(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

std::string quote(std::string_view text) {
  std::string shown(text.substr(0, 60));
  if (text.size() > 60) shown += "...";
  // Appending (not "'" + string) also sidesteps a GCC 12 -Wrestrict false
  // positive on prepending a literal to a temporary.
  std::string out = "'";
  out += one_line(shown);
  out += "'";
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

constexpr std::string_view kLengthListHint =
    "give comma-separated positive integers, e.g. 4096,812,77";
// A lengths list is flat; a little nesting is let through to be refused by
// the element checks, with their clearer message.
constexpr int kMaxLengthFileDepth = 64;
// 32 MiB of text is up to 16 million lengths, past what any command accepts
// (work_bounds.h); its parsed JSON takes about 16 bytes a number.
constexpr std::uint64_t kMaxLengthFileBytes = 32u << 20;
constexpr std::string_view kLengthFileHint =
    "give a file holding a JSON list of positive integers, e.g. [4096, 812, 77]";

}  // namespace

int run_command(std::string_view command, const std::function<int()>& body) noexcept {
  try {
    return body();
  } catch (const UsageError& e) {
    print_error(command, e.what());
    return kExitUsage;
  } catch (const Interrupted& e) {
    print_error(command, e.what());
    return 128 + e.signal();
  } catch (const std::bad_alloc&) {
    print_error(command, "out of memory; try a shorter row or fewer ranks");
    return kExitInternal;
  } catch (const std::exception& e) {
    print_error(command, std::string("internal error: ") + e.what() + "; please report this");
    return kExitInternal;
  } catch (...) {
    print_error(command, "internal error: unknown exception; please report this");
    return kExitInternal;
  }
}

std::int64_t parse_int(std::string_view text, std::string_view option, std::int64_t min,
                       std::int64_t max, std::string_view hint) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min ||
      value > max) {
    std::string range =
        max == std::numeric_limits<std::int64_t>::max()
            ? "an integer >= " + std::to_string(min)
            : "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    throw UsageError(std::string(option) + " must be " + range + ", got " + quote(text) + "; " +
                     std::string(hint));
  }
  return value;
}

std::uint64_t parse_seed(std::string_view text, std::string_view option) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw UsageError(std::string(option) + " must be an integer from 0 to " +
                     std::to_string(std::numeric_limits<std::uint64_t>::max()) + ", got " +
                     quote(text) + "; give a seed, e.g. " + std::string(option) + " 1");
  }
  return value;
}

std::vector<std::int64_t> parse_length_list(std::string_view text, std::string_view option) {
  std::vector<std::int64_t> lengths;
  if (trim(text).empty()) {
    throw UsageError(std::string(option) + " is empty; " + std::string(kLengthListHint));
  }
  std::size_t index = 0;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value < 1) {
      throw UsageError(std::string(option) + ": item " + std::to_string(index + 1) + " is " +
                       (item.empty() ? std::string("empty") : quote(item)) +
                       ", not a positive integer; " + std::string(kLengthListHint));
    }
    lengths.push_back(value);
    ++index;
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return lengths;
}

std::vector<std::int64_t> read_length_file(const std::string& path, std::string_view option) {
  const std::string what = std::string(option) + " " + quote(path);
  auto read = host::read_input_file(path, {what, kLengthFileHint, kMaxLengthFileBytes});
  if (!read) throw UsageError(read.status().message());
  const std::string& text = read.value();
  if (const std::string wrong = host::json_text_refusal(text); !wrong.empty()) {
    throw UsageError(what + " " + wrong + "; " + std::string(kLengthFileHint));
  }
  if (std::size_t at = 0; !host::json_nesting_within(text, kMaxLengthFileDepth, at)) {
    throw UsageError(what + " nests lists or objects more than " +
                     std::to_string(kMaxLengthFileDepth) + " deep at byte " + std::to_string(at) +
                     "; " + std::string(kLengthFileHint));
  }

  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // what() reads "[json.exception.parse_error.101] parse error at line 1,
    // column 4: ..."; keep the part after the tag and add the byte offset.
    std::string reason = e.what();
    if (const auto tag = reason.find("] "); tag != std::string::npos) reason.erase(0, tag + 2);
    throw UsageError(what + " is not valid JSON at byte " + std::to_string(e.byte) + " (" + reason +
                     "); " + std::string(kLengthFileHint));
  } catch (const nlohmann::json::exception&) {
    // A number past a double's range (1E400) is out_of_range, not a parse error.
    throw UsageError(what + " holds a number out of range; " + std::string(kLengthFileHint));
  }
  if (!json.is_array()) {
    throw UsageError(what + " holds a JSON " + std::string(json.type_name()) + ", not a list; " +
                     std::string(kLengthFileHint));
  }
  if (json.empty()) {
    throw UsageError(what + " holds an empty list; " + std::string(kLengthFileHint));
  }
  std::vector<std::int64_t> lengths;
  lengths.reserve(json.size());
  for (std::size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& item = json[i];
    // Floats (even 3.0), booleans and integers past int64 are refused: a
    // length is a count of tokens, and a silently rounded one is a bug.
    bool ok = false;
    std::int64_t value = 0;
    if (item.is_number_unsigned()) {
      const auto u = item.get<std::uint64_t>();
      ok = u >= 1 && u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
      value = static_cast<std::int64_t>(u);
    } else if (item.is_number_integer()) {
      value = item.get<std::int64_t>();
      ok = value >= 1;
    }
    if (!ok) {
      throw UsageError(what + ": item " + std::to_string(i + 1) + " is " + quote(item.dump()) +
                       ", not a positive integer; " + std::string(kLengthFileHint));
    }
    lengths.push_back(value);
  }
  return lengths;
}

std::int64_t total_tokens(const std::vector<std::int64_t>& lengths, std::string_view option) {
  std::int64_t total = 0;
  for (std::int64_t length : lengths) {
    if (length > kMaxTokens - total) {
      throw UsageError(std::string(option) + " adds up to more than " + std::to_string(kMaxTokens) +
                       " tokens, the longest row fulcrum plans; give a shorter row");
    }
    total += length;
  }
  return total;
}

void add_common_options(po::options_description& options, CommonOptions& common) {
  options.add_options()                                                               //
      ("config", po::value(&common.config_path)->value_name("FILE.yaml"),             //
       "YAML config supplying defaults (explicit flags win)")                         //
      ("set", po::value(&common.overrides)->value_name("KEY=VALUE")->composing(),     //
       "override one config key, e.g. --set balancer.cp.block_size=64 (repeatable)")  //
      ("plugin",
       po::value(&common.plugin)
           ->value_name("NAME_OR_PATH")
           ->notifier([](const std::string& value) {
             // An empty value is an unset shell variable, not "the default".
             if (value.empty()) {
               throw UsageError(
                   "--plugin is empty; give a plugin name, a path to a .so file, or builtin");
             }
           }),
       "balancer plugin: a name searched in the plugin directories, a path to a .so, or "
       "'builtin' (default: balancer.plugin)");
}

bool printed_help(bool help, std::string_view usage, const po::options_description& options) {
  if (help) std::cout << usage << "\n" << options;
  return help;
}

po::variables_map parse_command_line(const std::vector<std::string>& args,
                                     const po::options_description& options,
                                     std::string_view command) {
  po::variables_map values;
  try {
    // No abbreviations: "--s" silently meaning "--strategy" today would mean
    // something else once another option starts with "s".
    const int style = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;
    // An empty positional description makes a stray word an error; without
    // it Boost drops such words silently.
    const po::positional_options_description no_positionals;
    po::store(po::command_line_parser(args)
                  .options(options)
                  .positional(no_positionals)
                  .style(style)
                  .run(),
              values);
    po::notify(values);
  } catch (const po::invalid_command_line_syntax& e) {
    // Boost says "the required argument for option '--config' is missing"
    // for a flag given without its value, which reads as if the flag itself
    // were required; say what fulcrum-worker says.
    if (e.kind() == po::invalid_syntax::missing_parameter) {
      throw UsageError(e.get_option_name() + " needs a value; run 'fulcrum " +
                       std::string(command) + " --help' to see the options");
    }
    throw UsageError(std::string(e.what()) + "; run 'fulcrum " + std::string(command) +
                     " --help' to see the options");
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "; run 'fulcrum " + std::string(command) +
                     " --help' to see the options");
  }
  return values;
}

host::Config load_config_or_throw(const CommonOptions& common) {
  std::vector<host::Override> overrides = host::set_overrides(common.overrides);
  overrides.insert(overrides.end(), common.flag_overrides.begin(), common.flag_overrides.end());
  auto config = train::load_job_config(common.config_path, overrides);
  if (!config) {
    // Config messages name the place, the key and what is allowed; the CLI's
    // convention also ends every error with what to do.
    throw UsageError(host::with_config_advice(config.status().message()));
  }
  return std::move(config).value();
}

LoadedBalancer load_balancer(const CommonOptions& common, const host::Config& config,
                             const host::LogFn& log) {
  const std::string name =
      common.plugin.empty() ? config.get_string("balancer.plugin") : common.plugin;
  const bool named = !common.plugin.empty() || config.is_set("balancer.plugin");
  Result<host::OpenedBalancer> opened =
      host::open_balancer(name, host::split_plugin_dirs(config.get_string("balancer.plugin_dirs")),
                          config.get_bool("balancer.check_permissions"), log,
                          named ? host::PluginChoice::kNamed : host::PluginChoice::kDefault);
  if (!opened) throw UsageError(one_line(opened.status().message()));
  host::OpenedBalancer& o = opened.value();
  if (!o.not_found.empty() && log) {
    log(host::LogLevel::kWarning, "could not load the default plugin '" + name +
                                      "': " + o.not_found +
                                      "; using the built-in balancer (contiguous sharding only)");
  }
  return {std::move(o.balancer), o.is_builtin, o.not_found};
}

host::LogFn deduplicating_log() {
  auto seen = std::make_shared<std::set<std::string>>();
  return [seen](host::LogLevel level, const std::string& message) {
    if (seen->insert(message).second) host::log_to_stderr(level, message);
  };
}

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string number(double value) {
  if (std::isfinite(value) && std::nearbyint(value) == value && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<long long>(value));
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.6g", value);
  return buffer;
}

std::string render_table(const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return "";
  std::size_t columns = 0;
  for (const auto& row : rows) columns = std::max(columns, row.size());
  std::vector<std::size_t> width(columns, 0);
  // A column is numeric when it holds at least one number and nothing but
  // numbers and "-" placeholders.
  std::vector<int> numbers(columns, 0);
  std::vector<bool> text(columns, false);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      const std::string& cell = rows[r][c];
      width[c] = std::max(width[c], cell.size());
      if (r == 0 || cell == "-") continue;
      double ignored = 0;
      const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), ignored);
      if (ec == std::errc() && end == cell.data() + cell.size()) {
        ++numbers[c];
      } else {
        text[c] = true;
      }
    }
  }
  std::vector<bool> numeric(columns);
  for (std::size_t c = 0; c < columns; ++c) numeric[c] = numbers[c] > 0 && !text[c];
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::string& cell = row[c];
      const std::string pad(width[c] - cell.size(), ' ');
      if (c != 0) line += "  ";
      // The last column is left ragged when it is text: no trailing blanks.
      const bool last = c + 1 == row.size();
      line += numeric[c] ? pad + cell : (last ? cell : cell + pad);
    }
    out += line + "\n";
  }
  return out;
}

void require_table_or_json(const std::string& format) {
  if (format != "table" && format != "json") {
    throw UsageError("--format must be table or json, got '" + one_line(format) +
                     "'; use --format json for machine-readable output");
  }
}

std::int32_t rank_count(const boost::program_options::variables_map& given, const std::string& flag,
                        const std::string& flag_value, const host::Config& config,
                        const std::string& key, const std::string& hint) {
  if (given.count(flag) != 0) {
    return static_cast<std::int32_t>(parse_int(flag_value, "--" + flag, 1, kMaxRanks, hint));
  }
  const std::int64_t n = config.get_int(key);
  if (n > kMaxRanks) {
    throw UsageError(key + " is " + std::to_string(n) + " (" + config.source(key) +
                     "), more than " + std::to_string(kMaxRanks) + " ranks; give a smaller --" +
                     flag);
  }
  return static_cast<std::int32_t>(n);
}

int repeat_count(std::int64_t tokens, double estimated_seconds) {
  return tokens < kRepeatBelowTokens && estimated_seconds < 0.05 ? kRepeats : 1;
}

double median_time_us(int repeats, const std::function<void(int)>& call) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call(i);
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  return n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace fulcrum::cli
