// The client against real ShardServers on loopback (in this process, on
// threads): routing by key range, zero-copy and gathered pushes, chunking
// under the server's limits, many requests in flight, errors and deadlines.
#include "client/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <chrono>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "client/control_client.h"
#include "common/key_range.h"
#include "server/shard_server.h"
#include "tests/util/channel_log.h"
#include "tests/util/fake_clock.h"
#include "tests/util/free_port.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tests/util/test_env.h"

namespace ps {
namespace {

JobOptions Job(uint32_t shards) {
  return TestJob()
      .Servers(shards)
      .Workers(2)
      .Table("dense", 1001, 3, OptimizerKind::kAdd)
      .Table("sparse", 1000000, 4, OptimizerKind::kAdd)
      .RequestTimeoutMs(5000)
      .Build();
}


class ClientTest : public ::testing::Test {
 protected:
  // The client runs on `clock` when given.
  void Start(JobOptions job, FakeClock* clock = nullptr) {
    job_ = std::move(job);
    cluster_ = std::make_unique<InProcessCluster>(job_);
    env_ = std::make_unique<TestEnv>(clock);
    auto c = Client::Create(job_, 0, cluster_->endpoints(), env_.get());
    ASSERT_OK(c);
    client_ = std::move(*c);
  }
  JobOptions job_;
  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<TestEnv> env_;  // outlives client_
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTest, DensePushIsSplitByShardAndPullReadsItBack) {
  Start(Job(3));
  std::vector<float> v(1001 * 3);
  std::iota(v.begin(), v.end(), 1.0f);
  ASSERT_OK(client_->Wait(*client_->PushDense(0, SharedFloats::Take(std::vector<float>(v)))));
  std::vector<float> out(v.size(), -1.0f);
  ASSERT_OK(client_->Wait(*client_->PullDense(0, out.data())));
  EXPECT_EQ(out, v);
  EXPECT_EQ(client_->counters().requests, 6u);  // one push and one pull per shard
}

TEST_F(ClientTest, PullIntoPulledValuesKeepsTheReceivedBlocks) {
  JobOptions job = Job(2);
  TableOptions big;
  big.name = "big";
  big.rows = 200000;  // 100000 rows x 4 floats per shard: 2 storage blocks each
  big.dim = 4;
  big.init.kind = InitKind::kUniform;
  big.init.value = 1.0f;
  job.tables.push_back(big);
  Start(job);
  std::vector<float> expected(200000 * 4);
  ASSERT_OK(client_->Wait(*client_->PullDense(2, expected.data())));
  PulledValues view;
  ASSERT_OK(client_->Wait(*client_->PullDense(2, &view)));
  EXPECT_EQ(view.size(), expected.size());
  EXPECT_EQ(view.num_pieces(), 4u);
  size_t covered = 0;
  for (size_t i = 0; i < view.num_pieces(); ++i) {
    auto piece = view.piece(i);
    covered += piece.size();
    for (size_t k = 0; k < piece.size(); k += 997) {
      ASSERT_EQ(piece[k], expected[view.piece_offset(i) + k]);
    }
  }
  EXPECT_EQ(covered, expected.size());
  std::vector<float> assembled(expected.size(), -7.0f);
  view.CopyTo(assembled.data());
  EXPECT_EQ(assembled, expected);
}

TEST_F(ClientTest, UnsortedRowsWithDuplicatesAreGatheredAndScattered) {
  Start(Job(2));
  std::vector<uint64_t> rows = {999999, 3, 500000, 3, 499999, 12};
  std::vector<float> vals(rows.size() * 4);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i);
  ASSERT_OK(client_->PushSync(1, rows, SharedFloats::Take(std::vector<float>(vals))));
  std::vector<uint64_t> ask = {3, 12, 999999, 500000, 499999, 7};
  std::vector<float> out(ask.size() * 4);
  ASSERT_OK(client_->PullSync(1, ask, out.data()));
  auto expect_row = [&](size_t pos, std::vector<size_t> from) {
    for (int c = 0; c < 4; ++c) {
      float sum = 0;
      for (size_t f : from) sum += vals[f * 4 + c];
      EXPECT_EQ(out[pos * 4 + c], sum) << "row " << ask[pos] << " col " << c;
    }
  };
  expect_row(0, {1, 3});
  expect_row(1, {5});
  expect_row(2, {0});
  expect_row(3, {2});
  expect_row(4, {4});
  expect_row(5, {});
}

TEST_F(ClientTest, ManyRequestsInFlightAllComplete) {
  Start(Job(2));
  std::mt19937 gen(3);
  std::vector<float> expected(1000000 * 4, 0.0f);
  std::vector<Ticket> tickets;
  for (int i = 0; i < 300; ++i) {
    std::vector<uint64_t> rows(16);
    for (auto& r : rows) r = gen() % 1000000;
    std::sort(rows.begin(), rows.end());
    std::vector<float> vals(rows.size() * 4);
    for (size_t k = 0; k < vals.size(); ++k) {
      vals[k] = static_cast<float>(gen() % 7);
      expected[rows[k / 4] * 4 + k % 4] += vals[k];
    }
    auto t = client_->Push(1, rows, SharedFloats::Take(std::move(vals)));
    ASSERT_OK(t);
    tickets.push_back(*t);
  }
  EXPECT_GT(client_->in_flight(), 1u);
  ASSERT_OK(client_->WaitAll());
  std::vector<uint64_t> all(1000000);
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> out(all.size() * 4);
  ASSERT_OK(client_->PullSync(1, all, out.data()));
  EXPECT_EQ(out, expected);
}

TEST_F(ClientTest, RequestsAreChunkedUnderTheServerByteLimit) {
  JobOptions job = Job(2);
  job.server.max_request_bytes = 8192;
  Start(job);
  std::vector<float> v(1001 * 3, 2.0f);
  ASSERT_OK(client_->Wait(*client_->PushDense(0, SharedFloats::Take(std::vector<float>(v)))));
  std::vector<float> out(v.size());
  ASSERT_OK(client_->Wait(*client_->PullDense(0, out.data())));
  EXPECT_EQ(out, v);
  EXPECT_GT(client_->counters().requests, 4u);
  EXPECT_EQ(client_->counters().errors, 0u);
}

TEST_F(ClientTest, PushesAreSentInPartsOfPushPartBytes) {
  JobOptions job = Job(2);
  job.client.push_part_bytes = 4096;  // 341 rows of 3 floats per part
  Start(job);
  std::vector<float> v(1001 * 3);
  std::iota(v.begin(), v.end(), 0.0f);
  ASSERT_OK(client_->Wait(*client_->PushDense(0, SharedFloats::Take(std::vector<float>(v)))));
  EXPECT_EQ(client_->counters().requests, 4u);  // 500 and 501 rows: 2 parts each
  std::vector<float> out(v.size());
  ASSERT_OK(client_->Wait(*client_->PullDense(0, out.data())));
  EXPECT_EQ(out, v);
  EXPECT_EQ(client_->counters().requests, 6u);  // pulls are not split
}

TEST_F(ClientTest, CallbacksRunWhenTicketsComplete) {
  Start(Job(2));
  int calls = 0;
  std::vector<float> out(1001 * 3);
  ASSERT_TRUE(client_->PullDense(0, out.data(), [&](const Status& s) {
    EXPECT_TRUE(s.ok());
    ++calls;
  }).ok());
  ASSERT_OK(client_->WaitAll());
  EXPECT_EQ(calls, 1);
}

TEST_F(ClientTest, BadArgumentsAreRejectedBeforeSending) {
  Start(Job(2));
  std::vector<uint64_t> rows = {1, 1000000};
  std::vector<float> out(8);
  auto t = client_->Pull(1, rows, out.data());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("row 1000000 (index 1) is out of range"), std::string::npos);
  EXPECT_EQ(client_->PushDense(0, SharedFloats::Take({1.0f})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->PullDense(5, out.data()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Wait(12345).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->counters().requests, 0u);
}

TEST_F(ClientTest, ServerErrorsNameTheServer) {
  Start(Job(2));
  // A client whose config disagrees with the servers' (more rows): the
  // server rejects rows it does not own.
  JobOptions wrong = job_;
  wrong.tables[1].rows = 3000000;
  auto c = Client::Create(wrong, 1, cluster_->endpoints());
  ASSERT_OK(c);
  std::vector<uint64_t> rows = {2999999};
  std::vector<float> out(4);
  Status s = (*c)->PullSync(1, rows, out.data());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("server 1 at " + cluster_->endpoints()[1]), std::string::npos)
      << s.ToString();
}

TEST_F(ClientTest, SilentServerTurnsIntoDeadlineExceededNamingIt) {
  JobOptions job = Job(2);
  job.client.request_timeout_ms = 300;
  FakeClock clock;
  Start(job, &clock);
  cluster_->Stop();  // server 0 and 1 stop answering; their ports stay bound
  std::vector<float> out(1001 * 3);
  const auto start = std::chrono::steady_clock::now();
  auto pull = client_->PullDense(0, out.data());
  ASSERT_OK(pull);
  clock.Advance(std::chrono::milliseconds(299));
  ASSERT_OK(client_->Poll(0));
  EXPECT_EQ(client_->in_flight(), 2u);  // not yet
  clock.Advance(std::chrono::milliseconds(1));
  Status s = client_->Wait(*pull);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("to server 0 at " + cluster_->endpoints()[0]), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("no reply within 300 ms"), std::string::npos);
  EXPECT_LT(took, std::chrono::seconds(5));  // the deadline, not a hang
  EXPECT_EQ(client_->in_flight(), 0u);
}

TEST_F(ClientTest, StatsAndShutdownReachEveryShard) {
  Start(Job(2));
  auto control = ControlClient::Create(job_, cluster_->endpoints());
  ASSERT_OK(control);
  auto stats = (*control)->Stats(1);
  ASSERT_OK(stats);
  EXPECT_NE(stats->find("shard 1"), std::string::npos);
  EXPECT_EQ((*control)->Stats(2).status().code(), StatusCode::kInvalidArgument);
  ASSERT_OK((*control)->ShutdownServers());
  EXPECT_TRUE(cluster_->server(0).stop_requested());
  EXPECT_TRUE(cluster_->server(1).stop_requested());
}

TEST(ClientCreateTest, WorkerRankOutsideTheJobIsRejected) {
  auto c = Client::Create(Job(1), 2);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// A peer that answers every request with a reply built by `make_reply`:
// what a client must survive from a broken or foreign server.
class FakeServer {
 public:
  using MakeReply = std::function<std::vector<Frame>(const MessageHeader& request)>;
  // Listens at `endpoint` (a free port when not given).
  explicit FakeServer(MakeReply make_reply, const std::string& endpoint = "tcp://127.0.0.1:*")
      : make_reply_(std::move(make_reply)) {
    ctx_ = Context::Create(1).value();
    sock_ = Socket::Create(ctx_.get(), SocketType::kRouter, SocketOptions{}).value();
    // A socket closed there a moment ago may hold the port a little longer.
    Status bound = sock_->Bind(endpoint);
    for (int i = 0; i < 100 && !bound.ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      bound = sock_->Bind(endpoint);
    }
    EXPECT_OK(bound);
    endpoint_ = *sock_->LastEndpoint();
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void Serve() {
    std::vector<Frame> frames;
    std::vector<bool> readable;
    Socket* socks[] = {sock_.get()};
    while (!stop_) {
      if (!PollReadable(socks, 20, &readable).ok()) return;
      while (*sock_->TryRecv(&frames)) {
        auto h = DecodeHeader({frames[1].data(), frames[1].size()});
        std::vector<Frame> reply;
        reply.push_back(std::move(frames[0]));
        for (Frame& f : make_reply_(*h)) reply.push_back(std::move(f));
        if (reply.size() > 1) sock_->Send(reply).IgnoreError();  // none: dropped
      }
    }
  }
  MakeReply make_reply_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Socket> sock_;
  std::string endpoint_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

MessageHeader ReplyTo(const MessageHeader& req, Op op) {
  MessageHeader h = req;
  h.op = op;
  h.shard = 0;
  return h;
}

// With `clock`: waits until the reply arrived, then moves the clock past
// the request's deadline.
Status PullThrough(FakeServer& fake, uint32_t timeout_ms = 3000, FakeClock* clock = nullptr) {
  JobOptions job = Job(1);
  job.client.request_timeout_ms = timeout_ms;
  TestEnv env(clock);
  auto client = Client::Create(job, 0, {fake.endpoint()}, &env);
  EXPECT_OK(client);
  std::vector<float> out(1001 * 3);
  auto pull = (*client)->PullDense(0, out.data());
  EXPECT_OK(pull);
  if (clock != nullptr) {
    for (int i = 0; i < 200 && (*client)->counters().bytes_received == 0; ++i) {
      EXPECT_OK((*client)->Poll(20));
    }
    EXPECT_GT((*client)->counters().bytes_received, 0u);
    clock->Advance(std::chrono::milliseconds(timeout_ms));
  }
  return (*client)->Wait(*pull);
}

// A dropped connection is tried again every liveness.reconnect_ms: the
// client asks it of its request channels and of its heartbeats'.
TEST(ClientReconnectTest, EveryChannelToAServerTriesAgainAtTheJobsInterval) {
  JobOptions job = Job(2);
  EXPECT_EQ(job.liveness.reconnect_ms, 20u);  // the default
  job.liveness.reconnect_ms = 35;
  ASSERT_GT(job.liveness.heartbeat_ms, 0u);
  InProcessCluster cluster(job);
  ChannelLog log;
  TestEnv env;
  env.set_channels(log.Factory());
  auto client = Client::Create(job, 0, cluster.endpoints(), &env);
  ASSERT_OK(client);
  int requests = 0, heartbeats = 0;
  for (const ChannelOptions& made : log.made()) {
    EXPECT_EQ(made.reconnect_ms, 35) << "channel to shard " << made.shard;
    requests += made.use == ChannelUse::kRequests;
    heartbeats += made.use == ChannelUse::kHeartbeats;
  }
  EXPECT_EQ(requests, 2);
  EXPECT_EQ(heartbeats, 2);
}

// A server that closes a connection during its handshake (one that exits:
// a restart, the old server of a reshard at an address the next map keeps)
// and whose successor listens there only well after kHandshakeRefusedAfter
// is not taken for one of another security mode (under security.mode none
// only a protocol error says so), and the client's rendezvous reaches the
// new server.
TEST(ClientReconnectTest, AHandshakeCutOnceIsNotTakenForAnotherSecurityMode) {
  const int port = FreePort();
  JobOptions job = TestJob().Workers(1).Table("dense", 10, 1, OptimizerKind::kAdd).Build();
  job.cluster.servers = {"127.0.0.1:" + std::to_string(port)};
  job.server.exit_when_workers_leave = false;
  // A listener that takes one connection and closes it before any greeting.
  const int listener = ListenOnLoopback(port, 4);
  ASSERT_GE(listener, 0);
  auto client = Client::Create(job, 0, {"tcp://127.0.0.1:" + std::to_string(port)});
  ASSERT_OK(client);
  Status joined;
  std::thread join([&] { joined = (*client)->Join(); });
  pollfd waiting{listener, POLLIN, 0};
  ASSERT_EQ(poll(&waiting, 1, 5000), 1) << "the client never connected";
  const int cut = accept(listener, nullptr, nullptr);
  ASSERT_GE(cut, 0);
  close(cut);
  close(listener);
  // Nothing listens for a while (the client's attempts are refused), then
  // the shard's server does.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  auto server = ShardServer::Create(job, 0, "tcp://127.0.0.1:" + std::to_string(port));
  ASSERT_OK(server);
  std::thread serving([&] { (*server)->Run().IgnoreError(); });
  join.join();
  EXPECT_OK(joined);
  EXPECT_EQ((*client)->counters().refusals, 0u);
  if (joined.ok()) {
    EXPECT_OK((*client)->Leave());
  }
  (*server)->Stop();
  serving.join();
}

// Listens at 127.0.0.1:port and closes every connection it takes at once,
// before any greeting, as a server of another security mode may (a
// CurveZMQ one that reads a plain client's greeting and closes before its
// own reaches the client), until destroyed.
class HandshakeCutter {
 public:
  explicit HandshakeCutter(int port) {
    listener_ = ListenOnLoopback(port, 16);
    listening_ = listener_ >= 0;
    thread_ = std::thread([this] {
      // Bounded: at most 2000 connections, and the destructor stops it.
      for (int taken = 0; listening_ && !stop_ && taken < 2000;) {
        pollfd waiting{listener_, POLLIN, 0};
        if (poll(&waiting, 1, 50) != 1) continue;
        const int fd = accept(listener_, nullptr, nullptr);
        if (fd < 0) continue;
        close(fd);
        cuts_ = ++taken;
      }
    });
  }
  ~HandshakeCutter() {
    stop_ = true;
    thread_.join();
    if (listener_ >= 0) close(listener_);
  }
  bool listening() const { return listening_; }
  int cuts() const { return cuts_; }

 private:
  int listener_ = -1;
  bool listening_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<int> cuts_{0};
  std::thread thread_;
};

// A plain client whose every connection is closed during the handshake
// has only its deadline to go by (security.mode none reads no protocol
// error into a cut: a server that exits cuts one too), and its error says
// what the cuts may mean: a CurveZMQ server, or one past its connection
// limit, not only "down".
TEST(ClientReconnectTest, ARequestToAServerThatCutsEveryHandshakeTimesOutNamingTheCuts) {
  const int port = FreePort();
  JobOptions job = TestJob().Workers(1).Table("dense", 10, 1, OptimizerKind::kAdd).Build();
  job.cluster.servers = {"127.0.0.1:" + std::to_string(port)};
  job.client.request_timeout_ms = 800;
  job.liveness.server_down_timeout_ms = 800;
  HandshakeCutter cutter(port);
  ASSERT_TRUE(cutter.listening());
  {
    // ps_ctl shutdown: it expects the server to close once it answers.
    auto control = ControlClient::Create(job);
    ASSERT_OK(control);
    Status stopped = (*control)->ShutdownServers();
    EXPECT_FALSE(stopped.ok());
    EXPECT_NE(stopped.message().find("during the handshake: it speaks CurveZMQ"),
              std::string::npos)
        << stopped.ToString();
  }
  {
    auto client = Client::Create(job, 0);
    ASSERT_OK(client);
    std::vector<float> out(10);
    Status pulled = (*client)->PullSync(0, std::vector<uint64_t>{1, 2}, out.data());
    EXPECT_FALSE(pulled.ok());
    EXPECT_NE(pulled.message().find("during the handshake: it speaks CurveZMQ"),
              std::string::npos)
        << pulled.ToString();
  }
  EXPECT_GE(cutter.cuts(), 2);
}

// A shard's answer that the job moved to shard map `map_epoch` of
// `servers` (the request was not applied).
MessageHeader MovedTo(const MessageHeader& req, int64_t map_epoch, const std::string& servers) {
  MessageHeader moved = MakeErrorHeader(req, 0, UnavailableError("moved"));
  moved.flags = kFlagMoved;
  moved.map_epoch = map_epoch;
  moved.text = servers;
  return moved;
}

// A shard's server that takes one message and no more (its queue holds
// one) until it goes away: a big push stops in the TCP buffers, what comes
// after it stays in the client's queue. Reset closes it with its unread
// bytes, and the connection is reset.
class StalledServer {
 public:
  explicit StalledServer(const std::string& endpoint) {
    context_ = Context::Create(1).value();
    SocketOptions stalled;
    stalled.recv_hwm = 1;
    socket_ = Socket::Create(context_.get(), SocketType::kRouter, stalled).value();
    EXPECT_OK(socket_->Bind(endpoint));
  }
  void Reset() { socket_.reset(); }

 private:
  std::unique_ptr<Context> context_;
  std::unique_ptr<Socket> socket_;
};

// The server that takes over (at the same address or a backup's): answers
// every request as a shard of shard map `map_epoch` does (PRIMARY: serving,
// at `epoch`; a worker's request of an older map: moved) and records what
// it takes, in order.
class RecordingServer {
 public:
  RecordingServer(const std::string& endpoint, int64_t epoch, int64_t map_epoch = 0)
      : fake_(
            [this, epoch, map_epoch, endpoint](const MessageHeader& req) {
              std::vector<Frame> r;
              const bool routed = req.op == Op::kPush || req.op == Op::kPull || req.op == Op::kClock;
              if (routed && req.map_epoch < map_epoch) {
                r.push_back(EncodeHeader(
                    MovedTo(req, map_epoch, endpoint.substr(std::string("tcp://").size()))));
                return r;
              }
              {
                std::lock_guard<std::mutex> lock(mu_);
                arrived_.push_back(req);
              }
              MessageHeader reply = ReplyTo(req, ReplyOp(req.op));
              reply.map_epoch = map_epoch;
              if (req.op == Op::kPrimary) {
                reply.flags = kFlagServing;
                reply.epoch = epoch;
              }
              r.push_back(EncodeHeader(reply));
              return r;
            },
            endpoint) {}

  // How many requests of `op` it took.
  size_t Count(Op op) {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<size_t>(std::count_if(arrived_.begin(), arrived_.end(),
                                             [op](const MessageHeader& h) { return h.op == op; }));
  }

  // Every part of the pushes (each a request id of its own, at least
  // `pushes` of them) came before the first CLOCK.
  void ExpectEveryPushBeforeTheClock(size_t pushes) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string order;
    std::set<uint64_t> before_clock, all;
    bool clocked = false;
    for (const MessageHeader& h : arrived_) {
      if (h.op != Op::kPush && h.op != Op::kClock && h.op != Op::kPrimary) continue;
      order += OpName(h.op) + (h.op == Op::kPush ? " " + std::to_string(h.request_id) : "") + ", ";
      if (h.op == Op::kClock) clocked = true;
      if (h.op != Op::kPush) continue;
      all.insert(h.request_id);
      if (!clocked) before_clock.insert(h.request_id);
    }
    EXPECT_TRUE(clocked) << order;
    EXPECT_GE(all.size(), pushes) << order;
    EXPECT_EQ(before_clock, all) << "a push reached the server only after the CLOCK: " << order;
  }

 private:
  std::mutex mu_;
  std::vector<MessageHeader> arrived_;
  FakeServer fake_;  // last: its thread stops before the rest goes
};

// A job of one server (at `port`) with a small table and a big one (32 MB:
// a push of it is many parts).
JobOptions SmallAndBigJob(int port) {
  JobOptions job = TestJob()
                       .Workers(1)
                       .Table("small", 10, 1, OptimizerKind::kAdd)
                       .Table("big", 8'000'000, 1, OptimizerKind::kAdd)
                       .RequestTimeoutMs(20000)
                       .Build();
  job.cluster.servers = {"127.0.0.1:" + std::to_string(port)};
  return job;
}

// A connection that drops while a big push is half sent and the CLOCK
// after it waits in the client's queue (a server that exits: a restart, the
// old server of a reshard at an address the next map keeps): the server
// that listens there next gets the push before the CLOCK, never the CLOCK
// first (a bsp read of the clock it finishes would miss the push).
TEST(ClientReconnectTest, AClockQueuedWhenTheConnectionDropsReachesTheNextServerAfterItsPush) {
  const int port = FreePort();
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  StalledServer old_server(endpoint);
  auto client = Client::Create(SmallAndBigJob(port), 0, {endpoint});
  ASSERT_OK(client);
  auto small = (*client)->PushDense(0, SharedFloats::Take(std::vector<float>(10, 1.0f)));
  ASSERT_OK(small);
  auto big = (*client)->PushDense(1, SharedFloats::Take(std::vector<float>(8'000'000, 1.0f)));
  ASSERT_OK(big);
  auto clock = (*client)->Clock();
  ASSERT_OK(clock);
  for (int i = 0; i < 10; ++i) {
    EXPECT_OK((*client)->Poll(20));
  }
  old_server.Reset();
  RecordingServer next(endpoint, 0);
  EXPECT_OK((*client)->Wait(*small));
  EXPECT_OK((*client)->Wait(*big));
  EXPECT_OK((*client)->Wait(*clock));
  next.ExpectEveryPushBeforeTheClock(2);
}

// The same when the primary that drops the connection has a backup that
// takes over: a CLOCK made while the client looks for the new primary
// waits for it, and reaches it after the pushes it follows (not before
// them, as the first request on the new primary's connection).
TEST(ClientReconnectTest, AClockMadeWhileLookingForThePrimaryReachesItAfterItsPushes) {
  // The backup's port is the primary's + replication.port_offset.
  int port = FreePort();
  int backup_port = FreePort();
  if (backup_port < port) std::swap(port, backup_port);
  ASSERT_LT(port, backup_port);
  JobOptions job = SmallAndBigJob(port);
  job.replication.factor = 2;
  job.replication.port_offset = static_cast<uint32_t>(backup_port - port);
  StalledServer old_primary("tcp://127.0.0.1:" + std::to_string(port));
  RecordingServer backup("tcp://127.0.0.1:" + std::to_string(backup_port), 1);
  auto client = Client::Create(job, 0);  // the replicas from the job
  ASSERT_OK(client);
  auto small = (*client)->PushDense(0, SharedFloats::Take(std::vector<float>(10, 1.0f)));
  ASSERT_OK(small);
  auto big = (*client)->PushDense(1, SharedFloats::Take(std::vector<float>(8'000'000, 1.0f)));
  ASSERT_OK(big);
  for (int i = 0; i < 10; ++i) {
    EXPECT_OK((*client)->Poll(20));
  }
  old_primary.Reset();
  // The CLOCK is made as soon as the client asks the backup whether it
  // serves, before its answer is read.
  for (int i = 0; i < 500 && (*client)->counters().probes == 0; ++i) {
    EXPECT_OK((*client)->Poll(10));
  }
  ASSERT_GT((*client)->counters().probes, 0u);
  auto clock = (*client)->Clock();
  ASSERT_OK(clock);
  EXPECT_OK((*client)->Wait(*small));
  EXPECT_OK((*client)->Wait(*big));
  EXPECT_OK((*client)->Wait(*clock));
  EXPECT_EQ((*client)->counters().fail_overs, 1u);
  EXPECT_GT((*client)->counters().held, 0u);  // the CLOCK waited
  backup.ExpectEveryPushBeforeTheClock(2);
}

// A reshard that keeps a server's address: the old server answers the
// push and the CLOCK moved, and drops what the next map sends until it
// exits. The client sends the next map nothing there but its question
// whether the server serves, and once the next map's server answers it
// gets the moved push before the moved CLOCK.
TEST(ClientReconnectTest, MovedRequestsReachTheNextMapsServerAtAKeptAddressInOrder) {
  const int port = FreePort();
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  std::atomic<int> next_map_writes_to_old{0};
  auto old_server = std::make_unique<FakeServer>(
      [&](const MessageHeader& req) {
        std::vector<Frame> r;
        if (req.map_epoch > 0) {
          if (req.op != Op::kPrimary) ++next_map_writes_to_old;
          return r;  // dropped, as a server that handed over does
        }
        r.push_back(EncodeHeader(MovedTo(req, 1, "127.0.0.1:" + std::to_string(port))));
        return r;
      },
      endpoint);
  auto client = Client::Create(SmallAndBigJob(port), 0, {endpoint});
  ASSERT_OK(client);
  auto push = (*client)->PushDense(0, SharedFloats::Take(std::vector<float>(10, 1.0f)));
  ASSERT_OK(push);
  auto clock = (*client)->Clock();
  ASSERT_OK(clock);
  for (int i = 0; i < 500 && (*client)->map_epoch() == 0; ++i) {
    EXPECT_OK((*client)->Poll(10));
  }
  ASSERT_EQ((*client)->map_epoch(), 1);
  for (int i = 0; i < 10; ++i) {
    EXPECT_OK((*client)->Poll(10));
  }
  old_server.reset();  // it exits
  RecordingServer next(endpoint, 0, /*map_epoch=*/1);
  EXPECT_OK((*client)->Wait(*push));
  EXPECT_OK((*client)->Wait(*clock));
  EXPECT_EQ(next_map_writes_to_old.load(), 0);
  EXPECT_GT((*client)->counters().held, 0u);
  next.ExpectEveryPushBeforeTheClock(1);
}

// A client of one named address (a control client may reach a backup,
// which serves no writes) whose connection drops takes whatever server of
// its map answers there next: its request goes there, not held for good.
TEST(ClientReconnectTest, AServerThatIsNotAPrimaryAtANamedAddressGetsTheRequestsAfterADrop) {
  const int port = FreePort();
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  auto silent = std::make_unique<FakeServer>(
      [](const MessageHeader&) { return std::vector<Frame>(); }, endpoint);
  auto client = Client::Create(SmallAndBigJob(port), 0, {endpoint});
  ASSERT_OK(client);
  auto push = (*client)->PushDense(0, SharedFloats::Take(std::vector<float>(10, 1.0f)));
  ASSERT_OK(push);
  for (int i = 0; i < 5; ++i) {
    EXPECT_OK((*client)->Poll(10));
  }
  silent.reset();
  // Answers PRIMARY as a backup does (not serving), the rest as applied.
  FakeServer backup(
      [](const MessageHeader& req) {
        std::vector<Frame> r;
        r.push_back(EncodeHeader(ReplyTo(req, ReplyOp(req.op))));
        return r;
      },
      endpoint);
  EXPECT_OK((*client)->Wait(*push));
}

TEST(ClientBadReplyTest, ShortValuesAreDataLossNamingTheServer) {
  FakeServer fake([](const MessageHeader& req) {
    std::vector<Frame> r;
    r.push_back(EncodeHeader(ReplyTo(req, Op::kPullOk)));
    r.push_back(Frame::CopyOf(std::string(12, '\0')));
    return r;
  });
  Status s = PullThrough(fake);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("to server 0 at " + fake.endpoint()), std::string::npos);
  EXPECT_NE(s.message().find("reply has 12 value bytes"), std::string::npos) << s.ToString();
}

TEST(ClientBadReplyTest, WrongReplyOpIsAnInternalError) {
  FakeServer fake([](const MessageHeader& req) {
    std::vector<Frame> r;
    r.push_back(EncodeHeader(ReplyTo(req, Op::kPushOk)));
    return r;
  });
  Status s = PullThrough(fake);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find("got a PUSH_OK reply"), std::string::npos) << s.ToString();
}

TEST(ClientBadReplyTest, UnreadableReplyLeavesTheRequestToItsDeadline) {
  FakeServer fake([](const MessageHeader&) {
    std::vector<Frame> r;
    r.push_back(Frame::CopyOf(std::string_view("\xff\xff\xff")));
    return r;
  });
  FakeClock clock;
  Status s = PullThrough(fake, 300, &clock);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
}

TEST(ClientBadReplyTest, ErrorReplyKeepsTheServersCodeAndText) {
  FakeServer fake([](const MessageHeader& req) {
    std::vector<Frame> r;
    r.push_back(EncodeHeader(MakeErrorHeader(req, 0, ResourceExhaustedError("too big"))));
    return r;
  });
  Status s = PullThrough(fake);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("was rejected: too big"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ps
