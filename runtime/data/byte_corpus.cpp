#include "data/byte_corpus.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "fulcrum/core/bytes.h"

namespace fulcrum::data {
namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

std::string_view without_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

std::string errno_text(int err) { return std::strerror(err); }

Status write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  for (std::size_t done = 0; done < size;) {
    const ::ssize_t n = ::write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return invalid_argument("cannot write " + quote_text(path) + ": " + errno_text(errno) +
                              "; free some space or give --output-prefix elsewhere");
    }
    done += static_cast<std::size_t>(n);
  }
  return Status::ok();
}

Status sync_and_close(int fd, const std::string& path) {
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !synced) {
    return invalid_argument("cannot write " + quote_text(path) + ": " +
                            errno_text(synced ? errno : err) +
                            "; free some space or give --output-prefix elsewhere");
  }
  return Status::ok();
}

// An output name may be absent or a regular file (then it is replaced); a
// directory, device, pipe, socket or symbolic link there is refused, since the
// rename would put a file in its place.
Status check_output_name(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::ok();
    return invalid_argument("output " + quote_text(path) + " cannot be examined (" +
                            errno_text(errno) + "); give --output-prefix elsewhere");
  }
  if (S_ISREG(st.st_mode)) return Status::ok();
  const char* kind = S_ISDIR(st.st_mode)   ? "a directory"
                     : S_ISLNK(st.st_mode) ? "a symbolic link"
                                           : "not a regular file (a device, pipe or socket)";
  return invalid_argument("output " + quote_text(path) + " exists and is " + kind +
                          "; give --output-prefix a path whose .bin and .idx are free or "
                          "regular files");
}

}  // namespace

std::vector<std::string_view> split_text(std::string_view text, const TextSplit& split,
                                         std::int64_t* dropped) {
  std::vector<std::string_view> out;
  std::int64_t whitespace_only = 0;
  const auto keep = [&](std::string_view doc) {
    if (is_blank(doc) && doc.find('\n') == std::string_view::npos) {
      if (!doc.empty()) ++whitespace_only;
      return;
    }
    if (doc.find_first_not_of(" \t\r\n\f\v") == std::string_view::npos) {
      ++whitespace_only;
      return;
    }
    out.push_back(doc);
  };
  if (split.kind == TextSplit::Kind::kFile) {
    if (!text.empty()) keep(text);
    if (dropped != nullptr) *dropped = whitespace_only;
    return out;
  }
  // Walk the lines; [begin, end) is the current document.
  std::size_t begin = 0;
  std::size_t pos = 0;
  bool open = false;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    const std::size_t next = eol == std::string_view::npos ? text.size() : eol + 1;
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    const bool ends = split.kind == TextSplit::Kind::kBlankLine
                          ? is_blank(line)
                          : without_cr(line) == std::string_view(split.separator);
    if (ends) {
      // The newline before the separator ends the document's last line and
      // stays; the separator line itself belongs to no document.
      if (open) keep(text.substr(begin, pos - begin));
      open = false;
    } else if (!open) {
      begin = pos;
      open = true;
    }
    pos = next;
  }
  if (open) keep(text.substr(begin));
  if (dropped != nullptr) *dropped = whitespace_only;
  return out;
}

Result<ByteDatasetWriter> ByteDatasetWriter::create(const std::string& prefix) {
  if (prefix.empty()) {
    return invalid_argument("--output-prefix is empty; give a path such as build/data/corpus");
  }
  if (prefix.back() == '/') {
    return invalid_argument("--output-prefix " + quote_text(prefix) +
                            " ends in '/'; give a file prefix such as " + prefix + "corpus");
  }
  struct stat st {};
  if (::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return invalid_argument("--output-prefix " + quote_text(prefix) +
                            " is a directory; give a file prefix inside it, such as " + prefix +
                            "/corpus (for corpus.bin and corpus.idx)");
  }
  for (const char* suffix : {".bin", ".idx"}) {
    if (Status s = check_output_name(prefix + suffix); !s) return s;
  }
  ByteDatasetWriter w;
  const std::size_t slash = prefix.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : prefix.substr(0, slash + 1);
  w.dir_lock_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (w.dir_lock_fd_ >= 0 && ::flock(w.dir_lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return invalid_argument("--output-prefix " + quote_text(prefix) +
                            ": another fulcrum "
                            "preprocess is writing into " +
                            quote_text(dir) + "; wait for it to finish, or write elsewhere");
  }
  w.prefix_ = prefix;
  // Never a file someone else made: an unpredictable name, created new
  // (O_EXCL), so a directory others can write cannot hand this run a file
  // they own and keep writing.
  std::random_device entropy;
  char nonce[24];
  std::snprintf(nonce, sizeof nonce, "%08x%08x", entropy(), entropy());
  const std::string tag = ".tmp." + std::to_string(::getpid()) + "." + nonce;
  w.bin_tmp_ = prefix + ".bin" + tag;
  w.idx_tmp_ = prefix + ".idx" + tag;
  w.bin_fd_ =
      ::open(w.bin_tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (w.bin_fd_ < 0) {
    const int err = errno;
    const std::string fix = err == ENOENT    ? "create its directory first"
                            : err == EACCES  ? "check the directory's permissions"
                            : err == ENOTDIR ? "a component of the path is not a directory"
                                             : "give --output-prefix elsewhere";
    return invalid_argument("cannot create " + quote_text(w.bin_tmp_) + " for --output-prefix " +
                            quote_text(prefix) + ": " + errno_text(err) + "; " + fix);
  }
  return w;
}

ByteDatasetWriter::ByteDatasetWriter(ByteDatasetWriter&& other) noexcept
    : prefix_(std::move(other.prefix_)),
      bin_tmp_(std::move(other.bin_tmp_)),
      idx_tmp_(std::move(other.idx_tmp_)),
      bin_fd_(std::exchange(other.bin_fd_, -1)),
      dir_lock_fd_(std::exchange(other.dir_lock_fd_, -1)),
      lengths_(std::move(other.lengths_)),
      bytes_(other.bytes_),
      committed_(std::exchange(other.committed_, true)) {}

ByteDatasetWriter::~ByteDatasetWriter() { abandon(); }

void ByteDatasetWriter::abandon() {
  if (bin_fd_ >= 0) ::close(bin_fd_);
  bin_fd_ = -1;
  if (!committed_) {
    if (!bin_tmp_.empty()) ::unlink(bin_tmp_.c_str());
    if (!idx_tmp_.empty()) ::unlink(idx_tmp_.c_str());
  }
  committed_ = true;
  if (dir_lock_fd_ >= 0) ::close(dir_lock_fd_);  // releases the flock
  dir_lock_fd_ = -1;
}

Status ByteDatasetWriter::add(std::string_view document) {
  if (bin_fd_ < 0) return internal_error("ByteDatasetWriter::add after commit");
  if (document.empty() ||
      document.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    return invalid_argument("a document holds " + std::to_string(document.size()) +
                            " bytes; a sequence of the .idx holds 1 to 2147483647 tokens, so "
                            "split the input into smaller documents");
  }
  if (Status s = write_all(bin_fd_, document.data(), document.size(), bin_tmp_); !s) return s;
  lengths_.push_back(static_cast<std::int32_t>(document.size()));
  bytes_ += static_cast<std::int64_t>(document.size());
  return Status::ok();
}

Status ByteDatasetWriter::commit() {
  if (bin_fd_ < 0) return internal_error("ByteDatasetWriter::commit twice");
  const int bin_fd = std::exchange(bin_fd_, -1);
  if (Status s = sync_and_close(bin_fd, bin_tmp_); !s) return s;

  const auto sequences = static_cast<std::uint64_t>(lengths_.size());
  std::string idx;
  idx.reserve(34 + 12 * lengths_.size() + 8 * (lengths_.size() + 1));
  idx.append("MMIDIDX\0\0", 9);
  ByteWriter<std::string> out(idx);
  const auto put = [&out](auto value) { out.put(value); };
  put(std::uint64_t{1});  // version
  put(std::uint8_t{1});   // dtype uint8
  put(sequences);         // sequence count
  put(sequences + 1);     // document-index count
  for (const std::int32_t n : lengths_) put(n);
  std::int64_t offset = 0;
  for (const std::int32_t n : lengths_) {
    put(offset);
    offset += n;
  }
  // One sequence per document: document j starts at sequence j.
  for (std::uint64_t j = 0; j <= sequences; ++j) put(static_cast<std::int64_t>(j));

  const int idx_fd =
      ::open(idx_tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (idx_fd < 0) {
    return invalid_argument("cannot create " + quote_text(idx_tmp_) + ": " + errno_text(errno) +
                            "; give --output-prefix elsewhere");
  }
  if (Status s = write_all(idx_fd, idx.data(), idx.size(), idx_tmp_); !s) {
    ::close(idx_fd);
    return s;
  }
  if (Status s = sync_and_close(idx_fd, idx_tmp_); !s) return s;
  // Checked again: the output names may have changed since create().
  for (const char* suffix : {".bin", ".idx"}) {
    if (Status s = check_output_name(prefix_ + suffix); !s) return s;
  }
  for (const auto& [tmp, final_name] :
       {std::pair{bin_tmp_, prefix_ + ".bin"}, std::pair{idx_tmp_, prefix_ + ".idx"}}) {
    if (::rename(tmp.c_str(), final_name.c_str()) != 0) {
      return invalid_argument("cannot rename " + quote_text(tmp) + " to " + quote_text(final_name) +
                              ": " + errno_text(errno) + "; check the directory's permissions");
    }
  }
  committed_ = true;
  abandon();  // nothing left to remove; releases the directory lock
  return Status::ok();
}

}  // namespace fulcrum::data
