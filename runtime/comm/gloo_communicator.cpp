#include "comm/gloo_communicator.h"

#include <netdb.h>
#include <sys/socket.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef FULCRUM_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/c10d_communicator.h"
#include "comm/directory_store.h"
#include "comm/local_communicator.h"
#include "comm/progress_board.h"
#include "comm/socket_interface.h"

namespace fulcrum::comm {
namespace {

using Clock = std::chrono::steady_clock;

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

std::optional<std::string> env_text(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  return std::string(text);
}

// The interfaces to bind: o.interface, else GLOO_SOCKET_IFNAME; none = choose.
std::optional<std::vector<std::string>> chosen_interfaces(const GlooOptions& o) {
  const std::optional<std::string> text =
      o.interface.empty() ? env_text(kSocketIfnameVariable) : o.interface;
  Result<std::optional<std::vector<std::string>>> names =
      parse_socket_ifname(text, host_interfaces());
  if (!names) throw ConfigError(names.status().message());
  return *names;
}

// One device per interface named (torch does the same); otherwise one.
std::vector<std::shared_ptr<::gloo::transport::Device>> make_devices(
    const GlooOptions& o, const std::optional<std::vector<std::string>>& interfaces,
    const std::string& who) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  std::string current = "the default device";
  try {
    if (interfaces) {
      for (const std::string& name : *interfaces) {
        current = "interface '" + name + "' (" + std::string(kSocketIfnameVariable) + ")";
        devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      }
    } else if (is_loopback(o.master_addr)) {
      current = "the loopback device";
      devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      current = "the address of this host's name";
      devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
  } catch (const std::exception& e) {
    throw ConfigError("gloo could not open a network device for " + who + " on " + current + ": " +
                      first_line(e) + "; set " + kSocketIfnameVariable +
                      " to an interface with an address that reaches MASTER_ADDR " + o.master_addr);
  }
  return devices;
}

// A MASTER_ADDR no resolver knows is this rank's input error: said at once,
// not after dist.timeout_s of c10d retrying it.
void check_resolves(const std::string& addr, const std::string& who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc != 0) {
    throw ConfigError("MASTER_ADDR=" + quote_text(addr) + " does not resolve on " + who + " (" +
                      ::gai_strerror(rc) + "); set it to rank 0's host name or address");
  }
}

// Reads an integer environment variable; nullopt when unset.
Result<std::optional<long>> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::optional<long>();
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || end == nullptr || *end != '\0') {
    return invalid_argument(std::string("environment variable ") + name + "='" + text +
                            "' is not an integer");
  }
  return std::optional<long>(value);
}

// Every rank adds itself to a counter in the store and waits until all
// world_size ranks have, so a missing rank is reported here, by count, with
// the address, rather than as a socket timeout deep inside Gloo.
// `local`: the ranks meet in a directory of this host, not at an address.
void join_store(c10d::Store& store, const GlooOptions& o, const std::string& where,
                const std::string& who, bool local) {
  const std::string key = "fulcrum/joined";
  // Each rank also leaves its own mark, so that a rendezvous that times out
  // can name the ranks that never came.
  auto mark = [](int rank) { return "fulcrum/joined/" + std::to_string(rank); };
  const auto deadline = Clock::now() + o.rendezvous_timeout;
  std::int64_t joined = 0;
  try {
    store.set(mark(o.rank), std::vector<std::uint8_t>{1});
    joined = store.add(key, 1);
    while (joined < o.world_size) {
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      joined = store.add(key, 0);
    }
  } catch (const std::exception& e) {
    throw CommError("rendezvous at " + where + " failed for " + who +
                    ": the store stopped answering (" + first_line(e) + "); " +
                    (local ? "check that the directory is still there and writable"
                           : "rank 0, which hosts it, may have exited"));
  }
  if (joined < o.world_size) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < o.world_size && missing.size() < 16; ++r) {
        if (!store.check({mark(r)})) missing.push_back(r);
      }
    } catch (const std::exception&) {
      missing.clear();  // the store went away: the count says enough
    }
    const std::string absent = missing.empty()
                                   ? std::string()
                                   : " (" + ranks_phrase(missing) +
                                         (missing.size() == 1 ? " has" : " have") + " not joined)";
    throw CommError("rendezvous at " + where + " timed out after " +
                    format_timeout(o.rendezvous_timeout) + " for " + who + ": " +
                    std::to_string(joined) + " of " + std::to_string(o.world_size) +
                    " ranks joined" + absent + "; check that every rank started with the same " +
                    (local ? "WORLD_SIZE" : "MASTER_ADDR, MASTER_PORT and WORLD_SIZE"));
  }
}

// The store the ranks meet at: a directory of this host (`rendezvous_dir`)
// or rank 0's TCPStore at MASTER_ADDR:MASTER_PORT.
c10::intrusive_ptr<c10d::Store> open_store(const GlooOptions& o, const std::string& rendezvous_dir,
                                           const std::string& where, const std::string& who) {
  if (!rendezvous_dir.empty()) {
    // Every rank is on this host: they meet in a directory only this user can
    // reach, and nothing listens on the network for the rendezvous.
    Result<c10::intrusive_ptr<DirectoryStore>> opened =
        DirectoryStore::open(rendezvous_dir, o.rendezvous_timeout);
    if (!opened) throw ConfigError(opened.status().message());
    return std::move(opened).value();
  }
  check_resolves(o.master_addr, who);
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(o.master_port);
    so.isServer = o.rank == 0;
    // LibTorch 1.13's own wait for workers gives up silently at the
    // deadline; join_store counts the ranks and says who is missing.
    so.waitWorkers = false;
    so.timeout = o.rendezvous_timeout;
    return c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
  } catch (const std::exception& e) {
    throw CommError("rendezvous at " + where + " failed for " + who + " within " +
                    format_timeout(o.rendezvous_timeout) + " (" +
                    (o.rank == 0 ? "hosting the store, waiting for the other ranks"
                                 : "connecting to the store hosted by rank 0") +
                    "): " + first_line(e) + "; check MASTER_ADDR/MASTER_PORT and that all " +
                    std::to_string(o.world_size) + " ranks started");
  }
}

// What every group of this rank is built from.
struct GroupSetup {
  const GlooOptions& o;
  c10::intrusive_ptr<c10d::Store> store;
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  std::shared_ptr<ProgressBoard> board;
  std::string where;  // the rendezvous, as messages name it
  std::string who;    // "rank R of W"
};

// An NCCL group (dist.backend: nccl) where LibTorch has NCCL.
std::shared_ptr<Communicator> make_nccl_group(const GroupSpec& spec,
                                              const c10::intrusive_ptr<c10d::Store>& prefixed,
                                              const GroupSetup& setup) {
#ifdef FULCRUM_WITH_NCCL
  const GlooOptions& o = setup.o;
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = std::max(o.rendezvous_timeout, o.op_timeout);
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, spec.group_rank, spec.size(),
                                                             nccl_options);
    return std::make_shared<C10dCommunicator<c10d::ProcessGroupNCCL>>(
        std::move(group), "nccl", spec, o.op_timeout, setup.board,
        at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(o.cuda_device)));
  } catch (const std::exception& e) {
    throw CommError("NCCL group " + spec.name + " at " + setup.where + " failed for " + setup.who +
                    ": " + first_line(e) + "; check that every rank has its own GPU");
  }
#else
  static_cast<void>(spec);
  static_cast<void>(prefixed);
  static_cast<void>(setup);
  throw ConfigError(
      "dist.backend is nccl, but this fulcrum was built against a LibTorch without NCCL; "
      "set dist.backend: gloo, or rebuild against a CUDA LibTorch with NCCL");
#endif
}

// This rank's group `spec`: a LocalCommunicator when it is alone in it,
// else a c10d group that meets in the store under the group's own prefix.
std::shared_ptr<Communicator> make_group(const GroupSpec& spec, const GroupSetup& setup) {
  const GlooOptions& o = setup.o;
  if (spec.size() == 1) return std::make_shared<LocalCommunicator>(spec.name, o.op_timeout);
  // A prefix per group keeps the groups' rendezvous keys apart in the one
  // store.
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fulcrum/" + spec.name, setup.store);
  // Gloo waits for the group's members with this timeout, and uses it as
  // its I/O deadline afterwards; each collective's own deadline is
  // op_timeout (Work::wait in C10dCommunicator::run).
  if (o.backend == CommBackend::kNccl) return make_nccl_group(spec, prefixed, setup);
  auto options =
      c10d::ProcessGroupGloo::Options::create(std::max(o.rendezvous_timeout, o.op_timeout));
  options->devices = setup.devices;
  options->threads = o.threads;
  try {
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, spec.group_rank, spec.size(),
                                                             options);
    return std::make_shared<C10dCommunicator<c10d::ProcessGroupGloo>>(
        std::move(group), "gloo", spec, o.op_timeout, setup.board);
  } catch (const std::exception& e) {
    throw CommError("rendezvous of group " + spec.name + " at " + setup.where + " failed for " +
                    setup.who + " within " + format_timeout(o.rendezvous_timeout) + ": " +
                    first_line(e) + "; a member rank did not join, check that every rank started");
  }
}

}  // namespace

Result<GlooOptions> GlooOptions::from_env(int dp_size, int cp_size) {
  GlooOptions o;
  o.dp_size = dp_size;
  o.cp_size = cp_size;
  // torchrun first, then the launchers' own variables (SLURM srun, Open MPI).
  const std::pair<const char*, const char*> sources[] = {
      {"RANK", "WORLD_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}};
  bool found = false;
  for (const auto& [rank_var, size_var] : sources) {
    Result<std::optional<long>> rank = env_int(rank_var);
    if (!rank) return rank.status();
    if (!rank->has_value()) continue;
    Result<std::optional<long>> size = env_int(size_var);
    if (!size) return size.status();
    if (!size->has_value()) {
      return invalid_argument(std::string(rank_var) + " is set but " + size_var +
                              " is not; the launcher must set both");
    }
    o.rank = static_cast<int>(**rank);
    o.world_size = static_cast<int>(**size);
    found = true;
    break;
  }
  if (!found) {
    o.rank = 0;
    o.world_size = 1;
  }
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    o.master_addr = addr;
  }
  Result<std::optional<long>> port = env_int("MASTER_PORT");
  if (!port) return port.status();
  if (port->has_value()) {
    if (**port < 1 || **port > 65535) {
      return invalid_argument("MASTER_PORT=" + std::to_string(**port) + " is outside [1, 65535]");
    }
    o.master_port = static_cast<int>(**port);
  }
  // Checked (against this host's interfaces) by init_gloo_process_groups.
  if (const char* ifname = std::getenv(kSocketIfnameVariable); ifname != nullptr) {
    o.interface = ifname;
  }
  Result<GroupLayout> layout = make_group_layout(o.rank, o.world_size, o.dp_size, o.cp_size);
  if (!layout) return layout.status();
  return o;
}

ProcessGroups init_gloo_process_groups(const GlooOptions& o) {
  Result<GroupLayout> layout = make_group_layout(o.rank, o.world_size, o.dp_size, o.cp_size);
  if (!layout) throw CommError("init_gloo_process_groups: " + layout.status().message());
  ProcessGroups groups;
  groups.layout = *layout;
  if (o.world_size == 1) {
    groups.world = std::make_shared<LocalCommunicator>(layout->world.name, o.op_timeout);
    groups.dp = std::make_shared<LocalCommunicator>(layout->dp.name, o.op_timeout);
    groups.cp = std::make_shared<LocalCommunicator>(layout->cp.name, o.op_timeout);
    auto counts = std::make_shared<std::map<std::string, std::int64_t>>();
    groups.shared_add = [counts](const std::string& key, std::int64_t delta) {
      return (*counts)[key] += delta;
    };
    groups.shared_delete = [counts](const std::string& key) { return counts->erase(key) != 0; };
    groups.store_keys = [counts] { return static_cast<std::int64_t>(counts->size()); };
    return groups;
  }
  std::string rendezvous_dir = o.rendezvous_dir;
  if (rendezvous_dir.empty()) rendezvous_dir = env_text(kRendezvousDirVariable).value_or("");
  if (rendezvous_dir.empty() && (o.master_port < 1 || o.master_port > 65535)) {
    throw CommError("init_gloo_process_groups: master_port " + std::to_string(o.master_port) +
                    " is outside [1, 65535]; set MASTER_PORT");
  }
  const std::string where = rendezvous_dir.empty()
                                ? o.master_addr + ":" + std::to_string(o.master_port)
                                : "directory " + rendezvous_dir;
  const std::string who = "rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size);

  // Local settings first: a wrong interface is this rank's input error, found
  // before it makes the others wait at the rendezvous.
  const std::vector<std::shared_ptr<::gloo::transport::Device>> devices =
      make_devices(o, chosen_interfaces(o), who);

  c10::intrusive_ptr<c10d::Store> store = open_store(o, rendezvous_dir, where, who);

  join_store(*store, o, where, who, !rendezvous_dir.empty());

  std::shared_ptr<ProgressBoard> board;
  if (o.record_progress) {
    std::string report_dir = o.stall_report_dir;
    if (report_dir.empty()) report_dir = env_text(kStallReportDirVariable).value_or("");
    board = std::make_shared<ProgressBoard>(store, o, std::move(report_dir));
  }

  const GroupSetup setup{o, store, devices, board, where, who};
  groups.world = make_group(layout->world, setup);
  groups.cp = make_group(layout->cp, setup);
  groups.dp = make_group(layout->dp, setup);
  auto shared = c10::make_intrusive<c10d::PrefixStore>("fulcrum/shared", store);
  const auto failed = [who](const std::string& what, const std::exception& e) {
    return CommError(what + " on the rendezvous store failed on " + who + ": " + first_line(e) +
                     "; the store or a rank has gone, check the logs");
  };
  groups.shared_add = [shared, failed](const std::string& key, std::int64_t delta) {
    try {
      return shared->add(key, delta);
    } catch (const std::exception& e) {
      throw failed("shared counter " + key, e);
    }
  };
  groups.shared_delete = [shared, failed](const std::string& key) {
    try {
      return shared->deleteKey(key);
    } catch (const std::exception& e) {
      throw failed("deleting shared counter " + key, e);
    }
  };
  // The PrefixStore counts every key of the store beneath it.
  groups.store_keys = [shared, failed] {
    try {
      return shared->getNumKeys();
    } catch (const std::exception& e) {
      throw failed("counting the keys", e);
    }
  };
  return groups;
}

}  // namespace fulcrum::comm
