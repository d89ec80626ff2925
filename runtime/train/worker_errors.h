// The failures a training worker classifies for its exit code (run_worker in
// trainer.cpp maps them: 2 for bad input, 1 for a failed run).
#pragma once

#include <stdexcept>
#include <string>

namespace fulcrum::train {

// Bad input found while training (a token outside the vocabulary, ranks that
// resumed from different checkpoints): exit 2, like a configuration error,
// not 1 like a crash.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writing a checkpoint or the metrics failed (disk full, permissions
// changed): exit 1, as a runtime failure, with the writer's own message
// rather than "internal error".
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The loss stopped being a number: exit 1, a failure of the run rather than
// of its input, with the step and the rank.
class NumericError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// SIGINT or SIGTERM reached a rank while train.checkpoint_dir was set: every
// rank stopped at the same step boundary, after rank 0 wrote the checkpoint.
// Exit 128 + the signal, as a shell reports a process the signal ended; the
// message (rank 0's only; the others stay quiet) says where the checkpoint is.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, const std::string& message)
      : std::runtime_error(message), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace fulcrum::train
