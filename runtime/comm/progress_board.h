// This rank's progress in the rendezvous store, shared by its groups'
// communicators (c10d_communicator.h): what lets a rank whose collective
// timed out name the rank that never came (progress.h says how).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/progress.h"

namespace fulcrum::comm {

// The training thread only updates the record in memory (a lock and a
// counter); a publisher thread writes it to the store, at most once per
// kPublishInterval, so collectives never wait for the store.
class ProgressBoard {
 public:
  ProgressBoard(c10::intrusive_ptr<c10d::Store> store, const GlooOptions& o,
                std::string report_dir);
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // Called as this rank enters collective `op` on `group`; returns its
  // sequence number there.
  std::int64_t enter(const std::string& group, const std::string& op);

  // The rank now waits in its latest operation on `group` (ProgressRecord::wait_in).
  void wait_in(const std::string& group);

  // What the error line of a timed-out collective adds, e.g. "; rank 3 never
  // entered it (last seen in ...)"; also writes the report for the launcher.
  // Empty when nothing could be learnt.
  std::string explain_timeout(const CollectiveRef& collective, const std::vector<int>& members,
                              Timeout timeout);

  // A collective failed: the process is ending.
  void abandon() { abandoned_ = true; }
  bool abandoned() const { return abandoned_; }

  // A collective failed because a peer went away: tells the launcher that
  // this failure is a consequence, so that a stall another rank reported
  // is named rather than this rank.
  void note_lost_peer() const;

 private:
  struct Shared {
    std::mutex mutex;
    std::condition_variable wake;
    ProgressRecord record;
    bool dirty = false;
    bool stop = false;
  };

  static void publish_loop(std::shared_ptr<Shared> shared, c10::intrusive_ptr<c10d::Store> store,
                           std::string key);

  // Every rank's record, read on a helper thread so that a store that does
  // not answer costs kProgressReadDeadline, not a hang. A thread still
  // blocked then is left behind: the process is about to exit.
  std::vector<std::optional<ProgressRecord>> read_all();

  // Written whole under a temporary name and renamed, so the launcher never
  // reads half a report.
  void write_report(const StallReport& report) const;

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_size_;
  MembersOf members_of_;
  std::string report_dir_;
  std::shared_ptr<Shared> shared_;
  std::thread publisher_;
  bool abandoned_ = false;
};

}  // namespace fulcrum::comm
