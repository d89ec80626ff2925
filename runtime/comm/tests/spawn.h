// Launching a few worker processes from a test, with a deadline: every child
// is killed when it runs past it, so a hung rendezvous fails the test instead
// of hanging it. Header-only, no LibTorch (the parent test stays light; the
// children are separate executables, so no LibTorch thread pool is forked).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fulcrum::testing {

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] is the executable path
  std::vector<std::string> env;   // "NAME=value", added to the parent's environment
};

struct ChildResult {
  int exit_code = -1;  // -1 when killed or signalled
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

// A TCP port on 127.0.0.1 free right now (the OS picks it). Another process
// could take it before the store binds; collisions are rare enough for tests.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

inline std::vector<ChildResult> run_children(const std::vector<ChildSpec>& specs,
                                             std::chrono::milliseconds deadline) {
  std::vector<ChildResult> results(specs.size());
  std::vector<pid_t> pids(specs.size(), -1);
  std::vector<std::string> logs(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    char path[] = "/tmp/fulcrum_child_XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) continue;
    logs[i] = path;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      for (const std::string& kv : specs[i].env) ::putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> argv;
      for (const std::string& a : specs[i].argv) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fd);
    pids[i] = pid;
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  std::size_t running = 0;
  for (pid_t pid : pids) running += pid > 0 ? 1 : 0;
  while (running > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        pids[i] = -1;
        --running;
      }
    }
    if (running == 0) break;
    if (std::chrono::steady_clock::now() > end) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] <= 0) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        results[i].timed_out = true;
        pids[i] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::size_t i = 0; i < logs.size(); ++i) {
    if (logs[i].empty()) continue;
    std::ifstream in(logs[i]);
    std::stringstream text;
    text << in.rdbuf();
    results[i].output = text.str();
    ::unlink(logs[i].c_str());
  }
  return results;
}

// Children for ranks [0, world) (or only `only_rank` when >= 0) of a
// torchrun-style job on 127.0.0.1:port.
inline std::vector<ChildSpec> rank_children(const std::string& exe,
                                            const std::vector<std::string>& args, int world,
                                            int port, int only_rank = -1) {
  std::vector<ChildSpec> specs;
  for (int r = 0; r < world; ++r) {
    if (only_rank >= 0 && r != only_rank) continue;
    ChildSpec spec;
    spec.argv.push_back(exe);
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.env = {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
                "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
                // The children share two cores: one intra-op thread each.
                "OMP_NUM_THREADS=1"};
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace fulcrum::testing
