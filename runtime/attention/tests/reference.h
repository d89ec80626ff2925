// Independent references for the attention tests: a pair-by-pair mask that
// shares no code with fulcrum::key_range or the tile schedule, dense softmax
// attention in plain ATen ops (autograd gives its gradients), and plans of
// the shapes the strategies produce.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/cp_types.h"

namespace fulcrum::attention::testing {

// allowed[i][j] for the whole row, straight from docs/WORK_MODELS.md.
inline at::Tensor brute_mask(const CpWorkload& w) {
  const std::int64_t n = w.tokens;
  std::vector<std::int64_t> doc(n), start(n);
  std::vector<std::int64_t> lengths = w.doc_lengths;
  if (lengths.empty()) lengths = {n};
  std::int64_t pos = 0;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    for (std::int64_t t = 0; t < lengths[d]; ++t, ++pos) {
      doc[pos] = static_cast<std::int64_t>(d);
      start[pos] = pos - t;
    }
  }
  at::Tensor mask = at::zeros({n, n}, at::kBool);
  auto a = mask.accessor<bool, 2>();
  const std::int64_t b = w.block_size;
  for (std::int64_t q = 0; q < n; ++q) {
    for (std::int64_t k = 0; k < n; ++k) {
      if (doc[q] != doc[k]) continue;
      const std::int64_t i = q - start[q];
      const std::int64_t j = k - start[k];
      bool ok = false;
      switch (w.mask.kind) {
        case MaskKind::kCausal:
          ok = j <= i;
          break;
        case MaskKind::kFull:
          ok = true;
          break;
        case MaskKind::kSliding:
          ok = i - w.mask.param < j && j <= i;
          break;
        case MaskKind::kPrefix:
          ok = j <= i || j < w.mask.param;
          break;
        case MaskKind::kBlockSparse: {
          const auto& bs = w.mask.block_sparse;
          for (std::int64_t e = bs.offsets[q / b]; e < bs.offsets[q / b + 1]; ++e) {
            ok = ok || bs.kv_blocks[e] == k / b;
          }
          break;
        }
      }
      a[q][k] = ok;
    }
  }
  return mask;
}

// Softmax attention over [N, H, D] with an [N, N] mask; rows that see no key
// give zero output. Differentiable.
inline at::Tensor dense_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& allowed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  const at::Tensor qh = q.transpose(0, 1);  // [H, N, D]
  const at::Tensor kh = k.transpose(0, 1);
  const at::Tensor vh = v.transpose(0, 1);
  at::Tensor scores = at::matmul(qh, kh.transpose(1, 2)) * scale;
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  const at::Tensor any = allowed.any(1).view({1, -1, 1});
  // softmax of an all -inf row is NaN: give such rows a harmless 0 score.
  scores = at::where(any, scores, at::zeros_like(scores));
  const at::Tensor p = at::softmax(scores, -1) * any;
  return at::matmul(p, vh).transpose(0, 1);
}

inline ShardPlan finish(ShardPlan plan, const std::string& name) {
  plan.padding = std::count(plan.positions.begin(), plan.positions.end(), kPadPosition);
  plan.strategy_used = name;
  return plan;
}

// Rank r holds [r * S, (r + 1) * S); the tail is padding.
inline ShardPlan contiguous_plan(std::int64_t n, std::int32_t p) {
  ShardPlan plan;
  plan.cp_size = p;
  plan.shard_len = (n + p - 1) / p;
  for (std::int64_t i = 0; i < p * plan.shard_len; ++i) {
    plan.positions.push_back(i < n ? i : kPadPosition);
  }
  return finish(plan, "contiguous");
}

// 2P chunks, rank r holds chunks r and 2P-1-r. Requires n % (2P) == 0.
inline ShardPlan head_tail_plan(std::int64_t n, std::int32_t p) {
  ShardPlan plan;
  plan.cp_size = p;
  const std::int64_t c = n / (2 * p);
  plan.shard_len = 2 * c;
  for (std::int32_t r = 0; r < p; ++r) {
    for (std::int64_t i = 0; i < c; ++i) plan.positions.push_back(r * c + i);
    for (std::int64_t i = 0; i < c; ++i) plan.positions.push_back((2 * p - 1 - r) * c + i);
  }
  return finish(plan, "head_tail");
}

// A random permutation with `extra` pad rows per rank scattered among the
// tokens: the worst case for locality and the padding paths.
inline ShardPlan random_plan(std::int64_t n, std::int32_t p, std::int64_t extra,
                             std::uint32_t seed) {
  ShardPlan plan;
  plan.cp_size = p;
  plan.shard_len = (n + p - 1) / p + extra;
  std::vector<std::int64_t> all(static_cast<std::size_t>(p * plan.shard_len), kPadPosition);
  std::iota(all.begin(), all.begin() + n, 0);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  plan.positions = all;
  return finish(plan, "random");
}

// Whole blocks of B dealt round-robin: local blocks stay aligned, as
// block-based balancers (PTRR-like) produce.
inline ShardPlan block_round_robin_plan(std::int64_t n, std::int32_t p, std::int64_t b) {
  const std::int64_t blocks = (n + b - 1) / b;
  const std::int64_t per_rank = (blocks + p - 1) / p;
  ShardPlan plan;
  plan.cp_size = p;
  plan.shard_len = per_rank * b;
  plan.positions.assign(static_cast<std::size_t>(p * plan.shard_len), kPadPosition);
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t r = blk % p;
    const std::int64_t slot = blk / p;
    for (std::int64_t i = 0; i < b && blk * b + i < n; ++i) {
      plan.positions[r * plan.shard_len + slot * b + i] = blk * b + i;
    }
  }
  return finish(plan, "block_round_robin");
}

// The plan shapes the equivalence tests run: contiguous with a padded tail,
// random with `extra` pad rows per rank (seeded), block round-robin, and
// head-tail where n divides into 2P chunks.
inline std::vector<ShardPlan> plan_shapes(std::int64_t n, std::int32_t p, std::int64_t b,
                                          std::int64_t extra, std::uint32_t seed) {
  std::vector<ShardPlan> plans{contiguous_plan(n, p), random_plan(n, p, extra, seed),
                               block_round_robin_plan(n, p, b)};
  if (n % (2 * p) == 0) plans.push_back(head_tail_plan(n, p));
  return plans;
}

// A row of n tokens packed from `docs` (empty: one document), for P ranks.
inline CpWorkload make_workload(std::int64_t n, std::vector<std::int64_t> docs, MaskSpec mask,
                                std::int64_t b, std::int32_t p) {
  CpWorkload w;
  w.tokens = n;
  w.doc_lengths = std::move(docs);
  w.mask = std::move(mask);
  w.block_size = b;
  w.cp_size = p;
  return w;
}

// A block-sparse mask over ceil(n / b) blocks: the diagonal, the first block
// and a pseudo-random scatter below the diagonal.
inline BlockSparseMask random_block_sparse(std::int64_t n, std::int64_t b, std::uint32_t seed) {
  const std::int64_t blocks = (n + b - 1) / b;
  BlockSparseMask m;
  std::mt19937 rng(seed);
  m.offsets.push_back(0);
  for (std::int64_t qb = 0; qb < blocks; ++qb) {
    for (std::int64_t kb = 0; kb < blocks; ++kb) {
      const bool listed = kb == qb || kb == 0 || (kb < qb && rng() % 3 == 0) || rng() % 11 == 0;
      // Leave some query blocks with nothing at all: rows that see no key.
      if (listed && qb % 7 != 5) m.kv_blocks.push_back(kb);
    }
    m.offsets.push_back(static_cast<std::int64_t>(m.kv_blocks.size()));
  }
  return m;
}

}  // namespace fulcrum::attention::testing
