// fulcrum calibrate: measures this machine's cost-model coefficients and
// writes them as a profile file the schedulers read (CostProfile). The
// measuring is done by fulcrum-calibrate (LibTorch), found next to this
// executable and started through the launcher: once alone for the attention
// kernel, once as two processes for Gloo. This file fits and writes; it stays
// LibTorch-free.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "calibrate/calibration_fit.h"
#include "cli_common.h"
#include "commands.h"
#include "host/input_file.h"
#include "host/trusted_directory.h"
#include "launch/launch.h"
#ifdef FULCRUM_HAVE_TRAINER
#include "train/fit_records.h"
#include "train/job_schema.h"
#include "train/options.h"
#endif

namespace fulcrum::cli {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

constexpr const char* kUsage =
    "Usage: fulcrum calibrate --output FILE.yaml [--repetitions R] [--name NAME] [--force]\n"
    "       fulcrum calibrate --config JOB.yaml [--output FILE.yaml] [--steps N]\n"
    "                         [--repetitions R] [--set KEY=VALUE ...] [--name NAME] [--force]\n"
    "\n"
    "With --config (a parallel.mode: hybrid job): trains the job itself for N steps\n"
    "(default 3; the first is a warm-up) with the schedulers fixed, megatron_dcp and\n"
    "hybrid compared R times each per batch (default 3), and fits every cost-model\n"
    "term to the whole slots' measured times, member by member (per slot member:\n"
    "a tiles + b tokens + c + r row tokens + K/V bytes / bandwidth + latency x peers),\n"
    "on the job's model, device and threads. Prints each term and the fit's per-row\n"
    "error and writes the profile (to --output, else stdout). docs/HYBRID_RUNTIME.md,\n"
    "section 12.\n"
    "\n"
    "Without --config: times the runtime's blocked attention per tile and per\n"
    "token (forward and backward, several row shapes) and c10d Gloo\n"
    "point-to-point and all-gather between two local processes, fits the\n"
    "step-time cost model's coefficients and writes them as a profile file (one\n"
    "YAML mapping, CostProfile's keys).\n"
    "Every figure is a median of R repetitions.\n";

constexpr const char* kMeasurerName = "fulcrum-calibrate";
constexpr std::string_view kLinePrefix = "@calibrate ";

struct CalibrateFlags {
  std::string config;
  std::string steps = "3";
  std::vector<std::string> overrides;
  std::string output;
  std::string repetitions = "5";
  std::string name = "cpu_calibrated";
  bool force = false;
  bool help = false;
};

po::options_description calibrate_options(CalibrateFlags& f) {
  po::options_description options("Options");
  options.add_options()  //
      ("output", po::value(&f.output)->value_name("FILE.yaml"),
       "where to write the profile (required; an existing file needs --force)")  //
      ("repetitions", po::value(&f.repetitions)->value_name("R"),
       "repetitions per measurement, the median is kept; 1 to 20, about 3 s each (default: 5)")  //
      ("name", po::value(&f.name)->value_name("NAME"),
       "the profile's name (default: cpu_calibrated; with --config: job_calibrated)")  //
      ("config", po::value(&f.config)->value_name("JOB.yaml"),
       "fit the profile to this hybrid job's whole slots")  //
      ("steps", po::value(&f.steps)->value_name("N"),
       "with --config: training steps to time, the first a warm-up; 2 to 50 (default: 3)")  //
      ("set", po::value(&f.overrides)->value_name("KEY=VALUE")->composing(),
       "with --config: override a key of the job, as fulcrum train --set")       //
      ("force", po::bool_switch(&f.force), "replace an existing --output file")  //
      ("help,h", po::bool_switch(&f.help), "show this help");
  return options;
}

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

struct Measurements {
  std::vector<calibrate::ComputeSample> compute;
  std::vector<calibrate::TransferSample> p2p;
  std::vector<calibrate::TransferSample> all_gather;
  nlohmann::json shape;
};

// Runs fulcrum-calibrate in `mode` on nproc processes and collects rank 0's
// "@calibrate" lines; every other line goes to stderr as the workers wrote it.
void measure(const fs::path& program, const std::string& mode, int nproc,
             const std::string& repetitions, Measurements& into) {
  launch::LaunchOptions options;
  options.nproc = nproc;
  options.program = program.string();
  options.args = {mode, "--repetitions", repetitions};
  std::string bad_line;
  options.on_line = [&](int rank, launch::OutputStream stream, std::string_view line) {
    if (stream == launch::OutputStream::kStdout &&
        line.substr(0, kLinePrefix.size()) == kLinePrefix) {
      if (rank != 0) return;
      const auto json = nlohmann::json::parse(line.substr(kLinePrefix.size()), nullptr, false);
      if (json.is_discarded() || !json.contains("kind")) {
        bad_line = std::string(line);
        return;
      }
      const std::string kind = json["kind"];
      if (kind == "compute") {
        into.compute.push_back(
            {json["tiles"], json["tokens"], json["forward_seconds"], json["backward_seconds"]});
      } else if (kind == "p2p") {
        into.p2p.push_back({json["bytes"], json["seconds"]});
      } else if (kind == "all_gather") {
        into.all_gather.push_back({json["bytes"], json["seconds"]});
      } else if (kind == "compute_shape") {
        into.shape = json;
      }
      return;
    }
    std::fprintf(stderr, "[%s rank %d] %.*s\n", mode.c_str(), rank, static_cast<int>(line.size()),
                 line.data());
  };
  auto report = launch::run_workers(options);
  if (!report) throw std::runtime_error(report.status().message());
  if (report->interrupted_by != 0) {
    throw Interrupted(report->interrupted_by,
                      "interrupted by " + signal_name(report->interrupted_by) +
                          " while measuring " + mode +
                          "; no profile was written, run fulcrum calibrate again to make one");
  }
  if (report->exit_code != 0) {
    throw std::runtime_error(kMeasurerName + std::string(" ") + mode +
                             " failed: " + report->summary);
  }
  if (!bad_line.empty()) {
    throw std::runtime_error(kMeasurerName + std::string(" printed an unreadable line: ") +
                             one_line(bad_line));
  }
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return text;
}

// /proc files are read with read(2): a failed read is "unknown", never an
// exception out of a stream (host/input_file.h).
std::string cpu_model() {
  const std::string info = host::read_transient_file("/proc/cpuinfo", 1 << 20).value_or("");
  std::istringstream lines(info);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

// Other processes share the cores being timed: the figures mean little
// without it.
std::string load_average() {
  std::istringstream in(host::read_transient_file("/proc/loadavg", 4096).value_or(""));
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "load average unknown";
  return "load average " + one + " " + five + " " + fifteen;
}

double load_average_1min() {
  std::istringstream in(host::read_transient_file("/proc/loadavg", 4096).value_or(""));
  double one = 0;
  return (in >> one) ? one : 0.0;
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? name : "unknown host";
}

std::string sci(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3e", value);
  return text;
}

// What to do when writing failed with `err`: a full disk is not a
// permissions problem.
std::string write_advice(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return "free space on its filesystem (or raise the quota or file size limit), or give "
             "--output on another one";
    case EACCES:
    case EPERM:
    case EROFS:
      return "check the directory's permissions, or give --output elsewhere";
    default:
      return "give --output on a working filesystem";
  }
}

// Writes `text` to `path` through a temporary file in the same directory and
// a rename, so a reader never sees half a profile. POSIX calls, so that the
// error says why (errno), not only that something failed.
fs::path temporary_path(const fs::path& path) {
  return path.string() + ".tmp." + std::to_string(::getpid());
}

// Writes and syncs `text` into `tmp`, a new file; removes it and throws a
// UsageError saying why when that fails.
void write_new_file(const fs::path& tmp, const std::string& text) {
  const auto fail = [&tmp](const std::string& what, int err) {
    ::unlink(tmp.c_str());
    throw UsageError("cannot " + what + " " + tmp.string() + ": " + std::strerror(err) + "; " +
                     write_advice(err));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", errno);
  for (std::size_t done = 0; done < text.size();) {
    const ::ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("write", err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("write", err);
  }
  if (::close(fd) != 0) fail("write", errno);
}

void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = temporary_path(path);
  write_new_file(tmp, text);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw UsageError("cannot replace " + path.string() + ": " + ec.message() +
                     "; check the directory's permissions");
  }
}

void check_output(const CalibrateFlags& f) {
  if (f.output.empty()) {
    throw UsageError("--output FILE.yaml is required: where to write the profile");
  }
  // A link another user owns on the way decides where the profile goes.
  if (const std::optional<host::PathLink> link = host::foreign_link_on_path(f.output)) {
    throw UsageError("--output " + quote_text(f.output) + ": " + host::foreign_link_text(*link) +
                     ", who may repoint it to a directory of theirs; remove the link or choose "
                     "another path");
  }
  const fs::path out(f.output);
  std::error_code ec;
  if (fs::is_directory(out, ec)) {
    throw UsageError("--output " + quote_text(f.output) + " is a directory; give a file path");
  }
  // --force replaces a profile, never a device, pipe or socket: the atomic
  // rename would put a file where the node was (as root, in /dev too).
  const fs::file_status status = fs::symlink_status(out, ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    throw UsageError("--output " + quote_text(f.output) +
                     " exists and is not a regular file (a device, pipe, socket or link); give "
                     "the path of a profile file");
  }
  if (fs::exists(status) && !f.force) {
    throw UsageError("--output " + quote_text(f.output) +
                     " exists; pass --force to replace it, or choose another path");
  }
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    throw UsageError("--output " + quote_text(f.output) + ": directory " +
                     quote_text(dir.string()) + " does not exist; create it first");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw UsageError("--output " + quote_text(f.output) + ": directory " +
                     quote_text(dir.string()) + " is not writable");
  }
}

void check_name(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 &&
                  name.find_first_not_of(
                      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789_.-") == std::string::npos;
  if (!ok) {
    throw UsageError("--name " + quote_text(name) +
                     " must be 1 to 64 letters, digits, '_', '.' or '-', e.g. cpu_calibrated");
  }
}

// --repetitions, at most kMaxRepetitions.
std::int64_t parse_repetitions(const std::string& text) {
  // Measured on the 2-core development VM (docs/RELIABILITY.md, "Bounded
  // before it starts"): about 8 s of start-up and 3.2 s a repetition; past 20
  // the run takes minutes for medians that no longer move.
  constexpr std::int64_t kMaxRepetitions = 20;
  // A count past the bound is told how long it would have taken; anything
  // else wrong gets the range itself.
  if (std::int64_t asked = 0; std::from_chars(text.data(), text.data() + text.size(), asked).ptr ==
                                  text.data() + text.size() &&
                              !text.empty() && asked > kMaxRepetitions) {
    const double seconds = 8.0 + 3.2 * static_cast<double>(asked);
    throw UsageError("--repetitions " + std::to_string(asked) + " would take about " +
                     fixed(seconds / 60.0, 0) + " min, more than the " +
                     std::to_string(kMaxRepetitions) +
                     " repetitions (about a minute) fulcrum calibrate allows; give at most " +
                     std::to_string(kMaxRepetitions) + ", e.g. --repetitions 5");
  }
  const std::int64_t repetitions =
      parse_int(text, "--repetitions", 1, kMaxRepetitions, "e.g. --repetitions 5");
  return repetitions;
}

#ifdef FULCRUM_HAVE_CALIBRATE
// Fits the cost model to the measurements `m` and writes the profile, with
// how it was measured, to --output.
void fit_and_write(const CalibrateFlags& f, const Measurements& m, unsigned cores,
                   const std::string& reps) {
  auto compute = calibrate::fit_compute(m.compute);
  if (!compute) throw std::runtime_error("compute fit: " + compute.status().message());
  auto p2p = calibrate::fit_transfer(m.p2p);
  if (!p2p) throw std::runtime_error("point-to-point fit: " + p2p.status().message());
  auto gather = calibrate::fit_transfer(m.all_gather);
  if (!gather) throw std::runtime_error("all-gather fit: " + gather.status().message());

  const auto& fwd = compute->forward.coefficients;
  const auto& bwd = compute->backward.coefficients;
  const std::int64_t heads = m.shape.value("heads", 0);
  const std::int64_t head_dim = m.shape.value("head_dim", 0);
  CostProfile profile;
  profile.name = f.name;
  profile.tile_seconds = fwd[0] + bwd[0];
  profile.token_seconds = fwd[1] + bwd[1];
  profile.slot_seconds = fwd[2] + bwd[2];
  profile.kv_bytes_per_token = static_cast<double>(2 * heads * head_dim * 4);
  profile.intra_node_bytes_per_second = p2p->bytes_per_second;
  profile.inter_node_bytes_per_second = p2p->bytes_per_second;
  profile.latency_seconds = p2p->latency_seconds;
  profile.ranks_per_node = static_cast<std::int32_t>(cores);

  const std::vector<std::string> provenance = {
      "fulcrum calibrate --output " + f.output + " --repetitions " + reps + " --name " + f.name,
      "on " + host_name() + " (" + cpu_model() + ", " + std::to_string(cores) + " cores), " +
          utc_now() + ", " + load_average() + " when done; medians of " + reps +
          " repetitions after one warm-up.",
      "Compute: the runtime's blocked attention, float32, " + std::to_string(heads) +
          " heads, head dim " + std::to_string(head_dim) +
          ", B = " + std::to_string(m.shape.value("block_size", 0)) + ", one thread, " +
          std::to_string(m.compute.size()) + " ranks of 8 row shapes.",
      "  forward  = " + sci(fwd[0]) + " s/tile + " + sci(fwd[1]) + " s/token + " + sci(fwd[2]) +
          " s (largest error " + fixed(100 * compute->forward.max_relative_error, 1) + "%)",
      "  backward = " + sci(bwd[0]) + " s/tile + " + sci(bwd[1]) + " s/token + " + sci(bwd[2]) +
          " s (largest error " + fixed(100 * compute->backward.max_relative_error, 1) + "%)",
      "kv_bytes_per_token: K and V of one such attention layer in float32.",
      "Transfer: c10d Gloo over loopback between two processes, 4 KiB to 32 MiB;",
      "  point-to-point one-way = " + sci(p2p->latency_seconds) + " s + bytes / " +
          sci(p2p->bytes_per_second) + " B/s (largest error " +
          fixed(100 * p2p->max_relative_error, 1) + "%)",
      "  all-gather of 2 = " + sci(gather->latency_seconds) + " s + bytes / " +
          sci(gather->bytes_per_second) + " B/s (largest error " +
          fixed(100 * gather->max_relative_error, 1) + "%)",
      "One host: inter_node_bytes_per_second is not measured and is set to the intra-node",
      "figure; ranks_per_node is this host's core count.",
  };
  write_atomically(f.output, calibrate::profile_yaml(profile, provenance));
  for (const std::string& line : provenance) std::cout << line << "\n";
  std::cout << "wrote " << f.output << "\n";
}

#endif

#ifdef FULCRUM_HAVE_TRAINER
// The job's options, checked as fulcrum train checks them; refused when the
// job has no slots to time or none that exchange.
train::TrainOptions job_options(const CalibrateFlags& f) {
  CommonOptions common;
  common.config_path = f.config;
  common.overrides = f.overrides;
  const host::Config config = load_config_or_throw(common);
  Result<train::TrainOptions> o = train::train_options_from_config(config);
  if (!o) throw UsageError(o.status().message());
  if (o->mode != train::ParallelMode::kHybrid) {
    throw UsageError("--config " + quote_text(f.config) +
                     " is a parallel.mode: fixed job, which runs no slots to time; calibrate a "
                     "hybrid job (e.g. configs/hybrid.yaml) or add --set parallel.mode=hybrid");
  }
  if (o->dp_size < 2) {
    throw UsageError("--config " + quote_text(f.config) +
                     " runs on 1 rank, so no slot exchanges K/V and the exchange terms cannot be "
                     "fitted; give the job at least 2 ranks (parallel.world_size)");
  }
  return std::move(o).value();
}

// Every step's rows (slot members) from the metrics file, the first step
// (the warm-up) left out.
std::vector<calibrate::SlotSample> read_fit_samples(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::vector<calibrate::SlotSample> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::ordered_json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("fit_samples") || j.value("step", 0) <= 1) continue;
    for (const calibrate::SlotSample& s : train::fit_samples_from_json(j["fit_samples"])) {
      out.push_back(s);
    }
  }
  return out;
}

// The fit's signed error by group size: a term the model lacks for bigger
// slots shows as errors that move with g.
std::string errors_by_group(const std::vector<calibrate::SlotSample>& rows,
                            const std::vector<double>& errors) {
  std::map<std::int32_t, std::vector<double>> by_g;
  for (std::size_t i = 0; i < rows.size(); ++i) by_g[rows[i].group].push_back(errors[i]);
  std::string out;
  for (auto& [g, e] : by_g) {
    std::sort(e.begin(), e.end());
    out += (out.empty() ? "" : ", ") + std::string("g = ") + std::to_string(g) + ": " +
           std::to_string(e.size()) + " rows, median " + fixed(100 * e[e.size() / 2], 1) + "%";
  }
  return out;
}

std::vector<std::string> job_provenance(const CalibrateFlags& f, const train::TrainOptions& job,
                                        std::int64_t steps, std::int64_t repetitions,
                                        const std::vector<calibrate::SlotSample>& rows,
                                        const calibrate::SlotFit& fit);

// Trains the job for --steps steps with the schedulers compared, then fits
// and writes the profile.
int calibrate_job(CalibrateFlags& f) {
  const std::int64_t steps = parse_int(f.steps, "--steps", 2, 50, "e.g. --steps 3");
  const std::int64_t repetitions = parse_repetitions(f.repetitions);
  if (f.name == "cpu_calibrated") f.name = "job_calibrated";
  check_name(f.name);
  if (!f.output.empty()) check_output(f);
  std::error_code same_ec;
  if (!f.output.empty() && fs::equivalent(f.config, f.output, same_ec)) {
    throw UsageError("--output " + quote_text(f.output) +
                     " is the job's --config file; give the profile another path");
  }
  const train::TrainOptions job = job_options(f);
  char dir_template[] = "/tmp/fulcrum-calibrate-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    throw std::runtime_error(std::string("cannot make a temporary directory in /tmp: ") +
                             std::strerror(errno));
  }
  const fs::path dir(dir_template);
  const fs::path metrics = dir / "metrics.jsonl";
  std::vector<std::string> args = {"--config", f.config};
  for (const std::string& o : f.overrides) args.insert(args.end(), {"--set", o});
  args.insert(args.end(),
              {"--set", "train.steps=" + std::to_string(steps), "--set", "train.checkpoint_every=0",
               "--set", "train.resume=none", "--metrics", metrics.string(), "--compare-schedulers",
               "fixed,megatron_dcp,hybrid", "--compare-repetitions", std::to_string(repetitions)});
  const int code = run_train(args);
  const std::vector<calibrate::SlotSample> rows = read_fit_samples(metrics);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  if (code != kExitOk) return code;
  const double kv = 2.0 * static_cast<double>(job.model.hidden_size * job.model.num_layers) *
                    (job.dtype == train::Dtype::kFloat64 ? 8.0 : 4.0);
  CostProfile start = job.profile;
  start.name = f.name;
  Result<calibrate::SlotFit> fit = calibrate::fit_slots(rows, start, kv);
  if (!fit) throw std::runtime_error("the whole-slot fit failed: " + fit.status().message());
  const std::vector<std::string> provenance =
      job_provenance(f, job, steps, repetitions, rows, *fit);
  const std::string yaml = calibrate::profile_yaml(fit->profile, provenance);
  for (const std::string& line : provenance) std::cerr << line << "\n";
  if (f.output.empty()) {
    std::cout << yaml;
  } else {
    write_atomically(f.output, yaml);
    std::cerr << "wrote " << f.output << "\n";
  }
  return kExitOk;
}

// The profile file's comments: how it was measured and how well it fits.
std::vector<std::string> job_provenance(const CalibrateFlags& f, const train::TrainOptions& job,
                                        std::int64_t steps, std::int64_t repetitions,
                                        const std::vector<calibrate::SlotSample>& rows,
                                        const calibrate::SlotFit& fit) {
  const CostProfile& p = fit.profile;
  std::string command = "fulcrum calibrate --config " + f.config;
  for (const std::string& o : f.overrides) command += " --set " + o;
  command += " --steps " + std::to_string(steps) + " --repetitions " + std::to_string(repetitions) +
             " --name " + f.name;
  const std::vector<std::string> provenance = {
      command,
      "on " + host_name() + " (" + cpu_model() + "), " + utc_now() + ", " + load_average() +
          " when done.",
      "Rows: " + std::to_string(rows.size()) + " slot members of steps 2.." +
          std::to_string(steps) +
          " of the job (step 1 a warm-up), under the schedulers fixed, "
          "megatron_dcp and hybrid, each the median of " +
          std::to_string(repetitions) +
          " runs; time = " + (job.device == train::Device::kCpu ? "thread CPU" : "wall") +
          " time of the slot's forward and backward of the whole model.",
      "Fit: a tiles + b tokens + c + r row tokens + f partial tiles + K/V bytes / bandwidth + "
      "latency x peers per member,",
      "  non-negative least squares on plain errors: a = " + sci(p.tile_seconds) + " s/tile, b = " +
          sci(p.token_seconds) + " s/token, c = " + sci(p.slot_seconds) + " s/slot,",
      "  r = " + sci(p.row_token_seconds) + " s per token of the slot's row" +
          (fit.row_fitted ? "" : " (no slot of two or more: the job's profile's, not fitted)") +
          ", f = " + sci(p.partial_tile_seconds) + " s per partial tile" +
          (fit.partial_fitted ? ""
                              : " (the rows do not tell partial tiles from the other terms: "
                                "the job's profile's, not fitted)") +
          ",",
      "  bandwidth = " + sci(p.intra_node_bytes_per_second) +
          " B/s, latency = " + sci(p.latency_seconds) + " s/peer" +
          (fit.exchange_fitted ? "" : " (no row exchanged: the job's profile's, not fitted)"),
      "  per-row error: median |e| " + fixed(100 * fit.median_abs_error, 1) + "%, max " +
          fixed(100 * fit.max_abs_error, 1) + "%",
      "  by group size (signed): " + errors_by_group(rows, fit.errors),
      "kv_bytes_per_token: the job's K and V of one token over all layers (2 x hidden x layers "
      "x dtype bytes).",
  };
  return provenance;
}
#else
int calibrate_job(CalibrateFlags&) {
  throw UsageError(
      "this fulcrum was built without LibTorch, so it cannot train the job to time its slots; "
      "rebuild with LibTorch (see CONTRIBUTING.md)");
}
#endif

int calibrate_body(const std::vector<std::string>& args) {
  CalibrateFlags f;
  const po::options_description options = calibrate_options(f);
  const po::variables_map given = parse_command_line(args, options, "calibrate");
  if (printed_help(f.help, kUsage, options)) return kExitOk;
  if (given.count("config") != 0) {
    if (given.count("repetitions") == 0) f.repetitions = "3";
    return calibrate_job(f);
  }
  if (given.count("set") != 0 || given.count("steps") != 0) {
    throw UsageError(
        "--set and --steps are read only with --config JOB.yaml; add --config, or "
        "drop them to time the attention kernel alone");
  }
  const std::int64_t repetitions = parse_repetitions(f.repetitions);
  check_name(f.name);
  check_output(f);
#ifndef FULCRUM_HAVE_CALIBRATE
  throw UsageError(
      "this fulcrum was built without LibTorch, so fulcrum-calibrate does not exist; rebuild "
      "with LibTorch (see CONTRIBUTING.md)");
#else
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path program = ec ? fs::path(kMeasurerName) : self.parent_path() / kMeasurerName;
  if (::access(program.c_str(), X_OK) != 0) {
    throw UsageError(program.string() +
                     " is missing or not executable; build the fulcrum-calibrate target (it "
                     "needs LibTorch) or reinstall fulcrum");
  }
  const std::string reps = std::to_string(repetitions);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double busy = load_average_1min();
  if (busy > static_cast<double>(cores)) {
    std::fprintf(stderr,
                 "fulcrum calibrate: warning: the 1-minute load average is %.1f on %u cores; other "
                 "processes share the cores being timed, so the figures will be noisy; run again "
                 "on an idle machine for a profile to keep\n",
                 busy, cores);
  }
  Measurements m;
  // Before minutes of measuring: can a profile be written there at all (a
  // full disk, a file size limit, a read-only directory)? A profile's worth of
  // bytes through the temporary file the real write uses, then removed.
  write_new_file(temporary_path(f.output), std::string(4096, '#') + "\n");
  ::unlink(temporary_path(f.output).c_str());
  measure(program, "compute", 1, reps, m);
  measure(program, "comm", 2, reps, m);

  fit_and_write(f, m, cores, reps);
  return kExitOk;
#endif
}

}  // namespace

int run_calibrate(const std::vector<std::string>& args) {
  return run_command("calibrate", [&] { return calibrate_body(args); });
}

}  // namespace fulcrum::cli
