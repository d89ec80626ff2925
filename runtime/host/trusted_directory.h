// Whether a directory, or a link on the way to a file, could be changed by a
// user other than root and this one: used where fulcrum writes or reads
// files that steer a job (the launch's private directory, checkpoints,
// plugins, the files a run writes). Header-only and LibTorch-free.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fulcrum::host {

// Whether `uid` is root or this user: the owners whose files a job trusts.
inline bool trusted_owner(uid_t uid) { return uid == 0 || uid == ::geteuid(); }

// Whether this process belongs to group `gid` (its own or a supplementary
// group): only then is a directory shared with that group shared with it.
inline bool in_own_group(gid_t gid) {
  if (gid == ::getegid()) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i) {
    if (groups[static_cast<std::size_t>(i)] == gid) return true;
  }
  return false;
}

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

// A symbolic link met while resolving a path, and its owner.
struct PathLink {
  std::filesystem::path name;  // as reached: every directory above it resolved
  uid_t owner = 0;
};

// Every symbolic link the kernel would follow to resolve `path` (made
// absolute), in the order it follows them: a link on the path as written,
// the last component's included, and every link inside the targets of the
// links followed, however deep. The walk stops early, with the links met so
// far, at a component that does not exist (nothing below it does), one that
// is not a directory with more to come, or more than 40 links followed (the
// kernel refuses those too, so the caller's open fails).
inline std::vector<PathLink> links_on_path(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::vector<PathLink> links;
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) return links;
  std::deque<fs::path> left(++absolute.begin(), absolute.end());  // after the root
  fs::path at = absolute.root_path();                             // resolved so far: no links in it
  while (!left.empty()) {
    const fs::path part = left.front();
    left.pop_front();
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      at = at.parent_path();
      continue;
    }
    const fs::path next = at / part;
    struct stat ls {};
    if (::lstat(next.c_str(), &ls) != 0) return links;
    if (!S_ISLNK(ls.st_mode)) {
      if (!left.empty() && !S_ISDIR(ls.st_mode)) return links;
      at = next;
      continue;
    }
    links.push_back(PathLink{next, ls.st_uid});
    if (links.size() > 40) return links;
    // st_size is the target's length, except for the links of /proc
    // (/proc/self/cwd, /proc/self/fd/N), which give 0: the buffer grows
    // until the whole target fits, since a cut one would end the walk
    // before the links further on are seen.
    std::vector<char> target(static_cast<std::size_t>(ls.st_size > 0 ? ls.st_size : 255) + 1);
    ssize_t n = 0;
    for (;;) {
      n = ::readlink(next.c_str(), target.data(), target.size());
      if (n < 0) return links;
      if (static_cast<std::size_t>(n) < target.size()) break;
      if (target.size() > (std::size_t{1} << 20)) return links;
      target.resize(target.size() * 2);
    }
    const fs::path to(std::string(target.data(), static_cast<std::size_t>(n)));
    if (to.is_absolute()) at = to.root_path();
    std::vector<fs::path> parts(to.is_absolute() ? ++to.begin() : to.begin(), to.end());
    left.insert(left.begin(), parts.begin(), parts.end());
  }
  return links;
}

// The first of links_on_path(path) that a user other than root and this one
// owns, or nullopt. Whoever owns a link may repoint it, sticky directory or
// not, so what the path names is theirs to choose.
inline std::optional<PathLink> foreign_link_on_path(const std::filesystem::path& path) {
  for (const PathLink& link : links_on_path(path)) {
    if (!trusted_owner(link.owner)) return link;
  }
  return std::nullopt;
}

// "the symbolic link L on its path is owned by uid N, neither root nor this
// user (uid M)": a refusal's cause, to which the caller adds what the
// owner may do and the fix.
inline std::string foreign_link_text(const PathLink& link) {
  return "the symbolic link " + link.name.string() + " on its path is owned by uid " +
         std::to_string(link.owner) + ", neither root nor this user (uid " +
         std::to_string(::geteuid()) + ")";
}

}  // namespace fulcrum::host
