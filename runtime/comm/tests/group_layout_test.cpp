// The DP x CP rank layout (Megatron order, CP fastest), without LibTorch.
#include "comm/group_layout.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace fulcrum::comm {
namespace {

TEST(GroupLayout, MegatronOrderCpFastest) {
  // world 8 = dp 2 x cp 4: ranks 0-3 are one CP group, 4-7 the other.
  const GroupLayout l = make_group_layout(6, 8, 2, 4).value();
  EXPECT_EQ(l.cp_rank, 2);
  EXPECT_EQ(l.dp_rank, 1);
  EXPECT_EQ(l.cp.ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(l.cp.group_rank, 2);
  EXPECT_EQ(l.cp.name, "cp[dp=1]");
  EXPECT_EQ(l.dp.ranks, (std::vector<int>{2, 6}));
  EXPECT_EQ(l.dp.group_rank, 1);
  EXPECT_EQ(l.dp.name, "dp[cp=2]");
  EXPECT_EQ(l.world.size(), 8);
  EXPECT_EQ(l.world.group_rank, 6);
}

TEST(GroupLayout, EveryRankAgreesWithEveryGroupItBelongsTo) {
  for (int dp = 1; dp <= 4; ++dp) {
    for (int cp = 1; cp <= 5; ++cp) {
      const int world = dp * cp;
      std::set<std::vector<int>> cp_groups, dp_groups;
      for (int r = 0; r < world; ++r) {
        const GroupLayout l = make_group_layout(r, world, dp, cp).value();
        ASSERT_EQ(l.cp.size(), cp);
        ASSERT_EQ(l.dp.size(), dp);
        // The rank sits at its group rank, in both groups.
        ASSERT_EQ(l.cp.ranks[l.cp.group_rank], r);
        ASSERT_EQ(l.dp.ranks[l.dp.group_rank], r);
        // The CP and DP groups of a rank meet only in the rank itself.
        for (int x : l.cp.ranks) {
          for (int y : l.dp.ranks) ASSERT_TRUE(x != y || x == r);
        }
        // A rank's group is the same list for every member.
        ASSERT_EQ(l.cp.ranks, all_cp_groups(dp, cp)[l.dp_rank]);
        ASSERT_EQ(l.dp.ranks, all_dp_groups(dp, cp)[l.cp_rank]);
        cp_groups.insert(l.cp.ranks);
        dp_groups.insert(l.dp.ranks);
      }
      // The groups partition the world.
      EXPECT_EQ(static_cast<int>(cp_groups.size()), dp);
      EXPECT_EQ(static_cast<int>(dp_groups.size()), cp);
      std::vector<int> seen(world, 0);
      for (const auto& g : cp_groups) {
        for (int r : g) ++seen[r];
      }
      for (int count : seen) EXPECT_EQ(count, 1);
    }
  }
}

TEST(GroupLayout, RejectsInconsistentSizesWithTheValues) {
  const auto bad = make_group_layout(0, 6, 2, 4);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("world_size 6, dp_size 2, cp_size 4"), std::string::npos)
      << bad.status().message();
  const auto out_of_range = make_group_layout(8, 8, 2, 4);
  ASSERT_FALSE(out_of_range.is_ok());
  EXPECT_NE(out_of_range.status().message().find("rank 8"), std::string::npos);
  EXPECT_FALSE(make_group_layout(0, 0, 1, 1).is_ok());
  EXPECT_FALSE(make_group_layout(0, 4, 0, 4).is_ok());
  EXPECT_FALSE(make_group_layout(-1, 4, 1, 4).is_ok());
}

}  // namespace
}  // namespace fulcrum::comm
