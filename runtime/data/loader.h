// The data loader: global batches from a seeded epoch order, split over the
// data-parallel ranks by the balancer's DP partition (the data-loader hook),
// and this rank's samples packed into rows with document boundaries.
//
// Every rank builds the same loader (same dataset, options and seed; only
// dp_rank differs) and computes the same permutation and the same partition
// from replicated inputs, so no communication is needed to agree on who
// trains on what. Across the ranks of a step, every token of every sample of
// the global batch appears in exactly one row: nothing is dropped (a long
// sample is split across rows) and the epoch's last, partial batch is served.
//
// Row layout (one row is one sequence the model sees):
//   tokens[t]       the token id, or pad_token in padding
//   labels[t]       the next token of the same document (pad_token where
//                   there is none: a document's last token, padding)
//   loss_mask[t]    1 where labels[t] is trained on: every token whose next
//                   token is in the same sample, wherever the sample was cut;
//                   0 on a sample's last token and on padding
//   positions[t]    position within the document, continuing across a cut:
//                   the second piece of a cut document starts where the
//                   first ended; padding counts 0, 1, 2... as a document of
//                   its own
//   document_ids[t] the sample id (dataset index), -1 in padding
//   doc_lengths     lengths of the row's pieces in order (cu_seqlens-style),
//                   padding INCLUDED as its own trailing piece, so that
//                   sum(doc_lengths) == row length: a CP workload built from
//                   it covers the whole row, and the padding piece attends
//                   only to itself
//   pieces          (sample, [begin, end)) of every document piece, in order,
//                   padding excluded: the exactly-once ledger
// A sample longer than seq_length is cut at multiples of seq_length within
// the sample, and nowhere else: what a piece attends to is the same on every
// layout. With packing, every row holds exactly seq_length tokens: whole
// pieces placed best-fit, longest first, then padding. Without packing, each
// piece is its own row at its own length; no padding.
//
// Samples of length 0 have nothing to train on and are left out of the
// epoch order (num_samples() counts the rest).
//
// With dp_window = w > 1 the loader forms the steps of each window of w
// consecutive global batches of the epoch order (fewer at the end of an
// epoch; a window never spans two) so that each step holds a like share of
// the window's long and short samples: its samples, longest first, are dealt
// to its steps in snake order, each step keeping its global batch's size. The
// rule reads the epoch order and the lengths alone, never the DP size, the DP
// strategy, the cost model or the layout: the
// window is part of the data order, and every layout and strategy trains
// the same steps (docs/PACKING.md). Each step is then partitioned over the
// DP ranks like any other. A window is a pure function of the position, so
// the position is the loader's whole state; window_state() records the
// window it was taken with so that a resume with another is refused.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/token_dataset.h"
#include "fulcrum/dp_types.h"
#include "fulcrum/load_balancer.h"
#include "fulcrum/status.h"

namespace fulcrum::data {

inline constexpr std::int64_t kPadDocument = -1;

struct LoaderOptions {
  std::int64_t global_batch_size = 1;  // samples per step, over all DP ranks
  std::int64_t micro_batch_size = 1;   // rows per micro-batch
  std::int64_t seq_length = 4096;      // tokens per row (a maximum without packing)
  bool packing = true;
  std::int32_t dp_size = 1;
  std::int32_t dp_rank = 0;
  std::uint64_t seed = 0;
  bool shuffle = true;  // false: dataset order every epoch
  // Epochs served before next_step() returns nullopt; nullopt = without end.
  std::optional<std::int64_t> num_epochs = 1;
  std::string dp_strategy = "round_robin";  // a DP strategy the balancer offers
  CostModel cost;                           // what the partition balances
  bool equal_count = false;                 // every rank gets floor or ceil of n/k samples
  // Global batches whose steps are formed together (balancer.dp.window).
  std::int32_t dp_window = 1;
  std::int64_t pad_token = 0;  // token (and label) id written in padding
};

// Where the loader stands: the next step it will serve. Saved with a
// checkpoint and restored with DataLoader::seek.
struct LoaderPosition {
  std::int64_t epoch = 0;
  std::int64_t step = 0;  // within the epoch
  auto operator<=>(const LoaderPosition&) const = default;
};

struct TokenRange {
  std::int64_t sample = 0;  // dataset index
  std::int64_t begin = 0;   // token offsets within the sample, [begin, end)
  std::int64_t end = 0;
  bool operator==(const TokenRange&) const = default;
};

struct PackedRow {
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> labels;
  std::vector<std::uint8_t> loss_mask;
  std::vector<std::int64_t> positions;
  std::vector<std::int64_t> document_ids;
  std::vector<std::int64_t> doc_lengths;
  std::vector<TokenRange> pieces;
  std::int64_t padding = 0;  // pad tokens at the end of the row

  std::int64_t size() const { return static_cast<std::int64_t>(tokens.size()); }
};

struct MicroBatch {
  std::vector<PackedRow> rows;  // micro_batch_size of them; the step's last may hold fewer
};

// The DP picture of one step: identical on every rank.
struct StepStats {
  std::string strategy;                   // the DP strategy whose partition was used
  std::string fallback_reason;            // set when the balancer's answer could not be used
  std::vector<double> rank_cost;          // per DP rank, under options.cost
  std::vector<std::int64_t> rank_tokens;  // per DP rank, before padding
  std::vector<std::int64_t> rank_samples;
  double imbalance = 1.0;    // max rank cost / mean rank cost
  double lower_bound = 0.0;  // no partition's max rank cost is below this
};

struct StepBatch {
  LoaderPosition position;  // of this step
  // The global batch: in epoch order; with dp_window > 1 the step's share of
  // its window, in epoch order.
  std::vector<std::int64_t> global_samples;
  std::vector<std::int64_t> samples;      // this rank's share, in packing order
  std::vector<MicroBatch> micro_batches;  // empty when this rank got no sample
  std::int64_t tokens = 0;                // this rank's tokens, padding excluded
  std::int64_t padding = 0;               // this rank's pad tokens
  StepStats stats;
};

class DataLoader {
 public:
  // Checks the options (sizes >= 1, dp_rank < dp_size, a strategy the
  // balancer offers) and that the dataset holds a non-empty sample. The
  // dataset and the balancer must outlive the loader.
  static Result<DataLoader> create(const TokenDataset& dataset, LoadBalancer& balancer,
                                   LoaderOptions options);

  // This rank's share of the next global batch, or nullopt after the last
  // epoch. Every rank gets a StepBatch for every step (possibly with no rows)
  // and nullopt at the same point.
  std::optional<StepBatch> next_step();

  LoaderPosition position() const { return position_; }
  // Continues from `position` (as position() returned it, e.g. from a
  // checkpoint). Refuses a step beyond the epoch.
  Status seek(LoaderPosition position);

  // With dp_window > 1: the window and the position it was taken at, as
  // bytes for a checkpoint (a window is a pure function of the position).
  // Empty with dp_window = 1.
  std::string window_state() const;
  // Restores window_state() bytes after seek() to the position saved with
  // them. Refuses, changing nothing, bytes of another window or batch size,
  // of another position, and malformed bytes.
  Status restore_window_state(std::string_view bytes);

  std::int64_t steps_per_epoch() const;
  std::int64_t num_samples() const { return static_cast<std::int64_t>(samples_.size()); }
  const LoaderOptions& options() const { return options_; }

  // The sample order of `epoch` (dataset indices): a pure function of
  // (seed, epoch, dataset lengths).
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;

 private:
  DataLoader(const TokenDataset& dataset, LoadBalancer& balancer, LoaderOptions options)
      : dataset_(&dataset), balancer_(&balancer), options_(std::move(options)) {}

  // Sample ids of each DP rank for one global batch, plus the stats.
  std::vector<std::vector<std::int64_t>> partition(const std::vector<std::int64_t>& batch,
                                                   StepStats& stats) const;
  // Per-rank cost, tokens and samples of a DP assignment (sample ids per
  // rank), its imbalance and the lower bound of the best one.
  void fill_rank_stats(const std::vector<std::vector<std::int64_t>>& samples,
                       StepStats& stats) const;
  // dp_window > 1: the global batch of `step` (of the loaded epoch order).
  std::vector<std::int64_t> window_step(std::int64_t step) const;
  std::vector<PackedRow> pack(const std::vector<std::int64_t>& samples) const;
  void load_order();

  const TokenDataset* dataset_;
  LoadBalancer* balancer_;
  LoaderOptions options_;
  std::vector<std::int64_t> samples_;  // non-empty samples, dataset order
  LoaderPosition position_;
  std::int64_t order_epoch_ = -1;  // epoch whose order is cached
  std::vector<std::int64_t> order_;
};

}  // namespace fulcrum::data
