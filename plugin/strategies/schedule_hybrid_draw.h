// Every draft hybrid may plan for a batch (docs/HYBRID.md rules 1 to 4 and
// 8), drawn once per answer and made a schedule only when a caller asks
// for it: planning reaches the first few within its budget, and the others
// need only their planning cost to be passed over.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "fulcrum/schedule_types.h"
#include "strategies/schedule_hybrid_draft.h"

namespace fulcrum::hybrid {

// What planning a slot costs, in tokens: a slot of g members is balanced
// over g and its exchange counted over g^2 member pairs, so a row of more
// than kWideSlot members counts g / kWideSlot times its tokens.
inline constexpr std::int64_t kWideSlot = 64;

inline std::int64_t slot_planning_cost(std::int64_t tokens, std::size_t members) {
  return tokens * std::max<std::int64_t>(1, static_cast<std::int64_t>(members) / kWideSlot);
}

// A batch's pieces with their estimated work, in the order the drafts place
// them, and the mean load per rank (rule 1).
struct PreparedBatch {
  std::vector<DocPiece> pieces;
  std::vector<double> work;
  std::vector<std::size_t> order;      // by work, largest first
  std::vector<std::size_t> by_length;  // by length, longest first (filled where asked)
  double mean_load = 0;
};
PreparedBatch prepare_batch(const ScheduleRequest& request, const Estimator& est);

// The batch with rule 1's groups marked: every piece longer than T, and
// with `group_heavy` every piece whose work and slot cost alone pass the
// mean load. It refers to `prep`, which must outlive it.
Batch grouped_batch(const ScheduleRequest& request, const PreparedBatch& prep, bool group_heavy);

// Rule 8's rows of `capacity` tokens: the pieces that fit one (in
// `by_length`'s order, longest first), each into the row with the least
// room that holds it (ties: the row that took that room first), else a
// new row. A row's work is summed as its pieces join, in their order.
struct BestFitRows {
  std::vector<std::int64_t> room;  // per row, left
  std::vector<double> work;        // per row
  // Where asked for: row k's pieces, in the order they joined, are
  // pieces[first[k]] up to pieces[first[k + 1]].
  std::vector<std::size_t> first;
  std::vector<std::size_t> pieces;
};
BestFitRows best_fit_rows(const std::vector<DocPiece>& pieces, const std::vector<double>& work,
                          const std::vector<std::size_t>& by_length, std::int64_t capacity,
                          bool with_pieces);

// The batch's drafts in the order they are planned: the estimate's choice
// (soonest estimated finish, first of equals) first; with `every`, the
// equal-groups draft (rule 8) of soonest estimated finish next, then the
// other group rules' drafts (with and without rule 1's heavy pieces as
// groups), then the other equal-groups drafts by estimated finish. Without
// `every`, the estimate's choice alone (the other group rules' drafts left
// unpacked where they cannot finish before it), or with the soonest
// equal-groups draft after it.
//
// `room`: the most planning cost a draft after the first can have and still
// be planned (the planning budget the first leaves). A group rule's draft
// that costs more is asked for by no planner, so its rows are packed only
// where it may finish before the estimate's choice (to choose that one),
// as without `every`; at() packs it where it is asked for all the same.
class DraftSet {
 public:
  // `every`: every draft (the group rules' and the equal groups', rule 8),
  // the estimate's choice first; else that one alone, and with
  // `soonest_equal_groups` the equal-groups draft of soonest estimated
  // finish after it (for a batch past half the planning budget but within
  // it, where only that draft may still be planned, past the budget:
  // worth_planning_past_budget).
  DraftSet(const ScheduleRequest& request, bool every,
           std::int64_t room = std::numeric_limits<std::int64_t>::max(),
           bool soonest_equal_groups = false);

  std::size_t size() const { return entries_.size(); }
  // at(k)'s planning cost (slot_planning_cost over its slots), without
  // making the schedule.
  std::int64_t cost(std::size_t k) const { return entries_[k].cost; }
  // Draft k as a schedule, made on first use; a caller may move it out.
  Schedule& at(std::size_t k);
  // Whether at(k) is at(0)'s schedule, slot for slot, known without making
  // it: a group rule's draft that places every piece as the first does
  // (rules often agree: at W = 1024 with 4,000 documents two of four do).
  bool same_as_first(std::size_t k) const;
  // Whether draft k is worth planning past the planning budget, lean
  // (docs/HYBRID.md rule 7): it is the equal-groups draft of soonest
  // estimated finish, and with its rows' exchange and latency estimated
  // too (Estimator::row_time; the order of rule 8's drafts leaves them
  // out) it still finishes before the estimate's choice.
  bool worth_planning_past_budget(std::size_t k) const;

 private:
  struct Entry {
    bool packed = false;    // an equal-groups draft (rule 8), else a group rule's
    std::size_t index = 0;  // into drafts_, or the group size g
    std::int64_t cost = 0;
    std::optional<Schedule> made;
  };
  // How drafts_[k] was drawn, to draw it again with its rows.
  struct Drawn {
    bool group_heavy = false;
    GroupRule rule = GroupRule::kMeanLoad;
  };
  // `exchange`: each row of g > 1 members estimated with its exchange and
  // latency (Estimator::row_time), not its compute and fixed cost alone.
  double packed(std::int32_t g, Schedule* out, std::int64_t& cost, bool& fits,
                bool exchange = false) const;
  void add_packed();

  const ScheduleRequest& request_;
  Estimator est_;
  PreparedBatch prep_;
  std::int64_t tokens_ = 0;  // the batch's
  std::vector<Draft> drafts_;
  std::vector<Drawn> drawn_;  // per draft
  std::vector<Entry> entries_;
};

}  // namespace fulcrum::hybrid
