// Seeded randomness that is identical on every platform and standard
// library: std::mt19937_64's output sequence is fixed by the standard, the
// std:: distributions are not, so values are derived from raw draws here.
// Private to fulcrum::data.
#pragma once

#include <cstdint>
#include <random>

namespace fulcrum::data {

// SplitMix64's finaliser: spreads nearby seeds (epoch 0, 1, 2...) apart.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seed for stream `stream` of `seed` (an epoch, a sample index).
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  return mix64(seed ^ mix64(stream));
}

// Uniform in [0, bound), bound >= 1, without modulo bias: draws below
// 2^64 mod bound are rejected.
inline std::uint64_t draw_below(std::mt19937_64& rng, std::uint64_t bound) {
  const std::uint64_t reject_below = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= reject_below) return r % bound;
  }
}

}  // namespace fulcrum::data
