// Hybrid mode's schedule helpers, free of LibTorch: a slot's row, the
// free single slots, the cost model over the slots a rank has written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/loader.h"
#include "fulcrum/core/schedule.h"

namespace fulcrum::train {

// A schedule fingerprint as 16 hex digits.
std::string hex_fingerprint(std::uint64_t value);

// The slot's row: its pieces' columns in order. A piece is a whole loader
// row (documents longer than data.seq_length were cut there, labels kept)
// or, should a scheduler cut one, part of it.
data::PackedRow slot_row(const ScheduleSlot& slot, const std::vector<const data::PackedRow*>& rows);

// Free single slots (docs/HYBRID_RUNTIME.md section 11): the one-rank slots
// of the waves after the last one holding a multi-rank slot. They move no
// K/V and no slot of another rank waits for them, so any rank may run them.
std::vector<std::size_t> free_single_slots(const Schedule& schedule);

// The cost model over the slots whose plans are written here; another
// rank's slot still by rule is priced as nothing (its members' figures
// zero), which only the step and the other ranks' busy times see: rank 0,
// which reports them, has every slot written.
ScheduleCost price_expanded(const ScheduleRequest& request, const Schedule& schedule);

// The free single slots in claim order: the longest predicted compute first
// (then slot order), the same on every rank.
std::vector<std::size_t> free_slots(const Schedule& schedule, const ScheduleCost& cost);

}  // namespace fulcrum::train
