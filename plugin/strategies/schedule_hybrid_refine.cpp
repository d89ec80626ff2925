// hybrid's moves after rule 7's search (docs/HYBRID.md rule 10): the tail
// evened, and the widest slot narrowed to whole nodes.
//
// The tail: rule 7 keeps a move only when the step falls, so where many
// ranks end within a few ms of each other no single move is kept, and
// moving whole slots cannot split a row that is too long for the ranks that
// end first. Here one-rank rows, then their pieces (into the last row of a
// rank that ends early, as a row of their own, or swapped for a shorter
// piece of such a row), move from the rank that ends last to one of the few
// that end first while the finishes fall from the top: the step never
// grows, the rank that ended last ends sooner, and its load goes to a rank
// that still ends before it. A one-rank row has no exchange, so it costs
// the same on any rank; a row whose pieces change is planned again.
//
// The widest slot: a long causal piece spread over g members costs each of
// them about the same exchange whatever g is (a member receives most of the
// piece below its last position), so the slot's rank-seconds are its work
// plus g times that exchange: fewer members spend less in all and end
// later. The drafts size such a slot by an estimate of its exchange; where
// it spans several nodes and fills one of them only in part, that node's
// members are dropped when the slot then spends fewer rank-seconds, the
// tail is evened (the ranks freed take the rows that the remaining
// members, now busy longer, no longer reach in time), rule 7's search runs
// on it where it already ends sooner, and the better schedule is kept.
#include "strategies/schedule_hybrid_refine.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "strategies/schedule_hybrid_nodes.h"

namespace fulcrum::hybrid {

void FinishOrder::reset(const std::vector<double>& finish) {
  world_ = finish.size();
  taken_.clear();
  finish_.reserve(world_ + 1);
  finish_.assign(finish.begin(), finish.end());
  finish_.push_back(std::numeric_limits<double>::infinity());
  built_ = false;
}

void FinishOrder::build() {
  if (built_) return;
  built_ = true;
  const std::size_t nodes = std::max<std::size_t>(2 * world_, 2);
  low_.resize(nodes);
  high_.resize(nodes);
  for (std::size_t a = 0; a < world_; ++a) {
    low_[world_ + a] = high_[world_ + a] = static_cast<std::int32_t>(a);
  }
  for (std::size_t v = world_; v-- > 1;) pull(v);
}

void FinishOrder::update_from(std::size_t v) {
  for (v >>= 1; v >= 1; v >>= 1) pull(v);
}

void FinishOrder::set(std::int32_t a, double after) {
  finish_[static_cast<std::size_t>(a)] = after;
  if (built_) update_from(world_ + static_cast<std::size_t>(a));
}

void FinishOrder::put_low(std::int32_t a, std::int32_t leaf) {
  std::size_t v = world_ + static_cast<std::size_t>(a);
  low_[v] = leaf;
  for (v >>= 1; v >= 1; v >>= 1) low_[v] = earlier(low_[2 * v], low_[2 * v + 1]);
}

std::int32_t FinishOrder::take_first() {
  build();
  // Its leaf set to +infinity (the rank world_): the root then holds the
  // next first. Only the tree of first ranks changes, so last() and
  // latest_without still answer over every rank.
  const std::int32_t a = low_[1];
  taken_.push_back(a);
  put_low(a, static_cast<std::int32_t>(world_));
  return a;
}

void FinishOrder::put_back() {
  // Each taken leaf's path recounted: a node whose subtree held a taken
  // leaf is on that leaf's path, so every node is as a rebuild makes it.
  for (const std::int32_t a : taken_) put_low(a, a);
  taken_.clear();
}

void FinishOrder::firsts(std::size_t n, std::vector<std::int32_t>& out) {
  out.clear();
  for (std::size_t k = 0; k < n; ++k) out.push_back(take_first());
  put_back();
}

double FinishOrder::latest_without(std::int32_t a, std::int32_t b) {
  build();
  // The ranks but a and b are the subtrees beside the paths from their
  // leaves to the root, less those that hold the other's leaf.
  const std::size_t leaf_a = world_ + static_cast<std::size_t>(a);
  const std::size_t leaf_b = world_ + static_cast<std::size_t>(b);
  const auto holds = [](std::size_t v, std::size_t leaf) {
    const int up = std::bit_width(leaf) - std::bit_width(v);
    return up >= 0 && (leaf >> up) == v;
  };
  double latest = -std::numeric_limits<double>::infinity();
  for (const auto& [from, other] : {std::pair{leaf_a, leaf_b}, std::pair{leaf_b, leaf_a}}) {
    for (std::size_t v = from; v > 1; v >>= 1) {
      if (!holds(v ^ 1, other)) {
        latest = std::max(latest, finish_[static_cast<std::size_t>(high_[v ^ 1])]);
      }
    }
  }
  // An idle rank's finish, as 0 or -0, reads as 0.
  return latest == 0 ? 0.0 : latest;
}

std::vector<std::int32_t> ranks_by_finish(const std::vector<double>& finish) {
  const auto world = static_cast<std::int32_t>(finish.size());
  std::vector<std::int32_t> busy;
  for (std::int32_t a = 0; a < world; ++a) {
    if (finish[static_cast<std::size_t>(a)] != 0) busy.push_back(a);
  }
  std::sort(busy.begin(), busy.end(), [&](std::int32_t x, std::int32_t y) {
    const double fx = finish[static_cast<std::size_t>(x)];
    const double fy = finish[static_cast<std::size_t>(y)];
    return fx < fy || (fx == fy && x < y);
  });
  const auto above = std::partition_point(busy.begin(), busy.end(), [&](std::int32_t a) {
    return finish[static_cast<std::size_t>(a)] < 0;
  });
  std::vector<std::int32_t> order(busy.begin(), above);
  order.reserve(finish.size());
  for (std::int32_t a = 0; a < world; ++a) {
    if (finish[static_cast<std::size_t>(a)] == 0) order.push_back(a);
  }
  order.insert(order.end(), above, busy.end());
  return order;
}

namespace {

struct Line {
  double step = 0;
  double busy = 0;                       // rank-seconds: sum of g x length
  std::vector<double> finish;            // per rank
  std::vector<std::int32_t> next_wave;   // per rank: after its last slot
  std::vector<std::int32_t> last_multi;  // per rank: the wave of its last multi-rank slot, or -1
  std::int64_t replays_left = 0;         // the tail moves' budgets (even_the_tail): replays
  std::int64_t local_left = 0;           // and moves priced on two ranks alone
  FinishOrder order;                     // the ranks by finish, kept with `finish`
};

Line replay(const ScheduleRequest& r, const Schedule& s, const std::vector<double>& length) {
  // The slots in wave order, index order within a wave (a counting sort:
  // waves are small).
  std::int32_t waves = 0;
  for (const ScheduleSlot& slot : s.slots) waves = std::max(waves, slot.wave + 1);
  std::vector<std::size_t> at(static_cast<std::size_t>(waves) + 1, 0);
  for (const ScheduleSlot& slot : s.slots) ++at[static_cast<std::size_t>(slot.wave) + 1];
  std::partial_sum(at.begin(), at.end(), at.begin());
  std::vector<std::size_t> order(s.slots.size());
  for (std::size_t k = 0; k < s.slots.size(); ++k) {
    order[at[static_cast<std::size_t>(s.slots[k].wave)]++] = k;
  }
  Line t;
  const auto world = static_cast<std::size_t>(r.world_size);
  t.finish.assign(world, 0.0);
  t.next_wave.assign(world, 0);
  t.last_multi.assign(world, -1);
  for (const std::size_t k : order) {
    const ScheduleSlot& slot = s.slots[k];
    double start = 0;
    for (const std::int32_t a : slot.ranks) start = std::max(start, t.finish[a]);
    const double end = start + length[k];
    for (const std::int32_t a : slot.ranks) {
      t.finish[a] = end;
      t.next_wave[a] = std::max(t.next_wave[a], slot.wave + 1);
      if (slot.ranks.size() > 1) t.last_multi[a] = std::max(t.last_multi[a], slot.wave);
    }
    t.busy += static_cast<double>(slot.ranks.size()) * length[k];
    t.step = std::max(t.step, end);
  }
  t.order.reset(t.finish);
  return t;
}

bool better(const Line& a, const Line& b) {
  const double eps = 1e-12 * std::max(1.0, b.step);
  return a.step < b.step - eps || (a.step <= b.step && a.busy < b.busy - eps);
}

std::int64_t tokens_of(const ScheduleSlot& slot) {
  std::int64_t n = 0;
  for (const DocPiece& p : slot.pieces) n += p.length;
  return n;
}

// The timeline after a move: priced on two ranks alone (every other rank
// as in `now`), or replayed in full.
struct Moved {
  bool replayed = false;
  Line full;  // when replayed
  std::int32_t a = 0;
  std::int32_t b = 0;
  std::int32_t wave_b = 0;
  double finish_a = 0;
  double finish_b = 0;
  double busy = 0;
  double step = 0;

  double finish(const Line& now, std::int32_t x) const {
    if (replayed) return full.finish[x];
    if (x == b) return finish_b;
    return x == a ? finish_a : now.finish[x];
  }
};

// The timeline after a move that changes rank a's one-rank slot of wave
// wave_a by da seconds and rank b's of wave wave_b (its last, or a new
// one) by db. Where no multi-rank slot follows either on its rank, only
// their finishes move (a one-rank slot starts when its rank is free, so
// the slots after it shift with it): O(log W), the latest of the other
// ranks from `now.order`. Else the timeline is replayed. Each kind spends
// its own budget; `spent` when that ran out.
Moved after_move(const ScheduleRequest& r, const Schedule& s, const std::vector<double>& length,
                 Line& now, std::int32_t a, std::int32_t wave_a, double da, std::int32_t b,
                 std::int32_t wave_b, double db, bool& spent) {
  Moved t;
  if (now.last_multi[a] < wave_a && now.last_multi[b] < wave_b) {
    spent = now.local_left-- <= 0;
    if (spent) return t;
    t.a = a;
    t.b = b;
    t.wave_b = wave_b;
    // In the order a full copy of the finishes would take them.
    t.finish_a = now.finish[a] + da;
    t.finish_b = (b == a ? t.finish_a : now.finish[b]) + db;
    t.busy = now.busy + da + db;
    t.step = std::max({now.order.latest_without(a, b), t.finish_a, t.finish_b});
    return t;
  }
  spent = now.replays_left-- <= 0;
  if (spent) return t;
  t.replayed = true;
  t.full = replay(r, s, length);
  t.full.replays_left = now.replays_left;
  t.full.local_left = now.local_left;
  t.step = t.full.step;
  return t;
}

// `now` becomes the timeline after move t.
void keep(Line& now, Moved&& t) {
  if (t.replayed) {
    now = std::move(t.full);
    return;
  }
  now.order.set(t.a, t.finish_a);
  now.finish[t.a] = t.finish_a;
  if (t.b != t.a) now.order.set(t.b, t.finish_b);
  now.finish[t.b] = t.finish_b;
  now.next_wave[t.b] = std::max(now.next_wave[t.b], t.wave_b + 1);
  now.busy = t.busy;
  now.step = t.step;
}

// Whether a move leaves the finishes falling from the top: the step no
// later, rank `last` sooner, and rank `first` before rank last had ended.
bool falls(const Moved& t, const Line& now, std::int32_t first, std::int32_t last) {
  const double eps = 1e-12 * std::max(1.0, now.step);
  return t.step <= now.step && t.finish(now, last) < now.finish[last] - eps &&
         t.finish(now, first) < now.finish[last] - eps;
}

constexpr std::int32_t kWidestNarrowed = 64;

// The widest slot spanning two or more nodes whose least filled node holds
// fewer members than a node has ranks; its index, and the ranks left when
// that node's members (ties: the later node) are dropped. None: size().
std::size_t narrowing(const ScheduleRequest& r, const Schedule& s,
                      std::vector<std::int32_t>& kept) {
  const std::int32_t per_node = std::max<std::int32_t>(1, r.profile.ranks_per_node);
  std::size_t widest = s.slots.size();
  for (std::size_t k = 0; k < s.slots.size(); ++k) {
    if (s.slots[k].ranks.size() > static_cast<std::size_t>(per_node) &&
        (widest == s.slots.size() || s.slots[k].ranks.size() > s.slots[widest].ranks.size())) {
      widest = k;
    }
  }
  // A slot of more than kWidestNarrowed members is left as it is: pricing
  // it costs g^2 member pairs, and its row gives each member little.
  if (widest == s.slots.size() || per_node < 2 ||
      s.slots[widest].ranks.size() > static_cast<std::size_t>(kWidestNarrowed)) {
    return s.slots.size();
  }
  const ScheduleSlot& slot = s.slots[widest];
  std::vector<std::int32_t> nodes;
  for (const std::int32_t a : slot.ranks) nodes.push_back(a / per_node);
  std::sort(nodes.begin(), nodes.end());
  std::int32_t least_node = -1;
  std::size_t least = slot.ranks.size();
  for (std::size_t k = 0; k < nodes.size();) {
    std::size_t e = k;
    while (e < nodes.size() && nodes[e] == nodes[k]) ++e;
    if (e - k <= least) {
      least = e - k;
      least_node = nodes[k];
    }
    k = e;
  }
  if (least >= static_cast<std::size_t>(per_node) || least == slot.ranks.size()) {
    return s.slots.size();
  }
  kept.clear();
  for (const std::int32_t a : slot.ranks) {
    if (a / per_node != least_node) kept.push_back(a);
  }
  // Room for a planner's padding, a block per member, as the drafts leave.
  const std::int64_t room =
      static_cast<std::int64_t>(kept.size()) * (r.max_tokens_per_rank - r.block_size);
  return tokens_of(slot) <= room ? widest : s.slots.size();
}

// The timelines each of move_rows and move_pieces may replay (a replay is
// O(slots x g)) on the schedule as searched, and on the narrowed one, whose
// remaining members end later by a whole share of the slot and need more
// moves (it is tried only where the narrowed slot spends fewer
// rank-seconds).
constexpr std::int64_t kTailReplays = 128;
constexpr std::int64_t kNarrowedTailReplays = 512;
// Moves priced on two ranks alone (after_move), per replay allowed.
constexpr std::int64_t kLocalPerReplay = 8;

// One-rank rows moved, one at a time, from the rank that ends last to the
// rank that ends first (after that rank's slots), the longest that ends
// there before the step first, while the step falls. A one-rank row costs
// the same on any rank (no exchange), so no row is planned again.
void move_rows(const ScheduleRequest& r, Schedule& s, const std::vector<double>& length,
               std::int64_t replays) {
  Line now = replay(r, s, length);
  now.replays_left = replays;
  now.local_left = kLocalPerReplay * replays;
  const std::size_t most = 4 * s.slots.size() + 16;
  // Each rank's one-rank rows in slot order, kept as rows move.
  std::vector<std::vector<std::size_t>> rows_of(now.finish.size());
  for (std::size_t k = 0; k < s.slots.size(); ++k) {
    if (s.slots[k].ranks.size() == 1)
      rows_of[static_cast<std::size_t>(s.slots[k].ranks[0])].push_back(k);
  }
  for (std::size_t step = 0; step < most; ++step) {
    const std::int32_t last = now.order.last();
    const std::int32_t first = now.order.first();
    std::vector<std::size_t> rows = rows_of[static_cast<std::size_t>(last)];
    std::stable_sort(rows.begin(), rows.end(),
                     [&](std::size_t x, std::size_t y) { return length[x] > length[y]; });
    bool moved = false;
    for (const std::size_t k : rows) {
      if (now.finish[first] + length[k] >= now.step) continue;
      const std::pair<std::vector<std::int32_t>, std::int32_t> kept{s.slots[k].ranks,
                                                                    s.slots[k].wave};
      const std::int32_t wave = s.slots[k].wave;
      s.slots[k].ranks = {first};
      s.slots[k].wave = now.next_wave[first];
      bool spent = false;
      Moved t = after_move(r, s, length, now, last, wave, -length[k], first, s.slots[k].wave,
                           length[k], spent);
      if (spent) {
        s.slots[k].ranks = kept.first;
        s.slots[k].wave = kept.second;
        return;
      }
      if (falls(t, now, first, last)) {
        keep(now, std::move(t));
        moved = true;
        std::vector<std::size_t>& from = rows_of[static_cast<std::size_t>(last)];
        from.erase(std::find(from.begin(), from.end(), k));
        std::vector<std::size_t>& to = rows_of[static_cast<std::size_t>(first)];
        to.insert(std::upper_bound(to.begin(), to.end(), k), k);
        break;
      }
      s.slots[k].ranks = kept.first;
      s.slots[k].wave = kept.second;
    }
    if (!moved) return;
  }
}

// Whether moving `add` tokens of pieces to rank `first` (and `removed`
// back from it) may leave it ending before rank `last`, by the estimate of
// rule 2 (a piece's tiles alone and its tokens) with a tenth to spare for
// how a row packs its pieces: a filter on which moves to price, so that a
// tail where no move can help costs few plans. The exact price decides.
bool may_end_before(const Estimator& est, const Line& now, std::int32_t first, std::int32_t last,
                    std::int64_t add, std::int64_t removed) {
  const double grows = 0.9 * est.work(add) - (removed > 0 ? est.work(removed) : 0.0);
  return now.finish[first] + grows < now.finish[last];
}

// Piece j of row k moved to rank `first` (into slot `into`, or a new row
// when `into` is none or has no room); kept in `now` when the finishes
// fall from the top, else undone. Both rows change in place, their plan
// records (which planning replaces) set aside to be put back on undo: no
// row is copied.
Status try_piece(const ScheduleRequest& r, Schedule& s, std::vector<double>& length,
                 const SlotPlanner& plan, std::int64_t& budget, Line& now, std::size_t k,
                 std::size_t j, std::size_t into, std::int32_t first, std::int32_t last,
                 bool& moved) {
  const DocPiece piece = s.slots[k].pieces[j];
  if (!may_end_before(Estimator(r), now, first, last, piece.length, 0)) return Status::ok();
  const bool join =
      into < s.slots.size() && tokens_of(s.slots[into]) + piece.length <= r.max_tokens_per_rank;
  const std::int64_t cost =
      tokens_of(s.slots[k]) - piece.length + (join ? tokens_of(s.slots[into]) : 0) + piece.length;
  if (cost > budget) return Status::ok();
  budget -= cost;
  const auto at_j = static_cast<std::ptrdiff_t>(j);
  const double kept_from_length = length[k];
  const std::int32_t from_wave = s.slots[k].wave;
  ShardPlan plan_from = std::move(s.slots[k].plan);
  std::vector<double> weights_from = std::move(s.slots[k].member_weights);
  s.slots[k].pieces.erase(s.slots[k].pieces.begin() + at_j);
  const std::size_t at = join ? into : s.slots.size();
  ShardPlan plan_to;
  std::vector<double> weights_to;
  double kept_to_length = 0;
  bool to_changed = false;
  // Undone: the row to (the piece off it, or the new row gone), then row k.
  const auto undo = [&] {
    if (to_changed && join) {
      s.slots[at].pieces.pop_back();
      s.slots[at].plan = std::move(plan_to);
      s.slots[at].member_weights = std::move(weights_to);
      length[at] = kept_to_length;
    } else if (to_changed) {
      s.slots.pop_back();
      length.pop_back();
    }
    s.slots[k].pieces.insert(s.slots[k].pieces.begin() + at_j, piece);
    s.slots[k].plan = std::move(plan_from);
    s.slots[k].member_weights = std::move(weights_from);
    length[k] = kept_from_length;
  };
  const Result<double> from_length = plan(r, s.slots[k], kNoEnd);
  if (!from_length) {
    undo();
    return from_length.status();
  }
  to_changed = true;
  if (join) {
    plan_to = std::move(s.slots[at].plan);
    weights_to = std::move(s.slots[at].member_weights);
    kept_to_length = length[at];
  } else {
    ScheduleSlot& row = s.slots.emplace_back();
    row.ranks = {first};
    row.wave = now.next_wave[first];
    length.push_back(0.0);
  }
  s.slots[at].pieces.push_back(piece);
  const Result<double> to_length = plan(r, s.slots[at], kNoEnd);
  if (!to_length) {
    undo();
    return to_length.status();
  }
  length[k] = *from_length;
  length[at] = *to_length;
  bool spent = false;
  Moved t = after_move(r, s, length, now, last, from_wave, *from_length - kept_from_length, first,
                       s.slots[at].wave, *to_length - kept_to_length, spent);
  if (!spent && falls(t, now, first, last)) {
    keep(now, std::move(t));
    moved = true;
    return Status::ok();
  }
  undo();
  return Status::ok();
}

// Piece j of row k (on rank `last`) swapped with the shorter piece i of
// row m (on rank `first`); kept in `now` when the finishes fall from the
// top, else undone.
Status try_swap(const ScheduleRequest& r, Schedule& s, std::vector<double>& length,
                const SlotPlanner& plan, std::int64_t& budget, Line& now, std::size_t k,
                std::size_t j, std::size_t m, std::size_t i, std::int32_t first, std::int32_t last,
                bool& moved) {
  DocPiece& p = s.slots[k].pieces[j];
  DocPiece& q = s.slots[m].pieces[i];
  if (q.length >= p.length || tokens_of(s.slots[m]) - q.length + p.length > r.max_tokens_per_rank ||
      !may_end_before(Estimator(r), now, first, last, p.length, q.length)) {
    return Status::ok();
  }
  const std::int64_t cost = tokens_of(s.slots[k]) + tokens_of(s.slots[m]);
  if (cost > budget) return Status::ok();
  budget -= cost;
  std::swap(p, q);
  const double kept_k = length[k];
  const double kept_m = length[m];
  // Planning records the rule in each slot's plan: undone with the pieces.
  // per_document_weighted's member weights (ABI 1.5) are part of the record.
  ShardPlan plan_k = s.slots[k].plan;
  ShardPlan plan_m = s.slots[m].plan;
  std::vector<double> weights_k = s.slots[k].member_weights;
  std::vector<double> weights_m = s.slots[m].member_weights;
  const auto undo = [&] {
    std::swap(s.slots[k].pieces[j], s.slots[m].pieces[i]);
    s.slots[k].plan = std::move(plan_k);
    s.slots[m].plan = std::move(plan_m);
    s.slots[k].member_weights = std::move(weights_k);
    s.slots[m].member_weights = std::move(weights_m);
    length[k] = kept_k;
    length[m] = kept_m;
  };
  const Result<double> at_k = plan(r, s.slots[k], kNoEnd);
  const Result<double> at_m = at_k ? plan(r, s.slots[m], kNoEnd) : at_k;
  if (!at_m) {
    undo();
    return at_m.status();
  }
  length[k] = *at_k;
  length[m] = *at_m;
  bool spent = false;
  Moved t = after_move(r, s, length, now, last, s.slots[k].wave, *at_k - kept_k, first,
                       s.slots[m].wave, *at_m - kept_m, spent);
  if (!spent && falls(t, now, first, last)) {
    keep(now, std::move(t));
    moved = true;
    return Status::ok();
  }
  undo();
  return Status::ok();
}

// One move of move_pieces toward rank `first`: a piece of a one-rank row
// of rank `last` into rank first's last slot when that is a one-rank row
// with room, else as a row of its own after its slots; else a piece swapped
// for a shorter one of rank first's rows. Both rows are planned again (one
// member: no exchange), their tokens charged. `on_first` and `on_last`:
// the slots each rank runs.
Status piece_to(const ScheduleRequest& r, Schedule& s, std::vector<double>& length,
                const SlotPlanner& plan, std::int64_t& budget, Line& now, std::int32_t first,
                std::int32_t last, const std::vector<std::size_t>& on_first,
                const std::vector<std::size_t>& on_last, bool& moved) {
  const auto left = [&] { return !moved && (now.replays_left > 0 || now.local_left > 0); };
  // The slot the first rank runs last, and whether a piece may join it.
  std::size_t into = s.slots.size();
  for (const std::size_t k : on_first) {
    if (into == s.slots.size() || s.slots[k].wave > s.slots[into].wave) into = k;
  }
  if (into < s.slots.size() && s.slots[into].ranks.size() != 1) into = s.slots.size();
  for (const std::size_t k : on_last) {
    if (s.slots[k].ranks.size() != 1 || s.slots[k].pieces.size() < 2) continue;
    for (std::size_t j = 0; j < s.slots[k].pieces.size() && left(); ++j) {
      Status st = try_piece(r, s, length, plan, budget, now, k, j, into, first, last, moved);
      if (!st) return st;
    }
  }
  // Else a piece swapped for a shorter one of the first rank's rows.
  for (const std::size_t k : on_last) {
    if (s.slots[k].ranks.size() != 1) continue;
    for (const std::size_t m : on_first) {
      if (s.slots[m].ranks.size() != 1) continue;
      for (std::size_t j = 0; j < s.slots[k].pieces.size() && left(); ++j) {
        for (std::size_t i = 0; i < s.slots[m].pieces.size() && left(); ++i) {
          Status st = try_swap(r, s, length, plan, budget, now, k, j, m, i, first, last, moved);
          if (!st) return st;
        }
      }
    }
  }
  return Status::ok();
}

// Pieces of the one-rank rows of the rank that ends last moved to, or
// swapped with shorter pieces of, one of the kDestinations ranks that end
// first (the earliest first), while the finishes fall from the top.
constexpr std::size_t kDestinations = 8;

Status move_pieces(const ScheduleRequest& r, Schedule& s, std::vector<double>& length,
                   const SlotPlanner& plan, std::int64_t& budget, std::int64_t replays) {
  Line now = replay(r, s, length);
  now.replays_left = replays;
  now.local_left = kLocalPerReplay * replays;
  const std::size_t most = 2 * s.slots.size() + 16;
  // Each rank's slots in slot order, kept as pieces move.
  RankSlots on;
  on.build(s, static_cast<std::int32_t>(now.finish.size()));
  std::vector<std::size_t> on_first;
  std::vector<std::size_t> on_last;
  for (std::size_t round = 0; round < most; ++round) {
    const std::int32_t last = now.order.last();
    const std::size_t n = std::min(kDestinations, now.finish.size());
    // The ranks that end first, taken one at a time as far as the moves
    // go (most rounds move to the first), and put back after.
    bool moved = false;
    for (std::size_t d = 0; d < n && !moved && (now.replays_left > 0 || now.local_left > 0); ++d) {
      const std::int32_t first = now.order.take_first();
      if (first == last) continue;
      const std::size_t slots = s.slots.size();
      on.of(first, on_first);
      on.of(last, on_last);
      Status st = piece_to(r, s, length, plan, budget, now, first, last, on_first, on_last, moved);
      if (!st) return st;
      // A piece moved as a row of its own: the first rank runs one more slot.
      if (s.slots.size() > slots) on.add(first, slots);
    }
    now.order.put_back();
    if (!moved) return Status::ok();
  }
  return Status::ok();
}

// Rows and pieces moved from the ranks that end last (move_rows, then
// move_pieces).
Status even_the_tail(const ScheduleRequest& r, Schedule& s, std::vector<double>& length,
                     const SlotPlanner& plan, std::int64_t& budget, std::int64_t replays) {
  move_rows(r, s, length, replays);
  return move_pieces(r, s, length, plan, budget, replays);
}

}  // namespace

Status search_with_narrowed_slot(const ScheduleRequest& request, Schedule& schedule,
                                 std::vector<double>& length, const SlotPlanner& plan,
                                 std::int64_t& token_budget, const TimelineSearch& search,
                                 const Schedule* planned,
                                 const std::vector<double>* planned_length) {
  std::vector<std::int32_t> kept;
  const std::size_t w = narrowing(request, schedule, kept);
  // The narrowed schedule starts from the schedule as planned; the search
  // on that schedule runs first, with the whole budget, as without this.
  // Without the caller's copy of it, one is made here.
  Schedule own;
  std::vector<double> own_length;
  if (planned == nullptr && w < schedule.slots.size()) {
    own = schedule;
    own_length = length;
    planned = &own;
    planned_length = &own_length;
  }
  if (Status st = search(schedule, length, token_budget); !st) return st;
  if (Status st = even_the_tail(request, schedule, length, plan, token_budget, kTailReplays); !st) {
    return st;
  }
  if (planned == nullptr || w >= planned->slots.size() ||
      tokens_of(planned->slots[w]) > token_budget) {
    return Status::ok();
  }
  token_budget -= tokens_of(planned->slots[w]);
  const std::size_t width = planned->slots[w].ranks.size();
  const double length_before = (*planned_length)[w];
  ScheduleSlot slot = planned->slots[w];
  slot.ranks = kept;
  const Result<double> narrowed_slot = plan(request, slot, kNoEnd);
  if (!narrowed_slot) return narrowed_slot.status();
  if (!std::isfinite(*narrowed_slot)) return Status::ok();
  // Only a slot that spends fewer rank-seconds narrowed can pay.
  if (static_cast<double>(kept.size()) * *narrowed_slot >=
      static_cast<double>(width) * length_before) {
    return Status::ok();
  }
  Schedule narrowed = planned == &own ? std::move(own) : *planned;
  std::vector<double> narrowed_length = planned == &own ? std::move(own_length) : *planned_length;
  narrowed.slots[w] = std::move(slot);
  narrowed_length[w] = *narrowed_slot;
  if (Status st = even_the_tail(request, narrowed, narrowed_length, plan, token_budget,
                                kNarrowedTailReplays);
      !st) {
    return st;
  }
  // Rule 7's search on it only where it already ends sooner than the
  // schedule searched without it (a second search costs as much as the
  // first).
  if (!better(replay(request, narrowed, narrowed_length), replay(request, schedule, length))) {
    return Status::ok();
  }
  if (Status st = search(narrowed, narrowed_length, token_budget); !st) return st;
  if (better(replay(request, narrowed, narrowed_length), replay(request, schedule, length))) {
    schedule = std::move(narrowed);
    length = std::move(narrowed_length);
  }
  return Status::ok();
}

}  // namespace fulcrum::hybrid
