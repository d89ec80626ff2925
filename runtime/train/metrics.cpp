#include "train/metrics.h"

#include "host/trusted_directory.h"
#include "train/fit_records.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace fulcrum::train {
namespace {

// ordered: "step" and "loss" lead each line, as a reader expects.
using json = nlohmann::ordered_json;

json pieces_json(const std::vector<std::array<std::int64_t, 4>>& pieces);

json to_json(const MicroBatchFigures& m) {
  const json pieces = pieces_json(m.pieces);
  return {{"dp", m.dp_rank},
          {"cp", m.cp_rank},
          {"mb", m.microbatch},
          {"n", m.row_tokens},
          {"s", m.strategies},
          {"f", m.fallback_reasons},
          {"p", m.pairs},
          {"t", m.tiles},
          {"cp_p", m.contiguous_pairs},
          {"cp_t", m.contiguous_tiles},
          {"ms", m.attention_ms},
          {"cms", m.attention_comm_ms},
          {"pieces", pieces}};
}

MicroBatchFigures from_json(const json& j) {
  MicroBatchFigures m;
  m.dp_rank = j.at("dp").get<int>();
  m.cp_rank = j.at("cp").get<int>();
  m.microbatch = j.at("mb").get<std::int64_t>();
  m.row_tokens = j.at("n").get<std::vector<std::int64_t>>();
  m.strategies = j.at("s").get<std::vector<std::string>>();
  m.fallback_reasons = j.at("f").get<std::vector<std::string>>();
  m.pairs = j.at("p").get<std::vector<std::int64_t>>();
  m.tiles = j.at("t").get<std::vector<std::int64_t>>();
  m.contiguous_pairs = j.at("cp_p").get<std::vector<std::int64_t>>();
  m.contiguous_tiles = j.at("cp_t").get<std::vector<std::int64_t>>();
  m.attention_ms = j.at("ms").get<double>();
  m.attention_comm_ms = j.at("cms").get<double>();
  for (const json& p : j.at("pieces")) {
    m.pieces.push_back({p.at(0).get<std::int64_t>(), p.at(1).get<std::int64_t>(),
                        p.at(2).get<std::int64_t>(), p.at(3).get<std::int64_t>()});
  }
  return m;
}

json pieces_json(const std::vector<std::array<std::int64_t, 4>>& pieces) {
  json out = json::array();
  for (const auto& p : pieces) out.push_back({p[0], p[1], p[2], p[3]});
  return out;
}

std::vector<std::array<std::int64_t, 4>> pieces_from_json(const json& j) {
  std::vector<std::array<std::int64_t, 4>> out;
  for (const json& p : j) {
    out.push_back({p.at(0).get<std::int64_t>(), p.at(1).get<std::int64_t>(),
                   p.at(2).get<std::int64_t>(), p.at(3).get<std::int64_t>()});
  }
  return out;
}

json to_json(const SlotFigures& s) {
  return {{"slot", s.slot},
          {"wave", s.wave},
          {"g", s.group},
          {"member", s.member},
          {"planned", s.planned_rank},
          {"tokens", s.tokens},
          {"tiles", s.tiles},
          {"sent", s.bytes_sent},
          {"received", s.bytes_received},
          {"kv_sent", s.kv_sent},
          {"kv_received", s.kv_received},
          {"busy_ms", s.busy_ms},
          {"cpu_ms", s.cpu_ms},
          {"setup_ms", s.setup_ms},
          {"ms", s.compute_ms},
          {"cms", s.comm_ms},
          {"xms", s.exchange_ms},
          {"xwms", s.exchange_wait_ms},
          {"p_ms", s.predicted_compute_ms},
          {"p_cms", s.predicted_comm_ms},
          {"p_kv_sent", s.predicted_kv_sent},
          {"p_kv_received", s.predicted_kv_received},
          {"pieces", pieces_json(s.pieces)}};
}

SlotFigures slot_from_json(const json& j) {
  SlotFigures s;
  s.slot = j.at("slot").get<std::int64_t>();
  s.wave = j.at("wave").get<std::int32_t>();
  s.group = j.at("g").get<std::int32_t>();
  s.member = j.at("member").get<std::int32_t>();
  s.planned_rank = j.at("planned").get<std::int32_t>();
  s.tokens = j.at("tokens").get<std::int64_t>();
  s.tiles = j.at("tiles").get<std::int64_t>();
  s.bytes_sent = j.at("sent").get<std::int64_t>();
  s.bytes_received = j.at("received").get<std::int64_t>();
  s.kv_sent = j.at("kv_sent").get<std::int64_t>();
  s.kv_received = j.at("kv_received").get<std::int64_t>();
  s.busy_ms = j.at("busy_ms").get<double>();
  s.cpu_ms = j.at("cpu_ms").get<double>();
  s.setup_ms = j.at("setup_ms").get<double>();
  s.predicted_compute_ms = j.at("p_ms").get<double>();
  s.predicted_comm_ms = j.at("p_cms").get<double>();
  s.predicted_kv_sent = j.at("p_kv_sent").get<std::int64_t>();
  s.predicted_kv_received = j.at("p_kv_received").get<std::int64_t>();
  s.compute_ms = j.at("ms").get<double>();
  s.comm_ms = j.at("cms").get<double>();
  s.exchange_ms = j.at("xms").get<double>();
  s.exchange_wait_ms = j.at("xwms").get<double>();
  s.pieces = pieces_from_json(j.at("pieces"));
  return s;
}

// Milliseconds to the microsecond: more digits are noise and bloat the file.
double round_ms(double ms) { return std::round(ms * 1000.0) / 1000.0; }
double round4(double x) { return std::round(x * 10000.0) / 10000.0; }

template <typename T>
double max_over_mean(const std::vector<T>& v) {
  if (v.empty()) return 1.0;
  const double total = std::accumulate(v.begin(), v.end(), 0.0);
  const double mean = total / static_cast<double>(v.size());
  const double top = static_cast<double>(*std::max_element(v.begin(), v.end()));
  return mean > 0.0 ? top / mean : 1.0;
}

template <typename T>
std::pair<double, double> max_and_mean(const std::vector<T>& v) {
  if (v.empty()) return {0.0, 0.0};
  const double total = std::accumulate(v.begin(), v.end(), 0.0);
  return {static_cast<double>(*std::max_element(v.begin(), v.end())),
          total / static_cast<double>(v.size())};
}

// A micro-batch's strategy in one word: the rows' common strategy, or the
// distinct ones in row order ("head_tail,contiguous") when rows differ.
std::string combined(const std::vector<std::string>& names) {
  std::string out;
  std::vector<std::string> seen;
  for (const std::string& n : names) {
    if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    out += (out.empty() ? "" : ",") + n;
  }
  return out;
}

json nullable(const std::string& text) { return text.empty() ? json(nullptr) : json(text); }

// The micro-batches of one step, merged across the ranks of each CP group:
// keyed by (dp_rank, microbatch), the figures of each CP rank.
std::map<std::pair<int, std::int64_t>, std::vector<const MicroBatchFigures*>> merge(
    const std::vector<RankStepFigures>& ranks, int cp_size) {
  std::map<std::pair<int, std::int64_t>, std::vector<const MicroBatchFigures*>> merged;
  for (const RankStepFigures& r : ranks) {
    for (const MicroBatchFigures& m : r.micro_batches) {
      auto& slot = merged[{m.dp_rank, m.microbatch}];
      slot.resize(static_cast<std::size_t>(cp_size), nullptr);
      if (m.cp_rank >= 0 && m.cp_rank < cp_size) slot[static_cast<std::size_t>(m.cp_rank)] = &m;
    }
  }
  return merged;
}

}  // namespace

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::vector<std::uint8_t> encode_figures(const RankStepFigures& figures) {
  json mbs = json::array();
  for (const auto& m : figures.micro_batches) mbs.push_back(to_json(m));
  json slots = json::array();
  for (const auto& s : figures.slots) slots.push_back(to_json(s));
  json compare = json::array();
  for (const CompareRunFigures& c : figures.compare) {
    compare.push_back({{"k", c.scheduler},
                       {"r", c.repetition},
                       {"s", c.slots},
                       {"ms", c.slot_ms},
                       {"wall", c.slot_wall_ms}});
  }
  const json j = {{"rank", figures.rank},
                  {"compare", compare},
                  {"compare_ms", figures.compare_ms},
                  {"step_ms", figures.step_ms},
                  {"plan_ms", figures.plan_ms},
                  {"shard_ms", figures.shard_ms},
                  {"cpu_ms", figures.compute_cpu_ms},
                  {"mbs", mbs},
                  {"slots", slots},
                  {"fit", fit_samples_json(figures.fit_samples)}};
  const std::string text = j.dump();
  return {text.begin(), text.end()};
}

Result<RankStepFigures> decode_figures(const std::vector<std::uint8_t>& bytes) {
  try {
    const json j = json::parse(bytes.begin(), bytes.end());
    RankStepFigures f;
    f.rank = j.at("rank").get<int>();
    f.step_ms = j.at("step_ms").get<double>();
    f.plan_ms = j.at("plan_ms").get<double>();
    f.shard_ms = j.at("shard_ms").get<double>();
    f.compute_cpu_ms = j.at("cpu_ms").get<double>();
    for (const json& m : j.at("mbs")) f.micro_batches.push_back(from_json(m));
    for (const json& s : j.at("slots")) f.slots.push_back(slot_from_json(s));
    for (const json& c : j.at("compare")) {
      CompareRunFigures run;
      run.scheduler = c.at("k").get<std::int32_t>();
      run.repetition = c.at("r").get<std::int32_t>();
      run.slots = c.at("s").get<std::vector<std::int64_t>>();
      run.slot_ms = c.at("ms").get<std::vector<double>>();
      run.slot_wall_ms = c.at("wall").get<std::vector<double>>();
      if (run.slots.size() != run.slot_ms.size() || run.slots.size() != run.slot_wall_ms.size()) {
        throw std::runtime_error("a comparison run's slots and times differ in number");
      }
      f.compare.push_back(std::move(run));
    }
    f.compare_ms = j.at("compare_ms").get<double>();
    f.fit_samples = fit_samples_from_json(j.at("fit"));
    return f;
  } catch (const std::exception& e) {
    return internal_error(std::string("step figures from a rank do not decode: ") + e.what());
  }
}

namespace {

// Hybrid mode: the schedule and, per rank, what its slots measured.
json hybrid_line(const StepReport& step, const std::vector<RankStepFigures>& ranks) {
  json per_rank = json::array();
  for (const RankStepFigures& r : ranks) {
    double busy = 0, compute = 0, comm = 0, exchange = 0, wait = 0;
    std::int64_t sent = 0, received = 0;
    json slots = json::array();
    for (const SlotFigures& s : r.slots) {
      busy += s.busy_ms;
      compute += s.compute_ms;
      comm += s.comm_ms;
      exchange += s.exchange_ms;
      wait += s.exchange_wait_ms;
      sent += s.bytes_sent;
      received += s.bytes_received;
      json slot = {{"slot", s.slot},
                   {"wave", s.wave},
                   {"g", s.group},
                   {"tokens", s.tokens},
                   {"tiles", s.tiles},
                   {"busy_ms", round_ms(s.busy_ms)},
                   {"cpu_ms", round_ms(s.cpu_ms)},
                   {"setup_ms", round_ms(s.setup_ms)},
                   {"predicted_compute_ms", round_ms(s.predicted_compute_ms)},
                   {"predicted_comm_ms", round_ms(s.predicted_comm_ms)},
                   {"kv_received", s.kv_received},
                   {"predicted_kv_received", s.predicted_kv_received},
                   {"kv_sent", s.kv_sent},
                   {"predicted_kv_sent", s.predicted_kv_sent}};
      if (!s.pieces.empty()) slot["pieces"] = pieces_json(s.pieces);
      if (s.planned_rank >= 0) slot["planned_rank"] = s.planned_rank;
      slots.push_back(slot);
    }
    per_rank.push_back(
        {{"rank", r.rank},
         {"busy_ms", round_ms(busy)},
         {"idle_ms", round_ms(std::max(0.0, r.step_ms - busy))},
         {"attention_ms", round_ms(compute)},
         {"comm_ms", round_ms(comm)},
         {"exchange_ms", round_ms(exchange)},
         {"exchange_wait_ms", round_ms(wait)},
         {"exchange_hidden_share",
          exchange > 0 ? json(round4(std::max(0.0, exchange - wait) / exchange)) : json(nullptr)},
         {"bytes_sent", sent},
         {"bytes_received", received},
         {"compute_cpu_ms", round_ms(r.compute_cpu_ms)},
         {"slots", slots}});
  }
  return {{"step", step.step},
          {"scheduler", step.hybrid->scheduler},
          {"schedule_fallback_reason", nullable(step.hybrid->fallback_reason)},
          {"groups", step.hybrid->groups},
          {"predicted_step_ms", round_ms(step.hybrid->predicted_ms)},
          {"fixed_predicted_step_ms", step.hybrid->fixed_predicted_ms > 0
                                          ? json(round_ms(step.hybrid->fixed_predicted_ms))
                                          : json(nullptr)},
          {"measured_step_ms", round_ms(step.hybrid->measured_ms)},
          {"schedule_fingerprint", step.hybrid->schedule_fingerprint},
          {"store_keys", step.hybrid->store_keys >= 0 ? json(step.hybrid->store_keys) : json()},
          {"profile", step.profile},
          {"ranks", per_rank},
          {"profile_fit", step.profile_fit ? profile_fit_json(*step.profile_fit) : json(nullptr)},
          {"fit_samples", all_fit_samples_json(ranks)}};
}

std::vector<double> rounded(const std::vector<double>& v, double (*round)(double)) {
  std::vector<double> out;
  for (double x : v) out.push_back(round(x));
  return out;
}

// With train.compare_schedulers: one record per compared scheduler.
json compare_line(const StepReport& step, const CompareResult& r) {
  json record = {
      {"step", step.step},
      {"compare", r.scheduler},
      {"scheduler_used", r.used},
      {"repetitions", step.repetitions},
      {"clock", step.clock},
      {"groups", r.groups},
      {"slot_ranks", r.slot_ranks},
      {"waves", r.waves},
      {"predicted_step_ms", round_ms(r.predicted_ms)},
      {"critical_path_ms", round_ms(r.critical_path_ms)},
      {"critical_path_ms_by_repetition", rounded(r.repetition_critical_path_ms, round_ms)},
      {"critical_path_wall_ms", round_ms(r.critical_path_wall_ms)},
      {"max_rank_ms", round_ms(r.max_rank_ms)},
      {"rank_min_ms", rounded(r.rank_min_ms, round_ms)},
      {"rank_median_ms", rounded(r.rank_median_ms, round_ms)},
      {"predicted_rank_ms", rounded(r.rank_predicted_ms, round_ms)},
      {"prediction_error", rounded(r.prediction_error, round4)}};
  if (r.scheduler != "fixed" && r.measured_speedup_over_fixed > 0) {
    record["measured_speedup_over_fixed"] = round4(r.measured_speedup_over_fixed);
    record["speedup_spread"] = {round4(r.speedup_min), round4(r.speedup_max)};
    record["predicted_speedup_over_fixed"] = round4(r.predicted_speedup_over_fixed);
  }
  return record;
}

}  // namespace

std::vector<std::string> metrics_lines(const StepReport& step,
                                       const std::vector<RankStepFigures>& ranks, int dp_size,
                                       int cp_size) {
  std::vector<std::string> lines;
  std::vector<std::int64_t> micro_batches(static_cast<std::size_t>(dp_size), 0);
  for (const auto& [key, per_rank] : merge(ranks, cp_size)) {
    const MicroBatchFigures* base = nullptr;
    for (const MicroBatchFigures* m : per_rank) base = base ? base : m;
    if (base == nullptr) continue;
    if (key.first >= 0 && key.first < dp_size) ++micro_batches[static_cast<std::size_t>(key.first)];
    json ms = json::array();
    json comm = json::array();
    for (const MicroBatchFigures* m : per_rank) {
      ms.push_back(m ? json(round_ms(m->attention_ms)) : json(nullptr));
      comm.push_back(m ? json(round_ms(m->attention_comm_ms)) : json(nullptr));
    }
    std::string reason;
    for (const std::string& r : base->fallback_reasons) reason = reason.empty() ? r : reason;
    json record = {
        {"step", step.step},
        {"dp_rank", key.first},
        {"microbatch", key.second},
        {"tokens", base->row_tokens},
        {"cp_strategy", combined(base->strategies)},
        {"cp_fallback_reason", nullable(reason)},
        {"pairs", base->pairs},
        {"tiles", base->tiles},
        {"attention_ms", ms},
        {"attention_comm_ms", comm},
        {"imbalance",
         {{"pairs", round4(max_over_mean(base->pairs))},
          {"tiles", round4(max_over_mean(base->tiles))}}},
        {"contiguous_imbalance",
         {{"pairs", round4(max_over_mean(base->contiguous_pairs))},
          {"tiles", round4(max_over_mean(base->contiguous_tiles))}}},
    };
    if (base->strategies.size() > 1) record["row_strategies"] = base->strategies;
    if (!base->pieces.empty()) {
      json pieces = json::array();
      for (const auto& p : base->pieces) pieces.push_back({p[0], p[1], p[2], p[3]});
      record["pieces"] = pieces;
    }
    lines.push_back(record.dump());
  }
  double plan_ms = 0, shard_ms = 0;
  json rank_cpu = json::array();
  for (const RankStepFigures& r : ranks) rank_cpu.push_back(round_ms(r.compute_cpu_ms));
  for (const RankStepFigures& r : ranks) {
    plan_ms = std::max(plan_ms, r.plan_ms);
    shard_ms = std::max(shard_ms, r.shard_ms);
  }
  const json record = {
      {"step", step.step},
      {"loss", step.loss},
      {"tokens", step.loss_tokens},
      {"samples", step.samples},
      {"micro_batches", micro_batches},
      {"dp_strategy", step.dp_strategy},
      {"dp_fallback_reason", nullable(step.dp_fallback_reason)},
      {"dp_imbalance", round4(step.dp_imbalance)},
      {"dp_round_robin_imbalance", round4(step.dp_round_robin_imbalance)},
      {"step_ms", round_ms(step.wall_ms)},
      {"plan_ms", round_ms(plan_ms)},
      {"shard_ms", round_ms(shard_ms)},
      {"rank_compute_cpu_ms", rank_cpu},
  };
  lines.push_back(record.dump());
  if (step.hybrid) lines.push_back(hybrid_line(step, ranks).dump());
  for (const CompareResult& r : compare_results(step, ranks)) {
    lines.push_back(compare_line(step, r).dump());
  }
  return lines;
}

namespace {

// Why another user's link decides where the metrics file at `path` goes, or "".
std::string foreign_metrics_link(const std::string& path) {
  const std::optional<host::PathLink> link = host::foreign_link_on_path(path);
  if (!link) return "";
  return host::foreign_link_text(*link) +
         ", who may point it at a file of yours to overwrite; remove the link or choose "
         "another --metrics path";
}

}  // namespace

Result<std::unique_ptr<MetricsFile>> MetricsFile::open(const std::string& path) {
  if (std::string why = foreign_metrics_link(path); !why.empty()) {
    return invalid_argument("cannot write the metrics file " + path + ": " + why);
  }
  // This user's own link (checked above) is followed, else no link put there
  // since. The file is emptied only once what was opened is known to be what
  // the path names with no other user's link on the way: a link swapped in
  // between the check and the open costs no file its contents.
  struct stat ls {};
  const bool own_link = ::lstat(path.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode);
  // O_NONBLOCK: a FIFO no process reads (put there since the launcher
  // refused FIFOs, or given to a worker started directly) fails the open at
  // once instead of holding rank 0, and so the job, until someone reads it.
  // Writes block as usual: the flag is cleared once the file is open.
  const int flags =
      O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (own_link ? 0 : O_NOFOLLOW);
  auto file = std::unique_ptr<MetricsFile>(new MetricsFile());
  file->path_ = path;
  file->fd_ = ::open(path.c_str(), flags, 0644);
  const auto failed = [&](const std::string& cause) {
    return invalid_argument("cannot write the metrics file " + path + ": " + cause +
                            "; check --metrics and the directory");
  };
  if (file->fd_ < 0) {
    const int err = errno;
    struct stat st {};
    if (err == ENXIO && ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
      return invalid_argument("cannot write the metrics file " + path +
                              ": it is a FIFO that no process reads; give a regular file, or "
                              "/dev/null to discard the records");
    }
    return failed(std::strerror(err));
  }
  const int status_flags = ::fcntl(file->fd_, F_GETFL);
  if (status_flags < 0 || ::fcntl(file->fd_, F_SETFL, status_flags & ~O_NONBLOCK) != 0) {
    return failed(std::strerror(errno));
  }
  if (std::string why = foreign_metrics_link(path); !why.empty()) {
    return invalid_argument("cannot write the metrics file " + path + ": " + why);
  }
  struct stat opened {};
  struct stat named {};
  if (::fstat(file->fd_, &opened) != 0 || ::stat(path.c_str(), &named) != 0 ||
      opened.st_dev != named.st_dev || opened.st_ino != named.st_ino) {
    return failed("it was replaced while being opened");
  }
  // A FIFO or device chosen on purpose (/dev/null) is neither locked nor
  // emptied.
  if (!S_ISREG(opened.st_mode)) return file;
  // Another user's file (in a group's or a sticky directory) is theirs to
  // read, change, remove or lock; a file with other names (hard links,
  // which another user may have made to a file of this user's where the
  // kernel allows it) would be emptied under those names too.
  if (!host::trusted_owner(opened.st_uid)) {
    return invalid_argument("the metrics file " + path + " is owned by uid " +
                            std::to_string(opened.st_uid) + ", neither root nor this user (uid " +
                            std::to_string(::geteuid()) +
                            "): it is theirs, and so would the records be; choose a --metrics "
                            "path of your own");
  }
  if (opened.st_nlink > 1) {
    return invalid_argument("the metrics file " + path + " has " + std::to_string(opened.st_nlink) +
                            " names (hard links), and emptying it would empty the others too; "
                            "choose a --metrics path of its own");
  }
  // Two runs writing one metrics file would empty and interleave each
  // other's records: the file is locked for as long as this run writes it,
  // before it is emptied, so a second run leaves the first's records alone.
  // Where the file system cannot lock (some network file systems), the run
  // goes on unlocked, as it did before.
  if (::flock(file->fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    return invalid_argument("the metrics file " + path +
                            " is being written by another run (it holds a lock on the file); "
                            "wait for it to end or give this run its own --metrics path");
  }
  if (::ftruncate(file->fd_, 0) != 0) return failed(std::strerror(errno));
  return file;
}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status MetricsFile::write(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text.append(line).push_back('\n');
  for (std::string_view rest = text; !rest.empty();) {
    const ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      return invalid_argument("cannot write the metrics file " + path_ + ": " +
                              (err != 0 ? std::strerror(err) : "the write failed") +
                              "; free space there or choose another --metrics path");
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::ok();
}

void RunSummary::add(const StepReport& step, const std::vector<RankStepFigures>& ranks,
                     int cp_size) {
  if (steps_ == 0) first_step_ = step.step;
  last_step_ = step.step;
  ++steps_;
  losses_.push_back(step.loss);
  tokens_ += step.loss_tokens;
  dp_imbalance_ += step.dp_imbalance;
  dp_round_robin_ += step.dp_round_robin_imbalance;
  ++dp_strategies_[step.dp_strategy];
  step_ms_ += step.wall_ms;
  double overhead = 0;
  for (const RankStepFigures& r : ranks) overhead = std::max(overhead, r.plan_ms + r.shard_ms);
  overhead_ms_ += overhead;

  if (step.hybrid) add_hybrid(step, ranks);
  for (const auto& [key, per_rank] : merge(ranks, cp_size)) {
    const MicroBatchFigures* base = nullptr;
    std::vector<double> ms;
    for (const MicroBatchFigures* m : per_rank) {
      if (m == nullptr) continue;
      base = base ? base : m;
      ms.push_back(m->attention_ms);
    }
    if (base == nullptr) continue;
    for (std::size_t i = 0; i < base->strategies.size(); ++i) {
      ++strategy_rows_[base->strategies[i]];
      if (!base->fallback_reasons[i].empty()) {
        ++fallback_rows_;
        if (first_fallback_.empty()) first_fallback_ = base->fallback_reasons[i];
      }
    }
    auto accumulate = [](const auto& v, double& top, double& mean) {
      const auto [a, b] = max_and_mean(v);
      top += a;
      mean += b;
    };
    accumulate(base->tiles, tiles_max_, tiles_mean_);
    accumulate(base->pairs, pairs_max_, pairs_mean_);
    accumulate(base->contiguous_tiles, ctiles_max_, ctiles_mean_);
    accumulate(base->contiguous_pairs, cpairs_max_, cpairs_mean_);
    accumulate(ms, ms_max_, ms_mean_);
  }
}

void RunSummary::add_hybrid(const StepReport& step, const std::vector<RankStepFigures>& ranks) {
  const StepReport::Hybrid& hybrid = *step.hybrid;
  ++hybrid_steps_;
  ++schedulers_[hybrid.scheduler];
  for (std::int32_t g : hybrid.groups) ++group_slots_[g];
  predicted_ms_ += hybrid.predicted_ms;
  fixed_predicted_ms_ += hybrid.fixed_predicted_ms;
  measured_ms_ += hybrid.measured_ms;
  profile_ = step.profile;
  std::vector<double> busy;
  for (const RankStepFigures& r : ranks) {
    double b = 0;
    for (const SlotFigures& f : r.slots) {
      b += f.busy_ms;
      bytes_moved_ += f.bytes_received;
    }
    busy.push_back(b);
  }
  const auto [top, mean] = max_and_mean(busy);
  busy_max_ += top;
  busy_mean_ += mean;
  if (!step.compared.empty()) {
    repetitions_ = step.repetitions;
    time_kind_ = step.clock;
    add_compare(compare_results(step, ranks));
  }
}

void RunSummary::add_compare(const std::vector<CompareResult>& results) {
  const auto fixed = std::find_if(results.begin(), results.end(),
                                  [](const CompareResult& r) { return r.scheduler == "fixed"; });
  for (const CompareResult& r : results) {
    auto t = std::find_if(compare_.begin(), compare_.end(),
                          [&](const CompareTotals& c) { return c.scheduler == r.scheduler; });
    if (t == compare_.end()) {
      compare_.push_back({});
      t = compare_.end() - 1;
      t->scheduler = r.scheduler;
    }
    const bool first = t->steps == 0;
    ++t->steps;
    t->critical_ms += r.critical_path_ms;
    t->wall_ms += r.critical_path_wall_ms;
    t->max_rank_ms += r.max_rank_ms;
    t->predicted_ms += r.predicted_ms;
    for (double e : r.prediction_error) {
      t->abs_error += std::fabs(e);
      ++t->errors;
    }
    if (fixed != results.end()) {
      t->fixed_critical_ms += fixed->critical_path_ms;
      t->fixed_predicted_ms += fixed->predicted_ms;
      t->speedup_min = first ? r.speedup_min : std::min(t->speedup_min, r.speedup_min);
      t->speedup_max = first ? r.speedup_max : std::max(t->speedup_max, r.speedup_max);
    }
  }
}

namespace {

// The profile's disagreement with the measurement past which the summary
// says how to calibrate.
constexpr double kCalibrateAbove = 0.20;

std::string calibrate_hint(double measured, double predicted, const std::string& profile) {
  if (!(predicted > 0) || std::fabs(measured - predicted) <= kCalibrateAbove * predicted) return "";
  return "  calibrate      measured and predicted differ by more than " +
         fixed(100 * kCalibrateAbove, 0) + "% (" + fixed(measured / predicted, 2) +
         "x): the profile " + profile +
         " does not fit this job; fit one to it with `fulcrum calibrate --config JOB.yaml "
         "--output my_profile.yaml` and set balancer.schedule.profile to it, or set "
         "balancer.schedule.profile: auto (docs/HYBRID_RUNTIME.md section 12)\n";
}

}  // namespace

std::string RunSummary::render_compare() const {
  std::ostringstream out;
  out << "  compared       " << repetitions_ << (repetitions_ == 1 ? " run" : " runs")
      << " of each schedule per batch, rotating order, no optimizer step  [mean per step; "
         "critical path replayed from each schedule's timeline with median slot times, "
      << time_kind_ << " time]\n";
  for (const CompareTotals& t : compare_) {
    const double n = t.steps > 0 ? static_cast<double>(t.steps) : 1.0;
    out << "    " << t.scheduler
        << std::string(t.scheduler.size() < 13 ? 13 - t.scheduler.size() : 1, ' ') << "measured "
        << fixed(t.critical_ms / n, 1) << " ms (max rank " << fixed(t.max_rank_ms / n, 1)
        << ", wall " << fixed(t.wall_ms / n, 1) << "), predicted " << fixed(t.predicted_ms / n, 1)
        << " ms, rank error "
        << fixed(t.errors > 0 ? 100 * t.abs_error / static_cast<double>(t.errors) : 0.0, 1)
        << "% (mean |measured - predicted| / predicted)";
    if (t.scheduler != "fixed" && t.fixed_critical_ms > 0 && t.critical_ms > 0 &&
        t.predicted_ms > 0) {
      out << "; over fixed " << fixed(t.fixed_critical_ms / t.critical_ms, 2) << "x measured ("
          << fixed(t.speedup_min, 2) << ".." << fixed(t.speedup_max, 2) << " by repetition), "
          << fixed(t.fixed_predicted_ms / t.predicted_ms, 2) << "x predicted";
    }
    out << "\n";
  }
  return out.str();
}

std::string RunSummary::render_hybrid() const {
  std::ostringstream out;
  const double n = static_cast<double>(hybrid_steps_);
  std::string schedulers, groups;
  for (const auto& [name, steps] : schedulers_) {
    schedulers += (schedulers.empty() ? "" : ", ") + name + " " + std::to_string(steps);
  }
  for (const auto& [g, slots] : group_slots_) {
    groups += (groups.empty() ? "" : ", ") + std::to_string(slots) + " of " + std::to_string(g);
  }
  out << "  schedule       " << schedulers << (hybrid_steps_ == 1 ? " step" : " steps")
      << "; slots by group size: " << groups << "\n";
  out << "  step time      measured " << fixed(measured_ms_ / n, 1) << " ms, predicted "
      << fixed(predicted_ms_ / n, 1) << " ms by profile " << profile_;
  if (fixed_predicted_ms_ > 0) {
    out << "; the planner's fixed schedule of the same batches predicted "
        << fixed(fixed_predicted_ms_ / n, 1) << " ms ("
        << fixed(predicted_ms_ > 0 ? fixed_predicted_ms_ / predicted_ms_ : 1.0, 2) << "x)";
  }
  out << "  [mean per step; measured: rank 0's wall time, comparison runs left out]\n";
  out << "  rank busy      max / mean " << fixed(busy_mean_ > 0 ? busy_max_ / busy_mean_ : 1.0, 3)
      << ", K/V moved " << fixed(static_cast<double>(bytes_moved_) / n / 1e6, 2)
      << " MB per step  [slots' measured time and received bytes, all ranks]\n";
  if (!compare_.empty()) out << render_compare();
  // With a comparison, its filtered critical path of the configured
  // scheduler is the fairer measurement; otherwise the step's wall time.
  double measured = measured_ms_, predicted = predicted_ms_;
  for (const CompareTotals& t : compare_) {
    if (schedulers_.count(t.scheduler) != 0 && t.steps > 0) {
      measured = t.critical_ms;
      predicted = t.predicted_ms;
    }
  }
  out << calibrate_hint(measured, predicted, profile_);
  return out.str();
}

std::string RunSummary::render(const std::string& header, double wall_s) const {
  auto ratio = [](double top, double mean) { return mean > 0 ? top / mean : 1.0; };
  std::ostringstream out;
  // Figures of this run only: a resumed run counts from the step after its
  // checkpoint's.
  out << "fulcrum train: " << header << ": " << steps_ << (steps_ == 1 ? " step" : " steps");
  if (first_step_ > 1) {
    out << " (" << first_step_ << "-" << last_step_ << ", resumed after step " << first_step_ - 1
        << ")";
  }
  out << " in " << fixed(wall_s, 1) << " s, " << tokens_ << " trained tokens ("
      << fixed(wall_s > 0 ? static_cast<double>(tokens_) / wall_s : 0.0, 0) << " tokens/s)\n";
  if (!losses_.empty()) {
    out << "  loss           " << fixed(losses_.front(), 4) << " at step " << first_step_ << " -> "
        << fixed(losses_.back(), 4) << " at step " << last_step_ << "\n";
  }
  if (hybrid_steps_ > 0) {
    const double n = static_cast<double>(steps_);
    out << render_hybrid();
    out << "  overhead       scheduling " << fixed(overhead_ms_ / n, 2) << " ms per step, "
        << fixed(step_ms_ > 0 ? 100.0 * overhead_ms_ / step_ms_ : 0.0, 2) << "% of step time\n";
    return out.str();
  }
  std::string strategies;
  for (const auto& [name, rows] : strategy_rows_) {
    strategies += (strategies.empty() ? "" : ", ") + name + " " + std::to_string(rows);
  }
  out << "  CP strategies  " << (strategies.empty() ? "(no rows)" : strategies) << " rows";
  if (fallback_rows_ > 0) {
    out << "; " << fallback_rows_ << " fell back (first: " << first_fallback_ << ")";
  }
  out << "\n";
  out << "  CP imbalance   tiles " << fixed(ratio(tiles_max_, tiles_mean_), 3)
      << " (contiguous would give " << fixed(ratio(ctiles_max_, ctiles_mean_), 3) << "), pairs "
      << fixed(ratio(pairs_max_, pairs_mean_), 3) << " (contiguous "
      << fixed(ratio(cpairs_max_, cpairs_mean_), 3) << "), measured attention time "
      << fixed(ratio(ms_max_, ms_mean_), 3)
      << "  [sum of per-micro-batch max / mean over CP ranks]\n";
  std::string dp;
  for (const auto& [name, count] : dp_strategies_) {
    if (!dp.empty()) dp += ", ";
    dp += name;
    if (dp_strategies_.size() > 1) dp.append(" ").append(std::to_string(count));
  }
  const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  out << "  DP imbalance   " << fixed(dp_imbalance_ / n, 3) << " with " << dp
      << " (round_robin would give " << fixed(dp_round_robin_ / n, 3)
      << ")  [mean over steps of max / mean rank cost]\n";
  out << "  overhead       planning + sharding " << fixed(overhead_ms_ / n, 2) << " ms per step, "
      << fixed(step_ms_ > 0 ? 100.0 * overhead_ms_ / step_ms_ : 0.0, 2) << "% of step time\n";
  return out.str();
}

}  // namespace fulcrum::train
