// The windowed dispatcher and the length-bucketed sampler: nothing lost,
// nothing repeated, order and determinism as promised.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "strategies/dp_strategies.h"
#include "strategies/dp_stream.h"

namespace fulcrum::dp {
namespace {

std::int64_t heavy_tailed_length(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> exponent(3.0, 16.0);
  return static_cast<std::int64_t>(std::exp2(exponent(rng)));
}

struct Emitted {
  DispatchBatch batch;
  std::size_t pushed_before;  // samples pushed when next() returned it
};

std::vector<Emitted> drain(WindowedDispatcher& dispatcher, std::size_t pushed) {
  std::vector<Emitted> out;
  while (auto batch = dispatcher.next()) out.push_back({std::move(*batch), pushed});
  return out;
}

// Sample id i is the i-th sample pushed, with length lengths[i].
void check_stream(const DispatchOptions& options, const std::vector<std::int64_t>& lengths,
                  const std::vector<Emitted>& emitted) {
  const auto k = static_cast<std::size_t>(options.num_ranks);
  const std::size_t capacity =
      static_cast<std::size_t>(options.window) * static_cast<std::size_t>(options.batch_size);
  const std::size_t n = lengths.size();
  std::vector<int> seen(n, 0);
  std::uint64_t last_window = 0;
  for (const Emitted& e : emitted) {
    const DispatchBatch& batch = e.batch;
    ASSERT_EQ(batch.ranks.size(), k);
    ASSERT_EQ(batch.cost.size(), k);
    ASSERT_GE(batch.window, last_window) << "windows must come out in order";
    last_window = batch.window;
    std::size_t smallest = SIZE_MAX;
    std::size_t largest = 0;
    std::size_t size = 0;
    for (std::size_t r = 0; r < k; ++r) {
      double cost = 0.0;
      for (std::int64_t id : batch.ranks[r]) {
        ASSERT_GE(id, 0);
        ASSERT_LT(static_cast<std::size_t>(id), n);
        ++seen[static_cast<std::size_t>(id)];
        // Window w holds exactly the samples pushed w-th: ids [w*cap, (w+1)*cap).
        EXPECT_EQ(static_cast<std::uint64_t>(id) / capacity, batch.window) << "id " << id;
        cost += options.cost(lengths[static_cast<std::size_t>(id)]);
      }
      EXPECT_NEAR(batch.cost[r], cost, 1e-9 * std::max(1.0, cost));
      smallest = std::min(smallest, batch.ranks[r].size());
      largest = std::max(largest, batch.ranks[r].size());
      size += batch.ranks[r].size();
    }
    // Equal counts: ranks of one batch differ by at most one sample.
    EXPECT_LE(largest - smallest, 1u);
    const std::size_t window_end = std::min(n, (batch.window + 1) * capacity);
    if (window_end - batch.window * capacity == capacity) {
      EXPECT_EQ(size, static_cast<std::size_t>(options.batch_size));
    }
  }
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i;
}

TEST(WindowedDispatcher, EverySampleExactlyOnceInWindowOrder) {
  const DispatchOptions configs[] = {
      {4, 3, 8, {CostKind::kTokens}, "auto"},
      {8, 2, 37, {CostKind::kAttention}, "auto"},
      {3, 1, 5, {CostKind::kAttention}, "karmarkar_karp"},
      {5, 4, 3, {CostKind::kTokens}, "round_robin"},  // batch smaller than k
      {2, 5, 16, {CostKind::kTokens}, "lpt"},
  };
  for (const DispatchOptions& options : configs) {
    SCOPED_TRACE("k=" + std::to_string(options.num_ranks) + " w=" + std::to_string(options.window) +
                 " b=" + std::to_string(options.batch_size) + " " + options.strategy);
    Result<WindowedDispatcher> made = make_windowed_dispatcher(options);
    ASSERT_TRUE(made.is_ok()) << made.status().message();
    WindowedDispatcher& dispatcher = *made;
    const std::size_t capacity =
        static_cast<std::size_t>(options.window) * static_cast<std::size_t>(options.batch_size);

    std::mt19937_64 rng(options.batch_size);
    std::uniform_int_distribution<std::size_t> chunk(1, 3 * capacity);
    std::vector<std::int64_t> lengths;
    std::vector<Emitted> emitted;
    std::size_t returned = 0;  // samples handed out by next() so far
    while (lengths.size() < 10000) {
      const std::size_t count = std::min<std::size_t>(chunk(rng), 10000 - lengths.size());
      for (std::size_t i = 0; i < count; ++i) {
        lengths.push_back(heavy_tailed_length(rng));
        ASSERT_TRUE(
            dispatcher.push(static_cast<std::int64_t>(lengths.size() - 1), lengths.back()).is_ok());
        // A full window is dispatched the moment its last sample arrives.
        ASSERT_EQ(dispatcher.buffered(), lengths.size() % capacity);
      }
      // Drain only sometimes, so batches of several windows queue up.
      if (rng() % 3 != 0) {
        for (Emitted& e : drain(dispatcher, lengths.size())) {
          for (const auto& rank : e.batch.ranks) returned += rank.size();
          emitted.push_back(std::move(e));
        }
        ASSERT_EQ(returned, lengths.size() - dispatcher.buffered());
      }
    }
    ASSERT_TRUE(dispatcher.flush().is_ok());
    EXPECT_EQ(dispatcher.buffered(), 0u);
    for (Emitted& e : drain(dispatcher, lengths.size())) emitted.push_back(std::move(e));
    EXPECT_FALSE(dispatcher.next().has_value());
    check_stream(options, lengths, emitted);
  }
}

TEST(WindowedDispatcher, FlushOfAPartialWindow) {
  Result<WindowedDispatcher> made = make_windowed_dispatcher({4, 4, 10, {}, "auto"});
  ASSERT_TRUE(made.is_ok());
  EXPECT_TRUE(made->flush().is_ok());  // nothing buffered: nothing happens
  EXPECT_FALSE(made->next().has_value());
  for (int i = 0; i < 23; ++i) ASSERT_TRUE(made->push(i, 100 + i).is_ok());
  EXPECT_EQ(made->ready(), 0u);
  ASSERT_TRUE(made->flush().is_ok());
  EXPECT_EQ(made->ready(), 3u);  // ceil(23 / 10) batches
  std::set<std::int64_t> ids;
  while (auto batch = made->next()) {
    std::size_t size = 0;
    for (const auto& rank : batch->ranks) {
      size += rank.size();
      ids.insert(rank.begin(), rank.end());
    }
    EXPECT_GE(size, 7u);  // 23 over 3 batches: 7 or 8 each
    EXPECT_LE(size, 8u);
  }
  EXPECT_EQ(ids.size(), 23u);
}

TEST(WindowedDispatcher, WindowsBalanceBetterThanSingleBatches) {
  std::mt19937_64 rng(3);
  std::vector<std::int64_t> lengths(4096);
  for (auto& l : lengths) l = heavy_tailed_length(rng);
  auto mean_excess = [&](std::int32_t window) {
    Result<WindowedDispatcher> made =
        make_windowed_dispatcher({8, window, 64, {CostKind::kTokens}, "auto"});
    EXPECT_TRUE(made.is_ok());
    double excess = 0.0;
    int batches = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      EXPECT_TRUE(made->push(static_cast<std::int64_t>(i), lengths[i]).is_ok());
    }
    EXPECT_TRUE(made->flush().is_ok());
    while (auto batch = made->next()) {
      double total = 0.0;
      for (double c : batch->cost) total += c;
      excess += *std::max_element(batch->cost.begin(), batch->cost.end()) / (total / 8.0) - 1.0;
      ++batches;
    }
    return excess / batches;
  };
  EXPECT_LT(mean_excess(8), mean_excess(1));
}

TEST(WindowedDispatcher, SnapshotResumesTheSameStream) {
  const DispatchOptions options{4, 2, 6, {CostKind::kAttention}, "auto"};
  Result<WindowedDispatcher> original = make_windowed_dispatcher(options);
  ASSERT_TRUE(original.is_ok());
  std::mt19937_64 rng(11);
  std::vector<std::int64_t> lengths(100);
  for (auto& l : lengths) l = heavy_tailed_length(rng);
  for (int i = 0; i < 31; ++i) ASSERT_TRUE(original->push(i, lengths[i]).is_ok());
  ASSERT_TRUE(original->next().has_value());  // leave one formed batch pending
  const DispatcherState snapshot = original->save_state();
  EXPECT_EQ(snapshot.buffered.size(), 7u);
  EXPECT_EQ(snapshot.pending.size(), 3u);

  Result<WindowedDispatcher> resumed = make_windowed_dispatcher(options);
  ASSERT_TRUE(resumed.is_ok());
  ASSERT_TRUE(resumed->restore_state(snapshot).is_ok());
  EXPECT_EQ(resumed->buffered(), 7u);
  for (int i = 31; i < 100; ++i) {
    ASSERT_TRUE(original->push(i, lengths[i]).is_ok());
    ASSERT_TRUE(resumed->push(i, lengths[i]).is_ok());
  }
  ASSERT_TRUE(original->flush().is_ok());
  ASSERT_TRUE(resumed->flush().is_ok());
  int batches = 0;
  while (auto a = original->next()) {
    auto b = resumed->next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(a->window, b->window);
    EXPECT_EQ(a->ranks, b->ranks);
    ++batches;
  }
  EXPECT_FALSE(resumed->next().has_value());
  EXPECT_GT(batches, 10);

  // A snapshot from other options is refused and changes nothing.
  Result<WindowedDispatcher> other = make_windowed_dispatcher({3, 1, 4, {}, "auto"});
  ASSERT_TRUE(other.is_ok());
  const Status refused = other->restore_state(snapshot);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("7"), std::string::npos) << refused.message();
  EXPECT_EQ(other->buffered(), 0u);
}

TEST(WindowedDispatcher, BadOptionsAndSamples) {
  struct Case {
    std::int32_t num_ranks, window, batch_size;
    CostModel cost;
    const char* strategy;
    StatusCode code;
    const char* part;
  };
  const Case cases[] = {
      {0, 1, 1, {}, "auto", StatusCode::kInvalidArgument, "num_ranks is 0"},
      {2, 0, 1, {}, "auto", StatusCode::kInvalidArgument, "window is 0"},
      {2, 1, -4, {}, "auto", StatusCode::kInvalidArgument, "batch_size is -4"},
      {2, 1, 1, {}, "fastest", StatusCode::kNotFound, "fastest"},
      {2, 1, 1, {CostKind::kAttention, -2.0}, "auto", StatusCode::kInvalidArgument, "-2"},
  };
  for (const Case& c : cases) {
    Result<WindowedDispatcher> made =
        make_windowed_dispatcher({c.num_ranks, c.window, c.batch_size, c.cost, c.strategy});
    ASSERT_FALSE(made.is_ok()) << c.part;
    EXPECT_EQ(made.status().code(), c.code) << c.part;
    EXPECT_NE(made.status().message().find(c.part), std::string::npos) << made.status().message();
  }
  Result<WindowedDispatcher> made = make_windowed_dispatcher({2, 1, 4, {}, "auto"});
  ASSERT_TRUE(made.is_ok());
  const Status refused = made->push(42, 0);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("42"), std::string::npos) << refused.message();
  EXPECT_EQ(made->buffered(), 0u);
}

// The core dispatcher with an injected partition function (as the runtime's
// loader gives it the loaded balancer): it asks for w * k equal-count groups,
// and refuses an answer that loses or repeats a sample instead of passing it
// on.
TEST(WindowedDispatcher, InjectedPartitionFunctionIsAskedAndChecked) {
  std::vector<DpRequest> asked;
  auto recording = [&](const DpRequest& request) {
    asked.push_back(request);
    return partition("lpt", request);
  };
  Result<WindowedDispatcher> made =
      WindowedDispatcher::create({3, 2, 5, {CostKind::kTokens}, "lpt"}, recording);
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(made->push(i, 10 + i).is_ok());
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].num_ranks, 6);
  EXPECT_TRUE(asked[0].equal_count);
  EXPECT_EQ(asked[0].lengths.size(), 10u);
  auto batch = made->next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->strategy, "lpt");

  auto repeating = [](const DpRequest& request) -> Result<DpPartition> {
    DpPartition part;
    part.ranks.assign(static_cast<std::size_t>(request.num_ranks), {});
    part.ranks[0] = {0, 0};
    return part;
  };
  Result<WindowedDispatcher> lied_to =
      WindowedDispatcher::create({2, 1, 2, {CostKind::kTokens}, "x"}, repeating);
  ASSERT_TRUE(lied_to.is_ok());
  ASSERT_TRUE(lied_to->push(7, 3).is_ok());
  const Status refused = lied_to->push(8, 4);
  EXPECT_EQ(refused.code(), StatusCode::kInternal);
  EXPECT_NE(refused.message().find("more than once"), std::string::npos) << refused.message();
  EXPECT_FALSE(lied_to->next().has_value());

  Result<WindowedDispatcher> none = WindowedDispatcher::create({2, 1, 2, {}, "x"}, nullptr);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no partition function"), std::string::npos);
}

// --- LengthBucketedSampler --------------------------------------------------

std::vector<std::int64_t> random_lengths(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> lengths(n);
  for (auto& l : lengths) l = heavy_tailed_length(rng);
  return lengths;
}

TEST(LengthBucketedSampler, EveryIndexOncePerEpochAndBatchesStayInABucket) {
  const std::vector<std::int64_t> lengths = random_lengths(5003, 1);
  const SamplerOptions options{7, 32, 1234};
  Result<LengthBucketedSampler> made = LengthBucketedSampler::create(lengths, options);
  ASSERT_TRUE(made.is_ok());
  const LengthBucketedSampler& sampler = *made;

  // Buckets follow length order: a longer sample is never in a lower bucket.
  std::vector<std::size_t> by_length(lengths.size());
  for (std::size_t i = 0; i < by_length.size(); ++i) by_length[i] = i;
  std::sort(by_length.begin(), by_length.end(),
            [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });
  std::vector<std::size_t> bucket_size(7, 0);
  for (std::size_t i = 0; i < by_length.size(); ++i) {
    const std::int32_t bucket = sampler.bucket_of(static_cast<std::int64_t>(by_length[i]));
    ASSERT_GE(bucket, 0);
    ASSERT_LT(bucket, 7);
    ++bucket_size[static_cast<std::size_t>(bucket)];
    if (i > 0) {
      EXPECT_LE(sampler.bucket_of(static_cast<std::int64_t>(by_length[i - 1])), bucket);
    }
  }
  // Quantile buckets of distinct-ish lengths: none wildly off its share.
  for (std::size_t size : bucket_size) EXPECT_GT(size, 5003u / 7 / 2);

  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    const auto batches = sampler.epoch_batches(epoch);
    std::vector<int> seen(lengths.size(), 0);
    int short_batches = 0;
    for (const auto& batch : batches) {
      ASSERT_FALSE(batch.empty());
      ASSERT_LE(batch.size(), 32u);
      if (batch.size() < 32u) ++short_batches;
      for (std::int64_t index : batch) {
        ++seen[static_cast<std::size_t>(index)];
        EXPECT_EQ(sampler.bucket_of(index), sampler.bucket_of(batch.front()));
      }
    }
    EXPECT_LE(short_batches, 7);  // only a bucket's last batch may be short
    for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "index " << i;

    std::vector<std::int64_t> flat;
    for (const auto& batch : batches) flat.insert(flat.end(), batch.begin(), batch.end());
    EXPECT_EQ(sampler.epoch(epoch), flat);
  }
}

TEST(LengthBucketedSampler, DeterministicBySeedAndEpoch) {
  const std::vector<std::int64_t> lengths = random_lengths(1000, 2);
  Result<LengthBucketedSampler> a = LengthBucketedSampler::create(lengths, {4, 16, 77});
  Result<LengthBucketedSampler> b = LengthBucketedSampler::create(lengths, {4, 16, 77});
  Result<LengthBucketedSampler> c = LengthBucketedSampler::create(lengths, {4, 16, 78});
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_EQ(a->epoch(0), b->epoch(0));
  EXPECT_EQ(a->epoch(5), b->epoch(5));
  EXPECT_NE(a->epoch(0), a->epoch(1));
  EXPECT_NE(a->epoch(0), c->epoch(0));
  // Shuffled, not the identity order.
  std::vector<std::int64_t> identity(1000);
  for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<std::int64_t>(i);
  EXPECT_NE(a->epoch(0), identity);
}

TEST(LengthBucketedSampler, PinnedOrder) {
  // Pins the exact order for one small case. mt19937_64 and the shuffle are
  // fully specified, so this must hold with every standard library; if it
  // changes, resumed training runs would see different data.
  Result<LengthBucketedSampler> made =
      LengthBucketedSampler::create({5, 1, 9, 3, 7, 2, 8, 4, 6, 10}, {2, 3, 42});
  ASSERT_TRUE(made.is_ok());
  const std::vector<std::vector<std::int64_t>> expected = {{8, 4, 2}, {7, 3, 0}, {5, 1}, {6, 9}};
  EXPECT_EQ(made->epoch_batches(3), expected);
}

TEST(LengthBucketedSampler, EqualLengthsShareABucket) {
  Result<LengthBucketedSampler> made =
      LengthBucketedSampler::create({5, 5, 5, 5, 5, 5, 9, 1}, {4, 2, 0});
  ASSERT_TRUE(made.is_ok());
  for (std::int64_t i = 1; i < 6; ++i) EXPECT_EQ(made->bucket_of(i), made->bucket_of(0));
  EXPECT_LT(made->bucket_of(7), made->bucket_of(0));
}

TEST(LengthBucketedSampler, BadOptions) {
  Result<LengthBucketedSampler> no_buckets = LengthBucketedSampler::create({1, 2}, {0, 2, 0});
  ASSERT_FALSE(no_buckets.is_ok());
  EXPECT_NE(no_buckets.status().message().find("num_buckets is 0"), std::string::npos);
  Result<LengthBucketedSampler> no_batch = LengthBucketedSampler::create({1, 2}, {1, -1, 0});
  ASSERT_FALSE(no_batch.is_ok());
  EXPECT_NE(no_batch.status().message().find("batch_size is -1"), std::string::npos);
  Result<LengthBucketedSampler> bad_length = LengthBucketedSampler::create({1, 0, 2}, {1, 1, 0});
  ASSERT_FALSE(bad_length.is_ok());
  EXPECT_EQ(bad_length.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_length.status().message().find("lengths[1] is 0"), std::string::npos);
}

}  // namespace
}  // namespace fulcrum::dp
