// A hashed table's memory bound, driven from outside with the real
// ps_server: two evicting tables (lru and lfu, max_mb each) take id streams
// meant to grow them without end, each of several times the rows the bound
// holds:
//
//   - ids never seen before, random;
//   - ids counting up;
//   - a hot set as large as the bound, pushed again and again between
//     fresh ids (every fresh id evicts a row that will be wanted again);
//   - pulls of ids never pushed (reads store nothing).
//
// The shard's resident memory is sampled throughout: above its fixed costs
// (the process with its buffers warm and the tables empty), it must stay
// within 10% of the tables' bounds. Each table ends full, at its bound,
// having evicted rows.
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/control_client.h"
#include "common/config.h"
#include "common/watched_process.h"
#include "tests/util/free_port.h"
#include "tests/util/raw_peer.h"
#include "tests/util/server_process.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kBoundMb = 24;  // each of the two tables
constexpr uint32_t kDim = 16;
constexpr size_t kBatch = 4096;  // ids per push

std::string JobYaml(int port) {
  const std::string table = "keys: hashed, dim: " + std::to_string(kDim) +
                            ", max_mb: " + std::to_string(kBoundMb) +
                            ", optimizer: { type: adagrad, lr: 0.05 }";
  return "cluster: { servers: [\"127.0.0.1:" + std::to_string(port) + "\"], workers: 1 }\n"
         "tables:\n"
         "  - { name: warm, keys: hashed, dim: " + std::to_string(kDim) +
         ", max_rows: 8192, evict: { policy: lru } }\n"
         "  - { name: lru, " + table + ", evict: { policy: lru, idle_clocks: 1000 } }\n"
         "  - { name: lfu, " + table + ", evict: { policy: lfu } }\n"
         "consistency: { mode: asp }\n"
         "server: { exit_when_workers_leave: false }\n"
         "client: { request_timeout_ms: 60000 }\n";
}

class HashedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("hashed_memory_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    port_ = FreePort();
    job_path_ = (dir_ / "job.yaml").string();
    std::ofstream(job_path_) << JobYaml(port_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  int port_ = 0;
  std::string job_path_;
};

TEST_F(HashedMemoryTest, EvictingTablesStayWithinTheirBoundUnderAnyIdStream) {
  auto job = LoadJobFile(job_path_);
  ASSERT_OK(job);
  auto server = StartShardServer(job_path_, 0);
  ASSERT_OK(server);
  ASSERT_OK((*server)->WaitForLine("serving", seconds(30)));
  auto client = Client::Create(*job, 0);
  ASSERT_OK(client);
  ASSERT_OK((*client)->Join());
  auto control = ControlClient::Create(*job);
  ASSERT_OK(control);

  std::mt19937_64 random(12345);
  const std::vector<float> grads(kBatch * kDim, 0.01f);
  std::vector<float> pulled(kBatch * kDim);
  const auto push = [&](uint32_t table, const std::vector<uint64_t>& ids) {
    return (*client)->PushSync(table, ids, SharedFloats::Take(std::vector<float>(grads)));
  };
  const auto fresh = [&] {
    std::vector<uint64_t> ids(kBatch);
    for (uint64_t& id : ids) id = random();
    return ids;
  };

  // Fixed costs: the same pushes and pulls into a small table warm the
  // process's buffers; what the big tables add is measured above this.
  for (int i = 0; i < 40; ++i) {
    ASSERT_OK(push(0, fresh()));
    ASSERT_OK((*client)->PullSync(0, fresh(), pulled.data()));
  }
  uint64_t fixed = 0;
  for (int i = 0; i < 20; ++i) {
    fixed = std::max(fixed, ResidentBytes((*server)->pid()));
    std::this_thread::sleep_for(milliseconds(10));
  }
  auto stats = (*control)->StructuredStats(0);
  ASSERT_OK(stats);
  const uint64_t max_rows = stats->tables[1].max_rows;
  ASSERT_EQ(stats->tables[2].max_rows, max_rows);
  // Each stream pushes 2.5 times the rows a table holds.
  const size_t pushes = (5 * max_rows / 2 + kBatch - 1) / kBatch;
  PeakMemory peak((*server)->pid(), milliseconds(5));

  for (uint32_t table : {1u, 2u}) {
    SCOPED_TRACE("table " + std::to_string(table));
    // Ids never seen before.
    for (size_t p = 0; p < pushes; ++p) ASSERT_OK(push(table, fresh()));
    // Ids counting up.
    for (size_t p = 0; p < pushes; ++p) {
      std::vector<uint64_t> ids(kBatch);
      for (size_t i = 0; i < kBatch; ++i) ids[i] = (uint64_t{table} << 40) + p * kBatch + i;
      ASSERT_OK(push(table, ids));
    }
    // A hot set as large as the bound, between fresh ids.
    for (size_t p = 0; p < pushes; ++p) {
      std::vector<uint64_t> ids = fresh();
      for (size_t i = 0; i < kBatch / 2; ++i) ids[i] = (uint64_t{7} << 50) + random() % max_rows;
      ASSERT_OK(push(table, ids));
    }
    // Reads of ids never pushed.
    for (size_t p = 0; p < pushes; ++p) {
      ASSERT_OK((*client)->PullSync(table, fresh(), pulled.data()));
    }
  }
  const uint64_t top = peak.peak();
  const uint64_t bound = 2 * kBoundMb * kMiB;
  stats = (*control)->StructuredStats(0);
  ASSERT_OK(stats);
  for (uint32_t table : {1u, 2u}) {
    const ShardStats::Table& t = stats->tables[table];
    EXPECT_EQ(t.stored_rows, t.max_rows) << t.name;
    EXPECT_LE(t.stored_bytes, kBoundMb * kMiB) << t.name;
    EXPECT_GT(t.evicted_rows, 2 * max_rows) << t.name;
    EXPECT_EQ(t.dropped_rows, 0u) << t.name;
  }
  std::printf("fixed costs %.1f MiB, peak %.1f MiB: %.1f MiB above them for bounds of %.1f MiB "
              "(%.3f of the bounds)\n",
              static_cast<double>(fixed) / kMiB, static_cast<double>(top) / kMiB,
              static_cast<double>(top - fixed) / kMiB, static_cast<double>(bound) / kMiB,
              static_cast<double>(top - fixed) / static_cast<double>(bound));
  EXPECT_LE(top, fixed + bound + bound / 10)
      << "fixed " << fixed / kMiB << " MiB, peak " << top / kMiB << " MiB";
  ASSERT_OK((*client)->Leave());
  ASSERT_OK((*control)->ShutdownServers());
  ASSERT_OK((*server)->WaitFor(seconds(30)));
}

}  // namespace
}  // namespace ps
