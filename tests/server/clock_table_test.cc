#include "server/clock_table.h"

#include <gtest/gtest.h>

#include "common/options.h"

namespace ps {
namespace {

TEST(ClockTableTest, MinimumAdvancesWhenTheSlowestFinishes) {
  ClockTable t(3);
  EXPECT_EQ(t.min_clock(), 0);
  EXPECT_FALSE(t.Finish(0, 0));
  EXPECT_FALSE(t.Finish(1, 0));
  EXPECT_EQ(t.slowest_worker(), 2u);
  EXPECT_TRUE(t.Finish(2, 0));
  EXPECT_EQ(t.min_clock(), 1);
  EXPECT_EQ(t.clock(2), 1);
}

TEST(ClockTableTest, RepeatedOrOldReportsChangeNothing) {
  ClockTable t(2);
  EXPECT_FALSE(t.Finish(0, 4));
  EXPECT_EQ(t.clock(0), 5);
  EXPECT_FALSE(t.Finish(0, 4));
  EXPECT_FALSE(t.Finish(0, 1));
  EXPECT_EQ(t.clock(0), 5);
  EXPECT_TRUE(t.Finish(1, 2));  // a worker may skip ahead (it rejoins later)
  EXPECT_EQ(t.min_clock(), 3);
}

TEST(ClockTableTest, PullReadinessFollowsTheBound) {
  ClockTable t(2);
  t.Finish(0, 0);
  t.Finish(0, 1);  // worker 0 at 2, worker 1 at 0: min 0
  EXPECT_TRUE(t.PullReady(0, 0));
  EXPECT_FALSE(t.PullReady(1, 0));   // bsp: needs min >= 1
  EXPECT_TRUE(t.PullReady(2, 2));    // ssp 2: min >= 0
  EXPECT_FALSE(t.PullReady(3, 2));
  EXPECT_TRUE(t.PullReady(int64_t{1} << 62, kUnboundedStaleness));  // asp
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(ClockTableTest, ExcludedWorkersDoNotHoldTheMinimumBack) {
  ClockTable t(3);
  t.Finish(0, 4);
  t.Finish(1, 2);  // clocks 5, 3, 0
  EXPECT_EQ(t.slowest_worker(), 2u);
  EXPECT_TRUE(t.Exclude(2));
  EXPECT_EQ(t.min_clock(), 3);
  EXPECT_EQ(t.slowest_worker(), 1u);
  EXPECT_FALSE(t.Exclude(2));
  // Back at the minimum, never behind it.
  t.Include(2);
  EXPECT_EQ(t.clock(2), 3);
  EXPECT_EQ(t.min_clock(), 3);
  EXPECT_TRUE(t.counted(2));
}

TEST(ClockTableTest, MinimumNeverGoesBackWhenEveryWorkerLeaves) {
  ClockTable t(2);
  t.Finish(0, 1);
  t.Finish(1, 3);
  EXPECT_EQ(t.min_clock(), 2);
  EXPECT_TRUE(t.Exclude(0));
  EXPECT_EQ(t.min_clock(), 4);
  EXPECT_FALSE(t.Exclude(1));
  EXPECT_EQ(t.min_clock(), 4);
}

TEST(ClockTableTest, EncodeAndDecodeCarryTheWholeTable) {
  ClockTable a(3);
  a.Finish(0, 4);
  a.Finish(1, 2);
  a.Finish(2, 6);
  a.Exclude(1);  // the minimum moves to 5
  ClockTable b(3);
  ASSERT_TRUE(b.Decode(a.Encode(), 100));
  EXPECT_EQ(b.Encode(), a.Encode());
  EXPECT_EQ(b.min_clock(), 5);
  EXPECT_FALSE(b.counted(1));
  // Refused, and nothing changes: wrong size, a clock past the limit, a
  // flag other than 0/1, a minimum above a counted worker's clock.
  ClockTable c(3);
  EXPECT_FALSE(c.Decode({1, 2, 3}, 100));
  EXPECT_FALSE(c.Decode({1, 2, 300, 1, 1, 1, 1}, 100));
  EXPECT_FALSE(c.Decode({1, 2, 3, 1, 2, 1, 1}, 100));
  EXPECT_FALSE(c.Decode({1, 2, 3, 1, 1, 1, 2}, 100));
  EXPECT_EQ(c.Encode(), ClockTable(3).Encode());
}

}  // namespace
}  // namespace ps
