// Backup workers (consistency.backup_workers, bsp aggregate): a clock's
// update is the mean of the first workers - b gradients to reach each
// shard; a later push of that clock is acknowledged, dropped and counted,
// and a worker left behind continues at the job's clock.
#include <gtest/gtest.h>

#include <thread>

#include "client/client.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "worker/linear_regression.h"

namespace ps {
namespace {

// 3 workers, one of them a backup, on 2 shards; pushes add up (optimizer
// add), so the applied update of a clock is exactly its mean.
TrainJob Job(uint32_t workers = 3) {
  TableOptions w = TestTable("weights", 16);
  w.optimizer = {OptimizerKind::kAdd, 0.0f};
  TrainJob job{TestJob().Servers(2).Workers(workers).Bsp().Table(w).Build(), TrainOptions()};
  job.consistency.aggregate = true;
  job.consistency.backup_workers = 1;
  job.server.exit_when_workers_leave = false;  // read after the workers left
  job.client.request_timeout_ms = 20000;
  return job;
}

uint64_t LatePushes(InProcessCluster& cluster, uint32_t shards) {
  uint64_t late = 0;
  for (uint32_t s = 0; s < shards; ++s) late += cluster.server(s).counters().late_pushes;
  return late;
}

TEST(BackupWorkersTest, AClocksUpdateIsTheMeanOfItsFirstGradientsAndALatePushIsDropped) {
  const TrainJob job = Job();
  ASSERT_OK(job.Validate());
  InProcessCluster cluster(job);
  auto a = Client::Create(job, 0, cluster.endpoints()).value();
  auto b = Client::Create(job, 1, cluster.endpoints()).value();
  auto c = Client::Create(job, 2, cluster.endpoints()).value();
  std::vector<uint64_t> row = {3};
  ASSERT_OK(a->PushSync(0, row, SharedFloats::Take({4.0f})));
  ASSERT_OK(b->PushSync(0, row, SharedFloats::Take({2.0f})));
  ASSERT_OK(a->Wait(*a->Clock()));
  ASSERT_OK(b->Wait(*b->Clock()));
  std::vector<float> out(1);
  ASSERT_OK(a->PullSync(0, row, out.data()));
  EXPECT_EQ(out[0], 3.0f) << "the mean of the first two, without waiting for the third";
  // The third worker's gradient of clock 0 comes late: acknowledged,
  // dropped, counted on both sides.
  ASSERT_OK(c->PushSync(0, row, SharedFloats::Take({100.0f})));
  EXPECT_EQ(c->counters().late_pushes, 1u);
  EXPECT_EQ(a->counters().late_pushes, 0u);
  ASSERT_OK(c->Wait(*c->Clock()));
  ASSERT_OK(a->PullSync(0, row, out.data()));
  EXPECT_EQ(out[0], 3.0f);
  cluster.Stop();
  EXPECT_EQ(LatePushes(cluster, 2), 1u);
  for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(cluster.server(s).clocks().min_clock(), 1);
}

TEST(BackupWorkersTest, AWorkerLeftBehindContinuesAtTheJobsClockAndCountsThere) {
  const TrainJob job = Job();
  InProcessCluster cluster(job);
  auto a = Client::Create(job, 0, cluster.endpoints()).value();
  auto b = Client::Create(job, 1, cluster.endpoints()).value();
  auto c = Client::Create(job, 2, cluster.endpoints()).value();
  std::vector<uint64_t> row = {3};
  for (int clock = 0; clock < 3; ++clock) {
    ASSERT_OK(a->PushSync(0, row, SharedFloats::Take({1.0f})));
    ASSERT_OK(b->PushSync(0, row, SharedFloats::Take({1.0f})));
    ASSERT_OK(a->Wait(*a->Clock()));
    ASSERT_OK(b->Wait(*b->Clock()));
  }
  // Worker 2 is still at clock 0: its pull is answered at once, with the
  // model of clock 3, and it takes up that clock.
  std::vector<float> model(16);
  ASSERT_OK(c->Wait(*c->PullDense(0, model.data())));
  EXPECT_EQ(model[3], 3.0f);
  EXPECT_EQ(c->clock(), 0);
  EXPECT_EQ(c->CatchUp(), 3);
  EXPECT_EQ(c->counters().clocks_skipped, 3u);
  EXPECT_EQ(a->CatchUp(), 3) << "a worker at the job's clock stays there";
  // Now it is first: its gradient and worker 0's make clock 3, worker 1's
  // is late.
  ASSERT_OK(c->PushSync(0, row, SharedFloats::Take({10.0f})));
  ASSERT_OK(a->PushSync(0, row, SharedFloats::Take({2.0f})));
  ASSERT_OK(b->PushSync(0, row, SharedFloats::Take({1000.0f})));
  EXPECT_EQ(b->counters().late_pushes, 1u);
  EXPECT_EQ(c->counters().late_pushes, 0u);
  for (Client* client : {a.get(), b.get(), c.get()}) ASSERT_OK(client->Wait(*client->Clock()));
  std::vector<float> out(1);
  ASSERT_OK(c->PullSync(0, row, out.data()));
  EXPECT_EQ(out[0], 9.0f) << "3 + the mean of 10 and 2";
}

TEST(BackupWorkersTest, WithoutBackupWorkersARequestAheadOfTheWorkersClockIsStillRefused) {
  TrainJob job = Job();
  job.consistency.backup_workers = 0;
  InProcessCluster cluster(job);
  auto a = Client::Create(job, 0, cluster.endpoints()).value();
  auto c = Client::Create(job, 2, cluster.endpoints()).value();
  std::vector<float> model(16);
  ASSERT_OK(c->Wait(*c->PullDense(0, model.data())));
  EXPECT_EQ(c->CatchUp(), 0);
  EXPECT_EQ(c->counters().clocks_skipped, 0u);
}

// Training with a worker 4x slower than the others: the job goes on at the
// pace of the three, the slow worker's late gradients are dropped and it
// skips ahead, and the model still converges.
TEST(BackupWorkersTest, ASlowWorkerIsLeftOutAndTheModelStillConverges) {
  TrainJob job = Job(4);
  TableOptions w = TestTable("weights", 16);
  w.optimizer = {OptimizerKind::kSgd, 0.1f};
  job.tables = {w};
  job.train.table = "weights";
  job.train.features = 16;
  job.train.samples_per_worker = 512;
  job.train.batch_size = 32;
  job.train.iterations = 60;
  job.train.log_every = 0;
  job.stragglers.slow_worker = 3;
  job.stragglers.slow_factor = 4;
  job.stragglers.step_ms = 4;
  ASSERT_OK(job.Validate());
  InProcessCluster cluster(job);
  std::vector<std::thread> workers;
  std::vector<Status> results(4);
  std::vector<TrainResult> trained(4);
  std::vector<ClientCounters> counters(4);
  for (uint32_t r = 0; r < 4; ++r) {
    workers.emplace_back([&, r] {
      auto client = Client::Create(job, r, cluster.endpoints()).value();
      auto result = TrainLinearRegression(job, r, client.get());
      results[r] = result.status();
      if (result.ok()) {
        trained[r] = *result;
        results[r] = client->Leave();
      }
      counters[r] = client->counters();
    });
  }
  for (auto& t : workers) t.join();
  for (const Status& s : results) ASSERT_OK(s);
  EXPECT_GT(counters[3].clocks_skipped, 0u) << "the slow worker skipped ahead";
  EXPECT_GT(counters[3].late_pushes + counters[3].clocks_skipped, 10u);
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_LT(trained[r].final_loss, 0.1 * trained[r].first_loss) << "worker " << r;
  }
  cluster.Stop();
  EXPECT_EQ(LatePushes(cluster, 2), counters[0].late_pushes + counters[1].late_pushes +
                                        counters[2].late_pushes + counters[3].late_pushes);
  for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(cluster.server(s).clocks().min_clock(), 60);
}

}  // namespace
}  // namespace ps
