// Megatron's indexed dataset (MMIDIDX): a .bin of token ids back to back and
// an .idx describing where each sequence lies. Both are memory-mapped; the
// whole .idx is validated on open, so a corrupt pair is refused up front with
// the file, the byte offset and what was expected, never read past its end.
//
// .idx layout, little-endian:
//   offset 0   char[9]  magic "MMIDIDX\0\0"
//   offset 9   u64      version, 1
//   offset 17  u8       dtype code of the .bin tokens (see TokenDtype)
//   offset 18  u64      S, sequence count
//   offset 26  u64      D, document-index count
//   offset 34  i32[S]   sizes: tokens per sequence
//   +4S        i64[S]   pointers: byte offset of each sequence in the .bin
//   +12S       i64[D]   doc_idx: sequence index where each document starts,
//                       non-decreasing, within [0, S] (the last is usually S)
// and nothing after. A sample of this dataset is one sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/mapped_file.h"
#include "data/token_dataset.h"
#include "fulcrum/status.h"

namespace fulcrum::data {

enum class TokenDtype : std::uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};

// Bytes per token; 0 for a code outside the table.
std::size_t dtype_size(TokenDtype dtype);
const char* dtype_name(TokenDtype dtype);

inline constexpr std::size_t kIndexHeaderBytes = 34;

class IndexedDataset final : public TokenDataset {
 public:
  // `path` is the Megatron prefix ("data/wiki_text_document") or either file
  // of the pair; the other is found beside it.
  static Result<IndexedDataset> open(const std::string& path);

  std::int64_t size() const override { return num_sequences_; }
  std::int64_t length(std::int64_t i) const override;
  std::vector<std::int64_t> tokens(std::int64_t i) const override;
  std::string describe() const override;

  TokenDtype dtype() const { return dtype_; }
  // The document index (D entries) as stored.
  std::vector<std::int64_t> document_index() const;
  const std::string& idx_path() const { return idx_path_; }
  const std::string& bin_path() const { return bin_.path(); }

 private:
  IndexedDataset() = default;
  Status validate_sequences() const;
  Status validate_documents() const;
  Status validate_float_tokens() const;
  std::int64_t pointer(std::int64_t i) const;

  // The whole .idx, read when opened: the loader reads sizes and pointers
  // every step, and a copy cannot fault if the file shrinks under the job
  // (12 bytes per sequence and 8 per document entry).
  std::string idx_path_;
  std::vector<std::byte> index_;
  // Mapped for the checks made when opened; tokens() reads it with
  // MappedFile::read_at, which notices a file that changed since.
  MappedFile bin_;
  TokenDtype dtype_ = TokenDtype::kInt32;
  std::int64_t num_sequences_ = 0;
  std::int64_t num_documents_ = 0;
};

}  // namespace fulcrum::data
