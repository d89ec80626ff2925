// Moving a row's sequence buffers (tokens, positions, labels, loss mask,
// document ids, activations) between global order and a CP plan's shards.
// Row-major along dim 0; any trailing shape and dtype.
//
// A plan lists, per rank, shard_len global positions (-1 = pad); rank r's
// shard is the r-th list. Errors are programming errors (wrong sizes) and
// throw std::invalid_argument with one line naming the tensor size and what
// the plan expects.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "fulcrum/cp_types.h"

namespace fulcrum::attention {

// Real tokens of the plan's row: cp_size * shard_len - padding.
std::int64_t plan_tokens(const ShardPlan& plan);

// [N, ...] in global order -> [shard_len, ...]: rank's rows in plan order;
// pad rows are `pad_value` (0 by default; e.g. -100 for ignored labels).
// Differentiable with respect to `full`.
at::Tensor shard(const at::Tensor& full, const ShardPlan& plan, std::int32_t rank,
                 double pad_value = 0.0);

// Every rank's shard concatenated: [cp_size * shard_len, ...], what an
// all-gather of the shards produces.
at::Tensor shard_all(const at::Tensor& full, const ShardPlan& plan, double pad_value = 0.0);

// [cp_size * shard_len, ...] gathered from all ranks (rank-major) -> [N, ...]
// in global order (pad rows dropped). Inverse of shard_all.
at::Tensor unshard(const at::Tensor& gathered, const ShardPlan& plan);

// Index tensors (int64, CPU): the plan's positions of every rank (pads -1),
// and restore[pos] = row of the gathered buffer holding global position pos
// (fulcrum::restore_index).
at::Tensor plan_positions(const ShardPlan& plan);
at::Tensor restore_tensor(const ShardPlan& plan);

}  // namespace fulcrum::attention
