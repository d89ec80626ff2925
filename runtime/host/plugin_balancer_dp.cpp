// A DP partition through the plugin's table: written into guarded host
// buffers, then checked to list every sample exactly once.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "fulcrum/core/text.h"
#include "partition_summary.h"
#include "plugin_balancer.h"

namespace fulcrum::host::detail {

namespace {

// The answer goes into the host's buffers, each followed by a guard: a
// plugin that writes a little past the sizes the request states is named
// (a lot past faults, which no check after the call can prevent).
constexpr std::size_t kGuard = 16;
constexpr std::int64_t kGuardValue = std::numeric_limits<std::int64_t>::min() + 0x5afe;

}  // namespace

Result<DpPartition> PluginBalancer::partition_dp(std::string_view strategy,
                                                 const DpRequest& request) {
  const std::string name(strategy);
  if (request.num_ranks < 1) {
    return invalid_argument("DP request has num_ranks " + std::to_string(request.num_ranks) +
                            "; it must be at least 1");
  }
  if (request.lengths.empty()) {
    return invalid_argument("DP request has no samples; give at least one length");
  }
  const auto k = static_cast<std::size_t>(request.num_ranks);
  const auto n = static_cast<std::int64_t>(request.lengths.size());
  std::vector<std::int64_t> offsets(k + 1, 0);
  std::vector<std::int64_t> samples(static_cast<std::size_t>(n), -1);
  offsets.resize(offsets.size() + kGuard, kGuardValue);
  samples.resize(samples.size() + kGuard, kGuardValue);

  LentMemory lent;
  fulcrum_dp_request c_request{};
  c_request.struct_size = FULCRUM_DP_REQUEST_V1_0_SIZE;
  c_request.num_ranks = request.num_ranks;
  c_request.lengths = lent.lend("lengths", request.lengths);
  c_request.num_samples = n;
  c_request.cost_kind = static_cast<std::int32_t>(request.cost.kind);
  c_request.equal_count = request.equal_count ? 1 : 0;
  c_request.attention_a = request.cost.a;
  c_request.strategy = lent.lend("strategy", name);
  lent.watch("fulcrum_dp_request", c_request);

  fulcrum_dp_result result{};
  result.struct_size = FULCRUM_DP_RESULT_V1_0_SIZE;
  result.num_ranks = request.num_ranks;
  result.rank_offsets = offsets.data();
  result.samples = samples.data();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const fulcrum_status status = table_->partition_dp(instance_.get(), &c_request, &result);
    if (Status s = check_lent(lent, "strategy", name); !s) return s;
    for (const auto& [buffer, entries, field] :
         {std::tuple{&offsets, k + 1, "rank_offsets"},
          std::tuple{&samples, static_cast<std::size_t>(n), "samples"}}) {
      const auto past =
          std::find_if(buffer->begin() + static_cast<std::ptrdiff_t>(entries), buffer->end(),
                       [](std::int64_t v) { return v != kGuardValue; });
      if (past != buffer->end()) {
        return plugin_fault("plugin '" + name_ + "' strategy " + quote_text(name) +
                            " wrote past the end of " + field + " (" + std::to_string(entries) +
                            " entries, written at entry " + std::to_string(past - buffer->begin()) +
                            "), memory the host did not lend it; fix the plugin (" + path_ + ")");
      }
    }
    if (status != FULCRUM_OK) return plugin_failure(status, name);
  }
  if (result.num_ranks != request.num_ranks) {
    return with_fix(
        plugin_fault(invalid_partition(name) + "it has " + std::to_string(result.num_ranks) +
                     " ranks, the request asked for " + std::to_string(request.num_ranks)),
        "strategies");
  }
  return copy_partition(name, request, offsets, samples);
}

std::string PluginBalancer::invalid_partition(const std::string& strategy) const {
  return "plugin '" + name_ + "' strategy " + quote_text(strategy) +
         " returned an invalid partition: ";
}

Result<DpPartition> PluginBalancer::copy_partition(const std::string& strategy,
                                                   const DpRequest& request,
                                                   const std::vector<std::int64_t>& offsets,
                                                   const std::vector<std::int64_t>& samples) const {
  const std::string bad = invalid_partition(strategy);
  const auto invalid = [&](const std::string& why) {
    return with_fix(plugin_fault(bad + why), "strategies");
  };
  const auto k = static_cast<std::size_t>(request.num_ranks);
  const auto n = static_cast<std::int64_t>(request.lengths.size());
  if (offsets[0] != 0 || offsets[k] != n) {
    return invalid("rank offsets span [" + std::to_string(offsets[0]) + ", " +
                   std::to_string(offsets[k]) + "), expected [0, " + std::to_string(n) + ")");
  }
  // Every offset in order before any is used to index samples: a later
  // rank's offset past n must not let an earlier rank read beyond them.
  for (std::size_t r = 0; r < k; ++r) {
    if (offsets[r + 1] < offsets[r]) {
      return invalid("rank " + std::to_string(r + 1) + " starts at offset " +
                     std::to_string(offsets[r + 1]) + ", before rank " + std::to_string(r) +
                     "'s offset " + std::to_string(offsets[r]));
    }
  }
  const std::int64_t fewest = n / request.num_ranks;
  const std::int64_t most = (n + request.num_ranks - 1) / request.num_ranks;
  std::vector<std::int32_t> owner(static_cast<std::size_t>(n), -1);
  DpPartition partition;
  partition.strategy = strategy;
  partition.ranks.resize(k);
  for (std::size_t r = 0; r < k; ++r) {
    const std::int64_t begin = offsets[r];
    const std::int64_t end = offsets[r + 1];
    if (request.equal_count && (end - begin < fewest || end - begin > most)) {
      return invalid("rank " + std::to_string(r) + " has " + std::to_string(end - begin) +
                     " samples under equal_count, expected " + std::to_string(fewest) + " or " +
                     std::to_string(most));
    }
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t sample = samples[static_cast<std::size_t>(i)];
      if (sample < 0 || sample >= n) {
        return invalid("rank " + std::to_string(r) + " lists sample " + std::to_string(sample) +
                       ", outside [0, " + std::to_string(n) + ")");
      }
      std::int32_t& seen = owner[static_cast<std::size_t>(sample)];
      if (seen >= 0) {
        return invalid("sample " + std::to_string(sample) + " is listed twice (ranks " +
                       std::to_string(seen) + " and " + std::to_string(r) + ")");
      }
      seen = static_cast<std::int32_t>(r);
      partition.ranks[r].push_back(sample);
    }
  }
  // offsets[k] == n and no sample twice: every sample is listed exactly once.
  detail::summarize_partition(request, partition);
  return partition;
}

}  // namespace fulcrum::host::detail
