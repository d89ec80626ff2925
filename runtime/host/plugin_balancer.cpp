// The loaded plugin as a LoadBalancer: its instance, its log, and how a
// failed or refused call is reported. The calls themselves are in
// plugin_balancer_cp.cpp, plugin_balancer_dp.cpp and
// plugin_balancer_schedule.cpp.
#include "plugin_balancer.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "builtin_schedule.h"
#include "fulcrum/core/text.h"

namespace fulcrum::host::detail {
namespace {

LogLevel to_log_level(std::int32_t level) {
  switch (level) {
    case FULCRUM_LOG_DEBUG:
      return LogLevel::kDebug;
    case FULCRUM_LOG_INFO:
      return LogLevel::kInfo;
    case FULCRUM_LOG_ERROR:
      return LogLevel::kError;
    default:
      return LogLevel::kWarning;
  }
}

}  // namespace

PluginBalancer::PluginBalancer(LibraryHandle library, const fulcrum_plugin_v1* table,
                               std::string path, LogFn log)
    : library_(std::move(library)),
      table_(table),
      path_(std::move(path)),
      name_(table->name),
      log_(std::move(log)) {
  for (std::int32_t i = 0; i < table_->num_cp_strategies; ++i) {
    cp_names_.emplace_back(table_->cp_strategies[i]);
  }
  for (std::int32_t i = 0; i < table_->num_dp_strategies; ++i) {
    dp_names_.emplace_back(table_->dp_strategies[i]);
  }
  if (has_schedule_hook(table_)) {
    for (std::int32_t i = 0; i < table_->num_schedule_strategies; ++i) {
      schedule_names_.emplace_back(table_->schedule_strategies[i]);
    }
  }
  services_.struct_size = FULCRUM_HOST_SERVICES_V1_0_SIZE;
  services_.user_data = this;
  services_.log = &PluginBalancer::forward_log;
}

Status PluginBalancer::create_instance() {
  void* raw = nullptr;
  const fulcrum_status status = table_->create(&services_, &raw);
  if (status != FULCRUM_OK || raw == nullptr) {
    if (status == FULCRUM_OK) {
      return internal_error("plugin '" + name_ + "' (" + path_ +
                            ") returned no instance from create(); fix the plugin");
    }
    // A failed create() owns nothing the host could safely destroy.
    return internal_error("plugin '" + name_ + "' (" + path_ +
                          ") failed to create an instance (status " + std::to_string(status) +
                          "); see its log above, or run its own tests");
  }
  instance_ = Instance(raw, InstanceDeleter{table_->destroy});
  return Status::ok();
}

std::vector<std::string> PluginBalancer::schedule_strategies() const {
  return schedule_names_.empty() ? std::vector<std::string>{kFixedScheduler} : schedule_names_;
}

void PluginBalancer::forward_log(void* user_data, std::int32_t level,
                                 const char* message) noexcept {
  const auto* self = static_cast<const PluginBalancer*>(user_data);
  if (self == nullptr || message == nullptr || !self->log_) return;
  try {
    self->log_(to_log_level(level),
               "plugin '" + self->name_ + "': " + printable_text(message, kMaxTextBytes));
  } catch (...) {
    // A throwing log sink must not unwind through the plugin's C frames.
  }
}

// A refusal of the plugin's answer, ending with what to do.
Status PluginBalancer::with_fix(const Status& status, const char* others) const {
  return Status(status.code(), status.message() + "; fix the plugin (" + path_ +
                                   "), or use another of its " + others);
}

// Refuses the call when the plugin wrote into anything it was lent.
Status PluginBalancer::check_lent(const LentMemory& lent, const char* kind,
                                  const std::string& strategy) const {
  const std::string changed = lent.changed();
  if (changed.empty()) return Status::ok();
  return plugin_fault("plugin '" + name_ + "' " + kind + " " + quote_text(strategy) +
                      " wrote into " + changed +
                      ", which the host lent it read-only; the host refuses its answer and "
                      "kept its own data; fix the plugin (" +
                      path_ + ")");
}

// Text a plugin answered with (a strategy name, a reason), refused unless
// it is what the ABI promises.
Result<std::string> PluginBalancer::answer_text(const char* text, std::size_t max_bytes,
                                                const std::string& bad,
                                                const std::string& field) const {
  Result<std::string> checked = checked_text(text, max_bytes);
  if (!checked) return plugin_fault(bad + field + " " + checked.status().message());
  return checked;
}

// Call with mutex_ held: last_error describes the instance's latest call.
Status PluginBalancer::plugin_failure(fulcrum_status status, const std::string& strategy) const {
  const char* text = table_->last_error(instance_.get());
  // Shown, not refused: escaped to one line of UTF-8 whatever it holds.
  std::string said = "failed without a message";
  if (text != nullptr && text[0] != '\0') said = printable_text(text, kMaxTextBytes);
  // kUnsupported is an answer, not a failure: its text is the reason a
  // plan records, the plugin's words alone (as the Python package shows it).
  if (status == FULCRUM_UNSUPPORTED && text != nullptr && text[0] != '\0') {
    return unsupported(std::move(said));
  }
  std::string message = "plugin '" + name_ + "' strategy " + quote_text(strategy) + ": " + said;
  switch (status) {
    case FULCRUM_INVALID_ARGUMENT:
      return invalid_argument(std::move(message));
    case FULCRUM_UNSUPPORTED:
      return unsupported(std::move(message));
    case FULCRUM_NOT_FOUND:
      return not_found(std::move(message));
    case FULCRUM_INTERNAL:
      return plugin_fault(message + "; see the plugin's own log or tests (" + path_ + ")");
    default:
      return plugin_fault(message + " (unknown status " + std::to_string(static_cast<int>(status)) +
                          "); fix the plugin (" + path_ + ")");
  }
}

}  // namespace fulcrum::host::detail
