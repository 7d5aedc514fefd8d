#include "server/shard_store.h"

#include <gtest/gtest.h>

#include "common/key_range.h"

namespace ps {
namespace {

JobOptions Job(uint32_t shards, InitKind kind) {
  JobOptions job;
  for (uint32_t i = 0; i < shards; ++i) job.cluster.servers.push_back("127.0.0.1:" + std::to_string(7000 + i));
  job.cluster.workers = 1;
  TableOptions t;
  t.name = "t";
  t.rows = 37;
  t.dim = 3;
  t.init.kind = kind;
  t.init.value = 0.5f;
  t.init.seed = 9;
  job.tables = {t};
  return job;
}

TEST(ShardStoreTest, InitialValuesDoNotDependOnTheShardCount) {
  for (InitKind kind : {InitKind::kUniform, InitKind::kNormal, InitKind::kConstant}) {
    std::vector<float> whole;
    auto one = ShardStore::Create(Job(1, kind), 0);
    ASSERT_TRUE(one.ok());
    auto v1 = (*one)->values(0);
    std::vector<float> joined;
    for (uint32_t s = 0; s < 3; ++s) {
      auto part = ShardStore::Create(Job(3, kind), s);
      ASSERT_TRUE(part.ok());
      auto v = (*part)->values(0);
      EXPECT_EQ(v.size(), ShardRows(37, 3, s).size() * 3);
      joined.insert(joined.end(), v.begin(), v.end());
    }
    ASSERT_EQ(joined.size(), v1.size());
    for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], v1[i]);
  }
}

TEST(ShardStoreTest, UniformInitStaysInsideItsScale) {
  auto store = ShardStore::Create(Job(1, InitKind::kUniform), 0);
  ASSERT_TRUE(store.ok());
  bool varied = false;
  for (float v : (*store)->values(0)) {
    EXPECT_LE(std::abs(v), 0.5f);
    varied |= v != (*store)->values(0)[0];
  }
  EXPECT_TRUE(varied);
}

TEST(ShardStoreTest, SgdAndAddRulesApplyToTheNamedRows) {
  JobOptions job = Job(2, InitKind::kZeros);
  job.tables[0].optimizer = {OptimizerKind::kSgd, 0.25f};
  TableOptions acc = job.tables[0];
  acc.name = "acc";
  acc.optimizer = {OptimizerKind::kAdd, 0.0f};
  job.tables.push_back(acc);
  auto store = ShardStore::Create(job, 1);  // rows [18, 37)
  ASSERT_TRUE(store.ok());
  std::vector<uint64_t> keys = {20, 18, 20};
  std::vector<float> vals = {4, 4, 4, 8, 8, 8, 1, 2, 3};
  for (uint32_t t = 0; t < 2; ++t) {
    Request r;
    r.header.op = Op::kPush;
    r.header.table = t;
    r.header.count = 3;
    r.header.dim = 3;
    r.keys = keys;
    r.values = vals;
    (*store)->ApplyPush(r);
  }
  auto sgd = (*store)->values(0);
  auto add = (*store)->values(1);
  EXPECT_EQ(sgd[0], -2.0f);                   // row 18: -0.25*8
  EXPECT_EQ(sgd[6], -0.25f * 4 - 0.25f * 1);  // row 20, col 0: two pushes
  EXPECT_EQ(add[0], 8.0f);
  EXPECT_EQ(add[8], 4.0f + 3.0f);             // row 20, col 2
  EXPECT_EQ(add[3], 0.0f);                    // row 19 untouched
}

}  // namespace
}  // namespace ps
