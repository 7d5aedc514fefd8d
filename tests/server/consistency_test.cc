// BSP, SSP and ASP through real shards and clients on loopback: pulls wait
// exactly as long as the staleness bound requires, and every read holds all
// updates the bound promises plus the reader's own.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "client/client.h"
#include "client/control_client.h"
#include "server/shard_server.h"
#include "tests/util/fake_clock.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tests/util/test_env.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

JobOptions Job(ConsistencyMode mode, uint32_t staleness, uint32_t workers) {
  return TestJob()
      .Servers(2)
      .Workers(workers)
      .Mode(mode, staleness)
      .Table("counts", workers, 1, OptimizerKind::kAdd)  // row w counts worker w's pushes
      .RequestTimeoutMs(20000)
      .Build();
}


TEST(ConsistencyTest, BspPullAheadOfTheSlowestWaitsForItsClock) {
  const JobOptions job = Job(ConsistencyMode::kBsp, 0, 2);
  InProcessCluster shards(job);
  auto fast = Client::Create(job, 0, shards.endpoints()).value();
  auto slow = Client::Create(job, 1, shards.endpoints()).value();
  ASSERT_OK(fast->Wait(*fast->Clock()));  // fast at clock 1, slow at 0
  std::vector<float> out(2);
  Ticket pull = *fast->PullDense(0, out.data());
  ASSERT_OK(fast->Poll(300));
  ASSERT_OK(fast->Poll(0));
  EXPECT_EQ(fast->in_flight(), 2u) << "the pull must wait for worker 1";
  ASSERT_OK(slow->Wait(*slow->Clock()));
  ASSERT_OK(fast->Wait(pull));
  EXPECT_EQ(fast->min_clock(0), 1);
  EXPECT_EQ(fast->min_clock(1), 1);
}

// A worker that pushes and finishes clocks without pulling (nothing under
// bsp stops it) runs far ahead of the job; its pull at its own clock waits
// for the others, as any pull ahead does, instead of being refused as a
// forged one.
TEST(ConsistencyTest, BspPullOfAWorkerFarAheadByItsOwnClocksWaitsForTheSlowest) {
  JobOptions job = Job(ConsistencyMode::kBsp, 0, 2);
  job.client.max_in_flight = 4;
  InProcessCluster shards(job);
  auto fast = Client::Create(job, 0, shards.endpoints()).value();
  auto slow = Client::Create(job, 1, shards.endpoints()).value();
  constexpr int kAhead = 100;  // far above 1 + 1 + client.max_in_flight
  // Both workers' clocks are known to the shards: the job is at clock 1.
  ASSERT_OK(slow->Wait(*slow->PushDense(0, SharedFloats::Take(std::vector<float>{0, 1}))));
  ASSERT_OK(slow->Wait(*slow->Clock()));
  for (int c = 0; c < kAhead; ++c) {
    ASSERT_OK(fast->Wait(*fast->PushDense(0, SharedFloats::Take(std::vector<float>{1, 0}))));
    ASSERT_OK(fast->Wait(*fast->Clock()));
  }
  std::vector<float> out(2);
  Ticket pull = *fast->PullDense(0, out.data());
  ASSERT_OK(fast->Poll(100));
  EXPECT_EQ(fast->in_flight(), 2u) << "the pull waits for worker 1";
  for (int c = 1; c < kAhead; ++c) {
    ASSERT_OK(slow->Wait(*slow->PushDense(0, SharedFloats::Take(std::vector<float>{0, 1}))));
    ASSERT_OK(slow->Wait(*slow->Clock()));
  }
  ASSERT_OK(fast->Wait(pull));
  EXPECT_EQ(out, (std::vector<float>{kAhead, kAhead}));
}

TEST(ConsistencyTest, PullWaitingPastItsDeadlineNamesTheSlowestWorker) {
  JobOptions job = Job(ConsistencyMode::kSsp, 1, 3);
  job.client.request_timeout_ms = 2000;  // the shard gives up after 1800 ms
  job.liveness.heartbeat_ms = 0;         // only the pull's deadline counts here
  FakeClock clock;  // the shards' time, moved by hand
  TestEnv env(&clock);
  InProcessCluster shards(job, &env);
  auto w0 = Client::Create(job, 0, shards.endpoints()).value();
  auto w2 = Client::Create(job, 2, shards.endpoints()).value();
  for (int c = 0; c < 2; ++c) {
    ASSERT_OK(w0->Wait(*w0->Clock()));
    ASSERT_OK(w2->Wait(*w2->Clock()));
  }
  // Worker 1 never reports a clock: a pull at clock 2 under ssp 1 needs it at 1.
  std::vector<float> out(3);
  const auto start = clock.Now();
  Ticket pull = *w0->PullDense(0, out.data());
  // Once both shards hold the pull, the shards' time passes its deadline.
  auto control = ControlClient::Create(job, shards.endpoints()).value();
  for (uint32_t shard = 0; shard < 2; ++shard) {
    for (int i = 0;; ++i) {
      ASSERT_LT(i, 5000) << "shard " << shard << " never held the pull";
      auto stats = control->Stats(shard);
      ASSERT_OK(stats);
      if (stats->find("waiting_pulls 1 ") != std::string::npos) break;
      std::this_thread::sleep_for(milliseconds(2));
    }
  }
  clock.Advance(milliseconds(1801));
  Status s = w0->Wait(pull);
  const auto took = clock.Now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("the slowest worker: worker 1 is at clock 0"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("needs every worker at clock >= 1 (staleness 1)"), std::string::npos)
      << s.ToString();
  EXPECT_GE(took, milliseconds(1700));
  EXPECT_LT(took, milliseconds(10000));  // an answer, not a hang
  shards.Stop();
  EXPECT_EQ(shards.server(0).waiting_pulls(), 0u);
  EXPECT_EQ(shards.server(1).waiting_pulls(), 0u);
}

TEST(ConsistencyTest, AspPullsNeverWait) {
  const JobOptions job = Job(ConsistencyMode::kAsp, 0, 2);
  InProcessCluster shards(job);
  auto client = Client::Create(job, 0, shards.endpoints()).value();
  for (int i = 0; i < 50; ++i) ASSERT_OK(client->Wait(*client->Clock()));
  std::vector<float> out(2);
  ASSERT_OK(client->Wait(*client->PullDense(0, out.data())));
  shards.Stop();
  EXPECT_EQ(shards.server(0).counters().pulls_waited, 0u);
  EXPECT_EQ(shards.server(0).clocks().clock(0), 50);
  EXPECT_EQ(shards.server(0).clocks().min_clock(), 0);
}

TEST(ConsistencyTest, ClockFromAControlClientIsRefused) {
  const JobOptions job = Job(ConsistencyMode::kBsp, 0, 1);
  InProcessCluster shards(job);
  auto control = Client::Create(job, kControlWorker, shards.endpoints()).value();
  EXPECT_EQ(control->Clock().status().code(), StatusCode::kFailedPrecondition);
}

// 4 workers with random delays, one of them slower; thousands of reads.
class StalenessPropertyTest : public ::testing::TestWithParam<int> {};

TEST_P(StalenessPropertyTest, EveryReadKeepsTheBoundAndReadsItsOwnWrites) {
  const int s = GetParam();
  constexpr uint32_t kWorkers = 4;
  constexpr int kClocks = 40;
  const JobOptions job = Job(s == 0 ? ConsistencyMode::kBsp : ConsistencyMode::kSsp,
                             static_cast<uint32_t>(s), kWorkers);
  InProcessCluster shards(job);
  std::atomic<int> reads{0};
  auto worker = [&](uint32_t w) {
    auto client = Client::Create(job, w, shards.endpoints()).value();
    std::mt19937 gen(1000 + w);
    std::vector<float> counts(kWorkers);
    for (int c = 0; c < kClocks; ++c) {
      // Several reads per clock: every one must keep the bound.
      for (int r = 0; r < 8; ++r) {
        ASSERT_OK(client->Wait(*client->PullDense(0, counts.data())));
        ++reads;
        for (uint32_t v = 0; v < kWorkers; ++v) {
          if (v == w) {
            ASSERT_EQ(counts[v], c) << "read-my-writes: worker " << w << " at clock " << c;
          } else {
            ASSERT_GE(counts[v], c - s) << "worker " << w << " at clock " << c
                                        << " misses updates of worker " << v;
            ASSERT_LE(counts[v], c + s + 1) << "worker " << v << " ran too far ahead";
          }
        }
      }
      std::vector<uint64_t> row = {w};
      ASSERT_OK(client->Push(0, row, SharedFloats::Take({1.0f})));
      ASSERT_OK(client->Wait(*client->Clock()));
      // Worker 3 is the straggler; the others pause at random.
      const int pause_us = w == 3 ? 3000 : static_cast<int>(gen() % 1000);
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    }
    EXPECT_EQ(client->counters().bound_violations, 0u);
  };
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < kWorkers; ++w) threads.emplace_back(worker, w);
  for (auto& t : threads) t.join();
  shards.Stop();
  EXPECT_EQ(reads.load(), kWorkers * kClocks * 8);
  for (size_t i = 0; i < 2; ++i) {
    const ShardServerCounters& k = shards.server(i).counters();
    EXPECT_GT(k.pulls_waited, 0u) << "shard " << i;
    // A worker blocks exactly when it is s + 1 clocks ahead of the slowest.
    EXPECT_EQ(k.max_blocked_lead, s + 1) << "shard " << i;
    EXPECT_EQ(shards.server(i).waiting_pulls(), 0u);
    EXPECT_EQ(shards.server(i).clocks().min_clock(), kClocks);
  }
}

INSTANTIATE_TEST_SUITE_P(Staleness, StalenessPropertyTest, ::testing::Values(0, 1, 3),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return "S" + std::to_string(param_info.param);
                         });

}  // namespace
}  // namespace ps
