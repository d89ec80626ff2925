// Schedule checks and the step-time cost model (docs/HYBRID.md states each
// rule; this file is their one implementation; the lower bound is in
// schedule_bound.cpp).
#include "fulcrum/core/schedule.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"

namespace fulcrum {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// A byte count of the cost model, rounded; one past int64 (only a schedule
// moving exabytes gets there) reads as the largest int64.
std::int64_t bytes_of(double bytes) {
  constexpr double kLimit = 9.2e18;  // just below 2^63
  return bytes < kLimit ? std::llround(bytes) : std::numeric_limits<std::int64_t>::max();
}

std::int64_t piece_limit(const ScheduleRequest& r) {
  return static_cast<std::int64_t>(r.world_size) * r.max_tokens_per_rank;
}

// Where the keys of a member's queries lie: merged intervals of key blocks
// [first, last] of the slot's row. A tile counts a key block when one of its
// queries may see a key in it, so the union over the member's tiles is the
// union over its queries, and that is what it must hold or receive.
std::vector<std::pair<std::int64_t, std::int64_t>> touched_key_blocks(const CpWorkload& w,
                                                                      const RowLayout& layout,
                                                                      const std::int64_t* begin,
                                                                      const std::int64_t* end) {
  std::vector<std::pair<std::int64_t, std::int64_t>> blocks;
  const std::int64_t b = w.block_size;
  std::int64_t doc = -1;
  for (const std::int64_t* it = begin; it != end;) {
    const std::int64_t q = *it;
    if (q == kPadPosition) {
      ++it;
      continue;
    }
    if (doc < 0 || q < layout.doc_begin(doc) || q >= layout.doc_end(doc)) doc = layout.doc_of(q);
    const std::int64_t db = layout.doc_begin(doc);
    const std::int64_t de = layout.doc_end(doc);
    // Key ranges' ends never decrease with q inside a document (every
    // non-block-sparse mask), so a run of consecutive queries needs
    // [lo(first), hi(last)].
    const std::int64_t* run_end = it + 1;
    while (run_end != end && *run_end == run_end[-1] + 1 && *run_end < de) ++run_end;
    const KeyRange first = key_range(w.mask, db, de, q);
    const KeyRange last = key_range(w.mask, db, de, run_end[-1]);
    blocks.emplace_back(first.lo / b, last.hi / b);
    it = run_end;
  }
  std::sort(blocks.begin(), blocks.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> merged;
  for (const auto& [lo, hi] : blocks) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  return merged;
}

// Who holds the real tokens of every key block: block k's holders are
// entries [offset[k], offset[k+1]) of (member, tokens), members ascending.
struct BlockHolders {
  std::vector<std::int64_t> offset;
  std::vector<std::pair<std::int32_t, std::int64_t>> entries;
};

BlockHolders holders_of(const ShardPlan& plan, std::int64_t tokens, std::int64_t b) {
  const std::int64_t blocks = ceil_div(tokens, b);
  // Counting sort of the real tokens by block, members in plan order, so
  // each block's members come out ascending.
  std::vector<std::int64_t> start(static_cast<std::size_t>(blocks) + 1, 0);
  for (const std::int64_t pos : plan.positions) {
    if (pos != kPadPosition) ++start[static_cast<std::size_t>(pos / b) + 1];
  }
  for (std::size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  std::vector<std::int32_t> member(static_cast<std::size_t>(start.back()));
  std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
  for (std::int32_t m = 0; m < plan.cp_size; ++m) {
    for (const std::int64_t* it = plan.rank_begin(m); it != plan.rank_end(m); ++it) {
      if (*it != kPadPosition) member[static_cast<std::size_t>(fill[*it / b]++)] = m;
    }
  }
  BlockHolders h;
  h.offset.reserve(static_cast<std::size_t>(blocks) + 1);
  h.offset.push_back(0);
  for (std::int64_t k = 0; k < blocks; ++k) {
    for (std::int64_t i = start[k]; i < start[k + 1]; ++i) {
      const std::int32_t m = member[static_cast<std::size_t>(i)];
      if (h.entries.size() > static_cast<std::size_t>(h.offset.back()) &&
          h.entries.back().first == m) {
        ++h.entries.back().second;
      } else {
        h.entries.emplace_back(m, 1);
      }
    }
    h.offset.push_back(static_cast<std::int64_t>(h.entries.size()));
  }
  return h;
}

SlotCost cost_slot(const ScheduleRequest& request, const ScheduleSlot& slot) {
  const CpWorkload w = slot_workload(request, slot);
  std::vector<std::int64_t> full;
  const std::vector<RankWork> work = compute_work(w, slot.plan, &full);
  const auto g = static_cast<std::size_t>(slot.plan.cp_size);
  SlotCounts counts = slot_counts_of(work, &full);
  if (g > 1) {
    const RowLayout layout(w);
    const BlockHolders holders = holders_of(slot.plan, w.tokens, w.block_size);
    const std::vector<std::int32_t> index = start_exchange(counts);
    const std::size_t a = counts.active.size();
    for (std::size_t x = 0; x < a; ++x) {
      const std::int32_t m = counts.active[x];
      const auto touched =
          touched_key_blocks(w, layout, slot.plan.rank_begin(m), slot.plan.rank_end(m));
      std::int64_t* from = counts.received.data() + x * a;
      for (const auto& [lo, hi] : touched) {
        for (std::int64_t i = holders.offset[lo]; i < holders.offset[hi + 1]; ++i) {
          const auto& [j, count] = holders.entries[static_cast<std::size_t>(i)];
          from[index[static_cast<std::size_t>(j)]] += count;
        }
      }
      from[x] = 0;  // its own
    }
  }
  return price_slot_counts(request.profile, slot.ranks, counts);
}

}  // namespace

Status validate_schedule_request(const ScheduleRequest& r) {
  if (r.world_size < 1 || r.world_size > kMaxGroupSize) {
    return invalid_argument("schedule request: world_size = " + str(r.world_size) +
                            " is outside [1, " + str(kMaxGroupSize) +
                            "]; pass the number of ranks in the job");
  }
  if (r.max_tokens_per_rank < 1) {
    return invalid_argument(
        "schedule request: max_tokens_per_rank = " + str(r.max_tokens_per_rank) +
        " must be >= 1; pass the tokens one rank holds in memory");
  }
  if (r.max_tokens_per_rank > kMaxRowTokens / r.world_size) {
    return invalid_argument("schedule request: world_size x max_tokens_per_rank = " +
                            str(r.world_size) + " x " + str(r.max_tokens_per_rank) +
                            " exceeds the 2^31 tokens of one row; lower max_tokens_per_rank");
  }
  if (r.block_size < 1 || r.block_size > kMaxBlockSize) {
    return invalid_argument(
        "schedule request: block_size = " + str(r.block_size) +
        " is outside [1, 2^31]; use the attention kernel's tile edge, e.g. 128");
  }
  if (r.mask.kind == MaskKind::kBlockSparse) {
    return invalid_argument(
        "schedule request: mask 'block-sparse' is per row, not per document; schedule with "
        "causal, full, sliding:W or prefix:L");
  }
  if (r.mask.kind == MaskKind::kSliding && r.mask.param < 1) {
    return invalid_argument("schedule request: sliding window " + str(r.mask.param) +
                            " must be >= 1");
  }
  if (r.mask.kind == MaskKind::kPrefix && r.mask.param < 0) {
    return invalid_argument("schedule request: prefix length " + str(r.mask.param) +
                            " must be >= 0");
  }
  if (r.cp_size < 0 || r.cp_size > r.world_size || (r.cp_size > 0 && r.world_size % r.cp_size)) {
    return invalid_argument("schedule request: cp_size = " + str(r.cp_size) +
                            " must be 0 (choose) or a divisor of world_size " + str(r.world_size));
  }
  if (r.doc_lengths.empty()) {
    return invalid_argument(
        "schedule request: the global batch has no documents; pass at least one");
  }
  std::int64_t total = 0;
  for (std::size_t d = 0; d < r.doc_lengths.size(); ++d) {
    const std::int64_t len = r.doc_lengths[d];
    if (len < 1 || len > kMaxBatchTokens - total) {
      return invalid_argument("schedule request: document " + str(static_cast<std::int64_t>(d)) +
                              " has length " + str(len) +
                              (len < 1 ? "; every document needs at least 1 token"
                                       : "; the batch exceeds 2^40 tokens, split it"));
    }
    total += len;
  }
  // Pieces per rank are bounded so that every scheduler answers in bounded
  // time: Megatron-LM's dynamic-CP loop, which megatron_dcp re-derives,
  // re-scans the leftover pieces once per micro-batch, O(pieces^2 / W).
  const std::int64_t limit = piece_limit(r);
  std::int64_t pieces = 0;
  for (const std::int64_t len : r.doc_lengths) pieces += (len + limit - 1) / limit;
  if (pieces > kMaxPiecesPerRank * r.world_size) {
    return invalid_argument(
        "schedule request: the global batch makes " + str(pieces) + " document pieces on " +
        str(r.world_size) + " ranks, more than " + str(kMaxPiecesPerRank) +
        " per rank; schedule fewer documents per step, or raise max_tokens_per_rank (documents "
        "longer than world_size x max_tokens_per_rank are cut into pieces)");
  }
  const GroupShapes& shapes = r.group_shapes;
  if (shapes.wave_multiple < 1 || shapes.wave_multiple > kMaxGroupSize) {
    return invalid_argument("schedule request: group_shapes wave_multiple = " +
                            str(shapes.wave_multiple) + " is outside [1, 2^20]");
  }
  if (shapes.wave_multiple > 1 && !shapes.every_wave) {
    return invalid_argument(
        "schedule request: group_shapes wave_multiple = " + str(shapes.wave_multiple) +
        " needs every_wave (a wave count is only a constraint when every rank runs every wave)");
  }
  if (shapes.sizes >> 21 != 0) {
    return invalid_argument(
        "schedule request: group_shapes sizes allows groups of more than "
        "2^20 ranks; set bits 0 to 20 only");
  }
  return validate_cost_profile(r.profile);
}

bool group_shape_allowed(const GroupShapes& shapes, std::int32_t world,
                         const std::vector<std::int32_t>& ranks) {
  const auto g = static_cast<std::int64_t>(ranks.size());
  if (g < 1) return false;
  const bool whole = g == world;
  if (shapes.sized()) {
    const bool power = (g & (g - 1)) == 0;
    const bool listed =
        power && g < 64 &&
        ((shapes.sizes >> std::countr_zero(static_cast<std::uint64_t>(g))) & 1U) != 0;
    if (!listed && !(whole && shapes.world)) return false;
  }
  if (shapes.aligned) {
    const std::int64_t first = ranks[0];
    if (first % g != 0 || first + g > world) return false;
    for (std::int64_t i = 0; i < g; ++i) {
      if (ranks[i] != first + i) return false;
    }
  }
  return true;
}

std::vector<DocPiece> schedule_pieces(const ScheduleRequest& request) {
  const std::int64_t limit = piece_limit(request);
  std::vector<DocPiece> pieces;
  pieces.reserve(request.doc_lengths.size());
  for (std::size_t d = 0; d < request.doc_lengths.size(); ++d) {
    const std::int64_t len = request.doc_lengths[d];
    for (std::int64_t off = 0; off < len; off += limit) {
      pieces.push_back({static_cast<std::int64_t>(d), off, std::min(limit, len - off)});
    }
  }
  return pieces;
}

CpWorkload slot_workload(const ScheduleRequest& request, const ScheduleSlot& slot) {
  CpWorkload w;
  w.doc_lengths.reserve(slot.pieces.size());
  for (const DocPiece& piece : slot.pieces) {
    w.doc_lengths.push_back(piece.length);
    w.tokens += piece.length;
  }
  w.mask = request.mask;
  w.block_size = request.block_size;
  w.cp_size = static_cast<std::int32_t>(slot.ranks.size());
  w.member_weights = slot.member_weights;
  return w;
}

Status validate_plan_shape(const CpWorkload& w, const ShardPlan& plan) {
  if (plan.cp_size != w.cp_size) {
    return invalid_argument("plan has cp_size " + str(plan.cp_size) + ", expected " +
                            str(w.cp_size));
  }
  if (plan.strategy_used.empty()) return invalid_argument("plan by rule names no CP strategy");
  if (plan.shard_len < ceil_div(w.tokens, w.cp_size) || plan.shard_len > kMaxRowTokens) {
    return invalid_argument("plan has shard_len " + str(plan.shard_len) + "; " + str(w.cp_size) +
                            " shards must hold the row's " + str(w.tokens) + " tokens");
  }
  if (plan.padding != plan.shard_len * w.cp_size - w.tokens) {
    return invalid_argument("plan has padding " + str(plan.padding) + ", expected " +
                            str(plan.shard_len * w.cp_size - w.tokens) + " (" + str(w.cp_size) +
                            " x " + str(plan.shard_len) + " entries for " + str(w.tokens) +
                            " tokens)");
  }
  return Status::ok();
}

Status validate_schedule(const ScheduleRequest& request, const Schedule& schedule,
                         PlanCheck plans) {
  const std::int64_t limit = piece_limit(request);
  const std::int64_t budget = request.max_tokens_per_rank;
  // First piece index of every document: document d's piece at offset o is
  // first[d] + o / limit.
  std::vector<std::int64_t> first(request.doc_lengths.size() + 1, 0);
  for (std::size_t d = 0; d < request.doc_lengths.size(); ++d) {
    first[d + 1] = first[d] + ceil_div(request.doc_lengths[d], limit);
  }
  std::vector<std::int64_t> placed_in(static_cast<std::size_t>(first.back()), -1);
  std::vector<std::pair<std::int64_t, std::int64_t>> rank_waves;  // (wave, rank) -> slot

  for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
    const ScheduleSlot& slot = schedule.slots[s];
    const std::string where = "schedule slot " + str(static_cast<std::int64_t>(s));
    const auto g = static_cast<std::int64_t>(slot.ranks.size());
    if (g < 1) return invalid_argument(where + " has no ranks; a slot needs at least one");
    if (slot.wave < 0) {
      return invalid_argument(where + " has wave " + str(slot.wave) + "; waves start at 0");
    }
    if (slot.pieces.empty()) {
      return invalid_argument(where + " runs no document piece; drop it or give it one");
    }
    for (std::int64_t i = 0; i < g; ++i) {
      const std::int32_t rank = slot.ranks[i];
      if (rank < 0 || rank >= request.world_size) {
        return invalid_argument(where + " member " + str(i) + " is rank " + str(rank) +
                                ", outside [0, " + str(request.world_size) + ")");
      }
      rank_waves.emplace_back(static_cast<std::int64_t>(slot.wave) * request.world_size + rank,
                              static_cast<std::int64_t>(s));
    }
    std::int64_t row = 0;
    for (const DocPiece& piece : slot.pieces) {
      const auto docs = static_cast<std::int64_t>(request.doc_lengths.size());
      if (piece.doc < 0 || piece.doc >= docs) {
        return invalid_argument(where + " names document " + str(piece.doc) + ", outside [0, " +
                                str(docs) + ")");
      }
      const std::int64_t len = request.doc_lengths[piece.doc];
      if (piece.offset < 0 || piece.offset >= len || piece.offset % limit != 0 ||
          piece.length != std::min(limit, len - piece.offset)) {
        return invalid_argument(where + " holds document " + str(piece.doc) + " tokens [" +
                                str(piece.offset) + ", " + str(piece.offset + piece.length) +
                                "), not a piece cut at multiples of W x T = " + str(limit) +
                                " of its " + str(len) + " tokens");
      }
      std::int64_t& owner = placed_in[first[piece.doc] + piece.offset / limit];
      if (owner >= 0) {
        return invalid_argument(where + " repeats document " + str(piece.doc) + " offset " +
                                str(piece.offset) + ", already in slot " + str(owner));
      }
      owner = static_cast<std::int64_t>(s);
      row += piece.length;
    }
    if (row > g * budget) {
      return invalid_argument(where + " runs " + str(row) + " tokens on " + str(g) +
                              " ranks, more than " + str(g) + " x T = " + str(g * budget));
    }
    const CpWorkload w = slot_workload(request, slot);
    const bool by_rule = plans == PlanCheck::kByRule && slot.compact();
    if (Status status = by_rule ? validate_plan_shape(w, slot.plan) : validate_plan(w, slot.plan);
        !status) {
      return invalid_argument(where + ": " + status.message());
    }
    if (slot.plan.shard_len > budget) {
      return invalid_argument(where + " gives each member " + str(slot.plan.shard_len) +
                              " tokens (padding included), more than T = " + str(budget));
    }
  }
  const GroupShapes& shapes = request.group_shapes;
  for (std::size_t s = 0; s < schedule.slots.size() && shapes.restricts(); ++s) {
    const std::vector<std::int32_t>& ranks = schedule.slots[s].ranks;
    if (!group_shape_allowed(shapes, request.world_size, ranks)) {
      return invalid_argument("schedule slot " + str(static_cast<std::int64_t>(s)) + " spans " +
                              str(static_cast<std::int64_t>(ranks.size())) + " ranks from rank " +
                              str(ranks[0]) + ", not a group the request's group_shapes allow");
    }
  }
  std::sort(rank_waves.begin(), rank_waves.end());
  for (std::size_t i = 1; i < rank_waves.size(); ++i) {
    if (rank_waves[i].first == rank_waves[i - 1].first) {
      const std::int64_t key = rank_waves[i].first;
      return invalid_argument("schedule slots " + str(rank_waves[i - 1].second) + " and " +
                              str(rank_waves[i].second) + " both hold rank " +
                              str(key % request.world_size) + " in wave " +
                              str(key / request.world_size) + "; a rank runs one slot per wave");
    }
  }
  if (shapes.every_wave) {
    // The keys wave x W + rank are sorted and distinct now: every rank holds
    // a slot in every wave 0 .. last exactly when key i sits at index i and
    // the count is a whole number of waves.
    const auto n = static_cast<std::int64_t>(rank_waves.size());
    std::int64_t missing = n % request.world_size == 0 ? -1 : n;
    for (std::int64_t i = 0; i < n; ++i) {
      if (rank_waves[static_cast<std::size_t>(i)].first != i) {
        missing = i;
        break;
      }
    }
    if (missing >= 0) {
      return invalid_argument("rank " + str(missing % request.world_size) +
                              " holds no slot in wave " + str(missing / request.world_size) +
                              "; the request's group_shapes need every rank in every wave");
    }
    const std::int64_t waves = n / request.world_size;
    if (waves % shapes.wave_multiple != 0) {
      return invalid_argument("the schedule has " + str(waves) +
                              " waves; the request's group_shapes need a multiple of " +
                              str(shapes.wave_multiple));
    }
  }
  for (std::size_t d = 0; d < request.doc_lengths.size(); ++d) {
    for (std::int64_t k = first[d]; k < first[d + 1]; ++k) {
      if (placed_in[k] < 0) {
        return invalid_argument("schedule never places document " +
                                str(static_cast<std::int64_t>(d)) + " tokens from " +
                                str((k - first[d]) * limit) + " (" + str(request.doc_lengths[d]) +
                                " tokens)");
      }
    }
  }
  return Status::ok();
}

SlotCounts slot_counts_of(const std::vector<RankWork>& work,
                          const std::vector<std::int64_t>* full_tiles) {
  SlotCounts counts;
  counts.tokens.reserve(work.size());
  counts.tiles.reserve(work.size());
  counts.partial.reserve(work.size());
  for (std::size_t m = 0; m < work.size(); ++m) {
    counts.tokens.push_back(work[m].tokens);
    counts.tiles.push_back(work[m].tiles);
    counts.partial.push_back(full_tiles ? work[m].tiles - (*full_tiles)[m] : 0);
  }
  return counts;
}

std::vector<std::int32_t> start_exchange(SlotCounts& counts) {
  std::vector<std::int32_t> index(counts.tokens.size(), -1);
  counts.active.clear();
  for (std::size_t m = 0; m < counts.tokens.size(); ++m) {
    if (counts.tokens[m] == 0) continue;
    index[m] = static_cast<std::int32_t>(counts.active.size());
    counts.active.push_back(static_cast<std::int32_t>(m));
  }
  counts.received.assign(counts.active.size() * counts.active.size(), 0);
  return index;
}

double member_compute_seconds(const CostProfile& p, std::int64_t tokens, std::int64_t tiles,
                              std::int64_t partial, std::int64_t row) {
  return p.tile_seconds * static_cast<double>(tiles) +
         p.token_seconds * static_cast<double>(tokens) + p.slot_seconds +
         p.row_token_seconds * static_cast<double>(row) +
         p.partial_tile_seconds * static_cast<double>(partial);
}

SlotCost price_slot_counts(const CostProfile& p, const std::vector<std::int32_t>& ranks,
                           const SlotCounts& counts) {
  const std::size_t g = counts.tokens.size();
  SlotCost cost;
  cost.members.resize(g);
  // N: the row's real tokens, every member's share together.
  std::int64_t row = 0;
  for (const std::int64_t t : counts.tokens) row += t;
  for (std::size_t m = 0; m < g; ++m) {
    SlotMemberCost& mc = cost.members[m];
    mc.rank = ranks[m];
    mc.tokens = counts.tokens[m];
    mc.tiles = counts.tiles[m];
    mc.partial_tiles = counts.partial[m];
    mc.compute_seconds = member_compute_seconds(p, mc.tokens, mc.tiles, mc.partial_tiles, row);
  }
  const std::int32_t node_size = p.ranks_per_node;
  const std::size_t a = counts.received.empty() ? 0 : counts.active.size();
  // The active members' nodes, divided out once rather than per pair.
  std::vector<std::int32_t> node(a);
  for (std::size_t x = 0; x < a; ++x) node[x] = ranks[counts.active[x]] / node_size;
  for (std::size_t x = 0; x < a; ++x) {
    const auto m = static_cast<std::size_t>(counts.active[x]);
    SlotMemberCost& mc = cost.members[m];
    std::int64_t received = 0;
    std::int64_t sent = 0;
    double seconds = 0;
    // Members without tokens exchange nothing: the peers in ascending
    // order are the active ones with something in either direction.
    for (std::size_t y = 0; y < a; ++y) {
      if (y == x) continue;
      const std::int64_t in = counts.received[x * a + y];
      const std::int64_t out = counts.received[y * a + x];
      if (in == 0 && out == 0) continue;
      received += in;
      sent += out;
      ++mc.peers;
      const bool same_node = node[x] == node[y];
      const double bandwidth =
          same_node ? p.intra_node_bytes_per_second : p.inter_node_bytes_per_second;
      // Forward: K/V in, own K/V out; backward: dK/dV of both back the
      // other way. Each direction carries in + out, in parallel.
      seconds += static_cast<double>(in + out) * p.kv_bytes_per_token / bandwidth;
    }
    mc.bytes_received = bytes_of(static_cast<double>(received) * p.kv_bytes_per_token);
    mc.bytes_sent = bytes_of(static_cast<double>(sent) * p.kv_bytes_per_token);
    mc.comm_seconds = seconds + p.latency_seconds * mc.peers;
    // Overlap (docs/HYBRID.md section 2): comm_seconds is what compute
    // leaves exposed.
    mc.comm_seconds -= p.exchange_overlap * std::min(mc.compute_seconds, mc.comm_seconds);
  }
  double longest = 0;
  for (const SlotMemberCost& mc : cost.members) {
    longest = std::max(longest, mc.compute_seconds + mc.comm_seconds);
  }
  cost.end_seconds = longest;  // shifted by the start in price_timeline
  return cost;
}

SlotCost evaluate_slot(const ScheduleRequest& request, const ScheduleSlot& slot) {
  return cost_slot(request, slot);
}

ScheduleCost evaluate_schedule(const ScheduleRequest& request, const Schedule& schedule) {
  return price_timeline(request, schedule,
                        [&](std::size_t s) { return cost_slot(request, schedule.slots[s]); });
}

ScheduleCost price_timeline(const ScheduleRequest& request, const Schedule& schedule,
                            const std::function<SlotCost(std::size_t)>& slot_cost) {
  const auto w = static_cast<std::size_t>(request.world_size);
  ScheduleCost cost;
  cost.slots.resize(schedule.slots.size());
  cost.busy_seconds.assign(w, 0.0);
  cost.idle_seconds.assign(w, 0.0);
  std::vector<std::size_t> order(schedule.slots.size());
  for (std::size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return schedule.slots[x].wave < schedule.slots[y].wave;
  });
  std::vector<double> free_at(w, 0.0);
  double moved = 0;
  double allgather = 0;
  for (const std::size_t s : order) {
    const ScheduleSlot& slot = schedule.slots[s];
    SlotCost sc = slot_cost(s);
    double start = 0;
    for (const std::int32_t r : slot.ranks) start = std::max(start, free_at[r]);
    sc.start_seconds = start;
    sc.end_seconds = start + sc.end_seconds;
    std::int64_t real = 0;
    for (const SlotMemberCost& mc : sc.members) {
      free_at[mc.rank] = sc.end_seconds;
      cost.busy_seconds[mc.rank] += mc.compute_seconds + mc.comm_seconds;
      moved += static_cast<double>(mc.bytes_received);
      real += mc.tokens;
    }
    const auto g = static_cast<double>(slot.ranks.size());
    allgather += (g - 1) * static_cast<double>(real) * request.profile.kv_bytes_per_token;
    cost.slots[s] = std::move(sc);
  }
  cost.bytes_moved = bytes_of(moved);
  cost.allgather_bytes = bytes_of(allgather);
  for (const double t : free_at) cost.step_seconds = std::max(cost.step_seconds, t);
  for (std::size_t r = 0; r < w; ++r)
    cost.idle_seconds[r] = cost.step_seconds - cost.busy_seconds[r];
  return cost;
}

}  // namespace fulcrum
