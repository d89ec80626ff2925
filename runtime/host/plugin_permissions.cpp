// Whether a plugin file may be trusted: who owns it and may write it, the
// file and every directory above it.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "plugin_loader_internal.h"
#include "trusted_directory.h"

namespace fulcrum::host::detail {
namespace {

namespace fs = std::filesystem;

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

// Anyone who can write the file, or replace it or any directory on the way
// to it, can run code in every rank that loads it. So the file and every
// directory from / down to it must be owned by root or by this user (the
// owner may always chmod and write, whatever the mode bits say) and writable
// by the owner alone: on the path as given or as found in a search directory
// (where a symbolic link could be swapped; a link must be owned by root or
// this user too) and on the resolved path (where the file lives). The one exception
// to the mode rule is a sticky directory (mode +t, like /tmp) owned by root
// or by this user: the sticky bit keeps others from renaming or removing the
// entries they do not own, so such a directory may be writable by all and
// still cannot have the plugin swapped in it.
Status check_permissions(const std::string& given_path, const std::string& plugin_path) {
  const auto refuse = [&](const std::string& component, const char* what, mode_t mode) {
    return Status(StatusCode::kPermission,
                  "refusing plugin " + plugin_path + ": " + what + " " + component + " has mode " +
                      octal_mode(mode) +
                      ", writable by group or others, who could then run code in every rank; "
                      "run `chmod go-w " +
                      component + "`");
  };
  const uid_t self = ::geteuid();
  const auto refuse_owner = [&](const std::string& component, const char* what, uid_t owner) {
    return Status(StatusCode::kPermission,
                  "refusing plugin " + plugin_path + ": " + what + " " + component +
                      " is owned by uid " + std::to_string(owner) +
                      ", neither root nor this user (uid " + std::to_string(self) +
                      "), who could then swap it and run code in every rank; install the plugin "
                      "where only root or you own the file and every directory above it");
  };
  struct stat st {};
  if (::stat(plugin_path.c_str(), &st) != 0) {
    return not_found("cannot stat " + plugin_path + " while checking plugin " + plugin_path);
  }
  if (!trusted_owner(st.st_uid)) return refuse_owner(plugin_path, "the file", st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return refuse(plugin_path, "the file", st.st_mode);

  std::vector<fs::path> directories;
  // `from` and every directory above it, to be checked.
  const auto with_ancestors = [&directories](fs::path from) {
    for (;; from = from.parent_path()) {
      directories.push_back(from);
      if (from == from.parent_path()) break;
    }
  };
  with_ancestors(fs::path(plugin_path).parent_path());
  // A link's owner may repoint it even in a sticky directory: every link
  // followed to resolve the path, those inside links' targets included.
  // Whoever may write the directory holding a link may replace it too, so
  // those directories and the ones above them are held to the same rule.
  const std::vector<PathLink> links = links_on_path(given_path);
  for (const PathLink& link : links) {
    if (!trusted_owner(link.owner)) {
      return refuse_owner(link.name.string(), "the symbolic link on its path", link.owner);
    }
  }
  for (const PathLink& link : links) with_ancestors(link.name.parent_path());
  // The directories holding each component of the path as given, resolved:
  // a link in any of them could be pointed elsewhere by whoever may write it.
  std::error_code ec;
  const fs::path absolute = fs::absolute(given_path, ec);
  fs::path prefix;
  for (const fs::path& part : absolute) {
    prefix /= part;
    const fs::path holder = fs::canonical(prefix.parent_path(), ec);
    if (!ec) with_ancestors(holder);
  }
  std::sort(directories.begin(), directories.end());
  directories.erase(std::unique(directories.begin(), directories.end()), directories.end());
  for (const fs::path& dir : directories) {
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0) {
      return not_found("cannot stat " + dir.string() + " while checking plugin " + plugin_path);
    }
    const bool holds_file = dir == fs::path(plugin_path).parent_path();
    const char* what = holds_file ? "its directory" : "the directory on its path";
    if (!trusted_owner(ds.st_uid)) return refuse_owner(dir.string(), what, ds.st_uid);
    if ((ds.st_mode & (S_IWGRP | S_IWOTH)) == 0) continue;
    if ((ds.st_mode & S_ISVTX) != 0) continue;  // owned by root or this user, checked above
    return refuse(dir.string(), what, ds.st_mode);
  }
  return Status::ok();
}

}  // namespace fulcrum::host::detail
