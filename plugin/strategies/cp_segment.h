// The cost of a run of queries inside one document: its pairs and key
// interval in O(1), shared by the unit costs (cp_units.cpp) and the run
// evaluator (cp_run_plans.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"

namespace fulcrum::cp::detail {

// Pairs and key interval of the queries [a, b), all inside document [db, de).
// Every non-block-sparse mask gives query q one key interval whose ends never
// decrease with q, and whose size is linear in q on at most two pieces split
// at db + param (sliding: the window fills up; prefix: the bidirectional
// prefix ends). So the pairs are trapezoid sums of key_range sizes at the
// piece ends, and the keys of the whole run are [lo(a), hi(b-1)].
struct Segment {
  std::int64_t pairs = 0;
  std::int64_t lo = 0;  // first key of the run's union of key ranges
  std::int64_t hi = 0;  // last key
};

// core's key_range, inlined: the cost loops evaluate it a few times per run
// of queries and an out-of-line call per evaluation costs more than the
// arithmetic. The tests check every cost built on it against core.
inline KeyRange keys_of(const MaskSpec& mask, std::int64_t db, std::int64_t de, std::int64_t q) {
  switch (mask.kind) {
    case MaskKind::kCausal:
      return {db, q};
    case MaskKind::kFull:
      return {db, de - 1};
    case MaskKind::kSliding:
      return {std::max(db, q - mask.param + 1), q};
    case MaskKind::kPrefix:
      // Compared as a distance so that a huge prefix length cannot overflow.
      return {db, mask.param >= de - db ? de - 1 : std::max(q, db + mask.param - 1)};
    case MaskKind::kBlockSparse:
      break;
  }
  return {0, -1};
}

inline std::int64_t linear_piece(const MaskSpec& mask, std::int64_t db, std::int64_t de,
                                 std::int64_t a, std::int64_t b, KeyRange* first, KeyRange* last) {
  *first = keys_of(mask, db, de, a);
  *last = keys_of(mask, db, de, b - 1);
  // Sizes form an arithmetic sequence over [a, b): n * (first + last) is even.
  return (first->size() + last->size()) * (b - a) / 2;
}

inline Segment segment(const MaskSpec& mask, std::int64_t db, std::int64_t de, std::int64_t a,
                       std::int64_t b) {
  KeyRange first;
  KeyRange last;
  Segment out;
  const bool two_pieces = mask.kind == MaskKind::kSliding || mask.kind == MaskKind::kPrefix;
  // The first query of the second piece, clamped to [a, b]; compared as a
  // distance so that a huge prefix length cannot overflow.
  std::int64_t split = a;
  if (two_pieces) split = mask.param >= b - db ? b : std::max(a, db + mask.param);
  if (!two_pieces || split == a || split == b) {
    out.pairs = linear_piece(mask, db, de, a, b, &first, &last);
    out.lo = first.lo;
    out.hi = last.hi;
    return out;
  }
  KeyRange mid_last;
  KeyRange mid_first;
  out.pairs = linear_piece(mask, db, de, a, split, &first, &mid_last) +
              linear_piece(mask, db, de, split, b, &mid_first, &last);
  out.lo = first.lo;
  out.hi = last.hi;
  return out;
}

}  // namespace fulcrum::cp::detail
