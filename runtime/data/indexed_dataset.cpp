#include "data/indexed_dataset.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "fulcrum/core/bytes.h"

namespace fulcrum::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kVersion = 1;
constexpr std::size_t kVersionOffset = 9;
constexpr std::size_t kDtypeOffset = 17;
constexpr std::size_t kSequenceCountOffset = 18;
constexpr std::size_t kDocumentCountOffset = 26;

std::string hex_bytes(const std::byte* p, std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out.push_back(' ');
    const auto b = static_cast<unsigned>(p[i]);
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

Status corrupt(const std::string& file, std::uint64_t offset, const std::string& what) {
  return invalid_argument(file + ": byte offset " + std::to_string(offset) + ": " + what);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads one token of `dtype` at p as an int64 (float values were checked to
// be whole numbers in range when the dataset was opened).
std::int64_t load_token(TokenDtype dtype, const std::byte* p) {
  switch (dtype) {
    case TokenDtype::kUint8:
      return load_le<std::uint8_t>(p);
    case TokenDtype::kInt8:
      return load_le<std::int8_t>(p);
    case TokenDtype::kInt16:
      return load_le<std::int16_t>(p);
    case TokenDtype::kInt32:
      return load_le<std::int32_t>(p);
    case TokenDtype::kInt64:
      return load_le<std::int64_t>(p);
    case TokenDtype::kFloat64:
      return static_cast<std::int64_t>(load_le<double>(p));
    case TokenDtype::kFloat32:
      return static_cast<std::int64_t>(load_le<float>(p));
    case TokenDtype::kUint16:
      return load_le<std::uint16_t>(p);
  }
  return 0;
}

}  // namespace

std::size_t dtype_size(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8:
    case TokenDtype::kInt8:
      return 1;
    case TokenDtype::kInt16:
    case TokenDtype::kUint16:
      return 2;
    case TokenDtype::kInt32:
    case TokenDtype::kFloat32:
      return 4;
    case TokenDtype::kInt64:
    case TokenDtype::kFloat64:
      return 8;
  }
  return 0;
}

const char* dtype_name(TokenDtype dtype) {
  switch (dtype) {
    case TokenDtype::kUint8:
      return "uint8";
    case TokenDtype::kInt8:
      return "int8";
    case TokenDtype::kInt16:
      return "int16";
    case TokenDtype::kInt32:
      return "int32";
    case TokenDtype::kInt64:
      return "int64";
    case TokenDtype::kFloat64:
      return "float64";
    case TokenDtype::kFloat32:
      return "float32";
    case TokenDtype::kUint16:
      return "uint16";
  }
  return "unknown";
}

Result<IndexedDataset> IndexedDataset::open(const std::string& path) {
  std::string prefix = path;
  if (ends_with(prefix, ".idx") || ends_with(prefix, ".bin")) prefix.resize(prefix.size() - 4);
  const std::string idx_path = prefix + ".idx";
  const std::string bin_path = prefix + ".bin";

  IndexedDataset ds;
  {
    auto idx = MappedFile::open(idx_path);
    if (!idx) return idx.status();
    ds.idx_path_ = idx_path;
    ds.index_.assign(idx->data(), idx->data() + idx->size());
  }
  auto bin = MappedFile::open(bin_path);
  if (!bin) return bin.status();
  ds.bin_ = std::move(bin).value();

  const std::byte* p = ds.index_.data();
  const std::size_t size = ds.index_.size();
  if (size < sizeof kMagic || std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    return corrupt(idx_path, 0,
                   "expected the magic \"MMIDIDX\\0\\0\" (" +
                       hex_bytes(reinterpret_cast<const std::byte*>(kMagic), sizeof kMagic) +
                       "), found " +
                       (size == 0 ? std::string("an empty file")
                                  : hex_bytes(p, std::min(size, sizeof kMagic))) +
                       "; this is not a Megatron indexed dataset (.idx)");
  }
  if (size < kIndexHeaderBytes) {
    return corrupt(idx_path, size,
                   "file ends inside the " + std::to_string(kIndexHeaderBytes) +
                       "-byte header; expected version, dtype and counts (truncated file)");
  }
  const auto version = load_le<std::uint64_t>(p + kVersionOffset);
  if (version != kVersion) {
    return corrupt(idx_path, kVersionOffset,
                   "unsupported version " + std::to_string(version) + ", expected " +
                       std::to_string(kVersion) + "; rebuild the dataset with Megatron's tools");
  }
  const auto code = static_cast<std::uint8_t>(p[kDtypeOffset]);
  ds.dtype_ = static_cast<TokenDtype>(code);
  if (dtype_size(ds.dtype_) == 0) {
    return corrupt(idx_path, kDtypeOffset,
                   "unknown dtype code " + std::to_string(code) +
                       ", expected 1..8 (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, "
                       "7 float32, 8 uint16)");
  }
  const auto sequences = load_le<std::uint64_t>(p + kSequenceCountOffset);
  const auto documents = load_le<std::uint64_t>(p + kDocumentCountOffset);
  // 12 bytes per sequence and 8 per document entry; counts this large cannot
  // fit any file, and checking first keeps the sum below from overflowing.
  constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 56;
  const bool impossible = sequences > kMaxCount || documents > kMaxCount;
  const std::uint64_t expected =
      impossible ? 0 : kIndexHeaderBytes + 12 * sequences + 8 * documents;
  if (impossible || size < expected) {
    return corrupt(idx_path, size,
                   "file ends here, but its header counts " + std::to_string(sequences) +
                       " sequences and " + std::to_string(documents) +
                       " document entries, which need " +
                       (impossible ? std::string("more bytes than any file holds")
                                   : std::to_string(expected) + " bytes") +
                       " (truncated file or corrupt header)");
  }
  if (size > expected) {
    return corrupt(idx_path, expected,
                   std::to_string(size - expected) +
                       " bytes follow the document index, expected end of file "
                       "(corrupt header counts or a concatenated file)");
  }
  ds.num_sequences_ = static_cast<std::int64_t>(sequences);
  ds.num_documents_ = static_cast<std::int64_t>(documents);
  if (Status s = ds.validate_sequences(); !s) return s;
  if (Status s = ds.validate_documents(); !s) return s;
  if (Status s = ds.validate_float_tokens(); !s) return s;
  return ds;
}

std::int64_t IndexedDataset::length(std::int64_t i) const {
  return load_le<std::int32_t>(index_.data() + kIndexHeaderBytes + 4 * static_cast<std::size_t>(i));
}

std::int64_t IndexedDataset::pointer(std::int64_t i) const {
  return load_le<std::int64_t>(index_.data() + kIndexHeaderBytes +
                               4 * static_cast<std::size_t>(num_sequences_) +
                               8 * static_cast<std::size_t>(i));
}

std::vector<std::int64_t> IndexedDataset::tokens(std::int64_t i) const {
  const auto n = static_cast<std::size_t>(length(i));
  const std::size_t item = dtype_size(dtype_);
  std::vector<std::byte> raw(n * item);
  if (Status s = bin_.read_at(static_cast<std::uint64_t>(pointer(i)), raw.size(), raw.data()); !s) {
    throw DatasetChanged(s.message());
  }
  std::vector<std::int64_t> out(n);
  for (std::size_t j = 0; j < n; ++j) out[j] = load_token(dtype_, raw.data() + j * item);
  return out;
}

std::vector<std::int64_t> IndexedDataset::document_index() const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(num_documents_));
  const std::byte* p =
      index_.data() + kIndexHeaderBytes + 12 * static_cast<std::size_t>(num_sequences_);
  for (std::size_t j = 0; j < out.size(); ++j) out[j] = load_le<std::int64_t>(p + 8 * j);
  return out;
}

std::string IndexedDataset::describe() const {
  std::string prefix = idx_path_;
  prefix.resize(prefix.size() - 4);
  return "indexed dataset " + prefix + " (" + std::to_string(num_sequences_) + " sequences, " +
         dtype_name(dtype_) + " tokens)";
}

Status IndexedDataset::validate_sequences() const {
  const std::size_t item = dtype_size(dtype_);
  const auto bin_size = static_cast<std::int64_t>(bin_.size());
  const std::uint64_t sizes_at = kIndexHeaderBytes;
  const std::uint64_t pointers_at = sizes_at + 4 * static_cast<std::uint64_t>(num_sequences_);
  for (std::int64_t i = 0; i < num_sequences_; ++i) {
    const std::int64_t n = length(i);
    const std::uint64_t size_offset = sizes_at + 4 * static_cast<std::uint64_t>(i);
    if (n < 0) {
      return corrupt(idx_path_, size_offset,
                     "sequence " + std::to_string(i) + " has size " + std::to_string(n) +
                         ", expected a token count >= 0");
    }
    const std::int64_t start = pointer(i);
    const std::uint64_t pointer_offset = pointers_at + 8 * static_cast<std::uint64_t>(i);
    const std::int64_t bytes = n * static_cast<std::int64_t>(item);
    if (start < 0 || start > bin_size || bytes > bin_size - start) {
      return corrupt(idx_path_, pointer_offset,
                     "sequence " + std::to_string(i) + " (" + std::to_string(n) + " " +
                         dtype_name(dtype_) + " tokens at pointer " + std::to_string(start) +
                         ") runs past the end of " + bin_.path() + " (" + std::to_string(bin_size) +
                         " bytes); expected it to end within the file (mismatched or truncated "
                         ".bin)");
    }
  }
  return Status::ok();
}

Status IndexedDataset::validate_documents() const {
  const std::uint64_t docs_at = kIndexHeaderBytes + 12 * static_cast<std::uint64_t>(num_sequences_);
  std::int64_t previous = 0;
  for (std::int64_t j = 0; j < num_documents_; ++j) {
    const std::uint64_t offset = docs_at + 8 * static_cast<std::uint64_t>(j);
    const auto entry = load_le<std::int64_t>(index_.data() + offset);
    if (entry < previous || entry > num_sequences_) {
      return corrupt(idx_path_, offset,
                     "document index entry " + std::to_string(j) + " is " + std::to_string(entry) +
                         ", expected a sequence index in [" + std::to_string(previous) + ", " +
                         std::to_string(num_sequences_) +
                         "] (non-decreasing, at most the sequence count)");
    }
    previous = entry;
  }
  return Status::ok();
}

// Float token files exist in the format's dtype table; a token id must still
// be a whole number, so a fractional or non-finite value is corruption.
Status IndexedDataset::validate_float_tokens() const {
  if (dtype_ != TokenDtype::kFloat32 && dtype_ != TokenDtype::kFloat64) return Status::ok();
  const std::size_t item = dtype_size(dtype_);
  // 2^63 is exactly representable in both float types; int64 holds [-2^63, 2^63).
  constexpr double kLimit = 9223372036854775808.0;
  for (std::int64_t i = 0; i < num_sequences_; ++i) {
    const std::int64_t n = length(i);
    const std::int64_t start = pointer(i);
    for (std::int64_t j = 0; j < n; ++j) {
      const std::size_t offset =
          static_cast<std::size_t>(start) + static_cast<std::size_t>(j) * item;
      const double v = dtype_ == TokenDtype::kFloat32 ? load_le<float>(bin_.data() + offset)
                                                      : load_le<double>(bin_.data() + offset);
      if (!std::isfinite(v) || std::trunc(v) != v || v < -kLimit || v >= kLimit) {
        return corrupt(bin_.path(), offset,
                       "token " + std::to_string(j) + " of sequence " + std::to_string(i) + " is " +
                           std::to_string(v) +
                           ", expected a whole number in int64 range (a token id)");
      }
    }
  }
  return Status::ok();
}

}  // namespace fulcrum::data
