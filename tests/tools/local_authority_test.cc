// LocalAuthority's decisions, with the MEMBERSHIP requests it sends caught
// at the boundary (its Deliver) and the replicas' liveness set by the test.
#include "tools/local_authority.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "common/wire.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

struct Sent {
  uint32_t to;
  MembershipChange change;
};

class LocalAuthorityTest : public ::testing::Test {
 protected:
  // Two shards of three replicas, all live; every server takes every change
  // unless it is in refusing_.
  LocalAuthorityTest() {
    job_ = TestJob().Servers(2).Workers(1).Build();
    job_.replication.factor = 3;
  }

  LocalAuthority Make() {
    return LocalAuthority(
        job_, [this](uint32_t shard, uint32_t replica) { return !dead_.count({shard, replica}); },
        [this](uint32_t to, const MembershipChange& change) -> Status {
          sent_.push_back({to, change});
          if (refusing_.count({change.shard, to})) {
            return FailedPreconditionError("still taking its copy");
          }
          return Status::Ok();
        });
  }

  JobOptions job_;
  std::set<std::pair<uint32_t, uint32_t>> dead_;
  std::set<std::pair<uint32_t, uint32_t>> refusing_;
  std::vector<Sent> sent_;
};

TEST_F(LocalAuthorityTest, EveryShardStartsAtEpochZeroWithReplicaZeroPrimary) {
  LocalAuthority authority = Make();
  for (uint32_t s = 0; s < 2; ++s) {
    StatusOr<ShardMembership> m = authority.Membership(s);
    ASSERT_OK(m);
    EXPECT_EQ(m->epoch, 0);
    EXPECT_EQ(m->primary, 0u);
  }
  EXPECT_EQ(authority.Membership(2).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LocalAuthorityTest, ADeadPrimaryIsFollowedByTheNextLiveBackupOnTheRing) {
  LocalAuthority authority = Make();
  dead_ = {{1, 0}};
  StatusOr<MembershipChange> change = authority.ReplicaGone(1, 0);
  ASSERT_OK(change);
  EXPECT_EQ(change->flags, kMembershipPromote);
  EXPECT_EQ(change->replica, 1u);
  EXPECT_EQ(change->epoch, 1);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].to, 1u);  // the promoted backup is told, at its own address
  EXPECT_EQ(authority.Membership(1)->primary, 1u);
  EXPECT_EQ(authority.Membership(0)->epoch, 0);  // the other shard is untouched
  // Its successor on the ring after replica 1 is replica 2, then 0.
  dead_ = {{1, 0}, {1, 1}};
  change = authority.ReplicaGone(1, 1);
  ASSERT_OK(change);
  EXPECT_EQ(change->replica, 2u);
  EXPECT_EQ(change->epoch, 2);
}

TEST_F(LocalAuthorityTest, ABackupThatRefusesIsPassedOverAtAnEpochOfItsOwn) {
  LocalAuthority authority = Make();
  dead_ = {{0, 0}};
  refusing_ = {{0, 1}};
  StatusOr<MembershipChange> change = authority.ReplicaGone(0, 0);
  ASSERT_OK(change);
  EXPECT_EQ(change->replica, 2u);
  EXPECT_EQ(change->epoch, 2);  // the refused try took epoch 1
  ASSERT_EQ(change->passed_over.size(), 1u);
  EXPECT_EQ(change->passed_over[0].replica, 1u);
  EXPECT_EQ(change->passed_over[0].why.code(), StatusCode::kFailedPrecondition);
}

TEST_F(LocalAuthorityTest, NoBackupLeftToTakeOverFailsNamingTheRefusals) {
  LocalAuthority authority = Make();
  dead_ = {{0, 0}, {0, 2}};
  refusing_ = {{0, 1}};
  StatusOr<MembershipChange> change = authority.ReplicaGone(0, 0);
  ASSERT_FALSE(change.ok());
  EXPECT_EQ(change.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(change.status().message().find("no replica of shard 0 is left to take over"),
            std::string::npos);
  EXPECT_NE(change.status().message().find("replica 1 cannot be promoted"), std::string::npos)
      << change.status().ToString();
  EXPECT_EQ(authority.Membership(0)->primary, 0u);  // nobody took over
}

TEST_F(LocalAuthorityTest, ADeadBackupIsDroppedByThePrimaryAndJoinsAgainAtNewEpochs) {
  LocalAuthority authority = Make();
  dead_ = {{0, 2}};
  StatusOr<MembershipChange> dropped = authority.ReplicaGone(0, 2);
  ASSERT_OK(dropped);
  EXPECT_EQ(dropped->flags, kMembershipDropBackup);
  EXPECT_EQ(dropped->replica, 2u);
  EXPECT_EQ(dropped->epoch, 1);
  dead_.clear();
  StatusOr<MembershipChange> joined = authority.ReplicaJoins(0, 2);
  ASSERT_OK(joined);
  EXPECT_EQ(joined->flags, kMembershipAddBackup);
  EXPECT_EQ(joined->epoch, 2);
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[0].to, 0u);  // both go to the primary
  EXPECT_EQ(sent_[1].to, 0u);
  EXPECT_EQ(authority.Membership(0)->primary, 0u);
}

TEST_F(LocalAuthorityTest, ABackupLostWithoutAPrimaryStopsTheShard) {
  LocalAuthority authority = Make();
  dead_ = {{0, 0}, {0, 1}};
  StatusOr<MembershipChange> change = authority.ReplicaGone(0, 1);
  ASSERT_FALSE(change.ok());
  EXPECT_EQ(change.status().message(), "shard 0 has no primary left");
  EXPECT_TRUE(sent_.empty());
}

TEST_F(LocalAuthorityTest, WhatThePrimaryAnswersIsTheErrorWithItsCode) {
  LocalAuthority authority = Make();
  refusing_ = {{0, 0}};
  StatusOr<MembershipChange> joined = authority.ReplicaJoins(0, 1);
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(joined.status().message().find("shard 0's primary did not take backup 1"),
            std::string::npos);
  EXPECT_EQ(authority.ReplicaGone(0, 3).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
