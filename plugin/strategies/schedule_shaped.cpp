// `hybrid` under a request's group_shapes: the placement for hosts whose
// runtime has only some communicators (docs/INTEGRATION.md; Megatron-core's
// dynamic CP has aligned power-of-two groups and the world, and runs every
// rank in every micro-batch).
//
// Why it is built this way:
// 1. Every group is an aligned block of an allowed size (even when the
//    request only restricts sizes): blocks of power-of-two sizes are nested
//    or disjoint, and the world holds them all. So if multi-rank slots are
//    placed largest first, every slot placed so far covers a block of the
//    current size whole or not at all: the members of any block have the
//    same slots in the same order, and a new slot takes the same wave on
//    all of them (waves never need repair).
// 2. A piece takes the smallest allowed size whose members hold it (padded
//    as TransformerEngine's THD layout pads: 2 ceil(L / 2g) each), and a
//    larger one only when its slot, priced by the cost model, would
//    otherwise end after the batch's mean load per rank (it would set the
//    step by itself): then the smallest larger size that ends within the
//    mean, else the one that ends soonest.
// 3. Multi-unit slots go, largest first, to the block of their size that is
//    least loaded; pieces on one unit (the smallest allowed block) are dealt
//    longest first to the least loaded unit and packed best fit into rows of
//    at most T tokens, one slot per row (one fixed cost per row).
// 4. With every_wave, every unit needs a slot in every wave: the wave count
//    is the largest unit's, rounded up to wave_multiple; a unit short of it
//    first splits its own rows, then takes a piece split off another unit's
//    row; a wave still missing a unit merges the slots of the smallest
//    allowed block around the gap into one slot over the block (the price
//    of the constraint: those pieces then exchange K/V).
// 5. Rows are sharded as the host will shard them: a single rank runs its
//    row as it is, a group per document head-tail padded to 2g
//    (`per_document_padded`), so the cost model prices what runs.
// Deterministic: no clock, no randomness, ties broken by index.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/core/fixed_schedule.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/workload.h"
#include "strategies/cp_strategies.h"
#include "strategies/schedule_strategies.h"

namespace fulcrum {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// Tokens each of g members holds for a piece of `len` tokens.
std::int64_t held(std::int64_t len, std::int64_t g) {
  return g == 1 ? len : 2 * ((len + 2 * g - 1) / (2 * g));
}

// The block sizes a slot may take, ascending: allowed by the shapes and
// with at least one aligned block in the world.
std::vector<std::int32_t> block_sizes(const GroupShapes& shapes, std::int32_t world) {
  std::vector<std::int32_t> sizes;
  for (std::int64_t g = 1; g <= world; g *= 2) {
    const int bit = std::countr_zero(static_cast<std::uint64_t>(g));
    if (!shapes.sized() || ((shapes.sizes >> bit) & 1U) != 0) {
      sizes.push_back(static_cast<std::int32_t>(g));
    }
  }
  if ((!shapes.sized() || shapes.world) &&
      std::find(sizes.begin(), sizes.end(), world) == sizes.end()) {
    sizes.push_back(world);
  }
  return sizes;
}

struct Slot {
  std::int32_t first = 0;  // first rank; the block is [first, first + size)
  std::int32_t size = 0;
  std::vector<std::size_t> pieces;  // indices into the piece list, in row order
};

class Shaper {
 public:
  explicit Shaper(const ScheduleRequest& request)
      : request_(request),
        world_(request.world_size),
        budget_(request.max_tokens_per_rank),
        pieces_(schedule_pieces(request)),
        sizes_(block_sizes(request.group_shapes, request.world_size)) {}

  Result<Schedule> run() {
    if (sizes_.empty()) {
      return unsupported("hybrid: the request's group_shapes allow no group on " + str(world_) +
                         " ranks; allow size 1, a power of two up to W, or the world");
    }
    unit_ = sizes_.front();
    const bool covered = world_ % unit_ == 0;
    if (!covered && request_.group_shapes.every_wave) {
      if (sizes_.back() != world_) {
        return unsupported("hybrid: with groups of " + str(unit_) + "+ ranks on " + str(world_) +
                           " ranks some rank is in no allowed group, and every rank must run "
                           "every wave; allow the world group or smaller groups");
      }
      unit_ = world_;  // only the world covers every rank
    }
    units_ = world_ / unit_;
    if (Status s = choose_sizes(); !s) return s;
    place_groups();
    deal_unit_pieces();
    if (request_.group_shapes.every_wave) {
      if (Status s = fill_every_wave(); !s) return s;
    }
    return to_schedule();
  }

 private:
  // The cost model's time for `pieces` alone in one slot on g ranks.
  double slot_time(const std::vector<std::size_t>& pieces, std::int32_t g) const {
    ScheduleSlot slot;
    for (std::int32_t r = 0; r < g; ++r) slot.ranks.push_back(r);
    for (const std::size_t p : pieces) slot.pieces.push_back(pieces_[p]);
    plan(slot);
    return evaluate_slot(request_, slot).end_seconds;
  }

  void plan(ScheduleSlot& slot) const {
    const CpWorkload w = slot_workload(request_, slot);
    if (w.cp_size == 1) {
      slot.plan = contiguous_plan(w);
      return;
    }
    Result<ShardPlan> p = cp::plan_per_document_padded(w);
    slot.plan = p ? std::move(*p) : contiguous_plan(w);
  }

  Status choose_sizes() {
    size_.assign(pieces_.size(), 0);
    time_.assign(pieces_.size(), 0);
    double rank_seconds = 0;
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      for (const std::int32_t g : sizes_) {
        if (g >= unit_ && held(pieces_[p].length, g) <= budget_) {
          size_[p] = g;
          break;
        }
      }
      if (size_[p] == 0) {
        return unsupported(
            "hybrid: document " + str(pieces_[p].doc) + " piece of " + str(pieces_[p].length) +
            " tokens fits no group the request's "
            "group_shapes allow at T = " +
            str(budget_) + " (padded to 2g per member); raise T or allow larger groups");
      }
      time_[p] = slot_time({p}, size_[p]);
      rank_seconds += time_[p] * size_[p];
    }
    const double mean = rank_seconds / world_;
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      if (time_[p] <= mean) continue;
      std::int32_t best = size_[p];
      double best_time = time_[p];
      for (const std::int32_t g : sizes_) {
        if (g <= size_[p]) continue;
        const double t = slot_time({p}, g);
        if (t <= mean) {
          best = g;
          best_time = t;
          break;
        }
        if (t < best_time) {
          best = g;
          best_time = t;
        }
      }
      size_[p] = best;
      time_[p] = best_time;
    }
    return Status::ok();
  }

  // Blocks of size g: [k g, (k + 1) g) for k g + g <= W.
  void place_groups() {
    load_.assign(world_, 0.0);
    seq_.assign(units_, {});
    std::vector<std::size_t> order;
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      if (size_[p] > unit_) order.push_back(p);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (size_[a] != size_[b]) return size_[a] > size_[b];
      return time_[a] > time_[b];
    });
    for (const std::size_t p : order) {
      const std::int32_t g = size_[p];
      std::int32_t best = 0;
      for (std::int32_t first = g; first + g <= world_; first += g) {
        if (load_[first] < load_[best]) best = first;
      }
      add_slot(Slot{best, g, {p}}, time_[p]);
    }
  }

  void add_slot(Slot slot, double time) {
    const auto id = static_cast<std::int32_t>(slots_.size());
    for (std::int32_t r = slot.first; r < slot.first + slot.size; ++r) load_[r] += time;
    for (std::int32_t u = slot.first / unit_; u < (slot.first + slot.size) / unit_; ++u) {
      seq_[u].push_back(id);
    }
    slots_.push_back(std::move(slot));
  }

  // LPT of the unit pieces over the units, then best-fit rows per unit.
  void deal_unit_pieces() {
    std::vector<std::size_t> order;
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      if (size_[p] == unit_) order.push_back(p);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return time_[a] > time_[b]; });
    std::vector<std::vector<std::size_t>> mine(units_);
    for (const std::size_t p : order) {
      std::int32_t best = 0;
      for (std::int32_t u = 1; u < units_; ++u) {
        if (load_[u * unit_] < load_[best * unit_]) best = u;
      }
      mine[best].push_back(p);
      for (std::int32_t r = best * unit_; r < (best + 1) * unit_; ++r) load_[r] += time_[p];
    }
    for (std::int32_t u = 0; u < units_; ++u) {
      // Best fit, longest first: each piece into the fullest row it fits.
      std::vector<std::vector<std::size_t>> rows;
      std::vector<std::int64_t> fill;
      std::vector<std::size_t> by_length = mine[u];
      std::stable_sort(by_length.begin(), by_length.end(), [&](std::size_t a, std::size_t b) {
        return pieces_[a].length > pieces_[b].length;
      });
      for (const std::size_t p : by_length) {
        const std::int64_t h = held(pieces_[p].length, unit_);
        std::size_t pick = rows.size();
        for (std::size_t k = 0; k < rows.size(); ++k) {
          if (fill[k] + h <= budget_ && (pick == rows.size() || fill[k] > fill[pick])) pick = k;
        }
        if (pick == rows.size()) {
          rows.emplace_back();
          fill.push_back(0);
        }
        rows[pick].push_back(p);
        fill[pick] += h;
      }
      for (std::vector<std::size_t>& row : rows) {
        const auto id = static_cast<std::int32_t>(slots_.size());
        slots_.push_back(Slot{u * unit_, unit_, std::move(row)});
        seq_[u].push_back(id);
      }
    }
  }

  // A unit row of >= 2 pieces on unit u, the one with most pieces (first of
  // equals), as an index into seq_[u]; -1 when none.
  std::int64_t splittable_row(std::int32_t u) const {
    std::int64_t pick = -1;
    std::size_t most = 1;
    for (std::size_t k = 0; k < seq_[u].size(); ++k) {
      const Slot& s = slots_[seq_[u][k]];
      if (s.size == unit_ && s.pieces.size() > most) {
        most = s.pieces.size();
        pick = static_cast<std::int64_t>(k);
      }
    }
    return pick;
  }

  // Takes the shortest piece off the row (the last, rows are longest first).
  std::size_t split_off(std::int32_t u, std::int64_t k) {
    Slot& s = slots_[seq_[u][static_cast<std::size_t>(k)]];
    const std::size_t p = s.pieces.back();
    s.pieces.pop_back();
    return p;
  }

  Status fill_every_wave() {
    std::size_t waves = 0;
    for (const auto& s : seq_) waves = std::max(waves, s.size());
    const auto multiple = static_cast<std::size_t>(request_.group_shapes.wave_multiple);
    waves = (waves + multiple - 1) / multiple * multiple;
    // Every wave needs a slot, and every slot a piece; the grid below holds
    // waves x units entries.
    if (waves > pieces_.size() ||
        waves * static_cast<std::size_t>(units_) > (std::size_t{1} << 26)) {
      return unsupported("hybrid: every rank in each of " + str(static_cast<std::int64_t>(waves)) +
                         " waves needs at least that many document pieces (the batch has " +
                         str(static_cast<std::int64_t>(pieces_.size())) + ") and at most 2^26 " +
                         "rank-waves; lower wave_multiple or add documents");
    }
    // Split own rows, then borrow from the unit with the most pieces to split.
    for (std::int32_t u = 0; u < units_; ++u) {
      while (seq_[u].size() < waves) {
        std::int64_t k = splittable_row(u);
        std::int32_t donor = u;
        if (k < 0) {
          std::size_t most = 1;
          for (std::int32_t d = 0; d < units_; ++d) {
            const std::int64_t dk = splittable_row(d);
            if (dk >= 0 && slots_[seq_[d][static_cast<std::size_t>(dk)]].pieces.size() > most) {
              most = slots_[seq_[d][static_cast<std::size_t>(dk)]].pieces.size();
              donor = d;
              k = dk;
            }
          }
          if (k < 0) break;
        }
        const std::size_t p = split_off(donor, k);
        const auto id = static_cast<std::int32_t>(slots_.size());
        slots_.push_back(Slot{u * unit_, unit_, {p}});
        seq_[u].push_back(id);
      }
    }
    // Gaps left: merge around them, wave by wave.
    std::vector<std::vector<std::int32_t>> grid(waves, std::vector<std::int32_t>(units_, -1));
    for (std::int32_t u = 0; u < units_; ++u) {
      for (std::size_t w = 0; w < seq_[u].size(); ++w) grid[w][u] = seq_[u][w];
    }
    for (std::size_t w = 0; w < waves; ++w) {
      for (std::int32_t u = 0; u < units_; ++u) {
        if (grid[w][u] >= 0) continue;
        if (Status s = merge_around(grid[w], u, w); !s) return s;
      }
    }
    seq_.assign(units_, {});
    for (std::size_t w = 0; w < waves; ++w) {
      for (std::int32_t u = 0; u < units_; ++u) seq_[u].push_back(grid[w][u]);
    }
    return Status::ok();
  }

  // One slot over the smallest allowed block around unit `gap` that holds
  // every piece of the wave's slots inside it.
  Status merge_around(std::vector<std::int32_t>& wave, std::int32_t gap, std::size_t w) {
    const std::int32_t rank = gap * unit_;
    for (const std::int32_t g : sizes_) {
      if (g <= unit_) continue;
      const std::int32_t first = g == world_ ? 0 : rank / g * g;
      if (first + g > world_) continue;
      std::vector<std::size_t> pieces;
      std::int64_t tokens = 0;
      std::vector<std::int32_t> inside;
      for (std::int32_t u = first / unit_; u < (first + g) / unit_; ++u) {
        const std::int32_t id = wave[u];
        if (id < 0 || (!inside.empty() && inside.back() == id)) continue;
        inside.push_back(id);
        for (const std::size_t p : slots_[id].pieces) {
          pieces.push_back(p);
          tokens += held(pieces_[p].length, g);
        }
      }
      if (pieces.empty() || tokens > budget_) continue;
      const auto id = static_cast<std::int32_t>(slots_.size());
      for (const std::int32_t old : inside) slots_[old].pieces.clear();
      slots_.push_back(Slot{first, g, std::move(pieces)});
      for (std::int32_t u = first / unit_; u < (first + g) / unit_; ++u) wave[u] = id;
      return Status::ok();
    }
    return unsupported("hybrid: wave " + str(static_cast<std::int64_t>(w)) + " leaves rank " +
                       str(rank) + " without a slot and no allowed group around it can take " +
                       "its neighbours' pieces within T = " + str(budget_) +
                       "; the batch has too few documents for every rank in every wave (" +
                       "lower wave_multiple or add documents)");
  }

  Result<Schedule> to_schedule() {
    Schedule schedule;
    schedule.strategy_used = "hybrid";
    std::vector<std::int32_t> wave_of(slots_.size(), -1);
    for (std::int32_t u = 0; u < units_; ++u) {
      for (std::size_t w = 0; w < seq_[u].size(); ++w) {
        wave_of[seq_[u][w]] = static_cast<std::int32_t>(w);
      }
    }
    for (std::size_t id = 0; id < slots_.size(); ++id) {
      const Slot& s = slots_[id];
      if (s.pieces.empty() || wave_of[id] < 0) continue;
      ScheduleSlot slot;
      for (std::int32_t r = s.first; r < s.first + s.size; ++r) slot.ranks.push_back(r);
      for (const std::size_t p : s.pieces) slot.pieces.push_back(pieces_[p]);
      slot.wave = wave_of[id];
      schedule.slots.push_back(std::move(slot));
    }
    std::stable_sort(schedule.slots.begin(), schedule.slots.end(),
                     [](const ScheduleSlot& a, const ScheduleSlot& b) {
                       if (a.wave != b.wave) return a.wave < b.wave;
                       return a.ranks[0] < b.ranks[0];
                     });
    return schedule;
  }

  const ScheduleRequest& request_;
  std::int32_t world_;
  std::int64_t budget_;
  std::vector<DocPiece> pieces_;
  std::vector<std::int32_t> sizes_;
  std::int32_t unit_ = 1;
  std::int32_t units_ = 1;
  std::vector<std::int32_t> size_;  // per piece: its group size
  std::vector<double> time_;        // per piece: its slot alone at that size
  std::vector<double> load_;        // per rank
  std::vector<Slot> slots_;
  std::vector<std::vector<std::int32_t>> seq_;  // per unit: its slots in wave order
};

}  // namespace

Result<Schedule> decide_hybrid_shaped(const ScheduleRequest& request) {
  if (Status status = validate_schedule_request(request); !status) return status;
  return Shaper(request).run();
}

// Megatron's runtime shards every group's documents per document, head-tail
// padded, whatever placed them: the same plans as megatron_dcp's.
Status plan_hybrid_shaped(const ScheduleRequest& request, Schedule& schedule) {
  return plan_megatron_dcp(request, schedule);
}

}  // namespace fulcrum
