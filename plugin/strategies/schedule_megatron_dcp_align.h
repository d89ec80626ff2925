// megatron_dcp's alignment (schedule_megatron_dcp.cpp decides; this file
// splits its micro-batches as Megatron does where the waves must come in a
// multiple).
//
// Megatron's virtual-pipeline alignment (align_sample_id_groups), applied
// when the request's group_shapes need a wave count that is a multiple of
// wave_multiple (Megatron's microbatch_group_size_per_vp_stage). It works on
// micro-batches as sample_id_groups holds them, a list of ranks, each here
// the index of the group (a list of pieces) it runs or kEmpty; Megatron's
// slice assignments can make that list longer than W, so it is a vector.
#pragma once

#include <cstdint>
#include <vector>

#include "fulcrum/status.h"

namespace fulcrum::megatron {

constexpr std::int32_t kEmpty = -1;
using Ranks = std::vector<std::int32_t>;

struct Run {
  std::int64_t start = 0;
  std::int64_t size = 0;
};

// Runs of consecutive ranks [0, end) running the same group.
std::vector<Run> runs_of(const Ranks& ranks, std::int64_t end);

// align_sample_id_groups: split micro-batches, from the last back (and
// round again), the back half in place and the front half appended, until
// their count is a multiple of `multiple`; kUnsupported where Megatron
// asserts or never returns.
Status align_micro_batches(std::vector<Ranks>& batches, std::int64_t multiple);

}  // namespace fulcrum::megatron
