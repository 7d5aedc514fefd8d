// The two parameter stores a training program runs on: the in-process
// LocalParamStore must train exactly the model the servers train, and the
// remote store reports time spent waiting on the staleness bound.
#include "worker/param_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tests/util/in_process_cluster.h"
#include "tests/util/raw_peer.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

JobOptions TwoTableJob(uint32_t workers, ConsistencyMode mode) {
  TableOptions dense = TestTable("dense", 3000, 1, OptimizerKind::kAdagrad);
  dense.init = {InitKind::kUniform, 0.1f, 3};
  dense.optimizer.lr = 0.1f;
  dense.optimizer.l2 = 0.01f;
  TableOptions sparse = TestTable("sparse", 5000, 4);
  sparse.init = {InitKind::kNormal, 0.5f, 4};
  sparse.optimizer.momentum = 0.9f;
  sparse.optimizer.lr = 0.05f;
  sparse.optimizer.l1 = 0.01f;
  sparse.optimizer.warmup_clocks = 3;
  JobOptions job = TestJob()
                       .Servers(2)
                       .Workers(workers)
                       .Mode(mode, 0)
                       .Liveness(0)
                       .Table(dense)
                       .Table(sparse)
                       .Build();
  EXPECT_OK(job.Validate());
  return job;
}

// Ten steps of random sparse and dense pushes, the same on any store;
// `async`: each step ends with EndStepAsync (the pushes complete during the
// next step).
void Train(ParamStore* store, const JobOptions& job, bool async = false) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 10; ++step) {
    std::vector<uint64_t> rows;
    for (int i = 0; i < 300; ++i) rows.push_back(rng() % job.tables[1].rows);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    std::vector<float> pulled(rows.size() * 4);
    ASSERT_OK(store->Pull(1, rows, pulled.data()));
    std::vector<float> sparse_grad(rows.size() * 4);
    for (float& g : sparse_grad) g = normal(rng);
    std::vector<float> dense_grad(job.tables[0].rows);
    for (float& g : dense_grad) g = normal(rng);
    ASSERT_OK(store->Push(1, rows, SharedFloats::Take(std::move(sparse_grad))));
    ASSERT_OK(store->PushDense(0, SharedFloats::Take(std::move(dense_grad))));
    ASSERT_TRUE((async ? store->EndStepAsync() : store->EndStep()).ok());
    EXPECT_EQ(store->clock(), step + 1);
  }
  ASSERT_OK(store->Flush());
}

std::vector<float> ReadAll(ParamStore* store, const JobOptions& job, uint32_t table) {
  std::vector<float> all(job.tables[table].rows * job.tables[table].dim);
  EXPECT_OK(store->PullDense(table, all.data()));
  return all;
}

class ParamStoreSteps : public ::testing::TestWithParam<bool> {};

// With EndStep, and with EndStepAsync (each pull sees the pushes before it
// although nobody waited for them).
TEST_P(ParamStoreSteps, LocalStoreTrainsExactlyWhatTheServersTrain) {
  const JobOptions job = TwoTableJob(1, ConsistencyMode::kBsp);
  InProcessCluster cluster(job);
  auto client = Client::Create(job, 0, cluster.endpoints()).value();
  ASSERT_OK(client->Join());
  RemoteParamStore remote(job, client.get());
  auto local = LocalParamStore::Create(job).value();
  Train(&remote, job, /*async=*/GetParam());
  EXPECT_EQ(client->in_flight(), 0u);
  Train(local.get(), job);
  for (uint32_t table = 0; table < 2; ++table) {
    const std::vector<float> a = ReadAll(&remote, job, table);
    const std::vector<float> b = ReadAll(local.get(), job, table);
    ASSERT_EQ(a.size(), b.size());
    // Bit for bit: the same initial values and the same update code.
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "table " << table;
  }
  // The L1 step left exact zeros in the sparse table (it is doing something).
  const std::vector<float> sparse = ReadAll(local.get(), job, 1);
  EXPECT_GT(std::count(sparse.begin(), sparse.end(), 0.0f), 0);
  EXPECT_EQ(local->Describe(), "in-process, no parameter server");
  EXPECT_EQ(remote.Describe(), "2 shards, bsp");
}

INSTANTIATE_TEST_SUITE_P(EndStepKinds, ParamStoreSteps, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param_info) {
                           return std::string(param_info.param ? "Async" : "Waiting");
                         });

// A hashed table (any 64-bit id, rows made on first push): the in-process
// store reads and trains the ids exactly as two shards do, ids never pushed
// included (their initial values), and refuses a dense pull of it.
TEST(ParamStoreTest, LocalStoreTrainsAHashedTableAsTheServersDo) {
  TableOptions emb = TestTable("emb", 0, 3, OptimizerKind::kAdagrad);
  emb.keys = KeyKind::kHashed;
  emb.max_rows = 10000;
  emb.init = {InitKind::kNormal, 0.1f, 8};
  emb.optimizer.lr = 0.1f;
  const JobOptions job =
      TestJob().Servers(2).Workers(1).Mode(ConsistencyMode::kBsp, 0).Liveness(0).Table(emb).Build();
  ASSERT_OK(job.Validate());
  InProcessCluster cluster(job);
  auto client = Client::Create(job, 0, cluster.endpoints()).value();
  ASSERT_OK(client->Join());
  RemoteParamStore remote(job, client.get());
  auto local = LocalParamStore::Create(job).value();
  std::mt19937_64 rng(5);
  std::vector<uint64_t> pool(400);
  for (uint64_t& id : pool) id = rng();
  for (ParamStore* store : {static_cast<ParamStore*>(&remote), static_cast<ParamStore*>(local.get())}) {
    std::mt19937_64 steps(9);
    for (int step = 0; step < 6; ++step) {
      std::vector<uint64_t> ids;
      for (int i = 0; i < 100; ++i) ids.push_back(pool[steps() % pool.size()]);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      std::vector<float> grad(ids.size() * 3);
      for (float& g : grad) g = static_cast<float>(steps() % 1000) / 500.0f - 1.0f;
      ASSERT_OK(store->Push(0, ids, SharedFloats::Take(std::move(grad))));
      ASSERT_OK(store->EndStep());
    }
  }
  std::vector<uint64_t> read = pool;
  read.push_back(0);
  read.push_back(~uint64_t{0});
  std::sort(read.begin(), read.end());
  std::vector<float> a(read.size() * 3), b(a.size());
  ASSERT_OK(remote.Pull(0, read, a.data()));
  ASSERT_OK(local->Pull(0, read, b.data()));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  std::vector<float> dense(3);
  EXPECT_TRUE(InvalidWith(local->PullDense(0, dense.data()), {"hashed", "name its ids"}));
}

TEST(ParamStoreTest, PullManyReadsWhatSeparatePullsRead) {
  const JobOptions job = TwoTableJob(1, ConsistencyMode::kAsp);
  InProcessCluster cluster(job);
  auto client = Client::Create(job, 0, cluster.endpoints()).value();
  ASSERT_OK(client->Join());
  RemoteParamStore remote(job, client.get());
  auto local = LocalParamStore::Create(job).value();
  const std::vector<uint64_t> dense_rows = {2999, 5, 1500};
  const std::vector<uint64_t> sparse_rows = {0, 4999, 2500};
  for (ParamStore* store : {static_cast<ParamStore*>(&remote), static_cast<ParamStore*>(local.get())}) {
    std::vector<float> a(3), b(12), a1(3), b1(12);
    const RowsToPull pulls[] = {{0, dense_rows, a.data()}, {1, sparse_rows, b.data()}};
    ASSERT_OK(store->PullMany(pulls));
    ASSERT_OK(store->Pull(0, dense_rows, a1.data()));
    ASSERT_OK(store->Pull(1, sparse_rows, b1.data()));
    EXPECT_EQ(a, a1);
    EXPECT_EQ(b, b1);
    // A bad pull among them is reported, and the good ones still finish.
    const std::vector<uint64_t> bad = {5000};
    const RowsToPull mixed[] = {{0, dense_rows, a.data()}, {1, bad, b.data()}};
    EXPECT_EQ(store->PullMany(mixed).code(), StatusCode::kInvalidArgument) << store->Describe();
  }
}

TEST(ParamStoreTest, LocalPullFollowsTheOrderOfTheRows) {
  const JobOptions job = TwoTableJob(1, ConsistencyMode::kAsp);
  auto local = LocalParamStore::Create(job).value();
  const std::vector<float> all = ReadAll(local.get(), job, 1);
  const std::vector<uint64_t> rows = {4999, 0, 17, 17};
  std::vector<float> out(rows.size() * 4);
  ASSERT_OK(local->Pull(1, rows, out.data()));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int d = 0; d < 4; ++d) EXPECT_EQ(out[i * 4 + d], all[rows[i] * 4 + d]);
  }
}

TEST(ParamStoreTest, LocalStoreRejectsBadRequestsAndChangesNothing) {
  const JobOptions job = TwoTableJob(1, ConsistencyMode::kAsp);
  auto local = LocalParamStore::Create(job).value();
  const std::vector<float> before = ReadAll(local.get(), job, 1);
  std::vector<float> out(8);
  const std::vector<uint64_t> bad_row = {1, 5000};
  Status s = local->Pull(1, bad_row, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 5000 is out of range"), std::string::npos) << s.ToString();
  s = local->Pull(7, bad_row, out.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no table 7"), std::string::npos) << s.ToString();
  const std::vector<uint64_t> rows = {1, 2};
  s = local->Push(1, rows, SharedFloats::Take(std::vector<float>(7, 1.0f)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("7 values for 2 rows of dim 4"), std::string::npos) << s.ToString();
  s = local->Push(1, bad_row, SharedFloats::Take(std::vector<float>(8, 1.0f)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = local->PushDense(0, SharedFloats::Take(std::vector<float>(10, 1.0f)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadAll(local.get(), job, 1), before);
}

TEST(ParamStoreTest, RemoteStoreReportsTimeHeldBackByTheStalenessBound) {
  const JobOptions job = TwoTableJob(2, ConsistencyMode::kBsp);
  InProcessCluster cluster(job);
  auto fast = Client::Create(job, 0, cluster.endpoints()).value();
  auto slow = Client::Create(job, 1, cluster.endpoints()).value();
  ASSERT_OK(fast->Join());
  ASSERT_OK(slow->Join());
  RemoteParamStore store(job, fast.get());
  std::vector<float> row(4);
  const std::vector<uint64_t> rows = {3};
  ASSERT_OK(store.Pull(1, rows, row.data()));  // clock 0: never waits
  EXPECT_EQ(store.staleness_wait_seconds(), 0.0);
  ASSERT_OK(store.EndStep());
  // At clock 1 under bsp the pull waits until the slow worker finishes
  // clock 0, which it does once the pull is seen waiting on a shard.
  std::thread finisher([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int64_t waiting = 0;
    while (waiting == 0 && std::chrono::steady_clock::now() < deadline) {
      for (const std::string& endpoint : cluster.endpoints()) {
        RawPeer control(endpoint);
        MessageHeader stats;
        stats.op = Op::kStats;
        stats.worker = kControlWorker;
        waiting += StatsNumbers(control.Exchange(stats).text)["waiting_pulls"];
      }
    }
    EXPECT_EQ(waiting, 1) << "the pull at clock 1 never waited";
    EXPECT_OK(slow->Wait(*slow->Clock()));
  });
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK(store.Pull(1, rows, row.data()));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  finisher.join();
  // The shards measured the wait; it cannot exceed what the caller saw.
  EXPECT_GT(store.staleness_wait_seconds(), 0.0);
  EXPECT_LE(store.staleness_wait_seconds(), waited + 0.01);
}

}  // namespace
}  // namespace ps
