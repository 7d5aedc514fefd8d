// BSP with aggregation is one step per global batch: 4 workers on 2 shards
// end with the parameters of a sequential run over the same global batches.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "client/client.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "worker/linear_regression.h"

namespace ps {
namespace {

TrainJob Job() {
  TableOptions w = TestTable("weights", 16);
  w.optimizer = {OptimizerKind::kSgd, 0.1f};
  TrainJob job{TestJob().Servers(2).Workers(4).Bsp().Table(w).Build(), TrainOptions()};
  job.consistency.aggregate = true;
  // The test reads the model after every worker left.
  job.server.exit_when_workers_leave = false;
  job.train.table = "weights";
  job.train.features = 16;
  job.train.samples_per_worker = 512;
  job.train.batch_size = 32;
  job.train.iterations = 60;
  job.train.log_every = 0;
  job.client.request_timeout_ms = 20000;
  return job;
}

TEST(AggregationTest, BspWithAggregationEqualsASequentialRunOverTheGlobalBatches) {
  const TrainJob job = Job();
  InProcessCluster cluster(job);
  std::vector<std::thread> workers;
  std::vector<Status> results(4);
  for (uint32_t r = 0; r < 4; ++r) {
    workers.emplace_back([&, r] {
      auto client = Client::Create(job, r, cluster.endpoints()).value();
      auto result = TrainLinearRegression(job, r, client.get());
      results[r] = result.status();
      if (result.ok()) results[r] = client->Leave();
    });
  }
  for (auto& t : workers) t.join();
  for (const Status& s : results) ASSERT_OK(s);
  auto reader = Client::Create(job, 0, cluster.endpoints()).value();
  std::vector<float> distributed(16);
  ASSERT_OK(reader->Wait(*reader->PullDense(0, distributed.data())));

  // The same steps in one process: each worker's minibatch gradient at the
  // current weights, their mean, one SGD step.
  std::vector<RegressionData> data;
  for (uint32_t r = 0; r < 4; ++r) data.push_back(GenerateRegressionData(job.train, r));
  std::vector<float> w(16, 0.0f), sum(16), g(16);
  uint64_t cursor = 0;
  for (uint32_t step = 0; step < job.train.iterations; ++step) {
    if (cursor + job.train.batch_size > job.train.samples_per_worker) cursor = 0;
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (uint32_t r = 0; r < 4; ++r) {
      RegressionLoss(data[r], w.data(), cursor, cursor + job.train.batch_size, g.data());
      for (size_t j = 0; j < 16; ++j) sum[j] += g[j];
    }
    for (size_t j = 0; j < 16; ++j) w[j] -= 0.1f * (sum[j] * 0.25f);
    cursor += job.train.batch_size;
  }
  double diff = 0, norm = 0;
  for (size_t j = 0; j < 16; ++j) {
    diff += (distributed[j] - w[j]) * (distributed[j] - w[j]);
    norm += w[j] * w[j];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5) << "relative distance to the sequential run";
  EXPECT_GT(norm, 1.0);  // it did train
  cluster.Stop();
  EXPECT_EQ(cluster.server(0).clocks().min_clock(), 60);
}

// Two workers whose pushes add up (optimizer add): the applied update is
// their mean.
TrainJob TwoWorkersAdding() {
  TrainJob job = Job();
  job.cluster.workers = 2;
  job.tables[0].optimizer = {OptimizerKind::kAdd, 0.0f};
  return job;
}

TEST(AggregationTest, APushShowsFromTheNextClockAsTheMeanOfAllWorkers) {
  const TrainJob job = TwoWorkersAdding();
  InProcessCluster cluster(job);
  auto a = Client::Create(job, 0, cluster.endpoints()).value();
  auto b = Client::Create(job, 1, cluster.endpoints()).value();
  std::vector<uint64_t> row = {3};
  ASSERT_OK(a->PushSync(0, row, SharedFloats::Take({4.0f})));
  ASSERT_OK(b->PushSync(0, row, SharedFloats::Take({2.0f})));
  std::vector<float> out(1);
  ASSERT_OK(a->PullSync(0, row, out.data()));
  EXPECT_EQ(out[0], 0.0f) << "not applied before the clock ends";
  ASSERT_OK(a->Wait(*a->Clock()));
  ASSERT_OK(b->Wait(*b->Clock()));
  ASSERT_OK(a->PullSync(0, row, out.data()));
  EXPECT_EQ(out[0], 3.0f) << "the mean of 4 and 2";
}

// The last clock of a job: a worker that pushed, ended the clock and left
// before the others ended it still counts in that clock's mean (it is no
// longer waited for, but its push is in the sum).
TEST(AggregationTest, AWorkerThatLeftAfterItsPushStillCountsInThatClocksMean) {
  const TrainJob job = TwoWorkersAdding();
  InProcessCluster cluster(job);
  auto a = Client::Create(job, 0, cluster.endpoints()).value();
  auto b = Client::Create(job, 1, cluster.endpoints()).value();
  std::vector<uint64_t> row = {3};
  ASSERT_OK(b->PushSync(0, row, SharedFloats::Take({2.0f})));
  ASSERT_OK(b->Wait(*b->Clock()));
  ASSERT_OK(b->Leave());
  ASSERT_OK(a->PushSync(0, row, SharedFloats::Take({4.0f})));
  ASSERT_OK(a->Wait(*a->Clock()));
  std::vector<float> out(1);
  ASSERT_OK(a->PullSync(0, row, out.data()));
  EXPECT_EQ(out[0], 3.0f) << "the mean of 4 and 2, not their sum over the one worker left";
  // A clock no one else pushed into: the one worker's own.
  ASSERT_OK(a->PushSync(0, row, SharedFloats::Take({4.0f})));
  ASSERT_OK(a->Wait(*a->Clock()));
  ASSERT_OK(a->PullSync(0, row, out.data()));
  EXPECT_EQ(out[0], 7.0f);
}

}  // namespace
}  // namespace ps
