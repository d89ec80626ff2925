#include "launch/preflight.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace fulcrum::launch {
namespace {

namespace fs = std::filesystem;

bool writable_dir(const fs::path& dir) {
  return ::access(dir.empty() ? "." : dir.c_str(), W_OK | X_OK) == 0;
}

}  // namespace

Status check_output_file(const std::string& path, std::string_view what) {
  if (path.empty()) {
    return invalid_argument(std::string(what) + " is empty; give a file path");
  }
  std::error_code ec;
  const fs::path p(path);
  const fs::file_status st = fs::status(p, ec);
  if (fs::is_directory(st)) {
    return invalid_argument(std::string(what) + " " + path +
                            " is a directory; give a file path inside it");
  }
  if (fs::exists(st)) {
    if (::access(p.c_str(), W_OK) != 0) {
      return invalid_argument("cannot write " + std::string(what) + " " + path + ": " +
                              std::strerror(errno) + "; choose another path or fix its mode");
    }
    return Status::ok();
  }
  const fs::path parent = p.parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    return invalid_argument("cannot write " + std::string(what) + " " + path + ": directory " +
                            parent.string() + " does not exist; create it first");
  }
  if (!writable_dir(parent)) {
    return invalid_argument("cannot write " + std::string(what) + " " + path + ": directory " +
                            (parent.empty() ? std::string(".") : parent.string()) +
                            " is not writable (" + std::strerror(errno) + "); choose another path");
  }
  return Status::ok();
}

Status check_input_file(const std::string& path, std::string_view what, std::string_view fix) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    return invalid_argument(std::string(what) + " " + path + " does not exist; " +
                            std::string(fix));
  }
  if (!fs::is_regular_file(st)) {
    return invalid_argument(std::string(what) + " " + path + " is not a regular file; " +
                            std::string(fix));
  }
  if (::access(path.c_str(), R_OK) != 0) {
    return invalid_argument("cannot read " + std::string(what) + " " + path + ": " +
                            std::strerror(errno) + "; " + std::string(fix));
  }
  return Status::ok();
}

Status check_output_dir(const std::string& path, std::string_view what) {
  if (path.empty()) return invalid_argument(std::string(what) + " is empty; give a directory");
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = path;
  if (fs::exists(p, ec) && !fs::is_directory(p, ec)) {
    return invalid_argument(std::string(what) + " " + path +
                            " exists and is not a directory; choose a directory");
  }
  // The nearest ancestor that exists must be a directory we may write into.
  fs::path existing = p;
  while (!existing.empty() && !fs::exists(existing, ec)) {
    const fs::path up = existing.parent_path();
    if (up == existing) break;
    existing = up;
  }
  if (!fs::is_directory(existing, ec)) {
    return invalid_argument("cannot create " + std::string(what) + " " + path + ": " +
                            existing.string() + " is not a directory; choose another directory");
  }
  if (!writable_dir(existing)) {
    return invalid_argument("cannot write " + std::string(what) + " " + path + ": " +
                            existing.string() + " is not writable (" + std::strerror(errno) +
                            "); choose another directory or fix its mode");
  }
  return Status::ok();
}

}  // namespace fulcrum::launch
