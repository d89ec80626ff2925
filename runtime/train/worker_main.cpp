// fulcrum-worker: one rank of a training job. `fulcrum train` starts one per
// rank with torchrun-style variables; torchrun, srun and mpirun can start it
// directly with the same arguments:
//
//   fulcrum-worker --config FILE.yaml [--set section.key=value ...]
//                  [--metrics FILE.jsonl] [--save-params FILE]
//                  [--resume auto|CHECKPOINT] [--compare-schedulers A,B,...]
//                  [--compare-repetitions R]
//
// The last three are fulcrum train's flags for their keys
// (train::kTrainKeyFlags): they win over the file and every --set, and a
// message about their key names the flag.
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/preflight.h"
#include "launch/worker_env.h"
#include "train/job_schema.h"
#include "train/trainer.h"

namespace {

constexpr const char* kUsage =
    "usage: fulcrum-worker --config FILE.yaml [--set section.key=value ...] "
    "[--metrics FILE.jsonl] [--save-params FILE] [--resume auto|CHECKPOINT] "
    "[--compare-schedulers A,B,...] [--compare-repetitions R]\n";

int usage_error(const std::string& message) {
  const std::string line = "fulcrum-worker: " + message + "; see fulcrum-worker --help\n";
  std::fputs(line.c_str(), stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that exits closes its sockets; a write to one must fail as an
  // error naming the collective (EPIPE), not kill this rank with SIGPIPE
  // before it can say anything, and so be blamed for its peer's failure.
  std::signal(SIGPIPE, SIG_IGN);
  fulcrum::train::WorkerArgs args;
  std::vector<fulcrum::host::Override> flagged;  // applied after every --set
  const std::vector<std::string> in(argv + 1, argv + argc);
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::string name = in[i];
    std::string value;
    bool has_value = false;
    if (const auto eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    if (name == "--help" || name == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const fulcrum::train::KeyFlag* flag = nullptr;
    for (const fulcrum::train::KeyFlag& f : fulcrum::train::kTrainKeyFlags) {
      if (name == f.flag) flag = &f;
    }
    if (name != "--config" && name != "--set" && name != "--metrics" && name != "--save-params" &&
        flag == nullptr) {
      return usage_error("unknown argument '" + in[i] + "'");
    }
    if (!has_value) {
      if (i + 1 >= in.size()) return usage_error(name + " needs a value");
      value = in[++i];
    }
    if (name == "--config") args.config_path = value;
    if (name == "--set") args.overrides.push_back(value);
    if (name == "--metrics") args.metrics_path = value;
    if (name == "--save-params") args.save_params_path = value;
    if (flag != nullptr) flagged.push_back(fulcrum::train::flag_override(*flag, value));
  }
  if (args.config_path.empty()) return usage_error("--config is required");
  // Last, so that they win over any --set of their keys.
  args.overrides.insert(args.overrides.end(), flagged.begin(), flagged.end());
  // Rank 0 writes the parameters at the end: refuse a path it cannot write
  // now, not after the run. (An unknown identity is reported by the worker.)
  if (!args.save_params_path.empty()) {
    const auto identity = fulcrum::launch::detect_worker_identity();
    if (identity && identity->rank == 0) {
      const fulcrum::Status s =
          fulcrum::launch::check_output_file(args.save_params_path, "--save-params");
      if (!s) {
        std::fputs(("fulcrum-worker: " + s.message() + "\n").c_str(), stderr);
        return 2;
      }
    }
  }
  return fulcrum::train::run_worker(args);
}
