// fulcrum inside a C++ training framework, without LibTorch: open the
// balancer plugin through the installed host library, then ask it the three
// questions a trainer asks per global batch. docs/INTEGRATION.md walks
// through it.
//
//   embed [PLUGIN]   PLUGIN: a name searched in the install's plugin
//                    directory (default fulcrum_balancer) or a path
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fulcrum/core/cost_profile.h"
#include "fulcrum/host/open_balancer.h"
#include "fulcrum/host/selection.h"

namespace {

// One line on stderr. Exit 2 when the plugin named cannot be used (the
// caller's input), 1 when a call on a working plugin fails.
int fail(const char* what, const fulcrum::Status& status, int code = 1) {
  std::fprintf(stderr, "embed: %s: %s\n", what, status.message().c_str());
  return code;
}

// True when `seen` counted every index in [0, n) exactly once.
bool each_once(const std::vector<int>& seen) {
  for (int count : seen) {
    if (count != 1) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // 1. Open the plugin. A plugin that is absent gives way to the host's
  //    built-in balancer; one that is there but unusable is an error.
  const std::string name = argc > 1 ? argv[1] : "fulcrum_balancer";
  auto opened =
      fulcrum::host::open_balancer(name, {FULCRUM_EXAMPLE_PLUGIN_DIR},
                                   /*check_permissions=*/true, fulcrum::host::log_to_stderr);
  if (!opened) return fail("opening the balancer", opened.status(), 2);
  if (opened->is_builtin) {
    std::fprintf(stderr, "embed: no plugin '%s' (%s)\n", name.c_str(), opened->not_found.c_str());
    return 2;
  }
  std::shared_ptr<fulcrum::LoadBalancer> balancer = opened->balancer;
  std::printf("plugin: %s\n", balancer->name().c_str());

  // 2. CP: one packed row of four documents over 4 CP ranks. The selector
  //    asks for "auto", serves the fallback when the plugin declines, and
  //    returns a validated plan with each rank's work.
  fulcrum::host::CpSelector selector(
      balancer,
      {.preferred = "auto", .fallback = "contiguous", .log = fulcrum::host::log_to_stderr});
  fulcrum::CpWorkload row;
  row.doc_lengths = {3000, 1200, 9000, 500};
  row.tokens = 13700;
  row.cp_size = 4;
  auto plan = selector.plan(row);
  if (!plan) return fail("planning the row", plan.status());
  std::vector<int> seen(row.tokens, 0);
  for (std::int32_t r = 0; r < plan->cp_size; ++r) {
    for (const std::int64_t* p = plan->rank_begin(r); p != plan->rank_end(r); ++p) {
      if (*p != fulcrum::kPadPosition) ++seen[*p];  // rank r computes token *p
    }
    std::printf("cp rank %d: %lld tokens, %lld pairs, %lld tiles\n", r,
                static_cast<long long>(plan->work[r].tokens),
                static_cast<long long>(plan->work[r].pairs),
                static_cast<long long>(plan->work[r].tiles));
  }
  std::printf("cp: strategy %s, every token once: %s\n", plan->strategy_used.c_str(),
              each_once(seen) ? "yes" : "NO");

  // 3. DP: a global batch of samples over 4 DP ranks, by attention cost.
  fulcrum::DpRequest batch;
  batch.lengths = {8000, 512, 300, 4096, 1200, 6000, 90, 2048, 3000, 700};
  batch.num_ranks = 4;
  batch.cost.kind = fulcrum::CostKind::kAttention;
  auto part = balancer->partition_dp("auto", batch);
  if (!part) return fail("partitioning the batch", part.status());
  std::vector<int> taken(batch.lengths.size(), 0);
  for (std::size_t r = 0; r < part->ranks.size(); ++r) {
    for (std::int64_t sample : part->ranks[r]) ++taken[sample];
    std::printf("dp rank %zu: %zu samples, cost %.4g\n", r, part->ranks[r].size(), part->cost[r]);
  }
  // No partition's heaviest rank can cost less than lower_bound.
  std::printf("dp: strategy %s, imbalance %.4f, lower bound %.4g, every sample once: %s\n",
              part->strategy.c_str(), part->imbalance, part->lower_bound,
              each_once(taken) ? "yes" : "NO");

  // 4. Hybrid placement: the same documents over a pool of 8 ranks, at most
  //    4096 tokens per rank in a slot, priced with a bundled cost profile.
  fulcrum::ScheduleRequest request;
  request.doc_lengths = batch.lengths;
  request.world_size = 8;
  request.max_tokens_per_rank = 4096;
  auto profile = fulcrum::builtin_cost_profile("h100_7b");
  if (!profile) return fail("reading the cost profile", profile.status());
  request.profile = *profile;
  auto schedule = balancer->schedule("hybrid", request);
  if (!schedule) return fail("scheduling the batch", schedule.status());
  std::vector<std::vector<int>> covered(request.doc_lengths.size());
  for (std::size_t d = 0; d < covered.size(); ++d) covered[d].assign(request.doc_lengths[d], 0);
  // The host validated the schedule (ranks, pieces and plans in range).
  for (const fulcrum::ScheduleSlot& slot : schedule->slots) {
    std::string ranks;
    for (std::int32_t r : slot.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    std::int64_t tokens = 0;
    for (const fulcrum::DocPiece& piece : slot.pieces) {
      for (std::int64_t t = piece.offset; t < piece.offset + piece.length; ++t) {
        ++covered[piece.doc][t];
      }
      tokens += piece.length;
    }
    std::printf("slot: wave %d, ranks [%s], %zu documents, %lld tokens\n", slot.wave, ranks.c_str(),
                slot.pieces.size(), static_cast<long long>(tokens));
  }
  bool all = true;
  for (const auto& doc : covered) all = all && each_once(doc);
  std::printf("schedule: strategy %s, %zu slots, every token once: %s\n",
              schedule->strategy_used.c_str(), schedule->slots.size(), all ? "yes" : "NO");
  return each_once(seen) && each_once(taken) && all ? 0 : 1;
}
