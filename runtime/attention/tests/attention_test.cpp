// The CP attention equals dense single-process attention, forward and
// backward, for every mask, packed documents, P in {1..4} and plans from
// contiguous to random with padding; it computes exactly the tiles of the
// tile work model. P ranks are threads sharing an in-process group, so the
// all-gather / reduce-scatter plumbing runs as in a real job (the Gloo
// version of the same check is gloo_attention_test.cpp).
#include <ATen/ATen.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attention/blocked_attention.h"
#include "attention/compute_threads.h"
#include "attention/cp_attention.h"
#include "attention/kv_exchange.h"
#include "attention/sharding.h"
#include "attention/tile_schedule.h"
#include "comm/local_communicator.h"
#include "comm/thread_communicator.h"
#include "fulcrum/core/work_model.h"
#include "reference.h"

namespace fulcrum::attention {
namespace {

using namespace testing;
using namespace std::chrono_literals;

std::vector<std::pair<std::string, MaskSpec>> all_masks(std::int64_t n, std::int64_t b) {
  MaskSpec sparse;
  sparse.kind = MaskKind::kBlockSparse;
  sparse.block_sparse = random_block_sparse(n, b, 7);
  return {{"causal", MaskSpec::causal()},      {"full", MaskSpec::full()},
          {"sliding:5", MaskSpec::sliding(5)}, {"sliding:13", MaskSpec::sliding(13)},
          {"prefix:7", MaskSpec::prefix(7)},   {"block_sparse", sparse}};
}

std::vector<ShardPlan> all_plans(std::int64_t n, std::int32_t p, std::int64_t b) {
  return plan_shapes(n, p, b, 3, 11 + p);
}

// ---------------------------------------------------------------- schedule

// Tiles of one rank recounted from the brute-force mask, tile by tile: those
// with an allowed pair, and of them those that also hold a forbidden pair
// or a pad row (the ones a kernel must mask; every one under a block-sparse
// mask).
struct BruteTiles {
  std::int64_t touched = 0;
  std::int64_t needing_a_mask = 0;
};

BruteTiles brute_tiles(const CpWorkload& w, const ShardPlan& plan, std::int32_t r,
                       const at::Tensor& allowed) {
  auto a = allowed.accessor<bool, 2>();
  const std::int64_t b = w.block_size;
  BruteTiles out;
  for (std::int64_t row0 = 0; row0 < plan.shard_len; row0 += b) {
    for (std::int64_t kb = 0; kb * b < w.tokens; ++kb) {
      bool any = false, all = true;
      for (std::int64_t row = row0; row < std::min(row0 + b, plan.shard_len); ++row) {
        const std::int64_t q = plan.rank_begin(r)[row];
        for (std::int64_t k = kb * b; k < std::min((kb + 1) * b, w.tokens); ++k) {
          const bool ok = q != kPadPosition && a[q][k];
          any = any || ok;
          all = all && ok;
        }
      }
      out.touched += any ? 1 : 0;
      out.needing_a_mask += any && (!all || w.mask.kind == MaskKind::kBlockSparse) ? 1 : 0;
    }
  }
  return out;
}

// Whether the tile (local query block starting at row0, key block kb) is
// full, from the brute-force mask: B real rows, each allowed every one of
// the block's B keys. Block-sparse tiles are partial by rule.
bool brute_full(const CpWorkload& w, const ShardPlan& plan, std::int32_t r,
                const at::Tensor& allowed, std::int64_t row0, std::int64_t kb) {
  auto a = allowed.accessor<bool, 2>();
  const std::int64_t b = w.block_size;
  if (w.mask.kind == MaskKind::kBlockSparse || row0 + b > plan.shard_len ||
      (kb + 1) * b > w.tokens) {
    return false;
  }
  for (std::int64_t row = row0; row < row0 + b; ++row) {
    const std::int64_t q = plan.rank_begin(r)[row];
    if (q == kPadPosition) return false;
    for (std::int64_t k = kb * b; k < (kb + 1) * b; ++k) {
      if (!a[q][k]) return false;
    }
  }
  return true;
}

TEST(TileSchedule, TilesAndPairsEqualTheWorkModelAndTheMaskIsExact) {
  int cases = 0;
  for (std::int64_t n : {1, 7, 40, 97}) {
    for (std::int64_t b : {1, 4, 8}) {
      for (std::int32_t p : {1, 2, 3, 4}) {
        for (const auto& docs :
             {std::vector<std::int64_t>{},
              n >= 7 ? std::vector<std::int64_t>{n - 6, 1, 5} : std::vector<std::int64_t>{}}) {
          for (const auto& [mask_name, mask] : all_masks(n, b)) {
            const CpWorkload w = make_workload(n, docs, mask, b, p);
            const at::Tensor allowed = brute_mask(w);
            auto a = allowed.accessor<bool, 2>();
            for (const ShardPlan& plan : all_plans(n, p, b)) {
              SCOPED_TRACE("n=" + std::to_string(n) + " B=" + std::to_string(b) +
                           " P=" + std::to_string(p) + " docs=" + std::to_string(docs.size()) +
                           " mask=" + mask_name + " plan=" + plan.strategy_used);
              std::vector<std::int64_t> full;
              const std::vector<RankWork> work = compute_work(w, plan, &full);
              for (std::int32_t r = 0; r < p; ++r) {
                const Result<TileSchedule> s = make_tile_schedule(w, plan, r);
                ASSERT_TRUE(s.is_ok()) << s.status().message();
                EXPECT_EQ(s->tiles, work[r].tiles) << "rank " << r;
                // The kernel's full tiles: the work model's, and each one
                // full by the brute-force mask, as many as it holds.
                EXPECT_EQ(s->full_tiles, full[r]) << "rank " << r;
                std::int64_t brute_full_tiles = 0;
                for (std::int64_t qb = 0; qb < s->num_query_blocks; ++qb) {
                  for (std::int64_t kb = 0; kb < s->num_key_blocks; ++kb) {
                    const bool whole = kb >= s->full[qb].first && kb <= s->full[qb].last;
                    EXPECT_EQ(whole, brute_full(w, plan, r, allowed, qb * b, kb))
                        << "rank " << r << " query block " << qb << " key block " << kb;
                    brute_full_tiles += brute_full(w, plan, r, allowed, qb * b, kb) ? 1 : 0;
                  }
                }
                EXPECT_EQ(brute_full_tiles, s->full_tiles) << "rank " << r;
                EXPECT_EQ(s->pairs, work[r].pairs) << "rank " << r;
                EXPECT_EQ(s->tiles, brute_tiles(w, plan, r, allowed).touched) << "rank " << r;
                for (std::int64_t row = 0; row < plan.shard_len; ++row) {
                  const std::int64_t q = plan.rank_begin(r)[row];
                  for (std::int64_t k = 0; k < n; ++k) {
                    ASSERT_EQ(s->allowed(row, k), q != kPadPosition && a[q][k])
                        << "rank " << r << " row " << row << " key " << k;
                  }
                }
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(TileSchedule, RejectsAnInvalidPlanOrRank) {
  const CpWorkload w = make_workload(10, {}, MaskSpec::causal(), 4, 2);
  ShardPlan plan = contiguous_plan(10, 2);
  EXPECT_FALSE(make_tile_schedule(w, plan, 2).is_ok());
  plan.positions[3] = 4;  // 4 twice, 3 missing
  const auto bad = make_tile_schedule(w, plan, 0);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("repeats position 4"), std::string::npos)
      << bad.status().message();
}

TEST(TileSchedule, DocLengthsFromIds) {
  EXPECT_EQ(doc_lengths_from_ids({5, 5, 5, 2, 2, 9}).value(), (std::vector<std::int64_t>{3, 2, 1}));
  const auto bad = doc_lengths_from_ids({1, 1, 2, 1});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("document id 1 at position 3"), std::string::npos);
}

// ---------------------------------------------------------------- sharding

TEST(Sharding, ShardThenUnshardRestoresGlobalOrder) {
  for (std::int32_t p : {1, 2, 3, 4}) {
    const ShardPlan plan = random_plan(23, p, 2, 5);
    const at::Tensor full = at::randn({23, 3, 2}, at::kDouble);
    std::vector<at::Tensor> shards;
    for (std::int32_t r = 0; r < p; ++r) {
      shards.push_back(shard(full, plan, r));
      ASSERT_EQ(shards.back().size(0), plan.shard_len);
      for (std::int64_t i = 0; i < plan.shard_len; ++i) {
        const std::int64_t pos = plan.rank_begin(r)[i];
        if (pos == kPadPosition) {
          EXPECT_EQ(shards.back()[i].abs().sum().item<double>(), 0.0);
        } else {
          EXPECT_TRUE(shards.back()[i].equal(full[pos]));
        }
      }
    }
    const at::Tensor gathered = at::cat(shards, 0);
    EXPECT_TRUE(gathered.equal(shard_all(full, plan)));
    EXPECT_TRUE(unshard(gathered, plan).equal(full));
  }
}

TEST(Sharding, WorksForTokenBuffersWithAPadValue) {
  const ShardPlan plan = random_plan(10, 3, 1, 3);
  const at::Tensor labels = at::arange(10, at::kLong) + 100;
  std::vector<at::Tensor> shards;
  for (std::int32_t r = 0; r < 3; ++r) {
    shards.push_back(shard(labels, plan, r, -100));
    for (std::int64_t i = 0; i < plan.shard_len; ++i) {
      const std::int64_t pos = plan.rank_begin(r)[i];
      EXPECT_EQ(shards.back()[i].item<std::int64_t>(), pos == kPadPosition ? -100 : pos + 100);
    }
  }
  EXPECT_TRUE(unshard(at::cat(shards), plan).equal(labels));
}

TEST(Sharding, WrongSizesThrowWithTheNumbers) {
  const ShardPlan plan = contiguous_plan(10, 2);
  try {
    shard(at::zeros({9, 2}), plan, 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("9 rows; the plan needs 10"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(unshard(at::zeros({11}), plan), std::invalid_argument);
  EXPECT_THROW(shard(at::zeros({10}), plan, 2), std::invalid_argument);
}

// ---------------------------------------------------------------- attention

struct CpRun {
  at::Tensor out, dq, dk, dv;  // unsharded, global order
  std::vector<std::int64_t> forward_tiles, backward_tiles;
};

// Every rank on its own thread: shard, apply (autograd), backward of a
// weighted sum; the results unsharded.
CpRun run_cp(const CpWorkload& w, const ShardPlan& plan, const at::Tensor& q, const at::Tensor& k,
             const at::Tensor& v, const at::Tensor& weight,
             const CpAttentionOptions& options = {}) {
  const std::int32_t p = plan.cp_size;
  const auto group = comm::make_thread_group(p, "cp[dp=0]", 20s);
  std::vector<at::Tensor> out(p), dq(p), dk(p), dv(p);
  CpRun run;
  run.forward_tiles.assign(p, -1);
  run.backward_tiles.assign(p, -1);
  std::vector<std::string> errors(p);
  std::vector<std::thread> threads;
  for (std::int32_t r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto attention = CpAttention::create(w, plan, group[r], options);
        if (!attention) throw std::runtime_error(attention.status().message());
        at::Tensor ql = shard(q, plan, r).requires_grad_();
        at::Tensor kl = shard(k, plan, r).requires_grad_();
        at::Tensor vl = shard(v, plan, r).requires_grad_();
        const at::Tensor o = (*attention)->apply(ql, kl, vl);
        (o * shard(weight, plan, r)).sum().backward();
        out[r] = o.detach();
        dq[r] = ql.grad();
        dk[r] = kl.grad();
        dv[r] = vl.grad();
        run.forward_tiles[r] = (*attention)->last_forward().tiles;
        run.backward_tiles[r] = (*attention)->last_backward().tiles;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::int32_t r = 0; r < p; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    if (!errors[r].empty()) return run;
    // Pad rows carry nothing, forward or backward.
    for (std::int64_t i = 0; i < plan.shard_len; ++i) {
      if (plan.rank_begin(r)[i] != kPadPosition) continue;
      for (const at::Tensor* t : {&out[r], &dq[r], &dk[r], &dv[r]}) {
        EXPECT_EQ((*t)[i].abs().max().item<double>(), 0.0) << "rank " << r << " pad row " << i;
      }
    }
  }
  run.out = unshard(at::cat(out), plan);
  run.dq = unshard(at::cat(dq), plan);
  run.dk = unshard(at::cat(dk), plan);
  run.dv = unshard(at::cat(dv), plan);
  return run;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Dense reference vs CP, forward and all three gradients; tiles vs the work
// model.
void expect_cp_equals_dense(const CpWorkload& w, const ShardPlan& plan, std::int64_t heads,
                            std::int64_t dim, at::ScalarType dtype, double tol,
                            const CpAttentionOptions& options = {}) {
  const auto opts = at::TensorOptions().dtype(dtype);
  const at::Tensor q = at::randn({w.tokens, heads, dim}, opts);
  const at::Tensor k = at::randn({w.tokens, heads, dim}, opts);
  const at::Tensor v = at::randn({w.tokens, heads, dim}, opts);
  const at::Tensor weight = at::randn({w.tokens, heads, dim}, opts);

  const at::Tensor qr = q.to(at::kDouble).clone().requires_grad_();
  const at::Tensor kr = k.to(at::kDouble).clone().requires_grad_();
  const at::Tensor vr = v.to(at::kDouble).clone().requires_grad_();
  const at::Tensor ref = dense_attention(qr, kr, vr, brute_mask(w));
  (ref * weight.to(at::kDouble)).sum().backward();

  const CpRun cp = run_cp(w, plan, q, k, v, weight, options);
  ASSERT_TRUE(cp.out.defined());
  EXPECT_LT(max_diff(cp.out, ref), tol) << "forward";
  EXPECT_LT(max_diff(cp.dq, qr.grad()), tol) << "dq";
  EXPECT_LT(max_diff(cp.dk, kr.grad()), tol) << "dk";
  EXPECT_LT(max_diff(cp.dv, vr.grad()), tol) << "dv";
  const std::vector<RankWork> work = compute_work(w, plan);
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    EXPECT_EQ(cp.forward_tiles[r], work[r].tiles) << "forward tiles, rank " << r;
    EXPECT_EQ(cp.backward_tiles[r], work[r].tiles) << "backward tiles, rank " << r;
  }
}

class CpAttentionRanks : public ::testing::TestWithParam<std::int32_t> {};

TEST_P(CpAttentionRanks, EqualsDenseAttentionForEveryMaskAndPlan) {
  const std::int32_t p = GetParam();
  const std::int64_t n = 96;  // a multiple of 2P for P = 1..4, so head-tail applies
  const std::int64_t b = 8;
  at::manual_seed(1000 + p);
  for (const auto& docs :
       {std::vector<std::int64_t>{}, std::vector<std::int64_t>{30, 9, 41, 1, 15}}) {
    for (const auto& [mask_name, mask] : all_masks(n, b)) {
      const CpWorkload w = make_workload(n, docs, mask, b, p);
      for (const ShardPlan& plan : all_plans(n, p, b)) {
        SCOPED_TRACE("P=" + std::to_string(p) + " docs=" + std::to_string(docs.size()) +
                     " mask=" + mask_name + " plan=" + plan.strategy_used);
        expect_cp_equals_dense(w, plan, 2, 8, at::kDouble, 1e-10);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(P, CpAttentionRanks, ::testing::Values(1, 2, 3, 4));

TEST(CpAttention, OneHeadTilesEqualTheWorkModelOnALongerRow) {
  // 1000 tokens, B = 64, packed documents, causal: tiles with heads = 1.
  at::manual_seed(3);
  const CpWorkload w = make_workload(1000, {300, 20, 450, 230}, MaskSpec::causal(), 64, 4);
  for (const ShardPlan& plan : {contiguous_plan(1000, 4), random_plan(1000, 4, 5, 9),
                                block_round_robin_plan(1000, 4, 64)}) {
    SCOPED_TRACE(plan.strategy_used);
    expect_cp_equals_dense(w, plan, 1, 16, at::kDouble, 1e-10);
  }
}

TEST(CpAttention, Float32) {
  at::manual_seed(4);
  const CpWorkload w = make_workload(200, {120, 80}, MaskSpec::sliding(33), 16, 3);
  expect_cp_equals_dense(w, random_plan(200, 3, 2, 1), 3, 16, at::kFloat, 2e-5);
  expect_cp_equals_dense(w, contiguous_plan(200, 3), 3, 16, at::kFloat, 2e-5);
}

TEST(CpAttention, ChunkWidthChangesNeitherResultNorTiles) {
  at::manual_seed(5);
  const CpWorkload w = make_workload(150, {70, 80}, MaskSpec::prefix(20), 8, 2);
  for (std::int64_t chunk : {1, 8, 24, 4096}) {
    SCOPED_TRACE("chunk_keys=" + std::to_string(chunk));
    CpAttentionOptions options;
    options.kernel.chunk_keys = chunk;
    expect_cp_equals_dense(w, random_plan(150, 2, 1, 2), 2, 8, at::kDouble, 1e-10, options);
  }
}

// The kernel computes a schedule's full tiles without a mask and counts
// them, on whole schedules and on the key blocks an overlap keeps, for
// every chunk width; what it computes is the dense reference's
// (EqualsDenseAttentionForEveryMaskAndPlan). Masking each partial tile
// apart, it masks exactly the tiles the brute-force mask says need one.
TEST(LocalAttention, ComputesTheFullTilesUnmaskedAndCountsThem) {
  at::manual_seed(8);
  std::mt19937_64 rng(8);
  int with_full = 0;
  for (const auto& [mask_name, mask] : all_masks(126, 8)) {
    const CpWorkload w = make_workload(126, {50, 3, 40, 33}, mask, 8, 3);
    const at::Tensor allowed = brute_mask(w);
    for (const ShardPlan& plan : all_plans(126, 3, 8)) {
      SCOPED_TRACE("mask=" + mask_name + " plan=" + plan.strategy_used);
      const at::Tensor k = at::randn({w.tokens, 2, 4}, at::kDouble);
      const at::Tensor v = at::randn({w.tokens, 2, 4}, at::kDouble);
      for (std::int32_t r = 0; r < plan.cp_size; ++r) {
        const TileSchedule whole = make_tile_schedule(w, plan, r).value();
        {
          const at::Tensor q = at::randn({plan.shard_len, 2, 4}, at::kDouble);
          const at::Tensor dout = at::randn({plan.shard_len, 2, 4}, at::kDouble);
          const KernelOptions per_tile{512, Masking::kPerTile};
          const LocalForward f = local_attention_forward(whole, q, k, v, per_tile);
          const LocalGrads g =
              local_attention_backward(whole, q, k, v, f.out, f.lse, dout, per_tile);
          const std::int64_t needing = brute_tiles(w, plan, r, allowed).needing_a_mask;
          EXPECT_EQ(f.masked_chunks, needing);
          EXPECT_EQ(g.masked_chunks, needing);
        }
        std::vector<bool> keep(static_cast<std::size_t>(whole.num_key_blocks));
        for (std::size_t kb = 0; kb < keep.size(); ++kb) keep[kb] = rng() % 3 != 0;
        const at::Tensor q = at::randn({plan.shard_len, 2, 4}, at::kDouble);
        const at::Tensor dout = at::randn({plan.shard_len, 2, 4}, at::kDouble);
        for (const TileSchedule& s : {whole, restrict_schedule(whole, keep)}) {
          for (std::int64_t chunk : {8, 24, 512}) {
            const KernelOptions whole_chunks{chunk, Masking::kWholeChunks};
            const LocalForward wf = local_attention_forward(s, q, k, v, whole_chunks);
            const LocalGrads wg =
                local_attention_backward(s, q, k, v, wf.out, wf.lse, dout, whole_chunks);
            EXPECT_EQ(wf.tiles, s.tiles);
            EXPECT_EQ(wg.tiles, s.tiles);
            EXPECT_EQ(wf.full_tiles, 0);
            EXPECT_EQ(wg.full_tiles, 0);
            // Apart, the same tiles, the full ones unmasked, the same numbers.
            for (const Masking apart : {Masking::kFullApart, Masking::kPerTile}) {
              const KernelOptions options{chunk, apart};
              const LocalForward f = local_attention_forward(s, q, k, v, options);
              const LocalGrads g =
                  local_attention_backward(s, q, k, v, f.out, f.lse, dout, options);
              EXPECT_EQ(f.tiles, s.tiles);
              EXPECT_EQ(f.full_tiles, s.full_tiles);
              EXPECT_EQ(g.tiles, s.tiles);
              EXPECT_EQ(g.full_tiles, s.full_tiles);
              const auto finite = [](const at::Tensor& lse) {
                return lse.masked_fill(lse.isinf(), 0.0);
              };
              EXPECT_LT(max_diff(f.out, wf.out), 1e-12);
              EXPECT_LT(max_diff(finite(f.lse), finite(wf.lse)), 1e-12);
              EXPECT_TRUE(f.lse.isinf().equal(wf.lse.isinf()));
              EXPECT_LT(max_diff(g.dq, wg.dq), 1e-12);
              EXPECT_LT(max_diff(g.dk, wg.dk), 1e-12);
              EXPECT_LT(max_diff(g.dv, wg.dv), 1e-12);
            }
          }
          with_full += s.full_tiles > 0 ? 1 : 0;
        }
        // The overlap's schedules hold the whole one's full tiles between them.
        std::vector<bool> rest(keep.size());
        for (std::size_t kb = 0; kb < keep.size(); ++kb) rest[kb] = !keep[kb];
        EXPECT_EQ(
            restrict_schedule(whole, keep).full_tiles + restrict_schedule(whole, rest).full_tiles,
            whole.full_tiles);
      }
    }
  }
  EXPECT_GT(with_full, 20);
}

TEST(CpAttention, PlainForwardAndBackwardMatchTheAutogradPath) {
  // P = 1 through a LocalCommunicator: the functions tests and benchmarks call.
  at::manual_seed(6);
  const CpWorkload w = make_workload(64, {}, MaskSpec::causal(), 16, 1);
  const ShardPlan plan = random_plan(64, 1, 4, 3);
  auto attention =
      CpAttention::create(w, plan, std::make_shared<comm::LocalCommunicator>()).value();
  const at::Tensor q = at::randn({plan.shard_len, 2, 8}, at::kDouble);
  const at::Tensor k = at::randn({plan.shard_len, 2, 8}, at::kDouble);
  const at::Tensor v = at::randn({plan.shard_len, 2, 8}, at::kDouble);
  const at::Tensor dout = at::randn({plan.shard_len, 2, 8}, at::kDouble);
  const CpForward f = attention->forward(q, k, v);
  const CpGrads g = attention->backward(q, f, dout);
  EXPECT_GT(attention->last_forward().compute_ms, 0.0);
  EXPECT_EQ(attention->last_forward().heads, 2);

  const at::Tensor qa = q.clone().requires_grad_();
  const at::Tensor ka = k.clone().requires_grad_();
  const at::Tensor va = v.clone().requires_grad_();
  const at::Tensor out = attention->apply(qa, ka, va);
  out.backward(dout);
  EXPECT_LT(max_diff(out, f.out), 1e-14);
  EXPECT_LT(max_diff(qa.grad(), g.dq), 1e-14);
  EXPECT_LT(max_diff(ka.grad(), g.dk), 1e-14);
  EXPECT_LT(max_diff(va.grad(), g.dv), 1e-14);
}

TEST(CpAttention, RejectsAGroupOfTheWrongSizeAndBadShapes) {
  const CpWorkload w = make_workload(64, {}, MaskSpec::causal(), 16, 2);
  const ShardPlan plan = contiguous_plan(64, 2);
  const auto wrong =
      CpAttention::create(w, plan, std::make_shared<comm::LocalCommunicator>("cp[dp=0]"));
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("has 1 ranks but the plan has cp_size 2"),
            std::string::npos)
      << wrong.status().message();

  const CpWorkload w1 = make_workload(64, {}, MaskSpec::causal(), 16, 1);
  auto attention =
      CpAttention::create(w1, contiguous_plan(64, 1), std::make_shared<comm::LocalCommunicator>())
          .value();
  const at::Tensor q = at::randn({64, 2, 8}, at::kDouble);
  try {
    attention->forward(q, at::randn({63, 2, 8}, at::kDouble), q);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("k is [63, 2, 8]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(attention->forward(q.to(at::kInt), q.to(at::kInt), q.to(at::kInt)),
               std::invalid_argument);
}

}  // namespace
}  // namespace fulcrum::attention

// at::set_num_threads does not reach a system OpenBLAS's own pool, which
// stays at the core count: a rank set to one thread multiplied on several,
// and its thread clock missed the helpers' share. set_compute_threads sets
// both.
TEST(ComputeThreads, SetsATenAndOpenBlasAlike) {
  using GetThreads = int (*)();
  auto* blas = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  for (const int n : {2, 1}) {
    const std::string line = fulcrum::attention::set_compute_threads(n);
    EXPECT_EQ(at::get_num_threads(), n);
    if (blas != nullptr) {
      EXPECT_EQ(blas(), n);
      EXPECT_NE(line.find("OpenBLAS threads " + std::to_string(n)), std::string::npos) << line;
    }
  }
  if (blas == nullptr) GTEST_SKIP() << "this BLAS is not OpenBLAS";
}
