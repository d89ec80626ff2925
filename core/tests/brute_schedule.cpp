// Independent recounts of schedules; see brute_schedule.h. Deliberately
// simple and deliberately sharing nothing with core/.
#include "brute_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "brute_force.h"

namespace fulcrum::cp {
namespace {

CpWorkload row_of(const ScheduleRequest& request, const ScheduleSlot& slot) {
  CpWorkload w;
  for (const DocPiece& piece : slot.pieces) {
    w.doc_lengths.push_back(piece.length);
    w.tokens += piece.length;
  }
  w.mask = request.mask;
  w.block_size = request.block_size;
  w.cp_size = static_cast<std::int32_t>(slot.ranks.size());
  return w;
}

// Where every position's document starts and ends.
struct Documents {
  std::vector<std::int64_t> start_of;
  std::vector<std::int64_t> end_of;
};

Documents documents_of(const CpWorkload& w) {
  Documents d;
  d.start_of.resize(static_cast<std::size_t>(w.tokens));
  d.end_of.resize(static_cast<std::size_t>(w.tokens));
  std::int64_t s = 0;
  for (const std::int64_t len : w.doc_lengths) {
    for (std::int64_t p = s; p < s + len; ++p) {
      d.start_of[static_cast<std::size_t>(p)] = s;
      d.end_of[static_cast<std::size_t>(p)] = s + len;
    }
    s += len;
  }
  return d;
}

// The key blocks any of `queries` may see, one flag per block of the row.
std::vector<char> needed_blocks(const CpWorkload& w, const Documents& docs,
                                const std::vector<std::int64_t>& queries,
                                std::int64_t pairwise_limit) {
  const std::int64_t n = w.tokens;
  const std::int64_t b = w.block_size;
  std::vector<char> needed(static_cast<std::size_t>((n + b - 1) / b), 0);
  if (n <= pairwise_limit) {
    const BruteMask mask(w);
    for (const std::int64_t q : queries) {
      for (std::int64_t k = 0; k < n; ++k) {
        if (mask.allowed(q, k)) needed[static_cast<std::size_t>(k / b)] = 1;
      }
    }
    return needed;
  }
  // Each query's key interval from the mask definitions (document-local).
  std::vector<std::int64_t> mark(needed.size() + 1, 0);  // difference array
  for (const std::int64_t q : queries) {
    const std::int64_t ds = docs.start_of[static_cast<std::size_t>(q)];
    const std::int64_t de = docs.end_of[static_cast<std::size_t>(q)];
    const std::int64_t i = q - ds;
    std::int64_t lo = 0;
    std::int64_t hi = i;
    switch (w.mask.kind) {
      case MaskKind::kCausal:
        break;
      case MaskKind::kFull:
        hi = de - ds - 1;
        break;
      case MaskKind::kSliding:
        lo = std::max<std::int64_t>(0, i - w.mask.param + 1);
        break;
      case MaskKind::kPrefix:
        hi = std::max(i, std::min(w.mask.param, de - ds) - 1);
        break;
      case MaskKind::kBlockSparse:
        break;
    }
    ++mark[static_cast<std::size_t>((ds + lo) / b)];
    --mark[static_cast<std::size_t>((ds + hi) / b + 1)];
  }
  std::int64_t run = 0;
  for (std::size_t k = 0; k < needed.size(); ++k) {
    run += mark[k];
    needed[k] = run > 0 ? 1 : 0;
  }
  return needed;
}

// A member's tokens as (block, count), blocks ascending.
std::vector<std::pair<std::int64_t, std::int64_t>> per_block(std::vector<std::int64_t> positions,
                                                             std::int64_t b) {
  std::sort(positions.begin(), positions.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const std::int64_t pos : positions) {
    if (out.empty() || out.back().first != pos / b) out.emplace_back(pos / b, 0);
    ++out.back().second;
  }
  return out;
}

// Overlap: a member is busy for compute + comm at overlap 0 and for the
// longer of the two at overlap 1, linearly between; its comm is what the
// compute leaves of that.
double exposed_comm(double compute, double comm, double overlap) {
  const double busy = (1 - overlap) * (compute + comm) + overlap * std::max(compute, comm);
  return busy - compute;
}

}  // namespace

BruteScheduleCost brute_schedule_cost(const ScheduleRequest& request, const Schedule& schedule,
                                      std::int64_t pairwise_limit) {
  const CostProfile& p = request.profile;
  BruteScheduleCost out;
  out.slots.resize(schedule.slots.size());
  out.busy.assign(static_cast<std::size_t>(request.world_size), 0.0);

  // Every slot's members on their own.
  for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
    const ScheduleSlot& slot = schedule.slots[s];
    const CpWorkload w = row_of(request, slot);
    std::vector<std::int64_t> full;
    const std::vector<RankWork> work = w.tokens <= pairwise_limit
                                           ? brute_work(w, slot.plan, &full)
                                           : interval_work(w, slot.plan, &full);
    const std::size_t g = slot.ranks.size();
    std::vector<std::vector<std::int64_t>> held(g);
    for (std::size_t m = 0; m < g; ++m) {
      for (std::int64_t t = 0; t < slot.plan.shard_len; ++t) {
        const std::int64_t pos = slot.plan.positions[m * slot.plan.shard_len + t];
        if (pos >= 0) held[m].push_back(pos);
      }
    }
    // from[m][j]: K/V tokens m receives from j.
    std::vector<std::vector<std::int64_t>> from(g, std::vector<std::int64_t>(g, 0));
    if (g > 1) {
      const Documents docs = w.tokens > pairwise_limit ? documents_of(w) : Documents{};
      std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> blocks(g);
      for (std::size_t j = 0; j < g; ++j) blocks[j] = per_block(held[j], w.block_size);
      for (std::size_t m = 0; m < g; ++m) {
        const std::vector<char> needed = needed_blocks(w, docs, held[m], pairwise_limit);
        for (std::size_t j = 0; j < g; ++j) {
          if (j == m) continue;
          for (const auto& [block, count] : blocks[j]) {
            if (needed[static_cast<std::size_t>(block)]) from[m][j] += count;
          }
        }
      }
    }
    BruteSlot& bs = out.slots[s];
    bs.members.resize(g);
    for (std::size_t m = 0; m < g; ++m) {
      BruteMember& bm = bs.members[m];
      bm.rank = slot.ranks[m];
      bm.tokens = static_cast<std::int64_t>(held[m].size());
      bm.tiles = work[m].tiles;
      bm.partial_tiles = work[m].tiles - full[m];
      // The row term: every member pays it on the row's length, taken from
      // the slot's pieces (w), not from the members' shares; partial tiles
      // pay their term on top of a tile's.
      bm.compute = p.tile_seconds * static_cast<double>(bm.tiles) +
                   p.token_seconds * static_cast<double>(bm.tokens) + p.slot_seconds +
                   p.row_token_seconds * static_cast<double>(w.tokens) +
                   p.partial_tile_seconds * static_cast<double>(bm.partial_tiles);
      for (std::size_t j = 0; j < g; ++j) {
        if (j == m || (from[m][j] == 0 && from[j][m] == 0)) continue;
        bm.kv_tokens_in += from[m][j];
        bm.kv_tokens_out += from[j][m];
        ++bm.peers;
        const bool one_node = slot.ranks[m] / p.ranks_per_node == slot.ranks[j] / p.ranks_per_node;
        const double bw = one_node ? p.intra_node_bytes_per_second : p.inter_node_bytes_per_second;
        bm.comm += static_cast<double>(from[m][j] + from[j][m]) * p.kv_bytes_per_token / bw;
      }
      bm.comm += p.latency_seconds * bm.peers;
      bm.comm = exposed_comm(bm.compute, bm.comm, p.exchange_overlap);
      out.kv_tokens_moved += bm.kv_tokens_in;
    }
    out.allgather_kv_tokens += static_cast<std::int64_t>(g - 1) * w.tokens;
  }

  // The timeline: wave by wave, slots of one wave in index order, each
  // starting when its last member is free.
  std::set<std::int32_t> waves;
  for (const ScheduleSlot& slot : schedule.slots) waves.insert(slot.wave);
  std::vector<double> free(static_cast<std::size_t>(request.world_size), 0.0);
  for (const std::int32_t wave : waves) {
    for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
      if (schedule.slots[s].wave != wave) continue;
      BruteSlot& bs = out.slots[s];
      double longest = 0;
      for (const BruteMember& bm : bs.members) {
        bs.start = std::max(bs.start, free[static_cast<std::size_t>(bm.rank)]);
        longest = std::max(longest, bm.compute + bm.comm);
        out.busy[static_cast<std::size_t>(bm.rank)] += bm.compute + bm.comm;
      }
      bs.end = bs.start + longest;
      for (const BruteMember& bm : bs.members) free[static_cast<std::size_t>(bm.rank)] = bs.end;
    }
  }
  for (const double f : free) out.step = std::max(out.step, f);
  return out;
}

std::string brute_schedule_check(const ScheduleRequest& request, const Schedule& schedule) {
  const std::int64_t cut =
      static_cast<std::int64_t>(request.world_size) * request.max_tokens_per_rank;
  // Every (doc, offset) -> length a schedule must place once.
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> owed;
  for (std::size_t d = 0; d < request.doc_lengths.size(); ++d) {
    const std::int64_t len = request.doc_lengths[d];
    for (std::int64_t off = 0; off < len; off += cut) {
      owed[{static_cast<std::int64_t>(d), off}] = std::min(cut, len - off);
    }
  }
  std::set<std::pair<std::int32_t, std::int32_t>> rank_waves;
  for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
    const ScheduleSlot& slot = schedule.slots[s];
    const std::string where = "slot " + std::to_string(s) + ": ";
    if (slot.ranks.empty()) return where + "no ranks";
    if (slot.pieces.empty()) return where + "no pieces";
    if (slot.wave < 0) return where + "negative wave";
    std::set<std::int32_t> distinct;
    for (const std::int32_t r : slot.ranks) {
      if (r < 0 || r >= request.world_size) return where + "rank out of range";
      if (!distinct.insert(r).second) return where + "rank repeated";
      if (!rank_waves.insert({r, slot.wave}).second) return where + "rank twice in a wave";
    }
    for (const DocPiece& piece : slot.pieces) {
      const auto it = owed.find({piece.doc, piece.offset});
      if (it == owed.end()) return where + "piece not owed (or placed twice)";
      if (it->second != piece.length) return where + "piece length wrong";
      owed.erase(it);
    }
    if (slot.plan.shard_len > request.max_tokens_per_rank) return where + "member over T";
    const BruteCheck plan = brute_check(row_of(request, slot), slot.plan);
    if (!plan.ok()) return where + plan.error;
  }
  if (!owed.empty()) return "a piece is never placed";
  return "";
}

}  // namespace fulcrum::cp
