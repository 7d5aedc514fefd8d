// ShardServer against requests that pass DecodeRequest but that the
// protocol does not allow: clocks no worker can be at (a forged CLOCK,
// resume, PULL or PUSH far in the future, a CLOCK that skips clocks), and
// finite pushes whose result is not finite. Each is refused (or, where the
// job says so, flagged), the shard's state is unchanged, and a
// well-behaved worker goes on training.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/transport.h"
#include "common/wire.h"
#include "server/shard_server.h"
#include "tests/util/raw_peer.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("shard_server_sanity_test_" + name);
  fs::remove_all(dir);
  return dir.string();
}

// One shard on a thread of the test, and raw DEALER connections to it (each
// Connect() is a new connection, as a reconnecting client or an outside
// attacker with a plain ZeroMQ socket makes).
class Shard {
 public:
  explicit Shard(const JobOptions& job) : job_(job) {
    auto server = ShardServer::Create(job, 0, "tcp://127.0.0.1:*");
    EXPECT_OK(server);
    if (!server.ok()) return;
    server_ = std::move(*server);
    thread_ = std::thread([this] { run_status_ = server_->Run(); });
    ctx_ = Context::Create(1).value();
  }
  ~Shard() { Stop(); }

  void Stop() {
    sockets_.clear();
    if (server_ != nullptr) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  ShardServer& server() { return *server_; }
  const std::string& endpoint() const { return server_->endpoint(); }

  // A new connection; returns its index.
  size_t Connect() {
    auto sock = Socket::Create(ctx_.get(), SocketType::kDealer, SocketOptions{}).value();
    EXPECT_OK(sock->Connect(server_->endpoint()));
    sockets_.push_back(std::move(sock));
    return sockets_.size() - 1;
  }

  // Sends `frames` on connection `conn` and returns the reply's header
  // (fails the test after 5 s).
  MessageHeader Exchange(size_t conn, std::vector<Frame> frames) {
    EXPECT_OK(sockets_[conn]->Send(frames));
    std::vector<Frame> reply;
    std::vector<bool> readable;
    Socket* socks[] = {sockets_[conn].get()};
    for (int i = 0; i < 50; ++i) {
      EXPECT_OK(PollReadable(socks, 100, &readable));
      auto got = sockets_[conn]->TryRecv(&reply);
      EXPECT_OK(got);
      if (got.ok() && *got) {
        auto h = DecodeHeader({reply[0].data(), reply[0].size()});
        EXPECT_OK(h);
        last_values_.clear();
        if (reply.size() > 1) {
          const auto* f = reinterpret_cast<const float*>(reply[1].data());
          last_values_.assign(f, f + reply[1].size() / sizeof(float));
        }
        return h.ok() ? *h : MessageHeader();
      }
    }
    ADD_FAILURE() << "no reply within 5 s";
    return MessageHeader();
  }

  // A header-only request of `worker` at `clock`.
  MessageHeader Send(size_t conn, Op op, uint32_t worker, int64_t clock, uint32_t flags = 0) {
    MessageHeader h;
    h.op = op;
    h.request_id = ++request_id_;
    h.worker = worker;
    h.clock = clock;
    h.flags = flags;
    std::vector<Frame> req;
    req.push_back(EncodeHeader(h));
    return Exchange(conn, std::move(req));
  }

  // A sparse PUSH of `values` (dim floats per row) to `rows` of `table`.
  MessageHeader Push(size_t conn, uint32_t worker, int64_t clock, uint32_t table,
                     std::vector<uint64_t> rows, std::vector<float> values) {
    MessageHeader h;
    h.op = Op::kPush;
    h.request_id = ++request_id_;
    h.session = 42;
    h.worker = worker;
    h.clock = clock;
    h.table = table;
    h.count = rows.size();
    h.dim = job_.tables[table].dim;
    std::vector<Frame> req;
    req.push_back(EncodeHeader(h));
    req.push_back(Frame::CopyOf(rows.data(), rows.size() * sizeof(uint64_t)));
    req.push_back(Frame::CopyOf(values.data(), values.size() * sizeof(float)));
    return Exchange(conn, std::move(req));
  }

  // The values of `rows` of `table` (a PULL at clock 0 by `worker`).
  std::vector<float> Pull(size_t conn, uint32_t worker, uint32_t table,
                          std::vector<uint64_t> rows) {
    MessageHeader h;
    h.op = Op::kPull;
    h.request_id = ++request_id_;
    h.worker = worker;
    h.table = table;
    h.count = rows.size();
    h.dim = job_.tables[table].dim;
    std::vector<Frame> req;
    req.push_back(EncodeHeader(h));
    req.push_back(Frame::CopyOf(rows.data(), rows.size() * sizeof(uint64_t)));
    const MessageHeader reply = Exchange(conn, std::move(req));
    EXPECT_EQ(reply.op, Op::kPullOk) << reply.text;
    return last_values_;
  }

  std::string Stats(size_t conn) { return Send(conn, Op::kStats, kControlWorker, 0).text; }

 private:
  const JobOptions job_;
  std::unique_ptr<ShardServer> server_;
  std::thread thread_;
  Status run_status_;
  std::unique_ptr<Context> ctx_;
  std::vector<std::unique_ptr<Socket>> sockets_;
  std::vector<float> last_values_;
  uint64_t request_id_ = 0;
};

// The line of STATS that starts with `key`.
std::string StatsLine(const std::string& stats, const std::string& key) {
  const size_t at = stats.find(key);
  if (at == std::string::npos) return "";
  return stats.substr(at, stats.find('\n', at) - at);
}

void ExpectRefused(const MessageHeader& reply, StatusCode code,
                   const std::vector<std::string>& words) {
  EXPECT_EQ(reply.op, Op::kError);
  EXPECT_EQ(reply.code, code) << reply.text;
  for (const std::string& w : words) EXPECT_NE(reply.text.find(w), std::string::npos) << reply.text;
}

// One shard, two workers under bsp: an sgd table and an add table.
JobOptions TwoWorkerJob() {
  TableOptions w = TestTable("w", 10, 1, OptimizerKind::kSgd);
  w.optimizer.lr = 0.1f;
  return TestJob().Workers(2).Bsp().Liveness(0).Table(w).Table("acc", 10, 1, OptimizerKind::kAdd)
      .Build();
}

// Worker `worker` trains `clocks` clocks through a real Client: push 1 to
// row 9 of `acc`, end the clock; every push and clock must succeed.
void TrainWell(const JobOptions& job, const std::string& endpoint, uint32_t worker,
               int64_t clocks) {
  auto client = Client::Create(job, worker, {endpoint}).value();
  ASSERT_OK(client->Join());
  const uint64_t row = 9;
  for (int64_t c = client->clock(); c < clocks; ++c) {
    ASSERT_OK(client->PushSync(1, {&row, 1}, SharedFloats::Take(std::vector<float>{1.0f})));
    ASSERT_OK(client->Wait(*client->Clock()));
  }
}

TEST(ShardServerClockTest, ForgedFarFutureClockIsRefusedAndTheClockStays) {
  const JobOptions job = TwoWorkerJob();
  Shard shard(job);
  const size_t attacker = shard.Connect();
  for (int64_t forged : {int64_t{1} << 62, int64_t{1} << 40}) {
    ExpectRefused(shard.Send(attacker, Op::kClock, 0, forged), StatusCode::kFailedPrecondition,
                  {"worker 0", "at clock " + std::to_string(forged), "holds clock 0",
                   "server.max_resume_clocks"});
  }
  EXPECT_EQ(StatsLine(shard.Stats(attacker), "worker_clocks"), "worker_clocks 0 0");
  // The real workers go on: both finish clocks 0 and 1.
  std::thread w1([&] { TrainWell(job, shard.endpoint(), 1, 2); });
  TrainWell(job, shard.endpoint(), 0, 2);
  w1.join();
  EXPECT_EQ(StatsLine(shard.Stats(attacker), "worker_clocks"), "worker_clocks 2 2");
  shard.Stop();
  EXPECT_EQ(shard.server().clocks().min_clock(), 2);
  EXPECT_EQ(shard.server().store().CopyValues(1)[9], 4.0f);
  EXPECT_EQ(shard.server().counters().refused_clocks, 2u);
}

// The shard's log lines while `body` runs (a sink on the default logger).
std::string LogDuring(const std::function<void()>& body) {
  std::ostringstream lines;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.push_back(sink);
  body();
  sinks.pop_back();
  return lines.str();
}

size_t CountOf(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(ShardServerLogTest, ManyBadRequestsFromOnePeerAreLoggedOncePerIntervalAndCounted) {
  constexpr int kBad = 2000;
  uint64_t not_logged = 0;
  std::string stats;
  // The shard runs only inside: nothing logs while the sink is added or
  // taken away.
  const std::string log = LogDuring([&] {
    Shard shard(TwoWorkerJob());
    const size_t attacker = shard.Connect();
    for (int i = 0; i < kBad; ++i) {
      // Half undecodable (a header frame of garbage), half refused (a
      // forged clock far ahead).
      if (i % 2 == 0) {
        std::vector<Frame> garbage;
        garbage.push_back(Frame::CopyOf("\xff\xff\xff garbage", 12));
        EXPECT_EQ(shard.Exchange(attacker, std::move(garbage)).op, Op::kError);
      } else {
        EXPECT_EQ(shard.Send(attacker, Op::kClock, 0, int64_t{1} << 40).op, Op::kError);
      }
    }
    stats = shard.Stats(attacker);
    shard.Stop();
    not_logged = shard.server().counters().refusals_not_logged;
  });
  // One line per kind (the run takes far less than the interval), each
  // naming the peer, and every other refusal counted.
  EXPECT_EQ(CountOf(log, "rejected request from 127.0.0.1"), 1u) << log.substr(0, 2000);
  EXPECT_EQ(CountOf(log, "refused request from 127.0.0.1"), 1u) << log.substr(0, 2000);
  EXPECT_EQ(not_logged, static_cast<uint64_t>(kBad - 2));
  EXPECT_NE(StatsLine(stats, "refused refused_clocks")
                .find("refusals_not_logged " + std::to_string(kBad - 2)),
            std::string::npos)
      << stats;
}

TEST(ShardServerClockTest, RepeatedClockIsAcknowledgedWithoutEffect) {
  Shard shard(TwoWorkerJob());
  const size_t conn = shard.Connect();
  EXPECT_EQ(shard.Send(conn, Op::kClock, 0, 0).op, Op::kClockOk);
  EXPECT_EQ(shard.Send(conn, Op::kClock, 0, 1).op, Op::kClockOk);
  const MessageHeader repeat = shard.Send(conn, Op::kClock, 0, 0);
  EXPECT_EQ(repeat.op, Op::kClockOk) << repeat.text;
  EXPECT_EQ(StatsLine(shard.Stats(conn), "worker_clocks"), "worker_clocks 2 0");
  EXPECT_EQ(shard.Send(conn, Op::kClock, 0, 2).op, Op::kClockOk);
  EXPECT_EQ(StatsLine(shard.Stats(conn), "worker_clocks"), "worker_clocks 3 0");
}

TEST(ShardServerClockTest, ClockSkippingAheadIsRefused) {
  Shard shard(TwoWorkerJob());
  const size_t conn = shard.Connect();
  EXPECT_EQ(shard.Send(conn, Op::kClock, 1, 0).op, Op::kClockOk);
  ExpectRefused(shard.Send(conn, Op::kClock, 1, 2), StatusCode::kFailedPrecondition,
                {"worker 1", "at clock 2", "holds clock 1", "the next is clock 1"});
  EXPECT_EQ(StatsLine(shard.Stats(conn), "worker_clocks"), "worker_clocks 0 1");
  EXPECT_EQ(shard.Send(conn, Op::kClock, 1, 1).op, Op::kClockOk);  // the next one still is
  EXPECT_EQ(StatsLine(shard.Stats(conn), "worker_clocks"), "worker_clocks 0 2");
}

TEST(ShardServerClockTest, ForgedResumeBeyondTheWindowIsRefused) {
  const JobOptions job = TwoWorkerJob();
  const int64_t window = EffectiveMaxResumeClocks(job);
  EXPECT_EQ(window, 1 + 256);  // bsp without checkpoints: lead 1 + client.max_in_flight
  Shard shard(job);
  const size_t attacker = shard.Connect();
  ExpectRefused(shard.Send(attacker, Op::kHeartbeat, 0, window + 1, kFlagResume),
                StatusCode::kFailedPrecondition,
                {"(resume)", "worker 0", "holds clock 0", "at most 0 + " + std::to_string(window)});
  ExpectRefused(shard.Send(attacker, Op::kHeartbeat, 0, int64_t{1} << 62, kFlagResume),
                StatusCode::kFailedPrecondition, {"worker 0"});
  EXPECT_EQ(StatsLine(shard.Stats(attacker), "worker_clocks"), "worker_clocks 0 0");
  // Once a worker's clock is heard, a resume may not move it at all.
  const size_t conn = shard.Connect();
  EXPECT_EQ(shard.Send(conn, Op::kClock, 1, 0).op, Op::kClockOk);
  ExpectRefused(shard.Send(conn, Op::kHeartbeat, 1, 3, kFlagResume),
                StatusCode::kFailedPrecondition, {"worker 1", "holds clock 1"});
  const MessageHeader resume = shard.Send(conn, Op::kHeartbeat, 1, 1, kFlagResume);
  EXPECT_EQ(resume.op, Op::kHeartbeatOk) << resume.text;
  EXPECT_EQ(StatsLine(shard.Stats(conn), "worker_clocks"), "worker_clocks 0 1");
}

TEST(ShardServerClockTest, TheResumeWindowIsSpentOncePerWorkerNotOncePerConnection) {
  JobOptions job = TwoWorkerJob();
  job.client.max_in_flight = 4;
  Shard shard(job);
  const size_t first = shard.Connect();
  // Both workers' clocks are heard: worker 0 at 0, worker 1 at 1.
  EXPECT_EQ(shard.Send(first, Op::kHeartbeat, 0, 0, kFlagResume).op, Op::kHeartbeatOk);
  EXPECT_EQ(shard.Send(first, Op::kClock, 1, 0).op, Op::kClockOk);
  // Worker 1's clock is heard: no new connection opens the window again.
  for (int i = 0; i < 3; ++i) {
    const size_t conn = shard.Connect();
    ExpectRefused(shard.Send(conn, Op::kHeartbeat, 1, 5, kFlagResume),
                  StatusCode::kFailedPrecondition, {"(resume)", "worker 1", "holds clock 1"});
  }
  // A worker process that starts again (HELLO) may resume as far as the
  // job allows (bsp: the job's clock 0 + 1 + client.max_in_flight 4, and
  // one CLOCK on its way), once.
  auto client = Client::Create(job, 1, {shard.endpoint()}).value();
  ASSERT_OK(client->Join());
  const size_t conn = shard.Connect();
  ExpectRefused(shard.Send(conn, Op::kHeartbeat, 1, 7, kFlagResume),
                StatusCode::kFailedPrecondition, {"worker 1", "starts again (HELLO)"});
  const MessageHeader resumed = shard.Send(conn, Op::kHeartbeat, 1, 6, kFlagResume);
  EXPECT_EQ(resumed.op, Op::kHeartbeatOk) << resumed.text;
  ExpectRefused(shard.Send(conn, Op::kHeartbeat, 1, 7, kFlagResume),
                StatusCode::kFailedPrecondition, {"worker 1", "holds clock 6"});
  EXPECT_EQ(StatsLine(shard.Stats(conn), "worker_clocks"), "worker_clocks 0 6");
}

TEST(ShardServerClockTest, FarFuturePullIsRefusedNotParked) {
  Shard shard(TwoWorkerJob());
  const size_t attacker = shard.Connect();
  MessageHeader h;
  h.op = Op::kPull;
  h.request_id = 5;
  h.worker = 0;
  h.clock = int64_t{1} << 40;
  h.table = 0;
  h.count = 1;
  h.dim = 1;
  h.flags = kFlagDenseRange;
  std::vector<Frame> req;
  req.push_back(EncodeHeader(h));
  ExpectRefused(shard.Exchange(attacker, std::move(req)), StatusCode::kFailedPrecondition,
                {"PULL request 5", "worker 0", "holds clock 0"});
  EXPECT_NE(StatsLine(shard.Stats(attacker), "consistency").find("waiting_pulls 0"),
            std::string::npos);
}

TEST(ShardServerClockTest, FarFutureAggregatePushIsRefused) {
  JobOptions job = TwoWorkerJob();
  job.consistency.aggregate = true;
  Shard shard(job);
  const size_t attacker = shard.Connect();
  ExpectRefused(shard.Push(attacker, 0, int64_t{1} << 40, 1, {3}, {100.0f}),
                StatusCode::kFailedPrecondition, {"PUSH request", "worker 0", "holds clock 0"});
  // The workers' clocks 0 and 1 apply only their own pushes (mean 1 each).
  std::thread w1([&] { TrainWell(job, shard.endpoint(), 1, 2); });
  TrainWell(job, shard.endpoint(), 0, 2);
  w1.join();
  shard.Stop();
  const std::vector<float> acc = shard.server().store().CopyValues(1);
  EXPECT_EQ(acc[3], 0.0f);
  EXPECT_EQ(acc[9], 2.0f);
}

TEST(ShardServerClockTest, AggregatePushesAheadOfTheJobsClockWaitAndFarAheadAreRefused) {
  JobOptions job = TwoWorkerJob();
  job.consistency.aggregate = true;
  job.client.max_in_flight = 4;
  Shard shard(job);
  // Worker 1 finishes clock 0 and stays at clock 1 for now.
  const size_t good = shard.Connect();
  EXPECT_EQ(shard.Send(good, Op::kClock, 1, 0).op, Op::kClockOk);
  // Worker 0's identity moves its own clock one CLOCK at a time (as the
  // protocol allows), then pushes one float for each clock on another
  // connection: each would be a sum the size of the table.
  const size_t clocks = shard.Connect();
  constexpr int kClocks = 50;
  for (int64_t c = 0; c < kClocks; ++c) {
    EXPECT_EQ(shard.Send(clocks, Op::kClock, 0, c).op, Op::kClockOk);
  }
  RawPeer pusher(shard.endpoint());
  for (int64_t c = 0; c < kClocks; ++c) {
    MessageHeader h;
    h.op = Op::kPush;
    h.request_id = 1000 + static_cast<uint64_t>(c);
    h.session = 7;
    h.worker = 0;
    h.clock = c;
    h.table = 1;
    h.count = 1;
    h.dim = 1;
    std::vector<Frame> frames;
    const uint64_t row = 3;
    const float value = 100.0f;
    frames.push_back(Frame::CopyOf(&row, sizeof(row)));
    frames.push_back(Frame::CopyOf(&value, sizeof(value)));
    pusher.Send(h, std::move(frames));
  }
  // The job is at clock 1: pushes of clocks up to 2 are summed (0 and 1
  // into clock 1's sum), 3 to 6 wait (1 + 1 + client.max_in_flight 4 is
  // the most a worker reaches), the rest are refused.
  int acknowledged = 0, refused = 0;
  for (int i = 0; i < 3 + (kClocks - 7); ++i) {
    const MessageHeader reply = pusher.Receive();
    if (reply.op == Op::kPushOk) ++acknowledged;
    if (reply.op == Op::kError) {
      ++refused;
      EXPECT_NE(reply.text.find("no worker pushes for a clock above 6"), std::string::npos)
          << reply.text;
    }
  }
  EXPECT_EQ(acknowledged, 3);
  EXPECT_EQ(refused, kClocks - 7);
  std::string stats = shard.Stats(good);
  EXPECT_EQ(StatsLine(stats, "sums clocks").rfind("sums clocks 2 bytes ", 0), 0u) << stats;
  EXPECT_NE(StatsLine(stats, "sums clocks").find("parked_pushes 4"), std::string::npos) << stats;
  EXPECT_NE(StatsLine(stats, "refused refused_clocks").find("refused_sum_clocks 43"),
            std::string::npos)
      << stats;
  // Worker 1 finishes clock 1: clock 1's sum is applied, and the push of
  // clock 3 joins clock 3's sum and is acknowledged.
  EXPECT_EQ(shard.Send(good, Op::kClock, 1, 1).op, Op::kClockOk);
  const MessageHeader released = pusher.Receive();
  EXPECT_EQ(released.op, Op::kPushOk) << released.text;
  EXPECT_EQ(released.request_id, 1003u);
  stats = shard.Stats(good);
  EXPECT_EQ(StatsLine(stats, "sums clocks").rfind("sums clocks 2 bytes ", 0), 0u) << stats;
  EXPECT_NE(StatsLine(stats, "sums clocks").find("parked_pushes 3"), std::string::npos) << stats;
  shard.Stop();
  // Clock 1's sum: the pushes of clocks 0 and 1 (mean over 2 workers).
  EXPECT_EQ(shard.server().store().CopyValues(1)[3], 100.0f);
  EXPECT_LE(shard.server().store().sum_bytes(), 2 * (10 * sizeof(float) + 64u));
}

// One worker, checkpoints every 2 clocks.
JobOptions CheckpointJob(const std::string& dir) {
  JobOptions job = TwoWorkerJob();
  job.cluster.workers = 1;
  job.checkpoint.dir = dir;
  job.checkpoint.every_clocks = 2;
  job.checkpoint.sync = false;
  job.server.exit_when_workers_leave = false;
  EXPECT_OK(job.Validate());
  return job;
}

TEST(ShardServerClockTest, CheckpointAfterAForgedClockIsNamedWithALegitimateClockAndRestores) {
  const JobOptions job = CheckpointJob(FreshDir("forged"));
  {
    Shard shard(job);
    const size_t attacker = shard.Connect();
    ExpectRefused(shard.Send(attacker, Op::kClock, 0, int64_t{1} << 62),
                  StatusCode::kFailedPrecondition, {"worker 0"});
    TrainWell(job, shard.endpoint(), 0, 3);
    const MessageHeader checkpoint = shard.Send(attacker, Op::kCheckpoint, kControlWorker, 0);
    EXPECT_EQ(checkpoint.op, Op::kCheckpointOk) << checkpoint.text;
    EXPECT_EQ(checkpoint.clock, 3);
  }
  auto dir = CheckpointDir::Open(ShardCheckpointDir(job.checkpoint.dir, 0)).value();
  EXPECT_EQ(dir->Generations().value(), (std::vector<int64_t>{2, 3}));
  // A restarted shard restores clock 3, and the worker trains on from there.
  Shard restarted(job);
  TrainWell(job, restarted.endpoint(), 0, 5);
  restarted.Stop();
  EXPECT_EQ(restarted.server().clocks().min_clock(), 5);
  EXPECT_EQ(restarted.server().store().CopyValues(1)[9], 5.0f);
}

TEST(ShardServerClockTest, RestartedShardAcceptsTheResumeOfAWorkerAFewClocksAhead) {
  const JobOptions job = CheckpointJob(FreshDir("resume"));
  {
    Shard shard(job);
    TrainWell(job, shard.endpoint(), 0, 3);  // generation 2; the worker is at clock 3
  }
  Shard restarted(job);  // restores clock 2
  // What the worker sends when its connection comes back: its unanswered
  // requests (a push at clock 3, say), then a resume at clock 4 after a
  // CLOCK of 3 the old shard never answered.
  const size_t conn = restarted.Connect();
  EXPECT_EQ(restarted.Push(conn, 0, 3, 1, {9}, {1.0f}).op, Op::kPushOk);
  EXPECT_EQ(restarted.Send(conn, Op::kClock, 0, 3).op, Op::kClockOk);
  const MessageHeader resume = restarted.Send(conn, Op::kHeartbeat, 0, 4, kFlagResume);
  EXPECT_EQ(resume.op, Op::kHeartbeatOk) << resume.text;
  EXPECT_EQ(resume.clock, 4);
  EXPECT_EQ(restarted.Send(conn, Op::kClock, 0, 4).op, Op::kClockOk);
  // A resume far beyond the restored clock, on a new connection, is not.
  const int64_t window = EffectiveMaxResumeClocks(job);
  EXPECT_EQ(window, 2 * 2 + 1 + 256);
  const size_t attacker = restarted.Connect();
  ExpectRefused(restarted.Send(attacker, Op::kHeartbeat, 0, 5 + window + 1, kFlagResume),
                StatusCode::kFailedPrecondition, {"worker 0", "holds clock 5"});
  restarted.Stop();
  EXPECT_EQ(restarted.server().clocks().clock(0), 5);
  EXPECT_EQ(restarted.server().lost_clocks(), 1);  // clock 2 of the old shard's
}

// Worker 0 pushes -3.4e38 to row 0 of the sgd table (lr 0.1) 12 times,
// together with 1 to row 1; worker 1 trains well meanwhile.
struct OverflowResult {
  std::vector<MessageHeader> replies;
  std::vector<float> w;
  std::string stats;
};

OverflowResult PushTowardInfinity(const JobOptions& job) {
  Shard shard(job);
  OverflowResult result;
  std::thread w1([&] { TrainWell(job, shard.endpoint(), 1, 3); });
  const size_t conn = shard.Connect();
  for (int i = 0; i < 12; ++i) {
    result.replies.push_back(shard.Push(conn, 0, 0, 0, {0, 1}, {-3.4e38f, 1.0f}));
  }
  result.w = shard.Pull(conn, 0, 0, {0, 1});
  w1.join();
  result.stats = shard.Stats(conn);
  return result;
}

TEST(ShardServerNonFiniteTest, PushesOverflowingAValueAreRefusedUnderRefuse) {
  const JobOptions job = TwoWorkerJob();
  ASSERT_EQ(job.server.on_non_finite_result, NonFiniteResultPolicy::kRefuse);
  const OverflowResult r = PushTowardInfinity(job);
  int applied = 0;
  for (const MessageHeader& reply : r.replies) {
    if (reply.op == Op::kPushOk) {
      EXPECT_EQ(applied, &reply - r.replies.data()) << "a push after a refused one was applied";
      ++applied;
      continue;
    }
    ExpectRefused(reply, StatusCode::kOutOfRange,
                  {"table 'w'", "row 0", "not finite", "PUSH request", "worker 0"});
  }
  // 10 x 3.4e37 is still finite; the 11th would not be.
  EXPECT_EQ(applied, 10);
  ASSERT_EQ(r.w.size(), 2u);
  EXPECT_TRUE(std::isfinite(r.w[0])) << r.w[0];
  EXPECT_NEAR(r.w[0] / 3.4e38f, 1.0f, 1e-5f);
  EXPECT_NEAR(r.w[1], -0.1f * static_cast<float>(applied), 1e-5f);  // not the refused pushes' 1
  EXPECT_NE(r.stats.find("refused_results 2"), std::string::npos) << r.stats;
  // The refused rows kept their finite values: none is counted as holding
  // a value that is not finite.
  EXPECT_NE(r.stats.find("table w rows 10 dim 1 owned [0, 10) non_finite_rows 0 refused_rows 2"),
            std::string::npos)
      << r.stats;
  EXPECT_NE(r.stats.find("table acc rows 10 dim 1 owned [0, 10) non_finite_rows 0 refused_rows 0"),
            std::string::npos)
      << r.stats;
}

TEST(ShardServerNonFiniteTest, PushesOverflowingAValueAreAppliedAndFlaggedUnderFlag) {
  JobOptions job = TwoWorkerJob();
  job.server.on_non_finite_result = NonFiniteResultPolicy::kFlag;
  const OverflowResult r = PushTowardInfinity(job);
  for (const MessageHeader& reply : r.replies) EXPECT_EQ(reply.op, Op::kPushOk) << reply.text;
  ASSERT_EQ(r.w.size(), 2u);
  EXPECT_TRUE(std::isinf(r.w[0])) << r.w[0];
  EXPECT_NEAR(r.w[1], -1.2f, 1e-5f);
  EXPECT_NE(r.stats.find("table w rows 10 dim 1 owned [0, 10) non_finite_rows 2 refused_rows 0"),
            std::string::npos)
      << r.stats;
}

}  // namespace
}  // namespace ps
