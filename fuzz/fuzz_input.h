// A reader that turns a fuzzer's byte string into structured values.
//
// libFuzzer ships FuzzedDataProvider, but the regression replay builds with
// the ordinary compiler (GCC in CI), which has no <fuzzer/...> headers; this
// is the small subset the targets need. Reads past the end yield zeros, so
// every byte string, including the empty one, decodes to some input: the
// fuzzer never wastes executions on a "too short" early return.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace fulcrum::fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::size_t remaining() const { return size_ - pos_; }
  bool empty() const { return pos_ >= size_; }

  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Little-endian; each read is its own statement because the evaluation
  // order of the operands of | is unspecified.
  std::uint16_t u16() {
    const unsigned lo = u8();
    return static_cast<std::uint16_t>(lo | (unsigned{u8()} << 8));
  }
  std::uint32_t u32() {
    const std::uint32_t lo = u16();
    return lo | (std::uint32_t{u16()} << 16);
  }
  std::uint64_t u64() {
    const std::uint64_t lo = u32();
    return lo | (std::uint64_t{u32()} << 32);
  }
  bool flag() { return (u8() & 1) != 0; }

  // A value in [lo, hi] (inclusive), from as few bytes as the span needs so
  // that mutations of one byte move one value.
  std::int64_t range(std::int64_t lo, std::int64_t hi) {
    const std::uint64_t span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
    std::uint64_t raw;
    if (span < 0x100) {
      raw = u8();
    } else if (span < 0x10000) {
      raw = u16();
    } else if (span < 0x100000000ull) {
      raw = u32();
    } else {
      raw = u64();
    }
    if (span == std::numeric_limits<std::uint64_t>::max()) return static_cast<std::int64_t>(raw);
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + raw % (span + 1));
  }

  // A 64-bit integer that is usually small but sometimes one of the values
  // that break arithmetic: zero, negatives, the int64 extremes, powers of two
  // whose products overflow.
  std::int64_t nasty_int64(std::int64_t small_lo, std::int64_t small_hi) {
    static constexpr std::int64_t kNasty[] = {
        0,
        -1,
        1,
        2,
        std::numeric_limits<std::int64_t>::min(),
        std::numeric_limits<std::int64_t>::max(),
        std::numeric_limits<std::int64_t>::max() - 1,
        std::int64_t{1} << 62,
        std::int64_t{1} << 32,
        (std::int64_t{1} << 31) - 1,
        std::int64_t{1} << 31,
        -(std::int64_t{1} << 31),
    };
    const std::uint8_t pick = u8();
    if (pick < 0xe0) return range(small_lo, small_hi);
    return kNasty[pick % (sizeof(kNasty) / sizeof(kNasty[0]))];
  }

  double f64() {
    const std::uint64_t bits = u64();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }

  // Up to max_len bytes, length-prefixed.
  std::string string(std::size_t max_len) {
    const std::size_t len = std::min<std::size_t>(u8() % (max_len + 1), remaining());
    std::string out(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return out;
  }

  // Everything not read yet.
  std::string rest() {
    std::string out(reinterpret_cast<const char*>(data_ + pos_), remaining());
    pos_ = size_;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// FULCRUM_FUZZ_VERBOSE=1 makes the targets print what each input decoded to
// and how the call ended: for triaging a crash and for checking that the
// seeds (make_seeds.py) decode as named. Off while fuzzing: it costs time.
inline bool verbose() {
  static const bool on = std::getenv("FULCRUM_FUZZ_VERBOSE") != nullptr;
  return on;
}

// A broken promise of the code under test: print what and where, then abort
// so that libFuzzer (or the replay test) records the input as a crash.
[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", file, line, what.c_str());
  std::abort();
}

}  // namespace fulcrum::fuzz

#define FUZZ_CHECK(cond, what)                                      \
  do {                                                              \
    if (!(cond)) ::fulcrum::fuzz::fail(__FILE__, __LINE__, (what)); \
  } while (0)
