// The certified lower bound on a schedule's step time (docs/HYBRID.md
// section 4 proves each term; this file is their one implementation).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <utility>
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

// The least cross-node K/V of a piece whose queries see every earlier
// position (section 4, "cross-node pairs"): a member u whose last position
// of the piece lies above member v's receives every token v holds of it, so
// at least sum over members v of t_v c_v tokens cross nodes, c_v the
// members on other nodes whose last position lies above v's. Any i of the
// members have c's summing to at least their pairs on different nodes, at
// least cross(i) with nodes of at most R = min(ranks_per_node, W) members;
// with t_v <= T and sum t_v = L, the sum is at least
// (T - r) cross(n) + r cross(n + 1), n = floor(L / T), r = L - n T. When
// every query sees the whole piece (full, or a prefix covering it), u
// receives v's tokens whichever last position is higher: twice that.
struct CrossNode {
  double node = 1;
  double budget = 1;

  CrossNode(const CostProfile& p, std::int32_t world, std::int64_t t)
      : node(static_cast<double>(std::min(p.ranks_per_node, world))),
        budget(static_cast<double>(t)) {}

  // The fewest pairs on different nodes among i members, nodes filled whole.
  double cross(double i) const {
    const double full = std::floor(i / node);
    const double rest = i - full * node;
    return (i * (i - 1) - full * node * (node - 1) - rest * (rest - 1)) / 2;
  }

  double tokens(std::int64_t len) const {
    const double n = std::floor(static_cast<double>(len) / budget);
    const double r = static_cast<double>(len) - n * budget;
    return (budget - r) * cross(n) + r * cross(n + 1);
  }
};

// One piece's least exchange, in and out. Its members receive at least
// `all` tokens of it, of which at least `far` cross nodes, so (the intra-node
// link being the faster) at least 2 x kv x ((all - far) / intra + far / inter)
// seconds. all: the sum of the per-member receipts keys(p_k) - T (> 0
// only), or for a piece whose queries see every earlier position the sum of
// keys(p_k) over the members counted less L (they hold L tokens of it in all,
// each below its p_k), the larger. far: the sum of each receipt's excess over
// what a member's node-mates may hold ((min(node, W) - 1) T), or for such a
// piece the cross-node count, or all less (R - 1) L, the largest. Without
// the cross-node counts and the keys(p_k) sum (`by_member_only`) this is the
// per-member argument alone, sum over k of 2 x ReceiveTime(keys(p_k) - T).
struct PieceExchange {
  double missing = 0;
  double keys = 0;
  double beyond_node = 0;

  void add(std::int64_t keys_k, std::int64_t budget, const ReceiveTime& receive) {
    keys += static_cast<double>(keys_k);
    if (keys_k > budget) {
      const double x = static_cast<double>(keys_k - budget);
      missing += x;
      beyond_node += std::max(0.0, x - receive.near_limit);
    }
  }

  double seconds(const ScheduleRequest& request, std::int64_t len, const ReceiveTime& receive,
                 const CrossNode& cross, bool by_member_only) const {
    const bool pairs = !by_member_only && sees_every_earlier(request.mask, len);
    const bool whole = keys_at(request.mask, len, 1) == len;
    double all = missing;
    double far = beyond_node;
    if (pairs) {
      all = std::max(all, keys - static_cast<double>(len));
      far = std::max(far, (whole ? 2 : 1) * cross.tokens(len));
    }
    if (receive.intra <= receive.inter) return 2 * receive.kv_bytes * all / receive.inter;
    // Two members on one node exchange at most what both hold of the piece,
    // so at most (R - 1) L of its tokens move inside nodes.
    if (!by_member_only) far = std::max(far, all - (cross.node - 1) * static_cast<double>(len));
    all = std::max(all, far);
    return 2 * receive.kv_bytes * ((all - far) / receive.intra + far / receive.inter);
  }
};

// K/V every schedule moves: in a piece's slot, order its members by the last
// position of the piece they hold; the first k - 1 hold at most (k - 1) T of
// its tokens, so the k-th holds a query at position p_k >= L - (k - 1) T and,
// holding at most T tokens, receives at least keys(p_k) - T of that query's
// keys. Each token received is one member's "in" and another's "out", and
// both are charged: busy time sums to at least twice every receipt. Per
// piece, that with the cross-node count and the keys(p_k) sum
// (PieceExchange), or the per-member argument alone when `by_member_only`.
// Stopping the sum early keeps it a lower bound (terms are >= 0).
double least_exchange(const ScheduleRequest& request, const std::vector<std::int64_t>& lengths,
                      const ReceiveTime& receive, bool by_member_only) {
  const std::int64_t budget = request.max_tokens_per_rank;
  const CrossNode cross(request.profile, request.world_size, budget);
  double exchange = 0;
  std::int64_t terms = 0;
  for (const std::int64_t len : lengths) {
    if (most_keys(request.mask, len) <= budget || terms > (std::int64_t{1} << 22)) break;
    PieceExchange piece;
    for (std::int64_t k = 1; len - (k - 1) * budget >= 1 && k <= 65536; ++k, ++terms) {
      piece.add(keys_at(request.mask, len, len - (k - 1) * budget), budget, receive);
    }
    exchange += piece.seconds(request, len, receive, cross, by_member_only);
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

// The least work a member spends on the query at 1-based position q of a
// piece: its token's linear cost and its share of its local query block's
// tiles (the block has at least ceil(keys(q) / B) tiles and at most B
// queries). Constant on runs of positions, so sums over the top positions
// of a piece take one step per run.
struct QueryWork {
  const ScheduleRequest& r;

  double at(std::int64_t len, std::int64_t q) const {
    const std::int64_t b = r.block_size;
    return r.profile.token_seconds + r.profile.tile_seconds / static_cast<double>(b) *
                                         static_cast<double>(ceil_div(keys_at(r.mask, len, q), b));
  }

  // The first position of a run ending at q on which `at` is constant.
  std::int64_t run_start(std::int64_t len, std::int64_t q) const {
    const std::int64_t b = r.block_size;
    const auto block_of = [&](std::int64_t x) { return (x - 1) / b * b + 1; };
    switch (r.mask.kind) {
      case MaskKind::kCausal:
        return block_of(q);
      case MaskKind::kSliding:  // min(q, window): constant from the window's block up
        return block_of(std::min(q, r.mask.param));
      case MaskKind::kPrefix: {  // max(q, P'): constant up to P'
        const std::int64_t flat = std::min(r.mask.param, len);
        return q <= flat ? 1 : std::max(block_of(q), flat + 1);
      }
      case MaskKind::kFull:
      case MaskKind::kBlockSparse:
        break;
    }
    return 1;
  }

  // The sum of `at` over a piece, in closed form: sum over q of
  // ceil(keys(q) / B) from the causal sum C(n) = sum_{q <= n} ceil(q / B).
  double piece(std::int64_t len) const {
    const std::int64_t b = r.block_size;
    const auto causal = [&](std::int64_t n) {
      const double blocks = static_cast<double>(n / b);
      return static_cast<double>(b) * blocks * (blocks + 1) / 2 +
             static_cast<double>(n % b) * (blocks + 1);
    };
    double blocks = 0;
    switch (r.mask.kind) {
      case MaskKind::kCausal:
        blocks = causal(len);
        break;
      case MaskKind::kFull:
        blocks = static_cast<double>(len) * static_cast<double>(ceil_div(len, b));
        break;
      case MaskKind::kSliding: {
        const std::int64_t w = std::min(r.mask.param, len);
        blocks = causal(w) + static_cast<double>(len - w) * static_cast<double>(ceil_div(w, b));
        break;
      }
      case MaskKind::kPrefix: {
        const std::int64_t flat = std::min(r.mask.param, len);
        blocks = static_cast<double>(flat) * static_cast<double>(ceil_div(flat, b)) + causal(len) -
                 causal(flat);
        break;
      }
      case MaskKind::kBlockSparse:
        break;
    }
    return r.profile.token_seconds * static_cast<double>(len) +
           r.profile.tile_seconds / static_cast<double>(b) * blocks;
  }
};

// The top positions of a piece that k - 1 members could hold together,
// each holding at most T of its tokens and at most `cap` seconds of its work:
// the longest run L - n + 1 .. L within (k - 1) T tokens and (k - 1) cap
// seconds, taken greedily from the top (a hair more than fits is taken when
// rounding is in doubt: more taken only lowers the bound).
struct TopPositions {
  std::int64_t taken = 0;
  double work = 0;

  void grow(const QueryWork& qw, std::int64_t len, std::int64_t tokens, double seconds,
            std::int64_t& steps) {
    while (taken < len && taken < tokens) {
      ++steps;
      const std::int64_t q = len - taken;
      const double each = qw.at(len, q);
      std::int64_t can = std::min(q - qw.run_start(len, q) + 1, tokens - taken);
      if (each > 0 && seconds < std::numeric_limits<double>::infinity()) {
        const double fit = std::floor((seconds - work) / each * (1 + 1e-12) + 1e-9);
        if (fit < 1) return;
        if (fit < static_cast<double>(can)) can = static_cast<std::int64_t>(fit);
      }
      taken += can;
      work += static_cast<double>(can) * each;
    }
  }
};

// Exchange and latency when no member's time exceeds `cap` + c (section 4,
// "work caps"): the k-th member of a piece by last position holds a query
// at a position the first k - 1 cannot all hold above, so it receives at
// least keys(that position) - T (and the piece's receipts sum to at least
// the sum of those keys(p_k) - L), and the piece has at least as many
// members as positions remain; the cross-node count as without caps; its
// members' peers as in least_peer_latency, with
// weights t_P / T or work_P / cap, whichever gives more. Every figure only
// grows as cap falls (the count of members per piece stops at 65,536,
// whatever the cap). nullopt when it would take more than 2^24 steps: the
// caller then keeps the bound without caps.
struct Capped {
  double exchange = 0;
  double latency = 0;
};

std::optional<Capped> capped_exchange_latency(const ScheduleRequest& request,
                                              const std::vector<std::int64_t>& lengths,
                                              const std::vector<double>& works, double cap,
                                              const ReceiveTime& receive) {
  const std::int64_t budget = request.max_tokens_per_rank;
  const QueryWork qw{request};
  const CrossNode cross(request.profile, request.world_size, budget);
  Capped out;
  double by_tokens = 0;
  double by_work = 0;
  std::int64_t steps = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t len = lengths[i];
    if (len <= budget && works[i] <= cap) continue;  // one member may hold it all
    std::int64_t members = 1;
    PieceExchange piece;
    piece.add(keys_at(request.mask, len, len), budget, receive);
    // Where T of its heaviest tokens fit in the cap, only T limits the top.
    const bool capped = qw.at(len, len) * static_cast<double>(budget) > cap;
    TopPositions top;
    for (std::int64_t k = 2; k <= 65536; ++k) {
      if (++steps > (std::int64_t{1} << 24)) return std::nullopt;
      if (capped) {
        top.grow(qw, len, (k - 1) * budget, static_cast<double>(k - 1) * cap, steps);
      } else {
        top.taken = std::min(len, (k - 1) * budget);
      }
      const std::int64_t p = len - top.taken;
      if (p < 1) break;
      members = k;
      piece.add(keys_at(request.mask, len, p), budget, receive);
    }
    out.exchange += piece.seconds(request, len, receive, cross, false);
    members = std::max(members, ceil_div(len, budget));
    if (members < 2 || !sees_every_earlier(request.mask, len)) continue;
    by_tokens +=
        static_cast<double>(len) / static_cast<double>(budget) * static_cast<double>(members - 1);
    if (cap > 0) by_work += works[i] / cap * static_cast<double>(members - 1);
  }
  out.latency = request.profile.latency_seconds * std::max(by_tokens, by_work);
  return out;
}

// The least share of a member's exchange (K/V and latency) that overlap
// leaves exposed: a member's time is compute + comm - f min(compute, comm)
// >= compute + (1 - f) comm (docs/HYBRID.md section 2), and never below its
// compute, so the work caps hold as they are.
double exposed_share(const CostProfile& p) { return 1.0 - p.exchange_overlap; }

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
      member +=
          exposed_share(p) * (receive(static_cast<double>(s - budget)) +
                              p.latency_seconds * static_cast<double>(ceil_div(s, budget) - 1));
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
  out.exchange = exposed_share(p) * least_exchange(request, lengths, receive, false);
  out.exchange_by_member = exposed_share(p) * least_exchange(request, lengths, receive, true);
  out.latency = exposed_share(p) * least_peer_latency(request, lengths);
  out.average =
      (out.tiles + out.tokens + out.fixed + out.exchange + out.latency) / request.world_size;
  out.per_piece = longest_member(request, lengths, receive);
  out.bound = std::max(out.average, out.per_piece);
  out.average_at_bound = out.average;

  // Work caps (section 4): f(S), the bound computed as if no member's time
  // exceeded S, only falls as S grows, and the step S* satisfies
  // S* >= f(S*); so S* is at least the least S with S >= f(S), found by
  // bisection from the bound above (rounded down: lo never satisfies it
  // unless it is the bound itself).
  std::vector<double> works(lengths.size());
  const QueryWork qw{request};
  for (std::size_t i = 0; i < lengths.size(); ++i) works[i] = qw.piece(lengths[i]);
  const double fixed_part = out.tiles + out.tokens + out.fixed;
  // f at `step`, or nullopt when the caps would take too long to count.
  const auto f = [&](double step, double* average) -> std::optional<double> {
    const std::optional<Capped> c =
        capped_exchange_latency(request, lengths, works, step - p.slot_seconds, receive);
    if (!c) return std::nullopt;
    *average = (fixed_part + exposed_share(p) * (c->exchange + c->latency)) / request.world_size;
    return std::max(*average, out.per_piece);
  };
  double lo = out.bound;
  double average = 0;
  const std::optional<double> start = f(lo, &average);
  if (!start || *start <= lo) return out;
  double hi = *start;
  double lo_average = average;
  for (int i = 0; i < 60 && hi - lo > 1e-6 * hi; ++i) {
    const double mid = lo + (hi - lo) / 2;
    const std::optional<double> at = f(mid, &average);
    if (!at) break;  // the caps gave up; lo, tested already, stays a bound
    if (*at <= mid) {
      hi = mid;
    } else {
      lo = mid;
      lo_average = average;
    }
  }
  out.average_at_bound = lo_average;
  out.bound = lo;
  return out;
}

double step_time_lower_bound(const ScheduleRequest& request) {
  return step_time_lower_bound_terms(request).bound;
}

}  // namespace fulcrum
