// The DP partitioners against the algorithms they replaced: Karmarkar-Karp
// as it was before its partials became heaps and a queue (a flat array of k
// subsets per partial, every merge sorted in full, one heap of partials),
// kept here as the reference, and auto's search with and without the cut
// that stops its descent once it is settled. Both must give the same
// partition, rank for rank and sample for sample, on random requests with
// many ties.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "strategies/dp_strategies.h"

namespace fulcrum::dp {
namespace {

// --- The reference: Karmarkar-Karp as it was -------------------------------

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

detail::Assignment reference_karmarkar_karp(const detail::CostOrder& order, std::size_t num_ranks,
                                            bool equal_count) {
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

// --- Random requests ------------------------------------------------------

// n samples over k ranks: lengths from a narrow set (many exact ties), a
// log-uniform range, or a few repeated long lengths among short ones; token
// or attention cost, the latter with a = 0, the default or a fraction.
DpRequest random_request(std::mt19937_64& rng, std::size_t n, std::int32_t k) {
  DpRequest request;
  request.num_ranks = k;
  request.equal_count = (rng() & 1) != 0;
  request.cost.kind = (rng() & 2) != 0 ? CostKind::kAttention : CostKind::kTokens;
  const std::uint64_t a = rng() % 4;
  request.cost.a = a == 0 ? 0.0 : a == 1 ? 1000.5 : kDefaultAttentionA;
  const std::uint64_t shape = rng() % 3;
  std::uniform_real_distribution<double> exponent(0.0, 15.0);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t length = 0;
    if (shape == 0) {
      length = 1 + static_cast<std::int64_t>(rng() % 6);
    } else if (shape == 1) {
      length = static_cast<std::int64_t>(std::exp2(exponent(rng)));
    } else {
      length = rng() % 8 == 0 ? 16384 : 1 + static_cast<std::int64_t>(rng() % 4096);
    }
    request.lengths.push_back(length);
  }
  return request;
}

std::string describe(const DpRequest& request, int c) {
  return "case " + std::to_string(c) + ": n " + std::to_string(request.lengths.size()) + ", k " +
         std::to_string(request.num_ranks) + (request.equal_count ? ", equal counts" : "") +
         (request.cost.kind == CostKind::kAttention
              ? ", attention a " + std::to_string(request.cost.a)
              : ", tokens");
}

TEST(DpReference, KarmarkarKarpGivesThePreviousPartition) {
  std::mt19937_64 rng(25);
  for (int c = 0; c < 600; ++c) {
    // Mostly a few samples per rank (merges of small partials), some with
    // tens to hundreds (full partials taking one sample at a time).
    const std::int32_t k = 1 + static_cast<std::int32_t>(rng() % (c % 3 == 0 ? 256 : 24));
    const std::size_t n = 1 + rng() % (c % 5 == 0 ? 4000 : 300);
    const DpRequest request = random_request(rng, n, k);
    const detail::CostOrder order = detail::order_by_cost(request);
    const detail::Assignment got =
        detail::assign_karmarkar_karp(order, static_cast<std::size_t>(k), request.equal_count);
    const detail::Assignment want =
        reference_karmarkar_karp(order, static_cast<std::size_t>(k), request.equal_count);
    ASSERT_EQ(got, want) << describe(request, c);
  }
}

// The speed benchmark's shape: 16,000 samples on 128 ranks, attention cost.
TEST(DpReference, KarmarkarKarpGivesThePreviousPartitionAtScale) {
  std::mt19937_64 rng(2516);
  for (const bool equal_count : {false, true}) {
    DpRequest request;
    request.num_ranks = 128;
    request.equal_count = equal_count;
    request.cost = CostModel{CostKind::kAttention, kDefaultAttentionA};
    std::uniform_real_distribution<double> exponent(7.0, 14.0);
    for (int i = 0; i < 16000; ++i) {
      request.lengths.push_back(static_cast<std::int64_t>(std::exp2(exponent(rng))));
    }
    const detail::CostOrder order = detail::order_by_cost(request);
    EXPECT_EQ(detail::assign_karmarkar_karp(order, 128, equal_count),
              reference_karmarkar_karp(order, 128, equal_count))
        << (equal_count ? "equal counts" : "free");
  }
}

// order_by_cost's contract, recounted: largest cost first, ties by index
// (its radix sort from 256 samples on, the pairs' sort below).
TEST(DpReference, OrderByCostIsLargestFirstTiesByIndex) {
  std::mt19937_64 rng(2519);
  for (int c = 0; c < 300; ++c) {
    const std::size_t n = 1 + rng() % (c % 2 == 0 ? 300 : 20000);
    const DpRequest request = random_request(rng, n, 1);
    const detail::CostOrder order = detail::order_by_cost(request);
    std::vector<std::int64_t> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<std::int64_t>(i);
    std::sort(want.begin(), want.end(), [&](std::int64_t x, std::int64_t y) {
      const double cx = order.cost[static_cast<std::size_t>(x)];
      const double cy = order.cost[static_cast<std::size_t>(y)];
      return cx != cy ? cx > cy : x < y;
    });
    ASSERT_EQ(order.descending, want) << describe(request, c);
  }
}

TEST(DpReference, AutoGivesTheSamePartitionWithAndWithoutTheSettledCut) {
  std::mt19937_64 rng(2504);
  int fired = 0;
  const int cases = 300;
  for (int c = 0; c < cases; ++c) {
    // Tens to hundreds of samples per rank (where the cut can fire), and a
    // few with fewer (where it must not).
    const std::int32_t k = 1 + static_cast<std::int32_t>(rng() % 48);
    const std::size_t per_rank = c % 4 == 0 ? 1 + rng() % 30 : 25 + rng() % 150;
    const DpRequest request = random_request(rng, per_rank * static_cast<std::size_t>(k), k);
    bool stopped = false;
    const Result<DpPartition> cut = detail::partition_auto_search(request, true, &stopped);
    const Result<DpPartition> uncut = detail::partition_auto_search(request, false, nullptr);
    ASSERT_TRUE(cut.is_ok() && uncut.is_ok()) << describe(request, c);
    ASSERT_EQ(cut->ranks, uncut->ranks) << describe(request, c);
    EXPECT_EQ(cut->cost, uncut->cost) << describe(request, c);
    const Result<DpPartition> plain = partition_auto(request);
    ASSERT_TRUE(plain.is_ok());
    EXPECT_EQ(plain->ranks, cut->ranks) << describe(request, c);
    fired += stopped ? 1 : 0;
  }
  // The cut must have been exercised, not only been harmless.
  EXPECT_GE(fired, cases / 10) << fired << " of " << cases << " searches stopped settled";
}

}  // namespace
}  // namespace fulcrum::dp
