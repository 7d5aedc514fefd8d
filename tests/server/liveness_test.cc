// Dead, departed and returning workers, through real shards and clients on
// loopback: a silent worker is found within liveness.timeout_ms, and the
// job then fails naming it (policy fail) or goes on without it (drop).
//
// The shards run on a FakeClock: a test moves time past the timeout by
// hand instead of sleeping. The workers' heartbeat threads still beat every
// 50 ms of real time; a live worker's beats reach the shards between two
// moves of the clock, each shorter than the timeout (AwaitHeard).
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "client/control_client.h"
#include "client/heartbeat.h"
#include "tests/util/fake_clock.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/faulty_channel.h"
#include "tests/util/raw_peer.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tests/util/test_env.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

JobOptions Job(DeadWorkerPolicy policy, uint32_t workers) {
  JobOptions job = TestJob()
                       .Servers(2)
                       .Workers(workers)
                       .Bsp()
                       .Liveness(50, 400)
                       .Table("t", 8)
                       .RequestTimeoutMs(10000)
                       .Build();
  job.liveness.on_dead_worker = policy;
  // A worker that never spoke counts as silent from 1000 ms on.
  job.rendezvous.timeout_ms = 1000;
  return job;
}

std::unique_ptr<Client> Worker(const JobOptions& job, uint32_t rank, const InProcessCluster& c) {
  auto client = Client::Create(job, rank, c.endpoints()).value();
  EXPECT_OK(client->Join());
  return client;
}

Status Step(Client& client) {
  std::vector<float> out(8);
  PS_RETURN_IF_ERROR(client.Wait(*client.PullDense(0, out.data())));
  return client.Wait(*client.Clock());
}

// Each worker's silence on a shard, from its STATS line "worker_silent_ms".
std::vector<int64_t> SilentMs(const std::string& stats) {
  std::vector<int64_t> ms;
  const size_t at = stats.find("worker_silent_ms");
  if (at == std::string::npos) return ms;
  std::istringstream line(stats.substr(at + 16, stats.find('\n', at) - at - 16));
  for (int64_t v; line >> v;) ms.push_back(v);
  return ms;
}

// Moves the shards' clock by `by`, then waits (real time, at most 10 s)
// until every shard has heard from each of `alive` since the move: their
// heartbeats keep them alive across it. REQUIRES: `by` < the timeout.
void MoveClockKeeping(FakeClock& clock, milliseconds by, const std::vector<uint32_t>& alive,
                      const JobOptions& job, InProcessCluster& cluster) {
  clock.Advance(by);
  auto control = ControlClient::Create(job, cluster.endpoints()).value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (uint32_t s = 0; s < cluster.endpoints().size(); ++s) {
    while (true) {
      auto stats = control->Stats(s);
      ASSERT_OK(stats);
      const std::vector<int64_t> silent = SilentMs(*stats);
      ASSERT_EQ(silent.size(), job.cluster.workers) << *stats;
      bool heard = true;
      for (uint32_t w : alive) heard = heard && silent[w] < by.count();
      if (heard) break;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << "shard " << s << " heard no beat of the live workers after the clock moved:\n"
          << *stats;
      std::this_thread::sleep_for(milliseconds(2));
    }
  }
  cluster.AwaitHousekeeping();
}

TEST(LivenessTest, AWorkerThatNeverComesFailsTheJobNamingIt) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 3);
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Worker(job, 1, cluster);
  ASSERT_OK(Step(*w0));
  ASSERT_OK(Step(*w1));
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> out(8);
  Ticket pull = *w0->PullDense(0, out.data());  // at clock 1 under bsp: waits for worker 2
  ASSERT_OK(w0->Poll(20));
  // Past the start-up grace period (1000 ms), then 200 ms of silence.
  for (int i = 0; i < 4; ++i) {
    ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(300), {0, 1}, job, cluster));
  }
  EXPECT_GT(w0->in_flight(), 0u) << "worker 2 is not dead yet: the pull waits";
  clock.Advance(milliseconds(200));  // worker 2 silent for 400 ms since the grace, the others < 400
  Status s = w0->Wait(pull);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("worker 2 is dead: it never connected in the 1400 ms since shard"),
            std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("on_dead_worker: fail"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  // Every later request fails the same way, for every worker.
  EXPECT_EQ(Step(*w1).code(), StatusCode::kAborted);
}

TEST(LivenessTest, ADroppedWorkerNoLongerHoldsTheOthersBackAndCanRejoin) {
  const JobOptions job = Job(DeadWorkerPolicy::kDrop, 3);
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Worker(job, 1, cluster);
  {
    auto w2 = Worker(job, 2, cluster);
    ASSERT_OK(Step(*w2));
  }  // worker 2 dies: no goodbye, no more heartbeats
  ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(300), {0, 1}, job, cluster));
  clock.Advance(milliseconds(200));  // worker 2 silent for 500 ms, the others < 400
  cluster.AwaitHousekeeping();
  for (int c = 0; c < 5; ++c) {
    ASSERT_OK(Step(*w0)) << "clock " << c;
    ASSERT_OK(Step(*w1)) << "clock " << c;
  }
  EXPECT_EQ(w0->clock(), 5);
  // A restarted worker 2 resumes at the minimum clock and is waited for again.
  auto back = Worker(job, 2, cluster);
  EXPECT_EQ(back->clock(), 5);
  ASSERT_OK(Step(*w0));  // pulls at clock 5 need min >= 5: all are there
  ASSERT_OK(Step(*w1));
  std::vector<float> out(8);
  Ticket pull = *w0->PullDense(0, out.data());  // clock 6: needs worker 2's clock 5
  ASSERT_OK(w0->Poll(200));
  EXPECT_GT(w0->in_flight(), 0u) << "the rejoined worker must be waited for";
  ASSERT_OK(Step(*back));
  ASSERT_OK(w0->Wait(pull));
  cluster.Stop();
  EXPECT_FALSE(cluster.server(0).worker_dead(2));
  EXPECT_TRUE(cluster.server(0).clocks().counted(2));
}

// A worker whose connections are cut goes silent, heartbeats included
// (they travel through the client's channel factory): its process lives,
// but the shards drop it after liveness.timeout_ms.
TEST(LivenessTest, AWorkerCutOffFallsSilentAndIsDroppedThoughItsProcessLives) {
  const JobOptions job = Job(DeadWorkerPolicy::kDrop, 2);
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  FaultyChannels channels;  // outlives the worker
  TestEnv worker_env;
  worker_env.set_channels(channels.Factory());
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Client::Create(job, 1, cluster.endpoints(), &worker_env).value();
  ASSERT_OK(w1->Join());
  ASSERT_OK(Step(*w0));
  ASSERT_OK(Step(*w1));
  // Its beats arrive through the faulty channels while they are whole.
  ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(300), {0, 1}, job, cluster));
  for (uint32_t s = 0; s < cluster.endpoints().size(); ++s) channels[s].Cut();
  ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(300), {0}, job, cluster));
  clock.Advance(milliseconds(200));  // worker 1 silent for 500 ms, worker 0 < 400
  cluster.AwaitHousekeeping();
  for (uint32_t s = 0; s < cluster.endpoints().size(); ++s) {
    EXPECT_TRUE(cluster.server(s).worker_dead(1)) << "shard " << s;
    EXPECT_FALSE(cluster.server(s).worker_dead(0)) << "shard " << s;
  }
}

// Worker `rank` joins, finishes one clock and says goodbye.
void StepAndLeave(const JobOptions& job, uint32_t rank, const InProcessCluster& cluster) {
  auto worker = Worker(job, rank, cluster);
  ASSERT_OK(Step(*worker));
  ASSERT_OK(worker->Leave());
}

// Moves the shards' clock past the liveness timeout (two steps below it),
// worker 0 kept alive by its heartbeats.
void PassTheTimeoutKeeping0(FakeClock& clock, const JobOptions& job, InProcessCluster& cluster) {
  ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(300), {0}, job, cluster));
  ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(300), {0}, job, cluster));
}

TEST(LivenessTest, AWorkerThatLeftIsNeitherWaitedForNorDead) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 2);
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  auto w0 = Worker(job, 0, cluster);
  ASSERT_NO_FATAL_FAILURE(StepAndLeave(job, 1, cluster));
  for (int c = 0; c < 4; ++c) ASSERT_OK(Step(*w0));
  // Past the liveness timeout.
  ASSERT_NO_FATAL_FAILURE(PassTheTimeoutKeeping0(clock, job, cluster));
  ASSERT_OK(Step(*w0));
  cluster.Stop();
  EXPECT_FALSE(cluster.server(0).worker_dead(1));
  EXPECT_FALSE(cluster.server(1).worker_dead(1));
}

TEST(LivenessTest, ABeatThatOvertakesTheGoodbyeDoesNotBringTheWorkerBack) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 2);
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  auto w0 = Worker(job, 0, cluster);
  ASSERT_NO_FATAL_FAILURE(StepAndLeave(job, 1, cluster));
  // Beats of worker 1's heartbeat thread arriving after its goodbye (they
  // travel on their own connection).
  {
    auto beats = HeartbeatSender::Start(cluster.endpoints(), 1, milliseconds(20)).value();
    ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(100), {1}, job, cluster));
    EXPECT_GT(beats->sent(), 0u);
  }
  for (int c = 0; c < 3; ++c) ASSERT_OK(Step(*w0));  // not waited for
  // Past the liveness timeout.
  ASSERT_NO_FATAL_FAILURE(PassTheTimeoutKeeping0(clock, job, cluster));
  ASSERT_OK(Step(*w0));
  cluster.Stop();
  for (uint32_t s = 0; s < 2; ++s) {
    EXPECT_FALSE(cluster.server(s).clocks().counted(1)) << "shard " << s;
    EXPECT_FALSE(cluster.server(s).worker_dead(1)) << "shard " << s;
  }
}

TEST(LivenessTest, ARefusedRequestFromAWorkerThatLeftNeitherRevivesNorFailsTheJob) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 2);
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  auto w0 = Worker(job, 0, cluster);
  ASSERT_NO_FATAL_FAILURE(StepAndLeave(job, 1, cluster));
  // Worker 1's identity after its goodbye: a CLOCK far ahead (refused
  // whether or not the worker left), then a CLOCK and a PUSH it could
  // have sent: each is refused, and none makes it a worker again.
  RawPeer forged(cluster.endpoints()[0]);
  MessageHeader tick;
  tick.op = Op::kClock;
  tick.worker = 1;
  tick.request_id = 1;
  tick.clock = int64_t{1} << 62;
  MessageHeader reply = forged.Exchange(tick);
  EXPECT_EQ(reply.op, Op::kError);
  tick.request_id = 2;
  tick.clock = 1;
  reply = forged.Exchange(tick);
  EXPECT_EQ(reply.op, Op::kError);
  EXPECT_NE(reply.text.find("left the job"), std::string::npos) << reply.text;
  EXPECT_NE(reply.text.find("only by HELLO"), std::string::npos) << reply.text;
  for (int c = 0; c < 3; ++c) ASSERT_OK(Step(*w0));  // not waited for
  // Past the liveness timeout: worker 1 is not dead, the job goes on.
  ASSERT_NO_FATAL_FAILURE(PassTheTimeoutKeeping0(clock, job, cluster));
  ASSERT_OK(Step(*w0));
  EXPECT_FALSE(cluster.server(0).worker_dead(1));
  EXPECT_FALSE(cluster.server(0).clocks().counted(1));
  // A HELLO brings it back.
  auto again = Worker(job, 1, cluster);
  cluster.Stop();
  EXPECT_TRUE(cluster.server(0).clocks().counted(1));
  EXPECT_FALSE(cluster.server(0).worker_dead(1));
}

TEST(LivenessTest, HeartbeatsKeepABusyWorkerAlive) {
  const JobOptions job = Job(DeadWorkerPolicy::kFail, 2);
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Worker(job, 1, cluster);
  ASSERT_OK(Step(*w0));
  ASSERT_OK(Step(*w1));
  // Worker 1 "computes" for longer than the timeout, sending nothing itself.
  for (int i = 0; i < 3; ++i) {
    ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(300), {0, 1}, job, cluster));
  }
  ASSERT_OK(Step(*w1));
  ASSERT_OK(Step(*w0));
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
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  auto w0 = Worker(job, 0, cluster);
  auto w1 = Worker(job, 1, cluster);
  std::vector<float> out(8);
  for (int c = 0; c < 3; ++c) {
    for (Client* w : {w0.get(), w1.get()}) {
      ASSERT_OK(w->Wait(*w->PullDense(0, out.data())));  // pulled
      ASSERT_OK(w->Wait(*w->PullDense(0, out.data())));  // from the cache
      ASSERT_OK(w->Wait(*w->Clock()));
    }
  }
  // Worker 2 never spoke: declared dead 400 ms after the 1000 ms grace
  // period; the others' heartbeats report their caches.
  for (int i = 0; i < 5; ++i) {
    ASSERT_NO_FATAL_FAILURE(MoveClockKeeping(clock, milliseconds(300), {0, 1}, job, cluster));
  }
  auto control = ControlClient::Create(job, cluster.endpoints()).value();
  auto stats = control->Stats(0);
  ASSERT_OK(stats);
  EXPECT_NE(stats->find("worker_clocks 3 3 0"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("min_clock 3 slowest_worker 0"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("dead_workers 2\n"), std::string::npos) << *stats;
  // Under ssp 2 only the first pull missed: 5 of 6 reads came from the cache.
  EXPECT_NE(stats->find("cache_hit_rate 0:0.833333 1:0.833333 2:-"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("pushes_per_s"), std::string::npos) << *stats;
}

}  // namespace
}  // namespace ps
