// The client's parameter cache against real shards: reads are served from
// the cache without network traffic exactly while the staleness bound
// allows, they include the worker's own pushes, and asp never caches; a
// hashed table's rows are cached by id, within one shard's bound.
#include <gtest/gtest.h>

#include <vector>

#include "client/client.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

JobOptions Job(ConsistencyMode mode, uint32_t staleness) {
  TableOptions t = TestTable("t", 1000000, 2, OptimizerKind::kAdd);
  t.init.kind = InitKind::kUniform;
  t.init.value = 1.0f;
  return TestJob().Servers(2).Mode(mode, staleness).Table(t).Build();
}

class ParamCacheTest : public ::testing::Test {
 protected:
  void Start(const JobOptions& job) {
    cluster_ = std::make_unique<InProcessCluster>(job);
    client_ = Client::Create(job, 0, cluster_->endpoints()).value();
  }
  std::vector<float> Pull(std::vector<uint64_t> rows) {
    std::vector<float> out(rows.size() * 2);
    EXPECT_OK(client_->PullSync(0, rows, out.data()));
    return out;
  }
  void Tick() { ASSERT_OK(client_->Wait(*client_->Clock())); }
  uint64_t requests() const { return client_->counters().requests; }

  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(ParamCacheTest, SspServesReadsFromTheCacheWhileTheBoundAllows) {
  Start(Job(ConsistencyMode::kSsp, 2));
  const std::vector<float> first = Pull({1, 2});  // clock 0: pulled with min clock 0
  const uint64_t sent = requests();
  Tick();
  Tick();  // clock 2: a row pulled at min clock 0 is still fresh (0 >= 2 - 2)
  const uint64_t after_ticks = requests();
  EXPECT_EQ(Pull({2, 1}), (std::vector<float>{first[2], first[3], first[0], first[1]}));
  EXPECT_EQ(requests(), after_ticks) << "the read must not touch the network";
  EXPECT_EQ(client_->counters().cache_hits, 2u);
  EXPECT_EQ(client_->counters().cache_bytes_saved, 16u);
  Tick();  // clock 3: needs min clock >= 1
  Pull({1});
  EXPECT_GT(requests(), after_ticks + 2);
  EXPECT_GT(sent, 0u);
}

TEST_F(ParamCacheTest, BspNeverCaches) {
  Start(Job(ConsistencyMode::kBsp, 0));
  Pull({5});
  const uint64_t sent = requests();
  Pull({5});
  EXPECT_EQ(requests(), sent + 1);
  Tick();
  const uint64_t ticked = requests();
  Pull({5});
  EXPECT_EQ(requests(), ticked + 1) << "a new clock must pull again";
  EXPECT_EQ(client_->counters().cache_hits, 0u);
}

TEST_F(ParamCacheTest, AspNeverCaches) {
  Start(Job(ConsistencyMode::kAsp, 0));
  Pull({5});
  const uint64_t sent = requests();
  Pull({5});
  EXPECT_EQ(requests(), sent + 1);
  EXPECT_EQ(client_->counters().cache_hits, 0u);
}

TEST_F(ParamCacheTest, CachedReadsIncludeTheWorkersOwnPushes) {
  Start(Job(ConsistencyMode::kSsp, 3));
  const std::vector<float> before = Pull({7, 999999});
  std::vector<uint64_t> row = {999999};
  ASSERT_OK(client_->PushSync(0, row, SharedFloats::Take({5.0f, -1.0f})));
  const uint64_t sent = requests();
  const std::vector<float> cached = Pull({7, 999999});
  EXPECT_EQ(requests(), sent);
  EXPECT_EQ(cached, (std::vector<float>{before[0], before[1], before[2] + 5.0f, before[3] - 1.0f}));
  // And the shard agrees.
  JobOptions fresh = Job(ConsistencyMode::kAsp, 0);
  auto other = Client::Create(fresh, 0, cluster_->endpoints()).value();
  std::vector<float> server(4);
  std::vector<uint64_t> rows = {7, 999999};
  ASSERT_OK(other->PullSync(0, rows, server.data()));
  EXPECT_EQ(server, cached);
}

TEST_F(ParamCacheTest, PushesToAStatefulTableDropTheCachedRows) {
  JobOptions job = Job(ConsistencyMode::kSsp, 3);
  job.tables[0].optimizer = OptimizerOptions{};
  job.tables[0].optimizer.kind = OptimizerKind::kAdam;
  Start(job);
  Pull({7, 8});
  std::vector<uint64_t> row = {7};
  ASSERT_OK(client_->PushSync(0, row, SharedFloats::Take({5.0f, -1.0f})));
  const uint64_t sent = requests();
  Pull({8});  // untouched: still cached
  EXPECT_EQ(requests(), sent);
  Pull({7});  // pushed: the shard's Adam step cannot be mirrored, so pulled again
  EXPECT_EQ(requests(), sent + 1);
}

// A hashed table of `dim` 2 under ssp 3 (add; lru at max_rows per shard).
JobOptions HashedJob(uint64_t max_rows) {
  TableOptions t = TestTable("h", 0, 2, OptimizerKind::kAdd);
  t.keys = KeyKind::kHashed;
  t.max_rows = max_rows;
  t.evict.policy = EvictPolicy::kLru;
  t.init.kind = InitKind::kUniform;
  t.init.value = 1.0f;
  return TestJob().Servers(2).Mode(ConsistencyMode::kSsp, 3).Table(t).Build();
}

// What the shards hold for `ids` of table 0, read by a client of its own.
std::vector<float> ShardValues(const JobOptions& job, const InProcessCluster& cluster,
                               std::vector<uint64_t> ids) {
  JobOptions fresh = job;
  fresh.consistency.mode = ConsistencyMode::kAsp;
  fresh.consistency.staleness = 0;
  auto other = Client::Create(fresh, 0, cluster.endpoints()).value();
  std::vector<float> values(ids.size() * 2);
  EXPECT_OK(other->PullSync(0, ids, values.data()));
  return values;
}

TEST_F(ParamCacheTest, HashedRowsAreCachedByIdWithTheWorkersOwnPushes) {
  const JobOptions job = HashedJob(1000);
  Start(job);
  const uint64_t big = uint64_t{1} << 60;
  const std::vector<float> before = Pull({5, big});
  // Named twice: the client sends the sum once, and the cache takes that.
  std::vector<uint64_t> ids = {big, big};
  ASSERT_OK(client_->PushSync(0, ids, SharedFloats::Take({1.0f, 2.0f, 0.5f, 0.25f})));
  const uint64_t sent = requests();
  const std::vector<float> cached = Pull({big, 5});
  EXPECT_EQ(requests(), sent) << "served from the cache";
  EXPECT_EQ(cached, (std::vector<float>{before[2] + 1.5f, before[3] + 2.25f, before[0], before[1]}));
  EXPECT_EQ(cached, ShardValues(job, *cluster_, {big, 5}));
  // Repeated ids, every one a hit: copied into place all the same.
  const std::vector<float> twice = Pull({5, big, 5});
  EXPECT_EQ(requests(), sent);
  EXPECT_EQ(twice, (std::vector<float>{cached[2], cached[3], cached[0], cached[1], cached[2],
                                       cached[3]}));
  Tick();
  Tick();
  Tick();
  Tick();  // clock 4: rows pulled at min clock 0 are too old for a bound of 3
  const uint64_t ticked = requests();
  Pull({5});
  EXPECT_EQ(requests(), ticked + 1);
}

TEST_F(ParamCacheTest, HashedRowsThatAPushMayNotReachAreDroppedFromTheCache) {
  // An admission filter drops an id's first push on the shard: the worker
  // cannot mirror that, so it pulls the row again (and reads what the
  // shard has, its initial value).
  JobOptions job = HashedJob(1000);
  job.tables[0].admit.min_pushes = 2;
  job.tables[0].admit.sketch_width = 1024;
  Start(job);
  const std::vector<float> before = Pull({9});
  std::vector<uint64_t> ids = {9};
  ASSERT_OK(client_->PushSync(0, ids, SharedFloats::Take({1.0f, 1.0f})));
  const uint64_t sent = requests();
  EXPECT_EQ(Pull({9}), before);
  EXPECT_EQ(requests(), sent + 1);
}

TEST_F(ParamCacheTest, AHashedTablesCacheHoldsAtMostOneShardsRowsAndStartsOver) {
  Start(HashedJob(4));
  Pull({1, 2, 3, 4});
  const uint64_t sent = requests();
  Pull({4});
  EXPECT_EQ(requests(), sent);
  Pull({5});  // a fifth row: the cache starts over with it
  Pull({5});
  EXPECT_EQ(requests(), sent + 1);
  Pull({4});
  EXPECT_EQ(requests(), sent + 2);
}

TEST_F(ParamCacheTest, PartialHitsPullOnlyTheMissingRowsInOrder) {
  Start(Job(ConsistencyMode::kSsp, 1));
  const std::vector<float> a = Pull({1, 2});
  const uint64_t sent = requests();
  // 900000 lives on shard 1 and 3 on shard 0: two requests, for 2 rows.
  const std::vector<float> b = Pull({900000, 1, 3, 2});
  EXPECT_EQ(requests(), sent + 2);
  EXPECT_EQ(client_->counters().cache_hits, 2u);
  EXPECT_EQ(b[2], a[0]);
  EXPECT_EQ(b[3], a[1]);
  EXPECT_EQ(b[6], a[2]);
  EXPECT_EQ(b[7], a[3]);
  const std::vector<float> again = Pull({3, 900000});
  EXPECT_EQ(again, (std::vector<float>{b[4], b[5], b[0], b[1]}));
  EXPECT_EQ(requests(), sent + 2);
}

TEST_F(ParamCacheTest, DensePullsAreServedWholeFromTheCache) {
  JobOptions job = Job(ConsistencyMode::kSsp, 1);
  job.tables[0].rows = 1000;
  Start(job);
  std::vector<float> first(2000), second(2000);
  ASSERT_OK(client_->Wait(*client_->PullDense(0, first.data())));
  const uint64_t sent = requests();
  Tick();
  ASSERT_OK(client_->Wait(*client_->PullDense(0, second.data())));
  EXPECT_EQ(requests(), sent + 2) << "only the two CLOCK requests";
  EXPECT_EQ(second, first);
  Tick();
  ASSERT_OK(client_->Wait(*client_->PullDense(0, second.data())));
  EXPECT_EQ(requests(), sent + 6);  // two CLOCKs, then a pull per shard
}

TEST_F(ParamCacheTest, CacheCanBeTurnedOff) {
  JobOptions job = Job(ConsistencyMode::kSsp, 3);
  job.client.cache = false;
  Start(job);
  Pull({5});
  const uint64_t sent = requests();
  Pull({5});
  EXPECT_EQ(requests(), sent + 1);
}

}  // namespace
}  // namespace ps
