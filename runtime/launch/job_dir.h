// The job's private directory (internal to fulcrum_launch): made where
// TMPDIR points only when no other user could replace it, holding the
// workers' rendezvous, their stall reports and lost-peer notes, and their
// completion notes; removed with the launch.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "comm/progress.h"

namespace fulcrum::launch {

// The job's private directory (mkdtemp: mode 0700, this user's), removed with
// everything in it when the launch ends. The workers meet in its rendezvous/
// (a DirectoryStore, so nothing listens on the network), a worker whose
// collective timed out leaves a StallReport (comm/progress.h) naming the rank
// it waited for, one that lost a peer says so, and one whose run finished
// leaves its completion note. Without it the launch does not start.
class JobDir {
 public:
  JobDir();

  // Why the directory could not be made; empty when it was.
  const std::string& error() const { return error_; }
  std::string rendezvous_path() const { return path_ + "/rendezvous"; }
  static std::string completion_note_name(int rank) {
    return "rank-" + std::to_string(rank) + ".done";
  }
  std::string completion_note_path(int rank) const {
    return path_ + "/" + completion_note_name(rank);
  }
  // Whether the directory holds an entry `name` (of any type).
  bool has(const std::string& name) const;
  bool noted_lost_peer(int rank) const { return has(comm::lost_peer_note_name(rank)); }
  ~JobDir();
  JobDir(const JobDir&) = delete;
  JobDir& operator=(const JobDir&) = delete;

  const std::string& path() const { return path_; }

  // The reports present, `first`'s first; nullopt unless `first` wrote one
  // (its failure was a timeout) or noted that it lost a peer in a collective
  // (its failure was a consequence: a rank that timed out may have closed
  // its connections first, and its report names the cause).
  std::optional<std::vector<comm::StallReport>> read(int first) const;

 private:
  std::string path_;
  std::string error_;
};

}  // namespace fulcrum::launch
