// Token files in JSON Lines: each line is one sample, a JSON list of
// non-negative integer token ids, e.g. [464, 2068, 7586, 21831]. Blank lines
// are skipped (an editor's trailing newline is not a sample); everything else
// is checked on open and a bad line is refused as FILE:LINE[:COLUMN].
// The whole file is read into memory: meant for tests and small corpora;
// large ones belong in the indexed format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "fulcrum/status.h"

namespace fulcrum::data {

class JsonlDataset final : public TokenDataset {
 public:
  static Result<JsonlDataset> open(const std::string& path);

  std::int64_t size() const override { return static_cast<std::int64_t>(offsets_.size()) - 1; }
  std::int64_t length(std::int64_t i) const override;
  std::vector<std::int64_t> tokens(std::int64_t i) const override;
  std::string describe() const override;

 private:
  JsonlDataset() = default;

  std::string path_;
  std::vector<std::int64_t> tokens_;        // every sample, back to back
  std::vector<std::size_t> offsets_ = {0};  // sample i is tokens_[offsets_[i], offsets_[i+1])
};

}  // namespace fulcrum::data
