// Checkpoint files on disk: their names, the directory's listing, atomic
// writes, keeping the newest, and choosing the newest intact one to resume
// from. The bytes inside are checkpoint.cpp's.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "host/input_file.h"
#include "host/trusted_directory.h"
#include "train/checkpoint.h"

namespace fulcrum::train {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFilePrefix = "step-";
constexpr std::string_view kFileSuffix = ".ckpt";
constexpr std::string_view kTempSuffix = ".tmp";

// An owned POSIX file descriptor, closed exactly once. close() is checked on
// the success path (it can report a failed write-back, e.g. on NFS); the
// destructor only releases on error paths, where a second error adds nothing.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd);
  }

 private:
  int fd_;
};

std::string errno_text() { return std::strerror(errno); }

Status write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return invalid_argument("cannot write " + path + ": " + errno_text() +
                              "; free space or choose another train.checkpoint_dir");
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::ok();
}

}  // namespace

std::string checkpoint_file_name(std::int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%08lld", static_cast<long long>(step));
  return std::string(kFilePrefix) + digits + std::string(kFileSuffix);
}

std::optional<std::int64_t> checkpoint_step_of(std::string_view file_name) {
  if (!file_name.starts_with(kFilePrefix) || !file_name.ends_with(kFileSuffix)) return {};
  const std::string_view digits = file_name.substr(
      kFilePrefix.size(), file_name.size() - kFilePrefix.size() - kFileSuffix.size());
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return {};
  }
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return {};
  return step;
}

Result<std::vector<CheckpointFile>> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointFile> files;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (std::optional<std::int64_t> step = checkpoint_step_of(file)) {
      files.push_back({*step, it->path().string()});
    }
  }
  if (ec) {
    return invalid_argument("cannot list checkpoint directory " + dir + ": " + ec.message() +
                            "; check train.checkpoint_dir and its permissions");
  }
  std::sort(files.begin(), files.end(),
            [](const CheckpointFile& a, const CheckpointFile& b) { return a.step > b.step; });
  return files;
}

// Every checkpoint a job resumes from is one this user (or root) wrote,
// reached by a name this user or root made: a link another user owns
// chose which of this user's files is read (another run's, say).
Status check_checkpoint_owner(int fd, const std::string& path) {
  struct stat ls {};
  struct stat st {};
  const bool named = ::lstat(path.c_str(), &ls) == 0;
  const bool opened = ::fstat(fd, &st) == 0;
  // The name is examined after the open: where it is no longer a link or the
  // file that was opened (a planted link swapped away in between), refuse.
  if (!named ||
      (opened && !S_ISLNK(ls.st_mode) && (ls.st_dev != st.st_dev || ls.st_ino != st.st_ino))) {
    return invalid_argument("checkpoint " + path +
                            " changed while it was opened (another process replaced or removed "
                            "it); resume again once nothing else writes there");
  }
  if (S_ISLNK(ls.st_mode) && !host::trusted_owner(ls.st_uid)) {
    return invalid_argument("checkpoint " + path + " is a symbolic link owned by uid " +
                            std::to_string(ls.st_uid) + ", neither root nor this user (uid " +
                            std::to_string(::geteuid()) +
                            "), who may have planted it; resume from a checkpoint you wrote, "
                            "by its own name or a link you made");
  }
  if (!opened || host::trusted_owner(st.st_uid)) return Status::ok();
  return invalid_argument("checkpoint " + path + " is owned by uid " + std::to_string(st.st_uid) +
                          ", neither root nor this user (uid " + std::to_string(::geteuid()) +
                          "), who may have planted it; resume from a checkpoint you wrote, or "
                          "copy this one yourself once you trust it");
}

namespace {

// How many bytes of the open checkpoint `fd` to read: its header and the
// payload that header promises, and one more (a file that grew while it was
// read is then refused as too long); a header that does not match the
// file's length is refused here, before anything else is read.
Result<std::uint64_t> checkpoint_read_limit(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return invalid_argument("cannot examine checkpoint " + path + ": " + errno_text());
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  char head[kCheckpointHeaderSize] = {};
  if (size < kCheckpointHeaderSize ||
      ::pread(fd, head, sizeof head, 0) != static_cast<ssize_t>(sizeof head)) {
    return std::uint64_t{kCheckpointHeaderSize};  // short: decode_checkpoint names it
  }
  Result<CheckpointHeader> header =
      decode_checkpoint_header(std::string_view(head, sizeof head), size, path);
  if (!header) return header.status();
  return kCheckpointHeaderSize + header->payload_size + 1;
}

}  // namespace

Result<Checkpoint> read_checkpoint(const std::string& path) {
  Result<host::InputFile> opened = host::open_input_file(
      path, {"checkpoint " + path,
             "give a checkpoint file written by fulcrum train, or train.resume: auto"});
  if (!opened) return opened.status();
  Fd fd(std::move(opened).value().release());
  if (Status s = check_checkpoint_owner(fd.get(), path); !s) return s;
  // The magic first: a large file of something else (a sparse file of
  // zeros named like a checkpoint) is refused without reading it all.
  char magic[sizeof kCheckpointMagic - 1] = {};
  const ssize_t got = ::pread(fd.get(), magic, sizeof magic, 0);
  if (got == static_cast<ssize_t>(sizeof magic) &&
      std::memcmp(magic, kCheckpointMagic, sizeof magic) != 0) {
    return invalid_argument("checkpoint " + path +
                            " is not a fulcrum checkpoint (it does not start with '" +
                            std::string(kCheckpointMagic) + "')");
  }
  // Then the header against the file's length: a file longer than its
  // payload (a sparse tail of gigabytes) is refused before it is read.
  Result<std::uint64_t> limit = checkpoint_read_limit(fd.get(), path);
  if (!limit) return limit.status();
  std::string bytes;
  char buffer[1 << 16];
  while (bytes.size() < *limit) {
    const std::size_t want = std::min<std::uint64_t>(sizeof(buffer), *limit - bytes.size());
    const ssize_t n = ::read(fd.get(), buffer, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return invalid_argument("cannot read checkpoint " + path + ": " + errno_text());
    if (n == 0) break;
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  Result<Checkpoint> c = decode_checkpoint(bytes, path);
  if (!c) return c;
  const std::optional<std::int64_t> named = checkpoint_step_of(fs::path(path).filename().string());
  if (named && *named != c->header.step) {
    return invalid_argument("checkpoint " + path + " holds step " + std::to_string(c->header.step) +
                            " but its name says step " + std::to_string(*named) +
                            "; it was renamed or copied over another");
  }
  return c;
}

Status write_file_atomically(const std::string& path, std::string_view bytes) {
  // The null device (--save-params /dev/null, to discard the parameters) is
  // written as it is: the rename below would put a regular file in its
  // place, for every process on the host when this user is root.
  struct stat named {};
  struct stat null_device {};
  if (::stat(path.c_str(), &named) == 0 && S_ISCHR(named.st_mode) &&
      ::stat("/dev/null", &null_device) == 0 && S_ISCHR(null_device.st_mode) &&
      named.st_rdev == null_device.st_rdev) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY));
    if (!fd.valid()) return invalid_argument("cannot open " + path + ": " + errno_text());
    return write_all(fd.get(), bytes, path);
  }
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string temp =
      (dir / ("." + target.filename().string() + std::string(kTempSuffix))).string();
  // On any failure below the temporary file must not stay behind.
  struct Unlink {
    const std::string& path;
    bool armed = true;
    ~Unlink() {
      if (armed) ::unlink(path.c_str());
    }
  } cleanup{temp};

  // Whatever holds the temporary name (a crashed writer's file, or a link
  // another user who can write here planted to have this job overwrite the
  // file it names) is removed, never opened; a new file is created in its
  // place, and if something took the name again meanwhile, the open fails.
  if (::unlink(temp.c_str()) != 0 && errno != ENOENT) {
    return invalid_argument("cannot remove " + temp + ", left in the way: " + errno_text() +
                            "; remove it, or check that train.checkpoint_dir is writable");
  }
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return invalid_argument("cannot create " + temp + ": " + errno_text() +
                            "; check that train.checkpoint_dir is writable");
  }
  if (Status s = write_all(fd.get(), bytes, temp); !s) return s;
  // The data must be on disk before the rename makes it the checkpoint:
  // otherwise a power loss can leave a complete name over incomplete data.
  if (::fsync(fd.get()) != 0) return invalid_argument("fsync of " + temp + ": " + errno_text());
  if (fd.close() != 0) return invalid_argument("closing " + temp + ": " + errno_text());
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return invalid_argument("cannot rename " + temp + " to " + path + ": " + errno_text());
  }
  cleanup.armed = false;
  // The rename is a change to the directory; it survives a crash only once
  // the directory itself is synced.
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid() || ::fsync(dir_fd.get()) != 0) {
    return invalid_argument("fsync of directory " + dir.string() + ": " + errno_text());
  }
  return Status::ok();
}

namespace {

// Makes every missing directory of `dir` with mode 0755 (less what the
// umask removes), so that none it makes is writable by group or others.
void make_directories(const fs::path& dir, std::error_code& ec) {
  fs::path made;
  for (const fs::path& part : dir) {
    made /= part;
    if (::mkdir(made.c_str(), 0755) != 0 && errno != EEXIST) {
      ec = std::error_code(errno, std::generic_category());
      return;
    }
  }
}

// Whether `path` is a file this user could have written as a checkpoint
// (not followed): pruning deletes nothing else, neither a directory or a
// link named like one nor another user's file in a shared directory.
bool written_by_this_user(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
}

std::string other_user(uid_t uid) {
  return "uid " + std::to_string(uid) + " (neither root nor this user, uid " +
         std::to_string(::geteuid()) + ")";
}

// A group's shared directory: its group, one this user belongs to, may write
// it, other users may not. (Shared with a group this user is not in, its
// writers are strangers.)
bool group_shared(const struct stat& st) {
  return (st.st_mode & S_IWGRP) != 0 && (st.st_mode & S_IWOTH) == 0 &&
         host::in_own_group(st.st_gid);
}

// Why another user could rename `entry` (every directory above it resolved)
// away and put one of theirs in its place, or "": a directory above it
// owned by another user who is not sharing it with a group (the owner of a
// directory may rename any entry, sticky bit or not), or one every user may
// write without the sticky bit. As for the directory itself, a group's
// shared one is allowed. `what` names the entry in the message and `then`
// says what such a user may do.
std::string foreign_ancestor(const fs::path& entry, const std::string& what,
                             const std::string& then) {
  for (fs::path p = entry; p.has_relative_path() && p.parent_path() != p;) {
    p = p.parent_path();
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) continue;  // not made yet: this run makes it
    if (!host::trusted_owner(st.st_uid) && !group_shared(st)) {
      return "the directory " + p.string() + " above " + what + " is owned by " +
             other_user(st.st_uid) + ", who may " + then;
    }
    if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return "the directory " + p.string() + " above " + what + " has mode " + mode +
             ", so any user may " + then;
    }
  }
  return "";
}

// Why another user could take the checkpoints in `dir` away, or "": a
// symbolic link that another user owns (they may repoint it) on its path or
// inside a link's target followed to resolve it (host::links_on_path),
// the directory it names owned by another user who is not sharing it with
// a group (its owner may delete or rename any file in it, sticky bit or
// not), or a directory above it, or above a link followed, that another
// user could rename (foreign_ancestor): a link of this user's in a
// directory every user may write is as good as theirs. A group's shared
// directory is allowed: read_checkpoint resumes only from files this user
// wrote.
std::string foreign_checkpoint_dir(const std::string& dir) {
  const std::vector<host::PathLink> links = host::links_on_path(dir);
  for (const host::PathLink& link : links) {
    if (!host::trusted_owner(link.owner)) {
      return "the symbolic link " + link.name.string() + " on its path is owned by " +
             other_user(link.owner) + ", who may repoint it to a directory of theirs";
    }
  }
  for (const host::PathLink& link : links) {
    if (std::string why = foreign_ancestor(
            link.name, "the symbolic link " + link.name.string() + " on its path",
            "move the link away and put one of theirs, to a directory of theirs, in its place");
        !why.empty()) {
      return why;
    }
  }
  std::error_code ec;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "";
  const fs::path real = fs::canonical(dir, ec);
  if (!host::trusted_owner(st.st_uid) && !group_shared(st)) {
    return (ec || real == fs::path(dir) ? std::string("it") : real.string()) + " is owned by " +
           other_user(st.st_uid) +
           ", who may delete or replace the run's checkpoints in it, sticky bit or not";
  }
  if (ec) return "";
  return foreign_ancestor(real, "it", "rename it away and put a directory of theirs in its place");
}

}  // namespace

Result<std::string> save_checkpoint(const std::string& dir, const Checkpoint& checkpoint,
                                    std::int64_t keep) {
  std::error_code ec;
  make_directories(dir, ec);
  if (ec) {
    return invalid_argument("cannot create checkpoint directory " + dir + ": " + ec.message() +
                            "; check train.checkpoint_dir");
  }
  const std::int64_t step = checkpoint.header.step;
  const std::string path = (fs::path(dir) / checkpoint_file_name(step)).string();
  if (Status s = write_file_atomically(path, encode_checkpoint(checkpoint)); !s) return s;

  Result<std::vector<CheckpointFile>> files = list_checkpoints(dir);
  if (!files) return files.status();
  std::int64_t kept = 0;
  for (const CheckpointFile& f : *files) {
    if (f.step > step || !written_by_this_user(f.path)) continue;
    if (++kept <= keep) continue;
    if (!fs::remove(f.path, ec) && ec) {
      return invalid_argument("cannot delete old checkpoint " + f.path + ": " + ec.message());
    }
  }
  // Temporary files of an earlier writer that crashed mid-write.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > kTempSuffix.size() + 1 && name.front() == '.' &&
        name.ends_with(kTempSuffix) && written_by_this_user(it->path().string()) &&
        checkpoint_step_of(
            std::string_view(name).substr(1, name.size() - 1 - kTempSuffix.size()))) {
      std::error_code ignored;  // best effort: a stale temporary file is only wasted space
      fs::remove(it->path(), ignored);
    }
  }
  return path;
}

Status prepare_checkpoint_dir(const std::string& dir) {
  const auto refuse = [&](const std::string& why) {
    return invalid_argument("train.checkpoint_dir " + dir + ": " + why +
                            "; choose a directory that you or root own, under directories that "
                            "no other user may change");
  };
  // A directory still to be made is examined first as well: through another
  // user's link the run would make it where that user chose.
  if (struct stat st{}; ::stat(dir.c_str(), &st) != 0) {
    if (std::string why = foreign_checkpoint_dir(dir); !why.empty()) return refuse(why);
  }
  std::error_code ec;
  make_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    return invalid_argument("cannot create checkpoint directory " + dir + ": " +
                            (ec ? ec.message() : std::string("a file of that name exists")) +
                            "; fix train.checkpoint_dir");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return invalid_argument("checkpoint directory " + dir + " is not writable: " + errno_text() +
                            "; fix its permissions or train.checkpoint_dir");
  }
  // Any user could delete or replace checkpoints in a directory all may
  // write, unless it is sticky like /tmp. (A group's shared directory is
  // allowed: the checkpoints it holds are resumed from only when this user
  // wrote them, read_checkpoint.)
  if (std::string why = foreign_checkpoint_dir(dir); !why.empty()) return refuse(why);
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && (st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return invalid_argument("train.checkpoint_dir " + dir + " has mode " + mode +
                            ": any user could delete or replace its checkpoints; run `chmod o-w " +
                            dir + "` (or +t), or choose a directory only you can write");
  }
  return Status::ok();
}

Status hold_checkpoint_dir_lock(const std::string& dir) {
  static int held = -1;  // released when the process exits, however it ends
  if (held >= 0) return Status::ok();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::ok();  // prepare_checkpoint_dir or the reads name it
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    held = fd;
    return Status::ok();
  }
  const int err = errno;
  ::close(fd);
  if (err != EWOULDBLOCK) return Status::ok();
  return invalid_argument("train.checkpoint_dir " + dir +
                          " is in use by another fulcrum train run (it holds a lock on the "
                          "directory); wait for it to end or give this run its own "
                          "train.checkpoint_dir");
}

Result<std::optional<ResumePoint>> latest_good_checkpoint(const std::string& dir) {
  Result<std::vector<CheckpointFile>> files = list_checkpoints(dir);
  if (!files) return files.status();
  if (files->empty()) return std::optional<ResumePoint>();
  ResumePoint point;
  for (const CheckpointFile& f : *files) {
    Result<Checkpoint> c = read_checkpoint(f.path);
    if (c) {
      point.path = f.path;
      point.checkpoint = std::move(c).value();
      return std::optional<ResumePoint>(std::move(point));
    }
    point.refused.push_back(c.status().message());
  }
  return invalid_argument("none of the " + std::to_string(files->size()) + " checkpoints in " +
                          dir + " is intact (the newest: " + point.refused.front() +
                          "); restore one from a backup, or start afresh with "
                          "train.resume=none and an empty train.checkpoint_dir");
}

}  // namespace fulcrum::train
