// HeldReplies on its own: replies leave in order once the backups have
// their log position, a request's replies get the position it ends at, and
// under replication after aggregation a sum's replies wait for the sum.
// (replication_test checks the same through replicated shards.)
#include "server/held_replies.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ps {
namespace {

HeldReplies::Held Reply(uint64_t request_id) {
  HeldReplies::Held held;
  held.frames.push_back(Frame::CopyOf("peer"));
  held.header.request_id = request_id;
  return held;
}

std::vector<uint64_t> Ids(const std::vector<HeldReplies::Held>& replies) {
  std::vector<uint64_t> ids;
  for (const HeldReplies::Held& r : replies) ids.push_back(r.header.request_id);
  return ids;
}

TEST(HeldRepliesTest, RepliesLeaveInOrderOnceTheBackupsHaveTheirPosition) {
  HeldReplies held;
  held.Hold(Reply(1), 5);
  held.Hold(Reply(2), 7);
  held.Hold(Reply(3), 7);
  EXPECT_TRUE(held.TakeCommitted(4).empty());
  EXPECT_EQ(Ids(held.TakeCommitted(6)), (std::vector<uint64_t>{1}));
  EXPECT_EQ(held.size(), 2u);
  EXPECT_EQ(Ids(held.TakeCommitted(100)), (std::vector<uint64_t>{2, 3}));
  EXPECT_TRUE(held.empty());
}

TEST(HeldRepliesTest, ARequestsRepliesWaitForThePositionItEndsAt) {
  HeldReplies held;
  held.Hold(Reply(1), 3);
  held.BeginRequest();
  EXPECT_TRUE(held.in_request());
  // Made before the request's entries: the position given is ignored.
  held.Hold(Reply(2), 0);
  // Not taken while the request is in progress, even when committed.
  EXPECT_EQ(Ids(held.TakeCommitted(100)), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(held.TakeAllAssigned().empty());
  held.EndRequest(9);
  EXPECT_FALSE(held.in_request());
  EXPECT_TRUE(held.TakeCommitted(8).empty());
  EXPECT_EQ(Ids(held.TakeCommitted(9)), (std::vector<uint64_t>{2}));
}

TEST(HeldRepliesTest, FencedTakesEveryAssignedReply) {
  HeldReplies held;
  held.Hold(Reply(1), 30);
  held.Hold(Reply(2), 40);
  EXPECT_EQ(Ids(held.TakeAllAssigned()), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(held.empty());
}

TEST(HeldRepliesTest, ASumsRepliesWaitForTheSumAndItsPushesAreKnownUntilThen) {
  HeldReplies held;
  held.HoldForSum(4, /*worker=*/0, /*session=*/11, /*request_id=*/1, Reply(1));
  held.HoldForSum(4, 1, 12, 2, Reply(2));
  held.HoldForSum(5, 0, 11, 3, Reply(3));
  // A repeat of request 2 joins clock 4's group.
  EXPECT_EQ(held.SummedInto(1, 12, 2), 4);
  EXPECT_EQ(held.SummedInto(1, 12, 9), -1);
  held.HoldForSum(4, Reply(22));
  EXPECT_TRUE(held.empty());  // nothing held for the backups yet

  RecentPushes recent(2, 16);
  ASSERT_TRUE(recent.Insert(0, 11, 1));
  ASSERT_TRUE(recent.Insert(0, 11, 0));
  RecentPushes replicated = held.Replicated(recent);
  // Push (0, 11, 1) is in an unreplicated sum: a backup's copy must not
  // count it as applied; (0, 11, 0) was applied before.
  EXPECT_TRUE(replicated.Insert(0, 11, 1));
  EXPECT_FALSE(replicated.Insert(0, 11, 0));

  EXPECT_EQ(held.TakeSummedPushes(5), (std::vector<uint64_t>{0, 11, 1, 1, 12, 2}));
  held.ReleaseSumReplies(5, 17);
  EXPECT_EQ(held.SummedInto(1, 12, 2), -1);
  EXPECT_EQ(held.SummedInto(0, 11, 3), 5);
  EXPECT_TRUE(held.TakeCommitted(16).empty());
  EXPECT_EQ(Ids(held.TakeCommitted(17)), (std::vector<uint64_t>{1, 2, 22}));
  // Clock 5's sum is still to come.
  held.ReleaseSumReplies(6, 20);
  EXPECT_EQ(Ids(held.TakeCommitted(20)), (std::vector<uint64_t>{3}));
}

}  // namespace
}  // namespace ps
