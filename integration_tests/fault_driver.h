// The driver of the fault and bad-input tests (fault_test.cpp,
// bad_input_test.cpp): children run under a deadline with a per-run marker
// variable, so a test can fail but never hang, and can find (and clean up)
// any process its run left behind by scanning /proc; and the small job
// (DP 2 x CP 2) the fault scenarios train.
#pragma once

#include <chrono>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "harness.h"

namespace fulcrum::it {

inline constexpr const char* kMarkerVariable = "FULCRUM_TEST_RUN_ID";

// A marker no other run of this binary (or another test binary) uses.
std::string new_marker();

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

std::ostream& operator<<(std::ostream& o, const ChildResult& r);

// Starts every child in one new process group (so a deadline kill reaches
// them all, and nothing else), relays nothing, and waits for all of them.
// Past `deadline` the group gets SIGTERM, 3 s later SIGKILL.
std::vector<ChildResult> run_all(const std::vector<Child>& children, std::chrono::seconds deadline);

ChildResult run_one(const std::vector<std::string>& argv, std::chrono::seconds deadline,
                    const std::vector<std::string>& env = {});

// No process of the run survives it. PR_SET_PDEATHSIG and the launcher's own
// teardown act within milliseconds; 3 s of grace covers a loaded machine.
// Anything still there is reported and killed, so one failure does not
// leak into the next test.
void expect_no_orphans(const std::string& marker);

// A TCP port on 127.0.0.1 that was free a moment ago (0 if none).
int free_port();

// DP 2 x CP 2, packed rows of a few documents, a model small enough that a
// step takes milliseconds: a fault's cost is then all timeout and teardown.
// Short deadlines (rendezvous 5 s, 3 s where a test waits for it;
// collectives 3 s) keep the tests fast.
inline constexpr double kOpTimeoutS = 3;
inline constexpr double kRendezvousTimeoutS = 3;
inline constexpr const char* kConfig = R"(
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

struct FaultJob {
  TempDir dir;
  std::string config = dir.write("job.yaml", kConfig);
  std::string marker = new_marker();

  // `extra` and the run's marker.
  std::vector<std::string> env(std::vector<std::string> extra) const;
  // `fulcrum train` with the job's config.
  ChildResult train(const std::vector<std::string>& extra_env,
                    const std::vector<std::string>& sets = {}) const;
  // The four ranks started directly, as torchrun would: each rank's own
  // output and exit code, with no launcher to stop the others early.
  std::vector<ChildResult> ranks(const std::vector<std::string>& extra_env) const;
};

bool contains(const std::string& text, const std::string& what);

std::vector<std::string> lines_of(const std::string& text);

// The launcher's verdict is its last stderr line.
std::string last_line(const std::string& text);

}  // namespace fulcrum::it
