// Fuzz target: the CP planners. Arbitrary bytes become a workload (N,
// documents, mask kind and parameter, B, P, block-sparse lists) and a
// strategy from the registry; fulcrum::cp::plan must return a plan that
// validates, with work figures equal to an independent recount, or a clean
// error of the right kind. Anything else aborts, which libFuzzer records.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/cp_types.h"
#include "fulcrum/status.h"
#include "fuzz_input.h"
#include "strategies/cp_strategies.h"
#include "workload_gen.h"

namespace fulcrum::fuzz {
namespace {

// Inside these bounds every planner must finish in milliseconds.
bool bounded(const CpWorkload& w) {
  return w.tokens >= 1 && w.tokens <= kMaxTokens && w.cp_size >= 1 && w.cp_size <= kMaxCpSize;
}

// Beyond validate_workload's documented bounds (workload.h).
bool beyond_limits(const CpWorkload& w) {
  return w.tokens > kMaxRowTokens || w.cp_size > kMaxGroupSize || w.block_size > kMaxBlockSize;
}

std::string describe(const CpWorkload& w, std::string_view strategy) {
  return std::string(strategy) + " on N=" + std::to_string(w.tokens) +
         " P=" + std::to_string(w.cp_size) + " B=" + std::to_string(w.block_size) +
         " docs=" + std::to_string(w.doc_lengths.size()) + " mask=" + mask_to_string(w.mask);
}

void check_plan(const CpWorkload& w, std::string_view strategy, const ShardPlan& plan) {
  const std::string what = describe(w, strategy);
  const Status workload_ok = validate_workload(w);
  FUZZ_CHECK(workload_ok.is_ok(),
             "planned a malformed workload (" + workload_ok.message() + "): " + what);
  const Status valid = validate_plan(w, plan);
  FUZZ_CHECK(valid.is_ok(), "invalid plan: " + valid.message() + ": " + what);
  FUZZ_CHECK(!plan.strategy_used.empty(), "plan names no strategy: " + what);
  FUZZ_CHECK(plan.fallback_reason.empty(), "cp::plan fell back: " + what);
  // Planners fill the work figures themselves (auto from unit sums, not a
  // walk over the row); the host trusts them, so they must be exact.
  FUZZ_CHECK(static_cast<std::int64_t>(plan.work.size()) == w.cp_size,
             "work has " + std::to_string(plan.work.size()) + " ranks: " + what);
  const std::vector<RankWork> recount = compute_work(w, plan);
  for (std::size_t r = 0; r < recount.size(); ++r) {
    const RankWork& a = plan.work[r];
    const RankWork& b = recount[r];
    FUZZ_CHECK(a.tokens == b.tokens && a.pairs == b.pairs && a.tiles == b.tiles,
               "rank " + std::to_string(r) + " work (" + std::to_string(a.tokens) + ", " +
                   std::to_string(a.pairs) + ", " + std::to_string(a.tiles) + ") != recount (" +
                   std::to_string(b.tokens) + ", " + std::to_string(b.pairs) + ", " +
                   std::to_string(b.tiles) + "): " + what);
  }
}

void check_error(const CpWorkload& w, std::string_view strategy, bool known, const Status& s) {
  const std::string what = describe(w, strategy) + ": " + s.message();
  FUZZ_CHECK(!s.message().empty(), "error without a message: " + what);
  // One line, unless the caller's own strategy name brought the line break.
  FUZZ_CHECK(
      s.message().find('\n') == std::string::npos || strategy.find('\n') != std::string_view::npos,
      "multi-line error: " + what);
  if (!known) {
    FUZZ_CHECK(s.code() == StatusCode::kNotFound, "unknown strategy not kNotFound: " + what);
    return;
  }
  if (!validate_workload(w).is_ok()) {
    FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument,
               "malformed workload not kInvalidArgument: " + what);
    return;
  }
  // A valid workload is refused only by the strategies with an
  // applicability rule, and exactly when that rule fails.
  FUZZ_CHECK(s.code() == StatusCode::kUnsupported, "valid workload refused: " + what);
  FUZZ_CHECK(cp::inapplicable_reason(strategy, w).has_value(),
             "refused though inapplicable_reason() has no objection: " + what);
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fulcrum;
  fuzz::FuzzInput in(data, size);
  const auto table = cp::strategies();
  const auto pick = static_cast<std::size_t>(in.range(0, static_cast<std::int64_t>(table.size())));
  // One past the table: a name of the fuzzer's choosing (usually unknown).
  const std::string name = pick < table.size() ? std::string(table[pick].name) : in.string(16);
  const bool corrupt = in.u8() >= 0xc0;
  CpWorkload w = fuzz::plausible_workload(in);
  if (corrupt) fuzz::corrupt_workload(in, w);
  const bool known = cp::find_strategy(name) != nullptr;

  // N, P and B beyond validate_workload's bounds (2^31, 2^20, 2^31) must be
  // refused, and are sent: check_error expects kInvalidArgument for them. A
  // corrupted N or P between the fuzz bounds and those (N = 2^31 - 1 or
  // 2^31, P = 2^20) is a valid row that takes gigabytes to plan: not sent.
  const bool valid = validate_workload(w).is_ok();
  FUZZ_CHECK(!valid || !fuzz::beyond_limits(w),
             "validate_workload accepted a workload beyond its bounds: " + fuzz::describe(w, name));
  if (valid && !fuzz::bounded(w)) return 0;
  const Result<ShardPlan> first = cp::plan(name, w);
  if (fuzz::verbose()) {
    std::fprintf(
        stderr, "planner: %s -> %s\n", fuzz::describe(w, name).c_str(),
        first ? ("plan by " + first->strategy_used).c_str() : first.status().message().c_str());
  }
  if (!first) {
    fuzz::check_error(w, name, known, first.status());
    return 0;
  }
  FUZZ_CHECK(known, "an unknown strategy '" + name + "' returned a plan");
  fuzz::check_plan(w, name, *first);
  // Every rank plans the same row independently: the answer must not depend
  // on anything but the workload.
  Result<ShardPlan> second = cp::plan(name, w);
  FUZZ_CHECK(second.is_ok() && second->positions == first->positions &&
                 second->strategy_used == first->strategy_used,
             "planning the same workload twice gave different plans: " + name);
  return 0;
}
