#include "fault_driver.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace fulcrum::it {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

std::string new_marker() {
  static std::atomic<int> counter{0};
  return "fault-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

std::ostream& operator<<(std::ostream& o, const ChildResult& r) {
  o << "exit " << r.exit_code << (r.timed_out ? " (TIMED OUT)" : "") << " after " << r.wall_s
    << " s\n--- stdout\n"
    << r.out << "--- stderr\n"
    << r.err;
  return o;
}

namespace {

// Live processes whose environment holds `marker`: what a run left behind.
std::vector<pid_t> processes_with(const std::string& marker) {
  const std::string needle = std::string(kMarkerVariable) + "=" + marker;
  std::vector<pid_t> found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream environ_file(entry.path() / "environ", std::ios::binary);
    std::string environ_text((std::istreambuf_iterator<char>(environ_file)),
                             std::istreambuf_iterator<char>());
    std::size_t at = 0;
    while ((at = environ_text.find(needle, at)) != std::string::npos) {
      const bool starts = at == 0 || environ_text[at - 1] == '\0';
      const std::size_t end = at + needle.size();
      if (starts && (end == environ_text.size() || environ_text[end] == '\0')) {
        found.push_back(static_cast<pid_t>(std::stol(name)));
        break;
      }
      at = end;
    }
  }
  return found;
}

struct Stream {
  int fd = -1;
  std::string* sink = nullptr;
  std::string partial;
  std::size_t child = 0;  // whose stream it is
};

// Forks child `c` into process group `group` (0: a new one, led by it), its
// stdout and stderr on pipes added to `streams`. Returns its pid, or -1.
pid_t start_child(const Child& c, pid_t group, std::size_t index, ChildResult& result,
                  std::vector<Stream>& streams) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    result.err = "pipe failed";
    return -1;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, group);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, STDIN_FILENO);
    for (const std::string& kv : c.env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv;
    for (const std::string& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, group);
  ::close(out[1]);
  ::close(err[1]);
  streams.push_back({out[0], &result.out, {}, index});
  streams.push_back({err[0], &result.err, {}, index});
  return pid;
}

// Reads what stream `s` has; at end of file closes it and notes the time.
void read_stream(Stream& s, double at, ChildResult& r) {
  char buffer[8192];
  const ssize_t n = ::read(s.fd, buffer, sizeof buffer);
  if (n <= 0) {
    if (!s.partial.empty()) r.lines.push_back({at, s.partial});
    ::close(s.fd);
    s.fd = -1;
    // Both of its streams closed: the child (and whatever inherited
    // them) is gone; close enough to its exit for timings.
    r.wall_s = at;
    return;
  }
  s.sink->append(buffer, static_cast<std::size_t>(n));
  s.partial.append(buffer, static_cast<std::size_t>(n));
  for (std::size_t nl; (nl = s.partial.find('\n')) != std::string::npos;) {
    r.lines.push_back({at, s.partial.substr(0, nl)});
    s.partial.erase(0, nl + 1);
  }
}

// Until every stream closed; past `deadline` SIGTERM to the group, 3 s later
// SIGKILL.
void collect(std::vector<Stream> streams, std::vector<ChildResult>& results, pid_t group,
             Clock::time_point start, seconds deadline) {
  bool terminated = false;
  auto kill_at = Clock::now() + deadline + seconds(3);
  while (!streams.empty()) {
    const auto now = Clock::now();
    if (!terminated && now >= start + deadline) {
      terminated = true;
      for (ChildResult& r : results) r.timed_out = true;
      if (group > 0) ::kill(-group, SIGTERM);
    }
    if (terminated && now >= kill_at) {
      if (group > 0) ::kill(-group, SIGKILL);
      kill_at = now + seconds(3600);
    }
    std::vector<pollfd> fds;
    for (const Stream& s : streams) fds.push_back({s.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (std::size_t k = 0; k < streams.size(); ++k) {
      if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const double at = std::chrono::duration<double>(Clock::now() - start).count();
      read_stream(streams[k], at, results[streams[k].child]);
    }
    std::erase_if(streams, [](const Stream& s) { return s.fd < 0; });
  }
}

}  // namespace

std::vector<ChildResult> run_all(const std::vector<Child>& children, seconds deadline) {
  std::vector<ChildResult> results(children.size());
  std::vector<pid_t> pids(children.size(), -1);
  std::vector<Stream> streams;
  const auto start = Clock::now();
  pid_t group = 0;
  for (std::size_t i = 0; i < children.size(); ++i) {
    pids[i] = start_child(children[i], group, i, results[i], streams);
    if (group == 0 && pids[i] > 0) group = pids[i];
  }
  collect(std::move(streams), results, group, start, deadline);
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return results;
}

ChildResult run_one(const std::vector<std::string>& argv, seconds deadline,
                    const std::vector<std::string>& env) {
  return run_all({Child{argv, env}}, deadline).front();
}

void expect_no_orphans(const std::string& marker) {
  std::vector<pid_t> left;
  const auto until = Clock::now() + seconds(3);
  do {
    left = processes_with(marker);
    if (left.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (Clock::now() < until);
  std::string pids;
  for (pid_t p : left) {
    pids += ' ';
    pids += std::to_string(p);
    ::kill(p, SIGKILL);
  }
  ADD_FAILURE() << "processes of run " << marker << " outlived it:" << pids;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

std::vector<std::string> FaultJob::env(std::vector<std::string> extra) const {
  extra.push_back(std::string(kMarkerVariable) + "=" + marker);
  return extra;
}

ChildResult FaultJob::train(const std::vector<std::string>& extra_env,
                            const std::vector<std::string>& sets) const {
  std::vector<std::string> argv = {FULCRUM_BIN, "train", "--config", config};
  for (const std::string& s : sets) argv.insert(argv.end(), {"--set", s});
  return run_one(argv, seconds(60), env(extra_env));
}

std::vector<ChildResult> FaultJob::ranks(const std::vector<std::string>& extra_env) const {
  const int port = free_port();
  std::vector<Child> children;
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> e = env(extra_env);
    e.insert(e.end(), {"RANK=" + std::to_string(r), "WORLD_SIZE=4",
                       "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=4",
                       "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)});
    children.push_back({{FULCRUM_WORKER, "--config", config}, e});
  }
  return run_all(children, seconds(60));
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace fulcrum::it
