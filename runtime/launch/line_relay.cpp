#include "launch/line_relay.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fulcrum::launch {
namespace {

// A line longer than this without a newline is relayed in pieces, so a worker
// printing a progress bar or binary data cannot grow the launcher's memory
// without bound.
constexpr std::size_t kMaxLineBytes = 1 << 20;

}  // namespace

void LineRelay::emit(int rank, OutputStream stream, std::string_view line) {
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

void LineRelay::pump(int rank, OutputStream stream, OutputChannel& channel) {
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

std::vector<int> LineRelay::same_error_as(int rank) const {
  const auto own = error_of_.find(rank);
  if (own == error_of_.end()) return {};
  std::vector<int> ranks;
  for (const auto& [other, text] : error_of_) {
    if (other != rank && text == own->second) ranks.push_back(other);
  }
  return ranks;
}

bool LineRelay::repeats_an_error(int rank, std::string_view line) {
  const std::string prefix = "fulcrum-worker: rank " + std::to_string(rank) + ": ";
  if (line.substr(0, prefix.size()) != prefix) return false;
  std::string what(line.substr(prefix.size()));
  const bool seen = std::any_of(error_of_.begin(), error_of_.end(), [&](const auto& entry) {
    return entry.first != rank && entry.second == what;
  });
  error_of_.emplace(rank, std::move(what));  // a rank's first error line is its error
  return seen;
}

}  // namespace fulcrum::launch
