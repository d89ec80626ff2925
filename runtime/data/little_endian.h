// Loads of little-endian values from unaligned file bytes (the .idx arrays
// start at offset 34, so an int32 there is not 4-byte aligned). Private to
// fulcrum::data.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace fulcrum::data {

template <typename T>
T load_le(const std::byte* p) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::byte raw[sizeof(T)];
  std::memcpy(raw, p, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) std::reverse(raw, raw + sizeof(T));
  T value;
  std::memcpy(&value, raw, sizeof(T));
  return value;
}

}  // namespace fulcrum::data
