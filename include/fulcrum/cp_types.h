// The attention-step contract: what a CP balancer is asked (CpWorkload) and
// what it answers (ShardPlan). Plain data, no LibTorch, header-only.
//
// Positions are global token indices within one row (micro-batch row) of N
// tokens. A plan gives each of the P context-parallel ranks an equal-length
// list of positions; -1 marks padding, a token that computes nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fulcrum {

inline constexpr std::int64_t kPadPosition = -1;
inline constexpr std::int64_t kDefaultBlockSize = 128;

enum class MaskKind : std::int32_t {
  kCausal = 0,       // key j visible to query i iff j <= i (within a document)
  kFull = 1,         // every key of the document
  kSliding = 2,      // i - W < j <= i: the query itself and the W-1 keys before it
  kPrefix = 3,       // j <= i, or j < L: a bidirectional prefix of L tokens, causal after it
  kBlockSparse = 4,  // explicit per-query-block list of KV blocks (row coordinates)
};

// Block-sparse masks in compressed-row form over the row's blocks of
// block_size tokens: query block b may see KV blocks
// kv_blocks[offsets[b] .. offsets[b+1]). Within an allowed tile every pair is
// allowed, subject to the document boundary.
struct BlockSparseMask {
  std::vector<std::int64_t> offsets;    // num_query_blocks + 1 entries, non-decreasing
  std::vector<std::int64_t> kv_blocks;  // each in [0, num_blocks), strictly increasing per row
};

struct MaskSpec {
  MaskKind kind = MaskKind::kCausal;
  std::int64_t param = 0;        // W for kSliding (>= 1), L for kPrefix (>= 0); unused otherwise
  BlockSparseMask block_sparse;  // only for kBlockSparse

  static MaskSpec causal() { return {}; }
  static MaskSpec full() { return {MaskKind::kFull, 0, {}}; }
  static MaskSpec sliding(std::int64_t window) { return {MaskKind::kSliding, window, {}}; }
  static MaskSpec prefix(std::int64_t length) { return {MaskKind::kPrefix, length, {}}; }
};

// One row of one micro-batch.
struct CpWorkload {
  std::int64_t tokens = 0;                // N, the row length
  std::vector<std::int64_t> doc_lengths;  // packed documents in order; empty = one document of N
  MaskSpec mask;                          // applied within each document
  std::int64_t block_size = kDefaultBlockSize;  // B, the kernel tile edge
  std::int32_t cp_size = 1;                     // P
  // For a strategy that takes them (per_document_weighted, ABI 1.5): one
  // weight per plan rank, each finite and >= 0, their sum > 0. Empty: none;
  // a strategy that takes no weights refuses a workload that has them.
  std::vector<double> member_weights{};
};

// Work of one rank under the two work models of docs/WORK_MODELS.md.
struct RankWork {
  std::int64_t tokens = 0;  // real (non-pad) tokens
  std::int64_t pairs = 0;   // allowed (q, k) pairs whose query lives on the rank
  std::int64_t tiles = 0;   // non-empty (local query block, global key block) tiles
};

struct ShardPlan {
  std::int32_t cp_size = 1;
  std::int64_t shard_len = 0;           // tokens per rank, padding included
  std::vector<std::int64_t> positions;  // cp_size * shard_len, rank-major; -1 = pad
  std::string strategy_used;            // the strategy that produced the positions
  std::string fallback_reason;          // empty when the requested strategy served
  std::int64_t padding = 0;             // number of -1 entries
  std::vector<RankWork> work;           // per rank; filled by the planner or the host

  // The positions of rank r: a view into `positions`.
  const std::int64_t* rank_begin(std::int32_t r) const { return positions.data() + r * shard_len; }
  const std::int64_t* rank_end(std::int32_t r) const { return rank_begin(r) + shard_len; }
};

}  // namespace fulcrum
