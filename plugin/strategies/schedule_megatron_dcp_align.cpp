// Megatron's virtual-pipeline alignment for megatron_dcp
// (schedule_megatron_dcp_align.h).
#include "strategies/schedule_megatron_dcp_align.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fulcrum::megatron {

// Runs of consecutive ranks [0, end) running the same group.
std::vector<Run> runs_of(const Ranks& ranks, std::int64_t end) {
  std::vector<Run> runs;
  for (std::int64_t r = 0; r < end;) {
    std::int64_t n = 1;
    while (r + n < end && ranks[r + n] == ranks[r]) ++n;
    runs.push_back({r, n});
    r += n;
  }
  return runs;
}

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

template <class T>
std::int64_t length_of(const std::vector<T>& v) {
  return static_cast<std::int64_t>(v.size());
}
std::int64_t length(const Ranks& ranks) { return length_of(ranks); }

std::string sizes_text(const std::vector<Run>& runs) {
  std::string text;
  for (const Run& run : runs) text += (text.empty() ? "" : ", ") + str(run.size);
  return "[" + text + "]";
}

// Python's `v[a:b] = seq` for 0 <= a, b: both clamped to the list, the
// slice replaced by seq whatever their lengths.
void assign_slice(Ranks& v, std::int64_t a, std::int64_t b, const Ranks& seq) {
  a = std::min(a, length(v));
  b = std::max(a, std::min(b, length(v)));
  v.erase(v.begin() + a, v.begin() + b);
  v.insert(v.begin() + a, seq.begin(), seq.end());
}

// fill_empty's doubling of the run at `start`: its copy takes the next
// `size` ranks and ranks [start + size, used) move up by `size`, by
// Megatron's two slice assignments (the list grows when the run is longer
// than the empty tail).
Ranks double_run(const Ranks& ranks, std::int64_t start, std::int64_t size, std::int64_t used) {
  Ranks out = ranks;
  const Ranks tail(ranks.begin() + start + size, ranks.begin() + used);
  const std::int64_t empty = length(ranks) - used;
  assign_slice(out, start + 2 * size, size < empty ? used + size : length(out), tail);
  const Ranks copy(out.begin() + start, out.begin() + start + size);
  assign_slice(out, start + size, start + 2 * size, copy);
  return out;
}

// fill_empty_by_expanding_cp: while the last rank is empty, double the last
// run that is shorter than the run before it, or, when no run is, the first
// run if the empty ranks hold it; when neither, Megatron's loop never ends.
Result<Ranks> fill_by_doubling(Ranks ranks) {
  while (ranks.back() == kEmpty) {
    const auto used = static_cast<std::int64_t>(
        std::count_if(ranks.begin(), ranks.end(), [](std::int32_t g) { return g != kEmpty; }));
    const std::vector<Run> runs = runs_of(ranks, used);
    bool changed = false;
    for (std::size_t k = runs.size() - 1; k >= 1 && !changed; --k) {
      if (runs[k - 1].size > runs[k].size) {
        ranks = double_run(ranks, runs[k].start, runs[k].size, used);
        changed = true;
      }
    }
    if (!changed && runs[0].size <= length(ranks) - used) {
      ranks = double_run(ranks, 0, runs[0].size, used);
      changed = true;
    }
    if (!changed) {
      return unsupported(
          "megatron_dcp: Megatron's virtual-pipeline alignment cannot refill a "
          "half micro-batch whose groups are " +
          sizes_text(runs) + " ranks on " + str(length(ranks)) +
          " (its align_sample_id_groups never returns on it); use a "
          "power-of-two world or the hybrid scheduler");
    }
  }
  return ranks;
}

// split_group: the micro-batch cut at the first group boundary at or past
// its middle, each half refilled; (back half, front half), or nothing when
// it is one group.
Result<std::vector<Ranks>> split_micro_batch(const Ranks& ranks) {
  const std::int64_t n = length(ranks);
  const std::vector<Run> runs = runs_of(ranks, n);
  for (std::size_t k = 1; k < runs.size(); ++k) {
    if (runs[k].size > runs[k - 1].size) {
      return unsupported("megatron_dcp: a micro-batch's CP groups grow from " +
                         str(runs[k - 1].size) + " to " + str(runs[k].size) +
                         " ranks along the ranks, and Megatron's virtual-pipeline alignment "
                         "asserts that they do not (Megatron asserts here); use the hybrid "
                         "scheduler");
    }
  }
  if (runs.size() == 1) return std::vector<Ranks>{};
  std::int64_t cut = 0;
  for (const Run& run : runs) {
    if (cut >= n / 2) break;
    cut += run.size;
  }
  Ranks front(ranks.begin(), ranks.begin() + cut);
  front.resize(static_cast<std::size_t>(n), kEmpty);
  Ranks back(ranks.begin() + cut, ranks.end());
  back.resize(static_cast<std::size_t>(n), kEmpty);
  Result<Ranks> filled_front = fill_by_doubling(std::move(front));
  if (!filled_front) return filled_front.status();
  Result<Ranks> filled_back = fill_by_doubling(std::move(back));
  if (!filled_back) return filled_back.status();
  return std::vector<Ranks>{std::move(*filled_back), std::move(*filled_front)};
}

}  // namespace

// align_sample_id_groups: split micro-batches, from the last back (and
// round again), the back half in place and the front half appended, until
// their count is a multiple of `multiple`.
Status align_micro_batches(std::vector<Ranks>& batches, std::int64_t multiple) {
  std::int64_t missing = (multiple - length_of(batches) % multiple) % multiple;
  std::int64_t i = length_of(batches) - 1;
  std::int64_t failures = 0;
  while (missing > 0) {
    if (i < 0) {
      if (failures >= length_of(batches)) {
        return unsupported("megatron_dcp: " + str(length_of(batches)) +
                           " micro-batches cannot be split into a multiple of " + str(multiple) +
                           " (the wave multiple, Megatron's "
                           "microbatch_group_size_per_vp_stage): every one is a single CP group "
                           "(Megatron asserts here); lower the multiple or use the hybrid "
                           "scheduler");
      }
      i = length_of(batches) - 1;
    }
    Result<std::vector<Ranks>> halves = split_micro_batch(batches[static_cast<std::size_t>(i)]);
    if (!halves) return halves.status();
    if (halves->empty()) {
      ++failures;
    } else {
      batches[static_cast<std::size_t>(i)] = std::move((*halves)[0]);
      batches.push_back(std::move((*halves)[1]));
      --missing;
      failures = 0;
    }
    --i;
  }
  return Status::ok();
}

}  // namespace fulcrum::megatron
