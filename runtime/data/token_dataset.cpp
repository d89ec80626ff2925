#include "data/token_dataset.h"

#include <memory>
#include <string>

#include "data/indexed_dataset.h"
#include "data/jsonl_dataset.h"

namespace fulcrum::data {

Result<std::unique_ptr<TokenDataset>> open_token_dataset(const std::string& path) {
  const bool jsonl = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  if (jsonl) {
    auto ds = JsonlDataset::open(path);
    if (!ds) return ds.status();
    return std::unique_ptr<TokenDataset>(std::make_unique<JsonlDataset>(std::move(ds).value()));
  }
  auto ds = IndexedDataset::open(path);
  if (!ds) return ds.status();
  return std::unique_ptr<TokenDataset>(std::make_unique<IndexedDataset>(std::move(ds).value()));
}

}  // namespace fulcrum::data
