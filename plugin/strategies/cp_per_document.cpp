// Head-tail applied to every packed document instead of to the row: each
// document is cut into 2P chunks and rank r takes chunks r and 2P-1-r, which
// balances attention pairs under document-causal masks. Two variants:
//   * per_document_padded — Megatron / Transformer Engine THD layout: each
//     document is padded to a multiple of 2P so its chunks are equal;
//   * per_document — no per-document padding: chunk sizes differ by at most
//     one token and only the row is padded, by fewer than P tokens.
// Both cut short documents into chunks far smaller than a kernel tile, which
// is the tile waste the tiles work model exposes.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

// An empty doc_lengths means one document covering the row.
std::vector<std::int64_t> documents_of(const CpWorkload& workload) {
  if (workload.doc_lengths.empty()) return {workload.tokens};
  return workload.doc_lengths;
}

}  // namespace

Result<ShardPlan> plan_per_document_padded(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  const std::int32_t p = workload.cp_size;
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(p);
  const std::vector<std::int64_t> docs = documents_of(workload);

  // A document of L tokens becomes 2P chunks of ceil(L/2P) slots, two per
  // rank; so every rank holds 2*ceil(L/2P) slots of it and shards are equal
  // by construction.
  std::int64_t shard = 0;
  for (std::int64_t length : docs) shard += 2 * ceil_div(length, chunks);

  ShardPlan plan = padded_plan(workload, "per_document_padded", shard);

  std::vector<std::int64_t> fill(static_cast<std::size_t>(p), 0);
  std::int64_t doc_start = 0;
  for (std::int64_t length : docs) {
    const std::int64_t chunk = ceil_div(length, chunks);
    for (std::int32_t r = 0; r < p; ++r) {
      std::int64_t* out = plan.positions.data() + r * shard + fill[r];
      for (const std::int64_t c : {static_cast<std::int64_t>(r), chunks - 1 - r}) {
        // The padded document's slots past its end are pad tokens, as in the
        // THD layout: they sit at the tail of the document's last chunks.
        for (std::int64_t t = 0; t < chunk; ++t) {
          const std::int64_t local = c * chunk + t;
          *out++ = local < length ? doc_start + local : kPadPosition;
        }
      }
      fill[r] += 2 * chunk;
    }
    doc_start += length;
  }
  finish_plan(workload, plan);
  return plan;
}

Result<ShardPlan> plan_per_document(const CpWorkload& workload) {
  if (Status status = validate_workload(workload); !status) return status;
  const std::int64_t n = workload.tokens;
  const std::int32_t p = workload.cp_size;
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(p);
  const std::vector<std::int64_t> docs = documents_of(workload);

  const std::int64_t shard = ceil_div(n, p);
  ShardPlan plan = padded_plan(workload, "per_document", shard);

  // A document of L = 2P*q + e tokens has e chunks of q+1 tokens. The e extra
  // tokens go to ranks in round-robin order continued across documents (the
  // rotation), so over the row every rank receives floor or ceil of the total
  // extras: real-token counts differ by at most one, the largest is ceil(N/P)
  // and the row needs fewer than P pad tokens. Since e < 2P a rank gets at
  // most two extras per document: the first widens its head chunk r, the
  // second its tail chunk 2P-1-r.
  std::vector<std::int64_t> fill(static_cast<std::size_t>(p), 0);
  std::vector<std::int64_t> size(static_cast<std::size_t>(chunks));
  std::vector<std::int64_t> start(static_cast<std::size_t>(chunks));
  std::int64_t rotation = 0;  // the rank that receives the next extra token
  std::int64_t doc_start = 0;
  for (std::int64_t length : docs) {
    const std::int64_t base = length / chunks;
    const std::int64_t extras = length % chunks;
    std::fill(size.begin(), size.end(), base);
    for (std::int64_t e = 0; e < extras; ++e) {
      const std::int64_t r = (rotation + e) % p;
      const std::int64_t c = size[r] == base ? r : chunks - 1 - r;
      ++size[c];
    }
    rotation = (rotation + extras) % p;
    // Chunks tile the document in chunk order.
    std::int64_t offset = doc_start;
    for (std::int64_t c = 0; c < chunks; ++c) {
      start[c] = offset;
      offset += size[c];
    }
    for (std::int32_t r = 0; r < p; ++r) {
      std::int64_t* out = plan.positions.data() + r * shard + fill[r];
      for (const std::int64_t c : {static_cast<std::int64_t>(r), chunks - 1 - r}) {
        for (std::int64_t t = 0; t < size[c]; ++t) *out++ = start[c] + t;
        fill[r] += size[c];
      }
    }
    doc_start += length;
  }
  finish_plan(workload, plan);
  return plan;
}

}  // namespace fulcrum::cp
