// What the data loader reads from: a random-access collection of samples,
// each a sequence of token ids. Implementations: IndexedDataset (Megatron
// .idx/.bin), JsonlDataset, SyntheticDataset.
//
// Implementations validate everything when they open, so reading afterwards
// fails only when a file changes under the job (DatasetChanged); asking for
// an index outside [0, size()) is a programming error.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fulcrum/status.h"

namespace fulcrum::data {

// Thrown by tokens() when a dataset file was truncated or rewritten after it
// was opened: bad input found while training. The message is one line that
// names the file and says what to do.
class DatasetChanged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;

  // Number of samples.
  virtual std::int64_t size() const = 0;
  // Tokens in sample i (may be 0); cheap, called for every sample of every
  // global batch on every rank.
  virtual std::int64_t length(std::int64_t i) const = 0;
  // The token ids of sample i; only called for the samples a rank trains on.
  virtual std::vector<std::int64_t> tokens(std::int64_t i) const = 0;
  // One line for logs: the kind and where it came from.
  virtual std::string describe() const = 0;
};

// Opens a dataset by path: "X.jsonl" is JSONL; "X.idx", "X.bin" or the
// Megatron prefix "X" (with X.idx and X.bin beside it) is an indexed dataset.
Result<std::unique_ptr<TokenDataset>> open_token_dataset(const std::string& path);

}  // namespace fulcrum::data
