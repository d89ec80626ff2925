// Seeded synthetic workloads shaped like a long-context training mix, so that
// the README, the tests and the benchmarks run without any data files.
#pragma once

#include <cstdint>
#include <vector>

namespace fulcrum {

// Document lengths drawn from a heavy-tailed mixture (many short documents,
// a few very long ones, as in published long-context mixes); every length in
// [1, max_length]. Deterministic for a given seed on every platform.
std::vector<std::int64_t> synthetic_document_lengths(std::int64_t count, std::uint64_t seed,
                                                     std::int64_t max_length = 131072);

// Packs documents (in order, cycling through `docs`, starting at a seeded
// offset) into one row of exactly `row_tokens` tokens; the last document is cut
// to fit. Returns the row's document lengths.
std::vector<std::int64_t> pack_row(const std::vector<std::int64_t>& docs, std::int64_t row_tokens,
                                   std::uint64_t seed);

// Shorthand: one packed row of synthetic documents.
std::vector<std::int64_t> synthetic_packed_row(std::int64_t row_tokens, std::uint64_t seed);

}  // namespace fulcrum
