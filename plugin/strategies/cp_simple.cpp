// The mask-oblivious anchors: contiguous, head-tail (zigzag) and striped
// sharding. They look only at N and P, which is exactly why packed documents
// and non-causal masks unbalance them.
#include <algorithm>
#include <cstdint>
#include <string>

#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

ShardPlan padded_plan(const CpWorkload& workload, const char* name, std::int64_t shard_len) {
  ShardPlan plan;
  plan.cp_size = workload.cp_size;
  plan.shard_len = shard_len;
  plan.positions.assign(static_cast<std::size_t>(workload.cp_size * shard_len), kPadPosition);
  plan.strategy_used = name;
  return plan;
}

}  // namespace

Result<ShardPlan> plan_contiguous(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  const std::int64_t n = workload.tokens;
  const std::int32_t p = workload.cp_size;
  // ceil(N/P) keeps every real token on a rank; with N < P the trailing ranks
  // hold only padding, which is still a valid plan.
  const std::int64_t shard = ceil_div(n, p);
  ShardPlan plan = padded_plan(workload, "contiguous", shard);
  for (std::int32_t r = 0; r < p; ++r) {
    const std::int64_t begin = std::min(r * shard, n);
    const std::int64_t end = std::min(begin + shard, n);
    std::int64_t* out = plan.positions.data() + r * shard;
    for (std::int64_t pos = begin; pos < end; ++pos) *out++ = pos;
  }
  finish_plan(workload, plan);
  return plan;
}

// Rank r owns chunk r and chunk 2P-1-r of C = N/(2P) tokens each, so under a
// single causal document every rank holds exactly 2P*C*C + C pairs: the head
// chunk's deficit is the tail chunk's surplus.
//
// Local order interleaves the two chunks as mirror pairs: head token r*C+t is
// followed by tail token N-1-(r*C+t), i.e. the head ascending and the tail
// descending (N=8, P=2: [0,7,1,6 | 2,5,3,4]). This is the "pair i with N-1-i"
// form of zigzag: the same token sets as chunk-then-chunk, in another order.
// Pairs do not depend on local order, but tiles do: every local query block of
// B rows holds B/2 head and B/2 tail rows, so under a causal mask each block
// reaches as far as its latest tail row and pays for the tail chunk's key
// range. With C >> B, rank r pays about (4P-2r-1)*(C/B)^2 tiles, against
// 2P*(C/B)^2 for every rank in chunk-then-chunk order: rank 0 nearly doubles
// and the tiles imbalance is about (4P-1)/(3P). We keep the interleaved order
// because it is the reference zigzag our known answers are stated in; its
// tiles are what a tile-skipping kernel would compute on this exact layout,
// so the baseline is reported honestly, not flattered.
Result<ShardPlan> plan_head_tail(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  if (auto reason = inapplicable_reason("head_tail", workload)) {
    return unsupported("head_tail cannot shard this row: " + *reason +
                       "; pad the row to a multiple of 2*cp_size or use per_document, balanced "
                       "or auto");
  }
  const std::int64_t n = workload.tokens;
  const std::int32_t p = workload.cp_size;
  const std::int64_t chunk = n / (2 * p);
  ShardPlan plan = padded_plan(workload, "head_tail", 2 * chunk);
  for (std::int32_t r = 0; r < p; ++r) {
    std::int64_t* out = plan.positions.data() + r * 2 * chunk;
    for (std::int64_t t = 0; t < chunk; ++t) {
      const std::int64_t head = r * chunk + t;
      *out++ = head;
      *out++ = n - 1 - head;
    }
  }
  finish_plan(workload, plan);
  return plan;
}

Result<ShardPlan> plan_striped(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  const std::int64_t n = workload.tokens;
  const std::int32_t p = workload.cp_size;
  const std::int64_t shard = ceil_div(n, p);
  ShardPlan plan = padded_plan(workload, "striped", shard);
  for (std::int32_t r = 0; r < p; ++r) {
    std::int64_t* out = plan.positions.data() + r * shard;
    // Ranks r >= N % P run out one stride early; their last slot stays padding.
    for (std::int64_t pos = r; pos < n; pos += p) *out++ = pos;
  }
  finish_plan(workload, plan);
  return plan;
}

}  // namespace fulcrum::cp
