// What the loader tests share: a dataset whose tokens name their sample and
// offset, the options and plugin they start from, and the exactly-once check
// of one epoch over every DP rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/loader.h"
#include "fulcrum/host/plugin_loader.h"
#include "tests/test_support.h"

#ifndef FULCRUM_PLUGIN_PATH
#error "FULCRUM_PLUGIN_PATH must name the built libfulcrum_balancer.so"
#endif

namespace fulcrum::data::loader_testing {

// Token t of sample s is 1000 * s + t: any row content can be traced back.
class TracedDataset final : public TokenDataset {
 public:
  explicit TracedDataset(std::vector<std::int64_t> lengths) : lengths_(std::move(lengths)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t length(std::int64_t i) const override {
    return lengths_[static_cast<std::size_t>(i)];
  }
  std::vector<std::int64_t> tokens(std::int64_t i) const override {
    std::vector<std::int64_t> out(static_cast<std::size_t>(length(i)));
    std::iota(out.begin(), out.end(), 1000 * i);
    return out;
  }
  std::string describe() const override { return "traced dataset"; }

 private:
  std::vector<std::int64_t> lengths_;
};

// Lengths with short, long (> seq_length 16, and > 2 x 16), exactly-seq and
// empty samples.
inline const std::vector<std::int64_t> kLengths = {5,  40, 16, 1, 0,  3, 17, 9,  2,  31, 8, 0,
                                                   12, 6,  15, 4, 33, 7, 1,  20, 11, 2,  16};

inline LoaderOptions base_options() {
  LoaderOptions o;
  o.global_batch_size = 5;  // does not divide the 21 non-empty samples
  o.micro_batch_size = 2;
  o.seq_length = 16;
  o.seed = 1234;
  return o;
}

inline std::shared_ptr<LoadBalancer> real_plugin() {
  host::LoaderOptions lo;
  lo.check_permissions = false;  // the build tree's mode depends on the umask
  lo.log = [](host::LogLevel, const std::string&) {};
  auto plugin = host::load_plugin(FULCRUM_PLUGIN_PATH, lo);
  EXPECT_TRUE(plugin) << plugin.status().message();
  return plugin ? *plugin : nullptr;
}

// Checks one row's internal consistency against the dataset.
inline void check_row(const PackedRow& row, const TokenDataset& ds, const LoaderOptions& o) {
  const auto n = static_cast<std::size_t>(row.size());
  ASSERT_EQ(row.labels.size(), n);
  ASSERT_EQ(row.loss_mask.size(), n);
  ASSERT_EQ(row.positions.size(), n);
  ASSERT_EQ(row.document_ids.size(), n);
  ASSERT_GT(n, 0u);
  if (o.packing) {
    ASSERT_EQ(row.size(), o.seq_length);
  } else {
    ASSERT_LE(row.size(), o.seq_length);
    ASSERT_EQ(row.padding, 0);
    ASSERT_EQ(row.pieces.size(), 1u);
  }
  EXPECT_EQ(std::accumulate(row.doc_lengths.begin(), row.doc_lengths.end(), std::int64_t{0}),
            row.size());
  ASSERT_EQ(row.doc_lengths.size(), row.pieces.size() + (row.padding > 0 ? 1 : 0));

  std::size_t t = 0;
  for (std::size_t p = 0; p < row.pieces.size(); ++p) {
    const TokenRange& piece = row.pieces[p];
    ASSERT_LT(piece.begin, piece.end);
    ASSERT_EQ(row.doc_lengths[p], piece.end - piece.begin);
    const auto toks = ds.tokens(piece.sample);
    const auto len = static_cast<std::int64_t>(toks.size());
    // Cut only at multiples of seq_length within the sample.
    ASSERT_EQ(piece.begin % o.seq_length, 0) << "sample " << piece.sample;
    ASSERT_EQ(piece.end, std::min(len, piece.begin + o.seq_length)) << "sample " << piece.sample;
    for (std::int64_t k = piece.begin; k < piece.end; ++k, ++t) {
      const auto uk = static_cast<std::size_t>(k);
      ASSERT_EQ(row.tokens[t], toks[uk]);
      ASSERT_EQ(row.document_ids[t], piece.sample);
      ASSERT_EQ(row.positions[t], k) << "positions continue across a cut";
      // Every token whose next token is in the sample keeps label and loss.
      const bool has_next = k + 1 < len;
      ASSERT_EQ(row.loss_mask[t], has_next ? 1 : 0);
      ASSERT_EQ(row.labels[t], has_next ? toks[uk + 1] : o.pad_token);
    }
  }
  ASSERT_EQ(static_cast<std::int64_t>(n - t), row.padding);
  for (std::int64_t k = 0; t < n; ++t, ++k) {
    ASSERT_EQ(row.document_ids[t], kPadDocument);
    ASSERT_EQ(row.loss_mask[t], 0);
    ASSERT_EQ(row.tokens[t], o.pad_token);
    ASSERT_EQ(row.positions[t], k);
  }
}

// Runs one epoch on every DP rank and checks everything the loader promises.
inline void check_epoch(const TokenDataset& ds, LoadBalancer& balancer, LoaderOptions o) {
  SCOPED_TRACE("dp_size " + std::to_string(o.dp_size) + ", packing " + std::to_string(o.packing) +
               ", strategy " + o.dp_strategy);
  std::vector<DataLoader> loaders;
  for (std::int32_t r = 0; r < o.dp_size; ++r) {
    o.dp_rank = r;
    auto loader = DataLoader::create(ds, balancer, o);
    ASSERT_TRUE(loader) << loader.status().message();
    loaders.push_back(std::move(loader).value());
  }
  // seen[s][k]: how often token k of sample s was served.
  std::vector<std::vector<int>> seen(static_cast<std::size_t>(ds.size()));
  for (std::int64_t s = 0; s < ds.size(); ++s) {
    seen[static_cast<std::size_t>(s)].assign(static_cast<std::size_t>(ds.length(s)), 0);
  }
  std::int64_t steps = 0;
  for (;;) {
    std::vector<StepBatch> batches;
    for (DataLoader& l : loaders) {
      auto b = l.next_step();
      if (b) batches.push_back(std::move(*b));
    }
    if (batches.empty()) break;
    ASSERT_EQ(batches.size(), loaders.size()) << "ranks disagree on the end of the epoch";
    ++steps;
    const StepBatch& first = batches.front();
    std::vector<std::int64_t> union_of_ranks;
    for (std::size_t r = 0; r < batches.size(); ++r) {
      const StepBatch& b = batches[r];
      // Replicated decisions: identical on every rank.
      ASSERT_EQ(b.position, first.position);
      ASSERT_EQ(b.global_samples, first.global_samples);
      ASSERT_EQ(b.stats.rank_cost, first.stats.rank_cost);
      ASSERT_EQ(b.stats.strategy, first.stats.strategy);
      EXPECT_TRUE(b.stats.fallback_reason.empty()) << b.stats.fallback_reason;
      ASSERT_EQ(b.stats.rank_samples[r], static_cast<std::int64_t>(b.samples.size()));
      union_of_ranks.insert(union_of_ranks.end(), b.samples.begin(), b.samples.end());

      std::vector<std::int64_t> pieces_samples;
      std::vector<std::int64_t> row_padding, row_first_piece;
      std::int64_t tokens = 0;
      for (std::size_t m = 0; m < b.micro_batches.size(); ++m) {
        const auto& rows = b.micro_batches[m].rows;
        ASSERT_FALSE(rows.empty());
        if (m + 1 < b.micro_batches.size()) {
          ASSERT_EQ(static_cast<std::int64_t>(rows.size()), o.micro_batch_size);
        }
        ASSERT_LE(static_cast<std::int64_t>(rows.size()), o.micro_batch_size);
        for (const PackedRow& row : rows) {
          check_row(row, ds, o);
          row_padding.push_back(row.padding);
          row_first_piece.push_back(row.pieces.front().end - row.pieces.front().begin);
          for (const TokenRange& piece : row.pieces) {
            if (piece.begin == 0) pieces_samples.push_back(piece.sample);
            for (std::int64_t k = piece.begin; k < piece.end; ++k) {
              ++seen[static_cast<std::size_t>(piece.sample)][static_cast<std::size_t>(k)];
            }
            tokens += piece.end - piece.begin;
          }
        }
      }
      // A row is opened only for a piece that fits in no earlier row.
      for (std::size_t j = 0; o.packing && j < row_padding.size(); ++j) {
        for (std::size_t i = 0; i < j; ++i) {
          ASSERT_LT(row_padding[i], row_first_piece[j])
              << "row " << j << " opened for a piece that fits in row " << i;
        }
      }
      std::vector<std::int64_t> expected_samples = b.samples;
      std::sort(expected_samples.begin(), expected_samples.end());
      std::sort(pieces_samples.begin(), pieces_samples.end());
      ASSERT_EQ(pieces_samples, expected_samples) << "rows hold the rank's samples";
      ASSERT_EQ(tokens, b.tokens);
      ASSERT_EQ(tokens, b.stats.rank_tokens[r]);
    }
    std::sort(union_of_ranks.begin(), union_of_ranks.end());
    std::vector<std::int64_t> global = first.global_samples;
    std::sort(global.begin(), global.end());
    ASSERT_EQ(union_of_ranks, global) << "the ranks' shares partition the global batch";
    ASSERT_LE(static_cast<std::int64_t>(global.size()), o.global_batch_size);
  }
  EXPECT_EQ(steps, loaders.front().steps_per_epoch());
  for (std::size_t s = 0; s < seen.size(); ++s) {
    for (std::size_t k = 0; k < seen[s].size(); ++k) {
      ASSERT_EQ(seen[s][k], 1) << "token " << k << " of sample " << s;
    }
  }
}

inline std::vector<std::vector<std::int64_t>> all_samples(DataLoader& loader) {
  std::vector<std::vector<std::int64_t>> out;
  while (auto step = loader.next_step()) out.push_back(step->samples);
  return out;
}

}  // namespace fulcrum::data::loader_testing
