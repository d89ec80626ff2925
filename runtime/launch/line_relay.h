// The workers' output (internal to fulcrum_launch): read without blocking,
// relayed line by line with a "[rank N] " prefix (or to on_line), long
// lines in pieces, and an error line every rank shares relayed once.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "launch/launch.h"
#include "launch/unique_fd.h"

namespace fulcrum::launch {

struct OutputChannel {
  UniqueFd fd;
  std::string partial;  // bytes after the last newline
};

class LineRelay {
 public:
  explicit LineRelay(const LaunchOptions& options) : options_(options) {}

  // One line of worker `rank`, to on_line or prefixed to our own stream.
  void emit(int rank, OutputStream stream, std::string_view line);

  // Reads what is available without blocking; relays complete lines. Closes
  // the channel at end of file, relaying a final unterminated line.
  void pump(int rank, OutputStream stream, OutputChannel& channel);

  // The other ranks whose error line (below) was the same as `rank`'s, in
  // rank order; empty when `rank` printed none or nobody shared it.
  std::vector<int> same_error_as(int rank) const;

 private:
  // A worker's error line is "fulcrum-worker: rank N: what". When every rank
  // refuses the same input (a data file, a checkpoint) they all print the
  // same "what": it is relayed once, by the first rank, and the launcher's
  // summary names the others instead of repeating the line per rank.
  bool repeats_an_error(int rank, std::string_view line);

  const LaunchOptions& options_;
  std::map<int, std::string> error_of_;
};

}  // namespace fulcrum::launch
