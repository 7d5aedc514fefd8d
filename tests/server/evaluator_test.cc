// The evaluator (cluster.evaluator) through real shards and clients on
// loopback: its pulls are answered once every worker finished the clock it
// names, whatever the consistency mode; it is never waited for and holds no
// clock; it may only read; and the shards serve it until it leaves or is
// dead, also after the workers left.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "client/client.h"
#include "client/control_client.h"
#include "common/wire.h"
#include "server/shard_server.h"
#include "tests/util/fake_clock.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tests/util/test_env.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

JobOptions Job(ConsistencyMode mode, uint32_t workers, bool evaluator = true) {
  JobOptions job = TestJob()
                       .Servers(2)
                       .Workers(workers)
                       .Mode(mode, mode == ConsistencyMode::kSsp ? 2 : 0)
                       .Table("t", 4, 1, OptimizerKind::kAdd)
                       .RequestTimeoutMs(20000)
                       .Build();
  job.cluster.evaluator = evaluator;
  return job;
}

// Pushes 1 to every row, then ends the clock.
Status Step(Client& client) {
  Ticket push = *client.PushDense(0, SharedFloats::Take(std::vector<float>(4, 1.0f)));
  PS_RETURN_IF_ERROR(client.Wait(push));
  return client.Wait(*client.Clock());
}

// Whether `ticket` is still waiting after `ms` of polling.
bool StillWaiting(Client& client, milliseconds ms) {
  EXPECT_OK(client.Poll(static_cast<int>(ms.count())));
  EXPECT_OK(client.Poll(0));
  return client.in_flight() > 0;
}

class EvaluatorModeTest : public ::testing::TestWithParam<ConsistencyMode> {};

TEST_P(EvaluatorModeTest, APullIsAnsweredOnceEveryWorkerFinishedItsClock) {
  const JobOptions job = Job(GetParam(), 2);
  InProcessCluster shards(job);
  auto fast = Client::Create(job, 0, shards.endpoints()).value();
  auto slow = Client::Create(job, 1, shards.endpoints()).value();
  auto evaluator = Client::Create(job, kEvaluatorWorker, shards.endpoints()).value();
  ASSERT_OK(evaluator->SetReadClock(2));
  std::vector<float> out(4);
  Ticket read = *evaluator->PullDense(0, out.data());
  // Worker 0 runs ahead (as far as its mode lets it); worker 1 is at 1.
  ASSERT_OK(Step(*slow));
  const int fast_clocks = 3;  // it never pulls, so no mode holds it back
  for (int c = 0; c < fast_clocks; ++c) ASSERT_OK(Step(*fast));
  EXPECT_TRUE(StillWaiting(*evaluator, milliseconds(200)))
      << "worker 1 has not finished clock 1: the read must wait, even under asp";
  ASSERT_OK(Step(*slow));  // both finished clocks 0 and 1
  ASSERT_OK(evaluator->Wait(read));
  EXPECT_GE(evaluator->min_clock(0), 2);
  EXPECT_GE(evaluator->min_clock(1), 2);
  // Both workers' first two pushes are in it (under asp and ssp perhaps
  // worker 0's later ones too).
  for (float v : out) {
    EXPECT_GE(v, 4.0f);
    EXPECT_LE(v, 2.0f + fast_clocks);
  }
  shards.Stop();
  // It holds no clock and was never counted.
  EXPECT_EQ(shards.server(0).clocks().num_workers(), 2u);
  EXPECT_EQ(shards.server(0).clocks().num_counted(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Modes, EvaluatorModeTest,
                         ::testing::Values(ConsistencyMode::kBsp, ConsistencyMode::kSsp,
                                           ConsistencyMode::kAsp));

TEST(EvaluatorTest, WorkersNeverWaitForIt) {
  const JobOptions job = Job(ConsistencyMode::kBsp, 1);
  InProcessCluster shards(job);
  auto worker = Client::Create(job, 0, shards.endpoints()).value();
  auto evaluator = Client::Create(job, kEvaluatorWorker, shards.endpoints()).value();
  std::vector<float> out(4);
  ASSERT_OK(evaluator->Wait(*evaluator->PullDense(0, out.data())));  // clock 0: at once
  ASSERT_OK(evaluator->SetReadClock(1000));
  Ticket far = *evaluator->PullDense(0, out.data());  // waits, and holds nobody up
  for (int c = 0; c < 20; ++c) ASSERT_OK(Step(*worker));
  std::vector<float> mine(4);
  ASSERT_OK(worker->Wait(*worker->PullDense(0, mine.data())));
  EXPECT_EQ(mine[0], 20.0f);
  EXPECT_TRUE(StillWaiting(*evaluator, milliseconds(50)));
  // STATS says how the shard sees it (ps_ctl status shows it).
  auto control = ControlClient::Create(job, shards.endpoints()).value();
  auto stats = control->Stats(0);
  ASSERT_OK(stats);
  EXPECT_NE(stats->find("\nevaluator reading silent_ms "), std::string::npos) << *stats;
  shards.Stop();
  EXPECT_EQ(shards.server(0).counters().pulls_waited, 0u)
      << "the evaluator's waits are not the workers' staleness waits";
  EXPECT_EQ(shards.server(0).clocks().min_clock(), 20);
  (void)far;
}

TEST(EvaluatorTest, ItMayOnlyRead) {
  const JobOptions job = Job(ConsistencyMode::kBsp, 1);
  InProcessCluster shards(job);
  auto evaluator = Client::Create(job, kEvaluatorWorker, shards.endpoints()).value();
  auto push = evaluator->PushDense(0, SharedFloats::Take(std::vector<float>(4, 1.0f)));
  EXPECT_EQ(push.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(evaluator->Clock().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(evaluator->Join().code(), StatusCode::kFailedPrecondition);
  auto worker = Client::Create(job, 0, shards.endpoints()).value();
  EXPECT_EQ(worker->SetReadClock(3).code(), StatusCode::kFailedPrecondition)
      << "a worker's pulls carry its own clock";
  EXPECT_EQ(evaluator->SetReadClock(-1).code(), StatusCode::kInvalidArgument);
}

// A forged request in the evaluator's name, past the client's checks.
TEST(EvaluatorTest, TheShardsRefuseWhatAnEvaluatorMayNotSend) {
  TableLayout t{"t", 4, 1, {0, 4}, {}};
  RequestRules rules{0, std::span<const TableLayout>(&t, 1), 2, 1 << 20, 1000, true, true};
  auto decode = [&](Op op, uint32_t flags, const RequestRules& r) {
    MessageHeader h;
    h.op = op;
    h.worker = kEvaluatorWorker;
    h.table = 0;
    h.count = 4;
    h.dim = 1;
    h.flags = flags;
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    if (op == Op::kPush) {
      frames.push_back(Frame::CopyOf(std::vector<float>(4, 1.0f).data(), 16));
    }
    Request out;
    return DecodeRequest(frames, r, &out);
  };
  EXPECT_OK(decode(Op::kPull, kFlagDenseRange, rules));
  EXPECT_OK(decode(Op::kHeartbeat, kFlagBeat, rules));
  EXPECT_OK(decode(Op::kHeartbeat, kFlagLeaving, rules));
  for (Op op : {Op::kPush, Op::kClock, Op::kHello, Op::kStats, Op::kShutdown, Op::kCheckpoint}) {
    const Status s = decode(op, op == Op::kPush ? kFlagDenseRange : 0, rules);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << OpName(op) << ": " << s.ToString();
    EXPECT_NE(s.message().find("the evaluator may only pull"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(decode(Op::kHeartbeat, kFlagResume, rules).code(), StatusCode::kInvalidArgument);
  RequestRules none = rules;
  none.evaluator = false;
  const Status s = decode(Op::kPull, kFlagDenseRange, none);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("this job has no evaluator (cluster.evaluator: false)"),
            std::string::npos)
      << s.ToString();
}

TEST(EvaluatorTest, NoEvaluatorClientForAJobWithoutOne) {
  const JobOptions job = Job(ConsistencyMode::kBsp, 1, /*evaluator=*/false);
  InProcessCluster shards(job);
  auto evaluator = Client::Create(job, kEvaluatorWorker, shards.endpoints());
  EXPECT_EQ(evaluator.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(evaluator.status().message().find("cluster.evaluator: true"), std::string::npos);
}

// Polls `done` every 2 ms for at most 10 s.
template <typename Fn>
bool Within10s(Fn done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

TEST(EvaluatorTest, TheShardsServeItAfterTheWorkersLeftUntilItLeaves) {
  const JobOptions job = Job(ConsistencyMode::kBsp, 1);  // exit_when_workers_leave: true
  InProcessCluster shards(job);
  auto worker = Client::Create(job, 0, shards.endpoints()).value();
  auto evaluator = Client::Create(job, kEvaluatorWorker, shards.endpoints()).value();
  ASSERT_OK(evaluator->SetReadClock(3));
  std::vector<float> out(4);
  Ticket last = *evaluator->PullDense(0, out.data());
  for (int c = 0; c < 3; ++c) ASSERT_OK(Step(*worker));
  ASSERT_OK(worker->Leave());
  ASSERT_OK(evaluator->Wait(last));
  EXPECT_EQ(out[0], 3.0f);
  // The goodbye was handled (Leave waits for its answer), and a
  // housekeeping round ran after it: neither stopped a shard.
  shards.AwaitHousekeeping();
  EXPECT_FALSE(shards.server(0).stop_requested()) << "the evaluator has not left";
  EXPECT_FALSE(shards.server(1).stop_requested());
  ASSERT_OK(evaluator->Leave());
  EXPECT_TRUE(Within10s([&] {
    return shards.server(0).stop_requested() && shards.server(1).stop_requested();
  }));
}

TEST(EvaluatorTest, AReadOfAClockTheWorkersNeverReachIsAnsweredOnceTheyLeft) {
  const JobOptions job = Job(ConsistencyMode::kBsp, 1);
  InProcessCluster shards(job);
  auto worker = Client::Create(job, 0, shards.endpoints()).value();
  auto evaluator = Client::Create(job, kEvaluatorWorker, shards.endpoints()).value();
  ASSERT_OK(evaluator->SetReadClock(10));
  std::vector<float> out(4);
  Ticket read = *evaluator->PullDense(0, out.data());
  for (int c = 0; c < 2; ++c) ASSERT_OK(Step(*worker));
  EXPECT_TRUE(StillWaiting(*evaluator, milliseconds(100)));
  ASSERT_OK(worker->Leave());  // at clock 2, short of 10: the model is final
  ASSERT_OK(evaluator->Wait(read));
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(evaluator->min_clock(0), 2) << "the reply says which clock it read";
  ASSERT_OK(evaluator->Leave());
}

TEST(EvaluatorTest, ASilentEvaluatorIsDeadAndTheShardsExitWithoutIt) {
  JobOptions job = Job(ConsistencyMode::kBsp, 1);
  job.liveness.heartbeat_ms = 50;
  job.liveness.timeout_ms = 400;
  job.rendezvous.timeout_ms = 1000;
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster shards(job, &env);
  auto worker = Client::Create(job, 0, shards.endpoints()).value();
  {
    auto evaluator = Client::Create(job, kEvaluatorWorker, shards.endpoints()).value();
    std::vector<float> out(4);
    ASSERT_OK(evaluator->Wait(*evaluator->PullDense(0, out.data())));
  }  // it dies: no goodbye, no more beats
  ASSERT_OK(Step(*worker));
  ASSERT_OK(worker->Leave());
  shards.AwaitHousekeeping();
  EXPECT_FALSE(shards.server(0).stop_requested()) << "the evaluator is not dead yet";
  clock.Advance(milliseconds(1500));  // past the grace and the timeout
  EXPECT_TRUE(Within10s([&] {
    return shards.server(0).stop_requested() && shards.server(1).stop_requested();
  }));
  shards.Stop();
  EXPECT_TRUE(shards.server(0).evaluator_dead());
}

}  // namespace
}  // namespace ps
