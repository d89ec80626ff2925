#include "launch/worker_process.h"

#include <signal.h>

#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "host/input_file.h"

namespace fulcrum::launch {

bool is_stopped(pid_t pid) {
  const std::optional<std::string> stat =
      host::read_transient_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  return stat && process_state_is_stopped(*stat);
}

void signal_worker(const WorkerProcess& worker, int sig) {
  if (worker.reaped || worker.pid <= 0) return;
  if (::kill(-worker.pid, sig) != 0) ::kill(worker.pid, sig);
}

bool process_state_is_stopped(std::string_view stat) {
  // The command name is parenthesised and may itself hold ')' or spaces: the
  // state is the character after the last ") ".
  const std::size_t close = stat.rfind(')');
  if (close == std::string_view::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state == 'T' || state == 't';
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  if (abbrev == nullptr) return "signal " + std::to_string(signal);
  return std::string("SIG") + abbrev;
}

}  // namespace fulcrum::launch
