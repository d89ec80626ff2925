// Fuzz target: the Megatron .idx reader (IndexedDataset).
//
// The input is a 3-byte header choosing the companion .bin (its size and a
// fill pattern), then the .idx bytes verbatim; the header lets the fuzzer
// resize the .bin without shifting the .idx. Both are written to a private
// temporary directory (the reader memory-maps real files, there is no
// in-memory path) and opened. The reader must refuse a corrupt pair with a
// message, or accept it and then read every sequence within the mapping:
// ASan checks each token load, and the target checks lengths and values.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "fulcrum/status.h"
#include "fuzz_input.h"

namespace fulcrum::fuzz {
namespace {

constexpr std::size_t kMaxBin = 1 << 16;

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/fulcrum-idx-fuzz-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    FUZZ_CHECK(::mkdtemp(buffer.data()) != nullptr, "cannot create a temporary directory");
    dir_ = buffer.data();
  }
  ~TempDir() {
    std::remove((prefix() + ".idx").c_str());
    std::remove((prefix() + ".bin").c_str());
    ::rmdir(dir_.c_str());
  }
  std::string prefix() const { return dir_ + "/data"; }

 private:
  std::string dir_;
};

void write_file(const std::string& path, const void* bytes, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, "cannot write " + path);
  FUZZ_CHECK(size == 0 || std::fwrite(bytes, 1, size, f) == size, "short write to " + path);
  FUZZ_CHECK(std::fclose(f) == 0, "cannot close " + path);
}

// Token bytes that exercise the float checks: whole numbers, fractions,
// NaNs, and integers of every width.
std::vector<std::uint8_t> bin_bytes(std::size_t size, std::uint8_t pattern) {
  std::vector<std::uint8_t> bin(size);
  const auto fill_with = [&bin](const void* item, std::size_t width) {
    for (std::size_t i = 0; i + width <= bin.size(); i += width) {
      std::memcpy(bin.data() + i, item, width);
    }
  };
  switch (pattern % 7) {
    case 0:
      break;  // zeros: valid for every dtype
    case 1:
      for (std::size_t i = 0; i < size; ++i) bin[i] = static_cast<std::uint8_t>(i * 37 + 11);
      break;
    case 2: {
      const float v = 3.0f;
      fill_with(&v, sizeof v);
      break;
    }
    case 3: {
      const double v = -2.0;
      fill_with(&v, sizeof v);
      break;
    }
    case 4:
      std::fill(bin.begin(), bin.end(), std::uint8_t{0xff});  // NaN in both float widths
      break;
    case 5: {
      const float v = 0.5f;
      fill_with(&v, sizeof v);
      break;
    }
    default: {
      const double v = 9223372036854775808.0;  // 2^63: just outside int64
      fill_with(&v, sizeof v);
    }
  }
  return bin;
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fulcrum;
  static const fuzz::TempDir dir;
  fuzz::FuzzInput in(data, size);
  const std::size_t bin_size = in.u16() % (fuzz::kMaxBin + 1);
  const std::vector<std::uint8_t> bin = fuzz::bin_bytes(bin_size, in.u8());
  const std::string idx = in.rest();
  fuzz::write_file(dir.prefix() + ".bin", bin.data(), bin.size());
  fuzz::write_file(dir.prefix() + ".idx", idx.data(), idx.size());

  auto opened = data::IndexedDataset::open(dir.prefix());
  if (fuzz::verbose()) {
    std::fprintf(stderr, "idx: %zu-byte .idx, %zu-byte .bin -> %s\n", idx.size(), bin.size(),
                 opened ? opened->describe().c_str() : opened.status().message().c_str());
  }
  if (!opened) {
    FUZZ_CHECK(opened.status().code() == StatusCode::kInvalidArgument,
               std::string("refusal with code ") + status_code_name(opened.status().code()) + ": " +
                   opened.status().message());
    FUZZ_CHECK(!opened.status().message().empty(), "refusal without a message");
    return 0;
  }
  const data::IndexedDataset& ds = *opened;
  FUZZ_CHECK(ds.size() >= 0, "negative sequence count");
  // Float tokens are converted to int64 on read; UBSan's float-cast-overflow
  // check catches a value the open-time validation let through.
  for (std::int64_t i = 0; i < ds.size(); ++i) {
    const std::int64_t n = ds.length(i);
    FUZZ_CHECK(n >= 0, "sequence " + std::to_string(i) + " has length " + std::to_string(n));
    const std::vector<std::int64_t> tokens = ds.tokens(i);
    FUZZ_CHECK(static_cast<std::int64_t>(tokens.size()) == n,
               "sequence " + std::to_string(i) + " read " + std::to_string(tokens.size()) +
                   " tokens, length says " + std::to_string(n));
    if (ds.dtype() == data::TokenDtype::kUint8) {
      for (std::int64_t t : tokens) FUZZ_CHECK(t >= 0 && t <= 255, "uint8 token out of range");
    }
  }
  const std::vector<std::int64_t> docs = ds.document_index();
  for (std::size_t j = 0; j < docs.size(); ++j) {
    FUZZ_CHECK(docs[j] >= 0 && docs[j] <= ds.size() && (j == 0 || docs[j] >= docs[j - 1]),
               "document index entry " + std::to_string(j) + " escaped validation");
  }
  FUZZ_CHECK(!ds.describe().empty(), "empty description");
  return 0;
}
