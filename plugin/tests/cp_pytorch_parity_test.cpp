// Parity with PyTorch's context-parallel load balancers: the strategies named
// after them give exactly the permutation PyTorch's code computes, on every
// input PyTorch accepts.
//
// The expectations come from reading
// torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py
// (pytorch/pytorch main): _HeadTailLoadBalancer._generate_indices,
// _PerDocumentHeadTailLoadBalancer._generate_indices_for_batch (rank-major
// since PR 189902), _PTRRLoadBalancer.ptrr_scheduling and
// _PTRRLoadBalancer._generate_indices, and _create_default_load_balancer (no
// rearrangement when N % 2P != 0; DTensor's Shard(seq_dim) then splits the
// row like torch.chunk). The literal answers are PyTorch's own docstring
// examples or worked out by hand from that code; the random cases re-express
// each function's tensor operations (view, stack, flip, transpose, sort) as
// index arithmetic here, sharing nothing with fulcrum's planners, and the
// block costs of PTRR come from the brute-force mask, not from the core.
//
// Where fulcrum goes beyond PyTorch (documents not divisible by 2P, PTRR on
// rows it cannot deal evenly) there is nothing to be equal to; docs/PYTORCH.md
// says what fulcrum does there instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "brute_force.h"
#include "cp_test_fixtures.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "strategies/cp_strategies.h"

namespace fulcrum::cp {
namespace {

using fixtures::pairs_of;
using fixtures::plan_or_die;

using Positions = std::vector<std::int64_t>;

CpWorkload row_of(std::vector<std::int64_t> docs, std::int32_t p, std::int64_t block,
                  MaskSpec mask = MaskSpec::causal()) {
  CpWorkload w;
  for (const std::int64_t length : docs) w.tokens += length;
  w.doc_lengths = std::move(docs);
  w.mask = std::move(mask);
  w.block_size = block;
  w.cp_size = p;
  return w;
}

// _HeadTailLoadBalancer: arange(N).view(2P, C); stack([chunks[head_idx],
// chunks[tail_idx]], dim=1) has shape (P, 2, C) with element [r][s][t] =
// chunks[s == 0 ? r : 2P-1-r][t]; reshape(-1) reads it r, then s, then t.
Positions pytorch_head_tail(std::int64_t n, std::int64_t p) {
  const std::int64_t c = n / (2 * p);
  Positions flat(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < p; ++r) {
    for (std::int64_t s = 0; s < 2; ++s) {
      const std::int64_t chunk_row = s == 0 ? r : 2 * p - 1 - r;
      for (std::int64_t t = 0; t < c; ++t) flat[(r * 2 + s) * c + t] = chunk_row * c + t;
    }
  }
  return flat;
}

// _PerDocumentHeadTailLoadBalancer, one batch row: every document gives a
// (P, 2*C_d) block (its head-tail pairs, offset by the document's start);
// cat(dim=1) puts them side by side and reshape(-1) reads row r across all
// documents before row r+1, i.e. rank-major.
Positions pytorch_per_document(const std::vector<std::int64_t>& docs, std::int64_t p) {
  std::vector<Positions> rows(static_cast<std::size_t>(p));
  std::int64_t start = 0;
  for (const std::int64_t length : docs) {
    const Positions doc = pytorch_head_tail(length, p);
    const std::int64_t width = length / p;
    for (std::int64_t r = 0; r < p; ++r) {
      for (std::int64_t j = 0; j < width; ++j) rows[r].push_back(start + doc[r * width + j]);
    }
    start += length;
  }
  Positions flat;
  for (const Positions& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  return flat;
}

// _PTRRLoadBalancer.ptrr_scheduling: a stable descending sort of the
// process times, every odd row of its (n/G, G) view flipped, the result
// viewed (n/G, G) and transposed, so group g takes column g; each group
// sorted ascending.
std::vector<std::vector<std::int64_t>> pytorch_ptrr_groups(const std::vector<std::int64_t>& time,
                                                           std::int64_t groups) {
  const std::int64_t n = static_cast<std::int64_t>(time.size());
  std::vector<std::int64_t> sorted(time.size());
  std::iota(sorted.begin(), sorted.end(), std::int64_t{0});
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&time](std::int64_t a, std::int64_t b) { return time[a] > time[b]; });
  std::vector<std::int64_t> dealt(time.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = i / groups;
    const std::int64_t col = i % groups;
    dealt[i] = row % 2 == 0 ? sorted[i] : sorted[row * groups + (groups - 1 - col)];
  }
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(groups));
  for (std::int64_t i = 0; i < n; ++i) out[i % groups].push_back(dealt[i]);
  for (auto& group : out) std::sort(group.begin(), group.end());
  return out;
}

// _PTRRLoadBalancer._generate_indices: arange(B * num_blocks).view(-1, B)
// indexed by the groups laid end to end, flattened: block b's B tokens in
// place of b.
Positions pytorch_ptrr(const std::vector<std::vector<std::int64_t>>& groups, std::int64_t block) {
  Positions flat;
  for (const auto& group : groups) {
    for (const std::int64_t b : group) {
      for (std::int64_t t = 0; t < block; ++t) flat.push_back(b * block + t);
    }
  }
  return flat;
}

// What BlockMask's kv_num_blocks + full_kv_num_blocks hold for every query
// block: the KV blocks with at least one allowed pair, recounted pair by pair.
std::vector<std::int64_t> brute_block_costs(const CpWorkload& w) {
  const BruteMask mask(w);
  const std::int64_t blocks = w.tokens / w.block_size;
  std::vector<std::int64_t> cost(static_cast<std::size_t>(blocks), 0);
  for (std::int64_t qb = 0; qb < blocks; ++qb) {
    for (std::int64_t kb = 0; kb < blocks; ++kb) {
      bool any = false;
      for (std::int64_t q = qb * w.block_size; q < (qb + 1) * w.block_size && !any; ++q) {
        for (std::int64_t k = kb * w.block_size; k < (kb + 1) * w.block_size && !any; ++k) {
          any = mask.allowed(q, k);
        }
      }
      cost[qb] += any ? 1 : 0;
    }
  }
  return cost;
}

// ---------------------------------------------------------------------------
// head-tail, and the default balancer around it

TEST(PyTorchParityTest, HeadTailKnownAnswers) {
  // The code's order, not its docstring's [0, 7, 1, 6, 2, 5, 3, 4]: the
  // docstring's slicing sketch and the implementation disagree, and the
  // implementation is what runs.
  EXPECT_EQ(plan_or_die(plan_head_tail, row_of({8}, 2, 128)).positions,
            (Positions{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(plan_or_die(plan_head_tail, row_of({12}, 3, 128)).positions,
            (Positions{0, 1, 10, 11, 2, 3, 8, 9, 4, 5, 6, 7}));
  EXPECT_EQ(plan_or_die(plan_head_tail, row_of({16}, 4, 128)).positions,
            (Positions{0, 1, 14, 15, 2, 3, 12, 13, 4, 5, 10, 11, 6, 7, 8, 9}));
  EXPECT_EQ(plan_or_die(plan_head_tail, row_of({6}, 1, 128)).positions,
            (Positions{0, 1, 2, 3, 4, 5}));
}

TEST(PyTorchParityTest, HeadTailEqualsPyTorchOnEveryDivisibleRow) {
  std::mt19937_64 rng(8);
  int checked = 0;
  for (const std::int32_t p : {1, 2, 3, 4, 5, 7, 8, 16, 64}) {
    for (int i = 0; i < 20; ++i) {
      const std::int64_t chunk = std::uniform_int_distribution<std::int64_t>(1, 300)(rng);
      const std::int64_t n = 2 * p * chunk;
      // head_tail ignores documents and mask; PyTorch does too.
      CpWorkload w = row_of({n}, p, 1 + static_cast<std::int64_t>(rng() % 256));
      if (i % 2 == 1) w.mask = MaskSpec::sliding(1 + static_cast<std::int64_t>(rng() % 64));
      const ShardPlan plan = plan_or_die(plan_head_tail, w);
      ASSERT_EQ(plan.positions, pytorch_head_tail(n, p)) << "N=" << n << " P=" << p;
      EXPECT_EQ(plan.shard_len, n / p);
      EXPECT_EQ(plan.padding, 0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 9 * 20);
}

TEST(PyTorchParityTest, HeadTailRefusesWherePyTorchFallsBackToChunking) {
  // _create_default_load_balancer builds no balancer when N % 2P != 0 and
  // the row is sharded as torch.chunk does: ceil(N/P) tokens per rank, the
  // last ranks short. head_tail refuses those rows (the host then serves its
  // fallback); contiguous gives the same token sets, padding the short ranks.
  for (const auto& [n, p] : {std::pair<std::int64_t, std::int32_t>{10, 4}, {9, 2}, {1001, 8}}) {
    const CpWorkload w = row_of({n}, p, 128);
    const Result<ShardPlan> refused = plan_head_tail(w);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);

    const ShardPlan plan = plan_or_die(plan_contiguous, w);
    const std::int64_t chunk = (n + p - 1) / p;
    for (std::int32_t r = 0; r < p; ++r) {
      Positions real;
      for (const std::int64_t* it = plan.rank_begin(r); it != plan.rank_end(r); ++it) {
        if (*it != kPadPosition) real.push_back(*it);
      }
      Positions torch_chunk;
      for (std::int64_t pos = r * chunk; pos < std::min(n, (r + 1) * chunk); ++pos) {
        torch_chunk.push_back(pos);
      }
      EXPECT_EQ(real, torch_chunk) << "N=" << n << " P=" << p << " rank " << r;
    }
  }
}

// ---------------------------------------------------------------------------
// per-document head-tail

TEST(PyTorchParityTest, PerDocumentKnownAnswers) {
  // PR 189902's example: documents [4, 12] at P=2. Rank-major, every rank
  // attends 44 keys (document-major order would have cut the row after 8
  // tokens and left the ranks unequal).
  for (Planner planner : {&plan_per_document, &plan_per_document_padded}) {
    const ShardPlan plan = plan_or_die(planner, row_of({4, 12}, 2, 128));
    EXPECT_EQ(plan.positions, (Positions{0, 3, 4, 5, 6, 13, 14, 15, 1, 2, 7, 8, 9, 10, 11, 12}));
    EXPECT_EQ(pairs_of(plan), (std::vector<std::int64_t>{44, 44}));
    EXPECT_EQ(plan.padding, 0);
  }
  // The class docstring's mask: documents [4, 8, 4] at P=2, rank 0 holding
  // queries 0, 3, 4, 5, 10, 11, 12, 15.
  EXPECT_EQ(plan_or_die(plan_per_document, row_of({4, 8, 4}, 2, 128)).positions,
            (Positions{0, 3, 4, 5, 10, 11, 12, 15, 1, 2, 6, 7, 8, 9, 13, 14}));
  // The NPU test's first row, [8, 8, 16] at P=2.
  EXPECT_EQ(plan_or_die(plan_per_document, row_of({8, 8, 16}, 2, 128)).positions,
            (Positions{0, 1, 6, 7, 8,  9,  14, 15, 16, 17, 18, 19, 28, 29, 30, 31,
                       2, 3, 4, 5, 10, 11, 12, 13, 20, 21, 22, 23, 24, 25, 26, 27}));
}

TEST(PyTorchParityTest, PerDocumentEqualsPyTorchWhenEveryDocumentSplitsInto2P) {
  std::mt19937_64 rng(189902);
  for (int i = 0; i < 300; ++i) {
    const std::int32_t p = 1 + static_cast<std::int32_t>(rng() % 12);
    std::vector<std::int64_t> docs(1 + rng() % 20);
    for (std::int64_t& length : docs) length = 2 * p * (1 + static_cast<std::int64_t>(rng() % 40));
    const CpWorkload w = row_of(docs, p, 1 + static_cast<std::int64_t>(rng() % 128));
    const Positions want = pytorch_per_document(docs, p);
    // Both fulcrum variants are PyTorch's layout on the inputs PyTorch accepts.
    for (Planner planner : {&plan_per_document, &plan_per_document_padded}) {
      const ShardPlan plan = plan_or_die(planner, w);
      ASSERT_EQ(plan.positions, want) << "P=" << p << " documents " << docs.size();
      EXPECT_EQ(plan.padding, 0);
    }
  }
}

TEST(PyTorchParityTest, PerDocumentPaddedIsPyTorchOnThePaddedRow) {
  // On any documents, per_document_padded is PyTorch's permutation of the row
  // whose documents are padded to multiples of 2P, each padded document's
  // trailing slots marked as pad.
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 300; ++i) {
    const std::int32_t p = 1 + static_cast<std::int32_t>(rng() % 12);
    std::vector<std::int64_t> docs(1 + rng() % 20);
    for (std::int64_t& length : docs) length = 1 + static_cast<std::int64_t>(rng() % 200);
    std::vector<std::int64_t> padded_docs;
    std::vector<std::int64_t> real_of_padded;  // padded-row position -> real position or pad
    std::int64_t start = 0;
    for (const std::int64_t length : docs) {
      const std::int64_t padded = (length + 2 * p - 1) / (2 * p) * (2 * p);
      padded_docs.push_back(padded);
      for (std::int64_t l = 0; l < padded; ++l) {
        real_of_padded.push_back(l < length ? start + l : kPadPosition);
      }
      start += length;
    }
    Positions want;
    for (const std::int64_t pos : pytorch_per_document(padded_docs, p)) {
      want.push_back(real_of_padded[pos]);
    }
    const ShardPlan plan = plan_or_die(plan_per_document_padded, row_of(docs, p, 128));
    ASSERT_EQ(plan.positions, want) << "P=" << p << " documents " << docs.size();
  }
}

// ---------------------------------------------------------------------------
// PTRR

TEST(PyTorchParityTest, PtrrSchedulingDocstringExample) {
  // ptrr_scheduling's docstring: 16 tasks over 4 groups.
  const std::vector<std::int64_t> time = {9,  14, 2,  20, 10, 15, 8,  14,
                                          16, 19, 15, 3,  12, 1,  12, 10};
  const std::vector<std::vector<std::int64_t>> want = {
      {3, 12, 13, 14}, {2, 4, 7, 9}, {1, 8, 11, 15}, {0, 5, 6, 10}};
  ASSERT_EQ(pytorch_ptrr_groups(time, 4), want);

  // fulcrum's PTRR costs blocks by their tiles, so the times are written as
  // a block-sparse mask: query block b lists KV blocks 0..cost_b-1. The deal
  // depends only on the order of the times, ties included, and a row of 16
  // blocks has at most 16 tiles per block, so each time is replaced by its
  // rank among the distinct times (1..12): same order, same ties.
  std::vector<std::int64_t> distinct = time;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  constexpr std::int64_t kBlock = 4;
  CpWorkload w = row_of({16 * kBlock}, 4, kBlock);
  w.mask.kind = MaskKind::kBlockSparse;
  w.mask.block_sparse.offsets = {0};
  for (const std::int64_t t : time) {
    const std::int64_t cost =
        std::lower_bound(distinct.begin(), distinct.end(), t) - distinct.begin() + 1;
    for (std::int64_t kb = 0; kb < cost; ++kb) w.mask.block_sparse.kv_blocks.push_back(kb);
    w.mask.block_sparse.offsets.push_back(
        static_cast<std::int64_t>(w.mask.block_sparse.kv_blocks.size()));
  }

  const ShardPlan plan = plan_or_die(plan_ptrr, w);
  EXPECT_EQ(plan.positions, pytorch_ptrr(want, kBlock));
  // The docstring's sums, read back from fulcrum's plan: 45, 45, 43, 47.
  std::vector<std::int64_t> sums;
  for (std::int32_t r = 0; r < 4; ++r) {
    std::int64_t sum = 0;
    for (const std::int64_t* it = plan.rank_begin(r); it != plan.rank_end(r); it += kBlock) {
      sum += time[*it / kBlock];
    }
    sums.push_back(sum);
  }
  EXPECT_EQ(sums, (std::vector<std::int64_t>{45, 45, 43, 47}));
}

TEST(PyTorchParityTest, PtrrGenerateIndicesDocstringExample) {
  // _generate_indices' docstring: a document-causal mask of 16 blocks,
  // documents of 4, 8 and 4 blocks, two ranks; every rank's tiles sum to 28.
  constexpr std::int64_t kBlock = 8;
  const CpWorkload w = row_of({4 * kBlock, 8 * kBlock, 4 * kBlock}, 2, kBlock);
  const std::vector<std::vector<std::int64_t>> blocks = {{2, 3, 5, 6, 8, 11, 12, 13},
                                                         {0, 1, 4, 7, 9, 10, 14, 15}};
  const ShardPlan plan = plan_or_die(plan_ptrr, w);
  EXPECT_EQ(plan.positions, pytorch_ptrr(blocks, kBlock));
  ASSERT_EQ(plan.work.size(), 2u);
  EXPECT_EQ(plan.work[0].tiles, 28);
  EXPECT_EQ(plan.work[1].tiles, 28);
}

TEST(PyTorchParityTest, PtrrEqualsPyTorchOnEveryRowItAccepts) {
  // Random rows with N % (P*B) == 0 under every mask kind, documents
  // included; the process time of a block is its non-empty KV blocks.
  std::mt19937_64 rng(163617);
  int ties = 0;
  for (int i = 0; i < 200; ++i) {
    const std::int32_t p = 1 + static_cast<std::int32_t>(rng() % 6);
    const std::int64_t block = 1 + static_cast<std::int64_t>(rng() % 8);
    const std::int64_t blocks = p * (1 + static_cast<std::int64_t>(rng() % 8));
    const std::int64_t n = blocks * block;
    std::vector<std::int64_t> docs;
    for (std::int64_t left = n; left > 0;) {
      const std::int64_t length =
          std::min(left, 1 + static_cast<std::int64_t>(rng() % (2 * block * 3)));
      docs.push_back(length);
      left -= length;
    }
    MaskSpec mask;
    switch (i % 5) {
      case 0:
        mask = MaskSpec::causal();
        break;
      case 1:
        mask = MaskSpec::full();
        break;
      case 2:
        mask = MaskSpec::sliding(1 + static_cast<std::int64_t>(rng() % (3 * block)));
        break;
      case 3:
        mask = MaskSpec::prefix(static_cast<std::int64_t>(rng() % (2 * block)));
        break;
      default:
        mask.kind = MaskKind::kBlockSparse;
        mask.block_sparse.offsets = {0};
        for (std::int64_t qb = 0; qb < blocks; ++qb) {
          for (std::int64_t kb = 0; kb < blocks; ++kb) {
            if (rng() % 3 == 0) mask.block_sparse.kv_blocks.push_back(kb);
          }
          mask.block_sparse.offsets.push_back(
              static_cast<std::int64_t>(mask.block_sparse.kv_blocks.size()));
        }
    }
    const CpWorkload w = row_of(docs, p, block, mask);
    const std::vector<std::int64_t> cost = brute_block_costs(w);
    std::vector<std::int64_t> distinct = cost;
    std::sort(distinct.begin(), distinct.end());
    ties += std::unique(distinct.begin(), distinct.end()) != distinct.end();

    const ShardPlan plan = plan_or_die(plan_ptrr, w);
    ASSERT_EQ(plan.positions, pytorch_ptrr(pytorch_ptrr_groups(cost, p), block))
        << "case " << i << " P=" << p << " B=" << block << " N=" << n;
  }
  // Ties are where a stable sort matters; most rows have them.
  EXPECT_GT(ties, 100);
}

}  // namespace
}  // namespace fulcrum::cp
