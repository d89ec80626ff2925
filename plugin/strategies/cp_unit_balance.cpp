// Balancing a row's units over the CP ranks: pieces dealt first, full
// units dealt in rounds, then refined by swaps (cp_balanced.cpp says why).

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp::detail {

namespace {

// Indices 0..n-1 ordered by key descending, ties by index ascending, with
// the keys quantised to 10 bits. Keys within 1/1024 of the largest fall in
// one bucket and keep their index order, which only reorders units within
// a deal round, where the deal itself decides. The buckets are sorted in
// two stable counting passes of 5 bits each (low, then high): the order of
// one pass over 1,024 counters, in O(n + 64) (a row's units are a few
// dozen to a few thousand), and a comparison sort of them costs several
// times more. Each array is written before it is read: none is zeroed.
std::unique_ptr<std::int32_t[]> order_by_key_desc(std::span<const double> key) {
  const std::size_t n = key.size();
  auto order = std::make_unique_for_overwrite<std::int32_t[]>(n);
  const double top = n == 0 ? 0.0 : *std::max_element(key.begin(), key.end());
  if (!(top > 0.0)) {
    std::iota(order.get(), order.get() + n, 0);
    return order;
  }
  constexpr std::uint32_t kTop = (1u << 10) - 1;
  constexpr std::uint32_t kDigit = 5;
  constexpr std::uint32_t kLow = (1u << kDigit) - 1;
  const double scale = kTop / top;
  auto bucket = std::make_unique_for_overwrite<std::uint32_t[]>(n);
  std::array<std::uint32_t, kLow + 2> low_start{};
  std::array<std::uint32_t, kLow + 2> high_start{};
  for (std::size_t i = 0; i < n; ++i) {
    // Descending keys = ascending complements.
    bucket[i] = kTop - static_cast<std::uint32_t>(std::min(key[i] * scale, double{kTop}));
    ++low_start[(bucket[i] & kLow) + 1];
    ++high_start[(bucket[i] >> kDigit) + 1];
  }
  for (std::uint32_t b = 1; b <= kLow + 1; ++b) {
    low_start[b] += low_start[b - 1];
    high_start[b] += high_start[b - 1];
  }
  auto by_low = std::make_unique_for_overwrite<std::int32_t[]>(n);
  for (std::size_t i = 0; i < n; ++i) {
    by_low[low_start[bucket[i] & kLow]++] = static_cast<std::int32_t>(i);
  }
  for (std::size_t x = 0; x < n; ++x) {
    const std::int32_t i = by_low[x];
    order[high_start[bucket[i] >> kDigit]++] = i;
  }
  return order;
}

// The full units' refinement state: for every rank its full units sorted by
// combined cost (descending) in a fixed-stride slot array, and its loads
// normalised so that a perfectly balanced rank is at 1 in both models.
class UnitRefiner {
 public:
  UnitRefiner(const Units& units, const std::vector<std::int32_t>& full, std::int32_t ranks,
              double wp, double wt, std::vector<double> base_p, std::vector<double> base_t)
      : ranks_(ranks),
        units_(static_cast<std::int64_t>(full.size())),
        per_rank_(static_cast<std::int64_t>(full.size()) / ranks),
        extra_(static_cast<std::int64_t>(full.size()) % ranks),
        stride_(per_rank_ + (extra_ > 0 ? 1 : 0)),
        lp_(std::move(base_p)),
        lt_(std::move(base_t)) {
    const std::size_t f = full.size();
    // Allocated, then written in place: neither a push_back's capacity test
    // per unit nor a zeroing first.
    xp_ = std::make_unique_for_overwrite<double[]>(f);
    xt_ = std::make_unique_for_overwrite<double[]>(f);
    c_ = std::make_unique_for_overwrite<double[]>(f);
    for (std::size_t i = 0; i < f; ++i) {
      xp_[i] = units.pairs[static_cast<std::size_t>(full[i])] * wp;
      xt_[i] = units.tiles[static_cast<std::size_t>(full[i])] * wt;
      c_[i] = xp_[i] + xt_[i];
    }
    // Every full unit is placed by the deal: its owner is written there.
    owner_ = std::make_unique_for_overwrite<std::int32_t[]>(f);
  }

  // Deals the full units in rounds of P, largest combined cost first, one to
  // each rank per round (the last, short round to ranks 0..extra-1), so the
  // counts come out right by construction: a plain greedy fills the light
  // ranks' counts with big units and leaves the small ones to the heavy
  // ranks. Within a round the free ranks are ordered by their load along
  // the round's total cost vector, and each unit, largest first, goes to the
  // one among the first kDealWindow of them whose load vector has the
  // smallest dot product with the unit's cost vector: the rank whose sum of
  // squared loads grows least, so pair-heavy units go to ranks light in
  // pairs and tile-heavy ones to ranks light in tiles. The window keeps the
  // deal at O(units + rounds * P log P); on the benchmark mixes it is as good
  // as scanning every free rank.
  void deal() {
    constexpr std::int32_t kDealWindow = 4;
    const std::int64_t f = units_;
    order_ = order_by_key_desc({c_.get(), static_cast<std::size_t>(units_)});
    const std::int32_t* const order = order_.get();
    std::vector<std::int32_t> free(static_cast<std::size_t>(ranks_));
    std::vector<std::uint64_t> sorted(static_cast<std::size_t>(ranks_));
    // Last round's order, fed to the insertion sort from its heaviest
    // rank: the lightest ranks take a round's largest units, so the order
    // partly turns over from one round to the next, and on the benchmark
    // mixes this end moves fewer entries (the sort's result is the same
    // from any start: the keys are distinct).
    std::vector<std::int32_t> previous(static_cast<std::size_t>(ranks_));
    std::iota(previous.begin(), previous.end(), 0);
    for (std::int64_t start = 0; start < f; start += ranks_) {
      const std::int64_t stop = std::min<std::int64_t>(f, start + ranks_);
      std::int32_t open = stop - start == ranks_ ? ranks_ : static_cast<std::int32_t>(extra_);
      if (open <= kDealWindow) {
        // The window holds every free rank: each pick is the least dot
        // product over all of them (ties: the lower rank) in any order, so
        // they are not put in order (a row of at most kDealWindow ranks
        // never reads `previous`; a longer row's short last round, none after
        // it).
        std::iota(free.begin(), free.begin() + open, 0);
      } else {
        double sp = 0.0;
        double st = 0.0;
        for (std::int64_t i = start; i < stop; ++i) {
          sp += xp_[order[static_cast<std::size_t>(i)]];
          st += xt_[order[static_cast<std::size_t>(i)]];
        }
        // Sort the ranks by key with the key's float bits packed above the
        // rank index: plain integer compares, ties to the lower rank. Keys
        // are non-negative, so their bits order like their values.
        std::int32_t m = 0;
        for (auto it = previous.rbegin(); it != previous.rend(); ++it) {
          const std::int32_t r = *it;
          if (r >= open) continue;  // the last, short round serves 0..extra-1
          const float key = static_cast<float>(lp_[r] * sp + lt_[r] * st);
          std::uint64_t packed = (std::uint64_t{std::bit_cast<std::uint32_t>(key)} << 32) |
                                 static_cast<std::uint32_t>(r);
          std::int32_t j = m++;
          for (; j > 0 && sorted[j - 1] > packed; --j) sorted[j] = sorted[j - 1];
          sorted[j] = packed;
        }
        for (std::int32_t j = 0; j < open; ++j) {
          free[j] = static_cast<std::int32_t>(sorted[j] & 0xffffffffu);
        }
        if (open == ranks_) std::copy(free.begin(), free.end(), previous.begin());
      }
      // The free ranks in order are free[head .. head + open): a pick,
      // always among the first few, is taken out by moving those before it
      // up one place, not those after it down.
      std::int32_t head = 0;
      for (std::int64_t i = start; i < stop; ++i) {
        const std::int32_t k = order[static_cast<std::size_t>(i)];
        const double xp = xp_[k];
        const double xt = xt_[k];
        std::int32_t* const live = free.data() + head;
        std::int32_t pick = 0;
        double least = lp_[live[0]] * xp + lt_[live[0]] * xt;
        const auto consider = [&](std::int32_t j) {
          const double kj = lp_[live[j]] * xp + lt_[live[j]] * xt;
          if (kj < least || (kj == least && live[j] < live[pick])) {
            least = kj;
            pick = j;
          }
        };
        // A whole window (most picks) by a loop of fixed length, unrolled.
        if (open >= kDealWindow) {
          for (std::int32_t j = 1; j < kDealWindow; ++j) consider(j);
        } else {
          for (std::int32_t j = 1; j < open; ++j) consider(j);
        }
        const std::int32_t best = live[pick];
        // Those before the pick move up one place, written out: as a loop
        // it became a call to memmove for at most three entries.
        static_assert(kDealWindow == 4);
        switch (pick) {
          case 3:
            live[3] = live[2];
            [[fallthrough]];
          case 2:
            live[2] = live[1];
            [[fallthrough]];
          case 1:
            live[1] = live[0];
            break;
          default:
            break;
        }
        ++head;
        --open;
        place(k, best);
      }
    }
  }

  // Gives unit k to rank r.
  void place(std::int32_t k, std::int32_t r) {
    owner_[k] = r;
    lp_[r] += xp_[k];
    lt_[r] += xt_[k];
  }

  // Each rank's slots: its units in the order dealt (in descending cost).
  // Written when the first swap is sought: most rows end the refinement
  // before one (the deal is within the tolerance), and never read them.
  void fill_slots() {
    const auto slots = static_cast<std::size_t>(ranks_ * stride_);
    slot_ = std::make_unique_for_overwrite<std::int32_t[]>(slots);
    slot_c_ = std::make_unique_for_overwrite<double[]>(slots);
    slot_p_ = std::make_unique_for_overwrite<double[]>(slots);
    slot_t_ = std::make_unique_for_overwrite<double[]>(slots);
    count_.assign(static_cast<std::size_t>(ranks_), 0);
    for (std::int64_t i = 0; i < units_; ++i) {
      const std::int32_t k = order_[i];
      const std::int32_t r = owner_[k];
      const std::int64_t at = r * stride_ + count_[r]++;
      slot_[at] = k;
      slot_c_[at] = c_[k];
      slot_p_[at] = xp_[k];
      slot_t_[at] = xt_[k];
    }
  }

  // Moves work off the rank that attains the maximum until the score is
  // within the tolerance, no swap helps, or the round budget is spent.
  std::int64_t refine(double tolerance, std::int64_t max_rounds) {
    std::vector<std::int32_t> light(static_cast<std::size_t>(ranks_));
    std::vector<double> level(static_cast<std::size_t>(ranks_));
    // No rank can be below the mean load, and the mean tile load exceeds 1
    // by what end-aligned documents and piece tails add to the unsharded
    // tiles: aim at the tolerance above that floor, not above 1.
    double mean_p = 0.0;
    double mean_t = 0.0;
    for (std::int32_t r = 0; r < ranks_; ++r) {
      mean_p += lp_[r];
      mean_t += lt_[r];
    }
    const double floor = std::max({1.0, mean_p / ranks_, mean_t / ranks_});
    std::int64_t round = 0;
    for (; round < max_rounds; ++round) {
      std::int32_t heavy = 0;
      for (std::int32_t r = 0; r < ranks_; ++r) {
        level[r] = std::max(lp_[r], lt_[r]);
        if (level[r] > level[heavy]) heavy = r;
      }
      const double top = level[heavy];
      if (top <= floor + tolerance) break;
      if (!slot_) fill_slots();
      // Partners lightest first in the model where the heavy rank binds: a
      // rank heavy only in the other model is the one that can take this
      // model's work and give back that model's.
      const std::vector<double>& binding = lp_[heavy] >= lt_[heavy] ? lp_ : lt_;
      // A step must lower the larger of the two ranks' loads strictly; the
      // relative margin keeps rounding noise from cycling.
      const double must_beat = top * (1.0 - 1e-12);
      // Past the eight lightest a swap rarely exists, and a round that finds
      // none ends the refinement: the cap bounds that last round's cost.
      // Only the kPartners lightest besides the heavy rank are tried, so
      // only that many and one are put in order (the order is total: ties
      // by index), not every rank.
      constexpr int kPartners = 8;
      std::iota(light.begin(), light.end(), 0);
      const auto ordered = light.begin() + std::min<std::ptrdiff_t>(kPartners + 1, ranks_);
      std::partial_sort(light.begin(), ordered, light.end(),
                        [&binding](std::int32_t x, std::int32_t y) {
                          return binding[x] < binding[y] || (binding[x] == binding[y] && x < y);
                        });
      int tried = 0;
      bool moved = false;
      for (auto it = light.begin(); it != ordered; ++it) {
        const std::int32_t l = *it;
        if (l == heavy) continue;
        if (++tried > kPartners) break;
        if (try_swap(heavy, l, must_beat)) {
          moved = true;
          break;
        }
      }
      if (!moved) break;
    }
    return round;
  }

  std::span<const std::int32_t> owner() const {
    return {owner_.get(), static_cast<std::size_t>(units_)};
  }

 private:
  double pair_max(std::int32_t h, std::int32_t l, double dp, double dt) const {
    return std::max(std::max(lp_[h] - dp, lt_[h] - dt), std::max(lp_[l] + dp, lt_[l] + dt));
  }

  // Among the swaps of a (in h) for b (in l) that bring max(loads of h and
  // l) below must_beat, the one that leaves the two ranks' loads closest to
  // the mean (least sum of squared deviations); applies it. Taking the
  // lowest maximum instead parks every rank just under the old maximum in
  // one model, a state no single swap can leave. With g the half-difference
  // of the two load vectors, the sum of squares after the swap grows with
  // |x_a - x_b - g|^2, so for each a this is a nearest-neighbour search for
  // x_a - g among l's units, scanned outward from the binary-search position
  // in l's combined-cost order and cut off by |c_b - c_target|^2 / 2, which
  // bounds the 2-D distance from below.
  bool try_swap(std::int32_t h, std::int32_t l, double must_beat) {
    const std::int32_t* uh = slot_.get() + h * stride_;
    const std::int32_t* ul = slot_.get() + l * stride_;
    const double* cl = slot_c_.get() + l * stride_;
    const double* pl = slot_p_.get() + l * stride_;
    const double* tl = slot_t_.get() + l * stride_;
    const std::int64_t nh = count_[h];
    const std::int64_t nl = count_[l];
    const double gp = 0.5 * (lp_[h] - lp_[l]);
    const double gt = 0.5 * (lt_[h] - lt_[l]);
    double best = std::numeric_limits<double>::infinity();
    std::int64_t best_i = -1;
    std::int64_t best_j = -1;
    // b's costs read beside its combined cost (pl, tl), not through ul.
    const auto visit = [&](std::int32_t a, std::int64_t i, std::int64_t j, double tp, double tt) {
      const double ep = pl[j] - tp;
      const double et = tl[j] - tt;
      const double d = ep * ep + et * et;
      if (d >= best) return;
      if (pair_max(h, l, xp_[a] - pl[j], xt_[a] - tl[j]) >= must_beat) return;
      best = d;
      best_i = i;
      best_j = j;
    };
    // Only b with must_beat - ranks' loads > the exchange in each model can
    // succeed; summed, that confines c_b to an open window around c_a.
    const double room_low = 2 * must_beat - lp_[l] - lt_[l];   // c_a - c_b < this
    const double room_high = lp_[h] + lt_[h] - 2 * must_beat;  // c_a - c_b > this
    // pos: the first of l's units whose combined cost is at most the ideal
    // one (l's are in descending order), moved from the last a's instead of
    // searched afresh: h's units descend too, so it mostly moves forward.
    std::int64_t pos = 0;
    for (std::int64_t i = 0; i < nh; ++i) {
      const std::int32_t a = uh[i];
      const double tp = xp_[a] - gp;  // the ideal b
      const double tt = xt_[a] - gt;
      const double tc = tp + tt;
      const double c_min = c_[a] - room_low;   // c_b > c_min
      const double c_max = c_[a] - room_high;  // c_b < c_max
      while (pos < nl && cl[pos] > tc) ++pos;
      while (pos > 0 && !(cl[pos - 1] > tc)) --pos;
      for (std::int64_t j = pos; j < nl && cl[j] > c_min; ++j) {
        const double dc = cl[j] - tc;
        if (dc * dc * 0.5 >= best) break;
        if (cl[j] < c_max) visit(a, i, j, tp, tt);
      }
      for (std::int64_t j = pos - 1; j >= 0 && cl[j] < c_max; --j) {
        const double dc = cl[j] - tc;
        if (dc * dc * 0.5 >= best) break;
        if (cl[j] > c_min) visit(a, i, j, tp, tt);
      }
    }
    if (best_i < 0) return false;
    const std::int32_t a = uh[best_i];
    const std::int32_t b = ul[best_j];
    remove_at(h, best_i);
    remove_at(l, best_j);
    insert(h, b);
    insert(l, a);
    return true;
  }

  void remove_at(std::int32_t r, std::int64_t i) {
    std::int32_t* u = slot_.get() + r * stride_;
    double* c = slot_c_.get() + r * stride_;
    double* p = slot_p_.get() + r * stride_;
    double* t = slot_t_.get() + r * stride_;
    const std::int32_t k = u[i];
    std::copy(u + i + 1, u + count_[r], u + i);
    std::copy(c + i + 1, c + count_[r], c + i);
    std::copy(p + i + 1, p + count_[r], p + i);
    std::copy(t + i + 1, t + count_[r], t + i);
    --count_[r];
    lp_[r] -= xp_[k];
    lt_[r] -= xt_[k];
  }

  void insert(std::int32_t r, std::int32_t k) {
    std::int32_t* u = slot_.get() + r * stride_;
    double* c = slot_c_.get() + r * stride_;
    double* p = slot_p_.get() + r * stride_;
    double* t = slot_t_.get() + r * stride_;
    std::int64_t i = count_[r];
    // Descending cost, ties by ascending index (deterministic).
    while (i > 0 && (c[i - 1] < c_[k] || (c[i - 1] == c_[k] && u[i - 1] > k))) {
      u[i] = u[i - 1];
      c[i] = c[i - 1];
      p[i] = p[i - 1];
      t[i] = t[i - 1];
      --i;
    }
    u[i] = k;
    c[i] = c_[k];
    p[i] = xp_[k];
    t[i] = xt_[k];
    ++count_[r];
    owner_[k] = r;
    lp_[r] += xp_[k];
    lt_[r] += xt_[k];
  }

  std::int32_t ranks_;
  std::int64_t units_;                     // full units
  std::int64_t per_rank_;                  // floor(full units / ranks)
  std::int64_t extra_;                     // ranks 0..extra-1 hold one full unit more
  std::int64_t stride_;                    // slots per rank
  std::vector<double> lp_, lt_;            // per rank: normalised pairs and tiles
  std::unique_ptr<double[]> xp_, xt_, c_;  // per full unit: normalised pairs, tiles, sum
  std::unique_ptr<std::int32_t[]> owner_;  // per full unit: its rank
  std::unique_ptr<std::int32_t[]> order_;  // the full units in the deal's order
  std::unique_ptr<std::int32_t[]> slot_;   // per rank, stride_ slots: its full units
  std::unique_ptr<double[]> slot_c_;       // their combined costs
  std::unique_ptr<double[]> slot_p_;       // their normalised pairs
  std::unique_ptr<double[]> slot_t_;       // and tiles
  std::vector<std::int64_t> count_;        // per rank: full units held
};

// The units of B tokens ("full", dealt and refined) and the shorter ones
// ("pieces", dealt first), each ascending.
struct UnitSplit {
  std::vector<std::int32_t> full;
  std::vector<std::int32_t> pieces;
};

UnitSplit split_units(const Units& units) {
  UnitSplit split;
  split.full.reserve(static_cast<std::size_t>(units.count()));  // most units are full
  for (std::int64_t k = 0; k < units.count(); ++k) {
    (units.length(k) == units.size ? split.full : split.pieces)
        .push_back(static_cast<std::int32_t>(k));
  }
  return split;
}

// Pieces first, longest first. A piece may go to any rank that it leaves
// within one unit of the rank with the fewest tokens (that rank always
// qualifies, pieces being shorter than a unit); among those it goes to the
// one with the least piece cost so far. Every rank then ends within one
// unit of the longest (the full-unit counts differ by at most one), so no
// rank pads more than one unit. `tokens` holds each rank's full-unit tokens
// on entry and its total on return; the result is each piece's owner.
std::vector<std::int32_t> deal_pieces(const Units& units, const std::vector<std::int32_t>& pieces,
                                      std::int64_t total_pairs, std::int64_t unsharded_tiles,
                                      std::vector<std::int64_t>& tokens) {
  const std::int32_t p = static_cast<std::int32_t>(tokens.size());
  std::vector<std::int32_t> piece_owner(pieces.size());
  const double piece_wp = total_pairs > 0 ? 1.0 / static_cast<double>(total_pairs) : 0.0;
  const double piece_wt = unsharded_tiles > 0 ? 1.0 / static_cast<double>(unsharded_tiles) : 0.0;
  std::vector<double> cost(static_cast<std::size_t>(p), 0.0);
  std::vector<std::int32_t> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
    const std::int64_t lx = units.length(pieces[x]);
    const std::int64_t ly = units.length(pieces[y]);
    return lx > ly || (lx == ly && x < y);
  });
  for (const std::int32_t i : order) {
    const std::int64_t k = pieces[i];
    const std::int64_t len = units.length(k);
    const std::int64_t fewest = *std::min_element(tokens.begin(), tokens.end());
    std::int32_t best = -1;
    for (std::int32_t r = 0; r < p; ++r) {
      if (tokens[r] + len > fewest + units.size) continue;
      if (best < 0 || cost[r] < cost[best]) best = r;
    }
    piece_owner[i] = best;
    tokens[best] += len;
    cost[best] += units.pairs[k] * piece_wp + units.tiles[k] * piece_wt;
  }
  return piece_owner;
}

// Each rank's pieces, ascending, after its full units: a tail of local
// blocks whose work is counted exactly once here and is a fixed base load
// for the full units' balancing.
RunPlan piece_tail(const Units& units, const std::vector<std::int32_t>& pieces,
                   const std::vector<std::int32_t>& piece_owner, std::int32_t p) {
  RunPlan tail;
  tail.ranks = p;
  tail.rank_offset.assign(static_cast<std::size_t>(p) + 1, 0);
  std::vector<std::int64_t> fill(static_cast<std::size_t>(p) + 1, 0);
  for (const std::int32_t r : piece_owner) ++tail.rank_offset[r + 1];
  for (std::int32_t r = 0; r < p; ++r) tail.rank_offset[r + 1] += tail.rank_offset[r];
  tail.runs.resize(pieces.size());
  std::copy(tail.rank_offset.begin(), tail.rank_offset.end() - 1, fill.begin());
  for (std::size_t i = 0; i < pieces.size(); ++i) {  // pieces are ascending
    const std::int64_t k = pieces[i];
    tail.runs[fill[piece_owner[i]]++] = Run{units.cut[k], units.length(k)};
  }
  return tail;
}

std::vector<RankWork> piece_tail_work(const CpWorkload& workload, const RowLayout& layout,
                                      const Units& units, const std::vector<std::int32_t>& pieces,
                                      const std::vector<std::int32_t>& piece_owner,
                                      const RunPlan& tail) {
  std::vector<RankWork> tail_work(static_cast<std::size_t>(tail.ranks));
  if (workload.mask.kind == MaskKind::kBlockSparse) {
    // Aligned units: the only piece is the row's partial last block.
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      tail_work[piece_owner[i]].pairs += units.pairs[pieces[i]];
      tail_work[piece_owner[i]].tiles += units.tiles[pieces[i]];
      tail_work[piece_owner[i]].tokens += units.length(pieces[i]);
    }
  } else if (!pieces.empty()) {
    tail_work = run_work(workload, layout, tail);
  }
  return tail_work;
}

// The runs: each rank's full units ascending, then its piece tail, a run
// merged with the rank's previous one where it continues it; `out.work`
// their sums. Two passes over the units in ascending order (`full` is): the
// first counts each rank's runs (a unit starts one unless it continues the
// rank's last) and sums its work, the second writes each run in its place.
void assemble_runs(const Units& units, const std::vector<std::int32_t>& full,
                   std::span<const std::int32_t> owner, const RunPlan& tail,
                   const std::vector<RankWork>& tail_work, Balanced& out) {
  const auto p = static_cast<std::size_t>(tail.ranks);
  const std::int64_t size = units.size;
  RunPlan& plan = out.runs;
  std::vector<std::int64_t>& start = plan.rank_offset;  // runs of rank r in start[r + 1] first
  start.assign(p + 1, 0);
  std::vector<std::int64_t> end(p, -1);  // each rank's last run's end (-1: none yet)
  out.work.assign(p, RankWork{});
  for (std::size_t i = 0; i < full.size(); ++i) {
    const auto k = static_cast<std::size_t>(full[i]);
    const auto r = static_cast<std::size_t>(owner[i]);
    if (units.cut[k] != end[r]) ++start[r + 1];
    end[r] = units.cut[k] + size;
    RankWork& w = out.work[r];
    w.pairs += units.pairs[k];
    w.tiles += units.tiles[k];
    w.tokens += size;
  }
  for (std::size_t r = 0; r < p; ++r) {
    for (std::int64_t i = tail.rank_offset[r]; i < tail.rank_offset[r + 1]; ++i) {
      const Run& piece = tail.runs[static_cast<std::size_t>(i)];
      if (piece.begin != end[r]) ++start[r + 1];
      end[r] = piece.begin + piece.length;
    }
    out.work[r].pairs += tail_work[r].pairs;
    out.work[r].tiles += tail_work[r].tiles;
    out.work[r].tokens += tail_work[r].tokens;
    start[r + 1] += start[r];
  }
  plan.runs.resize(static_cast<std::size_t>(start[p]));
  // Each rank's last run written so far (start[r] - 1: none yet).
  std::vector<std::int64_t> last(p);
  for (std::size_t r = 0; r < p; ++r) last[r] = start[r] - 1;
  const auto add = [&](std::size_t r, std::int64_t begin, std::int64_t length) {
    if (last[r] >= start[r]) {
      Run& run = plan.runs[static_cast<std::size_t>(last[r])];
      if (run.begin + run.length == begin) {
        run.length += length;
        return;
      }
    }
    plan.runs[static_cast<std::size_t>(++last[r])] = Run{begin, length};
  };
  for (std::size_t i = 0; i < full.size(); ++i) {
    add(static_cast<std::size_t>(owner[i]), units.cut[static_cast<std::size_t>(full[i])], size);
  }
  for (std::size_t r = 0; r < p; ++r) {
    for (std::int64_t i = tail.rank_offset[r]; i < tail.rank_offset[r + 1]; ++i) {
      add(r, tail.runs[static_cast<std::size_t>(i)].begin,
          tail.runs[static_cast<std::size_t>(i)].length);
    }
  }
}

}  // namespace

Balanced balance_units(const CpWorkload& workload, const RowLayout& layout, const Units& units,
                       std::int64_t total_pairs, std::int64_t unsharded_tiles,
                       const BalanceOptions& options) {
  const std::int32_t p = workload.cp_size;
  const UnitSplit split = split_units(units);
  const std::vector<std::int32_t>& full = split.full;
  const std::int64_t per_rank = static_cast<std::int64_t>(full.size()) / p;
  const std::int64_t extra = static_cast<std::int64_t>(full.size()) % p;

  std::vector<std::int64_t> tokens(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r) tokens[r] = (per_rank + (r < extra ? 1 : 0)) * units.size;
  const std::vector<std::int32_t> piece_owner =
      deal_pieces(units, split.pieces, total_pairs, unsharded_tiles, tokens);
  const RunPlan tail = piece_tail(units, split.pieces, piece_owner, p);
  const std::vector<RankWork> tail_work =
      piece_tail_work(workload, layout, units, split.pieces, piece_owner, tail);

  const double wp = total_pairs > 0 ? static_cast<double>(p) / total_pairs : 0.0;
  const double wt = unsharded_tiles > 0 ? static_cast<double>(p) / unsharded_tiles : 0.0;
  std::vector<double> base_p(static_cast<std::size_t>(p));
  std::vector<double> base_t(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r) {
    base_p[r] = tail_work[r].pairs * wp;
    base_t[r] = tail_work[r].tiles * wt;
  }
  UnitRefiner refiner(units, full, p, wp, wt, std::move(base_p), std::move(base_t));
  refiner.deal();
  Balanced out;
  // Each round moves one unit pair; a good deal leaves a few to do, and a
  // row that keeps improving by crumbs should not cost more than a second
  // deal would.
  const std::int64_t rounds =
      options.max_rounds != 0
          ? std::max<std::int64_t>(options.max_rounds, 0)
          : 4 * static_cast<std::int64_t>(p) + static_cast<std::int64_t>(full.size()) / 8;
  out.rounds = refiner.refine(options.tolerance, rounds);

  out.runs.ranks = p;
  out.runs.shard_len = *std::max_element(tokens.begin(), tokens.end());
  assemble_runs(units, full, refiner.owner(), tail, tail_work, out);
  // Sums are exact only when every full unit fills a local block of its own.
  if (units.size != workload.block_size) {
    if (workload.mask.kind == MaskKind::kBlockSparse) {
      out.work = compute_work(workload, materialize(out.runs));
    } else {
      out.work = run_work(workload, layout, out.runs);
    }
  }
  out.score = plan_score(out.work, total_pairs, unsharded_tiles);
  out.total_pairs = total_pairs;
  out.unsharded_tiles = unsharded_tiles;
  return out;
}

}  // namespace fulcrum::cp::detail
