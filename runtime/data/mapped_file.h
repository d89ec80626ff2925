// A read-only memory mapping of a whole file, unmapped when its owner goes
// away. Private to fulcrum::data.
#pragma once

#include <cstddef>
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
        size_(std::exchange(other.size_, 0)) {}
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile() { unmap(); }

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void unmap();

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace fulcrum::data
