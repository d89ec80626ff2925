// fulcrum schedule: place one global batch of documents on a world of W
// ranks with the loaded balancer's scheduler (hybrid placement, the
// placement hook) and report the slots, each rank's predicted busy and idle
// time, the predicted step time against its lower bound, and the bytes moved
// against an all-gather of the same rows; or compare every scheduler.
//
// The schedule comes through the host exactly as a training job would get
// it: validated, and from the host's own fixed scheduler (said so) when the
// balancer has none. The figures are the core's cost model
// (evaluate_schedule), never the plugin's own claims.

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
#include "fulcrum/core/compact_schedule.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/cost_profile_file.h"
#include "train/job_schema.h"
#include "work_bounds.h"

namespace fulcrum::cli {
namespace {

namespace po = boost::program_options;
using Json = nlohmann::ordered_json;

constexpr const char* kUsage =
    "Usage: fulcrum schedule --world W --max-tokens-per-rank T\n"
    "                        (--lengths a,b,c | --lengths-file F.json)\n"
    "                        [--strategy hybrid|fixed|megatron_dcp] [--cp C]\n"
    "                        [--profile NAME|FILE.yaml] [--block-size B]\n"
    "                        [--mask causal|full|sliding:W|prefix:L] [--compare]\n"
    "                        [--format table|json]\n"
    "                        [--config FILE.yaml] [--set KEY=VALUE ...] [--plugin NAME_OR_PATH]\n"
    "\n"
    "Places one global batch of documents on W ranks that each hold at most T\n"
    "tokens in a slot, and reports the slots (rank group, documents, wave), each\n"
    "rank's predicted busy and idle time, the predicted step time against a\n"
    "lower bound, and the K/V bytes moved against an all-gather of the same rows.\n"
    "A balancer without a scheduler gets the host's fixed one and the output says\n"
    "so. --compare runs every scheduler on the same batch.\n"
    "Work estimated past 4 s or 1.5 GB is refused before it starts: about 8 x 10^6\n"
    "tokens, min(W, tokens) up to about 13,000, documents x max(W, 512) up to\n"
    "2 x 10^7, and for hybrid the squared widths of the pieces that need more\n"
    "than one rank at T tokens each up to about 6 x 10^7 in all\n"
    "(docs/RELIABILITY.md, \"Bounded before it starts\").\n";

struct ScheduleFlags {
  std::string world;
  std::string max_tokens;
  std::string lengths;
  std::string lengths_file;
  std::string strategy;
  std::string cp;
  std::string profile;
  std::string block_size;
  std::string mask;
  std::string format = "table";
  bool compare = false;
  bool help = false;
  CommonOptions common;
};

po::options_description schedule_options(ScheduleFlags& f) {
  po::options_description options("Options");
  options.add_options()                                                                         //
      ("world", po::value(&f.world)->value_name("W"), "ranks in the world, the pool of slots")  //
      ("max-tokens-per-rank", po::value(&f.max_tokens)->value_name("T"),
       "most tokens one rank holds in a slot (its memory budget)")                      //
      ("lengths", po::value(&f.lengths)->value_name("a,b,c"), "the batch's documents")  //
      ("lengths-file", po::value(&f.lengths_file)->value_name("F.json"),
       "the batch's documents as a JSON list in F.json")  //
      ("strategy", po::value(&f.strategy)->value_name("NAME"),
       "scheduler, one the balancer lists (default: balancer.schedule.strategy, as train "
       "uses)")  //
      ("cp", po::value(&f.cp)->value_name("C"),
       "the fixed scheduler's CP group size, a divisor of W (default: the smallest whose rows "
       "hold the longest document); only with --strategy fixed or --compare")  //
      ("profile", po::value(&f.profile)->value_name("NAME|FILE"),
       "cost profile: a bundled name (h100_7b, h100_7b_fa3, h100_7b_nccl, cpu_gloo) or a YAML "
       "file of CostProfile's fields (default: balancer.schedule.profile, as train uses)")  //
      ("block-size", po::value(&f.block_size)->value_name("B"),
       "kernel tile edge in tokens (default: balancer.cp.block_size)")  //
      ("mask", po::value(&f.mask)->value_name("MASK"),
       "causal, full, sliding:W or prefix:L, within each document (default: balancer.cp.mask)")  //
      ("compare", po::bool_switch(&f.compare), "schedule with every scheduler of the balancer")  //
      ("format", po::value(&f.format)->value_name("table|json"),
       "output format (default: table)")  //
      ("help,h", po::bool_switch(&f.help), "show this help");
  add_common_options(options, f.common);
  return options;
}

struct Scheduled {
  std::string requested;
  std::string refused;  // in --compare: why this scheduler could not serve the batch
  Schedule schedule;
  ScheduleCost cost;
  double lower_bound = 0.0;
  double time_us = 0.0;
  int repeats = 1;
};

std::int64_t batch_tokens(const ScheduleRequest& request) {
  std::int64_t total = 0;
  for (std::int64_t length : request.doc_lengths) total += length;
  return total;
}

int repeats_for(const ScheduleRequest& request) {
  return repeat_count(batch_tokens(request), estimate_schedule(request, 1, 1, false).seconds);
}

Scheduled schedule_with(LoadBalancer& balancer, const std::string& requested,
                        const ScheduleRequest& request) {
  Scheduled out;
  out.requested = requested;
  out.repeats = repeats_for(request);
  // The caller's choices (a name, a --cp) that the scheduler cannot serve
  // are bad input like a malformed batch; so is a plugin that broke the
  // ABI's contract (the message names it).
  const auto refuse = [&](const Status& status) {
    const StatusCode code = status.code();
    if (code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
        code == StatusCode::kUnsupported || code == StatusCode::kPluginFault) {
      throw UsageError(status.message());
    }
    throw std::runtime_error("scheduling with " + quote_text(requested) +
                             " failed: " + status.message());
  };
  // The compact answer, as a training rank gets it (ABI 1.4); the report
  // prices every slot, so every slot is then expanded (untimed).
  ScheduleRequest compact = request;
  compact.compact = true;
  out.time_us = median_time_us(out.repeats, [&](int i) {
    Result<Schedule> schedule = balancer.schedule(requested, compact);
    if (!schedule) refuse(schedule.status());
    if (i == 0) out.schedule = std::move(schedule).value();
  });
  if (Status s = expand_slots_of_rank(request, out.schedule, -1, balancer); !s) refuse(s);
  out.cost = evaluate_schedule(request, out.schedule);
  out.lower_bound = step_time_lower_bound(request);
  return out;
}

double round_tenths(double value) { return std::round(value * 10.0) / 10.0; }

std::int32_t wave_count(const Schedule& s) {
  std::int32_t waves = 0;
  for (const ScheduleSlot& slot : s.slots) waves = std::max(waves, slot.wave + 1);
  return waves;
}

double ratio(double step, double bound) { return bound > 0 ? step / bound : 0.0; }

Json request_json(const ScheduleRequest& r, const std::string& balancer) {
  Json j;
  j["world"] = r.world_size;
  j["max_tokens_per_rank"] = r.max_tokens_per_rank;
  j["documents"] = r.doc_lengths.size();
  j["tokens"] = batch_tokens(r);
  j["mask"] = mask_to_string(r.mask);
  j["block_size"] = r.block_size;
  j["cp"] = r.cp_size == 0 ? Json(nullptr) : Json(r.cp_size);
  j["profile"] = r.profile.name;
  j["balancer"] = balancer;
  return j;
}

Json schedule_json(const Scheduled& s, const ScheduleRequest& request) {
  Json j;
  j["requested"] = s.requested;
  j["used"] = s.schedule.strategy_used;
  j["fallback_reason"] =
      s.schedule.fallback_reason.empty() ? Json(nullptr) : Json(s.schedule.fallback_reason);
  Json slots = Json::array();
  for (std::size_t i = 0; i < s.schedule.slots.size(); ++i) {
    const ScheduleSlot& slot = s.schedule.slots[i];
    const SlotCost& cost = s.cost.slots[i];
    Json js;
    js["slot"] = i;
    js["group"] = slot.ranks;
    js["wave"] = slot.wave;
    Json docs = Json::array();
    for (const DocPiece& piece : slot.pieces) {
      docs.push_back({{"doc", piece.doc}, {"offset", piece.offset}, {"length", piece.length}});
    }
    js["documents"] = std::move(docs);
    js["plan"] = slot.plan.strategy_used;
    js["start_seconds"] = cost.start_seconds;
    js["end_seconds"] = cost.end_seconds;
    Json members = Json::array();
    for (const SlotMemberCost& m : cost.members) {
      members.push_back({{"rank", m.rank},
                         {"tokens", m.tokens},
                         {"tiles", m.tiles},
                         {"partial_tiles", m.partial_tiles},
                         {"bytes_received", m.bytes_received},
                         {"bytes_sent", m.bytes_sent},
                         {"peers", m.peers},
                         {"compute_seconds", m.compute_seconds},
                         {"comm_seconds", m.comm_seconds}});
    }
    js["members"] = std::move(members);
    slots.push_back(std::move(js));
  }
  j["slots"] = std::move(slots);
  Json ranks = Json::array();
  for (std::int32_t r = 0; r < request.world_size; ++r) {
    const auto at = static_cast<std::size_t>(r);
    ranks.push_back({{"rank", r},
                     {"busy_seconds", s.cost.busy_seconds[at]},
                     {"idle_seconds", s.cost.idle_seconds[at]}});
  }
  j["ranks"] = std::move(ranks);
  j["waves"] = wave_count(s.schedule);
  j["step_seconds"] = s.cost.step_seconds;
  j["lower_bound_seconds"] = s.lower_bound;
  j["step_over_bound"] = ratio(s.cost.step_seconds, s.lower_bound);
  j["bytes_moved"] = s.cost.bytes_moved;
  j["allgather_bytes"] = s.cost.allgather_bytes;
  j["plan_time_us"] = round_tenths(s.time_us);
  return j;
}

std::string describe_request(const ScheduleRequest& r) {
  return std::to_string(batch_tokens(r)) + " tokens in " + std::to_string(r.doc_lengths.size()) +
         (r.doc_lengths.size() == 1 ? " document" : " documents") + " on " +
         std::to_string(r.world_size) + " ranks of T = " + std::to_string(r.max_tokens_per_rank) +
         ", mask " + mask_to_string(r.mask) + ", block " + std::to_string(r.block_size) +
         ", profile " + r.profile.name;
}

std::string ms(double seconds) { return fixed(seconds * 1e3, 3); }

// "0-3" for consecutive ranks, else a comma list: groups are usually runs.
std::string rank_list(const std::vector<std::int32_t>& ranks) {
  bool run = ranks.size() > 2;
  for (std::size_t i = 1; run && i < ranks.size(); ++i) run = ranks[i] == ranks[i - 1] + 1;
  if (run) return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string out;
  for (std::int32_t r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

// Document indices, "@offset" for a piece cut from a longer document.
std::string piece_list(const std::vector<DocPiece>& pieces) {
  constexpr std::size_t kShown = 8;
  std::string out;
  for (std::size_t i = 0; i < pieces.size() && i < kShown; ++i) {
    const DocPiece& p = pieces[i];
    if (!out.empty()) out += ' ';
    out += std::to_string(p.doc);
    if (p.offset != 0) out += "@" + std::to_string(p.offset);
  }
  if (pieces.size() > kShown) out += " +" + std::to_string(pieces.size() - kShown);
  return out;
}

std::string bytes_text(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fixed(b / 1e9, 2) + " GB";
  if (b >= 1e6) return fixed(b / 1e6, 2) + " MB";
  if (b >= 1e3) return fixed(b / 1e3, 2) + " kB";
  return std::to_string(bytes) + " B";
}

void print_single_table(const Scheduled& s, const ScheduleRequest& request) {
  std::string out;
  out += "scheduler    " + s.schedule.strategy_used;
  if (s.schedule.strategy_used != s.requested) out += " (requested " + s.requested + ")";
  out += "\nfallback     " +
         (s.schedule.fallback_reason.empty() ? "none" : s.schedule.fallback_reason);
  out += "\nbatch        " + describe_request(request);
  out += "\nslots        " + std::to_string(s.schedule.slots.size()) + " in " +
         std::to_string(wave_count(s.schedule)) + " waves\n\n";

  std::vector<std::vector<std::string>> rows;
  rows.push_back({"slot", "wave", "ranks", "g", "tokens", "documents", "start ms", "end ms"});
  for (std::size_t i = 0; i < s.schedule.slots.size(); ++i) {
    const ScheduleSlot& slot = s.schedule.slots[i];
    std::int64_t tokens = 0;
    for (const DocPiece& p : slot.pieces) tokens += p.length;
    rows.push_back({std::to_string(i), std::to_string(slot.wave), rank_list(slot.ranks),
                    std::to_string(slot.ranks.size()), std::to_string(tokens),
                    piece_list(slot.pieces), ms(s.cost.slots[i].start_seconds),
                    ms(s.cost.slots[i].end_seconds)});
  }
  out += render_table(rows) + "\n";

  rows.clear();
  rows.push_back({"rank", "busy ms", "idle ms"});
  for (std::int32_t r = 0; r < request.world_size; ++r) {
    const auto at = static_cast<std::size_t>(r);
    rows.push_back({std::to_string(r), ms(s.cost.busy_seconds[at]), ms(s.cost.idle_seconds[at])});
  }
  out += render_table(rows);
  out += "\nstep time    " + ms(s.cost.step_seconds) + " ms predicted, lower bound " +
         ms(s.lower_bound) + " ms (" + fixed(ratio(s.cost.step_seconds, s.lower_bound), 3) + "x)";
  out += "\nK/V moved    " + bytes_text(s.cost.bytes_moved) +
         " (an all-gather of the same rows: " + bytes_text(s.cost.allgather_bytes) + ")";
  out += "\nplan time    " + fixed(s.time_us, 1) + " us" +
         (s.repeats > 1 ? " (median of " + std::to_string(s.repeats) + ")" : std::string()) + "\n";
  std::cout << out;
}

void print_compare_table(const std::vector<Scheduled>& all, const ScheduleRequest& request) {
  std::string out = "batch: " + describe_request(request) + "\n\n";
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"scheduler", "used", "note", "slots", "waves", "step ms", "bound ms",
                  "step/bound", "max idle ms", "K/V moved", "all-gather", "plan us"});
  std::vector<std::string> notes;
  for (const Scheduled& s : all) {
    if (!s.refused.empty()) {
      const std::string mark = "[" + std::to_string(notes.size() + 1) + "]";
      notes.push_back(mark + " " + s.requested + " refused: " + s.refused);
      rows.push_back({s.requested, "-", mark, "-", "-", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    std::string fallback = "-";
    if (!s.schedule.fallback_reason.empty()) {
      fallback = "[" + std::to_string(notes.size() + 1) + "]";
      notes.push_back(fallback + " " + s.requested + ": " + s.schedule.fallback_reason);
    }
    const double max_idle =
        s.cost.idle_seconds.empty()
            ? 0.0
            : *std::max_element(s.cost.idle_seconds.begin(), s.cost.idle_seconds.end());
    rows.push_back(
        {s.requested, s.schedule.strategy_used, fallback, std::to_string(s.schedule.slots.size()),
         std::to_string(wave_count(s.schedule)), ms(s.cost.step_seconds), ms(s.lower_bound),
         fixed(ratio(s.cost.step_seconds, s.lower_bound), 3), ms(max_idle),
         bytes_text(s.cost.bytes_moved), bytes_text(s.cost.allgather_bytes), fixed(s.time_us, 1)});
  }
  out += render_table(rows);
  if (!notes.empty()) out += "\nnotes:\n";
  for (const auto& note : notes) out += "  " + note + "\n";
  out +=
      "\nstep = the last rank's predicted finish; bound = no schedule of this batch is faster; "
      "K/V moved against an all-gather of the same rows\n";
  std::cout << out;
}

// --compare's output.
void print_compare(const std::vector<Scheduled>& all, const ScheduleRequest& request,
                   const ScheduleFlags& f, const std::string& balancer) {
  if (f.format == "json") {
    Json out;
    out["request"] = request_json(request, balancer);
    Json list = Json::array();
    for (const Scheduled& s : all) {
      list.push_back(s.refused.empty() ? schedule_json(s, request)
                                       : Json{{"requested", s.requested}, {"refused", s.refused}});
    }
    out["schedulers"] = std::move(list);
    std::cout << out.dump(2) << "\n";
  } else {
    print_compare_table(all, request);
  }
}

// The batch and the world the flags describe, with the block size, mask and
// cost profile of the flags or the configuration.
ScheduleRequest request_from_flags(const ScheduleFlags& f, const po::variables_map& given,
                                   const host::Config& config) {
  ScheduleRequest request;
  if (!given.count("world")) {
    throw UsageError("--world is missing; give the number of ranks, e.g. --world 8");
  }
  request.world_size = static_cast<std::int32_t>(
      parse_int(f.world, "--world", 1, kMaxRanks, "give the number of ranks, e.g. --world 8"));
  if (!given.count("max-tokens-per-rank")) {
    throw UsageError(
        "--max-tokens-per-rank is missing; give the tokens one rank holds in a slot, e.g. "
        "--max-tokens-per-rank 32768");
  }
  request.max_tokens_per_rank =
      parse_int(f.max_tokens, "--max-tokens-per-rank", 1, kMaxTokens,
                "give the tokens one rank holds in a slot, e.g. --max-tokens-per-rank 32768");
  const int sources = static_cast<int>(given.count("lengths") + given.count("lengths-file"));
  if (sources != 1) {
    throw UsageError(std::string(sources == 0 ? "no batch given" : "more than one batch given") +
                     "; give exactly one of --lengths a,b,c or --lengths-file F.json");
  }
  request.doc_lengths = given.count("lengths") ? parse_length_list(f.lengths, "--lengths")
                                               : read_length_file(f.lengths_file, "--lengths-file");
  if (given.count("cp")) {
    request.cp_size = static_cast<std::int32_t>(
        parse_int(f.cp, "--cp", 1, kMaxRanks, "give a divisor of --world, e.g. --cp 4"));
    if (request.world_size % request.cp_size != 0) {
      throw UsageError("--cp " + std::to_string(request.cp_size) + " does not divide --world " +
                       std::to_string(request.world_size) +
                       "; fixed CP groups tile the world, give a divisor of it");
    }
  }
  request.block_size =
      given.count("block-size")
          ? parse_int(f.block_size, "--block-size", 1, kMaxTokens, "give the tile edge, e.g. 128")
          : config.get_int("balancer.cp.block_size");
  {
    const std::string mask_text =
        given.count("mask") ? f.mask : config.get_string("balancer.cp.mask");
    auto mask = parse_mask(mask_text);
    if (!mask) throw UsageError("--mask: " + mask.status().message());
    request.mask = std::move(mask).value();
  }
  {
    // The profile and the scheduler default to the config's, so that this
    // command predicts the schedule `fulcrum train` would run.
    const bool flag = given.count("profile") != 0;
    auto profile = host::resolve_cost_profile(flag ? f.profile : train::schedule_profile(config));
    if (!profile) {
      throw UsageError((flag ? std::string("--profile")
                             : "balancer.schedule.profile (" +
                                   config.source("balancer.schedule.profile") + ")") +
                       ": " + profile.status().message());
    }
    request.profile = std::move(profile).value();
  }
  if (Status s = validate_schedule_request(request); !s) throw UsageError(s.message());
  return request;
}

// Refuses a --strategy the balancer's own schedulers do not include, and a
// --cp given to a scheduler that chooses its own groups.
void check_scheduler_name(const ScheduleFlags& f, const po::variables_map& given,
                          const host::Config& config, LoadBalancer& balancer,
                          const ScheduleRequest& request, const std::string& strategy) {
  const std::vector<std::string> schedulers = balancer.schedule_strategies();
  const std::string from =
      given.count("strategy")
          ? ""
          : " (balancer.schedule.strategy, " + config.source("balancer.schedule.strategy") + ")";
  // A balancer with its own schedulers knows every name it serves; with the
  // host's fixed scheduler standing in, any name is served by fixed and the
  // output says so, as a training job would see it.
  const bool own_schedulers = !(schedulers.size() == 1 && schedulers.front() == "fixed");
  if (!f.compare && own_schedulers && !contains(schedulers, strategy)) {
    throw UsageError("unknown scheduler " + quote_text(strategy) + from + "; balancer '" +
                     balancer.name() + "' offers " + join(schedulers, ", "));
  }
  // --cp is the fixed scheduler's group size; the others choose their groups
  // and would silently ignore it.
  if (!f.compare && own_schedulers && request.cp_size != 0 && strategy != "fixed") {
    throw UsageError("--cp " + std::to_string(request.cp_size) +
                     " sets the fixed scheduler's CP group size, but scheduler " +
                     quote_text(strategy) + from +
                     " chooses its own groups; drop --cp or use --strategy fixed");
  }
}

// --compare: every scheduler on the batch; one that cannot serve it (fixed
// with a --cp too small for its longest document) leaves a row saying why,
// not an error.
std::vector<Scheduled> compare_all(LoadBalancer& balancer,
                                   const std::vector<std::string>& schedulers,
                                   const ScheduleRequest& request) {
  std::vector<Scheduled> all;
  for (const std::string& name : schedulers) {
    try {
      all.push_back(schedule_with(balancer, name, request));
    } catch (const UsageError& refused) {
      Scheduled s;
      s.requested = name;
      s.refused = refused.what();
      all.push_back(std::move(s));
    }
  }
  return all;
}

int schedule_main(const std::vector<std::string>& args) {
  ScheduleFlags f;
  const po::options_description options = schedule_options(f);
  const po::variables_map given = parse_command_line(args, options, "schedule");
  if (printed_help(f.help, kUsage, options)) return kExitOk;
  const host::Config config = load_config_or_throw(f.common);
  require_table_or_json(f.format);

  const ScheduleRequest request = request_from_flags(f, given, config);

  const host::LogFn log = deduplicating_log();
  const LoadedBalancer loaded = load_balancer(f.common, config, log);
  LoadBalancer& balancer = *loaded.balancer;
  const std::vector<std::string> schedulers = balancer.schedule_strategies();
  const std::string strategy =
      given.count("strategy") ? f.strategy : config.get_string("balancer.schedule.strategy");
  check_scheduler_name(f, given, config, balancer, request, strategy);

  refuse_beyond_bounds(
      "schedule",
      estimate_schedule(
          request, f.compare ? static_cast<int>(schedulers.size()) : 1, repeats_for(request),
          f.compare ? std::find(schedulers.begin(), schedulers.end(), "hybrid") != schedulers.end()
                    : strategy == "hybrid"),
      std::string("schedule fewer tokens, documents or ranks at once") +
          (f.compare ? ", or one --strategy instead of --compare" : ""));

  if (!f.compare) {
    const Scheduled s = schedule_with(balancer, strategy, request);
    if (f.format == "json") {
      Json out;
      out["request"] = request_json(request, balancer.name());
      const Json body = schedule_json(s, request);
      for (const auto& [key, value] : body.items()) out[key] = value;
      std::cout << out.dump(2) << "\n";
    } else {
      print_single_table(s, request);
    }
    return kExitOk;
  }

  print_compare(compare_all(balancer, schedulers, request), request, f, balancer.name());
  return kExitOk;
}

}  // namespace

int run_schedule(const std::vector<std::string>& args) {
  return run_command("schedule", [&args] { return schedule_main(args); });
}

}  // namespace fulcrum::cli
