// hybrid's drafts (rules 1 to 4 of schedule_hybrid.cpp): long pieces'
// groups on the ranks' timeline, short pieces into the waits and then LPT
// with moves and swaps.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/schedule_hybrid_draft.h"
#include "strategies/schedule_hybrid_draft_rows.h"

namespace fulcrum::hybrid {

std::int64_t tiles_alone(const MaskSpec& mask, std::int64_t len, std::int64_t b) {
  const std::int64_t nb = ceil_div(len, b);
  if (mask.kind == MaskKind::kCausal) return nb * (nb + 1) / 2;
  if (mask.kind == MaskKind::kFull) return nb * nb;
  CpWorkload w;
  w.tokens = len;
  w.mask = mask;
  w.block_size = b;
  std::int64_t tiles = 0;
  for (const std::int64_t t : block_costs(w).tiles) tiles += t;
  return tiles;
}

namespace {

// A change rebalance makes: piece (from_row, from_index) of the most loaded
// rank moves to row to_row of the least loaded one (-1: a new row), or, with
// to_index >= 0, swaps with the piece there.
struct Change {
  std::int64_t from_row = -1, from_index = -1, to_row = -1, to_index = -1;
};

// The move or swap between ranks hi and lo that lowers the larger of their
// loads most, or none (from_row < 0).
Change best_change(const Batch& batch, const std::vector<Row>& from, const std::vector<Row>& to,
                   double hi_load, double lo_load) {
  const double slot_cost = batch.request.profile.slot_seconds;
  const auto& pieces = batch.pieces;
  const auto& work = batch.work;
  const auto fits_row = [&](std::int64_t len) {
    for (std::size_t r = 0; r < to.size(); ++r) {
      if (to[r].room >= len) return static_cast<std::int64_t>(r);
    }
    return std::int64_t{-1};
  };
  double best = hi_load;
  Change change;
  for (std::size_t r = 0; r < from.size(); ++r) {
    for (std::size_t k = 0; k < from[r].pieces.size(); ++k) {
      const std::size_t p = from[r].pieces[k];
      const std::int64_t len = pieces[p].length;
      const double freed = work[p] + (from[r].pieces.size() == 1 ? slot_cost : 0.0);
      // Move.
      const std::int64_t dest = fits_row(len);
      const double added = work[p] + (dest < 0 ? slot_cost : 0.0);
      const double moved = std::max(hi_load - freed, lo_load + added);
      if (moved < best - 1e-12) {
        best = moved;
        change = {static_cast<std::int64_t>(r), static_cast<std::int64_t>(k), dest, -1};
      }
      // Swap with a lighter piece of lo.
      for (std::size_t r2 = 0; r2 < to.size(); ++r2) {
        for (std::size_t k2 = 0; k2 < to[r2].pieces.size(); ++k2) {
          const std::size_t q = to[r2].pieces[k2];
          if (work[q] >= work[p]) continue;
          const std::int64_t lq = pieces[q].length;
          if (from[r].room + len < lq || to[r2].room + lq < len) continue;
          const double swapped = std::max(hi_load - work[p] + work[q], lo_load - work[q] + work[p]);
          if (swapped < best - 1e-12) {
            best = swapped;
            change = {static_cast<std::int64_t>(r), static_cast<std::int64_t>(k),
                      static_cast<std::int64_t>(r2), static_cast<std::int64_t>(k2)};
          }
        }
      }
    }
  }
  return change;
}

// Applies `c` to the rows and loads of ranks hi and lo.
void apply_change(const Batch& batch, const Change& c, std::vector<Row>& from, std::vector<Row>& to,
                  double& hi_load, double& lo_load) {
  const double slot_cost = batch.request.profile.slot_seconds;
  const auto& pieces = batch.pieces;
  const auto& work = batch.work;
  Row& source = from[static_cast<std::size_t>(c.from_row)];
  const std::size_t p = source.pieces[static_cast<std::size_t>(c.from_index)];
  if (c.to_index >= 0) {
    Row& target = to[static_cast<std::size_t>(c.to_row)];
    const std::size_t q = target.pieces[static_cast<std::size_t>(c.to_index)];
    source.pieces[static_cast<std::size_t>(c.from_index)] = q;
    source.room += pieces[p].length - pieces[q].length;
    target.pieces[static_cast<std::size_t>(c.to_index)] = p;
    target.room += pieces[q].length - pieces[p].length;
    hi_load += work[q] - work[p];
    lo_load += work[p] - work[q];
    return;
  }
  source.pieces.erase(source.pieces.begin() + c.from_index);
  source.room += pieces[p].length;
  hi_load -= work[p];
  if (source.pieces.empty()) {
    from.erase(from.begin() + c.from_row);
    hi_load -= slot_cost;
  }
  std::int64_t row = c.to_row;
  if (row < 0) {
    to.push_back({batch.request.max_tokens_per_rank, {}});
    row = static_cast<std::int64_t>(to.size()) - 1;
    lo_load += slot_cost;
  }
  to[static_cast<std::size_t>(row)].pieces.push_back(p);
  to[static_cast<std::size_t>(row)].room -= pieces[p].length;
  lo_load += work[p];
}

// LPT leaves the most loaded rank up to one piece above the others; moving
// a piece from it to the least loaded rank, or swapping one for a smaller
// one there, closes much of that gap. Rows keep their T budget; a row left
// empty is dropped (its fixed slot cost with it), a piece that fits no row
// of its new rank opens one. Stops when neither lowers the pair's maximum.
// `load` may cover only the first ranks: every rank past them has no rows
// and load 0, and is added (the lowest first) when it is the most or least
// loaded, as a scan of every rank would find it. `book` keeps the ranks'
// rows: add() adds the next rank (none), open(a, side) lends rank a's rows
// as a list (side 0 the most loaded's, 1 the least's), and close(a, side)
// takes back the list as changed.
template <class Book>
void rebalance_rows(const Batch& batch, Book& book, std::vector<double>& load) {
  const std::int32_t world = batch.request.world_size;
  for (std::int32_t round = 0; round < 4 * world + 16; ++round) {
    const auto held = static_cast<std::int32_t>(load.size());
    if (held == 0) return;
    std::int32_t hi = 0;
    std::int32_t lo = 0;
    for (std::int32_t a = 1; a < held; ++a) {
      if (load[a] > load[hi]) hi = a;
      if (load[a] < load[lo]) lo = a;
    }
    if (held < world && (0.0 > load[hi] || 0.0 < load[lo])) {
      (0.0 > load[hi] ? hi : lo) = held;
      book.add();
      load.push_back(0.0);
    }
    if (hi == lo) return;
    std::vector<Row>& from = book.open(hi, 0);
    std::vector<Row>& to = book.open(lo, 1);
    const Change c = best_change(batch, from, to, load[hi], load[lo]);
    if (c.from_row < 0) return;
    apply_change(batch, c, from, to, load[hi], load[lo]);
    book.close(hi, 0);
    book.close(lo, 1);
  }
}

// A list per rank: lent as it is.
struct ListBook {
  std::vector<std::vector<Row>>& rows;
  void add() { rows.emplace_back(); }
  std::vector<Row>& open(std::int32_t a, int /*side*/) { return rows[static_cast<std::size_t>(a)]; }
  void close(std::int32_t /*a*/, int /*side*/) {}
};

}  // namespace

void rebalance(const Batch& batch, std::vector<std::vector<Row>>& rows, std::vector<double>& load) {
  ListBook book{rows};
  rebalance_rows(batch, book, load);
}

void rebalance_packed(const Batch& batch, std::vector<std::vector<Row>>& rows,
                      std::vector<double>& load) {
  std::size_t pieces = 0;
  for (const std::vector<Row>& mine : rows) {
    for (const Row& row : mine) pieces += row.pieces.size();
  }
  RowBook book(rows.size(), pieces);
  for (std::size_t a = 0; a < rows.size(); ++a) {
    for (const Row& row : rows[a]) {
      const std::int32_t r = book.new_row(static_cast<std::int32_t>(a), row.room);
      for (const std::size_t p : row.pieces) book.put(r, p, 0);
    }
  }
  rebalance_rows(batch, book, load);
  Draft d;
  book.write(d);
  rows.assign(d.ranks(), {});
  for (std::size_t a = 0; a < d.ranks(); ++a) {
    for (const RowSpan& row : d.rows_of(a)) {
      const std::span<const std::size_t> mine = d.pieces_of(row);
      rows[a].push_back({row.room, {mine.begin(), mine.end()}});
    }
  }
}

namespace {

// One draft under construction: the ranks' timeline (when each is free),
// the long pieces' groups placed on it in turn, then the short pieces.
//
// A small batch at large W touches few ranks, and every rank it has not
// touched is free at 0: such ranks come, in rank order, after every touched
// rank free at 0 or before and before every touched rank free later, in
// the order of free times. So the per-rank structures cover only the
// ranks below held_ (whole nodes, from rank 0), and the ranks past it are
// read in place (free_rank) and held once a group or a row takes one;
// what the draft decides is what it would with every rank held.
class Drafter {
 public:
  Drafter(const Batch& batch, const Estimator& est, GroupRule rule, bool every_rank)
      : batch_(batch),
        est_(est),
        rule_(rule),
        prof_(batch.request.profile),
        world_(batch.request.world_size),
        budget_(batch.request.max_tokens_per_rank),
        node_(batch.request.profile.ranks_per_node) {
    if (every_rank) hold_through(world_ - 1);
  }

  Draft run(double beat, std::span<const Draft> drawn,
            const std::function<bool(const Draft&)>& pack_anyway) {
    for (const std::size_t i : batch_.order) {
      if (batch_.grouped[i]) {
        place_group(i, group_size(i));
        ++grouped_;
      }
    }
    // A group's end is its start and its members' slot time (a function of
    // the piece, the members and their nodes), so groups alike leave the
    // same timeline and waits.
    for (const Draft& other : drawn) {
      if (other.makespan != kNoEnd && same_groups(other.long_slots, d_.long_slots)) return other;
    }
    fill_gaps();
    if (finish_lower_bound() * (1 - 1e-9) >= beat && !(pack_anyway && pack_anyway(d_))) {
      d_.makespan = kNoEnd;  // rows not packed: it cannot finish before `beat`
      return std::move(d_);
    }
    pack_rows();
    return std::move(d_);
  }

 private:
  static bool same_groups(const std::vector<LongSlot>& x, const std::vector<LongSlot>& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                      [](const LongSlot& a, const LongSlot& b) {
                        return a.piece == b.piece && a.start == b.start && a.ranks == b.ranks;
                      });
  }

  bool earlier(std::int32_t a, std::int32_t b) const {
    return free_at_[a] < free_at_[b] || (free_at_[a] == free_at_[b] && a < b);
  }

  double free_of(std::int32_t a) const { return a < held_ ? free_at_[a] : 0.0; }

  // How many held ranks are free at 0 or before: the ranks past held_ come
  // after them in by_free_'s order.
  std::size_t free_by_zero() const {
    return static_cast<std::size_t>(
        std::partition_point(by_free_.begin(), by_free_.end(),
                             [this](std::int32_t a) { return free_at_[a] <= 0.0; }) -
        by_free_.begin());
  }

  // The p-th rank of every rank by free time (ties by index); `zero` is
  // free_by_zero().
  std::int32_t free_rank(std::size_t p, std::size_t zero) const {
    const auto unheld = static_cast<std::size_t>(world_ - held_);
    if (p < zero) return by_free_[p];
    if (p < zero + unheld) return held_ + static_cast<std::int32_t>(p - zero);
    return by_free_[p - unheld];
  }

  // Holds every rank through rank a's node: free at 0, in by_free_ after
  // the held ranks free at 0 or before, each node's in rank order.
  void hold_through(std::int32_t a) {
    if (a < held_) return;
    const std::int32_t from = held_;
    held_ = static_cast<std::int32_t>(
        std::min<std::int64_t>(world_, (static_cast<std::int64_t>(a) / node_ + 1) * node_));
    free_at_.resize(static_cast<std::size_t>(held_), 0.0);
    const auto zero = static_cast<std::ptrdiff_t>(free_by_zero());
    const auto added = static_cast<std::ptrdiff_t>(held_ - from);
    const auto at = by_free_.insert(by_free_.begin() + zero, static_cast<std::size_t>(added), 0);
    std::iota(at, at + added, from);
    by_node_.resize(static_cast<std::size_t>(held_));
    std::iota(by_node_.begin() + from, by_node_.end(), from);
    for (std::int32_t first = from; first < held_; first += node_) {
      node_held_.push_back(std::min(world_, first + node_) - first);
    }
  }

  // Rule 2: the group size of long piece i under the draft's rule.
  std::int32_t group_size(std::size_t i) const {
    const std::int64_t len = batch_.pieces[i].length;
    const double work = batch_.work[i];
    // Room for the balanced planner's padding (at most a block per member)
    // where the world allows it; plan_hybrid falls back when it does not.
    auto g_min = static_cast<std::int32_t>(ceil_div(len, budget_));
    if (budget_ > batch_.request.block_size) {
      const std::int64_t roomy = ceil_div(len, budget_ - batch_.request.block_size);
      if (roomy <= world_) g_min = static_cast<std::int32_t>(roomy);
    }
    std::int32_t g = g_min;
    double best = std::numeric_limits<double>::infinity();
    const auto most = static_cast<std::int32_t>(std::clamp<std::int64_t>(
        widest_useful_group(len, batch_.request.block_size), g_min, world_));
    const std::size_t zero = free_by_zero();
    for (std::int32_t c = g_min; c <= most; ++c) {
      const double start = rule_ == GroupRule::kMeanLoad
                               ? 0.0
                               : free_of(free_rank(static_cast<std::size_t>(c - 1), zero));
      // No slot of c or more ranks ends before its fixed cost and latency
      // after its start, and a larger c starts no sooner (its c-th rank
      // frees up no sooner); once that reaches the best, no larger c can
      // win (nor, for the mean-load rules, fit, since the best then exceeds
      // the mean load).
      if (start + (prof_.slot_seconds + prof_.latency_seconds * (c - 1)) >= best) break;
      const double length = est_.slot_time(work, len, c, std::min(c, node_));
      const double end = start + length;
      if (rule_ == GroupRule::kBalancedEnd) {
        const double finish =
            std::max(end, batch_.mean_load + (overhead_ + c * length - work) / world_);
        if (finish < best) {
          best = finish;
          g = c;
        }
        continue;
      }
      if (end < best) {
        best = end;
        g = c;
      }
      if (rule_ != GroupRule::kSoonestEnd && end <= batch_.mean_load) return c;
    }
    return g;
  }

  // The fewest members any member has on its node, itself included.
  std::int32_t together_of(const std::vector<std::int32_t>& ranks) const {
    std::vector<std::int32_t> nodes;
    nodes.reserve(ranks.size());
    for (const std::int32_t a : ranks) nodes.push_back(a / node_);
    std::sort(nodes.begin(), nodes.end());
    auto least = static_cast<std::int32_t>(ranks.size());
    for (std::size_t k = 0; k < nodes.size();) {
      std::size_t e = k;
      while (e < nodes.size() && nodes[e] == nodes[k]) ++e;
      least = std::min(least, static_cast<std::int32_t>(e - k));
      k = e;
    }
    return least;
  }

  double idle_of(std::span<const std::int32_t> ranks, double at) const {
    double idle = 0;
    for (const std::int32_t a : ranks) idle += at - free_of(a);
    return idle;
  }

  // Rule 3: the members of long piece i's g-rank slot. Candidates: the g
  // ranks free earliest in the world, and, when a node can hold the group,
  // every run of g ranks of one node in the order they free up. A member
  // that frees up before the slot starts idles until then, and that idle
  // time is capacity no later piece gets back; so among the candidates
  // that end within the mean load the one costing the fewest rank-seconds
  // (g x slot time + idle) wins, and when none does, the one that ends
  // soonest.
  void place_group(std::size_t i, std::int32_t g) {
    const std::int64_t len = batch_.pieces[i].length;
    const double work = batch_.work[i];
    std::vector<std::int32_t> members(static_cast<std::size_t>(g));
    const std::size_t zero = free_by_zero();
    for (std::size_t p = 0; p < members.size(); ++p) members[p] = free_rank(p, zero);
    double best_start = free_of(members.back());
    const double slot_time = est_.slot_time(work, len, g, together_of(members));
    double best_end = best_start + slot_time;
    double best_cost = g * slot_time + idle_of(members, best_start);
    bool best_fits = best_end <= batch_.mean_load;
    if (g > 1 && g <= node_) {
      const double local_time = est_.slot_time(work, len, g, g);
      // One run of a node: kept where it fits at less cost, or, while none
      // fits, ends sooner; false where it does not fit.
      const auto consider = [&](std::span<const std::int32_t> run) {
        const double at = free_of(run.back());
        const double end_here = at + local_time;
        const bool fits = end_here <= batch_.mean_load;
        const double cost = fits ? g * local_time + idle_of(run, at) : 0.0;
        if (fits ? (!best_fits || cost < best_cost) : (!best_fits && end_here < best_end)) {
          members.assign(run.begin(), run.end());
          best_start = at;
          best_end = end_here;
          best_cost = fits ? cost : g * local_time + idle_of(run, at);
          best_fits = fits;
        }
        return fits;
      };
      // No run costs less than its slot time (its idle is never negative:
      // a run's members free up no later than its last), so once a run
      // that fits costs that, no later one can win (strictly less): the
      // scan stops, the choice unchanged.
      const double least = g * local_time;
      // Each held node's ranks in the order they free up (by_node_).
      for (std::size_t n = 0; n < node_held_.size(); ++n) {
        const std::span<const std::int32_t> local = node_ranks(n);
        if (best_fits && best_cost <= least) break;
        if (static_cast<std::int32_t>(local.size()) < g) continue;
        // A later run starts no sooner (local is in free-time order): past
        // the first run that does not fit, none fits, and none ends
        // sooner than it, so that one is the node's last candidate.
        for (std::size_t k = 0; k + g <= local.size(); ++k) {
          if (!consider(std::span(local).subspan(k, static_cast<std::size_t>(g)))) break;
        }
      }
      // The nodes not held: every run of theirs starts at 0 with no idle,
      // the same end and cost as the first node's first run, so only that
      // one can win (strictly).
      const std::int32_t first = held_;
      if (first < world_ && !(best_fits && best_cost <= least) &&
          std::min(world_, first + node_) - first >= g) {
        std::vector<std::int32_t> run(static_cast<std::size_t>(g));
        std::iota(run.begin(), run.end(), first);
        consider(run);
      }
    }
    overhead_ += g * (best_end - best_start) - work;
    std::sort(members.begin(), members.end());
    commit(i, std::move(members), best_start, best_end);
  }

  // The slot on the timeline: its members' waits become gaps, and the
  // members move in by_free_ (kept sorted: only they change).
  void commit(std::size_t i, std::vector<std::int32_t> members, double start, double end) {
    hold_through(members.back());  // members ascending
    const auto cmp = [this](std::int32_t a, std::int32_t b) { return earlier(a, b); };
    // The members' places in by_free_, found while their times are the
    // ones it is sorted by; the holes are closed a stretch at a time.
    std::vector<std::size_t> place;
    place.reserve(members.size());
    for (const std::int32_t a : members) {
      place.push_back(static_cast<std::size_t>(
          std::lower_bound(by_free_.begin(), by_free_.end(), a, cmp) - by_free_.begin()));
    }
    std::sort(place.begin(), place.end());
    std::size_t kept = place.front();
    for (std::size_t k = 0; k < place.size(); ++k) {
      const std::size_t to = k + 1 < place.size() ? place[k + 1] : by_free_.size();
      std::copy(by_free_.begin() + static_cast<std::ptrdiff_t>(place[k] + 1),
                by_free_.begin() + static_cast<std::ptrdiff_t>(to),
                by_free_.begin() + static_cast<std::ptrdiff_t>(kept));
      kept += to - place[k] - 1;
    }
    by_free_.resize(kept);
    for (const std::int32_t a : members) {
      const double wait = start - free_at_[a] - prof_.slot_seconds;
      if (wait > 0) d_.gaps.push_back({a, free_at_[a], wait, budget_, {}});
      free_at_[a] = end;
    }
    // The members (ascending, one time) back in order: they go where the
    // ranks free at `end` are, merged with those by rank (seldom any), and
    // the ranks free later move up by g at once.
    const auto tie = std::partition_point(by_free_.begin(), by_free_.end(),
                                          [&](std::int32_t a) { return free_at_[a] < end; });
    const auto later = std::partition_point(tie, by_free_.end(),
                                            [&](std::int32_t a) { return free_at_[a] <= end; });
    tied_.assign(tie, later);
    const auto from = static_cast<std::size_t>(tie - by_free_.begin());
    const auto rest = static_cast<std::size_t>(by_free_.end() - later);
    by_free_.resize(by_free_.size() + members.size());
    std::copy_backward(by_free_.end() - static_cast<std::ptrdiff_t>(rest + members.size()),
                       by_free_.end() - static_cast<std::ptrdiff_t>(members.size()),
                       by_free_.end());
    std::merge(tied_.begin(), tied_.end(), members.begin(), members.end(),
               by_free_.begin() + static_cast<std::ptrdiff_t>(from));
    for (const std::int32_t a : members) {
      const auto n = static_cast<std::size_t>(a / node_);
      const std::span<std::int32_t> local = node_ranks(n);
      const auto at = std::find(local.begin(), local.end(), a);
      std::copy(at + 1, local.end(), at);
      --node_held_[n];
    }
    for (const std::int32_t a : members) {
      const auto n = static_cast<std::size_t>(a / node_);
      const std::span<std::int32_t> local = node_ranks(n);
      const auto at = std::lower_bound(local.begin(), local.end(), a, cmp);
      std::copy_backward(at, local.end(), local.end() + 1);
      *at = a;
      ++node_held_[n];
    }
    d_.long_slots.push_back({std::move(members), i, start});
  }

  // Rule 4, first part: short pieces into the waits, longest first, each
  // into the gap it fills best (least time left); a gap is one row.
  void fill_gaps() {
    in_gap_.assign(batch_.pieces.size(), 0);
    if (d_.gaps.empty()) return;
    std::multimap<double, std::size_t> by_time;
    for (std::size_t k = 0; k < d_.gaps.size(); ++k) by_time.emplace(d_.gaps[k].seconds, k);
    for (const std::size_t i : batch_.order) {
      const std::int64_t len = batch_.pieces[i].length;
      if (batch_.grouped[i]) continue;
      auto it = by_time.lower_bound(batch_.work[i]);
      for (int tries = 0; it != by_time.end() && tries < 8; ++it, ++tries) {
        if (d_.gaps[it->second].room >= len) break;
      }
      if (it == by_time.end() || d_.gaps[it->second].room < len) continue;
      Gap& gap = d_.gaps[it->second];
      const std::size_t k = it->second;
      by_time.erase(it);
      gap.seconds -= batch_.work[i];
      gap.room -= len;
      gap.pieces.push_back(i);
      in_gap_[i] = 1;
      ++gapped_;
      by_time.emplace(gap.seconds, k);
    }
  }

  // No packing of the rows left ends before this (pack_rows' makespan, the
  // most loaded rank's load, rebalanced): every rank's load starts at its
  // free time and only rows are added to it, and the loads sum to the free
  // times, the rows' pieces' work and a fixed cost per row, with at least a
  // row per T of the rows' tokens. (Moves and swaps keep that sum; their
  // rounding is what the caller's margin is for.)
  double finish_lower_bound() const {
    double latest = 0;
    double total = 0;
    for (const double t : free_at_) {
      latest = std::max(latest, t);
      total += t;
    }
    std::int64_t tokens = 0;
    for (const std::size_t i : batch_.order) {
      if (batch_.grouped[i] || in_gap_[i]) continue;
      total += batch_.work[i];
      tokens += batch_.pieces[i].length;
    }
    total += prof_.slot_seconds * static_cast<double>(ceil_div(tokens, budget_));
    return std::max(latest, total / world_);
  }

  // Rule 4, the rest: LPT onto the least loaded rank, best fit into its
  // rows of T tokens, then rebalance. The ranks not held wait, load 0, in
  // rank order beside the heap; one taken gets its rows then.
  void pack_rows() {
    RowBook book(static_cast<std::size_t>(held_), batch_.pieces.size() - grouped_ - gapped_);
    // The held ranks by load, lightest first (ties by rank); no two
    // entries tie, so it hands out the ranks in one order however it is
    // kept.
    LoadHeap lightest;
    lightest.build(free_at_);
    std::int32_t next = held_;  // the lowest rank not yet in the book
    for (const std::size_t i : batch_.order) {
      const std::int64_t len = batch_.pieces[i].length;
      if (batch_.grouped[i] || in_gap_[i]) continue;
      LoadHeap::Load least{0.0, next};
      const bool fresh =
          next < world_ && (lightest.empty() || LoadHeap::lighter(least, lightest.top()));
      if (fresh) {
        book.add();
        ++next;
      } else {
        least = lightest.top();
      }
      auto [load, a] = least;
      std::int32_t fit = RowBook::kNone;
      for (std::int32_t r = book.first_row(a); r != RowBook::kNone; r = book.next_row(r)) {
        if (book.room(r) >= len && (fit == RowBook::kNone || book.room(r) < book.room(fit))) {
          fit = r;
        }
      }
      if (fit == RowBook::kNone) {
        fit = book.new_row(a, budget_);
        load += prof_.slot_seconds;
      }
      book.put(fit, i, len);
      // The rank's load only grows: it replaces the top it was, or joins.
      if (fresh) {
        lightest.push({load + batch_.work[i], a});
      } else {
        lightest.raise_top(load + batch_.work[i]);
      }
    }
    // Every rank in the book is in the heap once.
    std::vector<double> load(book.ranks(), 0.0);
    for (const auto& [l, a] : lightest.entries()) load[static_cast<std::size_t>(a)] = l;
    rebalance_rows(batch_, book, load);
    book.write(d_);
    // The ranks past `load` end at 0.
    const double top = load.empty() ? 0.0 : *std::max_element(load.begin(), load.end());
    d_.makespan = static_cast<std::int32_t>(load.size()) < world_ && top < 0.0 ? 0.0 : top;
  }

  const Batch& batch_;
  const Estimator& est_;
  const GroupRule rule_;
  const CostProfile& prof_;
  const std::int32_t world_;
  const std::int64_t budget_;
  const std::int32_t node_;
  Draft d_;
  std::int32_t held_ = 0;        // ranks below it held; past it free at 0, untouched
  std::vector<double> free_at_;  // per held rank
  // The held ranks by the time they are free (ties by index).
  std::vector<std::int32_t> by_free_;
  // Per held node, its ranks as by_free_ orders them: node n's are the first
  // node_held_[n] entries from n x node_ (all of them but inside commit).
  std::vector<std::int32_t> by_node_;
  std::vector<std::int32_t> node_held_;
  std::span<std::int32_t> node_ranks(std::size_t n) {
    return {by_node_.data() + n * static_cast<std::size_t>(node_),
            static_cast<std::size_t>(node_held_[n])};
  }
  std::vector<std::int32_t> tied_;  // commit's scratch
  std::vector<char> in_gap_;
  double overhead_ = 0;      // rank-seconds long slots spend beyond their work
  std::size_t grouped_ = 0;  // pieces placed in groups (rule 3)
  std::size_t gapped_ = 0;   // pieces placed in gaps (rule 4)
};

}  // namespace

Draft draft(const Batch& batch, const Estimator& est, GroupRule rule, double beat, bool every_rank,
            std::span<const Draft> drawn, const std::function<bool(const Draft&)>& pack_anyway) {
  return Drafter(batch, est, rule, every_rank).run(beat, drawn, pack_anyway);
}

}  // namespace fulcrum::hybrid
