// fulcrum-calibrate: the LibTorch side of `fulcrum calibrate`. It measures,
// on this machine, what the step-time cost model's coefficients stand for and
// prints each measurement as one line "@calibrate {json}" on stdout for the
// CLI to fit (the CLI stays LibTorch-free, as with fulcrum-worker).
//
//   fulcrum-calibrate compute --repetitions R
//     The runtime's own blocked attention (runtime/attention), forward then
//     backward, on rows of several shapes whose ranks differ in tiles and in
//     tokens, so that tiles and tokens can be told apart by the fit.
//   fulcrum-calibrate comm --repetitions R     (two processes: RANK, WORLD_SIZE,
//                                               MASTER_ADDR, MASTER_PORT)
//     c10d Gloo between the two local processes: point-to-point one-way time
//     (half a ping-pong) and all-gather time, over message sizes from 4 KiB
//     to 32 MiB. Rank 0 prints.
//
// Every figure is the median of R repetitions after one warm-up. Exit codes:
// 0 done, 2 bad arguments or environment (one line on stderr), 1 a failure.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/blocked_attention.h"
#include "attention/compute_threads.h"
#include "attention/tile_schedule.h"
#include "comm/directory_store.h"
#include "fulcrum/core/workload.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

// What the runtime's trainer runs: float32, a few heads of a small model.
constexpr std::int64_t kHeads = 4;
constexpr std::int64_t kHeadDim = 64;
constexpr std::int64_t kBlock = 128;

struct UsageFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double seconds_of(const std::function<void()>& fn) {
  const auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void emit(const Json& line) { std::cout << "@calibrate " << line.dump() << std::endl; }

// Contiguous shards of a row of N tokens over P ranks (N divisible by P):
// under a causal mask the ranks' tiles grow with the rank while their tokens
// stay equal, which is what separates the per-tile from the per-token cost.
fulcrum::ShardPlan contiguous_plan(std::int64_t tokens, std::int32_t cp) {
  fulcrum::ShardPlan plan;
  plan.cp_size = cp;
  plan.shard_len = tokens / cp;
  plan.positions.resize(static_cast<std::size_t>(tokens));
  for (std::int64_t i = 0; i < tokens; ++i) plan.positions[static_cast<std::size_t>(i)] = i;
  plan.strategy_used = "contiguous";
  return plan;
}

struct Shape {
  std::int64_t tokens;
  std::int32_t cp;
  const char* mask;
};

int run_compute(int repetitions) {
  // Rows and ranks chosen so that tiles per token vary widely: whole causal
  // rows, their first and last contiguous shards, sliding windows (few tiles
  // per token) and full attention (many).
  const std::vector<Shape> shapes = {
      {1024, 1, "causal"}, {2048, 1, "causal"},      {4096, 4, "causal"},      {4096, 2, "causal"},
      {2048, 2, "full"},   {4096, 1, "sliding:256"}, {8192, 8, "sliding:512"}, {1024, 1, "full"},
  };
  at::manual_seed(7);
  const auto options = at::TensorOptions().dtype(at::kFloat);
  for (const Shape& shape : shapes) {
    fulcrum::CpWorkload workload;
    workload.tokens = shape.tokens;
    workload.doc_lengths = {shape.tokens};
    const auto mask = fulcrum::parse_mask(shape.mask);
    if (!mask) throw std::runtime_error(mask.status().message());
    workload.mask = *mask;
    workload.block_size = kBlock;
    workload.cp_size = shape.cp;
    const fulcrum::ShardPlan plan = contiguous_plan(shape.tokens, shape.cp);
    const at::Tensor k = at::randn({shape.tokens, kHeads, kHeadDim}, options);
    const at::Tensor v = at::randn({shape.tokens, kHeads, kHeadDim}, options);
    // The first and the last rank: fewest and most tiles for the same tokens.
    std::vector<std::int32_t> ranks = {0};
    if (shape.cp > 1) ranks.push_back(shape.cp - 1);
    for (const std::int32_t rank : ranks) {
      auto schedule = fulcrum::attention::make_tile_schedule(workload, plan, rank);
      if (!schedule) throw std::runtime_error(schedule.status().message());
      const at::Tensor q = at::randn({plan.shard_len, kHeads, kHeadDim}, options);
      const at::Tensor dout = at::randn({plan.shard_len, kHeads, kHeadDim}, options);
      std::vector<double> forward, backward;
      for (int i = 0; i <= repetitions; ++i) {
        fulcrum::attention::LocalForward fwd;
        const double f = seconds_of(
            [&] { fwd = fulcrum::attention::local_attention_forward(*schedule, q, k, v); });
        const double b = seconds_of([&] {
          (void)fulcrum::attention::local_attention_backward(*schedule, q, k, v, fwd.out, fwd.lse,
                                                             dout);
        });
        if (i == 0) continue;  // warm-up: allocator and caches
        forward.push_back(f);
        backward.push_back(b);
      }
      emit(Json{{"kind", "compute"},
                {"mask", shape.mask},
                {"tokens_in_row", shape.tokens},
                {"cp", shape.cp},
                {"rank", rank},
                {"tiles", schedule->tiles},
                {"tokens", plan.shard_len},
                {"forward_seconds", median(forward)},
                {"backward_seconds", median(backward)}});
    }
  }
  emit(Json{{"kind", "compute_shape"},
            {"heads", kHeads},
            {"head_dim", kHeadDim},
            {"block_size", kBlock},
            {"dtype", "float32"},
            {"threads", at::get_num_threads()}});
  return 0;
}

int env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    throw UsageFailure(std::string(name) + " is not set; 'fulcrum calibrate' starts the two " +
                       "comm processes with it, run that instead");
  }
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 65535) {
    throw UsageFailure(std::string(name) + "='" + text + "' is not a small non-negative integer");
  }
  return static_cast<int>(value);
}

void wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work->wait(std::chrono::milliseconds(120000))) {
    throw std::runtime_error("a Gloo operation did not complete within 120 s");
  }
}

int run_comm(int repetitions) {
  const int rank = env_int("RANK");
  const int world = env_int("WORLD_SIZE");
  const int port = env_int("MASTER_PORT");
  const char* addr = std::getenv("MASTER_ADDR");
  if (world != 2) throw UsageFailure("WORLD_SIZE=" + std::to_string(world) + "; comm needs 2");
  // Started by fulcrum calibrate's launcher: the two ranks meet in its
  // private directory, and nothing listens on the network.
  c10::intrusive_ptr<c10d::Store> store;
  if (const char* dir = std::getenv(fulcrum::comm::kRendezvousDirVariable); dir && *dir) {
    auto opened = fulcrum::comm::DirectoryStore::open(dir, std::chrono::seconds(60));
    if (!opened) throw UsageFailure(opened.status().message());
    store = std::move(opened).value();
  } else {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(port);
    store_options.isServer = rank == 0;
    store_options.numWorkers = world;
    store_options.timeout = std::chrono::seconds(60);
    store = c10::make_intrusive<c10d::TCPStore>(addr ? addr : "127.0.0.1", store_options);
  }
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 2;
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
  const int peer = 1 - rank;

  for (std::int64_t bytes = 4096; bytes <= (32LL << 20); bytes *= 8) {
    std::vector<at::Tensor> buffer = {at::ones({bytes / 4}, at::kFloat)};
    std::vector<double> one_way;
    for (int i = 0; i <= repetitions; ++i) {
      const double round_trip = seconds_of([&] {
        if (rank == 0) {
          wait(group->send(buffer, peer, 0));
          wait(group->recv(buffer, peer, 1));
        } else {
          wait(group->recv(buffer, peer, 0));
          wait(group->send(buffer, peer, 1));
        }
      });
      if (i > 0) one_way.push_back(round_trip / 2);
    }
    if (rank == 0) emit(Json{{"kind", "p2p"}, {"bytes", bytes}, {"seconds", median(one_way)}});

    std::vector<at::Tensor> input = {at::ones({bytes / 4}, at::kFloat)};
    std::vector<std::vector<at::Tensor>> output(1);
    for (int r = 0; r < world; ++r) output[0].push_back(at::empty({bytes / 4}, at::kFloat));
    std::vector<double> gather;
    for (int i = 0; i <= repetitions; ++i) {
      wait(group->barrier());
      const double t = seconds_of([&] { wait(group->allgather(output, input)); });
      if (i > 0) gather.push_back(t);
    }
    // bytes: what each rank contributes; each receives (world - 1) x bytes.
    if (rank == 0) {
      emit(Json{
          {"kind", "all_gather"}, {"bytes", bytes}, {"ranks", world}, {"seconds", median(gather)}});
    }
  }
  wait(group->barrier());
  return 0;
}

int run(int argc, char** argv) {
  const std::string usage =
      "usage: fulcrum-calibrate compute|comm --repetitions R (started by 'fulcrum calibrate')";
  if (argc != 4 || std::string(argv[2]) != "--repetitions") throw UsageFailure(usage);
  char* end = nullptr;
  const long repetitions = std::strtol(argv[3], &end, 10);
  if (*end != '\0' || repetitions < 1 || repetitions > 1000) {
    throw UsageFailure(std::string("--repetitions must be an integer from 1 to 1000, got '") +
                       argv[3] + "'");
  }
  // One thread: the figures are per rank, and ranks on one host share its
  // cores.
  fulcrum::attention::set_compute_threads(1);
  const std::string mode = argv[1];
  if (mode == "compute") return run_compute(static_cast<int>(repetitions));
  if (mode == "comm") return run_comm(static_cast<int>(repetitions));
  throw UsageFailure(usage);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageFailure& e) {
    std::fprintf(stderr, "fulcrum-calibrate: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::string text = e.what();
    text = text.substr(0, text.find('\n'));  // c10 appends a backtrace
    std::fprintf(stderr, "fulcrum-calibrate: %s\n", text.c_str());
    return 1;
  }
}
