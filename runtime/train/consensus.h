// Plan consensus and the test-only fault hooks of the training loop. No
// LibTorch: collectives come in as a byte all-gather callback, so this
// builds and is unit-tested in seconds.
//
// Why consensus. Every rank plans its CP shards and computes the DP partition
// on its own, from inputs meant to be replicated (same data, config, seed and
// plugin). When they are not (a rank reads a stale copy of the data, runs
// another plugin build, or a strategy is not deterministic), the collectives
// that follow either hang (the shapes differ) or, worse, silently compute on
// mismatched shards (the shapes agree, the positions do not). So before those
// collectives every rank all-gathers a 64-bit fingerprint of what it is about
// to use and compares:
//   - per step, over WORLD, before any collective of the step: the DP workload
//     (the global batch's sample ids and lengths), the DP partition (strategy,
//     samples and tokens per DP rank) and the rank's own share (which the CP
//     ranks of one DP rank must agree on);
//   - per row, over the CP group, before its CP attention: the CP workload
//     (N, document lengths, mask, B, P) and the plan (strategy used, shard
//     length, positions).
// A divergence is an error on every rank that names the ranks that differ and
// what differed (workload or plan). A CP divergence is first seen by one CP
// group only; its ranks stop planning rows (all of them, since they saw the
// same gathered records) and meet the others at end_step(), where one
// all-gather over WORLD hands the error to every rank, so nobody is left
// waiting in the gradient all-reduce. Cost: two small all-gathers per step
// over WORLD and one per row over the CP group (docs/RELIABILITY.md has
// figures). `dist.plan_consensus: false` turns it off.
//
// The test-only fault and perturbation variables are test_faults.h's; the
// hooks below fire them at their points of the step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/group_layout.h"
#include "data/loader.h"
#include "data/token_dataset.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/host/config.h"
#include "fulcrum/schedule_types.h"
#include "fulcrum/status.h"
#include "train/test_faults.h"

namespace fulcrum::train {

// 64-bit fingerprint over 64-bit words. Per word w: h = fmix64(h ^ w), with
// h starting at FNV-1a's offset basis and fmix64 MurmurHash3's finaliser (a
// bijection with full avalanche), so any single changed word changes the
// result and two different inputs collide with probability about 2^-64.
// Arrays are hashed with their length first, so [1,2],[3] and [1],[2,3]
// differ; strings as their length and then their bytes, 8 per word,
// little-endian. About 13 dependent cycles per word (two multiplies, three
// shift-xors): a row of 128K positions costs about a millisecond, next to
// seconds of attention (docs/RELIABILITY.md has measurements).
class Fingerprint {
 public:
  static constexpr std::uint64_t kOffsetBasis = 0xcbf29ce484222325ull;

  Fingerprint& add(std::uint64_t word);
  Fingerprint& add(std::int64_t word) { return add(static_cast<std::uint64_t>(word)); }
  Fingerprint& add(const std::vector<std::int64_t>& words);
  Fingerprint& add(std::string_view text);
  std::uint64_t value() const { return state_; }

 private:
  std::uint64_t state_ = kOffsetBasis;
};

// N, document lengths, mask (kind, parameter, block-sparse lists), B, P.
std::uint64_t workload_fingerprint(const CpWorkload& workload);
// Strategy used, P, shard length, positions.
std::uint64_t plan_fingerprint(const ShardPlan& plan);
// The scheduler used, then every slot: wave, ranks, pieces, and its plan's
// rule and shape (strategy used, P, shard length, padding) without
// positions: the compact answer (ABI 1.4), the same on every rank whichever
// slots it has expanded.
std::uint64_t schedule_fingerprint(const Schedule& schedule);

// One byte vector per member of a group, in group-rank order: what
// comm::Communicator::all_gather_bytes returns. Throws on failure.
using Bytes = std::vector<std::uint8_t>;
using GatherBytes = std::function<std::vector<Bytes>(const Bytes&)>;

// A group as consensus sees it: its name and members for messages, and how to
// gather over it.
struct ConsensusGroup {
  std::string name;        // "world", "cp[dp=0]"
  std::vector<int> ranks;  // global ranks, in group-rank order
  GatherBytes gather;
};

// Binds a communicator (anything with all_gather_bytes, e.g.
// comm::Communicator) to consensus; a template so this header needs no
// LibTorch.
template <class Comm>
ConsensusGroup consensus_group(std::shared_ptr<Comm> comm, const comm::GroupSpec& spec) {
  return {spec.name, spec.ranks,
          [comm](const Bytes& bytes) { return comm->all_gather_bytes(bytes); }};
}

// Divergent plans or workloads: the job cannot go on. The text is one line.
class ConsensusError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ReliabilityOptions {
  bool plan_consensus = true;  // dist.plan_consensus
  std::optional<FaultSpec> fault;
  std::optional<PerturbSpec> perturb;
};

// dist.plan_consensus and the FULCRUM_TEST_* variables, checked: a value
// that is not understood is a one-line error naming the variable (a typo in
// a fault test must not pass as "no fault happened").
Result<ReliabilityOptions> reliability_options(const host::Config& config, int world_size,
                                               const EnvFn& env = process_environment);

// The trainer's hooks, in the order it calls them. Every rank calls every
// hook of a step, except the row hooks, which the ranks of one CP group call
// for the same rows. Methods that gather throw what the gather throws, and
// ConsensusError on a divergence.
class ReliabilityHooks {
 public:
  ReliabilityHooks() = default;  // everything off
  ReliabilityHooks(ReliabilityOptions options, int rank);

  // Fault injection at step 0.
  void before_rendezvous();
  // Once the process groups exist.
  void connect(ConsensusGroup world, ConsensusGroup cp);

  // After the loader produced the step's batch, before any collective of the
  // step: the DP check over WORLD.
  void begin_step(std::int64_t step, const data::StepBatch& batch,
                  const data::TokenDataset& dataset);
  // A row's workload is built, before it is planned: fault injection and the
  // `cp` perturbation (which edits `workload`).
  void begin_row(CpWorkload& workload);
  // The row's plan is made, before its CP attention: the CP check over the
  // CP group. False: the step must stop planning and running rows (this CP
  // group diverged; end_step() will raise the error on every rank). Returns
  // false again, without communicating, for every later row of the step.
  [[nodiscard]] bool check_row(const CpWorkload& workload, const ShardPlan& plan);
  // Hybrid mode, a slot of this rank is about to run: fault injection.
  void begin_slot();
  // Hybrid mode with free single slots: the test-only `late` fault, this
  // rank claims after every other rank has stopped.
  bool late_claims() const { return faults_.late(step_); }
  // Right after a claim: the test-only `kill_claim` fault.
  void after_claim() { faults_.maybe_claim_fault(step_); }
  // Hybrid mode, once the step's schedule is made and before any slot runs:
  // the schedule's fingerprint compared over WORLD
  // (every rank schedules the global batch itself); a divergence throws
  // ConsensusError naming the ranks. The `plan` perturbation alters it.
  // `refused`: this rank's refusal of the schedule ("" = none), such as a
  // compact answer's plan that did not expand; it travels with the
  // fingerprint, and the first rank's refusal is returned on every rank
  // (then it outranks a divergence), so that every rank stops with the same
  // line. Without consensus (one rank, or dist.plan_consensus off) it is
  // this rank's own.
  // `fingerprint` is schedule_fingerprint of the answer as every rank got
  // it, taken before any rank expanded its own slots (expanding names a
  // plan by what its CP planner chose, and each rank expands other slots).
  // Then the plan of every slot of two or more ranks that this rank runs
  // and holds positions for, compared among the slot's members: a slot
  // planned differently by its members is returned as a refusal naming the
  // slot, its rule and two ranks' plans (the plugin's fault, exit 2).
  [[nodiscard]] std::string check_schedule(const Schedule& schedule, std::uint64_t fingerprint,
                                           const std::string& refused = "");
  // Before the step's gradient all-reduce: the CP verdict over WORLD.
  void end_step();

  bool enabled() const { return options_.plan_consensus; }

 private:
  bool armed(PerturbKind kind) const { return faults_.armed(kind, step_); }

  ReliabilityOptions options_{false, std::nullopt, std::nullopt};
  InjectedFaults faults_;
  int rank_ = 0;
  std::optional<ConsensusGroup> world_;
  std::optional<ConsensusGroup> cp_;
  std::int64_t step_ = 0;
  std::int64_t row_ = 0;  // rows checked in this step
  bool had_row_ = false;  // this rank began a row in this step
  std::string failure_;   // this step's CP divergence, "" = none
};

}  // namespace fulcrum::train
