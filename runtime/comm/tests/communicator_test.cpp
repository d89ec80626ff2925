// The Communicator contract on the size-1 and in-process thread backends.
// The Gloo backend runs the same checks across processes (gloo_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/local_communicator.h"
#include "comm/thread_communicator.h"

namespace fulcrum::comm {
namespace {

using namespace std::chrono_literals;

// Runs fn(rank, comm) on one thread per member; returns each rank's error
// text ("" when it returned normally).
std::vector<std::string> run_ranks(const std::vector<std::shared_ptr<Communicator>>& group,
                                   const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::string> errors(group.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(static_cast<int>(r), *group[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(Timeouts, FormatForHumans) {
  EXPECT_EQ(format_timeout(30s), "30 s");
  EXPECT_EQ(format_timeout(1500ms), "1.5 s");
  EXPECT_EQ(format_timeout(250ms), "250 ms");
  EXPECT_EQ(timeout_message("all_gather", "cp[dp=0]", 30s),
            "all_gather on group cp[dp=0] timed out after 30 s");
}

TEST(LocalCommunicator, IsTheIdentity) {
  LocalCommunicator c("cp[dp=0]");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.name(), "cp[dp=0]");
  const at::Tensor x = at::arange(6, at::kDouble).view({3, 2});
  const auto gathered = c.all_gather(x);
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_TRUE(gathered[0].equal(x));
  EXPECT_FALSE(gathered[0].is_same(x));
  EXPECT_TRUE(c.all_gather_cat(x).equal(x));
  at::Tensor y = x.clone();
  c.all_reduce_sum(y);
  EXPECT_TRUE(y.equal(x));
  EXPECT_TRUE(c.reduce_scatter_sum(x).equal(x));
  c.broadcast(y, 0);
  c.barrier();
  EXPECT_EQ(c.all_gather_bytes({1, 2, 3}), (std::vector<std::vector<std::uint8_t>>{{1, 2, 3}}));
  EXPECT_THROW(c.broadcast(y, 1), CommError);
  EXPECT_THROW(c.all_gather(at::Tensor()), CommError);
}

TEST(LocalCommunicator, ProcessGroupsOfOneProcess) {
  const ProcessGroups g = local_process_groups();
  EXPECT_EQ(g.world->size(), 1);
  EXPECT_EQ(g.cp->name(), "cp[dp=0]");
  EXPECT_EQ(g.dp->name(), "dp[cp=0]");
}

constexpr int kRanks = 3;

TEST(ThreadGroup, CollectivesMatchTheirDefinitions) {
  const auto group = make_thread_group(kRanks, "cp[dp=0]", 10s);
  const auto errors = run_ranks(group, [](int rank, Communicator& c) {
    ASSERT_EQ(c.rank(), rank);
    ASSERT_EQ(c.size(), kRanks);
    // all_gather: rank r contributes r + [0, 1, 2, 3].
    const at::Tensor mine = at::arange(4, at::kDouble).view({2, 2}) + rank;
    const auto parts = c.all_gather(mine);
    ASSERT_EQ(parts.size(), static_cast<std::size_t>(kRanks));
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_TRUE(parts[r].equal(at::arange(4, at::kDouble).view({2, 2}) + r));
    }
    EXPECT_EQ(c.all_gather_cat(mine).sizes(), (std::vector<std::int64_t>{6, 2}));
    // all_reduce_sum over tensors of different dtypes and shapes, each on its own.
    std::vector<at::Tensor> tensors{at::full({3}, rank + 1.0, at::kDouble),
                                    at::full({2, 2}, rank, at::kLong),
                                    at::full({1}, 2.0f * rank, at::kFloat)};
    c.all_reduce_sum(tensors);
    EXPECT_TRUE(tensors[0].equal(at::full({3}, 6.0, at::kDouble)));
    EXPECT_TRUE(tensors[1].equal(at::full({2, 2}, 3, at::kLong)));
    EXPECT_TRUE(tensors[2].equal(at::full({1}, 6.0f, at::kFloat)));
    // reduce_scatter_sum: row i of every rank holds rank * 10 + i.
    const at::Tensor rows = at::arange(kRanks * 2, at::kDouble).view({kRanks * 2, 1}) + 10.0 * rank;
    const at::Tensor chunk = c.reduce_scatter_sum(rows);
    const at::Tensor expected =
        at::arange(rank * 2, rank * 2 + 2, at::kDouble).view({2, 1}) * kRanks + 10.0 * (0 + 1 + 2);
    EXPECT_TRUE(chunk.equal(expected)) << chunk << expected;
    // broadcast from rank 2.
    at::Tensor b = at::full({2}, static_cast<double>(rank), at::kDouble);
    c.broadcast(b, 2);
    EXPECT_TRUE(b.equal(at::full({2}, 2.0, at::kDouble)));
    c.barrier();
    // Bytes of different lengths.
    const auto bytes = c.all_gather_bytes(std::vector<std::uint8_t>(rank, 7));
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(bytes[r], std::vector<std::uint8_t>(r, 7));
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(ThreadGroup, AMissingRankTimesOutWithTheOperationAndGroup) {
  const auto group = make_thread_group(2, "cp[dp=0]", 10s);
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_ranks(group, [](int rank, Communicator& c) {
    if (rank == 0) c.all_gather(at::ones({2}), 200ms);
    // Rank 1 skips the collective.
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_NE(errors[0].find("all_gather on group cp[dp=0] timed out after 200 ms"),
            std::string::npos)
      << errors[0];
  EXPECT_EQ(errors[1], "");
  // The group is broken: later calls fail at once instead of waiting.
  const auto later = run_ranks(group, [](int, Communicator& c) { c.barrier(5s); });
  for (const auto& e : later) EXPECT_NE(e.find("broken"), std::string::npos) << e;
}

TEST(ThreadGroup, PointToPointDeliversEachMessageToItsReceiverInAnyListingOrder) {
  // Every ordered pair (a, b) of 5 ranks carries a message of its own shape
  // and contents; each rank lists its peers in a different rotation.
  const int n = 5;
  const auto group = make_thread_group(n, "world", 10s);
  auto message = [](int from, int to) {
    return at::arange(2 * from + to + 1, at::kDouble) * 10 + from * n + to;
  };
  for (int round = 0; round < 3; ++round) {
    const auto errors = run_ranks(group, [&](int rank, Communicator& c) {
      std::vector<PeerMessage> sends, receives;
      for (int i = 1; i < n; ++i) {
        const int to = (rank + i * (rank + round + 1)) % n;
        const int from = (rank + n - i) % n;
        if (to != rank) sends.push_back({to, message(rank, to)});
        receives.push_back({from, at::zeros({2 * from + rank + 1}, at::kDouble)});
      }
      // The rotation above may repeat a peer for some ranks: keep one each.
      std::vector<PeerMessage> unique_sends;
      std::vector<bool> seen(n, false);
      for (const auto& s : sends) {
        if (!seen[s.peer]) unique_sends.push_back(s);
        seen[s.peer] = true;
      }
      for (int to = 0; to < n; ++to) {
        if (to != rank && !seen[to]) unique_sends.push_back({to, message(rank, to)});
      }
      c.exchange(unique_sends, receives);
      for (const auto& r : receives) {
        if (!at::equal(r.tensor, message(r.peer, rank))) {
          throw std::runtime_error("wrong message from " + std::to_string(r.peer));
        }
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, "") << "round " << round;
  }
}

TEST(ThreadGroup, OnlyTheNamedPeersTakePart) {
  // Ranks 0 and 2 exchange twice, in order, while rank 1 does nothing.
  const auto group = make_thread_group(3, "world", 10s);
  const auto errors = run_ranks(group, [](int rank, Communicator& c) {
    if (rank == 1) return;
    const int peer = 2 - rank;
    for (int i = 0; i < 2; ++i) {
      at::Tensor got = at::zeros({2}, at::kLong);
      c.exchange({{peer, at::full({2}, rank * 10 + i, at::kLong)}}, {{peer, got}});
      if (!at::equal(got, at::full({2}, peer * 10 + i, at::kLong))) {
        throw std::runtime_error("message " + std::to_string(i) + " out of order");
      }
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(ThreadGroup, AMissingSendTimesOutNamingThePeer) {
  const auto group = make_thread_group(3, "world", 10s);
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_ranks(group, [](int rank, Communicator& c) {
    if (rank != 0) return;
    at::Tensor a = at::zeros({1});
    at::Tensor b = at::zeros({1});
    c.exchange({}, {{1, a}, {2, b}}, 200ms);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_NE(errors[0].find("exchange on group world timed out after 200 ms (rank 0 waiting to "
                           "receive from ranks 1, 2)"),
            std::string::npos)
      << errors[0];
}

TEST(ThreadGroup, AMismatchedReceiveShapeIsReported) {
  const auto group = make_thread_group(2, "world", 10s);
  const auto errors = run_ranks(group, [](int rank, Communicator& c) {
    if (rank == 0) {
      c.send(at::ones({3}), 1);
    } else {
      at::Tensor t = at::zeros({4});
      c.recv(t, 0);
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("rank 0 sent [3] Float, rank 1 expected [4] Float"), std::string::npos)
      << errors[1];
}

TEST(Communicator, ExchangeChecksItsPeers) {
  LocalCommunicator local("world");
  EXPECT_NO_THROW(local.exchange({}, {}));
  auto message = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const CommError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { local.send(at::ones({1}), 0); }),
            "exchange on group world: send peer 0 is this rank; keep local data local");
  EXPECT_EQ(message([&] { local.send(at::ones({1}), 1); }),
            "exchange on group world: send peer 1 is outside [0, 1)");
  const auto group = make_thread_group(3, "world", 10s);
  EXPECT_EQ(message([&] {
              group[0]->exchange({{1, at::ones({1})}, {1, at::ones({1})}}, {});
            }),
            "exchange on group world: two sends with rank 1 in one call; concatenate them into "
            "one tensor");
  at::Tensor strided = at::zeros({4, 2}).t();
  EXPECT_EQ(message([&] { group[0]->recv(strided, 2); }),
            "exchange on group world: the receive from rank 2 needs a contiguous tensor to write "
            "into");
  EXPECT_EQ(message([&] { group[0]->send(at::Tensor(), 2); }),
            "exchange on group world: the send to rank 2 has an undefined tensor");
}

TEST(ThreadGroup, MismatchedCollectivesAreReported) {
  const auto group = make_thread_group(2, "dp[cp=0]", 5s);
  const auto errors = run_ranks(group, [](int rank, Communicator& c) {
    at::Tensor t = at::ones({2});
    if (rank == 0) {
      c.all_reduce_sum(t);
    } else {
      c.broadcast(t, 0);
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("every rank must call the same collectives"), std::string::npos) << e;
  }
}

TEST(ThreadGroup, MismatchedShapesAreReported) {
  const auto group = make_thread_group(2, "world", 5s);
  const auto errors =
      run_ranks(group, [](int rank, Communicator& c) { c.all_gather(at::ones({rank + 1})); });
  for (const auto& e : errors) EXPECT_NE(e.find("has shape"), std::string::npos) << e;
}

TEST(Communicator, ReduceScatterNeedsADivisibleFirstDimension) {
  const auto group = make_thread_group(2, "world", 5s);
  try {
    group[0]->reduce_scatter_sum(at::ones({3}));
    FAIL() << "expected a CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the group size 2"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fulcrum::comm
