// EtcdAuthority (server/etcd_authority.h) against a real etcd on loopback
// (tests/util/etcd_server.h) and a real BackupServer: when a shard's
// primary key lapses, a backup that holds every acknowledged push takes
// the shard over, and one that does not (still taking its copy) gives the
// key back and stops its server, saying so, instead of serving without
// those pushes.
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

}  // namespace
}  // namespace ps
