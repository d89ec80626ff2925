// Seeded random CP workloads for the property tests (documents of 1 to 1M
// tokens, P from 1 to 64, every mask kind), how a failing one is described,
// and the per-rank work comparison the checks share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cp_test_fixtures.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"

namespace fulcrum::cp::random_workloads {

using fixtures::Rng;

struct Limits {
  std::int64_t min_tokens = 1;
  std::int64_t max_tokens = 3000;
  std::int64_t max_doc = 1 << 20;
  std::int32_t min_cp = 1;
  std::int32_t max_cp = 64;
  bool unusual_blocks = false;  // B from {1, 2, 3, 5, 7, 100, 1000} instead of {16, 64, 128}
};

inline std::vector<std::int64_t> random_documents(Rng& rng, std::int64_t n, std::int64_t max_doc) {
  std::vector<std::int64_t> docs;
  const int shape = static_cast<int>(rng.uniform(0, 5));
  if (shape == 0) return docs;  // implicit single document
  if (shape == 1) return {n};   // explicit single document
  std::int64_t left = n;
  while (left > 0) {
    std::int64_t length = 1;
    switch (shape) {
      case 2:  // short documents, many shorter than a tile or than 2P
        length = rng.uniform(1, 64);
        break;
      case 3:  // heavy-tailed mix, as in long-context training data
        length = rng.log_uniform(1, max_doc);
        break;
      case 4:  // a few long documents among short ones
        length = rng.chance(20) ? rng.log_uniform(1, max_doc) : rng.uniform(1, 16);
        break;
      default:  // every length, uniformly
        length = rng.uniform(1, std::min(max_doc, n));
        break;
    }
    length = std::min(length, left);
    docs.push_back(length);
    left -= length;
  }
  return docs;
}

inline BlockSparseMask random_block_sparse(Rng& rng, std::int64_t n, std::int64_t block) {
  const std::int64_t blocks = ceil_div(n, block);
  // Dense shapes list O(blocks^2) tiles: only for rows of a few hundred blocks.
  const bool long_row = blocks > 256;
  BlockSparseMask mask;
  mask.offsets.push_back(0);
  const int shape =
      long_row ? static_cast<int>(rng.uniform(0, 1)) : static_cast<int>(rng.uniform(0, 4));
  const int density = static_cast<int>(rng.uniform(5, 95));
  std::vector<std::int64_t> row;
  for (std::int64_t qb = 0; qb < blocks; ++qb) {
    row.clear();
    switch (shape) {
      case 0:  // a few random blocks anywhere in the row
        for (std::int64_t e = rng.uniform(0, 4); e > 0; --e)
          row.push_back(rng.uniform(0, blocks - 1));
        break;
      case 1:  // a local band below the diagonal
        for (std::int64_t kb = std::max<std::int64_t>(0, qb - 3); kb <= qb; ++kb) {
          if (kb == qb || rng.chance(density)) row.push_back(kb);
        }
        break;
      case 2:  // block-causal with random holes
        for (std::int64_t kb = 0; kb <= qb; ++kb) {
          if (rng.chance(density)) row.push_back(kb);
        }
        break;
      case 3:  // every block: the full mask, cut at document boundaries
        for (std::int64_t kb = 0; kb < blocks; ++kb) row.push_back(kb);
        break;
      default:  // dense random
        for (std::int64_t kb = 0; kb < blocks; ++kb) {
          if (rng.chance(density)) row.push_back(kb);
        }
        break;
    }
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    mask.kv_blocks.insert(mask.kv_blocks.end(), row.begin(), row.end());
    mask.offsets.push_back(static_cast<std::int64_t>(mask.kv_blocks.size()));
  }
  return mask;
}

inline CpWorkload random_workload(Rng& rng, const Limits& limits) {
  CpWorkload w;
  w.cp_size = rng.chance(40) ? rng.pick<std::int32_t>({1, 2, 3, 4, 5, 7, 8, 16, 32, 48, 64})
                             : static_cast<std::int32_t>(rng.uniform(1, 64));
  w.cp_size = std::clamp(w.cp_size, limits.min_cp, limits.max_cp);
  w.block_size = limits.unusual_blocks ? rng.pick<std::int64_t>({1, 2, 3, 5, 7, 100, 1000})
                                       : rng.pick<std::int64_t>({16, 64, 128});
  std::int64_t n = rng.log_uniform(limits.min_tokens, limits.max_tokens);
  // A third of the rows are shaped so that head_tail, and where it fits ptrr,
  // can serve them; the rest mostly cannot.
  if (rng.chance(33)) {
    // With an even B a multiple of P*B is also one of 2P.
    const std::int64_t unit_ptrr = w.cp_size * w.block_size;
    const std::int64_t unit_head_tail = 2 * static_cast<std::int64_t>(w.cp_size);
    const std::int64_t unit =
        unit_ptrr <= limits.max_tokens && rng.chance(70) ? unit_ptrr : unit_head_tail;
    if (unit <= limits.max_tokens) n = std::max(unit, n / unit * unit);
  }
  w.tokens = n;
  w.doc_lengths = random_documents(rng, n, limits.max_doc);
  switch (rng.uniform(0, 4)) {
    case 0:
      w.mask = MaskSpec::causal();
      break;
    case 1:
      w.mask = MaskSpec::full();
      break;
    case 2:
      w.mask = MaskSpec::sliding(rng.chance(20) ? 1 : rng.log_uniform(1, n));
      break;
    case 3:
      w.mask = MaskSpec::prefix(rng.chance(20) ? 0 : rng.uniform(0, n));
      break;
    default:
      w.mask.kind = MaskKind::kBlockSparse;
      w.mask.block_sparse = random_block_sparse(rng, n, w.block_size);
      break;
  }
  return w;
}

inline std::string describe(const CpWorkload& w) {
  std::ostringstream out;
  out << "N=" << w.tokens << " P=" << w.cp_size << " B=" << w.block_size << " mask=";
  switch (w.mask.kind) {
    case MaskKind::kCausal:
      out << "causal";
      break;
    case MaskKind::kFull:
      out << "full";
      break;
    case MaskKind::kSliding:
      out << "sliding:" << w.mask.param;
      break;
    case MaskKind::kPrefix:
      out << "prefix:" << w.mask.param;
      break;
    case MaskKind::kBlockSparse:
      out << "block-sparse(" << w.mask.block_sparse.kv_blocks.size() << " tiles)";
      break;
  }
  out << " docs=" << w.doc_lengths.size() << "[";
  for (std::size_t i = 0; i < std::min<std::size_t>(w.doc_lengths.size(), 8); ++i) {
    out << (i ? "," : "") << w.doc_lengths[i];
  }
  out << (w.doc_lengths.size() > 8 ? ",...]" : "]");
  return out.str();
}

inline std::string describe(const std::vector<RankWork>& work) {
  std::ostringstream out;
  for (std::size_t r = 0; r < work.size(); ++r) {
    out << (r ? " " : "") << "r" << r << "{" << work[r].tokens << "," << work[r].pairs << ","
        << work[r].tiles << "}";
  }
  return out.str();
}

// Equal per-rank work, or a failure showing both.
inline ::testing::AssertionResult same_work(const std::vector<RankWork>& got,
                                            const std::vector<RankWork>& want) {
  bool equal = got.size() == want.size();
  for (std::size_t r = 0; equal && r < got.size(); ++r) {
    equal = got[r].tokens == want[r].tokens && got[r].pairs == want[r].pairs &&
            got[r].tiles == want[r].tiles;
  }
  if (equal) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "work {tokens,pairs,tiles}\n  got:     " << describe(got)
                                       << "\n  recount: " << describe(want);
}

}  // namespace fulcrum::cp::random_workloads
