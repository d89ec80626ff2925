// The cost model priced from runs of positions (include/fulcrum/core/
// slot_runs.h): the counts evaluate_slot takes from a position per token,
// taken from runs at block granularity, then the same price_slot_counts.
//
// Why the counts are equal. A member's tiles are, per local query block of B
// entries, the key blocks its queries touch; a query's keys are one interval
// of its document whose ends never fall as the query moves on (every dense
// mask), so the queries of a run inside one document and one local block
// touch [lo(first) / B, hi(last) / B], and the block's tiles are the union of
// those intervals over its pieces of runs. What a member must hold is the
// same union over all its runs; what it receives from member j is j's real
// tokens in those key blocks, counted per (block, member) from the runs'
// overlaps with the blocks. Cost: O(runs + local blocks + holder entries +
// touched intervals x members) (the table's sweep, slot_runs_exchange.cpp).
#include "fulcrum/core/slot_runs.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"
#include "slot_runs_counts.h"

namespace fulcrum {

namespace {

using detail::ExchangeTotals;
using detail::Holders;
using detail::Interval;
using detail::Scratch;
using detail::scratch;
using detail::SlotRunsCounts;

// Appends to `out` the sorted, merged (touching intervals joined) `spans`
// (sorted in place).
void merge_into(std::vector<Interval>& spans, std::vector<Interval>& out) {
  if (!std::is_sorted(spans.begin(), spans.end())) std::sort(spans.begin(), spans.end());
  const std::size_t first = out.size();
  for (const auto& [lo, hi] : spans) {
    if (out.size() > first && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
}

// Key blocks of the union of `spans` (inclusive intervals, any order), of
// two or more.
std::int64_t union_of_many(std::vector<Interval>& spans) {
  if (!std::is_sorted(spans.begin(), spans.end())) std::sort(spans.begin(), spans.end());
  std::int64_t covered = -1;
  std::int64_t count = 0;
  for (const auto& [lo, hi] : spans) {
    const std::int64_t from = std::max(lo, covered + 1);
    if (hi >= from) {
      count += hi - from + 1;
      covered = hi;
    }
  }
  return count;
}

// Key blocks of the union of `spans` (inclusive intervals, any order).
inline std::int64_t union_size(std::vector<Interval>& spans) {
  if (spans.empty()) return 0;
  if (spans.size() == 1) return spans[0].second - spans[0].first + 1;
  return union_of_many(spans);
}

// Joins `keys` to the last of `spans` when the two overlap or touch (true),
// where the caller would append it: the union, and so union_size's and
// merge_into's answers, are the same, and queries that move along one
// document (a run's pieces in order) leave one interval, not one per piece.
inline bool join_last(std::vector<Interval>& spans, Interval keys) {
  if (spans.empty()) return false;
  Interval& last = spans.back();
  if (keys.first > last.second + 1 || last.first > keys.second + 1) return false;
  last = {std::min(last.first, keys.first), std::max(last.second, keys.second)};
  return true;
}

// The key blocks the queries [a, b) of document [db, de) touch (every
// dense mask: neither end of a query's keys falls as the query moves on).
inline Interval piece_keys(const MaskSpec& mask, std::int64_t block, std::int64_t db,
                           std::int64_t de, std::int64_t a, std::int64_t b) {
  return {key_range(mask, db, de, a).lo / block, key_range(mask, db, de, b - 1).hi / block};
}

// The sum over i = 0 .. n - 1 of max(c + i, k).
std::int64_t sum_of_max_rising(std::int64_t c, std::int64_t k, std::int64_t n) {
  const std::int64_t t = std::clamp<std::int64_t>(k - c, 0, n);  // the i with c + i < k
  // t + ... + n - 1 = (n - t)(n + t - 1) / 2; one factor is even, halved
  // first so that no product passes the sum.
  const std::int64_t count = n - t;
  const std::int64_t ends = n + t - 1;
  const std::int64_t rising = count % 2 == 0 ? count / 2 * ends : ends / 2 * count;
  return t * k + count * c + rising;
}

// floor(a / b) for b >= 1, a of either sign.
std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - (a % b < 0 ? 1 : 0); }

// The tiles of n whole local blocks of one document's queries from `from`
// (block i holds queries q = from + iB .. q + B - 1): block i's are
// hi(q + B - 1) / B - lo(q) / B + 1 (piece_keys). Every dense mask's upper
// end is max(query, K) (K = db but for full, de - 1, and prefix, its
// prefix's end), so the blocks' upper ends are max((from + B - 1) / B + i,
// K / B); the lower end is db, or for a sliding window of W
// max(db, q - W + 1), whose block is max(db / B, floor((from - W + 1) / B)
// + i). Sums of those in O(1) where a loop took O(n).
std::int64_t whole_block_tiles(const MaskSpec& mask, std::int64_t b, std::int64_t db,
                               std::int64_t de, std::int64_t from, std::int64_t n) {
  if (mask.kind == MaskKind::kBlockSparse) {
    std::int64_t tiles = 0;
    for (std::int64_t q = from; q < from + n * b; q += b) {
      const Interval keys = piece_keys(mask, b, db, de, q, q + b);
      tiles += keys.second - keys.first + 1;
    }
    return tiles;
  }
  const std::int64_t top = std::max(db, key_range(mask, db, de, db).hi);
  const std::int64_t highs = sum_of_max_rising((from + b - 1) / b, top / b, n);
  const std::int64_t lows = mask.kind == MaskKind::kSliding
                                ? sum_of_max_rising(floor_div(from - mask.param + 1, b), db / b, n)
                                : n * (db / b);
  return highs - lows + n;
}

// The full tiles of those n whole local blocks (compute_work's): block i's
// are the key blocks inside every one of its queries' keys, ceil(lo(q + B -
// 1) / B) .. (hi(q) + 1) / B - 1 for q = from + iB. With hi(q) = max(q, K)
// as above, (hi(q) + 1) / B = max(c + i, (K + 1) / B) for c = (from + 1) /
// B; lo is db (its ceil L), so block i has max(c + i, (K + 1) / B, L) - L.
// For a sliding window of W, K = db <= from, so the upper end is c + i, and
// lo(q + B - 1) = max(db, q + B - W), whose ceil is max(L, s + i) for s =
// ceil((from + B - W) / B): block i has clamp(c - L + i, 0, c - s).
std::int64_t whole_block_full_tiles(const MaskSpec& mask, std::int64_t b, std::int64_t db,
                                    std::int64_t de, std::int64_t from, std::int64_t n) {
  if (mask.kind == MaskKind::kBlockSparse) return 0;
  const std::int64_t low = ceil_div(db, b);
  const std::int64_t c = (from + 1) / b;
  if (mask.kind != MaskKind::kSliding) {
    const std::int64_t top = (key_range(mask, db, de, db).hi + 1) / b;
    return sum_of_max_rising(c, std::max(top, low), n) - n * low;
  }
  // Below low - n, s gives what low - n gives (no block has a full tile
  // from the clamp's upper end), without the sums' products overflowing.
  const std::int64_t s = std::max(ceil_div(from + b - mask.param, b), low - n);
  if (c <= s) return 0;
  // clamp(x, 0, d) = max(x, 0) - max(x - d, 0) for d >= 0.
  return sum_of_max_rising(c - low, 0, n) - sum_of_max_rising(s - low, 0, n);
}

// Walks one member's runs in local order, cut at local blocks of B entries
// and at document ends: calls piece(a, b, doc, local_block) for the real
// queries [a, b) of one document inside one local block, and whole(a, n,
// doc, local_block) for n >= 1 local blocks from local_block on that one
// run fills with queries a .. a + nB - 1 of one document (B each, in order;
// what n calls of piece would have been).
template <typename Piece, typename Whole>
void walk_member(const RowLayout& layout, std::int64_t block, const RunShardPlan& plan,
                 std::int32_t r, Piece&& piece, Whole&& whole) {
  std::int64_t local = 0;  // entries of the member's order before the current run
  std::int64_t doc = -1;
  for (std::int64_t i = plan.rank_offset[r]; i < plan.rank_offset[r + 1]; ++i) {
    const PositionRun& run = plan.runs[static_cast<std::size_t>(i)];
    if (run.begin == kPadPosition || run.length == 0) {
      local += run.length;
      continue;
    }
    const std::int64_t end = run.begin + run.length;
    // The document the last run ended in, or the one after it, often holds
    // this run's start (runs of one member tend to ascend).
    if (doc < 0 || doc >= layout.num_docs() || layout.doc_end(doc) <= run.begin ||
        layout.doc_begin(doc) > run.begin) {
      doc = layout.doc_of(run.begin);
    }
    for (std::int64_t x = run.begin; x < end;) {
      // Entries left in the current local block; compared as a distance so
      // that a B near int64's end cannot overflow.
      const std::int64_t room = block - local % block;
      if (room == block) {
        const std::int64_t n = std::min(end - x, layout.doc_end(doc) - x) / block;
        if (n > 0) {
          whole(x, n, doc, local / block);
          local += n * block;
          x += n * block;
          if (x == layout.doc_end(doc)) ++doc;
          continue;
        }
      }
      const std::int64_t piece_end = x + std::min(end - x, room);
      for (std::int64_t y = x; y < piece_end;) {
        const std::int64_t de = layout.doc_end(doc);
        const std::int64_t e = std::min(piece_end, de);
        piece(y, e, doc, local / block);
        y = e;
        if (y == de) ++doc;
      }
      local += piece_end - x;
      x = piece_end;
    }
  }
}

// Calls edge(k, m, n) for the n > 0 real tokens member m's runs hold in
// key block k, for the first and last blocks each run overlaps, and
// inner(first, last, m) for the blocks strictly between (first + 1 ..
// last - 1): whole blocks of that one run, so m is their only holder (a
// position is in one run). Members ascending, each member's runs in order.
template <typename Edge, typename Inner>
void for_each_block_overlap(const RunShardPlan& plan, std::int64_t block, Edge&& edge,
                            Inner&& inner) {
  for (std::int32_t m = 0; m < plan.ranks; ++m) {
    for (std::int64_t i = plan.rank_offset[m]; i < plan.rank_offset[m + 1]; ++i) {
      const PositionRun& run = plan.runs[static_cast<std::size_t>(i)];
      if (run.begin == kPadPosition || run.length == 0) continue;
      // The first and last blocks' shares as distances within a block, so
      // that a B near int64's end cannot overflow.
      const std::int64_t first = run.begin / block;
      const std::int64_t last = (run.begin + run.length - 1) / block;
      if (first == last) {
        edge(first, m, run.length);
        continue;
      }
      edge(first, m, block - run.begin % block);
      if (last - first > 1) inner(first, last, m);
      edge(last, m, run.begin + run.length - last * block);
    }
  }
}

// A counting sort of (block, member, tokens) by block, in two passes over
// the runs: holder_offsets counts each block's holders (the offsets),
// holder_entries writes the entries straight into place. Members come in
// ascending order, so a member's pieces of one block come one after
// another, counted as one entry and joined. A block inside one run has that
// one entry, written without the tests.
void holder_offsets(const RunShardPlan& plan, std::int64_t tokens, std::int64_t block, Holders& h) {
  const auto blocks = static_cast<std::size_t>(ceil_div(tokens, block));
  std::vector<std::int64_t>& start = h.offset;
  start.assign(blocks + 1, 0);
  // First, block b's count of holders in the high half of start[b + 1] and
  // its last member counted plus one in the low half (0: none yet): one
  // table to zero, not a second one of last members.
  constexpr std::int64_t kOne = std::int64_t{1} << 32;
  for_each_block_overlap(
      plan, block,
      [&](std::int64_t k, std::int32_t m, std::int64_t) {
        std::int64_t& count = start[static_cast<std::size_t>(k) + 1];
        const std::int64_t last = count & (kOne - 1);
        if (last != std::int64_t{m} + 1) count += kOne + (std::int64_t{m} + 1 - last);
      },
      [&](std::int64_t first, std::int64_t last, std::int32_t) {
        for (std::int64_t k = first + 1; k < last; ++k)
          start[static_cast<std::size_t>(k) + 1] = kOne;
      });
  for (std::size_t k = 1; k <= blocks; ++k) start[k] = (start[k] >> 32) + start[k - 1];
}

// The entries of the holders whose offsets holder_offsets counted.
void holder_entries(const RunShardPlan& plan, std::int64_t block, Holders& h) {
  const std::vector<std::int64_t>& start = h.offset;
  std::vector<std::int64_t>& fill = scratch().fill;
  h.entries.resize(static_cast<std::size_t>(start.back()));
  fill.assign(start.begin(), start.end() - 1);
  for_each_block_overlap(
      plan, block,
      [&](std::int64_t k, std::int32_t m, std::int64_t n) {
        const auto b = static_cast<std::size_t>(k);
        const auto at = static_cast<std::size_t>(fill[b]);
        if (fill[b] > start[b] && h.entries[at - 1].member == m) {
          h.entries[at - 1].tokens += n;
        } else {
          h.entries[at] = {m, n};
          ++fill[b];
        }
      },
      [&](std::int64_t first, std::int64_t last, std::int32_t m) {
        for (std::int64_t k = first + 1; k < last; ++k) {
          h.entries[static_cast<std::size_t>(start[static_cast<std::size_t>(k)])] = {m, block};
        }
      });
}

// How many hold each key block of a counted plan (the holders' offsets),
// counted on first need.
const Holders& holder_counts(const SlotRunsCounts& c, const RunShardPlan& runs) {
  if (!c.offsets_counted) {
    holder_offsets(runs, c.tokens, c.block, c.holders);
    c.offsets_counted = true;
  }
  return c.holders;
}

// The key blocks' holders of a counted plan, offsets and entries, counted
// on first need.
const Holders& holders_of(const SlotRunsCounts& c, const RunShardPlan& runs) {
  holder_counts(c, runs);
  if (!c.entries_counted) {
    holder_entries(runs, c.block, c.holders);
    c.entries_counted = true;
  }
  return c.holders;
}

// The largest of values[lo..hi] in O(1) after O(n log n); its levels are
// the caller's buffers (level 0 given filled).
class SparseMax {
 public:
  explicit SparseMax(std::vector<std::vector<std::int32_t>>& levels) : levels_(levels) {
    std::size_t k = 1;
    for (std::size_t span = 1; 2 * span <= levels_[0].size(); span *= 2, ++k) {
      if (levels_.size() <= k) levels_.emplace_back();
      const std::vector<std::int32_t>& below = levels_[k - 1];
      std::vector<std::int32_t>& up = levels_[k];
      up.resize(below.size() - span);
      for (std::size_t i = 0; i < up.size(); ++i) up[i] = std::max(below[i], below[i + span]);
    }
  }
  std::int32_t max(std::int64_t lo, std::int64_t hi) const {
    const auto n = static_cast<std::uint64_t>(hi - lo + 1);
    const auto k = static_cast<std::size_t>(std::bit_width(n) - 1);
    const std::vector<std::int32_t>& level = levels_[k];
    return std::max(level[static_cast<std::size_t>(lo)],
                    level[static_cast<std::size_t>(hi + 1 - (std::int64_t{1} << k))]);
  }

 private:
  std::vector<std::vector<std::int32_t>>& levels_;  // level k: max of 2^k from i
};

// How many hold key block k: the entries its holders' offsets span.
inline std::int32_t held_by(const std::vector<std::int64_t>& offset, std::int64_t k) {
  return static_cast<std::int32_t>(offset[static_cast<std::size_t>(k) + 1] -
                                   offset[static_cast<std::size_t>(k)]);
}

// The most holders of any key block of [lo, hi], block by block.
inline std::int32_t most_held_in(const std::vector<std::int64_t>& offset, std::int64_t lo,
                                 std::int64_t hi) {
  std::int32_t m = 0;
  for (std::int64_t k = lo; k <= hi; ++k) m = std::max(m, held_by(offset, k));
  return m;
}

// The most-held key block of [lo, hi] from the maxima of aligned chunks of
// kChunk blocks (one pass over the blocks; the maxima are the caller's
// buffer): an interval reads its partial end chunks block by block and the
// chunks between them by their maxima, so long intervals over a row that
// several members touch read a thirty-second of their blocks.
class ChunkMax {
 public:
  static constexpr std::int64_t kChunk = 32;

  ChunkMax(const std::vector<std::int64_t>& offset, std::vector<std::int32_t>& chunk_most)
      : offset_(offset), most_(chunk_most) {
    const auto blocks = static_cast<std::int64_t>(offset.size()) - 1;
    most_.resize(static_cast<std::size_t>(ceil_div(blocks, kChunk)));
    for (std::int64_t j = 0; j * kChunk < blocks; ++j) {
      std::int32_t m = 0;
      for (std::int64_t k = j * kChunk; k < std::min(blocks, (j + 1) * kChunk); ++k) {
        m = std::max(m, held_by(offset_, k));
      }
      most_[static_cast<std::size_t>(j)] = m;
    }
  }

  // Blocks read for [lo, hi] at most: two partial chunks and the maxima.
  static std::int64_t reads(std::int64_t lo, std::int64_t hi) {
    return std::min(hi - lo + 1, 2 * kChunk + (hi - lo + 1) / kChunk);
  }

  std::int32_t max(std::int64_t lo, std::int64_t hi) const {
    const std::int64_t first = lo / kChunk + 1;  // the chunks wholly inside
    const std::int64_t last = (hi + 1) / kChunk;
    if (first >= last) return most_held_in(offset_, lo, hi);
    std::int32_t m = most_held_in(offset_, lo, first * kChunk - 1);
    for (std::int64_t j = first; j < last; ++j) m = std::max(m, most_[static_cast<std::size_t>(j)]);
    return std::max(m, most_held_in(offset_, last * kChunk, hi));
  }

 private:
  const std::vector<std::int64_t>& offset_;
  std::vector<std::int32_t>& most_;  // per chunk: its most-held block's holders
};

}  // namespace

ShardPlan materialize_runs(const RunShardPlan& runs) {
  ShardPlan plan;
  plan.cp_size = runs.ranks;
  plan.shard_len = runs.shard_len;
  plan.positions.resize(static_cast<std::size_t>(runs.ranks * runs.shard_len));
  std::int64_t* const out = plan.positions.data();
  std::int64_t real = 0;
  for (std::int32_t r = 0; r < runs.ranks; ++r) {
    std::int64_t* dst = out + r * runs.shard_len;
    std::int64_t* const end = dst + runs.shard_len;
    for (std::int64_t i = runs.rank_offset[r]; i < runs.rank_offset[r + 1]; ++i) {
      // Locals, not run.*: the stores below could alias the run array
      // (both int64), which would keep the loop from vectorising.
      const std::int64_t begin = runs.runs[static_cast<std::size_t>(i)].begin;
      const std::int64_t length = runs.runs[static_cast<std::size_t>(i)].length;
      if (begin == kPadPosition) {
        std::fill(dst, dst + length, kPadPosition);
      } else {
        for (std::int64_t j = 0; j < length; ++j) dst[j] = begin + j;
        real += length;
      }
      dst += length;
    }
    std::fill(dst, end, kPadPosition);
  }
  plan.padding = runs.ranks * runs.shard_len - real;
  return plan;
}

RunShardPlan runs_of_plan(const ShardPlan& plan) {
  RunShardPlan runs;
  runs.ranks = plan.cp_size;
  runs.shard_len = plan.shard_len;
  runs.rank_offset.assign(static_cast<std::size_t>(plan.cp_size) + 1, 0);
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    const std::int64_t* const end = plan.rank_end(r);
    for (const std::int64_t* it = plan.rank_begin(r); it != end;) {
      const std::int64_t* next = it + 1;
      if (*it == kPadPosition) {
        while (next != end && *next == kPadPosition) ++next;
      } else {
        while (next != end && *next == next[-1] + 1) ++next;
      }
      runs.runs.push_back({*it, next - it});
      it = next;
    }
    runs.rank_offset[r + 1] = static_cast<std::int64_t>(runs.runs.size());
  }
  return runs;
}

namespace {

// Member r's tokens and tiles (per local block, the union of the key blocks
// its queries there touch), with kFull its full tiles added to `full` (none
// under a block-sparse mask), and, with `all`, every key-block interval its
// queries touch (unmerged). `spans` is scratch. kFull is a template argument
// so that the planner's counting, which most profiles do not need full
// tiles from, pays nothing for them.
template <bool kFull>
void count_member(const CpWorkload& w, const RowLayout& layout, const RunShardPlan& runs,
                  std::int32_t r, RankWork& rw, std::int64_t* full, std::vector<Interval>& spans,
                  std::vector<Interval>* all) {
  const std::int64_t b = w.block_size;
  const bool count_full = kFull && w.mask.kind != MaskKind::kBlockSparse;
  std::int64_t full_tiles = 0;
  std::int64_t current = -1;  // the local block `spans` and `ends` belong to
  FullTileEnds ends;
  walk_member(
      layout, b, runs, r,
      [&](std::int64_t from, std::int64_t to, std::int64_t doc, std::int64_t local_block) {
        const std::int64_t db = layout.doc_begin(doc);
        const std::int64_t de = layout.doc_end(doc);
        if (local_block != current) {
          rw.tiles += union_size(spans);
          spans.clear();
          if (count_full) full_tiles += ends.take(b);
          current = local_block;
        }
        // piece_keys, with the ends FullTileEnds takes from the same two ranges.
        const KeyRange first = key_range(w.mask, db, de, from);
        const KeyRange last = key_range(w.mask, db, de, to - 1);
        const Interval keys{first.lo / b, last.hi / b};
        if (count_full) ends.add(to - from, first, last);
        if (!join_last(spans, keys)) spans.push_back(keys);
        if (all && !join_last(*all, keys)) all->push_back(keys);
        rw.tokens += to - from;
      },
      [&](std::int64_t from, std::int64_t n, std::int64_t doc, std::int64_t local_block) {
        // Each block is one piece, its tiles the one interval's blocks. The
        // blocks' intervals touch one another (a query sees itself, and
        // neither end of its keys falls as it moves on): their union is
        // the stretch's.
        rw.tiles += union_size(spans);
        spans.clear();
        current = local_block + n - 1;
        const std::int64_t db = layout.doc_begin(doc);
        const std::int64_t de = layout.doc_end(doc);
        const Interval keys = piece_keys(w.mask, b, db, de, from, from + n * b);
        // One block's tiles are its one interval's blocks (a balanced
        // plan's full units, most of its runs, are one block each).
        rw.tiles +=
            n == 1 ? keys.second - keys.first + 1 : whole_block_tiles(w.mask, b, db, de, from, n);
        if (count_full) {
          full_tiles += ends.take(b) + whole_block_full_tiles(w.mask, b, db, de, from, n);
        }
        if (all && !join_last(*all, keys)) all->push_back(keys);
        rw.tokens += n * b;
      });
  rw.tiles += union_size(spans);
  spans.clear();
  if (count_full) *full += full_tiles + ends.take(b);
}

}  // namespace

std::vector<RankWork> run_tokens_and_tiles(const CpWorkload& w, const RunShardPlan& runs,
                                           std::vector<std::int64_t>* full_tiles) {
  const RowLayout layout(w);
  std::vector<RankWork> work(static_cast<std::size_t>(runs.ranks));
  if (full_tiles) full_tiles->assign(work.size(), 0);
  std::vector<Interval>& spans = scratch().spans;
  spans.clear();
  for (std::int32_t r = 0; r < runs.ranks; ++r) {
    const auto m = static_cast<std::size_t>(r);
    if (full_tiles) {
      count_member<true>(w, layout, runs, r, work[m], &(*full_tiles)[m], spans, nullptr);
    } else {
      count_member<false>(w, layout, runs, r, work[m], nullptr, spans, nullptr);
    }
  }
  return work;
}

RankWork one_rank_row_work(const ScheduleRequest& request, const ScheduleSlot& slot,
                           std::int64_t* full_tiles) {
  const MaskSpec& mask = request.mask;
  const std::int64_t b = request.block_size;
  // count_member's walk over the one run [0, N): local block k is row block
  // k, cut at document ends, whole blocks of one document summed at once.
  // A local block's pieces come from consecutive documents, so their key
  // intervals come in ascending order of their lower ends (a document's
  // keys lie inside it): their union is counted as they come, each adding
  // the key blocks past the highest counted in the block so far.
  RankWork rw;
  const bool count_full = full_tiles != nullptr && mask.kind != MaskKind::kBlockSparse;
  std::int64_t full = 0;
  FullTileEnds ends;          // count_member's, for the current local block
  std::int64_t current = -1;  // the local block counted so far
  std::int64_t covered = -1;  // the highest key block counted in it
  std::int64_t db = 0;
  for (const DocPiece& piece : slot.pieces) {
    const std::int64_t de = db + piece.length;
    for (std::int64_t x = db; x < de;) {
      const std::int64_t room = b - x % b;
      if (room == b && de - x >= b) {
        // Whole blocks: none shares its tiles with a piece counted before
        // or after it (count_member's `whole`).
        const std::int64_t n = (de - x) / b;
        rw.tiles += whole_block_tiles(mask, b, db, de, x, n);
        if (count_full) full += whole_block_full_tiles(mask, b, db, de, x, n);
        x += n * b;
        continue;
      }
      const std::int64_t e = x + std::min(de - x, room);
      const KeyRange first = key_range(mask, db, de, x);
      const KeyRange last = key_range(mask, db, de, e - 1);
      const Interval keys{first.lo / b, last.hi / b};  // piece_keys
      if (x / b != current) {
        if (count_full) full += ends.take(b);
        current = x / b;
        covered = -1;
      }
      if (count_full) ends.add(e - x, first, last);
      const std::int64_t from = std::max(keys.first, covered + 1);
      if (keys.second >= from) {
        rw.tiles += keys.second - from + 1;
        covered = keys.second;
      }
      x = e;
    }
    rw.tokens += piece.length;
    db = de;
  }
  if (count_full) full += ends.take(b);
  if (full_tiles) *full_tiles = full;
  return rw;
}

double one_rank_slot_end(const ScheduleRequest& request, const ScheduleSlot& slot) {
  // Full tiles are counted only where the profile prices partial ones
  // (count_slot_runs's rule).
  const bool partial = request.profile.partial_tile_seconds != 0;
  std::int64_t full = 0;
  const RankWork rw = one_rank_row_work(request, slot, partial ? &full : nullptr);
  // price_slot_counts's end for one member: the longer of 0 and its compute
  // (its exchange is none).
  return std::max(0.0, member_compute_seconds(request.profile, rw.tokens, rw.tiles,
                                              partial ? rw.tiles - full : 0, rw.tokens));
}

namespace {

// One walk per member gives its tokens, its tiles (count_member) and the
// key blocks it touches in all (the union over its blocks); and its full
// tiles where the profile prices partial ones (elsewhere none are counted:
// no tile partial, which prices the same at 0 and costs nothing).
SlotRunsCounts count_slot_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                               const RunShardPlan& runs) {
  SlotRunsCounts c;
  const CpWorkload w = slot_workload(request, slot);
  const RowLayout layout(w);
  const bool exchange = runs.ranks > 1;
  c.work.resize(static_cast<std::size_t>(runs.ranks));
  const bool partial = request.profile.partial_tile_seconds != 0;
  if (partial) c.full.assign(c.work.size(), 0);
  if (exchange) {
    c.touched_at.reserve(static_cast<std::size_t>(runs.ranks) + 1);
    c.touched_at.push_back(0);
  }
  std::vector<Interval>& spans = scratch().spans;  // the current local block's
  std::vector<Interval>& all = scratch().all;      // the member's
  spans.clear();
  all.clear();
  for (std::int32_t r = 0; r < runs.ranks; ++r) {
    const auto m = static_cast<std::size_t>(r);
    if (partial) {
      count_member<true>(w, layout, runs, r, c.work[m], &c.full[m], spans,
                         exchange ? &all : nullptr);
    } else {
      count_member<false>(w, layout, runs, r, c.work[m], nullptr, spans, exchange ? &all : nullptr);
    }
    if (exchange) {
      merge_into(all, c.touched);
      c.touched_at.push_back(c.touched.size());
      all.clear();
    }
  }
  c.tokens = w.tokens;
  c.block = w.block_size;
  return c;
}

// Member r's touched key-block intervals (count_member's `all`), one per
// run and document: a document's queries [a, b) touch the blocks of
// [lo(a), hi(b - 1)], the union of its pieces' intervals (neither end of a
// query's keys falls as it moves on, and a query sees itself, so the
// pieces' intervals touch one another). Merged, the same intervals.
void touch_member(const CpWorkload& w, const RowLayout& layout, const RunShardPlan& runs,
                  std::int32_t r, std::vector<Interval>& all) {
  const std::int64_t b = w.block_size;
  std::int64_t doc = -1;
  for (std::int64_t i = runs.rank_offset[r]; i < runs.rank_offset[r + 1]; ++i) {
    const PositionRun& run = runs.runs[static_cast<std::size_t>(i)];
    if (run.begin == kPadPosition || run.length == 0) continue;
    const std::int64_t end = run.begin + run.length;
    if (doc < 0 || doc >= layout.num_docs() || layout.doc_end(doc) <= run.begin ||
        layout.doc_begin(doc) > run.begin) {
      doc = layout.doc_of(run.begin);
    }
    for (std::int64_t x = run.begin; x < end;) {
      const std::int64_t de = layout.doc_end(doc);
      const std::int64_t e = std::min(end, de);
      const Interval keys = piece_keys(w.mask, b, layout.doc_begin(doc), de, x, e);
      if (!join_last(all, keys)) all.push_back(keys);
      x = e;
      if (x == de) ++doc;
    }
  }
}

// count_slot_runs with the members' tokens and tiles given: only the
// touched intervals walked. Their full tiles are not counted (none
// partial), as count_slot_runs does not count them under a profile without
// partial_tile_seconds (count_runs takes this path only under one).
SlotRunsCounts count_touched(const ScheduleRequest& request, const ScheduleSlot& slot,
                             const RunShardPlan& runs, const std::vector<RankWork>& work) {
  SlotRunsCounts c;
  const CpWorkload w = slot_workload(request, slot);
  const RowLayout layout(w);
  c.work.resize(work.size());
  for (std::size_t r = 0; r < work.size(); ++r) {
    c.work[r].tokens = work[r].tokens;  // pairs left 0, as count_member leaves them
    c.work[r].tiles = work[r].tiles;
  }
  if (runs.ranks > 1) {
    c.touched_at.reserve(static_cast<std::size_t>(runs.ranks) + 1);
    c.touched_at.push_back(0);
    std::vector<Interval>& all = scratch().all;
    all.clear();
    for (std::int32_t r = 0; r < runs.ranks; ++r) {
      touch_member(w, layout, runs, r, all);
      merge_into(all, c.touched);
      c.touched_at.push_back(c.touched.size());
      all.clear();
    }
  }
  c.tokens = w.tokens;
  c.block = w.block_size;
  return c;
}

SlotCost price_counted(const ScheduleRequest& request, const ScheduleSlot& slot,
                       const SlotRunsCounts& c, const RunShardPlan& runs) {
  const std::size_t g = c.work.size();
  SlotCounts counts = slot_counts_of(c.work, c.full.empty() ? nullptr : &c.full);
  if (g > 1) {
    holders_of(c, runs);
    const std::vector<std::int32_t> index = start_exchange(counts);
    detail::received_table(c, index, counts.active.size(), counts.received.data());
  }
  return price_slot_counts(request.profile, slot.ranks, counts);
}

// Two floors on the exact end: `peers`, each member's compute plus the
// latency of the peers it has at least (the other holders of the most-held
// key block it touches), less what the overlap can hide; and `exchange`,
// that member's compute plus its exchange totals (exchange_totals) priced as
// if every byte crossed the faster link, with the peers it has at least.
struct Floors {
  double peers = 0;
  double exchange = 0;
};

// Past `stop` (where a caller needs only whether the floor reaches it), the
// exchange totals are not counted once the weaker floor reaches it:
// `exchange` is then that floor.
Floors floor_counted(const ScheduleRequest& request, const ScheduleSlot& slot,
                     const SlotRunsCounts& c, const RunShardPlan& runs, bool with_exchange,
                     double stop = std::numeric_limits<double>::infinity()) {
  const CostProfile& p = request.profile;
  Scratch& x = scratch();
  // The members' compute and the slot's end with no exchange counted, as
  // price_slot_counts forms them (each member's compute with the row's
  // real tokens; the end the longest of 0 and those), in a kept buffer.
  std::vector<double>& compute = x.compute;
  compute.resize(c.work.size());
  std::int64_t row = 0;
  for (const RankWork& w : c.work) row += w.tokens;
  double compute_end = 0;
  for (std::size_t r = 0; r < c.work.size(); ++r) {
    const std::int64_t partial = c.full.empty() ? 0 : c.work[r].tiles - c.full[r];
    compute[r] = member_compute_seconds(p, c.work[r].tokens, c.work[r].tiles, partial, row);
    compute_end = std::max(compute_end, compute[r]);
  }
  Floors f{compute_end, compute_end};
  if (c.work.size() <= 1 || (!with_exchange && !(p.latency_seconds > 0)) || f.peers >= stop) {
    return f;
  }
  // Every other member holding tokens of a key block a member touches sends
  // it some: a peer. A block's holders are its entries (one per member), as
  // many as its offsets span: who they are is not needed here.
  const std::vector<std::int64_t>& offset = holder_counts(c, runs).offset;
  // The most-held block of each interval a member touches: read block by
  // block where the intervals cover fewer blocks than a table of maxima
  // would cost, else from the cheaper of the chunks' maxima (one pass over
  // the blocks) and the table of every power-of-two span's (O(1) a read).
  std::int64_t span = 0;
  std::int64_t chunked = static_cast<std::int64_t>(offset.size()) - 1;
  for (std::size_t r = 0; r < c.work.size(); ++r) {
    if (c.work[r].tokens == 0) continue;
    for (const auto& [lo, hi] : c.touched_by(r)) {
      span += hi - lo + 1;
      chunked += ChunkMax::reads(lo, hi);
    }
  }
  const auto blocks = static_cast<std::int64_t>(offset.size()) - 1;
  const std::int64_t sparse =
      blocks * static_cast<std::int64_t>(std::bit_width(static_cast<std::uint64_t>(blocks)));
  std::optional<SparseMax> table;
  std::optional<ChunkMax> chunks;
  if (span > std::min(chunked, sparse)) {
    if (chunked <= sparse) {
      chunks.emplace(offset, x.chunk_most);
    } else {
      if (x.levels.empty()) x.levels.emplace_back();
      std::vector<std::int32_t>& per_block = x.levels[0];
      per_block.resize(static_cast<std::size_t>(blocks));
      for (std::int64_t k = 0; k < blocks; ++k) {
        per_block[static_cast<std::size_t>(k)] = held_by(offset, k);
      }
      table.emplace(x.levels);
    }
  }
  const auto most_held = [&](std::int64_t lo, std::int64_t hi) {
    if (table) return table->max(lo, hi);
    if (chunks) return chunks->max(lo, hi);
    return most_held_in(offset, lo, hi);
  };
  // Each member's peers at least: the other holders of the most-held key
  // block it touches (0 for a member that holds nothing and exchanges
  // nothing).
  std::vector<std::int32_t>& most = x.most;
  most.assign(c.work.size(), 0);
  for (std::size_t r = 0; r < c.work.size(); ++r) {
    if (c.work[r].tokens == 0) continue;
    for (const auto& [lo, hi] : c.touched_by(r)) most[r] = std::max(most[r], most_held(lo, hi));
    const double compute_seconds = compute[r];
    if (most[r] > 1 && p.latency_seconds > 0) {
      const double comm = p.latency_seconds * (most[r] - 1);
      f.peers = std::max(
          f.peers, compute_seconds + comm - p.exchange_overlap * std::min(compute_seconds, comm));
    }
  }
  if (!with_exchange || f.peers >= stop) {
    f.exchange = std::max(f.exchange, f.peers);
    return f;
  }
  // Members' nodes, numbered from 0 in order of first appearance.
  std::vector<std::int32_t>& node = x.node;
  node.resize(c.work.size());
  {
    std::vector<std::int32_t>& seen = x.seen;
    seen.clear();
    const std::int32_t per_node = std::max(1, p.ranks_per_node);
    for (std::size_t r = 0; r < node.size(); ++r) {
      const std::int32_t n = slot.ranks[r] / per_node;
      const auto it = std::find(seen.begin(), seen.end(), n);
      node[r] = static_cast<std::int32_t>(it - seen.begin());
      if (it == seen.end()) seen.push_back(n);
    }
  }
  holders_of(c, runs);  // exchange_totals reads the entries, not only the offsets
  const ExchangeTotals t = exchange_totals(c, node);
  // Each link's bytes priced at once, a hair under so that one product per
  // link cannot round above the table's sum of one product per peer.
  const double near_token = p.kv_bytes_per_token / p.intra_node_bytes_per_second * (1 - 1e-9);
  const double far_token = p.kv_bytes_per_token / p.inter_node_bytes_per_second * (1 - 1e-9);
  for (std::size_t r = 0; r < c.work.size(); ++r) {
    if (c.work[r].tokens == 0) continue;  // holds nothing: exchanges nothing
    const double compute_seconds = compute[r];
    double comm = static_cast<double>(t.near[r]) * near_token +
                  static_cast<double>(t.far[r]) * far_token +
                  p.latency_seconds * std::max(most[r] - 1, t.peers[r]);
    comm -= p.exchange_overlap * std::min(compute_seconds, comm);
    f.exchange = std::max(f.exchange, (compute_seconds + comm) * (1 - 1e-12));
  }
  f.exchange = std::max(f.exchange, f.peers);
  return f;
}

}  // namespace

SlotCost evaluate_slot_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                            const RunShardPlan& runs) {
  return price_counted(request, slot, count_slot_runs(request, slot, runs), runs);
}

double slot_end_floor_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                           const RunShardPlan& runs, bool exchange_floor) {
  const Floors f =
      floor_counted(request, slot, count_slot_runs(request, slot, runs), runs, exchange_floor);
  return exchange_floor ? f.exchange : f.peers;
}

CountedRuns count_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                       RunShardPlan runs) {
  auto counts = std::make_shared<const SlotRunsCounts>(count_slot_runs(request, slot, runs));
  return {std::move(runs), std::move(counts)};
}

CountedRuns count_runs(const ScheduleRequest& request, const ScheduleSlot& slot, RunShardPlan runs,
                       const std::vector<RankWork>& work) {
  // The planner's work has no full tiles: a profile that prices partial
  // tiles has them counted.
  if (request.mask.kind == MaskKind::kBlockSparse || request.profile.partial_tile_seconds != 0)
    return count_runs(request, slot, std::move(runs));
  auto counts = std::make_shared<const SlotRunsCounts>(count_touched(request, slot, runs, work));
  return {std::move(runs), std::move(counts)};
}

namespace {

// slot_end_counted_below of the counts `c` of `runs`.
SlotEnd end_below(const ScheduleRequest& request, const ScheduleSlot& slot, const SlotRunsCounts& c,
                  const RunShardPlan& runs, double beat, bool exchange_floor, bool floor_value) {
  if (beat != std::numeric_limits<double>::infinity()) {
    const Floors f = floor_counted(request, slot, c, runs, exchange_floor,
                                   floor_value ? std::numeric_limits<double>::infinity() : beat);
    const double floor = exchange_floor ? f.exchange : f.peers;
    if (floor >= beat) return {floor, false, {}, f.peers};
  }
  SlotCost cost = price_counted(request, slot, c, runs);
  const double end = cost.end_seconds;
  return {end, true, std::move(cost)};
}

}  // namespace

SlotEnd slot_end_counted_below(const ScheduleRequest& request, const ScheduleSlot& slot,
                               const CountedRuns& counted, double beat, bool exchange_floor,
                               bool floor_value) {
  return end_below(request, slot, *counted.counts, counted.runs, beat, exchange_floor, floor_value);
}

SlotEnd slot_end_runs_below(const ScheduleRequest& request, const ScheduleSlot& slot,
                            const RunShardPlan& runs, double beat, bool exchange_floor) {
  return end_below(request, slot, count_slot_runs(request, slot, runs), runs, beat, exchange_floor,
                   true);
}

ScheduleCost evaluate_schedule_runs(const ScheduleRequest& request, const Schedule& schedule,
                                    const std::vector<RunShardPlan>& runs) {
  return price_timeline(request, schedule, [&](std::size_t s) {
    return evaluate_slot_runs(request, schedule.slots[s], runs[s]);
  });
}

}  // namespace fulcrum
