// EtcdAuthority (server/etcd_authority.h) against a real etcd on loopback
// (tests/util/etcd_server.h) and a real BackupServer: when a shard's
// primary key lapses, a backup that holds every acknowledged push takes
// the shard over, and one that does not (still taking its copy) gives the
// key back and stops its server, saying so, instead of serving without
// those pushes. A primary joins a replica again when a new process of it
// registers, also before its previous process's lease lapsed.
#include "server/etcd_authority.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/etcd_client.h"
#include "server/replication.h"
#include "server/shard_server.h"
#include "tests/util/etcd_server.h"
#include "tests/util/free_port.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

class EtcdAuthorityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    etcd_ = new StatusOr<std::unique_ptr<EtcdServer>>(EtcdServer::Start());
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }

  void SetUp() override {
    if (EtcdServer::NotInstalled(etcd_->status())) GTEST_SKIP() << etcd_->status().message();
    ASSERT_OK(*etcd_);
    job_ = TestJob().Servers(2).Workers(1).Asp().Table("w", 10, 1, OptimizerKind::kAdd).Build();
    // Only shard 0's replica 1 runs here (at the second server's port +
    // the offset).
    const std::vector<int> ports = {FreePort(), FreePort()};
    job_.cluster.servers = {"127.0.0.1:" + std::to_string(ports[0]),
                            "127.0.0.1:" + std::to_string(ports[1])};
    job_.replication.factor = 2;
    job_.replication.port_offset = FreePortOffset(ports, 2);
    ASSERT_NE(job_.replication.port_offset, 0u);
    job_.replication.authority = ReplicationAuthority::kEtcd;
    job_.replication.etcd.endpoints = {etcd_->value()->endpoint()};
    job_.replication.etcd.prefix =
        "/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
    job_.replication.etcd.lease_ttl_s = 1;
    job_.replication.etcd.request_timeout_ms = 200;
    job_.server.exit_when_workers_leave = false;
    ASSERT_OK(job_.Validate());
    etcd_client_ = EtcdClient::Create(job_.replication.etcd.endpoints, milliseconds(2000)).value();
  }

  // Plays replica 0, the shard's primary: holds the primary key under a
  // lease of its own; returns the lease.
  int64_t HoldPrimaryKey() {
    const int64_t lease = etcd_client_->GrantLease(60).value();
    const std::string key = EtcdAuthority::PrimaryKey(EtcdAuthority::Prefix(job_), 0);
    EXPECT_TRUE(etcd_client_->PutIfAbsent(key, "0", lease).value().succeeded);
    return lease;
  }

  // Runs replica 1 (a BackupServer, joining or not) under its authority,
  // lets replica 0's key lapse, and returns what the authority told its
  // server when it stopped it, or nullopt when the server was promoted.
  std::optional<std::string> LoseThePrimary(bool join) {
    const int64_t primary_lease = HoldPrimaryKey();
    auto backup = BackupServer::Create(job_, 0, 1, "", -1, join);
    EXPECT_OK(backup);
    if (!backup.ok()) return "no backup";
    std::thread server([&] { (*backup)->Run().IgnoreError(); });
    auto authority = EtcdAuthority::Create(job_, 0, 1, join);
    EXPECT_OK(authority);
    if (!authority.ok()) {
      (*backup)->Stop();
      server.join();
      return "no authority";
    }
    // As ps_server does: the authority asks its server whether it holds
    // every push.
    BackupServer* copy = backup->get();
    (*authority)->SetInSync([copy] { return copy->in_sync_now(); });
    std::mutex mu;
    std::condition_variable cv;
    std::optional<std::string> stopped;
    (*authority)->Start([&](const std::string& reason) {
      std::lock_guard<std::mutex> lock(mu);
      stopped = reason;
      cv.notify_all();
    });
    EXPECT_OK(etcd_client_->RevokeLease(primary_lease));
    // The server returns from Run once promoted; the authority stops it
    // otherwise.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    {
      std::unique_lock<std::mutex> lock(mu);
      while (!stopped.has_value() && !(*backup)->promoted() &&
             std::chrono::steady_clock::now() < deadline) {
        cv.wait_for(lock, milliseconds(20));
      }
    }
    promoted_ = (*backup)->promoted();
    (*authority)->Stop();
    (*authority)->SetInSync(nullptr);
    (*backup)->Stop();
    server.join();
    std::lock_guard<std::mutex> lock(mu);
    return stopped;
  }

  static StatusOr<std::unique_ptr<EtcdServer>>* etcd_;
  JobOptions job_;
  std::unique_ptr<EtcdClient> etcd_client_;
  bool promoted_ = false;
};

StatusOr<std::unique_ptr<EtcdServer>>* EtcdAuthorityTest::etcd_ = nullptr;

TEST_F(EtcdAuthorityTest, ABackupInSyncTakesTheShardWhenThePrimaryKeyLapses) {
  // A backup from the start holds every push its primary acknowledged.
  const std::optional<std::string> stopped = LoseThePrimary(/*join=*/false);
  EXPECT_FALSE(stopped.has_value()) << *stopped;
  EXPECT_TRUE(promoted_);
  auto key = etcd_client_->Get(EtcdAuthority::PrimaryKey(EtcdAuthority::Prefix(job_), 0));
  ASSERT_OK(key);
  ASSERT_TRUE(key->has_value());
  EXPECT_EQ((*key)->value, "1");
}

TEST_F(EtcdAuthorityTest, ABackupNotInSyncLeavesTheKeyAndStopsNamingTheCheckpoint) {
  // A backup that joined and has no copy yet: the pushes its primary
  // acknowledged meanwhile are on no other replica. It never takes the key
  // (a replica in sync would see another primary and stop), and stops once
  // none took it within a lease's time.
  const std::optional<std::string> stopped = LoseThePrimary(/*join=*/true);
  ASSERT_TRUE(stopped.has_value()) << "the authority never stopped its server";
  EXPECT_FALSE(promoted_);
  EXPECT_NE(stopped->find("does not hold every push it acknowledged (it is still taking its "
                          "primary's copy, and no replica in sync took the shard within a "
                          "lease's time)"),
            std::string::npos)
      << *stopped;
  EXPECT_NE(stopped->find("restart the job from its newest checkpoint"), std::string::npos)
      << *stopped;
  auto key = etcd_client_->Get(EtcdAuthority::PrimaryKey(EtcdAuthority::Prefix(job_), 0));
  ASSERT_OK(key);
  EXPECT_FALSE(key->has_value()) << "the key was taken";
}

TEST_F(EtcdAuthorityTest, AReplicaStartedAgainBeforeItsOldLeaseLapsedIsJoinedAgain) {
  // Replica 0, the primary: a real ShardServer under its own authority,
  // as ps_server runs it. Replica 1 is played here by its registrations:
  // no server listens at its address, so each copy stays queued.
  auto authority = EtcdAuthority::Create(job_, 0, 0, /*join=*/false);
  ASSERT_OK(authority);
  ASSERT_EQ((*authority)->role(), EtcdAuthority::Role::kPrimary);
  auto server = ShardServer::Create(job_, 0, "");
  ASSERT_OK(server);
  (*server)->SetWriteLease((*authority)->lease());
  std::thread serve([&] { (*server)->Run().IgnoreError(); });
  (*authority)->Start([](const std::string&) {});
  const std::string prefix = EtcdAuthority::Prefix(job_);
  const std::string replica_key = EtcdAuthority::ReplicaKey(prefix, 0, 1);
  const std::string membership_key = prefix + "/shard/0/membership";
  // The primary's newest membership change past revision `after` that
  // adds replica 1 (a replica taken for a backup from the start, or one
  // still in its log, is dropped first), waited for up to 10 s
  // (lease_ttl_s is 1: a round every 250 ms).
  auto next_join = [&](int64_t after) -> std::optional<EtcdKeyValue> {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      auto kv = etcd_client_->Get(membership_key);
      if (kv.ok() && kv->has_value() && (*kv)->mod_revision > after) {
        if ((*kv)->value == "join 1") return **kv;
        EXPECT_EQ((*kv)->value, "drop 1");
        after = (*kv)->mod_revision;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return std::nullopt;
  };

  // Its first process registers as joining: the primary adds it.
  const int64_t first = etcd_client_->GrantLease(60).value();
  ASSERT_OK(etcd_client_->Put(replica_key, "joining", first));
  std::optional<EtcdKeyValue> joined = next_join(0);
  ASSERT_TRUE(joined.has_value()) << "the primary never added replica 1";
  // It dies and a new process starts at once, before the first one's
  // lease lapsed: the same key (same create_revision), under the new
  // process's lease. That process waits for a copy of its own, so the
  // primary drops the old one and joins the new one, at a new epoch.
  const int64_t second = etcd_client_->GrantLease(60).value();
  ASSERT_OK(etcd_client_->Put(replica_key, "joining", second));
  auto key = etcd_client_->Get(replica_key);
  ASSERT_OK(key);
  ASSERT_TRUE(key->has_value());
  EXPECT_EQ((*key)->lease, second);
  std::optional<EtcdKeyValue> rejoined = next_join(joined->mod_revision);
  ASSERT_TRUE(rejoined.has_value()) << "the primary never joined the new process";
  // And no other change while that registration stays (1 s: four rounds).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto last = etcd_client_->Get(membership_key);
  ASSERT_OK(last);
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->mod_revision, rejoined->mod_revision) << (*last)->value;

  (*authority)->Stop();
  (*server)->Stop();
  serve.join();
  EXPECT_OK(etcd_client_->RevokeLease(first));
  EXPECT_OK(etcd_client_->RevokeLease(second));
}

// A primary's authority that is telling its own server of a change when
// the server stops (a handover, a signal) stops at once: the server will
// not answer, and waiting out the request's 5 s held the exit of a
// primary that had handed over while the next shard map waited for it.
TEST_F(EtcdAuthorityTest, StoppedWhileItsOwnServerDoesNotAnswerItStopsWithoutWaitingItOut) {
  auto authority = EtcdAuthority::Create(job_, 0, 0, /*join=*/false);
  ASSERT_OK(authority);
  ASSERT_EQ((*authority)->role(), EtcdAuthority::Role::kPrimary);
  (*authority)->Start([](const std::string&) {});  // no server answers it
  const std::string prefix = EtcdAuthority::Prefix(job_);
  const int64_t lease = etcd_client_->GrantLease(60).value();
  ASSERT_OK(etcd_client_->Put(EtcdAuthority::ReplicaKey(prefix, 0, 1), "joining", lease));
  // A change's epoch is written before its server is told of it (here
  // "drop 1" first: a replica never seen may be one from the start).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool told = false;
  while (!told && std::chrono::steady_clock::now() < deadline) {
    auto kv = etcd_client_->Get(prefix + "/shard/0/membership");
    told = kv.ok() && kv->has_value();
    if (!told) std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(told) << "the primary never began to change its membership";
  const auto stopping = std::chrono::steady_clock::now();
  (*authority)->Stop();
  // A bound, not a speed: the request's own timeout is 5 s, its poll 0.1 s.
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(4));
  EXPECT_OK(etcd_client_->RevokeLease(lease));
}

}  // namespace
}  // namespace ps
