// One rank's blocked (flash-style) attention: its local queries against the
// whole row's keys in global order, computing only the tiles its
// TileSchedule lists. No communication; cp_attention.h wraps it with the
// all-gather and reduce-scatter of the CP group.
//
// Shapes: q [S, H, D] (S = schedule.shard_len, plan order), k and v
// [N, H, D] (global order); float32 or float64; every head shares the mask.
// Scores are scaled by 1/sqrt(D).
//
// Forward keeps, per query row, a running max m, a running sum l and an
// accumulator rescaled as the max grows (online softmax), so no row of the
// score matrix is ever materialised beyond one chunk. Backward recomputes the
// probabilities of each tile from the saved log-sum-exp L = m + log(l):
//   P = exp(S - L), dV += P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)),
//   dQ += scale * dS K, dK += scale * dS^T Q.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>

#include "attention/tile_schedule.h"

namespace fulcrum::attention {

// How a query block's touched key blocks are grouped into matmuls and which
// of those are masked. The tiles computed, and the numbers, are the same.
enum class Masking {
  // A run of key blocks cut every chunk_keys keys, full and partial tiles
  // together; a chunk holding one partial tile masks all of its tiles.
  kWholeChunks,
  // A run split where its full tiles (TileSchedule::full) begin and end;
  // full stretches cut every chunk_keys keys and computed without a mask,
  // partial ones cut the same way and masked.
  kFullApart,
  // As kFullApart, with each partial tile a masked matmul of its own: the
  // masking is paid per partial tile, the cost model's partial_tile_seconds
  // (docs/HYBRID.md, section 2).
  kPerTile,
};

struct KernelOptions {
  // Keys one matmul covers: consecutive key blocks of one run are computed
  // together, up to this many keys (at least one block). Wider chunks
  // amortise per-call overhead on CPU; the tiles computed are the same.
  std::int64_t chunk_keys = 512;
  Masking masking = Masking::kFullApart;
};

// One matmul's keys [k0, k1): `blocks` key blocks, all full or all partial
// unless the kernel masks whole chunks.
struct Chunk {
  std::int64_t k0 = 0, k1 = 0, blocks = 0;
  bool full = false;
};

// Calls fn(chunk) for the key chunks of local query block qblk, in key
// order, as the kernel computes them (see Masking): each run of key blocks
// split where its full tiles begin and end (at most three stretches:
// partial, full, partial), each stretch cut into pieces of at most
// chunk_keys keys, a partial one into single tiles under kPerTile. A full
// chunk needs no mask, so a partial tile costs its masking and a full one
// does not, as a flash kernel's do. In whole chunks a run is one stretch.
template <typename Fn>
void for_each_chunk(const TileSchedule& s, std::int64_t qblk, const KernelOptions& options,
                    Fn&& fn) {
  const std::int64_t chunk_blocks = std::max<std::int64_t>(1, options.chunk_keys / s.block_size);
  const KeyBlockRun whole =
      options.masking == Masking::kWholeChunks ? KeyBlockRun{0, -1} : s.full[qblk];
  const std::int64_t partial_blocks = options.masking == Masking::kPerTile ? 1 : chunk_blocks;
  const auto cut = [&](std::int64_t first, std::int64_t end, bool full) {
    const std::int64_t step = full ? chunk_blocks : partial_blocks;
    for (std::int64_t kb = first; kb < end; kb += step) {
      const std::int64_t kb_end = std::min(end, kb + step);
      fn(Chunk{kb * s.block_size, std::min(kb_end * s.block_size, s.tokens), kb_end - kb, full});
    }
  };
  for (std::int64_t i = s.run_offsets[qblk]; i < s.run_offsets[qblk + 1]; ++i) {
    const KeyBlockRun& run = s.runs[i];
    const std::int64_t a = std::clamp(whole.first, run.first, run.last + 1);
    const std::int64_t b = std::clamp(whole.last + 1, a, run.last + 1);
    cut(run.first, a, false);
    cut(a, b, true);
    cut(b, run.last + 1, false);
  }
}

// Whether the chunk of rows [r0, r1) and keys [k0, k1) holds a pair the
// mask forbids or a pad row (a block-sparse chunk always counts as masked):
// the kernel builds a mask for it unless the chunk is full.
bool chunk_needs_mask(const TileSchedule& s, std::int64_t r0, std::int64_t r1, std::int64_t k0,
                      std::int64_t k1);

struct LocalForward {
  at::Tensor out;          // [S, H, D]; zero on pad rows and on rows that see no key
  at::Tensor lse;          // [S, H]; log-sum-exp of the scaled scores, -inf where a row sees no key
  std::int64_t tiles = 0;  // (query block, key block) tiles computed, each for every head
  std::int64_t full_tiles = 0;  // of those, full ones computed apart, unmasked (0 in whole chunks)
  std::int64_t masked_chunks = 0;  // matmuls a mask was applied to
};

struct LocalGrads {
  at::Tensor dq;  // [S, H, D]
  at::Tensor dk;  // [N, H, D], global order: this rank's queries' share of every key's gradient
  at::Tensor dv;  // [N, H, D]
  std::int64_t tiles = 0;
  std::int64_t full_tiles = 0;
  std::int64_t masked_chunks = 0;
};

// Throw std::invalid_argument (one line: the tensor, its shape, what is
// expected) on mismatched shapes or dtypes.
LocalForward local_attention_forward(const TileSchedule& schedule, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v,
                                     const KernelOptions& options = {});

LocalGrads local_attention_backward(const TileSchedule& schedule, const at::Tensor& q,
                                    const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                    const at::Tensor& lse, const at::Tensor& dout,
                                    const KernelOptions& options = {});

}  // namespace fulcrum::attention
