// ShardServer against raw, hand-built messages: every malformed request gets
// an ERROR reply that names the problem, and the shard's state is unchanged.
#include "server/shard_server.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>

#include "common/options.h"
#include "common/shard_stats.h"
#include "common/transport.h"
#include "common/wire.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

JobOptions TwoShardJob() {
  TableOptions dense = TestTable("dense", 100, 4, OptimizerKind::kAdd);
  dense.init.kind = InitKind::kUniform;
  dense.init.value = 1.0f;
  TableOptions sparse = TestTable("sparse", 1000, 2, OptimizerKind::kSgd);
  sparse.optimizer.lr = 0.5f;
  JobOptions job = TestJob().Servers(2).Workers(2).Table(dense).Table(sparse).Build();
  job.server.max_request_bytes = 64 * 1024;
  job.server.max_keys_per_request = 1000;
  return job;
}

// Shard 0 of TwoShardJob owns rows [0, 50) of "dense" and [0, 500) of "sparse".
class ShardServerTest : public ::testing::Test {
 protected:
  // Lets a derived fixture change the job before the shard is made.
  virtual void Adjust(JobOptions* /*job*/) {}
  void SetUp() override {
    job_ = TwoShardJob();
    Adjust(&job_);
    auto server = ShardServer::Create(job_, 0, "tcp://127.0.0.1:*");
    ASSERT_OK(server);
    server_ = std::move(*server);
    thread_ = std::thread([this] { run_status_ = server_->Run(); });
    auto ctx = Context::Create(1);
    ASSERT_OK(ctx);
    ctx_ = std::move(*ctx);
    auto sock = Socket::Create(ctx_.get(), SocketType::kDealer, SocketOptions{});
    ASSERT_OK(sock);
    sock_ = std::move(*sock);
    ASSERT_OK(sock_->Connect(server_->endpoint()));
  }
  void TearDown() override {
    sock_.reset();
    server_->Stop();
    thread_.join();
    EXPECT_OK(run_status_);
  }

  // The STATS reply's header, to a request with `flags`.
  StatusOr<MessageHeader> StatsReply(uint32_t flags) {
    MessageHeader h;
    h.op = Op::kStats;
    h.worker = kControlWorker;
    h.flags = flags;
    std::vector<Frame> req;
    req.push_back(EncodeHeader(h));
    auto reply = Exchange(std::move(req));
    if (reply.size() != 1) return InternalError(std::to_string(reply.size()) + " reply frames");
    return DecodeHeader({reply[0].data(), reply[0].size()});
  }
  // Sends `frames` and returns the reply (fails the test after 5 s).
  std::vector<Frame> Exchange(std::vector<Frame> frames) {
    EXPECT_OK(sock_->Send(frames));
    return Receive();
  }

  // The next reply (fails the test after 5 s).
  std::vector<Frame> Receive() {
    std::vector<Frame> reply;
    std::vector<bool> readable;
    Socket* socks[] = {sock_.get()};
    for (int i = 0; i < 50; ++i) {
      auto n = PollReadable(socks, 100, &readable);
      EXPECT_OK(n);
      auto got = sock_->TryRecv(&reply);
      EXPECT_OK(got);
      if (*got) return reply;
    }
    ADD_FAILURE() << "no reply within 5 s";
    return reply;
  }

  // Pushes this shard counted as repeats (acknowledged, not applied): read
  // with the shard stopped, which then serves again.
  uint64_t RepeatedPushes() {
    server_->Stop();
    thread_.join();
    const uint64_t repeats = server_->counters().repeated_pushes;
    thread_ = std::thread([this] { run_status_ = server_->Run(); });
    return repeats;
  }
  // Expects the shard's rows (Snapshot) to be `before` with `added` more
  // in each float of row 5 of table 0 (dim 4), and nothing else changed.
  void ExpectRow5Added(const std::vector<float>& before, float added) {
    const std::vector<float> after = Snapshot();
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      const float want = i / 4 == 5 ? before[i] + added : before[i];
      ASSERT_EQ(after[i], want) << "float " << i;
    }
  }

  static MessageHeader Header(Op op, uint32_t table, uint64_t count, uint32_t dim) {
    MessageHeader h;
    h.op = op;
    h.request_id = 77;
    h.worker = 1;
    h.table = table;
    h.count = count;
    h.dim = dim;
    return h;
  }
  static Frame Keys(std::vector<uint64_t> keys) {
    return Frame::CopyOf(keys.data(), keys.size() * sizeof(uint64_t));
  }
  static Frame Values(std::vector<float> v) { return Frame::CopyOf(v.data(), v.size() * 4); }

  // The whole of shard 0's rows of both tables, read through the protocol.
  std::vector<float> Snapshot() {
    std::vector<float> all;
    for (uint32_t t = 0; t < 2; ++t) {
      MessageHeader h = Header(Op::kPull, t, t == 0 ? 50 : 500, t == 0 ? 4 : 2);
      h.flags = kFlagDenseRange;
      std::vector<Frame> req;
      req.push_back(EncodeHeader(h));
      auto reply = Exchange(std::move(req));
      EXPECT_EQ(reply.size(), 2u);
      if (reply.size() != 2) return all;
      auto rh = DecodeHeader({reply[0].data(), reply[0].size()});
      EXPECT_OK(rh);
      EXPECT_EQ(rh->op, Op::kPullOk);
      const auto* f = reinterpret_cast<const float*>(reply[1].data());
      all.insert(all.end(), f, f + reply[1].size() / 4);
    }
    return all;
  }

  JobOptions job_;
  std::unique_ptr<ShardServer> server_;
  std::thread thread_;
  Status run_status_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Socket> sock_;
};

TEST_F(ShardServerTest, SparsePushAppliesSgdAndPullReadsRowsInRequestOrder) {
  std::vector<Frame> push;
  push.push_back(EncodeHeader(Header(Op::kPush, 1, 2, 2)));
  push.push_back(Keys({7, 3}));
  push.push_back(Values({1, 2, 3, 4}));
  auto reply = Exchange(std::move(push));
  ASSERT_EQ(reply.size(), 1u);
  auto h = DecodeHeader({reply[0].data(), reply[0].size()});
  ASSERT_OK(h);
  EXPECT_EQ(h->op, Op::kPushOk);
  EXPECT_EQ(h->request_id, 77u);

  std::vector<Frame> pull;
  pull.push_back(EncodeHeader(Header(Op::kPull, 1, 3, 2)));
  pull.push_back(Keys({3, 7, 4}));
  reply = Exchange(std::move(pull));
  ASSERT_EQ(reply.size(), 2u);
  ASSERT_EQ(reply[1].size(), 24u);
  float v[6];
  std::memcpy(v, reply[1].data(), sizeof(v));
  // zeros - 0.5 * pushed
  EXPECT_EQ(v[0], -1.5f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[2], -0.5f);
  EXPECT_EQ(v[3], -1.0f);
  EXPECT_EQ(v[4], 0.0f);
  EXPECT_EQ(v[5], 0.0f);
}

TEST_F(ShardServerTest, DensePushAddsToTheRange) {
  const std::vector<float> before = Snapshot();
  MessageHeader h = Header(Op::kPush, 0, 2, 4);
  h.flags = kFlagDenseRange;
  h.first_row = 10;
  std::vector<Frame> push;
  push.push_back(EncodeHeader(h));
  push.push_back(Values({1, 2, 3, 4, 5, 6, 7, 8}));
  auto reply = Exchange(std::move(push));
  ASSERT_EQ(reply.size(), 1u);
  const std::vector<float> after = Snapshot();
  for (size_t i = 0; i < before.size(); ++i) {
    const float add = (i >= 40 && i < 48) ? static_cast<float>(i - 39) : 0.0f;
    EXPECT_EQ(after[i], before[i] + add) << "index " << i;
  }
}

TEST_F(ShardServerTest, StatsReportsCounters) {
  auto rh = StatsReply(0);
  ASSERT_OK(rh);
  EXPECT_EQ(rh->op, Op::kStatsOk);
  EXPECT_NE(rh->text.find("table dense rows 100 dim 4 owned [0, 50)"), std::string::npos)
      << rh->text;
}

TEST_F(ShardServerTest, StatsAsJsonWhenAskedAndTheMetricsFromTheSameReport) {
  auto rh = StatsReply(kFlagStatsJson);
  ASSERT_OK(rh);
  EXPECT_EQ(rh->op, Op::kStatsOk);
  auto stats = ParseShardStatsJson(rh->text);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->endpoint, server_->endpoint());
  ASSERT_FALSE(stats->tables.empty());
  EXPECT_EQ(stats->tables[0].name, "dense");
  EXPECT_EQ(stats->tables[0].owned_end, 50u);
  EXPECT_NE(ShardStatsText(*stats).find("table dense rows 100 dim 4 owned [0, 50)"),
            std::string::npos);

  server_->Stop();
  thread_.join();
  thread_ = std::thread([] {});  // TearDown joins again
  const ShardStats now = server_->Stats();
  const std::string metrics = server_->MetricsText();
  // The families dashboards and alerts (deploy/) name, in their order.
  std::vector<std::string> families;
  for (size_t at = metrics.find("# TYPE "); at != std::string::npos;
       at = metrics.find("# TYPE ", at + 1)) {
    const size_t name = at + 7;
    families.push_back(metrics.substr(name, metrics.find(' ', name) - name));
  }
  const std::vector<std::string> expected = {
      "ps_server_info", "ps_server_uptime_seconds", "ps_server_requests_total",
      "ps_server_request_errors_total", "ps_server_request_duration_seconds",
      "ps_server_errors_total", "ps_server_pushes_total", "ps_server_pulls_total",
      "ps_server_clocks_total", "ps_server_received_bytes_total", "ps_server_sent_bytes_total",
      "ps_server_min_clock", "ps_server_waiting_pulls", "ps_server_pulls_waited_total",
      "ps_server_staleness_wait_seconds", "ps_server_worker_clock",
      "ps_server_worker_lag_clocks", "ps_server_worker_silent_seconds",
      "ps_server_dead_workers", "ps_server_departed_workers",
      "ps_server_worker_cache_hits_total", "ps_server_worker_cache_misses_total",
      "ps_server_copy_on_write_total", "ps_server_queued_reply_bytes",
      "ps_server_checkpoints_started_total", "ps_server_last_checkpoint_clock",
      "ps_server_checkpoint_writing", "ps_server_restored_clock", "ps_server_lost_clocks",
      "ps_server_repeated_pushes_total", "ps_server_resumes_total",
      "ps_server_refused_clocks_total", "ps_server_refused_results_total",
      "ps_server_refused_sum_clocks_total", "ps_server_sum_bytes",
      "ps_server_refusals_not_logged_total", "ps_server_pulls_refused_total",
      "ps_server_connections_open", "ps_server_connections_refused_total",
      "ps_server_replies_dropped_total", "ps_server_hot_row_pushes"};
  EXPECT_EQ(families, expected) << metrics;
  EXPECT_NE(metrics.find("ps_server_pulls_total{shard=\"0\"} " + std::to_string(now.pulls) +
                         "\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("ps_server_received_bytes_total{shard=\"0\"} " +
                         std::to_string(now.bytes_in) + "\n"),
            std::string::npos)
      << metrics;
}

TEST_F(ShardServerTest, ShutdownRequestStopsTheServer) {
  MessageHeader h;
  h.op = Op::kShutdown;
  h.worker = kControlWorker;
  std::vector<Frame> req;
  req.push_back(EncodeHeader(h));
  auto reply = Exchange(std::move(req));
  ASSERT_EQ(reply.size(), 1u);
  thread_.join();
  thread_ = std::thread([] {});  // TearDown joins again
  EXPECT_TRUE(server_->stop_requested());
}

// One malformed request: how to build it and what the ERROR must say.
struct BadCase {
  std::string name;
  std::function<std::vector<Frame>()> build;
  StatusCode code;
  std::string says;
};

MessageHeader H(Op op, uint32_t table, uint64_t count, uint32_t dim) {
  MessageHeader h;
  h.op = op;
  h.request_id = 5;
  h.worker = 0;
  h.table = table;
  h.count = count;
  h.dim = dim;
  return h;
}
Frame K(std::vector<uint64_t> k) { return Frame::CopyOf(k.data(), k.size() * 8); }
Frame V(size_t n, float x = 1.0f) {
  std::vector<float> v(n, x);
  return Frame::CopyOf(v.data(), n * 4);
}
// Test names show the case name, not the bytes of the struct.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

std::vector<Frame> Msg(MessageHeader h, std::vector<Frame> rest = {}) {
  std::vector<Frame> out;
  out.push_back(EncodeHeader(h));
  for (Frame& f : rest) out.push_back(std::move(f));
  return out;
}
template <typename... F>
std::vector<Frame> List(F... f) {
  std::vector<Frame> out;
  (out.push_back(std::move(f)), ...);
  return out;
}

std::vector<BadCase> BadCases() {
  return {
      {"GarbageHeader", [] { return List(Frame::CopyOf(std::string_view("\xff\xff\xff\xff"))); },
       StatusCode::kInvalidArgument, "not a valid ps.wire.Header"},
      {"UnknownOp", [] { return Msg(H(static_cast<Op>(42), 1, 1, 2), List(K({1}))); },
       StatusCode::kInvalidArgument, "is not a request op"},
      {"ReplyOpAsRequest", [] { return Msg(H(Op::kPullOk, 1, 1, 2), List(K({1}))); },
       StatusCode::kInvalidArgument, "is not a request op"},
      {"UnknownWorker",
       [] {
         MessageHeader h = H(Op::kPull, 1, 1, 2);
         h.worker = 9;
         return Msg(h, List(K({1})));
       },
       StatusCode::kPermissionDenied, "unknown worker 9"},
      {"ControlClientMayNotPush",
       [] {
         MessageHeader h = H(Op::kPush, 1, 1, 2);
         h.worker = kControlWorker;
         return Msg(h, List(K({1}), V(2)));
       },
       StatusCode::kPermissionDenied, "unknown worker"},
      {"UnknownTable", [] { return Msg(H(Op::kPull, 7, 1, 2), List(K({1}))); },
       StatusCode::kNotFound, "unknown table id 7"},
      {"DimMismatch", [] { return Msg(H(Op::kPush, 1, 1, 3), List(K({1}), V(3))); },
       StatusCode::kInvalidArgument, "has dim 2, header says 3"},
      {"ZeroCount", [] { return Msg(H(Op::kPull, 1, 0, 2), List(K({}))); },
       StatusCode::kInvalidArgument, "key count is 0"},
      {"TooManyKeys", [] { return Msg(H(Op::kPull, 1, 1001, 2), List(K(std::vector<uint64_t>(1001, 1)))); },
       StatusCode::kResourceExhausted, "max_keys_per_request"},
      {"TooManyBytes", [] { return Msg(H(Op::kPush, 1, 500, 2), List(K(std::vector<uint64_t>(500, 1)), V(20000))); },
       StatusCode::kResourceExhausted, "max_request_bytes"},
      {"MissingValuesFrame", [] { return Msg(H(Op::kPush, 1, 1, 2), List(K({1}))); },
       StatusCode::kInvalidArgument, "expected 3 frames"},
      {"ExtraFrame", [] { return Msg(H(Op::kPull, 1, 1, 2), List(K({1}), V(2))); },
       StatusCode::kInvalidArgument, "expected 2 frames"},
      {"KeysFrameWrongSize", [] { return Msg(H(Op::kPull, 1, 2, 2), List(K({1}))); },
       StatusCode::kInvalidArgument, "keys frame has 8 bytes, expected count*8 = 16"},
      {"ValuesFrameWrongSize", [] { return Msg(H(Op::kPush, 1, 2, 2), List(K({1, 2}), V(3))); },
       StatusCode::kInvalidArgument, "values frame has 12 bytes, expected count*dim*4 (fp32) = 16"},
      {"KeyOutsideShard", [] { return Msg(H(Op::kPush, 1, 2, 2), List(K({3, 500}), V(4))); },
       StatusCode::kOutOfRange, "key 500 (index 1) of table 'sparse' is not inside this shard's rows [0, 500)"},
      {"KeyBeyondTable", [] { return Msg(H(Op::kPull, 1, 1, 2), List(K({~0ull}))); },
       StatusCode::kOutOfRange, "is not inside this shard's rows"},
      {"DenseRangeOutsideShard",
       [] {
         MessageHeader h = H(Op::kPush, 0, 2, 4);
         h.flags = kFlagDenseRange;
         h.first_row = 49;
         return Msg(h, List(V(8)));
       },
       StatusCode::kOutOfRange, "rows [49, 51) of table 'dense'"},
      {"DenseRangeOverflow",
       [] {
         MessageHeader h = H(Op::kPull, 0, 2, 4);
         h.flags = kFlagDenseRange;
         h.first_row = ~0ull - 1;
         return Msg(h);
       },
       StatusCode::kOutOfRange, "are not inside this shard's rows"},
      {"UnknownFlags",
       [] {
         MessageHeader h = H(Op::kPull, 1, 1, 2);
         h.flags = 6;
         return Msg(h, List(K({1})));
       },
       StatusCode::kInvalidArgument, "unknown header flags 6"},
      {"NanValues",
       [] { return Msg(H(Op::kPush, 1, 1, 2), List(K({1}), V(2, std::numeric_limits<float>::quiet_NaN()))); },
       StatusCode::kInvalidArgument, "contain NaN or Inf"},
      {"InfValues",
       [] { return Msg(H(Op::kPush, 1, 1, 2), List(K({1}), V(2, -std::numeric_limits<float>::infinity()))); },
       StatusCode::kInvalidArgument, "contain NaN or Inf"},
      {"NanFirstOfManyValues",
       [] {
         std::vector<uint64_t> keys(514);
         for (size_t i = 0; i < keys.size(); ++i) keys[i] = 499 - i % 500;
         std::vector<float> v(1028, 1.0f);
         v[0] = std::numeric_limits<float>::quiet_NaN();
         return Msg(H(Op::kPush, 1, 514, 2), List(K(keys), Frame::CopyOf(v.data(), v.size() * 4)));
       },
       StatusCode::kInvalidArgument, "contain NaN or Inf"},
      {"InfLastOfManyValues",
       [] {
         std::vector<uint64_t> keys(514);
         for (size_t i = 0; i < keys.size(); ++i) keys[i] = i % 500;
         std::vector<float> v(1028, -2.5f);
         v[1027] = std::numeric_limits<float>::infinity();
         return Msg(H(Op::kPush, 1, 514, 2), List(K(keys), Frame::CopyOf(v.data(), v.size() * 4)));
       },
       StatusCode::kInvalidArgument, "contain NaN or Inf"},
      {"CheckpointWithoutACheckpointDir", [] { return Msg(H(Op::kCheckpoint, 0, 0, 0)); },
       StatusCode::kFailedPrecondition, "no checkpoint.dir"},
      {"HeartbeatWithUnknownFlags",
       [] {
         MessageHeader h = H(Op::kHeartbeat, 0, 0, 0);
         h.flags = kFlagDenseRange;
         return Msg(h);
       },
       StatusCode::kInvalidArgument, "unknown header flags 1"},
      {"ControlClientMayNotHeartbeat",
       [] {
         MessageHeader h = H(Op::kHeartbeat, 0, 0, 0);
         h.worker = kControlWorker;
         return Msg(h);
       },
       StatusCode::kPermissionDenied, "unknown worker"},
      {"NegativeClock",
       [] {
         MessageHeader h = H(Op::kClock, 0, 0, 0);
         h.clock = -1;
         return Msg(h);
       },
       StatusCode::kInvalidArgument, "clock -1 is outside"},
      {"PullWithHugeClock",
       [] {
         MessageHeader h = H(Op::kPull, 1, 1, 2);
         h.clock = (int64_t{1} << 62) + 1;
         return Msg(h, List(K({1})));
       },
       StatusCode::kInvalidArgument, "is outside [0, 2^62]"},
      {"ClockWithExtraFrame", [] { return Msg(H(Op::kClock, 0, 0, 0), List(K({1}))); },
       StatusCode::kInvalidArgument, "expected 1 frame"},
      {"ControlClientMayNotClock",
       [] {
         MessageHeader h = H(Op::kClock, 0, 0, 0);
         h.worker = kControlWorker;
         return Msg(h);
       },
       StatusCode::kPermissionDenied, "unknown worker"},
      {"HelloWithExtraFrame", [] { return Msg(H(Op::kHello, 0, 0, 0), List(K({1}))); },
       StatusCode::kInvalidArgument, "expected 1 frame"},
      {"HelloWithFlags",
       [] {
         MessageHeader h = H(Op::kHello, 0, 0, 0);
         h.flags = kFlagLeaving;
         return Msg(h);
       },
       StatusCode::kInvalidArgument, "unknown header flags 2"},
      {"ControlClientMayNotHello",
       [] {
         MessageHeader h = H(Op::kHello, 0, 0, 0);
         h.worker = kControlWorker;
         return Msg(h);
       },
       StatusCode::kPermissionDenied, "unknown worker"},
      {"HelloWithoutAJob", [] { return Msg(H(Op::kHello, 0, 0, 0)); },
       StatusCode::kFailedPrecondition, "job mismatch: shards:"},
      {"HelloWithGarbage",
       [] {
         MessageHeader h = H(Op::kHello, 0, 0, 0);
         h.text = "garbage";
         return Msg(h);
       },
       StatusCode::kInvalidArgument, "sent a job description that is not one"},
      {"HelloOfAnotherJob",
       [] {
         MessageHeader h = H(Op::kHello, 0, 0, 0);
         h.text = "shards=2\nworkers=9\n";
         return Msg(h);
       },
       StatusCode::kFailedPrecondition, "job mismatch: workers:"},
      {"StatsWithExtraFrame",
       [] {
         MessageHeader h;
         h.op = Op::kStats;
         h.worker = kControlWorker;
         return Msg(h, List(K({1})));
       },
       StatusCode::kInvalidArgument, "expected 1 frame"},
  };
}

class MalformedRequestTest : public ShardServerTest,
                             public ::testing::WithParamInterface<BadCase> {};

TEST_P(MalformedRequestTest, GetsErrorReplyAndLeavesStateUnchanged) {
  const BadCase& c = GetParam();
  const std::vector<float> before = Snapshot();
  auto reply = Exchange(c.build());
  ASSERT_EQ(reply.size(), 1u);
  auto h = DecodeHeader({reply[0].data(), reply[0].size()});
  ASSERT_OK(h);
  EXPECT_EQ(h->op, Op::kError);
  EXPECT_EQ(h->code, c.code) << h->text;
  EXPECT_NE(h->text.find(c.says), std::string::npos) << h->text;
  EXPECT_EQ(h->shard, 0u);
  // The server keeps serving and nothing changed.
  EXPECT_EQ(Snapshot(), before);
}

INSTANTIATE_TEST_SUITE_P(AllCases, MalformedRequestTest, ::testing::ValuesIn(BadCases()),
                         [](const ::testing::TestParamInfo<BadCase>& param_info) { return param_info.param.name; });

TEST_F(ShardServerTest, FrameFarOverTheLimitIsCutOffAndServingGoesOn) {
  const std::vector<float> before = Snapshot();
  // 160 KB frame: more than twice max_request_bytes, so ZeroMQ drops the
  // connection before buffering it; no reply comes.
  std::vector<Frame> huge = Msg(H(Op::kPush, 1, 1, 2), List(K({1}), V(40000)));
  ASSERT_OK(sock_->Send(huge));
  std::vector<bool> readable;
  Socket* socks[] = {sock_.get()};
  auto n = PollReadable(socks, 300, &readable);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 0u);
  // The socket reconnects by itself and the state is intact.
  EXPECT_EQ(Snapshot(), before);
}

TEST(ShardServerCreateTest, AddressInUseIsAClearError) {
  JobOptions job = TwoShardJob();
  auto first = ShardServer::Create(job, 0, "tcp://127.0.0.1:*");
  ASSERT_OK(first);
  auto second = ShardServer::Create(job, 0, (*first)->endpoint());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("another ps_server"), std::string::npos)
      << second.status().ToString();
}

TEST(ShardServerCreateTest, UnknownShardIsRejected) {
  auto s = ShardServer::Create(TwoShardJob(), 2, "tcp://127.0.0.1:*");
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

// A push sent again (same worker, session and request id: a client that
// lost its connection) is acknowledged but applied once; without a session
// (0) every push is applied.
TEST_F(ShardServerTest, RepeatedPushOfASessionIsAcknowledgedButAppliedOnce) {
  auto push = [&](uint64_t session, uint64_t request_id) {
    MessageHeader h = Header(Op::kPush, 0, 1, 4);
    h.session = session;
    h.request_id = request_id;
    std::vector<Frame> req;
    req.push_back(EncodeHeader(h));
    req.push_back(Keys({5}));
    req.push_back(Values({1, 1, 1, 1}));
    auto reply = Exchange(std::move(req));
    EXPECT_EQ(reply.size(), 1u);
    auto rh = DecodeHeader({reply[0].data(), reply[0].size()});
    EXPECT_OK(rh);
    EXPECT_EQ(rh->op, Op::kPushOk);
    EXPECT_EQ(rh->request_id, request_id);
  };
  const std::vector<float> before = Snapshot();
  push(42, 1);
  push(42, 1);  // the same push again
  push(42, 2);  // the next one of the session
  push(43, 1);  // another session's request 1
  push(0, 9);   // no session: never a repeat
  push(0, 9);
  // Five of the six pushes of 1 to row 5 applied ("add"); nothing else changed.
  ExpectRow5Added(before, 5.0f);
  EXPECT_EQ(RepeatedPushes(), 1u);
}

// A shard with checkpoints, which can hand its rows over (ps_ctl reshard).
class ReshardShardServerTest : public ShardServerTest {
 protected:
  void Adjust(JobOptions* job) override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ps_reshard_shard_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    job->checkpoint.dir = dir_.string();
    job->checkpoint.every_clocks = 1000;
  }
  void TearDown() override {
    ShardServerTest::TearDown();
    std::filesystem::remove_all(dir_);
  }
  // The reply header to `h` with `frames` after it.
  MessageHeader Ask(const MessageHeader& h, std::vector<Frame> frames = {}) {
    std::vector<Frame> req;
    req.push_back(EncodeHeader(h));
    for (Frame& f : frames) req.push_back(std::move(f));
    auto reply = Exchange(std::move(req));
    EXPECT_GE(reply.size(), 1u);
    if (reply.empty()) return MessageHeader();
    auto decoded = DecodeHeader({reply[0].data(), reply[0].size()});
    EXPECT_OK(decoded);
    return decoded.ok() ? *decoded : MessageHeader();
  }
  // Both workers finish clock `clock`.
  void ClockBoth(int64_t clock) {
    for (uint32_t worker = 0; worker < 2; ++worker) {
      MessageHeader h = Header(Op::kClock, 0, 0, 0);
      h.worker = worker;
      h.clock = clock;
      EXPECT_EQ(Ask(h).op, Op::kClockOk);
    }
  }
  // Asks for a generation and waits until generation `gen`'s recent
  // pushes are written.
  void WriteGeneration(int64_t gen) {
    MessageHeader checkpoint = Header(Op::kCheckpoint, 0, 0, 0);
    checkpoint.worker = kControlWorker;
    EXPECT_EQ(Ask(checkpoint).op, Op::kCheckpointOk);  // being written
    const auto written = dir_ / "shard-0" / ("gen-" + std::to_string(gen)) / "recent-pushes";
    for (int i = 0; i < 500 && !std::filesystem::exists(written); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(std::filesystem::exists(written));
  }
  // The shard dies and comes back from its newest generation.
  void Restart() {
    server_->Stop();
    thread_.join();
    ASSERT_OK(run_status_);
    auto restored = ShardServer::Create(job_, 0, "tcp://127.0.0.1:*");
    ASSERT_OK(restored);
    server_ = std::move(*restored);
    thread_ = std::thread([this] { run_status_ = server_->Run(); });
    sock_.reset();
    auto sock = Socket::Create(ctx_.get(), SocketType::kDealer, SocketOptions{});
    ASSERT_OK(sock);
    sock_ = std::move(*sock);
    ASSERT_OK(sock_->Connect(server_->endpoint()));
  }
  // A follower of shard 0 (a server of the next map's copy of it) run on a
  // thread of its own until its shard's kEnd, or Join.
  struct Follower {
    std::unique_ptr<BackupServer> server;
    std::atomic<bool> ended{false};
    Status ran;
    std::thread thread;
    // Stops it unless it ended, and waits for its thread.
    void Join() {
      if (!thread.joinable()) return;
      if (!ended) server->Stop();
      thread.join();
    }
    ~Follower() { Join(); }
  };
  void StartFollower(Follower* f) {
    auto made = BackupServer::CreateFollower(job_, 0, "tcp://127.0.0.1:*", "the follower");
    ASSERT_OK(made);
    f->server = std::move(*made);
    f->thread = std::thread([f] {
      f->ran = f->server->Run();
      f->ended = true;
    });
  }
  // RESHARD kReshardFollow of map `map_epoch` to `endpoint`.
  static MessageHeader FollowRequest(int64_t map_epoch, const std::string& endpoint) {
    MessageHeader h = Header(Op::kReshard, 0, 0, 0);
    h.worker = kControlWorker;
    h.flags = kReshardFollow;
    h.map_epoch = map_epoch;
    h.text = endpoint;
    return h;
  }
  // Prepares and commits a handover at clock 1 to three servers of map 1
  // that leave this one out (so it lingers and answers).
  void PrepareAndCommit() {
  MessageHeader reshard = Header(Op::kReshard, 0, 0, 0);
  reshard.worker = kControlWorker;
  reshard.clock = 1;
  reshard.map_epoch = 1;
  reshard.text = "127.0.0.1:7,127.0.0.1:8,127.0.0.1:9";
  reshard.flags = kReshardPrepare;
  EXPECT_EQ(Ask(reshard).op, Op::kReshardOk);
  reshard.flags = kReshardCommit;
  EXPECT_EQ(Ask(reshard).op, Op::kReshardOk);
  }
  MessageHeader Push(uint64_t session, uint64_t request_id, int64_t clock) {
    MessageHeader h = Header(Op::kPush, 0, 1, 4);
    h.session = session;
    h.request_id = request_id;
    h.clock = clock;
    std::vector<Frame> body;
    body.push_back(Keys({5}));
    body.push_back(Values({1, 1, 1, 1}));
    return Ask(h, std::move(body));
  }
  std::filesystem::path dir_;
};

// A push applied before the handover whose acknowledgement was lost comes
// again under the old map: the shard acknowledges it (the handover
// generation holds it) instead of moving it, where it would be applied a
// second time; a push it never applied is moved.
TEST_F(ReshardShardServerTest, APushAppliedBeforeTheHandoverIsAcknowledgedNotMoved) {
  EXPECT_EQ(Push(42, 1, 0).op, Op::kPushOk);
  PrepareAndCommit();
  for (uint32_t worker = 0; worker < 2; ++worker) {
    MessageHeader clock = Header(Op::kClock, 0, 0, 0);
    clock.worker = worker;
    clock.clock = 0;
    EXPECT_EQ(Ask(clock).op, Op::kClockOk);
  }
  // The minimum clock is 1: the shard hands over before it reads the next
  // request.
  const MessageHeader again = Push(42, 1, 0);
  EXPECT_EQ(again.op, Op::kPushOk);
  EXPECT_EQ(again.request_id, 1u);
  const MessageHeader fresh = Push(42, 2, 1);
  EXPECT_EQ(fresh.op, Op::kError);
  EXPECT_EQ(fresh.flags, kFlagMoved);
  EXPECT_EQ(fresh.map_epoch, 1);
  const MessageHeader other = Push(43, 1, 0);  // another session's request 1
  EXPECT_EQ(other.op, Op::kError);
  EXPECT_EQ(other.flags, kFlagMoved);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "shard-0" / "gen-1"));
  EXPECT_EQ(RepeatedPushes(), 1u);
}

// A server of the next map follows the shard (RESHARD kReshardFollow): it
// takes the copy and every change after it, and at the handover holds
// exactly what the shard held, the handover generation written after. A
// follow of a map that is not the next one, or to an endpoint that is not
// tcp://, is refused by name.
TEST_F(ReshardShardServerTest, AServerOfTheNextMapFollowsTheRowsAndEveryChangeUntilTheHandover) {
  const std::vector<float> before = Snapshot();
  EXPECT_EQ(Push(42, 1, 0).op, Op::kPushOk);  // in the copy
  MessageHeader refused = Ask(FollowRequest(2, "tcp://127.0.0.1:9"));
  EXPECT_EQ(refused.op, Op::kError);
  EXPECT_NE(refused.text.find("only a server of the next map (1) follows it"), std::string::npos)
      << refused.text;
  refused = Ask(FollowRequest(1, "127.0.0.1:9"));
  EXPECT_EQ(refused.op, Op::kError);
  EXPECT_NE(refused.text.find("is not tcp://host:port"), std::string::npos) << refused.text;

  Follower follower;
  ASSERT_NO_FATAL_FAILURE(StartFollower(&follower));
  EXPECT_EQ(Ask(FollowRequest(1, follower.server->endpoint())).op, Op::kReshardOk);
  EXPECT_EQ(Push(42, 2, 0).op, Op::kPushOk);  // a change after the copy
  PrepareAndCommit();
  ClockBoth(0);  // the minimum clock reaches 1: the handover
  for (int i = 0; i < 1000 && !follower.ended; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  follower.Join();
  ASSERT_OK(follower.ran);
  const BackupServer& copy = *follower.server;
  EXPECT_TRUE(copy.handed_over());
  EXPECT_EQ(copy.handed_over_to(), 1);
  EXPECT_EQ(copy.handed_over_clock(), 1);
  EXPECT_FALSE(copy.copying());
  EXPECT_EQ(copy.refused(), 0u);
  std::vector<float> held = copy.store().CopyValues(0);
  const std::vector<float> second = copy.store().CopyValues(1);
  held.insert(held.end(), second.begin(), second.end());
  ASSERT_EQ(held.size(), before.size());
  for (size_t i = 0; i < held.size(); ++i) {
    ASSERT_EQ(held[i], i / 4 == 5 ? before[i] + 2.0f : before[i]) << "float " << i;
  }
  EXPECT_TRUE(copy.recent_pushes().Contains(1, 42, 2));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "shard-0" / "gen-1"));
}

// ps_ctl reshard gave up (a follow with no endpoint): the shard sends its
// followers nothing more, and its handover goes through the generation,
// written before the moved answers, as without followers.
TEST_F(ReshardShardServerTest, AFollowWithNoEndpointDropsTheFollowers) {
  Follower follower;
  ASSERT_NO_FATAL_FAILURE(StartFollower(&follower));
  EXPECT_EQ(Ask(FollowRequest(1, follower.server->endpoint())).op, Op::kReshardOk);
  EXPECT_EQ(Ask(FollowRequest(1, "")).op, Op::kReshardOk);
  PrepareAndCommit();
  ClockBoth(0);  // the handover, after the last CLOCK's reply
  const auto written = dir_ / "shard-0" / "gen-1";
  for (int i = 0; i < 500 && !std::filesystem::exists(written); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(std::filesystem::exists(written));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(follower.ended) << "the dropped follower was told of the handover";
  follower.Join();
  ASSERT_OK(follower.ran);
  EXPECT_FALSE(follower.server->handed_over());
}

// A shard restored from a generation acknowledges a push it applied before
// the generation and that comes again (its acknowledgement lost with the
// shard that died), instead of applying it twice: the generation carries
// the recent pushes.
TEST_F(ReshardShardServerTest, APushInTheRestoredGenerationSentAgainIsAcknowledgedNotAppliedTwice) {
  const std::vector<float> before = Snapshot();
  EXPECT_EQ(Push(42, 1, 0).op, Op::kPushOk);
  ClockBoth(0);
  ASSERT_NO_FATAL_FAILURE(WriteGeneration(1));
  // The shard dies and comes back from generation 1.
  ASSERT_NO_FATAL_FAILURE(Restart());

  EXPECT_EQ(Push(42, 1, 0).op, Op::kPushOk);  // sent again: acknowledged
  EXPECT_EQ(Push(42, 2, 1).op, Op::kPushOk);  // a new one: applied
  ExpectRow5Added(before, 2.0f);
  EXPECT_EQ(RepeatedPushes(), 1u);
}

// Under consistency.aggregate a push is acknowledged when it is summed
// into its clock and applied when that clock ends: a generation names
// only the pushes whose sums its rows hold. Restored from it, the shard
// acknowledges such a push sent again, and sums again one that waited in
// a sum the generation does not hold.
class AggregateReshardShardServerTest : public ReshardShardServerTest {
 protected:
  void Adjust(JobOptions* job) override {
    ReshardShardServerTest::Adjust(job);
    job->consistency.mode = ConsistencyMode::kBsp;
    job->consistency.aggregate = true;
  }
};

TEST_F(AggregateReshardShardServerTest, AGenerationNamesOnlyThePushesWhoseSumsItHolds) {
  const std::vector<float> before = Snapshot();
  EXPECT_EQ(Push(42, 1, 0).op, Op::kPushOk);  // into clock 0's sum
  ClockBoth(0);                                // applied: the mean over 2 workers
  EXPECT_EQ(Push(42, 2, 1).op, Op::kPushOk);  // into clock 1's sum, not applied
  ASSERT_NO_FATAL_FAILURE(WriteGeneration(1));
  ASSERT_NO_FATAL_FAILURE(Restart());

  EXPECT_EQ(Push(42, 1, 0).op, Op::kPushOk);  // in generation 1: acknowledged
  EXPECT_EQ(Push(42, 2, 1).op, Op::kPushOk);  // lost with its sum: summed again
  ClockBoth(1);
  std::vector<float> want = before;
  for (size_t i = 5 * 4; i < 6 * 4; ++i) want[i] = (want[i] + 0.5f) + 0.5f;
  EXPECT_EQ(Snapshot(), want);
  EXPECT_EQ(RepeatedPushes(), 1u);
}

class BspShardServerTest : public ShardServerTest {
 protected:
  void Adjust(JobOptions* job) override { job->consistency.mode = ConsistencyMode::kBsp; }
};

// A worker whose connection came back tells its clock (kFlagResume): the
// shard takes it up, and a pull that waited for it is answered.
TEST_F(BspShardServerTest, ResumeHeartbeatSetsTheWorkersClockAndReleasesWaitingPulls) {
  MessageHeader resume = Header(Op::kHeartbeat, 0, 0, 0);
  resume.flags = kFlagResume;
  resume.worker = 0;
  resume.clock = 7;
  std::vector<Frame> req;
  req.push_back(EncodeHeader(resume));
  auto reply = Exchange(std::move(req));
  ASSERT_EQ(reply.size(), 1u);
  auto h = DecodeHeader({reply[0].data(), reply[0].size()});
  ASSERT_OK(h);
  EXPECT_EQ(h->op, Op::kHeartbeatOk);
  EXPECT_EQ(h->clock, 7);
  EXPECT_EQ(h->min_clock, 0);  // worker 1 is still at 0

  // Worker 0 pulls at clock 7: under bsp it waits for worker 1.
  MessageHeader pull = Header(Op::kPull, 0, 1, 4);
  pull.worker = 0;
  pull.clock = 7;
  req.clear();
  req.push_back(EncodeHeader(pull));
  req.push_back(Keys({3}));
  ASSERT_OK(sock_->Send(req));
  // Worker 1 resumes at 7 too: the minimum is 7 and the pull is answered.
  // Sent on the same connection, the resume is read after the pull, which
  // has waited by then (the server's state is not read from this thread:
  // waiting_pulls() is for a stopped server).
  resume.worker = 1;
  req.clear();
  req.push_back(EncodeHeader(resume));
  ASSERT_OK(sock_->Send(req));
  bool pulled = false, resumed = false;
  for (int i = 0; i < 2; ++i) {
    reply = Receive();
    ASSERT_FALSE(reply.empty());
    h = DecodeHeader({reply[0].data(), reply[0].size()});
    ASSERT_OK(h);
    if (h->op == Op::kPullOk) pulled = true;
    if (h->op == Op::kHeartbeatOk) {
      resumed = true;
      EXPECT_EQ(h->min_clock, 7);
    }
  }
  EXPECT_TRUE(pulled);
  EXPECT_TRUE(resumed);
  server_->Stop();
  thread_.join();
  // A shard that started at clock 0 lost the updates of clocks 0..6.
  EXPECT_EQ(server_->lost_clocks(), 7);
  EXPECT_EQ(server_->counters().resumes, 2u);
  thread_ = std::thread([this] { run_status_ = server_->Run(); });
}

}  // namespace
}  // namespace ps
