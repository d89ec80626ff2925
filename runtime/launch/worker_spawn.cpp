#include "launch/worker_spawn.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "comm/progress.h"
#include "launch/signal_forwarding.h"
#include "launch/worker_env.h"

extern char** environ;

namespace fulcrum::launch {
namespace {

// The variables the launcher owns; inherited values are replaced, so a
// launcher started inside another job does not leak that job's identity.
constexpr std::string_view kOwnedVariables[] = {"RANK",
                                                "WORLD_SIZE",
                                                "LOCAL_RANK",
                                                "LOCAL_WORLD_SIZE",
                                                "MASTER_ADDR",
                                                "MASTER_PORT",
                                                comm::kStallReportDirVariable,
                                                comm::kRendezvousDirVariable,
                                                kCompletionNoteVariable};

}  // namespace

Result<std::string> resolve_program(const std::string& program) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    if (!executable(program)) {
      return not_found("worker program '" + program +
                       "' is not an executable file; check the path and its x permission");
    }
    return program;
  }
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path != nullptr ? env_path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  for (;;) {
    std::size_t end = path.find(':', begin);
    const std::string dir =
        path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    // An empty entry is the current directory.
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (executable(candidate)) return candidate;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return not_found("worker program '" + program + "' is not in PATH (" + path +
                   "); give its full path");
}

std::vector<std::string> worker_environment(const LaunchOptions& options, int rank, int port,
                                            const JobDir& job_dir) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    if (std::find(std::begin(kOwnedVariables), std::end(kOwnedVariables), name) !=
        std::end(kOwnedVariables)) {
      continue;
    }
    env.emplace_back(entry);
  }
  // A single host: local and global identities coincide.
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(options.nproc));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(options.nproc));
  env.push_back("MASTER_ADDR=" + options.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back(std::string(comm::kStallReportDirVariable) + "=" + job_dir.path());
  env.push_back(std::string(comm::kRendezvousDirVariable) + "=" + job_dir.rendezvous_path());
  if (options.require_completion_note) {
    env.push_back(std::string(kCompletionNoteVariable) + "=" + job_dir.completion_note_path(rank));
  }
  for (const std::string& extra : options.extra_env) env.push_back(extra);
  return env;
}

std::vector<char*> as_argv(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child between fork and exec: async-signal-safe calls only. Reports
// a failure to the parent as an errno through `report_fd` (close-on-exec, so a
// successful exec reports nothing and the parent reads end of file).
[[noreturn]] void exec_worker(pid_t launcher, const char* path, char* const* argv,
                              char* const* envp, int stdin_fd, int out_fd, int err_fd,
                              int report_fd) {
  auto fail = [report_fd](int err) {
    [[maybe_unused]] ssize_t n = ::write(report_fd, &err, sizeof err);
    ::_exit(127);
  };
  if (::setpgid(0, 0) != 0) fail(errno);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  // The launcher may have died before prctl took effect; then nobody would
  // ever kill us.
  if (::getppid() != launcher) ::_exit(127);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : kForwardedSignals) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(stdin_fd, STDIN_FILENO) < 0 || ::dup2(out_fd, STDOUT_FILENO) < 0 ||
      ::dup2(err_fd, STDERR_FILENO) < 0) {
    fail(errno);
  }
  ::execve(path, argv, envp);
  fail(errno);
  ::_exit(127);  // not reached
}

}  // namespace fulcrum::launch
