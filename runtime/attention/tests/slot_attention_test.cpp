// A slot's attention over point-to-point exchange equals dense
// single-process attention, forward and backward, for slots of 1 to 5
// members drawn from a larger world, every mask, packed documents and plans
// with and without padding; and the bytes it moves are exactly those the
// schedule cost model predicts (fulcrum::evaluate_schedule), slot by slot,
// when whole schedules of the `fixed`, `megatron_dcp` and `hybrid`
// schedulers run wave by wave on a world of threads.
//
// Which keys a member needs is recounted here from the pair-by-pair mask of
// reference.h, sharing no code with kv_exchange.cpp or the tile schedule.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attention/kv_exchange.h"
#include "attention/sharding.h"
#include "attention/slot_attention.h"
#include "comm/local_communicator.h"
#include "comm/thread_communicator.h"
#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/work_model.h"
#include "reference.h"
#include "slot_request.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum::attention {
namespace {

using namespace testing;
using namespace std::chrono_literals;

CpWorkload make_row(std::vector<std::int64_t> docs, MaskSpec mask, std::int64_t b, std::int32_t g) {
  const std::int64_t n = std::accumulate(docs.begin(), docs.end(), std::int64_t{0});
  return make_workload(n, std::move(docs), std::move(mask), b, g);
}

std::vector<std::pair<std::string, MaskSpec>> masks(std::int64_t n, std::int64_t b) {
  MaskSpec sparse;
  sparse.kind = MaskKind::kBlockSparse;
  sparse.block_sparse = random_block_sparse(n, b, 5);
  return {{"causal", MaskSpec::causal()},
          {"full", MaskSpec::full()},
          {"sliding:6", MaskSpec::sliding(6)},
          {"prefix:9", MaskSpec::prefix(9)},
          {"block_sparse", sparse}};
}

std::vector<ShardPlan> plans(std::int64_t n, std::int32_t g, std::int64_t b) {
  return plan_shapes(n, g, b, 2, 40 + g);
}

// ------------------------------------------------------------- key blocks

// Member m's touched key blocks, from the mask pair by pair.
std::vector<bool> brute_touched(const CpWorkload& w, const ShardPlan& plan, std::int32_t m,
                                const at::Tensor& allowed) {
  auto a = allowed.accessor<bool, 2>();
  const std::int64_t blocks = (w.tokens + w.block_size - 1) / w.block_size;
  std::vector<bool> touched(static_cast<std::size_t>(blocks), false);
  for (std::int64_t row = 0; row < plan.shard_len; ++row) {
    const std::int64_t q = plan.rank_begin(m)[row];
    if (q == kPadPosition) continue;
    for (std::int64_t k = 0; k < w.tokens; ++k) {
      if (a[q][k]) touched[k / w.block_size] = true;
    }
  }
  return touched;
}

TEST(KvExchange, EachMemberReceivesExactlyThePeersTokensInTheBlocksItsQueriesSee) {
  const std::int64_t b = 8;
  for (std::int32_t g : {1, 2, 3, 5}) {
    for (const auto& docs :
         {std::vector<std::int64_t>{90}, std::vector<std::int64_t>{31, 7, 40, 2, 10}}) {
      const std::int64_t n = 90;
      for (const auto& [mask_name, mask] : masks(n, b)) {
        const CpWorkload w = make_row(docs, mask, b, g);
        const at::Tensor allowed = brute_mask(w);
        for (const ShardPlan& plan : plans(n, g, b)) {
          SCOPED_TRACE("g=" + std::to_string(g) + " docs=" + std::to_string(docs.size()) +
                       " mask=" + mask_name + " plan=" + plan.strategy_used);
          Result<KvExchangePlan> x = make_kv_exchange_plan(w, plan);
          ASSERT_TRUE(static_cast<bool>(x)) << x.status().message();
          // Expected transfers (from, to) -> sender rows, recounted.
          std::map<std::pair<int, int>, std::vector<std::int64_t>> expected;
          for (std::int32_t to = 0; to < g; ++to) {
            const std::vector<bool> touched = brute_touched(w, plan, to, allowed);
            for (std::int32_t from = 0; from < g; ++from) {
              if (from == to) continue;
              for (std::int64_t row = 0; row < plan.shard_len; ++row) {
                const std::int64_t pos = plan.rank_begin(from)[row];
                if (pos != kPadPosition && touched[pos / b]) expected[{from, to}].push_back(row);
              }
            }
          }
          std::map<std::pair<int, int>, std::vector<std::int64_t>> got;
          for (const KvTransfer& t : x->transfers) {
            EXPECT_FALSE(t.rows.empty());
            ASSERT_EQ(t.rows.size(), t.positions.size());
            for (std::size_t i = 0; i < t.rows.size(); ++i) {
              EXPECT_EQ(plan.rank_begin(t.from)[t.rows[i]], t.positions[i]);
            }
            got[{t.from, t.to}] = t.rows;
          }
          EXPECT_EQ(got, expected);
          if (g == 1) {
            EXPECT_TRUE(x->transfers.empty());
          }
        }
      }
    }
  }
}

TEST(KvExchange, TokensReceivedEqualTheScheduleCostModel) {
  // Whole schedules of every scheduler on long-tailed batches: for every
  // slot member, the tokens the exchange plan moves to it, times the K/V
  // bytes per token, are the model's bytes_received (and sent likewise).
  std::mt19937 rng(17);
  for (int batch = 0; batch < 6; ++batch) {
    ScheduleRequest request;
    request.world_size = batch % 2 == 0 ? 4 : 6;
    request.max_tokens_per_rank = 256;
    request.block_size = 16;
    request.mask = batch % 3 == 2 ? MaskSpec::sliding(40) : MaskSpec::causal();
    request.profile = builtin_cost_profile("cpu_gloo").value();
    request.profile.kv_bytes_per_token = 96;
    std::lognormal_distribution<double> length(3.5, 1.2);
    request.doc_lengths.push_back(600 + static_cast<std::int64_t>(rng() % 300));  // several ranks
    for (int i = 0; i < 20; ++i) {
      request.doc_lengths.push_back(std::clamp<std::int64_t>(std::llround(length(rng)), 1, 250));
    }
    for (const std::string& name : schedule_strategy_names()) {
      SCOPED_TRACE("batch " + std::to_string(batch) + " scheduler " + name);
      Result<Schedule> schedule = run_schedule_strategy(name, request);
      ASSERT_TRUE(static_cast<bool>(schedule)) << schedule.status().message();
      const ScheduleCost cost = evaluate_schedule(request, *schedule);
      std::int64_t moved = 0;
      for (std::size_t s = 0; s < schedule->slots.size(); ++s) {
        const ScheduleSlot& slot = schedule->slots[s];
        Result<KvExchangePlan> x = make_kv_exchange_plan(slot_workload(request, slot), slot.plan);
        ASSERT_TRUE(static_cast<bool>(x)) << x.status().message();
        for (std::int32_t m = 0; m < slot.plan.cp_size; ++m) {
          EXPECT_EQ(x->tokens_received(m) * 96, cost.slots[s].members[m].bytes_received)
              << "slot " << s << " member " << m;
          EXPECT_EQ(x->tokens_sent(m) * 96, cost.slots[s].members[m].bytes_sent)
              << "slot " << s << " member " << m;
          moved += x->tokens_received(m) * 96;
        }
      }
      EXPECT_EQ(moved, cost.bytes_moved);
    }
  }
}

// ------------------------------------------------------------- attention

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// One slot's members, each on its own thread of `world`: shard, apply,
// backward of a weighted sum; results unsharded. Ranks not in the slot do
// nothing.
struct SlotRun {
  SlotRun(CpWorkload r, ShardPlan p, std::vector<std::int32_t> members)
      : row(std::move(r)), plan(std::move(p)), ranks(std::move(members)) {}

  CpWorkload row;
  ShardPlan plan;
  std::vector<std::int32_t> ranks;
  SlotAttentionOptions options;
  at::Tensor q, k, v, weight;               // [N, H, D], global order
  std::vector<at::Tensor> out, dq, dk, dv;  // per member, local
  std::vector<SlotAttentionStats> forward, backward;

  void run_member(std::int32_t m, const std::shared_ptr<comm::Communicator>& world) {
    auto attention = SlotAttention::create(row, plan, ranks, world, options);
    if (!attention) throw std::runtime_error(attention.status().message());
    if ((*attention)->member() != m) throw std::runtime_error("wrong member index");
    at::Tensor ql = shard(q, plan, m).requires_grad_();
    at::Tensor kl = shard(k, plan, m).requires_grad_();
    at::Tensor vl = shard(v, plan, m).requires_grad_();
    const at::Tensor o = (*attention)->apply(ql, kl, vl);
    (o * shard(weight, plan, m)).sum().backward();
    out[m] = o.detach();
    dq[m] = ql.grad();
    dk[m] = kl.grad();
    dv[m] = vl.grad();
    forward[m] = (*attention)->last_forward();
    backward[m] = (*attention)->last_backward();
  }

  void prepare(std::int64_t heads, std::int64_t dim) {
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    q = at::randn({row.tokens, heads, dim}, opts);
    k = at::randn({row.tokens, heads, dim}, opts);
    v = at::randn({row.tokens, heads, dim}, opts);
    weight = at::randn({row.tokens, heads, dim}, opts);
    const auto g = static_cast<std::size_t>(plan.cp_size);
    out.assign(g, {});
    dq.assign(g, {});
    dk.assign(g, {});
    dv.assign(g, {});
    forward.assign(g, {});
    backward.assign(g, {});
  }

  // Dense reference, pad rows, tiles and bytes of every member.
  void expect_equals_dense(double tol) const {
    const at::Tensor qr = q.clone().requires_grad_();
    const at::Tensor kr = k.clone().requires_grad_();
    const at::Tensor vr = v.clone().requires_grad_();
    const at::Tensor ref = dense_attention(qr, kr, vr, brute_mask(row));
    (ref * weight).sum().backward();
    for (std::int32_t m = 0; m < plan.cp_size; ++m) {
      ASSERT_TRUE(out[m].defined()) << "member " << m;
      for (std::int64_t i = 0; i < plan.shard_len; ++i) {
        if (plan.rank_begin(m)[i] != kPadPosition) continue;
        for (const at::Tensor* t : {&out[m], &dq[m], &dk[m], &dv[m]}) {
          EXPECT_EQ((*t)[i].abs().max().item<double>(), 0.0) << "member " << m << " pad row " << i;
        }
      }
    }
    EXPECT_LT(max_diff(unshard(at::cat(out), plan), ref), tol) << "forward";
    EXPECT_LT(max_diff(unshard(at::cat(dq), plan), qr.grad()), tol) << "dq";
    EXPECT_LT(max_diff(unshard(at::cat(dk), plan), kr.grad()), tol) << "dk";
    EXPECT_LT(max_diff(unshard(at::cat(dv), plan), vr.grad()), tol) << "dv";
    const std::vector<RankWork> work = compute_work(row, plan);
    const KvExchangePlan x = make_kv_exchange_plan(row, plan).value();
    const std::int64_t token_bytes = q.size(1) * q.size(2) * 2 * 8;
    for (std::int32_t m = 0; m < plan.cp_size; ++m) {
      EXPECT_EQ(forward[m].tiles, work[m].tiles) << "forward tiles, member " << m;
      EXPECT_EQ(backward[m].tiles, work[m].tiles) << "backward tiles, member " << m;
      EXPECT_EQ(forward[m].bytes_received, x.tokens_received(m) * token_bytes) << m;
      EXPECT_EQ(forward[m].bytes_sent, x.tokens_sent(m) * token_bytes) << m;
      // dK/dV travel the same rows back.
      EXPECT_EQ(backward[m].bytes_sent, forward[m].bytes_received) << m;
      EXPECT_EQ(backward[m].bytes_received, forward[m].bytes_sent) << m;
      if (plan.cp_size == 1) {
        EXPECT_EQ(forward[m].peers, 0);
      }
    }
  }
};

// Runs `runs` (slots of one wave: disjoint ranks) concurrently on a world of
// `world_size` threads; returns each rank's error text.
std::vector<std::string> run_wave(std::vector<SlotRun*> runs,
                                  const std::vector<std::shared_ptr<comm::Communicator>>& world) {
  std::vector<std::string> errors(world.size());
  std::vector<std::thread> threads;
  for (SlotRun* run : runs) {
    for (std::size_t m = 0; m < run->ranks.size(); ++m) {
      const std::int32_t r = run->ranks[m];
      threads.emplace_back([&errors, &world, run, m, r] {
        try {
          run->run_member(static_cast<std::int32_t>(m), world[r]);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  return errors;
}

class SlotAttentionMembers : public ::testing::TestWithParam<std::int32_t> {};

TEST_P(SlotAttentionMembers, EqualsDenseAttentionForEveryMaskAndPlan) {
  // g members out of a world of g + 2, in a scrambled rank order, so the
  // slot's plan ranks are not its world ranks and two ranks stay idle.
  const std::int32_t g = GetParam();
  const std::int32_t world_size = g + 2;
  const std::int64_t b = 8;
  const std::int64_t n = 90;
  at::manual_seed(300 + g);
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(world_size));
  std::iota(ranks.begin(), ranks.end(), 0);
  std::shuffle(ranks.begin(), ranks.end(), std::mt19937(g));
  ranks.resize(static_cast<std::size_t>(g));
  const auto world = comm::make_thread_group(world_size, "world", 20s);
  for (const auto& docs :
       {std::vector<std::int64_t>{90}, std::vector<std::int64_t>{31, 7, 40, 2, 10}}) {
    for (const auto& [mask_name, mask] : masks(n, b)) {
      for (const ShardPlan& plan : plans(n, g, b)) {
        SCOPED_TRACE("g=" + std::to_string(g) + " docs=" + std::to_string(docs.size()) +
                     " mask=" + mask_name + " plan=" + plan.strategy_used);
        SlotRun run{make_row(docs, mask, b, g), plan, ranks};
        run.prepare(2, 4);
        for (const auto& e : run_wave({&run}, world)) ASSERT_EQ(e, "");
        run.expect_equals_dense(1e-12);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(G, SlotAttentionMembers, ::testing::Values(1, 2, 3, 5));

TEST(SlotAttention, WholeSchedulesRunWaveByWaveAndMoveThePredictedBytes) {
  // Every slot of a schedule runs on its own ranks of one world; the slots
  // of a wave run at once. Per slot: dense attention to 1e-12, and the
  // bytes each member received equal the cost model's bytes_received with
  // kv_bytes_per_token = one token's K and V (heads x 2 x head_dim x 8).
  const std::int64_t heads = 2;
  const std::int64_t dim = 4;
  std::mt19937 rng(23);
  for (const std::int32_t world_size : {4, 6}) {
    ScheduleRequest request = slot_request(world_size, heads, dim, {150});  // needs 3 ranks
    std::lognormal_distribution<double> length(2.8, 0.9);
    for (int i = 0; i < 14; ++i) {
      request.doc_lengths.push_back(std::clamp<std::int64_t>(std::llround(length(rng)), 1, 60));
    }
    const auto world = comm::make_thread_group(world_size, "world", 20s);
    std::size_t widest = 0;
    int single = 0;
    std::int64_t received = 0;
    for (const std::string& name : schedule_strategy_names()) {
      SCOPED_TRACE("W=" + std::to_string(world_size) + " scheduler " + name);
      Result<Schedule> schedule = run_schedule_strategy(name, request);
      ASSERT_TRUE(static_cast<bool>(schedule)) << schedule.status().message();
      const ScheduleCost cost = evaluate_schedule(request, *schedule);
      std::vector<SlotRun> runs;
      runs.reserve(schedule->slots.size());
      std::int32_t last_wave = 0;
      for (const ScheduleSlot& slot : schedule->slots) {
        runs.emplace_back(slot_workload(request, slot), slot.plan, slot.ranks);
        runs.back().prepare(heads, dim);
        last_wave = std::max(last_wave, slot.wave);
      }
      for (std::int32_t wave = 0; wave <= last_wave; ++wave) {
        std::vector<SlotRun*> in_wave;
        for (std::size_t s = 0; s < runs.size(); ++s) {
          if (schedule->slots[s].wave == wave) in_wave.push_back(&runs[s]);
        }
        for (const auto& e : run_wave(in_wave, world)) ASSERT_EQ(e, "") << "wave " << wave;
      }
      for (std::size_t s = 0; s < runs.size(); ++s) {
        SCOPED_TRACE("slot " + std::to_string(s));
        runs[s].expect_equals_dense(1e-12);
        for (std::size_t m = 0; m < runs[s].ranks.size(); ++m) {
          EXPECT_EQ(runs[s].forward[m].bytes_received, cost.slots[s].members[m].bytes_received);
          EXPECT_EQ(runs[s].forward[m].bytes_sent, cost.slots[s].members[m].bytes_sent);
          EXPECT_EQ(runs[s].forward[m].peers, cost.slots[s].members[m].peers);
          received += runs[s].forward[m].bytes_received;
        }
        widest = std::max(widest, runs[s].ranks.size());
        single += runs[s].ranks.size() == 1 ? 1 : 0;
      }
    }
    // The batch exercised what it is meant to: a slot of three or more
    // members, one-member slots, and bytes on the wire.
    EXPECT_GE(widest, 3u);
    EXPECT_GE(single, 1);
    EXPECT_GT(received, 0);
  }
}

TEST(SlotAttention, TwoLayersShareOneSlotAttentionWhileAnotherSlotRuns) {
  // One SlotAttention serves both layers of a step (four exchanges between
  // every pair that talks: two forward, two backward, paired in order),
  // while a slot of the two other world ranks exchanges at the same time.
  // Layer 2 reads layer 1's output; gradients reach layer 1's inputs.
  const std::int64_t heads = 2;
  const std::int64_t dim = 4;
  const auto world = comm::make_thread_group(5, "world", 20s);
  struct Slot {
    CpWorkload row;
    ShardPlan plan;
    std::vector<std::int32_t> ranks;
  };
  const std::vector<Slot> slots{
      {make_row({50, 13, 27}, MaskSpec::causal(), 8, 3), random_plan(90, 3, 2, 9), {4, 0, 2}},
      {make_row({33, 31}, MaskSpec::sliding(11), 8, 2), block_round_robin_plan(64, 2, 8), {3, 1}}};
  at::manual_seed(77);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  struct Data {
    at::Tensor q, k, v, weight, ref, dq, dk, dv;
  };
  std::vector<Data> data(slots.size());
  auto layers = [](const at::Tensor& o1,
                   const std::function<at::Tensor(at::Tensor, at::Tensor, at::Tensor)>& attend) {
    return attend(o1 * 0.7, o1 * -1.3, o1 + 0.25);
  };
  for (std::size_t s = 0; s < slots.size(); ++s) {
    const std::int64_t n = slots[s].row.tokens;
    Data& d = data[s];
    d.q = at::randn({n, heads, dim}, opts);
    d.k = at::randn({n, heads, dim}, opts);
    d.v = at::randn({n, heads, dim}, opts);
    d.weight = at::randn({n, heads, dim}, opts);
    const at::Tensor mask = brute_mask(slots[s].row);
    const at::Tensor qr = d.q.clone().requires_grad_();
    const at::Tensor kr = d.k.clone().requires_grad_();
    const at::Tensor vr = d.v.clone().requires_grad_();
    d.ref = layers(
        dense_attention(qr, kr, vr, mask),
        [&](at::Tensor q, at::Tensor k, at::Tensor v) { return dense_attention(q, k, v, mask); });
    (d.ref * d.weight).sum().backward();
    d.dq = qr.grad();
    d.dk = kr.grad();
    d.dv = vr.grad();
  }
  std::vector<std::vector<at::Tensor>> out(slots.size()), dq(slots.size()), dk(slots.size()),
      dv(slots.size());
  std::vector<std::string> errors(5);
  std::vector<std::thread> threads;
  for (std::size_t s = 0; s < slots.size(); ++s) {
    const auto g = static_cast<std::size_t>(slots[s].plan.cp_size);
    out[s].resize(g);
    dq[s].resize(g);
    dk[s].resize(g);
    dv[s].resize(g);
    for (std::size_t m = 0; m < g; ++m) {
      threads.emplace_back([&, s, m] {
        const Slot& slot = slots[s];
        const auto member = static_cast<std::int32_t>(m);
        try {
          auto a =
              SlotAttention::create(slot.row, slot.plan, slot.ranks, world[slot.ranks[m]]).value();
          const Data& d = data[s];
          at::Tensor ql = shard(d.q, slot.plan, member).requires_grad_();
          at::Tensor kl = shard(d.k, slot.plan, member).requires_grad_();
          at::Tensor vl = shard(d.v, slot.plan, member).requires_grad_();
          const at::Tensor o =
              layers(a->apply(ql, kl, vl),
                     [&](at::Tensor q, at::Tensor k, at::Tensor v) { return a->apply(q, k, v); });
          (o * shard(d.weight, slot.plan, member)).sum().backward();
          out[s][m] = o.detach();
          dq[s][m] = ql.grad();
          dk[s][m] = kl.grad();
          dv[s][m] = vl.grad();
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(slot.ranks[m])] = e.what();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  for (std::size_t s = 0; s < slots.size(); ++s) {
    SCOPED_TRACE("slot " + std::to_string(s));
    const ShardPlan& plan = slots[s].plan;
    EXPECT_LT(max_diff(unshard(at::cat(out[s]), plan), data[s].ref), 1e-12);
    EXPECT_LT(max_diff(unshard(at::cat(dq[s]), plan), data[s].dq), 1e-12);
    EXPECT_LT(max_diff(unshard(at::cat(dk[s]), plan), data[s].dk), 1e-12);
    EXPECT_LT(max_diff(unshard(at::cat(dv[s]), plan), data[s].dv), 1e-12);
  }
}

// ------------------------------------------------------------- overlap

// The members holding a token of key block kb other than m, recounted from
// the plan's positions.
std::set<std::int32_t> holders(const ShardPlan& plan, std::int64_t kb, std::int64_t b,
                               std::int32_t m) {
  std::set<std::int32_t> h;
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    for (std::int64_t row = 0; row < plan.shard_len; ++row) {
      const std::int64_t pos = plan.rank_begin(r)[row];
      if (r != m && pos != kPadPosition && pos / b == kb) h.insert(r);
    }
  }
  return h;
}

// (query block, key block) tiles of a schedule.
std::set<std::pair<std::int64_t, std::int64_t>> tiles_of(const TileSchedule& s) {
  std::set<std::pair<std::int64_t, std::int64_t>> t;
  for (std::int64_t qb = 0; qb < s.num_query_blocks; ++qb) {
    for (std::int64_t i = s.run_offsets[qb]; i < s.run_offsets[qb + 1]; ++i) {
      for (std::int64_t kb = s.runs[i].first; kb <= s.runs[i].last; ++kb) t.insert({qb, kb});
    }
  }
  return t;
}

// Both ways of calling: a call per peer, or two a pass (the own keys' group
// and the rest in one, the groups between empty).
TEST(Overlap, GroupsSplitEveryTileOnceByThePeersItsKeyBlockNeeds) {
  const std::int64_t b = 8;
  for (std::int32_t g : {2, 3, 5}) {
    for (const auto& [mask_name, mask] : masks(90, b)) {
      for (const ShardPlan& plan : plans(90, g, b)) {
        const CpWorkload row = make_row({31, 7, 40, 2, 10}, mask, b, g);
        const KvExchangePlan x = make_kv_exchange_plan(row, plan).value();
        for (const OverlapCalls calls : {OverlapCalls::kPerPeer, OverlapCalls::kOwnThenRemote}) {
          const bool two = calls == OverlapCalls::kOwnThenRemote;
          SCOPED_TRACE("g=" + std::to_string(g) + " mask=" + mask_name +
                       " plan=" + plan.strategy_used + (two ? " two a pass" : " per peer"));
          for (std::int32_t m = 0; m < g; ++m) {
            const TileSchedule s = make_tile_schedule(row, plan, m).value();
            const OverlapPlan o = make_overlap_plan(s, plan, x, m, calls);
            ASSERT_EQ(o.forward.size(), o.peers.size() + 1);
            ASSERT_EQ(o.backward.size(), o.peers.size() + 1);
            const std::size_t last = o.peers.size();
            for (const auto* groups : {&o.forward, &o.backward}) {
              std::set<std::pair<std::int64_t, std::int64_t>> seen;
              std::int64_t count = 0;
              for (std::size_t i = 0; i < groups->size(); ++i) {
                const auto t = tiles_of((*groups)[i]);
                EXPECT_EQ(static_cast<std::int64_t>(t.size()), (*groups)[i].tiles);
                count += (*groups)[i].tiles;
                for (const auto& [qb, kb] : t) {
                  ASSERT_TRUE(seen.insert({qb, kb}).second) << "tile in two groups";
                  const std::set<std::int32_t> h = holders(plan, kb, b, m);
                  // Forward: group 0 own keys only, group i + 1 ends at peers[i].
                  // Backward: group i starts at peers[i], the last own keys only.
                  // Two a pass: the rest in the forward's last group, the
                  // backward's first.
                  const bool fwd = groups == &o.forward;
                  const std::size_t local = fwd ? 0 : last;
                  if (h.empty()) {
                    EXPECT_EQ(i, local);
                  } else if (two) {
                    EXPECT_EQ(i, fwd ? last : 0);
                  } else {
                    ASSERT_NE(i, local);
                    const std::size_t peer = fwd ? i - 1 : i;
                    EXPECT_EQ(fwd ? *h.rbegin() : *h.begin(), o.peers[peer]);
                  }
                }
              }
              EXPECT_EQ(seen, tiles_of(s));
              EXPECT_EQ(count, s.tiles);
            }
          }
        }
      }
    }
  }
}

TEST(Overlap, TheOverlappedPassesAreTakenAndEqualTheWholeExchange) {
  // The same slot run three times, overlapped with a call per peer, with two
  // calls a pass, and not overlapped: the results agree to rounding (the
  // partial results merge by log-sum-exp, the dK/dV shares add in another
  // order), the overlapped passes computed tiles in several groups (at most
  // two a pass when asked), and the whole one in one.
  const std::int64_t b = 8;
  const auto world = comm::make_thread_group(5, "world", 20s);
  std::int32_t fewer = 0;        // members that called the kernel less often two a pass
  std::int32_t silent_last = 0;  // members whose last peer sends them nothing, tiles to compute
  for (const auto& [mask_name, mask] : masks(90, b)) {
    for (const ShardPlan& plan : plans(90, 4, b)) {
      SCOPED_TRACE("mask=" + mask_name + " plan=" + plan.strategy_used);
      const CpWorkload row = make_row({31, 7, 40, 2, 10}, mask, b, 4);
      std::vector<SlotRun> runs(3, SlotRun{row, plan, {4, 0, 2, 1}});
      runs[0].options.overlap_calls = OverlapCalls::kPerPeer;
      runs[1].options.overlap = false;
      runs[2].options.overlap_calls = OverlapCalls::kOwnThenRemote;
      for (SlotRun& run : runs) {
        at::manual_seed(7);
        run.prepare(2, 4);
        for (const auto& e : run_wave({&run}, world)) ASSERT_EQ(e, "");
        run.expect_equals_dense(1e-12);
      }
      const KvExchangePlan x = make_kv_exchange_plan(row, plan).value();
      std::int32_t split = 0;
      for (std::int32_t m = 0; m < 4; ++m) {
        // Each overlapped pass made one kernel call per group with tiles.
        const TileSchedule s = make_tile_schedule(row, plan, m).value();
        for (const std::size_t r : {std::size_t{0}, std::size_t{2}}) {
          const OverlapPlan o = make_overlap_plan(s, plan, x, m, runs[r].options.overlap_calls);
          const auto calls = [](const std::vector<TileSchedule>& groups) {
            return std::count_if(groups.begin(), groups.end(),
                                 [](const TileSchedule& g) { return g.tiles > 0; });
          };
          EXPECT_EQ(runs[r].forward[m].groups, calls(o.forward)) << m;
          EXPECT_EQ(runs[r].backward[m].groups, calls(o.backward)) << m;
          // Two a pass: the rest waits for the last peer even where that
          // peer sent this member nothing.
          const bool last_sends =
              !o.peers.empty() &&
              std::any_of(x.transfers.begin(), x.transfers.end(), [&](const KvTransfer& t) {
                return t.from == o.peers.back() && t.to == m;
              });
          silent_last += r == 2 && !o.peers.empty() && !last_sends && o.forward.back().tiles > 0;
        }
        for (const SlotRun* other : {&runs[1], &runs[2]}) {
          EXPECT_LT(max_diff(runs[0].out[m], other->out[m]), 1e-13) << m;
          EXPECT_LT(max_diff(runs[0].dq[m], other->dq[m]), 1e-13) << m;
          EXPECT_LT(max_diff(runs[0].dk[m], other->dk[m]), 1e-13) << m;
          EXPECT_LT(max_diff(runs[0].dv[m], other->dv[m]), 1e-13) << m;
        }
        EXPECT_LE(runs[2].forward[m].groups, 2) << m;
        EXPECT_LE(runs[2].backward[m].groups, 2) << m;
        fewer += runs[2].forward[m].groups < runs[0].forward[m].groups &&
                 runs[2].backward[m].groups < runs[0].backward[m].groups;
        EXPECT_EQ(runs[1].forward[m].groups, 1);
        EXPECT_EQ(runs[1].backward[m].groups, 1);
        EXPECT_EQ(runs[1].forward[m].exchange_ms, 0.0);
        EXPECT_GE(runs[0].forward[m].groups, 1);
        EXPECT_LE(runs[0].forward[m].wait_ms, runs[0].forward[m].comm_ms + 1e-9) << m;
        split += runs[0].forward[m].groups > 1 && runs[0].backward[m].groups > 1;
      }
      EXPECT_GT(split, 0) << "no member computed its tiles in groups";
    }
  }
  EXPECT_GT(fewer, 0) << "two calls a pass called the kernel as often as a call per peer";
  EXPECT_GT(silent_last, 0) << "no member's last peer was one that sends it nothing";
}

TEST(SlotAttention, OneMemberSlotsNeedNoGroupAtAll) {
  // g = 1 over a world of one: the local communicator, which has no
  // point-to-point, is never asked.
  const CpWorkload row = make_row({20, 13}, MaskSpec::causal(), 8, 1);
  SlotRun run{row, contiguous_plan(row.tokens, 1), {0}};
  run.prepare(1, 4);
  run.run_member(0, std::make_shared<comm::LocalCommunicator>("world"));
  run.expect_equals_dense(1e-12);
}

TEST(SlotAttention, AMemberThatNeverComesIsNamedWithTheSlotAndWave) {
  // World ranks 1 and 3 form the slot; rank 3 never runs it. Rank 1's
  // forward exchange times out naming the slot, the wave and rank 3.
  const CpWorkload row = make_row({40}, MaskSpec::causal(), 8, 2);
  const ShardPlan plan = contiguous_plan(40, 2);
  const auto world = comm::make_thread_group(4, "world", 300ms);
  SlotAttentionOptions options;
  options.label = "slot 5 (wave 2)";
  auto attention = SlotAttention::create(row, plan, {1, 3}, world[1], options).value();
  const at::Tensor x = at::randn({plan.shard_len, 1, 4}, at::kDouble);
  std::string error;
  try {
    attention->forward(x, x, x);
  } catch (const comm::CommError& e) {
    error = e.what();
  }
  EXPECT_EQ(error,
            "slot 5 (wave 2) forward: exchange on group world timed out after 300 ms (rank 1 "
            "waiting to receive from rank 3); that peer failed or did not post the matching send");
}

TEST(SlotAttention, RejectsRanksThatDoNotFitTheSlot) {
  const CpWorkload row = make_row({40}, MaskSpec::causal(), 8, 2);
  const ShardPlan plan = contiguous_plan(40, 2);
  const auto world = comm::make_thread_group(3, "world", 5s);
  auto message = [&](std::vector<std::int32_t> ranks, int me) {
    auto a = SlotAttention::create(row, plan, std::move(ranks), world[me]);
    return a ? std::string("ok") : a.status().message();
  };
  EXPECT_EQ(message({0, 2}, 2), "ok");
  EXPECT_EQ(message({0, 1, 2}, 0),
            "slot attention: the slot lists 3 ranks but its plan has cp_size 2; plan the slot "
            "over its own members");
  EXPECT_EQ(message({0, 3}, 0), "slot attention: rank 3 of the slot is outside group world [0, 3)");
  EXPECT_EQ(message({1, 1}, 1),
            "slot attention: rank 1 appears twice in the slot; a slot's ranks are distinct");
  EXPECT_EQ(message({0, 2}, 1),
            "slot attention: rank 1 is not a member of the slot; only its members run it");
}

}  // namespace
}  // namespace fulcrum::attention
