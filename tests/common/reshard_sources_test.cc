// Which old shards a server of the next shard map follows, and when it
// may (common/reshard_sources.h).
#include "common/reshard_sources.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/util/test_job.h"

namespace ps {
namespace {

JobOptions Job(uint32_t servers, uint32_t factor = 1) {
  JobOptions job = TestJob().Servers(servers).Table("w", 12).Build();
  job.replication.factor = factor;
  return job;
}

TEST(ReshardSourcesTest, EachNextShardFollowsTheOldShardsItsRowsOverlap) {
  // 2 -> 3: rows 0-5, 6-11 onto 0-3, 4-7, 8-11.
  EXPECT_EQ(FollowedShards(Job(2), Job(3), 0), std::vector<uint32_t>({0}));
  EXPECT_EQ(FollowedShards(Job(2), Job(3), 1), std::vector<uint32_t>({0, 1}));
  EXPECT_EQ(FollowedShards(Job(2), Job(3), 2), std::vector<uint32_t>({1}));
  EXPECT_EQ(FollowedShards(Job(3), Job(1), 0), std::vector<uint32_t>({0, 1, 2}));
}

TEST(ReshardSourcesTest, AReplicatedJobIsFollowedUnderTheLaunchersAuthority) {
  EXPECT_TRUE(CanFollow(Job(2), Job(3)).ok());
  EXPECT_TRUE(CanFollow(Job(2, 2), Job(3, 2)).ok());
  EXPECT_TRUE(CanFollow(Job(2, 3), Job(1, 3)).ok());
}

TEST(ReshardSourcesTest, WhatCannotBeFollowedIsNamed) {
  const Status factor = CanFollow(Job(2, 2), Job(3, 1));
  EXPECT_EQ(factor.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(factor.message().find("the next job file has replication.factor 1, the job 2"),
            std::string::npos)
      << factor.ToString();

  JobOptions etcd = Job(2, 2);
  etcd.replication.authority = ReplicationAuthority::kEtcd;
  const Status authority = CanFollow(etcd, Job(3, 2));
  EXPECT_EQ(authority.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(authority.message().find("under replication.authority etcd"), std::string::npos)
      << authority.ToString();

  JobOptions curve = Job(2);
  curve.security.mode = SecurityMode::kCurve;
  EXPECT_NE(CanFollow(curve, Job(3)).message().find("security.mode curve"), std::string::npos);

  JobOptions other = Job(3);
  other.tables[0].dim = 2;
  const Status tables = CanFollow(Job(2), other);
  EXPECT_NE(tables.message().find("table 0 is 'w' (12 x 2) in the next job file and 'w' (12 x 1)"),
            std::string::npos)
      << tables.ToString();
}

}  // namespace
}  // namespace ps
