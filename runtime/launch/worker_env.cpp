#include "launch/worker_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

namespace fulcrum::launch {
namespace {

// The variable names one launcher uses for the same four facts.
struct Flavour {
  LauncherKind kind;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;  // may be unset in the environment
};

constexpr Flavour kFlavours[] = {
    {LauncherKind::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    // SLURM_NTASKS_PER_NODE is only set with --ntasks-per-node and then is a
    // plain number; SLURM_TASKS_PER_NODE's "2(x3),1" form is not one.
    {LauncherKind::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
     "SLURM_NTASKS_PER_NODE"},
    {LauncherKind::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
};

std::string launcher_hint(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::kTorchrun:
      return "torchrun-style launchers (fulcrum train, torchrun) set it";
    case LauncherKind::kSlurm:
      return "srun sets it; do not override it by hand";
    case LauncherKind::kOpenMpi:
      return "mpirun sets it; do not override it by hand";
    case LauncherKind::kStandalone:
      break;
  }
  return "unset it or fix its value";
}

// Strict: one or more decimal digits and nothing else, in [0, INT_MAX].
Result<int> parse_count(const char* name, const std::string& value, LauncherKind kind) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(std::string(name) + "='" + value + "' " + why + "; " +
                            launcher_hint(kind));
  };
  if (value.empty()) return bad("is empty, expected a non-negative integer");
  if (value.front() == '-') return bad("is negative, expected a non-negative integer");
  for (char c : value) {
    if (c < '0' || c > '9') return bad("is not a non-negative decimal integer");
  }
  int out = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec == std::errc::result_out_of_range) return bad("is too large");
  if (ec != std::errc() || end != value.data() + value.size()) {
    return bad("is not a non-negative decimal integer");
  }
  return out;
}

}  // namespace

const char* launcher_kind_name(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::kTorchrun:
      return "torchrun";
    case LauncherKind::kSlurm:
      return "slurm";
    case LauncherKind::kOpenMpi:
      return "openmpi";
    case LauncherKind::kStandalone:
      return "standalone";
  }
  return "unknown";
}

std::optional<std::string> process_env(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

Result<WorkerIdentity> detect_worker_identity(const EnvLookup& env) {
  WorkerIdentity id;
  const Flavour* flavour = nullptr;
  for (const Flavour& f : kFlavours) {
    if (env(f.rank)) {
      flavour = &f;
      break;
    }
  }

  if (flavour != nullptr) {
    id.launcher = flavour->kind;
    auto require = [&](const char* name) -> Result<int> {
      std::optional<std::string> value = env(name);
      if (!value) {
        return invalid_argument(std::string(flavour->rank) + " is set but " + name + " is not; " +
                                launcher_hint(flavour->kind) + ", so set both or neither");
      }
      return parse_count(name, *value, flavour->kind);
    };
    auto rank = require(flavour->rank);
    if (!rank) return rank.status();
    auto world = require(flavour->world_size);
    if (!world) return world.status();
    id.rank = *rank;
    id.world_size = *world;
    if (id.world_size < 1) {
      return invalid_argument(std::string(flavour->world_size) + "='0' is not a world size; " +
                              "a job has at least one worker");
    }
    if (id.rank >= id.world_size) {
      return invalid_argument(std::string(flavour->rank) + "='" + std::to_string(id.rank) +
                              "' is not below " + flavour->world_size + "='" +
                              std::to_string(id.world_size) + "'; ranks run from 0 to " +
                              flavour->world_size + " - 1");
    }
    // Optional: a launcher that does not say is treated as one worker per
    // host slot, i.e. the local rank equals the global rank.
    id.local_rank = id.rank;
    if (std::optional<std::string> local = env(flavour->local_rank)) {
      auto parsed = parse_count(flavour->local_rank, *local, flavour->kind);
      if (!parsed) return parsed.status();
      id.local_rank = *parsed;
    }
    if (std::optional<std::string> local_size = env(flavour->local_world_size)) {
      auto parsed = parse_count(flavour->local_world_size, *local_size, flavour->kind);
      if (!parsed) return parsed.status();
      if (*parsed < 1 || *parsed > id.world_size) {
        return invalid_argument(std::string(flavour->local_world_size) + "='" + *local_size +
                                "' is not in 1.." + std::to_string(id.world_size) + " (" +
                                flavour->world_size + "); " + launcher_hint(flavour->kind));
      }
      id.local_world_size = *parsed;
    }
    const int local_limit = id.local_world_size.value_or(id.world_size);
    if (id.local_rank >= local_limit) {
      return invalid_argument(std::string(flavour->local_rank) + "='" +
                              std::to_string(id.local_rank) + "' is not below " +
                              (id.local_world_size ? std::string(flavour->local_world_size)
                                                   : std::string(flavour->world_size)) +
                              "='" + std::to_string(local_limit) + "'; " +
                              launcher_hint(flavour->kind));
    }
  }

  if (std::optional<std::string> addr = env("MASTER_ADDR")) {
    if (addr->empty() || addr->find_first_of(" \t\n") != std::string::npos) {
      return invalid_argument("MASTER_ADDR='" + *addr +
                              "' is not a host name or address; set it to rank 0's host");
    }
    id.master_addr = *addr;
  }
  if (std::optional<std::string> port = env("MASTER_PORT")) {
    auto parsed = parse_count("MASTER_PORT", *port, LauncherKind::kStandalone);
    if (!parsed || *parsed < 1 || *parsed > 65535) {
      return invalid_argument("MASTER_PORT='" + *port +
                              "' is not a TCP port; set it to a number from 1 to 65535");
    }
    id.master_port = *parsed;
  }
  return id;
}

Status note_completion(const EnvLookup& env) {
  const std::optional<std::string> path = env(kCompletionNoteVariable);
  if (!path || path->empty()) return Status::ok();
  const int fd = ::open(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return internal_error("cannot write the completion note " + *path + " (" +
                          std::strerror(errno) + ") that tells the launcher this run finished");
  }
  ::close(fd);
  return Status::ok();
}

}  // namespace fulcrum::launch
