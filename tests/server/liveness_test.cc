// Dead, departed and returning workers, through real shards and clients on
// loopback: a silent worker is found within liveness.timeout_ms, and the
// job then fails naming it (policy fail) or goes on without it (drop).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "client/client.h"
#include "client/control_client.h"
#include "client/heartbeat.h"
#include "tests/util/in_process_cluster.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

JobOptions Job(DeadWorkerPolicy policy, uint32_t workers) {
  JobOptions job;
  job.cluster.servers = {"127.0.0.1:1", "127.0.0.1:2"};
  job.cluster.workers = workers;
  job.consistency.mode = ConsistencyMode::kBsp;
  job.liveness.heartbeat_ms = 50;
  job.liveness.timeout_ms = 400;
  job.liveness.on_dead_worker = policy;
  TableOptions t;
  t.name = "t";
  t.rows = 8;
  job.tables = {t};
  job.client.request_timeout_ms = 10000;
  return job;
}

std::unique_ptr<Client> Worker(const JobOptions& job, uint32_t rank, const InProcessCluster& c) {
  auto client = Client::Create(job, rank, c.endpoints()).value();
  EXPECT_TRUE(client->Join().ok());
  return client;
}

Status Step(Client& client) {
  std::vector<float> out(8);
  PS_RETURN_IF_ERROR(client.Wait(*client.PullDense(0, out.data())));
  return client.Wait(*client.Clock());
}

TEST(LivenessTest, AWorkerThatNeverComesFailsTheJobNamingIt) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 3);
  InProcessCluster cluster(job);
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Worker(job, 1, cluster);
  ASSERT_TRUE(Step(*w0).ok());
  ASSERT_TRUE(Step(*w1).ok());
  const auto start = std::chrono::steady_clock::now();
  Status s = Step(*w0);  // at clock 1 under bsp: waits for worker 2
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("worker 2 is dead: nothing heard from it since shard"),
            std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("on_dead_worker: fail"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  // Every later request fails the same way, for every worker.
  EXPECT_EQ(Step(*w1).code(), StatusCode::kAborted);
}

TEST(LivenessTest, ADroppedWorkerNoLongerHoldsTheOthersBackAndCanRejoin) {
  const JobOptions job = Job(DeadWorkerPolicy::kDrop, 3);
  InProcessCluster cluster(job);
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Worker(job, 1, cluster);
  {
    auto w2 = Worker(job, 2, cluster);
    ASSERT_TRUE(Step(*w2).ok());
  }  // worker 2 dies: no goodbye, no more heartbeats
  for (int c = 0; c < 5; ++c) {
    ASSERT_TRUE(Step(*w0).ok()) << "clock " << c;
    ASSERT_TRUE(Step(*w1).ok()) << "clock " << c;
  }
  EXPECT_EQ(w0->clock(), 5);
  // A restarted worker 2 resumes at the minimum clock and is waited for again.
  auto back = Worker(job, 2, cluster);
  EXPECT_EQ(back->clock(), 5);
  ASSERT_TRUE(Step(*w0).ok());  // pulls at clock 5 need min >= 5: all are there
  ASSERT_TRUE(Step(*w1).ok());
  std::vector<float> out(8);
  Ticket pull = *w0->PullDense(0, out.data());  // clock 6: needs worker 2's clock 5
  ASSERT_TRUE(w0->Poll(200).ok());
  EXPECT_GT(w0->in_flight(), 0u) << "the rejoined worker must be waited for";
  ASSERT_TRUE(Step(*back).ok());
  ASSERT_TRUE(w0->Wait(pull).ok());
  cluster.Stop();
  EXPECT_FALSE(cluster.server(0).worker_dead(2));
  EXPECT_TRUE(cluster.server(0).clocks().counted(2));
}

TEST(LivenessTest, AWorkerThatLeftIsNeitherWaitedForNorDead) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 2);
  InProcessCluster cluster(job);
  auto w0 = Worker(job, 0, cluster);
  {
    auto w1 = Worker(job, 1, cluster);
    ASSERT_TRUE(Step(*w1).ok());
    ASSERT_TRUE(w1->Leave().ok());
  }
  for (int c = 0; c < 4; ++c) ASSERT_TRUE(Step(*w0).ok());
  std::this_thread::sleep_for(milliseconds(600));  // past the liveness timeout
  ASSERT_TRUE(Step(*w0).ok());
  cluster.Stop();
  EXPECT_FALSE(cluster.server(0).worker_dead(1));
  EXPECT_FALSE(cluster.server(1).worker_dead(1));
}

TEST(LivenessTest, ABeatThatOvertakesTheGoodbyeDoesNotBringTheWorkerBack) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 2);
  InProcessCluster cluster(job);
  auto w0 = Worker(job, 0, cluster);
  {
    auto w1 = Worker(job, 1, cluster);
    ASSERT_TRUE(Step(*w1).ok());
    ASSERT_TRUE(w1->Leave().ok());
  }
  // Beats of worker 1's heartbeat thread arriving after its goodbye (they
  // travel on their own connection).
  {
    auto beats = HeartbeatSender::Start(cluster.endpoints(), 1, milliseconds(20)).value();
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_GT(beats->sent(), 0u);
  }
  for (int c = 0; c < 3; ++c) ASSERT_TRUE(Step(*w0).ok());  // not waited for
  std::this_thread::sleep_for(milliseconds(600));           // past the liveness timeout
  ASSERT_TRUE(Step(*w0).ok());
  cluster.Stop();
  for (uint32_t s = 0; s < 2; ++s) {
    EXPECT_FALSE(cluster.server(s).clocks().counted(1)) << "shard " << s;
    EXPECT_FALSE(cluster.server(s).worker_dead(1)) << "shard " << s;
  }
}

TEST(LivenessTest, HeartbeatsKeepABusyWorkerAlive) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 2);
  InProcessCluster cluster(job);
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Worker(job, 1, cluster);
  ASSERT_TRUE(Step(*w0).ok());
  ASSERT_TRUE(Step(*w1).ok());
  // Worker 1 "computes" for longer than the timeout, sending nothing itself.
  std::this_thread::sleep_for(milliseconds(900));
  ASSERT_TRUE(Step(*w1).ok());
  ASSERT_TRUE(Step(*w0).ok());
  cluster.Stop();
  EXPECT_FALSE(cluster.server(0).worker_dead(1));
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(LivenessStatsTest, StatusShowsClocksDeadWorkersAndCacheHitRates) {
  JobOptions job = Job(DeadWorkerPolicy::kDrop, 3);
  job.consistency.mode = ConsistencyMode::kSsp;
  job.consistency.staleness = 2;
  InProcessCluster cluster(job);
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Worker(job, 1, cluster);
  std::vector<float> out(8);
  for (int c = 0; c < 3; ++c) {
    for (Client* w : {w0.get(), w1.get()}) {
      ASSERT_TRUE(w->Wait(*w->PullDense(0, out.data())).ok());  // pulled
      ASSERT_TRUE(w->Wait(*w->PullDense(0, out.data())).ok());  // from the cache
      ASSERT_TRUE(w->Wait(*w->Clock()).ok());
    }
  }
  std::this_thread::sleep_for(milliseconds(600));  // worker 2 is declared dead; heartbeats report
  auto control = ControlClient::Create(job, cluster.endpoints()).value();
  auto stats = control->Stats(0);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_NE(stats->find("worker_clocks 3 3 0"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("min_clock 3 slowest_worker 0"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("dead_workers 2\n"), std::string::npos) << *stats;
  // Under ssp 2 only the first pull missed: 5 of 6 reads came from the cache.
  EXPECT_NE(stats->find("cache_hit_rate 0:0.833333 1:0.833333 2:-"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("pushes_per_s"), std::string::npos) << *stats;
}

}  // namespace
}  // namespace ps
