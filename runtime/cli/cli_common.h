// Pieces shared by the fulcrum subcommands: strict parsing of numbers and
// length lists, the --config/--set/--plugin options, loading the balancer,
// and the one-line error convention.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/core/text.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/config.h"
#include "fulcrum/host/log.h"
#include "fulcrum/load_balancer.h"

namespace fulcrum::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitUsage = 2;

// Largest row (and block size) the CLI plans: validate_workload's bound. A
// plan stores 8 bytes per position, so a row of 2^31 tokens already needs
// 16 GiB; anything longer is a typo, not a workload.
inline constexpr std::int64_t kMaxTokens = kMaxRowTokens;
static_assert(kMaxBlockSize == kMaxTokens, "--block-size is parsed with the row bound");
// Largest CP or DP group (validate_workload's and the DP check's bound); far
// beyond any real job, small enough that a plan's padding (up to P-1
// positions) stays cheap.
inline constexpr std::int64_t kMaxRanks = kMaxGroupSize;

// Bad input: printed as "fulcrum <command>: <message>" with exit code 2. The
// message says what is wrong and what to do. Thrown only inside the CLI and
// caught by run_command, so parsing code deep in a command can stop at the
// first problem without threading a Status through every helper.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user stopped the command (SIGINT or SIGTERM) while it ran workers:
// exit 128 + signal, the shell's convention, with one line saying what was
// left undone.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, const std::string& what) : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Runs a command body, turning every failure into one stderr line and an exit
// code: UsageError -> 2, Interrupted -> 128 + signal, anything else -> 1.
// Never throws.
int run_command(std::string_view command, const std::function<int()>& body) noexcept;

// One line: control characters (newlines from a parser's context, say)
// become spaces, so every error stays one line.
using host::one_line;

// Strict integer parsing: the whole text, decimal, no sign games, no
// overflow. Throws UsageError "OPTION must be an integer from MIN to MAX, got
// 'TEXT'; HINT".
std::int64_t parse_int(std::string_view text, std::string_view option, std::int64_t min,
                       std::int64_t max, std::string_view hint);
std::uint64_t parse_seed(std::string_view text, std::string_view option);

// "a,b,c" of positive integers (spaces around commas allowed).
std::vector<std::int64_t> parse_length_list(std::string_view text, std::string_view option);
// A file holding a JSON list of positive integers.
std::vector<std::int64_t> read_length_file(const std::string& path, std::string_view option);
// Sum of lengths, as a row length: at most kMaxTokens.
std::int64_t total_tokens(const std::vector<std::int64_t>& lengths, std::string_view option);

// The options every subcommand shares.
struct CommonOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set key=value
  std::string plugin;                  // --plugin, empty = from the config
  // A command's own flags for keys, applied after every --set and named in
  // messages by their flag (fulcrum train --resume).
  std::vector<host::Override> flag_overrides;
};
void add_common_options(boost::program_options::options_description& options,
                        CommonOptions& common);

// Parses argv-style arguments against `options`; a Boost error becomes a
// UsageError that points at --help.
boost::program_options::variables_map parse_command_line(
    const std::vector<std::string>& args,
    const boost::program_options::options_description& options, std::string_view command);

// With --help (`help`), prints `usage` and the options to stdout and says
// so: the command then ends with kExitOk.
bool printed_help(bool help, std::string_view usage,
                  const boost::program_options::options_description& options);

host::Config load_config_or_throw(const CommonOptions& common);

// Refuses a --format other than table or json.
void require_table_or_json(const std::string& format);

// A rank count: the flag's value when the flag was given, else the config
// key's; either way within [1, kMaxRanks]. `hint` says what to pass instead.
std::int32_t rank_count(const boost::program_options::variables_map& given, const std::string& flag,
                        const std::string& flag_value, const host::Config& config,
                        const std::string& key, const std::string& hint);

struct LoadedBalancer {
  std::shared_ptr<LoadBalancer> balancer;
  // The host's own balancer serves: chosen with "builtin", or because the
  // plugin could not be loaded (then `load_failure` says why).
  bool is_builtin = false;
  std::string load_failure;
};

// The plugin named by --plugin or balancer.plugin, searched in --plugin's own
// path, balancer.plugin_dirs and then host::default_search_dirs(). The one
// policy of plan, dp-partition and train: a plugin that is not found is a
// warning and the built-in balancer serves; one that is found but cannot be
// used throws UsageError.
LoadedBalancer load_balancer(const CommonOptions& common, const host::Config& config,
                             const host::LogFn& log);

// A log function that writes each distinct message once: planning repeats
// the same call for timing and should not repeat its warnings.
host::LogFn deduplicating_log();

// Inputs up to this many tokens are planned or scheduled several times and
// the median time reported: one run of a fast planner is mostly timer and
// cache noise.
inline constexpr std::int64_t kRepeatBelowTokens = 1'000'000;
inline constexpr int kRepeats = 5;

// How many times `plan` and `schedule` time a call on `tokens` tokens:
// kRepeats for small inputs, unless even one call (estimated at
// `estimated_seconds`) takes long enough to time on its own.
int repeat_count(std::int64_t tokens, double estimated_seconds);

// The median wall time, in microseconds, of `repeats` runs of `call` (given
// the run's index, 0 first).
double median_time_us(int repeats, const std::function<void(int)>& call);

// Whether `name` is one of `names` (a strategy or scheduler list).
bool contains(const std::vector<std::string>& names, const std::string& name);

// Numbers for tables: fixed decimals; integers and large values without
// exponent noise.
std::string fixed(double value, int decimals);
std::string number(double value);

// Column-aligned plain-text table; the first row is the header. Numeric
// columns (every cell but the header parses as a number or is "-") are
// right-aligned.
std::string render_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace fulcrum::cli
