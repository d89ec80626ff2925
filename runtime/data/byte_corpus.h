// Turning text into a byte-level Megatron indexed dataset (MMIDIDX, the
// layout indexed_dataset.h reads): every byte of a document is one token
// (vocabulary 256, dtype uint8), one sequence per document, no end-of-document
// token (the loader keeps document boundaries itself, so attention and labels
// never cross them). Byte tokens need no tokenizer and no download, and any
// input is valid: UTF-8, Latin-1 or binary are all just bytes. No LibTorch;
// `fulcrum preprocess` is the command line over it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/status.h"

namespace fulcrum::data {

inline constexpr std::int64_t kByteVocabulary = 256;

// How plain text is cut into documents.
struct TextSplit {
  enum class Kind {
    kBlankLine,  // one or more blank (empty or whitespace-only) lines end a document
    kFile,       // the whole file is one document
    kLine,       // a line equal to `separator` (a trailing '\r' ignored) ends one
  };
  Kind kind = Kind::kBlankLine;
  std::string separator;  // kLine only
};

// The documents of `text`, views into it. A document keeps its lines'
// newlines, except the newline before a separator line; separator lines belong
// to no document. Documents of whitespace only are dropped and counted in
// `*dropped` when given.
std::vector<std::string_view> split_text(std::string_view text, const TextSplit& split,
                                         std::int64_t* dropped = nullptr);

// Writes PREFIX.bin and PREFIX.idx, each through a temporary file in the same
// directory renamed over the final name (.bin first, .idx last, so an .idx
// that exists always describes a complete .bin). Feed documents with add(),
// then commit(); a writer destroyed without commit() removes its temporary
// files and leaves any earlier PREFIX.bin/.idx as they were. A writer holds an
// exclusive flock on the output directory from create() to commit(): a second
// writer into the same directory is refused, so two jobs can never pair one's
// .bin with the other's .idx.
class ByteDatasetWriter {
 public:
  static Result<ByteDatasetWriter> create(const std::string& prefix);
  ByteDatasetWriter(ByteDatasetWriter&& other) noexcept;
  ByteDatasetWriter& operator=(ByteDatasetWriter&&) = delete;
  ByteDatasetWriter(const ByteDatasetWriter&) = delete;
  ByteDatasetWriter& operator=(const ByteDatasetWriter&) = delete;
  ~ByteDatasetWriter();

  // One document of 1 to INT32_MAX bytes.
  Status add(std::string_view document);
  Status commit();

  std::int64_t documents() const { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t bytes() const { return bytes_; }

 private:
  ByteDatasetWriter() = default;
  void abandon();

  std::string prefix_;
  std::string bin_tmp_;
  std::string idx_tmp_;
  int bin_fd_ = -1;
  int dir_lock_fd_ = -1;
  std::vector<std::int32_t> lengths_;
  std::int64_t bytes_ = 0;
  bool committed_ = false;
};

}  // namespace fulcrum::data
