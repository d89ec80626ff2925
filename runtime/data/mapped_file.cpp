#include "data/mapped_file.h"

#include "host/input_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fulcrum::data {
namespace {

constexpr const char* kKeepUnchanged =
    "a dataset must stay unchanged while a job reads it; restore the file and resume from the "
    "last checkpoint";

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  Result<host::InputFile> opened = host::open_input_file(
      path, {path,
             "data.path must name the dataset's .idx/.bin files (fulcrum preprocess makes them "
             "from text; the quickstart's come from the README's command)"});
  if (!opened) return opened.status();
  host::InputFile input = std::move(opened).value();
  MappedFile file;
  file.path_ = path;
  file.fd_ = input.release();
  struct stat st {};
  if (::fstat(file.fd_, &st) != 0) {
    return invalid_argument(path + ": cannot examine the file; check the dataset path");
  }
  file.size_ = static_cast<std::size_t>(st.st_size);
  file.modified_ = st.st_mtim;
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, file.fd_, 0);
    const int err = errno;
    if (p == MAP_FAILED) {
      return invalid_argument(path + ": cannot memory-map " + std::to_string(file.size_) +
                              " bytes: " + std::strerror(err) +
                              "; check the address-space limit (ulimit -v)");
    }
    file.data_ = static_cast<const std::byte*>(p);
  }
  return file;
}

Status MappedFile::unchanged() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    return invalid_argument(path_ + ": cannot examine the file any more: " + std::strerror(err) +
                            "; " + kKeepUnchanged);
  }
  const auto now = static_cast<std::size_t>(st.st_size);
  if (now != size_) {
    return invalid_argument(path_ + " changed while the job reads it: it had " +
                            std::to_string(size_) + " bytes when opened and has " +
                            std::to_string(now) + " now (truncated or rewritten); " +
                            kKeepUnchanged);
  }
  if (st.st_mtim.tv_sec != modified_.tv_sec || st.st_mtim.tv_nsec != modified_.tv_nsec) {
    return invalid_argument(path_ +
                            " changed while the job reads it: it was written to after the job "
                            "opened it (same size, new modification time); " +
                            kKeepUnchanged);
  }
  return Status::ok();
}

Status MappedFile::read_at(std::uint64_t offset, std::size_t count, std::byte* into) const {
  if (Status s = unchanged(); !s) return s;
  std::size_t done = 0;
  while (done < count) {
    const ::ssize_t n =
        ::pread(fd_, into + done, count - done, static_cast<::off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      return invalid_argument(path_ + ": cannot read " + std::to_string(count) +
                              " bytes at byte offset " + std::to_string(offset) + ": " +
                              std::strerror(err) + "; " + kKeepUnchanged);
    }
    if (n == 0) {
      return invalid_argument(path_ + " changed while the job reads it: it ends before byte " +
                              std::to_string(offset + count) +
                              " that the job read at open "
                              "(truncated); " +
                              kKeepUnchanged);
    }
    done += static_cast<std::size_t>(n);
  }
  return Status::ok();
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
    modified_ = other.modified_;
  }
  return *this;
}

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

}  // namespace fulcrum::data
