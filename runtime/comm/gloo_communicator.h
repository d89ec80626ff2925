// Process groups over c10d's ProcessGroupGloo (CPU tensors), rendezvous in a
// private directory when every rank runs on this host, else over c10d's
// TCPStore hosted by rank 0 at MASTER_ADDR:MASTER_PORT. Callers see
// only Communicator; the c10d headers stay inside this folder's sources and
// its private headers (c10d_communicator.h, progress_board.h).
#pragma once

#include <chrono>
#include <string>

#include "comm/communicator.h"
#include "fulcrum/status.h"

namespace fulcrum::comm {

// The c10d backend of the groups: Gloo, or NCCL where LibTorch has it
// (compiled in as FULCRUM_WITH_NCCL; otherwise asking for it is a
// ConfigError before the rendezvous).
enum class CommBackend { kGloo, kNccl };

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  int dp_size = 1;  // dp_size * cp_size == world_size
  int cp_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // How long a rank waits for the others to join (store and every group)
  // before it gives up with an error naming master_addr:master_port.
  Timeout rendezvous_timeout = std::chrono::seconds(300);
  // The default deadline of every collective; also Gloo's own I/O timeout, so
  // a stuck transfer ends by then even after the caller has given up on it.
  Timeout op_timeout = std::chrono::seconds(300);
  // Network interface(s) for Gloo, comma-separated (socket_interface.h);
  // empty = GLOO_SOCKET_IFNAME when set (as torch reads it), else the
  // loopback device when master_addr is a loopback address, else this host's
  // address. Checked before the rendezvous: a name this host does not have is
  // a ConfigError naming the variable, its value and the host's interfaces.
  std::string interface;
  int threads = 2;  // Gloo worker threads per group
  CommBackend backend = CommBackend::kGloo;
  int cuda_device = 0;  // NCCL: this rank's GPU, where CPU tensors are staged
  // Publish, at every collective, how many collectives this rank entered per
  // group (progress.h), so that a rank whose collective times out can name
  // the rank that never came. Costs one small store write per collective.
  bool record_progress = true;
  // A private directory of this host where the ranks meet (directory_store.h)
  // instead of at a TCPStore on master_addr:master_port; empty =
  // FULCRUM_RENDEZVOUS_DIR when set (fulcrum train's launcher sets it), else
  // the TCPStore, which LibTorch 1.13 binds on every interface (a job across
  // hosts; docs/RELIABILITY.md says what it exposes).
  std::string rendezvous_dir;
  // Where a rank whose collective timed out writes its StallReport for the
  // launcher; empty = FULCRUM_STALL_REPORT_DIR when set, else nowhere.
  std::string stall_report_dir;

  // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun); SLURM_PROCID /
  // SLURM_NTASKS and OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE when RANK is
  // unset; GLOO_SOCKET_IFNAME. No variables at all means a single process.
  // The message names the variable and its value.
  static Result<GlooOptions> from_env(int dp_size, int cp_size);
};

// Builds WORLD, then this rank's CP group, then its DP group (every rank in
// the same order, so group construction cannot deadlock). Size-1 groups are
// LocalCommunicators; world_size 1 needs no store at all. Throws ConfigError
// for an interface that cannot be used (before the rendezvous), CommError with
// one line naming the address on a rendezvous failure or timeout.
ProcessGroups init_gloo_process_groups(const GlooOptions& options);

}  // namespace fulcrum::comm
