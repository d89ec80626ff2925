// The rank layout of WORLD = DP x CP in Megatron order: the context-parallel
// rank varies fastest, so the ranks of one CP group are adjacent (they share
// a host and its fast links when ranks are placed host by host).
//
//   cp_rank = rank % cp_size        dp_rank = rank / cp_size
//   cp group of a rank: the ranks with its dp_rank  (dp_rank*cp_size + 0 .. cp_size-1)
//   dp group of a rank: the ranks with its cp_rank  (cp_rank + 0*cp_size, 1*cp_size, ...)
//
// Plain integers, no LibTorch, so the layout is unit-tested on its own and any
// backend (Gloo, NCCL, an in-process fake) builds the same groups.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/status.h"

namespace fulcrum::comm {

// One process group as seen by one of its members.
struct GroupSpec {
  std::string name;        // "world", "cp[dp=1]", "dp[cp=0]": used in messages and store prefixes
  std::vector<int> ranks;  // global ranks of the members, in group-rank order
  int group_rank = 0;      // this rank's index in `ranks`

  int size() const { return static_cast<int>(ranks.size()); }
};

struct GroupLayout {
  int rank = 0;
  int world_size = 1;
  int dp_size = 1;
  int cp_size = 1;
  int dp_rank = 0;
  int cp_rank = 0;
  GroupSpec world;
  GroupSpec dp;
  GroupSpec cp;
};

// The groups of `rank`. Fails (with the values) unless world_size >= 1,
// dp_size, cp_size >= 1, dp_size * cp_size == world_size and
// 0 <= rank < world_size.
Result<GroupLayout> make_group_layout(int rank, int world_size, int dp_size, int cp_size);

// Every CP group (index = dp_rank) and every DP group (index = cp_rank) of the
// job, as lists of global ranks: what each member must agree on.
std::vector<std::vector<int>> all_cp_groups(int dp_size, int cp_size);
std::vector<std::vector<int>> all_dp_groups(int dp_size, int cp_size);

}  // namespace fulcrum::comm
