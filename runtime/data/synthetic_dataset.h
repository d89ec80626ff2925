// Samples with seeded random tokens, for runs and tests without data files.
// Lengths come from a JSON lengths file (a JSON list of positive integers,
// such as ../shared/workloads/*.json) or, without one, from
// fulcrum::synthetic_document_lengths. Sample i's tokens depend only on
// (seed, i), so any sample can be read in any order, on any rank, with the
// same result on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "fulcrum/status.h"

namespace fulcrum::data {

struct SyntheticOptions {
  std::string lengths_file;          // empty: synthetic lengths
  std::int64_t num_samples = 0;      // with a file: 0 = all of it, else its first num_samples
  std::uint64_t seed = 0;            // lengths (without a file) and tokens
  std::int64_t max_length = 131072;  // without a file: lengths in [1, max_length]
  std::int64_t vocab_size = 50257;   // tokens in [0, vocab_size)
};

class SyntheticDataset final : public TokenDataset {
 public:
  static Result<SyntheticDataset> create(const SyntheticOptions& options);
  // Explicit lengths (each >= 0), e.g. for tests.
  static Result<SyntheticDataset> from_lengths(std::vector<std::int64_t> lengths,
                                               std::uint64_t seed, std::int64_t vocab_size);

  std::int64_t size() const override { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t length(std::int64_t i) const override {
    return lengths_[static_cast<std::size_t>(i)];
  }
  std::vector<std::int64_t> tokens(std::int64_t i) const override;
  std::string describe() const override;

 private:
  SyntheticDataset() = default;

  std::vector<std::int64_t> lengths_;
  std::uint64_t seed_ = 0;
  std::int64_t vocab_size_ = 1;
  std::string source_;
};

// Reads a JSON list of positive integers; errors name the file and the
// offending element.
Result<std::vector<std::int64_t>> read_lengths_file(const std::string& path);

}  // namespace fulcrum::data
