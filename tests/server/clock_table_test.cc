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
  ASSERT_TRUE(c.Decode({1, 2, 3, 1, 1, 1, 1, 0}, 100));
  c = ClockTable(3);
  EXPECT_FALSE(c.Decode({1, 2, 3}, 100));
  EXPECT_FALSE(c.Decode({1, 2, 300, 1, 1, 1, 1, 0}, 100));
  EXPECT_FALSE(c.Decode({1, 2, 3, 1, 2, 1, 1, 0}, 100));
  EXPECT_FALSE(c.Decode({1, 2, 3, 1, 1, 1, 2, 0}, 100));
  // Members of a clock: only with backup workers.
  EXPECT_FALSE(c.Decode({1, 2, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0}, 100));
  EXPECT_EQ(c.Encode(), ClockTable(3).Encode());
}

// Backup workers (consistency.backup_workers): 3 workers, a quorum of 2.
TEST(ClockTableQuorumTest, AClockCompletesWithItsFirstTwoPushersAndTheThirdIsLate) {
  ClockTable t(3, 2);
  ASSERT_TRUE(t.backups());
  EXPECT_TRUE(t.Admit(0, 0));
  EXPECT_TRUE(t.Admit(2, 0));
  EXPECT_TRUE(t.Admit(2, 0)) << "a member's next push of the clock is in too";
  EXPECT_FALSE(t.Admit(1, 0)) << "the clock has its two";
  EXPECT_FALSE(t.Finish(0, 0));
  EXPECT_FALSE(t.Finish(1, 0)) << "a late worker's finish completes nothing";
  EXPECT_TRUE(t.Finish(2, 0));
  EXPECT_EQ(t.min_clock(), 1);
  ASSERT_EQ(t.completed().size(), 1u);
  EXPECT_EQ(t.completed()[0].clock, 0);
  EXPECT_EQ(t.completed()[0].members, 2u);
  EXPECT_FALSE(t.Admit(1, 0)) << "a push of a completed clock is late";
  EXPECT_FALSE(t.Admit(0, 0));
}

TEST(ClockTableQuorumTest, AWorkerThatFinishesWithoutPushingHereTakesAPlaceWhileThereIsRoom) {
  ClockTable t(3, 2);
  EXPECT_TRUE(t.Admit(0, 0));
  EXPECT_FALSE(t.Finish(1, 0));  // no push to this shard: a zero gradient, and a member
  EXPECT_FALSE(t.Admit(2, 0)) << "the clock has its two";
  EXPECT_TRUE(t.Finish(0, 0));
  ASSERT_EQ(t.completed().size(), 1u);
  EXPECT_EQ(t.completed()[0].members, 2u);
}

TEST(ClockTableQuorumTest, ClocksNobodyPushedIntoCompleteOnceTwoWorkersFinishedThem) {
  ClockTable t(3, 2);
  EXPECT_FALSE(t.Finish(0, 9));
  EXPECT_TRUE(t.Finish(1, 6));
  EXPECT_EQ(t.min_clock(), 7) << "no sums to apply: one step";
  EXPECT_TRUE(t.completed().empty());
  EXPECT_EQ(t.slowest_worker(), 2u);
  // A worker far behind holds nothing back; its requests may carry the
  // job's clock, and a push there is its own.
  EXPECT_FALSE(t.Finish(2, 0));
  EXPECT_TRUE(t.Admit(2, 7));
  // A clock from far ahead does not loop clock by clock.
  ClockTable one(2, 1);
  EXPECT_TRUE(one.Finish(0, int64_t{1} << 40));
  EXPECT_EQ(one.min_clock(), (int64_t{1} << 40) + 1);
}

TEST(ClockTableQuorumTest, AMemberThatDiesGivesItsPlaceUpAndALateWorkerCannotTakeIt) {
  {
    ClockTable t(3, 2);
    EXPECT_TRUE(t.Admit(0, 0));
    EXPECT_TRUE(t.Admit(1, 0));
    EXPECT_FALSE(t.Admit(2, 0));
    EXPECT_FALSE(t.Finish(0, 0));
    EXPECT_FALSE(t.Finish(2, 0));
    // Worker 1 dies before finishing: worker 2's gradient was dropped, so
    // worker 0's is the clock's whole update.
    EXPECT_TRUE(t.Exclude(1));
    ASSERT_EQ(t.completed().size(), 1u);
    EXPECT_EQ(t.completed()[0].members, 1u);
    EXPECT_FALSE(t.Admit(1, 0)) << "sent again after a restart: late";
  }
  {
    ClockTable t(3, 2);
    EXPECT_TRUE(t.Admit(0, 0));
    EXPECT_TRUE(t.Admit(1, 0));
    EXPECT_FALSE(t.Finish(0, 0));
    EXPECT_FALSE(t.Finish(2, 0)) << "no room: not a member yet";
    // Worker 1 dies: worker 2, which pushed nothing here, takes its place.
    EXPECT_TRUE(t.Exclude(1));
    ASSERT_EQ(t.completed().size(), 1u);
    EXPECT_EQ(t.completed()[0].members, 2u);
  }
}

TEST(ClockTableQuorumTest, WorkersThatLeftAfterFinishingStillCountTowardTheQuorum) {
  // The end of a job: the fast workers finish their last clock and leave.
  ClockTable t(3, 2);
  EXPECT_TRUE(t.Admit(0, 0));
  EXPECT_FALSE(t.Finish(0, 0));
  EXPECT_FALSE(t.Exclude(0));
  EXPECT_TRUE(t.Admit(1, 0));
  EXPECT_TRUE(t.Finish(1, 0));
  ASSERT_EQ(t.completed().size(), 1u);
  EXPECT_EQ(t.completed()[0].members, 2u);
  // With one worker left the quorum is what is left.
  EXPECT_FALSE(t.Exclude(1));
  EXPECT_TRUE(t.Admit(2, 1));
  EXPECT_TRUE(t.Finish(2, 1));
  EXPECT_EQ(t.min_clock(), 2);
  EXPECT_EQ(t.completed()[0].members, 1u);
}

TEST(ClockTableQuorumTest, EncodeAndDecodeCarryTheMembers) {
  ClockTable a(3, 2);
  a.Finish(0, 3);
  a.Finish(1, 3);  // the job is at clock 4; worker 2 is behind, counted
  a.Admit(0, 4);
  a.Admit(2, 4);
  a.Admit(1, 4);  // late
  ClockTable b(3, 2);
  ASSERT_TRUE(b.Decode(a.Encode(), 100));
  EXPECT_EQ(b.Encode(), a.Encode());
  EXPECT_EQ(b.min_clock(), 4);
  EXPECT_FALSE(b.Admit(1, 4));
  EXPECT_TRUE(b.Admit(2, 4));
  // Refused: a state other than 0-2, more members than the quorum, a
  // clock below the minimum, a count that does not match.
  std::vector<int64_t> data = a.Encode();
  auto refused = [&](size_t at, int64_t value) {
    std::vector<int64_t> bad = data;
    bad[at] = value;
    ClockTable c(3, 2);
    return !c.Decode(bad, 100) && c.Encode() == ClockTable(3, 2).Encode();
  };
  ASSERT_EQ(data.size(), 2 * 3 + 2 + 4u);
  EXPECT_TRUE(refused(9, 3));
  EXPECT_TRUE(refused(10, 1)) << "three members of a quorum of two";
  EXPECT_TRUE(refused(8, 2));
  EXPECT_TRUE(refused(7, 2));
}

}  // namespace
}  // namespace ps
