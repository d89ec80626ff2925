// The hybrid-placement contract (docs/HYBRID.md, DESIGN.md section 6): what
// a scheduler is asked (ScheduleRequest) and what it answers (Schedule).
// Plain data, no LibTorch, header-only.
//
// The world of W ranks is one pool. For one global batch of documents a
// schedule is a list of slots; a slot is a group of g >= 1 distinct ranks that
// runs one row packed from whole document pieces, sharded over its members by
// an ordinary ShardPlan (g == 1: the identity plan, nothing exchanged), in one
// wave. Every rank runs its slots in increasing wave order and holds at most
// one slot per wave, so no cycle of waits can form.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/cp_types.h"

namespace fulcrum {

// Coefficients of the step-time cost model (docs/HYBRID.md derives the
// bundled ones). Times in seconds, sizes in bytes.
struct CostProfile {
  std::string name;               // "h100_7b", "cpu_gloo", or a file's name
  double tile_seconds = 0;        // a: one (query block, key block) tile, fwd + bwd
  double token_seconds = 0;       // b: everything linear in a rank's tokens, fwd + bwd
  double slot_seconds = 0;        // c: fixed cost of running one slot (launches, sync)
  double kv_bytes_per_token = 0;  // K and V of one token over all layers
  double intra_node_bytes_per_second = 0;
  double inter_node_bytes_per_second = 0;
  double latency_seconds = 0;       // per peer a member exchanges with
  std::int32_t ranks_per_node = 8;  // ranks r and s share a node iff r / n == s / n
  // In [0, 1]: the share of min(compute, exchange) a member's exchange hides
  // behind its compute (docs/HYBRID.md section 2); 0 = none, the sum.
  double exchange_overlap = 0;
  // Per token of the slot's whole row, paid by every member: the work each
  // member does over the row's length N, not its share (the gathered K/V
  // buffer of N rows, its heads-first copies, the dK/dV accumulator;
  // docs/HYBRID.md section 2). 0 = none, the model without it.
  double row_token_seconds = 0;
  // Per partial tile, on top of tile_seconds: a tile is partial when some
  // (query, key) pair of it is masked out or a row of its query block is
  // padding (a causal diagonal, a document edge, a query block that spans
  // runs of the plan); a full tile has B real queries each attending all B
  // keys of the key block. Kernels mask partial tiles element by element;
  // full ones they do not (docs/HYBRID.md section 2). 0 = none, the model
  // without it.
  double partial_tile_seconds = 0;
};

// Which groups a schedule may use, for hosts whose runtime has only some
// communicators (docs/INTEGRATION.md: Megatron-core's dynamic CP builds
// aligned power-of-two groups and the whole world, and runs every rank in
// every micro-batch). Default: no restriction.
struct GroupShapes {
  std::uint64_t sizes = 0;         // bit k: a slot may span 2^k ranks
  bool world = false;              // a slot of all W ranks is allowed (sizes = 0: it alone)
  bool aligned = false;            // a slot of g ranks is ranks [k g, (k + 1) g), in order
  bool every_wave = false;         // every rank holds one slot in every wave 0 .. last
  std::int32_t wave_multiple = 1;  // >= 1; > 1 needs every_wave: the wave count is a multiple
  // sizes = 0 and world false: any size.
  bool sized() const { return sizes != 0 || world; }
  bool restricts() const { return sized() || aligned || every_wave || wave_multiple > 1; }
};

// One global batch over the pool.
struct ScheduleRequest {
  std::vector<std::int64_t> doc_lengths;        // the global batch's documents, each >= 1
  std::int32_t world_size = 1;                  // W
  std::int64_t max_tokens_per_rank = 0;         // T: no rank holds more in one slot
  MaskSpec mask;                                // within each document; not block-sparse
  std::int64_t block_size = kDefaultBlockSize;  // B
  std::int32_t cp_size = 0;                     // for `fixed` only: its CP group size; 0 = choose
  CostProfile profile;
  GroupShapes group_shapes;  // ABI 1.2; the default restricts nothing
  // ABI 1.4: the caller takes a compact answer (docs/PLUGIN_ABI.md): a
  // scheduler may then leave a slot's plan.positions (and work) empty, its
  // plan then by rule: cp_size, shard_len, padding and strategy_used are
  // set, and the positions are exactly what the CP strategy strategy_used
  // plans for slot_workload(request, slot). A scheduler may ignore it.
  bool compact = false;
  // ABI 1.5: the caller of a compact answer also takes slots' member
  // weights (ScheduleSlot::member_weights). false (a 1.4 host): a slot
  // whose rule takes weights is answered with its positions, and then so
  // is every slot.
  bool compact_weights = true;
};

// A run of one document placed in a slot: tokens [offset, offset + length) of
// document `doc`. A document longer than W x T is cut at multiples of W x T
// (the packing rule of docs/PACKING.md); every other document is one piece.
struct DocPiece {
  std::int64_t doc = 0;
  std::int64_t offset = 0;
  std::int64_t length = 0;
};

struct ScheduleSlot {
  std::vector<std::int32_t> ranks;  // g distinct ranks; plan rank i runs on ranks[i]
  std::vector<DocPiece> pieces;     // packed in this order into the slot's row
  std::int32_t wave = 0;
  ShardPlan plan;  // over the row of the pieces' lengths, cp_size == g
  // The weights plan.strategy_used takes (per_document_weighted), one per
  // member, or empty: its rule takes none. slot_workload passes them on.
  std::vector<double> member_weights{};
  // A plan by rule (ScheduleRequest::compact): its positions not written.
  bool compact() const { return plan.positions.empty(); }
};

struct Schedule {
  std::vector<ScheduleSlot> slots;
  std::string strategy_used;
  std::string fallback_reason;  // empty when the requested scheduler served
};

}  // namespace fulcrum
