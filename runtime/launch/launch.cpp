// The launcher: fork + exec of N workers, a poll loop relaying their output,
// and the teardown that keeps one failed rank from leaving the others hanging.
#include "launch/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/progress.h"
#include "host/input_file.h"
#include "launch/unique_fd.h"
#include "launch/worker_env.h"

extern char** environ;

namespace fulcrum::launch {
namespace {

using Clock = std::chrono::steady_clock;

// A line longer than this without a newline is relayed in pieces, so a worker
// printing a progress bar or binary data cannot grow the launcher's memory
// without bound.
constexpr std::size_t kMaxLineBytes = 1 << 20;

// How long the launcher waits, after a rank failed because it lost a peer, for
// the rank that caused it to fail on its own and be named instead.
constexpr auto kLostPeerSettle = std::chrono::milliseconds(1500);

// A stall report names a few ranks and collectives; anything longer is not one.
constexpr std::size_t kMaxStallReportBytes = 1 << 20;

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

std::string errno_text(int err) { return std::strerror(err); }

// Moves a descriptor to >= 3 (close-on-exec), so that dup2 onto 0, 1, 2 in the
// child never clobbers another of our descriptors even when the launcher was
// started with some of its standard streams closed.
Result<UniqueFd> above_stdio(int fd, const char* what) {
  UniqueFd owned(fd);
  if (fd > 2) return owned;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) {
    return internal_error(std::string("cannot move the ") + what +
                          " descriptor above stdio: " + errno_text(errno));
  }
  return UniqueFd(moved);
}

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Result<Pipe> make_pipe(const char* what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return internal_error(std::string("cannot create the ") + what + " pipe: " + errno_text(errno) +
                          "; raise the open-file limit (ulimit -n)");
  }
  UniqueFd r(fds[0]), w(fds[1]);
  auto r3 = above_stdio(r.release(), what);
  if (!r3) return r3.status();
  auto w3 = above_stdio(w.release(), what);
  if (!w3) return w3.status();
  return Pipe{std::move(r3).value(), std::move(w3).value()};
}

// A descriptor that polls readable when `pid` exits, or -1 on kernels before
// 5.3. Called through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C".
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// --- signals ----------------------------------------------------------------

// The handler can only touch lock-free atomics and write(); it passes the
// signal number through a self-pipe that the poll loop watches.
std::atomic<int> g_signal_pipe{-1};
std::atomic<bool> g_launch_active{false};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void forward_signal_handler(int sig) {
  const int saved_errno = errno;
  const int fd = g_signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM};

// Catches SIGINT and SIGTERM while a launch runs and restores the previous
// dispositions after. A signal the launcher was started with ignored (a
// background job's SIGINT) stays ignored: the user asked for that.
class SignalScope {
 public:
  static Result<SignalScope> enter() {
    if (g_launch_active.exchange(true)) {
      return invalid_argument(
          "another launch is already running in this process; run one job at a time");
    }
    SignalScope scope;
    scope.active_ = true;
    auto pipe = make_pipe("signal");
    if (!pipe) return pipe.status();
    set_nonblocking(pipe->read.get());
    set_nonblocking(pipe->write.get());
    scope.pipe_ = std::move(pipe).value();
    g_signal_pipe.store(scope.pipe_.write.get());
    for (std::size_t i = 0; i < std::size(kForwardedSignals); ++i) {
      struct sigaction old_action {};
      ::sigaction(kForwardedSignals[i], nullptr, &old_action);
      scope.old_[i] = old_action;
      if (old_action.sa_handler == SIG_IGN) continue;
      struct sigaction action {};
      action.sa_handler = forward_signal_handler;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;
      ::sigaction(kForwardedSignals[i], &action, nullptr);
      scope.installed_[i] = true;
    }
    return scope;
  }

  SignalScope(SignalScope&& other) noexcept
      : pipe_(std::move(other.pipe_)),
        old_(other.old_),
        installed_(other.installed_),
        active_(std::exchange(other.active_, false)) {}
  SignalScope& operator=(SignalScope&&) = delete;
  ~SignalScope() {
    if (!active_) return;
    for (std::size_t i = 0; i < std::size(kForwardedSignals); ++i) {
      if (installed_[i]) ::sigaction(kForwardedSignals[i], &old_[i], nullptr);
    }
    g_signal_pipe.store(-1);
    g_launch_active.store(false);
  }

  int read_fd() const { return pipe_.read.get(); }

  // Signals received since the last call, in order.
  std::vector<int> take() {
    std::vector<int> out;
    unsigned char buf[64];
    for (;;) {
      ssize_t n = ::read(pipe_.read.get(), buf, sizeof buf);
      if (n <= 0) break;
      out.insert(out.end(), buf, buf + n);
    }
    return out;
  }

 private:
  SignalScope() = default;
  Pipe pipe_;
  std::array<struct sigaction, std::size(kForwardedSignals)> old_{};
  std::array<bool, std::size(kForwardedSignals)> installed_{};
  bool active_ = false;
};

// Blocks SIGINT/SIGTERM around fork, so the child cannot run the launcher's
// handler (and write into the launcher's signal pipe) before it has reset it.
class BlockForwardedSignals {
 public:
  BlockForwardedSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kForwardedSignals) sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockForwardedSignals() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockForwardedSignals(const BlockForwardedSignals&) = delete;
  BlockForwardedSignals& operator=(const BlockForwardedSignals&) = delete;

 private:
  sigset_t old_;
};

// --- stall reports --------------------------------------------------------------

// Why `dir` (links resolved) could be changed by someone other than root and
// this user, or "" when it cannot: it and every directory above it must be
// owned by root or this user and not writable by group or others, unless
// sticky like /tmp (whose other users cannot move entries they do not own).
std::string untrusted_directory(const std::filesystem::path& dir) {
  std::filesystem::path p = dir;
  for (;;) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      return p.string() + " cannot be examined (" + std::strerror(errno) + ")";
    }
    if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
      return p.string() + " is owned by uid " + std::to_string(st.st_uid) +
             ", neither root nor this user";
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return p.string() + " is writable by group or others without the sticky bit";
    }
    if (p == p.root_path() || !p.has_parent_path() || p.parent_path() == p) return "";
    p = p.parent_path();
  }
}

// The job's private directory (mkdtemp: mode 0700, this user's), removed with
// everything in it when the launch ends. The workers meet in its rendezvous/
// (a DirectoryStore, so nothing listens on the network), a worker whose
// collective timed out leaves a StallReport (comm/progress.h) naming the rank
// it waited for, one that lost a peer says so, and one whose run finished
// leaves its completion note. Without it the launch does not start.
class ReportDir {
 public:
  ReportDir() {
    std::error_code ec;
    std::filesystem::path parent = std::filesystem::temp_directory_path(ec);
    if (ec) parent = "/tmp";
    // The real directory, links resolved once: a link another user owns must
    // not be able to point the job elsewhere later.
    std::filesystem::path real = std::filesystem::canonical(parent, ec);
    if (!ec) {
      if (std::string why = untrusted_directory(real); !why.empty()) {
        error_ = "the job's private directory would be made in " + parent.string() + ", but " +
                 why +
                 ": that user could replace it and make the ranks write where they "
                 "choose; set TMPDIR to a directory only you or root can change (like /tmp)";
        return;
      }
      parent = real;
    }
    std::string pattern = (parent / "fulcrum-launch-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      error_ = "cannot create the job's private directory " + pattern + " (" +
               std::strerror(errno) + "); set TMPDIR to a directory this user can write";
      return;
    }
    path_ = pattern;
    if (::mkdir(rendezvous_path().c_str(), 0700) != 0) {
      error_ = "cannot create the job's rendezvous directory " + rendezvous_path() + " (" +
               std::strerror(errno) + "); set TMPDIR to a directory this user can write";
    }
  }

  // Why the directory could not be made; empty when it was.
  const std::string& error() const { return error_; }
  std::string rendezvous_path() const { return path_ + "/rendezvous"; }
  static std::string completion_note_name(int rank) {
    return "rank-" + std::to_string(rank) + ".done";
  }
  std::string completion_note_path(int rank) const {
    return path_ + "/" + completion_note_name(rank);
  }
  bool has(const std::string& name) const {
    struct stat st {};
    return !path_.empty() && ::lstat((path_ + "/" + name).c_str(), &st) == 0;
  }
  bool noted_lost_peer(int rank) const { return has(comm::lost_peer_note_name(rank)); }
  ~ReportDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ReportDir(const ReportDir&) = delete;
  ReportDir& operator=(const ReportDir&) = delete;

  const std::string& path() const { return path_; }

  // The reports present, `first`'s first; nullopt unless `first` wrote one
  // (its failure was a timeout) or noted that it lost a peer in a collective
  // (its failure was a consequence: a rank that timed out may have closed
  // its connections first, and its report names the cause).
  std::optional<std::vector<comm::StallReport>> read(int first) const {
    if (path_.empty()) return std::nullopt;
    std::vector<comm::StallReport> reports;
    bool have_first = false;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(path_, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.size() < 7 || name.compare(name.size() - 6, 6, ".stall") != 0 || name[0] == '.') {
        continue;
      }
      const std::optional<std::string> text =
          host::read_transient_file(entry.path().string(), kMaxStallReportBytes);
      if (!text) continue;
      Result<comm::StallReport> report = comm::StallReport::decode(*text);
      if (!report) continue;
      if (report->reporter == first) {
        have_first = true;
        reports.insert(reports.begin(), std::move(report).value());
      } else {
        reports.push_back(std::move(report).value());
      }
    }
    if (reports.empty()) return std::nullopt;
    if (!have_first && !noted_lost_peer(first)) return std::nullopt;
    return reports;
  }

 private:
  std::string path_;
  std::string error_;
};

// --- workers ----------------------------------------------------------------

struct OutputChannel {
  UniqueFd fd;
  std::string partial;  // bytes after the last newline
};

struct WorkerProcess {
  int rank = 0;
  pid_t pid = -1;
  UniqueFd pidfd;  // readable when the worker exits; invalid on kernels without pidfd
  OutputChannel out, err;
  bool reaped = false;
  WorkerExit exit;
};

class LineRelay {
 public:
  explicit LineRelay(const LaunchOptions& options) : options_(options) {}

  void emit(int rank, OutputStream stream, std::string_view line) {
    if (stream == OutputStream::kStderr && repeats_an_error(rank, line)) return;
    if (options_.on_line) {
      options_.on_line(rank, stream, line);
      return;
    }
    std::string text = "[rank " + std::to_string(rank) + "] ";
    text.append(line);
    text.push_back('\n');
    const int fd = stream == OutputStream::kStdout ? STDOUT_FILENO : STDERR_FILENO;
    const char* p = text.data();
    std::size_t left = text.size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // our own output is gone; keep running the job
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }

  // Reads what is available without blocking; relays complete lines. Closes
  // the channel at end of file, relaying a final unterminated line.
  void pump(int rank, OutputStream stream, OutputChannel& channel) {
    if (!channel.fd.valid()) return;
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(channel.fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        break;  // treat a read error as end of file
      }
      if (n == 0) break;
      channel.partial.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (;;) {
        std::size_t nl = channel.partial.find('\n', start);
        if (nl == std::string::npos) break;
        emit(rank, stream, std::string_view(channel.partial).substr(start, nl - start));
        start = nl + 1;
      }
      channel.partial.erase(0, start);
      while (channel.partial.size() >= kMaxLineBytes) {
        emit(rank, stream, std::string_view(channel.partial).substr(0, kMaxLineBytes));
        channel.partial.erase(0, kMaxLineBytes);
      }
    }
    if (!channel.partial.empty()) emit(rank, stream, channel.partial);
    channel.partial.clear();
    channel.fd.reset();
  }

  // The other ranks whose error line (below) was the same as `rank`'s, in
  // rank order; empty when `rank` printed none or nobody shared it.
  std::vector<int> same_error_as(int rank) const {
    const auto own = error_of_.find(rank);
    if (own == error_of_.end()) return {};
    std::vector<int> ranks;
    for (const auto& [other, text] : error_of_) {
      if (other != rank && text == own->second) ranks.push_back(other);
    }
    return ranks;
  }

 private:
  // A worker's error line is "fulcrum-worker: rank N: what". When every rank
  // refuses the same input (a data file, a checkpoint) they all print the
  // same "what": it is relayed once, by the first rank, and the launcher's
  // summary names the others instead of repeating the line per rank.
  bool repeats_an_error(int rank, std::string_view line) {
    const std::string prefix = "fulcrum-worker: rank " + std::to_string(rank) + ": ";
    if (line.substr(0, prefix.size()) != prefix) return false;
    std::string what(line.substr(prefix.size()));
    const bool seen = std::any_of(error_of_.begin(), error_of_.end(), [&](const auto& entry) {
      return entry.first != rank && entry.second == what;
    });
    error_of_.emplace(rank, std::move(what));  // a rank's first error line is its error
    return seen;
  }

  const LaunchOptions& options_;
  std::map<int, std::string> error_of_;
};

// Whether `pid` is stopped (SIGSTOP, SIGTSTP, a debugger): state T or t in
// /proc/PID/stat, the character after the parenthesised command name.
// A process that exits while it is looked at (the file vanishes, or the read
// fails with ESRCH) is not stopped: its exit is reaped and reported as usual.
bool is_stopped(pid_t pid) {
  const std::optional<std::string> stat =
      host::read_transient_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  return stat && process_state_is_stopped(*stat);
}

// Signals a worker together with everything it started: it leads its own
// process group. Falls back to the worker alone if it moved itself to another
// group (setsid), where the group no longer exists.
void signal_worker(const WorkerProcess& worker, int sig) {
  if (worker.reaped || worker.pid <= 0) return;
  if (::kill(-worker.pid, sig) != 0) ::kill(worker.pid, sig);
}

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
    std::string dir =
        path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + program;
    if (executable(candidate)) return candidate;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return not_found("worker program '" + program + "' is not in PATH (" + path +
                   "); give its full path");
}

std::vector<std::string> worker_environment(const LaunchOptions& options, int rank, int port,
                                            const ReportDir& job_dir) {
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

  // Stops and reaps whatever was started: the launcher must not return while
  // a worker it created is still running.
  ~Job() {
    for (WorkerProcess& w : workers_) {
      if (w.reaped) continue;
      signal_worker(w, SIGKILL);
      int st = 0;
      while (::waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {
      }
      w.reaped = true;
    }
  }

  Status spawn_all(int port) {
    if (!reports_.error().empty()) return invalid_argument(reports_.error());
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

  LaunchReport run(int port) {
    LaunchReport report;
    report.master_port = port;
    std::optional<Clock::time_point> kill_at;  // set once teardown starts
    bool killed = false;

    // Ranks found stopped when the first failure arrived: a stopped rank
    // answers nothing, so its peers time out; it, not whichever of them
    // the stall reports point at, is the cause.
    std::vector<int> stopped;
    // The first rank that failed only because it lost a peer, and until when
    // another rank may still turn out to be the cause.
    std::optional<int> lost_peer_rank;
    std::optional<Clock::time_point> settle_at;
    auto start_teardown = [&](int sig, double grace_s) {
      for (WorkerProcess& w : workers_) {
        if (!w.reaped && is_stopped(w.pid)) {
          stopped.push_back(w.rank);
          // A stopped process keeps SIGTERM pending until it is continued:
          // waiting out the grace for it would only delay the end.
          signal_worker(w, SIGKILL);
        }
      }
      for (WorkerProcess& w : workers_) signal_worker(w, sig);
      kill_at = Clock::now() +
                std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
    };

    while (live() > 0) {
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
      if (settle_at && !report.failed_rank) wake_by(*settle_at);
      if (kill_at && !killed) wake_by(*kill_at);
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        // poll failing is a bug or a resource exhaustion; stop the job rather
        // than spin.
        if (!kill_at) start_teardown(SIGKILL, options_.failure_grace_s);
      }

      for (int sig : signals_.take()) {
        if (report.interrupted_by == 0 && !report.failed_rank) {
          report.interrupted_by = sig;
          if (!options_.interrupt_note.empty()) {
            const std::string line = options_.interrupt_note + "\n";
            [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
          }
          start_teardown(sig, std::max(options_.failure_grace_s, options_.interrupt_grace_s));
        } else if (!killed) {
          // A second Ctrl-C means "now".
          for (WorkerProcess& w : workers_) signal_worker(w, SIGKILL);
          killed = true;
        }
      }

      for (WorkerProcess& w : workers_) {
        relay_.pump(w.rank, OutputStream::kStdout, w.out);
        relay_.pump(w.rank, OutputStream::kStderr, w.err);
      }

      for (WorkerProcess& w : workers_) {
        if (w.reaped || !reap(w)) continue;
        if (w.exit.ok() || report.failed_rank || report.interrupted_by != 0) continue;
        if (reports_.noted_lost_peer(w.rank)) {
          // A consequence: the peer it lost is failing on its own and may
          // still be on its way out (closing its connections before it
          // exits). Give it a moment to be the one named.
          if (!lost_peer_rank) {
            lost_peer_rank = w.rank;
            settle_at = Clock::now() + kLostPeerSettle;
          }
          continue;
        }
        report.failed_rank = w.rank;
        start_teardown(SIGTERM, options_.failure_grace_s);
      }
      if (lost_peer_rank && !report.failed_rank && report.interrupted_by == 0 &&
          (Clock::now() >= *settle_at || live() == 0)) {
        report.failed_rank = lost_peer_rank;
        start_teardown(SIGTERM, options_.failure_grace_s);
      }

      if (kill_at && !killed && Clock::now() >= *kill_at) {
        for (WorkerProcess& w : workers_) signal_worker(w, SIGKILL);
        killed = true;
      }
    }

    for (WorkerProcess& w : workers_) report.workers.push_back(w.exit);
    if (report.failed_rank) {
      const WorkerExit& e = report.workers[static_cast<std::size_t>(*report.failed_rank)];
      if (e.left_early) {
        report.exit_code = 1;
        report.summary = "fulcrum: rank " + std::to_string(e.rank) +
                         " exited with status 0 before its run finished (it left no completion "
                         "note); stopped all ranks: the run did not complete";
      } else if (e.signal != 0) {
        report.exit_code = 128 + e.signal;
        report.summary = "fulcrum: rank " + std::to_string(e.rank) + " killed by signal " +
                         signal_name(e.signal);
      } else {
        report.exit_code = e.exit_status;
        report.summary = "fulcrum: rank " + std::to_string(e.rank) + " failed with exit status " +
                         std::to_string(e.exit_status);
        if (const std::vector<int> same = relay_.same_error_as(e.rank); !same.empty()) {
          report.summary += " (the same error on " + comm::ranks_phrase(same) + ")";
        }
        // It gave up waiting in a collective: name the rank it waited for.
        if (!stopped.empty() && e.exit_status != 0) {
          report.stalled_ranks = stopped;
          report.summary = "fulcrum: " + comm::ranks_phrase(stopped) + " " +
                           (stopped.size() == 1 ? "was" : "were") +
                           " stopped (by SIGSTOP, SIGTSTP or a debugger) when rank " +
                           std::to_string(e.rank) + " failed with exit status " +
                           std::to_string(e.exit_status) +
                           "; a stopped rank answers no collective: its peers time out "
                           "(dist.op_timeout_s); stopped all ranks";
        } else if (auto stalls = reports_.read(e.rank)) {
          if (std::optional<std::string> line = comm::stall_summary(*stalls)) {
            report.summary = *line;
            for (const comm::StallReport& r : *stalls) {
              report.stalled_ranks.insert(report.stalled_ranks.end(), r.stalled.begin(),
                                          r.stalled.end());
            }
            std::sort(report.stalled_ranks.begin(), report.stalled_ranks.end());
            report.stalled_ranks.erase(
                std::unique(report.stalled_ranks.begin(), report.stalled_ranks.end()),
                report.stalled_ranks.end());
          }
        }
      }
    } else if (report.interrupted_by != 0) {
      report.exit_code = 128 + report.interrupted_by;
      // Every worker exiting 128 + the signal handled it: they stopped at one
      // step boundary after rank 0 wrote a checkpoint (train/worker.cpp).
      const int handled = 128 + report.interrupted_by;
      const bool checkpointed = std::all_of(
          report.workers.begin(), report.workers.end(),
          [&](const WorkerExit& e) { return e.signal == 0 && e.exit_status == handled; });
      report.summary = "fulcrum: interrupted by " + signal_name(report.interrupted_by) +
                       (checkpointed ? "; the workers stopped after the same step and rank 0 "
                                       "wrote a checkpoint (its line above says where); "
                                       "continue with --resume auto"
                                     : "; forwarded it to the workers and stopped them");
    }
    return report;
  }

 private:
  std::size_t live() const {
    return static_cast<std::size_t>(std::count_if(
        workers_.begin(), workers_.end(), [](const WorkerProcess& w) { return !w.reaped; }));
  }

  Status spawn(int rank, const std::string& path, char* const* argv, int stdin_fd, int port) {
    auto out = make_pipe("stdout");
    if (!out) return out.status();
    auto err = make_pipe("stderr");
    if (!err) return err.status();
    auto report = make_pipe("exec report");
    if (!report) return report.status();
    std::vector<std::string> env_strings = worker_environment(options_, rank, port, reports_);
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
      return internal_error("cannot fork worker " + std::to_string(rank) + ": " +
                            errno_text(errno) + "; check the process limit (ulimit -u)");
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
  bool reap(WorkerProcess& w) {
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
                          !reports_.has(ReportDir::completion_note_name(w.rank));
    }
    // What it wrote before exiting is still in the pipes.
    relay_.pump(w.rank, OutputStream::kStdout, w.out);
    relay_.pump(w.rank, OutputStream::kStderr, w.err);
    w.out.fd.reset();
    w.err.fd.reset();
    return true;
  }

  const LaunchOptions& options_;
  SignalScope& signals_;
  LineRelay relay_;
  ReportDir reports_;
  std::vector<WorkerProcess> workers_;
};

}  // namespace

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
