// Two schedules compared field by field under GoogleTest: the schedule
// tests that hold two ways of answering a request to the same answer.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "fulcrum/schedule_types.h"

namespace fulcrum::schedule_tests {

// Every field of both schedules, plans and positions included.
inline void expect_same(const Schedule& a, const Schedule& b, const std::string& where) {
  EXPECT_EQ(a.strategy_used, b.strategy_used) << where;
  EXPECT_EQ(a.fallback_reason, b.fallback_reason) << where;
  ASSERT_EQ(a.slots.size(), b.slots.size()) << where;
  for (std::size_t s = 0; s < a.slots.size(); ++s) {
    const ScheduleSlot& x = a.slots[s];
    const ScheduleSlot& y = b.slots[s];
    const std::string at = where + " slot " + std::to_string(s);
    EXPECT_EQ(x.ranks, y.ranks) << at;
    EXPECT_EQ(x.wave, y.wave) << at;
    ASSERT_EQ(x.pieces.size(), y.pieces.size()) << at;
    for (std::size_t k = 0; k < x.pieces.size(); ++k) {
      EXPECT_EQ(x.pieces[k].doc, y.pieces[k].doc) << at;
      EXPECT_EQ(x.pieces[k].offset, y.pieces[k].offset) << at;
      EXPECT_EQ(x.pieces[k].length, y.pieces[k].length) << at;
    }
    EXPECT_EQ(x.plan.strategy_used, y.plan.strategy_used) << at;
    EXPECT_EQ(x.plan.fallback_reason, y.plan.fallback_reason) << at;
    EXPECT_EQ(x.plan.cp_size, y.plan.cp_size) << at;
    EXPECT_EQ(x.plan.shard_len, y.plan.shard_len) << at;
    EXPECT_EQ(x.plan.padding, y.plan.padding) << at;
    EXPECT_EQ(x.plan.positions, y.plan.positions) << at;
    ASSERT_EQ(x.plan.work.size(), y.plan.work.size()) << at;
    for (std::size_t m = 0; m < x.plan.work.size(); ++m) {
      EXPECT_EQ(x.plan.work[m].tokens, y.plan.work[m].tokens) << at;
      EXPECT_EQ(x.plan.work[m].pairs, y.plan.work[m].pairs) << at;
      EXPECT_EQ(x.plan.work[m].tiles, y.plan.work[m].tiles) << at;
    }
  }
}

}  // namespace fulcrum::schedule_tests
