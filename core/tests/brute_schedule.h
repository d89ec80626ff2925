// Independent recounts of the hybrid-placement contract and its cost model,
// for tests.
//
// Nothing here calls fulcrum's core (schedule_pieces, slot_workload,
// validate_schedule, evaluate_schedule, key_range, compute_work): pieces,
// rows, key sets, bytes and the timeline are re-derived from the definitions
// in docs/HYBRID.md, and tiles come from brute_force.h, which shares nothing
// with the core either.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/schedule_types.h"

namespace fulcrum::cp {

struct BruteMember {
  std::int32_t rank = 0;
  std::int64_t tokens = 0;
  std::int64_t tiles = 0;
  std::int64_t partial_tiles = 0;  // of those, the ones not full
  std::int64_t kv_tokens_in = 0;   // K/V tokens it receives
  std::int64_t kv_tokens_out = 0;  // K/V tokens its peers receive from it
  std::int32_t peers = 0;
  double compute = 0;
  double comm = 0;
};

struct BruteSlot {
  double start = 0;
  double end = 0;
  std::vector<BruteMember> members;
};

struct BruteScheduleCost {
  std::vector<BruteSlot> slots;  // in the schedule's slot order
  std::vector<double> busy;      // per rank
  double step = 0;
  std::int64_t kv_tokens_moved = 0;      // sum of kv_tokens_in
  std::int64_t allgather_kv_tokens = 0;  // sum over slots of (g - 1) x row tokens
};

// Pair by pair (mask from brute_force.h) for rows of up to `pairwise_limit`
// tokens, from key intervals derived here beyond.
BruteScheduleCost brute_schedule_cost(const ScheduleRequest& request, const Schedule& schedule,
                                      std::int64_t pairwise_limit = 2048);

// The contract checked from scratch; the first violation, or "" when valid.
std::string brute_schedule_check(const ScheduleRequest& request, const Schedule& schedule);

}  // namespace fulcrum::cp
