// fulcrum dp-partition: split a global batch's samples across K data-parallel
// ranks with the loaded balancer's partition_dp, the same call the data
// loader makes, and report each rank's samples and cost.

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "fulcrum/dp_types.h"
#include "work_bounds.h"

namespace fulcrum::cli {
namespace {

namespace po = boost::program_options;
using Json = nlohmann::ordered_json;

constexpr const char* kUsage =
    "Usage: fulcrum dp-partition --dp K --strategy NAME [--equal-count]\n"
    "                            [--cost tokens|attention[:A]]\n"
    "                            (--lengths a,b,c | --lengths-file F.json) [--format table|json]\n"
    "                            [--config FILE.yaml] [--set KEY=VALUE ...] [--plugin "
    "NAME_OR_PATH]\n"
    "\n"
    "Splits samples of the given lengths across K data-parallel ranks and reports\n"
    "each rank's samples (indices into the list) and cost, the imbalance (max /\n"
    "mean cost) and a lower bound on the best possible max cost.\n"
    "Work estimated past 4 s or 1.5 GB is refused before it starts: with auto or\n"
    "karmarkar_karp about 2 x 10^8 samples x ranks and 3.5 x 10^5 samples past\n"
    "1024 ranks; with lpt or round_robin about 2 x 10^6 samples\n"
    "(docs/RELIABILITY.md, \"Bounded before it starts\").\n";

// Sample indices shown per rank in the table; JSON always has all of them.
constexpr std::size_t kIndicesShown = 24;

struct DpFlags {
  std::string dp;
  std::string strategy;
  std::string cost;
  std::string lengths;
  std::string lengths_file;
  std::string format = "table";
  bool equal_count = false;
  bool help = false;
  CommonOptions common;
};

po::options_description dp_options(DpFlags& f) {
  po::options_description options("Options");
  options.add_options()  //
      ("dp", po::value(&f.dp)->value_name("K"),
       "data-parallel ranks (default: parallel.dp_size)")  //
      ("strategy", po::value(&f.strategy)->value_name("NAME"),
       "DP strategy, one the balancer lists (default: balancer.dp.strategy)")  //
      ("equal-count", po::bool_switch(&f.equal_count),
       "every rank gets floor(n/K) or ceil(n/K) samples (default: balancer.dp.equal_count)")  //
      ("cost", po::value(&f.cost)->value_name("MODEL"),
       "tokens, attention (a*L + L^2, a = 24576) or attention:A (default: balancer.dp.cost)")  //
      ("lengths", po::value(&f.lengths)->value_name("a,b,c"), "sample lengths")                //
      ("lengths-file", po::value(&f.lengths_file)->value_name("F.json"),
       "sample lengths as a JSON list in F.json")  //
      ("format", po::value(&f.format)->value_name("table|json"),
       "output format (default: table)")  //
      ("help,h", po::bool_switch(&f.help), "show this help");
  add_common_options(options, f.common);
  return options;
}

// The host checks every CP plan; nothing checks a DP partition before it
// decides which samples each rank trains on, so the CLI does.
void check_partition(const DpPartition& part, const DpRequest& request, const std::string& who) {
  const auto fail = [&who](const std::string& what) {
    throw std::runtime_error("balancer '" + who + "' returned an invalid partition: " + what);
  };
  const std::size_t k = static_cast<std::size_t>(request.num_ranks);
  if (part.ranks.size() != k) {
    fail(std::to_string(part.ranks.size()) + " ranks instead of " + std::to_string(k));
  }
  if (part.cost.size() != k) {
    fail(std::to_string(part.cost.size()) + " costs instead of " + std::to_string(k));
  }
  std::vector<int> seen(request.lengths.size(), 0);
  for (const auto& rank : part.ranks) {
    for (std::int64_t index : rank) {
      if (index < 0 || static_cast<std::size_t>(index) >= seen.size()) {
        fail("sample index " + std::to_string(index) + " is out of range");
      }
      if (seen[static_cast<std::size_t>(index)]++ != 0) {
        fail("sample " + std::to_string(index) + " is given to two ranks");
      }
    }
  }
  const auto missing = std::find(seen.begin(), seen.end(), 0);
  if (missing != seen.end()) {
    fail("sample " + std::to_string(missing - seen.begin()) + " is given to no rank");
  }
}

// The partition as JSON: each rank's samples and cost, the imbalance and
// the lower bound.
void print_json(const DpPartition& part, const DpRequest& request) {
  Json out;
  out["strategy"] = part.strategy;
  out["cost"] = host::cost_model_to_string(request.cost);
  Json ranks = Json::array();
  for (std::size_t r = 0; r < part.ranks.size(); ++r) {
    ranks.push_back({{"rank", r}, {"samples", part.ranks[r]}, {"cost", part.cost[r]}});
  }
  out["ranks"] = std::move(ranks);
  out["imbalance"] = part.imbalance;
  out["lower_bound"] = part.lower_bound;
  std::cout << out.dump(2) << "\n";
}

// The partition as a table, each rank's first indices shown.
void print_table(const DpPartition& part, const DpRequest& request, const std::string& strategy) {
  std::string text = "strategy     " + part.strategy;
  if (part.strategy != strategy) text += " (requested " + strategy + ")";
  text += "\ncost model   " + host::cost_model_to_string(request.cost);
  text += "\nsamples      " + std::to_string(request.lengths.size()) + " on " +
          std::to_string(request.num_ranks) + (request.num_ranks == 1 ? " rank" : " ranks") +
          (request.equal_count ? " (equal count)" : "") + "\n\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "samples", "tokens", "cost", "indices"});
  double max_cost = 0.0;
  for (std::size_t r = 0; r < part.ranks.size(); ++r) {
    std::int64_t tokens = 0;
    std::vector<std::string> shown;
    for (std::int64_t index : part.ranks[r]) {
      tokens += request.lengths[static_cast<std::size_t>(index)];
      if (shown.size() < kIndicesShown) shown.push_back(std::to_string(index));
    }
    std::string indices = join(shown, " ");
    if (part.ranks[r].size() > kIndicesShown) {
      indices += " ... (" + std::to_string(part.ranks[r].size() - kIndicesShown) + " more)";
    }
    max_cost = std::max(max_cost, part.cost[r]);
    rows.push_back({std::to_string(r), std::to_string(part.ranks[r].size()), std::to_string(tokens),
                    number(part.cost[r]), indices});
  }
  text += render_table(rows);
  text += "\nimbalance    " + fixed(part.imbalance, 3) + "x (max / mean cost)";
  text += "\nlower bound  " + number(part.lower_bound);
  if (part.lower_bound > 0) {
    text += " (max cost is " + fixed(max_cost / part.lower_bound, 3) + "x the bound)";
  }
  std::cout << text << "\n";
}

int dp_main(const std::vector<std::string>& args) {
  DpFlags f;
  const po::options_description options = dp_options(f);
  const po::variables_map given = parse_command_line(args, options, "dp-partition");
  if (printed_help(f.help, kUsage, options)) return kExitOk;
  const host::Config config = load_config_or_throw(f.common);

  require_table_or_json(f.format);

  DpRequest request;
  request.num_ranks = rank_count(given, "dp", f.dp, config, "parallel.dp_size",
                                 "give the number of DP ranks, e.g. --dp 8");
  request.equal_count = f.equal_count || config.get_bool("balancer.dp.equal_count");
  const std::string cost_text =
      given.count("cost") ? f.cost : config.get_string("balancer.dp.cost");
  {
    auto cost = host::parse_cost_model(cost_text);
    if (!cost) throw UsageError("--cost: " + cost.status().message());
    request.cost = *cost;
  }

  const int sources = static_cast<int>(given.count("lengths") + given.count("lengths-file"));
  if (sources != 1) {
    throw UsageError(std::string(sources == 0 ? "no samples given" : "samples given twice") +
                     "; give exactly one of --lengths a,b,c or --lengths-file F.json");
  }
  request.lengths = given.count("lengths") ? parse_length_list(f.lengths, "--lengths")
                                           : read_length_file(f.lengths_file, "--lengths-file");

  std::string strategy =
      given.count("strategy") ? f.strategy : config.get_string("balancer.dp.strategy");
  const host::LogFn log = deduplicating_log();
  const LoadedBalancer loaded = load_balancer(f.common, config, log);
  const std::vector<std::string> strategies = loaded.balancer->dp_strategies();
  if (!contains(strategies, strategy)) {
    if (!loaded.is_builtin) {
      const std::string from =
          given.count("strategy")
              ? ""
              : " (balancer.dp.strategy, " + config.source("balancer.dp.strategy") + ")";
      throw UsageError("unknown DP strategy " + quote_text(strategy) + from + "; balancer '" +
                       loaded.balancer->name() + "' offers " + join(strategies, ", "));
    }
    // The built-in balancer: what it has stands in for what was asked, as
    // the CP selector does; "auto" with no plugin simply means that.
    if (strategy != "auto") {
      log(host::LogLevel::kWarning, "DP strategy " + quote_text(strategy) +
                                        " needs the fulcrum plugin, which is not loaded; using " +
                                        strategies.front());
    }
    strategy = strategies.front();
  }

  refuse_beyond_bounds("dp-partition", estimate_dp_partition(request, strategy),
                       "give fewer samples or ranks, or --strategy lpt, which needs no "
                       "per-rank work per sample");
  Result<DpPartition> result = loaded.balancer->partition_dp(strategy, request);
  if (!result) {
    const StatusCode code = result.status().code();
    // A plugin that broke the ABI's contract is a bad plugin setting, named.
    if (code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
        code == StatusCode::kPluginFault) {
      throw UsageError(result.status().message());
    }
    throw std::runtime_error("DP strategy " + quote_text(strategy) +
                             " failed: " + result.status().message());
  }
  DpPartition part = std::move(result).value();
  if (part.strategy.empty()) part.strategy = strategy;
  check_partition(part, request, loaded.balancer->name());

  if (f.format == "json") {
    print_json(part, request);
    return kExitOk;
  }

  print_table(part, request, strategy);
  return kExitOk;
}

}  // namespace

int run_dp_partition(const std::vector<std::string>& args) {
  return run_command("dp-partition", [&args] { return dp_main(args); });
}

}  // namespace fulcrum::cli
