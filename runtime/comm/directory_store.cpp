#include "comm/directory_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

namespace fulcrum::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Longest file name a key may become; longer names fail on most file systems.
constexpr std::size_t kMaxNameBytes = 240;

std::string errno_text(int err) { return std::strerror(err); }

// "k" + the key with every byte outside [A-Za-z0-9_.-] written as %XX, so
// that any key (PrefixStore's, with '/') is one file name and none starts
// with the '.' of temporary files.
std::string file_name(const std::string& key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = "k";
  for (const unsigned char c : key) {
    if (std::isalnum(c) != 0 || c == '_' || c == '.' || c == '-') {
      name.push_back(static_cast<char>(c));
    } else {
      name.push_back('%');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 15]);
    }
  }
  if (name.size() > kMaxNameBytes) {
    throw std::invalid_argument("store key '" + key.substr(0, 64) + "...' is too long (" +
                                std::to_string(key.size()) + " bytes) for a directory store");
  }
  return name;
}

// Every mutation of a counter or a compared value holds both: the flock keeps
// other processes out, the mutex other threads of this one (an flock is
// shared by every thread that uses the same open directory).
class StoreLock {
 public:
  StoreLock(int dir_fd, std::mutex& mutex) : guard_(mutex), dir_fd_(dir_fd) {
    while (::flock(dir_fd_, LOCK_EX) != 0) {
      if (errno != EINTR) throw std::runtime_error("cannot lock the store: " + errno_text(errno));
    }
  }
  ~StoreLock() { ::flock(dir_fd_, LOCK_UN); }
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;

 private:
  std::lock_guard<std::mutex> guard_;
  int dir_fd_;
};

std::mutex& store_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::optional<std::vector<std::uint8_t>> read_value(int dir_fd, const std::string& name) {
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw std::runtime_error("cannot open store value " + name + ": " + errno_text(errno));
  }
  std::vector<std::uint8_t> value;
  std::uint8_t buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw std::runtime_error("cannot read store value " + name + ": " + errno_text(err));
    }
    value.insert(value.end(), buffer, buffer + n);
  }
  ::close(fd);
  return value;
}

void write_value(int dir_fd, const std::string& name, const std::vector<std::uint8_t>& value) {
  static std::atomic<std::uint64_t> counter{0};
  const std::string temp =
      ".t-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  const int fd =
      ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create a store value: " + errno_text(errno));
  std::size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlinkat(dir_fd, temp.c_str(), 0);
      throw std::runtime_error("cannot write a store value: " + errno_text(err));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir_fd, temp.c_str(), 0);
    throw std::runtime_error("cannot publish a store value: " + errno_text(err));
  }
}

std::vector<std::uint8_t> as_bytes(const std::string& text) {
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

}  // namespace

namespace {

// The owner and mode rule, on what lstat or fstat said of `dir`.
Status check_private(const struct stat& st, const std::string& dir, const std::string& what) {
  if (!S_ISDIR(st.st_mode)) {
    return invalid_argument(what + " " + dir +
                            " is not a directory (a link or a file); the launcher that started "
                            "this rank creates a directory of its own");
  }
  if (st.st_uid != ::geteuid()) {
    return invalid_argument(what + " " + dir + " is owned by uid " + std::to_string(st.st_uid) +
                            ", not by this user (uid " + std::to_string(::geteuid()) +
                            "): another user could read or forge the job's rendezvous; start "
                            "the job again");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return invalid_argument(what + " " + dir + " has mode " + mode +
                            ": other users can reach it; it must be 0700");
  }
  return Status::ok();
}

}  // namespace

Status check_private_directory(const std::string& dir, const std::string& what) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return invalid_argument(what + " " + dir + " cannot be examined (" + errno_text(errno) +
                            "); the launcher that started this rank creates it");
  }
  return check_private(st, dir, what);
}

Result<c10::intrusive_ptr<DirectoryStore>> DirectoryStore::open(const std::string& dir,
                                                                std::chrono::milliseconds timeout) {
  const std::string what = std::string("rendezvous directory (") + kRendezvousDirVariable + ")";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return invalid_argument(what + " " + dir + " cannot be opened (" + errno_text(errno) +
                            "); the launcher that started this rank creates it");
  }
  // Checked on the descriptor every later call uses: a directory swapped in
  // after the check is never reached.
  struct stat st {};
  Status checked =
      ::fstat(fd, &st) == 0
          ? check_private(st, dir, what)
          : invalid_argument(what + " " + dir + " cannot be examined (" + errno_text(errno) + ")");
  if (!checked) {
    ::close(fd);
    return checked;
  }
  return c10::make_intrusive<DirectoryStore>(fd, dir, timeout);
}

DirectoryStore::DirectoryStore(int dir_fd, std::string path, std::chrono::milliseconds timeout)
    : c10d::Store(timeout), path_(std::move(path)), dir_fd_(dir_fd) {}

c10::intrusive_ptr<c10d::Store> DirectoryStore::clone() {
  // A descriptor of its own, reopened through this one: the directory
  // checked at open(), never a path looked up again.
  const int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot reopen the store: " + errno_text(errno));
  try {
    return c10::make_intrusive<DirectoryStore>(fd, path_, timeout_);
  } catch (...) {
    ::close(fd);  // the store that would have owned it was never made
    throw;
  }
}

DirectoryStore::~DirectoryStore() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void DirectoryStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  write_value(dir_fd_, file_name(key), value);
}

std::vector<std::uint8_t> DirectoryStore::get(const std::string& key) {
  wait({key});
  std::optional<std::vector<std::uint8_t>> value = read_value(dir_fd_, file_name(key));
  if (!value) throw std::runtime_error("store key '" + key + "' was deleted while being read");
  return std::move(*value);
}

std::int64_t DirectoryStore::add(const std::string& key, std::int64_t value) {
  const std::string name = file_name(key);
  StoreLock lock(dir_fd_, store_mutex());
  std::int64_t current = 0;
  if (std::optional<std::vector<std::uint8_t>> old = read_value(dir_fd_, name)) {
    const std::string text(old->begin(), old->end());
    try {
      current = std::stoll(text);
    } catch (const std::exception&) {
      throw std::runtime_error("store key '" + key + "' does not hold a counter");
    }
  }
  current += value;
  write_value(dir_fd_, name, as_bytes(std::to_string(current)));
  return current;
}

std::vector<std::uint8_t> DirectoryStore::compareSet(const std::string& key,
                                                     const std::vector<std::uint8_t>& expected,
                                                     const std::vector<std::uint8_t>& desired) {
  const std::string name = file_name(key);
  StoreLock lock(dir_fd_, store_mutex());
  std::optional<std::vector<std::uint8_t>> current = read_value(dir_fd_, name);
  // As c10d's stores: an absent key is set only when nothing was expected.
  if (!current) {
    if (!expected.empty()) return expected;
    write_value(dir_fd_, name, desired);
    return desired;
  }
  if (*current != expected) return *current;
  write_value(dir_fd_, name, desired);
  return desired;
}

bool DirectoryStore::deleteKey(const std::string& key) {
  return ::unlinkat(dir_fd_, file_name(key).c_str(), 0) == 0;
}

bool DirectoryStore::check(const std::vector<std::string>& keys) {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& key) {
    struct stat st {};
    return ::fstatat(dir_fd_, file_name(key).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  });
}

std::int64_t DirectoryStore::getNumKeys() {
  const int fd = ::openat(dir_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot list the store: " + errno_text(errno));
  DIR* listing = ::fdopendir(fd);
  if (listing == nullptr) {
    ::close(fd);
    throw std::runtime_error("cannot list the store: " + errno_text(errno));
  }
  std::int64_t count = 0;
  while (const dirent* entry = ::readdir(listing)) {
    if (entry->d_name[0] == 'k') ++count;
  }
  ::closedir(listing);
  return count;
}

void DirectoryStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void DirectoryStore::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  const bool forever = timeout == kNoTimeout;
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!check(keys)) {
    if (!forever && Clock::now() >= deadline) {
      std::string names;
      for (const std::string& key : keys) names += (names.empty() ? "'" : ", '") + key + "'";
      throw std::runtime_error("timed out after " + std::to_string(timeout.count()) +
                               " ms waiting for " + names + " in the rendezvous directory " +
                               path_);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace fulcrum::comm
