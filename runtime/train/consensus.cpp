#include "train/consensus.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <utility>

#include "fulcrum/core/bytes.h"
#include "fulcrum/host/log.h"

namespace fulcrum::train {
namespace {

std::string hex(std::uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "0x%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

// --- records ----------------------------------------------------------------
//
// What ranks exchange: little-endian 64-bit words and length-prefixed
// strings (the core's byte codec), led by a tag naming the record, so that
// a rank that reached a
// different check (a bug, or another fulcrum build) is reported as such
// rather than misread.

constexpr std::uint64_t kStepTag = 0x31504554532d4346ull;      // "FC-STEP1"
constexpr std::uint64_t kRowTag = 0x31574f522d2d4346ull;       // "FC--ROW1"
constexpr std::uint64_t kVerdictTag = 0x3144524556244346ull;   // "FC$VERD1"
constexpr std::uint64_t kScheduleTag = 0x3144484353234346ull;  // "FC#SCHD1"

using Writer = ByteWriter<Bytes>;

struct StepRecord {
  std::int64_t step = 0;
  std::uint64_t lengths = 0;    // the global batch: sample ids and lengths
  std::uint64_t partition = 0;  // strategy, samples and tokens per DP rank
  std::uint64_t share = 0;      // this rank's samples, in packing order
  std::int64_t dp_rank = 0;
  std::int64_t samples = 0;  // in the global batch
  std::int64_t tokens = 0;   // in the global batch
  std::int64_t share_samples = 0;
  std::string strategy;
  std::vector<std::int64_t> rank_samples;  // per DP rank, as this rank's partition says
};

struct RowRecord {
  std::int64_t step = 0;
  std::int64_t row = 0;
  std::uint64_t workload = 0;
  std::uint64_t plan = 0;
  std::int64_t tokens = 0;
  std::int64_t documents = 0;
  std::int64_t shard_len = 0;
  std::string strategy;
};

struct ScheduleRecord {
  std::int64_t step = 0;
  std::uint64_t schedule = 0;  // slots: ranks, pieces, wave, plan; the scheduler used
  std::int64_t slots = 0;
  std::string scheduler;
  std::string refused;  // this rank's refusal of the schedule; "" = none
  // Per slot this rank runs with peers and holds positions for: the slot's
  // index, then plan_fingerprint of its plan (the bits as i64).
  std::vector<std::int64_t> member_plans;
};

struct VerdictRecord {
  std::int64_t step = 0;
  std::string failure;  // "" = this rank's CP group agreed on every row
};

Bytes encode(const StepRecord& r) {
  return Writer()
      .u64(kStepTag)
      .i64(r.step)
      .u64(r.lengths)
      .u64(r.partition)
      .u64(r.share)
      .i64(r.dp_rank)
      .i64(r.samples)
      .i64(r.tokens)
      .i64(r.share_samples)
      .str(r.strategy)
      .list(r.rank_samples)
      .take();
}

Bytes encode(const RowRecord& r) {
  return Writer()
      .u64(kRowTag)
      .i64(r.step)
      .i64(r.row)
      .u64(r.workload)
      .u64(r.plan)
      .i64(r.tokens)
      .i64(r.documents)
      .i64(r.shard_len)
      .str(r.strategy)
      .take();
}

Bytes encode(const ScheduleRecord& r) {
  return Writer()
      .u64(kScheduleTag)
      .i64(r.step)
      .u64(r.schedule)
      .i64(r.slots)
      .str(r.scheduler)
      .str(r.refused)
      .list(r.member_plans)
      .take();
}

Bytes encode(const VerdictRecord& r) {
  return Writer().u64(kVerdictTag).i64(r.step).str(r.failure).take();
}

[[noreturn]] void malformed(const ConsensusGroup& group, std::size_t member, std::size_t size,
                            const char* expected) {
  throw ConsensusError("plan consensus on group " + group.name + ": rank " +
                       std::to_string(group.ranks[member]) + " sent a record of " +
                       std::to_string(size) + " bytes that is not a " + expected +
                       "; every rank must run the same fulcrum build and reach the same check");
}

bool decode(const Bytes& bytes, ScheduleRecord& r) {
  ByteReader in(bytes);
  if (in.u64() != kScheduleTag) return false;
  r.step = in.i64();
  r.schedule = in.u64();
  r.slots = in.i64();
  r.scheduler = in.str();
  r.refused = in.str();
  r.member_plans = in.list();
  return in.done() && r.member_plans.size() % 2 == 0;
}

bool decode(const Bytes& bytes, StepRecord& r) {
  ByteReader in(bytes);
  if (in.u64() != kStepTag) return false;
  r.step = in.i64();
  r.lengths = in.u64();
  r.partition = in.u64();
  r.share = in.u64();
  r.dp_rank = in.i64();
  r.samples = in.i64();
  r.tokens = in.i64();
  r.share_samples = in.i64();
  r.strategy = in.str();
  r.rank_samples = in.list();
  return in.done();
}

bool decode(const Bytes& bytes, RowRecord& r) {
  ByteReader in(bytes);
  if (in.u64() != kRowTag) return false;
  r.step = in.i64();
  r.row = in.i64();
  r.workload = in.u64();
  r.plan = in.u64();
  r.tokens = in.i64();
  r.documents = in.i64();
  r.shard_len = in.i64();
  r.strategy = in.str();
  return in.done();
}

bool decode(const Bytes& bytes, VerdictRecord& r) {
  ByteReader in(bytes);
  if (in.u64() != kVerdictTag) return false;
  r.step = in.i64();
  r.failure = in.str();
  return in.done();
}

// Gathers `mine` over `group` and decodes every member's record.
template <class Record>
std::vector<Record> exchange(const ConsensusGroup& group, const Record& mine, const char* what) {
  const std::vector<Bytes> all = group.gather(encode(mine));
  if (all.size() != group.ranks.size()) {
    throw ConsensusError("plan consensus on group " + group.name + ": gathered " +
                         std::to_string(all.size()) + " records from a group of " +
                         std::to_string(group.ranks.size()) +
                         " ranks; this is a bug in the communicator, please report it");
  }
  std::vector<Record> records(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!decode(all[i], records[i])) malformed(group, i, all[i].size(), what);
  }
  return records;
}

// --- messages ----------------------------------------------------------------

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

// The members (as indices into `records`) grouped by equal key; the largest
// class first, as the reference the others are said to differ from (ties:
// the class holding the lowest rank, i.e. the first member).
template <class Record, class KeyFn>
std::vector<std::vector<std::size_t>> classes_of(const std::vector<Record>& records, KeyFn key) {
  std::vector<std::vector<std::size_t>> classes;
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto it = std::find_if(classes.begin(), classes.end(), [&](const auto& c) {
      return key(records[c.front()]) == key(records[i]);
    });
    if (it == classes.end()) {
      classes.push_back({i});
    } else {
      it->push_back(i);
    }
  }
  std::stable_sort(classes.begin(), classes.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return classes;
}

// With a strict majority, "<what> of rank 1 (<desc>) differs from that of
// ranks 0, 2, 3 (<desc>)": the ranks that differ first, then the majority.
// Without one (two ranks of a CP group of two), nobody can tell which side
// is wrong: "<what> differs between rank 0 (<desc>) and rank 1 (<desc>)".
template <class Record, class DescribeFn>
std::string differs(const std::string& what, const ConsensusGroup& group,
                    const std::vector<Record>& records,
                    const std::vector<std::vector<std::size_t>>& classes, DescribeFn describe) {
  auto ranks_of = [&](const std::vector<std::size_t>& c) {
    std::vector<int> ranks;
    for (std::size_t i : c) ranks.push_back(group.ranks[i]);
    return rank_list(ranks);
  };
  auto entry = [&](const std::vector<std::size_t>& c) {
    return ranks_of(c) + " (" + describe(records[c.front()]) + ")";
  };
  std::string out = what;
  if (classes.size() > 1 && classes[0].size() == classes[1].size()) {
    std::vector<std::vector<std::size_t>> by_rank = classes;
    std::sort(by_rank.begin(), by_rank.end());
    out += " differs between ";
    for (std::size_t k = 0; k < by_rank.size(); ++k) {
      out += (k == 0 ? "" : k + 1 == by_rank.size() ? " and " : ", ") + entry(by_rank[k]);
    }
    return out;
  }
  for (std::size_t k = 1; k < classes.size(); ++k) {
    out += std::string(k == 1 ? " of " : " and of ") + entry(classes[k]);
  }
  return out + " differs from that of " + entry(classes[0]);
}

std::string describe_position(const StepRecord& r) { return "step " + std::to_string(r.step); }
std::string describe_position(const RowRecord& r) {
  return "step " + std::to_string(r.step) + ", row " + std::to_string(r.row);
}
std::string describe_position(const ScheduleRecord& r) {
  return "step " + std::to_string(r.step) + ", schedule";
}
std::string describe_position(const VerdictRecord& r) {
  return "step " + std::to_string(r.step) + ", end";
}

// All members at the same point of training, or a ConsensusError: records
// of different steps mean the ranks' control flow already diverged.
template <class Record>
void check_in_step(const ConsensusGroup& group, const std::vector<Record>& records) {
  auto classes = classes_of(records, [](const Record& r) { return describe_position(r); });
  if (classes.size() == 1) return;
  throw ConsensusError(
      "plan consensus failed on group " + group.name + ": " +
      differs("the point of training", group, records, classes,
              [](const Record& r) { return describe_position(r); }) +
      "; the ranks' control flow diverged, so their inputs or builds differ: check that every "
      "rank runs the same fulcrum build with the same configuration and data");
}

std::string plural(std::int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string list_text(const std::vector<std::int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(v[i]);
  return out + "]";
}

// What this rank is about to train in `step`, as the DP check compares it.
// `perturb_lengths`: the test-only `dp` perturbation.
StepRecord step_record(std::int64_t step, const data::StepBatch& batch,
                       const data::TokenDataset& dataset, std::int64_t dp_rank,
                       bool perturb_lengths) {
  StepRecord mine;
  mine.step = step;
  std::vector<std::int64_t> lengths;
  lengths.reserve(batch.global_samples.size());
  for (std::int64_t s : batch.global_samples) lengths.push_back(dataset.length(s));
  if (perturb_lengths && !lengths.empty()) ++lengths.front();
  mine.lengths = Fingerprint().add(batch.global_samples).add(lengths).value();
  mine.samples = static_cast<std::int64_t>(lengths.size());
  mine.tokens = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  mine.partition = Fingerprint()
                       .add(std::string_view(batch.stats.strategy))
                       .add(batch.stats.rank_samples)
                       .add(batch.stats.rank_tokens)
                       .value();
  mine.strategy = batch.stats.strategy;
  mine.rank_samples = batch.stats.rank_samples;
  mine.share = Fingerprint().add(batch.samples).value();
  mine.share_samples = static_cast<std::int64_t>(batch.samples.size());
  mine.dp_rank = dp_rank;
  return mine;
}

// The global batch and its partition agree over WORLD.
void check_dp_agreement(const ConsensusGroup& g, const std::vector<StepRecord>& all,
                        const std::string& at) {
  auto lengths_classes = classes_of(all, [](const StepRecord& r) { return r.lengths; });
  if (lengths_classes.size() > 1) {
    throw ConsensusError(
        at +
        differs("the DP workload (the global batch's sample ids and lengths)", g, all,
                lengths_classes,
                [](const StepRecord& r) {
                  return plural(r.samples, "sample", "samples") + ", " +
                         plural(r.tokens, "token", "tokens") + ", fingerprint " + hex(r.lengths);
                }) +
        "; every rank must read the same dataset with the same data.* settings: check that "
        "all ranks see identical data files");
  }
  auto partition_classes = classes_of(all, [](const StepRecord& r) { return r.partition; });
  if (partition_classes.size() > 1) {
    throw ConsensusError(
        at +
        differs("the DP partition", g, all, partition_classes,
                [](const StepRecord& r) {
                  return "strategy " + r.strategy + ", samples per DP rank " +
                         list_text(r.rank_samples) + ", fingerprint " + hex(r.partition);
                }) +
        "; the balancer split the same batch differently: run the same plugin build and "
        "balancer.dp settings on every rank");
  }
}

// The CP ranks of one DP rank hold the same share, of the size the agreed
// partition gives that DP rank.
void check_dp_shares(const ConsensusGroup& g, const std::vector<StepRecord>& all,
                     const std::string& at) {
  std::map<std::int64_t, std::vector<std::size_t>> by_dp;
  for (std::size_t i = 0; i < all.size(); ++i) by_dp[all[i].dp_rank].push_back(i);
  for (const auto& [dp_rank, members] : by_dp) {
    std::vector<StepRecord> sub;
    ConsensusGroup sub_group{g.name, {}, nullptr};
    for (std::size_t i : members) {
      sub.push_back(all[i]);
      sub_group.ranks.push_back(g.ranks[i]);
    }
    auto share_classes = classes_of(sub, [](const StepRecord& r) { return r.share; });
    if (share_classes.size() > 1) {
      throw ConsensusError(
          at +
          differs("the share of DP rank " + std::to_string(dp_rank), sub_group, sub, share_classes,
                  [](const StepRecord& r) {
                    return plural(r.share_samples, "sample", "samples") + ", fingerprint " +
                           hex(r.share);
                  }) +
          "; the CP ranks of one DP rank must train the same samples: run the same loader "
          "settings on every rank");
    }
    const auto& rank_samples = all.front().rank_samples;
    const StepRecord& r = sub.front();
    if (dp_rank < 0 || static_cast<std::size_t>(dp_rank) >= rank_samples.size() ||
        rank_samples[static_cast<std::size_t>(dp_rank)] != r.share_samples) {
      throw ConsensusError(at + rank_list(sub_group.ranks) + " (DP rank " +
                           std::to_string(dp_rank) + ") hold " +
                           plural(r.share_samples, "sample", "samples") +
                           " but the agreed partition " + list_text(rank_samples) +
                           " gives that DP rank another count; the loader's share does not match "
                           "its partition, which is a bug in fulcrum: please report it");
    }
  }
}

// What this rank is about to attend in row `row` of `step`, as the CP check
// compares it. `perturb_plan`: the test-only `plan` perturbation.
RowRecord row_record(std::int64_t step, std::int64_t row, const CpWorkload& workload,
                     const ShardPlan& plan, bool perturb_plan) {
  RowRecord mine;
  mine.step = step;
  mine.row = row;
  mine.workload = workload_fingerprint(workload);
  if (perturb_plan && plan.positions.size() >= 2) {
    ShardPlan other = plan;
    std::swap(other.positions[0], other.positions[1]);
    mine.plan = plan_fingerprint(other);
  } else {
    mine.plan = plan_fingerprint(plan);
  }
  mine.tokens = workload.tokens;
  mine.documents =
      workload.doc_lengths.empty() ? 1 : static_cast<std::int64_t>(workload.doc_lengths.size());
  mine.shard_len = plan.shard_len;
  mine.strategy = plan.strategy_used;
  return mine;
}

// "" when the CP group agrees on the row, else the one-line error.
std::string row_failure(const ConsensusGroup& g, const std::vector<RowRecord>& all,
                        const std::string& at) {
  std::string failure;
  auto workload_classes = classes_of(all, [](const RowRecord& r) { return r.workload; });
  auto plan_classes = classes_of(all, [](const RowRecord& r) { return r.plan; });
  if (workload_classes.size() > 1) {
    failure = at +
              differs("the CP workload", g, all, workload_classes,
                      [](const RowRecord& r) {
                        return "N=" + std::to_string(r.tokens) + ", " +
                               plural(r.documents, "document", "documents") + ", fingerprint " +
                               hex(r.workload);
                      }) +
              "; the ranks of a CP group must build the same rows from replicated inputs: check "
              "that every rank reads the same data and configuration";
  } else if (plan_classes.size() > 1) {
    failure = at + "the CP workload agrees (N=" + std::to_string(all.front().tokens) + ", " +
              plural(all.front().documents, "document", "documents") + ") but " +
              differs("the plan", g, all, plan_classes,
                      [](const RowRecord& r) {
                        return "strategy " + r.strategy + ", shard " + std::to_string(r.shard_len) +
                               ", fingerprint " + hex(r.plan);
                      }) +
              "; the balancer answered the same workload differently: run the same plugin "
              "build and balancer.cp settings on every rank";
  }
  return failure;
}

}  // namespace

// --- options -----------------------------------------------------------------

Result<ReliabilityOptions> reliability_options(const host::Config& config, int world_size,
                                               const EnvFn& env) {
  ReliabilityOptions o;
  o.plan_consensus = config.get_bool("dist.plan_consensus");
  Result<std::optional<FaultSpec>> fault = fault_from_environment(env, world_size);
  if (!fault) return fault.status();
  o.fault = *fault;
  Result<std::optional<PerturbSpec>> perturb = perturb_from_environment(env, world_size);
  if (!perturb) return perturb.status();
  o.perturb = *perturb;
  return o;
}

// --- expanded slot plans --------------------------------------------------------
//
// Positions are not in the schedule's fingerprint: each member writes its
// slots' with the plugin's plan_cp (or its own scheduler call), and a plugin
// that plans a row differently per process would have one slot's members
// exchange the wrong tokens, silently. So the members of a slot compare.

namespace {

std::vector<std::int64_t> member_plans(const Schedule& schedule, int rank) {
  std::vector<std::int64_t> out;
  for (std::size_t s = 0; s < schedule.slots.size(); ++s) {
    const ScheduleSlot& slot = schedule.slots[s];
    if (slot.ranks.size() < 2 || slot.compact() ||
        std::find(slot.ranks.begin(), slot.ranks.end(), rank) == slot.ranks.end()) {
      continue;
    }
    out.push_back(static_cast<std::int64_t>(s));
    out.push_back(static_cast<std::int64_t>(plan_fingerprint(slot.plan)));
  }
  return out;
}

// "" when every slot's members hold one plan, else the line that stops the
// job (a plugin fault: the plugin planned one slot two ways).
std::string member_plan_failure(const Schedule& schedule, const ConsensusGroup& g,
                                const std::vector<ScheduleRecord>& all) {
  // slot -> (first member's rank, its fingerprint)
  std::map<std::int64_t, std::pair<int, std::int64_t>> first;
  for (std::size_t m = 0; m < all.size(); ++m) {
    const std::vector<std::int64_t>& plans = all[m].member_plans;
    for (std::size_t i = 0; i + 1 < plans.size(); i += 2) {
      const auto [at, fresh] = first.try_emplace(plans[i], g.ranks[m], plans[i + 1]);
      if (fresh || at->second.second == plans[i + 1]) continue;
      const auto s = static_cast<std::size_t>(plans[i]);
      const std::string rule =
          s < schedule.slots.size() ? schedule.slots[s].plan.strategy_used : std::string("?");
      const std::size_t members = s < schedule.slots.size() ? schedule.slots[s].ranks.size() : 0;
      return "scheduling step " + std::to_string(all[m].step) + " with " +
             quote_text(all[m].scheduler) + " failed: schedule slot " + std::to_string(s) +
             " (CP rule " + quote_text(rule) + " on " + std::to_string(members) +
             " ranks) expanded to plan " + hex(static_cast<std::uint64_t>(at->second.second)) +
             " on rank " + std::to_string(at->second.first) + " and plan " +
             hex(static_cast<std::uint64_t>(plans[i + 1])) + " on rank " +
             std::to_string(g.ranks[m]) +
             "; a plan by rule must be the same on every rank (the plugin's CP planner is not "
             "deterministic): fix the plugin so that its CP strategy plans a row alike in "
             "every process";
    }
  }
  return "";
}

}  // namespace

// --- hooks ------------------------------------------------------------------

ReliabilityHooks::ReliabilityHooks(ReliabilityOptions options, int rank)
    : options_(std::move(options)), faults_(options_.fault, options_.perturb, rank), rank_(rank) {}

void ReliabilityHooks::before_rendezvous() { faults_.maybe_fault(0); }

void ReliabilityHooks::connect(ConsensusGroup world, ConsensusGroup cp) {
  world_ = std::move(world);
  cp_ = std::move(cp);
}

void ReliabilityHooks::begin_step(std::int64_t step, const data::StepBatch& batch,
                                  const data::TokenDataset& dataset) {
  step_ = step;
  row_ = 0;
  had_row_ = false;
  failure_.clear();
  if (!enabled() || !world_ || world_->ranks.size() < 2) return;
  const int cp_size = cp_ ? static_cast<int>(cp_->ranks.size()) : 1;
  const StepRecord mine = step_record(step, batch, dataset, rank_ / std::max(1, cp_size),
                                      armed(PerturbKind::kDpLengths));
  const ConsensusGroup& g = *world_;
  const std::vector<StepRecord> all = exchange(g, mine, "step check");
  check_in_step(g, all);
  const std::string at =
      "plan consensus failed at step " + std::to_string(step) + " on group " + g.name + ": ";
  check_dp_agreement(g, all, at);
  check_dp_shares(g, all, at);
}

void ReliabilityHooks::begin_row(CpWorkload& workload) {
  const bool first = !had_row_;
  had_row_ = true;
  faults_.maybe_fault(step_);
  if (first && armed(PerturbKind::kCpWorkload)) InjectedFaults::perturb_workload(workload);
}

bool ReliabilityHooks::check_row(const CpWorkload& workload, const ShardPlan& plan) {
  if (!failure_.empty()) return false;
  const std::int64_t row = row_++;
  if (!enabled() || !cp_ || cp_->ranks.size() < 2) return true;
  const RowRecord mine =
      row_record(step_, row, workload, plan, row == 0 && armed(PerturbKind::kCpPlan));
  const ConsensusGroup& g = *cp_;
  const std::vector<RowRecord> all = exchange(g, mine, "row check");
  check_in_step(g, all);
  std::string failure =
      row_failure(g, all,
                  "plan consensus failed at step " + std::to_string(step_) + ", row " +
                      std::to_string(row) + " of group " + g.name + ": ");
  if (failure.empty()) return true;
  // The whole job is this CP group: everyone already knows.
  if (!world_ || world_->ranks.size() == g.ranks.size()) throw ConsensusError(failure);
  failure_ = std::move(failure);
  return false;
}

void ReliabilityHooks::begin_slot() { faults_.maybe_fault(step_); }

std::string ReliabilityHooks::check_schedule(const Schedule& schedule, std::uint64_t fingerprint,
                                             const std::string& refused) {
  if (!enabled() || !world_ || world_->ranks.size() < 2) return refused;
  ScheduleRecord mine{step_,
                      fingerprint,
                      static_cast<std::int64_t>(schedule.slots.size()),
                      schedule.strategy_used,
                      refused,
                      member_plans(schedule, rank_)};
  // The test-only `plan` perturbation: this rank's schedule reads differently.
  if (armed(PerturbKind::kCpPlan)) mine.schedule ^= 1;
  const ConsensusGroup& g = *world_;
  const std::vector<ScheduleRecord> all = exchange(g, mine, "schedule check");
  check_in_step(g, all);
  for (const ScheduleRecord& r : all) {
    if (!r.refused.empty()) return r.refused;
  }
  auto classes = classes_of(all, [](const ScheduleRecord& r) { return r.schedule; });
  if (classes.size() == 1) return member_plan_failure(schedule, g, all);
  throw ConsensusError(
      "plan consensus failed at step " + std::to_string(step_) + " on group " + g.name + ": " +
      differs("the schedule", g, all, classes,
              [](const ScheduleRecord& r) {
                return "scheduler " + r.scheduler + ", " + plural(r.slots, "slot", "slots") +
                       ", fingerprint " + hex(r.schedule);
              }) +
      "; the balancer placed the same batch differently: run the same plugin build and "
      "balancer.schedule settings on every rank");
}

void ReliabilityHooks::end_step() {
  // A rank without rows in the faulty step fails here instead.
  faults_.maybe_fault(step_);
  if (!enabled() || !world_ || !cp_ || cp_->ranks.size() < 2 ||
      world_->ranks.size() == cp_->ranks.size()) {
    return;
  }
  const ConsensusGroup& g = *world_;
  const std::vector<VerdictRecord> all = exchange(g, VerdictRecord{step_, failure_}, "verdict");
  check_in_step(g, all);
  for (const VerdictRecord& r : all) {
    if (!r.failure.empty()) throw ConsensusError(r.failure);
  }
}

}  // namespace fulcrum::train
