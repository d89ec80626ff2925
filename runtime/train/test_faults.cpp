#include "train/test_faults.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "fulcrum/host/log.h"

namespace fulcrum::train {
namespace {

constexpr const char* kTestOnly =
    "it is a test-only variable (docs/RELIABILITY.md): unset it outside fulcrum's tests";

Result<std::int64_t> env_integer(const EnvFn& env, const char* name, std::int64_t min,
                                 std::int64_t max, std::int64_t fallback) {
  const std::optional<std::string> text = env(name);
  if (!text) return fallback;
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (text->empty() || ec != std::errc() || end != text->data() + text->size() || value < min ||
      value > max) {
    return invalid_argument(std::string(name) + "='" + *text + "' is not an integer from " +
                            std::to_string(min) + " to " + std::to_string(max) + "; " + kTestOnly);
  }
  return value;
}

template <class Kind>
struct TestVariable {
  Kind kind;
  int rank = 0;
  std::int64_t step = 1;
};

// "<PREFIX>" names the kind; "<PREFIX>_RANK" and "<PREFIX>_STEP" where and
// when. Rank and step without the kind are refused: a test that forgot the
// kind would otherwise pass without any fault.
template <class Kind>
Result<std::optional<TestVariable<Kind>>> parse_test_variable(
    const EnvFn& env, const std::string& prefix,
    const std::vector<std::pair<std::string, Kind>>& kinds, int world_size, std::int64_t min_step) {
  const std::string rank_name = prefix + "_RANK";
  const std::string step_name = prefix + "_STEP";
  const std::optional<std::string> kind_text = env(prefix);
  if (!kind_text) {
    for (const std::string& name : {rank_name, step_name}) {
      if (env(name)) {
        return invalid_argument(name + " is set but " + prefix + " is not; " + kTestOnly);
      }
    }
    return std::optional<TestVariable<Kind>>();
  }
  std::string names;
  std::optional<Kind> kind;
  for (const auto& [name, k] : kinds) {
    names += (names.empty() ? "" : ", ") + name;
    if (*kind_text == name) kind = k;
  }
  if (!kind) {
    return invalid_argument(prefix + "='" + *kind_text + "' is not one of " + names + "; " +
                            kTestOnly);
  }
  Result<std::int64_t> rank = env_integer(env, rank_name.c_str(), 0, world_size - 1, 0);
  if (!rank) return rank.status();
  Result<std::int64_t> step =
      env_integer(env, step_name.c_str(), min_step, std::int64_t{1} << 62, 1);
  if (!step) return step.status();
  return std::optional<TestVariable<Kind>>(
      TestVariable<Kind>{*kind, static_cast<int>(*rank), *step});
}

const char* fault_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKill:
      return "kill";
    case FaultKind::kThrow:
      return "throw";
    case FaultKind::kStall:
      return "stall";
    case FaultKind::kExitZero:
      return "exit0";
    case FaultKind::kLate:
      return "late";
    case FaultKind::kKillAtClaim:
      return "kill_claim";
  }
  return "?";
}

const char* perturb_name(PerturbKind kind) {
  switch (kind) {
    case PerturbKind::kCpWorkload:
      return "cp";
    case PerturbKind::kCpPlan:
      return "plan";
    case PerturbKind::kDpLengths:
      return "dp";
  }
  return "?";
}

}  // namespace

std::optional<std::string> process_environment(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

double SlotClock::seconds(std::int64_t tiles, std::int64_t tokens, std::int64_t kv_bytes,
                          std::int64_t peers) const {
  return tile * static_cast<double>(tiles) + token * static_cast<double>(tokens) + slot +
         byte * static_cast<double>(kv_bytes) + peer * static_cast<double>(peers);
}

Result<std::optional<SlotClock>> slot_clock_from_environment(const EnvFn& env) {
  constexpr const char* kName = "FULCRUM_TEST_SLOT_SECONDS";
  const std::optional<std::string> text = env(kName);
  if (!text) return std::optional<SlotClock>();
  std::vector<double> values;
  std::size_t begin = 0;
  while (begin <= text->size()) {
    const std::size_t comma = std::min(text->find(',', begin), text->size());
    double v = 0;
    const char* first = text->data() + begin;
    const char* last = text->data() + comma;
    const auto [end, ec] = std::from_chars(first, last, v);
    if (first == last || ec != std::errc() || end != last || !std::isfinite(v) || v < 0) break;
    values.push_back(v);
    begin = comma + 1;
  }
  if (values.size() != 5 || begin != text->size() + 1) {
    return invalid_argument(std::string(kName) + "='" + *text +
                            "' is not five finite numbers >= 0 separated by commas "
                            "(seconds per tile, per token, per slot, per K/V byte, per peer); " +
                            kTestOnly);
  }
  return std::optional<SlotClock>(SlotClock{values[0], values[1], values[2], values[3], values[4]});
}

Result<std::optional<FaultSpec>> fault_from_environment(const EnvFn& env, int world_size) {
  auto fault = parse_test_variable<FaultKind>(env, "FULCRUM_TEST_FAULT",
                                              {{"kill", FaultKind::kKill},
                                               {"throw", FaultKind::kThrow},
                                               {"stall", FaultKind::kStall},
                                               {"exit0", FaultKind::kExitZero},
                                               {"late", FaultKind::kLate},
                                               {"kill_claim", FaultKind::kKillAtClaim}},
                                              world_size, /*min_step=*/0);
  if (!fault) return fault.status();
  if (!*fault) return std::optional<FaultSpec>();
  return std::optional<FaultSpec>(FaultSpec{(*fault)->kind, (*fault)->rank, (*fault)->step});
}

Result<std::optional<PerturbSpec>> perturb_from_environment(const EnvFn& env, int world_size) {
  auto perturb = parse_test_variable<PerturbKind>(env, "FULCRUM_TEST_PERTURB",
                                                  {{"cp", PerturbKind::kCpWorkload},
                                                   {"plan", PerturbKind::kCpPlan},
                                                   {"dp", PerturbKind::kDpLengths}},
                                                  world_size, /*min_step=*/1);
  if (!perturb) return perturb.status();
  if (!*perturb) return std::optional<PerturbSpec>();
  return std::optional<PerturbSpec>(
      PerturbSpec{(*perturb)->kind, (*perturb)->rank, (*perturb)->step});
}

InjectedFaults::InjectedFaults(std::optional<FaultSpec> fault, std::optional<PerturbSpec> perturb,
                               int rank)
    : fault_(std::move(fault)), perturb_(std::move(perturb)), rank_(rank) {
  // Said once, by rank 0, so that a variable left set by accident is seen.
  if (rank_ != 0) return;
  if (fault_) {
    host::log_to_stderr(host::LogLevel::kWarning,
                        std::string("test-only FULCRUM_TEST_FAULT=") + fault_name(fault_->kind) +
                            " is set (rank " + std::to_string(fault_->rank) + ", step " +
                            std::to_string(fault_->step) + "): this run fails on purpose");
  }
  if (perturb_) {
    host::log_to_stderr(
        host::LogLevel::kWarning,
        std::string("test-only FULCRUM_TEST_PERTURB=") + perturb_name(perturb_->kind) +
            " is set (rank " + std::to_string(perturb_->rank) + ", step " +
            std::to_string(perturb_->step) + "): that rank's inputs are altered on purpose");
  }
}

bool InjectedFaults::armed(PerturbKind kind, std::int64_t step) const {
  return perturb_ && perturb_->kind == kind && perturb_->rank == rank_ && perturb_->step == step;
}

void InjectedFaults::maybe_claim_fault(std::int64_t step) {
  if (!fault_ || fault_->kind != FaultKind::kKillAtClaim || fault_->rank != rank_ ||
      fault_->step != step) {
    return;
  }
  ::kill(::getpid(), SIGKILL);  // a claim taken and never run
  std::abort();                 // not reached
}

void InjectedFaults::maybe_fault(std::int64_t step) {
  if (!fault_ || fault_fired_ || fault_->rank != rank_ || fault_->step != step) return;
  // Not fired here: see late() and maybe_claim_fault().
  if (fault_->kind == FaultKind::kLate || fault_->kind == FaultKind::kKillAtClaim) return;
  fault_fired_ = true;
  switch (fault_->kind) {
    case FaultKind::kKill:
      // As the OOM killer would: no message, no unwinding.
      ::kill(::getpid(), SIGKILL);
      std::abort();  // not reached
    case FaultKind::kThrow:
      throw std::runtime_error("injected failure (test-only FULCRUM_TEST_FAULT=throw) in step " +
                               std::to_string(step));
    case FaultKind::kStall:
      // Silent, as a rank stuck in I/O or a dead lock would be; only the
      // others' timeouts and the launcher can end it.
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    case FaultKind::kLate:
    case FaultKind::kKillAtClaim:
      return;
    case FaultKind::kExitZero:
      // A rank that quits quietly with success (a stray exit(0) in a
      // library, a wrapper script that swallows the status): only the
      // missing completion note tells the launcher the run did not finish.
      std::fflush(nullptr);
      ::_exit(0);
  }
}

void InjectedFaults::perturb_workload(CpWorkload& workload) {
  if (workload.tokens < 2) return;
  std::vector<std::int64_t>& d = workload.doc_lengths;
  if (d.size() <= 1) {
    d = {1, workload.tokens - 1};
  } else {
    d[1] += d[0];
    d.erase(d.begin());
  }
}

}  // namespace fulcrum::train
