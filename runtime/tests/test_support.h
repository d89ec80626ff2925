// What the host's tests share: a message check and a scratch directory.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

// Message checks: the haystack first, as it reads.
#define EXPECT_HAS(text, part) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, std::string(part), std::string(text))

namespace fulcrum::test {

// A fresh directory under the system's temporary directory, removed with
// everything in it (permissions restored first) when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fulcrum_test") {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    char* made = mkdtemp(templ.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` in the directory (the directory itself for ""),
  // nothing written.
  std::string at(const std::string& name = "") const {
    return name.empty() ? path_.string() : (path_ / name).string();
  }
  // Writes `text` to `name` in the directory; returns its path.
  std::string file(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace fulcrum::test
