// hybrid's drafts of a batch (docs/HYBRID.md rules 1 to 4 and 8), drawn
// once per answer. A draft is made a schedule only when planning asks for
// it: at W = 1024 with 4,000 documents every equal-groups draft is packed
// to order them by estimated finish, but planning's token budget reaches
// one or two drafts, and making the others (thousands of slots each, with
// their ranks and pieces) was half of drawing them.
#include "strategies/schedule_hybrid_draw.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"

namespace fulcrum::hybrid {
namespace {

// Waves: every slot after its members' earlier slots, in the estimated
// time order (groups and the rows in their waits by start, then each
// rank's trailing rows), so that each rank's wave order is its time order.
Schedule to_schedule(const Draft& best, const std::vector<DocPiece>& pieces, std::int32_t world) {
  Schedule schedule;
  schedule.strategy_used = "hybrid";
  struct Timed {
    double start;
    std::size_t index;
    bool group;
  };
  std::vector<Timed> timed;
  for (std::size_t k = 0; k < best.long_slots.size(); ++k) {
    timed.push_back({best.long_slots[k].start, k, true});
  }
  for (std::size_t k = 0; k < best.gaps.size(); ++k) {
    if (!best.gaps[k].pieces.empty()) timed.push_back({best.gaps[k].begin, k, false});
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const Timed& x, const Timed& y) { return x.start < y.start; });
  // Each slot's lists sized once: most slots are rows of several pieces,
  // and an answer makes thousands.
  const std::size_t slots = timed.size() + best.rows.size();
  schedule.slots.reserve(slots);
  std::vector<std::int32_t> next_wave(static_cast<std::size_t>(world), 0);
  // Each slot made in place (a slot moved is a plan with its strings moved).
  const auto wave = [&](ScheduleSlot& slot) {
    for (const std::int32_t a : slot.ranks) slot.wave = std::max(slot.wave, next_wave[a]);
    for (const std::int32_t a : slot.ranks) next_wave[a] = slot.wave + 1;
  };
  for (const Timed& t : timed) {
    ScheduleSlot& slot = schedule.slots.emplace_back();
    if (t.group) {
      slot.ranks = best.long_slots[t.index].ranks;
      slot.pieces.push_back(pieces[best.long_slots[t.index].piece]);
    } else {
      slot.ranks.push_back(best.gaps[t.index].rank);
      slot.pieces.reserve(best.gaps[t.index].pieces.size());
      for (const std::size_t i : best.gaps[t.index].pieces) slot.pieces.push_back(pieces[i]);
    }
    wave(slot);
  }
  for (std::size_t a = 0; a < best.ranks(); ++a) {
    for (const RowSpan& row : best.rows_of(a)) {
      ScheduleSlot& slot = schedule.slots.emplace_back();
      slot.ranks.push_back(static_cast<std::int32_t>(a));
      slot.pieces.reserve(row.size);
      for (const std::size_t i : best.pieces_of(row)) slot.pieces.push_back(pieces[i]);
      slot.wave = next_wave[a]++;
    }
  }
  return schedule;
}

// The planning cost of to_schedule(d), slot_planning_cost over its slots:
// a group's piece by its width, every other piece of the batch (`tokens`
// in all) once, in a wait's row or a trailing row; so the same before its
// rows are packed.
std::int64_t draft_cost(const Draft& d, const std::vector<DocPiece>& pieces, std::int64_t tokens) {
  std::int64_t cost = tokens;
  for (const LongSlot& slot : d.long_slots) {
    const std::int64_t len = pieces[slot.piece].length;
    cost += slot_planning_cost(len, slot.ranks.size()) - len;
  }
  return cost;
}

// Whether to_schedule makes the same slots of a and b: both packed, and
// alike in all it reads (groups, waits' rows, trailing rows).
bool same_draft(const Draft& a, const Draft& b) {
  if (a.makespan == kNoEnd || b.makespan == kNoEnd) return false;
  const auto same_group = [](const LongSlot& x, const LongSlot& y) {
    return x.piece == y.piece && x.start == y.start && x.ranks == y.ranks;
  };
  const auto same_gap = [](const Gap& x, const Gap& y) {
    return x.rank == y.rank && x.begin == y.begin && x.pieces == y.pieces;
  };
  const auto same_row = [](const RowSpan& x, const RowSpan& y) {
    return x.first == y.first && x.size == y.size;
  };
  return std::equal(a.long_slots.begin(), a.long_slots.end(), b.long_slots.begin(),
                    b.long_slots.end(), same_group) &&
         std::equal(a.gaps.begin(), a.gaps.end(), b.gaps.begin(), b.gaps.end(), same_gap) &&
         a.rank_first == b.rank_first &&
         std::equal(a.rows.begin(), a.rows.end(), b.rows.begin(), b.rows.end(), same_row) &&
         a.row_pieces == b.row_pieces;
}

}  // namespace

// The rows are kept in one array by room, ascending, the rows of one room
// in the order they took it (the order an ordered multimap keeps): the
// least room that holds a piece is a binary search, and the row it goes to
// moves down past the rows whose room lies between its new room and the
// piece's length (which the piece does not fit): mostly none or one, so
// they are stepped over one by one, a binary search past a few. A tree
// allocated and rebalanced a node per piece (most of drawing rule 8's
// drafts at W = 1024 with 4,000 documents).
namespace {

struct OpenRow {
  std::int64_t room;
  std::size_t row;
};

// The first of `open` (ascending by room) whose room is at least `len`:
// std::lower_bound without a branch per step.
std::vector<OpenRow>::iterator first_holding(std::vector<OpenRow>& open, std::int64_t len) {
  if (open.empty()) return open.end();
  OpenRow* at = open.data();
  for (std::size_t n = open.size(); n > 1;) {
    const std::size_t half = n / 2;
    at = at[half].room < len ? at + half : at;
    n -= half;
  }
  return open.begin() + (at - open.data()) + (at->room < len ? 1 : 0);
}

// Row `fit` of `open` with its room lowered to `room`: moved down to its
// place, after the rows of that room.
void lower_room(std::vector<OpenRow>& open, std::vector<OpenRow>::iterator fit, std::int64_t room) {
  const OpenRow row{room, fit->row};
  constexpr int kSteps = 8;
  auto to = fit;
  for (int step = 0; step < kSteps && to != open.begin() && (to - 1)->room > room; ++step) {
    *to = *(to - 1);
    --to;
  }
  if (to != open.begin() && (to - 1)->room > room) {
    const auto below = [](std::int64_t r, const OpenRow& o) { return r < o.room; };
    const auto at = std::upper_bound(open.begin(), to, room, below);
    std::move_backward(at, to, to + 1);
    to = at;
  }
  *to = row;
}

}  // namespace

BestFitRows best_fit_rows(const std::vector<DocPiece>& pieces, const std::vector<double>& work,
                          const std::vector<std::size_t>& by_length, std::int64_t capacity,
                          bool with_pieces) {
  BestFitRows rows;
  std::vector<OpenRow> open;
  std::vector<std::size_t> joined;  // the row of each piece placed, in turn
  if (with_pieces) joined.reserve(by_length.size());
  for (const std::size_t i : by_length) {
    const std::int64_t len = pieces[i].length;
    if (len > capacity) continue;  // a group's piece
    auto fit = first_holding(open, len);
    std::size_t k = rows.room.size();
    if (fit == open.end()) {
      // A new row, last among those of its room: it enters at the end.
      rows.room.push_back(capacity);
      rows.work.push_back(0.0);
      open.push_back({capacity, k});
      fit = open.end() - 1;
    } else {
      k = fit->row;
    }
    rows.room[k] -= len;
    lower_room(open, fit, rows.room[k]);
    rows.work[k] += work[i];
    if (with_pieces) joined.push_back(k);
  }
  if (!with_pieces) return rows;
  // Each row's pieces together, in the order they joined.
  rows.first.assign(rows.room.size() + 1, 0);
  for (const std::size_t k : joined) ++rows.first[k + 1];
  std::partial_sum(rows.first.begin(), rows.first.end(), rows.first.begin());
  rows.pieces.resize(joined.size());
  std::vector<std::size_t> next(rows.first.begin(), rows.first.end() - 1);
  std::size_t n = 0;
  for (const std::size_t i : by_length) {
    if (pieces[i].length > capacity) continue;
    rows.pieces[next[joined[n++]]++] = i;
  }
  return rows;
}

// Equal groups (rule 8): the world as floor(W / g) groups of g consecutive
// ranks. A piece longer than g x T runs over the m groups it needs that
// free up first (longest first); the other pieces are best fit, longest
// first, into rows of g x T tokens, and the rows, by estimated time,
// longest first, go to the group that frees up first. Batches of many long
// pieces of similar size pack better into shared rows than one piece per
// group. Returns the estimated finish; `out`, when given, gets the
// schedule; `fits` is false where a piece needs more groups than there are.
double DraftSet::packed(std::int32_t g, Schedule* out, std::int64_t& cost, bool& fits,
                        bool exchange) const {
  const ScheduleRequest& request = request_;
  const std::int64_t capacity = static_cast<std::int64_t>(g) * request.max_tokens_per_rank;
  const std::int32_t groups = request.world_size / g;
  // Groups by load, ties by index, kept as loads change (a scan of every
  // group per row was O(W) a row).
  LoadOrder load(groups);
  std::vector<std::int32_t> wave(static_cast<std::size_t>(groups), 0);
  cost = 0;
  fits = true;
  // The pieces of row `row`, or the long piece i when `row` is null.
  const auto place = [&](std::span<const std::int32_t> chosen,
                         const std::span<const std::size_t>* row, std::size_t i, double time) {
    double start = 0;
    for (const std::int32_t k : chosen) start = std::max(start, load.at(k));
    if (out != nullptr) {
      ScheduleSlot& slot = out->slots.emplace_back();
      slot.ranks.reserve(chosen.size() * static_cast<std::size_t>(g));
      slot.pieces.reserve(row == nullptr ? 1 : row->size());
      for (const std::int32_t k : chosen) {
        slot.wave = std::max(slot.wave, wave[k]);
        for (std::int32_t a = 0; a < g; ++a) slot.ranks.push_back(k * g + a);
      }
      if (row == nullptr) {
        slot.pieces.push_back(prep_.pieces[i]);
      } else {
        for (const std::size_t j : *row) slot.pieces.push_back(prep_.pieces[j]);
      }
      for (const std::int32_t k : chosen) wave[k] = slot.wave + 1;
    }
    for (const std::int32_t k : chosen) load.set(k, start + time);
  };
  for (const std::size_t i : prep_.by_length) {
    const std::int64_t len = prep_.pieces[i].length;
    if (len <= capacity) continue;  // a row's piece (best_fit)
    const auto m = static_cast<std::int32_t>(ceil_div(len, capacity));
    if (m > groups) {
      fits = false;
      return 0;
    }
    const std::int32_t n = m * g;
    cost += slot_planning_cost(len, static_cast<std::size_t>(n));
    place(load.earliest(m), nullptr, i,
          est_.slot_time(prep_.work[i], len, n, std::min(n, request.profile.ranks_per_node)));
  }
  const BestFitRows rows =
      best_fit_rows(prep_.pieces, prep_.work, prep_.by_length, capacity, out != nullptr);
  const std::vector<std::int64_t>& room = rows.room;
  const std::vector<double>& row_work = rows.work;
  std::vector<double> time(room.size());
  for (std::size_t k = 0; k < room.size(); ++k) {
    time[k] = exchange && g > 1 ? est_.row_time(row_work[k], capacity - room[k], g,
                                                std::min(g, request.profile.ranks_per_node))
                                : row_work[k] / g + request.profile.slot_seconds;
    cost += slot_planning_cost(capacity - room[k], static_cast<std::size_t>(g));
  }
  std::vector<std::size_t> order(room.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return time[a] > time[b]; });
  if (out != nullptr) out->slots.reserve(out->slots.size() + order.size());
  for (const std::size_t k : order) {
    const std::int32_t least = load.least();
    std::span<const std::size_t> row_pieces;
    if (out != nullptr) {
      row_pieces = std::span(rows.pieces).subspan(rows.first[k], rows.first[k + 1] - rows.first[k]);
    }
    place(std::span<const std::int32_t>(&least, 1), out != nullptr ? &row_pieces : nullptr, 0,
          time[k]);
  }
  return load.latest();
}

// The equal-groups drafts for g = 1, 2, 4, ... and W, by estimated finish
// (ties: the smaller g), so that the planning budget goes to the likeliest
// of them: the first right after the estimate's choice, the others last.
void DraftSet::add_packed() {
  // A group wider than the batch has key blocks is wider than any row it
  // runs (kBlocksPerMember), and pricing it costs g^2.
  const std::int64_t widest = widest_useful_group(tokens_, request_.block_size);
  const std::int32_t world = request_.world_size;
  std::vector<std::pair<double, Entry>> packed_drafts;
  for (std::int32_t g = 1; g <= world; g = (g == world ? world + 1 : std::min(world, 2 * g))) {
    if (g > 1 && g > widest) break;
    Entry entry;
    entry.packed = true;
    entry.index = static_cast<std::size_t>(g);
    bool fits = true;
    const double finish = packed(g, nullptr, entry.cost, fits);
    if (fits && !prep_.pieces.empty()) packed_drafts.emplace_back(finish, std::move(entry));
  }
  std::stable_sort(packed_drafts.begin(), packed_drafts.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (std::size_t k = 0; k < packed_drafts.size(); ++k) {
    const auto at = k == 0 ? entries_.begin() + 1 : entries_.end();
    entries_.insert(at, std::move(packed_drafts[k].second));
  }
}

PreparedBatch prepare_batch(const ScheduleRequest& request, const Estimator& est) {
  PreparedBatch prep;
  prep.pieces = schedule_pieces(request);
  prep.work.resize(prep.pieces.size());
  double total = 0;
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < prep.pieces.size(); ++i) {
    prep.work[i] = est.work(prep.pieces[i].length);
    total += prep.work[i];
    tokens += prep.pieces[i].length;
  }
  prep.order.resize(prep.pieces.size());
  std::iota(prep.order.begin(), prep.order.end(), std::size_t{0});
  std::stable_sort(prep.order.begin(), prep.order.end(),
                   [&](std::size_t a, std::size_t b) { return prep.work[a] > prep.work[b]; });
  prep.mean_load =
      (total + request.profile.slot_seconds *
                   static_cast<double>(ceil_div(tokens, request.max_tokens_per_rank))) /
      request.world_size;
  return prep;
}

Batch grouped_batch(const ScheduleRequest& request, const PreparedBatch& prep, bool group_heavy) {
  Batch batch{request,    prep.pieces,    prep.work,
              prep.order, prep.mean_load, std::vector<char>(prep.pieces.size(), 0)};
  for (std::size_t i = 0; i < prep.pieces.size(); ++i) {
    batch.grouped[i] =
        prep.pieces[i].length > request.max_tokens_per_rank ||
        (group_heavy && prep.work[i] + request.profile.slot_seconds > batch.mean_load);
  }
  return batch;
}

DraftSet::DraftSet(const ScheduleRequest& request, bool every, std::int64_t room,
                   bool soonest_equal_groups)
    : request_(request), est_(request), prep_(prepare_batch(request, est_)) {
  for (const DocPiece& piece : prep_.pieces) tokens_ += piece.length;
  // With `every`, a draft within `room` may be planned whatever its finish.
  const auto plannable = [&](const Draft& d) {
    return every && draft_cost(d, prep_.pieces, tokens_) <= room;
  };
  for (const bool group_heavy : {true, false}) {
    const Batch batch = grouped_batch(request, prep_, group_heavy);
    bool any_long = false;
    bool any_heavy = false;
    for (std::size_t i = 0; i < prep_.pieces.size(); ++i) {
      const bool long_piece = prep_.pieces[i].length > request.max_tokens_per_rank;
      any_long = any_long || batch.grouped[i];
      any_heavy = any_heavy ||
                  (!long_piece && prep_.work[i] + request.profile.slot_seconds > batch.mean_load);
    }
    if (!group_heavy && !any_heavy) break;  // the same batch again
    const std::size_t first = drafts_.size();
    drafts_.push_back(draft(batch, est_, GroupRule::kMeanLoad));
    drawn_.push_back({group_heavy, GroupRule::kMeanLoad});
    if (any_long) {
      for (const GroupRule rule :
           {GroupRule::kTimelineMeanLoad, GroupRule::kSoonestEnd, GroupRule::kBalancedEnd}) {
        // A draft that cannot finish before the soonest so far is not
        // packed (its makespan then kNoEnd) unless it may be planned.
        Draft other = draft(batch, est_, rule, drafts_[first].makespan, false,
                            std::span(drafts_).subspan(first), plannable);
        Drawn how{group_heavy, rule};
        if (other.makespan < drafts_[first].makespan) {
          std::swap(other, drafts_[first]);
          std::swap(how, drawn_[first]);
        }
        drafts_.push_back(std::move(other));
        drawn_.push_back(how);
      }
    }
    if (!every) break;
  }
  // Without `every` only the estimate's choice of the group rules' drafts is
  // used: the others stay drafts.
  for (std::size_t k = 0; k < (every ? drafts_.size() : 1); ++k) {
    Entry entry;
    entry.index = k;
    entry.cost = draft_cost(drafts_[k], prep_.pieces, tokens_);
    entries_.push_back(std::move(entry));
  }
  if (every || soonest_equal_groups) {
    prep_.by_length.resize(prep_.pieces.size());
    std::iota(prep_.by_length.begin(), prep_.by_length.end(), std::size_t{0});
    std::stable_sort(prep_.by_length.begin(), prep_.by_length.end(),
                     [&](std::size_t a, std::size_t b) {
                       return prep_.pieces[a].length > prep_.pieces[b].length;
                     });
    add_packed();
    // add_packed puts the soonest right after the first.
    if (!every) entries_.resize(std::min<std::size_t>(entries_.size(), 2));
  }
}

Schedule& DraftSet::at(std::size_t k) {
  Entry& entry = entries_[k];
  if (!entry.made) {
    if (entry.packed) {
      Schedule s;
      s.strategy_used = "hybrid";
      std::int64_t cost = 0;
      bool fits = true;
      packed(static_cast<std::int32_t>(entry.index), &s, cost, fits);
      entry.made = std::move(s);
    } else {
      Draft& d = drafts_[entry.index];
      if (d.makespan == kNoEnd) {
        // Left unpacked (beyond `room`): drawn again, rows packed, as
        // `every` without `room` draws it.
        const Drawn& how = drawn_[entry.index];
        d = draft(grouped_batch(request_, prep_, how.group_heavy), est_, how.rule);
      }
      entry.made = to_schedule(d, prep_.pieces, request_.world_size);
    }
  }
  return *entry.made;
}

bool DraftSet::worth_planning_past_budget(std::size_t k) const {
  // add_packed puts the soonest equal-groups draft right after the first.
  if (k != 1 || !entries_[k].packed) return false;
  std::int64_t cost = 0;
  bool fits = true;
  const double finish =
      packed(static_cast<std::int32_t>(entries_[k].index), nullptr, cost, fits, true);
  return fits && finish < drafts_[entries_[0].index].makespan;
}

bool DraftSet::same_as_first(std::size_t k) const {
  const Entry& entry = entries_[k];
  return k > 0 && !entry.packed && same_draft(drafts_[entry.index], drafts_[0]);
}

}  // namespace fulcrum::hybrid
