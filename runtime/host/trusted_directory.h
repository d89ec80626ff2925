// Whether a directory could be changed by a user other than root and this
// one: used where fulcrum writes or reads files that steer a job (the
// launch's private directory, checkpoints). Header-only and LibTorch-free.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace fulcrum::host {

// Whether `uid` is root or this user: the owners whose files a job trusts.
inline bool trusted_owner(uid_t uid) { return uid == 0 || uid == ::geteuid(); }

// Why `dir` (links resolved) could be changed by someone other than root and
// this user, or "" when it cannot: it and every directory above it must be
// owned by root or this user and not writable by group or others, unless
// sticky like /tmp (whose other users cannot move entries they do not own).
inline std::string untrusted_directory(const std::filesystem::path& dir) {
  std::filesystem::path p = dir;
  for (;;) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
      return p.string() + " cannot be examined (" + std::strerror(errno) + ")";
    }
    if (!trusted_owner(st.st_uid)) {
      return p.string() + " is owned by uid " + std::to_string(st.st_uid) +
             ", neither root nor this user";
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return p.string() + " is writable by group or others without the sticky bit";
    }
    if (p == p.root_path() || !p.has_parent_path() || p.parent_path() == p) return "";
    p = p.parent_path();
  }
}

}  // namespace fulcrum::host
