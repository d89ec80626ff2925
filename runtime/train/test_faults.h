// Test-only fault injection and input perturbation for the training loop,
// read from the environment. No LibTorch.
//
// The variables (docs/RELIABILITY.md; never set them in a real job):
//   FULCRUM_TEST_FAULT=kill|throw|stall  with FULCRUM_TEST_FAULT_RANK=R
//     (default 0) and FULCRUM_TEST_FAULT_STEP=S (default 1; 0 = before the
//     rendezvous): rank R SIGKILLs itself, throws, or sleeps forever at the
//     first row of step S (at end_step when it has no row in step S).
//   FULCRUM_TEST_FAULT=late: in step S rank R claims free single slots
//     (parallel.hybrid.free_single_slots) only once every other rank has
//     stopped claiming, so the others run every one of them.
//   FULCRUM_TEST_FAULT=kill_claim: in step S rank R SIGKILLs itself right
//     after its first claim of a free single slot, before running it.
//   FULCRUM_TEST_PERTURB=cp|plan|dp  with FULCRUM_TEST_PERTURB_RANK=R
//     (default 0) and FULCRUM_TEST_PERTURB_STEP=S (default 1): rank R sees
//     different document lengths in its first row of step S (the workload is
//     really changed, N kept), or a different plan of that row, or different
//     sample lengths in step S's DP check (only what the check hashes is
//     changed for `plan` and `dp`).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"

namespace fulcrum::train {

// Environment lookup (nullopt = unset); tests pass their own.
using EnvFn = std::function<std::optional<std::string>(std::string_view name)>;
std::optional<std::string> process_environment(std::string_view name);

enum class FaultKind { kKill, kThrow, kStall, kExitZero, kLate, kKillAtClaim };
enum class PerturbKind { kCpWorkload, kCpPlan, kDpLengths };

struct FaultSpec {
  FaultKind kind = FaultKind::kThrow;
  int rank = 0;
  std::int64_t step = 1;  // 0 = before the rendezvous
};

struct PerturbSpec {
  PerturbKind kind = PerturbKind::kCpWorkload;
  int rank = 0;
  std::int64_t step = 1;
};

// FULCRUM_TEST_FAULT* and FULCRUM_TEST_PERTURB*, checked: a value that is
// not understood is a one-line error naming the variable (a typo in a fault
// test must not pass as "no fault happened"). nullopt: unset.
Result<std::optional<FaultSpec>> fault_from_environment(const EnvFn& env, int world_size);
Result<std::optional<PerturbSpec>> perturb_from_environment(const EnvFn& env, int world_size);

// FULCRUM_TEST_SLOT_SECONDS=A,B,C,D,E: hybrid mode's fit samples (what
// balancer.schedule.profile: auto refits from) read A x tiles + B x tokens +
// C + D x kv_bytes + E x peers seconds instead of the time measured, so that
// two runs refit the same profiles bit for bit (the resume test compares
// their schedules). Five finite numbers >= 0; nullopt: unset.
struct SlotClock {
  double tile = 0, token = 0, slot = 0, byte = 0, peer = 0;
  double seconds(std::int64_t tiles, std::int64_t tokens, std::int64_t kv_bytes,
                 std::int64_t peers) const;
};
Result<std::optional<SlotClock>> slot_clock_from_environment(const EnvFn& env);

// The faults and perturbations of one rank. Constructing it with either set
// warns on rank 0, so that a variable left set by accident is seen.
class InjectedFaults {
 public:
  InjectedFaults() = default;  // none
  InjectedFaults(std::optional<FaultSpec> fault, std::optional<PerturbSpec> perturb, int rank);

  // Fires this rank's fault if it is due at `step` (0 = before the
  // rendezvous); a fault fires once.
  void maybe_fault(std::int64_t step);
  // Whether this rank's perturbation of `kind` is due at `step`.
  bool armed(PerturbKind kind, std::int64_t step) const;
  // Fires the `kill_claim` fault if it is this rank's at `step`.
  void maybe_claim_fault(std::int64_t step);
  // Whether this rank is the `late` fault's rank at `step`.
  bool late(std::int64_t step) const {
    return fault_ && fault_->kind == FaultKind::kLate && fault_->rank == rank_ &&
           fault_->step == step;
  }
  // The `cp` perturbation: another split of the same N into documents, so
  // the shapes stay equal and only the check can tell.
  static void perturb_workload(CpWorkload& workload);

 private:
  std::optional<FaultSpec> fault_;
  std::optional<PerturbSpec> perturb_;
  int rank_ = 0;
  bool fault_fired_ = false;
};

}  // namespace fulcrum::train
