// WaitingRequests: what a shard holds until the job's clock lets it answer,
// counted per connection, found by clock, by deadline and by arrival.
#include "server/waiting_requests.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace ps {
namespace {

using Waiting = WaitingRequests::Waiting;
using TimePoint = WaitingRequests::TimePoint;

const TimePoint kStart = TimePoint() + std::chrono::hours(1);

// A request of `connection` at `clock` with `payload` bytes after the
// header, its request id `id`.
Waiting Request(const std::string& connection, int64_t clock, uint64_t id, size_t payload = 0,
                TimePoint deadline = TimePoint::max()) {
  Waiting w;
  w.frames.push_back(Frame::CopyOf(connection));
  w.frames.push_back(Frame::CopyOf(std::string(8, 'h')));
  if (payload > 0) w.frames.push_back(Frame::CopyOf(std::string(payload, 'v')));
  w.request.header.clock = clock;
  w.request.header.request_id = id;
  w.since = kStart;
  w.deadline = deadline;
  return w;
}

std::vector<uint64_t> Ids(const std::vector<Waiting>& taken) {
  std::vector<uint64_t> ids;
  for (const Waiting& w : taken) ids.push_back(w.request.header.request_id);
  return ids;
}

TEST(WaitingRequestsTest, CountsPullsAndPushesPerConnectionAndThePushesBytes) {
  WaitingRequests waiting;
  waiting.AddPull(Request("a", 3, 1), /*read=*/false);
  waiting.AddPull(Request("a", 4, 2), /*read=*/false);
  waiting.AddPush(Request("a", 5, 3, 100));
  waiting.AddPush(Request("b", 5, 4, 50));
  EXPECT_EQ(waiting.connection_count("a"), 3u);
  EXPECT_EQ(waiting.connection_count("b"), 1u);
  EXPECT_EQ(waiting.connection_count("c"), 0u);
  EXPECT_EQ(waiting.pulls(), 2u);
  EXPECT_EQ(waiting.pushes(), 2u);
  EXPECT_EQ(waiting.push_bytes(), 8u + 100 + 8 + 50);

  EXPECT_EQ(Ids(waiting.TakePushes([](const Waiting& w) { return w.request.header.request_id == 3; })),
            std::vector<uint64_t>({3}));
  EXPECT_EQ(waiting.connection_count("a"), 2u);
  EXPECT_EQ(waiting.push_bytes(), 8u + 50);
  EXPECT_EQ(Ids(waiting.TakeAllPulls()), std::vector<uint64_t>({1, 2}));
  EXPECT_EQ(waiting.connection_count("a"), 0u);
  EXPECT_EQ(Ids(waiting.TakePushes([](const Waiting&) { return true; })),
            std::vector<uint64_t>({4}));
  EXPECT_EQ(waiting.connection_count("b"), 0u);
  EXPECT_EQ(waiting.push_bytes(), 0u);
}

TEST(WaitingRequestsTest, ReadyPullsComeFromTheLowestClockUpInArrivalOrder) {
  WaitingRequests waiting;
  waiting.AddPull(Request("a", 5, 1), false);
  waiting.AddPull(Request("b", 2, 2), false);
  waiting.AddPull(Request("e", 4, 3), /*read=*/true);
  waiting.AddPull(Request("a", 3, 4), false);
  waiting.AddPull(Request("e", 9, 5), /*read=*/true);
  // Pulls up to clock 4 and reads up to clock 4: ids 2, 3, 4 in arrival order.
  auto up_to_4 = [](int64_t clock) { return clock <= 4; };
  EXPECT_EQ(Ids(waiting.TakeReadyPulls(up_to_4, up_to_4)), std::vector<uint64_t>({2, 3, 4}));
  EXPECT_EQ(waiting.pulls(), 2u);
  // The walk stops at the first clock refused.
  int asked = 0;
  auto counting = [&](int64_t) { ++asked; return false; };
  EXPECT_TRUE(waiting.TakeReadyPulls(counting, counting).empty());
  EXPECT_EQ(asked, 2);
  auto all = [](int64_t) { return true; };
  EXPECT_EQ(Ids(waiting.TakeReadyPulls(all, all)), std::vector<uint64_t>({1, 5}));
  EXPECT_EQ(waiting.connection_count("a"), 0u);
  EXPECT_EQ(waiting.connection_count("e"), 0u);
}

TEST(WaitingRequestsTest, ExpiredPullsComeByDeadlineAndLeaveTheirClocks) {
  WaitingRequests waiting;
  EXPECT_FALSE(waiting.next_deadline().has_value());
  waiting.AddPull(Request("a", 1, 1, 0, kStart + std::chrono::seconds(3)), false);
  waiting.AddPull(Request("a", 1, 2, 0, kStart + std::chrono::seconds(1)), false);
  waiting.AddPull(Request("e", 1, 3, 0, kStart + std::chrono::seconds(2)), true);
  ASSERT_TRUE(waiting.next_deadline().has_value());
  EXPECT_EQ(*waiting.next_deadline(), kStart + std::chrono::seconds(1));
  EXPECT_TRUE(waiting.TakeExpiredPulls(kStart).empty());
  EXPECT_EQ(Ids(waiting.TakeExpiredPulls(kStart + std::chrono::seconds(2))),
            std::vector<uint64_t>({2, 3}));
  EXPECT_EQ(*waiting.next_deadline(), kStart + std::chrono::seconds(3));
  // Gone from the clock index too: the one left is the only ready one.
  auto all = [](int64_t) { return true; };
  EXPECT_EQ(Ids(waiting.TakeReadyPulls(all, all)), std::vector<uint64_t>({1}));
  EXPECT_FALSE(waiting.next_deadline().has_value());
}

TEST(WaitingRequestsTest, AMovedRequestKeepsItsFramesWhereTheyWere) {
  WaitingRequests waiting;
  Waiting w = Request("a", 1, 1, 64);
  const void* payload = w.frames[2].data();
  waiting.AddPush(std::move(w));
  std::vector<Waiting> taken = waiting.TakePushes([](const Waiting&) { return true; });
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].frames[2].data(), payload);
}

}  // namespace
}  // namespace ps
