// A read-only memory mapping of a whole file, unmapped when its owner goes
// away, and the file kept open for reads that must not fault. Private to
// fulcrum::data.
//
// A mapping is read where a file is checked as it is opened. During training
// a file can shrink under the job (another process truncates or rewrites
// it); touching a mapped page past the new end raises SIGBUS and kills the
// rank. Reads made then go through read_at, which checks the file is still
// the one opened and reads with pread, so a shrunk or rewritten file is a
// Status naming it instead.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <utility>

#include "fulcrum/status.h"

namespace fulcrum::data {

class MappedFile {
 public:
  // kNotFound when the file does not exist; an empty file maps to size 0
  // (mmap refuses length 0, so nothing is mapped then).
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept
      : path_(std::move(other.path_)),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        fd_(std::exchange(other.fd_, -1)),
        modified_(other.modified_) {}
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile() { release(); }

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Ok while the file has the size and modification time it had when
  // opened; otherwise an error naming the file and what changed.
  Status unchanged() const;
  // Copies bytes [offset, offset + count) of the file into `into` with
  // pread, after unchanged(); a read that comes up short is an error too.
  Status read_at(std::uint64_t offset, std::size_t count, std::byte* into) const;

 private:
  void release();

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
  timespec modified_{};
};

}  // namespace fulcrum::data
