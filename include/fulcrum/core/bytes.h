// The one byte codec: little-endian integers and doubles, length-prefixed
// strings and lists, written to and read from memory whatever the host's
// byte order. Checkpoint files, plan-consensus records and Megatron .idx
// files are all read and written through it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace fulcrum {

template <typename T>
concept LittleEndianValue = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

// T from the sizeof(T) little-endian bytes at p (p need not be aligned).
template <LittleEndianValue T>
T load_le(const void* p) {
  using Bits = std::conditional_t<
      sizeof(T) == 1, std::uint8_t,
      std::conditional_t<sizeof(T) == 2, std::uint16_t,
                         std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
  static_assert(sizeof(Bits) == sizeof(T));
  const auto* bytes = static_cast<const unsigned char*>(p);
  Bits bits = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<Bits>(Bits{bytes[i]} << (8 * i));
  return std::bit_cast<T>(bits);
}

// Appends values to a byte container (std::string or std::vector<uint8_t>).
template <typename Out>
class ByteWriter {
 public:
  ByteWriter() = default;
  explicit ByteWriter(Out& out) : out_(&out) {}

  template <LittleEndianValue T>
  ByteWriter& put(T value) {
    using Bits = std::make_unsigned_t<
        std::conditional_t<std::is_floating_point_v<T>,
                           std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>, T>>;
    const auto bits = std::bit_cast<Bits>(value);
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      target().push_back(static_cast<typename Out::value_type>((bits >> (8 * i)) & 0xff));
    }
    return *this;
  }
  ByteWriter& u64(std::uint64_t v) { return put(v); }
  ByteWriter& i64(std::int64_t v) { return put(v); }
  ByteWriter& raw(std::string_view bytes) {
    target().insert(target().end(), bytes.begin(), bytes.end());
    return *this;
  }
  // A u64 length, then the bytes.
  ByteWriter& str(std::string_view s) { return u64(s.size()).raw(s); }
  // A u64 count, then each value as i64.
  ByteWriter& list(const std::vector<std::int64_t>& values) {
    u64(values.size());
    for (std::int64_t v : values) i64(v);
    return *this;
  }
  // What was written, when the writer owns its container.
  Out take() { return std::move(own_); }

 private:
  Out& target() { return out_ != nullptr ? *out_ : own_; }
  Out* out_ = nullptr;
  Out own_;
};

// Reads what ByteWriter wrote from bounded bytes. Every read checks what is
// left, so a malformed length never runs past the end; the first failure
// sticks (later reads fail too and yield zeros), so a caller may read a
// whole record and check once.
class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}
  explicit ByteReader(const std::vector<std::uint8_t>& bytes)
      : bytes_(reinterpret_cast<const char*>(bytes.data()), bytes.size()) {}

  template <LittleEndianValue T>
  bool get(T& value) {
    if (failed_ || left() < sizeof(T)) return fail(value);
    value = load_le<T>(bytes_.data() + offset_);
    offset_ += sizeof(T);
    return true;
  }
  bool get_bytes(std::size_t n, std::string_view& out) {
    if (failed_ || left() < n) {
      failed_ = true;
      out = {};
      return false;
    }
    out = bytes_.substr(offset_, n);
    offset_ += n;
    return true;
  }
  std::uint64_t u64() { return value<std::uint64_t>(); }
  std::int64_t i64() { return value<std::int64_t>(); }
  std::string str() {
    const std::uint64_t n = u64();
    std::string_view s;
    if (n > left() || !get_bytes(static_cast<std::size_t>(n), s)) return fail_with({});
    return std::string(s);
  }
  std::vector<std::int64_t> list() {
    const std::uint64_t n = u64();
    if (n > left() / 8) return fail_with<std::vector<std::int64_t>>({});
    std::vector<std::int64_t> values(static_cast<std::size_t>(n));
    for (auto& v : values) v = i64();
    return values;
  }

  std::size_t left() const { return bytes_.size() - offset_; }
  std::size_t offset() const { return offset_; }
  // No read failed.
  bool ok() const { return !failed_; }
  // No read failed and every byte was read.
  bool done() const { return !failed_ && offset_ == bytes_.size(); }

 private:
  template <typename T>
  T value() {
    T v{};
    get(v);
    return v;
  }
  template <typename T>
  bool fail(T& value) {
    failed_ = true;
    value = T{};
    return false;
  }
  template <typename T = std::string>
  T fail_with(T value) {
    failed_ = true;
    offset_ = bytes_.size();
    return value;
  }

  std::string_view bytes_;
  std::size_t offset_ = 0;
  bool failed_ = false;
};

}  // namespace fulcrum
