// Faults and bad input, end to end: real workers, started by `fulcrum train`
// or directly as torchrun would, fail on purpose through the test-only
// FULCRUM_TEST_* variables (runtime/train/consensus.h). Every scenario checks
// what a user would see: the exit code, the one line that names the cause,
// how long it took, and that no worker outlived the job.
//
// Every child runs under a deadline and carries a per-run marker variable,
// so a test can fail but never hang, and can find (and clean up) any process
// its run left behind by scanning /proc.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using fulcrum::it::TempDir;
using std::chrono::seconds;

constexpr const char* kMarkerVariable = "FULCRUM_TEST_RUN_ID";

// A marker no other run of this binary (or another test binary) uses.
std::string new_marker() {
  static std::atomic<int> counter{0};
  return "fault-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

struct Line {
  double at_s = 0.0;  // since the run started
  std::string text;
};

struct Child {
  std::vector<std::string> argv;  // argv[0] is a path
  std::vector<std::string> env;   // "NAME=value", over the test's environment
};

struct ChildResult {
  int exit_code = -1;  // 128 + signal when killed
  bool timed_out = false;
  std::string out, err;
  std::vector<Line> lines;  // both streams, in arrival order
  double wall_s = 0.0;

  // When the first line holding `text` arrived; nullopt = never.
  std::optional<double> seen_at(const std::string& text) const {
    for (const Line& l : lines) {
      if (l.text.find(text) != std::string::npos) return l.at_s;
    }
    return std::nullopt;
  }
};

std::ostream& operator<<(std::ostream& o, const ChildResult& r) {
  o << "exit " << r.exit_code << (r.timed_out ? " (TIMED OUT)" : "") << " after " << r.wall_s
    << " s\n--- stdout\n"
    << r.out << "--- stderr\n"
    << r.err;
  return o;
}

struct Stream {
  int fd = -1;
  std::string* sink = nullptr;
  std::string partial;
};

// Starts every child in one new process group (so a deadline kill reaches
// them all, and nothing else), relays nothing, and waits for all of them.
// Past `deadline` the group gets SIGTERM, 3 s later SIGKILL.
std::vector<ChildResult> run_all(const std::vector<Child>& children, seconds deadline) {
  std::vector<ChildResult> results(children.size());
  std::vector<pid_t> pids(children.size(), -1);
  std::vector<Stream> streams;
  const auto start = Clock::now();
  pid_t group = 0;
  for (std::size_t i = 0; i < children.size(); ++i) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      results[i].err = "pipe failed";
      continue;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, group);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      const int devnull = ::open("/dev/null", O_RDONLY);
      ::dup2(devnull, STDIN_FILENO);
      for (const std::string& kv : children[i].env) ::putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> argv;
      for (const std::string& a : children[i].argv) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, group);
    if (group == 0) group = pid;
    pids[i] = pid;
    ::close(out[1]);
    ::close(err[1]);
    streams.push_back({out[0], &results[i].out, {}});
    streams.push_back({err[0], &results[i].err, {}});
  }
  auto owner = [&](const Stream& s) {
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (s.sink == &results[i].out || s.sink == &results[i].err) return i;
    }
    return std::size_t{0};
  };
  bool terminated = false;
  auto kill_at = Clock::now() + deadline + seconds(3);
  std::size_t open_streams = streams.size();
  while (open_streams > 0) {
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
      Stream& s = streams[k];
      if (s.fd < 0 || (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buffer[8192];
      const ssize_t n = ::read(s.fd, buffer, sizeof buffer);
      const double at = std::chrono::duration<double>(Clock::now() - start).count();
      ChildResult& r = results[owner(s)];
      if (n <= 0) {
        if (!s.partial.empty()) r.lines.push_back({at, s.partial});
        ::close(s.fd);
        s.fd = -1;
        --open_streams;
        // Both of its streams closed: the child (and whatever inherited
        // them) is gone; close enough to its exit for timings.
        r.wall_s = at;
        continue;
      }
      s.sink->append(buffer, static_cast<std::size_t>(n));
      s.partial.append(buffer, static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = s.partial.find('\n')) != std::string::npos;) {
        r.lines.push_back({at, s.partial.substr(0, nl)});
        s.partial.erase(0, nl + 1);
      }
    }
    std::erase_if(streams, [](const Stream& s) { return s.fd < 0; });
  }
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return results;
}

ChildResult run_one(const std::vector<std::string>& argv, seconds deadline,
                    const std::vector<std::string>& env = {}) {
  return run_all({Child{argv, env}}, deadline).front();
}

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

// No process of the run survives it. PR_SET_PDEATHSIG and the launcher's own
// teardown act within milliseconds; 3 s of grace covers a loaded machine.
// Anything still there is reported and killed, so one failure does not
// leak into the next test.
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

// DP 2 x CP 2, packed rows of a few documents, a model small enough that a
// step takes milliseconds: a fault's cost is then all timeout and teardown.
// Short deadlines (rendezvous 5 s, 3 s where a test waits for it;
// collectives 3 s) keep the file fast.
constexpr double kOpTimeoutS = 3;
constexpr double kRendezvousTimeoutS = 3;
constexpr const char* kConfig = R"(
parallel: {dp_size: 2, cp_size: 2}
balancer:
  cp: {strategy: auto, block_size: 16}
  dp: {strategy: auto, cost: attention}
data: {source: synthetic, num_samples: 64, max_length: 120, seq_length: 64, packing: true,
       global_batch_size: 4, micro_batch_size: 1, seed: 3}
model: {hidden_size: 16, num_layers: 1, num_heads: 2, vocab_size: 64}
train: {steps: 3, threads: 1}
dist: {timeout_s: 5, op_timeout_s: 3}
)";

struct Job {
  TempDir dir;
  std::string config = dir.write("job.yaml", kConfig);
  std::string marker = new_marker();

  std::vector<std::string> env(std::vector<std::string> extra) const {
    extra.push_back(std::string(kMarkerVariable) + "=" + marker);
    return extra;
  }
  // `fulcrum train` with the job's config.
  ChildResult train(const std::vector<std::string>& extra_env,
                    const std::vector<std::string>& sets = {}) const {
    std::vector<std::string> argv = {FULCRUM_BIN, "train", "--config", config};
    for (const std::string& s : sets) argv.insert(argv.end(), {"--set", s});
    return run_one(argv, seconds(60), env(extra_env));
  }
  // The four ranks started directly, as torchrun would: each rank's own
  // output and exit code, with no launcher to stop the others early.
  std::vector<ChildResult> ranks(const std::vector<std::string>& extra_env) const {
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
};

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The launcher's verdict is its last stderr line.
std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// --- faults ------------------------------------------------------------------

// From the end of step 1 (rank 0's progress line) to the launcher's exit.
double seconds_after_step_one(const ChildResult& r) {
  const std::optional<double> at = r.seen_at("[rank 0] step 1/3");
  return at ? r.wall_s - *at : 1e9;
}

// Test-only fault `kind` on `rank` in step 2 of `job`, with `sets`.
ChildResult inject(const Job& job, const std::string& kind, int rank,
                   const std::vector<std::string>& sets = {}) {
  return job.train({"FULCRUM_TEST_FAULT=" + kind, "FULCRUM_TEST_FAULT_RANK=" + std::to_string(rank),
                    "FULCRUM_TEST_FAULT_STEP=2"},
                   sets);
}

// Rank 1 died in step 2: the launcher saw it at once, without waiting for
// any collective or exchange to time out, and left nothing behind.
void expect_killed_rank_ends_the_job_at_once(const Job& job, const ChildResult& r) {
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r;
  EXPECT_EQ(last_line(r.err), "fulcrum: rank 1 killed by signal SIGKILL") << r;
  EXPECT_LT(seconds_after_step_one(r), kOpTimeoutS) << r;
  expect_no_orphans(job.marker);
}

TEST(Fault, KilledWorkerEndsTheJobAtOnce) {
  Job job;
  const ChildResult r = inject(job, "kill", 1);
  expect_killed_rank_ends_the_job_at_once(job, r);
  std::printf("[ figure ] kill: launcher exit %.2f s after step 1, %.2f s in all\n",
              seconds_after_step_one(r), r.wall_s);
}

// A rank that quits with status 0 in the middle of the run: the job fails,
// naming it, instead of reporting success with nothing trained.
TEST(Fault, AWorkerThatExitsZeroMidRunFailsTheJob) {
  Job job;
  const ChildResult r = inject(job, "exit0", 2);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(last_line(r.err),
            "fulcrum: rank 2 exited with status 0 before its run finished (it left no completion "
            "note); stopped all ranks: the run did not complete")
      << r;
  expect_no_orphans(job.marker);
}

TEST(Fault, ThrowingWorkerEndsTheJobWithItsMessage) {
  Job job;
  const ChildResult r = inject(job, "throw", 2);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  // Rank 2 unwinds (closing its connections) before it prints, so a peer
  // that lost the connection may exit first; it noted the lost peer, and the
  // launcher names rank 2, the first rank to fail on its own
  // (docs/RELIABILITY.md, "The launcher's last line"). Under LeakSanitizer a
  // rank that is exiting is briefly in tracing stop, which the launcher
  // reports as a stopped peer, so the line is matched on the failed rank.
  EXPECT_TRUE(contains(last_line(r.err), "rank 2 failed with exit status 1")) << r;
  EXPECT_TRUE(contains(r.err,
                       "[rank 2] fulcrum-worker: rank 2: internal error: injected failure "
                       "(test-only FULCRUM_TEST_FAULT=throw) in step 2"))
      << r;
  for (int peer : {0, 1, 3}) {
    const std::string prefix =
        "[rank " + std::to_string(peer) + "] fulcrum-worker: rank " + std::to_string(peer) + ": ";
    for (const std::string& l : lines_of(r.err)) {
      if (l.rfind(prefix, 0) == 0) {
        EXPECT_TRUE(contains(l, "failed: ") && contains(l, "a peer rank may have exited"))
            << "rank " << peer << " reported something other than the lost peer: " << l;
      }
    }
  }
  EXPECT_LT(seconds_after_step_one(r), kOpTimeoutS) << r;
  expect_no_orphans(job.marker);
  std::printf("[ figure ] throw: launcher exit %.2f s after step 1, %.2f s in all\n",
              seconds_after_step_one(r), r.wall_s);
}

// The launcher's verdict on a stall of `rank` in step 2 (the others wait in
// the row's plan check on its CP group and in the step's verdict on world),
// and the timing and cleanup of every fault.
void expect_stall_named(const ChildResult& r, const Job& job, int rank) {
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  const std::string cp_group = "cp[dp=" + std::to_string(rank / 2) + "]";
  std::vector<int> others;
  for (int o = 0; o < 4; ++o) {
    if (o != rank) others.push_back(o);
  }
  std::string others_text;
  for (int o : others) others_text += (others_text.empty() ? "" : ", ") + std::to_string(o);
  // The final line names the stalled rank, whoever gave up first; then the
  // ranks that waited, where, and which of them timed out.
  const std::string last = last_line(r.err);
  EXPECT_EQ(last.rfind("fulcrum: rank " + std::to_string(rank) + " stalled (ranks " + others_text +
                           " were waiting for it in ",
                       0),
            0u)
      << r;
  EXPECT_TRUE(contains(last, "all_gather on group " + cp_group)) << r;
  EXPECT_TRUE(contains(last, "all_gather on group world")) << r;
  EXPECT_TRUE(contains(last, " timed out after 3 s); stopped all ranks")) << r;
  // The first rank to give up said it in its own line too: the CP peer in
  // the plan check, or a rank of the other CP group in the verdict.
  const std::string who = "rank " + std::to_string(rank);
  bool named = false;
  for (const std::string& l : lines_of(r.err)) {
    if (contains(l, "timed out after 3 s") &&
        (contains(l, who + " never entered it (last seen in ") ||
         contains(l, who + " was last seen in ")) &&
        contains(l, who + " has stopped entering collectives")) {
      named = true;
    }
  }
  EXPECT_TRUE(named) << r;
  EXPECT_FALSE(contains(r.err, "[rank " + std::to_string(rank) + "] fulcrum-worker"))
      << "rank " << rank << " stalled silently: " << r;
  const double after = seconds_after_step_one(r);
  EXPECT_GT(after, kOpTimeoutS - 0.5) << r;
  EXPECT_LT(after, kOpTimeoutS + 5) << r;
  expect_no_orphans(job.marker);
}

TEST(Fault, StalledWorkerIsEndedByTheCollectiveTimeout) {
  Job job;
  const ChildResult r = inject(job, "stall", 3);
  // Rank 3 never answers: its CP peer (rank 2) times out in the row's plan
  // check on cp[dp=1], ranks 0 and 1 in the step's verdict on world. Each
  // reads the others' progress from the store, follows who waits for whom
  // to rank 3, and the launcher names it.
  expect_stall_named(r, job, 3);
  std::printf(
      "[ figure ] stall: launcher exit %.2f s after step 1 (op timeout %.0f s), %.2f s in all\n",
      seconds_after_step_one(r), kOpTimeoutS, r.wall_s);
  std::printf("[ figure ] stall: %s\n", last_line(r.err).c_str());
}

TEST(Fault, StalledStoreHostIsNamedToo) {
  // Rank 0 hosts the store. Its training thread stalls, but the store runs
  // on a thread of its own and still answers the others' reads.
  Job job;
  const ChildResult r = inject(job, "stall", 0);
  expect_stall_named(r, job, 0);
  std::printf(
      "[ figure ] stall of rank 0: launcher exit %.2f s after step 1 (op timeout %.0f s), %.2f s "
      "in all\n",
      seconds_after_step_one(r), kOpTimeoutS, r.wall_s);
}

TEST(Fault, WorkerStalledBeforeTheRendezvousIsEndedByItsTimeout) {
  Job job;
  const ChildResult r = job.train(
      {"FULCRUM_TEST_FAULT=stall", "FULCRUM_TEST_FAULT_RANK=1", "FULCRUM_TEST_FAULT_STEP=0"},
      {"dist.timeout_s=" + std::to_string(static_cast<int>(kRendezvousTimeoutS))});
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  // fulcrum train's ranks meet in the launcher's private directory.
  EXPECT_TRUE(contains(r.err, "rendezvous at directory /")) << r;
  EXPECT_TRUE(contains(r.err, "timed out after 3 s")) << r;
  // Every rank that came counts who came, and names who did not.
  EXPECT_TRUE(contains(r.err, "3 of 4 ranks joined (rank 1 has not joined)")) << r;
  EXPECT_LT(r.wall_s, kRendezvousTimeoutS + 10) << r;
  expect_no_orphans(job.marker);
  std::printf("[ figure ] stall before rendezvous: launcher exit after %.2f s (timeout %.0f s)\n",
              r.wall_s, kRendezvousTimeoutS);
}

// --- hybrid mode -------------------------------------------------------------

// The same job as one pool of four ranks placed by the hybrid scheduler
// (T = 16: the 64-token pieces run on four ranks, shorter ones on fewer):
// faults now meet the ranks in a slot's point-to-point exchange.
const std::vector<std::string> kHybrid = {"parallel.mode=hybrid", "parallel.dp_size=1",
                                          "parallel.cp_size=1", "parallel.world_size=4",
                                          "parallel.max_tokens_per_rank=16"};

TEST(HybridFault, KilledWorkerEndsTheJobAtOnce) {
  Job job;
  expect_killed_rank_ends_the_job_at_once(job, inject(job, "kill", 1, kHybrid));
}

TEST(HybridFault, ThrowingWorkerEndsTheJobWithItsMessage) {
  Job job;
  const ChildResult r = inject(job, "throw", 1, kHybrid);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(contains(r.err,
                       "[rank 1] fulcrum-worker: rank 1: internal error: injected failure "
                       "(test-only FULCRUM_TEST_FAULT=throw) in step 2"))
      << r;
  // The others lost their peer in a slot's exchange, and say where.
  for (int peer : {0, 2, 3}) {
    const std::string prefix =
        "[rank " + std::to_string(peer) + "] fulcrum-worker: rank " + std::to_string(peer) + ": ";
    for (const std::string& l : lines_of(r.err)) {
      if (l.rfind(prefix, 0) != 0) continue;
      EXPECT_TRUE(contains(l, "slot ") && contains(l, "(wave ") && contains(l, "exchange") &&
                  contains(l, "a peer rank may have exited"))
          << "rank " << peer << ": " << l;
    }
  }
  EXPECT_LT(seconds_after_step_one(r), kOpTimeoutS) << r;
  expect_no_orphans(job.marker);
}

TEST(HybridFault, StalledWorkerIsNamedWithTheSlotTheWaveAndThePeer) {
  Job job;
  const ChildResult r = inject(job, "stall", 3, kHybrid);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  // Rank 3 never runs its first slot of step 2; the members waiting for it
  // time out in that slot's exchange, each naming the slot, its wave, the
  // pass and rank 3 (and, from the progress board, that rank 3 stopped).
  int named = 0;
  for (const std::string& l : lines_of(r.err)) {
    if (!contains(l, "fulcrum-worker: rank ")) continue;
    EXPECT_TRUE(contains(l, "exchange on group world timed out after 3 s")) << l;
    if (contains(l, "slot ") && contains(l, " (wave ") && contains(l, ") forward: ") &&
        contains(l, "waiting for the receive from rank 3")) {
      ++named;
    }
  }
  EXPECT_GE(named, 1) << r;
  // The waits are in the progress board as pair groups: the launcher
  // follows them to rank 3 and names it.
  const std::string last = last_line(r.err);
  EXPECT_EQ(last.rfind("fulcrum: rank 3 stalled (ranks ", 0), 0u) << r;
  EXPECT_TRUE(contains(last, "were waiting for it in exchange on group p2p[")) << r;
  EXPECT_TRUE(contains(last, " timed out after 3 s); stopped all ranks")) << r;
  EXPECT_FALSE(contains(r.err, "[rank 3] fulcrum-worker")) << "rank 3 stalled silently: " << r;
  const double after = seconds_after_step_one(r);
  EXPECT_GT(after, kOpTimeoutS - 0.5) << r;
  EXPECT_LT(after, kOpTimeoutS + 5) << r;
  expect_no_orphans(job.marker);
}

TEST(HybridConsensus, DivergentScheduleEndsTheJobNamingTheRank) {
  Job job;
  const ChildResult r =
      job.train({"FULCRUM_TEST_PERTURB=plan", "FULCRUM_TEST_PERTURB_RANK=2"}, kHybrid);
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(contains(r.err,
                       "plan consensus failed at step 1 on group world: the schedule of rank 2 "
                       "(scheduler hybrid, "))
      << r;
  EXPECT_TRUE(contains(r.err, "differs from that of ranks 0, 1, 3 (scheduler hybrid, ")) << r;
  EXPECT_LT(r.wall_s, kOpTimeoutS + 20) << r;
  expect_no_orphans(job.marker);
}

// Not a fault but the one input only the workers check: the Gloo interface.
// Every rank refuses it before the rendezvous, with exit status 2.
// --- plan consensus -----------------------------------------------------------

// Each rank's stderr holds the error, once, as its last line.
void expect_every_rank(const std::vector<ChildResult>& ranks, const std::string& what) {
  ASSERT_EQ(ranks.size(), 4u);
  std::string first;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const ChildResult& c = ranks[r];
    EXPECT_FALSE(c.timed_out) << "rank " << r << ": " << c;
    EXPECT_EQ(c.exit_code, 1) << "rank " << r << ": " << c;
    const std::string line = last_line(c.err);
    EXPECT_TRUE(contains(line, "fulcrum-worker: rank " + std::to_string(r) + ": " + what))
        << "rank " << r << ": " << c;
    // The same cause on every rank, whoever noticed it first.
    const std::string cause = line.substr(std::min(line.size(), line.find("plan consensus")));
    if (r == 0) first = cause;
    EXPECT_EQ(cause, first) << "rank " << r;
  }
}

// --- started without fulcrum train ---------------------------------------------

// The launch docs/CONFIGS.md gives for torchrun, done by a shell: the four
// workers get what `torchrun --nproc_per_node 4 --rdzv_backend c10d
// --no_python fulcrum-worker` sets, meet at the TCPStore rank 0 hosts on
// MASTER_ADDR:MASTER_PORT (no FULCRUM_RENDEZVOUS_DIR, no completion note),
// and train. Debian's torchrun 1.13 fails before it starts a worker, so the
// shell stands in for it.
TEST(DirectLaunch, WorkersStartedWithTorchrunsVariablesTrain) {
  Job job;
  const std::string script =
      "for r in 0 1 2 3; do RANK=$r LOCAL_RANK=$r \"$WORKER\" --config \"$CONFIG\" "
      ">\"$DIR/out.$r\" 2>\"$DIR/err.$r\" & pids+=($!); done; "
      "status=0; for p in \"${pids[@]}\"; do wait \"$p\" || status=1; done; "
      "cat \"$DIR\"/err.*; exit $status";
  const ChildResult r =
      run_one({"/bin/bash", "-c", script}, seconds(90),
              job.env({"WORKER=" + std::string(FULCRUM_WORKER), "CONFIG=" + job.config,
                       "DIR=" + job.dir.file(""), "MASTER_ADDR=127.0.0.1",
                       "MASTER_PORT=" + std::to_string(free_port()), "WORLD_SIZE=4",
                       "LOCAL_WORLD_SIZE=4"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<std::string> out(4);
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream in(job.dir.file("out." + std::to_string(rank)));
    out[static_cast<std::size_t>(rank)].assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_TRUE(contains(out[0], "step 3/3")) << out[0];
  EXPECT_TRUE(contains(out[0], "fulcrum train: ")) << out[0];
  EXPECT_TRUE(contains(out[0], ": 3 steps in ")) << out[0];
  for (int rank = 1; rank < 4; ++rank) {
    EXPECT_FALSE(contains(out[static_cast<std::size_t>(rank)], "fulcrum train: ")) << rank;
  }
  expect_no_orphans(job.marker);
}

// srun's and mpirun's variables start the same job (their launchers are not
// installed here; the workers read what they would set).
TEST(DirectLaunch, WorkersStartedWithSrunsAndMpirunsVariablesTrain) {
  Job job;
  const std::vector<std::array<const char*, 4>> flavours = {
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"}};
  for (const auto& [rank_var, size_var, local_var, local_size_var] : flavours) {
    const int port = free_port();
    std::vector<Child> children;
    for (int r = 0; r < 4; ++r) {
      const std::string n = std::to_string(r);
      children.push_back(
          {{FULCRUM_WORKER, "--config", job.config},
           job.env({std::string(rank_var) + "=" + n, std::string(size_var) + "=4",
                    std::string(local_var) + "=" + n, std::string(local_size_var) + "=4",
                    "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)})});
    }
    const std::vector<ChildResult> ranks = run_all(children, seconds(90));
    for (const ChildResult& c : ranks) EXPECT_EQ(c.exit_code, 0) << rank_var << ": " << c;
    EXPECT_TRUE(contains(ranks[0].out, ": 3 steps in ")) << rank_var << ": " << ranks[0];
  }
  expect_no_orphans(job.marker);
}

TEST(Consensus, OneRankWithOtherDocumentLengthsFailsEveryRank) {
  Job job;
  const std::vector<ChildResult> ranks = job.ranks(
      {"FULCRUM_TEST_PERTURB=cp", "FULCRUM_TEST_PERTURB_RANK=1", "FULCRUM_TEST_PERTURB_STEP=2"});
  // Rank 1's first row of step 2 holds the same tokens split into other
  // documents. Its CP group sees it before the attention; ranks 2 and 3
  // learn it at the step's verdict: nobody waits for a timeout.
  expect_every_rank(ranks,
                    "plan consensus failed at step 2, row 0 of group cp[dp=0]: the CP workload "
                    "differs between rank 0 (N=64, ");
  for (const ChildResult& c : ranks) {
    EXPECT_TRUE(contains(c.err, ") and rank 1 (N=64, ")) << c;
    EXPECT_LT(c.wall_s, kOpTimeoutS + 20) << c;
  }
  expect_no_orphans(job.marker);
}

TEST(Consensus, OneRankWithOtherSampleLengthsFailsEveryRankAtTheDpCheck) {
  Job job;
  const std::vector<ChildResult> ranks =
      job.ranks({"FULCRUM_TEST_PERTURB=dp", "FULCRUM_TEST_PERTURB_RANK=3"});
  expect_every_rank(ranks,
                    "plan consensus failed at step 1 on group world: the DP workload (the global "
                    "batch's sample ids and lengths) of rank 3 (4 samples, ");
  for (const ChildResult& c : ranks)
    EXPECT_TRUE(contains(c.err, "from that of ranks 0, 1, 2")) << c;
  expect_no_orphans(job.marker);
}

TEST(Consensus, DivergentPlanEndsTheJobThroughTheLauncher) {
  Job job;
  const ChildResult r = job.train({"FULCRUM_TEST_PERTURB=plan", "FULCRUM_TEST_PERTURB_RANK=2"});
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(contains(r.err,
                       "plan consensus failed at step 1, row 0 of group cp[dp=1]: the CP "
                       "workload agrees"))
      << r;
  EXPECT_TRUE(contains(r.err, "but the plan differs between rank 2 (strategy ")) << r;
  EXPECT_TRUE(contains(last_line(r.err), " failed with exit status 1")) << r;
  EXPECT_LT(r.wall_s, kOpTimeoutS + 20) << r;
  expect_no_orphans(job.marker);
}

TEST(Consensus, CanBeSwitchedOff) {
  Job job;
  // The DP perturbation changes only what the check hashes: with the check
  // off, nothing differs and the run completes.
  const ChildResult r = job.train({"FULCRUM_TEST_PERTURB=dp", "FULCRUM_TEST_PERTURB_RANK=3"},
                                  {"dist.plan_consensus=false"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_FALSE(contains(r.err, "plan consensus")) << r;
  expect_no_orphans(job.marker);
}

// --- bad input ---------------------------------------------------------------

// One rank, the host's own balancer: nothing to warn about, so a refusal is
// the only line a worker prints.
constexpr const char* kOneRank = "balancer: {plugin: builtin, dp: {strategy: round_robin}}\n";

struct BadInput {
  std::string name;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string expected;  // in the stderr line
};

// Each refusal: exit 2, fast, nothing on stdout, one line on stderr holding
// the expected text,
// no crash, no worker left behind. Cases run two at a time: most of a
// refused worker's second is spent loading LibTorch.
// Runs `children` two at a time (more only queue on a small machine's cores),
// each with the run's marker variable; results in the same order.
std::vector<ChildResult> run_in_pairs(std::vector<Child> children, const std::string& marker,
                                      seconds timeout) {
  std::vector<ChildResult> results;
  for (std::size_t first = 0; first < children.size(); first += 2) {
    std::vector<Child> pair;
    for (std::size_t i = first; i < std::min(children.size(), first + 2); ++i) {
      children[i].env.push_back(std::string(kMarkerVariable) + "=" + marker);
      pair.push_back(std::move(children[i]));
    }
    for (ChildResult& r : run_all(pair, timeout)) results.push_back(std::move(r));
  }
  return results;
}

void expect_refused(const std::vector<BadInput>& cases, const std::string& marker) {
  std::vector<Child> children;
  for (const BadInput& c : cases) children.push_back({c.argv, c.env});
  const std::vector<ChildResult> results = run_in_pairs(std::move(children), marker, seconds(30));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const BadInput& c = cases[i];
    const ChildResult& r = results[i];
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r;
    EXPECT_FALSE(r.timed_out) << c.name;
    EXPECT_LT(r.wall_s, 10.0) << c.name << ": " << r;
    EXPECT_EQ(r.out, "") << c.name << ": " << r;
    const std::vector<std::string> lines = lines_of(r.err);
    if (lines.empty()) {
      ADD_FAILURE() << c.name << ": nothing on stderr: " << r;
      continue;
    }
    EXPECT_EQ(lines.size(), 1u) << c.name << ": " << r;
    EXPECT_TRUE(contains(lines[0], c.expected)) << c.name << ": " << r;
    for (const char* crash :
         {"terminate called", "what()", "Segmentation", "Aborted", "core dumped"}) {
      EXPECT_FALSE(contains(r.err, crash)) << c.name << ": " << r;
    }
    std::printf("[ refused ] %-34s %s\n", c.name.c_str(), lines[0].c_str());
  }
}

// The launch variables a worker reads, end to end: one case per kind of
// mistake. Every variable and value form is covered, without starting a
// process, by runtime/launch/tests/worker_env_test.cpp; docs/RELIABILITY.md
// lists the messages.
std::vector<BadInput> worker_environment_cases(const std::string& config) {
  const std::vector<std::string> w = {FULCRUM_WORKER, "--config", config};
  return {
      {"RANK not a number",
       w,
       {"RANK=abc", "WORLD_SIZE=2"},
       "RANK='abc' is not a non-negative decimal integer"},
      {"RANK not below WORLD_SIZE",
       w,
       {"RANK=2", "WORLD_SIZE=2"},
       "RANK='2' is not below WORLD_SIZE='2'"},
      {"WORLD_SIZE zero", w, {"RANK=0", "WORLD_SIZE=0"}, "WORLD_SIZE='0' is not a world size"},
      {"WORLD_SIZE not the config's",
       w,
       {"RANK=0", "WORLD_SIZE=3"},
       "the launcher started 3 workers (torchrun) but parallel.dp_size x parallel.cp_size"},
      {"MASTER_PORT not a number", w, {"MASTER_PORT=http"}, "MASTER_PORT='http' is not a TCP port"},
      {"MASTER_ADDR empty", w, {"MASTER_ADDR="}, "MASTER_ADDR='' is not a host name or address"},
      {"SLURM_PROCID not a number", w, {"SLURM_PROCID=x", "SLURM_NTASKS=2"}, "SLURM_PROCID='x'"},
      {"FULCRUM_TEST_FAULT unknown",
       w,
       {"FULCRUM_TEST_FAULT=explode"},
       "FULCRUM_TEST_FAULT='explode' is not one of kill, throw, stall"},
  };
}

TEST(BadInput, WorkerEnvironmentIsRefusedInOneLine) {
  TempDir dir;
  // A one-rank job, so a variable that is fine lets the worker go on: the
  // case then fails on its exit code instead of training for long.
  const std::string config = dir.write("one.yaml", kOneRank);
  const std::string marker = new_marker();
  expect_refused(worker_environment_cases(config), marker);
  expect_no_orphans(marker);
}

TEST(BadInput, WorkerFlagsAreRefused) {
  TempDir dir;
  const std::string config = dir.write("one.yaml", kOneRank);
  const std::string marker = new_marker();
  const std::string w = FULCRUM_WORKER;
  const std::vector<BadInput> cases = {
      {"worker: no --config", {w}, {}, "fulcrum-worker: --config is required"},
      {"worker: unknown flag",
       {w, "--config", config, "--nproc", "2"},
       {},
       "unknown argument '--nproc'"},
      {"worker: --resume without value",
       {w, "--config", config, "--resume"},
       {},
       "--resume needs a value"},
      {"worker: --save-params unwritable",
       {w, "--config", config, "--save-params", dir.file("no/dir/p.bin")},
       {},
       "cannot write --save-params " + dir.file("no/dir/p.bin") + ": directory"},
      {"worker: --resume missing file",
       {w, "--config", config, "--resume", dir.file("absent.ckpt")},
       {},
       "absent.ckpt"},
      {"worker: missing config file", {w, "--config", dir.file("absent.yaml")}, {}, "absent.yaml"},
      {"worker: --set unknown key",
       {w, "--config", config, "--set", "train.stpes=3"},
       {},
       "train.steps"},
      {"worker: metrics unwritable",
       {w, "--config", config, "--metrics", dir.file("no/dir/m.jsonl")},
       {},
       "no/dir/m.jsonl"},
  };
  expect_refused(cases, marker);
  expect_no_orphans(marker);
}

TEST(BadInput, TrainFlagsAreRefusedBeforeAnyWorkerStarts) {
  TempDir dir;
  const std::string config = dir.write("job.yaml", kConfig);
  const std::string marker = new_marker();
  const std::string f = FULCRUM_BIN;
  auto train = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {f, "train"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  const std::vector<BadInput> cases = {
      {"--nproc not a number",
       train({"--config", config, "--nproc", "four"}),
       {},
       "fulcrum train: --nproc must be an integer from 1 to"},
      {"--nproc zero", train({"--config", config, "--nproc", "0"}), {}, "--nproc must be"},
      {"--nproc negative", train({"--config", config, "--nproc", "-4"}), {}, "--nproc"},
      {"--nproc overflows",
       train({"--config", config, "--nproc", "99999999999999999999"}),
       {},
       "--nproc must be"},
      {"--nproc not the config's",
       train({"--config", config, "--nproc", "3"}),
       {},
       "--nproc 3 does not match parallel.dp_size x parallel.cp_size = 2 x 2 = 4"},
      {"--nproc without value", train({"--config", config, "--nproc"}), {}, "--nproc"},
      {"--nproc not the hybrid world",
       train({"--config", config, "--nproc", "4", "--set", "parallel.mode=hybrid", "--set",
              "parallel.dp_size=1", "--set", "parallel.cp_size=1", "--set",
              "parallel.world_size=6"}),
       {},
       "--nproc 4 does not match parallel.world_size = 6"},
      {"world size against dp x cp in fixed mode",
       train({"--config", config, "--set", "parallel.world_size=4", "--nproc", "4", "--set",
              "parallel.dp_size=4"}),
       {},
       "fulcrum train: parallel.world_size = 4 (set at --set) disagrees with"},
      {"hybrid T too small for a piece",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "parallel.max_tokens_per_rank=8"}),
       {},
       "fulcrum train: parallel.max_tokens_per_rank = 8 (set at --set) x 4 ranks holds fewer"},
      {"hybrid over NCCL",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set", "dist.backend=nccl",
              "--set", "train.device=cuda"}),
       {},
       "fulcrum train: parallel.mode: hybrid exchanges K/V point-to-point over Gloo only"},
      {"hybrid profile file missing",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "balancer.schedule.profile=" + dir.file("absent_profile.yaml")}),
       {},
       "fulcrum train: balancer.schedule.profile (set at --set): cost profile file"},
      {"hybrid scheduler unknown",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "balancer.schedule.strategy=zigzag"}),
       {},
       "fulcrum train: balancer.schedule.strategy = 'zigzag' is not a scheduler of"},
      {"hybrid world beyond 2^20",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "parallel.world_size=99999999999"}),
       {},
       "parallel.world_size must be an integer in [0, 1048576]"},
      {"hybrid T beyond 2^31",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "parallel.max_tokens_per_rank=4611686018427387904"}),
       {},
       "parallel.max_tokens_per_rank must be an integer in [0, 2147483648]"},
      {"hybrid over a dp x cp beyond 2^20",
       train({"--config", config, "--set", "parallel.mode=hybrid", "--set",
              "parallel.dp_size=1000000", "--set", "parallel.cp_size=2"}),
       {},
       "fulcrum train: parallel.mode: hybrid over 2000000 ranks is more than the 2^20"},
      {"parallel.mode unknown",
       train({"--config", config, "--set", "parallel.mode=pooled"}),
       {},
       "parallel.mode"},

      {"no --config", train({}), {}, "--config is required"},
      {"missing config file", train({"--config", dir.file("absent.yaml")}), {}, "absent.yaml"},
      {"config is a directory", train({"--config", dir.file("")}), {}, "fulcrum train"},
      {"config not YAML",
       train({"--config", dir.write("bad.yaml", "parallel: [1, 2\n")}),
       {},
       "bad.yaml"},
      {"unknown flag", train({"--config", config, "--steps", "3"}), {}, "--steps"},
      {"stray argument", train({"--config", config, "extra"}), {}, "too many positional options"},
      {"--set without '='", train({"--config", config, "--set", "train.steps"}), {}, "train.steps"},
      {"--set unknown key",
       train({"--config", config, "--set", "dist.op_timeout=3"}),
       {},
       "dist.op_timeout_s"},
      {"--set timeout not a number",
       train({"--config", config, "--set", "dist.timeout_s=soon"}),
       {},
       "dist.timeout_s"},
      {"--set timeout zero",
       train({"--config", config, "--set", "dist.op_timeout_s=0"}),
       {},
       "dist.op_timeout_s"},
      {"--set plan_consensus not a bool",
       train({"--config", config, "--set", "dist.plan_consensus=maybe"}),
       {},
       "dist.plan_consensus"},
      {"--set master_port too large",
       train({"--config", config, "--set", "dist.master_port=70000"}),
       {},
       "dist.master_port"},
      // Paths the run writes or reads at its end or on every rank: checked
      // by the launcher before it starts anything.
      {"--save-params in a missing directory",
       train({"--config", config, "--save-params", dir.file("no/dir/p.bin")}),
       {},
       "fulcrum train: cannot write --save-params " + dir.file("no/dir/p.bin") + ": directory " +
           dir.file("no/dir") + " does not exist"},
      {"--save-params is a directory",
       train({"--config", config, "--save-params", dir.file("")}),
       {},
       "is a directory"},
      {"--metrics in a missing directory",
       train({"--config", config, "--metrics", dir.file("no/m.jsonl")}),
       {},
       "cannot write --metrics"},
      {"--resume missing file",
       train({"--config", config, "--resume", dir.file("absent.ckpt")}),
       {},
       "checkpoint (train.resume) " + dir.file("absent.ckpt") + " does not exist"},
      {"--resume without value", train({"--config", config, "--resume"}), {}, "--resume"},
      {"train.resume a directory",
       train({"--config", config, "--set", "train.resume=" + dir.file("")}),
       {},
       "is not a regular file"},
      {"train.checkpoint_dir under a file",
       train({"--config", config, "--set", "train.checkpoint_every=1", "--set",
              "train.checkpoint_dir=" + config + "/ckpt"}),
       {},
       "train.checkpoint_dir"},
      // Sizes no host holds: refused by the memory bound, not by
      // std::bad_alloc in every worker or hours of swapping.
      {"data.seq_length beyond any host",
       train({"--config", config, "--set", "data.seq_length=100000000000"}),
       {},
       "fulcrum train: the job needs at least"},
      {"data.num_samples beyond any host",
       train({"--config", config, "--set", "data.num_samples=100000000000"}),
       {},
       "sample index"},
  };
  expect_refused(cases, marker);
  expect_no_orphans(marker);
}

// An empty --nproc (an unset shell variable, say) is refused, not read as
// "not given".
TEST(BadInput, TrainEmptyNprocIsRefused) {
  TempDir dir;
  const std::string marker = new_marker();
  expect_refused(
      {{"--nproc empty",
        {FULCRUM_BIN, "train", "--config", dir.write("job.yaml", kConfig), "--nproc", ""},
        {},
        "--nproc must be"}},
      marker);
  expect_no_orphans(marker);
}

// GLOO_SOCKET_IFNAME passes through fulcrum train to its workers: the
// launcher refuses an interface this host lacks before starting any, and a
// worker started by another launcher refuses it before the rendezvous, so no
// rank waits there for one that refused.
TEST(BadInput, NetworkSettingsAreRefusedBeforeTheRendezvous) {
  TempDir dir;
  const std::string config = dir.write("job.yaml", kConfig);
  const std::string marker = new_marker();
  const std::string bogus = "GLOO_SOCKET_IFNAME=fulcrum-bogus0";
  const std::string expected =
      "GLOO_SOCKET_IFNAME='fulcrum-bogus0' is not a network interface of this host; this host "
      "has lo";
  expect_refused({{"fulcrum train", {FULCRUM_BIN, "train", "--config", config}, {bogus}, expected},
                  {"a worker of a 4-rank job",
                   {FULCRUM_WORKER, "--config", config},
                   {bogus, "RANK=1", "WORLD_SIZE=4"},
                   expected},
                  // Not an interface but the same kind of mistake: an address
                  // no resolver knows, said at once, not after dist.timeout_s.
                  {"MASTER_ADDR that does not resolve",
                   {FULCRUM_WORKER, "--config", config},
                   {"MASTER_ADDR=fulcrum-no-such-host.invalid", "RANK=1", "WORLD_SIZE=4"},
                   "MASTER_ADDR='fulcrum-no-such-host.invalid' does not resolve on rank 1 of 4"}},
                 marker);
  expect_no_orphans(marker);
}

// Data and lengths files: fulcrum train opens the data as the workers would,
// before any of them starts. The job ends with exit 2 and one line.
TEST(BadInput, DataFilesEndTheJobWithOneCauseLine) {
  TempDir dir;
  const std::string config = dir.write("job.yaml", kConfig);
  const std::string marker = new_marker();
  const std::string object_line = dir.write("object.jsonl", "[1, 2, 3]\n{\"tokens\": [4]}\n");
  const std::string empty = dir.write("empty.jsonl", "\n");
  const std::string not_json = dir.write("lengths.txt", "12\nabc\n");
  const std::string negative = dir.write("negative.json", "[5, -5]\n");
  dir.write("garbage.idx", "garbagegarbagegarbage");
  dir.write("garbage.bin", "zz");
  struct Case {
    std::string name;
    std::vector<std::string> sets;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"JSONL line not a list",
       {"data.source=jsonl", "data.path=" + object_line},
       object_line + ":2: found a JSON object, expected a list of token ids"},
      {"JSONL without tokens",
       {"data.source=jsonl", "data.path=" + empty},
       "has no sample with at least one token"},
      {"JSONL path a directory",
       {"data.source=jsonl", "data.path=" + dir.file("")},
       "is a directory, not a file; data.path must name the JSONL token file"},
      {"lengths file not JSON",
       {"data.source=synthetic", "data.path=" + not_json},
       not_json + ": byte 4: invalid JSON"},
      {"lengths file with a negative length",
       {"data.source=synthetic", "data.path=" + negative},
       negative + ":"},
      {"Megatron prefix missing",
       {"data.source=megatron", "data.path=" + dir.file("absent")},
       dir.file("absent") + ".idx does not exist"},
      {"Megatron .idx not an index",
       {"data.source=megatron", "data.path=" + dir.file("garbage")},
       dir.file("garbage") + ".idx: byte offset 0: expected the magic"},
  };
  std::vector<Child> children;
  for (const Case& c : cases) {
    std::vector<std::string> argv = {FULCRUM_BIN, "train", "--config", config};
    for (const std::string& set : c.sets) argv.insert(argv.end(), {"--set", set});
    children.push_back({argv, {}});
  }
  const std::vector<ChildResult> results = run_in_pairs(std::move(children), marker, seconds(60));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const ChildResult& r = results[i];
    EXPECT_FALSE(r.timed_out) << c.name;
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r;
    EXPECT_FALSE(contains(r.out, "step 1/")) << c.name << ": " << r;
    const std::vector<std::string> lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << c.name << ": one line, before any worker: " << r;
    EXPECT_EQ(lines[0].rfind("fulcrum train: data.path", 0), 0u) << c.name << ": " << r;
    EXPECT_TRUE(contains(lines[0], c.expected)) << c.name << ": " << r;
    for (const char* crash : {"terminate called", "what()", "Segmentation", "Aborted"}) {
      EXPECT_FALSE(contains(r.err, crash)) << c.name << ": " << r;
    }
    std::printf("[ refused ] %-34s %s\n", c.name.c_str(), lines[0].c_str());
  }
  expect_no_orphans(marker);
}

TEST(BadInput, TrainReplacesTheLaunchVariablesItInherits) {
  // `fulcrum train` is the launcher: garbage in the variables it sets for
  // its workers (a shell left over from another job) is replaced, not read.
  TempDir dir;
  const std::string config = dir.write("one.yaml",
                                       "balancer: {plugin: builtin}\n"
                                       "data: {num_samples: 8, max_length: 40, seq_length: 32}\n"
                                       "model: {hidden_size: 8, num_layers: 1, num_heads: 2, "
                                       "vocab_size: 32}\ntrain: {steps: 1}\n");
  const std::string marker = new_marker();
  const ChildResult r =
      run_one({FULCRUM_BIN, "train", "--config", config}, seconds(60),
              {"RANK=abc", "WORLD_SIZE=-1", "LOCAL_RANK=x", "MASTER_ADDR=", "MASTER_PORT=http",
               std::string(kMarkerVariable) + "=" + marker});
  EXPECT_EQ(r.exit_code, 0) << r;
  expect_no_orphans(marker);
}

}  // namespace
