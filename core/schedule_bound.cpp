// The certified lower bound on a schedule's step time (docs/HYBRID.md
// section 4 proves each term; this file is their one implementation).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"

namespace fulcrum {
namespace {

// How many queries of a piece of `len` tokens see at least `s` keys.
std::int64_t queries_seeing_at_least(const MaskSpec& mask, std::int64_t len, std::int64_t s) {
  switch (mask.kind) {
    case MaskKind::kCausal:  // query i sees i + 1
      return std::max<std::int64_t>(0, len - s + 1);
    case MaskKind::kFull:
      return s <= len ? len : 0;
    case MaskKind::kSliding:  // min(i + 1, W)
      return s <= std::min(mask.param, len) ? len - s + 1 : 0;
    case MaskKind::kPrefix: {  // max(i + 1, min(L, len))
      const std::int64_t flat = std::min(mask.param, len);
      return s <= flat ? len : std::max<std::int64_t>(0, len - s + 1);
    }
    case MaskKind::kBlockSparse:
      break;
  }
  return 0;
}

// Keys the query at 1-based position q of a piece of `len` tokens sees; never
// decreasing in q for every dense mask.
std::int64_t keys_at(const MaskSpec& mask, std::int64_t len, std::int64_t q) {
  switch (mask.kind) {
    case MaskKind::kCausal:
      return q;
    case MaskKind::kFull:
      return len;
    case MaskKind::kSliding:
      return std::min(q, mask.param);
    case MaskKind::kPrefix:
      return std::max(q, std::min(mask.param, len));
    case MaskKind::kBlockSparse:
      break;
  }
  return 0;
}

std::int64_t most_keys(const MaskSpec& mask, std::int64_t len) {
  return mask.kind == MaskKind::kSliding ? std::min(mask.param, len) : len;
}

// Whether every query of a piece sees every earlier position of it (causal,
// full, prefix; sliding only when the window covers the piece): then any two
// members holding tokens of the piece exchange K/V (section 4, latency).
bool sees_every_earlier(const MaskSpec& mask, std::int64_t len) {
  return mask.kind != MaskKind::kSliding || mask.param >= len;
}

// The least tile count of the batch: a local query block holding query q has
// at least ceil(keys(q)/B) tiles, and holds at most B queries. The least sum
// of block maxima over any grouping of the batch's queries into groups of at
// most B is sum_k ceil(c_k / B), c_k = #queries with ceil(keys/B) >= k, i.e.
// with keys >= (k-1)B + 1 (sort descending, group consecutively).
// `lengths` sorted descending.
double least_tiles(const MaskSpec& mask, const std::vector<std::int64_t>& lengths, std::int64_t b) {
  double tiles = 0;
  std::size_t active = lengths.size();
  for (std::int64_t k = 1;; ++k) {
    const std::int64_t s = (k - 1) * b + 1;
    while (active > 0 && most_keys(mask, lengths[active - 1]) < s) --active;
    if (active == 0) break;
    std::int64_t count = 0;
    for (std::size_t i = 0; i < active; ++i) count += queries_seeing_at_least(mask, lengths[i], s);
    tiles += static_cast<double>(ceil_div(count, b));
  }
  return tiles;
}

// Receiving `missing` K/V tokens: a member's peers on its own node number
// at most min(node, W) - 1 and hold at most T tokens each, so at most that
// many come over the intra-node link (when it is the faster one) and the
// rest cross nodes. Convex in `missing`, so summing it over parts of one
// member's receipt never exceeds the whole's.
struct ReceiveTime {
  double intra = 0;
  double inter = 0;
  double near_limit = 0;  // tokens that may come over the intra-node link
  double kv_bytes = 0;

  ReceiveTime(const CostProfile& p, std::int32_t world, std::int64_t budget)
      : intra(p.intra_node_bytes_per_second),
        inter(p.inter_node_bytes_per_second),
        near_limit(static_cast<double>(std::min(p.ranks_per_node, world) - 1) *
                   static_cast<double>(budget)),
        kv_bytes(p.kv_bytes_per_token) {}

  double operator()(double missing) const {
    double seconds = missing / inter;
    if (intra > inter) {
      const double near = std::min(missing, near_limit);
      seconds = near / intra + (missing - near) / inter;
    }
    return seconds * kv_bytes;
  }
};

// K/V every schedule moves: in a piece's slot, order its members by the last
// position of the piece they hold; the first k - 1 hold at most (k - 1) T of
// its tokens, so the k-th holds a query at position >= L - (k - 1) T and,
// holding at most T tokens, receives at least keys(L - (k - 1) T) - T of
// that query's keys. Each token received is one member's "in" and another's
// "out", and both are charged: busy time sums to at least twice every
// receipt. Stopping the sum early keeps it a lower bound (terms are >= 0).
double least_exchange(const ScheduleRequest& request, const std::vector<std::int64_t>& lengths,
                      const ReceiveTime& receive) {
  const std::int64_t budget = request.max_tokens_per_rank;
  double exchange = 0;
  std::int64_t terms = 0;
  for (const std::int64_t len : lengths) {
    if (most_keys(request.mask, len) <= budget || terms > (std::int64_t{1} << 22)) break;
    for (std::int64_t k = 1; len - (k - 1) * budget >= 1 && k <= 65536; ++k, ++terms) {
      const std::int64_t missing = keys_at(request.mask, len, len - (k - 1) * budget) - budget;
      if (missing <= 0) break;  // positions only fall as k grows
      exchange += 2 * receive(static_cast<double>(missing));
    }
  }
  return exchange;
}

// Latency every schedule pays, summed over members: a piece of L > T tokens
// whose queries see every earlier position lies on m >= ceil(L / T)
// members of its slot, any two of which exchange K/V, so each has at least
// m - 1 peers. A member holding t_P tokens of several such pieces (sum of
// t_P <= T) has at least max_P (m_P - 1) >= sum_P (t_P / T)(m_P - 1) peers;
// summed over members that is sum_P (L_P / T)(ceil(L_P / T) - 1).
double least_peer_latency(const ScheduleRequest& request,
                          const std::vector<std::int64_t>& lengths) {
  const std::int64_t budget = request.max_tokens_per_rank;
  double peers = 0;
  for (const std::int64_t len : lengths) {
    if (len <= budget) break;  // sorted descending
    if (!sees_every_earlier(request.mask, len)) continue;
    peers += static_cast<double>(len) / static_cast<double>(budget) *
             static_cast<double>(ceil_div(len, budget) - 1);
  }
  return request.profile.latency_seconds * peers;
}

// The member holding a piece's query with the most keys (s of them) ends its
// slot no sooner than its own compute (that query's block alone has
// ceil(s/B) tiles) plus, when s > T, receiving the K/V of the s - T keys it
// cannot hold, and one latency per peer: those keys lie on peers holding at
// most T tokens each, so there are at least ceil(s / T) - 1 of them.
double longest_member(const ScheduleRequest& request, const std::vector<std::int64_t>& lengths,
                      const ReceiveTime& receive) {
  const CostProfile& p = request.profile;
  const std::int64_t budget = request.max_tokens_per_rank;
  double longest = 0;
  for (const std::int64_t len : lengths) {
    const std::int64_t s = most_keys(request.mask, len);
    double member = p.slot_seconds + p.token_seconds +
                    p.tile_seconds * static_cast<double>(ceil_div(s, request.block_size));
    if (s > budget) {
      member += receive(static_cast<double>(s - budget)) +
                p.latency_seconds * static_cast<double>(ceil_div(s, budget) - 1);
    }
    longest = std::max(longest, member);
  }
  return longest;
}

}  // namespace

BoundTerms step_time_lower_bound_terms(const ScheduleRequest& request) {
  const CostProfile& p = request.profile;
  const std::int64_t budget = request.max_tokens_per_rank;
  std::vector<std::int64_t> lengths;
  std::int64_t total = 0;
  for (const DocPiece& piece : schedule_pieces(request)) {
    lengths.push_back(piece.length);
    total += piece.length;
  }
  std::sort(lengths.begin(), lengths.end(), std::greater<>());
  const ReceiveTime receive(p, request.world_size, budget);

  // Every rank's busy time sums to at least the compute of all slots: tiles,
  // tokens, and one fixed cost per (slot, member) holding tokens, of which
  // there are at least ceil(total / T); plus the least exchange and latency.
  BoundTerms out;
  out.tiles = p.tile_seconds * least_tiles(request.mask, lengths, request.block_size);
  out.tokens = p.token_seconds * static_cast<double>(total);
  out.fixed = p.slot_seconds * static_cast<double>(ceil_div(total, budget));
  out.exchange = least_exchange(request, lengths, receive);
  out.latency = least_peer_latency(request, lengths);
  out.average =
      (out.tiles + out.tokens + out.fixed + out.exchange + out.latency) / request.world_size;
  out.per_piece = longest_member(request, lengths, receive);
  out.bound = std::max(out.average, out.per_piece);
  return out;
}

double step_time_lower_bound(const ScheduleRequest& request) {
  return step_time_lower_bound_terms(request).bound;
}

}  // namespace fulcrum
