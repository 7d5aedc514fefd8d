// BatchBalancer: the split of a clock's samples by the workers' rates, and
// a balancer that is off (one worker, or stragglers.balance false).
#include "worker/batch_balance.h"

#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "worker/param_store.h"

namespace ps {
namespace {

uint32_t Sum(const std::vector<uint32_t>& v) { return std::accumulate(v.begin(), v.end(), 0u); }

TEST(BatchBalancerTest, SplitIsProportionalToTheRatesAndKeepsTheTotal) {
  const std::vector<double> rates = {3000, 3000, 3000, 1000};
  const std::vector<uint32_t> split = BatchBalancer::Split(rates, 800, 797);
  EXPECT_EQ(split, (std::vector<uint32_t>{240, 240, 240, 80}));
  const std::vector<double> uneven = {1, 2, 4};
  const std::vector<uint32_t> s2 = BatchBalancer::Split(uneven, 100, 98);
  EXPECT_EQ(Sum(s2), 100u);
  // 14.29, 28.57, 57.14: the largest remainder (.57 twice, lower rank first) gets the rest.
  EXPECT_EQ(s2, (std::vector<uint32_t>{14, 29, 57}));
}

TEST(BatchBalancerTest, EqualRatesGiveEqualBatches) {
  const std::vector<double> rates = {5, 5, 5, 5};
  EXPECT_EQ(BatchBalancer::Split(rates, 256, 253), (std::vector<uint32_t>{64, 64, 64, 64}));
}

TEST(BatchBalancerTest, EveryWorkerKeepsAtLeastOneSampleAndNoneExceedsTheCap) {
  const std::vector<double> rates = {1e-6, 1000, 1000};
  const std::vector<uint32_t> split = BatchBalancer::Split(rates, 10, 8);
  EXPECT_EQ(split[0], 1u);
  EXPECT_EQ(Sum(split), 10u);
  const std::vector<double> one_fast = {1000, 1, 1};
  const std::vector<uint32_t> capped = BatchBalancer::Split(one_fast, 30, 12);
  EXPECT_EQ(capped[0], 12u);
  for (uint32_t b : capped) EXPECT_GE(b, 1u);
}

TEST(BatchBalancerTest, AMissingOrBadRateGivesNoSplit) {
  const std::vector<double> unmeasured = {100, 0, 100};
  EXPECT_TRUE(BatchBalancer::Split(unmeasured, 30, 28).empty());
  const std::vector<double> nan = {100, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_TRUE(BatchBalancer::Split(nan, 30, 29).empty());
  const std::vector<double> inf = {100, std::numeric_limits<double>::infinity()};
  EXPECT_TRUE(BatchBalancer::Split(inf, 30, 29).empty());
}

TEST(BatchBalancerTest, OffItKeepsTheBatchAndWeighsNothing) {
  TrainJob job;
  job.cluster.workers = 4;
  job.train.batch_size = 64;
  auto off = BatchBalancer::Create(job, 1, nullptr, 1000);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->enabled());
  EXPECT_EQ((*off)->batch(), 64u);
  EXPECT_EQ((*off)->share(), 1.0);
  EXPECT_TRUE((*off)->BeginStep(10).ok());
  EXPECT_TRUE((*off)->FinishStep(9).ok());
  std::vector<float> g = {1, 2};
  (*off)->Weigh(g);
  EXPECT_EQ(g, (std::vector<float>{1, 2}));
  job.stragglers.balance = true;
  job.cluster.workers = 1;  // one worker (the --standalone reference): nothing to balance
  auto alone = BatchBalancer::Create(job, 0, nullptr, 1000);
  ASSERT_TRUE(alone.ok());
  EXPECT_FALSE((*alone)->enabled());
}

TEST(BatchBalancerTest, AWorkerStartedAgainReplacesTheRateItsEarlierLifePushed) {
  auto job = LoadTrainJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 2 }\n"
      "tables: [ { name: w, rows: 1000 } ]\n"
      "consistency: { mode: bsp }\n"
      "stragglers: { balance: true, balance_window: 1 }\n"
      "train: { program: sparse_logistic_regression, table: w, batch_size: 8,\n"
      "         samples_per_worker: 1000 }\n",
      "inline.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto store = LocalParamStore::Create(*job);
  ASSERT_TRUE(store.ok());
  const uint32_t table = job->TableId(kBalanceTableName).value();
  const std::vector<uint64_t> row = {1};
  // Worker 1's earlier life left a rate of 1e12 samples/s in its row.
  ASSERT_TRUE((*store)->Push(table, row, SharedFloats::Take({1e12f})).ok());
  auto balancer = BatchBalancer::Create(*job, 1, store->get(), 1000);
  ASSERT_TRUE(balancer.ok()) << balancer.status().ToString();
  ASSERT_TRUE((*balancer)->BeginStep(0).ok());
  ASSERT_TRUE((*balancer)->FinishStep(0).ok());  // a window of one step: its rate is pushed
  std::vector<float> now(1);
  ASSERT_TRUE((*store)->Pull(table, row, now.data()).ok());
  // Its new rate (8 samples over the step's time), not 1e12 more than that.
  EXPECT_GT(now[0], 0.0f);
  EXPECT_LT(now[0], 1e11f) << "the old rate was added to, not replaced";
}

TEST(BatchBalancerTest, OnWithoutItsTableIsAFailedPrecondition) {
  TrainJob job;
  job.cluster.workers = 2;
  job.train.batch_size = 64;
  job.stragglers.balance = true;
  auto balancer = BatchBalancer::Create(job, 0, nullptr, 1000);
  ASSERT_FALSE(balancer.ok());
  EXPECT_EQ(balancer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(balancer.status().message().find(kBalanceTableName), std::string::npos);
}

using Piece = BatchBalancer::Piece;

TEST(BatchBalancerTest, AnEqualSplitTakesEachWorkersOwnMinibatch) {
  // 3 workers of batch 10; partitions of 35, 40, 50 samples: partition r's
  // minibatch at step c starts at (c mod floor(size / 10)) x 10.
  const std::vector<uint32_t> split = {10, 10, 10};
  const std::vector<uint64_t> sizes = {35, 40, 50};
  EXPECT_EQ(BatchBalancer::PiecesOf(split, 0, 10, 0, sizes), (std::vector<Piece>{{0, 0, 10}}));
  EXPECT_EQ(BatchBalancer::PiecesOf(split, 0, 10, 4, sizes), (std::vector<Piece>{{0, 10, 10}}));
  EXPECT_EQ(BatchBalancer::PiecesOf(split, 1, 10, 5, sizes), (std::vector<Piece>{{1, 10, 10}}));
  EXPECT_EQ(BatchBalancer::PiecesOf(split, 2, 10, 7, sizes), (std::vector<Piece>{{2, 20, 10}}));
}

TEST(BatchBalancerTest, AnUnevenSplitCoversTheSameSamplesAcrossPartitions) {
  // Worker 2 slow: 14 + 14 + 2 samples. Together the three take exactly
  // the three minibatches of step 1 that an even split takes.
  const std::vector<uint32_t> split = {14, 14, 2};
  const std::vector<uint64_t> sizes = {35, 40, 50};
  EXPECT_EQ(BatchBalancer::PiecesOf(split, 0, 10, 1, sizes),
            (std::vector<Piece>{{0, 10, 10}, {1, 10, 4}}));
  EXPECT_EQ(BatchBalancer::PiecesOf(split, 1, 10, 1, sizes),
            (std::vector<Piece>{{1, 14, 6}, {2, 10, 8}}));
  EXPECT_EQ(BatchBalancer::PiecesOf(split, 2, 10, 1, sizes), (std::vector<Piece>{{2, 18, 2}}));
}

TEST(BatchBalancerTest, ASplitThatOverrunsTheJobsSamplesWrapsInTheLastPartition) {
  // Under ssp two workers may split by different rates: 31 samples where
  // the job has 30. The overrun comes from the last partition, wrapping.
  const std::vector<uint32_t> split = {10, 10, 11};
  const std::vector<uint64_t> sizes = {35, 40, 50};
  // Step 4: partition 2 starts at 40; its 11th sample wraps to 0.
  EXPECT_EQ(BatchBalancer::PiecesOf(split, 2, 10, 4, sizes),
            (std::vector<Piece>{{2, 40, 10}, {2, 0, 1}}));
}

}  // namespace
}  // namespace ps
