// The classic DP partitioners fulcrum compares against: round-robin, capped LPT
// and Karmarkar-Karp (largest differencing), the last in both its free and its
// equal-count form.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
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
// Partials live in one flat array of k-subset slots, and a merge writes its
// result over one of its inputs. A slot stores only its non-empty subsets,
// heaviest first; the rest are empty (cost 0). Early on most partials hold
// few samples, and merging two whose non-empty subsets fit in k together
// just interleaves two sorted lists, so the free variant (n one-sample
// partials) costs far less than its O(n k log k) bound.

struct Subset {
  double sum;
  std::int32_t head;  // first node in the pool
  std::int32_t tail;
};

// Heaviest first; heads are unique among non-empty subsets, which makes the
// order total and the result the same with every sort implementation.
bool heavier(const Subset& x, const Subset& y) {
  return x.sum != y.sum ? x.sum > y.sum : x.head < y.head;
}

class DifferencingSolver {
 public:
  DifferencingSolver(std::size_t num_ranks, std::size_t num_partials, std::size_t num_samples)
      : k_(num_ranks),
        subsets_(std::make_unique_for_overwrite<Subset[]>(num_partials * num_ranks)),
        size_(num_partials, 0),
        scratch_(num_ranks) {
    item_.reserve(num_samples);
    next_.reserve(num_samples);
  }

  // A partial whose subset j holds members[j] (-1: none, a zero-cost dummy);
  // members come heaviest first, dummies last.
  void add_partial(const std::vector<std::int64_t>& members, const std::vector<double>& costs) {
    const std::size_t slot = num_slots_++;
    Subset* partial = slot_begin(slot);
    std::size_t size = 0;
    for (std::int64_t member : members) {
      if (member < 0) continue;
      const auto node = static_cast<std::int32_t>(next_.size());
      item_.push_back(member);
      next_.push_back(-1);
      partial[size++] = {costs[static_cast<std::size_t>(member)], node, node};
    }
    size_[slot] = size;
    push(slot);
  }

  detail::Assignment solve() {
    while (heap_.size() > 1) {
      const std::size_t a = pop();
      const std::size_t b = pop();
      merge(a, b);
      push(a);
    }
    detail::Assignment ranks(k_);
    if (heap_.empty()) return ranks;
    const std::size_t last = pop();
    const Subset* subsets = slot_begin(last);
    for (std::size_t j = 0; j < size_[last]; ++j) {
      for (std::int32_t node = subsets[j].head; node >= 0;
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

  Subset* slot_begin(std::size_t slot) { return subsets_.get() + slot * k_; }

  // a's j-th heaviest subset takes b's j-th lightest (an empty one when b
  // has fewer than k non-empty subsets); the result replaces a.
  void merge(std::size_t a, std::size_t b) {
    Subset* into = slot_begin(a);
    const Subset* from = slot_begin(b);
    const std::size_t p = size_[a];
    const std::size_t q = size_[b];
    if (p + q <= k_) {
      // No subset of a meets a non-empty subset of b.
      std::merge(into, into + p, from, from + q, scratch_.begin(), heavier);
      std::copy(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(p + q), into);
      size_[a] = p + q;
      return;
    }
    // Every position j now holds at least one non-empty subset.
    for (std::size_t j = 0; j < k_; ++j) {
      const std::size_t partner = k_ - 1 - j;  // b's subset for position j
      if (j >= p) {
        into[j] = from[partner];
      } else if (partner < q) {
        into[j] = concat(into[j], from[partner]);
      }
    }
    std::sort(into, into + k_, heavier);
    size_[a] = k_;
  }

  Subset concat(const Subset& x, const Subset& y) {
    next_[static_cast<std::size_t>(x.tail)] = y.head;
    return {x.sum + y.sum, x.head, y.tail};
  }

  void push(std::size_t slot) {
    const Subset* partial = slot_begin(slot);
    const std::size_t size = size_[slot];
    const double lightest = size < k_ ? 0.0 : partial[k_ - 1].sum;
    heap_.push({size == 0 ? 0.0 : partial[0].sum - lightest, serial_++, slot});
  }

  std::size_t pop() {
    const std::size_t slot = heap_.top().slot;
    heap_.pop();
    return slot;
  }

  std::size_t k_;
  std::unique_ptr<Subset[]> subsets_;  // slot s: [s*k, s*k + size_[s]) non-empty, heaviest first
  std::vector<std::size_t> size_;      // non-empty subsets per slot
  std::size_t num_slots_ = 0;
  std::vector<Subset> scratch_;
  std::vector<std::int64_t> item_;  // node -> sample index
  std::vector<std::int32_t> next_;  // node -> next node of its subset, -1 at the end
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, SmallerSpread> heap_;
  std::uint64_t serial_ = 0;
};

}  // namespace

namespace detail {

CostOrder order_by_cost(const DpRequest& request) {
  const std::size_t n = request.lengths.size();
  CostOrder order;
  order.cost.resize(n);
  std::vector<std::pair<double, std::int64_t>> keyed(n);
  for (std::size_t i = 0; i < n; ++i) {
    order.cost[i] = request.cost(request.lengths[i]);
    // Negated cost: an ascending sort of unique (key, index) pairs gives
    // largest cost first, ties by index, whatever the sort implementation.
    keyed[i] = {-order.cost[i], static_cast<std::int64_t>(i)};
  }
  std::sort(keyed.begin(), keyed.end());
  order.descending.resize(n);
  for (std::size_t i = 0; i < n; ++i) order.descending[i] = keyed[i].second;
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
  std::vector<std::int64_t> members(k, -1);
  if (equal_count) {
    // Consecutive groups of k (the last padded with dummies) put one sample in
    // each subset; merges keep "one sample per group per subset", so subset
    // sizes differ by at most the one dummy.
    DifferencingSolver solver(k, (n + k - 1) / k, n);
    for (std::size_t start = 0; start < n; start += k) {
      for (std::size_t j = 0; j < k; ++j) {
        members[j] = start + j < n ? order.descending[start + j] : -1;
      }
      solver.add_partial(members, order.cost);
    }
    return solver.solve();
  }
  DifferencingSolver solver(k, n, n);
  for (std::int64_t index : order.descending) {
    members[0] = index;
    solver.add_partial(members, order.cost);
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
