// hybrid's internals (schedule_hybrid.cpp, docs/HYBRID.md): the estimate it
// places by, and the drafts of a placement (which ranks run which pieces,
// when). Shared by the files that draft, choose and plan a placement.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/core/slot_runs.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"

namespace fulcrum::hybrid {

// Tiles of a piece alone on one rank, at offset 0.
std::int64_t tiles_alone(const MaskSpec& mask, std::int64_t len, std::int64_t b);

// The most members a slot over a row of `tokens` is given: one key block
// of the row per member. A member then holds about a block of queries, and
// its tiles are the key blocks that block touches; a wider slot splits
// blocks between members, each of whom still computes the block's tiles and
// receives its keys, and pays a peer's latency for every member it
// exchanges with, for a token term of a block or less per member. The
// drafts and the search consider no wider slot (pricing a slot costs g^2
// pairs: thousands of members for a short row cost seconds), except that
// the search lets a lone row try a few ranks (docs/HYBRID.md rule 9).
inline std::int64_t widest_useful_group(std::int64_t tokens, std::int64_t block) {
  return std::max<std::int64_t>(1, (tokens + block - 1) / block);
}

// Loads of `count` groups (each 0 at first), ordered by load then index,
// kept as loads change: the m groups that free up first in O(m log m),
// where a scan of every group was O(count). An indexed binary heap: a
// change moves one entry, with no allocation (an ordered set allocated a
// node per change, most of rule 8's drafting at W = 1024).
class LoadOrder {
 public:
  explicit LoadOrder(std::int32_t count)
      : load_(static_cast<std::size_t>(count), 0.0),
        heap_(static_cast<std::size_t>(count)),
        at_(static_cast<std::size_t>(count)) {
    // All loads 0: index order is a heap.
    for (std::int32_t k = 0; k < count; ++k) {
      heap_[static_cast<std::size_t>(k)] = k;
      at_[static_cast<std::size_t>(k)] = static_cast<std::size_t>(k);
    }
  }
  double at(std::int32_t k) const { return load_[static_cast<std::size_t>(k)]; }
  void set(std::int32_t k, double load) {
    load_[static_cast<std::size_t>(k)] = load;
    std::size_t i = at_[static_cast<std::size_t>(k)];
    while (i > 0 && before(heap_[i], heap_[(i - 1) / 2])) {
      swap_at(i, (i - 1) / 2);
      i = (i - 1) / 2;
    }
    for (;;) {
      std::size_t least = i;
      for (const std::size_t c : {2 * i + 1, 2 * i + 2}) {
        if (c < heap_.size() && before(heap_[c], heap_[least])) least = c;
      }
      if (least == i) break;
      swap_at(i, least);
      i = least;
    }
  }
  // The least loaded (ties: the lower index): earliest(1)'s one group.
  std::int32_t least() const { return heap_.front(); }
  // The m least loaded (ties: the lower index), in index order; m <= count.
  std::vector<std::int32_t> earliest(std::int32_t m) const {
    std::vector<std::int32_t> chosen;
    chosen.reserve(static_cast<std::size_t>(m));
    // Best first over the heap: the next least is the root or a child of
    // one taken.
    std::vector<std::size_t> next;
    const auto later = [&](std::size_t x, std::size_t y) { return before(heap_[y], heap_[x]); };
    if (m > 0 && !heap_.empty()) next.push_back(0);
    while (static_cast<std::int32_t>(chosen.size()) < m) {
      std::pop_heap(next.begin(), next.end(), later);
      const std::size_t i = next.back();
      next.pop_back();
      chosen.push_back(heap_[i]);
      for (const std::size_t c : {2 * i + 1, 2 * i + 2}) {
        if (c < heap_.size()) {
          next.push_back(c);
          std::push_heap(next.begin(), next.end(), later);
        }
      }
    }
    std::sort(chosen.begin(), chosen.end());
    return chosen;
  }
  double latest() const {
    return load_.empty() ? 0.0 : *std::max_element(load_.begin(), load_.end());
  }

 private:
  bool before(std::int32_t x, std::int32_t y) const {
    const double lx = load_[static_cast<std::size_t>(x)];
    const double ly = load_[static_cast<std::size_t>(y)];
    return lx < ly || (lx == ly && x < y);
  }
  void swap_at(std::size_t i, std::size_t j) {
    std::swap(heap_[i], heap_[j]);
    at_[static_cast<std::size_t>(heap_[i])] = i;
    at_[static_cast<std::size_t>(heap_[j])] = j;
  }

  std::vector<double> load_;
  std::vector<std::int32_t> heap_;  // group ids; each before its children
  std::vector<std::size_t> at_;     // group id -> its place in heap_
};

// Rule 4's ranks by load (the drafts' LPT), a binary min-heap of (load,
// rank) in the lexicographic order, whose top's load can be raised in
// place (one pass where a pop and a push take two).
class LoadHeap {
 public:
  using Load = std::pair<double, std::int32_t>;

  static bool lighter(const Load& x, const Load& y) {
    return x.first < y.first || (x.first == y.first && x.second < y.second);
  }

  // Rank a at load[a] for every a.
  void build(const std::vector<double>& load) {
    heap_.resize(load.size());
    for (std::size_t a = 0; a < load.size(); ++a)
      heap_[a] = {load[a], static_cast<std::int32_t>(a)};
    for (std::size_t k = heap_.size() / 2; k-- > 0;) sift_down(k);
  }
  bool empty() const { return heap_.empty(); }
  const Load& top() const { return heap_.front(); }
  const std::vector<Load>& entries() const { return heap_; }

  void push(Load x) {
    heap_.push_back(x);
    sift_up(heap_.size() - 1, x);
  }

  // The top's load becomes `load`, no less than it was. LPT raises the
  // lightest rank by a piece at a time, and the rank so raised mostly sinks
  // near the leaves (half the entries are leaves): its hole goes down along
  // the lighter children to a leaf, one comparison a level, and the rank
  // rises back from there, where a sift down compares it at every level too.
  void raise_top(double load) {
    const Load x{load, heap_.front().second};
    const std::size_t n = heap_.size();
    std::size_t k = 0;
    for (std::size_t child = 1; child < n; child = 2 * k + 1) {
      if (child + 1 < n && lighter(heap_[child + 1], heap_[child])) ++child;
      heap_[k] = heap_[child];
      k = child;
    }
    sift_up(k, x);
  }

 private:
  // `x` into the hole at k, moved up past every heavier parent.
  void sift_up(std::size_t k, const Load& x) {
    while (k > 0) {
      const std::size_t up = (k - 1) / 2;
      if (!lighter(x, heap_[up])) break;
      heap_[k] = heap_[up];
      k = up;
    }
    heap_[k] = x;
  }

  void sift_down(std::size_t k) {
    const std::size_t n = heap_.size();
    const Load x = heap_[k];
    for (;;) {
      std::size_t child = 2 * k + 1;
      if (child >= n) break;
      if (child + 1 < n && lighter(heap_[child + 1], heap_[child])) ++child;
      if (!lighter(heap_[child], x)) break;
      heap_[k] = heap_[child];
      k = child;
    }
    heap_[k] = x;
  }

  std::vector<Load> heap_;
};

class Estimator {
 public:
  explicit Estimator(const ScheduleRequest& r) : r_(r), p_(r.profile) {}

  double work(std::int64_t len) const {
    return p_.tile_seconds * static_cast<double>(tiles_alone(r_.mask, len, r_.block_size)) +
           p_.token_seconds * static_cast<double>(len);
  }

  // K/V tokens a member of a g-rank balanced group receives from one peer:
  // a balanced plan deals blocks from the whole piece to every member, so a
  // member touches about every key block before its last query (all of the
  // piece but a sliding window's reach).
  double tokens_per_peer(std::int64_t len, std::int32_t g) const {
    const double share = static_cast<double>(len) / g;
    if (r_.mask.kind != MaskKind::kSliding) return share;
    const double reach = share / static_cast<double>(r_.block_size) *
                         static_cast<double>(r_.mask.param + r_.block_size);
    return std::min(share, std::min(static_cast<double>(len) - share, reach) / (g - 1));
  }

  // Slowest member's time in a g-rank slot whose most isolated member has
  // `together` members on its node (itself included).
  double slot_time(double piece_work, std::int64_t len, std::int32_t g,
                   std::int32_t together) const {
    double t = piece_work / g + p_.slot_seconds;
    if (g == 1) return t;
    const double bytes = 2 * tokens_per_peer(len, g) * p_.kv_bytes_per_token;
    t += bytes * (together - 1) / p_.intra_node_bytes_per_second +
         bytes * (g - together) / p_.inter_node_bytes_per_second + p_.latency_seconds * (g - 1);
    return t;
  }

  // A row's time over g members with its exchange: slot_time's, except
  // that under a sliding window a member's peers are only the members
  // within its reach (the window over a member's share, on either side).
  double row_time(double row_work, std::int64_t len, std::int32_t g, std::int32_t together) const {
    const double t = slot_time(row_work, len, g, together);
    if (g == 1 || r_.mask.kind != MaskKind::kSliding) return t;
    const double share = static_cast<double>(len) / g;
    const double reach = static_cast<double>(r_.mask.param + r_.block_size);
    const double peers = std::min<double>(g - 1, 2 * std::ceil(reach / share));
    return t - p_.latency_seconds * (g - 1 - peers);
  }

 private:
  const ScheduleRequest& r_;
  const CostProfile& p_;
};

struct LongSlot {
  std::vector<std::int32_t> ranks;
  std::size_t piece = 0;
  double start = 0;  // estimated
};

// A member's wait for the last member of its next multi-rank slot: room for
// one single-rank row that ends before the slot starts.
struct Gap {
  std::int32_t rank = 0;
  double begin = 0;
  double seconds = 0;  // left for pieces (the row's fixed cost taken off)
  std::int64_t room = 0;
  std::vector<std::size_t> pieces;
};

struct Row {
  std::int64_t room = 0;
  std::vector<std::size_t> pieces;
};

// How a long piece's group size is chosen.
enum class GroupRule {
  // The smallest g whose slot alone fits in the mean load per rank (else
  // the g with the shortest slot): fewest rank-seconds, blind to the
  // timeline.
  kMeanLoad,
  // The smallest g whose slot, started when its g earliest ranks are free,
  // ends within the mean load (else the g that ends soonest).
  kTimelineMeanLoad,
  // The g that ends soonest on the timeline: long pieces spread wide.
  kSoonestEnd,
  // The g whose slot end, or the mean load once the rank-seconds its
  // groups spend beyond their work (fixed costs, K/V, latency) are added,
  // whichever is later, is least: a piece too long for the mean load at
  // any g is spread only as far as the ranks it takes from the others pay.
  kBalancedEnd,
};

// A row a rank runs after its groups, in a draft: its pieces are a stretch
// of the draft's row_pieces.
struct RowSpan {
  std::int64_t room = 0;
  std::size_t first = 0;  // into Draft::row_pieces
  std::size_t size = 0;
};

struct Draft {
  std::vector<LongSlot> long_slots;
  std::vector<Gap> gaps;  // rows run while waiting for a group
  // Per rank (those below ranks()), its rows after its groups: rank a's
  // are rows[rank_first[a]] up to rows[rank_first[a + 1]], in one array,
  // and their pieces in another (a draft at W = 1024 runs thousands of
  // rows: a list per rank and per row was most of its allocations).
  std::vector<std::size_t> rank_first;  // ranks() + 1 entries, or none
  std::vector<RowSpan> rows;
  std::vector<std::size_t> row_pieces;
  double makespan = 0;  // estimated

  std::size_t ranks() const { return rank_first.empty() ? 0 : rank_first.size() - 1; }
  std::span<const RowSpan> rows_of(std::size_t a) const {
    return std::span(rows).subspan(rank_first[a], rank_first[a + 1] - rank_first[a]);
  }
  std::span<const std::size_t> pieces_of(const RowSpan& row) const {
    return std::span(row_pieces).subspan(row.first, row.size);
  }
};

struct Batch {
  const ScheduleRequest& request;
  const std::vector<DocPiece>& pieces;
  const std::vector<double>& work;
  const std::vector<std::size_t>& order;  // by work, largest first
  double mean_load = 0;
  // Placed as groups: longer than T, or too much work for one rank within
  // the mean load (such a piece alone would set the step on one rank).
  std::vector<char> grouped;
};

// Moves and swaps of short pieces between the most and least loaded ranks'
// trailing rows (rule 4's last step); `load` is per rank and kept current.
// `rows` and `load` may cover the first ranks only (the others have no
// rows, load 0); a rank past them that a move reaches is added.
void rebalance(const Batch& batch, std::vector<std::vector<Row>>& rows, std::vector<double>& load);
// The same moves made on the rows as a draft keeps them while it packs
// (one array of rows, one of pieces): `rows` in, rebalanced, and back (for
// tests).
void rebalance_packed(const Batch& batch, std::vector<std::vector<Row>>& rows,
                      std::vector<double>& load);

// A slot length that stands for "no sooner than the ceiling asked for".
inline constexpr double kNoEnd = std::numeric_limits<double>::infinity();

// One placement of the batch under `rule` (rules 2 to 4), with its
// estimated finish. A draft whose groups and waits already bound its
// finish at or after `beat` is left with its rows unpacked and makespan
// kNoEnd: it cannot finish before `beat` (for a caller that keeps only
// the soonest of several drafts). Its rows cover the ranks from 0 through
// the last that runs one (every rank past them runs none). It holds per-rank
// structures only for the nodes its groups and rows reach; `every_rank`
// holds all W from the start (the same draft; for tests).
//
// `drawn`: drafts of the same batch and estimate under other rules. Rules
// often place every group alike (at W = 1024 with 4,000 documents two of
// the four do), and then the rest follows alike too (the waits and rows
// depend on the groups' members and starts only), so a draft whose groups
// are those of one of `drawn` with its rows packed is a copy of it. Where
// `beat` would have left this one unpacked the copy is packed, with the
// same makespan, which is no sooner than `beat` either.
//
// `pack_anyway`, where given, is asked of the draft with its groups and
// waits placed (no rows yet): where it answers true the rows are packed
// whatever `beat` (for a caller that may use the draft however late it
// finishes).
Draft draft(const Batch& batch, const Estimator& est, GroupRule rule, double beat = kNoEnd,
            bool every_rank = false, std::span<const Draft> drawn = {},
            const std::function<bool(const Draft&)>& pack_anyway = {});

// The candidate plans of rule 5 for the rows planned in one answer, each
// built and counted once (count_runs): a row's plans and their counts
// depend on its pieces' lengths in order and its size only, and the
// search tries one row over many rank sets. plan_slot_compact keeps rows
// of more than 2^18 tokens in a table of its own call only (few are
// planned twice, and their counts are large).
class RowPlans {
 public:
  // The counted plan of `rule` (balanced, per_document, head_tail,
  // per_document_padded, contiguous) for the slot's row; nullptr where the
  // rule cannot shard it or is none of these; without counts where it holds more than T per
  // member (never priced). Valid while this lives.
  const CountedRuns* plan(std::string_view rule, const ScheduleRequest& request,
                          const ScheduleSlot& slot, const CpWorkload& w);

 private:
  static constexpr std::size_t kRules = 5;
  using Row = std::array<std::optional<std::optional<CountedRuns>>, kRules>;
  std::map<std::vector<std::int64_t>, Row> rows_;  // key: size, then lengths
};

// Rule 5 for one slot, without positions (schedule_hybrid_plan.cpp): the
// slot's plan gets the chosen rule's name (strategy_used, fallback_reason),
// cp_size and shard_len, no positions; returns the slot's exact length
// (evaluate_slot's end_seconds for the expanded plan) when it is below
// `ceiling`, else kNoEnd (the plan recorded is then not rule 5's choice,
// and the caller drops the slot's schedule). `none_below`, when given, is
// set when the answer is kNoEnd for every lower ceiling too (a caller may
// then answer those without planning).
// `rows`, when given, supplies the candidate plans (else they are built).
// `lean`: balanced and contiguous only (contiguous alone where balanced
// needs more than T per member), for a draft planned past the planning
// budget (docs/HYBRID.md rule 7).
Result<double> plan_slot_compact(const ScheduleRequest& request, ScheduleSlot& slot,
                                 double ceiling = kNoEnd, bool* none_below = nullptr,
                                 RowPlans* rows = nullptr, bool lean = false);

// The runs of the plan rule `rule` (balanced, per_document,
// per_document_padded, head_tail, contiguous) for a slot's row; nullopt for
// another name or a rule that cannot shard the row.
std::optional<RunShardPlan> slot_rule_runs(std::string_view rule, const CpWorkload& workload);

// Writes the positions (and work) of a slot planned by plan_slot_compact;
// a slot that has positions is left as it is.
Status expand_slot_plan(const ScheduleRequest& request, ScheduleSlot& slot);

// The step evaluate_schedule gives when slot s lasts length[s].
double step_of_lengths(const ScheduleRequest& request, const Schedule& schedule,
                       const std::vector<double>& length);

// Plans one slot (rule 5) and returns its exact length, or kNoEnd when it
// is not below the ceiling (the last argument).
using SlotPlanner = std::function<Result<double>(const ScheduleRequest&, ScheduleSlot&, double)>;

// Rule 7: moves on the exact timeline of a planned schedule (merges of a
// slot into another's spare room, the last slot re-placed), each kept only
// when the step ends sooner, or no later with fewer rank-seconds spent.
// `length` holds every slot's exact length and is kept current. The
// schedule stays valid; slots it changes are re-planned with `plan`, until
// the rows re-planned hold `token_budget` tokens in all.
Status improve_on_timeline(const ScheduleRequest& request, Schedule& schedule,
                           std::vector<double>& length, const SlotPlanner& plan,
                           std::int64_t token_budget);

}  // namespace fulcrum::hybrid
