// The failures a training worker classifies for its exit code (run_worker in
// trainer.cpp maps them: 2 for bad input, 1 for a failed run).
#pragma once

#include <stdexcept>

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

}  // namespace fulcrum::train
