#include "comm/group_layout.h"

#include <string>
#include <vector>

namespace fulcrum::comm {

std::vector<std::vector<int>> all_cp_groups(int dp_size, int cp_size) {
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(dp_size));
  for (int d = 0; d < dp_size; ++d) {
    for (int c = 0; c < cp_size; ++c) groups[d].push_back(d * cp_size + c);
  }
  return groups;
}

std::vector<std::vector<int>> all_dp_groups(int dp_size, int cp_size) {
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(cp_size));
  for (int c = 0; c < cp_size; ++c) {
    for (int d = 0; d < dp_size; ++d) groups[c].push_back(d * cp_size + c);
  }
  return groups;
}

Result<GroupLayout> make_group_layout(int rank, int world_size, int dp_size, int cp_size) {
  const std::string sizes = "world_size " + std::to_string(world_size) + ", dp_size " +
                            std::to_string(dp_size) + ", cp_size " + std::to_string(cp_size);
  if (world_size < 1 || dp_size < 1 || cp_size < 1) {
    return invalid_argument("process group sizes must be >= 1 (" + sizes + ")");
  }
  // Compare in 64 bits: a product of two ints may overflow.
  if (static_cast<std::int64_t>(dp_size) * cp_size != world_size) {
    return invalid_argument("dp_size * cp_size must equal world_size (" + sizes +
                            "); set dp_size = world_size / cp_size");
  }
  if (rank < 0 || rank >= world_size) {
    return invalid_argument("rank " + std::to_string(rank) + " is outside [0, " +
                            std::to_string(world_size) + ")");
  }
  GroupLayout layout;
  layout.rank = rank;
  layout.world_size = world_size;
  layout.dp_size = dp_size;
  layout.cp_size = cp_size;
  layout.cp_rank = rank % cp_size;
  layout.dp_rank = rank / cp_size;

  layout.world.name = "world";
  for (int r = 0; r < world_size; ++r) layout.world.ranks.push_back(r);
  layout.world.group_rank = rank;

  layout.cp.name = "cp[dp=" + std::to_string(layout.dp_rank) + "]";
  layout.cp.ranks = all_cp_groups(dp_size, cp_size)[layout.dp_rank];
  layout.cp.group_rank = layout.cp_rank;

  layout.dp.name = "dp[cp=" + std::to_string(layout.cp_rank) + "]";
  layout.dp.ranks = all_dp_groups(dp_size, cp_size)[layout.cp_rank];
  layout.dp.group_rank = layout.dp_rank;
  return layout;
}

}  // namespace fulcrum::comm
