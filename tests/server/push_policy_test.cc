// PushPolicy on its own: the route of an admitted push under each
// consistency mode, the order of the rules, and which facts it asks for
// (asking whether a worker is in its clock's quorum makes it a member).
// ShardServer is not involved; shard_server_test, aggregation_test,
// backup_workers_test and replication_test check the same routes through a
// running shard.
#include "server/push_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/clock_table.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

using Route = PushPolicy::Route;

// Answers what the policy asks with the fields below and records each
// question, in order.
class RecordedFacts final : public PushPolicy::Facts {
 public:
  int64_t RepeatSummedInto() const override {
    asked.push_back("RepeatSummedInto");
    return summed_into;
  }
  Status SumClockAllowed() const override {
    asked.push_back("SumClockAllowed");
    return sum_allowed;
  }
  bool MustWait() const override {
    asked.push_back("MustWait");
    return must_wait;
  }
  bool InQuorum() override {
    asked.push_back("InQuorum");
    return in_quorum;
  }

  int64_t summed_into = -1;
  Status sum_allowed;
  bool must_wait = false;
  bool in_quorum = true;
  mutable std::vector<std::string> asked;
};

using Asked = std::vector<std::string>;

struct Modes {
  bool aggregate = false;
  uint32_t backup_workers = 0;
  bool sums_replicated = false;  // replication.factor 2 with after_aggregation
};

JobOptions Job(const Modes& modes) {
  JobOptions job = TestJob().Workers(3).Servers(2).Bsp().Table("w", 4).Build();
  job.consistency.aggregate = modes.aggregate;
  job.consistency.backup_workers = modes.backup_workers;
  if (modes.sums_replicated) {
    job.replication.factor = 2;
    job.replication.after_aggregation = true;
  }
  return job;
}

PushPolicy::Push NewPush(int64_t clock, int64_t min_clock) {
  PushPolicy::Push push;
  push.clock = clock;
  push.min_clock = min_clock;
  return push;
}

PushPolicy::Push Repeat(int64_t clock, int64_t min_clock) {
  PushPolicy::Push push = NewPush(clock, min_clock);
  push.repeat = true;
  return push;
}

Status PastTheBound() { return FailedPreconditionError("clock 9 is past the sum bound 4"); }

// `decision` is `route`, with `clock` (-1: a route that names none) and no
// refusal.
void ExpectRoute(const PushPolicy::Decision& decision, Route route, int64_t clock = -1) {
  EXPECT_EQ(decision.route, route);
  EXPECT_EQ(decision.clock, clock);
  EXPECT_TRUE(decision.status.ok()) << decision.status.ToString();
}

TEST(PushPolicyTest, ARepeatIsAcknowledgedAndNotAppliedAgain) {
  const PushPolicy policy(TestJob().Workers(2).Ssp(1).Table("w", 4).Build());
  RecordedFacts facts;
  ExpectRoute(policy.Decide(Repeat(1, 0), facts), Route::kAcknowledgeRepeat);
  EXPECT_EQ(facts.asked, Asked({"RepeatSummedInto"}));
}

TEST(PushPolicyTest, ARepeatWhoseFirstCopyWaitsInASumIsHeldForThatSum) {
  const PushPolicy policy(Job({.aggregate = true, .sums_replicated = true}));
  RecordedFacts facts;
  facts.summed_into = 5;
  ExpectRoute(policy.Decide(Repeat(5, 5), facts), Route::kHoldRepeatForSum, 5);
}

TEST(PushPolicyTest, ARepeatWinsOverTheSumBoundAndWaiting) {
  const PushPolicy policy(Job({.aggregate = true}));
  RecordedFacts facts;
  facts.sum_allowed = PastTheBound();
  facts.must_wait = true;
  ExpectRoute(policy.Decide(Repeat(9, 0), facts), Route::kAcknowledgeRepeat);
  EXPECT_EQ(facts.asked, Asked({"RepeatSummedInto"}));
}

TEST(PushPolicyTest, ARepeatNeverJoinsItsClocksQuorum) {
  const PushPolicy policy(Job({.aggregate = true, .backup_workers = 1}));
  RecordedFacts facts;
  facts.in_quorum = false;
  ExpectRoute(policy.Decide(Repeat(0, 0), facts), Route::kAcknowledgeRepeat);
  EXPECT_EQ(facts.asked, Asked({"RepeatSummedInto"}));
}

TEST(PushPolicyTest, AnAggregatedPushPastTheSumBoundIsRefusedWithTheBoundsError) {
  const PushPolicy policy(Job({.aggregate = true, .backup_workers = 1}));
  RecordedFacts facts;
  facts.sum_allowed = PastTheBound();
  facts.must_wait = true;
  const PushPolicy::Decision d = policy.Decide(NewPush(9, 0), facts);
  EXPECT_EQ(d.route, Route::kRefuseSum);
  EXPECT_EQ(d.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(d.status.message(), PastTheBound().message());
  // Refused before it may wait or join a quorum.
  EXPECT_EQ(facts.asked, Asked({"SumClockAllowed"}));
}

TEST(PushPolicyTest, AnAggregatedPushAboveTheNextClockParks) {
  const PushPolicy policy(Job({.aggregate = true, .backup_workers = 1}));
  RecordedFacts facts;
  facts.must_wait = true;
  ExpectRoute(policy.Decide(NewPush(2, 0), facts), Route::kPark);
  // Parked before it joins its clock's quorum.
  EXPECT_EQ(facts.asked, Asked({"SumClockAllowed", "MustWait"}));
}

TEST(PushPolicyTest, WaitingWinsOverHoldingForAReplicatedSum) {
  const PushPolicy policy(Job({.aggregate = true, .sums_replicated = true}));
  RecordedFacts facts;
  facts.must_wait = true;
  ExpectRoute(policy.Decide(NewPush(2, 0), facts), Route::kPark);
}

TEST(PushPolicyTest, WithoutAggregationTheSumRulesAreNotAsked) {
  const PushPolicy policy(Job({}));
  RecordedFacts facts;
  facts.sum_allowed = PastTheBound();
  facts.must_wait = true;
  ExpectRoute(policy.Decide(NewPush(9, 0), facts), Route::kApplyNow);
  EXPECT_TRUE(facts.asked.empty());
}

TEST(PushPolicyTest, AReplicatedSumPushOfAClockNotAppliedIsAccumulatedAndHeld) {
  const PushPolicy policy(Job({.aggregate = true, .sums_replicated = true}));
  for (const int64_t clock : {3, 4}) {
    RecordedFacts facts;
    SCOPED_TRACE(clock);
    ExpectRoute(policy.Decide(NewPush(clock, 3), facts), Route::kAccumulateAndHold, clock);
  }
}

TEST(PushPolicyTest, HoldingForAReplicatedSumWinsOverTheQuorum) {
  const PushPolicy policy(Job({.aggregate = true, .backup_workers = 1, .sums_replicated = true}));
  RecordedFacts facts;
  facts.in_quorum = false;
  ExpectRoute(policy.Decide(NewPush(3, 3), facts), Route::kAccumulateAndHold, 3);
  EXPECT_EQ(facts.asked, Asked({"SumClockAllowed", "MustWait"}));
}

TEST(PushPolicyTest, AReplicatedSumPushOfAnAppliedClockGoesTheLatePushPath) {
  const PushPolicy policy(Job({.aggregate = true, .backup_workers = 1, .sums_replicated = true}));
  RecordedFacts late;
  late.in_quorum = false;
  ExpectRoute(policy.Decide(NewPush(2, 3), late), Route::kDropLate);
  EXPECT_EQ(late.asked, Asked({"SumClockAllowed", "MustWait", "InQuorum"}));
  // Admitted, it is summed on its own into the job's clock, not held.
  RecordedFacts admitted;
  ExpectRoute(policy.Decide(NewPush(2, 3), admitted), Route::kAcknowledgeAndSum, 3);
}

TEST(PushPolicyTest, APushAfterItsClocksQuorumIsDroppedLate) {
  const PushPolicy policy(Job({.aggregate = true, .backup_workers = 1}));
  RecordedFacts facts;
  facts.in_quorum = false;
  ExpectRoute(policy.Decide(NewPush(1, 1), facts), Route::kDropLate);
  EXPECT_EQ(facts.asked, Asked({"SumClockAllowed", "MustWait", "InQuorum"}));
}

TEST(PushPolicyTest, APushOfItsClocksQuorumIsSummed) {
  const PushPolicy policy(Job({.aggregate = true, .backup_workers = 1}));
  RecordedFacts facts;
  ExpectRoute(policy.Decide(NewPush(1, 1), facts), Route::kAcknowledgeAndSum, 1);
}

TEST(PushPolicyTest, WithoutBackupWorkersTheQuorumIsNotAsked) {
  const PushPolicy policy(Job({.aggregate = true}));
  RecordedFacts facts;
  facts.in_quorum = false;
  ExpectRoute(policy.Decide(NewPush(1, 1), facts), Route::kAcknowledgeAndSum, 1);
  EXPECT_EQ(facts.asked, Asked({"SumClockAllowed", "MustWait"}));
}

TEST(PushPolicyTest, AnAggregatedPushIsSummedIntoItsClockNeverAnAppliedOne) {
  const PushPolicy policy(Job({.aggregate = true}));
  RecordedFacts ahead;
  ExpectRoute(policy.Decide(NewPush(4, 3), ahead), Route::kAcknowledgeAndSum, 4);
  RecordedFacts behind;
  ExpectRoute(policy.Decide(NewPush(1, 3), behind), Route::kAcknowledgeAndSum, 3);
}

TEST(PushPolicyTest, SspAspAndBspWithoutAggregationApplyAtOnce) {
  for (const JobOptions& job : {TestJob().Workers(2).Ssp(2).Table("w", 4).Build(),
                                TestJob().Workers(2).Asp().Table("w", 4).Build(),
                                TestJob().Workers(2).Bsp().Table("w", 4).Build()}) {
    const PushPolicy policy(job);
    RecordedFacts facts;
    SCOPED_TRACE(ConsistencyName(job.consistency));
    ExpectRoute(policy.Decide(NewPush(7, 0), facts), Route::kApplyNow);
    EXPECT_TRUE(facts.asked.empty());
  }
}

TEST(PushPolicyTest, SumsAreReplicatedOnlyAfterAggregationWithBackups) {
  EXPECT_TRUE(PushPolicy(Job({.aggregate = true, .sums_replicated = true})).sums_replicated());
  EXPECT_FALSE(PushPolicy(Job({.aggregate = true})).sums_replicated());
  JobOptions single = Job({.aggregate = true});
  single.replication.after_aggregation = true;  // factor 1: no backups
  EXPECT_FALSE(PushPolicy(single).sums_replicated());
  JobOptions per_push = Job({.aggregate = true});
  per_push.replication.factor = 2;  // every push replicated on its own
  EXPECT_FALSE(PushPolicy(per_push).sums_replicated());
}

TEST(PushPolicyTest, BackupWorkersAreTheClockTables) {
  for (const uint32_t backup_workers : {0u, 1u, 2u}) {
    const JobOptions job = Job({.aggregate = true, .backup_workers = backup_workers});
    const ClockTable clocks(job.cluster.workers, job.consistency.Quorum(job.cluster.workers));
    EXPECT_EQ(PushPolicy(job).backups(), clocks.backups()) << backup_workers;
  }
}

}  // namespace
}  // namespace ps
