#include "dist/gloo_communicator.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist/local_communicator.h"

namespace fulcrum::dist {
namespace {

using Clock = std::chrono::steady_clock;

bool mentions_timeout(const std::string& text) {
  return text.find("timed out") != std::string::npos ||
         text.find("Timed out") != std::string::npos || text.find("timeout") != std::string::npos;
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, std::string name,
                   Timeout timeout)
      : Communicator(std::move(name), timeout), group_(std::move(group)) {}

  // A group whose collective failed is abandoned, not destroyed: its Gloo
  // worker thread may still be blocked in I/O until Gloo's own deadline, and
  // ~ProcessGroupGloo joins that thread, which would hang the exit the
  // caller is heading for. The process is ending; the leak is deliberate.
  ~GlooCommunicator() override {
    if (failed_) static_cast<void>(group_.release());
  }

  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }
  const char* backend() const override { return "gloo"; }

 protected:
  std::vector<at::Tensor> do_all_gather(const at::Tensor& input, Timeout timeout) override {
    std::vector<at::Tensor> inputs{input.contiguous()};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(inputs[0]));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout;
    run("all_gather", timeout, [&] { return group_->allgather(outputs, inputs, opts); });
    return outputs[0];
  }

  void do_all_reduce_sum(std::vector<at::Tensor>& tensors, Timeout timeout) override {
    // c10d reads a list of tensors as copies of one tensor (one per device)
    // and would sum them together; the contract here is one reduction per
    // tensor. One flat buffer per dtype keeps it to few Gloo calls (the
    // gradient all-reduce passes every parameter at once).
    std::map<at::ScalarType, std::vector<std::size_t>> by_dtype;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      by_dtype[tensors[i].scalar_type()].push_back(i);
    }
    for (const auto& [dtype, indices] : by_dtype) {
      std::vector<at::Tensor> flat;
      for (std::size_t i : indices) flat.push_back(tensors[i].reshape({-1}));
      std::vector<at::Tensor> buffer{flat.size() == 1 ? flat[0].contiguous().clone()
                                                      : at::cat(flat, 0)};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      opts.timeout = timeout;
      run("all_reduce_sum", timeout, [&] { return group_->allreduce(buffer, opts); });
      std::int64_t offset = 0;
      for (std::size_t i : indices) {
        const std::int64_t n = tensors[i].numel();
        tensors[i].copy_(buffer[0].narrow(0, offset, n).view(tensors[i].sizes()));
        offset += n;
      }
    }
  }

  at::Tensor do_reduce_scatter_sum(const at::Tensor& input, Timeout timeout) override {
    // ProcessGroupGloo in LibTorch 1.13 has no reduce_scatter: all-reduce the
    // whole buffer and keep this rank's chunk. It moves size() times the
    // bytes of a ring reduce-scatter, acceptable on CPU; an NCCL backend
    // would call reduce_scatter directly.
    std::vector<at::Tensor> buffer{input.contiguous().clone()};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = timeout;
    run("reduce_scatter_sum", timeout, [&] { return group_->allreduce(buffer, opts); });
    const std::int64_t chunk = input.size(0) / size();
    return buffer[0].narrow(0, rank() * chunk, chunk).clone();
  }

  void do_broadcast(at::Tensor& tensor, int root, Timeout timeout) override {
    std::vector<at::Tensor> buffer{tensor.is_contiguous() ? tensor : tensor.contiguous()};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.rootTensor = 0;
    opts.timeout = timeout;
    run("broadcast", timeout, [&] { return group_->broadcast(buffer, opts); });
    if (!buffer[0].is_same(tensor)) tensor.copy_(buffer[0]);
  }

  void do_barrier(Timeout timeout) override {
    c10d::BarrierOptions opts;
    opts.timeout = timeout;
    run("barrier", timeout, [&] { return group_->barrier(opts); });
  }

 private:
  // Launches one c10d operation and waits at most `timeout`. c10d reports a
  // timeout in several ways (its own wait, Gloo's I/O deadline); all become
  // the same one-line CommError.
  void run(const std::string& op, Timeout timeout,
           const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) {
    const auto start = Clock::now();
    try {
      c10::intrusive_ptr<c10d::Work> work = launch();
      work->wait(timeout);
    } catch (const std::exception& e) {
      failed_ = true;
      const std::string what = first_line(e);
      const auto elapsed = Clock::now() - start;
      if (mentions_timeout(what) || elapsed >= timeout) {
        throw CommError(timeout_message(op, name(), timeout) + " (" + what +
                        "); a peer rank failed, exited or skipped this collective");
      }
      throw CommError(op + " on group " + name() + " failed: " + what +
                      "; a peer rank may have exited, check its log");
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  bool failed_ = false;
};

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

std::shared_ptr<::gloo::transport::Device> make_device(const GlooOptions& o) {
  if (!o.interface.empty()) return c10d::ProcessGroupGloo::createDeviceForInterface(o.interface);
  if (is_loopback(o.master_addr)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
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
void join_store(c10d::Store& store, const GlooOptions& o, const std::string& where,
                const std::string& who) {
  const std::string key = "fulcrum/joined";
  const auto deadline = Clock::now() + o.rendezvous_timeout;
  std::int64_t joined = 0;
  try {
    joined = store.add(key, 1);
    while (joined < o.world_size) {
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      joined = store.add(key, 0);
    }
  } catch (const std::exception& e) {
    throw CommError("rendezvous at " + where + " failed for " + who +
                    ": the store stopped "
                    "answering (" +
                    first_line(e) + "); rank 0, which hosts it, may have exited");
  }
  if (joined < o.world_size) {
    throw CommError("rendezvous at " + where + " timed out after " +
                    format_timeout(o.rendezvous_timeout) + " for " + who + ": " +
                    std::to_string(joined) + " of " + std::to_string(o.world_size) +
                    " ranks joined; check that every rank started with the same MASTER_ADDR, "
                    "MASTER_PORT and WORLD_SIZE");
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
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr) {
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
    return groups;
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    throw CommError("init_gloo_process_groups: master_port " + std::to_string(o.master_port) +
                    " is outside [1, 65535]; set MASTER_PORT");
  }
  const std::string where = o.master_addr + ":" + std::to_string(o.master_port);
  const std::string who = "rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size);

  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(o.master_port);
    so.isServer = o.rank == 0;
    // LibTorch 1.13's own wait for workers gives up silently at the
    // deadline; join_store below counts the ranks and says who is missing.
    so.waitWorkers = false;
    so.timeout = o.rendezvous_timeout;
    store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
  } catch (const std::exception& e) {
    throw CommError("rendezvous at " + where + " failed for " + who + " within " +
                    format_timeout(o.rendezvous_timeout) + " (" +
                    (o.rank == 0 ? "hosting the store, waiting for the other ranks"
                                 : "connecting to the store hosted by rank 0") +
                    "): " + first_line(e) + "; check MASTER_ADDR/MASTER_PORT and that all " +
                    std::to_string(o.world_size) + " ranks started");
  }

  join_store(*store, o, where, who);

  std::shared_ptr<::gloo::transport::Device> device;
  try {
    device = make_device(o);
  } catch (const std::exception& e) {
    throw CommError("gloo could not open a network device for " + who + " (interface '" +
                    o.interface + "', master " + where + "): " + first_line(e) +
                    "; set GLOO_SOCKET_IFNAME to a working interface");
  }

  auto make_group = [&](const GroupSpec& spec) -> std::shared_ptr<Communicator> {
    if (spec.size() == 1) return std::make_shared<LocalCommunicator>(spec.name, o.op_timeout);
    // A prefix per group keeps the groups' rendezvous keys apart in the one
    // store.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fulcrum/" + spec.name, store);
    // Gloo waits for the group's members with this timeout, and uses it as
    // its I/O deadline afterwards; each collective's own deadline is
    // op_timeout (Work::wait in GlooCommunicator::run).
    auto options =
        c10d::ProcessGroupGloo::Options::create(std::max(o.rendezvous_timeout, o.op_timeout));
    options->devices.push_back(device);
    options->threads = o.threads;
    try {
      auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, spec.group_rank,
                                                               spec.size(), options);
      return std::make_shared<GlooCommunicator>(std::move(group), spec.name, o.op_timeout);
    } catch (const std::exception& e) {
      throw CommError("rendezvous of group " + spec.name + " at " + where + " failed for " + who +
                      " within " + format_timeout(o.rendezvous_timeout) + ": " + first_line(e) +
                      "; a member rank did not join, check that every rank started");
    }
  };
  groups.world = make_group(layout->world);
  groups.cp = make_group(layout->cp);
  groups.dp = make_group(layout->dp);
  return groups;
}

}  // namespace fulcrum::dist
