// Who is a collective waiting for? Every rank records, in the rendezvous
// store, how many collectives it entered on each of its groups and which one
// it entered last. When a collective times out, the rank that gave up reads
// its peers' records and follows who waits for whom to the rank that stopped
// entering collectives: the stalled one. That rank is then named in the
// timed-out rank's error line and, through a small report file, in the
// launcher's final line.
//
// Plain integers and strings, no LibTorch: the records, the analysis and the
// report format are unit-tested on their own, and the launcher (which never
// links LibTorch) reads the reports.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/group_layout.h"
#include "fulcrum/status.h"

namespace fulcrum::comm {

// What one rank published: for each of its multi-rank groups, how many
// collectives it entered there and the last one's name; and the group of the
// last collective it entered (empty before the first).
struct ProgressRecord {
  struct Group {
    std::int64_t entered = 0;
    std::string last_op;  // empty while entered == 0
  };
  std::map<std::string, Group> groups;  // by group name
  std::string last_group;

  // Called when the rank enters collective `op` on `group`; returns its
  // sequence number there (1 for the first).
  std::int64_t enter(const std::string& group, const std::string& op);
  // The rank now waits in its latest operation on `group`, entered before:
  // an exchange enters the pair group of every peer at once, then waits for
  // them one by one, and the one it waits for is what others must see.
  void wait_in(const std::string& group);
  // "g <name> <entered> <op>" lines and a "last <name>" line.
  std::string encode() const;
  static Result<ProgressRecord> decode(const std::string& text);
};

// A collective: "<op> #<seq> on group <group>".
struct CollectiveRef {
  std::string op;
  std::int64_t seq = 0;
  std::string group;
  std::string describe() const;
};

struct WaitingRank {
  int rank = 0;
  CollectiveRef in;            // the collective it is blocked in
  std::vector<int> for_ranks;  // the members of that group that have not entered it
};

struct StallAnalysis {
  // The members of the timed-out collective that never entered it.
  std::vector<int> missing;
  // The ranks at the end of the waits-for chains: not blocked in any
  // collective, yet behind their peers. Usually one.
  std::vector<int> stalled;
  // Where each stalled rank was last seen (absent: it published nothing).
  std::map<int, CollectiveRef> last_seen;
  // Every rank whose record shows it blocked in a collective (the reporter
  // included), with that collective, rank order.
  std::vector<WaitingRank> waiting;
  // Ranks whose records could not be read or decoded.
  std::vector<int> unknown;
};

// Point-to-point messages between two ranks count as operations of their
// pair group "p2p[a,b]" (a < b, global ranks): both call exchange with each
// other equally often, so the pair's sequence numbers agree as a group's do.
std::string pair_group(int rank, int peer);

// The ranks of the job's groups by name, as make_group_layout builds them,
// and of pair groups.
using MembersOf = std::function<std::vector<int>(const std::string& group)>;
MembersOf job_groups(int world_size, int dp_size, int cp_size);

// `reporter` timed out in `timed_out`, a collective of a group with
// `members` (global ranks). `records` holds what every world rank published
// (nullopt: unreadable). A rank is blocked when a member of the group of its
// last collective has not entered that collective yet; a missing rank that is
// not blocked is stalled, a blocked one is followed to the ranks it waits for.
StallAnalysis analyse_stall(int reporter, const CollectiveRef& timed_out,
                            const std::vector<int>& members,
                            const std::vector<std::optional<ProgressRecord>>& records,
                            const MembersOf& members_of);

// What follows "<op> on group <g> timed out after <t>" in the error line,
// starting with "; ", e.g.
//   "; rank 3 never entered it (last seen in all_reduce_sum #6 on group world)"
// Empty when nothing useful is known (no rank missing, all unreadable).
std::string describe_stall(const StallAnalysis& analysis);

// "3 s", "1.5 s", "250 ms".
std::string format_duration_ms(std::int64_t ms);
// "0, 1, 2" or "0-3, 6".
std::string format_ranks(std::vector<int> ranks);
// "rank 3" or "ranks 0, 1".
std::string ranks_phrase(const std::vector<int>& ranks);

// What a timed-out rank tells the launcher (a file in the directory named by
// FULCRUM_STALL_REPORT_DIR): line based, first line "fulcrum-stall-report 1".
inline constexpr const char* kStallReportDirVariable = "FULCRUM_STALL_REPORT_DIR";

// The directory where the ranks of a job on one host meet (a DirectoryStore,
// comm/directory_store.h) instead of at a TCPStore: set by the launcher to a
// private directory of its own, mode 0700.
inline constexpr const char* kRendezvousDirVariable = "FULCRUM_RENDEZVOUS_DIR";

struct StallReport {
  int reporter = 0;
  std::int64_t timeout_ms = 0;
  CollectiveRef timed_out;
  std::vector<int> stalled;
  std::vector<WaitingRank> waiting;

  std::string encode() const;
  static Result<StallReport> decode(const std::string& text);
};

// The file name of `rank`'s report in the directory: "rank-<rank>.stall".
std::string stall_report_name(int rank);
// The file a rank leaves there when its collective failed because a peer
// went away (a consequence, not a cause): "rank-<rank>.lost".
std::string lost_peer_note_name(int rank);

// The launcher's final line from the reports of the ranks that timed out
// (the first one is the first failed rank's): e.g.
//   "fulcrum: rank 3 stalled (ranks 0, 1, 2 were waiting for it in all_gather
//    on group cp[dp=1] and all_gather on group world; rank 2 timed out after
//    3 s); stopped all ranks"
// nullopt when the reports name no stalled rank.
std::optional<std::string> stall_summary(const std::vector<StallReport>& reports);

}  // namespace fulcrum::comm
