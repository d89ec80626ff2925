#include "fulcrum/core/work_model.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace fulcrum {
namespace {

// sum_{i=a}^{b} (i + 1), 0 when b < a.
std::int64_t sum_plus_one(std::int64_t a, std::int64_t b) {
  if (b < a) return 0;
  return (a + b + 2) * (b - a + 1) / 2;
}

// Allowed pairs of the document-local queries ia..ib (inclusive) of a
// document of `len` tokens: the sum of their key-range sizes, in closed form
// so that cost is per run of queries, not per query.
std::int64_t run_pairs(const MaskSpec& mask, std::int64_t len, std::int64_t ia, std::int64_t ib) {
  switch (mask.kind) {
    case MaskKind::kCausal:
      return sum_plus_one(ia, ib);
    case MaskKind::kFull:
      return (ib - ia + 1) * len;
    case MaskKind::kSliding: {
      // size(i) = min(i + 1, W): grows until i = W - 1, then stays W.
      const std::int64_t w = mask.param;
      const std::int64_t grow_end = std::min(ib, w - 2);
      const std::int64_t flat_begin = std::max(ia, w - 1);
      return sum_plus_one(ia, grow_end) + (ib >= flat_begin ? (ib - flat_begin + 1) * w : 0);
    }
    case MaskKind::kPrefix: {
      // size(i) = max(i + 1, min(L, len)): flat over the prefix, then causal.
      const std::int64_t lc = std::min(mask.param, len);
      const std::int64_t flat_end = std::min(ib, lc - 1);
      const std::int64_t flat = flat_end >= ia ? (flat_end - ia + 1) * lc : 0;
      return flat + sum_plus_one(std::max(ia, lc), ib);
    }
    case MaskKind::kBlockSparse:
      break;
  }
  return 0;
}

// The set of key blocks touched by the queries of one local query block.
// Dense masks add intervals of key blocks; block-sparse masks add single
// blocks, deduplicated with a stamp per key block.
class TileUnion {
 public:
  explicit TileUnion(std::int64_t num_key_blocks, bool sparse) {
    if (sparse) stamp_.assign(static_cast<std::size_t>(num_key_blocks), -1);
  }

  void start(std::int64_t id) {
    id_ = id;
    intervals_.clear();
    sorted_ = true;
    sparse_count_ = 0;
  }

  void add_interval(std::int64_t lo, std::int64_t hi) {
    if (!intervals_.empty() && lo < intervals_.back().first) sorted_ = false;
    intervals_.emplace_back(lo, hi);
  }

  void add_block(std::int64_t kb) {
    if (stamp_[kb] != id_) {
      stamp_[kb] = id_;
      ++sparse_count_;
    }
  }

  std::int64_t count() {
    if (intervals_.empty()) return sparse_count_;
    if (!sorted_) std::sort(intervals_.begin(), intervals_.end());
    std::int64_t total = 0;
    std::int64_t cur_lo = intervals_[0].first;
    std::int64_t cur_hi = intervals_[0].second;
    for (std::size_t i = 1; i < intervals_.size(); ++i) {
      const auto [lo, hi] = intervals_[i];
      if (lo <= cur_hi) {
        cur_hi = std::max(cur_hi, hi);
      } else {
        total += cur_hi - cur_lo + 1;
        cur_lo = lo;
        cur_hi = hi;
      }
    }
    return total + (cur_hi - cur_lo + 1) + sparse_count_;
  }

 private:
  std::vector<std::pair<std::int64_t, std::int64_t>> intervals_;
  std::vector<std::int64_t> stamp_;
  std::int64_t id_ = 0;
  std::int64_t sparse_count_ = 0;
  bool sorted_ = true;
};

// Work of runs of consecutive global positions. A run lies in one document
// and, for block-sparse masks, in one global query block.
class RunCounter {
 public:
  explicit RunCounter(const CpWorkload& w)
      : w_(w),
        layout_(w),
        num_blocks_(ceil_div(w.tokens, w.block_size)),
        sparse_(w.mask.kind == MaskKind::kBlockSparse),
        tiles_(num_blocks_, sparse_) {}

  std::int64_t num_blocks() const { return num_blocks_; }

  // Starts a new local query block (tile row).
  void start_block(std::int64_t id) {
    tiles_.start(id);
    full_ = FullTileEnds();
  }
  std::int64_t block_tiles() { return tiles_.count(); }
  // Its full tiles (none for block-sparse masks).
  std::int64_t block_full_tiles() { return full_.take(w_.block_size); }

  // Where the run starting at q must end (exclusive): the end of its document
  // and, for block-sparse masks, of its global query block.
  std::int64_t run_limit(std::int64_t q) {
    locate(q);
    std::int64_t limit = doc_end_;
    if (sparse_) limit = std::min(limit, (q / w_.block_size + 1) * w_.block_size);
    return limit;
  }

  // Adds the queries [qa, qb] (inclusive; within run_limit(qa)); returns pairs.
  std::int64_t add_run(std::int64_t qa, std::int64_t qb) {
    const std::int64_t b = w_.block_size;
    if (!sparse_) {
      const KeyRange first = key_range(w_.mask, doc_begin_, doc_end_, qa);
      const KeyRange last = key_range(w_.mask, doc_begin_, doc_end_, qb);
      tiles_.add_interval(first.lo / b, last.hi / b);
      full_.add(qb - qa + 1, first, last);
      return run_pairs(w_.mask, doc_end_ - doc_begin_, qa - doc_begin_, qb - doc_begin_);
    }
    const auto& bs = w_.mask.block_sparse;
    const std::int64_t qblock = qa / b;
    std::int64_t keys = 0;
    for (std::int64_t i = bs.offsets[qblock]; i < bs.offsets[qblock + 1]; ++i) {
      const std::int64_t kb = bs.kv_blocks[i];
      const std::int64_t lo = std::max(kb * b, doc_begin_);
      const std::int64_t hi = std::min({(kb + 1) * b, doc_end_, w_.tokens});
      if (hi > lo) {
        keys += hi - lo;
        tiles_.add_block(kb);
      }
    }
    return keys * (qb - qa + 1);
  }

 private:
  void locate(std::int64_t q) {
    if (q >= doc_begin_ && q < doc_end_) return;
    const std::int64_t d = layout_.doc_of(q);
    doc_begin_ = layout_.doc_begin(d);
    doc_end_ = layout_.doc_end(d);
  }

  const CpWorkload& w_;
  RowLayout layout_;
  std::int64_t num_blocks_;
  bool sparse_;
  TileUnion tiles_;
  FullTileEnds full_;  // the current block's, dense masks only
  std::int64_t doc_begin_ = 0;
  std::int64_t doc_end_ = 0;
};

}  // namespace

std::vector<RankWork> compute_work(const CpWorkload& w, const ShardPlan& plan,
                                   std::vector<std::int64_t>* full_tiles) {
  std::vector<RankWork> work(static_cast<std::size_t>(plan.cp_size));
  if (full_tiles) full_tiles->assign(work.size(), 0);
  RunCounter counter(w);
  const std::int64_t b = w.block_size;
  std::int64_t tile_row = 0;
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    const std::int64_t* pos = plan.rank_begin(r);
    RankWork& rw = work[r];
    for (std::int64_t row0 = 0; row0 < plan.shard_len; row0 += b) {
      const std::int64_t row_end = std::min(row0 + b, plan.shard_len);
      counter.start_block(tile_row++);
      bool any = false;
      std::int64_t i = row0;
      while (i < row_end) {
        const std::int64_t q = pos[i];
        if (q == kPadPosition) {
          ++i;
          continue;
        }
        const std::int64_t limit = counter.run_limit(q);
        std::int64_t j = i + 1;
        while (j < row_end && pos[j] == pos[j - 1] + 1 && pos[j] < limit) ++j;
        rw.pairs += counter.add_run(q, pos[j - 1]);
        rw.tokens += j - i;
        any = true;
        i = j;
      }
      if (any) rw.tiles += counter.block_tiles();
      if (full_tiles) (*full_tiles)[static_cast<std::size_t>(r)] += counter.block_full_tiles();
    }
  }
  return work;
}

BlockCosts block_costs(const CpWorkload& w) {
  RunCounter counter(w);
  const std::int64_t nb = counter.num_blocks();
  const std::int64_t b = w.block_size;
  BlockCosts costs;
  costs.pairs.resize(static_cast<std::size_t>(nb));
  costs.tiles.resize(static_cast<std::size_t>(nb));
  for (std::int64_t blk = 0; blk < nb; ++blk) {
    counter.start_block(blk);
    const std::int64_t end = std::min((blk + 1) * b, w.tokens);
    std::int64_t pairs = 0;
    for (std::int64_t q = blk * b; q < end;) {
      const std::int64_t run_end = std::min(end, counter.run_limit(q));
      pairs += counter.add_run(q, run_end - 1);
      q = run_end;
    }
    costs.pairs[blk] = pairs;
    costs.tiles[blk] = counter.block_tiles();
  }
  return costs;
}

std::int64_t total_pairs(const CpWorkload& w) {
  std::int64_t total = 0;
  for (std::int64_t p : block_costs(w).pairs) total += p;
  return total;
}

std::int64_t unsharded_tiles(const CpWorkload& w) {
  std::int64_t total = 0;
  for (std::int64_t t : block_costs(w).tiles) total += t;
  return total;
}

WorkSummary summarize(const CpWorkload& w, const std::vector<RankWork>& work) {
  WorkSummary s;
  if (work.empty()) return s;
  std::int64_t sum_pairs = 0, sum_tiles = 0, max_pairs = 0, max_tiles = 0;
  for (const RankWork& rw : work) {
    sum_pairs += rw.pairs;
    sum_tiles += rw.tiles;
    max_pairs = std::max(max_pairs, rw.pairs);
    max_tiles = std::max(max_tiles, rw.tiles);
  }
  const double ranks = static_cast<double>(work.size());
  if (sum_pairs > 0) s.pairs_imbalance = static_cast<double>(max_pairs) * ranks / sum_pairs;
  if (sum_tiles > 0) s.tiles_imbalance = static_cast<double>(max_tiles) * ranks / sum_tiles;
  const std::int64_t ideal = unsharded_tiles(w);
  if (ideal > 0) s.tiles_over_ideal = static_cast<double>(max_tiles) * ranks / ideal;
  return s;
}

}  // namespace fulcrum
