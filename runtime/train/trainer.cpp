#include "train/trainer.h"

#include <cstdio>
#include <exception>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "data/token_dataset.h"
#include "fulcrum/host/log.h"
#include "launch/worker_env.h"
#include "train/checkpoint.h"
#include "train/consensus.h"
#include "train/job_schema.h"
#include "train/options.h"
#include "train/worker.h"
#include "train/worker_errors.h"

namespace fulcrum::train {
namespace {

// Where this process's messages come from; set once the rank is known.
std::string g_who = "fulcrum-worker";

void print_error(const std::string& message) {
  // One line whatever a path the message names (or a peer's refusal) holds.
  const std::string line = host::one_line(g_who + ": " + message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

// The job's settings, each checked before the rendezvous.
struct JobSettings {
  TrainOptions options;
  CheckpointOptions checkpoints;
  ReliabilityOptions reliability;
};

Result<JobSettings> read_settings(const WorkerArgs& args, const launch::WorkerIdentity& id) {
  Result<host::Config> config = load_job_config(args.config_path, args.overrides);
  if (!config) {
    return Status(config.status().code(), host::with_config_advice(config.status().message()));
  }
  Result<TrainOptions> options = train_options_from_config(*config);
  if (!options) return options.status();
  const int world = options->dp_size * options->cp_size;
  if (id.world_size != world) {
    return invalid_argument(
        "the launcher started " + std::to_string(id.world_size) + " workers (" +
        launch::launcher_kind_name(id.launcher) +
        ") but parallel.dp_size x parallel.cp_size = " + std::to_string(options->dp_size) + " x " +
        std::to_string(options->cp_size) + " = " + std::to_string(world) + "; start " +
        std::to_string(world) + " workers or change the config");
  }
  if (Status s = configure_compute(*options, id); !s) return s;
  Result<CheckpointOptions> checkpoints = checkpoint_options_from_config(*config);
  if (!checkpoints) return checkpoints.status();
  Result<ReliabilityOptions> reliability = reliability_options(*config, id.world_size);
  if (!reliability) return reliability.status();
  return JobSettings{std::move(options).value(), std::move(checkpoints).value(),
                     std::move(reliability).value()};
}

// The exit code of a failure thrown while training, its line printed: 2 for
// bad input, 1 for a failed run. Call from a catch block only.
int exit_code_of_current_exception() {
  try {
    throw;
  } catch (const Interrupted& e) {
    if (*e.what() != '\0') print_error(e.what());
    return 128 + e.signal();
  } catch (const InputError& e) {
    print_error(e.what());
    return 2;
  } catch (const data::DatasetChanged& e) {
    print_error(e.what());
    return 2;
  } catch (const CheckpointError& e) {
    print_error(e.what());
    return 1;
  } catch (const ConsensusError& e) {
    print_error(e.what());
    return 1;
  } catch (const NumericError& e) {
    print_error(e.what());
    return 1;
  } catch (const comm::ConfigError& e) {
    print_error(comm::first_line(e));
    return 2;
  } catch (const comm::CommError& e) {
    print_error(comm::first_line(e));
    return 1;
  } catch (const std::exception& e) {
    // c10 errors carry a backtrace after the first line.
    print_error("internal error: " + comm::first_line(e));
    return 1;
  } catch (...) {
    print_error("internal error: unknown exception");
    return 1;
  }
}

}  // namespace

int run_worker(const WorkerArgs& args) noexcept {
  try {
    Result<launch::WorkerIdentity> id = launch::detect_worker_identity();
    if (!id) {
      print_error(id.status().message() + "; check the launcher's environment variables");
      return 2;
    }
    g_who = "fulcrum-worker: rank " + std::to_string(id->rank);
    Result<JobSettings> settings = read_settings(args, *id);
    if (!settings) {
      print_error(settings.status().message());
      return 2;
    }
    Status prepared = run_training(std::move(settings->options), std::move(settings->checkpoints),
                                   *id, args, std::move(settings->reliability));
    if (!prepared) {
      print_error(prepared.message());
      return 2;
    }
    // Last: the launcher takes a worker that exits 0 without it for one that
    // stopped early.
    if (Status noted = launch::note_completion(); !noted) {
      print_error(noted.message());
      return 1;
    }
    return 0;
  } catch (...) {
    return exit_code_of_current_exception();
  }
}

}  // namespace fulcrum::train
