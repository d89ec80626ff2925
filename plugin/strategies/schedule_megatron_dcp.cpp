// `megatron_dcp`: Megatron-LM's dynamic context-parallel scheduler as its
// dev branch has it at commit d48bd6be (docs/HYBRID.md section 5):
// DefaultDynamicCPScheduler.get_groups_and_subsamples in
// megatron/core/datasets/data_schedule.py and next_hdp_group_packing_aware
// and dcp_gpus_needed in megatron/core/datasets/data_schedule_utils.py, on
// the lengths Megatron's dataset pads (VarlenDataset and SFTDataset with
// dynamic CP pad every sample to a multiple of 2 x dp x cp = 2W). Each call
// of next_hdp_group_packing_aware forms one micro-batch over all W ranks;
// here that micro-batch is one wave and each of its CP groups one slot.
//
// With P a piece's padded length, per micro-batch, from the remaining pieces,
// longest P first (stable):
//   * a piece needs c = max(1, 2^ceil(log2(P / T))) ranks; the longest
//     piece of the batch needing more than W is Megatron's assertion;
//   * its workload on a group of c ranks is P^2 / c per member;
//   * the first piece opens a group on ranks [0, c); the cap is
//     1.05 x (its P) x T (_DYNAMIC_CP_WORKLOAD_CAP_DELTA);
//   * every later piece tries, for every power of two c from its need up to
//     W, joining each open group of size c whose sum of P / c stays within
//     T, then opening one on the lowest free ranks; the candidate with the
//     smallest projected maximum workload over all ranks, within the cap,
//     wins (strictly smaller: the first of equals); none: the piece waits
//     for the next micro-batch;
//   * while ranks are empty, the first group of the smallest size grows to
//     min(2 x size, W) ranks (fill_empty_gpus_once) when its last rank plus
//     the added ranks stays below W, and the groups after it move up (where
//     the moved groups would pass the last rank Megatron raises IndexError);
//     when no group can grow, the micro-batch is rebuilt as one group of all
//     W ranks holding, longest first, the pieces whose P / W still fit T
//     (fill_with_full_dpxcp_group).
// Megatron compares these in floating point (P / c, P^2 / c and the cap are
// Python floats); so does this, operation for operation, so that ties and
// boundaries fall the same way. A request's group_shapes carry Megatron's
// min_cp_size (the least size they allow) and
// microbatch_group_size_per_vp_stage (their wave multiple, applied by
// Megatron's align_sample_id_groups).
//
// Where Megatron raises, never returns (the alignment's refill can loop) or
// leaves samples on no rank (the alignment can push them past the last),
// megatron_dcp falls back to the `fixed` schedule, with Megatron's reason as
// its fallback_reason.
//
// Inside a group Megatron shards with TransformerEngine's THD layout; here
// `per_document_padded` (every piece padded to a multiple of 2c and cut
// head-tail; c = 1: the row as it is). Where c divides W, a member's shard,
// sum of 2 ceil(L / 2c), is at most Megatron's sum of P / c <= T. Where it
// does not (a power of two above the largest one dividing a non-power-of-two
// W, where P / 2c is not whole and TransformerEngine would refuse the row),
// a shard over T falls back to the contiguous plan and says so. The
// remaining departures are listed in docs/HYBRID.md.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"
#include "strategies/schedule_megatron_dcp_align.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

using megatron::align_micro_batches;
using megatron::kEmpty;
using megatron::Ranks;
using megatron::Run;
using megatron::runs_of;

constexpr double kWorkloadCapDelta = 0.05;

std::string str(std::int64_t v) { return std::to_string(v); }

// Megatron's dataset padding with dynamic CP: a multiple of 2 x dp x cp.
std::int64_t padded_length(std::int64_t len, std::int32_t world) {
  const std::int64_t granularity = 2 * static_cast<std::int64_t>(world);
  return ceil_div(len, granularity) * granularity;
}

// dcp_gpus_needed: max(1, 2^ceil(log2(P / T))). Computed on integers: P and
// T are below 2^32, so P / T's double and its log2 are exact enough that the
// float form of Megatron rounds to the same power.
std::int64_t gpus_needed(std::int64_t padded, std::int64_t budget, std::int64_t min_cp) {
  std::int64_t c = 1;
  while (c * budget < padded) c *= 2;
  return std::max(c, min_cp);
}

// Python's (P * P) / c for a power of two c: P^2 is exact in int64 (P < 2^32)
// and dividing its double by a power of two is exact, so this is the
// correctly rounded quotient Python's true division gives.
double workload(std::int64_t padded, std::int64_t c) {
  return static_cast<double>(padded * padded) / static_cast<double>(c);
}

struct Group {
  std::int32_t first_rank = 0;
  std::int32_t size = 0;
  double packed = 0;    // sum of P / size, as Megatron's packing_sequence_len
  double workload = 0;  // per member, sum of P^2 / size, as Megatron's exec_times
  std::vector<std::size_t> pieces;
};

struct MicroBatch {
  std::vector<Group> groups;
  std::vector<std::size_t> leftovers;
};

// The open groups of one size, in creation order, with each subtree's least
// packed length and least workload. Megatron scans every group for every
// piece; its choice within a size is the first group, in creation order, of
// the least projected workload among those the piece fits. Both tests are
// monotone (a + x is non-decreasing in a, rounding included), so a subtree
// whose least packed length does not fit, or whose least workload already
// projects above the limit, holds no candidate, and the descent below finds
// Megatron's group without visiting the others.
class SizeIndex {
 public:
  explicit SizeIndex(std::size_t capacity) {
    while (leaves_ < capacity) leaves_ *= 2;
    packed_.assign(2 * leaves_, kNone);
    work_.assign(2 * leaves_, kNone);
  }
  std::size_t size() const { return groups_.size(); }
  std::size_t group(std::size_t slot) const { return groups_[slot]; }
  // The least workload of any group of this size (kNone: none).
  double least_workload() const { return work_[1]; }

  void add(std::size_t group, double packed, double workload) {
    groups_.push_back(group);
    set(groups_.size() - 1, packed, workload);
  }
  void set(std::size_t slot, double packed, double workload) {
    std::size_t i = leaves_ + slot;
    packed_[i] = packed;
    work_[i] = workload;
    for (i /= 2; i >= 1; i /= 2) {
      packed_[i] = std::min(packed_[2 * i], packed_[2 * i + 1]);
      work_[i] = std::min(work_[2 * i], work_[2 * i + 1]);
    }
  }
  // The least workload of a group with packed + share <= t (kNone: none).
  double least_workload(double share, double t) const {
    double best = kNone;
    least(1, share, t, best);
    return best;
  }
  // Megatron's group of this size for a piece of this share and cost when
  // the maximum workload is `highest`: members share one workload, so the
  // projected maximum over all ranks is the larger of `highest` and the
  // group's new one, and the first group that stays within `highest` wins,
  // else the first of the least workload.
  std::optional<std::size_t> choice(double share, double t, double cost, double highest) const {
    if (std::optional<std::size_t> slot = first_fit(share, t, cost, highest)) return slot;
    const double least = least_workload(share, t);
    if (least == kNone) return std::nullopt;
    return first_fit(share, t, cost, least + cost);
  }
  // The first group with packed + share <= t and workload + cost <= limit.
  std::optional<std::size_t> first_fit(double share, double t, double cost, double limit) const {
    return first(1, share, t, cost, limit);
  }

 private:
  static constexpr double kNone = std::numeric_limits<double>::infinity();

  void least(std::size_t i, double share, double t, double& best) const {
    if (!(packed_[i] + share <= t) || work_[i] >= best) return;
    if (i >= leaves_) {
      best = work_[i];
      return;
    }
    least(2 * i, share, t, best);
    least(2 * i + 1, share, t, best);
  }
  std::optional<std::size_t> first(std::size_t i, double share, double t, double cost,
                                   double limit) const {
    if (!(packed_[i] + share <= t) || !(work_[i] + cost <= limit)) return std::nullopt;
    if (i >= leaves_) return i - leaves_;
    if (auto left = first(2 * i, share, t, cost, limit)) return left;
    return first(2 * i + 1, share, t, cost, limit);
  }

  std::size_t leaves_ = 1;
  std::vector<double> packed_;  // heap order: node i's children are 2i and 2i + 1
  std::vector<double> work_;
  std::vector<std::size_t> groups_;
};

// fill_empty_gpus_once while a rank is empty and a group can grow, else
// fill_with_full_dpxcp_group; kUnsupported where Megatron raises. `used`:
// the ranks the groups hold, [0, used).
Status fill_empty_ranks(const std::vector<std::int64_t>& padded,
                        const std::vector<std::size_t>& remaining, std::int32_t world, double t,
                        std::int32_t used, MicroBatch& mb) {
  while (used < world) {
    std::int32_t smallest = std::numeric_limits<std::int32_t>::max();
    for (const Group& g : mb.groups) smallest = std::min(smallest, g.size);
    const std::int32_t next = static_cast<std::int32_t>(
        std::min<std::int64_t>(2 * static_cast<std::int64_t>(smallest), world));
    const std::int32_t extra = next - smallest;
    bool grown = false;
    for (std::size_t gi = 0; gi < mb.groups.size() && !grown; ++gi) {
      Group& g = mb.groups[gi];
      const std::int32_t end = g.first_rank + g.size - 1;
      if (g.size != smallest || end + extra >= world) continue;
      if (end + 1 < used && used + extra > world) {
        // Megatron writes ranks [end + 1, used) to [end + extra + 1,
        // used + extra), past its list of W ranks.
        return unsupported(
            "megatron_dcp: Megatron's empty-rank filling (fill_empty_gpus_once) grows the group "
            "at ranks [" +
            str(g.first_rank) + ", " + str(end) + "] to " + str(next) + " ranks and moves ranks [" +
            str(end + 1) + ", " + str(used - 1) + "] up by " + str(extra) + ", past the last of " +
            str(world) +
            " ranks, where Megatron raises IndexError; use a power-of-two world or the hybrid "
            "scheduler");
      }
      g.size = next;
      g.workload = 0;
      for (const std::size_t p : g.pieces) g.workload += workload(padded[p], next);
      for (Group& other : mb.groups) {
        if (other.first_rank > end) other.first_rank += extra;
      }
      used += extra;
      grown = true;
    }
    if (grown) continue;
    // fill_with_full_dpxcp_group: the whole call's input, longest first.
    Group all;
    all.first_rank = 0;
    all.size = world;
    std::vector<std::size_t> rest;
    for (const std::size_t piece : remaining) {
      const double share = static_cast<double>(padded[piece]) / static_cast<double>(world);
      if (all.packed + share <= t) {
        all.packed += share;
        all.pieces.push_back(piece);
      } else {
        rest.push_back(piece);
      }
    }
    // The first piece always fits: P / W <= P / need <= T.
    mb.groups.assign(1, std::move(all));
    mb.leftovers = std::move(rest);
    break;
  }
  return Status::ok();
}

// The index of the groups of size c (a power of two) in size_indexes.
std::size_t size_index(std::int64_t c) {
  return static_cast<std::size_t>(std::countr_zero(static_cast<std::uint64_t>(c)));
}

// One empty SizeIndex per power of two up to W, each for the most groups
// of that size: no more than W ranks hold, nor than there are pieces (each
// group holds one), so a large W with a few pieces costs little.
std::vector<SizeIndex> size_indexes(std::int32_t world, std::size_t pieces) {
  std::vector<SizeIndex> by_size;
  for (std::int64_t c = 1; c <= world; c *= 2) {
    by_size.emplace_back(std::min(static_cast<std::size_t>(world / c), pieces));
  }
  return by_size;
}

// Megatron's choice for one piece: the size, and the group (or the index
// of a new one), and the projected maximum workload.
struct Choice {
  std::int64_t size = 0;
  std::size_t group = 0;
  double projected = 0;
};

// A micro-batch being formed: its groups, which hold ranks [0, used) in
// creation order, the most workload of any rank, and each size's index.
struct Forming {
  std::int32_t world = 0;
  std::int64_t budget = 0, min_cp = 1;
  double t = 0, cap = 0;
  std::int32_t used = 0;
  double highest = 0;
  MicroBatch mb;
  std::vector<SizeIndex> by_size;
  std::vector<std::size_t> slot_of;  // a group's place in its size's index

  // Megatron's candidate for a piece of padded length p, if any: for each
  // size from its need, the open groups of that size in creation order and
  // then a new group; the first of the least projected maximum workload
  // within the cap. SizeIndex gives each size's first best group directly,
  // and since no candidate projects below today's maximum, the sizes above
  // one that reaches it are not tried.
  std::optional<Choice> candidate(std::int64_t p) const {
    std::optional<Choice> best;
    const auto offer = [&](std::int64_t c, std::size_t group, double projected) {
      if (projected <= cap && (!best || projected < best->projected)) {
        best = Choice{c, group, projected};
      }
    };
    for (std::int64_t c = gpus_needed(p, budget, min_cp); c <= world; c *= 2) {
      if (best && best->projected == highest) break;  // nothing projects lower
      const double cost = workload(p, c);
      const double share = static_cast<double>(p) / static_cast<double>(c);
      const SizeIndex& index = by_size[size_index(c)];
      // No group of this size projects below max(highest, least + cost), so
      // when that is no lower than the best so far, none of them can win.
      const bool may_win =
          !best || std::max(highest, index.least_workload() + cost) < best->projected;
      if (const std::optional<std::size_t> slot =
              may_win ? index.choice(share, t, cost, highest) : std::nullopt) {
        const std::size_t gi = index.group(*slot);
        offer(c, gi, std::max(highest, mb.groups[gi].workload + cost));
      }
      // The free ranks all have zero workload: the lowest c of them.
      if (world - used >= c) offer(c, mb.groups.size(), std::max(highest, 0.0 + cost));
    }
    return best;
  }

  void open_group(std::size_t piece, std::int64_t p, std::int64_t c) {
    Group g;
    g.first_rank = used;
    g.size = static_cast<std::int32_t>(c);
    g.packed = static_cast<double>(p) / static_cast<double>(c);
    g.workload = workload(p, c);
    g.pieces.push_back(piece);
    used += g.size;
    highest = std::max(highest, g.workload);
    SizeIndex& index = by_size[size_index(c)];
    slot_of.push_back(index.size());
    index.add(mb.groups.size(), g.packed, g.workload);
    mb.groups.push_back(std::move(g));
  }

  void join(std::size_t piece, std::int64_t p, const Choice& choice) {
    Group& g = mb.groups[choice.group];
    g.packed += static_cast<double>(p) / static_cast<double>(choice.size);
    g.workload += workload(p, choice.size);
    g.pieces.push_back(piece);
    highest = std::max(highest, g.workload);
    by_size[size_index(choice.size)].set(slot_of[choice.group], g.packed, g.workload);
  }
};

// One call of next_hdp_group_packing_aware over `remaining` (longest P
// first); kUnsupported where Megatron raises. Each piece joins its
// candidate (Forming::candidate) or waits for the next micro-batch.
Result<MicroBatch> next_micro_batch(const std::vector<std::int64_t>& padded,
                                    const std::vector<std::size_t>& remaining, std::int32_t world,
                                    std::int64_t budget, std::int64_t min_cp) {
  Forming f;
  f.world = world;
  f.budget = budget;
  f.min_cp = min_cp;
  f.t = static_cast<double>(budget);
  const std::int64_t tall = padded[remaining[0]];
  f.cap = static_cast<double>(tall) * f.t * (1.0 + kWorkloadCapDelta);
  f.by_size = size_indexes(world, remaining.size());
  // decide_exactly has refused a batch whose longest piece needs more
  // than W ranks (Megatron's assertion on the first sample).
  f.open_group(remaining[0], tall, gpus_needed(tall, budget, min_cp));
  // Whether the groups changed since the shortest remaining piece last
  // found a candidate (it would find one again).
  bool changed = true;
  for (std::size_t k = 1; k < remaining.size(); ++k) {
    const std::size_t piece = remaining[k];
    const std::int64_t p = padded[piece];
    const std::optional<Choice> best = f.candidate(p);
    if (!best) {
      f.mb.leftovers.push_back(piece);
      // No later piece is shorter than the last: it tries a subset of the
      // last's sizes, fits a subset of its groups, and projects no lower
      // in each (a + x only grows with x). So when the last finds no
      // candidate either, none does: the rest wait, in order, unsearched.
      if (changed && k + 1 < remaining.size()) {
        changed = false;
        if (!f.candidate(padded[remaining.back()])) {
          f.mb.leftovers.insert(f.mb.leftovers.end(),
                                remaining.begin() + static_cast<std::ptrdiff_t>(k + 1),
                                remaining.end());
          break;
        }
      }
      continue;
    }
    changed = true;
    if (best->group == f.mb.groups.size()) {
      f.open_group(piece, p, best->size);
    } else {
      f.join(piece, p, *best);
    }
  }
  if (Status status = fill_empty_ranks(padded, remaining, world, f.t, f.used, f.mb); !status) {
    return status;
  }
  return std::move(f.mb);
}

// The pieces by padded length, longest first, ties in input order (a stable
// sort). Padded lengths are multiples of 2W, so where their quotients span
// no more than a few times the pieces, a counting sort over the quotients
// gives that order in O(n + range) (64,000 pieces at W = 8192 span 62
// quotients); else a stable sort.
std::vector<std::size_t> longest_first(const std::vector<std::int64_t>& padded,
                                       std::int32_t world) {
  const std::int64_t granularity = 2 * static_cast<std::int64_t>(world);
  std::int64_t top = 0;
  for (const std::int64_t p : padded) top = std::max(top, p / granularity);
  std::vector<std::size_t> order(padded.size());
  if (top > 4 * static_cast<std::int64_t>(padded.size()) + 1024) {
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return padded[a] > padded[b]; });
    return order;
  }
  // start[q]: where the pieces of quotient top - q begin.
  std::vector<std::size_t> start(static_cast<std::size_t>(top) + 2, 0);
  for (const std::int64_t p : padded) ++start[static_cast<std::size_t>(top - p / granularity) + 1];
  for (std::size_t q = 1; q < start.size(); ++q) start[q] += start[q - 1];
  for (std::size_t i = 0; i < padded.size(); ++i) {
    order[start[static_cast<std::size_t>(top - padded[i] / granularity)]++] = i;
  }
  return order;
}

// The micro-batches aligned to the wave multiple, each one wave: its runs of
// ranks as slots, each holding its group's pieces.
Status aligned_slots(const ScheduleRequest& request, const std::vector<DocPiece>& pieces,
                     const std::vector<std::vector<std::size_t>>& groups,
                     std::vector<Ranks>& batches, Schedule& schedule) {
  const std::int32_t world = request.world_size;
  if (Status status = align_micro_batches(batches, request.group_shapes.wave_multiple); !status) {
    return status;
  }
  for (std::size_t wave = 0; wave < batches.size(); ++wave) {
    const Ranks& ranks = batches[wave];
    if (static_cast<std::int64_t>(ranks.size()) > world) {
      return unsupported(
          "megatron_dcp: Megatron's virtual-pipeline alignment doubles a group past the last of " +
          str(world) + " ranks in micro-batch " + str(static_cast<std::int64_t>(wave)) +
          ", leaving its samples where no rank runs them; use a power-of-two world or the "
          "hybrid scheduler");
    }
    for (const Run& run : runs_of(ranks, world)) {
      ScheduleSlot slot;
      slot.wave = static_cast<std::int32_t>(wave);
      for (std::int64_t r = 0; r < run.size; ++r) {
        slot.ranks.push_back(static_cast<std::int32_t>(run.start + r));
      }
      for (const std::size_t p : groups[static_cast<std::size_t>(ranks[run.start])]) {
        slot.pieces.push_back(pieces[p]);
      }
      schedule.slots.push_back(std::move(slot));
    }
  }
  return Status::ok();
}

// Megatron's scheduler on `request`: its schedule, or kUnsupported with
// Megatron's reason where Megatron raises, never returns, or leaves samples
// on no rank. `enough` (decide_megatron_dcp_waves) may stop it after a
// micro-batch, setting `stopped`.
Result<Schedule> decide_exactly(const ScheduleRequest& request, const WavesCheck* enough,
                                bool* stopped) {
  const std::vector<DocPiece> pieces = schedule_pieces(request);
  const std::int32_t world = request.world_size;
  const std::int64_t budget = request.max_tokens_per_rank;
  // Megatron's min_dynamic_context_parallel_size and
  // microbatch_group_size_per_vp_stage, from the request's group_shapes: the
  // least size it allows and its wave multiple.
  const GroupShapes& shapes = request.group_shapes;
  std::int64_t min_cp = 1;
  while (shapes.sizes != 0 && (shapes.sizes & static_cast<std::uint64_t>(min_cp)) == 0) {
    min_cp *= 2;
  }
  const std::int64_t multiple = shapes.wave_multiple;
  std::vector<std::int64_t> padded(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    padded[i] = padded_length(pieces[i].length, world);
  }
  std::vector<std::size_t> remaining = longest_first(padded, world);
  // Megatron's assertion on the first sample of the first micro-batch, the
  // longest of the batch.
  if (!remaining.empty()) {
    const std::size_t longest = remaining[0];
    const std::int64_t need = gpus_needed(padded[longest], budget, min_cp);
    if (need > world) {
      return unsupported("megatron_dcp: document " + str(pieces[longest].doc) + " piece of " +
                         str(pieces[longest].length) + " tokens, padded to " +
                         str(padded[longest]) +
                         " (a multiple of 2W, as Megatron's dataset pads), requires CP size " +
                         str(need) + " at T = " + str(budget) + ", but only " + str(world) +
                         " DPxCP ranks are available (Megatron asserts here); raise T");
    }
  }

  Schedule schedule;
  schedule.strategy_used = "megatron_dcp";
  std::vector<std::vector<std::size_t>> groups;  // with the alignment: each group's pieces
  std::vector<Ranks> batches;                    // and each micro-batch's ranks
  for (std::int32_t wave = 0; !remaining.empty(); ++wave) {
    Result<MicroBatch> mb = next_micro_batch(padded, remaining, world, budget, min_cp);
    if (!mb) return mb.status();
    if (multiple > 1) batches.emplace_back(static_cast<std::size_t>(world), kEmpty);
    for (Group& g : mb->groups) {
      if (multiple > 1) {
        std::fill_n(batches.back().begin() + g.first_rank, g.size,
                    static_cast<std::int32_t>(groups.size()));
        groups.push_back(std::move(g.pieces));
        continue;
      }
      ScheduleSlot slot;
      slot.wave = wave;
      slot.ranks.reserve(static_cast<std::size_t>(g.size));
      slot.pieces.reserve(g.pieces.size());
      for (std::int32_t r = 0; r < g.size; ++r) slot.ranks.push_back(g.first_rank + r);
      for (const std::size_t p : g.pieces) slot.pieces.push_back(pieces[p]);
      schedule.slots.push_back(std::move(slot));
    }
    remaining = std::move(mb->leftovers);
    if (multiple <= 1 && !remaining.empty() && enough != nullptr && *enough &&
        (*enough)(schedule)) {
      *stopped = true;
      return schedule;
    }
  }
  if (multiple <= 1) return schedule;
  if (Status status = aligned_slots(request, pieces, groups, batches, schedule); !status) {
    return status;
  }
  return schedule;
}

}  // namespace

Result<Schedule> decide_megatron_dcp(const ScheduleRequest& request) {
  if (Status status = validate_schedule_request(request); !status) return status;
  Result<Schedule> exact = decide_exactly(request, nullptr, nullptr);
  if (exact || exact.status().code() != StatusCode::kUnsupported) return exact;
  // Where Megatron fails, fall back to the fixed schedule and say why.
  const std::string why = exact.status().message();
  Result<Schedule> fixed = decide_fixed(request);
  if (!fixed) {
    return unsupported(why + "; fixed cannot serve instead: " + fixed.status().message());
  }
  if (request.group_shapes.restricts()) {
    // Say here, with Megatron's reason, when fixed's schedule breaks them.
    // Planned in full: validate_schedule judges positions.
    ScheduleRequest full = request;
    full.compact = false;
    Schedule planned = *fixed;
    if (Status status = plan_fixed(full, planned); !status) return status;
    if (Status status = validate_schedule(full, planned); !status) {
      return unsupported(why + "; fixed's schedule cannot serve instead: " + status.message());
    }
  }
  fixed->fallback_reason = why + "; fixed's schedule served instead";
  return fixed;
}

Result<Schedule> decide_megatron_dcp_waves(const ScheduleRequest& request, const WavesCheck& enough,
                                           bool& stopped) {
  stopped = false;
  if (Status status = validate_schedule_request(request); !status) return status;
  return decide_exactly(request, &enough, &stopped);
}

}  // namespace fulcrum
