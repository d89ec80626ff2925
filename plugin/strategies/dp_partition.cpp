// The classic DP partitioners fulcrum compares against: round-robin, capped LPT
// and Karmarkar-Karp (largest differencing), the last in both its free and its
// equal-count form.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

#include "strategies/dp_strategies.h"

namespace fulcrum::dp {
namespace {

DpPartition finished(const DpRequest& request, const char* name,
                     std::vector<std::vector<std::int64_t>> ranks) {
  DpPartition result;
  result.strategy = name;
  for (auto& samples : ranks) std::sort(samples.begin(), samples.end());
  result.ranks = std::move(ranks);
  finish_partition(request, result);
  return result;
}

// --- Karmarkar-Karp -------------------------------------------------------
//
// A partial partition is k subsets; merging two partials pairs the heaviest
// subset of one with the lightest of the other, which cancels their spreads
// as far as possible. Subsets keep their samples in singly linked lists in a
// shared pool so that a merge never copies samples.
//
// A partial stores only its non-empty subsets (the rest are empty, cost 0),
// and a merge writes its result over one of its inputs and frees the other,
// so the partials together never hold more subsets than there are samples (a
// flat array of k per partial was n k subsets: 1 GB at k = 1,024 and 64,000
// samples). Early on most partials hold few samples, and merging two whose
// non-empty subsets fit in k together just interleaves two sorted lists.
// Later most merges of the free variant (n one-sample partials) add one
// sample to the lightest subset of a full partial, one after another, as LPT
// would: such a partial is kept as a heap with its lightest subset on top
// (O(log k) a sample instead of moving the subset to its place, about k/2
// subsets at k = 1,024) and sorted again only for a merge that needs its
// order, or at the end. Every order is the same total order, so the result
// is the one a full sort after every merge gives.

struct Subset {
  double sum;
  std::int32_t head;  // first node in the pool
  std::int32_t tail;
};

// Heaviest first; heads are unique among non-empty subsets, which makes the
// order total and the result the same with every sort implementation, with
// sorting part of a partial and merging it with the rest, and with a heap
// (whose top, by this order, is the lightest subset).
struct Heavier {
  bool operator()(const Subset& x, const Subset& y) const {
    return x.sum != y.sum ? x.sum > y.sum : x.head < y.head;
  }
};

struct Partial {
  std::vector<Subset> subsets;  // heaviest first; a heap (lightest on top) when `heap`
  bool heap = false;
  double heaviest = 0.0;  // the largest sum, kept while `heap`
  // A partial of one sample (the free variant's n partials as added) holds
  // its subset here, `subsets` left empty: no allocation per sample.
  bool single = false;
  Subset one{};
  std::size_t size() const { return single ? 1 : subsets.size(); }
  const Subset* data() const { return single ? &one : subsets.data(); }
  // `subsets` holding every subset, `single` no more.
  void spill() {
    if (!single) return;
    subsets.assign(1, one);
    single = false;
  }
};

class DifferencingSolver {
 public:
  DifferencingSolver(std::size_t num_ranks, std::size_t num_partials, std::size_t num_samples)
      : k_(num_ranks), partials_(num_partials), scratch_(num_ranks) {
    added_.reserve(num_partials);
    item_.reserve(num_samples);
    next_.reserve(num_samples);
  }

  // A partial whose subset j holds members[j] (-1: none, a zero-cost dummy);
  // members come heaviest first, dummies last.
  void add_partial(const std::vector<std::int64_t>& members, const std::vector<double>& costs) {
    const std::size_t slot = num_slots_++;
    Partial& partial = partials_[slot];
    const auto real = static_cast<std::size_t>(
        std::count_if(members.begin(), members.end(), [](std::int64_t m) { return m >= 0; }));
    partial.single = real == 1;
    if (!partial.single) partial.subsets.reserve(real);
    for (std::int64_t member : members) {
      if (member < 0) continue;
      const auto node = static_cast<std::int32_t>(next_.size());
      item_.push_back(member);
      next_.push_back(-1);
      const Subset subset{costs[static_cast<std::size_t>(member)], node, node};
      if (partial.single) {
        partial.one = subset;
      } else {
        partial.subsets.push_back(subset);
      }
    }
    added_.push_back({spread(slot), serial_++, slot});
  }

  detail::Assignment solve() {
    // The partials as added wait in a queue, largest spread first; merged
    // ones go to the heap. Each pop takes the larger of the two fronts, so
    // the order is the one a single heap of every partial gives, and the
    // heap holds only the merged partials still open (the free variant's n
    // one-sample partials arrive in order, heaviest first).
    const auto larger = [](const HeapEntry& x, const HeapEntry& y) {
      return SmallerSpread{}(y, x);
    };
    if (!std::is_sorted(added_.begin(), added_.end(), larger)) {
      std::sort(added_.begin(), added_.end(), larger);
    }
    while (added_.size() - next_added_ + heap_.size() > 1) {
      const std::size_t a = pop();
      const std::size_t b = pop();
      merge(a, b);
      push(a);
    }
    detail::Assignment ranks(k_);
    if (added_.size() - next_added_ + heap_.size() == 0) return ranks;
    Partial& last = partials_[pop()];
    last.spill();
    sorted(last);
    for (std::size_t j = 0; j < last.subsets.size(); ++j) {
      for (std::int32_t node = last.subsets[j].head; node >= 0;
           node = next_[static_cast<std::size_t>(node)]) {
        ranks[j].push_back(item_[static_cast<std::size_t>(node)]);
      }
    }
    return ranks;
  }

 private:
  struct HeapEntry {
    double spread;
    std::uint64_t serial;  // push order: a total order keeps results reproducible
    std::size_t slot;
  };
  struct SmallerSpread {
    bool operator()(const HeapEntry& x, const HeapEntry& y) const {
      if (x.spread != y.spread) return x.spread < y.spread;
      return x.serial > y.serial;  // equal spreads: the earlier push first
    }
  };

  // a's j-th heaviest subset takes b's j-th lightest (an empty one when b
  // has fewer than k non-empty subsets); the result replaces a, and b's
  // storage is freed.
  void merge(std::size_t a, std::size_t b) {
    Partial& mine = partials_[a];
    Partial theirs = std::move(partials_[b]);
    partials_[b] = {};
    const std::size_t p = mine.size();
    const std::size_t q = theirs.size();
    if (p + q <= k_) {
      // No subset of a meets a non-empty subset of b (neither is full, so
      // neither is a heap).
      if (mine.single) {
        mine.subsets.reserve(p + q);
        mine.spill();
      }
      mine.subsets.resize(p + q);
      merge_back(mine.subsets.data(), p, theirs.data(), q);
      return;
    }
    // One sample's subset meets the lightest of a full partial: a's when b
    // has one subset (a's then goes first in the list), b's when a has one
    // (b's subsets become a's).
    if (q == 1 || p == 1) {
      const Subset one = q == 1 ? theirs.data()[0] : mine.data()[0];
      if (q != 1) mine = std::move(theirs);
      mine.spill();  // k = 1: a single sample's partial is full
      add_to_lightest(mine, one, q == 1);
      return;
    }
    sorted(mine);
    sorted(theirs);
    merge_full(mine.subsets, theirs.subsets);
  }

  // Both sorted, p + q > k. Every position j then holds at least one
  // non-empty subset. Only the last k - kept positions change (a's subsets
  // there meet one of b's, or are empty); the first `kept` stay as they
  // were. So the changed ones are sorted alone and merged with them: O(k +
  // q log q) instead of a sort of all k.
  void merge_full(std::vector<Subset>& mine, const std::vector<Subset>& theirs) {
    const std::size_t p = mine.size();
    const std::size_t q = theirs.size();
    mine.resize(k_);
    Subset* into = mine.data();
    const std::size_t kept = std::min(p, k_ - q);
    for (std::size_t j = kept; j < k_; ++j) {
      const std::size_t partner = k_ - 1 - j;  // b's subset for position j
      into[j] = j >= p ? theirs[partner] : concat(into[j], theirs[partner]);
    }
    std::sort(into + kept, into + k_, Heavier{});
    std::copy(into + kept, into + k_, scratch_.begin());
    merge_back(into, kept, scratch_.data(), k_ - kept);
  }

  // Merges sorted `more` (m subsets) into sorted into[0, p), whose storage
  // holds p + m, from the back: a subset of `into` heavier than all of
  // `more` is never moved.
  static void merge_back(Subset* into, std::size_t p, const Subset* more, std::size_t m) {
    std::size_t out = p + m;
    while (m > 0) {
      if (p > 0 && Heavier{}(more[m - 1], into[p - 1])) {
        into[--out] = into[--p];
      } else {
        into[--out] = more[--m];
      }
    }
  }

  // The full partial's lightest subset and `one` become one subset, the
  // partial's first when `lightest_first`.
  void add_to_lightest(Partial& full, const Subset& one, bool lightest_first) {
    std::vector<Subset>& subsets = full.subsets;
    if (!full.heap) {
      full.heaviest = subsets[0].sum;
      std::make_heap(subsets.begin(), subsets.end(), Heavier{});
      full.heap = true;
    }
    std::pop_heap(subsets.begin(), subsets.end(), Heavier{});
    Subset& joined = subsets.back();
    joined = lightest_first ? concat(joined, one) : concat(one, joined);
    full.heaviest = std::max(full.heaviest, joined.sum);
    std::push_heap(subsets.begin(), subsets.end(), Heavier{});
  }

  static void sorted(Partial& partial) {
    if (!partial.heap) return;
    std::sort_heap(partial.subsets.begin(), partial.subsets.end(), Heavier{});
    partial.heap = false;
  }

  Subset concat(const Subset& x, const Subset& y) {
    next_[static_cast<std::size_t>(x.tail)] = y.head;
    return {x.sum + y.sum, x.head, y.tail};
  }

  double spread(std::size_t slot) const {
    const Partial& partial = partials_[slot];
    const std::size_t size = partial.size();
    if (partial.heap) return partial.heaviest - partial.subsets[0].sum;
    if (size == 0) return 0.0;
    const Subset* subsets = partial.data();
    return subsets[0].sum - (size < k_ ? 0.0 : subsets[k_ - 1].sum);
  }

  void push(std::size_t slot) { heap_.push({spread(slot), serial_++, slot}); }

  std::size_t pop() {
    if (next_added_ < added_.size() &&
        (heap_.empty() || SmallerSpread{}(heap_.top(), added_[next_added_]))) {
      return added_[next_added_++].slot;
    }
    const std::size_t slot = heap_.top().slot;
    heap_.pop();
    return slot;
  }

  std::size_t k_;
  std::vector<Partial> partials_;
  std::size_t num_slots_ = 0;
  std::vector<Subset> scratch_;
  std::vector<std::int64_t> item_;  // node -> sample index
  std::vector<std::int32_t> next_;  // node -> next node of its subset, -1 at the end
  std::vector<HeapEntry> added_;    // the partials as added, then sorted by solve()
  std::size_t next_added_ = 0;      // added_[next_added_, end) not yet merged
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, SmallerSpread> heap_;
  std::uint64_t serial_ = 0;
};

}  // namespace

namespace detail {

namespace {

// Largest cost first, ties by index: an ascending sort of unique (negated
// cost, index) pairs, whatever the sort implementation.
std::vector<std::int64_t> descending_by_sort(const std::vector<double>& cost) {
  std::vector<std::pair<double, std::int64_t>> keyed(cost.size());
  for (std::size_t i = 0; i < cost.size(); ++i) {
    keyed[i] = {-cost[i], static_cast<std::int64_t>(i)};
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::int64_t> order(cost.size());
  for (std::size_t i = 0; i < cost.size(); ++i) order[i] = keyed[i].second;
  return order;
}

// From this many samples on, the radix sort below is the cheaper.
constexpr std::size_t kRadixSamples = 256;

// The same order for positive, finite costs, whose bit patterns order as
// the costs do: a stable radix sort of the inverted patterns, a byte at a
// time from the lowest, starting from index order (so equal costs stay in
// index order), skipping the bytes every cost shares. Eight passes of n at
// most, against n log n comparisons of pairs.
std::vector<std::int64_t> descending_by_radix(const std::vector<double>& cost) {
  const std::size_t n = cost.size();
  std::vector<std::uint64_t> key(n);
  for (std::size_t i = 0; i < n; ++i) key[i] = ~std::bit_cast<std::uint64_t>(cost[i]);
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::vector<std::int64_t> next(n);
  for (int shift = 0; shift < 64; shift += 8) {
    std::size_t count[257] = {};
    for (const std::uint64_t k : key) ++count[((k >> shift) & 0xFF) + 1];
    if (count[((key[0] >> shift) & 0xFF) + 1] == n) continue;  // one byte for all
    for (std::size_t b = 1; b <= 256; ++b) count[b] += count[b - 1];
    for (const std::int64_t i : order) {
      next[count[(key[static_cast<std::size_t>(i)] >> shift) & 0xFF]++] = i;
    }
    std::swap(order, next);
  }
  return order;
}

}  // namespace

CostOrder order_by_cost(const DpRequest& request) {
  const std::size_t n = request.lengths.size();
  CostOrder order;
  order.cost.resize(n);
  bool positive = true;
  for (std::size_t i = 0; i < n; ++i) {
    order.cost[i] = request.cost(request.lengths[i]);
    positive = positive && order.cost[i] > 0 && std::isfinite(order.cost[i]);
  }
  order.descending = positive && n >= kRadixSamples ? descending_by_radix(order.cost)
                                                    : descending_by_sort(order.cost);
  return order;
}

Assignment assign_round_robin(std::size_t num_samples, std::size_t num_ranks) {
  Assignment ranks(num_ranks);
  for (auto& rank : ranks) rank.reserve(num_samples / num_ranks + 1);
  for (std::size_t i = 0; i < num_samples; ++i) {
    ranks[i % num_ranks].push_back(static_cast<std::int64_t>(i));
  }
  return ranks;
}

Assignment assign_lpt(const CostOrder& order, std::size_t num_ranks, bool equal_count) {
  const std::size_t n = order.descending.size();
  const std::size_t cap = (n + num_ranks - 1) / num_ranks;
  // Under equal_count only n % k ranks may reach ceil(n/k); once they have,
  // every other rank stops at floor(n/k), so no rank is left below it.
  const std::size_t floor_count = n / num_ranks;
  const std::size_t at_cap_allowed = equal_count ? n % num_ranks : num_ranks;
  std::size_t at_cap = 0;
  auto limit = [&] { return at_cap_allowed == 0 || at_cap < at_cap_allowed ? cap : floor_count; };
  // (load, rank), lightest first and the lowest rank among equals; a rank
  // that reaches its limit leaves the heap for good (lazily: an entry whose
  // rank has reached a limit that dropped is skipped when it surfaces).
  using Entry = std::pair<double, std::size_t>;
  std::vector<Entry> heap_storage;
  heap_storage.reserve(num_ranks);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> lightest(std::greater<>{},
                                                                          std::move(heap_storage));
  for (std::size_t r = 0; r < num_ranks; ++r) lightest.emplace(0.0, r);
  Assignment ranks(num_ranks);
  for (auto& rank : ranks) rank.reserve(cap);
  for (std::int64_t index : order.descending) {
    while (ranks[lightest.top().second].size() >= limit()) lightest.pop();
    const auto [load, rank] = lightest.top();
    lightest.pop();
    ranks[rank].push_back(index);
    if (ranks[rank].size() == cap) ++at_cap;
    if (ranks[rank].size() < limit()) {
      lightest.emplace(load + order.cost[static_cast<std::size_t>(index)], rank);
    }
  }
  return ranks;
}

Assignment assign_karmarkar_karp(const CostOrder& order, std::size_t num_ranks, bool equal_count) {
  const std::size_t n = order.descending.size();
  const std::size_t k = num_ranks;
  if (equal_count) {
    // Consecutive groups of k (the last padded with dummies) put one sample in
    // each subset; merges keep "one sample per group per subset", so subset
    // sizes differ by at most the one dummy.
    DifferencingSolver solver(k, (n + k - 1) / k, n);
    std::vector<std::int64_t> members(k, -1);
    for (std::size_t start = 0; start < n; start += k) {
      for (std::size_t j = 0; j < k; ++j) {
        members[j] = start + j < n ? order.descending[start + j] : -1;
      }
      solver.add_partial(members, order.cost);
    }
    return solver.solve();
  }
  DifferencingSolver solver(k, n, n);
  std::vector<std::int64_t> single(1);  // one sample; the other k - 1 subsets empty
  for (std::int64_t index : order.descending) {
    single[0] = index;
    solver.add_partial(single, order.cost);
  }
  return solver.solve();
}

}  // namespace detail

Result<DpPartition> partition_round_robin(const DpRequest& request) {
  if (Status status = validate_request(request); !status) return status;
  return finished(request, "round_robin",
                  detail::assign_round_robin(request.lengths.size(),
                                             static_cast<std::size_t>(request.num_ranks)));
}

Result<DpPartition> partition_lpt(const DpRequest& request) {
  if (Status status = validate_request(request); !status) return status;
  return finished(
      request, "lpt",
      detail::assign_lpt(detail::order_by_cost(request),
                         static_cast<std::size_t>(request.num_ranks), request.equal_count));
}

Result<DpPartition> partition_karmarkar_karp(const DpRequest& request) {
  if (Status status = validate_request(request); !status) return status;
  return finished(request, "karmarkar_karp",
                  detail::assign_karmarkar_karp(detail::order_by_cost(request),
                                                static_cast<std::size_t>(request.num_ranks),
                                                request.equal_count));
}

}  // namespace fulcrum::dp
