#include "server/reshard_gate.h"

#include <gtest/gtest.h>

#include "tests/util/status_matchers.h"

namespace ps {
namespace {

using Action = ReshardGate::Action;

MessageHeader Request(Op op, int64_t clock, int64_t map_epoch = 0, uint32_t worker = 0) {
  MessageHeader h;
  h.op = op;
  h.clock = clock;
  h.map_epoch = map_epoch;
  h.worker = worker;
  h.request_id = 7;
  return h;
}

MessageHeader Prepare(int64_t clock, int64_t epoch, const std::string& servers) {
  MessageHeader h = Request(Op::kReshard, clock, epoch);
  h.flags = kReshardPrepare;
  h.text = servers;
  return h;
}

class ReshardGateTest : public ::testing::Test {
 protected:
  ReshardGate gate_{0, {"a:1", "b:2"}, 0, 2};
};

TEST_F(ReshardGateTest, ServesEverythingWhileNoReshardRuns) {
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 5)), Action::kServe);
  EXPECT_EQ(gate_.Check(Request(Op::kClock, 5)), Action::kServe);
  EXPECT_EQ(gate_.Check(Request(Op::kPull, 5)), Action::kServe);
}

TEST_F(ReshardGateTest, HoldsWritesOfTheBoundaryClockAndLaterOnceItPrepared) {
  ASSERT_OK(gate_.Prepare(Prepare(10, 1, "a:1,b:2,c:3"), 8, ""));
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 9)), Action::kServe);
  EXPECT_EQ(gate_.Check(Request(Op::kClock, 9)), Action::kServe);
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 10)), Action::kHold);
  EXPECT_EQ(gate_.Check(Request(Op::kClock, 11)), Action::kHold);
  // Reads change nothing: a pull waits as the consistency mode says.
  EXPECT_EQ(gate_.Check(Request(Op::kPull, 10)), Action::kServe);
  EXPECT_FALSE(gate_.HandoverDue(10));  // not committed
  ASSERT_OK(gate_.Commit(Prepare(10, 1, "")));
  EXPECT_FALSE(gate_.HandoverDue(9));
  EXPECT_TRUE(gate_.HandoverDue(10));
}

TEST_F(ReshardGateTest, RefusesAHandoverClockAWorkerReachedAlready) {
  Status refused = gate_.Prepare(Prepare(10, 1, "a:1,b:2,c:3"), 10, "");
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("past the handover clock 10"), std::string::npos) << refused.ToString();
  EXPECT_FALSE(gate_.prepared());
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 12)), Action::kServe);
}

TEST_F(ReshardGateTest, RefusesAnotherEpochAServerListThatIsNoneAndWhatTheJobLacks) {
  EXPECT_EQ(gate_.Prepare(Prepare(10, 2, "a:1"), 0, "").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(gate_.Prepare(Prepare(10, 1, "a:1,,b:2"), 0, "").code(),
            StatusCode::kInvalidArgument);
  Status lacks = gate_.Prepare(Prepare(10, 1, "a:1"), 0, "no checkpoint.dir");
  EXPECT_NE(lacks.message().find("no checkpoint.dir"), std::string::npos) << lacks.ToString();
  EXPECT_EQ(gate_.Commit(Prepare(10, 1, "")).code(), StatusCode::kFailedPrecondition);
}

TEST_F(ReshardGateTest, PreparingTheSameHandoverAgainIsOkAnotherIsRefused) {
  ASSERT_OK(gate_.Prepare(Prepare(10, 1, "a:1,b:2,c:3"), 0, ""));
  EXPECT_OK(gate_.Prepare(Prepare(10, 1, "a:1,b:2,c:3"), 0, ""));
  EXPECT_EQ(gate_.Prepare(Prepare(12, 1, "a:1,b:2,c:3"), 0, "").code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(ReshardGateTest, AnAbortServesAsBeforeButNotOnceHandedOver) {
  ASSERT_OK(gate_.Prepare(Prepare(10, 1, "a:1,b:2,c:3"), 0, ""));
  ASSERT_OK(gate_.Abort(Prepare(10, 1, "")));
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 10)), Action::kServe);
  EXPECT_OK(gate_.Abort(Prepare(10, 1, "")));  // nothing prepared: nothing to undo

  ASSERT_OK(gate_.Prepare(Prepare(10, 1, "a:1,b:2,c:3"), 0, ""));
  ASSERT_OK(gate_.Commit(Prepare(10, 1, "")));
  gate_.HandedOver(Clock::TimePoint{});
  EXPECT_EQ(gate_.Abort(Prepare(10, 1, "")).code(), StatusCode::kFailedPrecondition);
}

TEST_F(ReshardGateTest, AfterTheHandoverTheOldMapIsMovedAndTheNextDropped) {
  ASSERT_OK(gate_.Prepare(Prepare(10, 1, "a:1,b:2,c:3"), 0, ""));
  ASSERT_OK(gate_.Commit(Prepare(10, 1, "")));
  gate_.HandedOver(Clock::TimePoint{});
  EXPECT_EQ(gate_.Check(Request(Op::kPull, 3)), Action::kMoved);
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 12)), Action::kMoved);
  // A worker that turned reached this address before the next server.
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 10, 1)), Action::kDrop);
  // The job moved on past map 1 while this shard lingers at an address a
  // later map takes: dropped too (sent again to that map's server).
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 10, 2)), Action::kDrop);

  const MessageHeader moved = gate_.Moved(Request(Op::kPush, 10, 0, 1));
  EXPECT_EQ(moved.op, Op::kError);
  EXPECT_EQ(moved.flags, kFlagMoved);
  EXPECT_EQ(moved.map_epoch, 1);
  EXPECT_EQ(moved.text, "a:1,b:2,c:3");
  EXPECT_EQ(moved.request_id, 7u);
}

TEST_F(ReshardGateTest, AShardWhoseAddressTheNextMapKeepsExitsAtOnce) {
  ASSERT_OK(gate_.Prepare(Prepare(10, 1, "a:1,b:2,c:3"), 0, ""));
  ASSERT_OK(gate_.Commit(Prepare(10, 1, "")));
  EXPECT_FALSE(gate_.MayExit(Clock::TimePoint{}, [](uint32_t) { return true; }));
  gate_.HandedOver(Clock::TimePoint{});
  // No worker turned yet: the next map's server at a:1 moves what comes.
  EXPECT_TRUE(gate_.MayExit(Clock::TimePoint{}, [](uint32_t) { return true; }));
}

TEST_F(ReshardGateTest, ExitsOnceEveryLiveWorkerTurnedOrTheLingerPassed) {
  // Shard 0 at a:1, which the next map leaves out.
  ASSERT_OK(gate_.Prepare(Prepare(10, 1, "b:2"), 0, ""));
  ASSERT_OK(gate_.Commit(Prepare(10, 1, "")));
  const Clock::TimePoint t0{};
  auto live = [](uint32_t) { return true; };
  EXPECT_FALSE(gate_.MayExit(t0, live));  // not handed over yet
  gate_.HandedOver(t0);
  EXPECT_FALSE(gate_.MayExit(t0, live));
  (void)gate_.Moved(Request(Op::kPush, 10, 0, 0));  // worker 0 turned
  EXPECT_FALSE(gate_.MayExit(t0, live));
  EXPECT_TRUE(gate_.MayExit(t0, [](uint32_t w) { return w != 1; }));  // worker 1 left
  gate_.Turned(1);
  EXPECT_TRUE(gate_.MayExit(t0, live));
}

// A shard that handed over and lingers (its address left out of the next
// map) gets a request of a map after the next: the job moved on, every
// worker turned long ago, and the address is a later map's, so it exits at
// once. Before any handover such a map is refused: this server was started
// with an older --map-epoch than the job's.
TEST_F(ReshardGateTest, ARequestOfALaterMapLetsALingeringShardExit) {
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 10, 2)), Action::kRefuse);
  ASSERT_OK(gate_.Prepare(Prepare(10, 1, "b:2"), 0, ""));
  EXPECT_EQ(gate_.Check(Request(Op::kPush, 10, 2)), Action::kRefuse);
  ASSERT_OK(gate_.Commit(Prepare(10, 1, "")));
  const Clock::TimePoint t0{};
  auto live = [](uint32_t) { return true; };
  gate_.HandedOver(t0);
  EXPECT_FALSE(gate_.MayExit(t0, live));
  gate_.Dropped(Request(Op::kPush, 10, 1, 0));  // the next map's: worker 0 turned
  EXPECT_FALSE(gate_.MayExit(t0, live));
  const MessageHeader later = Request(Op::kPull, 30, 2, 1);
  ASSERT_EQ(gate_.Check(later), Action::kDrop);
  gate_.Dropped(later);
  EXPECT_TRUE(gate_.MayExit(t0, live));

  ReshardGate slow{0, {"a:1"}, 0, 2};
  ASSERT_OK(slow.Prepare(Prepare(10, 1, "b:2,c:3"), 0, ""));
  ASSERT_OK(slow.Commit(Prepare(10, 1, "")));
  slow.HandedOver(t0);
  EXPECT_FALSE(slow.MayExit(t0 + kHandoverLinger - std::chrono::milliseconds(1), live));
  EXPECT_TRUE(slow.MayExit(t0 + kHandoverLinger, live));
}

TEST_F(ReshardGateTest, AShardOfTheNextMapMovesRequestsOfAnOlderOne) {
  ReshardGate next{2, {"a:1", "b:2", "c:3"}, 1, 2};
  EXPECT_EQ(next.Check(Request(Op::kPush, 10, 1)), Action::kServe);
  EXPECT_EQ(next.Check(Request(Op::kPush, 10, 0)), Action::kMoved);
  const MessageHeader moved = next.Moved(Request(Op::kPull, 10, 0));
  EXPECT_EQ(moved.map_epoch, 1);
  EXPECT_EQ(moved.text, "a:1,b:2,c:3");
}

}  // namespace
}  // namespace ps
