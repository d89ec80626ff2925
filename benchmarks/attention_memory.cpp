// Per-rank activation memory of CP attention against P (issue 3, Measures:
// excluding the gathered K and V, it falls as 1/P).
//
// Measured, not derived from shapes: every CPU allocation of LibTorch goes
// through a counting allocator installed before the first tensor, so the
// figures are the bytes the implementation really holds. For one fixed row
// (causal, `auto` plan) and P in {1, 2, 4, 8}, CP rank 0 runs the trainer's
// path, CpAttention::apply (autograd) then backward, with a replay group
// standing in for the other ranks: its all-gather returns the other ranks'
// K/V shards, precomputed before the measurement starts, so only this
// rank's memory moves while it is measured.
//
//   retained   bytes still allocated after the forward, beyond the inputs:
//              what the autograd graph keeps for backward (out, LSE, the
//              gathered K/V buffer). Cross-checked against the tensors that
//              CpAttention::forward returns, the ones cp_attention.cpp
//              saves ({q, out, lse, k_global, v_global}).
//   activation the attention's per-rank activations excluding gathered K/V:
//              the saved Q shard (an input here, so added by its size) plus
//              retained minus the gathered K/V buffer.
//   peaks      the transient high-water marks of forward and backward above
//              the inputs; they hold full-row (N-sized) buffers: the
//              all-gather result, K/V in heads-first layout, and in backward
//              the full-row dK/dV before the reduce-scatter.
//   metadata   the CpAttention object's index arrays (the replicated plan,
//              the restore index, the tile schedule): plain integers,
//              per row rather than per layer activation.
//
//   build/bench-rt/bin/fulcrum_bench_attention_memory [--tokens N] [--heads H]
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "attention/cp_attention.h"
#include "attention/sharding.h"
#include "comm/communicator.h"
#include "fulcrum/cp_types.h"
#include "runtime_bench_util.h"
#include "strategies/cp_strategies.h"

namespace {

using fulcrum::CpWorkload;
using fulcrum::ShardPlan;

constexpr std::int64_t kBlock = 128;
constexpr std::int64_t kHeadDim = 64;
constexpr int kRank = 0;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "fulcrum_bench_attention_memory: %s\n", message.c_str());
  std::exit(1);
}

// Wraps LibTorch's default CPU allocator and counts live and peak bytes.
// Each allocation carries its size in the DataPtr's context, so frees are
// counted exactly, whenever and wherever the tensor dies.
//
// LibTorch 1.13's Allocator::allocate is const and it has no copy_data;
// 2.x's allocate is not const and its copy_data is pure virtual. Both
// allocates and copy_data are defined, none marked `override`, so that the
// one each version declares is overridden and the rest are plain members.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t bytes) { return counted(bytes); }
  c10::DataPtr allocate(size_t bytes) const { return counted(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count > 0) std::memcpy(dest, src, count);
  }

  std::int64_t live() const { return live_.load(); }
  std::int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  c10::DataPtr counted(size_t bytes) const {
    c10::DataPtr inner = base_->allocate(bytes);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* block = new Block{std::move(inner), bytes, this};
    const std::int64_t now = live_ += static_cast<std::int64_t>(bytes);
    std::int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    return {data, block, &release, device};
  }

  struct Block {
    c10::DataPtr inner;
    size_t bytes;
    const CountingAllocator* owner;
  };
  static void release(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    block->owner->live_ -= static_cast<std::int64_t>(block->bytes);
    delete block;  // the inner DataPtr frees through the base allocator
  }

  c10::Allocator* base_;
  mutable std::atomic<std::int64_t> live_{0};
  mutable std::atomic<std::int64_t> peak_{0};
};

CountingAllocator* install_counter() {
  static CountingAllocator counter(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&counter, /*priority=*/255);
  return &counter;
}

// Rank `rank` of a P-rank group in one process: the all-gather answers with
// the other ranks' shards, prepared beforehand; the reduce-scatter returns
// this rank's own contribution (the same size as the true sum).
class ReplayGroup final : public fulcrum::comm::Communicator {
 public:
  ReplayGroup(int rank, std::vector<at::Tensor> shards)
      : Communicator("replay", std::chrono::seconds(1)), rank_(rank), shards_(std::move(shards)) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(shards_.size()); }
  const char* backend() const override { return "replay"; }

 protected:
  std::vector<at::Tensor> do_all_gather(const at::Tensor& input, fulcrum::comm::Timeout) override {
    std::vector<at::Tensor> out = shards_;
    out[static_cast<std::size_t>(rank_)] = input;
    return out;
  }
  at::Tensor do_reduce_scatter_sum(const at::Tensor& input, fulcrum::comm::Timeout) override {
    const std::int64_t rows = input.size(0) / size();
    return input.narrow(0, rank_ * rows, rows).clone();
  }
  void do_all_reduce_sum(std::vector<at::Tensor>&, fulcrum::comm::Timeout) override {
    fail("all_reduce_sum", "the replay group only gathers and reduce-scatters");
  }
  void do_broadcast(at::Tensor&, int, fulcrum::comm::Timeout) override {
    fail("broadcast", "the replay group only gathers and reduce-scatters");
  }
  void do_barrier(fulcrum::comm::Timeout) override { fail("barrier", "not supported"); }

 private:
  int rank_;
  std::vector<at::Tensor> shards_;  // [S, H, 2D] per rank: K and V side by side
};

template <typename T>
std::int64_t vector_bytes(const std::vector<T>& v) {
  return static_cast<std::int64_t>(v.capacity() * sizeof(T));
}

// Bytes of the distinct storages behind `tensors` (views share one).
std::int64_t storage_bytes(const std::vector<at::Tensor>& tensors) {
  std::set<const void*> seen;
  std::int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) {
      bytes += static_cast<std::int64_t>(t.storage().nbytes());
    }
  }
  return bytes;
}

struct Row {
  int p = 1;
  std::int64_t shard_len = 0;
  std::string strategy;
  std::int64_t q_bytes = 0;         // the saved Q shard
  std::int64_t retained = 0;        // allocator: after forward, beyond the inputs
  std::int64_t forward_saved = 0;   // storages of CpForward {out, lse, k_global, v_global}
  std::int64_t gathered_kv = 0;     // the gathered K/V buffer
  std::int64_t out_lse = 0;         // out + lse
  std::int64_t peak_forward = 0;    // above the inputs
  std::int64_t peak_backward = 0;   // above the inputs and the retained graph
  std::int64_t after_backward = 0;  // beyond inputs: the gradients of q, k, v
  std::int64_t metadata = 0;
  std::int64_t activation() const { return q_bytes + retained - gathered_kv; }
};

Row measure(CountingAllocator& counter, std::int64_t tokens, std::int64_t heads, int p) {
  CpWorkload w;
  w.tokens = tokens;
  w.block_size = kBlock;
  w.cp_size = p;
  const ShardPlan plan = [&] {
    fulcrum::Result<ShardPlan> r = fulcrum::cp::plan("auto", w);
    if (!r) die("auto plan at P = " + std::to_string(p) + ": " + r.status().message());
    return std::move(r).value();
  }();

  at::manual_seed(7);
  const at::Tensor q_full = at::randn({tokens, heads, kHeadDim}, at::kFloat);
  const at::Tensor k_full = at::randn({tokens, heads, kHeadDim}, at::kFloat);
  const at::Tensor v_full = at::randn({tokens, heads, kHeadDim}, at::kFloat);
  std::vector<at::Tensor> kv_shards;
  for (int r = 0; r < p; ++r) {
    kv_shards.push_back(at::cat(
        {fulcrum::attention::shard(k_full, plan, r), fulcrum::attention::shard(v_full, plan, r)},
        -1));
  }
  const at::Tensor q = fulcrum::attention::shard(q_full, plan, kRank).requires_grad_(true);
  const at::Tensor k = fulcrum::attention::shard(k_full, plan, kRank).requires_grad_(true);
  const at::Tensor v = fulcrum::attention::shard(v_full, plan, kRank).requires_grad_(true);
  const at::Tensor dout = at::randn_like(q);
  auto group = std::make_shared<ReplayGroup>(kRank, kv_shards);

  Row row;
  row.p = p;
  row.shard_len = plan.shard_len;
  row.strategy = plan.strategy_used;
  row.q_bytes = static_cast<std::int64_t>(q.nbytes());

  const std::int64_t before_create = counter.live();
  auto attention = [&] {
    auto r = fulcrum::attention::CpAttention::create(w, plan, group);
    if (!r) die("cp attention: " + r.status().message());
    return std::move(r).value();
  }();
  const fulcrum::attention::TileSchedule& s = attention->schedule();
  row.metadata = (counter.live() - before_create) + vector_bytes(attention->plan().positions) +
                 vector_bytes(s.position) + vector_bytes(s.lo) + vector_bytes(s.hi) +
                 vector_bytes(s.run_offsets) + vector_bytes(s.runs);

  // What the forward hands to backward, by the non-autograd entry point
  // that the autograd function wraps.
  {
    c10::NoGradGuard no_grad;
    const fulcrum::attention::CpForward f = attention->forward(q, k, v);
    row.forward_saved = storage_bytes({f.out, f.lse, f.k_global, f.v_global});
    row.gathered_kv = storage_bytes({f.k_global, f.v_global});
    row.out_lse = storage_bytes({f.out, f.lse});
  }

  // The trainer's path, measured by the allocator.
  const std::int64_t inputs = counter.live();
  counter.reset_peak();
  at::Tensor out = attention->apply(q, k, v);
  row.retained = counter.live() - inputs;
  row.peak_forward = counter.peak() - inputs;
  counter.reset_peak();
  out.backward(dout);
  row.peak_backward = counter.peak() - inputs - row.retained;
  out = at::Tensor();  // drops the graph and what it saved
  row.after_backward = counter.live() - inputs;
  return row;
}

std::string mib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CountingAllocator* counter = install_counter();
  std::int64_t tokens = 16384;
  std::int64_t heads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) die(a + " needs a value; usage: [--tokens N] [--heads H]");
    if (a == "--tokens") {
      tokens = std::atoll(argv[++i]);
    } else if (a == "--heads") {
      heads = std::atoll(argv[++i]);
    } else {
      die("unknown argument " + a);
    }
  }
  std::printf("# fulcrum_bench_attention_memory: per-rank CP attention memory vs P\n\n");
  std::printf("machine: %s\n", fulcrum::bench::machine_line().c_str());
  std::printf("%s\n", fulcrum::bench::use_one_core().c_str());
  std::printf(
      "row: causal, N = %lld, H = %lld, head_dim = %lld, float32, B = %lld, plan auto, "
      "CP rank %d; bytes counted by a wrapper around LibTorch's CPU allocator\n\n",
      static_cast<long long>(tokens), static_cast<long long>(heads),
      static_cast<long long>(kHeadDim), static_cast<long long>(kBlock), kRank);

  std::vector<Row> rows;
  for (int p : {1, 2, 4, 8}) rows.push_back(measure(*counter, tokens, heads, p));

  std::printf(
      "| P | S | plan | Q shard | out + LSE | activation excl. gathered K/V | x P | "
      "gathered K/V | retained after forward (allocator) | forward's tensors (storages) | "
      "peak forward | peak backward | after backward (grads) | index metadata |\n");
  std::printf(
      "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
      "---: | ---: |\n");
  for (const Row& r : rows) {
    std::printf("| %d | %lld | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.p,
                static_cast<long long>(r.shard_len), r.strategy.c_str(), mib(r.q_bytes).c_str(),
                mib(r.out_lse).c_str(), mib(r.activation()).c_str(),
                mib(r.activation() * r.p).c_str(), mib(r.gathered_kv).c_str(),
                mib(r.retained).c_str(), mib(r.forward_saved).c_str(), mib(r.peak_forward).c_str(),
                mib(r.peak_backward).c_str(), mib(r.after_backward).c_str(),
                mib(r.metadata).c_str());
  }
  std::printf("\n(MiB; activation = Q shard + retained - gathered K/V)\n");

  // The goal: activation x P constant (within 1%: padding may add a row).
  bool matches = true;
  bool falls = true;
  for (const Row& r : rows) {
    matches = matches && r.retained == r.forward_saved;
    const double ratio =
        static_cast<double>(r.activation() * r.p) / static_cast<double>(rows.front().activation());
    falls = falls && ratio > 0.99 && ratio < 1.01;
  }
  std::printf("allocator delta after forward equals the forward's saved storages: %s\n",
              matches ? "yes (nothing else is kept)" : "NO: something else is retained");
  std::printf("goal (activation excl. gathered K/V falls as 1/P, x P within 1%%): %s\n",
              falls ? "MET" : "MISSED");
  return 0;
}
