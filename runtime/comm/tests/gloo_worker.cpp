// One rank of a multi-process Gloo test, launched by gloo_test.cpp with
// torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
//
//   fulcrum_gloo_worker <scenario> <dp_size> <cp_size> <rendezvous_ms> <op_ms>
//
// Exit codes: 0 the scenario held, 1 a check failed (a "FAIL:" line says
// which), 2 a CommError (an "ERROR:" line holds its message), 3 bad usage.
// Scenarios: collectives, rendezvous, op_timeout, stall, listeners (exit 4
// when the rank listens beyond loopback); cost_on / cost_off
// print what recording progress costs per collective.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "test_util/worker_check.h"

namespace {

using fulcrum::comm::CommError;
using fulcrum::comm::Communicator;
using fulcrum::comm::GroupSpec;

using fulcrum::test_util::check;

// The rank FAIL lines name (test_util/worker_check.h).
int& g_rank = fulcrum::test_util::worker_rank();

// Every collective of one group against values each member can predict.
void check_group(Communicator& c, const GroupSpec& spec) {
  const std::string where = " on " + c.name();
  check(c.size() == spec.size() && c.rank() == spec.group_rank, "group size/rank" + where);

  // all_gather of global ranks yields the group's member list.
  const at::Tensor ranks = c.all_gather_cat(at::full({1}, g_rank, at::kLong));
  for (int i = 0; i < spec.size(); ++i) {
    check(ranks[i].item<std::int64_t>() == spec.ranks[i], "all_gather order" + where);
  }

  std::int64_t rank_sum = 0;
  for (int r : spec.ranks) rank_sum += r;
  std::vector<at::Tensor> tensors{at::full({3}, static_cast<double>(g_rank), at::kDouble),
                                  at::ones({2, 2}, at::kLong),
                                  at::full({5}, 0.5f * static_cast<float>(g_rank), at::kFloat)};
  c.all_reduce_sum(tensors);
  check(tensors[0].equal(at::full({3}, static_cast<double>(rank_sum), at::kDouble)),
        "all_reduce_sum double" + where);
  check(tensors[1].equal(at::full({2, 2}, spec.size(), at::kLong)), "all_reduce_sum long" + where);
  check(tensors[2].allclose(at::full({5}, 0.5f * static_cast<float>(rank_sum), at::kFloat)),
        "all_reduce_sum float" + where);

  // Row i of every member holds 100 * global_rank + i.
  const std::int64_t rows = 2 * spec.size();
  const at::Tensor input = at::arange(rows, at::kDouble).view({rows, 1}) + 100.0 * g_rank;
  const at::Tensor chunk = c.reduce_scatter_sum(input);
  const at::Tensor expected =
      at::arange(2 * spec.group_rank, 2 * spec.group_rank + 2, at::kDouble).view({2, 1}) *
          spec.size() +
      100.0 * static_cast<double>(rank_sum);
  check(chunk.equal(expected), "reduce_scatter_sum" + where);

  at::Tensor b = at::full({4}, static_cast<double>(g_rank), at::kDouble);
  c.broadcast(b, spec.size() - 1);
  check(b.equal(at::full({4}, static_cast<double>(spec.ranks.back()), at::kDouble)),
        "broadcast" + where);

  c.barrier();
  const auto bytes = c.all_gather_bytes(
      std::vector<std::uint8_t>(spec.group_rank + 1, static_cast<std::uint8_t>(g_rank)));
  for (int i = 0; i < spec.size(); ++i) {
    check(bytes[i] == std::vector<std::uint8_t>(i + 1, static_cast<std::uint8_t>(spec.ranks[i])),
          "all_gather_bytes" + where);
  }
}

// This process's TCP sockets in state LISTEN bound to an address other than
// loopback, as "address:port" lines read from /proc/net/tcp and tcp6 and
// matched to its own descriptors by inode.
std::vector<std::string> public_listeners() {
  std::set<std::string> own;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) own.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> found;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || own.count(inode) == 0) continue;  // 0A: LISTEN
      const std::string address = local.substr(0, local.find(':'));
      // 127.x.x.x is 0100007F-style (little-endian bytes) in tcp, and
      // ::1 or ::ffff:127.x.x.x in tcp6.
      const bool loopback = address.size() == 8
                                ? address.substr(6, 2) == "7F"
                                : address == "00000000000000000000000001000000" ||
                                      (address.substr(0, 24) == "0000000000000000FFFF0000" &&
                                       address.substr(30, 2) == "7F");
      if (!loopback) found.push_back(std::string(table) + " " + local);
    }
  }
  return found;
}

using fulcrum::comm::GlooOptions;
using fulcrum::comm::ProcessGroups;

// Every rank checks the collectives of the world, CP and DP groups.
int collectives(const GlooOptions&, const ProcessGroups& groups) {
  check_group(*groups.world, groups.layout.world);
  check_group(*groups.cp, groups.layout.cp);
  check_group(*groups.dp, groups.layout.dp);
  groups.world->barrier();
  return 0;
}

// After the rendezvous, while the groups are up: what does this rank listen
// on beyond loopback? Printed, and exit 4 when anything.
int listeners(const GlooOptions&, const ProcessGroups& groups) {
  const std::vector<std::string> found = public_listeners();
  groups.world->barrier();
  for (const std::string& f : found) std::printf("LISTEN %s\n", f.c_str());
  std::fflush(stdout);
  return found.empty() ? 0 : 4;
}

// Every rank meets once; then the last rank stops entering collectives (it
// sleeps past the others' deadline and exits 0). The others' all-reduce must
// time out naming it.
int stall(const GlooOptions& options, const ProcessGroups& groups) {
  groups.world->barrier();
  if (g_rank == options.world_size - 1) {
    std::this_thread::sleep_for(options.op_timeout + std::chrono::milliseconds(3000));
    return 0;
  }
  at::Tensor t = at::ones({4});
  try {
    groups.world->all_reduce_sum(t);
  } catch (const CommError& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    std::fflush(stderr);
    // Rank 0 hosts the store: it stays until the others have read it.
    if (g_rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    return 2;
  }
  check(false, "all_reduce_sum returned although the last rank never joined");
  return 1;
}

// Not a test: what recording progress costs per collective. Prints the mean
// time of a 1-element all-reduce over many rounds on rank 0.
int progress_cost(const GlooOptions& options, const ProcessGroups& groups) {
  const int rounds = 3000;
  at::Tensor t = at::ones({1});
  for (int i = 0; i < 200; ++i) groups.world->all_reduce_sum(t);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) groups.world->all_reduce_sum(t);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      rounds;
  groups.world->barrier();
  if (g_rank == 0) {
    std::printf("%s: %.1f us per all_reduce_sum\n",
                options.record_progress ? "cost_on" : "cost_off", us);
  }
  return 0;
}

// Every pair exchanges one message each way, each rank listing its peers in
// its own order (odd ranks backwards), then ranks 0 and the last exchange
// alone while the others go straight to the barrier.
int point_to_point(const GlooOptions&, const ProcessGroups& groups) {
  fulcrum::comm::Communicator& world = *groups.world;
  const int w = world.size();
  auto message = [](int from, int to) {
    return at::arange(from + to + 1, at::kLong) + 1000 * from + to;
  };
  std::vector<fulcrum::comm::PeerMessage> sends, receives;
  for (int i = 0; i < w; ++i) {
    const int peer = g_rank % 2 == 0 ? i : w - 1 - i;
    if (peer == g_rank) continue;
    sends.push_back({peer, message(g_rank, peer)});
    receives.push_back({peer, at::zeros({g_rank + peer + 1}, at::kLong)});
  }
  world.exchange(sends, receives);
  for (const auto& r : receives) {
    check(at::equal(r.tensor, message(r.peer, g_rank)),
          "message from rank " + std::to_string(r.peer) + " on rank " + std::to_string(g_rank));
  }
  if (g_rank == 0 || g_rank == w - 1) {
    const int peer = w - 1 - g_rank;
    at::Tensor got = at::zeros({3}, at::kDouble);
    if (g_rank == 0) {
      world.send(at::full({3}, 7.5, at::kDouble), peer);
      world.recv(got, peer);
    } else {
      world.recv(got, peer);
      world.send(at::full({3}, 7.5, at::kDouble), peer);
    }
    check(at::equal(got, at::full({3}, 7.5, at::kDouble)), "send/recv pair");
  }
  world.barrier();
  return 0;
}

// Rank 1 never sends; rank 0's receive must end after 1 s naming it.
int p2p_timeout(const GlooOptions&, const ProcessGroups& groups) {
  if (g_rank != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    return 0;
  }
  at::Tensor t = at::zeros({4});
  groups.world->recv(t, 1, std::chrono::milliseconds(1000));
  check(false, "recv returned although rank 1 never sent");
  return 1;
}

// Rank 1 skips the collective; rank 0's all-reduce must end with a timeout
// error after 1 s, not hang.
int op_timeout(const GlooOptions&, const ProcessGroups& groups) {
  if (g_rank != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    return 0;
  }
  at::Tensor t = at::ones({4});
  groups.world->all_reduce_sum(t, std::chrono::milliseconds(1000));
  check(false, "all_reduce_sum returned although rank 1 never joined");
  return 1;
}

using Scenario = int (*)(const GlooOptions&, const ProcessGroups&);

Scenario find_scenario(const std::string& name) {
  static const std::map<std::string, Scenario> scenarios = {
      {"collectives", collectives}, {"listeners", listeners},    {"stall", stall},
      {"cost_on", progress_cost},   {"cost_off", progress_cost}, {"p2p", point_to_point},
      {"p2p_timeout", p2p_timeout}, {"op_timeout", op_timeout}};
  const auto it = scenarios.find(name);
  return it == scenarios.end() ? nullptr : it->second;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s <scenario> <dp> <cp> <rendezvous_ms> <op_ms>\n", argv[0]);
    return 3;
  }
  const std::string scenario = argv[1];
  at::set_num_threads(1);
  auto options = GlooOptions::from_env(std::atoi(argv[2]), std::atoi(argv[3]));
  if (!options) {
    std::fprintf(stderr, "ERROR: %s\n", options.status().message().c_str());
    return 3;
  }
  options->rendezvous_timeout = std::chrono::milliseconds(std::atol(argv[4]));
  options->op_timeout = std::chrono::milliseconds(std::atol(argv[5]));
  options->record_progress = scenario != "cost_off";
  g_rank = options->rank;
  try {
    const ProcessGroups groups = fulcrum::comm::init_gloo_process_groups(*options);
    if (const Scenario run = find_scenario(scenario)) return run(*options, groups);
    check(false, "unknown scenario or rendezvous unexpectedly succeeded: " + scenario);
  } catch (const CommError& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    std::fflush(stderr);
    return 2;
  }
  return 1;
}
