#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

namespace fulcrum::it {

namespace fs = std::filesystem;
using std::chrono::seconds;

std::ostream& operator<<(std::ostream& out, const RunResult& r) {
  return out << "exit " << r.exit_code << (r.timed_out ? " (timed out)" : "")
             << (r.stopped ? " (stopped)" : "") << " after " << r.wall_s << " s; output:\n"
             << r.output;
}

RunResult run(const std::vector<std::string>& argv, seconds deadline,
              const std::vector<std::string>& env, const std::function<bool()>& stop_when,
              int stop_signal) {
  RunResult result;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.output = "pipe failed";
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    for (const std::string& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that a kill right after fork reaches the group
  ::close(fds[1]);
  const auto end = start + deadline;
  bool terminated = false;
  auto kill_at = end + seconds(5);
  char buffer[4096];
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (!terminated && !result.stopped && stop_when && stop_when()) {
      result.stopped = true;
      ::kill(-pid, stop_signal);
    }
    if (!terminated && now >= end) {
      result.timed_out = true;
      terminated = true;
      ::kill(-pid, SIGTERM);
    }
    if (terminated && now >= kill_at) {
      ::kill(-pid, SIGKILL);
      kill_at = now + seconds(3600);
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      const ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
      if (n <= 0) break;
      result.output.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

TempDir::TempDir(const std::string& prefix) {
  std::string pattern = (fs::temp_directory_path() / (prefix + "XXXXXX")).string();
  path_ = ::mkdtemp(pattern.data()) ? fs::path(pattern) : fs::path();
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty() && std::getenv("FULCRUM_KEEP_TEST_DIRS") == nullptr) {
    fs::remove_all(path_, ec);
  }
}

std::string TempDir::write(const std::string& name, const std::string& text) const {
  std::ofstream(file(name)) << text;
  return file(name);
}

std::map<std::string, std::vector<double>> read_params(const std::string& path) {
  std::map<std::string, std::vector<double>> params;
  std::ifstream in(path, std::ios::binary);
  std::vector<std::pair<std::string, std::int64_t>> layout;
  std::string line;
  while (std::getline(in, line) && !line.empty()) {
    std::istringstream fields(line);
    std::string name;
    std::int64_t n = 0;
    fields >> name >> n;
    layout.emplace_back(name, n);
  }
  for (const auto& [name, n] : layout) {
    std::vector<double> values(static_cast<std::size_t>(n));
    in.read(reinterpret_cast<char*>(values.data()), n * static_cast<std::int64_t>(sizeof(double)));
    params[name] = std::move(values);
  }
  return params;
}

}  // namespace fulcrum::it
