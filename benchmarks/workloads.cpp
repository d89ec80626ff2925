#include "workloads.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "fulcrum/core/synthetic.h"

namespace fulcrum::bench {
namespace {

namespace fs = std::filesystem;

std::vector<std::int64_t> read_lengths(const fs::path& file) {
  std::ifstream in(file);
  const auto doc = nlohmann::json::parse(in);
  std::vector<std::int64_t> out;
  out.reserve(doc.size());
  for (const auto& v : doc) {
    const auto x = v.get<std::int64_t>();
    if (x < 1) throw std::runtime_error(file.string() + ": non-positive length");
    out.push_back(x);
  }
  return out;
}

std::vector<LengthSet> load(const std::vector<std::string>& names, std::string& source,
                            std::int64_t synthetic_max) {
  const std::string dir = find_workload_dir();
  std::vector<LengthSet> sets;
  if (!dir.empty()) {
    for (const auto& name : names) {
      const fs::path file = fs::path(dir) / (name + ".json");
      if (fs::exists(file)) sets.push_back({name, read_lengths(file)});
    }
  }
  if (!sets.empty()) {
    source = "workloads: " + dir;
    return sets;
  }
  source = "workloads: ../shared/workloads not found; using fulcrum's synthetic mix (seed 1)";
  sets.push_back({"synthetic", synthetic_document_lengths(50000, 1, synthetic_max)});
  return sets;
}

}  // namespace

std::string find_workload_dir() {
  if (const char* env = std::getenv("FULCRUM_WORKLOADS"); env != nullptr && *env != '\0') {
    return fs::is_directory(env) ? std::string(env) : std::string();
  }
  fs::path up = "..";
  for (int level = 0; level < 4; ++level, up /= "..") {
    const fs::path candidate = fs::current_path() / up / "shared" / "workloads";
    if (fs::is_directory(candidate)) return fs::weakly_canonical(candidate).string();
  }
  return {};
}

std::vector<LengthSet> document_mixes(std::string& source) {
  return load({"dist_wlbllm", "dist_prolong"}, source, 131072);
}

std::vector<LengthSet> request_traces(std::string& source) {
  return load({"azure2023_conv_total_tokens", "azure2023_code_total_tokens"}, source, 16384);
}

std::vector<std::vector<std::int64_t>> packed_rows(const std::vector<std::int64_t>& docs,
                                                   std::int64_t row_tokens, int num_rows,
                                                   std::uint64_t seed) {
  std::vector<std::int64_t> order = docs;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<std::int64_t>> rows;
  std::vector<std::int64_t> row;
  std::int64_t room = row_tokens;
  std::size_t next = 0;
  std::int64_t carry = 0;  // the unplaced rest of a document split across rows
  while (static_cast<int>(rows.size()) < num_rows) {
    std::int64_t doc = carry > 0 ? carry : order[next++ % order.size()];
    carry = 0;
    if (doc > room) {
      carry = doc - room;
      doc = room;
    }
    row.push_back(doc);
    room -= doc;
    if (room == 0) {
      rows.push_back(std::move(row));
      row.clear();
      room = row_tokens;
    }
  }
  return rows;
}

std::vector<std::int64_t> draw_batch(const std::vector<std::int64_t>& pool, std::int64_t tokens,
                                     std::mt19937_64& rng) {
  std::vector<std::int64_t> batch;
  std::int64_t sum = 0;
  while (sum < tokens) {
    batch.push_back(pool[rng() % pool.size()]);
    sum += batch.back();
  }
  return batch;
}

}  // namespace fulcrum::bench
