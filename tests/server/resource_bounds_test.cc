// A shard's resources stay bounded against a client that misbehaves, while
// a well-behaved worker in the same test keeps being served: unread pull
// replies (server.max_queued_reply_bytes), pulls parked for slower workers
// (server.max_waiting_pulls_per_worker, server.max_pull_wait_ms), CHECKPOINT
// requests (one generation at a time), and connections past the
// open-file limit (logged with the limit to raise).
//
// The misbehaving clients are plain DEALERs sending hand-built messages,
// as an attacker with a ZeroMQ library would. Every assertion is on counts
// and states; waits have deadlines but nothing is timed.
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/options.h"
#include "common/transport.h"
#include "common/watched_process.h"
#include "common/wire.h"
#include "server/shard_server.h"
#include "tests/util/fake_clock.h"
#include "tests/util/free_port.h"
#include "tests/util/raw_peer.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tests/util/test_env.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

// Rows of one store block of a dim-1 table (store/shard_store.cc).
constexpr uint64_t kBlockRows = 256 * 1024;
constexpr uint64_t kBlockBytes = kBlockRows * sizeof(float);

// One ShardServer (shard 0 of `job`) on a thread of the test.
class RunningShard {
 public:
  RunningShard(const JobOptions& job, Env* env = nullptr, CheckpointStageHook hook = nullptr) {
    auto server = ShardServer::Create(job, 0, "tcp://127.0.0.1:*", -1, env, std::move(hook));
    EXPECT_OK(server);
    if (!server.ok()) return;
    server_ = std::move(*server);
    thread_ = std::thread([this] { status_ = server_->Run(); });
  }
  ~RunningShard() {
    if (server_ == nullptr) return;
    server_->Stop();
    thread_.join();
    EXPECT_OK(status_);
  }
  bool ok() const { return server_ != nullptr; }
  ShardServer& server() { return *server_; }
  const std::string& endpoint() const { return server_->endpoint(); }
  // Returns once the shard ran two more housekeeping rounds (one of them
  // saw the clock as it is now).
  void AwaitHousekeeping() {
    const uint64_t from = server_->housekeeping_rounds();
    const auto deadline = Steady::now() + std::chrono::seconds(10);
    while (server_->housekeeping_rounds() < from + 2) {
      if (Steady::now() > deadline) {
        ADD_FAILURE() << "no housekeeping round in 10 s";
        return;
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
  }

 private:
  std::unique_ptr<ShardServer> server_;
  std::thread thread_;
  Status status_;
};

// A DEALER speaking for one worker id with hand-built requests.
class Peer {
 public:
  Peer(Context* ctx, const std::string& endpoint, uint32_t worker, int recv_hwm = 0)
      : worker_(worker) {
    SocketOptions options;
    options.recv_hwm = recv_hwm;
    auto socket = Socket::Create(ctx, SocketType::kDealer, options);
    EXPECT_OK(socket);
    socket_ = std::move(*socket);
    EXPECT_OK(socket_->Connect(endpoint));
  }

  MessageHeader Header(Op op) {
    MessageHeader h;
    h.op = op;
    h.request_id = ++request_id_;
    h.worker = worker_;
    return h;
  }
  // A dense pull of `count` rows of table 0 from `first` at `clock`.
  MessageHeader Pull(uint64_t first, uint64_t count, int64_t clock = 0, uint32_t max_wait_ms = 0) {
    MessageHeader h = Header(Op::kPull);
    h.first_row = first;
    h.count = count;
    h.dim = 1;
    h.clock = clock;
    h.flags = kFlagDenseRange;
    h.max_wait_ms = max_wait_ms;
    return h;
  }
  void Send(const MessageHeader& h, std::vector<float> values = {}) {
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    if (!values.empty()) frames.push_back(Frame::CopyOf(values.data(), values.size() * 4));
    EXPECT_OK(socket_->Send(frames));
  }
  // The next reply's header, or nullopt after `timeout`.
  std::optional<MessageHeader> Receive(milliseconds timeout = milliseconds(10000),
                                       std::vector<Frame>* values = nullptr) {
    std::vector<Frame> reply;
    std::vector<bool> readable;
    Socket* sockets[] = {socket_.get()};
    const auto deadline = Steady::now() + timeout;
    while (true) {
      auto got = socket_->TryRecv(&reply);
      EXPECT_OK(got);
      if (got.ok() && *got) break;
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Steady::now());
      if (left.count() <= 0) return std::nullopt;
      EXPECT_OK(PollReadable(sockets, static_cast<int>(std::min<int64_t>(left.count(), 100)),
                             &readable));
    }
    auto h = DecodeHeader({reply[0].data(), reply[0].size()});
    EXPECT_OK(h);
    if (!h.ok()) return std::nullopt;
    if (values != nullptr) {
      values->clear();
      for (size_t i = 1; i < reply.size(); ++i) values->push_back(std::move(reply[i]));
    }
    return *h;
  }
  // Sends and waits for the reply (a test failure when none comes).
  MessageHeader Exchange(const MessageHeader& h, std::vector<float> values = {}) {
    Send(h, std::move(values));
    std::optional<MessageHeader> reply = Receive();
    EXPECT_TRUE(reply.has_value()) << "no reply to " << OpName(h.op) << " within 10 s";
    return reply.value_or(MessageHeader{});
  }
  // The shard's STATS report as "key value" pairs.
  std::map<std::string, int64_t> Stats() { return StatsNumbers(Exchange(Header(Op::kStats)).text); }

 private:
  const uint32_t worker_;
  uint64_t request_id_ = 0;
  std::unique_ptr<Socket> socket_;
};

bool IsError(const MessageHeader& h, StatusCode code, const std::string& naming) {
  return h.op == Op::kError && h.code == code && h.text.find(naming) != std::string::npos;
}

// Waits (up to 30 s) until `done` holds for the shard's STATS.
template <typename Pred>
std::map<std::string, int64_t> AwaitStats(Peer& control, Pred done) {
  const auto deadline = Steady::now() + std::chrono::seconds(30);
  std::map<std::string, int64_t> stats = control.Stats();
  while (!done(stats) && Steady::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
    stats = control.Stats();
  }
  EXPECT_TRUE(done(stats)) << "the shard never reached the state awaited";
  return stats;
}

TEST(ResourceBoundsTest, UnreadPullRepliesPastTheByteBoundAreRefusedAndStayUnderIt) {
  JobOptions job = TestJob().Servers(1).Workers(2).Asp().Table("w", 4 * kBlockRows).Build();
  job.server.max_queued_reply_bytes = 8 * kBlockBytes;
  RunningShard shard(job);
  ASSERT_TRUE(shard.ok());
  auto ctx = Context::Create(1);
  ASSERT_OK(ctx);
  // Worker 1 never reads: ZeroMQ keeps one reply, the kernel a few MiB.
  Peer attacker(ctx->get(), shard.endpoint(), 1, /*recv_hwm=*/1);
  Peer good(ctx->get(), shard.endpoint(), 0);
  Peer control(ctx->get(), shard.endpoint(), kControlWorker);

  // Each unread pull holds block 0; the good worker's push right after it
  // makes the store copy the block, so each reply holds a block of its own
  // (the growth an attacker caused before the bound).
  constexpr int kPulls = 200;
  int good_served = 0;
  for (int i = 0; i < kPulls; ++i) {
    attacker.Send(attacker.Pull(0, kBlockRows));
    MessageHeader push = good.Header(Op::kPush);
    push.first_row = 0;
    push.count = 1;
    push.dim = 1;
    push.flags = kFlagDenseRange;
    if (good.Exchange(push, {0.5f}).op == Op::kPushOk) ++good_served;
    if (i % 20 == 0 && good.Exchange(good.Pull(kBlockRows, 16)).op == Op::kPullOk) ++good_served;
  }
  EXPECT_EQ(good_served, kPulls + kPulls / 20);
  const auto stats = AwaitStats(control, [&](const auto& s) {
    return s.at("pulls") - kPulls / 20 + s.at("pulls_refused_queued_bytes") >= kPulls;
  });
  EXPECT_GT(stats.at("pulls_refused_queued_bytes"), 0);
  // At most one reply past the bound, whatever the kernel took.
  EXPECT_LE(shard.server().queued_reply_bytes(), 9 * kBlockBytes);
  EXPECT_LE(stats.at("queued_reply_bytes"), static_cast<int64_t>(9 * kBlockBytes));
  EXPECT_EQ(good.Exchange(good.Pull(kBlockRows, 16)).op, Op::kPullOk);

  // Reading at last: every pull got its answer, a value or the error.
  int served = 0, refused = 0;
  for (int i = 0; i < kPulls; ++i) {
    std::optional<MessageHeader> h = attacker.Receive();
    ASSERT_TRUE(h.has_value()) << "reply " << i << " of " << kPulls << " never came";
    if (h->op == Op::kPullOk) {
      ++served;
    } else {
      EXPECT_TRUE(IsError(*h, StatusCode::kResourceExhausted, "server.max_queued_reply_bytes"))
          << h->text;
      ++refused;
    }
  }
  EXPECT_EQ(served + refused, kPulls);
  EXPECT_EQ(refused, stats.at("pulls_refused_queued_bytes"));
  AwaitStats(control, [](const auto& s) { return s.at("queued_reply_bytes") == 0; });
  // Read, the worker is served again.
  EXPECT_EQ(attacker.Exchange(attacker.Pull(0, 16)).op, Op::kPullOk);
}

TEST(ResourceBoundsTest, UnreadRepliesOfManyConnectionsShareATotalAndAReaderIsStillServed) {
  // 16 MiB per connection, 3 x 16 = 48 MiB for all.
  constexpr uint64_t kPerConnection = 16 * kBlockBytes;
  constexpr uint64_t kTotal = 3 * kPerConnection;
  JobOptions job = TestJob().Servers(1).Workers(2).Asp().Table("w", 4 * kBlockRows).Build();
  job.server.max_queued_reply_bytes = kPerConnection;
  RunningShard shard(job);
  ASSERT_TRUE(shard.ok());
  auto ctx = Context::Create(1);
  ASSERT_OK(ctx);
  // Eight connections speaking for worker 1 that never read, each asking
  // in turn for one block per round: they fill the total together, each
  // below its own bound. Each round waits until the shard answered the
  // one before, so that no connection runs ahead of the others (one whose
  // handshake finished first would otherwise have its whole queue read
  // before the others', and meet its own bound first).
  constexpr int kConnections = 8, kRounds = 40;
  std::vector<std::unique_ptr<Peer>> stolen;
  for (int c = 0; c < kConnections; ++c) {
    stolen.push_back(std::make_unique<Peer>(ctx->get(), shard.endpoint(), 1, /*recv_hwm=*/1));
  }
  Peer control(ctx->get(), shard.endpoint(), kControlWorker);
  std::map<std::string, int64_t> stats;
  for (int r = 0; r < kRounds; ++r) {
    for (auto& peer : stolen) peer->Send(peer->Pull(0, kBlockRows));
    stats = AwaitStats(control, [&](const auto& s) {
      return s.at("pulls") + s.at("pulls_refused_queued_bytes") >= kConnections * (r + 1);
    });
  }
  // Refused by their share of the total, not by their own bound. What all
  // hold stays under the documented bound: past the total only connections
  // below an equal share are served, so they rise at most by what the
  // others hold above it (twice the total), plus one reply each.
  EXPECT_GT(stats.at("pulls_refused_queued_bytes"), 0);
  EXPECT_LT(stats.at("max_connection_bytes"), static_cast<int64_t>(kPerConnection));
  EXPECT_LE(shard.server().queued_reply_bytes(), 2 * kTotal + kConnections * kBlockBytes);
  // Worker 1 itself, on a connection that reads, and worker 0 are served.
  Peer own(ctx->get(), shard.endpoint(), 1);
  Peer other(ctx->get(), shard.endpoint(), 0);
  for (int i = 0; i < 4; ++i) {
    const MessageHeader h = own.Exchange(own.Pull(0, kBlockRows));
    EXPECT_EQ(h.op, Op::kPullOk) << h.text;
    EXPECT_EQ(other.Exchange(other.Pull(kBlockRows, kBlockRows)).op, Op::kPullOk);
  }
  // Each stolen connection got an answer to each pull.
  for (auto& peer : stolen) {
    for (int r = 0; r < kRounds; ++r) {
      std::optional<MessageHeader> h = peer->Receive();
      ASSERT_TRUE(h.has_value()) << "reply " << r << " never came";
      EXPECT_TRUE(h->op == Op::kPullOk ||
                  IsError(*h, StatusCode::kResourceExhausted, "for all connections"))
          << h->text;
    }
  }
  AwaitStats(control, [](const auto& s) { return s.at("queued_reply_bytes") == 0; });
}

TEST(ResourceBoundsTest, ParkedPullsPastThePerConnectionBoundAreRefused) {
  JobOptions job = TestJob().Servers(1).Workers(2).Bsp().Table("w", 64).Build();
  job.client.max_in_flight = 4;
  job.server.max_waiting_pulls_per_worker = 8;
  job.liveness.heartbeat_ms = 0;
  RunningShard shard(job);
  ASSERT_TRUE(shard.ok());
  auto ctx = Context::Create(1);
  ASSERT_OK(ctx);
  Peer ahead(ctx->get(), shard.endpoint(), 1);
  Peer good(ctx->get(), shard.endpoint(), 0);
  Peer control(ctx->get(), shard.endpoint(), kControlWorker);

  // Worker 0 is heard at clock 0 (a resume that moves nothing).
  MessageHeader resume = good.Header(Op::kHeartbeat);
  resume.flags = kFlagResume;
  ASSERT_EQ(good.Exchange(resume).op, Op::kHeartbeatOk);
  // Worker 1 finishes clock 0 and pulls at clock 1: every pull waits for
  // worker 0, and those past the bound are refused at once.
  MessageHeader clock = ahead.Header(Op::kClock);
  clock.clock = 0;
  ASSERT_EQ(ahead.Exchange(clock).op, Op::kClockOk);
  constexpr int kPulls = 20;
  for (int i = 0; i < kPulls; ++i) ahead.Send(ahead.Pull(0, 8, /*clock=*/1, /*max_wait_ms=*/60000));
  for (int i = 0; i < kPulls - 8; ++i) {
    std::optional<MessageHeader> h = ahead.Receive();
    ASSERT_TRUE(h.has_value()) << "refusal " << i << " never came";
    EXPECT_TRUE(IsError(*h, StatusCode::kResourceExhausted, "server.max_waiting_pulls_per_worker"))
        << OpName(h->op) << " " << h->text;
  }
  // The bound is per connection: another connection of worker 1 (the
  // worker itself, when whoever else holds its key filled the first) may
  // still wait. A worker that finished clocks without pulling is ahead of
  // the job (here at clock 6, the job at 0): its pull at its own clock
  // waits too (PullCeiling), and no pull waits for a clock above it.
  Peer again(ctx->get(), shard.endpoint(), 1);
  again.Send(again.Pull(0, 8, /*clock=*/1, /*max_wait_ms=*/60000));
  for (int64_t c = 1; c <= 5; ++c) {
    clock = again.Header(Op::kClock);
    clock.clock = c;
    ASSERT_EQ(again.Exchange(clock).op, Op::kClockOk);
  }
  const MessageHeader beyond = again.Exchange(again.Pull(0, 8, 7, 60000));
  EXPECT_TRUE(IsError(beyond, StatusCode::kFailedPrecondition, "brought it to 6"))
      << OpName(beyond.op) << " " << beyond.text;
  again.Send(again.Pull(0, 8, /*clock=*/6, /*max_wait_ms=*/60000));
  auto stats = AwaitStats(control, [](const auto& s) { return s.at("waiting_pulls") == 10; });
  EXPECT_EQ(stats.at("pulls_refused_waiting"), kPulls - 8);
  // The other worker is served meanwhile; its CLOCK releases the 9 pulls
  // at clock 1, and its clock 5 the one at clock 6.
  EXPECT_EQ(good.Exchange(good.Pull(0, 8)).op, Op::kPullOk);
  clock = good.Header(Op::kClock);
  clock.clock = 0;
  ASSERT_EQ(good.Exchange(clock).op, Op::kClockOk);
  for (int i = 0; i < 8; ++i) {
    std::optional<MessageHeader> h = ahead.Receive();
    ASSERT_TRUE(h.has_value()) << "released pull " << i << " never came";
    EXPECT_EQ(h->op, Op::kPullOk) << h->text;
  }
  std::optional<MessageHeader> released = again.Receive();
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->op, Op::kPullOk) << released->text;
  EXPECT_EQ(released->clock, 1);
  for (int64_t c = 1; c <= 5; ++c) {
    clock = good.Header(Op::kClock);
    clock.clock = c;
    ASSERT_EQ(good.Exchange(clock).op, Op::kClockOk);
  }
  released = again.Receive();
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->op, Op::kPullOk) << released->text;
  EXPECT_EQ(released->clock, 6);
  EXPECT_EQ(control.Stats().at("waiting_pulls"), 0);
}

TEST(ResourceBoundsTest, PullWithoutAWaitExpiresAtTheServersMaximum) {
  JobOptions job = TestJob().Servers(1).Workers(2).Bsp().Table("w", 64).Build();
  job.client.request_timeout_ms = 1000;
  job.server.max_pull_wait_ms = 1000;
  job.liveness.heartbeat_ms = 0;
  FakeClock clock;
  TestEnv env(&clock);
  RunningShard shard(job, &env);
  ASSERT_TRUE(shard.ok());
  auto ctx = Context::Create(1);
  ASSERT_OK(ctx);
  Peer ahead(ctx->get(), shard.endpoint(), 1);
  Peer good(ctx->get(), shard.endpoint(), 0);
  Peer control(ctx->get(), shard.endpoint(), kControlWorker);

  MessageHeader finish = ahead.Header(Op::kClock);
  finish.clock = 0;
  ASSERT_EQ(ahead.Exchange(finish).op, Op::kClockOk);
  // One asks for no limit (0: the server's), one for far more than it.
  ahead.Send(ahead.Pull(0, 8, /*clock=*/1, /*max_wait_ms=*/0));
  ahead.Send(ahead.Pull(0, 8, /*clock=*/1, /*max_wait_ms=*/3600000));
  AwaitStats(control, [](const auto& s) { return s.at("waiting_pulls") == 2; });

  clock.Advance(milliseconds(999));
  shard.AwaitHousekeeping();
  EXPECT_EQ(control.Stats().at("waiting_pulls"), 2);
  EXPECT_FALSE(ahead.Receive(milliseconds(0)).has_value());
  EXPECT_EQ(good.Exchange(good.Pull(0, 8)).op, Op::kPullOk);

  clock.Advance(milliseconds(2));
  shard.AwaitHousekeeping();
  for (int i = 0; i < 2; ++i) {
    std::optional<MessageHeader> h = ahead.Receive();
    ASSERT_TRUE(h.has_value()) << "pull " << i << " never expired";
    EXPECT_TRUE(IsError(*h, StatusCode::kDeadlineExceeded, "slowest worker: worker 0")) << h->text;
  }
  EXPECT_EQ(control.Stats().at("waiting_pulls"), 0);
  EXPECT_EQ(good.Exchange(good.Pull(0, 8)).op, Op::kPullOk);
}

// Holds every checkpoint write at its first stage until released, and
// counts the writes and how many ran at once.
class HeldWrites {
 public:
  CheckpointStageHook Hook() {
    return [this](CheckpointStage stage, int64_t, const std::string&) {
      std::unique_lock<std::mutex> lock(mu_);
      if (stage == CheckpointStage::kCreated) {
        ++writes_;
        ++running_;
        most_running_ = std::max(most_running_, running_);
        changed_.notify_all();
        changed_.wait(lock, [this] { return released_; });
      } else if (stage == CheckpointStage::kPruning) {
        --running_;
      }
    };
  }
  // True once a write is held (within 10 s).
  bool AwaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [this] { return running_ > 0; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    changed_.notify_all();
  }
  int writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }
  int most_running() {
    std::lock_guard<std::mutex> lock(mu_);
    return most_running_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  bool released_ = false;
  int writes_ = 0, running_ = 0, most_running_ = 0;
};

TEST(ResourceBoundsTest, ManyCheckpointRequestsShareOneGenerationWhileServingGoesOn) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("resource_bounds_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  JobOptions job = TestJob().Servers(1).Workers(1).Bsp().Table("w", 1024).Build();
  job.checkpoint.dir = dir.string();
  job.checkpoint.sync = false;
  job.liveness.heartbeat_ms = 0;
  HeldWrites held;
  {
    RunningShard shard(job, nullptr, held.Hook());
    ASSERT_TRUE(shard.ok());
    auto ctx = Context::Create(1);
    ASSERT_OK(ctx);
    Peer control(ctx->get(), shard.endpoint(), kControlWorker);
    Peer status(ctx->get(), shard.endpoint(), kControlWorker);  // STATS only
    Peer good(ctx->get(), shard.endpoint(), 0);
    // Released on every way out, so the shard can stop.
    struct ReleaseOnExit {
      HeldWrites* held;
      ~ReleaseOnExit() { held->Release(); }
    } release{&held};

    constexpr int kRequests = 300;
    control.Send(control.Header(Op::kCheckpoint));
    ASSERT_TRUE(held.AwaitHeld()) << "the first CHECKPOINT started no write";
    for (int i = 1; i < kRequests; ++i) control.Send(control.Header(Op::kCheckpoint));
    // Every request is read while the write is held, and the worker is
    // served meanwhile.
    AwaitStats(status, [](const auto& s) { return s.at("requests_waiting") >= kRequests - 1; });
    EXPECT_EQ(good.Exchange(good.Pull(0, 64)).op, Op::kPullOk);
    EXPECT_EQ(held.writes(), 1);

    held.Release();
    int answered = 0;
    for (int i = 0; i < kRequests; ++i) {
      std::optional<MessageHeader> h = control.Receive();
      ASSERT_TRUE(h.has_value()) << "CHECKPOINT " << i << " of " << kRequests << " got no answer";
      EXPECT_EQ(h->op, Op::kCheckpointOk) << h->text;
      EXPECT_EQ(h->clock, 0);
      if (h->op == Op::kCheckpointOk) ++answered;
    }
    EXPECT_EQ(answered, kRequests);
    // The clocks never moved: one generation answered them all.
    EXPECT_EQ(held.writes(), 1);
    EXPECT_EQ(held.most_running(), 1);
    EXPECT_EQ(status.Stats().at("started"), 1);
  }
  std::filesystem::remove_all(dir);
}

TEST(ResourceBoundsTest, ConnectionsPastTheLimitAreClosedAndTheShardStaysFlatAndServing) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("resource_bounds_fd_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const int port = FreePort();
  const std::string job_path = (dir / "job.yaml").string();
  std::ofstream(job_path) << "cluster: { servers: [\"127.0.0.1:" << port << "\"], workers: 1 }\n"
                          << "tables:\n  - { name: w, rows: 64 }\n"
                          << "liveness: { heartbeat_ms: 0 }\n"
                          << "server: { exit_when_workers_leave: false }\n";
  // ulimit -n sets the soft and the hard limit: ps_server cannot raise it,
  // and keeps 256 - 128 connections.
  constexpr int kLimit = 256;
  constexpr int kMaxConnections = kLimit - 128;
  const std::string server = std::string(PS_BINARY_DIR) + "/bin/ps_server";
  auto process = WatchedProcess::Start(
      {.argv = {"/bin/sh", "-c",
                "ulimit -n " + std::to_string(kLimit) + " && exec " + server + " --config " +
                    job_path + " --shard 0"},
       .env = {}});
  ASSERT_OK(process);
  ASSERT_OK((*process)->WaitForLine("serving", std::chrono::seconds(30)));

  auto ctx = Context::Create(1);
  ASSERT_OK(ctx);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  Peer good(ctx->get(), endpoint, 0);
  EXPECT_EQ(good.Exchange(good.Pull(0, 8)).op, Op::kPullOk);
  const uint64_t rss_before = ResidentBytes((*process)->pid());

  // Plain TCP connections that send nothing, twice the limit: those past
  // it are closed at once, and the rest after the handshake timeout.
  const std::vector<int> fds = PlainTcpConnections(port, 2 * kLimit);
  EXPECT_OK((*process)->WaitForLine(
      "refused a connection: " + std::to_string(kMaxConnections) + " are open, the most it keeps "
      "(server.max_connections " + std::to_string(kMaxConnections) + ", from the open-file limit " +
          std::to_string(kLimit) + ")",
      std::chrono::seconds(30)));
  // A worker connected before is served all along; the shard's memory
  // stays flat (a shard out of descriptors used to grow by tens of MB a
  // second), and what it refused is counted.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(good.Exchange(good.Pull(0, 8)).op, Op::kPullOk);
    std::this_thread::sleep_for(milliseconds(100));
  }
  const uint64_t rss_during = ResidentBytes((*process)->pid());
  EXPECT_LT(rss_during, rss_before + (32u << 20)) << rss_before << " -> " << rss_during;
  auto stats = good.Stats();
  EXPECT_GE(stats.at("connections_refused"), 2 * kLimit - kMaxConnections);
  EXPECT_LE(stats.at("connections_open"), kMaxConnections);
  EXPECT_EQ(stats.at("max_connections"), kMaxConnections);

  // Closed, the connections free their places: a new client (ps_ctl's
  // kind) gets its answer.
  for (int fd : fds) close(fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool answered = false;
  while (!answered && std::chrono::steady_clock::now() < deadline) {
    Peer admin(ctx->get(), endpoint, kControlWorker);
    admin.Send(admin.Header(Op::kStats));
    std::optional<MessageHeader> h = admin.Receive(milliseconds(1000));
    answered = h.has_value() && h->op == Op::kStatsOk;
  }
  EXPECT_TRUE(answered) << "a new connection got no answer after the others closed";
  EXPECT_OK((*process)->Signal(SIGTERM));
  EXPECT_OK((*process)->WaitFor(milliseconds(10000)));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ps
