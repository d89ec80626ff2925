// Plan validation and inversion, shared by the plugin's tests and the host,
// which validates every plan a plugin returns before using it.
#pragma once

#include <cstdint>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum {

// A shard holds at most this many entries per row token, plus this many: more
// padding than any strategy needs means the plan is garbage.
inline constexpr std::int64_t kMaxShardFactor = 64;

// A plan is valid when it has cp_size equal shards of shard_len entries, each
// entry is -1 or a position in [0, N), shard_len is at most (N + 1) *
// kMaxShardFactor, every position of [0, N) appears
// exactly once, and `padding` counts the -1 entries. The message names the
// first violation (rank, index, value).
Status validate_plan(const CpWorkload& workload, const ShardPlan& plan);

// restore[pos] = index into plan.positions that holds global position pos, for
// pos in [0, N): gathering the sharded buffer at restore undoes the sharding.
// Requires a valid plan.
std::vector<std::int64_t> restore_index(const ShardPlan& plan, std::int64_t tokens);

}  // namespace fulcrum
