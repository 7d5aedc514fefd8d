// The client against real ShardServers in this process, through channels
// that lose, repeat, hold back and reorder messages or cut the connection
// (tests/util/faulty_channel.h): what a client must get right when the
// network does not.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "client/client.h"
#include "tests/util/fake_clock.h"
#include "tests/util/faulty_channel.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tests/util/test_env.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using Direction = FaultyChannel::Direction;
using Fault = FaultyChannel::Fault;

constexpr uint64_t kDenseRows = 1001;
constexpr uint32_t kDenseDim = 3;
constexpr uint64_t kSparseRows = 1000000;
constexpr uint32_t kSparseDim = 4;
// Bounds the loops that wait for a message to arrive: 500 polls of at most
// 20 ms each (each loop ends as soon as the message is there).
constexpr int kMaxPolls = 500;

JobOptions Job() {
  return TestJob()
      .Servers(2)
      .Table("dense", kDenseRows, kDenseDim, OptimizerKind::kAdd)
      .Table("sparse", kSparseRows, kSparseDim, OptimizerKind::kAdd)
      .RequestTimeoutMs(5000)
      .Build();
}

class FaultInjectionTest : public ::testing::Test {
 protected:
  // The client runs on `clock` when given, through channels_.
  void Start(JobOptions job, FakeClock* clock = nullptr) {
    job_ = std::move(job);
    cluster_ = std::make_unique<InProcessCluster>(job_);
    env_ = std::make_unique<TestEnv>(clock);
    env_->set_channels(channels_.Factory());
    auto c = Client::Create(job_, 0, cluster_->endpoints(), env_.get());
    ASSERT_OK(c);
    client_ = std::move(*c);
  }
  // Polls until `done` holds (at most kMaxPolls times).
  template <typename Done>
  void PollUntil(Done done) {
    for (int i = 0; i < kMaxPolls && !done(); ++i) ASSERT_OK(client_->Poll(20));
  }
  std::vector<float> PullDense(uint32_t table) {
    std::vector<float> out(job_.tables[table].rows * job_.tables[table].dim, -1.0f);
    Status s = client_->Wait(*client_->PullDense(table, out.data()));
    EXPECT_OK(s);
    return out;
  }

  JobOptions job_;
  FaultyChannels channels_;
  std::unique_ptr<TestEnv> env_;  // outlives client_
  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(FaultInjectionTest, RequestLostInACutConnectionIsSentAgainWhenItComesBack) {
  Start(Job());
  PullDense(0);  // both connections are up
  channels_[1].Cut();
  const std::vector<float> ones(kDenseRows * kDenseDim, 1.0f);
  auto push = client_->PushDense(0, SharedFloats::Take(std::vector<float>(ones)));
  ASSERT_OK(push);
  // Shard 0 answers; shard 1's part was lost and waits for its server.
  PollUntil([&] { return client_->counters().disconnects == 1 && client_->in_flight() == 1; });
  ASSERT_EQ(client_->counters().disconnects, 1u);
  ASSERT_EQ(client_->in_flight(), 1u);
  EXPECT_EQ(channels_[1].dropped(), 1u);
  channels_[1].Restore();
  Status pushed = client_->Wait(*push);
  ASSERT_OK(pushed);
  EXPECT_EQ(client_->counters().reconnects, 1u);
  EXPECT_EQ(client_->counters().resent, 1u);
  EXPECT_EQ(PullDense(0), ones);
}

TEST_F(FaultInjectionTest, DuplicatedPushIsAppliedOnce) {
  Start(Job());
  channels_[0].Inject(Direction::kToServer, Op::kPush, Fault::kDuplicate);
  const std::vector<float> ones(kDenseRows * kDenseDim, 1.0f);
  ASSERT_TRUE(client_->Wait(*client_->PushDense(0, SharedFloats::Take(std::vector<float>(ones))))
                  .ok());
  EXPECT_EQ(channels_[0].duplicated(), 1u);
  // Read after the copy on the same connection: it was acknowledged, not applied.
  EXPECT_EQ(PullDense(0), ones);
  EXPECT_EQ(client_->counters().late_replies, 1u);  // the copy's acknowledgement
  cluster_->Stop();
  EXPECT_EQ(cluster_->server(0).counters().repeated_pushes, 1u);
  EXPECT_EQ(cluster_->server(1).counters().repeated_pushes, 0u);
}

TEST_F(FaultInjectionTest, DroppedReplyEndsInDeadlineExceededNamingTheServer) {
  JobOptions job = Job();
  job.client.request_timeout_ms = 300;
  FakeClock clock;
  Start(job, &clock);
  channels_[1].Inject(Direction::kFromServer, Op::kPullOk, Fault::kDrop);
  std::vector<float> out(kDenseRows * kDenseDim);
  auto pull = client_->PullDense(0, out.data());
  ASSERT_OK(pull);
  PollUntil([&] { return channels_[1].dropped() == 1 && client_->in_flight() == 1; });
  ASSERT_EQ(client_->in_flight(), 1u);
  clock.Advance(milliseconds(299));
  ASSERT_OK(client_->Poll(0));
  EXPECT_EQ(client_->in_flight(), 1u);  // not yet
  clock.Advance(milliseconds(1));
  Status s = client_->Wait(*pull);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("to server 1 at " + cluster_->endpoints()[1]), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("no reply within 300 ms"), std::string::npos) << s.ToString();
  EXPECT_EQ(client_->counters().timeouts, 1u);
  EXPECT_EQ(client_->in_flight(), 0u);
}

TEST_F(FaultInjectionTest, ReorderedRepliesAndRequestsKeepPullResultsCorrect) {
  Start(Job());
  std::vector<float> dense(kDenseRows * kDenseDim);
  std::iota(dense.begin(), dense.end(), 1.0f);
  ASSERT_OK(client_->Wait(*client_->PushDense(0, SharedFloats::Take(std::vector<float>(dense)))));
  const std::vector<uint64_t> rows = {7, 499999, 500000, 999999};  // two rows on each shard
  std::vector<float> sparse(rows.size() * kSparseDim);
  std::iota(sparse.begin(), sparse.end(), 100.0f);
  ASSERT_OK(client_->PushSync(1, rows, SharedFloats::Take(std::vector<float>(sparse))));

  // Three pulls whose replies from shard 1 are held and handed over newest first.
  channels_[1].Inject(Direction::kFromServer, Op::kPullOk, Fault::kHold, 3);
  std::vector<float> a(dense.size()), b(sparse.size()), c(dense.size());
  auto ta = client_->PullDense(0, a.data());
  auto tb = client_->Pull(1, rows, b.data());
  auto tc = client_->PullDense(0, c.data());
  ASSERT_TRUE(ta.ok() && tb.ok() && tc.ok());
  PollUntil([&] { return channels_[1].held(Direction::kFromServer) == 3; });
  ASSERT_EQ(channels_[1].held(Direction::kFromServer), 3u);
  ASSERT_OK(channels_[1].ReleaseHeld(Direction::kFromServer, /*newest_first=*/true));
  ASSERT_OK(client_->Wait(*ta));
  ASSERT_OK(client_->Wait(*tb));
  ASSERT_OK(client_->Wait(*tc));
  EXPECT_EQ(a, dense);
  EXPECT_EQ(b, sparse);
  EXPECT_EQ(c, dense);

  // Two pulls whose requests to shard 0 reach it newest first.
  channels_[0].Inject(Direction::kToServer, Op::kPull, Fault::kHold, 2);
  std::vector<float> d(dense.size()), e(sparse.size());
  auto td = client_->PullDense(0, d.data());
  auto te = client_->Pull(1, rows, e.data());
  ASSERT_TRUE(td.ok() && te.ok());
  ASSERT_EQ(channels_[0].held(Direction::kToServer), 2u);
  ASSERT_OK(channels_[0].ReleaseHeld(Direction::kToServer, /*newest_first=*/true));
  ASSERT_OK(client_->Wait(*td));
  ASSERT_OK(client_->Wait(*te));
  EXPECT_EQ(d, dense);
  EXPECT_EQ(e, sparse);
  EXPECT_EQ(client_->counters().late_replies, 0u);
  EXPECT_EQ(client_->counters().errors, 0u);
}

}  // namespace
}  // namespace ps
