// What the run pricing (slot_runs.cpp) and its exchange floor
// (slot_runs_exchange.cpp) share inside the core: one plan's counts, the
// per-thread working buffers, and the exchange totals. Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/cp_types.h"

namespace fulcrum::detail {

using Interval = std::pair<std::int64_t, std::int64_t>;

// One holder of a key block: a member and its real tokens there. Made
// unset: the counting writes every entry before any is read.
struct HolderEntry {
  HolderEntry() {}  // NOLINT(modernize-use-equals-default): leaves the fields unset
  HolderEntry(std::int32_t m, std::int64_t n) : member(m), tokens(n) {}
  std::int32_t member;
  std::int64_t tokens;
};

// Who holds the real tokens of every key block: block k's holders are
// entries [offset[k], offset[k + 1]) of (member, tokens), members ascending.
struct Holders {
  std::vector<std::int64_t> offset;
  std::vector<HolderEntry> entries;
};

// What the floor and the exact price of one run plan share: the members'
// tokens and tiles, the holders of every key block and the key blocks each
// member touches, each counted once.
struct SlotRunsCounts {
  std::vector<RankWork> work;
  // Per member, its full tiles (work_model.h); the rest of its tiles are
  // partial. Counted only under a profile that prices partial tiles
  // (partial_tile_seconds != 0); under one that does not, empty: none
  // partial, the same price, at no cost to count.
  std::vector<std::int64_t> full;
  // The holders are counted from the plan's runs on first need
  // (slot_runs.cpp's holder_counts and holders_of): many plans a planner
  // counts (rule 5 at W = 1024 / 4,000 documents: 40%) are ruled out by
  // their compute alone, which needs none, and more by the peers floor,
  // which needs only how many hold each block (the offsets), not who. A
  // plan's counts are counted and priced on one thread.
  mutable Holders holders;
  mutable bool offsets_counted = false;
  mutable bool entries_counted = false;
  std::int64_t tokens = 0;  // the row's real tokens, and the block size: what
  std::int64_t block = 1;   // the holders are counted over
  // Member r's merged touched intervals are touched[touched_at[r] ..
  // touched_at[r + 1]); both empty for g = 1.
  std::vector<Interval> touched;
  std::vector<std::size_t> touched_at;

  std::span<const Interval> touched_by(std::size_t r) const {
    return {touched.data() + touched_at[r], touched_at[r + 1] - touched_at[r]};
  }
};

// A member starting (step +1) or stopping (-1) touching key blocks at
// `block` (slot_runs_exchange.cpp).
struct TouchEvent {
  std::int64_t block;
  std::int32_t member;
  std::int32_t step;
};

// Buffers the counting and the floor reuse from one plan to the next on a
// thread (a scheduler counts hundreds of plans an answer): their contents
// never outlive one call, only their capacity.
struct Scratch {
  std::vector<Interval> spans;     // a local block's touched intervals
  std::vector<Interval> all;       // a member's
  std::vector<std::int64_t> fill;  // the holders' counting sort's
  std::vector<TouchEvent> events;
  std::vector<std::int64_t> node_held;  // the exchange sweeps' running sums
  std::vector<std::int64_t> member_held;
  std::vector<std::int32_t> node_touchers;
  std::vector<std::int32_t> inside;
  std::vector<std::int64_t> held_since;  // exchange_totals' per member between events
  std::vector<std::int32_t> holding;     // and the members holding some there
  std::vector<std::int32_t> node;
  std::vector<std::int32_t> seen;
  std::vector<std::int32_t> chunk_most;  // floor_counted's maxima per chunk of blocks
  std::vector<std::int32_t> most;        // its peers per member
  std::vector<double> compute;           // and compute per member
  std::vector<std::vector<std::int32_t>> levels;
};

Scratch& scratch();

// Each member's exchange, totalled without the member-by-member table, split
// by link: the K/V tokens it receives from members on its own node and from
// the others (the real tokens of the key blocks it touches, less its own
// there), those it sends to each (its tokens of each block times the other
// members touching that block), and at least how many peers it has (the
// other members touching one block it holds). The totals equal the table's
// sums; the peers are at most the table's.
struct ExchangeTotals {
  std::vector<std::int64_t> near;  // per member: tokens in + out, same node
  std::vector<std::int64_t> far;   // per member: tokens in + out, other nodes
  std::vector<std::int32_t> peers;
};

ExchangeTotals exchange_totals(const SlotRunsCounts& c, const std::vector<std::int32_t>& node);

// The member-by-member table: received[x * a + y] += the tokens active
// member y holds in the key blocks active member x touches (x's own set to
// 0). `index`: each member's place among the a active ones (-1: none);
// `received` a x a, zero on entry.
void received_table(const SlotRunsCounts& c, const std::vector<std::int32_t>& index, std::size_t a,
                    std::int64_t* received);

}  // namespace fulcrum::detail
