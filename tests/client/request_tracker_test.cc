// The request tracker on its own: tickets, parts, deadlines on a fake clock
// and resend bookkeeping, with no sockets.
#include "client/request_tracker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/util/fake_clock.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

class RequestTrackerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  RequestTracker tracker_{&clock_, milliseconds(100), 2};
};

TEST_F(RequestTrackerTest, TicketCompletesWhenItsPartsAndItsIssuerAreDone) {
  const Ticket t = tracker_.NewTicket(nullptr);
  tracker_.Add(1, {.ticket = t, .shard = 0, .op = Op::kPush});
  tracker_.Add(2, {.ticket = t, .shard = 1, .op = Op::kPush});
  EXPECT_EQ(tracker_.size(), 2u);
  EXPECT_EQ(tracker_.in_flight(0), 1u);
  tracker_.Finish(1, Status::Ok());
  tracker_.Finish(2, Status::Ok());
  EXPECT_FALSE(tracker_.Done(t));  // the issuer still holds it
  tracker_.Release(t, Status::Ok());
  EXPECT_TRUE(tracker_.Done(t));
  ASSERT_OK(tracker_.CheckWaitable(t));
  EXPECT_OK(tracker_.Take(t));
  EXPECT_EQ(tracker_.CheckWaitable(t).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tracker_.size(), 0u);
  EXPECT_EQ(tracker_.in_flight(0), 0u);
}

TEST_F(RequestTrackerTest, AFinishStepRunsOnceWhenTheTicketCompletesBeforeItsCallback) {
  std::vector<std::string> order;
  const Ticket t = tracker_.NewTicket([&](const Status&) { order.push_back("done"); },
                                      [&](const Status& status) {
                                        EXPECT_EQ(status, DataLossError("lost"));
                                        order.push_back("finish");
                                      });
  tracker_.Add(1, {.ticket = t});
  tracker_.Release(t, Status::Ok());
  EXPECT_TRUE(order.empty());  // a part is still in flight
  tracker_.Finish(1, DataLossError("lost"));
  EXPECT_EQ(order, (std::vector<std::string>{"finish", "done"}));
  // Without a callback: it has run before the ticket can be taken.
  bool finished = false;
  const Ticket u = tracker_.NewTicket(nullptr, [&](const Status&) { finished = true; });
  tracker_.Release(u, Status::Ok());
  EXPECT_TRUE(finished);
  EXPECT_OK(tracker_.Take(u));
}

TEST_F(RequestTrackerTest, TicketKeepsItsFirstError) {
  const Ticket t = tracker_.NewTicket(nullptr);
  tracker_.Add(1, {.ticket = t});
  tracker_.Add(2, {.ticket = t});
  tracker_.Finish(2, DataLossError("first"));
  tracker_.Finish(1, InternalError("second"));
  tracker_.Release(t, Status::Ok());
  EXPECT_EQ(tracker_.Take(t), DataLossError("first"));
}

// A pull one shard refused after waiting for a slow worker, while another
// shard never answered: the ticket's error says both, first error first,
// each other shard once, a few at most.
TEST_F(RequestTrackerTest, TicketAppendsTheFirstErrorOfEachOtherShard) {
  RequestTracker tracker{&clock_, milliseconds(100), 5};
  const Ticket t = tracker.NewTicket(nullptr);
  for (uint64_t id = 1; id <= 6; ++id) {
    tracker.Add(id, {.ticket = t, .shard = static_cast<uint32_t>(id == 6 ? 1 : id - 1)});
  }
  tracker.Finish(1, DeadlineExceededError("shard 0 waited for worker 2"));
  tracker.Finish(2, DeadlineExceededError("server 1 got no reply"));
  tracker.Finish(6, UnavailableError("server 1 again"));  // shard 1 said its part already
  tracker.Finish(3, InternalError("server 2 broke"));
  tracker.Finish(4, InternalError("server 3 broke"));  // past the most carried
  tracker.Finish(5, Status::Ok());
  tracker.Release(t, Status::Ok());
  EXPECT_EQ(tracker.Take(t),
            DeadlineExceededError("shard 0 waited for worker 2; and DeadlineExceeded: server 1 "
                                  "got no reply; and Internal: server 2 broke"));
}

TEST_F(RequestTrackerTest, CallbackRunsOnceAfterTheTicketIsForgotten) {
  int calls = 0;
  Status got;
  Ticket t = 0;
  t = tracker_.NewTicket([&](const Status& s) {
    ++calls;
    got = s;
    // Forgotten already: a new request may start from here.
    EXPECT_EQ(tracker_.CheckWaitable(t).code(), StatusCode::kInvalidArgument);
    const Ticket next = tracker_.NewTicket(nullptr);
    tracker_.Release(next, Status::Ok());
  });
  EXPECT_EQ(tracker_.CheckWaitable(t).code(), StatusCode::kInvalidArgument);  // has a callback
  tracker_.Add(7, {.ticket = t});
  tracker_.Release(t, Status::Ok());
  EXPECT_EQ(calls, 0);
  tracker_.Finish(7, UnavailableError("gone"));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, UnavailableError("gone"));
  tracker_.Finish(7, Status::Ok());  // unknown now: nothing happens
  EXPECT_EQ(calls, 1);
}

TEST_F(RequestTrackerTest, DeadlinesExpireOnTheClockOnceEach) {
  const Ticket t = tracker_.NewTicket(nullptr);
  tracker_.Add(1, {.ticket = t});
  clock_.Advance(milliseconds(50));
  tracker_.Add(2, {.ticket = t});
  ASSERT_TRUE(tracker_.NextDeadline().has_value());
  EXPECT_EQ(*tracker_.NextDeadline(), clock_.Now() + milliseconds(50));
  EXPECT_EQ(tracker_.PopExpired(clock_.Now()), 0u);
  clock_.Advance(milliseconds(50));
  EXPECT_EQ(tracker_.PopExpired(clock_.Now()), 1u);
  EXPECT_EQ(tracker_.PopExpired(clock_.Now()), 0u);  // returned once
  clock_.Advance(milliseconds(50));
  EXPECT_EQ(tracker_.PopExpired(clock_.Now()), 2u);
}

TEST_F(RequestTrackerTest, FinishedOrExtendedPartsDoNotExpireAtTheirOldDeadline) {
  const Ticket t = tracker_.NewTicket(nullptr);
  tracker_.Add(1, {.ticket = t});
  Part& two = tracker_.Add(2, {.ticket = t});
  tracker_.Finish(1, Status::Ok());
  tracker_.Extend(2, two, clock_.Now() + milliseconds(500));
  clock_.Advance(milliseconds(100));
  EXPECT_EQ(tracker_.PopExpired(clock_.Now()), 0u);
  clock_.Advance(milliseconds(400));
  EXPECT_EQ(tracker_.PopExpired(clock_.Now()), 2u);
}

TEST_F(RequestTrackerTest, InFlightToAShardIsOldestFirst) {
  const Ticket t = tracker_.NewTicket(nullptr);
  for (uint64_t id : {9u, 3u, 5u, 4u}) tracker_.Add(id, {.ticket = t, .shard = id == 4 ? 0u : 1u});
  EXPECT_EQ(tracker_.InFlightTo(1), (std::vector<uint64_t>{3, 5, 9}));
  EXPECT_EQ(tracker_.InFlightTo(0), (std::vector<uint64_t>{4}));
  EXPECT_EQ(tracker_.in_flight(1), 3u);
}

TEST_F(RequestTrackerTest, ResendsAreBoundedAndEachGetsAFreshDeadline) {
  const Ticket t = tracker_.NewTicket(nullptr);
  Part& part = tracker_.Add(1, {.ticket = t});
  for (uint32_t i = 0; i < RequestTracker::kMaxResends; ++i) {
    clock_.Advance(milliseconds(60));
    ASSERT_TRUE(tracker_.Resent(1, part)) << i;
    EXPECT_EQ(part.deadline, clock_.Now() + milliseconds(100));
  }
  EXPECT_EQ(part.resends, RequestTracker::kMaxResends);
  EXPECT_FALSE(tracker_.Resent(1, part));
  EXPECT_EQ(part.resends, RequestTracker::kMaxResends);
  EXPECT_EQ(tracker_.PopExpired(clock_.Now() + milliseconds(99)), 0u);
  EXPECT_EQ(tracker_.PopExpired(clock_.Now() + milliseconds(100)), 1u);
}

TEST_F(RequestTrackerTest, TicketWaitsTheLongestOfItsPullsAndCountsItOnce) {
  const Ticket t = tracker_.NewTicket(nullptr);
  tracker_.Add(1, {.ticket = t, .op = Op::kPull});
  tracker_.Add(2, {.ticket = t, .op = Op::kPull});
  tracker_.NoteWait(t, 300);
  tracker_.NoteWait(t, 200);
  tracker_.Finish(1, Status::Ok());
  tracker_.Finish(2, Status::Ok());
  EXPECT_EQ(tracker_.staleness_wait_us(), 0u);  // not complete yet
  tracker_.Release(t, Status::Ok());
  EXPECT_EQ(tracker_.staleness_wait_us(), 300u);
}

TEST_F(RequestTrackerTest, TakeAllReturnsTheFirstErrorAndForgetsEverything) {
  const Ticket ok = tracker_.NewTicket(nullptr);
  const Ticket bad = tracker_.NewTicket(nullptr);
  tracker_.Release(ok, Status::Ok());
  tracker_.Release(bad, NotFoundError("no table"));
  EXPECT_EQ(tracker_.TakeAll(), NotFoundError("no table"));
  EXPECT_EQ(tracker_.CheckWaitable(ok).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tracker_.CheckWaitable(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
