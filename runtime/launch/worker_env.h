// Who am I in the job? A worker's rank, world size and rendezvous address,
// read from whichever launcher started it: torchrun (and `fulcrum train`),
// SLURM's srun, or Open MPI's mpirun.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "fulcrum/status.h"

namespace fulcrum::launch {

enum class LauncherKind {
  kTorchrun,    // RANK, WORLD_SIZE, LOCAL_RANK (fulcrum's own launcher sets these too)
  kSlurm,       // SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
  kOpenMpi,     // OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
  kStandalone,  // none of the above: a single process, rank 0 of 1
};

const char* launcher_kind_name(LauncherKind kind);

inline constexpr const char* kDefaultMasterAddr = "127.0.0.1";
inline constexpr int kDefaultMasterPort = 29500;  // torchrun's default

struct WorkerIdentity {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::optional<int> local_world_size;  // unset when the launcher does not say
  // Where rank 0's store listens. SLURM and Open MPI do not set these: they
  // come from MASTER_ADDR / MASTER_PORT when exported, else the defaults
  // above, which only work on a single host.
  std::string master_addr = kDefaultMasterAddr;
  int master_port = kDefaultMasterPort;
  LauncherKind launcher = LauncherKind::kStandalone;
};

// Returns the value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// Reads the process environment.
std::optional<std::string> process_env(std::string_view name);

// The first launcher whose rank variable is set wins, in the order torchrun,
// SLURM, Open MPI (a torchrun inside a SLURM allocation sees both, and its
// own variables describe the worker). Every value is parsed strictly (decimal
// digits only, no sign, spaces or suffix) and checked for consistency: an
// error is one line naming the variable and its value.
Result<WorkerIdentity> detect_worker_identity(const EnvLookup& env = process_env);

// The file a worker started by `fulcrum train` creates when its run finished,
// named by the launcher in this variable: a worker that exits 0 without it
// stopped early, and the launcher says so instead of reporting success.
inline constexpr const char* kCompletionNoteVariable = "FULCRUM_COMPLETION_NOTE";

// Creates the completion note when the launcher asked for one (else does
// nothing). Call once, after everything the run writes was written.
Status note_completion(const EnvLookup& env = process_env);

}  // namespace fulcrum::launch
