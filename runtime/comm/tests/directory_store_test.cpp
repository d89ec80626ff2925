// The store the ranks of a one-host job meet in: c10d's Store semantics
// (get waits, add counts, compareSet as TCPStore does), exact counters under
// threads and processes at once, and the directory rule (this user's, mode
// 0700, not a link), checked on the descriptor it keeps.
#include "comm/directory_store.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace fulcrum::comm {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::vector<std::uint8_t> bytes(const std::string& text) {
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

struct PrivateDir {
  fs::path path;
  PrivateDir() {
    std::string pattern = (fs::temp_directory_path() / "fulcrum_store_XXXXXX");
    if (::mkdtemp(pattern.data()) != nullptr) path = pattern;
  }
  ~PrivateDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

c10::intrusive_ptr<DirectoryStore> open_store(const fs::path& dir,
                                              std::chrono::milliseconds timeout = 2s) {
  auto store = DirectoryStore::open(dir.string(), timeout);
  EXPECT_TRUE(store) << store.status().message();
  return store ? std::move(store).value() : c10::intrusive_ptr<DirectoryStore>();
}

TEST(DirectoryStore, SetGetCheckDeleteAndCount) {
  PrivateDir dir;
  auto store = open_store(dir.path);
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->check({"a"}));
  // Any key is one file: PrefixStore's slashes, spaces, bytes above 127.
  const std::vector<std::string> keys = {"a", "fulcrum/world/rank_0", "with space",
                                         std::string("\xff\x01", 2), ".hidden"};
  for (std::size_t i = 0; i < keys.size(); ++i) {
    store->set(keys[i], bytes("value " + std::to_string(i)));
  }
  EXPECT_TRUE(store->check(keys));
  EXPECT_EQ(store->getNumKeys(), static_cast<std::int64_t>(keys.size()));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(store->get(keys[i]), bytes("value " + std::to_string(i))) << i;
  }
  store->set("a", {});  // an empty value is a value
  EXPECT_EQ(store->get("a"), std::vector<std::uint8_t>{});
  EXPECT_TRUE(store->deleteKey("a"));
  EXPECT_FALSE(store->deleteKey("a"));
  EXPECT_FALSE(store->check({"a"}));
  EXPECT_EQ(store->getNumKeys(), static_cast<std::int64_t>(keys.size()) - 1);
  EXPECT_THROW(store->set(std::string(200, '/'), bytes("x")), std::invalid_argument);
}

// clone (LibTorch 2.x's Store asks for it): the same keys and counters,
// through a descriptor of its own that outlives the store it came from, even
// when the directory's path now names another directory.
TEST(DirectoryStore, CloneSharesTheKeysAndOutlivesTheOriginal) {
  PrivateDir dir;
  auto store = open_store(dir.path);
  ASSERT_TRUE(store);
  store->set("before", bytes("1"));
  c10::intrusive_ptr<c10d::Store> copy = store->clone();
  ASSERT_TRUE(copy);
  EXPECT_EQ(copy->get("before"), bytes("1"));
  EXPECT_EQ(copy->add("counter", 2), 2);
  EXPECT_EQ(store->add("counter", 3), 5);
  EXPECT_EQ(copy->getTimeout(), store->getTimeout());
  store.reset();
  const fs::path moved = dir.path.string() + "_moved";
  fs::rename(dir.path, moved);
  ASSERT_TRUE(fs::create_directory(dir.path));
  auto entries = [](const fs::path& p) {
    return std::distance(fs::directory_iterator(p), fs::directory_iterator());
  };
  const auto held = entries(moved);
  copy->set("after", bytes("2"));
  EXPECT_EQ(entries(moved), held + 1);
  EXPECT_EQ(copy->get("after"), bytes("2"));
  EXPECT_TRUE(fs::is_empty(dir.path));
  std::error_code ec;
  fs::remove_all(moved, ec);
}

TEST(DirectoryStore, GetWaitsForTheKeyAndTimesOutNamingIt) {
  PrivateDir dir;
  auto store = open_store(dir.path, 300ms);
  ASSERT_TRUE(store);
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    store->set("late", bytes("here"));
  });
  EXPECT_EQ(store->get("late"), bytes("here"));
  writer.join();
  try {
    store->get("never");
    FAIL() << "get of a key nobody sets returned";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.path.string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(store->wait({"late", "never"}, 50ms), std::exception);
}

TEST(DirectoryStore, CompareSetFollowsC10dStores) {
  PrivateDir dir;
  auto store = open_store(dir.path);
  ASSERT_TRUE(store);
  // Absent key, something expected: unchanged, the expectation comes back.
  EXPECT_EQ(store->compareSet("k", bytes("x"), bytes("y")), bytes("x"));
  EXPECT_FALSE(store->check({"k"}));
  // Absent key, nothing expected: set.
  EXPECT_EQ(store->compareSet("k", {}, bytes("y")), bytes("y"));
  // Present, expectation wrong: the current value comes back.
  EXPECT_EQ(store->compareSet("k", bytes("x"), bytes("z")), bytes("y"));
  EXPECT_EQ(store->compareSet("k", bytes("y"), bytes("z")), bytes("z"));
  EXPECT_EQ(store->get("k"), bytes("z"));
}

// Two processes with two threads each add to one counter: no update lost.
TEST(DirectoryStore, CountersAreExactAcrossProcessesAndThreads) {
  PrivateDir dir;
  constexpr int kAdds = 200;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  auto hammer = [&] {
    auto store = DirectoryStore::open(dir.path.string(), 5s);
    if (!store) return false;
    std::thread other([&] {
      for (int i = 0; i < kAdds; ++i) (*store)->add("count", 1);
    });
    for (int i = 0; i < kAdds; ++i) (*store)->add("count", 1);
    other.join();
    return true;
  };
  if (child == 0) ::_exit(hammer() ? 0 : 1);
  EXPECT_TRUE(hammer());
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto store = open_store(dir.path);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->add("count", 0), 4 * kAdds);
  store->set("text", bytes("not a number"));
  EXPECT_THROW(store->add("text", 1), std::exception);
}

TEST(DirectoryStore, OnlyThisUsersPrivateDirectoryIsUsed) {
  PrivateDir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path inner = dir.path / "open";
  ASSERT_EQ(::mkdir(inner.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(inner.c_str(), 0755), 0);
  auto opened = DirectoryStore::open(inner.string(), 1s);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.status().message().find("has mode 0755"), std::string::npos)
      << opened.status().message();

  const fs::path link = dir.path / "link";
  fs::create_directory_symlink(dir.path, link);
  opened = DirectoryStore::open(link.string(), 1s);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.status().message().find("cannot be opened"), std::string::npos)
      << opened.status().message();

  opened = DirectoryStore::open((dir.path / "absent").string(), 1s);
  EXPECT_FALSE(opened);

  if (::geteuid() != 0) GTEST_SKIP() << "handing a directory to another user needs root";
  const fs::path foreign = dir.path / "foreign";
  ASSERT_EQ(::mkdir(foreign.c_str(), 0700), 0);
  ASSERT_EQ(::chown(foreign.c_str(), 65534, 65534), 0);
  opened = DirectoryStore::open(foreign.string(), 1s);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.status().message().find("is owned by uid 65534, not by this user"),
            std::string::npos)
      << opened.status().message();
}

// Hybrid mode's free single slots claim from one counter per step and
// delete it when the step is done (ProcessGroups::shared_delete): both stores
// a job meets must delete a counter made through the `fulcrum/shared`
// PrefixStore and count one key fewer. TCPStore is LibTorch 1.13's (workers
// started by torchrun), served here on a free port of the loopback.
TEST(SharedCounters, BothStoresDeleteAPrefixedCounterAndCountOneKeyFewer) {
  PrivateDir dir;
  std::vector<c10::intrusive_ptr<c10d::Store>> stores;
  stores.push_back(open_store(dir.path));
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = std::chrono::milliseconds(10000);
  stores.push_back(c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options));
  for (const auto& store : stores) {
    ASSERT_TRUE(store);
    store->set("rendezvous", bytes("kept"));
    auto shared = c10::make_intrusive<c10d::PrefixStore>("fulcrum/shared", store);
    const std::int64_t before = shared->getNumKeys();
    for (int step = 1; step <= 5; ++step) {
      const std::string key = "free_slots/step" + std::to_string(step);
      EXPECT_EQ(shared->add(key, 1), 1);
      EXPECT_EQ(shared->add(key, 1), 2);
      EXPECT_EQ(shared->getNumKeys(), before + 1) << "step " << step;
      EXPECT_TRUE(shared->deleteKey(key));
      EXPECT_EQ(shared->getNumKeys(), before) << "step " << step;
    }
    EXPECT_EQ(store->get("rendezvous"), bytes("kept"));
  }
}

}  // namespace
}  // namespace fulcrum::comm
