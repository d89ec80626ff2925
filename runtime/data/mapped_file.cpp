#include "data/mapped_file.h"

#include "host/input_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fulcrum::data {

Result<MappedFile> MappedFile::open(const std::string& path) {
  Result<host::InputFile> opened =
      host::open_input_file(path, {path, "data.path must name the dataset's .idx/.bin files"});
  if (!opened) return opened.status();
  host::InputFile input = std::move(opened).value();
  const int fd = input.release();
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return invalid_argument(path + ": cannot examine the file; check the dataset path");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<std::size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    if (p == MAP_FAILED) {
      ::close(fd);
      return invalid_argument(path + ": cannot memory-map " + std::to_string(file.size_) +
                              " bytes: " + std::strerror(err) +
                              "; check the address-space limit (ulimit -v)");
    }
    file.data_ = static_cast<const std::byte*>(p);
  }
  // The mapping keeps the file open on its own.
  ::close(fd);
  return file;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::unmap() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace fulcrum::data
