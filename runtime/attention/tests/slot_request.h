// The schedule request the slot tests run (slot_attention_test.cpp and the
// Gloo slot worker): causal, blocks of 8, T = 64 tokens per rank, the
// cpu_gloo cost profile with one token's K and V as float64
// (heads x 2 x head_dim x 8 bytes), so the cost model's bytes are the
// bytes the exchanges move.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"

namespace fulcrum::attention::testing {

inline ScheduleRequest slot_request(std::int32_t world_size, std::int64_t heads, std::int64_t dim,
                                    std::vector<std::int64_t> doc_lengths) {
  ScheduleRequest request;
  request.world_size = world_size;
  request.max_tokens_per_rank = 64;
  request.block_size = 8;
  request.mask = MaskSpec::causal();
  request.profile = builtin_cost_profile("cpu_gloo").value();
  request.profile.kv_bytes_per_token = static_cast<double>(heads * 2 * dim * 8);
  request.doc_lengths = std::move(doc_lengths);
  return request;
}

}  // namespace fulcrum::attention::testing
