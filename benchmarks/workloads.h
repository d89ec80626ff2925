// Length distributions for benchmarks: the real mixes in ../shared/workloads
// when that folder exists, otherwise fulcrum's seeded synthetic mix. Every
// benchmark prints which it used.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace fulcrum::bench {

struct LengthSet {
  std::string name;                   // "dist_wlbllm", ..., or "synthetic"
  std::vector<std::int64_t> lengths;  // positive token counts
};

// The directory holding the shared workloads: $FULCRUM_WORKLOADS if set, else
// the first of ../shared/workloads, ../../shared/workloads, ... (up to four
// levels above the working directory) that exists; "" when none does.
std::string find_workload_dir();

// The document-length mixes (dist_wlbllm, dist_prolong) when found, else one
// synthetic set. `source` receives a line saying where they came from.
std::vector<LengthSet> document_mixes(std::string& source);

// The request-length traces (azure2023_*) when found, else a synthetic set.
std::vector<LengthSet> request_traces(std::string& source);

// Rows of `row_tokens` packed from `docs` after a seeded shuffle; a document
// longer than the room left is split across rows.
std::vector<std::vector<std::int64_t>> packed_rows(const std::vector<std::int64_t>& docs,
                                                   std::int64_t row_tokens, int num_rows,
                                                   std::uint64_t seed);

// A global batch drawn with replacement from `pool` until it holds at least
// `tokens` tokens.
std::vector<std::int64_t> draw_batch(const std::vector<std::int64_t>& pool, std::int64_t tokens,
                                     std::mt19937_64& rng);

}  // namespace fulcrum::bench
