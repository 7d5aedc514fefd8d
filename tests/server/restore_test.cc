// Shards write checkpoints at clock boundaries while workers train, and a
// shard started on a checkpoint folder restores them exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/control_client.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("restore_test_" + name);
  fs::remove_all(dir);
  return dir.string();
}

// 2 shards, 2 workers under bsp; `acc` sums pushes (add), `m` has momentum
// state; checkpoints every `every` clocks.
JobOptions Job(const std::string& dir, uint32_t every) {
  TableOptions acc = TestTable("acc", 1000, 2, OptimizerKind::kAdd);
  acc.init = {InitKind::kConstant, 0.5f, 5};  // sums of whole deltas stay exact in float
  TableOptions m = TestTable("m", 300);
  m.optimizer.momentum = 0.9f;
  m.optimizer.lr = 0.1f;
  JobOptions job = TestJob().Servers(2).Workers(2).Bsp().Liveness(0).Table(acc).Table(m).Build();
  job.checkpoint.dir = dir;
  job.checkpoint.every_clocks = every;
  job.checkpoint.keep = 3;
  job.checkpoint.sync = false;
  // The tests read and checkpoint the shards after the workers left.
  job.server.exit_when_workers_leave = false;
  EXPECT_OK(job.Validate());
  return job;
}

// What worker `w` pushes to row `row` of `acc` at clock `c` (both columns).
float Delta(uint32_t w, int64_t c, uint64_t row) {
  return static_cast<float>((w + 1) * 1000 + c * 10 + static_cast<int64_t>(row % 7));
}

// Each worker: pull both tables, push to every row, end the clock;
// `clocks` times.
void Train(const JobOptions& job, const std::vector<std::string>& endpoints, int64_t clocks) {
  std::vector<std::thread> workers;
  for (uint32_t w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      auto client = Client::Create(job, w, endpoints).value();
      ASSERT_OK(client->Join());
      std::vector<float> acc(2000), m(300);
      for (int64_t c = client->clock(); c < clocks; ++c) {
        ASSERT_OK(client->Wait(*client->PullDense(0, acc.data())));
        ASSERT_OK(client->Wait(*client->PullDense(1, m.data())));
        std::vector<float> push(2000), grad(300);
        for (uint64_t r = 0; r < 1000; ++r) push[2 * r] = push[2 * r + 1] = Delta(w, c, r);
        for (uint64_t r = 0; r < 300; ++r) grad[r] = 0.01f * static_cast<float>(r % 5) - m[r];
        ASSERT_OK(client->Wait(*client->PushDense(0, SharedFloats::Take(std::move(push)))));
        ASSERT_OK(client->Wait(*client->PushDense(1, SharedFloats::Take(std::move(grad)))));
        ASSERT_OK(client->Wait(*client->Clock()));
      }
      ASSERT_OK(client->Leave());
    });
  }
  for (auto& t : workers) t.join();
}

TEST(RestoreTest, ARestartedJobRestoresEveryValueAndSlotAndItsClock) {
  const JobOptions job = Job(FreshDir("round_trip"), 5);
  std::vector<std::vector<float>> values[2], slots[2];
  {
    InProcessCluster cluster(job);
    Train(job, cluster.endpoints(), 10);
    cluster.Stop();  // waits for a checkpoint being written
    for (uint32_t s = 0; s < 2; ++s) {
      for (uint32_t t = 0; t < 2; ++t) {
        values[s].push_back(cluster.server(s).store().CopyValues(t));
      }
      slots[s].push_back(cluster.server(s).store().CopySlot(1, 0));
      auto dir = CheckpointDir::Open(ShardCheckpointDir(job.checkpoint.dir, s)).value();
      EXPECT_EQ(dir->Generations().value(), (std::vector<int64_t>{5, 10})) << "shard " << s;
    }
  }
  // A new set of shards on the same folder: the state of clock 10 (the
  // final state: nothing was pushed after it), bit for bit.
  InProcessCluster restarted(job);
  auto client = Client::Create(job, 1, restarted.endpoints()).value();
  ASSERT_OK(client->Join());
  EXPECT_EQ(client->clock(), 10);  // workers resume where the checkpoint is
  restarted.Stop();
  for (uint32_t s = 0; s < 2; ++s) {
    const ShardStore& store = restarted.server(s).store();
    for (uint32_t t = 0; t < 2; ++t) {
      const std::vector<float> got = store.CopyValues(t);
      ASSERT_EQ(got.size(), values[s][t].size());
      EXPECT_EQ(std::memcmp(got.data(), values[s][t].data(), got.size() * 4), 0)
          << "shard " << s << " table " << t;
    }
    const std::vector<float> slot = store.CopySlot(1, 0);
    EXPECT_EQ(std::memcmp(slot.data(), slots[s][0].data(), slot.size() * 4), 0) << "shard " << s;
    EXPECT_EQ(restarted.server(s).clocks().min_clock(), 10);
  }
}

// The whole of table `t` across the shards of a stopped cluster (`n`
// shards): its values, and its state array `slot` when >= 0.
std::vector<float> WholeTable(InProcessCluster& cluster, size_t n, uint32_t t, int slot = -1) {
  std::vector<float> all;
  for (size_t s = 0; s < n; ++s) {
    const ShardStore& store = cluster.server(s).store();
    const std::vector<float> part = slot < 0 ? store.CopyValues(t) : store.CopySlot(t, slot);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

JobOptions OnServers(JobOptions job, uint32_t servers) {
  job.cluster.servers = TestJob().Servers(servers).Build().cluster.servers;
  EXPECT_OK(job.Validate());
  return job;
}

// `acc` after `clocks` clocks of Train: its init plus every worker's
// deltas, exact in float.
void ExpectExactSums(InProcessCluster& cluster, size_t shards, int64_t clocks) {
  const std::vector<float> acc = WholeTable(cluster, shards, 0);
  ASSERT_EQ(acc.size(), 2000u);
  for (uint64_t row = 0; row < 1000; ++row) {
    double want = 0.5;
    for (int64_t c = 0; c < clocks; ++c) want += Delta(0, c, row) + Delta(1, c, row);
    ASSERT_EQ(acc[2 * row], static_cast<float>(want)) << "row " << row << " on " << shards;
    ASSERT_EQ(acc[2 * row + 1], static_cast<float>(want)) << "row " << row << " on " << shards;
  }
}

// A job checkpointed on 2 shards resumes on 3 (each reads its rows of the
// 2 shards' generation) at the checkpoint's clock, with every value and
// optimizer state bit for bit; it trains on, its sums exact, and its next
// generation (of 3 shards) resumes on 2 again.
TEST(RestoreTest, AJobCheckpointedOnTwoShardsResumesOnThreeAndBack) {
  const JobOptions two = Job(FreshDir("two_to_three"), 5);
  const JobOptions three = OnServers(two, 3);
  std::vector<float> acc, m, m_state;
  {
    InProcessCluster cluster(two);
    Train(two, cluster.endpoints(), 10);
    cluster.Stop();
    acc = WholeTable(cluster, 2, 0);
    m = WholeTable(cluster, 2, 1);
    m_state = WholeTable(cluster, 2, 1, 0);
  }
  {
    InProcessCluster restored(three);
    restored.Stop();
    EXPECT_EQ(WholeTable(restored, 3, 0), acc);
    EXPECT_EQ(std::memcmp(WholeTable(restored, 3, 1).data(), m.data(), m.size() * 4), 0);
    EXPECT_EQ(std::memcmp(WholeTable(restored, 3, 1, 0).data(), m_state.data(), m.size() * 4), 0);
    for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(restored.server(s).clocks().min_clock(), 10);
  }
  {
    // The workers resume at clock 10 (had they started at 0, the sums of
    // clocks 0..9 would count twice) and write generation 15, of 3 shards.
    InProcessCluster restored(three);
    Train(three, restored.endpoints(), 15);
    restored.Stop();
    ExpectExactSums(restored, 3, 15);
  }
  OsFilesystem files;
  const RestorePoint point = FindRestorePoint(files, two).value();
  EXPECT_EQ(point.clock, 15);
  EXPECT_EQ(point.writers, 3u);
  InProcessCluster back(two);
  Train(two, back.endpoints(), 20);
  back.Stop();
  ExpectExactSums(back, 2, 20);
}

TEST(RestoreTest, ACheckpointTakenWhilePushesContinueIsTheStateAtItsClock) {
  const JobOptions job = Job(FreshDir("consistent"), 4);
  {
    InProcessCluster cluster(job);
    Train(job, cluster.endpoints(), 11);  // generations 4 and 8, then 3 more clocks
  }
  for (uint32_t s = 0; s < 2; ++s) {
    auto server = ShardServer::Create(job, s, "tcp://127.0.0.1:*", /*restore_clock=*/8);
    ASSERT_OK(server);
    // Under bsp the generation of clock 8 holds exactly the pushes of
    // clocks 0..7 of both workers.
    auto fresh = ShardStore::Create(job, s).value();
    const std::vector<float> init = fresh->CopyValues(0);
    const std::vector<float> got = (*server)->store().CopyValues(0);
    const RowRange owned = ShardRows(1000, 2, s);
    for (uint64_t i = 0; i < owned.size(); ++i) {
      double want = init[2 * i];
      for (int64_t c = 0; c < 8; ++c) want += Delta(0, c, owned.begin + i) + Delta(1, c, owned.begin + i);
      ASSERT_EQ(got[2 * i], static_cast<float>(want)) << "shard " << s << " row " << owned.begin + i;
    }
  }
}

TEST(RestoreTest, AnotherModelOrAMissingClockIsRefusedAndNothingIsOverwritten) {
  const JobOptions job = Job(FreshDir("mismatch"), 3);
  {
    InProcessCluster cluster(job);
    Train(job, cluster.endpoints(), 3);
  }
  JobOptions other = job;
  other.tables[0].dim = 3;
  auto refused = ShardServer::Create(other, 0, "tcp://127.0.0.1:*");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  const std::string message = refused.status().message();
  EXPECT_NE(message.find("gen-3"), std::string::npos) << message;
  EXPECT_NE(message.find("fingerprint"), std::string::npos) << message;

  auto missing = ShardServer::Create(job, 0, "tcp://127.0.0.1:*", /*restore_clock=*/7);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("it has 3"), std::string::npos)
      << missing.status().message();

  // The generation is still there and restores into the right model.
  auto dir = CheckpointDir::Open(job.checkpoint.dir + "/shard-0").value();
  EXPECT_EQ(dir->Generations().value(), std::vector<int64_t>{3});
  auto restored = ShardServer::Create(job, 0, "tcp://127.0.0.1:*");
  ASSERT_OK(restored);
  EXPECT_EQ((*restored)->clocks().min_clock(), 3);
}

TEST(RestoreTest, ACheckpointCanBeAskedForAtAnyClock) {
  const JobOptions job = Job(FreshDir("on_request"), 1000);
  InProcessCluster cluster(job);
  Train(job, cluster.endpoints(), 3);
  auto control = ControlClient::Create(job, cluster.endpoints()).value();
  auto generations = control->CheckpointServers();
  ASSERT_OK(generations);
  ASSERT_EQ(generations->size(), 2u);
  EXPECT_EQ((*generations)[1], job.checkpoint.dir + "/shard-1/gen-3");
  cluster.Stop();  // the writes finish
  for (uint32_t s = 0; s < 2; ++s) {
    auto dir = CheckpointDir::Open(ShardCheckpointDir(job.checkpoint.dir, s)).value();
    EXPECT_EQ(dir->Generations().value(), std::vector<int64_t>{3});
    const ShardSnapshot saved = dir->Read(3).value();
    EXPECT_EQ(saved.tables[0].values, cluster.server(s).store().CopyValues(0));
  }

  // A job without checkpoint.dir says so.
  JobOptions plain = job;
  plain.checkpoint = CheckpointOptions();
  InProcessCluster no_checkpoints(plain);
  auto asked = ControlClient::Create(plain, no_checkpoints.endpoints())
                   .value()
                   ->CheckpointServers();
  ASSERT_FALSE(asked.ok());
  EXPECT_EQ(asked.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(asked.status().message().find("no checkpoint.dir"), std::string::npos)
      << asked.status().ToString();
}

TEST(RestoreTest, RestoreCanBeTurnedOff) {
  JobOptions job = Job(FreshDir("off"), 2);
  {
    InProcessCluster cluster(job);
    Train(job, cluster.endpoints(), 2);
  }
  job.checkpoint.restore = false;
  auto server = ShardServer::Create(job, 0, "tcp://127.0.0.1:*");
  ASSERT_OK(server);
  EXPECT_EQ((*server)->clocks().min_clock(), 0);
  auto fresh = ShardStore::Create(job, 0).value();
  EXPECT_EQ((*server)->store().CopyValues(0), fresh->CopyValues(0));
}

}  // namespace
}  // namespace ps
