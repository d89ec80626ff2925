// The balanced planner's plans against its reference (the unit balancing
// as it stood before its deal was made lighter, cp_unit_balance_reference.h):
// on thousands of random rows (every mask, P from 1 to 64, documents of
// every shape, the usual and unusual block sizes, the default refinement
// and cut-short ones), the same runs on every rank, the same work, score and
// rounds, bit for bit. `fulcrum plan` and the runtime plan with it, so a
// faster deal must not move one token.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cp_random_workloads.h"
#include "cp_unit_balance_reference.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_balanced_detail.h"

namespace fulcrum::cp {
namespace {

using random_workloads::describe;
using random_workloads::Limits;
using random_workloads::random_workload;
using random_workloads::Rng;

::testing::AssertionResult same_balance(const detail::Balanced& got, const detail::Balanced& want) {
  const detail::RunPlan& a = got.runs;
  const detail::RunPlan& b = want.runs;
  if (a.ranks != b.ranks || a.shard_len != b.shard_len || a.rank_offset != b.rank_offset ||
      a.runs.size() != b.runs.size()) {
    return ::testing::AssertionFailure() << "plan shape differs: " << a.runs.size() << " runs, "
                                         << "shard " << a.shard_len << " against " << b.runs.size()
                                         << " runs, shard " << b.shard_len;
  }
  for (std::size_t i = 0; i < a.runs.size(); ++i) {
    if (a.runs[i].begin != b.runs[i].begin || a.runs[i].length != b.runs[i].length) {
      return ::testing::AssertionFailure()
             << "run " << i << ": [" << a.runs[i].begin << ", +" << a.runs[i].length
             << ") against [" << b.runs[i].begin << ", +" << b.runs[i].length << ")";
    }
  }
  if (const auto same = random_workloads::same_work(got.work, want.work); !same) return same;
  if (std::memcmp(&got.score, &want.score, sizeof got.score) != 0 || got.rounds != want.rounds ||
      got.total_pairs != want.total_pairs || got.unsharded_tiles != want.unsharded_tiles) {
    return ::testing::AssertionFailure()
           << "score " << got.score << " in " << got.rounds << " rounds against " << want.score
           << " in " << want.rounds;
  }
  return ::testing::AssertionSuccess();
}

TEST(CpUnitBalance, PlansAsTheReferenceBitForBit) {
  Rng rng(20261126);
  std::int64_t dealt = 0;  // rows with several rounds of full units to deal
  for (int i = 0; i < 3000; ++i) {
    Limits limits;
    limits.min_tokens = i % 2 == 0 ? 4096 : 1;
    limits.max_tokens = i % 3 == 0 ? 300000 : 20000;
    limits.unusual_blocks = i % 7 == 0;
    const CpWorkload w = random_workload(rng, limits);
    detail::BalanceOptions options;
    if (i % 5 == 0) options.max_rounds = rng.uniform(-1, 8);  // cut short, or none
    if (i % 11 == 0) options.tolerance = 0.0;                 // refine to the end
    const RowLayout layout(w);
    const detail::Balanced got = detail::balance_row(w, layout, options);
    const detail::Balanced want = reference::balance_row(w, layout, options);
    EXPECT_TRUE(same_balance(got, want)) << "row " << i << ": " << describe(w);
    dealt += w.tokens / w.block_size >= 3 * static_cast<std::int64_t>(w.cp_size) ? 1 : 0;
    if (HasFailure()) return;
  }
  EXPECT_GT(dealt, 1500);  // most rows deal their full units over several rounds
}

}  // namespace
}  // namespace fulcrum::cp
