// One rank of a whole hybrid schedule over real Gloo processes, launched by
// gloo_attention_test.cpp. Every rank builds the same batch and schedule
// (replicated, as a loader and the plugin would give them), then runs its own
// slots in wave order: slot attention with point-to-point K/V exchange over
// the world group, checked against dense attention of the slot's row on this
// rank's shard, and the bytes it received against the cost model.
//
//   fulcrum_gloo_slot_worker <scheduler> <world_size> [stall]
//
// With "stall", the second member of the first slot of two or more members
// never runs its slots (it sleeps past the others' deadline and exits 0);
// its peers in that slot must fail within the 2 s exchange deadline with a
// line naming the slot, its wave and the stalled rank.
//
// Exit codes: 0 equal, 1 a check failed ("FAIL:" line), 2 a CommError.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attention/sharding.h"
#include "attention/slot_attention.h"
#include "comm/gloo_communicator.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"
#include "reference.h"
#include "slot_request.h"
#include "strategies/schedule_strategies.h"
#include "test_util/worker_check.h"

namespace {

using namespace fulcrum;
using namespace fulcrum::attention;
using test_util::check;

constexpr std::int64_t kHeads = 2;
constexpr std::int64_t kDim = 4;

// This rank's slots, in wave order.
std::vector<std::size_t> slots_of(const Schedule& schedule, int rank) {
  std::vector<std::size_t> mine;
  for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
    const auto& ranks = schedule.slots[s].ranks;
    if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) mine.push_back(s);
  }
  std::stable_sort(mine.begin(), mine.end(), [&](std::size_t a, std::size_t b) {
    return schedule.slots[a].wave < schedule.slots[b].wave;
  });
  return mine;
}

// Slot `s` on this member: slot attention equals dense attention of the
// slot's row on this member's shard, and it received the predicted bytes.
void check_slot(std::size_t s, const ScheduleSlot& slot, const ScheduleRequest& request,
                const ScheduleCost& cost, const std::shared_ptr<comm::Communicator>& world) {
  const CpWorkload row = slot_workload(request, slot);
  at::manual_seed(900 + static_cast<std::uint64_t>(s));  // same tensors on every member
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({row.tokens, kHeads, kDim}, opts);
  const at::Tensor k = at::randn({row.tokens, kHeads, kDim}, opts);
  const at::Tensor v = at::randn({row.tokens, kHeads, kDim}, opts);
  const at::Tensor weight = at::randn({row.tokens, kHeads, kDim}, opts);

  SlotAttentionOptions slot_options;
  slot_options.label = "slot " + std::to_string(s) + " (wave " + std::to_string(slot.wave) + ")";
  // Both ways of calling the kernel under overlap, slot by slot.
  slot_options.overlap_calls = s % 2 == 0 ? OverlapCalls::kOwnThenRemote : OverlapCalls::kPerPeer;
  auto attention = SlotAttention::create(row, slot.plan, slot.ranks, world, slot_options);
  check(attention.is_ok(), attention.status().message());
  const std::int32_t m = (*attention)->member();
  at::Tensor ql = shard(q, slot.plan, m).requires_grad_();
  at::Tensor kl = shard(k, slot.plan, m).requires_grad_();
  at::Tensor vl = shard(v, slot.plan, m).requires_grad_();
  const at::Tensor out = (*attention)->apply(ql, kl, vl);
  (out * shard(weight, slot.plan, m)).sum().backward();

  const at::Tensor qr = q.clone().requires_grad_();
  const at::Tensor kr = k.clone().requires_grad_();
  const at::Tensor vr = v.clone().requires_grad_();
  const at::Tensor ref = testing::dense_attention(qr, kr, vr, testing::brute_mask(row));
  (ref * weight).sum().backward();
  const std::string where = "slot " + std::to_string(s) + " wave " + std::to_string(slot.wave) +
                            " member " + std::to_string(m);
  const auto diff = [&](const at::Tensor& local, const at::Tensor& expected) {
    return (local.detach() - shard(expected, slot.plan, m)).abs().max().item<double>();
  };
  check(diff(out, ref) < 1e-12, where + ": forward differs from dense attention");
  check(diff(ql.grad(), qr.grad()) < 1e-12, where + ": dq differs");
  check(diff(kl.grad(), kr.grad()) < 1e-12, where + ": dk differs");
  check(diff(vl.grad(), vr.grad()) < 1e-12, where + ": dv differs");
  const std::int64_t predicted = cost.slots[s].members[m].bytes_received;
  check((*attention)->last_forward().bytes_received == predicted,
        where + ": received " + std::to_string((*attention)->last_forward().bytes_received) +
            " bytes, the cost model predicts " + std::to_string(predicted));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::string(argv[3]) == "stall")) {
    std::fprintf(stderr, "usage: %s <scheduler> <world_size> [stall]\n", argv[0]);
    return 3;
  }
  const bool stall = argc == 4;
  at::set_num_threads(1);
  // Every rank is its own DP rank: the world is one pool.
  auto options = comm::GlooOptions::from_env(std::atoi(argv[2]), 1);
  check(options.is_ok(), options.status().message());
  options->rendezvous_timeout = std::chrono::seconds(20);
  options->op_timeout = stall ? std::chrono::seconds(2) : std::chrono::seconds(20);
  const int rank = test_util::worker_rank() = options->rank;
  try {
    const comm::ProcessGroups groups = comm::init_gloo_process_groups(*options);
    // One document that needs three ranks, a long tail of short ones.
    const ScheduleRequest request = testing::slot_request(
        options->world_size, kHeads, kDim, {150, 40, 3, 17, 60, 9, 1, 25, 33, 5, 12, 48, 7, 2});
    const Result<Schedule> schedule = run_schedule_strategy(argv[1], request);
    check(schedule.is_ok(), schedule.status().message());
    const ScheduleCost cost = evaluate_schedule(request, *schedule);

    if (stall) {
      for (const ScheduleSlot& slot : schedule->slots) {
        if (slot.ranks.size() < 2) continue;
        if (slot.ranks[1] == rank) {
          std::printf("rank %d stalls\n", rank);
          std::fflush(stdout);
          std::this_thread::sleep_for(std::chrono::seconds(5));
          return 0;
        }
        break;
      }
    }
    const std::vector<std::size_t> mine = slots_of(*schedule, rank);
    for (const std::size_t s : mine) check_slot(s, schedule->slots[s], request, cost, groups.world);
    std::printf("rank %d ran %zu slots\n", rank, mine.size());
    groups.world->barrier();
    return 0;
  } catch (const comm::CommError& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 2;
  }
}
