// The run pricing as it stood before its counting was made lighter
// (core/slot_runs.cpp, rule 5's candidate plans): kept, test-only, as the
// reference the faster counting must equal bit for bit. Same cost model,
// same arithmetic, same order of floating-point operations.
#include "slot_runs_reference.h"

#include "fulcrum/core/slot_runs.h"
#include "fulcrum/core/work_model.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"

namespace fulcrum::reference {
namespace detail {

using Interval = std::pair<std::int64_t, std::int64_t>;

// Who holds the real tokens of every key block: block k's holders are
// entries [offset[k], offset[k + 1]) of (member, tokens), members ascending.
struct Holders {
  std::vector<std::int64_t> offset;
  std::vector<std::pair<std::int32_t, std::int64_t>> entries;
};

// What the floor and the exact price of one run plan share: the members'
// tokens and tiles, the holders of every key block and the key blocks each
// member touches, each counted once.
struct SlotRunsCounts {
  CpWorkload w;
  std::vector<RankWork> work;
  Holders holders;
  // Full tiles per member, from the positions' work model (the run counting
  // of them is held to that and to a pair-by-pair recount elsewhere).
  std::vector<std::int64_t> full;
  // Member r's merged touched intervals are touched[touched_at[r] ..
  // touched_at[r + 1]); both empty for g = 1.
  std::vector<Interval> touched;
  std::vector<std::size_t> touched_at;

  std::span<const Interval> touched_by(std::size_t r) const {
    return {touched.data() + touched_at[r], touched_at[r + 1] - touched_at[r]};
  }
};

}  // namespace detail

namespace {

using detail::Holders;
using detail::Interval;
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

// Key blocks of the union of `spans` (inclusive intervals, any order).
std::int64_t union_size(std::vector<Interval>& spans) {
  if (spans.size() > 1 && !std::is_sorted(spans.begin(), spans.end())) {
    std::sort(spans.begin(), spans.end());
  }
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

// Walks one member's runs in local order, cut at local blocks of B entries
// and at document ends: calls piece(a, b, local_block) for the real queries
// [a, b) of one document inside one local block.
template <typename Piece>
void walk_member(const RowLayout& layout, std::int64_t block, const RunShardPlan& plan,
                 std::int32_t r, Piece&& piece) {
  std::int64_t local = 0;  // entries of the member's order before the current run
  for (std::int64_t i = plan.rank_offset[r]; i < plan.rank_offset[r + 1]; ++i) {
    const PositionRun& run = plan.runs[static_cast<std::size_t>(i)];
    if (run.begin == kPadPosition || run.length == 0) {
      local += run.length;
      continue;
    }
    const std::int64_t end = run.begin + run.length;
    std::int64_t doc = layout.doc_of(run.begin);
    for (std::int64_t x = run.begin; x < end;) {
      // Entries left in the current local block; compared as a distance so
      // that a B near int64's end cannot overflow.
      const std::int64_t room = block - local % block;
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

template <typename Visit>
void for_each_block_overlap(const RunShardPlan& plan, std::int64_t block, Visit&& visit) {
  for (std::int32_t m = 0; m < plan.ranks; ++m) {
    for (std::int64_t i = plan.rank_offset[m]; i < plan.rank_offset[m + 1]; ++i) {
      const PositionRun& run = plan.runs[static_cast<std::size_t>(i)];
      if (run.begin == kPadPosition || run.length == 0) continue;
      const std::int64_t end = run.begin + run.length;
      for (std::int64_t k = run.begin / block; k <= (end - 1) / block; ++k) {
        const std::int64_t lo = std::max(run.begin, k * block);
        const std::int64_t hi = std::min(end, k * block + std::min(block, end - k * block));
        visit(k, m, hi - lo);
      }
    }
  }
}

Holders holders_of_runs(const RunShardPlan& plan, std::int64_t tokens, std::int64_t block) {
  const auto blocks = static_cast<std::size_t>(ceil_div(tokens, block));
  // Counting sort of (block, member, tokens) by block; members come in
  // ascending order, so one member's pieces of a block are adjacent.
  std::vector<std::int64_t> start(blocks + 1, 0);
  for_each_block_overlap(plan, block, [&](std::int64_t k, std::int32_t, std::int64_t) {
    ++start[static_cast<std::size_t>(k) + 1];
  });
  for (std::size_t k = 1; k <= blocks; ++k) start[k] += start[k - 1];
  std::vector<std::pair<std::int32_t, std::int64_t>> raw(static_cast<std::size_t>(start[blocks]));
  std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
  for_each_block_overlap(plan, block, [&](std::int64_t k, std::int32_t m, std::int64_t n) {
    raw[static_cast<std::size_t>(fill[static_cast<std::size_t>(k)]++)] = {m, n};
  });
  Holders h;
  h.offset.reserve(blocks + 1);
  h.offset.push_back(0);
  for (std::size_t k = 0; k < blocks; ++k) {
    for (std::int64_t i = start[k]; i < start[k + 1]; ++i) {
      const auto& [m, n] = raw[static_cast<std::size_t>(i)];
      if (h.entries.size() > static_cast<std::size_t>(h.offset.back()) &&
          h.entries.back().first == m) {
        h.entries.back().second += n;
      } else {
        h.entries.emplace_back(m, n);
      }
    }
    h.offset.push_back(static_cast<std::int64_t>(h.entries.size()));
  }
  return h;
}

// Per holder, the blocks it holds tokens of and the running sum of those
// tokens: what a holder has in a range of blocks in O(log blocks), for a
// member whose touched ranges cover more holder entries than g log blocks.
struct HolderSums {
  std::vector<std::vector<std::int64_t>> blocks;  // per member, ascending
  std::vector<std::vector<std::int64_t>> sum;     // per member, sum[0] = 0

  HolderSums(const Holders& h, std::size_t members) : blocks(members), sum(members, {0}) {
    for (std::size_t k = 0; k + 1 < h.offset.size(); ++k) {
      for (std::int64_t i = h.offset[k]; i < h.offset[k + 1]; ++i) {
        const auto& [j, count] = h.entries[static_cast<std::size_t>(i)];
        blocks[static_cast<std::size_t>(j)].push_back(static_cast<std::int64_t>(k));
        sum[static_cast<std::size_t>(j)].push_back(sum[static_cast<std::size_t>(j)].back() + count);
      }
    }
  }

  // Tokens member j holds in blocks [lo, hi].
  std::int64_t in_range(std::size_t j, std::int64_t lo, std::int64_t hi) const {
    const std::vector<std::int64_t>& b = blocks[j];
    const auto first = std::lower_bound(b.begin(), b.end(), lo) - b.begin();
    const auto last = std::upper_bound(b.begin(), b.end(), hi) - b.begin();
    return sum[j][static_cast<std::size_t>(last)] - sum[j][static_cast<std::size_t>(first)];
  }
};

// Adds to from[y] the tokens member active[y] holds in the blocks `touched`
// (index: a member's place among the active ones; the caller clears the
// receiver's own): entry by entry, or per holder by range sums when that is
// fewer steps. Both are exact sums.
void add_receipts(const Holders& holders, const std::unique_ptr<HolderSums>& sums,
                  std::span<const Interval> touched, const std::vector<std::int32_t>& active,
                  const std::vector<std::int32_t>& index, std::int64_t* from) {
  std::int64_t entries = 0;
  for (const auto& [lo, hi] : touched) entries += holders.offset[hi + 1] - holders.offset[lo];
  const auto by_range = static_cast<std::int64_t>(touched.size() * active.size()) * 24;
  if (sums && by_range < entries) {
    for (std::size_t y = 0; y < active.size(); ++y) {
      const auto j = static_cast<std::size_t>(active[y]);
      if (sums->blocks[j].empty()) continue;
      for (const auto& [lo, hi] : touched) from[y] += sums->in_range(j, lo, hi);
    }
    return;
  }
  for (const auto& [lo, hi] : touched) {
    for (std::int64_t i = holders.offset[lo]; i < holders.offset[hi + 1]; ++i) {
      const auto& [j, count] = holders.entries[static_cast<std::size_t>(i)];
      from[index[static_cast<std::size_t>(j)]] += count;
    }
  }
}

// The largest of values[lo..hi] in O(1) after O(n log n).
class SparseMax {
 public:
  explicit SparseMax(std::vector<std::int32_t> values) {
    levels_.push_back(std::move(values));
    for (std::size_t span = 1; 2 * span <= levels_[0].size(); span *= 2) {
      const std::vector<std::int32_t>& below = levels_.back();
      std::vector<std::int32_t> up(below.size() - span);
      for (std::size_t i = 0; i < up.size(); ++i) up[i] = std::max(below[i], below[i + span]);
      levels_.push_back(std::move(up));
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
  std::vector<std::vector<std::int32_t>> levels_;  // level k: max of 2^k from i
};

}  // namespace

namespace {

// Member r's tokens and tiles (per local block, the union of the key blocks
// its queries there touch), and, with `all`, every key-block interval its
// queries touch (unmerged). `spans` is scratch.
void count_member(const CpWorkload& w, const RowLayout& layout, const RunShardPlan& runs,
                  std::int32_t r, RankWork& rw, std::vector<Interval>& spans,
                  std::vector<Interval>* all) {
  std::int64_t current = -1;  // the local block `spans` belongs to
  walk_member(layout, w.block_size, runs, r,
              [&](std::int64_t a, std::int64_t b, std::int64_t doc, std::int64_t local_block) {
                if (local_block != current) {
                  rw.tiles += union_size(spans);
                  spans.clear();
                  current = local_block;
                }
                const std::int64_t db = layout.doc_begin(doc);
                const std::int64_t de = layout.doc_end(doc);
                const Interval keys{key_range(w.mask, db, de, a).lo / w.block_size,
                                    key_range(w.mask, db, de, b - 1).hi / w.block_size};
                spans.push_back(keys);
                if (all) all->push_back(keys);
                rw.tokens += b - a;
              });
  rw.tiles += union_size(spans);
  spans.clear();
}

}  // namespace

std::vector<RankWork> run_tokens_and_tiles(const CpWorkload& w, const RunShardPlan& runs) {
  const RowLayout layout(w);
  std::vector<RankWork> work(static_cast<std::size_t>(runs.ranks));
  std::vector<Interval> spans;
  for (std::int32_t r = 0; r < runs.ranks; ++r) {
    count_member(w, layout, runs, r, work[static_cast<std::size_t>(r)], spans, nullptr);
  }
  return work;
}

namespace {

// One walk per member gives its tokens, its tiles (count_member) and the
// key blocks it touches in all (the union over its blocks).
SlotRunsCounts count_slot_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                               const RunShardPlan& runs) {
  SlotRunsCounts c{slot_workload(request, slot), {}, {}, {}, {}, {}};
  const CpWorkload& w = c.w;
  const RowLayout layout(w);
  const bool exchange = runs.ranks > 1;
  c.work.resize(static_cast<std::size_t>(runs.ranks));
  if (exchange) c.touched_at.push_back(0);
  std::vector<Interval> spans;  // the current local block's
  std::vector<Interval> all;    // the member's
  for (std::int32_t r = 0; r < runs.ranks; ++r) {
    count_member(w, layout, runs, r, c.work[static_cast<std::size_t>(r)], spans,
                 exchange ? &all : nullptr);
    if (exchange) {
      merge_into(all, c.touched);
      c.touched_at.push_back(c.touched.size());
      all.clear();
    }
  }
  if (exchange) c.holders = holders_of_runs(runs, w.tokens, w.block_size);
  compute_work(w, materialize_runs(runs), &c.full);
  return c;
}

SlotCost price_counted(const ScheduleRequest& request, const ScheduleSlot& slot,
                       const SlotRunsCounts& c) {
  const std::size_t g = c.work.size();
  SlotCounts counts = slot_counts_of(c.work, &c.full);
  if (g > 1) {
    // Range sums pay off only where blocks have many holders (a row cut
    // into chunks far shorter than a block, over many members).
    std::unique_ptr<HolderSums> sums;
    if (c.holders.entries.size() > 4 * (c.holders.offset.size() - 1)) {
      sums = std::make_unique<HolderSums>(c.holders, g);
    }
    const std::vector<std::int32_t> index = start_exchange(counts);
    const std::size_t a = counts.active.size();
    for (std::size_t x = 0; x < a; ++x) {
      std::int64_t* from = counts.received.data() + x * a;
      add_receipts(c.holders, sums, c.touched_by(static_cast<std::size_t>(counts.active[x])),
                   counts.active, index, from);
      from[x] = 0;  // its own
    }
  }
  return price_slot_counts(request.profile, slot.ranks, counts);
}

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

ExchangeTotals exchange_totals(const SlotRunsCounts& c, const std::vector<std::int32_t>& node) {
  const std::size_t g = c.work.size();
  const std::size_t blocks = c.holders.offset.size() - 1;
  const std::size_t nodes =
      static_cast<std::size_t>(*std::max_element(node.begin(), node.end())) + 1;
  // Per block, in all and per node (row n x (blocks + 1)): the running sum
  // of the real tokens held, and how many members' touched intervals cover
  // the block (difference arrays, then summed).
  const std::size_t row = blocks + 1;
  std::vector<std::int64_t> sum(row, 0);
  std::vector<std::int64_t> node_sum(nodes * row, 0);
  std::vector<std::int32_t> touchers(row, 0);
  std::vector<std::int32_t> node_touchers(nodes * row, 0);
  for (std::size_t k = 0; k < blocks; ++k) {
    for (std::int64_t i = c.holders.offset[k]; i < c.holders.offset[k + 1]; ++i) {
      const auto& [j, n] = c.holders.entries[static_cast<std::size_t>(i)];
      sum[k + 1] += n;
      node_sum[static_cast<std::size_t>(node[static_cast<std::size_t>(j)]) * row + k + 1] += n;
    }
  }
  ExchangeTotals t{std::vector<std::int64_t>(g, 0), std::vector<std::int64_t>(g, 0),
                   std::vector<std::int32_t>(g, 0)};
  for (std::size_t k = 1; k < row; ++k) sum[k] += sum[k - 1];
  for (std::size_t n = 0; n < nodes; ++n) {
    std::int64_t* const mine = node_sum.data() + n * row;
    for (std::size_t k = 1; k < row; ++k) mine[k] += mine[k - 1];
  }
  for (std::size_t r = 0; r < g; ++r) {
    const std::size_t own = static_cast<std::size_t>(node[r]) * row;
    for (const auto& [lo, hi] : c.touched_by(r)) {
      const auto l = static_cast<std::size_t>(lo);
      const auto h = static_cast<std::size_t>(hi) + 1;
      ++touchers[l];
      --touchers[h];
      ++node_touchers[own + l];
      --node_touchers[own + h];
      const std::int64_t near = node_sum[own + h] - node_sum[own + l];
      t.near[r] += near;
      t.far[r] += sum[h] - sum[l] - near;
    }
  }
  for (std::size_t k = 1; k < row; ++k) touchers[k] += touchers[k - 1];
  for (std::size_t n = 0; n < nodes; ++n) {
    std::int32_t* const mine = node_touchers.data() + n * row;
    for (std::size_t k = 1; k < row; ++k) mine[k] += mine[k - 1];
  }
  // Blocks ascend, so each member's place in its touched intervals only
  // moves forward.
  std::vector<std::size_t> place(g, 0);
  for (std::size_t k = 0; k < blocks; ++k) {
    for (std::int64_t i = c.holders.offset[k]; i < c.holders.offset[k + 1]; ++i) {
      const auto& [j, n] = c.holders.entries[static_cast<std::size_t>(i)];
      const auto m = static_cast<std::size_t>(j);
      const std::span<const Interval> mine = c.touched_by(m);
      while (place[m] < mine.size() && mine[place[m]].second < static_cast<std::int64_t>(k)) {
        ++place[m];
      }
      const bool touches =
          place[m] < mine.size() && mine[place[m]].first <= static_cast<std::int64_t>(k);
      const std::int32_t self = touches ? 1 : 0;
      const std::int32_t near = node_touchers[static_cast<std::size_t>(node[m]) * row + k] - self;
      t.near[m] += n * near;
      t.far[m] += n * (touchers[k] - self - near);
      t.peers[m] = std::max(t.peers[m], touchers[k] - self);
      if (touches) t.near[m] -= n;  // its own tokens are not received
    }
  }
  return t;
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

Floors floor_counted(const ScheduleRequest& request, const ScheduleSlot& slot,
                     const SlotRunsCounts& c, bool with_exchange) {
  const SlotCounts counts = slot_counts_of(c.work, &c.full);
  const SlotCost compute = price_slot_counts(request.profile, slot.ranks, counts);
  const CostProfile& p = request.profile;
  Floors f{compute.end_seconds, compute.end_seconds};
  if (c.work.size() <= 1 || (!with_exchange && !(p.latency_seconds > 0))) return f;
  // Every other member holding tokens of a key block a member touches sends
  // it some: a peer. A block's holders are its entries (one per member).
  std::vector<std::int32_t> per_block(c.holders.offset.size() - 1);
  for (std::size_t k = 0; k < per_block.size(); ++k) {
    per_block[k] = static_cast<std::int32_t>(c.holders.offset[k + 1] - c.holders.offset[k]);
  }
  const SparseMax holders(std::move(per_block));
  // Members' nodes, numbered from 0 in order of first appearance.
  std::vector<std::int32_t> node(with_exchange ? c.work.size() : 0);
  {
    std::vector<std::int32_t> seen;
    const std::int32_t per_node = std::max(1, p.ranks_per_node);
    for (std::size_t r = 0; r < node.size(); ++r) {
      const std::int32_t n = slot.ranks[r] / per_node;
      const auto it = std::find(seen.begin(), seen.end(), n);
      node[r] = static_cast<std::int32_t>(it - seen.begin());
      if (it == seen.end()) seen.push_back(n);
    }
  }
  const ExchangeTotals t = with_exchange ? exchange_totals(c, node) : ExchangeTotals{};
  // Each link's bytes priced at once, a hair under so that one product per
  // link cannot round above the table's sum of one product per peer.
  const double near_token = p.kv_bytes_per_token / p.intra_node_bytes_per_second * (1 - 1e-9);
  const double far_token = p.kv_bytes_per_token / p.inter_node_bytes_per_second * (1 - 1e-9);
  for (std::size_t r = 0; r < c.work.size(); ++r) {
    if (c.work[r].tokens == 0) continue;  // holds nothing: exchanges nothing
    std::int32_t most = 0;
    for (const auto& [lo, hi] : c.touched_by(r)) most = std::max(most, holders.max(lo, hi));
    const double compute_seconds = compute.members[r].compute_seconds;
    if (most > 1 && p.latency_seconds > 0) {
      const double comm = p.latency_seconds * (most - 1);
      f.peers = std::max(
          f.peers, compute_seconds + comm - p.exchange_overlap * std::min(compute_seconds, comm));
    }
    if (!with_exchange) continue;
    double comm = static_cast<double>(t.near[r]) * near_token +
                  static_cast<double>(t.far[r]) * far_token +
                  p.latency_seconds * std::max(most - 1, t.peers[r]);
    comm -= p.exchange_overlap * std::min(compute_seconds, comm);
    f.exchange = std::max(f.exchange, (compute_seconds + comm) * (1 - 1e-12));
  }
  f.exchange = std::max(f.exchange, f.peers);
  return f;
}

}  // namespace

SlotCost evaluate_slot_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                            const RunShardPlan& runs) {
  return price_counted(request, slot, count_slot_runs(request, slot, runs));
}

double slot_end_floor_runs(const ScheduleRequest& request, const ScheduleSlot& slot,
                           const RunShardPlan& runs, bool exchange_floor) {
  const Floors f =
      floor_counted(request, slot, count_slot_runs(request, slot, runs), exchange_floor);
  return exchange_floor ? f.exchange : f.peers;
}

}  // namespace fulcrum::reference
