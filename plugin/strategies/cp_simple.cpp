// The mask-oblivious anchors: contiguous, head-tail (zigzag) and striped
// sharding. They look only at N and P, which is exactly why packed documents
// and non-causal masks unbalance them.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

// The plan `name` of `shard_len` slots a rank, finished: write(r, out) writes
// rank r's positions from its first slot on, and what it leaves is padding.
template <class WriteRank>
ShardPlan plan_by_rank(const CpWorkload& workload, std::string_view name, std::int64_t shard_len,
                       WriteRank write) {
  ShardPlan plan = padded_plan(workload, name, shard_len);
  for (std::int32_t r = 0; r < workload.cp_size; ++r) {
    write(r, plan.positions.data() + r * shard_len);
  }
  finish_plan(workload, plan);
  return plan;
}

constexpr std::string_view kHeadTailAdvice =
    "pad the row to a multiple of 2*cp_size or use per_document, balanced or auto";

}  // namespace

Result<ShardPlan> plan_contiguous(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  const std::int64_t n = workload.tokens;
  // ceil(N/P) keeps every real token on a rank; with N < P the trailing ranks
  // hold only padding, which is still a valid plan.
  const std::int64_t shard = ceil_div(n, workload.cp_size);
  return plan_by_rank(workload, "contiguous", shard, [n, shard](std::int32_t r, std::int64_t* out) {
    const std::int64_t begin = std::min(r * shard, n);
    const std::int64_t end = std::min(begin + shard, n);
    for (std::int64_t pos = begin; pos < end; ++pos) *out++ = pos;
  });
}

// Rank r owns chunk r and chunk 2P-1-r of C = N/(2P) tokens each, so under a
// single causal document every rank holds exactly 2P*C*C + C pairs: the head
// chunk's deficit is the tail chunk's surplus.
//
// Local order is PyTorch's (_HeadTailLoadBalancer in
// torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py):
// the head chunk, then the tail chunk, each ascending (N=8, P=2:
// [0,1,6,7 | 2,3,4,5]; P=1 is the identity). The order matters for tiles,
// not pairs: a local query block of B rows that stays inside one chunk
// reaches only that chunk's key range, so with C >> B every rank pays about
// 2P*(C/B)^2 tiles. Pairing token i with N-1-i inside a block instead would
// make every block reach the tail chunk's keys and nearly double rank 0's
// tiles; that layout is not what PyTorch computes, so it is not the anchor.
Result<ShardPlan> plan_head_tail(const CpWorkload& workload) {
  if (Status status = check_servable("head_tail", workload, kHeadTailAdvice); !status) {
    return status;
  }
  const std::int64_t p = workload.cp_size;
  const std::int64_t chunk = workload.tokens / (2 * p);
  return plan_by_rank(workload, "head_tail", 2 * chunk,
                      [p, chunk](std::int32_t r, std::int64_t* out) {
                        for (const std::int64_t c : {static_cast<std::int64_t>(r), 2 * p - 1 - r}) {
                          for (std::int64_t t = 0; t < chunk; ++t) *out++ = c * chunk + t;
                        }
                      });
}

Result<ShardPlan> plan_striped(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  const std::int64_t n = workload.tokens;
  const std::int32_t p = workload.cp_size;
  return plan_by_rank(workload, "striped", ceil_div(n, p),
                      [n, p](std::int32_t r, std::int64_t* out) {
                        // Ranks r >= N % P run out one stride early; their last slot stays padding.
                        for (std::int64_t pos = r; pos < n; pos += p) *out++ = pos;
                      });
}

}  // namespace fulcrum::cp
