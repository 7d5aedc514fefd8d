// Replicated shards (server/replication.h): backups hold the primary's
// state bit for bit, a push is acknowledged only once every backup has
// it, and a backup refuses what is not its primary's log in order.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/control_client.h"
#include "common/endpoint.h"
#include "common/hash_slots.h"
#include "server/replication.h"
#include "server/shard_server.h"
#include "tests/util/channel_log.h"
#include "tests/util/faulty_channel.h"
#include "tests/util/free_port.h"
#include "tests/util/raw_peer.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_env.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

using std::chrono::milliseconds;

// Success when `status` has `code` and its message contains `part`.
::testing::AssertionResult Refused(const Status& status, StatusCode code, const std::string& part) {
  if (status.code() != code || status.message().find(part) == std::string::npos) {
    return ::testing::AssertionFailure() << "expected code " << static_cast<int>(code)
                                         << " naming \"" << part << "\", got "
                                         << status.ToString();
  }
  return ::testing::AssertionSuccess();
}

// A job of `servers` shards at free loopback ports, replication.factor
// `factor`, backups at the ports port_offset above.
JobOptions ReplicatedJob(uint32_t servers, uint32_t factor, TestJob builder) {
  JobOptions job = builder.Build();
  job.cluster.servers.clear();
  std::vector<int> ports;
  for (uint32_t i = 0; i < servers; ++i) {
    ports.push_back(FreePort());
    job.cluster.servers.push_back("127.0.0.1:" + std::to_string(ports.back()));
  }
  job.replication.factor = factor;
  job.replication.port_offset = FreePortOffset(ports, factor);
  EXPECT_NE(job.replication.port_offset, 0u) << "no free ports for the backups";
  job.server.exit_when_workers_leave = false;
  job.client.request_timeout_ms = 20000;
  return job;
}

// Every replica of every shard on threads of the test: primaries at
// cluster.servers, backups where ReplicaAddress puts them.
class ReplicatedCluster {
 public:
  // `start_backups`: false leaves them to StartBackups(). `env` (null:
  // Env::Default()) is every primary's; it must outlive the cluster.
  // `from_states`: every replica starts from a state of its own, all alike
  // (as a reshard's replicas do from what they followed:
  // server/reshard_follower.h), the primary's backups holding it.
  explicit ReplicatedCluster(const JobOptions& job, bool start_backups = true,
                             Env* env = nullptr, bool from_states = false)
      : job_(job), from_states_(from_states) {
    for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
      auto server = from_states ? ShardServer::CreatePromoted(job_, s, State(s, 0), "", env)
                                : ShardServer::Create(job_, s, "", -1, env);
      EXPECT_TRUE(server.ok()) << server.status().ToString();
      if (!server.ok()) return;
      endpoints_.push_back((*server)->endpoint());
      primaries_.push_back(std::move(*server));
    }
    for (auto& p : primaries_) threads_.emplace_back([&p] { p->Run().IgnoreError(); });
    backups_.resize(job.cluster.servers.size() * (job.replication.factor - 1));
    if (start_backups) StartBackups();
  }
  ~ReplicatedCluster() { Stop(); }

  void StartBackups() {
    for (uint32_t s = 0; s < job_.cluster.servers.size(); ++s) {
      for (uint32_t j = 1; j < job_.replication.factor; ++j) StartBackup(s, j, /*join=*/false);
    }
  }
  // Starts backup j of shard s (its slot empty), taking a copy from the
  // primary when `join`.
  void StartBackup(uint32_t s, uint32_t j, bool join) {
    Running& r = slot(s, j);
    auto backup = from_states_ && !join ? BackupServer::CreateFromState(job_, s, State(s, j))
                                        : BackupServer::Create(job_, s, j, "", -1, join);
    EXPECT_TRUE(backup.ok()) << backup.status().ToString();
    if (!backup.ok()) return;
    r.backup = std::move(*backup);
    BackupServer* b = r.backup.get();
    r.thread = std::thread([b] { b->Run().IgnoreError(); });
  }
  // Stops backup j of shard s and frees its port, as if it died.
  void KillBackup(uint32_t s, uint32_t j) {
    Running& r = slot(s, j);
    if (r.backup != nullptr) r.backup->Stop();
    if (r.thread.joinable()) r.thread.join();
    r.backup.reset();
  }
  // Stops the primaries; their backups end with the primaries' last entry.
  void Stop() {
    for (auto& p : primaries_) p->Stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    for (Running& r : backups_) {
      if (r.thread.joinable()) r.thread.join();
    }
  }
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  ShardServer& primary(size_t s) { return *primaries_[s]; }
  // Backup j of shard s.
  BackupServer& backup(size_t s, uint32_t j) {
    // A backup that did not start fails the test (an exception gtest
    // reports), not the process.
    BackupServer* b = slot(s, j).backup.get();
    if (b == nullptr) throw std::runtime_error("backup did not start");
    return *b;
  }

 private:
  struct Running {
    std::unique_ptr<BackupServer> backup;
    std::thread thread;
  };
  Running& slot(size_t s, uint32_t j) {
    return backups_.at(s * (job_.replication.factor - 1) + (j - 1));
  }
  // Replica `slot` of shard `s`'s starting state: the job's initial values,
  // no clock yet.
  BackupServer::State State(uint32_t s, uint32_t slot) const {
    BackupServer::State state;
    auto store = ShardStore::Create(job_, s);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (store.ok()) state.store = std::move(*store);
    state.clocks = ClockTable(job_.cluster.workers,
                              job_.consistency.Quorum(job_.cluster.workers));
    state.recent_pushes =
        RecentPushes(job_.cluster.workers, 4 * size_t{job_.client.max_in_flight} + 64);
    state.slot = slot;
    state.backups_hold_it = true;
    return state;
  }
  const JobOptions job_;
  const bool from_states_;
  std::vector<std::unique_ptr<ShardServer>> primaries_;
  std::vector<Running> backups_;
  std::vector<std::thread> threads_;
  std::vector<std::string> endpoints_;
};

void ExpectSameCopies(ReplicatedCluster& cluster, const JobOptions& job) {
  for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
    const ShardStore& primary = cluster.primary(s).store();
    for (uint32_t j = 1; j < job.replication.factor; ++j) {
      BackupServer& b = cluster.backup(s, j);
      EXPECT_EQ(b.refused(), 0u);
      for (uint32_t t = 0; t < job.tables.size(); ++t) {
        EXPECT_EQ(b.store().CopyValues(t), primary.CopyValues(t))
            << "shard " << s << " backup " << j << " table " << t;
        EXPECT_EQ(b.store().Checksum(t), primary.Checksum(t));
      }
      EXPECT_EQ(b.clocks().min_clock(), cluster.primary(s).clocks().min_clock());
      // With backup workers, each open clock's members and late workers too.
      EXPECT_EQ(b.clocks().Encode(), cluster.primary(s).clocks().Encode());
      // Every push the primary recorded, late ones included.
      EXPECT_EQ(b.recent_pushes().Encode(), cluster.primary(s).recent_pushes().Encode());
      for (uint32_t w = 0; w < job.cluster.workers; ++w) {
        EXPECT_EQ(b.clocks().clock(w), cluster.primary(s).clocks().clock(w));
      }
    }
  }
}

// Workers push integer-valued updates for `clocks` clocks; returns the
// sum every row must hold.
// `at_clock` (when set) runs on each worker's thread after each of its
// clocks.
std::vector<float> Train(const JobOptions& job, ReplicatedCluster& cluster, uint64_t rows,
                         int clocks,
                         const std::function<void(uint32_t rank, int clock)>& at_clock = nullptr) {
  std::vector<std::thread> threads;
  std::vector<Status> results(job.cluster.workers);
  for (uint32_t r = 0; r < job.cluster.workers; ++r) {
    threads.emplace_back([&, r] {
      auto client = Client::Create(job, r, cluster.endpoints());
      if (!client.ok()) {
        results[r] = client.status();
        return;
      }
      Status s = (*client)->Join();
      std::vector<float> pulled(rows);
      for (int c = 0; c < clocks && s.ok(); ++c) {
        // Rank r adds r + 1 to every row, each clock.
        std::vector<float> update(rows, static_cast<float>(r + 1));
        auto push = (*client)->PushDense(0, SharedFloats::Take(std::move(update)));
        if (!push.ok()) { s = push.status(); break; }
        // The clock before the push's acknowledgement: under replication
        // after aggregation that comes when the clock's sum is replicated.
        auto clock = (*client)->Clock();
        if (!clock.ok()) { s = clock.status(); break; }
        s = (*client)->Wait(*push);
        if (!s.ok()) break;
        s = (*client)->Wait(*clock);
        if (!s.ok()) break;
        auto pull = (*client)->PullDense(0, pulled.data());
        if (!pull.ok()) { s = pull.status(); break; }
        s = (*client)->Wait(*pull);
        if (at_clock) at_clock(r, c);
      }
      if (s.ok()) s = (*client)->Leave();
      results[r] = s;
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) EXPECT_OK(s);
  float per_clock = 0;
  for (uint32_t r = 0; r < job.cluster.workers; ++r) per_clock += static_cast<float>(r + 1);
  return std::vector<float>(rows, per_clock * static_cast<float>(clocks));
}

std::vector<float> Model(const JobOptions& job, ReplicatedCluster& cluster, uint64_t rows) {
  std::vector<float> values;
  for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
    std::vector<float> v = cluster.primary(s).store().CopyValues(0);
    values.insert(values.end(), v.begin(), v.end());
  }
  EXPECT_EQ(values.size(), rows);
  return values;
}

TEST(ReplicaAddressTest, BackupsRunOnTheNextServersOfTheRingAtTheirPortPlusAnOffset) {
  JobOptions job = TestJob().Servers(3, 7000).Workers(1).Table("w", 8).Build();
  job.replication.factor = 3;
  job.replication.port_offset = 100;
  EXPECT_EQ(ReplicaHostPort(job, 0, 0)->canonical, "127.0.0.1:7000");
  EXPECT_EQ(ReplicaHostPort(job, 0, 1)->canonical, "127.0.0.1:7101");
  EXPECT_EQ(ReplicaHostPort(job, 0, 2)->canonical, "127.0.0.1:7202");
  EXPECT_EQ(ReplicaHostPort(job, 2, 1)->canonical, "127.0.0.1:7100");
  EXPECT_EQ(ReplicaHostPort(job, 2, 2)->port, 7201);
  EXPECT_OK(job.Validate());
  job.replication.port_offset = 30000;
  EXPECT_EQ(ReplicaHostPort(job, 0, 2).status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Refused(job.Validate(), StatusCode::kInvalidArgument, "above 65535"));
  // Port 7000 + 1 is server 1's own port: refused, naming both.
  job.replication.port_offset = 1;
  job.replication.factor = 2;
  job.cluster.servers = {"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7003"};
  EXPECT_TRUE(Refused(job.Validate(), StatusCode::kInvalidArgument, "cluster.servers["));
  job.replication.factor = 4;
  EXPECT_TRUE(Refused(job.Validate(), StatusCode::kInvalidArgument, "replication.factor"));
  job.replication.factor = 0;
  EXPECT_TRUE(Refused(job.Validate(), StatusCode::kInvalidArgument, "replication.factor"));
}

struct Mode {
  const char* name;
  ConsistencyMode mode;
  uint32_t staleness;
  bool aggregate;
  // Under aggregate: every push to the backups (replication.after_aggregation
  // false) rather than each clock's sums once.
  bool per_push = false;
  uint32_t backup_workers = 0;  // consistency.backup_workers (per push)
};

// `shards` shards with replication.factor `factor` and as many workers as
// shards, training an adam table of `rows` x 1 under mode `m`.
JobOptions AdamJob(const Mode& m, uint32_t shards, uint32_t factor, uint64_t rows) {
  TableOptions adam = TestTable("w", rows, 1, OptimizerKind::kAdam);
  JobOptions job =
      ReplicatedJob(shards, factor, TestJob().Workers(shards).Mode(m.mode, m.staleness).Table(adam));
  job.consistency.aggregate = m.aggregate;
  job.replication.after_aggregation = !m.per_push;
  job.consistency.backup_workers = m.backup_workers;
  return job;
}

class ReplicatedTrainingTest : public ::testing::TestWithParam<Mode> {};

TEST_P(ReplicatedTrainingTest, EveryBackupEndsBitForBitEqualToItsPrimary) {
  const Mode m = GetParam();
  constexpr uint64_t kRows = 3000;
  JobOptions job = AdamJob(m, 3, 3, kRows);
  ReplicatedCluster cluster(job);
  Train(job, cluster, kRows, 12);
  cluster.Stop();
  ExpectSameCopies(cluster, job);
  if (m.backup_workers == 1) {
    // Every worker pushes every clock: of each clock's three pushes the
    // last to reach a shard is late there, and the backups know it too.
    for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(cluster.primary(s).counters().late_pushes, 12u);
  }
  for (uint32_t s = 0; s < 3; ++s) {
    EXPECT_EQ(cluster.backup(s, 1).applied(), cluster.backup(s, 2).applied());
    EXPECT_GT(cluster.backup(s, 1).applied(), 12u);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ReplicatedTrainingTest,
                         ::testing::Values(Mode{"bsp", ConsistencyMode::kBsp, 0, false},
                                           Mode{"bsp_aggregate", ConsistencyMode::kBsp, 0, true},
                                           Mode{"bsp_aggregate_per_push", ConsistencyMode::kBsp,
                                                0, true, true},
                                           Mode{"bsp_aggregate_backup_worker",
                                                ConsistencyMode::kBsp, 0, true, true, 1},
                                           Mode{"ssp2", ConsistencyMode::kSsp, 2, false},
                                           Mode{"asp", ConsistencyMode::kAsp, 0, false}),
                         [](const auto& p) { return std::string(p.param.name); });

// The authority's part of a rejoin: backup 1 of shard 0 dies, is dropped
// at epoch 1, starts again empty and is added back at epoch 2 (it takes a
// copy from its primary). Returns the control client it used (null when
// it could not make one).
std::unique_ptr<ControlClient> RejoinBackup(ReplicatedCluster& cluster, const JobOptions& job) {
  cluster.KillBackup(0, 1);
  auto control = ControlClient::Create(job, cluster.endpoints());
  EXPECT_OK(control);
  if (!control.ok()) return nullptr;
  EXPECT_OK((*control)->Membership(0, kMembershipDropBackup, 1, 1));
  cluster.StartBackup(0, 1, /*join=*/true);
  EXPECT_OK((*control)->Membership(0, kMembershipAddBackup, 1, 2));
  return std::move(*control);
}

// A backup dies while the workers train; it comes back empty and takes a
// copy from the running primary (snapshot, then the log since): at the end
// it holds the primary's state bit for bit, and the sums are exact.
class RejoinTest : public ::testing::TestWithParam<Mode> {};

TEST_P(RejoinTest, ABackupThatRejoinsWhileWorkersPushEndsBitForBitEqualToItsPrimary) {
  const Mode m = GetParam();
  // 2 shards of 300,000 rows: two blocks each, so the copy is more than
  // one entry. Adam: the copy carries the optimizer state.
  constexpr uint64_t kRows = 600000;
  JobOptions job = AdamJob(m, 2, 2, kRows);
  ReplicatedCluster cluster(job);
  std::promise<void> reached;
  std::promise<void> rejoined;
  std::shared_future<void> rejoined_future = rejoined.get_future().share();
  std::thread authority([&] {
    reached.get_future().wait();
    std::unique_ptr<ControlClient> control = RejoinBackup(cluster, job);
    ASSERT_NE(control, nullptr);
    // Adding it twice is refused: it is a backup of the log already.
    EXPECT_FALSE(control->Membership(0, kMembershipAddBackup, 1, 3).ok());
    rejoined.set_value();
  });
  Train(job, cluster, kRows, 30, [&](uint32_t rank, int clock) {
    if (rank == 0 && clock == 4) reached.set_value();
    // Worker 1 goes on meanwhile (up to its staleness); worker 0 waits
    // until the backup was added, so that clocks pass after the copy.
    if (rank == 0 && clock == 5) rejoined_future.wait();
  });
  authority.join();
  cluster.Stop();
  ExpectSameCopies(cluster, job);
  EXPECT_FALSE(cluster.backup(0, 1).copying());
  // Its primary told it that it holds every acknowledged push.
  EXPECT_TRUE(cluster.backup(0, 1).in_sync());
  EXPECT_GT(cluster.backup(0, 1).applied(), 10u);
  EXPECT_EQ(cluster.backup(0, 1).clocks().min_clock(), 30);
}

INSTANTIATE_TEST_SUITE_P(Modes, RejoinTest,
                         ::testing::Values(Mode{"bsp", ConsistencyMode::kBsp, 0, false},
                                           Mode{"bsp_aggregate", ConsistencyMode::kBsp, 0, true},
                                           Mode{"bsp_aggregate_per_push", ConsistencyMode::kBsp,
                                                0, true, true},
                                           Mode{"bsp_aggregate_backup_worker",
                                                ConsistencyMode::kBsp, 0, true, true, 1},
                                           Mode{"asp", ConsistencyMode::kAsp, 0, false}),
                         [](const auto& p) { return std::string(p.param.name); });

// Worker 0 of a job of one table, joined, with a control client of the
// same cluster (JoinWorker); Push sends a dense push of ones `times` times,
// each waited for.
struct JoinedWorker {
  std::unique_ptr<ControlClient> control;
  std::unique_ptr<Client> client;
  uint64_t rows = 0;
  void Push(int times) {
    for (int i = 0; i < times; ++i) {
      auto ticket = client->PushDense(0, SharedFloats::Take(std::vector<float>(rows, 1.0f)));
      ASSERT_OK(ticket);
      ASSERT_OK(client->Wait(*ticket));
    }
  }
};
void JoinWorker(const JobOptions& job, const ReplicatedCluster& cluster, uint64_t rows,
                JoinedWorker* w) {
  auto control = ControlClient::Create(job, cluster.endpoints());
  ASSERT_OK(control);
  auto client = Client::Create(job, 0, cluster.endpoints());
  ASSERT_OK(client);
  ASSERT_OK((*client)->Join());
  w->control = std::move(*control);
  w->client = std::move(*client);
  w->rows = rows;
}

// A replica that starts after its primary took the shard (a slower host
// at the job's start) finds a primary and joins, while the primary took it
// for a backup from the start. Whether the primary sends it entries first
// (it refuses them: it waits for a copy) or the authority adds it first,
// the shard goes on, the replica gets its copy, and both end equal.
TEST(ReplicationTest, AReplicaThatStartsAfterItsPrimaryJoinsWithoutStoppingIt) {
  for (bool pushes_first : {true, false}) {
    SCOPED_TRACE(pushes_first ? "entries before the authority adds it" : "added first");
    constexpr uint64_t kRows = 10;
    JobOptions job = ReplicatedJob(1, 2, TestJob().Workers(1).Asp().Table("w", kRows, 1,
                                                                         OptimizerKind::kAdd));
    ReplicatedCluster cluster(job, /*start_backups=*/false);
    cluster.StartBackup(0, 1, /*join=*/true);
    JoinedWorker w;
    ASSERT_NO_FATAL_FAILURE(JoinWorker(job, cluster, kRows, &w));
    if (pushes_first) {
      ASSERT_NO_FATAL_FAILURE(w.Push(3));
    }
    ASSERT_OK(w.control->Membership(0, kMembershipAddBackup, 1, 2));
    ASSERT_NO_FATAL_FAILURE(w.Push(3));
    ASSERT_OK(w.client->Leave());
    cluster.Stop();
    EXPECT_EQ(cluster.primary(0).store().CopyValues(0),
              std::vector<float>(kRows, pushes_first ? 6.0f : 3.0f));
    BackupServer& b = cluster.backup(0, 1);
    EXPECT_FALSE(b.copying());
    EXPECT_EQ(b.store().CopyValues(0), cluster.primary(0).store().CopyValues(0));
    EXPECT_EQ(b.recent_pushes().Encode(), cluster.primary(0).recent_pushes().Encode());
  }
}

// A backup dies and starts again (as one that joins) before the authority
// told the primary: under etcd that is up to a lease's time. The
// primary's connection to its address reaches the new process, which
// refuses the entries, holding nothing (kFlagHoldsNoCopy). The primary goes
// on without it, acknowledging pushes, rather than stopping as it would for
// a backup whose copy differs; the authority then adds the new process and
// it takes a copy.
TEST(ReplicationTest, ABackupStartedAgainBeforeItsPrimaryHeardIsLeftOutUntilItJoins) {
  constexpr uint64_t kRows = 10;
  JobOptions job = ReplicatedJob(1, 2, TestJob().Workers(1).Asp().Table("w", kRows, 1,
                                                                       OptimizerKind::kAdd));
  ReplicatedCluster cluster(job);
  JoinedWorker w;
  ASSERT_NO_FATAL_FAILURE(JoinWorker(job, cluster, kRows, &w));
  ASSERT_NO_FATAL_FAILURE(w.Push(3));  // acknowledged by the backup
  cluster.KillBackup(0, 1);
  cluster.StartBackup(0, 1, /*join=*/true);
  ASSERT_NO_FATAL_FAILURE(w.Push(3));  // refused there; acknowledged without it
  auto stats = w.control->StructuredStats(0);
  ASSERT_OK(stats);
  // A log without backups reports none.
  EXPECT_TRUE(!stats->replication.has_value() || stats->replication->backups.empty());
  ASSERT_OK(w.control->Membership(0, kMembershipAddBackup, 1, 2));
  ASSERT_NO_FATAL_FAILURE(w.Push(3));
  ASSERT_OK(w.client->Leave());
  cluster.Stop();
  EXPECT_EQ(cluster.primary(0).store().CopyValues(0), std::vector<float>(kRows, 9.0f));
  BackupServer& b = cluster.backup(0, 1);
  EXPECT_FALSE(b.copying());
  EXPECT_EQ(b.store().CopyValues(0), cluster.primary(0).store().CopyValues(0));
}

// A hashed table on replicated shards: every push reaches the backups (or,
// under bsp with aggregation, each clock's sums once, with
// replication.after_aggregation), a backup that dies and rejoins takes the
// rows by id in its copy (adagrad's state and the admission counts with
// them, and the sums not applied yet), and the sums of integer pushes are
// exact on every copy.
class HashedReplicationTest : public ::testing::TestWithParam<Mode> {};

TEST_P(HashedReplicationTest, AHashedTableIsReplicatedAndARejoiningBackupCopiesItsRowsById) {
  const Mode m = GetParam();
  TableOptions sums = TestTable("sums", 0, 2, OptimizerKind::kAdd);
  sums.keys = KeyKind::kHashed;
  sums.max_rows = 100000;
  TableOptions emb = TestTable("emb", 0, 4, OptimizerKind::kAdagrad);
  emb.keys = KeyKind::kHashed;
  emb.max_rows = 100000;
  emb.init.kind = InitKind::kUniform;
  emb.init.value = 0.1f;
  // Rows only at an id's second push: the rejoining backup must take the
  // primary's counts too, or it would admit other ids than its primary.
  emb.admit.min_pushes = 2;
  emb.admit.sketch_width = 4096;
  // Rows evicted at a bound of 300 per shard (lru) and after 2 idle clocks:
  // the rejoining backup takes each row's use with it, or it would evict
  // other rows than its primary.
  TableOptions lru = TestTable("lru", 0, 1, OptimizerKind::kAdd);
  lru.keys = KeyKind::kHashed;
  lru.max_rows = 300;
  lru.evict.policy = EvictPolicy::kLru;
  lru.evict.idle_clocks = 2;
  JobOptions job = ReplicatedJob(2, 2,
                                 TestJob().Workers(2).Bsp().Table("w", 10, 1, OptimizerKind::kAdd)
                                     .Table(sums).Table(emb).Table(lru));
  job.consistency.aggregate = m.aggregate;
  job.replication.after_aggregation = m.aggregate && !m.per_push;
  ASSERT_OK(job.Validate());
  ReplicatedCluster cluster(job);
  // 3000 ids; worker r pushes r + 1 to the first 500 * (clock + 1) of them.
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 3000; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ull + 99);
  constexpr int kClocks = 8;
  std::promise<void> reached, rejoined;
  std::shared_future<void> rejoined_future = rejoined.get_future().share();
  std::thread authority([&] {
    reached.get_future().wait();
    EXPECT_NE(RejoinBackup(cluster, job), nullptr);
    rejoined.set_value();
  });
  std::vector<std::thread> workers;
  std::vector<Status> results(2);
  for (uint32_t r = 0; r < 2; ++r) {
    workers.emplace_back([&, r] {
      results[r] = [&]() -> Status {
        PS_ASSIGN_OR_RETURN(auto client, Client::Create(job, r, cluster.endpoints()));
        PS_RETURN_IF_ERROR(client->Join());
        for (int c = 0; c < kClocks; ++c) {
          const std::span<const uint64_t> part(ids.data(), std::min<size_t>(ids.size(), 500 * (c + 1)));
          // A window of 300 ids moving by 100 a clock (idle after 2 clocks),
          // and at clock 1 a burst of 1000 more (over the bound).
          std::vector<uint64_t> window(ids.begin() + 100 * c, ids.begin() + 100 * c + 300);
          if (c == 1) window.insert(window.end(), ids.begin() + 2000, ids.end());
          std::vector<Ticket> pushes;
          PS_ASSIGN_OR_RETURN(pushes.emplace_back(),
                              client->Push(1, part, SharedFloats::Take(std::vector<float>(
                                                        part.size() * 2, float(r + 1)))));
          PS_ASSIGN_OR_RETURN(pushes.emplace_back(),
                              client->Push(2, part, SharedFloats::Take(std::vector<float>(
                                                        part.size() * 4, 0.01f * float(r + 1)))));
          PS_ASSIGN_OR_RETURN(pushes.emplace_back(),
                              client->Push(3, window, SharedFloats::Take(std::vector<float>(
                                                          window.size(), float(r + 1)))));
          // The clock before the pushes' acknowledgements: under
          // replication after aggregation they come with the clock's sums.
          PS_ASSIGN_OR_RETURN(Ticket t, client->Clock());
          for (Ticket push : pushes) PS_RETURN_IF_ERROR(client->Wait(push));
          PS_RETURN_IF_ERROR(client->Wait(t));
          if (r == 0 && c == 2) reached.set_value();
          if (r == 0 && c == 3) rejoined_future.wait();  // clocks pass after the copy
        }
        return client->Leave();
      }();
    });
  }
  for (auto& t : workers) t.join();
  authority.join();
  for (const Status& st : results) EXPECT_OK(st);
  cluster.Stop();
  ExpectSameCopies(cluster, job);  // every table's checksum, the hashed ones too
  EXPECT_FALSE(cluster.backup(0, 1).copying());
  // The integer sums are exact on every copy: the i-th id was pushed 1 + 2
  // a clock from clock floor(i / 500) on (their mean, 1.5, under
  // aggregation).
  const float per_clock = m.aggregate ? 1.5f : 3.0f;
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
  uint64_t rows = 0;
  for (uint32_t s = 0; s < 2; ++s) {
    for (const ShardStore* store : {&cluster.primary(s).store(), &cluster.backup(s, 1).store()}) {
      const ShardSnapshot snapshot = store->Snapshot(job, s, 0).value();
      const TableSnapshot& t = snapshot.tables[1];
      for (size_t r = 0; r < t.ids.size(); ++r) {
        const float expected = per_clock * static_cast<float>(kClocks - index.at(t.ids[r]) / 500);
        ASSERT_EQ(t.values[2 * r], expected) << "shard " << s << " id " << t.ids[r];
        ASSERT_EQ(t.values[2 * r + 1], expected) << "shard " << s << " id " << t.ids[r];
      }
    }
    rows += cluster.primary(s).store().stored_rows(1);
    EXPECT_EQ(cluster.backup(s, 1).store().stored_rows(1),
              cluster.primary(s).store().stored_rows(1));
  }
  EXPECT_EQ(rows, ids.size());
  for (uint32_t s = 0; s < 2; ++s) {
    const ShardStore& primary = cluster.primary(s).store();
    EXPECT_GT(primary.evicted_rows(3), 0u) << "shard " << s;
    EXPECT_GT(primary.expired_rows(3), 0u) << "shard " << s;
    EXPECT_EQ(cluster.backup(s, 1).store().stored_rows(3), primary.stored_rows(3));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, HashedReplicationTest,
                         ::testing::Values(Mode{"bsp", ConsistencyMode::kBsp, 0, false},
                                           Mode{"bsp_aggregate", ConsistencyMode::kBsp, 0, true},
                                           Mode{"bsp_aggregate_per_push", ConsistencyMode::kBsp,
                                                0, true, true}),
                         [](const auto& p) { return std::string(p.param.name); });

// Under bsp with aggregation, pushes replicated one by one: a backup that
// rejoins while a clock's pushes wait in their sums takes those sums in
// its copy, a hashed table's by id and in its order, and applies them with
// the clock's end as its primary does. Without them its rows would lack
// that clock's pushes.
TEST(ReplicationTest, ARejoiningBackupTakesTheSumsNotAppliedYetOfHashedTables) {
  TableOptions sums = TestTable("sums", 0, 2, OptimizerKind::kAdd);
  sums.keys = KeyKind::kHashed;
  sums.max_rows = 100000;
  TableOptions emb = TestTable("emb", 0, 3, OptimizerKind::kAdam);
  emb.keys = KeyKind::kHashed;
  emb.max_rows = 100;  // a shard's sum of about 200 ids holds 100 of them
  emb.evict.policy = EvictPolicy::kLru;
  JobOptions job = ReplicatedJob(2, 2,
                                 TestJob().Workers(2).Bsp().Table("w", 10, 1, OptimizerKind::kAdd)
                                     .Table(sums).Table(emb));
  job.consistency.aggregate = true;
  job.replication.after_aggregation = false;
  ASSERT_OK(job.Validate());
  ReplicatedCluster cluster(job);
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t r = 0; r < 2; ++r) {
    clients.push_back(Client::Create(job, r, cluster.endpoints()).value());
    ASSERT_OK(clients[r]->Join());
  }
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 1000; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ull + 5);
  constexpr int kClocks = 6;
  for (int c = 0; c < kClocks; ++c) {
    for (uint32_t r = 0; r < 2; ++r) {
      // Each clock another order of the ids and another set of emb's.
      std::vector<uint64_t> order(ids.rbegin(), ids.rend());
      if ((c + r) % 2 == 0) order = ids;
      ASSERT_OK(clients[r]->PushSync(
          0, std::vector<uint64_t>{3, 4},
          SharedFloats::Take(std::vector<float>(2, static_cast<float>(r + 1)))));
      ASSERT_OK(clients[r]->PushSync(
          1, order, SharedFloats::Take(std::vector<float>(order.size() * 2, float(r + 1)))));
      const std::vector<uint64_t> some(ids.begin() + 100 * c, ids.begin() + 100 * c + 400);
      std::vector<float> grads(some.size() * 3);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i % 29 + r);
      ASSERT_OK(clients[r]->PushSync(2, some, SharedFloats::Take(std::move(grads))));
    }
    // Every push of clock c acknowledged: on the primary and its backup,
    // in the sums. The backup of shard 0 dies now and takes a copy.
    if (c == 2) {
      ASSERT_NE(RejoinBackup(cluster, job), nullptr);
    }
    std::vector<Ticket> clocks;
    for (auto& client : clients) clocks.push_back(client->Clock().value());
    for (uint32_t r = 0; r < 2; ++r) ASSERT_OK(clients[r]->Wait(clocks[r]));
  }
  for (auto& client : clients) ASSERT_OK(client->Leave());
  cluster.Stop();
  ExpectSameCopies(cluster, job);
  EXPECT_TRUE(cluster.backup(0, 1).in_sync());
  EXPECT_EQ(cluster.backup(0, 1).clocks().min_clock(), kClocks);
  // Exact: each id holds 1.5 a clock on every copy, the copied clock's too.
  for (uint32_t s = 0; s < 2; ++s) {
    for (const ShardStore* store : {&cluster.primary(s).store(), &cluster.backup(s, 1).store()}) {
      const ShardSnapshot snapshot = store->Snapshot(job, s, 0).value();
      EXPECT_GT(snapshot.tables[1].ids.size(), 300u);
      for (float v : snapshot.tables[1].values) ASSERT_EQ(v, 1.5f * kClocks) << "shard " << s;
      EXPECT_EQ(snapshot.tables[2].ids.size(), 100u);
    }
  }
}

// A push that a primary refuses for a result that is not finite
// (server.on_non_finite_result: refuse) still leaves its marks on an
// evicting hashed table: the rows evicted to make room for its new ids
// stay evicted, and the rows it named count it as a use. The backups take
// it too and refuse it the same way, so every copy holds the same rows and
// later evictions pick the same victims; none records it as applied.
TEST(ReplicationTest, APushRefusedForAResultThatIsNotFiniteLeavesEveryReplicaAlike) {
  TableOptions emb = TestTable("emb", 0, 1, OptimizerKind::kAdd);
  emb.keys = KeyKind::kHashed;
  emb.max_rows = 8;
  emb.evict.policy = EvictPolicy::kLru;
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table(emb));
  job.server.on_non_finite_result = NonFiniteResultPolicy::kRefuse;
  ASSERT_OK(job.Validate());
  ReplicatedCluster cluster(job);
  auto client = Client::Create(job, 0, cluster.endpoints()).value();
  ASSERT_OK(client->Join());
  const auto push = [&](std::vector<uint64_t> ids, float grad) {
    const size_t n = ids.size();
    return client->PushSync(0, std::move(ids), SharedFloats::Take(std::vector<float>(n, grad)));
  };
  // Both shards at their bound, and one id near the float range's end.
  std::vector<uint64_t> full;
  for (uint64_t i = 0; i < 40; ++i) full.push_back(i * 0x9e3779b97f4a7c15ull + 1);
  ASSERT_OK(push(full, 1.0f));
  constexpr uint64_t kHuge = 77;
  ASSERT_OK(push({kHuge}, 3e38f));
  // New ids first (rows evicted for them on both shards), then the huge
  // id again: its shard refuses its part of the push.
  std::vector<uint64_t> refused;
  for (uint64_t i = 0; i < 20; ++i) refused.push_back(i * 0xbf58476d1ce4e5b9ull + 3);
  refused.push_back(kHuge);
  const Status status = push(refused, 3e38f);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << status.ToString();
  // More pushes at the bound: their victims follow every earlier use.
  for (int round = 0; round < 3; ++round) {
    std::vector<uint64_t> more(full.begin() + round * 10, full.begin() + round * 10 + 12);
    ASSERT_OK(push(more, 1.0f));
  }
  ASSERT_OK(client->Leave());
  cluster.Stop();
  uint64_t refused_rows = 0;
  for (uint32_t s = 0; s < 2; ++s) refused_rows += cluster.primary(s).store().refused_rows(0);
  EXPECT_EQ(refused_rows, 1u);
  ExpectSameCopies(cluster, job);
}

TEST(ReplicationTest, IntegerPushesSumExactlyOnEveryReplica) {
  constexpr uint64_t kRows = 5000;
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(2).Bsp().Table("w", kRows, 1,
                                                                        OptimizerKind::kAdd));
  ReplicatedCluster cluster(job);
  const std::vector<float> expected = Train(job, cluster, kRows, 20);
  cluster.Stop();
  EXPECT_EQ(Model(job, cluster, kRows), expected);
  ExpectSameCopies(cluster, job);
}

// The replicas of a shard of the next map after a reshard in memory each
// build the same state from the old shards (server/reshard_follower.h):
// the primary made from it replicates to the backups made from it, in sync
// from its first entry, as at a job's start, and every replica ends with
// the exact sums, bit for bit alike.
TEST(ReplicationTest, APrimaryAndBackupsStartedFromTheSameStateStayInSyncFromTheFirstEntry) {
  constexpr uint64_t kRows = 5000;
  JobOptions job = ReplicatedJob(2, 3, TestJob().Workers(2).Bsp().Table("w", kRows, 1,
                                                                        OptimizerKind::kAdd));
  ReplicatedCluster cluster(job, /*start_backups=*/true, nullptr, /*from_states=*/true);
  const std::vector<float> expected = Train(job, cluster, kRows, 20);
  cluster.Stop();
  EXPECT_EQ(Model(job, cluster, kRows), expected);
  ExpectSameCopies(cluster, job);
  for (uint32_t s = 0; s < 2; ++s) {
    for (uint32_t j = 1; j < 3; ++j) {
      EXPECT_TRUE(cluster.backup(s, j).in_sync());
      EXPECT_GT(cluster.backup(s, j).applied(), 20u);
    }
  }
}

TEST(ReplicationTest, ABackupStartsFromAStateOnlyAsABackupOfTheJob) {
  JobOptions job = ReplicatedJob(1, 2, TestJob().Workers(1).Table("w", 10));
  BackupServer::State primary_slot;
  primary_slot.store = ShardStore::Create(job, 0).value();
  EXPECT_TRUE(Refused(BackupServer::CreateFromState(job, 0, std::move(primary_slot)).status(),
                      StatusCode::kInvalidArgument, "cannot start as a backup from a state"));
  BackupServer::State no_store;
  no_store.slot = 1;
  EXPECT_TRUE(Refused(BackupServer::CreateFromState(job, 0, std::move(no_store)).status(),
                      StatusCode::kInvalidArgument, "replica 1 of shard 0 cannot start"));
}

TEST(ReplicationTest, APushIsAcknowledgedOnlyOnceTheBackupHasIt) {
  constexpr uint64_t kRows = 100;
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table("w", kRows, 1,
                                                                       OptimizerKind::kAdd));
  ReplicatedCluster cluster(job, /*start_backups=*/false);
  auto client = Client::Create(job, 0, cluster.endpoints()).value();
  // The HELLO waits for the log as it is (empty): answered at once.
  ASSERT_OK(client->Join());
  bool acked = false;
  auto push = client->PushDense(0, SharedFloats::Take(std::vector<float>(kRows, 2.0f)),
                                [&](const Status& s) { acked = s.ok(); });
  ASSERT_OK(push.status());
  // No backup is running: the push is applied on the primaries but not
  // acknowledged.
  const auto until = std::chrono::steady_clock::now() + milliseconds(500);
  while (std::chrono::steady_clock::now() < until) ASSERT_OK(client->Poll(50));
  EXPECT_FALSE(acked);
  EXPECT_EQ(client->in_flight(), 2u);  // one part per shard
  cluster.StartBackups();
  ASSERT_OK(client->WaitAll());
  EXPECT_TRUE(acked);
  ASSERT_OK(client->Leave());
  cluster.Stop();
  EXPECT_EQ(Model(job, cluster, kRows), std::vector<float>(kRows, 2.0f));
  ExpectSameCopies(cluster, job);
}

// The primary's connection to its backup goes through the Env's channels
// (ChannelUse::kReplication). Cut, nothing reaches the backup: a push is
// applied and logged on the primary but not acknowledged, however long the
// worker waits, until the authority drops the backup; then it is.
TEST(ReplicationTest, APrimaryCutOffFromItsBackupAcknowledgesNothingUntilTheAuthorityDropsIt) {
  constexpr uint64_t kRows = 100;
  JobOptions job = ReplicatedJob(1, 2, TestJob().Workers(1).Asp().Table("w", kRows, 1,
                                                                       OptimizerKind::kAdd));
  FaultyChannels channels;
  TestEnv env;
  env.set_channels(channels.Factory());
  ReplicatedCluster cluster(job, /*start_backups=*/true, &env);
  const FaultyChannel::Link link =
      channels.replication_link(ConnectEndpoint(ReplicaAddress(job, 0, 1).value()));
  auto client = Client::Create(job, 0, cluster.endpoints()).value();
  auto control = ControlClient::Create(job, cluster.endpoints()).value();
  ASSERT_OK(client->Join());
  ASSERT_OK(client->Wait(*client->PushDense(0, SharedFloats::Take(std::vector<float>(kRows, 1.0f)))));

  link->store(true);
  bool acked = false;
  ASSERT_OK(client->PushDense(0, SharedFloats::Take(std::vector<float>(kRows, 2.0f)),
                              [&](const Status& s) { acked = s.ok(); })
                .status());
  // The primary has the push in its log, past what its backup acknowledged.
  ShardStats::Replication log;
  for (int i = 0; i < 500; ++i) {
    ASSERT_OK(client->Poll(10));
    auto stats = control->StructuredStats(0);
    ASSERT_OK(stats);
    ASSERT_TRUE(stats->replication.has_value());
    log = *stats->replication;
    if (log.last_seq > log.committed) break;
  }
  ASSERT_GT(log.last_seq, log.committed) << "the push never reached the primary's log";
  // Its acknowledgement waits on the backup: none comes while the link is cut.
  for (int i = 0; i < 20; ++i) ASSERT_OK(client->Poll(10));
  EXPECT_FALSE(acked);
  EXPECT_EQ(client->in_flight(), 1u);

  cluster.KillBackup(0, 1);
  ASSERT_OK(control->Membership(0, kMembershipDropBackup, 1, 1));
  ASSERT_OK(client->WaitAll());
  EXPECT_TRUE(acked);
  ASSERT_OK(client->Leave());
  cluster.Stop();
  EXPECT_EQ(Model(job, cluster, kRows), std::vector<float>(kRows, 3.0f));
}

// A primary's connection to a backup that dropped (a backup restarting) is
// tried again every liveness.reconnect_ms.
TEST(ReplicationTest, APrimaryTriesItsBackupsAgainAtTheJobsReconnectInterval) {
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table("w", 10, 1,
                                                                       OptimizerKind::kAdd));
  job.liveness.reconnect_ms = 45;
  ChannelLog log;
  TestEnv env;
  env.set_channels(log.Factory());
  ReplicatedCluster cluster(job, /*start_backups=*/true, &env);
  int replication = 0;
  for (const ChannelOptions& made : log.made()) {
    if (made.use != ChannelUse::kReplication) continue;
    ++replication;
    EXPECT_EQ(made.reconnect_ms, 45) << made.endpoint;
  }
  EXPECT_EQ(replication, 2);  // one backup of each of the 2 shards
  cluster.Stop();
}

TEST(ReplicationTest, ABackupServesNoWorkerAndRefusesEntriesOutOfOrder) {
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table("w", 10, 1,
                                                                       OptimizerKind::kAdd));
  auto backup = BackupServer::Create(job, 0, 1, "tcp://127.0.0.1:*").value();
  std::thread runner([&] { backup->Run().IgnoreError(); });
  RawPeer peer(backup->endpoint());
  auto exchange = [&](MessageHeader h) { return peer.Exchange(h); };
  // A worker's request: refused as not the primary's, which sends the
  // client looking for the primary.
  MessageHeader pull;
  pull.op = Op::kPull;
  pull.table = 0;
  pull.count = 5;
  pull.dim = 1;
  pull.flags = kFlagDenseRange;
  MessageHeader reply = exchange(pull);
  EXPECT_EQ(reply.op, Op::kError);
  EXPECT_EQ(reply.flags, kFlagNotPrimary);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition,
                     "is a backup"));
  // Asked whether it serves: no.
  MessageHeader probe;
  probe.op = Op::kPrimary;
  reply = exchange(probe);
  EXPECT_EQ(reply.op, Op::kPrimaryOk);
  EXPECT_EQ(reply.flags & kFlagServing, 0u);
  // Entry 2 before entry 1: refused, nothing applied.
  MessageHeader entry;
  entry.op = Op::kReplicate;
  entry.request_id = 2;
  entry.flags = static_cast<uint32_t>(ReplicaEntry::kFinish);
  entry.worker = 0;
  entry.clock = 0;
  reply = exchange(entry);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kDataLoss, "expected"));
  // Entry 1 naming a worker the job does not have: refused.
  entry.request_id = 1;
  entry.worker = 5;
  reply = exchange(entry);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kInvalidArgument, "worker 5"));
  // An unknown kind: refused.
  entry.worker = 0;
  entry.flags = 99;
  reply = exchange(entry);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kInvalidArgument, "kind"));
  // The good entry 1: applied, and sent again: acknowledged, not applied twice.
  entry.flags = static_cast<uint32_t>(ReplicaEntry::kFinish);
  entry.clock = 3;
  reply = exchange(entry);
  EXPECT_EQ(reply.op, Op::kReplicateOk);
  EXPECT_EQ(reply.request_id, 1u);
  entry.clock = 7;
  reply = exchange(entry);
  EXPECT_EQ(reply.op, Op::kReplicateOk);
  // Entry 2 of epoch 5 (a membership change), then entry 3 of epoch 4: a
  // primary fenced out by epoch 5 is refused, and says so.
  entry.request_id = 2;
  entry.epoch = 5;
  entry.clock = 4;
  reply = exchange(entry);
  EXPECT_EQ(reply.op, Op::kReplicateOk);
  entry.request_id = 3;
  entry.epoch = 4;
  entry.clock = 5;
  reply = exchange(entry);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition,
                      "fenced out by epoch 5"));
  backup->Stop();
  runner.join();
  EXPECT_EQ(backup->applied(), 2u);
  EXPECT_EQ(backup->refused(), 4u);
  EXPECT_EQ(backup->clocks().clock(0), 5);
  EXPECT_EQ(backup->store().CopyValues(0), std::vector<float>(5, 0.0f));
}

MessageHeader CopyEntry(ReplicaEntry kind, uint64_t as_of) {
  MessageHeader h;
  h.op = Op::kReplicate;
  h.request_id = as_of;
  h.flags = static_cast<uint32_t>(kind);
  return h;
}

template <typename T>
std::vector<Frame> OneFrame(const std::vector<T>& data) {
  std::vector<Frame> frames;
  frames.push_back(Frame::CopyOf(data.data(), data.size() * sizeof(T)));
  return frames;
}

// replication.authority etcd: a primary acknowledges writes only under a
// valid WriteLease. Once it lapses, a push that waits for the backup is
// refused instead of acknowledged, new writes are refused, PRIMARY says it
// does not serve, and STATS says it accepts nothing; each refusal carries
// kFlagNotPrimary, which sends a client looking for the primary.
TEST(ReplicationTest, APrimaryWhoseWriteLeaseLapsedAcknowledgesNothingAndSaysSo) {
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table("w", 10, 1,
                                                                       OptimizerKind::kAdd));
  // No backup runs: a push waits for it.
  auto server = ShardServer::Create(job, 0, "tcp://127.0.0.1:*").value();
  WriteLease lease;
  lease.Extend(WriteLease::Clock::now() + std::chrono::seconds(30), 7);
  server->SetWriteLease(&lease);
  std::thread runner([&] { server->Run().IgnoreError(); });
  RawPeer peer(server->endpoint());
  MessageHeader probe;
  probe.op = Op::kPrimary;
  MessageHeader reply = peer.Exchange(probe);
  EXPECT_EQ(reply.op, Op::kPrimaryOk);
  EXPECT_EQ(reply.flags, kFlagServing);
  EXPECT_EQ(reply.epoch, 7);
  MessageHeader push;
  push.op = Op::kPush;
  push.request_id = 11;
  push.table = 0;
  push.count = 5;  // shard 0's rows of 10
  push.dim = 1;
  push.flags = kFlagDenseRange;
  push.session = 1;
  peer.Send(push, [] {
    std::vector<Frame> v;
    v.push_back(Frame::CopyOf(std::vector<float>(5, 1.0f).data(), 5 * sizeof(float)));
    return v;
  }());
  // Handled in order: once STATS is answered, the push is deferred (the
  // backup is not there), counted and unanswered.
  MessageHeader count;
  count.op = Op::kStats;
  count.worker = kControlWorker;
  EXPECT_EQ(StatsNumbers(peer.Exchange(count).text)["pushes"], 1);
  lease.Revoke();
  reply = peer.Receive();
  EXPECT_EQ(reply.op, Op::kError);
  EXPECT_EQ(reply.request_id, 11u);
  EXPECT_EQ(reply.flags, kFlagNotPrimary);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition, "fenced"));
  push.request_id = 12;
  reply = peer.Exchange(push, [] {
    std::vector<Frame> v;
    v.push_back(Frame::CopyOf(std::vector<float>(5, 1.0f).data(), 5 * sizeof(float)));
    return v;
  }());
  EXPECT_EQ(reply.request_id, 12u);
  EXPECT_EQ(reply.flags, kFlagNotPrimary);
  reply = peer.Exchange(probe);
  EXPECT_EQ(reply.op, Op::kPrimaryOk);
  EXPECT_EQ(reply.flags & kFlagServing, 0u);
  MessageHeader stats;
  stats.op = Op::kStats;
  stats.worker = kControlWorker;
  reply = peer.Exchange(stats);
  EXPECT_NE(reply.text.find("primary epoch 7 accepting 0 fenced_refusals 2"), std::string::npos)
      << reply.text;
  server->Stop();
  runner.join();
}

TEST(ReplicationTest, AJoiningBackupIsPromotedOnlyOnceItHoldsEveryAcknowledgedEntry) {
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table("w", 10, 1,
                                                                       OptimizerKind::kAdd));
  // Shard 0 owns rows [0, 5).
  auto backup = BackupServer::Create(job, 0, 1, "tcp://127.0.0.1:*", -1, /*join=*/true).value();
  EXPECT_TRUE(backup->copying());
  std::thread runner([&] { backup->Run().IgnoreError(); });
  RawPeer peer(backup->endpoint());
  // The authority cannot promote it: it holds no whole state.
  MessageHeader promote;
  promote.op = Op::kMembership;
  promote.worker = kControlWorker;
  promote.flags = kMembershipPromote;
  promote.epoch = 1;
  MessageHeader reply = peer.Exchange(promote);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition,
                     "still taking"));
  // The copy: its beginning, rows, clocks (worker 0 at clock 3), recent
  // pushes, end.
  peer.Send(CopyEntry(ReplicaEntry::kCopyBegin, 7));
  MessageHeader rows = CopyEntry(ReplicaEntry::kCopyRows, 7);
  rows.table = 0;
  rows.first_row = 0;
  rows.count = 5;
  // Only the copy's end is answered.
  peer.Send(rows, OneFrame(std::vector<float>{1, 2, 3, 4, 5}));
  // clock, counted, minimum, no clocks with members (no backup workers)
  const std::vector<int64_t> clocks = {3, 1, 3, 0};
  peer.Send(CopyEntry(ReplicaEntry::kCopyClocks, 7), OneFrame(clocks));
  peer.Send(CopyEntry(ReplicaEntry::kCopyRecent, 7), OneFrame(std::vector<uint64_t>{0}));
  MessageHeader end = CopyEntry(ReplicaEntry::kCopyEnd, 7);
  end.count = 1;
  reply = peer.Exchange(end);
  EXPECT_EQ(reply.op, Op::kReplicateOk);
  EXPECT_EQ(reply.request_id, 7u);
  EXPECT_EQ(reply.flags, static_cast<uint32_t>(ReplicaEntry::kCopyEnd));
  // Whole, but not in sync: the primary may have acknowledged entries
  // after 7 that have not come yet.
  reply = peer.Exchange(promote);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition,
                      "not yet applied every entry"));
  // Then the log goes on from entry 8.
  MessageHeader finish = CopyEntry(ReplicaEntry::kFinish, 8);
  finish.worker = 0;
  finish.clock = 3;
  EXPECT_EQ(peer.Exchange(finish).op, Op::kReplicateOk);
  // A word that it is in sync as of an entry it has not applied changes
  // nothing; as of the one it applied last, it may be promoted.
  peer.Send(CopyEntry(ReplicaEntry::kInSync, 9), {});
  reply = peer.Exchange(promote);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition,
                      "not yet applied every entry"));
  peer.Send(CopyEntry(ReplicaEntry::kInSync, 8), {});
  reply = peer.Exchange(promote);
  EXPECT_EQ(reply.op, Op::kMembershipOk);
  runner.join();
  EXPECT_TRUE(backup->promoted());
  EXPECT_TRUE(backup->in_sync());
  EXPECT_FALSE(backup->copying());
  EXPECT_EQ(backup->refused(), 1u);
  EXPECT_EQ(backup->clocks().clock(0), 4);
  EXPECT_EQ(backup->store().CopyValues(0), (std::vector<float>{1, 2, 3, 4, 5}));
}

TEST(ReplicationTest, AJoiningBackupRefusesAnEntryBeforeItsCopyAndACopyWithRowsMissing) {
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table("w", 10, 1,
                                                                       OptimizerKind::kAdd));
  for (int c = 0; c < 3; ++c) {
    auto backup = BackupServer::Create(job, 0, 1, "tcp://127.0.0.1:*", -1, true).value();
    std::thread runner([&] { backup->Run().IgnoreError(); });
    RawPeer peer(backup->endpoint());
    MessageHeader reply;
    if (c == 0) {
      // A log entry before the copy.
      MessageHeader finish = CopyEntry(ReplicaEntry::kFinish, 1);
      reply = peer.Exchange(finish);
      EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition,
                          "still taking"));
    } else if (c == 1) {
      // Rows [1, 5) where [0, ...) were expected.
      peer.Send(CopyEntry(ReplicaEntry::kCopyBegin, 1));
      MessageHeader rows = CopyEntry(ReplicaEntry::kCopyRows, 1);
      rows.first_row = 1;
      rows.count = 4;
      reply = peer.Exchange(rows, OneFrame(std::vector<float>(4, 1.0f)));
      EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kDataLoss, "expected"));
    } else {
      // An end with no rows at all.
      peer.Send(CopyEntry(ReplicaEntry::kCopyBegin, 1));
      reply = peer.Exchange(CopyEntry(ReplicaEntry::kCopyEnd, 1));
      EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kDataLoss, "missing"));
    }
    backup->Stop();
    runner.join();
    EXPECT_TRUE(backup->copying());
    EXPECT_EQ(backup->refused(), 1u);
    EXPECT_EQ(backup->applied(), 0u);
  }
}

TEST(ReplicationTest, AJoiningBackupTakesOnlyACopyForItselfAndStopsWhenSentASecond) {
  // Shard 0 owns rows [0, 5): one block. This process is incarnation 42
  // of replica 1 (under etcd: its lease).
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table("w", 10, 1,
                                                                       OptimizerKind::kAdd));
  auto backup = BackupServer::Create(job, 0, 1, "tcp://127.0.0.1:*", -1, /*join=*/true).value();
  backup->SetIncarnation(42);
  std::thread runner([&] { backup->Run().IgnoreError(); });
  RawPeer peer(backup->endpoint());
  const std::vector<int64_t> clocks = {3, 1, 3, 0};
  auto entry = [](ReplicaEntry kind, int64_t epoch) {
    MessageHeader h = CopyEntry(kind, 7);
    h.epoch = epoch;
    return h;
  };
  // Refused as FailedPrecondition naming `why`, saying that this replica
  // holds nothing (kFlagHoldsNoCopy), so its primary goes on without it.
  auto refused_holding_nothing = [&](const MessageHeader& h, std::vector<Frame> frames,
                                     const char* why) {
    const MessageHeader reply = peer.Exchange(h, std::move(frames));
    EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition, why));
    EXPECT_EQ(reply.flags & kFlagHoldsNoCopy, kFlagHoldsNoCopy);
  };
  // The rest of a copy of epoch 4 whose beginning went to the process that
  // listened here before (ZeroMQ sends what that connection still held to
  // this one), each entry.
  refused_holding_nothing(entry(ReplicaEntry::kCopyClocks, 4), OneFrame(clocks),
                          "of a copy of epoch 4 without its beginning");
  MessageHeader end = entry(ReplicaEntry::kCopyEnd, 4);
  end.count = 1;
  refused_holding_nothing(end, {}, "without its beginning");
  // A log entry too, as before its copy.
  MessageHeader finish = entry(ReplicaEntry::kFinish, 4);
  finish.request_id = 8;
  refused_holding_nothing(finish, {}, "still taking");
  // A copy for incarnation 41, the process before it, which the primary's
  // authority took for the one here.
  MessageHeader begin = entry(ReplicaEntry::kCopyBegin, 5);
  begin.session = 41;
  refused_holding_nothing(begin, {},
                          "for incarnation 41, another process of this replica (this one is 42)");
  EXPECT_TRUE(backup->copying());
  EXPECT_EQ(backup->refused(), 4u);

  // Its own copy (the authority joins it at epoch 6) is taken whole.
  begin = entry(ReplicaEntry::kCopyBegin, 6);
  begin.session = 42;
  peer.Send(begin);
  MessageHeader rows = entry(ReplicaEntry::kCopyRows, 6);
  rows.first_row = 0;
  rows.count = 5;
  peer.Send(rows, OneFrame(std::vector<float>{1, 2, 3, 4, 5}));
  peer.Send(entry(ReplicaEntry::kCopyClocks, 6), OneFrame(clocks));
  peer.Send(entry(ReplicaEntry::kCopyRecent, 6), OneFrame(std::vector<uint64_t>{0}));
  // An entry of the old copy among them is refused and changes nothing.
  refused_holding_nothing(entry(ReplicaEntry::kCopyClocks, 4), OneFrame(clocks),
                          "of a copy of epoch 4 without its beginning");
  end.epoch = 6;
  MessageHeader reply = peer.Exchange(end);
  EXPECT_EQ(reply.op, Op::kReplicateOk);
  EXPECT_EQ(reply.flags, static_cast<uint32_t>(ReplicaEntry::kCopyEnd));
  EXPECT_FALSE(backup->copying());
  EXPECT_EQ(backup->applied(), 7u);
  EXPECT_EQ(backup->store().CopyValues(0), (std::vector<float>{1, 2, 3, 4, 5}));
  peer.Send(entry(ReplicaEntry::kInSync, 7));
  EXPECT_EQ(backup->must_rejoin(), "");

  // A second copy for it: its primary dropped it from its log, so entries
  // went elsewhere since. It refuses the copy, is in sync no more (never
  // promoted), and stops, to be started again (ps_server exits 4).
  begin.epoch = 8;
  reply = peer.Exchange(begin);
  EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kFailedPrecondition,
                      "holds a copy, and its primary sends a new one (epoch 8)"));
  EXPECT_EQ(reply.flags & kFlagHoldsNoCopy, 0u);
  runner.join();  // it stopped by itself
  EXPECT_FALSE(backup->in_sync());
  EXPECT_FALSE(backup->in_sync_now());
  EXPECT_NE(backup->must_rejoin().find("start it again and it rejoins"), std::string::npos)
      << backup->must_rejoin();
  EXPECT_EQ(backup->store().CopyValues(0), (std::vector<float>{1, 2, 3, 4, 5}));
}

// An entry a backup must refuse: what it is, the entry and its frames,
// and a part of the refusal that names what is wrong.
struct RefusedEntry {
  const char* what;
  MessageHeader header;
  std::vector<Frame> frames;
  const char* names;
};

// A joining backup's copy of a hashed table's sum (kCopySum: clock, table
// and count; its ids and rows): a forged one is refused naming what is
// wrong, the copy stops there, and the backup holds nothing of it.
TEST(ReplicationTest, AJoiningBackupRefusesAForgedSumOfAHashedTable) {
  TableOptions h = TestTable("h", 0, 2, OptimizerKind::kAdd);
  h.keys = KeyKind::kHashed;
  h.max_rows = 10;
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(2).Bsp().Table(h));
  job.consistency.aggregate = true;
  ASSERT_OK(job.Validate());
  // An id of shard 1's hash slots: not shard 0's.
  const TableLayout other = ShardStore::Create(job, 1).value()->layouts()[0];
  uint64_t foreign = 1;
  while (!other.owned.Contains(IdSlot(foreign, other.hash_seed, other.slots))) ++foreign;
  auto sum = [](int64_t clock, uint64_t count) {
    MessageHeader entry = CopyEntry(ReplicaEntry::kCopySum, 3);
    entry.clock = clock;
    entry.count = count;
    return entry;
  };
  auto frames = [](const std::vector<uint64_t>& ids, size_t floats) {
    std::vector<Frame> f = OneFrame(ids);
    f.push_back(Frame::CopyOf(std::vector<float>(floats, 1.5f).data(), floats * sizeof(float)));
    return f;
  };
  std::vector<RefusedEntry> cases;
  cases.push_back({"more ids than its count", sum(1, 2), frames({1, 2, 3}, 6),
                   "of 2 ids with an ids frame of 24 bytes, not 16"});
  cases.push_back({"rows for fewer ids", sum(1, 3), frames({1, 2, 3}, 4),
                   "with a rows frame of 16 bytes, not 24"});
  cases.push_back({"an id twice", sum(1, 3), frames({1, 2, 1}, 6), "names id 1 twice"});
  cases.push_back({"more ids than the table holds", sum(1, 11), frames({}, 0),
                   "holds at most 10 rows"});
  cases.push_back({"an id of another shard", sum(1, 1), frames({foreign}, 2),
                   "outside this shard's slots"});
  cases.push_back({"one frame", sum(1, 1), OneFrame(std::vector<uint64_t>{1}),
                   "malformed shape"});
  for (RefusedEntry& c : cases) {
    auto backup = BackupServer::Create(job, 0, 1, "tcp://127.0.0.1:*", -1, true).value();
    std::thread runner([&] { backup->Run().IgnoreError(); });
    RawPeer peer(backup->endpoint());
    peer.Send(CopyEntry(ReplicaEntry::kCopyBegin, 3));
    const MessageHeader reply = peer.Exchange(c.header, std::move(c.frames));
    EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kInvalidArgument, c.names))
        << c.what;
    backup->Stop();
    runner.join();
    EXPECT_TRUE(backup->copying()) << c.what;
    EXPECT_EQ(backup->store().sum_clocks(), 0u) << c.what;
  }
}

// A kAggregate entry (replication after aggregation): the ids of the
// pushes in the sums, their index (clock, table, count), then each sum's
// values and touched blocks.
std::vector<Frame> AggregateFrames(const std::vector<uint64_t>& ids,
                                   const std::vector<int64_t>& index,
                                   const std::vector<std::vector<float>>& values,
                                   const std::vector<std::vector<uint8_t>>& touched) {
  std::vector<Frame> frames;
  frames.push_back(Frame::CopyOf(ids.data(), ids.size() * sizeof(uint64_t)));
  frames.push_back(Frame::CopyOf(index.data(), index.size() * sizeof(int64_t)));
  for (size_t k = 0; k < values.size(); ++k) {
    frames.push_back(Frame::CopyOf(values[k].data(), values[k].size() * sizeof(float)));
    frames.push_back(Frame::CopyOf(touched[k].data(), touched[k].size()));
  }
  return frames;
}

// A refused push entry (kRefusedPush) is taken only for a hashed table and
// only when this backup refuses it too.
TEST(ReplicationTest, ABackupTakesARefusedPushOnlyWhenItRefusesItToo) {
  TableOptions emb = TestTable("emb", 0, 1, OptimizerKind::kAdd);
  emb.keys = KeyKind::kHashed;
  emb.max_rows = 100;
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Asp().Table("w", 10, 1,
                                                                       OptimizerKind::kAdd)
                                           .Table(emb));
  job.server.on_non_finite_result = NonFiniteResultPolicy::kRefuse;
  ASSERT_OK(job.Validate());
  // Two ids of shard 0's slots.
  const auto shard_zero_id = [&](uint64_t from) {
    const uint32_t slots = job.tables[1].HashSlots();
    while (SlotShard(IdSlot(from, NameHash("emb"), slots), slots, 2) != 0) ++from;
    return from;
  };
  const uint64_t id = shard_zero_id(1), other = shard_zero_id(id + 1);
  auto backup = BackupServer::Create(job, 0, 1, "tcp://127.0.0.1:*").value();
  std::thread runner([&] { backup->Run().IgnoreError(); });
  RawPeer peer(backup->endpoint());
  uint64_t next = 1;
  // Entry `next` of `kind` holding worker 0's push of `value` to `row` of table `table`.
  auto push = [&](ReplicaEntry kind, uint32_t table, uint64_t row, float value) {
    MessageHeader entry;
    entry.op = Op::kReplicate;
    entry.request_id = next;
    entry.flags = static_cast<uint32_t>(kind);
    MessageHeader h;
    h.op = Op::kPush;
    h.request_id = 100 + next;
    h.table = table;
    h.dim = 1;
    h.count = 1;
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    frames.push_back(Frame::CopyOf(&row, sizeof(row)));
    frames.push_back(Frame::CopyOf(&value, sizeof(value)));
    return peer.Exchange(entry, std::move(frames));
  };
  // Of a range table: refused before it is taken.
  EXPECT_TRUE(Refused(StatusFromErrorHeader(push(ReplicaEntry::kRefusedPush, 0, 2, 1.0f)),
                      StatusCode::kInvalidArgument, "not a hashed table"));
  // The state the primary had, and a push the backup refuses too: taken.
  EXPECT_EQ(push(ReplicaEntry::kPush, 1, id, 3e38f).op, Op::kReplicateOk);
  ++next;
  EXPECT_EQ(push(ReplicaEntry::kRefusedPush, 1, id, 3e38f).op, Op::kReplicateOk);
  ++next;
  // One the backup applies (a row the primary's refusal did not reach):
  // acknowledged as it arrived, then its state differs from its
  // primary's, said, and it takes no more.
  EXPECT_EQ(push(ReplicaEntry::kRefusedPush, 1, other, 1.0f).op, Op::kReplicateOk);
  ++next;
  EXPECT_TRUE(Refused(StatusFromErrorHeader(push(ReplicaEntry::kPush, 1, id, 1.0f)),
                      StatusCode::kDataLoss, "was applied here"));
  backup->Stop();
  runner.join();
  EXPECT_EQ(backup->store().refused_rows(1), 1u);
  // The range table's entry, the one applied here and the one after it.
  EXPECT_EQ(backup->refused(), 3u);
}

TEST(ReplicationTest, ABackupRefusesAMalformedAggregateEntryWithItsStateUnchanged) {
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(2).Bsp().Table("w", 10, 1,
                                                                       OptimizerKind::kAdd));
  job.consistency.aggregate = true;
  // Shard 0 owns rows [0, 5): one block.
  auto backup = BackupServer::Create(job, 0, 1, "tcp://127.0.0.1:*").value();
  std::thread runner([&] { backup->Run().IgnoreError(); });
  RawPeer peer(backup->endpoint());
  MessageHeader entry = CopyEntry(ReplicaEntry::kAggregate, 1);
  entry.clock = 1;  // the sums of clock 0
  entry.count = 2;  // the mean over 2 workers
  const std::vector<uint64_t> ids = {0, 77, 1, 1, 78, 1};  // worker, session, request id
  const std::vector<float> sum = {2, 4, 6, 8, 10};
  std::vector<RefusedEntry> cases;
  auto header = [&](uint32_t count) {
    MessageHeader h = entry;
    h.count = count;
    return h;
  };
  cases.push_back({"no frames", entry, {}, "malformed shape"});
  cases.push_back({"an index without its sum's frames", entry,
                   AggregateFrames(ids, {0, 0, 1}, {}, {}), "malformed shape"});
  cases.push_back({"ids not in triples", entry,
                   AggregateFrames({0, 77}, {0, 0, 1}, {sum}, {{1}}), "malformed shape"});
  cases.push_back({"a worker the job does not have", entry,
                   AggregateFrames({5, 77, 1}, {0, 0, 1}, {sum}, {{1}}), "worker 5"});
  cases.push_back({"a sum of a clock not below the entry's", entry,
                   AggregateFrames(ids, {1, 0, 1}, {sum}, {{1}}), "sum of clock 1"});
  cases.push_back({"a table the job does not have", entry,
                   AggregateFrames(ids, {0, 3, 1}, {sum}, {{1}}), "table index 3"});
  cases.push_back({"a sum of the wrong size", entry,
                   AggregateFrames(ids, {0, 0, 1}, {{1, 2, 3}}, {{1}}), "3 values"});
  cases.push_back({"touched bytes for two blocks", entry,
                   AggregateFrames(ids, {0, 0, 2}, {sum}, {{1, 1}}), "2 blocks"});
  cases.push_back({"a count other than its touched bytes", entry,
                   AggregateFrames(ids, {0, 0, 2}, {sum}, {{1}}), "counted as 2 blocks"});
  cases.push_back({"an index in pairs", entry, AggregateFrames(ids, {0, 0}, {sum}, {{1}}),
                   "malformed shape"});
  cases.push_back({"a mean over 0 workers", header(0),
                   AggregateFrames(ids, {0, 0, 1}, {sum}, {{1}}), "0 workers"});
  cases.push_back({"a mean over 3 of 2 workers", header(3),
                   AggregateFrames(ids, {0, 0, 1}, {sum}, {{1}}), "3 workers"});
  {
    // Values that are not whole floats.
    std::vector<Frame> frames = AggregateFrames(ids, {0, 0, 1}, {sum}, {{1}});
    frames[2] = Frame::CopyOf("abcde", 5);
    cases.push_back({"values of 5 bytes", entry, std::move(frames), "not whole floats"});
  }
  for (RefusedEntry& c : cases) {
    const MessageHeader reply = peer.Exchange(c.header, std::move(c.frames));
    EXPECT_TRUE(Refused(StatusFromErrorHeader(reply), StatusCode::kInvalidArgument, c.names))
        << c.what;
  }
  EXPECT_EQ(backup->applied(), 0u);
  EXPECT_EQ(backup->refused(), cases.size());
  // The good entry: the mean of the sum applied, once.
  EXPECT_EQ(peer.Exchange(entry, AggregateFrames(ids, {0, 0, 1}, {sum}, {{1}})).op,
            Op::kReplicateOk);
  // Sent again (the primary resends what it has no acknowledgement of):
  // acknowledged, not applied twice.
  EXPECT_EQ(peer.Exchange(entry, AggregateFrames(ids, {0, 0, 1}, {sum}, {{1}})).op,
            Op::kReplicateOk);
  backup->Stop();
  runner.join();
  EXPECT_EQ(backup->applied(), 1u);
  EXPECT_EQ(backup->store().CopyValues(0), (std::vector<float>{1, 2, 3, 4, 5}));
}

TEST(ReplicationTest, WaitingForAPushBeforeItsClockUnderReplicationAfterAggregationIsRefused) {
  constexpr uint64_t kRows = 100;
  JobOptions job = ReplicatedJob(2, 2, TestJob().Workers(1).Bsp().Table("w", kRows, 1,
                                                                       OptimizerKind::kAdd));
  job.consistency.aggregate = true;
  job.replication.after_aggregation = true;
  ReplicatedCluster cluster(job);
  auto client = Client::Create(job, 0, cluster.endpoints()).value();
  ASSERT_OK(client->Join());
  auto push = client->PushDense(0, SharedFloats::Take(std::vector<float>(kRows, 2.0f)));
  ASSERT_OK(push.status());
  // Its acknowledgement comes when the clock's sum is on the backups,
  // which takes this worker's Clock(): refused at once, saying what to do.
  EXPECT_TRUE(Refused(client->Wait(*push), StatusCode::kFailedPrecondition, "call Clock()"));
  EXPECT_TRUE(Refused(client->WaitAll(), StatusCode::kFailedPrecondition, "call Clock()"));
  auto clock = client->Clock();
  ASSERT_OK(clock.status());
  EXPECT_OK(client->Wait(*push));
  EXPECT_OK(client->Wait(*clock));
  ASSERT_OK(client->Leave());
  cluster.Stop();
  EXPECT_EQ(Model(job, cluster, kRows), std::vector<float>(kRows, 2.0f));
  ExpectSameCopies(cluster, job);
}

}  // namespace
}  // namespace ps
