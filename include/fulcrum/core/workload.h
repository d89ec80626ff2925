// Workload validation, mask parsing and the per-query key ranges every work
// computation is built on. Part of fulcrum::core (no LibTorch).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum {

// Upper bounds of what fulcrum plans, shared by validate_workload, the DP
// request check and the CLI. Far beyond any real row or group, and small
// enough that every count the work model and the planners form fits in
// int64 (pairs up to N^2 <= 2^62, P * B <= 2^51) and that a plan (8 bytes
// per position: 16 GiB at N = 2^31) is at least imaginable. Beyond them a
// 2^33-token causal row overflowed the pair count, and larger rows or groups
// made planners ask for more memory than exists (found by fuzz/).
inline constexpr std::int64_t kMaxRowTokens = std::int64_t{1} << 31;  // N; a DP sample length
inline constexpr std::int64_t kMaxBlockSize = std::int64_t{1} << 31;  // B
inline constexpr std::int64_t kMaxGroupSize = std::int64_t{1} << 20;  // P; DP num_ranks

// Checks a workload for everything a planner relies on: 1 <= N <=
// kMaxRowTokens, 1 <= P <= kMaxGroupSize, 1 <= B <= kMaxBlockSize, document
// lengths >= 1 summing to N, mask parameters in range and a well-formed
// block-sparse structure. The message names the field, the value, the bound
// and what to do.
Status validate_workload(const CpWorkload& workload);

// A CpWorkload's member_weights (ABI 1.5): none, or one per member, each
// finite and >= 0, summing to a finite value > 0.
Status validate_member_weights(const std::vector<double>& weights, std::int64_t members);

// "causal", "full", "sliding:W" (W >= 1) or "prefix:L" (L >= 0).
Result<MaskSpec> parse_mask(std::string_view text);
std::string mask_to_string(const MaskSpec& mask);

// Document boundaries of a row: doc_start[d] .. doc_start[d+1].
class RowLayout {
 public:
  explicit RowLayout(const CpWorkload& workload);

  std::int64_t tokens() const { return doc_start_.back(); }
  std::int64_t num_docs() const { return static_cast<std::int64_t>(doc_start_.size()) - 1; }
  std::int64_t doc_begin(std::int64_t doc) const { return doc_start_[doc]; }
  std::int64_t doc_end(std::int64_t doc) const { return doc_start_[doc + 1]; }
  // Document holding position pos (binary search).
  std::int64_t doc_of(std::int64_t pos) const;
  const std::vector<std::int64_t>& starts() const { return doc_start_; }

 private:
  std::vector<std::int64_t> doc_start_;  // num_docs + 1 entries, last = N
};

// For every mask except block-sparse, the keys a query may see form one
// contiguous range [lo, hi] (inclusive) of global positions inside its
// document. Undefined for kBlockSparse.
struct KeyRange {
  std::int64_t lo = 0;
  std::int64_t hi = -1;
  std::int64_t size() const { return hi - lo + 1; }
};

// Inline: the run counting (slot_runs.cpp) takes two per piece of a plan.
inline KeyRange key_range(const MaskSpec& mask, std::int64_t doc_begin, std::int64_t doc_end,
                          std::int64_t query) {
  switch (mask.kind) {
    case MaskKind::kCausal:
      return {doc_begin, query};
    case MaskKind::kFull:
      return {doc_begin, doc_end - 1};
    case MaskKind::kSliding:
      return {std::max(doc_begin, query - mask.param + 1), query};
    case MaskKind::kPrefix: {
      // j <= i or j < L (document-local) is the single range [0, max(i, L-1)].
      // Compare L with the length before adding it: L may be as large as int64.
      const std::int64_t prefix_hi =
          mask.param >= doc_end - doc_begin ? doc_end - 1 : doc_begin + mask.param - 1;
      return {doc_begin, std::max(query, prefix_hi)};
    }
    case MaskKind::kBlockSparse:
      break;
  }
  return {0, -1};
}

// ceil(a / b) for b >= 1. Not (a + b - 1) / b: that overflows for a B or N
// near int64's end, which validate_workload accepts (found by fuzz/).
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b > 0 ? 1 : 0); }

// One local query block's full tiles (work_model.h), gathered piece by
// piece: the key blocks inside every one of its queries' keys, when it holds
// B real queries. Dense masks only: a query's keys are one interval whose
// ends never fall as the query moves on within its document, so a piece of
// consecutive queries of one document gives its first query's upper end and
// its last query's lower end. compute_work and the run counting
// (slot_runs.cpp) count with this one rule.
struct FullTileEnds {
  std::int64_t rows = 0;
  std::int64_t latest_lo = 0;
  std::int64_t earliest_hi = std::numeric_limits<std::int64_t>::max();

  // A piece of `queries` queries: the keys of its first and of its last.
  void add(std::int64_t queries, const KeyRange& first, const KeyRange& last) {
    rows += queries;
    latest_lo = std::max(latest_lo, last.lo);
    earliest_hi = std::min(earliest_hi, first.hi);
  }
  // The block's full key blocks [first, end) (block = B >= 1; end <= first
  // when there is none): those inside every query's keys, when it holds B.
  std::pair<std::int64_t, std::int64_t> key_blocks(std::int64_t block) const {
    if (rows != block) return {0, 0};
    return {ceil_div(latest_lo, block), (earliest_hi + 1) / block};
  }
  // The block's full tiles, and a fresh block.
  std::int64_t take(std::int64_t block) {
    const auto [first, end] = key_blocks(block);
    *this = FullTileEnds();
    return std::max<std::int64_t>(0, end - first);
  }
};

}  // namespace fulcrum
