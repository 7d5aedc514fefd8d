// A shard under security.mode curve against clients with every kind of key:
// the job's own, none, an unknown one, another worker's, the admin's. Only
// an allowed key gets an answer at all, each key speaks only as its own
// identity, and whatever is refused leaves the shard's state as it was.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "client/client.h"
#include "client/control_client.h"
#include "common/security.h"
#include "common/transport.h"
#include "common/wire.h"
#include "server/shard_server.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

std::string MakeTempDir() {
  char tmpl[] = "/tmp/ps-curve-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

class CurveShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir();
    keys_ = root_ + "/keys";
    ASSERT_OK(WriteJobKeys(keys_, 2, false));
    job_ = TestJob().Workers(2).Bsp().Table("w", 8, 1, OptimizerKind::kAdd).Build();
    job_.liveness.heartbeat_ms = 0;  // nothing but the test's own requests
    job_.client.request_timeout_ms = 5000;
    job_.rendezvous.timeout_ms = 20000;
    job_.security.mode = SecurityMode::kCurve;
    job_.security.keys_dir = keys_;
    job_.server.max_request_bytes = 1 << 20;
    auto server = ShardServer::Create(job_, 0, "tcp://127.0.0.1:*");
    ASSERT_OK(server);
    server_ = std::move(*server);
    thread_ = std::thread([this] { run_status_ = server_->Run(); });
    ctx_ = std::move(Context::Create(1)).value();
  }
  void TearDown() override {
    sockets_.clear();
    server_->Stop();
    thread_.join();
    EXPECT_OK(run_status_);
    fs::remove_all(root_);
  }

  // A DEALER connected to the shard with `curve` (disabled: plain TCP).
  Socket* Dealer(const CurveOptions& curve) {
    SocketOptions options;
    options.curve = curve;
    auto socket = Socket::Create(ctx_.get(), SocketType::kDealer, options);
    EXPECT_OK(socket);
    EXPECT_OK((*socket)->Connect(server_->endpoint()));
    sockets_.push_back(std::move(*socket));
    return sockets_.back().get();
  }
  Socket* As(uint32_t worker) { return Dealer(ClientCurve(job_, worker).value()); }

  // Sends `header` (+ frames) and returns the reply's header, or nullopt
  // when none came within `wait`.
  static std::optional<MessageHeader> Exchange(Socket* socket, const MessageHeader& header,
                                               std::vector<Frame> extra = {},
                                               std::chrono::milliseconds wait =
                                                   std::chrono::seconds(5)) {
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(header));
    for (Frame& f : extra) frames.push_back(std::move(f));
    // A DEALER queues the message until its connection is up; one whose
    // handshake was refused has no connection to queue it on (Unavailable),
    // which reaches the server no more than a queued message does.
    if (!socket->Send(frames).ok()) return std::nullopt;
    std::vector<Frame> reply;
    std::vector<bool> readable;
    Socket* socks[] = {socket};
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      EXPECT_OK(PollReadable(socks, 20, &readable));
      auto got = socket->TryRecv(&reply);
      EXPECT_OK(got);
      if (*got) {
        auto h = DecodeHeader({reply[0].data(), reply[0].size()});
        EXPECT_OK(h);
        return *h;
      }
    }
    return std::nullopt;
  }
  static MessageHeader Header(Op op, uint32_t worker, int64_t clock = 0) {
    MessageHeader h;
    h.op = op;
    h.request_id = 9;
    h.worker = worker;
    h.clock = clock;
    return h;
  }
  // A push of +42 to every row of "w", as `worker`.
  static std::optional<MessageHeader> Push42(Socket* socket, uint32_t worker,
                                             std::chrono::milliseconds wait =
                                                 std::chrono::seconds(5)) {
    MessageHeader h = Header(Op::kPush, worker);
    h.table = 0;
    h.count = 8;
    h.dim = 1;
    h.flags = kFlagDenseRange;
    std::vector<float> v(8, 42.0f);
    std::vector<Frame> values;
    values.push_back(Frame::CopyOf(v.data(), v.size() * sizeof(float)));
    return Exchange(socket, h, std::move(values), wait);
  }
  // The STATS report, asked with the admin key.
  std::string Stats() {
    auto h = Exchange(As(kControlWorker), Header(Op::kStats, kControlWorker));
    EXPECT_TRUE(h.has_value());
    if (!h) return "";
    EXPECT_EQ(h->op, Op::kStatsOk) << h->text;
    return h->text;
  }
  // Every value of "w" read by worker 0 (its own key, dense pull).
  std::vector<float> Values() {
    Socket* s = As(0);
    MessageHeader h = Header(Op::kPull, 0);
    h.count = 8;
    h.dim = 1;
    h.flags = kFlagDenseRange;
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    EXPECT_OK(s->Send(frames));
    std::vector<Frame> reply;
    std::vector<bool> readable;
    Socket* socks[] = {s};
    for (int i = 0; i < 250; ++i) {
      EXPECT_OK(PollReadable(socks, 20, &readable));
      if (*s->TryRecv(&reply)) break;
    }
    EXPECT_EQ(reply.size(), 2u);
    if (reply.size() != 2) return {};
    const float* f = reinterpret_cast<const float*>(reply[1].data());
    return std::vector<float>(f, f + reply[1].size() / sizeof(float));
  }
  static void ExpectRefused(const std::optional<MessageHeader>& h, const std::string& words) {
    ASSERT_TRUE(h.has_value()) << "no reply";
    EXPECT_EQ(h->op, Op::kError);
    EXPECT_EQ(h->code, StatusCode::kPermissionDenied) << h->text;
    EXPECT_NE(h->text.find(words), std::string::npos) << h->text;
  }

  std::string root_, keys_;
  JobOptions job_;
  std::unique_ptr<ShardServer> server_;
  std::thread thread_;
  Status run_status_;
  std::unique_ptr<Context> ctx_;
  std::vector<std::unique_ptr<Socket>> sockets_;
};

TEST_F(CurveShardTest, AllowedWorkerKeyPushesAndPulls) {
  auto h = Push42(As(1), 1);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, Op::kPushOk) << h->text;
  EXPECT_EQ(Values(), std::vector<float>(8, 42.0f));
}

TEST_F(CurveShardTest, ARequestJustUnderTwiceTheLimitIsAnsweredAsWithoutCurve) {
  // Over max_request_bytes and under twice it: an ERROR reply naming the
  // limit (ZeroMQ cuts off only what is over twice, counted before CURVE's
  // own bytes are added).
  MessageHeader h = Header(Op::kPush, 0);
  h.table = 0;
  h.count = 8;
  h.dim = 1;
  h.flags = kFlagDenseRange;
  std::vector<Frame> values;
  const std::vector<char> big(2 * job_.server.max_request_bytes - 16, 0);
  values.push_back(Frame::CopyOf(big.data(), big.size()));
  auto reply = Exchange(As(0), h, std::move(values));
  ASSERT_TRUE(reply.has_value()) << "no reply";
  EXPECT_EQ(reply->code, StatusCode::kResourceExhausted) << reply->text;
  EXPECT_NE(reply->text.find("max_request_bytes"), std::string::npos) << reply->text;
}

TEST_F(CurveShardTest, ClientsWithoutAnAllowedKeyGetNothingAndChangeNothing) {
  const CurveOptions worker0 = ClientCurve(job_, 0).value();
  CurveOptions stranger = worker0;  // knows the server's key, has its own
  const CurveKeyPair pair = NewCurveKeyPair().value();
  stranger.public_key = pair.public_key;
  stranger.secret_key = pair.secret_key;
  CurveOptions wrong_secret = worker0;  // claims worker 0's public key
  wrong_secret.secret_key = pair.secret_key;
  for (Socket* s : {Dealer(stranger), Dealer(CurveOptions()), Dealer(wrong_secret)}) {
    const auto wait = std::chrono::milliseconds(700);
    EXPECT_FALSE(Push42(s, 0, wait).has_value());
    EXPECT_FALSE(Exchange(s, Header(Op::kClock, 0, 0), {}, wait).has_value());
    EXPECT_FALSE(Exchange(s, Header(Op::kStats, kControlWorker), {}, wait).has_value());
    EXPECT_FALSE(Exchange(s, Header(Op::kShutdown, kControlWorker), {}, wait).has_value());
  }
  EXPECT_FALSE(server_->stop_requested());
  EXPECT_EQ(Values(), std::vector<float>(8, 0.0f));
  const std::string stats = Stats();
  EXPECT_NE(stats.find("worker_clocks 0 0\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("security curve refused_handshakes"), std::string::npos) << stats;
  EXPECT_EQ(stats.find("refused_handshakes 0 "), std::string::npos) << stats;
  // The plain client never reached the ZAP handler: its failed handshake
  // is counted (and logged) apart.
  EXPECT_EQ(stats.find("failed_handshakes 0 "), std::string::npos) << stats;
}

TEST_F(CurveShardTest, WorkerKeyCannotActAsAnotherWorker) {
  Socket* w1 = As(1);
  ExpectRefused(Push42(w1, 0), "may speak only as worker 1");
  ExpectRefused(Exchange(w1, Header(Op::kClock, 0, 0)), "in the name of worker 0");
  MessageHeader resume = Header(Op::kHeartbeat, 0, 5);
  resume.flags = kFlagResume;
  ExpectRefused(Exchange(w1, resume), "in the name of worker 0");
  MessageHeader leave = Header(Op::kHeartbeat, 0, 0);
  leave.flags = kFlagLeaving;
  ExpectRefused(Exchange(w1, leave), "in the name of worker 0");
  ExpectRefused(Exchange(w1, Header(Op::kHello, 0)), "in the name of worker 0");
  EXPECT_EQ(Values(), std::vector<float>(8, 0.0f));
  const std::string stats = Stats();
  EXPECT_NE(stats.find("worker_clocks 0 0\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("left_workers\n"), std::string::npos) << stats;
  EXPECT_NE(stats.find("refused_requests 5"), std::string::npos) << stats;
  // Its own identity still works.
  auto own = Exchange(w1, Header(Op::kClock, 1, 0));
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->op, Op::kClockOk) << own->text;
}

TEST_F(CurveShardTest, OnlyTheAdminKeyStopsChecksOrInspectsAServer) {
  Socket* w0 = As(0);
  for (Op op : {Op::kShutdown, Op::kStats, Op::kCheckpoint}) {
    ExpectRefused(Exchange(w0, Header(op, 0)), "only the admin key");
    ExpectRefused(Exchange(w0, Header(op, kControlWorker)), "only the admin key");
  }
  EXPECT_FALSE(server_->stop_requested());
  Socket* admin = As(kControlWorker);
  ExpectRefused(Push42(admin, 0), "the admin key may send only");
  ExpectRefused(Exchange(admin, Header(Op::kClock, 1, 0)), "the admin key may send only");
  EXPECT_EQ(Values(), std::vector<float>(8, 0.0f));
  auto down = Exchange(admin, Header(Op::kShutdown, kControlWorker));
  ASSERT_TRUE(down.has_value());
  EXPECT_EQ(down->op, Op::kShutdownOk) << down->text;
}

TEST_F(CurveShardTest, WorkersAndControlClientRunAJobUnderCurve) {
  job_.liveness.heartbeat_ms = 50;  // heartbeats ride their own authenticated sockets
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t w = 0; w < 2; ++w) {
    auto c = Client::Create(job_, w, {server_->endpoint()});
    ASSERT_OK(c);
    ASSERT_OK((*c)->Join());
    clients.push_back(std::move(*c));
  }
  std::vector<float> out(8);
  for (int step = 0; step < 3; ++step) {
    for (auto& c : clients) {
      ASSERT_OK(c->Wait(*c->PushDense(0, SharedFloats::Take(std::vector<float>(8, 1.0f)))));
      ASSERT_OK(c->Wait(*c->Clock()));
    }
  }
  ASSERT_OK(clients[0]->Wait(*clients[0]->PullDense(0, out.data())));
  EXPECT_EQ(out, std::vector<float>(8, 6.0f));
  auto control = ControlClient::Create(job_, {server_->endpoint()});
  ASSERT_OK(control);
  auto stats = (*control)->Stats(0);
  ASSERT_OK(stats);
  EXPECT_NE(stats->find("worker_clocks 3 3\n"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("refused_requests 0"), std::string::npos) << *stats;
  for (auto& c : clients) EXPECT_OK(c->Leave());
}

TEST_F(CurveShardTest, ClientWithAKeyTheServerRefusesFailsAtOnceNamingIt) {
  // Another job's keys, with this job's server key: the handshake reaches
  // the shard, which refuses the key.
  const std::string other = root_ + "/other";
  ASSERT_OK(WriteJobKeys(other, 2, false));
  fs::copy_file(keys_ + "/server.public", other + "/server.public",
                fs::copy_options::overwrite_existing);
  JobOptions intruder = job_;
  intruder.security.keys_dir = other;
  auto c = Client::Create(intruder, 0, {server_->endpoint()});
  ASSERT_OK(c);
  const auto start = std::chrono::steady_clock::now();
  Status joined = (*c)->Join();
  EXPECT_EQ(joined.code(), StatusCode::kPermissionDenied) << joined.ToString();
  EXPECT_NE(joined.message().find("refused this process's key"), std::string::npos)
      << joined.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15))
      << "refused at the handshake, not after the rendezvous timeout";
  EXPECT_GE((*c)->counters().refusals, 1u);
  // A plain client against the curve server: told the mechanisms differ.
  JobOptions plain = job_;
  plain.security = SecurityOptions();
  auto p = Client::Create(plain, 0, {server_->endpoint()});
  ASSERT_OK(p);
  joined = (*p)->Join();
  EXPECT_EQ(joined.code(), StatusCode::kPermissionDenied) << joined.ToString();
  EXPECT_NE(joined.message().find("speaks CurveZMQ"), std::string::npos) << joined.message();
  EXPECT_EQ(Values(), std::vector<float>(8, 0.0f));
}

TEST_F(CurveShardTest, RotatedWorkerKeyIsLetInAfterTheServerReadsTheKeysAgain) {
  const CurveOptions old_key = ClientCurve(job_, 1).value();
  ASSERT_OK(RotateWorkerKey(keys_, 1));
  const CurveOptions new_key = ClientCurve(job_, 1).value();
  ASSERT_NE(new_key.public_key, old_key.public_key);
  const auto wait = std::chrono::milliseconds(700);
  EXPECT_FALSE(Exchange(Dealer(new_key), Header(Op::kClock, 1, 0), {}, wait).has_value())
      << "not let in before the server reads the keys again";
  auto reloads = [&] {
    server_->ReloadKeys();
    const uint64_t from = server_->housekeeping_rounds();
    while (server_->housekeeping_rounds() < from + 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  reloads();
  auto h = Exchange(Dealer(new_key), Header(Op::kClock, 1, 0));
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, Op::kClockOk) << h->text;
  // The previous key stays allowed until its file goes.
  h = Exchange(Dealer(old_key), Header(Op::kClock, 1, 1));
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, Op::kClockOk) << h->text;
  fs::remove(keys_ + "/worker-1.previous.public");
  reloads();
  EXPECT_FALSE(Exchange(Dealer(old_key), Header(Op::kClock, 1, 2), {}, wait).has_value());
  // A bad key folder keeps the keys the server has.
  fs::remove(keys_ + "/admin.public");
  reloads();
  h = Exchange(Dealer(new_key), Header(Op::kClock, 1, 2));
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, Op::kClockOk) << h->text;
}

TEST(CurveShardStartTest, ServerRefusesToStartWithASecretOthersCanRead) {
  const std::string root = MakeTempDir();
  ASSERT_OK(WriteJobKeys(root + "/keys", 1, false));
  ASSERT_EQ(::chmod((root + "/keys/server.secret").c_str(), 0644), 0);
  JobOptions job = TestJob().Table("w", 8).Build();
  job.security.mode = SecurityMode::kCurve;
  job.security.keys_dir = root + "/keys";
  auto server = ShardServer::Create(job, 0, "tcp://127.0.0.1:*");
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(server.status().message().find("chmod 600"), std::string::npos)
      << server.status().message();
  fs::remove_all(root);
}

TEST(CurveSocketTest, CurveServerSocketNeedsAZapHandler) {
  auto ctx = Context::Create(1).value();
  SocketOptions options;
  options.curve.server = true;
  options.curve.secret_key = NewCurveKeyPair().value().secret_key;
  auto socket = Socket::Create(ctx.get(), SocketType::kRouter, options);
  EXPECT_EQ(socket.status().code(), StatusCode::kFailedPrecondition);
  {
    auto zap = ZapHandler::Start(ctx.get(), {}, nullptr);
    ASSERT_OK(zap);
    EXPECT_EQ(ZapHandler::Start(ctx.get(), {}, nullptr).status().code(),
              StatusCode::kUnavailable);
    EXPECT_OK(Socket::Create(ctx.get(), SocketType::kRouter, options));
  }
  EXPECT_EQ(Socket::Create(ctx.get(), SocketType::kRouter, options).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps
