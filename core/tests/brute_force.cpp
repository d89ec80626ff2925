// Independent recounts for tests; see brute_force.h. Deliberately simple and
// deliberately sharing nothing with core/.
#include "brute_force.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fulcrum::cp {
namespace {

std::vector<std::int64_t> document_starts(const CpWorkload& workload) {
  std::vector<std::int64_t> starts = {0};
  if (workload.doc_lengths.empty()) {
    starts.push_back(workload.tokens);
  } else {
    for (std::int64_t length : workload.doc_lengths) starts.push_back(starts.back() + length);
  }
  return starts;
}

std::vector<std::int64_t> document_of_each_position(const std::vector<std::int64_t>& starts,
                                                    std::int64_t tokens) {
  std::vector<std::int64_t> doc_of(static_cast<std::size_t>(tokens), -1);
  for (std::size_t d = 0; d + 1 < starts.size(); ++d) {
    for (std::int64_t pos = starts[d]; pos < starts[d + 1] && pos < tokens; ++pos) {
      doc_of[static_cast<std::size_t>(pos)] = static_cast<std::int64_t>(d);
    }
  }
  return doc_of;
}

std::int64_t blocks_of(std::int64_t tokens, std::int64_t block) {
  return (tokens + block - 1) / block;
}

// The KV blocks listed for query block qb, sorted and without repeats: the
// mask is a set of allowed tiles, however the lists spell it.
std::vector<std::vector<std::int64_t>> listed_blocks(const CpWorkload& workload) {
  const BlockSparseMask& sparse = workload.mask.block_sparse;
  const std::int64_t num_blocks = blocks_of(workload.tokens, workload.block_size);
  std::vector<std::vector<std::int64_t>> lists(static_cast<std::size_t>(num_blocks));
  for (std::int64_t qb = 0; qb < num_blocks; ++qb) {
    if (qb + 1 >= static_cast<std::int64_t>(sparse.offsets.size())) break;
    std::vector<std::int64_t>& list = lists[static_cast<std::size_t>(qb)];
    for (std::int64_t e = sparse.offsets[qb]; e < sparse.offsets[qb + 1]; ++e) {
      list.push_back(sparse.kv_blocks[static_cast<std::size_t>(e)]);
    }
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  return lists;
}

}  // namespace

BruteMask::BruteMask(const CpWorkload& workload)
    : workload_(workload),
      doc_of_(document_of_each_position(document_starts(workload), workload.tokens)),
      doc_start_(document_starts(workload)),
      num_blocks_(blocks_of(workload.tokens, workload.block_size)) {
  if (workload.mask.kind == MaskKind::kBlockSparse) {
    block_allowed_.assign(static_cast<std::size_t>(num_blocks_ * num_blocks_), 0);
    const auto lists = listed_blocks(workload);
    for (std::int64_t qb = 0; qb < num_blocks_; ++qb) {
      for (std::int64_t kb : lists[static_cast<std::size_t>(qb)]) {
        block_allowed_[static_cast<std::size_t>(qb * num_blocks_ + kb)] = 1;
      }
    }
  }
}

bool BruteMask::allowed(std::int64_t q, std::int64_t k) const {
  const std::int64_t doc = doc_of_[static_cast<std::size_t>(q)];
  if (doc != doc_of_[static_cast<std::size_t>(k)]) return false;
  const std::int64_t i = q - doc_start_[static_cast<std::size_t>(doc)];
  const std::int64_t j = k - doc_start_[static_cast<std::size_t>(doc)];
  switch (workload_.mask.kind) {
    case MaskKind::kCausal:
      return j <= i;
    case MaskKind::kFull:
      return true;
    case MaskKind::kSliding:
      return i - workload_.mask.param < j && j <= i;
    case MaskKind::kPrefix:
      return j <= i || j < workload_.mask.param;
    case MaskKind::kBlockSparse: {
      const std::int64_t qb = q / workload_.block_size;
      const std::int64_t kb = k / workload_.block_size;
      return block_allowed_[static_cast<std::size_t>(qb * num_blocks_ + kb)] != 0;
    }
  }
  return false;
}

bool brute_allowed(const CpWorkload& workload, std::int64_t q, std::int64_t k) {
  return BruteMask(workload).allowed(q, k);
}

std::vector<RankWork> brute_work(const CpWorkload& workload, const ShardPlan& plan,
                                 std::vector<std::int64_t>* full_tiles) {
  const BruteMask mask(workload);
  const std::int64_t n = workload.tokens;
  const std::int64_t b = workload.block_size;
  const std::int64_t shard = plan.shard_len;
  std::vector<RankWork> work(static_cast<std::size_t>(plan.cp_size));
  if (full_tiles) full_tiles->assign(work.size(), 0);
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    const std::int64_t* rows = plan.positions.data() + r * shard;
    RankWork& w = work[static_cast<std::size_t>(r)];
    for (std::int64_t t = 0; t < shard; ++t) {
      const std::int64_t q = rows[t];
      if (q < 0) continue;
      ++w.tokens;
      for (std::int64_t k = 0; k < n; ++k) w.pairs += mask.allowed(q, k) ? 1 : 0;
    }
    for (std::int64_t row0 = 0; row0 < shard; row0 += b) {
      const std::int64_t row1 = std::min(row0 + b, shard);
      for (std::int64_t key0 = 0; key0 < n; key0 += b) {
        const std::int64_t key1 = std::min(key0 + b, n);
        bool any = false;
        bool every = row1 - row0 == b && key1 - key0 == b;
        for (std::int64_t t = row0; t < row1; ++t) {
          const std::int64_t q = rows[t];
          every = every && q >= 0;
          if (q < 0) continue;
          for (std::int64_t k = key0; k < key1; ++k) {
            const bool allowed = mask.allowed(q, k);
            any = any || allowed;
            every = every && allowed;
          }
        }
        w.tiles += any ? 1 : 0;
        if (full_tiles) (*full_tiles)[static_cast<std::size_t>(r)] += every ? 1 : 0;
      }
    }
  }
  return work;
}

std::vector<RankWork> interval_work(const CpWorkload& workload, const ShardPlan& plan,
                                    std::vector<std::int64_t>* full_tiles) {
  const std::int64_t n = workload.tokens;
  const std::int64_t b = workload.block_size;
  const std::int64_t shard = plan.shard_len;
  const MaskSpec& mask = workload.mask;
  const std::vector<std::int64_t> starts = document_starts(workload);
  const std::vector<std::int64_t> doc_of = document_of_each_position(starts, n);
  const bool sparse = mask.kind == MaskKind::kBlockSparse;
  const std::vector<std::vector<std::int64_t>> lists =
      sparse ? listed_blocks(workload) : std::vector<std::vector<std::int64_t>>{};

  std::vector<RankWork> work(static_cast<std::size_t>(plan.cp_size));
  if (full_tiles) full_tiles->assign(work.size(), 0);
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;  // key-block ranges of a local block
  std::vector<std::int64_t> hit;                             // key blocks of a local block
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    const std::int64_t* rows = plan.positions.data() + r * shard;
    RankWork& w = work[static_cast<std::size_t>(r)];
    for (std::int64_t row0 = 0; row0 < shard; row0 += b) {
      const std::int64_t row1 = std::min(row0 + b, shard);
      spans.clear();
      hit.clear();
      // Key positions every row of the block may attend: the intersection
      // of their intervals, [common_lo, common_hi]; a full tile is a key
      // block inside it, for a block of B real rows.
      std::int64_t common_lo = 0;
      std::int64_t common_hi = n - 1;
      std::int64_t real = 0;
      for (std::int64_t t = row0; t < row1; ++t) {
        const std::int64_t q = rows[t];
        if (q < 0) continue;
        ++real;
        ++w.tokens;
        const std::int64_t doc = doc_of[static_cast<std::size_t>(q)];
        const std::int64_t ds = starts[static_cast<std::size_t>(doc)];
        const std::int64_t de = starts[static_cast<std::size_t>(doc) + 1];  // exclusive
        if (sparse) {
          for (std::int64_t kb : lists[static_cast<std::size_t>(q / b)]) {
            const std::int64_t lo = std::max(kb * b, ds);
            const std::int64_t hi = std::min(kb * b + b, de);  // exclusive
            if (hi <= lo) continue;
            w.pairs += hi - lo;
            hit.push_back(kb);
          }
          continue;
        }
        // Keys of query q: one interval [lo, hi] inside its document.
        std::int64_t lo = ds;
        std::int64_t hi = q;
        switch (mask.kind) {
          case MaskKind::kCausal:
            break;
          case MaskKind::kFull:
            hi = de - 1;
            break;
          case MaskKind::kSliding:
            lo = std::max(ds, q - mask.param + 1);
            break;
          case MaskKind::kPrefix:
            // The prefix is the first L tokens of the document, cut at its
            // end; L may be any size, so compare it with the length rather
            // than adding it to a position.
            hi = std::max(q, mask.param >= de - ds ? de - 1 : ds + mask.param - 1);
            break;
          case MaskKind::kBlockSparse:
            break;
        }
        w.pairs += hi - lo + 1;
        spans.emplace_back(lo / b, hi / b);
        common_lo = std::max(common_lo, lo);
        common_hi = std::min(common_hi, hi);
      }
      if (full_tiles && !sparse && real == b) {
        for (std::int64_t k = 0; (k + 1) * b <= n; ++k) {
          const bool inside = k * b >= common_lo && (k + 1) * b - 1 <= common_hi;
          (*full_tiles)[static_cast<std::size_t>(r)] += inside ? 1 : 0;
        }
      }
      if (sparse) {
        std::sort(hit.begin(), hit.end());
        w.tiles += std::unique(hit.begin(), hit.end()) - hit.begin();
        continue;
      }
      // Size of the union of the rows' key-block ranges.
      std::sort(spans.begin(), spans.end());
      std::int64_t covered_to = -1;  // last key block counted so far
      for (const auto& [first, last] : spans) {
        const std::int64_t from = std::max(first, covered_to + 1);
        if (last >= from) {
          w.tiles += last - from + 1;
          covered_to = last;
        }
      }
    }
  }
  return work;
}

BruteCheck brute_check(const CpWorkload& workload, const ShardPlan& plan) {
  const std::int64_t n = workload.tokens;
  if (plan.cp_size != workload.cp_size) {
    return {"plan.cp_size=" + std::to_string(plan.cp_size) +
            " but the workload's cp_size=" + std::to_string(workload.cp_size)};
  }
  if (plan.shard_len < 0) return {"negative shard_len=" + std::to_string(plan.shard_len)};
  const auto expected =
      static_cast<std::size_t>(plan.cp_size) * static_cast<std::size_t>(plan.shard_len);
  if (plan.positions.size() != expected) {
    return {"positions has " + std::to_string(plan.positions.size()) +
            " entries, expected cp_size*shard_len=" + std::to_string(expected)};
  }
  const std::size_t row = static_cast<std::size_t>(std::max<std::int64_t>(1, plan.shard_len));
  auto where = [row](std::size_t i) {
    return "rank " + std::to_string(i / row) + " index " + std::to_string(i % row);
  };
  std::vector<std::int64_t> seen_at(static_cast<std::size_t>(n), -1);
  std::int64_t pads = 0;
  for (std::size_t i = 0; i < plan.positions.size(); ++i) {
    const std::int64_t pos = plan.positions[i];
    if (pos == kPadPosition) {
      ++pads;
      continue;
    }
    if (pos < 0 || pos >= n) {
      return {where(i) + ": position " + std::to_string(pos) + " outside [0, N)"};
    }
    std::int64_t& seen = seen_at[static_cast<std::size_t>(pos)];
    if (seen >= 0) {
      return {where(i) + ": position " + std::to_string(pos) + " already at " +
              where(static_cast<std::size_t>(seen))};
    }
    seen = static_cast<std::int64_t>(i);
  }
  for (std::int64_t pos = 0; pos < n; ++pos) {
    if (seen_at[static_cast<std::size_t>(pos)] < 0) {
      return {"position " + std::to_string(pos) + " is on no rank"};
    }
  }
  if (pads != plan.padding) {
    return {"padding=" + std::to_string(plan.padding) + " but the plan holds " +
            std::to_string(pads) + " pad entries"};
  }
  return {};
}

}  // namespace fulcrum::cp
