#include "attention/kv_exchange.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace fulcrum::attention {
namespace {

// The union of a schedule's runs over all its query blocks, merged.
std::vector<KeyBlockRun> touched_runs(const TileSchedule& s) {
  std::vector<bool> touched(static_cast<std::size_t>(s.num_key_blocks), false);
  for (const KeyBlockRun& run : s.runs) {
    for (std::int64_t kb = run.first; kb <= run.last; ++kb) touched[kb] = true;
  }
  std::vector<KeyBlockRun> runs;
  for (std::int64_t kb = 0; kb < s.num_key_blocks; ++kb) {
    if (!touched[kb]) continue;
    if (!runs.empty() && runs.back().last == kb - 1) {
      runs.back().last = kb;
    } else {
      runs.push_back({kb, kb});
    }
  }
  return runs;
}

// Per key block: the members other than `member` that hold a token of it,
// ascending; only for the blocks `member`'s schedule touches.
std::vector<std::vector<std::int32_t>> block_peers(const TileSchedule& s, const ShardPlan& plan,
                                                   std::int32_t member) {
  std::vector<std::int32_t> owner(static_cast<std::size_t>(s.tokens), member);
  for (std::int32_t r = 0; r < plan.cp_size; ++r) {
    const std::int64_t* held = plan.rank_begin(r);
    for (std::int64_t row = 0; row < plan.shard_len; ++row) {
      if (held[row] != kPadPosition) owner[held[row]] = r;
    }
  }
  std::vector<std::vector<std::int32_t>> peers(static_cast<std::size_t>(s.num_key_blocks));
  for (const KeyBlockRun& run : touched_runs(s)) {
    for (std::int64_t kb = run.first; kb <= run.last; ++kb) {
      std::vector<std::int32_t>& p = peers[kb];
      const std::int64_t end = std::min(s.tokens, (kb + 1) * s.block_size);
      for (std::int64_t pos = kb * s.block_size; pos < end; ++pos) {
        if (owner[pos] != member) p.push_back(owner[pos]);
      }
      std::sort(p.begin(), p.end());
      p.erase(std::unique(p.begin(), p.end()), p.end());
    }
  }
  return peers;
}

// Splits the schedule's key blocks into `groups` schedules by group_of(kb).
std::vector<TileSchedule> split_schedule(const TileSchedule& s, std::size_t groups,
                                         const std::vector<std::size_t>& group_of) {
  std::vector<TileSchedule> out;
  for (std::size_t g = 0; g < groups; ++g) {
    std::vector<bool> keep(group_of.size());
    for (std::size_t kb = 0; kb < group_of.size(); ++kb) keep[kb] = group_of[kb] == g;
    out.push_back(restrict_schedule(s, keep));
  }
  return out;
}

}  // namespace

TileSchedule restrict_schedule(const TileSchedule& schedule, const std::vector<bool>& keep) {
  TileSchedule s = schedule;
  s.runs.clear();
  s.run_offsets.assign(1, 0);
  s.tiles = 0;
  s.full_tiles = 0;  // `full` stays: the kernel clips it to the runs kept
  for (std::int64_t qb = 0; qb < schedule.num_query_blocks; ++qb) {
    const KeyBlockRun& whole = schedule.full[qb];
    for (std::int64_t i = schedule.run_offsets[qb]; i < schedule.run_offsets[qb + 1]; ++i) {
      const KeyBlockRun& run = schedule.runs[i];
      for (std::int64_t kb = run.first; kb <= run.last; ++kb) {
        if (!keep[kb]) continue;
        if (s.runs.size() > static_cast<std::size_t>(s.run_offsets.back()) &&
            s.runs.back().last == kb - 1) {
          s.runs.back().last = kb;
        } else {
          s.runs.push_back({kb, kb});
        }
        ++s.tiles;
        s.full_tiles += kb >= whole.first && kb <= whole.last ? 1 : 0;
      }
    }
    s.run_offsets.push_back(static_cast<std::int64_t>(s.runs.size()));
  }
  return s;
}

OverlapPlan make_overlap_plan(const TileSchedule& schedule, const ShardPlan& plan,
                              const KvExchangePlan& exchange, std::int32_t member,
                              OverlapCalls calls) {
  OverlapPlan o;
  for (const KvTransfer& t : exchange.transfers) {
    if (t.to == member) o.peers.push_back(t.from);
    if (t.from == member) o.peers.push_back(t.to);
  }
  std::sort(o.peers.begin(), o.peers.end());
  o.peers.erase(std::unique(o.peers.begin(), o.peers.end()), o.peers.end());
  auto index_of = [&](std::int32_t peer) {
    return static_cast<std::size_t>(std::lower_bound(o.peers.begin(), o.peers.end(), peer) -
                                    o.peers.begin());
  };
  const std::vector<std::vector<std::int32_t>> needs = block_peers(schedule, plan, member);
  const std::size_t groups = o.peers.size() + 1;
  std::vector<std::size_t> first(needs.size()), last(needs.size());
  const bool two = calls == OverlapCalls::kOwnThenRemote;
  for (std::size_t kb = 0; kb < needs.size(); ++kb) {
    first[kb] = needs[kb].empty() ? groups - 1 : two ? 0 : index_of(needs[kb].front());
    last[kb] = needs[kb].empty() ? 0 : two ? groups - 1 : index_of(needs[kb].back()) + 1;
  }
  o.forward = split_schedule(schedule, groups, last);
  o.backward = split_schedule(schedule, groups, first);
  return o;
}

std::int64_t KvExchangePlan::tokens_received(std::int32_t member) const {
  std::int64_t n = 0;
  for (const KvTransfer& t : transfers) n += t.to == member ? t.tokens() : 0;
  return n;
}

std::int64_t KvExchangePlan::tokens_sent(std::int32_t member) const {
  std::int64_t n = 0;
  for (const KvTransfer& t : transfers) n += t.from == member ? t.tokens() : 0;
  return n;
}

std::vector<const KvTransfer*> KvExchangePlan::incoming(std::int32_t member) const {
  std::vector<const KvTransfer*> list;
  for (const KvTransfer& t : transfers) {
    if (t.to == member) list.push_back(&t);
  }
  return list;  // transfers are ordered by (to, from): already by peer
}

std::vector<const KvTransfer*> KvExchangePlan::outgoing(std::int32_t member) const {
  std::vector<const KvTransfer*> list;
  for (const KvTransfer& t : transfers) {
    if (t.from == member) list.push_back(&t);
  }
  std::sort(list.begin(), list.end(),
            [](const KvTransfer* a, const KvTransfer* b) { return a->to < b->to; });
  return list;
}

Result<KvExchangePlan> make_kv_exchange_plan(const CpWorkload& workload, const ShardPlan& plan) {
  KvExchangePlan x;
  x.members = plan.cp_size;
  x.tokens = workload.tokens;
  x.block_size = workload.block_size;
  const std::int32_t g = plan.cp_size;
  std::vector<std::vector<bool>> needs(static_cast<std::size_t>(g));
  for (std::int32_t m = 0; m < g; ++m) {
    Result<TileSchedule> schedule = make_tile_schedule(workload, plan, m);
    if (!schedule) return schedule.status();
    x.touched.push_back(touched_runs(*schedule));
    needs[m].assign(static_cast<std::size_t>(schedule->num_key_blocks), false);
    for (const KeyBlockRun& run : x.touched.back()) {
      std::fill(needs[m].begin() + run.first, needs[m].begin() + run.last + 1, true);
    }
  }
  if (g == 1) return x;
  const std::int64_t b = workload.block_size;
  for (std::int32_t to = 0; to < g; ++to) {
    for (std::int32_t from = 0; from < g; ++from) {
      if (from == to) continue;
      KvTransfer t;
      t.from = from;
      t.to = to;
      const std::int64_t* held = plan.rank_begin(from);
      for (std::int64_t row = 0; row < plan.shard_len; ++row) {
        const std::int64_t pos = held[row];
        if (pos == kPadPosition || !needs[to][pos / b]) continue;
        t.rows.push_back(row);
        t.positions.push_back(pos);
      }
      if (!t.rows.empty()) x.transfers.push_back(std::move(t));
    }
  }
  return x;
}

}  // namespace fulcrum::attention
