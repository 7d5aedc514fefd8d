// The start-up rendezvous through real shards and clients on loopback: a
// worker of another job is refused naming the field that differs, a server
// that never answers is named within rendezvous.timeout_ms, one that starts
// late is found, and a shard gives a worker that never spoke a grace period.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "client/client.h"
#include "client/control_client.h"
#include "common/rendezvous.h"
#include "tests/util/fake_clock.h"
#include "tests/util/free_port.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tests/util/test_env.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

JobOptions Job() {
  return TestJob().Servers(2).Workers(2).Ssp(3).Table("w", 16).Table("b", 4).Build();
}

Status JoinAs(const JobOptions& job, uint32_t rank, const InProcessCluster& cluster) {
  auto client = Client::Create(job, rank, cluster.endpoints());
  if (!client.ok()) return client.status();
  return (*client)->Join();
}

TEST(RendezvousTest, TheSameJobJoins) {
  const JobOptions job = Job();
  InProcessCluster cluster(job);
  EXPECT_OK(JoinAs(job, 0, cluster));
  // Limits, timeouts and addresses may differ between hosts.
  JobOptions tuned = job;
  tuned.client.max_in_flight = 7;
  tuned.server.io_threads = 2;
  tuned.rendezvous.timeout_ms = 12345;
  EXPECT_OK(JoinAs(tuned, 1, cluster));
}

TEST(RendezvousTest, AWorkerOfAnotherJobIsRefusedNamingTheFieldAndBothValues) {
  const JobOptions job = Job();
  InProcessCluster cluster(job);
  JobOptions more_workers = job;
  more_workers.cluster.workers = 3;
  Status s = JoinAs(more_workers, 0, cluster);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("job mismatch: workers: shard 0 (127.0.0.1:1) has \"2\", worker 0 "
                             "has \"3\""),
            std::string::npos)
      << s.ToString();

  JobOptions bsp = job;
  bsp.consistency.mode = ConsistencyMode::kBsp;
  bsp.consistency.staleness = 0;
  s = JoinAs(bsp, 1, cluster);
  EXPECT_NE(s.message().find("consistency: shard 0 (127.0.0.1:1) has \"ssp 3\", worker 1 has "
                             "\"bsp\""),
            std::string::npos)
      << s.ToString();

  JobOptions lr = job;
  lr.tables[1].optimizer.lr = 0.5f;
  s = JoinAs(lr, 1, cluster);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("tables[1].optimizer: "), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("lr=0.5"), std::string::npos) << s.ToString();

  JobOptions rows = job;
  rows.tables[0].rows = 17;
  s = JoinAs(rows, 0, cluster);
  EXPECT_NE(s.message().find("tables[0]: shard 0 (127.0.0.1:1) has \"w rows=16 dim=1\", worker 0 "
                             "has \"w rows=17 dim=1\""),
            std::string::npos)
      << s.ToString();

  // The refused workers never counted as the job's: a real one still joins
  // and trains with the other.
  EXPECT_OK(JoinAs(job, 0, cluster));
}

TEST(RendezvousTest, AMissingServerIsNamedWithinTheTimeout) {
  JobOptions job = Job();
  const int silent_port = FreePort();
  job.cluster.servers[1] = "127.0.0.1:" + std::to_string(silent_port);
  job.rendezvous.timeout_ms = 300;
  auto server = ShardServer::Create(job, 0, "tcp://127.0.0.1:*");
  ASSERT_OK(server);
  std::thread serving([&] { (*server)->Run().IgnoreError(); });
  auto client = Client::Create(
      job, 0, {(*server)->endpoint(), "tcp://127.0.0.1:" + std::to_string(silent_port)});
  ASSERT_OK(client);
  const auto start = std::chrono::steady_clock::now();
  Status s = (*client)->Join();
  const auto took = std::chrono::steady_clock::now() - start;
  (*server)->Stop();
  serving.join();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("server 1 (127.0.0.1:" + std::to_string(silent_port) + ")"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(s.message().find("server 0"), std::string::npos) << "server 0 answered: "
                                                             << s.ToString();
  EXPECT_NE(s.message().find("rendezvous.timeout_ms (300 ms)"), std::string::npos);
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(5000));
}

TEST(RendezvousTest, AServerThatStartsAfterTheWorkerIsFound) {
  JobOptions job = TestJob().Workers(1).Asp().Table("w", 4).Build();
  const int port = FreePort();
  job.cluster.servers = {"127.0.0.1:" + std::to_string(port)};
  job.rendezvous.timeout_ms = 20000;
  // A plain listener on the job's address first: the worker's connection
  // to it shows the worker is trying before the server exists. It is
  // closed before the handshake, and ZeroMQ keeps the HELLO for the next.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  auto client = Client::Create(job, 0);  // connects to the job's address
  ASSERT_OK(client);
  Status joined = InternalError("not joined");
  std::thread joining([&] { joined = (*client)->Join(); });
  pollfd waiting{.fd = listener, .events = POLLIN, .revents = 0};
  ASSERT_EQ(poll(&waiting, 1, 10000), 1) << "the worker never connected";
  close(accept(listener, nullptr, nullptr));
  close(listener);
  auto server = ShardServer::Create(job, 0);
  ASSERT_OK(server);
  std::thread serving([&] { (*server)->Run().IgnoreError(); });
  joining.join();
  EXPECT_OK(joined);
  (*server)->Stop();
  serving.join();
}

// The shard's dead_workers line of STATS.
std::string DeadWorkers(ControlClient& control) {
  auto stats = control.Stats(0);
  if (!stats.ok()) return "STATS failed: " + stats.status().ToString();
  const size_t at = stats->find("dead_workers");
  return stats->substr(at, stats->find('\n', at) - at);
}

TEST(RendezvousTest, AWorkerThatNeverSpokeIsDeadOnlyAfterTheGracePeriod) {
  JobOptions job =
      TestJob().Workers(1).Bsp().Liveness(50, 400).RequestTimeoutMs(10000).Table("w", 4).Build();
  job.rendezvous.timeout_ms = 5000;
  // Keep serving when the only worker is dead, to be asked STATS.
  job.server.exit_when_workers_leave = false;
  FakeClock clock;
  TestEnv env(&clock);
  InProcessCluster cluster(job, &env);
  auto control = ControlClient::Create(job, cluster.endpoints());
  ASSERT_OK(control);
  clock.Advance(milliseconds(5000));  // the grace period ends; silence starts counting
  cluster.AwaitHousekeeping();
  EXPECT_EQ(DeadWorkers(**control), "dead_workers");
  clock.Advance(milliseconds(399));
  cluster.AwaitHousekeeping();
  EXPECT_EQ(DeadWorkers(**control), "dead_workers");
  clock.Advance(milliseconds(1));
  cluster.AwaitHousekeeping();
  EXPECT_EQ(DeadWorkers(**control), "dead_workers 0");
}

TEST(RendezvousAgreementTest, FieldsAndFingerprint) {
  const JobOptions job = Job();
  const std::vector<AgreedField> fields = AgreedFields(job);
  ASSERT_EQ(fields.size(), 11u);  // 5, and per table its layout, optimizer and wire
  EXPECT_EQ(fields[0].name, "shards");
  EXPECT_EQ(fields[0].value, "2");
  EXPECT_EQ(fields[2].value, "ssp 3");
  EXPECT_EQ(fields[4].name, "replication.factor");
  EXPECT_EQ(fields[4].value, "1");
  EXPECT_EQ(fields[5].name, "tables[0]");
  EXPECT_EQ(fields[6].name, "tables[0].optimizer");
  EXPECT_EQ(fields[7].name, "tables[0].wire");
  EXPECT_EQ(fields[7].value, "pull=fp32 push=fp32");
  // A worker that would push in bf16 to a shard that takes fp32 only is
  // refused at the rendezvous, naming the field.
  JobOptions bf16 = job;
  bf16.tables[0].wire.push = WireType::kBf16;
  const Status wire = CompareAgreement(EncodeAgreement(job), EncodeAgreement(bf16), "me", "them");
  EXPECT_NE(wire.message().find("tables[0].wire: me has \"pull=fp32 push=fp32\", them has "
                                "\"pull=fp32 push=bf16\""),
            std::string::npos)
      << wire.ToString();
  // Servers and workers must agree on the copies: a worker of a
  // replicated job is refused by an unreplicated one, naming the field.
  JobOptions replicated = job;
  replicated.replication.factor = 2;
  Status differs = CompareAgreement(EncodeAgreement(job), EncodeAgreement(replicated), "me",
                                    "them");
  EXPECT_NE(differs.message().find("replication.factor: me has \"1\", them has \"2\""),
            std::string::npos)
      << differs.ToString();
  const std::string text = EncodeAgreement(job);
  EXPECT_EQ(AgreementFingerprint(text).size(), 16u);
  EXPECT_EQ(AgreementFingerprint(text), AgreementFingerprint(EncodeAgreement(job)));
  JobOptions aggregate = job;
  aggregate.consistency = {ConsistencyMode::kBsp, 0, true};
  EXPECT_NE(AgreementFingerprint(EncodeAgreement(aggregate)), AgreementFingerprint(text));
  EXPECT_NE(EncodeAgreement(aggregate).find("consistency=bsp aggregate\n"), std::string::npos);
}

TEST(RendezvousAgreementTest, ExtraOrMissingTablesAndGarbageAreNamed) {
  const JobOptions job = Job();
  JobOptions one_table = job;
  one_table.tables.pop_back();
  Status s = CompareAgreement(EncodeAgreement(job), EncodeAgreement(one_table), "me", "them");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("tables: me has \"2\", them has \"1\""), std::string::npos)
      << s.ToString();
  s = CompareAgreement(EncodeAgreement(job), "not an agreement", "me", "them");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = CompareAgreement(EncodeAgreement(job), "", "me", "them");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("shards: me has \"2\", them has \"no such field\""),
            std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace ps
