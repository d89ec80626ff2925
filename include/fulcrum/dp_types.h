// The data-loader contract: which samples of a global batch go to which
// data-parallel rank. Plain data, header-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fulcrum {

inline constexpr double kDefaultAttentionA = 24576.0;
// Largest attention cost coefficient: a model's a is a small multiple of its
// hidden size (24576 for 4096). Bounding it keeps a * L + L^2, summed over
// any batch fulcrum takes, far inside a double, so costs and imbalances stay
// finite.
inline constexpr double kMaxAttentionA = 1099511627776.0;  // 2^40

enum class CostKind : std::int32_t {
  kTokens = 0,     // cost(L) = L
  kAttention = 1,  // cost(L) = a * L + L^2: linear layers plus quadratic attention
};

struct CostModel {
  CostKind kind = CostKind::kTokens;
  double a = kDefaultAttentionA;  // only for kAttention

  double operator()(std::int64_t length) const {
    const double l = static_cast<double>(length);
    return kind == CostKind::kTokens ? l : a * l + l * l;
  }
};

struct DpRequest {
  std::vector<std::int64_t> lengths;  // one per sample, each >= 1
  std::int32_t num_ranks = 1;         // k
  CostModel cost;
  bool equal_count = false;  // every rank gets floor(n/k) or ceil(n/k) samples
};

struct DpPartition {
  std::string strategy;                          // the strategy that produced it
  std::string fallback_reason;                   // why not the one asked for; empty if it was
  std::vector<std::vector<std::int64_t>> ranks;  // sample indices per rank
  std::vector<double> cost;                      // per rank
  double imbalance = 1.0;                        // max cost / mean cost
  double lower_bound = 0.0;                      // no partition's max cost is below this
};

}  // namespace fulcrum
