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

}  // namespace
}  // namespace ps
