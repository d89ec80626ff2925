// links_on_path and foreign_link_on_path (host/trusted_directory.h): every
// symbolic link the kernel follows to resolve a path, those inside links'
// targets included, and the first whose owner is neither root nor this user.
#include "host/trusted_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_support.h"

namespace fulcrum::host {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

constexpr uid_t kNobody = 65534;

void give_away(const fs::path& link) {
  ASSERT_EQ(::lchown(link.c_str(), kNobody, kNobody), 0) << link;
}

// Hand-built cases: a link on the path as written, one reached only inside
// another link's target (relative, and through ".."), the last component,
// a dangling link, a loop, and paths that stop early.
TEST(ForeignLinkOnPath, FindsTheLinksTheKernelFollows) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a link to another user needs root";
  TempDir dir("fulcrum_links");
  const fs::path d = dir.path();
  fs::create_directories(d / "real" / "sub");
  dir.file("real/file", "x");
  fs::create_directory_symlink(d / "real", d / "mine");
  EXPECT_FALSE(foreign_link_on_path(d / "mine" / "file"));
  EXPECT_FALSE(foreign_link_on_path(d / "real" / "file"));

  // On the path as written.
  give_away(d / "mine");
  std::optional<PathLink> found = foreign_link_on_path(d / "mine" / "file");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->name, d / "mine");
  EXPECT_EQ(found->owner, kNobody);

  // Only inside a trusted link's target: outer -> inner (relative), and
  // real/sub/up -> ../../inner.
  fs::create_directory_symlink("inner", d / "outer");
  fs::create_directory_symlink(d / "real", d / "inner");
  fs::create_directory_symlink("../../inner", d / "real" / "sub" / "up");
  EXPECT_FALSE(foreign_link_on_path(d / "outer" / "file"));
  EXPECT_FALSE(foreign_link_on_path(d / "real" / "sub" / "up" / "file"));
  give_away(d / "inner");
  for (const fs::path& p :
       {d / "outer" / "file", d / "real" / "sub" / "up" / "file", d / "real" / "sub" / "up"}) {
    found = foreign_link_on_path(p);
    ASSERT_TRUE(found) << p;
    EXPECT_EQ(found->name, d / "inner") << p;
  }

  // The last component, and a dangling link: what they would be written
  // through is the other user's choice.
  fs::create_symlink(d / "real" / "file", d / "last");
  fs::create_symlink(d / "nowhere", d / "dangling");
  EXPECT_FALSE(foreign_link_on_path(d / "last"));
  EXPECT_FALSE(foreign_link_on_path(d / "dangling"));
  give_away(d / "last");
  give_away(d / "dangling");
  EXPECT_TRUE(foreign_link_on_path(d / "last"));
  EXPECT_TRUE(foreign_link_on_path(d / "dangling"));

  // A loop of trusted links ends (the kernel refuses it too); a path
  // below a missing component or a file has nothing more to follow.
  fs::create_symlink("loop_b", d / "loop_a");
  fs::create_symlink("loop_a", d / "loop_b");
  EXPECT_FALSE(foreign_link_on_path(d / "loop_a" / "x"));
  EXPECT_FALSE(foreign_link_on_path(d / "absent" / "mine" / "file"));
  EXPECT_FALSE(foreign_link_on_path(d / "real" / "file" / "mine"));
}

// The links of /proc (/proc/self/fd/N, /proc/self/cwd) report a length of
// 0: a target longer than a first guess must still be read whole, or the
// walk would end before the other user's link below it.
TEST(ForeignLinkOnPath, ReadsALongTargetOfAProcLinkWhole) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a link to another user needs root";
  TempDir dir("fulcrum_links");
  const fs::path deep = fs::canonical(dir.path()) / std::string(150, 'd') / std::string(150, 'e');
  fs::create_directories(deep);
  fs::create_directory(dir.path() / "elsewhere");
  fs::create_directory_symlink(dir.path() / "elsewhere", deep / "theirs");
  give_away(deep / "theirs");
  const int fd = ::open(deep.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const fs::path via_proc = fs::path("/proc/self/fd") / std::to_string(fd) / "theirs" / "m.jsonl";
  const std::optional<PathLink> found = foreign_link_on_path(via_proc);
  ::close(fd);
  ASSERT_TRUE(found) << via_proc;
  EXPECT_EQ(found->name, deep / "theirs");
  EXPECT_EQ(found->owner, kNobody);
}

// Every link the kernel follows to resolve `p` (absolute), recounted by
// recursion over prefixes that fs::canonical resolves: a link's target is
// walked the same way, from the canonical directory holding the link.
void links_followed(const fs::path& p, std::vector<fs::path>& out, int depth) {
  if (depth > 40) return;
  fs::path at = p.root_path();
  for (auto it = ++p.begin(); it != p.end(); ++it) {
    if (it->empty() || *it == ".") continue;
    if (*it == "..") {
      at = at.parent_path();
      continue;
    }
    const fs::path next = at / *it;
    std::error_code ec;
    if (fs::is_symlink(fs::symlink_status(next, ec))) {
      out.push_back(next);
      const fs::path target = fs::read_symlink(next, ec);
      if (ec) return;
      const fs::path absolute = target.is_absolute() ? target : at / target;
      links_followed(absolute, out, depth + 1);
      at = fs::canonical(absolute, ec);
    } else {
      at = fs::canonical(next, ec);
    }
    if (ec) return;
  }
}

// Random trees of directories and links (relative, absolute, to links,
// some given to another user) and random paths through them: a link is
// reported exactly when the recount follows one another user owns, and
// it is one of those.
TEST(ForeignLinkOnPath, AgreesWithARecountOfTheLinksFollowed) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a link to another user needs root";
  std::mt19937_64 rng(20261126);
  int reported = 0;
  for (int tree = 0; tree < 12; ++tree) {
    TempDir dir("fulcrum_links");
    const fs::path root = fs::canonical(dir.path());
    std::vector<fs::path> dirs = {root};
    for (int k = 0; k < 6; ++k) {
      const fs::path made = dirs[rng() % dirs.size()] / ("d" + std::to_string(k));
      fs::create_directory(made);
      dirs.push_back(made);
    }
    std::vector<std::string> names = {"..", ".", "f"};
    for (const fs::path& d : dirs) {
      std::ofstream(d / "f") << "x";
      names.push_back(d.filename().string());
    }
    for (int k = 0; k < 8; ++k) {
      const fs::path holder = dirs[rng() % dirs.size()];
      const fs::path link = holder / ("l" + std::to_string(k));
      const fs::path to = dirs[rng() % dirs.size()];
      fs::path target;
      switch (rng() % 3) {
        case 0:
          target = to;
          break;  // absolute
        case 1:
          target = fs::relative(to, holder);
          break;  // relative, ".." and all
        default:
          target = fs::path("l" + std::to_string(rng() % 8));
          break;  // a link's name
      }
      fs::create_symlink(target, link);
      if (rng() % 3 == 0) give_away(link);
      names.push_back(link.filename().string());
    }
    for (int q = 0; q < 150; ++q) {
      fs::path p = dirs[rng() % dirs.size()];
      const int parts = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < parts; ++k) p /= names[rng() % names.size()];
      std::vector<fs::path> followed;
      links_followed(p, followed, 0);
      std::vector<fs::path> foreign;
      for (const fs::path& link : followed) {
        struct stat ls {};
        if (::lstat(link.c_str(), &ls) == 0 && !trusted_owner(ls.st_uid)) foreign.push_back(link);
      }
      const std::optional<PathLink> found = foreign_link_on_path(p);
      ASSERT_EQ(found.has_value(), !foreign.empty()) << p;
      // links_on_path lists the same links in the order they are followed
      // (short of a loop, where the two stop at different counts).
      if (followed.size() < 40) {
        std::vector<fs::path> listed;
        for (const PathLink& link : links_on_path(p)) listed.push_back(link.name);
        EXPECT_EQ(listed, followed) << p;
      }
      if (found) {
        ++reported;
        EXPECT_NE(std::find(foreign.begin(), foreign.end(), found->name), foreign.end()) << p;
        EXPECT_EQ(found->owner, kNobody) << p;
      }
    }
  }
  EXPECT_GT(reported, 40);  // the trees put other users' links on many paths
}

}  // namespace
}  // namespace fulcrum::host
