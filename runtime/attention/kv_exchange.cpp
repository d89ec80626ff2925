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

}  // namespace

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
