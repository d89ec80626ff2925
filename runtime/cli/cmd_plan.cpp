// fulcrum plan: shard one row across P context-parallel ranks through the
// host (plugin + CpSelector, so fallbacks are recorded exactly as in a
// training step) and report each rank's work, or compare every strategy.

#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "fulcrum/core/synthetic.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/selection.h"
#include "work_bounds.h"

namespace fulcrum::cli {
namespace {

namespace po = boost::program_options;
using Json = nlohmann::ordered_json;  // keeps keys in the documented order

constexpr const char* kUsage =
    "Usage: fulcrum plan --cp P --strategy NAME\n"
    "                    (--seq-len N [--synthetic-docs SEED] | --lengths a,b,c |\n"
    "                     --lengths-file F.json)\n"
    "                    [--block-size B] [--mask causal|full|sliding:W|prefix:L]\n"
    "                    [--positions] [--compare] [--format table|json]\n"
    "                    [--config FILE.yaml] [--set KEY=VALUE ...] [--plugin NAME_OR_PATH]\n"
    "\n"
    "Shards one row of N tokens across P context-parallel ranks with a balancer\n"
    "strategy and reports each rank's work: attention pairs and kernel tiles.\n"
    "A strategy that cannot serve the row falls back (balancer.cp.fallback) and\n"
    "the output says why. --compare plans the row with every strategy.\n"
    "Work estimated past 4 s or 1.5 GB is refused before it starts: about 2^25\n"
    "tokens for one strategy, 2^22 with --compare, 2^18 ranks\n"
    "(docs/RELIABILITY.md, \"Bounded before it starts\").\n";

struct PlanFlags {
  std::string cp;
  std::string strategy;
  std::string block_size;
  std::string mask;
  std::string seq_len;
  std::string lengths;
  std::string lengths_file;
  std::string doc_lengths;  // --doc-lengths, the earlier name of --lengths
  std::string doc_lengths_file;
  std::string synthetic_docs;
  std::string format = "table";
  bool positions = false;
  bool compare = false;
  bool help = false;
  CommonOptions common;
};

po::options_description plan_options(PlanFlags& f) {
  po::options_description options("Options");
  options.add_options()  //
      ("cp", po::value(&f.cp)->value_name("P"),
       "context-parallel ranks (default: parallel.cp_size)")  //
      ("strategy", po::value(&f.strategy)->value_name("NAME"),
       "CP strategy, one the balancer lists (default: balancer.cp.strategy)")  //
      ("block-size", po::value(&f.block_size)->value_name("B"),
       "kernel tile edge in tokens (default: balancer.cp.block_size)")  //
      ("mask", po::value(&f.mask)->value_name("MASK"),
       "causal, full, sliding:W or prefix:L, within each document (default: balancer.cp.mask)")  //
      ("seq-len", po::value(&f.seq_len)->value_name("N"),
       "row of N tokens: one document, or packed synthetic documents with --synthetic-docs")  //
      ("synthetic-docs", po::value(&f.synthetic_docs)->value_name("SEED"),
       "fill the --seq-len row with seeded synthetic documents (a long-context mix)")  //
      ("lengths", po::value(&f.lengths)->value_name("a,b,c"),
       "row of packed documents with these lengths (as dp-partition and schedule take them)")  //
      ("lengths-file", po::value(&f.lengths_file)->value_name("F.json"),
       "row of packed documents whose lengths are a JSON list in F.json")  //
      ("doc-lengths", po::value(&f.doc_lengths)->value_name("a,b,c"),
       "the same as --lengths (its earlier name)")  //
      ("doc-lengths-file", po::value(&f.doc_lengths_file)->value_name("F.json"),
       "the same as --lengths-file (its earlier name)")                                       //
      ("positions", po::bool_switch(&f.positions), "also print each rank's token positions")  //
      ("compare", po::bool_switch(&f.compare), "plan with every strategy of the balancer")    //
      ("format", po::value(&f.format)->value_name("table|json"),
       "output format (default: table)")  //
      ("help,h", po::bool_switch(&f.help), "show this help");
  add_common_options(options, f.common);
  return options;
}

struct Planned {
  std::string requested;
  ShardPlan plan;
  WorkSummary summary;
  double time_us = 0.0;
  int repeats = 1;
};

int repeats_for(const CpWorkload& workload) {
  return repeat_count(workload.tokens, estimate_plan(workload, 1, 1, false).seconds);
}

Planned plan_with(const std::shared_ptr<LoadBalancer>& balancer, const std::string& requested,
                  const std::string& fallback, const CpWorkload& workload, const host::LogFn& log) {
  host::SelectorOptions options;
  options.preferred = requested;
  options.fallback = fallback;
  options.log = log;
  host::CpSelector selector(balancer, options);

  Planned out;
  out.requested = requested;
  out.repeats = repeats_for(workload);
  out.time_us = median_time_us(out.repeats, [&](int i) {
    Result<ShardPlan> plan = selector.plan(workload);
    if (!plan) {
      if (plan.status().code() == StatusCode::kInvalidArgument ||
          plan.status().code() == StatusCode::kPluginFault) {
        throw UsageError(plan.status().message());
      }
      throw std::runtime_error("planning with '" + requested +
                               "' failed: " + plan.status().message());
    }
    if (i == 0) out.plan = std::move(plan).value();
  });
  // The selector fills the work; recomputing keeps the figures right even if
  // a future selector does not.
  if (out.plan.work.size() != static_cast<std::size_t>(out.plan.cp_size)) {
    out.plan.work = compute_work(workload, out.plan);
  }
  out.summary = summarize(workload, out.plan.work);
  return out;
}

// Tenths of a microsecond; dividing (not multiplying by 0.1) keeps 1.2 as 1.2.
double round_tenths(double value) { return std::round(value * 10.0) / 10.0; }

Json plan_json(const Planned& p, const CpWorkload& workload, bool with_positions) {
  Json j;
  j["requested"] = p.requested;
  j["used"] = p.plan.strategy_used;
  j["fallback_reason"] =
      p.plan.fallback_reason.empty() ? Json(nullptr) : Json(p.plan.fallback_reason);
  j["cp"] = workload.cp_size;
  j["block_size"] = workload.block_size;
  j["tokens"] = workload.tokens;
  j["padding"] = p.plan.padding;
  Json ranks = Json::array();
  for (std::int32_t r = 0; r < p.plan.cp_size; ++r) {
    const RankWork& w = p.plan.work[static_cast<std::size_t>(r)];
    Json rank;
    rank["rank"] = r;
    rank["tokens"] = w.tokens;
    rank["pairs"] = w.pairs;
    rank["tiles"] = w.tiles;
    if (with_positions) {
      rank["positions"] = std::vector<std::int64_t>(p.plan.rank_begin(r), p.plan.rank_end(r));
    }
    ranks.push_back(std::move(rank));
  }
  j["ranks"] = std::move(ranks);
  j["imbalance"] = {{"pairs", p.summary.pairs_imbalance}, {"tiles", p.summary.tiles_imbalance}};
  j["tiles_over_ideal"] = p.summary.tiles_over_ideal;
  j["plan_time_us"] = round_tenths(p.time_us);
  return j;
}

std::string describe_workload(const CpWorkload& w) {
  const std::size_t docs = w.doc_lengths.empty() ? 1 : w.doc_lengths.size();
  return std::to_string(w.tokens) + " tokens in " + std::to_string(docs) +
         (docs == 1 ? " document" : " documents") + ", mask " + mask_to_string(w.mask) + ", cp " +
         std::to_string(w.cp_size) + ", block " + std::to_string(w.block_size);
}

// Positions as runs: "0-63 448-511 pad*3" reads far better than 131072
// numbers, and head-tail style plans are a handful of runs per rank.
std::string position_runs(const std::int64_t* begin, const std::int64_t* end) {
  std::string out;
  auto emit = [&out](const std::string& item) {
    if (!out.empty()) out += ' ';
    out += item;
  };
  for (const std::int64_t* it = begin; it != end;) {
    const std::int64_t* run = it + 1;
    if (*it == kPadPosition) {
      while (run != end && *run == kPadPosition) ++run;
      const auto count = run - it;
      emit(count == 1 ? std::string("pad") : "pad*" + std::to_string(count));
    } else {
      while (run != end && *run == *(run - 1) + 1) ++run;
      const auto last = *(run - 1);
      emit(run - it == 1 ? std::to_string(*it) : std::to_string(*it) + "-" + std::to_string(last));
    }
    it = run;
  }
  return out;
}

// A small plan also as the whole permutation, rank-major with ranks split by
// '|', the form plans are quoted in (head_tail at N=8, P=2: [0,1,6,7 | 2,3,4,5]).
constexpr std::size_t kMaxListedPositions = 64;

std::string rank_major_order(const ShardPlan& plan) {
  std::string out = "[";
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    if (r > 0) out += " | ";
    for (const std::int64_t* it = plan.rank_begin(r); it != plan.rank_end(r); ++it) {
      if (it != plan.rank_begin(r)) out += ',';
      out += *it == kPadPosition ? std::string("pad") : std::to_string(*it);
    }
  }
  return out + "]";
}

void print_single_table(const Planned& p, const CpWorkload& workload, bool with_positions) {
  std::string out;
  out += "strategy     " + p.plan.strategy_used;
  if (p.plan.strategy_used != p.requested) out += " (requested " + p.requested + ")";
  out += "\nfallback     " + (p.plan.fallback_reason.empty() ? "none" : p.plan.fallback_reason);
  out += "\nworkload     " + describe_workload(workload);
  out += "\npadding      " + std::to_string(p.plan.padding) + " tokens (" +
         std::to_string(p.plan.shard_len) + " positions per rank)\n\n";

  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "tokens", "pairs", "tiles"});
  if (with_positions) rows.front().push_back("positions");
  for (std::int32_t r = 0; r < p.plan.cp_size; ++r) {
    const RankWork& w = p.plan.work[static_cast<std::size_t>(r)];
    rows.push_back({std::to_string(r), std::to_string(w.tokens), std::to_string(w.pairs),
                    std::to_string(w.tiles)});
    if (with_positions)
      rows.back().push_back(position_runs(p.plan.rank_begin(r), p.plan.rank_end(r)));
  }
  out += render_table(rows);
  out += "\nimbalance    pairs " + fixed(p.summary.pairs_imbalance, 3) + "x, tiles " +
         fixed(p.summary.tiles_imbalance, 3) + "x (max / mean over ranks)";
  out += "\ntiles/ideal  " + fixed(p.summary.tiles_over_ideal, 3) +
         " (max rank tiles / (unsharded tiles / P))";
  out += "\nplan time    " + fixed(p.time_us, 1) + " us" +
         (p.repeats > 1 ? " (median of " + std::to_string(p.repeats) + ")" : std::string()) + "\n";
  if (with_positions && p.plan.positions.size() <= kMaxListedPositions)
    out += "order        " + rank_major_order(p.plan) + "\n";
  std::cout << out;
}

void print_compare_table(const std::vector<Planned>& all, const CpWorkload& workload) {
  std::string out = "workload: " + describe_workload(workload) + "\n\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"strategy", "used", "fallback", "padding", "pairs imb", "tiles imb",
                  "tiles/ideal", "plan us"});
  std::vector<std::string> notes;
  for (const Planned& p : all) {
    std::string fallback = "-";
    if (!p.plan.fallback_reason.empty()) {
      fallback = "[";
      fallback += std::to_string(notes.size() + 1);
      fallback += "]";
      notes.push_back(fallback + " " + p.requested + ": " + p.plan.fallback_reason);
    }
    rows.push_back({p.requested, p.plan.strategy_used, fallback, std::to_string(p.plan.padding),
                    fixed(p.summary.pairs_imbalance, 3), fixed(p.summary.tiles_imbalance, 3),
                    fixed(p.summary.tiles_over_ideal, 3), fixed(p.time_us, 1)});
  }
  out += render_table(rows);
  if (!notes.empty()) out += "\nfallbacks:\n";
  for (const auto& note : notes) out += "  " + note + "\n";
  out += "\nimb = max / mean over ranks; tiles/ideal = max rank tiles / (unsharded tiles / P)\n";
  std::cout << out;
}

// --compare's output: every strategy's plan of the one row.
void print_compare(const std::vector<Planned>& all, const CpWorkload& workload, const PlanFlags& f,
                   const std::string& balancer) {
  if (f.format == "json") {
    Json out;
    out["workload"] = {
        {"tokens", workload.tokens},
        {"documents", workload.doc_lengths.empty() ? 1 : workload.doc_lengths.size()},
        {"mask", mask_to_string(workload.mask)},
        {"cp", workload.cp_size},
        {"block_size", workload.block_size},
        {"balancer", balancer}};
    Json list = Json::array();
    for (const Planned& p : all) list.push_back(plan_json(p, workload, f.positions));
    out["strategies"] = std::move(list);
    std::cout << out.dump(2) << "\n";
  } else {
    print_compare_table(all, workload);
  }
}

// The row the flags describe: --seq-len (optionally filled with synthetic
// documents), --lengths or --lengths-file, over --cp ranks with the block
// size and mask of the flags or the configuration.
CpWorkload workload_from_flags(const PlanFlags& f, const po::variables_map& given,
                               const host::Config& config) {
  CpWorkload workload;
  workload.cp_size = rank_count(given, "cp", f.cp, config, "parallel.cp_size",
                                "give the number of CP ranks, e.g. --cp 8");
  workload.block_size =
      given.count("block-size")
          ? parse_int(f.block_size, "--block-size", 1, kMaxTokens, "give the tile edge, e.g. 128")
          : config.get_int("balancer.cp.block_size");
  const std::string mask_text =
      given.count("mask") ? f.mask : config.get_string("balancer.cp.mask");
  {
    auto mask = parse_mask(mask_text);
    if (!mask) {
      std::string message = "--mask: " + mask.status().message();
      if (message.find("; ") == std::string::npos) {
        message += "; give causal, full, sliding:W with W >= 1, or prefix:L with L >= 0";
      }
      throw UsageError(message);
    }
    workload.mask = std::move(mask).value();
  }

  // --lengths and --lengths-file, the names dp-partition and schedule use;
  // --doc-lengths and --doc-lengths-file are their earlier names here.
  const int row_sources = static_cast<int>(
      given.count("seq-len") + given.count("lengths") + given.count("lengths-file") +
      given.count("doc-lengths") + given.count("doc-lengths-file"));
  if (row_sources != 1) {
    throw UsageError(std::string(row_sources == 0 ? "no row given" : "more than one row given") +
                     "; give exactly one of --seq-len N, --lengths a,b,c or "
                     "--lengths-file F.json");
  }
  if (given.count("synthetic-docs") && !given.count("seq-len")) {
    throw UsageError(
        "--synthetic-docs needs --seq-len N, the row length to fill with synthetic documents; "
        "e.g. --seq-len 131072 --synthetic-docs 1");
  }
  if (given.count("seq-len")) {
    workload.tokens = parse_int(f.seq_len, "--seq-len", 1, kMaxTokens,
                                "give the row length in tokens, e.g. --seq-len 131072");
    if (given.count("synthetic-docs")) {
      workload.doc_lengths =
          synthetic_packed_row(workload.tokens, parse_seed(f.synthetic_docs, "--synthetic-docs"));
    }
  } else if (given.count("lengths") || given.count("doc-lengths")) {
    // Messages name the flag as it was given.
    const bool old = given.count("doc-lengths") != 0;
    const std::string flag = old ? "--doc-lengths" : "--lengths";
    workload.doc_lengths = parse_length_list(old ? f.doc_lengths : f.lengths, flag);
    workload.tokens = total_tokens(workload.doc_lengths, flag);
  } else {
    const bool old = given.count("doc-lengths-file") != 0;
    const std::string flag = old ? "--doc-lengths-file" : "--lengths-file";
    workload.doc_lengths = read_length_file(old ? f.doc_lengths_file : f.lengths_file, flag);
    workload.tokens = total_tokens(workload.doc_lengths, flag);
  }
  if (Status s = validate_workload(workload); !s) throw UsageError(s.message());
  return workload;
}

// Refuses a --strategy or balancer.cp.fallback the loaded plugin does not
// list.
void check_strategy_names(const PlanFlags& f, const po::variables_map& given,
                          const host::Config& config, const LoadedBalancer& loaded,
                          const std::string& strategy, const std::string& fallback) {
  const std::vector<std::string> strategies = loaded.balancer->cp_strategies();
  // With the plugin loaded, a name it does not list is a typo. With the
  // built-in balancer, the selector serves fulcrum names with contiguous
  // sharding and records why, as a training job would.
  if (loaded.is_builtin) return;
  const std::string known = join(strategies, ", ");
  if (!f.compare && !contains(strategies, strategy)) {
    const std::string from =
        given.count("strategy")
            ? ""
            : " (balancer.cp.strategy, " + config.source("balancer.cp.strategy") + ")";
    throw UsageError("unknown CP strategy " + quote_text(strategy) + from + "; balancer '" +
                     loaded.balancer->name() + "' offers " + known);
  }
  if (!contains(strategies, fallback)) {
    throw UsageError("balancer.cp.fallback is '" + one_line(fallback) + "' (" +
                     config.source("balancer.cp.fallback") + "), which balancer '" +
                     loaded.balancer->name() + "' does not offer; use one of " + known);
  }
}

int plan_main(const std::vector<std::string>& args) {
  PlanFlags f;
  const po::options_description options = plan_options(f);
  const po::variables_map given = parse_command_line(args, options, "plan");
  if (printed_help(f.help, kUsage, options)) return kExitOk;
  const host::Config config = load_config_or_throw(f.common);

  require_table_or_json(f.format);

  const CpWorkload workload = workload_from_flags(f, given, config);

  const std::string strategy =
      given.count("strategy") ? f.strategy : config.get_string("balancer.cp.strategy");
  const std::string fallback = config.get_string("balancer.cp.fallback");

  const host::LogFn log = deduplicating_log();
  const LoadedBalancer loaded = load_balancer(f.common, config, log);
  const std::vector<std::string> strategies = loaded.balancer->cp_strategies();
  check_strategy_names(f, given, config, loaded, strategy, fallback);

  const int planned_strategies = f.compare ? static_cast<int>(strategies.size()) : 1;
  refuse_beyond_bounds("plan",
                       estimate_plan(workload, planned_strategies, repeats_for(workload),
                                     f.positions && f.format == "json"),
                       std::string("give a shorter row, a larger --block-size or fewer ranks") +
                           (f.compare ? ", or one --strategy instead of --compare" : ""));

  if (!f.compare) {
    const Planned planned = plan_with(loaded.balancer, strategy, fallback, workload, log);
    if (f.format == "json") {
      std::cout << plan_json(planned, workload, f.positions).dump(2) << "\n";
    } else {
      print_single_table(planned, workload, f.positions);
    }
    return kExitOk;
  }

  std::vector<Planned> all;
  for (const std::string& name : strategies) {
    all.push_back(plan_with(loaded.balancer, name, fallback, workload, log));
  }
  print_compare(all, workload, f, loaded.balancer->name());
  return kExitOk;
}

}  // namespace

int run_plan(const std::vector<std::string>& args) {
  return run_command("plan", [&args] { return plan_main(args); });
}

}  // namespace fulcrum::cli
