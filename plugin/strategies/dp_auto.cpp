// "auto": fulcrum's own DP partitioner. It starts from the best of the three
// classic partitions and then lowers the busiest rank by local search, so it
// is never worse than any of them and usually sits at or next to the lower
// bound.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "fulcrum/core/random.h"
#include "strategies/dp_strategies.h"

namespace fulcrum::dp {
namespace {

// A cheaper-than-noise improvement is no improvement: it keeps float round-off
// from feeding the search when costs are not integers.
constexpr double kRelativeSlack = 1e-12;

// Ranks of at most this many samples also trade pairs of samples (2-for-0,
// 2-for-1, 1-for-2, 2-for-2). Few samples per rank make single trades too
// coarse to balance; with many samples single trades already have fine steps
// and pair lists (quadratic in the rank's size) would cost more than they give.
constexpr std::size_t kPairTradeLimit = 24;

// Ranks of at most this many samples also try three-rank cycles (the busiest
// rank gives a sample to rank a, a gives one to rank b, b gives one back),
// which reach balances no two-rank trade can; their cost grows as k^2 m^2.
constexpr std::size_t kCycleLimit = 12;
constexpr std::size_t kCycleClosers = 3;

// The busiest rank first looks for a single trade with this many of the
// lightest ranks only; most useful trades are there, and for large k a
// search over every rank costs k times more.
constexpr std::size_t kNearRanks = 4;

// Random swaps per kick of the iterated local search, and its fixed seed.
constexpr std::size_t kKickSwaps = 4;
constexpr std::uint64_t kSearchSeed = 0x9E3779B97F4A7C15ULL;

// Work units (list entries scanned) the first descent may spend per sample
// and per rank; bounds the search whatever the input, without reading a
// clock. A sweep costs about k n units.
constexpr std::size_t kWorkPerSample = 256;
constexpr std::size_t kWorkPerRank = 256;
// The kicked searches then get this much more work per sample, up to a cap:
// a partition with many samples gains little from them and each kick costs a
// copy of the partition.
constexpr std::size_t kKickWorkPerSample = 1024;
constexpr std::size_t kKickWorkCap = std::size_t{1} << 16;

struct Item {
  double cost;
  std::int64_t index;
  bool operator<(const Item& other) const {
    return cost != other.cost ? cost < other.cost : index < other.index;
  }
};

// Up to two samples of one rank, offered together in a trade.
struct Bundle {
  double cost = 0.0;
  std::size_t count = 0;
  Item items[2] = {};
};

// Which trades a search considers: single samples each way (a move or a
// swap), or only those where a pair of samples moves at least one way.
enum class Reach { kSingles, kPairs };

// Samples `give` leave rank `from` for rank `to`, samples `take` go back.
struct Trade {
  double pair_max = std::numeric_limits<double>::infinity();  // max of both ranks after
  std::size_t from = 0;
  std::size_t to = 0;
  Bundle give;
  Bundle take;
};

class LocalSearch {
 public:
  LocalSearch(const detail::CostOrder& order, const detail::Assignment& start,
              std::size_t min_count, std::size_t max_count, bool stop_when_settled)
      : k_(start.size()),
        min_count_(min_count),
        max_count_(max_count),
        resolution_(smallest_single_trade(order)),
        stop_when_settled_(stop_when_settled),
        items_(k_),
        load_(k_, 0.0),
        singles_(k_),
        pairs_(k_),
        singles_fresh_(k_, false),
        pairs_fresh_(k_, false) {
    for (std::size_t r = 0; r < k_; ++r) {
      items_[r].reserve(start[r].size() + 2);
      for (std::int64_t index : start[r]) {
        const double cost = order.cost[static_cast<std::size_t>(index)];
        items_[r].push_back({cost, index});
        load_[r] += cost;
      }
      std::sort(items_[r].begin(), items_[r].end());
    }
  }

  // Lowers the busiest rank until it reaches `bound`, nothing helps any more,
  // or the work budget is spent. When no trade with the busiest rank helps,
  // a three-rank cycle is tried, then a sweep evens out pairs of other ranks
  // (lowering a pair's maximum never raises the overall one), which
  // reshuffles which samples sit where and often opens a new trade for the
  // busiest rank. Every accepted change lowers the largest load among the
  // ranks it touches, so the loads sorted high to low fall lexicographically
  // and the search cannot cycle.
  void descend(double bound, std::size_t work_budget) {
    while (work_ < work_budget) {
      const std::size_t busiest = busiest_rank();
      const double top = load_[busiest];
      if (top <= bound * (1.0 + kRelativeSlack)) return;
      if (stop_when_settled_ && settled(top)) {
        stopped_settled_ = true;
        return;
      }
      // Cheapest searches first: single trades with the lightest ranks (the
      // most room), then with every rank, then pair trades, which cost more
      // and are rarely needed when single ones work.
      Trade best;
      for (std::size_t other : lightest_ranks(busiest, kNearRanks)) {
        find_trade(busiest, other, best, Reach::kSingles);
      }
      for (Reach reach : {Reach::kSingles, Reach::kPairs}) {
        if (improves(best)) break;
        for (std::size_t other = 0; other < k_; ++other) {
          if (other != busiest) find_trade(busiest, other, best, reach);
        }
      }
      if (improves(best)) {
        apply(best);
        continue;
      }
      if (items_[busiest].size() <= kCycleLimit && try_cycle(busiest)) continue;
      if (!balance_sweep(work_budget)) return;
    }
  }

  // Iterated local search: descend, then while budget remains, kick the best
  // partition found with a few random swaps and descend again. The kicks
  // escape partitions where every rank is balanced against every other one
  // but the samples are grouped wrongly as a whole. The generator has a fixed
  // seed, so the result is still a function of the request alone.
  void run(double bound, std::size_t work_budget, std::size_t kick_budget) {
    descend(bound, work_budget);
    work_budget = work_ + kick_budget;
    // Kicks pay off where ranks hold few samples: there single trades are
    // coarse, while with many samples per rank the descent already ends at
    // or next to the bound and copies of the partition would cost more.
    std::size_t samples = 0;
    for (const auto& list : items_) samples += list.size();
    if (k_ < 2 || samples > kPairTradeLimit * k_) return;
    double best_max = load_[busiest_rank()];
    std::vector<std::vector<Item>> best_items = items_;
    std::vector<double> best_load = load_;
    std::mt19937_64 rng(kSearchSeed);
    while (work_ < work_budget && best_max > bound * (1.0 + kRelativeSlack)) {
      kick(rng);
      descend(bound, work_budget);
      const double now = load_[busiest_rank()];
      if (now <= best_max) {
        // Equal is accepted too: drifting across plateaus finds exits.
        best_max = now;
        best_items = items_;
        best_load = load_;
      } else {
        items_ = best_items;
        load_ = best_load;
        for (std::size_t r = 0; r < k_; ++r) mark_changed(r);
      }
      work_ += k_ + samples;  // the copy above
    }
    items_ = std::move(best_items);
    load_ = std::move(best_load);
  }

  bool stopped_settled() const { return stopped_settled_; }

  detail::Assignment ranks() const {
    detail::Assignment out(k_);
    for (std::size_t r = 0; r < k_; ++r) {
      out[r].reserve(items_[r].size());
      for (const Item& item : items_[r]) out[r].push_back(item.index);
      std::sort(out[r].begin(), out[r].end());
    }
    return out;
  }

 private:
  // The smallest amount a single trade can move: the cheapest sample (a
  // move), or the smallest positive difference of two costs (a swap). Costs
  // are rounded the same way wherever they are subtracted, and rounding is
  // monotone, so no swap's computed difference is smaller.
  static double smallest_single_trade(const detail::CostOrder& order) {
    if (order.descending.empty()) return 0.0;
    const auto cost = [&](std::size_t i) {
      return order.cost[static_cast<std::size_t>(order.descending[i])];
    };
    double smallest = cost(order.descending.size() - 1);
    for (std::size_t i = 1; i < order.descending.size(); ++i) {
      if (cost(i - 1) > cost(i)) smallest = std::min(smallest, cost(i - 1) - cost(i));
    }
    return smallest;
  }

  // True when the descent can change nothing more, so stopping it now gives
  // the partition it would end with (at 128 ranks of 125 samples, a sweep of
  // every pair of ranks, 8 ms, that finds nothing): every rank holds more
  // samples than pair trades, cycles and kicks allow, and the loads' spread
  // (the largest gap between any two ranks) is below the smallest amount a
  // single trade moves. A move or swap of d >= that leaves the lighter rank at
  // low + d > top, so it lowers no pair's maximum, and no sweep applies one.
  bool settled(double top) const {
    for (const auto& list : items_) {
      if (list.size() <= kPairTradeLimit) return false;
    }
    const double low = *std::min_element(load_.begin(), load_.end());
    // The margin covers rounding the difference itself.
    return (top - low) * (1.0 + 1e-9) < resolution_;
  }

  std::size_t busiest_rank() const {
    return static_cast<std::size_t>(std::max_element(load_.begin(), load_.end()) - load_.begin());
  }

  // The `count` lightest ranks other than `except`, lightest first (ties:
  // lower rank first). Valid until the next call.
  const std::vector<std::size_t>& lightest_ranks(std::size_t except, std::size_t count) {
    std::vector<std::size_t>& ranks = scratch_ranks_;
    ranks.clear();
    for (std::size_t r = 0; r < k_; ++r) {
      if (r != except) ranks.push_back(r);
    }
    const std::size_t kept = std::min(count, ranks.size());
    std::partial_sort(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(kept), ranks.end(),
                      [&](std::size_t x, std::size_t y) {
                        return load_[x] != load_[y] ? load_[x] < load_[y] : x < y;
                      });
    ranks.resize(kept);
    work_ += k_;
    return ranks;
  }

  bool improves(const Trade& trade) const {
    const double before = load_[trade.from];
    return trade.pair_max < before - kRelativeSlack * before;
  }

  // Evens out ranks other than through the busiest one: each rank, heaviest
  // first, makes its best single trade with any lighter rank, and pair trades
  // with its mirror rank (the i-th heaviest with the i-th lightest, as
  // differencing pairs them). O(k n) per sweep.
  bool balance_sweep(std::size_t work_budget) {
    std::vector<std::size_t>& order = sweep_order_;
    order.resize(k_);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      return load_[x] != load_[y] ? load_[x] > load_[y] : x < y;
    });
    work_ += k_;
    bool changed = false;
    for (std::size_t i = 0; i + 1 < k_; ++i) {
      if (work_ >= work_budget) return changed;
      Trade best;
      for (std::size_t j = i + 1; j < k_; ++j)
        find_trade(order[i], order[j], best, Reach::kSingles);
      if (i < k_ / 2) find_trade(order[i], order[k_ - 1 - i], best, Reach::kPairs);
      if (improves(best)) {
        apply(best);
        changed = true;
      }
    }
    return changed;
  }

  bool count_allows(std::size_t from, std::size_t to, std::size_t give, std::size_t take) const {
    const std::size_t from_after = items_[from].size() + take - give;
    const std::size_t to_after = items_[to].size() + give - take;
    return items_[from].size() + take >= give && from_after >= min_count_ &&
           from_after <= max_count_ && to_after >= min_count_ && to_after <= max_count_;
  }

  // The best trade from `from` (the heavier) to `to`, kept in `best` if it
  // beats what `best` holds. Moving cost d leaves max(top - d, low + d): best
  // when d is closest to (top - low) / 2, useful only for 0 < d < top - low.
  void find_trade(std::size_t from, std::size_t to, Trade& best, Reach reach) {
    const double top = load_[from];
    const double low = load_[to];
    const double gap = top - low;
    // No trade can beat a perfect split of the pair.
    if (gap <= 0.0 || low + gap / 2.0 >= best.pair_max) return;
    const bool small =
        items_[from].size() <= kPairTradeLimit && items_[to].size() <= kPairTradeLimit;
    if (reach == Reach::kPairs && !small) return;
    const std::size_t most = reach == Reach::kSingles ? 1 : 2;
    for (std::size_t give = 1; give <= most; ++give) {
      for (std::size_t take = 0; take <= most; ++take) {
        if (reach == Reach::kPairs && give < 2 && take < 2) continue;  // done with singles
        if (!count_allows(from, to, give, take)) continue;
        const std::vector<Bundle>& offered = bundles(from, give);
        const std::vector<Bundle>& returned = take == 0 ? nothing_ : bundles(to, take);
        scan(offered, returned, from, to, best);
      }
    }
  }

  // Offered and returned bundles are sorted by cost; the best partner of an
  // offered bundle of cost c costs about c - gap/2, which rises with c, so one
  // forward pass over both lists finds every pairing's best.
  void scan(const std::vector<Bundle>& offered, const std::vector<Bundle>& returned,
            std::size_t from, std::size_t to, Trade& best) {
    if (returned.empty()) return;
    const double top = load_[from];
    const double low = load_[to];
    const double half = (top - low) / 2.0;
    work_ += offered.size() + returned.size();
    std::size_t j = 0;
    for (const Bundle& give : offered) {
      const double target = give.cost - half;
      while (j < returned.size() && returned[j].cost < target) ++j;
      for (std::size_t candidate : {j, j - 1}) {  // j - 1 wraps past the end when j == 0
        if (candidate >= returned.size()) continue;
        const Bundle& take = returned[candidate];
        const double moved = give.cost - take.cost;
        if (moved <= 0.0) continue;
        const double after = std::max(top - moved, low + moved);
        if (after < best.pair_max) best = {after, from, to, give, take};
      }
    }
  }

  const std::vector<Bundle>& bundles(std::size_t rank, std::size_t size) {
    if (size == 1) {
      if (!singles_fresh_[rank]) rebuild_singles(rank);
      return singles_[rank];
    }
    if (!pairs_fresh_[rank]) rebuild_pairs(rank);
    return pairs_[rank];
  }

  void rebuild_singles(std::size_t rank) {
    std::vector<Bundle>& singles = singles_[rank];
    singles.clear();
    for (const Item& item : items_[rank]) singles.push_back({item.cost, 1, {item, {}}});
    work_ += singles.size();
    singles_fresh_[rank] = true;
  }

  void rebuild_pairs(std::size_t rank) {
    const std::vector<Item>& items = items_[rank];
    std::vector<Bundle>& pairs = pairs_[rank];
    pairs.clear();
    for (std::size_t a = 0; a < items.size(); ++a) {
      for (std::size_t b = a + 1; b < items.size(); ++b) {
        pairs.push_back({items[a].cost + items[b].cost, 2, {items[a], items[b]}});
      }
    }
    // Items are sorted, so (first, second) breaks cost ties the same way on
    // every platform.
    std::sort(pairs.begin(), pairs.end(), [](const Bundle& x, const Bundle& y) {
      if (x.cost != y.cost) return x.cost < y.cost;
      if (x.items[0] < y.items[0] || y.items[0] < x.items[0]) return x.items[0] < y.items[0];
      return x.items[1] < y.items[1];
    });
    work_ += 2 * pairs.size();
    pairs_fresh_[rank] = true;
  }

  void mark_changed(std::size_t rank) {
    singles_fresh_[rank] = false;
    pairs_fresh_[rank] = false;
  }

  // The best cycle busiest -> a -> b -> busiest of one sample each (counts
  // unchanged), applied when it lowers the maximum of the three ranks below
  // the busiest rank's load. For given x (busiest to a) and z (a to b), the
  // returned w (b to busiest) should balance top - x + w against
  // load_b + z - w; a binary search in b's sorted samples finds it.
  bool try_cycle(std::size_t busiest) {
    const double top = load_[busiest];
    double best_max = top - kRelativeSlack * top;
    std::size_t best_a = 0, best_b = 0;
    Item best_x{}, best_z{}, best_w{};
    bool found = false;
    const std::vector<Item>& mine = items_[busiest];
    // The rank that closes the cycle takes on z - w; the lightest ranks have
    // the most room for it, so only they are tried, which keeps a cycle
    // search linear in k.
    const std::vector<std::size_t>& closers = lightest_ranks(busiest, kCycleClosers);
    for (std::size_t a = 0; a < k_; ++a) {
      if (a == busiest || items_[a].size() > kCycleLimit) continue;
      for (std::size_t b : closers) {
        if (b == a) continue;
        const std::vector<Item>& theirs = items_[b];
        if (theirs.empty()) continue;
        work_ += mine.size() * items_[a].size();
        for (const Item& x : mine) {
          for (const Item& z : items_[a]) {
            const double a_after = load_[a] + x.cost - z.cost;
            if (a_after >= best_max) continue;
            const double target = (load_[b] + z.cost - top + x.cost) / 2.0;
            auto at = std::lower_bound(theirs.begin(), theirs.end(), Item{target, -1});
            for (auto it : {at, at == theirs.begin() ? theirs.end() : at - 1}) {
              if (it == theirs.end()) continue;
              const double after =
                  std::max({top - x.cost + it->cost, a_after, load_[b] + z.cost - it->cost});
              if (after < best_max) {
                best_max = after;
                best_a = a;
                best_b = b;
                best_x = x;
                best_z = z;
                best_w = *it;
                found = true;
              }
            }
          }
        }
      }
    }
    if (!found) return false;
    remove(busiest, best_x);
    insert(best_a, best_x);
    remove(best_a, best_z);
    insert(best_b, best_z);
    remove(best_b, best_w);
    insert(busiest, best_w);
    mark_changed(busiest);
    mark_changed(best_a);
    mark_changed(best_b);
    return true;
  }

  // A few random swaps, the first always involving the busiest rank; each
  // keeps both ranks' counts, so the count rule still holds.
  void kick(std::mt19937_64& rng) {
    for (std::size_t step = 0; step < kKickSwaps; ++step) {
      const std::size_t a = step == 0 ? busiest_rank() : draw_below(rng, k_);
      std::size_t b = draw_below(rng, k_ - 1);
      if (b >= a) ++b;
      if (items_[a].empty() || items_[b].empty()) continue;
      const Item x = items_[a][draw_below(rng, items_[a].size())];
      const Item y = items_[b][draw_below(rng, items_[b].size())];
      remove(a, x);
      insert(b, x);
      remove(b, y);
      insert(a, y);
      mark_changed(a);
      mark_changed(b);
    }
  }

  void apply(const Trade& trade) {
    for (std::size_t i = 0; i < trade.give.count; ++i) {
      remove(trade.from, trade.give.items[i]);
      insert(trade.to, trade.give.items[i]);
    }
    for (std::size_t i = 0; i < trade.take.count; ++i) {
      remove(trade.to, trade.take.items[i]);
      insert(trade.from, trade.take.items[i]);
    }
    mark_changed(trade.from);
    mark_changed(trade.to);
  }

  void remove(std::size_t rank, const Item& item) {
    auto& list = items_[rank];
    list.erase(std::lower_bound(list.begin(), list.end(), item));
    load_[rank] -= item.cost;
    work_ += list.size();
  }

  void insert(std::size_t rank, const Item& item) {
    auto& list = items_[rank];
    list.insert(std::upper_bound(list.begin(), list.end(), item), item);
    load_[rank] += item.cost;
    work_ += list.size();
  }

  std::size_t k_;
  std::size_t min_count_;                 // a rank may not drop below this many samples
  std::size_t max_count_;                 // nor rise above this many
  double resolution_;                     // the smallest amount a single trade moves
  bool stop_when_settled_;                // stop the descent once settled()
  bool stopped_settled_ = false;          // it did
  std::vector<std::vector<Item>> items_;  // per rank, ascending by (cost, index)
  std::vector<double> load_;
  std::vector<std::vector<Bundle>> singles_;  // per rank, by cost, when singles_fresh_
  std::vector<std::vector<Bundle>> pairs_;    // per rank, by cost, when pairs_fresh_
  std::vector<bool> singles_fresh_;
  std::vector<bool> pairs_fresh_;
  std::vector<std::size_t> sweep_order_;                        // scratch for balance_sweep
  std::vector<std::size_t> scratch_ranks_;                      // scratch for lightest_ranks
  const std::vector<Bundle> nothing_ = std::vector<Bundle>(1);  // take nothing back: a move
  std::size_t work_ = 0;
};

double max_load(const detail::CostOrder& order, const detail::Assignment& ranks) {
  double busiest = 0.0;
  for (const auto& rank : ranks) {
    double sum = 0.0;
    for (std::int64_t index : rank) sum += order.cost[static_cast<std::size_t>(index)];
    busiest = std::max(busiest, sum);
  }
  return busiest;
}

}  // namespace

Result<DpPartition> partition_auto(const DpRequest& request) {
  return detail::partition_auto_search(request, true, nullptr);
}

namespace detail {

Result<DpPartition> partition_auto_search(const DpRequest& request, bool stop_when_settled,
                                          bool* stopped) {
  if (Status status = validate_request(request); !status) return status;
  const std::size_t n = request.lengths.size();
  const auto k = static_cast<std::size_t>(request.num_ranks);
  const detail::CostOrder order = detail::order_by_cost(request);
  const double bound = detail::lower_bound(order, k, request.equal_count);

  // Every start must obey the request's count rule (each is built to).
  detail::Assignment starts[] = {detail::assign_lpt(order, k, request.equal_count),
                                 detail::assign_karmarkar_karp(order, k, request.equal_count),
                                 detail::assign_round_robin(n, k)};
  const detail::Assignment* best = nullptr;
  double best_max = 0.0;
  for (const detail::Assignment& start : starts) {
    const double start_max = max_load(order, start);
    if (best == nullptr || start_max < best_max) {
      best = &start;
      best_max = start_max;
    }
  }

  const std::size_t min_count = request.equal_count ? n / k : 0;
  const std::size_t max_count = request.equal_count ? (n + k - 1) / k : n;
  LocalSearch search(order, *best, min_count, max_count, stop_when_settled);
  const std::size_t work_budget = kWorkPerSample * n + kWorkPerRank * k;
  search.run(bound, work_budget, std::min(kKickWorkPerSample * n, kKickWorkCap));
  if (stopped != nullptr) *stopped = search.stopped_settled();

  DpPartition result;
  result.strategy = "auto";
  result.ranks = search.ranks();
  result.cost.assign(k, 0.0);
  double total = 0.0;
  double busiest = 0.0;
  for (std::size_t r = 0; r < k; ++r) {
    for (std::int64_t index : result.ranks[r]) {
      result.cost[r] += order.cost[static_cast<std::size_t>(index)];
    }
    total += result.cost[r];
    busiest = std::max(busiest, result.cost[r]);
  }
  result.imbalance = busiest / (total / static_cast<double>(k));
  result.lower_bound = bound;  // auto always obeys the request's count rule
  return result;
}

}  // namespace detail

}  // namespace fulcrum::dp
