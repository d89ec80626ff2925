#include "work_bounds.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli_common.h"

namespace fulcrum::cli {
namespace {

double as_double(std::int64_t value) { return static_cast<double>(value); }

std::string plural(std::int64_t count, const char* one, const char* many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

}  // namespace

WorkEstimate estimate_plan(const CpWorkload& w, int strategies, int repeats, bool positions_json) {
  // A plan holds 8 bytes per position and the host a copy while checking
  // it; every strategy's plan is kept for the comparison. Per strategy and
  // run: 80 ns a token (the slowest strategy, one document), 430 ns a
  // query block (balanced with B = 1: its units), 15 us and 2.2 kB a rank
  // (balanced at P = 2^20). JSON positions: 48 more bytes and 20 ns a token.
  std::int64_t blocks = 0;
  if (w.doc_lengths.empty()) {
    blocks = (w.tokens + w.block_size - 1) / w.block_size;
  } else {
    for (const std::int64_t length : w.doc_lengths) {
      blocks += (length + w.block_size - 1) / w.block_size;
    }
  }
  const double n = as_double(w.tokens);
  const double u = as_double(blocks);
  const double p = as_double(w.cp_size);
  const double runs = static_cast<double>(strategies) * repeats;
  WorkEstimate e;
  e.seconds = runs * (80e-9 * n + 430e-9 * u + 15e-6 * p) + (positions_json ? 20e-9 * n : 0.0);
  e.bytes = 16.0 * n * strategies + 90.0 * u + 2200.0 * p + (positions_json ? 48.0 * n : 0.0);
  const std::size_t docs = w.doc_lengths.empty() ? 1 : w.doc_lengths.size();
  e.work = "a row of " + std::to_string(w.tokens) + " tokens in " +
           plural(static_cast<std::int64_t>(docs), "document", "documents") + " (" +
           plural(blocks, "block", "blocks") + " of " + std::to_string(w.block_size) + ") on " +
           plural(w.cp_size, "rank", "ranks") +
           (strategies > 1 ? " with " + std::to_string(strategies) + " strategies" : "");
  return e;
}

WorkEstimate estimate_schedule(const ScheduleRequest& r, int schedulers, int repeats, bool hybrid) {
  // Per schedule: 500 ns and 28 bytes a token (the slots' plans; hybrid also
  // prices the baselines' schedules), 4.3 kB a document, 170 ns a document
  // per rank (at least 512 ranks' worth: placing short pieces), 1.5 us and
  // 400 bytes a rank, and the member-pair table of the exchange of the
  // widest slot priced: a x a entries of 8 bytes (9 with what comes with
  // them), filled and read at up to 20 ns an entry, where a, the members
  // holding tokens, is at most min(W, tokens) (megatron_dcp widens a lone
  // document's group to every rank). hybrid prices the table of a slot
  // that must be wide about three times more (60 ns an entry): its width,
  // `forced`, the members the longest document needs at T tokens each (a
  // token each on 8192 ranks measured 5.3 s of CPU time, where 20 ns an
  // entry said 1.3 s); slots it chooses to widen stay within their row's
  // key blocks (rule 9), priced as above. Every piece that needs more than
  // one rank is such a slot, each with a table of its own: 32 documents of
  // 4096 tokens on 8192 ranks of a token took 24 s, one of 81920 tokens
  // (20 pieces of all 4096 ranks) 13 s, where the widest slot alone said
  // 2.4 s and 1.4 s.
  double tokens = 0.0;
  double forced_entries = 0.0;  // sum over the pieces of their width squared
  const double world = as_double(r.world_size);
  const double budget = as_double(std::max<std::int64_t>(r.max_tokens_per_rank, 1));
  const double piece = world * budget;  // a document longer than W x T is cut at W x T
  for (const std::int64_t length : r.doc_lengths) {
    const double n = as_double(length);
    tokens += n;
    const double whole = std::floor(n / piece);
    const double rest = std::ceil((n - whole * piece) / budget);
    forced_entries += whole * world * world + (rest > 1.0 ? rest * rest : 0.0);
  }
  const double d = as_double(static_cast<std::int64_t>(r.doc_lengths.size()));
  const double active = std::min(world, tokens);
  const double runs = static_cast<double>(schedulers) * repeats;
  WorkEstimate e;
  const double forced = hybrid ? forced_entries : 0.0;
  e.seconds = runs * (500e-9 * tokens + 170e-9 * d * std::max(world, 512.0) + 1.5e-6 * world +
                      20e-9 * active * active) +
              repeats * 60e-9 * forced;
  e.bytes = 28.0 * tokens + 4300.0 * d + 400.0 * world + 9.0 * active * active;
  e.work = "a batch of " + std::to_string(static_cast<std::int64_t>(tokens)) + " tokens in " +
           plural(static_cast<std::int64_t>(r.doc_lengths.size()), "document", "documents") +
           " on " + plural(r.world_size, "rank", "ranks") +
           (schedulers > 1 ? " with " + std::to_string(schedulers) + " schedulers" : "");
  return e;
}

WorkEstimate estimate_dp_partition(const DpRequest& r, std::string_view strategy) {
  // 2 us and 250 bytes a sample (costs, sorting, the result); Karmarkar-Karp
  // (alone or as one of auto's starts) merges k-subset partials: time per
  // sample and rank (20 ns), 4 bytes per sample and rank up to 1024 ranks.
  const double n = as_double(static_cast<std::int64_t>(r.lengths.size()));
  const double k = as_double(r.num_ranks);
  const bool differencing = strategy != "round_robin" && strategy != "lpt";
  WorkEstimate e;
  e.seconds = 2e-6 * n + (differencing ? 20e-9 * n * std::min(k, n) : 0.0);
  e.bytes = 250.0 * n + (differencing ? 4.0 * n * std::min(k, 1024.0) : 0.0);
  e.work = plural(static_cast<std::int64_t>(r.lengths.size()), "sample", "samples") + " on " +
           plural(r.num_ranks, "rank", "ranks") + " with " + std::string(strategy);
  return e;
}

void refuse_beyond_bounds(std::string_view command, const WorkEstimate& estimate,
                          std::string_view advice) {
  if (estimate.seconds <= kMaxCommandSeconds && estimate.bytes <= kMaxCommandBytes) return;
  throw UsageError(estimate.work + " would take about " + fixed(estimate.seconds, 1) + " s and " +
                   gigabytes(estimate.bytes) + ", more than the " + fixed(kMaxCommandSeconds, 0) +
                   " s and " + gigabytes(kMaxCommandBytes) + " fulcrum " + std::string(command) +
                   " allows; " + std::string(advice));
}

}  // namespace fulcrum::cli
