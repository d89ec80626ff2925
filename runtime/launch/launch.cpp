// The launcher: fork + exec of N workers, a poll loop relaying their output,
// and the teardown that keeps one failed rank from leaving the others hanging.
// The pieces it uses: descriptors.h (pipes, pidfds), signal_forwarding.h
// (SIGINT/SIGTERM), job_dir.h (the private directory and the reports in it),
// worker_spawn.h (a worker's program, environment and exec),
// worker_process.h (a started worker, its /proc state and signals),
// line_relay.h (the workers' output) and last_line.h (how the job ended).
#include "launch/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/descriptors.h"
#include "launch/job_dir.h"
#include "launch/last_line.h"
#include "launch/line_relay.h"
#include "launch/signal_forwarding.h"
#include "launch/unique_fd.h"
#include "launch/worker_process.h"
#include "launch/worker_spawn.h"

namespace fulcrum::launch {
namespace {

using Clock = std::chrono::steady_clock;

// How long the launcher waits, after a rank failed because it lost a peer, for
// the rank that caused it to fail on its own and be named instead.
constexpr auto kLostPeerSettle = std::chrono::milliseconds(1500);

Status validate(const LaunchOptions& o) {
  if (o.nproc < 1 || o.nproc > 4096) {
    return invalid_argument("--nproc is " + std::to_string(o.nproc) +
                            "; give a number of workers from 1 to 4096");
  }
  if (o.program.empty()) return invalid_argument("no worker program given; name the executable");
  if (o.master_addr.empty())
    return invalid_argument("MASTER_ADDR is empty; give a host or address");
  if (o.master_port < 0 || o.master_port > 65535) {
    return invalid_argument("master port " + std::to_string(o.master_port) +
                            " is out of range; give 1..65535, or 0 to pick a free one");
  }
  if (!std::isfinite(o.interrupt_grace_s) || o.interrupt_grace_s < 0) {
    return invalid_argument("interrupt grace period " + std::to_string(o.interrupt_grace_s) +
                            " s is not a finite number >= 0");
  }
  if (!std::isfinite(o.failure_grace_s) || o.failure_grace_s < 0) {
    return invalid_argument("failure grace period " + std::to_string(o.failure_grace_s) +
                            " s is not a finite number >= 0");
  }
  for (const std::string& e : o.extra_env) {
    if (e.find('=') == std::string::npos || e.front() == '=') {
      return invalid_argument("extra environment entry '" + e + "' is not NAME=value");
    }
  }
  return Status::ok();
}

class Job {
 public:
  Job(const LaunchOptions& options, SignalScope& signals)
      : options_(options), signals_(signals), relay_(options) {}
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  Status spawn_all(int port);
  LaunchReport run(int port);

 private:
  std::size_t live() const {
    return static_cast<std::size_t>(std::count_if(
        workers_.begin(), workers_.end(), [](const WorkerProcess& w) { return !w.reaped; }));
  }
  Status spawn(int rank, const std::string& path, char* const* argv, int stdin_fd, int port);
  bool reap(WorkerProcess& w);
  void start_teardown(int sig, double grace_s);
  void kill_all();
  void wait_for_events();
  void take_signals();
  void take_exits();

  const LaunchOptions& options_;
  SignalScope& signals_;
  LineRelay relay_;
  JobDir dir_;
  std::vector<WorkerProcess> workers_;

  // The run's state, for run() and the steps of its loop.
  LaunchReport report_;
  std::optional<Clock::time_point> kill_at_;  // set once teardown starts
  bool killed_ = false;
  // Ranks found stopped when the first failure arrived: a stopped rank
  // answers nothing, so its peers time out; it, not whichever of them the
  // stall reports point at, is the cause.
  std::vector<int> stopped_;
  // The first rank that failed only because it lost a peer, and until when
  // another rank may still turn out to be the cause.
  std::optional<int> lost_peer_rank_;
  std::optional<Clock::time_point> settle_at_;
};

// Stops and reaps whatever was started: the launcher must not return while
// a worker it created is still running.
Job::~Job() {
  for (WorkerProcess& w : workers_) {
    if (w.reaped) continue;
    signal_worker(w, SIGKILL);
    int st = 0;
    while (::waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {
    }
    w.reaped = true;
  }
}

Status Job::spawn_all(int port) {
  if (!dir_.error().empty()) return invalid_argument(dir_.error());
  auto path = resolve_program(options_.program);
  if (!path) return path.status();
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) return internal_error("cannot open /dev/null: " + errno_text(errno));
  auto stdin_fd = above_stdio(devnull, "/dev/null");
  if (!stdin_fd) return stdin_fd.status();

  std::vector<std::string> argv_strings;
  argv_strings.push_back(options_.program);
  argv_strings.insert(argv_strings.end(), options_.args.begin(), options_.args.end());
  std::vector<char*> argv = as_argv(argv_strings);

  workers_.reserve(static_cast<std::size_t>(options_.nproc));
  for (int rank = 0; rank < options_.nproc; ++rank) {
    if (Status s = spawn(rank, path.value(), argv.data(), stdin_fd->get(), port); !s) return s;
  }
  return Status::ok();
}

void Job::start_teardown(int sig, double grace_s) {
  for (WorkerProcess& w : workers_) {
    if (!w.reaped && is_stopped(w.pid)) {
      stopped_.push_back(w.rank);
      // A stopped process keeps SIGTERM pending until it is continued:
      // waiting out the grace for it would only delay the end.
      signal_worker(w, SIGKILL);
    }
  }
  for (WorkerProcess& w : workers_) signal_worker(w, sig);
  kill_at_ = Clock::now() +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
}

void Job::kill_all() {
  for (WorkerProcess& w : workers_) signal_worker(w, SIGKILL);
  killed_ = true;
}

// Until a signal, output, an exit or a deadline (the lost-peer settling,
// the end of the grace).
void Job::wait_for_events() {
  std::vector<pollfd> fds;
  fds.push_back({signals_.read_fd(), POLLIN, 0});
  bool have_all_pidfds = true;
  for (WorkerProcess& w : workers_) {
    if (w.out.fd.valid()) fds.push_back({w.out.fd.get(), POLLIN, 0});
    if (w.err.fd.valid()) fds.push_back({w.err.fd.get(), POLLIN, 0});
    if (!w.reaped) {
      if (w.pidfd.valid()) {
        fds.push_back({w.pidfd.get(), POLLIN, 0});
      } else {
        have_all_pidfds = false;
      }
    }
  }
  // Without pidfds, exits are noticed by polling waitpid every 50 ms.
  int timeout_ms = have_all_pidfds ? -1 : 50;
  auto wake_by = [&](Clock::time_point when) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when - Clock::now());
    int left_ms = static_cast<int>(std::max<std::int64_t>(left.count() + 1, 0));
    timeout_ms = timeout_ms < 0 ? left_ms : std::min(timeout_ms, left_ms);
  };
  if (settle_at_ && !report_.failed_rank) wake_by(*settle_at_);
  if (kill_at_ && !killed_) wake_by(*kill_at_);
  if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
    // poll failing is a bug or a resource exhaustion; stop the job rather
    // than spin.
    if (!kill_at_) start_teardown(SIGKILL, options_.failure_grace_s);
  }
}

// The first SIGINT/SIGTERM is forwarded with the interrupt grace; a second
// one means "now".
void Job::take_signals() {
  for (int sig : signals_.take()) {
    if (report_.interrupted_by == 0 && !report_.failed_rank) {
      report_.interrupted_by = sig;
      if (!options_.interrupt_note.empty()) {
        const std::string line = options_.interrupt_note + "\n";
        [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
      }
      start_teardown(sig, std::max(options_.failure_grace_s, options_.interrupt_grace_s));
    } else if (!killed_) {
      kill_all();
    }
  }
}

// Reaps the workers that exited; the first to fail on its own starts the
// teardown.
void Job::take_exits() {
  for (WorkerProcess& w : workers_) {
    if (w.reaped || !reap(w)) continue;
    if (w.exit.ok() || report_.failed_rank || report_.interrupted_by != 0) continue;
    if (dir_.noted_lost_peer(w.rank)) {
      // A consequence: the peer it lost is failing on its own and may
      // still be on its way out (closing its connections before it
      // exits). Give it a moment to be the one named.
      if (!lost_peer_rank_) {
        lost_peer_rank_ = w.rank;
        settle_at_ = Clock::now() + kLostPeerSettle;
      }
      continue;
    }
    report_.failed_rank = w.rank;
    start_teardown(SIGTERM, options_.failure_grace_s);
  }
  if (lost_peer_rank_ && !report_.failed_rank && report_.interrupted_by == 0 &&
      (Clock::now() >= *settle_at_ || live() == 0)) {
    report_.failed_rank = lost_peer_rank_;
    start_teardown(SIGTERM, options_.failure_grace_s);
  }
}

LaunchReport Job::run(int port) {
  report_ = LaunchReport();
  report_.master_port = port;
  while (live() > 0) {
    wait_for_events();
    take_signals();
    for (WorkerProcess& w : workers_) {
      relay_.pump(w.rank, OutputStream::kStdout, w.out);
      relay_.pump(w.rank, OutputStream::kStderr, w.err);
    }
    take_exits();
    if (kill_at_ && !killed_ && Clock::now() >= *kill_at_) kill_all();
  }
  for (WorkerProcess& w : workers_) report_.workers.push_back(w.exit);
  describe_ending(report_, stopped_, relay_, dir_);
  return report_;
}

Status Job::spawn(int rank, const std::string& path, char* const* argv, int stdin_fd, int port) {
  auto out = make_pipe("stdout");
  if (!out) return out.status();
  auto err = make_pipe("stderr");
  if (!err) return err.status();
  auto report = make_pipe("exec report");
  if (!report) return report.status();
  std::vector<std::string> env_strings = worker_environment(options_, rank, port, dir_);
  std::vector<char*> envp = as_argv(env_strings);

  const pid_t launcher = ::getpid();
  pid_t pid;
  {
    BlockForwardedSignals blocked;
    pid = ::fork();
    if (pid == 0) {
      exec_worker(launcher, path.c_str(), argv, envp.data(), stdin_fd, out->write.get(),
                  err->write.get(), report->write.get());
    }
  }
  if (pid < 0) {
    return internal_error("cannot fork worker " + std::to_string(rank) + ": " + errno_text(errno) +
                          "; check the process limit (ulimit -u)");
  }
  // Also set here: whichever of parent and child runs first, the group
  // exists before the parent might signal it.
  ::setpgid(pid, pid);

  WorkerProcess w;
  w.rank = rank;
  w.pid = pid;
  w.exit.rank = rank;
  w.exit.pid = pid;
  w.pidfd.reset(open_pidfd(pid));
  out->write.reset();
  err->write.reset();
  report->write.reset();
  set_nonblocking(out->read.get());
  set_nonblocking(err->read.get());
  w.out.fd = std::move(out->read);
  w.err.fd = std::move(err->read);
  workers_.push_back(std::move(w));
  if (options_.on_spawn) options_.on_spawn(rank, pid);

  // Blocks until exec succeeds (end of file) or fails (an errno arrives).
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report->read.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    return invalid_argument("cannot start worker " + std::to_string(rank) + " ('" + path +
                            "'): " + errno_text(child_errno));
  }
  return Status::ok();
}

// Reaps `w` if it exited. Before reaping, while its pid still pins the
// process group id, kills whatever it left running in its group: those
// processes would hold our pipes open and outlive the launcher.
bool Job::reap(WorkerProcess& w) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid == 0) {
    return false;
  }
  ::kill(-w.pid, SIGKILL);
  int st = 0;
  pid_t got;
  do {
    got = ::waitpid(w.pid, &st, 0);
  } while (got < 0 && errno == EINTR);
  w.reaped = true;
  w.pidfd.reset();
  if (WIFSIGNALED(st)) {
    w.exit.signal = WTERMSIG(st);
  } else if (WIFEXITED(st)) {
    w.exit.exit_status = WEXITSTATUS(st);
    w.exit.left_early = w.exit.exit_status == 0 && options_.require_completion_note &&
                        !dir_.has(JobDir::completion_note_name(w.rank));
  }
  // What it wrote before exiting is still in the pipes.
  relay_.pump(w.rank, OutputStream::kStdout, w.out);
  relay_.pump(w.rank, OutputStream::kStderr, w.err);
  w.out.fd.reset();
  w.err.fd.reset();
  return true;
}

}  // namespace

Result<int> pick_free_port() {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return internal_error("cannot create a TCP socket: " + errno_text(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return internal_error("cannot bind a TCP socket on 127.0.0.1: " + errno_text(errno) +
                          "; set the master port explicitly");
  }
  socklen_t len = sizeof addr;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return internal_error("cannot read back the bound port: " + errno_text(errno));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

Result<LaunchReport> run_workers(const LaunchOptions& options) {
  if (Status s = validate(options); !s) return s;
  int port = options.master_port;
  if (port == 0) {
    auto picked = pick_free_port();
    if (!picked) return picked.status();
    port = *picked;
  }
  auto signals = SignalScope::enter();
  if (!signals) return signals.status();
  Job job(options, *signals);
  if (Status s = job.spawn_all(port); !s) return s;  // ~Job stops what was started
  return job.run(port);
}

int launch_workers(const LaunchOptions& options) {
  auto report = run_workers(options);
  if (!report) {
    std::fprintf(stderr, "fulcrum: %s\n", report.status().message().c_str());
    return 2;
  }
  if (!report->summary.empty()) std::fprintf(stderr, "%s\n", report->summary.c_str());
  return report->exit_code;
}

}  // namespace fulcrum::launch
