// A c10d::Store in a private directory of this host, for jobs whose ranks all
// run here (fulcrum train's launcher). The ranks meet in the directory
// instead of at a TCPStore, which LibTorch 1.13 binds on every interface
// without authentication: nothing listens on the network, and the
// directory's owner and mode keep other local users out.
//
// One file per key. A value is written under a temporary name and renamed into
// place, so a reader sees a whole value or none; counters (add) and
// compare-and-set update under an flock of the directory. Every file is
// reached through a descriptor of the directory opened once and checked then
// (owned by this user, no access for group or others), so a directory
// swapped for another after the check is never used.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/progress.h"
#include "fulcrum/status.h"

namespace fulcrum::comm {

// Whether `dir` is a directory (not a link) owned by this user with no
// permission bits for group or others: one line saying what is wrong if not.
Status check_private_directory(const std::string& dir, const std::string& what);

class DirectoryStore : public c10d::Store {
 public:
  // Opens `dir` (checked as above); waits and gets give up after `timeout`.
  static Result<c10::intrusive_ptr<DirectoryStore>> open(const std::string& dir,
                                                         std::chrono::milliseconds timeout);
  // Takes `dir_fd`, an open descriptor of the checked directory; use open().
  DirectoryStore(int dir_fd, std::string path, std::chrono::milliseconds timeout);
  ~DirectoryStore() override;
  DirectoryStore(const DirectoryStore&) = delete;
  DirectoryStore& operator=(const DirectoryStore&) = delete;

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  // Waits for the key, up to the store's timeout.
  std::vector<std::uint8_t> get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t value) override;
  std::vector<std::uint8_t> compareSet(const std::string& key,
                                       const std::vector<std::uint8_t>& expected,
                                       const std::vector<std::uint8_t>& desired) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // Another store on the same directory, for another thread: LibTorch 2.x
  // makes Store::clone pure virtual, 1.13 has none, so it is declared
  // without `override` and builds against both (clang, which asks for the
  // keyword where the class's other overrides have it, is told not to).
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Winconsistent-missing-override"
#endif
  c10::intrusive_ptr<c10d::Store> clone();
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int dir_fd_ = -1;
};

}  // namespace fulcrum::comm
