// fulcrum train: checks the configuration, then launches one fulcrum-worker
// per rank on this host (fulcrum::launch) with the same arguments. This file
// stays free of LibTorch: the training itself lives in fulcrum-worker, found
// next to this executable.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli_common.h"
#include "comm/socket_interface.h"
#include "commands.h"
#include "fulcrum/host/plugin_loader.h"
#include "launch/launch.h"
#include "launch/preflight.h"
#include "launch/unique_fd.h"
#include "train_preflight.h"
#ifdef FULCRUM_HAVE_TRAINER
#include "train/job_schema.h"
#include "train/options.h"
#endif

namespace fulcrum::cli {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

constexpr const char* kUsage =
    "Usage: fulcrum train --config FILE.yaml [--nproc N] [--set KEY=VALUE ...]\n"
    "                     [--metrics FILE.jsonl] [--save-params FILE]\n"
    "                     [--resume auto|CHECKPOINT]\n"
    "                     [--compare-schedulers A,B,... [--compare-repetitions R]]\n"
    "\n"
    "Trains the configured model with balanced context and data parallelism: starts\n"
    "N = parallel.world_size when set, else parallel.dp_size x parallel.cp_size,\n"
    "worker processes on this host, each line of their output prefixed with its\n"
    "rank. Workers started by torchrun, srun or mpirun run 'fulcrum-worker' with the\n"
    "same options instead.\n";

constexpr const char* kWorkerName = "fulcrum-worker";
constexpr const char* kProgressPrefix = "@progress ";  // what workers print in protocol mode

struct TrainFlags {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string nproc;
  std::string metrics;
  std::string save_params;
  std::string resume;
  std::string compare;
  std::string repetitions;
  bool help = false;
  // --resume, --compare-schedulers, --compare-repetitions as given, in that
  // order (train::kTrainKeyFlags): they win over the file and every --set.
  std::vector<host::Override> flag_overrides;
};

po::options_description train_options(TrainFlags& f) {
  po::options_description options("Options");
  options.add_options()  //
      ("config", po::value(&f.config_path)->value_name("FILE.yaml"),
       "the training configuration (required; see docs/CONFIGS.md)")  //
      ("nproc", po::value(&f.nproc)->value_name("N"),
       "worker processes; must equal parallel.world_size when set, else "
       "parallel.dp_size x parallel.cp_size (the default)")  //
      ("set", po::value(&f.overrides)->value_name("KEY=VALUE")->composing(),
       "override one config key, e.g. --set train.steps=5 (repeatable)")  //
      ("metrics", po::value(&f.metrics)->value_name("FILE.jsonl"),
       "write per-step and per-micro-batch metrics as JSON lines (rank 0)")  //
      ("save-params", po::value(&f.save_params)->value_name("FILE"),
       "write the final parameters (names, then float64 values) for comparing runs")  //
      ("resume", po::value(&f.resume)->value_name("auto|CHECKPOINT"),
       "continue from the newest intact checkpoint in train.checkpoint_dir (auto) or from "
       "one file; the same as --set train.resume=...")  //
      ("compare-schedulers", po::value(&f.compare)->value_name("A,B,..."),
       "hybrid mode: also run and time these schedulers' schedules of every global batch "
       "(no optimizer step), e.g. fixed,megatron_dcp,hybrid; the same as --set "
       "train.compare_schedulers=...")  //
      ("compare-repetitions", po::value(&f.repetitions)->value_name("R"),
       "runs of each compared schedule per batch, in rotating order (default 3); the same as "
       "--set train.compare_repetitions=...")  //
      ("help,h", po::bool_switch(&f.help), "show this help");
  return options;
}

[[maybe_unused]] fs::path worker_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(kWorkerName) : self.parent_path() / kWorkerName;
}

// train.compare_schedulers against the schedulers the balancer offers (the
// built-in one's too: the workers would refuse the same names).
[[maybe_unused]] void check_compare_schedulers(const host::Config& config, LoadBalancer& balancer) {
  const std::string text = config.get_string("train.compare_schedulers");
  if (text.empty() || config.get_string("parallel.mode") != "hybrid") return;
  const std::vector<std::string> offered = balancer.schedule_strategies();
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string name = text.substr(begin, comma - begin);
    if (std::find(offered.begin(), offered.end(), name) == offered.end()) {
      throw UsageError("train.compare_schedulers = '" + text + "' (" +
                       config.source("train.compare_schedulers") + ") names '" + name +
                       "', which balancer '" + config.get_string("balancer.plugin") +
                       "' does not offer (it has " + join(offered, ", ") + "); list only those");
    }
    begin = comma + 1;
  }
}

// A plugin that exists but cannot be used is a configuration error: refuse
// it here, once, before any worker starts, by the policy plan and
// dp-partition use. A missing plugin is left to the workers, whose fallback
// (the built-in balancer, with a warning) is the documented behaviour.
[[maybe_unused]] void check_plugin(const host::Config& config) {
  const LoadedBalancer loaded =
      load_balancer(CommonOptions{}, config, [](host::LogLevel, const std::string&) {});
  check_compare_schedulers(config, *loaded.balancer);
  if (loaded.is_builtin) return;  // the workers warn and fall back per batch
  const auto require = [&](const char* key, const std::vector<std::string>& known) {
    const std::string name = config.get_string(key);
    if (name == "auto" || std::find(known.begin(), known.end(), name) != known.end()) return;
    throw UsageError(std::string(key) + " = '" + name + "' is not a strategy of balancer plugin '" +
                     config.get_string("balancer.plugin") + "' (it has " + join(known, ", ") +
                     "); choose one of them or auto");
  };
  require("balancer.cp.strategy", loaded.balancer->cp_strategies());
  require("balancer.cp.fallback", loaded.balancer->cp_strategies());
  require("balancer.dp.strategy", loaded.balancer->dp_strategies());
  if (config.get_string("parallel.mode") != "hybrid") return;
  const std::vector<std::string> schedulers = loaded.balancer->schedule_strategies();
  const std::string scheduler = config.get_string("balancer.schedule.strategy");
  if (std::find(schedulers.begin(), schedulers.end(), scheduler) == schedulers.end()) {
    throw UsageError("balancer.schedule.strategy = '" + scheduler +
                     "' is not a scheduler of balancer plugin '" +
                     config.get_string("balancer.plugin") + "' (it has " + join(schedulers, ", ") +
                     "); choose one of them");
  }
}

// Every path the run will write or read, checked before any worker starts:
// a mistake here would otherwise surface at the end of training
// (--save-params) or once per rank.
[[maybe_unused]] void check_paths(const host::Config& config, const TrainFlags& f) {
  const auto refuse_if = [](const Status& status) {
    if (!status) throw UsageError(status.message());
  };
  if (!f.metrics.empty()) refuse_if(launch::check_output_file(f.metrics, "--metrics"));
  if (!f.save_params.empty()) {
    refuse_if(launch::check_output_file(f.save_params, "--save-params"));
  }
  const std::string resume(config.get_string("train.resume"));
  // An output that is also one of the job's inputs would be emptied by the
  // run (the metrics file as rank 0 starts, the parameters file at the end),
  // and with it the job's configuration, data or only checkpoint.
  std::vector<std::pair<std::string, std::string>> inputs = {
      {f.config_path, "the job's --config file"}};
  if (resume != "none" && resume != "auto") {
    inputs.emplace_back(resume, "the checkpoint it resumes from (train.resume)");
  }
  if (const std::string data(config.get_string("data.path")); !data.empty()) {
    for (const char* suffix : {"", ".bin", ".idx"}) {
      inputs.emplace_back(data + suffix, "the job's data (data.path)");
    }
  }
  const auto refuse_input = [&](const std::string& output, const char* flag) {
    for (const auto& [input, what] : inputs) {
      std::error_code ec;
      if (!fs::equivalent(output, input, ec)) continue;
      throw UsageError(std::string(flag) + " " + output + " is " + what +
                       ", which the run would overwrite; give " + flag + " another path");
    }
  };
  if (!f.metrics.empty()) refuse_input(f.metrics, "--metrics");
  if (!f.save_params.empty()) refuse_input(f.save_params, "--save-params");
  // (Both may discard their output into /dev/null.)
  if (std::error_code ec;
      !f.metrics.empty() && !f.save_params.empty() && !fs::is_character_file(f.metrics, ec) &&
      (f.metrics == f.save_params || fs::equivalent(f.metrics, f.save_params, ec))) {
    throw UsageError("--metrics and --save-params both name " + f.metrics +
                     ", whose records the parameters would replace at the end; give each "
                     "its own path");
  }
  const std::string dir(config.get_string("train.checkpoint_dir"));
  if (resume != "none" && resume != "auto") {
    refuse_if(launch::check_input_file(
        resume, "checkpoint (train.resume)",
        "give an existing checkpoint file, or auto for the newest intact one in "
        "train.checkpoint_dir"));
  }
  // Set, it may be written: periodically, or when the run is interrupted.
  if (!dir.empty()) {
    refuse_if(launch::check_output_dir(dir, "train.checkpoint_dir"));
  }
}

// The workers' environment that the launcher passes through unchanged: a
// GLOO_SOCKET_IFNAME naming no interface of this host is refused here, once,
// instead of by every worker.
[[maybe_unused]] void check_environment(int nproc) {
  if (nproc < 2) return;  // one process uses no Gloo
  std::optional<std::string> ifname;
  if (const char* value = std::getenv(comm::kSocketIfnameVariable)) ifname = value;
  const auto parsed = comm::parse_socket_ifname(ifname, comm::host_interfaces());
  if (!parsed) throw UsageError(parsed.status().message());
}

// Sizes no host could hold are refused now, not by std::bad_alloc in every
// worker (or by hours of swapping).
#ifndef FULCRUM_TORCH_CUDA
#define FULCRUM_TORCH_CUDA 0
#endif
#ifndef FULCRUM_TORCH_NCCL
#define FULCRUM_TORCH_NCCL 0
#endif

// train.device and dist.backend against what the workers' LibTorch was built
// with (CMake passes it here) and what this machine has, before any worker
// starts. Each worker checks again against LibTorch itself.
[[maybe_unused]] void check_device(const host::Config& config) {
  const bool cuda = config.get_string("train.device") == "cuda";
  const bool nccl = config.get_string("dist.backend") == "nccl";
  if (nccl && !cuda) {
    throw UsageError(
        "dist.backend: nccl communicates CUDA tensors only, but train.device is cpu; set "
        "train.device: cuda, or dist.backend: gloo");
  }
  if (nccl && !FULCRUM_TORCH_NCCL) {
    throw UsageError(
        "dist.backend is nccl, but fulcrum was built against a LibTorch without NCCL; set "
        "dist.backend: gloo, or rebuild against a CUDA LibTorch (docs/RESULTS_GPU.md)");
  }
  if (!cuda) return;
  if (!FULCRUM_TORCH_CUDA) {
    throw UsageError(
        "train.device is cuda, but fulcrum was built against a LibTorch without CUDA; set "
        "train.device: cpu, or rebuild against a CUDA LibTorch (docs/RESULTS_GPU.md)");
  }
  std::error_code ec;
  if (!fs::exists("/proc/driver/nvidia/gpus", ec) || fs::is_empty("/proc/driver/nvidia/gpus", ec)) {
    throw UsageError(
        "train.device is cuda, but this machine shows no NVIDIA GPU (/proc/driver/nvidia/gpus "
        "is missing or empty); set train.device: cpu or run on a GPU machine");
  }
}

[[maybe_unused]] void check_sizes(const host::Config& config, int nproc) {
  const auto number = [&config](const char* key) {
    return static_cast<double>(config.get_int(key));
  };
  launch::MemoryInputs in;
  in.vocab_size = number("model.vocab_size");
  in.hidden_size = number("model.hidden_size");
  in.ffn_size = number("model.ffn_size");
  in.num_layers = number("model.num_layers");
  in.seq_length = number("data.seq_length");
  in.micro_batch_size = number("data.micro_batch_size");
  in.cp_size = number("parallel.cp_size");
  in.num_samples = config.get_string("data.source") == "synthetic" ? number("data.num_samples") : 0;
  in.dtype_bytes = config.get_string("train.dtype") == "float64" ? 8 : 4;
  const Status fits =
      launch::check_memory(launch::minimum_memory(in), nproc, launch::host_memory_bytes());
  if (!fits) throw UsageError(fits.message());
}

// Worker output on a terminal: rank 0's progress lines become one bar
// redrawn in place; every other line is printed as the launcher would,
// "[rank N] line", after clearing the bar and before redrawing it.
class TerminalRelay {
 public:
  void line(int rank, launch::OutputStream stream, std::string_view text) {
    const std::string_view prefix = kProgressPrefix;
    if (text.substr(0, prefix.size()) == prefix || text == prefix.substr(0, prefix.size() - 1)) {
      // Prefix and text: redraw the bar. The prefix alone (with or without
      // its space) ends it: the bar keeps its line, what follows goes below.
      const std::string next(text.size() > prefix.size() ? text.substr(prefix.size()) : "");
      if (next.empty()) {
        finish();
      } else {
        bar_ = next;
        draw();
      }
      return;
    }
    if (!bar_.empty()) std::fputs("\r\x1b[K", stdout);
    std::fflush(stdout);
    const std::string out = "[rank " + std::to_string(rank) + "] " + std::string(text) + "\n";
    FILE* file = stream == launch::OutputStream::kStdout ? stdout : stderr;
    std::fwrite(out.data(), 1, out.size(), file);
    std::fflush(file);
    draw();
  }
  void finish() {
    if (!bar_.empty()) std::fputs("\n", stdout);
    bar_.clear();
    std::fflush(stdout);
  }

 private:
  void draw() {
    if (bar_.empty()) return;
    std::fputs(("\r\x1b[K" + bar_).c_str(), stdout);
    std::fflush(stdout);
  }
  std::string bar_;
};

#ifdef FULCRUM_HAVE_TRAINER
// How the launcher starts the `nproc` workers of the job: their arguments
// (the same config and --set lines) and what a signal makes them do.
launch::LaunchOptions launch_options(const TrainFlags& f, const host::Config& config, int nproc,
                                     const fs::path& worker) {
  launch::LaunchOptions launch;
  launch.nproc = nproc;
  launch.program = worker.string();
  launch.args = {"--config", f.config_path};
  for (const std::string& o : f.overrides) {
    launch.args.push_back("--set");
    launch.args.push_back(o);
  }
  // As the flags themselves, so that the workers' messages name them too.
  for (const host::Override& o : f.flag_overrides) {
    launch.args.push_back(o.source);
    launch.args.push_back(o.text.substr(o.text.find('=') + 1));
  }
  if (!f.metrics.empty()) launch.args.insert(launch.args.end(), {"--metrics", f.metrics});
  if (!f.save_params.empty()) {
    launch.args.insert(launch.args.end(), {"--save-params", f.save_params});
  }
  // The workers meet in the launcher's private directory, so the port is only
  // their MASTER_PORT (torchrun's variable); nothing listens on it.
  launch.master_port = static_cast<int>(config.get_int("dist.master_port"));
  launch.require_completion_note = true;
  if (!config.get_string("train.checkpoint_dir").empty()) {
    // A SIGINT/SIGTERM makes the workers finish their step and rank 0 write
    // its checkpoint: a step's waits are bounded by dist.op_timeout_s, and a
    // minute more covers its compute and the write. A second signal kills.
    launch.interrupt_grace_s = config.get_double("dist.op_timeout_s") + 60;
    launch.interrupt_note =
        "fulcrum: interrupted: the workers finish their step and write a checkpoint to " +
        config.get_string("train.checkpoint_dir") + "; send the signal again to stop at once";
  }
  return launch;
}
#endif

#ifdef FULCRUM_HAVE_TRAINER
// The job's config with train's own flags applied as overrides that win
// over the file's keys and every --set: --resume, --compare-schedulers and
// --compare-repetitions (train::kTrainKeyFlags), each labelled with its flag.
host::Config train_config(TrainFlags& f, const po::variables_map& given) {
  CommonOptions common;
  common.config_path = f.config_path;
  // Empty is a mistake (an unset shell variable), not "compare nothing".
  if (given.count("compare-schedulers") != 0 && f.compare.empty()) {
    throw UsageError(
        "--compare-schedulers is empty; list schedulers, e.g. --compare-schedulers "
        "fixed,megatron_dcp,hybrid, or leave the flag out");
  }
  for (const train::KeyFlag& flag : train::kTrainKeyFlags) {
    const std::string name = std::string(flag.flag).substr(2);
    if (given.count(name) == 0) continue;
    const std::string& value = name == "resume"               ? f.resume
                               : name == "compare-schedulers" ? f.compare
                                                              : f.repetitions;
    f.flag_overrides.push_back(train::flag_override(flag, value));
  }
  common.overrides = f.overrides;
  common.flag_overrides = f.flag_overrides;
  host::Config config = load_config_or_throw(common);
  check_config_not_empty(f.config_path);
  if (given.count("compare-repetitions") != 0 &&
      config.get_string("train.compare_schedulers").empty()) {
    throw UsageError("--compare-repetitions " + f.repetitions +
                     " has nothing to repeat: no schedulers are compared; add --compare-schedulers "
                     "fixed,megatron_dcp,hybrid (or others) or leave --compare-repetitions out");
  }
  return config;
}

#endif

int train_body(const std::vector<std::string>& args) {
  TrainFlags f;
  const po::options_description options = train_options(f);
  [[maybe_unused]] const po::variables_map given = parse_command_line(args, options, "train");
  if (printed_help(f.help, kUsage, options)) return kExitOk;
#ifndef FULCRUM_HAVE_TRAINER
  throw UsageError(
      "this fulcrum was built without LibTorch, so it has no training runtime; install "
      "LibTorch (Debian: libtorch-dev) and rebuild to use fulcrum train");
#else
  if (f.config_path.empty()) {
    throw UsageError("--config is required; e.g. fulcrum train --config configs/quickstart.yaml");
  }
  const host::Config config = train_config(f, given);

  const std::int64_t world = train::job_world_size(config);
  const std::string world_text =
      config.get_int("parallel.world_size") > 0
          ? "parallel.world_size = " + std::to_string(world)
          : "parallel.dp_size x parallel.cp_size = " +
                std::to_string(config.get_int("parallel.dp_size")) + " x " +
                std::to_string(config.get_int("parallel.cp_size")) + " = " + std::to_string(world);
  // An empty --nproc is a mistake (an unset shell variable), not "the default".
  const std::int64_t nproc =
      given.count("nproc") == 0 ? world
                                : parse_int(f.nproc, "--nproc", 1, kMaxRanks, "pass " + world_text);
  if (nproc != world) {
    throw UsageError("--nproc " + std::to_string(nproc) + " does not match " + world_text +
                     "; pass --nproc " + std::to_string(world) +
                     " or change the config's parallel section");
  }
  check_train_options(config);
  check_plugin(config);
  check_paths(config, f);
  check_sizes(config, static_cast<int>(nproc));
  check_device(config);
  check_environment(static_cast<int>(nproc));
  check_train_data(config);
  check_resume(config);
  // Held, and so the directory kept, until the workers are gone.
  const launch::UniqueFd checkpoint_lock(lock_checkpoint_dir(config));

  const fs::path worker = worker_path();
  if (::access(worker.c_str(), X_OK) != 0) {
    throw UsageError(worker.string() +
                     " is missing or not executable; build the fulcrum-worker target (it needs "
                     "LibTorch) or reinstall fulcrum");
  }

  launch::LaunchOptions launch = launch_options(f, config, static_cast<int>(nproc), worker);
  TerminalRelay relay;
  if (::isatty(STDOUT_FILENO)) {
    launch.extra_env.push_back("FULCRUM_PROGRESS=protocol");
    launch.on_line = [&relay](int rank, launch::OutputStream stream, std::string_view text) {
      relay.line(rank, stream, text);
    };
  } else {
    launch.extra_env.push_back("FULCRUM_PROGRESS=lines");
  }
  const int code = launch::launch_workers(launch);
  relay.finish();
  return code;
#endif
}

}  // namespace

int run_train(const std::vector<std::string>& args) {
  return run_command("train", [&] { return train_body(args); });
}

}  // namespace fulcrum::cli
