// The units `balanced` deals: the row cut into aligned blocks, or cut back
// from a causal document's end, each with its pairs and tiles counted.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_segment.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp::detail {

namespace {

// x / block for x >= 0, a shift when block is a power of two (the usual
// case): a 64-bit division costs more than the rest of a segment's work.
class BlockOf {
 public:
  explicit BlockOf(std::int64_t block)
      : block_(block),
        shift_((block & (block - 1)) == 0 ? std::countr_zero(static_cast<std::uint64_t>(block))
                                          : -1) {}
  std::int64_t operator()(std::int64_t x) const { return shift_ >= 0 ? x >> shift_ : x / block_; }

 private:
  std::int64_t block_;
  int shift_;
};

// Fills the costs of units whose cuts are set (non-block-sparse masks).
void fill_costs(const CpWorkload& workload, const RowLayout& layout, Units& units) {
  const BlockOf block_of(workload.block_size);
  const std::vector<std::int64_t>& starts = layout.starts();
  const std::size_t count = units.cut.size() - 1;
  // Appended, not sized first: zeroing them would cost more than the
  // capacity tests.
  units.pairs.clear();
  units.tiles.clear();
  units.pairs.reserve(count);
  units.tiles.reserve(count);
  const bool causal = workload.mask.kind == MaskKind::kCausal;
  std::size_t doc = 0;  // document holding the current unit's first query
  for (std::size_t k = 0; k < count; ++k) {
    const std::int64_t begin = units.cut[k];
    const std::int64_t end = units.cut[k + 1];
    while (starts[doc + 1] <= begin) ++doc;
    if (causal && end <= starts[doc + 1]) {
      // Inside one causal document (most units): query q sees [db, q], so
      // the pairs are segment's trapezoid and the keys [db, end - 1].
      const std::int64_t db = starts[doc];
      units.pairs.push_back((begin - db + 1 + end - db) * (end - begin) / 2);
      units.tiles.push_back(block_of(end - 1) - block_of(db) + 1);
      continue;
    }
    std::int64_t pairs = 0;
    std::int64_t tiles = 0;
    std::int64_t covered = -1;  // last key block already counted
    std::size_t d = doc;
    for (std::int64_t x = begin; x < end;) {
      const std::int64_t db = starts[d];
      const std::int64_t de = starts[d + 1];
      const std::int64_t e = std::min(end, de);
      const Segment s = segment(workload.mask, db, de, x, e);
      pairs += s.pairs;
      // Documents come in order, so each interval starts at or after the
      // last counted block: only its new blocks count.
      const std::int64_t lo = std::max(block_of(s.lo), covered + 1);
      const std::int64_t hi = block_of(s.hi);
      if (hi >= lo) {
        tiles += hi - lo + 1;
        covered = hi;
      }
      x = e;
      if (x == de) ++d;
    }
    units.pairs.push_back(pairs);
    units.tiles.push_back(tiles);
  }
}

}  // namespace

Units aligned_units(const CpWorkload& workload, const RowLayout& layout, std::int64_t size) {
  const std::int64_t n = workload.tokens;
  Units units;
  units.size = size;
  const std::int64_t count = ceil_div(n, size);
  units.cut.resize(static_cast<std::size_t>(count) + 1);
  for (std::int64_t k = 0; k < count; ++k) units.cut[static_cast<std::size_t>(k)] = k * size;
  units.cut.back() = n;
  if (workload.mask.kind == MaskKind::kBlockSparse) {
    // No interval structure: core counts each block's listed key blocks.
    BlockCosts costs = block_costs(workload);
    units.pairs = std::move(costs.pairs);
    units.tiles = std::move(costs.tiles);
  } else {
    fill_costs(workload, layout, units);
  }
  return units;
}

Units document_units(const CpWorkload& workload, const RowLayout& layout, std::int64_t size,
                     std::int64_t min_excess) {
  // Below a few tiles a lump is no bigger than the spread of ordinary
  // blocks, and each end-aligned document adds two pieces to the tails.
  constexpr std::int64_t kMinLumpTiles = 4;
  if (workload.mask.kind != MaskKind::kCausal) return aligned_units(workload, layout, size);
  const std::int64_t n = workload.tokens;
  const std::int64_t block = workload.block_size;
  Units units;
  units.size = size;
  units.cut.reserve(static_cast<std::size_t>(ceil_div(n, size) + 2 * layout.num_docs() + 2));
  units.cut.push_back(0);
  const auto add = [&units](std::int64_t c) {
    if (c > units.cut.back()) units.cut.push_back(c);
  };
  // Aligned cuts everywhere except inside the documents that end in a lump,
  // where the cuts step back from the document's end instead.
  std::int64_t x = 0;  // end of the last end-aligned document
  for (std::int64_t d = 0; d < layout.num_docs(); ++d) {
    const std::int64_t db = layout.doc_begin(d);
    const std::int64_t de = layout.doc_end(d);
    const std::int64_t tail = de % size;  // the document's rows in its last aligned unit
    if (tail == 0 || de - db < size) continue;
    // The last aligned block's rows of this document reach every key block
    // of it; compared with a full block of the same document, the rows it
    // lacks would have paid for those tiles with pairs.
    const std::int64_t reach = (de - 1) / block - db / block + 1;
    if (reach * (size - tail) < std::max(min_excess, kMinLumpTiles) * size) continue;
    const std::int64_t grid = db + (de - db) % size;  // first end-aligned cut
    for (std::int64_t m = (x / size + 1) * size; m < grid; m += size) add(m);
    add(grid);
    for (std::int64_t y = grid + size; y <= de; y += size) add(y);
    x = de;
  }
  for (std::int64_t m = (x / size + 1) * size; m < n; m += size) add(m);
  add(n);
  fill_costs(workload, layout, units);
  return units;
}

std::int64_t range_pairs(const CpWorkload& workload, const RowLayout& layout, std::int64_t begin,
                         std::int64_t end) {
  if (begin >= end) return 0;
  std::int64_t doc = layout.doc_of(begin);
  std::int64_t pairs = 0;
  for (std::int64_t x = begin; x < end;) {
    const std::int64_t db = layout.doc_begin(doc);
    const std::int64_t de = layout.doc_end(doc);
    const std::int64_t e = std::min(end, de);
    pairs += segment(workload.mask, db, de, x, e).pairs;
    x = e;
    ++doc;
  }
  return pairs;
}

}  // namespace fulcrum::cp::detail
