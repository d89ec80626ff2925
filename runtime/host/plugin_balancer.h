// Private to fulcrum::host: a loaded plugin presented as a LoadBalancer.
// Every call lends the plugin copies of what it borrows (lent_memory.h),
// takes the instance's lock, copies the answer out of the plugin's buffers
// and validates it before the host uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/c_api.h"
#include "fulcrum/host/log.h"
#include "fulcrum/host/plugin_loader.h"
#include "lent_memory.h"
#include "plugin_loader_internal.h"

namespace fulcrum::host::detail {

// Destroys a plugin instance through its table.
struct InstanceDeleter {
  void (*destroy)(void*) = nullptr;
  void operator()(void* instance) const noexcept {
    if (instance != nullptr && destroy != nullptr) destroy(instance);
  }
};
using Instance = std::unique_ptr<void, InstanceDeleter>;

class PluginBalancer final : public LoadBalancer {
 public:
  PluginBalancer(LibraryHandle library, const fulcrum_plugin_v1* table, std::string path,
                 LogFn log);

  // The instance goes before the library handle can: destroy() is code in
  // the library.
  ~PluginBalancer() override { instance_.reset(); }

  PluginBalancer(const PluginBalancer&) = delete;
  PluginBalancer& operator=(const PluginBalancer&) = delete;

  Status create_instance();

  std::string name() const override { return name_; }
  std::vector<std::string> cp_strategies() const override { return cp_names_; }
  std::vector<std::string> dp_strategies() const override { return dp_names_; }
  std::vector<std::string> schedule_strategies() const override;

  // plugin_balancer_cp.cpp
  Result<ShardPlan> plan_cp(std::string_view strategy, const CpWorkload& workload) override;
  // plugin_balancer_dp.cpp
  Result<DpPartition> partition_dp(std::string_view strategy, const DpRequest& request) override;
  // plugin_balancer_schedule.cpp
  Result<Schedule> schedule(std::string_view strategy, const ScheduleRequest& request) override;

 private:
  static void forward_log(void* user_data, std::int32_t level, const char* message) noexcept;

  // A refusal of the plugin's answer, ending with what to do.
  Status with_fix(const Status& status, const char* others) const;

  // Refuses the call when the plugin wrote into anything it was lent.
  Status check_lent(const LentMemory& lent, const char* kind, const std::string& strategy) const;

  // Text a plugin answered with (a strategy name, a reason), refused unless
  // it is what the ABI promises.
  Result<std::string> answer_text(const char* text, std::size_t max_bytes, const std::string& bad,
                                  const std::string& field) const;

  // Call with mutex_ held: last_error describes the instance's latest call.
  Status plugin_failure(fulcrum_status status, const std::string& strategy) const;

  // Copies what the plugin owns into host memory; checks only what the copy
  // itself needs (validate_plan judges the rest).
  Status copy_plan(const fulcrum_cp_plan& answer, const CpWorkload& workload,
                   const std::string& strategy, ShardPlan& plan) const;

  // The start of every refusal of a partition from `strategy`.
  std::string invalid_partition(const std::string& strategy) const;

  // The partition in the host's buffers (the plugin's answer) checked to
  // list every sample exactly once, in order, and copied out.
  Result<DpPartition> copy_partition(const std::string& strategy, const DpRequest& request,
                                     const std::vector<std::int64_t>& offsets,
                                     const std::vector<std::int64_t>& samples) const;

  // The host's fixed schedule from the plugin's own CP plans and DP
  // partitions, for a plugin without a scheduler.
  Result<Schedule> host_fixed_schedule(const std::string& requested,
                                       const ScheduleRequest& request);

  // Copies what the plugin owns into host memory, checking only what the
  // copy itself needs; validate_schedule judges the rest.
  Status copy_schedule(const fulcrum_schedule& answer, const ScheduleRequest& request,
                       const std::string& strategy, bool compact, Schedule& schedule) const;

  // The slots' member weights (ABI 1.5) into schedule's slots, their
  // offsets held to the slots' sizes and each slot's weights validated.
  Status copy_weights(const fulcrum_schedule& answer, bool compact, const std::string& bad,
                      Schedule& schedule) const;

  // Whether the plugin's answer is compact (ABI 1.4), refused when the
  // flags break the contract.
  Result<bool> answer_is_compact(const fulcrum_schedule& answer, const ScheduleRequest& request,
                                 const std::string& strategy) const;

  // What a copied schedule may hold, from its request: bounds on every read.
  struct ScheduleBounds {
    std::int64_t pieces;        // the batch's pieces
    std::int64_t world;         // ranks in the job
    std::int64_t batch_tokens;  // tokens in the batch
    std::int64_t budget;        // max_tokens_per_rank
    bool compact;               // plans by rule: no positions to copy
  };
  Status copy_slot(const fulcrum_schedule& answer, std::size_t s, const ScheduleBounds& bounds,
                   const std::string& strategy, const std::string& bad, std::int64_t& position_at,
                   ScheduleSlot& slot) const;

  // Declaration order is destruction order in reverse: instance_ goes first,
  // library_ last.
  LibraryHandle library_;
  const fulcrum_plugin_v1* table_;
  std::string path_;
  std::string name_;
  std::vector<std::string> cp_names_;
  std::vector<std::string> dp_names_;
  std::vector<std::string> schedule_names_;  // empty: the plugin has no scheduler
  LogFn log_;
  fulcrum_host_services services_{};
  std::mutex mutex_;  // one thread at a time per instance (c_api.h)
  Instance instance_;
};

}  // namespace fulcrum::host::detail
