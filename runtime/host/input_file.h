// Opening a file the user named for reading, and the shape checks its reader
// cannot do itself. Every reader of a user's file (config, lengths lists,
// JSONL and .idx/.bin data, checkpoints, plugins) opens it here, so that a
// FIFO, a device, a directory, a socket or a /proc file named where a file is
// expected is refused in one line instead of blocking in open(2), reading
// forever or faulting in mmap. Header-only and LibTorch-free: the host, the
// data readers, the checkpoint code and the CLI all include it.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "fulcrum/status.h"

namespace fulcrum::host {

// An open, readable regular file; closed with its owner.
class InputFile {
 public:
  InputFile() = default;
  InputFile(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile(InputFile&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), size_(std::exchange(other.size_, 0)) {}
  InputFile& operator=(InputFile&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~InputFile() { reset(); }

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  // Hands the descriptor to the caller, who closes it.
  int release() { return std::exchange(fd_, -1); }

 private:
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// How a reader names what it was given: `what` is the flag or key with the
// path ("--doc-lengths-file 'x.json'"), `fix` says what to give instead.
struct InputFileRules {
  std::string_view what;
  std::string_view fix;
  std::uint64_t max_bytes = UINT64_MAX;
};

namespace input_file_detail {

inline std::string refusal(const InputFileRules& rules, std::string_view reason) {
  return std::string(rules.what) + " " + std::string(reason) + "; " + std::string(rules.fix);
}

inline const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory, not a file";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe), not a file";
  if (S_ISCHR(mode)) return "is a character device, not a file";
  if (S_ISBLK(mode)) return "is a block device, not a file";
  if (S_ISSOCK(mode)) return "is a socket, not a file";
  return "is not a regular file";
}

}  // namespace input_file_detail

// Opens `path` for reading when it is a regular file of at most
// rules.max_bytes outside /proc and /sys. The open itself never blocks:
// O_NONBLOCK keeps a FIFO without a writer from waiting, and the type is
// checked on the descriptor, so a path swapped after a stat cannot slip by.
// Absent files are kNotFound; everything else is kInvalidArgument.
inline Result<InputFile> open_input_file(const std::string& path, const InputFileRules& rules) {
  using input_file_detail::refusal;
  if (path.empty()) return invalid_argument(refusal(rules, "is an empty path"));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    switch (err) {
      case ENOENT:
        return not_found(refusal(rules, "does not exist"));
      case ELOOP:
        return invalid_argument(refusal(rules, "is a symbolic link loop"));
      case ENOTDIR:
        return invalid_argument(
            refusal(rules, "cannot be reached: a component of the path is not a directory"));
      case ENAMETOOLONG:
        return invalid_argument(refusal(rules, "is too long a path"));
      default: {
        // A socket cannot be opened at all (ENXIO): name what it is.
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
          return invalid_argument(refusal(rules, input_file_detail::kind_of(st.st_mode)));
        }
        return invalid_argument(
            refusal(rules, std::string("cannot be opened (") + std::strerror(err) + ")"));
      }
    }
  }
  InputFile file(fd, 0);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return invalid_argument(
        refusal(rules, std::string("cannot be examined (") + std::strerror(errno) + ")"));
  }
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument(refusal(rules, input_file_detail::kind_of(st.st_mode)));
  }
  // Files of these file systems report size 0 and are generated as they are
  // read: none of them is a config, a dataset or a plugin.
  constexpr long kProcMagic = 0x9fa0;
  constexpr long kSysfsMagic = 0x62656572;
  struct statfs file_system {};
  if (::fstatfs(fd, &file_system) == 0 && (static_cast<long>(file_system.f_type) == kProcMagic ||
                                           static_cast<long>(file_system.f_type) == kSysfsMagic)) {
    return invalid_argument(refusal(rules, "is a /proc or /sys file, not a file of data"));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > rules.max_bytes) {
    return invalid_argument(refusal(rules, "holds " + std::to_string(size) +
                                               " bytes, more than the " +
                                               std::to_string(rules.max_bytes) + " allowed"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return InputFile(file.release(), size);
}

// The whole of a regular file, at most rules.max_bytes (a file that grows
// while it is read is cut off there and refused).
inline Result<std::string> read_input_file(const std::string& path, const InputFileRules& rules) {
  Result<InputFile> opened = open_input_file(path, rules);
  if (!opened) return opened.status();
  InputFile file = std::move(opened).value();
  std::string text;
  text.reserve(static_cast<std::size_t>(file.size()));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(file.fd(), buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return invalid_argument(input_file_detail::refusal(
          rules, std::string("could not be read (") + std::strerror(errno) + ")"));
    }
    if (text.size() + static_cast<std::size_t>(n) > rules.max_bytes) {
      return invalid_argument(input_file_detail::refusal(
          rules, "grew past the " + std::to_string(rules.max_bytes) + " bytes allowed"));
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

// Bytes a JSON text must not hold that the parser would let through: it
// takes a NUL byte for the end of the input (dropping all that follows) and
// skips a UTF-8 byte order mark, which JSON (RFC 8259) forbids. Returns what
// is wrong, "" when nothing is.
inline std::string json_text_refusal(std::string_view text) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") {
    return "starts with a UTF-8 byte order mark (bytes EF BB BF); save it without one";
  }
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return "holds a NUL byte at byte " + std::to_string(nul) + ", so it is not JSON text";
  }
  return "";
}

// The deepest nesting of [ and { in JSON text (outside strings), stopping at
// the first byte that goes past `max_depth`: its offset is returned in
// `at`. Readers refuse deep text before a parser or a recursive dump sees it.
inline bool json_nesting_within(std::string_view text, int max_depth, std::size_t& at) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        at = i;
        return false;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

// A file that can vanish or fail in the middle of a read, such as
// /proc/PID/stat of a process that is exiting (read(2) then fails with
// ESRCH), or a report another process is writing. Read with read(2) and
// errno, never a stream: libstdc++ can throw from inside getline when the
// underlying read fails. nullopt means "could not be read" (the process is
// gone, the file was removed, it is not readable): an answer, not an error.
// The text is cut off after max_bytes.
inline std::optional<std::string> read_transient_fd(int fd, std::size_t max_bytes,
                                                    int* error = nullptr) {
  std::string text;
  char buffer[4096];
  while (text.size() < max_bytes) {
    const std::size_t want = std::min(sizeof buffer, max_bytes - text.size());
    const ssize_t n = ::read(fd, buffer, want);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (error != nullptr) *error = errno;
      return std::nullopt;
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

inline std::optional<std::string> read_transient_file(const std::string& path,
                                                      std::size_t max_bytes, int* error = nullptr) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (error != nullptr) *error = errno;
    return std::nullopt;
  }
  std::optional<std::string> text = read_transient_fd(fd, max_bytes, error);
  ::close(fd);
  return text;
}

}  // namespace fulcrum::host
