// The plugin loader under concurrent use, for ThreadSanitizer.
//
// The loader keeps one process-wide cache of dlopen handles behind a mutex,
// and each loaded balancer serialises calls into its plugin instance with its
// own mutex (an instance serves one thread at a time, c_api.h). Ordinary
// tests call both from one thread; these call them from several at once, so
// that the TSan build (.ci/run) sees every access pattern a multi-threaded
// host makes: first load racing first load, the last balancer of a library
// being dropped (dlclose) while another thread loads it again, and plans
// issued on one shared balancer from many threads. Built and run in every
// test build, where it also checks the answers.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fulcrum/core/plan_check.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/dp_types.h"
#include "fulcrum/host/plugin_loader.h"

#ifndef FULCRUM_PLUGIN_PATH
#error "FULCRUM_PLUGIN_PATH must name the built libfulcrum_balancer.so"
#endif

namespace fulcrum::host {
namespace {

constexpr int kThreads = 6;
constexpr int kRounds = 12;

// The build directory's mode follows the umask; the permission check is
// tested elsewhere. Logging goes through a counter: log_to_stderr from many
// threads would interleave, and the count shows the callback ran.
LoaderOptions quiet_options(std::atomic<int>& log_calls) {
  LoaderOptions o;
  o.check_permissions = false;
  o.log = [&log_calls](LogLevel, const std::string&) { log_calls.fetch_add(1); };
  return o;
}

CpWorkload workload_for(int seed) {
  CpWorkload w;
  w.cp_size = 2 + seed % 4;
  w.block_size = 16;
  w.tokens = 512 + 64 * (seed % 7);
  w.doc_lengths = {w.tokens / 4, w.tokens - w.tokens / 4};
  w.mask = seed % 2 == 0 ? MaskSpec::causal() : MaskSpec::sliding(40);
  return w;
}

// Runs body(thread) on kThreads threads at once and joins them.
template <typename Body>
void on_threads(Body body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Start together, so first loads really race.
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      body(t);
    });
  }
  for (auto& thread : threads) thread.join();
}

TEST(LoaderThreads, ConcurrentLoadPlanAndUnload) {
  std::atomic<int> log_calls{0};
  std::atomic<int> failures{0};
  on_threads([&](int t) {
    for (int round = 0; round < kRounds; ++round) {
      // Each round loads afresh and drops the balancer at its end: with
      // several threads some rounds hit the cache, some drop the last
      // reference (dlclose) while another thread reopens the file.
      auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, quiet_options(log_calls));
      if (!loaded) {
        ADD_FAILURE() << loaded.status().message();
        failures.fetch_add(1);
        return;
      }
      const CpWorkload w = workload_for(t * kRounds + round);
      auto plan = (*loaded)->plan_cp(round % 2 == 0 ? "balanced" : "auto", w);
      if (!plan || !validate_plan(w, *plan).is_ok()) failures.fetch_add(1);

      DpRequest request;
      request.num_ranks = 3;
      for (int i = 0; i < 20; ++i) request.lengths.push_back(1 + (i * 37 + t) % 200);
      auto partition = (*loaded)->partition_dp("auto", request);
      if (!partition || partition->ranks.size() != 3) failures.fetch_add(1);
    }
  });
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(log_calls.load(), 0);
}

TEST(LoaderThreads, OneBalancerSharedByManyThreads) {
  std::atomic<int> log_calls{0};
  auto loaded = load_plugin(FULCRUM_PLUGIN_PATH, quiet_options(log_calls));
  ASSERT_TRUE(loaded) << loaded.status().message();
  const std::shared_ptr<LoadBalancer> balancer = *loaded;
  std::atomic<int> failures{0};
  on_threads([&](int t) {
    for (int round = 0; round < kRounds; ++round) {
      const CpWorkload w = workload_for(t + round);
      // An error result too: its last_error text is per instance, written
      // and read under the balancer's mutex.
      auto refused = balancer->plan_cp("no_such_strategy", w);
      if (refused || refused.status().message().empty()) failures.fetch_add(1);
      auto plan = balancer->plan_cp("per_document", w);
      if (!plan || !validate_plan(w, *plan).is_ok()) failures.fetch_add(1);
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(LoaderThreads, BuiltinBalancerFromManyThreads) {
  std::atomic<int> failures{0};
  on_threads([&](int t) {
    for (int round = 0; round < kRounds; ++round) {
      const CpWorkload w = workload_for(t + round);
      auto plan = builtin_balancer()->plan_cp("contiguous", w);
      if (!plan || !validate_plan(w, *plan).is_ok()) failures.fetch_add(1);
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace fulcrum::host
