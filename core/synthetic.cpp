#include "fulcrum/core/synthetic.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace fulcrum {
namespace {

// std::*_distribution algorithms differ between standard libraries; the
// engine does not. Draw from the engine directly so a seed means the same
// lengths everywhere.
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

double standard_normal(std::mt19937_64& rng) {
  const double u1 = 1.0 - uniform01(rng);  // (0, 1]
  const double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

std::vector<std::int64_t> synthetic_document_lengths(std::int64_t count, std::uint64_t seed,
                                                     std::int64_t max_length) {
  // Three components, shaped like published long-context mixes: mostly short
  // web-like documents, a body of mid-length ones, and a thin log-uniform tail
  // of very long documents that carries most of the attention work.
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> lengths;
  lengths.reserve(static_cast<std::size_t>(std::max<std::int64_t>(count, 0)));
  const double cap = static_cast<double>(std::max<std::int64_t>(max_length, 1));
  const double tail_lo = std::min(16384.0, cap);
  for (std::int64_t i = 0; i < count; ++i) {
    const double pick = uniform01(rng);
    double len;
    if (pick < 0.60) {
      len = std::exp(std::log(500.0) + 1.0 * standard_normal(rng));
    } else if (pick < 0.96) {
      len = std::exp(std::log(3000.0) + 0.8 * standard_normal(rng));
    } else {
      len = std::exp(std::log(tail_lo) + uniform01(rng) * (std::log(cap) - std::log(tail_lo)));
    }
    lengths.push_back(static_cast<std::int64_t>(std::clamp(std::round(len), 1.0, cap)));
  }
  return lengths;
}

std::vector<std::int64_t> pack_row(const std::vector<std::int64_t>& docs, std::int64_t row_tokens,
                                   std::uint64_t seed) {
  std::vector<std::int64_t> row;
  if (docs.empty() || row_tokens < 1) return row;
  std::size_t next = static_cast<std::size_t>(seed % docs.size());
  std::int64_t room = row_tokens;
  while (room > 0) {
    const std::int64_t len = std::min(docs[next], room);
    row.push_back(len);
    room -= len;
    next = (next + 1) % docs.size();
  }
  return row;
}

std::vector<std::int64_t> synthetic_packed_row(std::int64_t row_tokens, std::uint64_t seed) {
  const std::int64_t count = row_tokens / 1000 + 64;
  return pack_row(synthetic_document_lengths(count, seed), row_tokens, seed);
}

}  // namespace fulcrum
