// Properties of every DP strategy, checked against recounts done here rather
// than against the strategies' own bookkeeping.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "strategies/dp_strategies.h"

namespace fulcrum::dp {
namespace {

constexpr const char* kAllStrategies[] = {"round_robin", "lpt", "karmarkar_karp", "auto"};

double cost_of(const DpRequest& request, std::int64_t length) {
  const double l = static_cast<double>(length);
  return request.cost.kind == CostKind::kTokens ? l : request.cost.a * l + l * l;
}

double max_of(const std::vector<double>& values) {
  return values.empty() ? 0.0 : *std::max_element(values.begin(), values.end());
}

std::vector<double> recount(const DpRequest& request, const DpPartition& partition) {
  std::vector<double> cost;
  for (const auto& rank : partition.ranks) {
    double sum = 0.0;
    for (std::int64_t index : rank) sum += cost_of(request, request.lengths.at(index));
    cost.push_back(sum);
  }
  return cost;
}

bool near(double a, double b, double relative) {
  return std::fabs(a - b) <= relative * std::max({1.0, std::fabs(a), std::fabs(b)});
}

bool counts_are_equal(const DpPartition& partition, std::size_t n, std::size_t k) {
  return std::all_of(partition.ranks.begin(), partition.ranks.end(), [&](const auto& rank) {
    return rank.size() >= n / k && rank.size() <= (n + k - 1) / k;
  });
}

// Checks everything a partition must satisfy whatever strategy made it.
void expect_valid(const DpRequest& request, const DpPartition& partition, const std::string& name,
                  const std::string& where) {
  SCOPED_TRACE(where + " strategy=" + name);
  const std::size_t n = request.lengths.size();
  const auto k = static_cast<std::size_t>(request.num_ranks);
  EXPECT_EQ(partition.strategy, name);
  ASSERT_EQ(partition.ranks.size(), k);
  ASSERT_EQ(partition.cost.size(), k);

  std::vector<int> seen(n, 0);
  for (const auto& rank : partition.ranks) {
    for (std::int64_t index : rank) {
      ASSERT_GE(index, 0);
      ASSERT_LT(static_cast<std::size_t>(index), n);
      ++seen[static_cast<std::size_t>(index)];
    }
  }
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i;

  const std::size_t cap = (n + k - 1) / k;
  for (const auto& rank : partition.ranks) {
    if (name == "round_robin" || name == "lpt") {
      EXPECT_LE(rank.size(), cap);
    }
  }
  if (name == "round_robin" || request.equal_count) {
    EXPECT_TRUE(counts_are_equal(partition, n, k));
  }
  if (name == "round_robin") {
    for (std::size_t r = 0; r < k; ++r) {
      for (std::int64_t index : partition.ranks[r]) {
        EXPECT_EQ(static_cast<std::size_t>(index) % k, r);
      }
    }
  }

  const std::vector<double> cost = recount(request, partition);
  double total = 0.0;
  for (std::size_t r = 0; r < k; ++r) {
    EXPECT_TRUE(near(partition.cost[r], cost[r], 1e-12)) << "rank " << r;
    total += cost[r];
  }
  const double busiest = max_of(cost);
  EXPECT_TRUE(near(partition.imbalance, busiest / (total / static_cast<double>(k)), 1e-12));
  EXPECT_EQ(partition.lower_bound, lower_bound(request));
  EXPECT_GE(busiest, partition.lower_bound * (1.0 - 1e-9));
}

// Lengths with a heavy tail (the shape of real document mixes), sometimes
// from a narrow range so that ties are common.
DpRequest random_request(std::mt19937_64& rng, std::size_t max_n, std::int32_t max_k) {
  DpRequest request;
  std::uniform_int_distribution<std::size_t> pick_n(1, max_n);
  std::uniform_int_distribution<std::int32_t> pick_k(1, max_k);
  const std::size_t n = pick_n(rng);
  request.num_ranks = pick_k(rng);
  request.equal_count = (rng() & 1) != 0;
  request.cost.kind = (rng() & 2) != 0 ? CostKind::kAttention : CostKind::kTokens;
  if ((rng() & 12) == 0) request.cost.a = 0.0;
  const bool narrow = (rng() % 4) == 0;
  std::uniform_real_distribution<double> exponent(0.0, 17.0);
  std::uniform_int_distribution<std::int64_t> small(1, 6);
  for (std::size_t i = 0; i < n; ++i) {
    request.lengths.push_back(narrow ? small(rng)
                                     : static_cast<std::int64_t>(std::exp2(exponent(rng))));
  }
  return request;
}

std::string describe(const DpRequest& request, int case_number) {
  return "case " + std::to_string(case_number) + ": n=" + std::to_string(request.lengths.size()) +
         " k=" + std::to_string(request.num_ranks) +
         " cost=" + (request.cost.kind == CostKind::kTokens ? "tokens" : "attention") +
         " equal_count=" + (request.equal_count ? "on" : "off");
}

// The best max cost over every assignment (honouring equal_count), by
// enumeration: k^n assignments, so only for tiny cases.
double brute_force_optimum(const DpRequest& request) {
  const std::size_t n = request.lengths.size();
  const auto k = static_cast<std::size_t>(request.num_ranks);
  std::vector<std::size_t> rank_of(n, 0);
  double best = std::numeric_limits<double>::infinity();
  while (true) {
    std::vector<double> load(k, 0.0);
    std::vector<std::size_t> count(k, 0);
    for (std::size_t i = 0; i < n; ++i) {
      load[rank_of[i]] += cost_of(request, request.lengths[i]);
      ++count[rank_of[i]];
    }
    const bool allowed =
        !request.equal_count || std::all_of(count.begin(), count.end(), [&](std::size_t c) {
          return c >= n / k && c <= (n + k - 1) / k;
        });
    if (allowed) best = std::min(best, max_of(load));
    std::size_t digit = 0;
    while (digit < n && ++rank_of[digit] == k) rank_of[digit++] = 0;
    if (digit == n) break;
  }
  return best;
}

// The same optimum for larger k, enumerating unlabelled groupings: the first
// unplaced sample opens a new group, which then picks its other members among
// the later samples. Group sizes follow the count rule (floor/ceil(n/k) under
// equal_count, anything up to k groups otherwise).
class GroupingSearch {
 public:
  explicit GroupingSearch(const DpRequest& request)
      : request_(request),
        n_(request.lengths.size()),
        k_(static_cast<std::size_t>(request.num_ranks)),
        placed_(n_, false) {}

  double optimum() {
    open_group(0, 0.0, n_ % k_);
    return best_;
  }

 private:
  // groups: groups made so far; busiest: their largest cost; big_left: how
  // many ceil-size groups equal_count still allows.
  void open_group(std::size_t groups, double busiest, std::size_t big_left) {
    if (busiest >= best_) return;
    std::size_t first = 0;
    while (first < n_ && placed_[first]) ++first;
    if (first == n_) {
      // Under equal_count every one of the k ranks holds floor or ceil
      // samples; with floor = 0 the missing groups are simply empty ranks.
      if (!request_.equal_count || groups == k_ || n_ / k_ == 0) best_ = busiest;
      return;
    }
    if (groups == k_) return;
    placed_[first] = true;
    const double cost = cost_of(request_, request_.lengths[first]);
    if (request_.equal_count) {
      const std::size_t small = n_ / k_;
      if (small >= 1) fill(first + 1, small - 1, cost, groups, busiest, big_left);
      if (big_left > 0) fill(first + 1, small, cost, groups, busiest, big_left - 1);
    } else {
      for (std::size_t more = 0; more < n_; ++more) {
        fill(first + 1, more, cost, groups, busiest, big_left);
      }
    }
    placed_[first] = false;
  }

  // Adds `more` samples from index `from` on to the open group of cost `cost`.
  void fill(std::size_t from, std::size_t more, double cost, std::size_t groups, double busiest,
            std::size_t big_left) {
    if (more == 0) {
      open_group(groups + 1, std::max(busiest, cost), big_left);
      return;
    }
    for (std::size_t i = from; i < n_; ++i) {
      if (placed_[i]) continue;
      placed_[i] = true;
      fill(i + 1, more - 1, cost + cost_of(request_, request_.lengths[i]), groups, busiest,
           big_left);
      placed_[i] = false;
    }
  }

  const DpRequest& request_;
  std::size_t n_;
  std::size_t k_;
  std::vector<bool> placed_;
  double best_ = std::numeric_limits<double>::infinity();
};

TEST(DpRegistry, ListsTheStrategiesInOrder) {
  const auto table = strategies();
  ASSERT_EQ(table.size(), 4u);
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].name, kAllStrategies[i]);
    EXPECT_EQ(find_strategy(table[i].name), &table[i]);
    EXPECT_NE(table[i].partition, nullptr);
    EXPECT_FALSE(table[i].summary.empty());
  }
  EXPECT_EQ(find_strategy("Auto"), nullptr);
}

TEST(DpPartition, RandomRequestsSatisfyEveryProperty) {
  std::mt19937_64 rng(20240611);
  for (int c = 0; c < 400; ++c) {
    // Mostly moderate sizes, a few up to 2000 samples.
    const std::size_t max_n = c % 10 == 0 ? 2000 : 200;
    const DpRequest request = random_request(rng, max_n, 64);
    const std::string where = describe(request, c);
    double best_baseline = std::numeric_limits<double>::infinity();
    double auto_max = 0.0;
    for (const char* name : kAllStrategies) {
      Result<DpPartition> result = partition(name, request);
      ASSERT_TRUE(result.is_ok()) << where << " " << name << ": " << result.status().message();
      expect_valid(request, *result, name, where);
      const double busiest = max_of(recount(request, *result));
      if (std::string(name) == "auto") {
        auto_max = busiest;
      } else {
        best_baseline = std::min(best_baseline, busiest);
      }
    }
    EXPECT_LE(auto_max, best_baseline * (1.0 + 1e-12)) << where;
  }
}

TEST(DpPartition, TinyCasesBracketTheOptimum) {
  std::mt19937_64 rng(7);
  for (int c = 0; c < 600; ++c) {
    DpRequest request = random_request(rng, c % 3 == 0 ? 10 : 8, c % 2 == 0 ? 3 : 4);
    if (request.num_ranks == 4 && request.lengths.size() > 8) request.lengths.resize(8);
    const std::string where = describe(request, c);
    const double optimum = brute_force_optimum(request);
    const double bound = lower_bound(request);
    EXPECT_LE(bound, optimum * (1.0 + 1e-12)) << where << " bound=" << bound;
    Result<DpPartition> best = partition_auto(request);
    ASSERT_TRUE(best.is_ok()) << where;
    expect_valid(request, *best, "auto", where);
    EXPECT_GE(max_of(recount(request, *best)), optimum * (1.0 - 1e-12)) << where;
  }
}

TEST(DpPartition, SmallCasesWithMoreRanksBracketTheOptimum) {
  std::mt19937_64 rng(31);
  for (int c = 0; c < 300; ++c) {
    DpRequest request = random_request(rng, 12, 6);
    // Equal-count groupings stay few up to 12 samples; free ones up to 9.
    if (!request.equal_count && request.lengths.size() > 9) request.lengths.resize(9);
    const std::string where = describe(request, c);
    const double optimum = GroupingSearch(request).optimum();
    if (request.lengths.size() <= 8 && request.num_ranks <= 3) {
      EXPECT_EQ(optimum, brute_force_optimum(request)) << where;  // the two searches agree
    }
    const double bound = lower_bound(request);
    EXPECT_LE(bound, optimum * (1.0 + 1e-12)) << where << " bound=" << bound;
    Result<DpPartition> best = partition_auto(request);
    ASSERT_TRUE(best.is_ok()) << where;
    expect_valid(request, *best, "auto", where);
    EXPECT_GE(max_of(recount(request, *best)), optimum * (1.0 - 1e-12)) << where;
  }
}

TEST(DpPartition, KnownSmallResults) {
  DpRequest request;
  request.lengths = {5, 4, 3, 3, 3};
  request.num_ranks = 2;

  // LPT: 5 -> r0, 4 -> r1, 3 -> r1 (4 < 5), 3 -> r0 (5 < 7), 3 -> r1 (7 < 8).
  Result<DpPartition> lpt = partition_lpt(request);
  ASSERT_TRUE(lpt.is_ok());
  EXPECT_EQ(lpt->ranks[0], (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(lpt->ranks[1], (std::vector<std::int64_t>{1, 2, 4}));
  EXPECT_EQ(lpt->cost, (std::vector<double>{8.0, 10.0}));
  EXPECT_DOUBLE_EQ(lpt->imbalance, 10.0 / 9.0);

  Result<DpPartition> rr = partition_round_robin(request);
  ASSERT_TRUE(rr.is_ok());
  EXPECT_EQ(rr->ranks[0], (std::vector<std::int64_t>{0, 2, 4}));
  EXPECT_EQ(rr->cost, (std::vector<double>{11.0, 7.0}));

  // Free Karmarkar-Karp on {8,7,6,5,4}: differences 1, 1, 3, 2 -> 16 | 14.
  request.lengths = {8, 7, 6, 5, 4};
  Result<DpPartition> kk = partition_karmarkar_karp(request);
  ASSERT_TRUE(kk.is_ok());
  EXPECT_EQ(max_of(kk->cost), 16.0);
  // The optimum is 15 | 15 ({8,7} | {6,5,4}); auto's swaps find it.
  Result<DpPartition> best = partition_auto(request);
  ASSERT_TRUE(best.is_ok());
  EXPECT_EQ(max_of(best->cost), 15.0);
}

TEST(DpLowerBound, EachBoundBites) {
  DpRequest request;
  request.num_ranks = 2;
  request.lengths = {10, 1, 1, 1};
  EXPECT_EQ(lower_bound(request), 10.0);  // the largest sample
  request.equal_count = true;
  EXPECT_EQ(lower_bound(request), 11.0);  // ... plus floor(n/k) - 1 = 1 cheapest other

  request.equal_count = false;
  request.lengths = {3, 3, 3, 2, 2};
  EXPECT_EQ(lower_bound(request), 7.0);  // ceil(13 / 2); costs are integers

  request.num_ranks = 3;
  request.lengths = {5, 5, 5, 5};
  EXPECT_EQ(lower_bound(request), 10.0);  // two of the top k+1 share a rank

  request.num_ranks = 2;
  request.equal_count = true;
  request.lengths = {1, 1, 1, 100, 100};
  EXPECT_EQ(lower_bound(request), 102.0);  // ceil(203 / 2)

  request.lengths = {10, 10, 10, 1, 1, 1};
  // Two of the top three share a rank, which holds floor(6/2) = 3 samples.
  EXPECT_EQ(lower_bound(request), 21.0);

  request.cost = {CostKind::kAttention, 0.5};
  request.equal_count = false;
  request.lengths = {1, 1};
  EXPECT_EQ(lower_bound(request), 1.5);  // non-integer costs: no rounding
}

TEST(DpPartition, MoreRanksThanSamples) {
  DpRequest request;
  request.lengths = {7, 3};
  request.num_ranks = 5;
  for (bool equal : {false, true}) {
    request.equal_count = equal;
    for (const char* name : kAllStrategies) {
      Result<DpPartition> result = partition(name, request);
      ASSERT_TRUE(result.is_ok()) << name;
      expect_valid(request, *result, name, equal ? "k>n equal" : "k>n");
      EXPECT_EQ(max_of(result->cost), 7.0) << name;
    }
  }
}

TEST(DpPartition, IsDeterministic) {
  std::mt19937_64 rng(99);
  for (int c = 0; c < 20; ++c) {
    const DpRequest request = random_request(rng, 500, 16);
    for (const char* name : kAllStrategies) {
      Result<DpPartition> first = partition(name, request);
      Result<DpPartition> second = partition(name, request);
      ASSERT_TRUE(first.is_ok() && second.is_ok());
      EXPECT_EQ(first->ranks, second->ranks) << name;
    }
  }
}

TEST(DpPartition, AutoIsFastOnAThousandSamples) {
  // A correctness guard against accidental quadratic blow-ups, not a timing
  // test: 50 runs of 1,024 samples at k = 8 must finish in a test's time.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> exponent(4.0, 16.0);
  DpRequest request;
  request.num_ranks = 8;
  request.cost.kind = CostKind::kAttention;
  for (int i = 0; i < 1024; ++i) {
    request.lengths.push_back(static_cast<std::int64_t>(std::exp2(exponent(rng))));
  }
  for (int run = 0; run < 50; ++run) {
    request.equal_count = run % 2 == 0;
    Result<DpPartition> result = partition_auto(request);
    ASSERT_TRUE(result.is_ok());
    EXPECT_GE(max_of(result->cost), result->lower_bound * (1.0 - 1e-9));
  }
}

struct BadInput {
  const char* what;
  DpRequest request;
  StatusCode code;
  std::vector<std::string> message_parts;
};

std::vector<BadInput> bad_inputs() {
  std::vector<BadInput> cases;
  DpRequest empty;
  cases.push_back({"no samples", empty, StatusCode::kInvalidArgument, {"no samples"}});
  DpRequest zero_length;
  zero_length.lengths = {4, 2, 9, 0, 1};
  cases.push_back(
      {"zero length", zero_length, StatusCode::kInvalidArgument, {"lengths[3]", "is 0"}});
  DpRequest negative_length;
  negative_length.lengths = {-5};
  cases.push_back(
      {"negative length", negative_length, StatusCode::kInvalidArgument, {"lengths[0]", "-5"}});
  DpRequest no_ranks;
  no_ranks.lengths = {1, 2};
  no_ranks.num_ranks = 0;
  cases.push_back({"zero ranks", no_ranks, StatusCode::kInvalidArgument, {"num_ranks", "0"}});
  DpRequest negative_ranks = no_ranks;
  negative_ranks.num_ranks = -3;
  cases.push_back({"negative ranks", negative_ranks, StatusCode::kInvalidArgument, {"-3"}});
  // The bounds shared with CP workloads (fulcrum/core/workload.h).
  DpRequest long_sample;
  long_sample.lengths = {4, (std::int64_t{1} << 31) + 1};
  cases.push_back({"sample longer than 2^31",
                   long_sample,
                   StatusCode::kInvalidArgument,
                   {"lengths[1] is 2147483649", "2147483648 (2^31)"}});
  DpRequest huge_sample = long_sample;
  huge_sample.lengths[1] = std::numeric_limits<std::int64_t>::max();
  cases.push_back(
      {"sample of int64 max", huge_sample, StatusCode::kInvalidArgument, {"9223372036854775807"}});
  DpRequest many_ranks;
  many_ranks.lengths = {1, 2};
  many_ranks.num_ranks = (1 << 20) + 1;
  cases.push_back({"more ranks than 2^20",
                   many_ranks,
                   StatusCode::kInvalidArgument,
                   {"num_ranks is 1048577", "1048576 (2^20)"}});
  DpRequest int32_ranks = many_ranks;
  int32_ranks.num_ranks = std::numeric_limits<std::int32_t>::max();
  cases.push_back({"int32 max ranks", int32_ranks, StatusCode::kInvalidArgument, {"2147483647"}});
  DpRequest nan_a;
  nan_a.lengths = {1, 2};
  nan_a.cost = {CostKind::kAttention, std::nan("")};
  cases.push_back({"nan a", nan_a, StatusCode::kInvalidArgument, {"nan"}});
  DpRequest infinite_a = nan_a;
  infinite_a.cost.a = std::numeric_limits<double>::infinity();
  cases.push_back({"infinite a", infinite_a, StatusCode::kInvalidArgument, {"inf"}});
  DpRequest negative_a = nan_a;
  negative_a.cost.a = -1.0;
  cases.push_back({"negative a", negative_a, StatusCode::kInvalidArgument, {"-1"}});
  // Finite but so large that a * L overflows the costs to inf (and the
  // imbalance to nan).
  DpRequest huge_a = nan_a;
  huge_a.cost.a = 1e307;
  cases.push_back({"huge a", huge_a, StatusCode::kInvalidArgument, {"1e+307", "2^40"}});
  return cases;
}

TEST(DpPartition, BadInputsAreRefusedWithTheValue) {
  for (const BadInput& bad : bad_inputs()) {
    const Status status = validate_request(bad.request);
    EXPECT_EQ(status.code(), bad.code) << bad.what;
    for (const char* name : kAllStrategies) {
      Result<DpPartition> result = partition(name, bad.request);
      ASSERT_FALSE(result.is_ok()) << bad.what << " " << name;
      EXPECT_EQ(result.status().code(), bad.code) << bad.what << " " << name;
      for (const std::string& part : bad.message_parts) {
        EXPECT_NE(result.status().message().find(part), std::string::npos)
            << bad.what << " " << name << ": '" << result.status().message() << "' lacks '" << part
            << "'";
      }
      EXPECT_EQ(result.status().message().find('\n'), std::string::npos);
    }
  }
}

TEST(DpPartition, TheBoundsThemselvesAreAccepted) {
  DpRequest request;
  request.lengths = {std::int64_t{1} << 31, 1, std::int64_t{1} << 31};
  request.num_ranks = 2;
  request.cost = {CostKind::kAttention, kDefaultAttentionA};
  EXPECT_TRUE(validate_request(request).is_ok());
  for (const char* name : kAllStrategies) {
    Result<DpPartition> result = partition(name, request);
    ASSERT_TRUE(result.is_ok()) << name << ": " << result.status().message();
    ASSERT_EQ(result->ranks.size(), 2u) << name;
    std::vector<std::int64_t> samples;
    double total = 0.0;
    for (std::size_t r = 0; r < 2; ++r) {
      samples.insert(samples.end(), result->ranks[r].begin(), result->ranks[r].end());
      EXPECT_TRUE(std::isfinite(result->cost[r])) << name;
      total += result->cost[r];
    }
    std::sort(samples.begin(), samples.end());
    EXPECT_EQ(samples, (std::vector<std::int64_t>{0, 1, 2})) << name;
    EXPECT_DOUBLE_EQ(total, 2 * request.cost(std::int64_t{1} << 31) + request.cost(1)) << name;
  }
}

TEST(DpPartition, UnknownStrategyNameIsQuotedOnOneLine) {
  DpRequest request;
  request.lengths = {1};
  Result<DpPartition> result = partition("l\npt", request);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(result.status().message().find('\n'), std::string::npos);
  EXPECT_NE(result.status().message().find("dp strategy 'l\\npt' does not exist"),
            std::string::npos)
      << result.status().message();
}

TEST(DpPartition, UnknownStrategyListsTheKnownOnes) {
  DpRequest request;
  request.lengths = {1};
  Result<DpPartition> result = partition("bogus", request);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kNotFound);
  for (std::string part : {"bogus", "round_robin", "lpt", "karmarkar_karp", "auto"}) {
    EXPECT_NE(result.status().message().find(part), std::string::npos) << part;
  }
}

}  // namespace
}  // namespace fulcrum::dp
