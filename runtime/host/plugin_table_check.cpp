// Whether a plugin's function table may be called through: its size and ABI
// version, its required functions, its names and strategy lists.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/c_api.h"
#include "plugin_loader_internal.h"

namespace fulcrum::host::detail {

// Whether the table has a scheduler: the 1.1 fields are read only when the
// table's struct_size says they are there.
bool has_schedule_hook(const fulcrum_plugin_v1* table) {
  return FULCRUM_HAS_FIELD(fulcrum_plugin_v1, release_schedule, table->struct_size) &&
         table->schedule != nullptr;
}

namespace {

// Names reach messages, JSON and metrics as they are: each must be what the
// ABI promises (checked_text).
Status check_name(const char* text, const std::string& field, const std::string& path) {
  Result<std::string> checked = checked_text(text, kMaxNameBytes);
  if (checked) return Status::ok();
  return internal_error("plugin " + path + ": its " + field + " " + checked.status().message() +
                        "; names are UTF-8 without control characters, at most " +
                        std::to_string(kMaxNameBytes) + " bytes: fix the table and rebuild");
}

// The table's strategy lists: counts in range, every name present and a
// name by the ABI's rules; the schedule list only where the table has one.
Status check_strategy_lists(const fulcrum_plugin_v1* table, const std::string& path) {
  struct NameList {
    const char* const* names;
    std::int32_t count;
    const char* field;
  };
  std::vector<NameList> lists = {{table->cp_strategies, table->num_cp_strategies, "cp_strategies"},
                                 {table->dp_strategies, table->num_dp_strategies, "dp_strategies"}};
  // The 1.1 fields exist only in a table whose struct_size covers them; an
  // ABI 1.0 table ends before them and what lies there is not the plugin's.
  if (has_schedule_hook(table)) {
    if (table->release_schedule == nullptr) {
      return internal_error("plugin " + path +
                            ": schedule is set but release_schedule is null, so no schedule it "
                            "returns could be handed back; set both (or neither) and rebuild");
    }
    if (table->num_schedule_strategies < 1) {
      return internal_error("plugin " + path + ": schedule is set but it lists " +
                            std::to_string(table->num_schedule_strategies) +
                            " schedule_strategies; list at least one, or leave schedule null");
    }
    lists.push_back(
        {table->schedule_strategies, table->num_schedule_strategies, "schedule_strategies"});
  }
  for (const auto& list : lists) {
    if (list.count < 0 || list.count > kMaxStrategies) {
      return internal_error("plugin " + path + " lists " + std::to_string(list.count) + " " +
                            list.field + "; expected 0 to " + std::to_string(kMaxStrategies) +
                            ", its table is corrupt");
    }
    if (list.count > 0 && list.names == nullptr) {
      return internal_error("plugin " + path + ": " + list.field + " is null but its count is " +
                            std::to_string(list.count) + "; fix the table and rebuild");
    }
    for (std::int32_t i = 0; i < list.count; ++i) {
      if (list.names[i] == nullptr) {
        return internal_error("plugin " + path + ": " + list.field + "[" + std::to_string(i) +
                              "] is null; fix the table and rebuild");
      }
      if (Status s = check_name(list.names[i],
                                std::string(list.field) + "[" + std::to_string(i) + "]", path);
          !s) {
        return s;
      }
    }
  }
  return Status::ok();
}

}  // namespace

// Everything the host relies on before calling through the table.
Status check_table(const fulcrum_plugin_v1* table, const std::string& path) {
  if (table == nullptr) {
    return internal_error("plugin " + path + ": " + FULCRUM_PLUGIN_ENTRY +
                          "() returned no function table (the plugin failed to initialise); "
                          "run it under its own tests or rebuild it");
  }
  if (table->struct_size < kTableHeaderSize) {
    return internal_error("plugin " + path + " has a function table of " +
                          std::to_string(table->struct_size) +
                          " bytes, too small to hold its ABI version; rebuild it against this "
                          "fulcrum");
  }
  if (table->abi_major != FULCRUM_ABI_MAJOR) {
    return internal_error("plugin " + path + " was built for ABI major " +
                          std::to_string(table->abi_major) + ", this host speaks " +
                          std::to_string(FULCRUM_ABI_MAJOR) + "; rebuild it against this fulcrum");
  }
  if (table->struct_size < kTableV1Size) {
    return internal_error("plugin " + path + " has a function table of struct_size " +
                          std::to_string(table->struct_size) + " bytes, smaller than the " +
                          std::to_string(kTableV1Size) +
                          " bytes of ABI v1.0; it was built against a broken c_api.h, rebuild it "
                          "against this fulcrum");
  }
  const std::pair<bool, const char*> required[] = {
      {table->create != nullptr, "create"},
      {table->destroy != nullptr, "destroy"},
      {table->plan_cp != nullptr, "plan_cp"},
      {table->release_plan != nullptr, "release_plan"},
      {table->partition_dp != nullptr, "partition_dp"},
      {table->last_error != nullptr, "last_error"},
  };
  for (const auto& [present, field] : required) {
    if (!present) {
      return internal_error("plugin " + path + ": required function '" + field +
                            "' is null in its table; the plugin is incomplete, implement it and "
                            "rebuild");
    }
  }
  if (table->name == nullptr || table->name[0] == '\0') {
    return internal_error("plugin " + path +
                          " has no name in its table; set fulcrum_plugin_v1::name and rebuild");
  }
  if (Status s = check_name(table->name, "name", path); !s) return s;
  return check_strategy_lists(table, path);
}

}  // namespace fulcrum::host::detail
