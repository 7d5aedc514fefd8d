#include "server/recent_pushes.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

TEST(RecentPushesTest, ARepeatIsSeenPerWorkerAndSession) {
  RecentPushes recent(2, 8);
  EXPECT_TRUE(recent.Insert(0, 5, 1));
  EXPECT_FALSE(recent.Insert(0, 5, 1));  // sent again
  EXPECT_TRUE(recent.Insert(1, 5, 1));   // another worker
  EXPECT_TRUE(recent.Insert(0, 6, 1));   // another session of worker 0
  EXPECT_TRUE(recent.Insert(0, 5, 2));
  EXPECT_EQ(recent.repeats(), 1u);
}

TEST(RecentPushesTest, ContainsAsksWithoutRecordingOrCounting) {
  RecentPushes recent(2, 2);
  EXPECT_FALSE(recent.Contains(0, 5, 1));
  EXPECT_TRUE(recent.Insert(0, 5, 1));
  EXPECT_TRUE(recent.Contains(0, 5, 1));
  EXPECT_FALSE(recent.Contains(1, 5, 1));  // another worker
  EXPECT_FALSE(recent.Contains(0, 6, 1));  // another session
  EXPECT_FALSE(recent.Contains(7, 5, 1));  // no such worker
  EXPECT_FALSE(recent.Contains(0, 0, 1));  // no session: never recorded
  recent.Insert(0, 5, 2);
  recent.Insert(0, 5, 3);                  // 1 leaves the window
  EXPECT_FALSE(recent.Contains(0, 5, 1));
  recent.Forget(0, 5, 3);
  EXPECT_FALSE(recent.Contains(0, 5, 3));
  EXPECT_EQ(recent.repeats(), 0u);
}

TEST(RecentPushesTest, WithoutASessionNothingIsARepeat) {
  RecentPushes recent(1, 8);
  EXPECT_TRUE(recent.Insert(0, 0, 3));
  EXPECT_TRUE(recent.Insert(0, 0, 3));
  EXPECT_EQ(recent.repeats(), 0u);
}

TEST(RecentPushesTest, KeepsTheLastPushesOfEachWorker) {
  RecentPushes recent(2, 4);
  for (uint64_t id = 1; id <= 6; ++id) EXPECT_TRUE(recent.Insert(0, 9, id));
  for (uint64_t id = 1; id <= 6; ++id) EXPECT_TRUE(recent.Insert(1, 9, id));
  // Worker 0 remembers 3..6; 1 and 2 have left the window.
  EXPECT_FALSE(recent.Insert(0, 9, 6));
  EXPECT_FALSE(recent.Insert(0, 9, 3));
  EXPECT_TRUE(recent.Insert(0, 9, 2));
  EXPECT_EQ(recent.repeats(), 2u);
}

TEST(RecentPushesTest, EncodeAndDecodeCarryEveryWindow) {
  RecentPushes a(2, 3);
  for (uint64_t r = 1; r <= 5; ++r) a.Insert(0, 9, r);  // keeps 3, 4, 5
  a.Insert(1, 7, 1);
  RecentPushes b(2, 3);
  ASSERT_TRUE(b.Decode(a.Encode()));
  EXPECT_EQ(b.Encode(), a.Encode());
  EXPECT_FALSE(b.Insert(0, 9, 4));  // a repeat on the copy too
  EXPECT_TRUE(b.Insert(0, 9, 2));   // forgotten before the copy
  // Refused: too few windows, a window over per_worker, bytes left over.
  RecentPushes c(2, 3);
  EXPECT_FALSE(c.Decode({0}));
  EXPECT_FALSE(c.Decode({4, 1, 1, 1, 2, 1, 3, 1, 4, 0}));
  EXPECT_FALSE(c.Decode({0, 0, 5}));
  EXPECT_EQ(c.Encode(), (std::vector<uint64_t>{0, 0}));
}

}  // namespace
}  // namespace ps
