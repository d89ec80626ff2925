// Hybrid mode's schedule helpers (hybrid_slots.h).
#include "train/hybrid_slots.h"

#include <algorithm>
#include <cstdio>

namespace fulcrum::train {

std::string hex_fingerprint(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The slot's row: its pieces' columns in order. A piece is a whole loader
// row (documents longer than data.seq_length were cut there, labels kept)
// or, should a scheduler cut one, part of it.
data::PackedRow slot_row(const ScheduleSlot& slot,
                         const std::vector<const data::PackedRow*>& rows) {
  data::PackedRow out;
  for (const DocPiece& piece : slot.pieces) {
    const data::PackedRow& row = *rows[static_cast<std::size_t>(piece.doc)];
    const auto b = static_cast<std::ptrdiff_t>(piece.offset);
    const auto e = static_cast<std::ptrdiff_t>(piece.offset + piece.length);
    const auto append = [&](auto& to, const auto& from) {
      to.insert(to.end(), from.begin() + b, from.begin() + e);
    };
    append(out.tokens, row.tokens);
    append(out.labels, row.labels);
    append(out.loss_mask, row.loss_mask);
    append(out.positions, row.positions);
    append(out.document_ids, row.document_ids);
    out.doc_lengths.push_back(piece.length);
    std::int64_t at = 0;  // the row position where range r starts
    for (const data::TokenRange& r : row.pieces) {
      const std::int64_t lo = std::max(at, piece.offset);
      const std::int64_t hi = std::min(at + (r.end - r.begin), piece.offset + piece.length);
      if (lo < hi) out.pieces.push_back({r.sample, r.begin + (lo - at), r.begin + (hi - at)});
      at += r.end - r.begin;
    }
  }
  return out;
}

// Free single slots (docs/HYBRID_RUNTIME.md section 11): the one-rank slots
// of the waves after the last one holding a multi-rank slot. They move no
// K/V and no slot of another rank waits for them, so any rank may run them.
std::vector<std::size_t> free_single_slots(const Schedule& schedule) {
  std::int32_t last_multi = -1;
  for (const ScheduleSlot& slot : schedule.slots) {
    if (slot.ranks.size() > 1) last_multi = std::max(last_multi, slot.wave);
  }
  std::vector<std::size_t> free;
  for (std::size_t i = 0; i < schedule.slots.size(); ++i) {
    const ScheduleSlot& slot = schedule.slots[i];
    if (slot.ranks.size() == 1 && slot.wave > last_multi) free.push_back(i);
  }
  return free;
}

// The cost model over the slots whose plans are written here; another
// rank's slot still by rule is priced as nothing (its members' figures
// zero), which only the step and the other ranks' busy times see: rank 0,
// which reports them, has every slot written.
ScheduleCost price_expanded(const ScheduleRequest& request, const Schedule& schedule) {
  return price_timeline(request, schedule, [&](std::size_t i) {
    const ScheduleSlot& slot = schedule.slots[i];
    if (!slot.compact()) return evaluate_slot(request, slot);
    SlotCost none;
    for (const std::int32_t rank : slot.ranks) none.members.push_back(SlotMemberCost{rank});
    return none;
  });
}

// The free single slots in claim order: the longest predicted compute first
// (then slot order), the same on every rank.
std::vector<std::size_t> free_slots(const Schedule& schedule, const ScheduleCost& cost) {
  std::vector<std::size_t> free = free_single_slots(schedule);
  std::stable_sort(free.begin(), free.end(), [&](std::size_t a, std::size_t b) {
    return cost.slots[a].members[0].compute_seconds > cost.slots[b].members[0].compute_seconds;
  });
  return free;
}

}  // namespace fulcrum::train
