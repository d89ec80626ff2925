// Seeded randomness that is the same on every platform and standard library.
//
// std::mt19937_64's output sequence is fixed by the standard, the std::
// distributions and std::shuffle are not; so a draw in a range and a shuffle
// are written here from raw 64-bit draws, and every seeded stream in fulcrum
// (the loader's epoch order, the synthetic data, the dispatcher's sampler,
// the DP search, the property tests' inputs) goes through them.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace fulcrum {

inline constexpr std::uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// SplitMix64's step on x: adds the golden gamma and finalises. Spreads
// nearby seeds (epoch 0, 1, 2...) far apart.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seed for stream `stream` (an epoch, a sample index) of `seed`.
constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  return mix64(seed ^ mix64(stream));
}

// Uniform in [0, bound), bound >= 1, from any generator of 64-bit draws,
// without modulo bias: draws below 2^64 mod bound are rejected.
template <typename Rng>
std::uint64_t draw_below(Rng& rng, std::uint64_t bound) {
  const std::uint64_t reject_below = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= reject_below) return r % bound;
  }
}

// Fisher-Yates from the back, each swap partner drawn by draw_below.
template <typename T, typename Rng>
void portable_shuffle(std::vector<T>& values, Rng& rng) {
  for (std::size_t i = values.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(draw_below(rng, i));
    std::swap(values[i - 1], values[j]);
  }
}

// SplitMix64 as a generator: small state, any seed, fast; for tests and
// fuzzers that want a reproducible stream of inputs.
class SplitMix64 {
 public:
  using result_type = std::uint64_t;
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() { return next(); }
  std::uint64_t next() {
    const std::uint64_t before = state_;
    state_ += kGoldenGamma;
    return mix64(before);
  }
  // In [lo, hi] by one draw modulo the width: a test input's slight bias is
  // harmless, and one draw per value keeps streams short and stable.
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  std::uint64_t state_;
};

}  // namespace fulcrum
