// Hashed tables whose pushes travel in bf16 and fp16 (`wire: {push: ...}`),
// driven from outside against two real ps_server processes that read the
// same job file:
//
//   - training: a model of one 4-value row per id (500 random ids) learns
//     its targets with sgd (loss |w - target|^2 / 2), minibatches of 128 ids
//     drawn with repeats, in fp32, bf16 and fp16 side by side; each ends
//     within 1e-3 of the targets and of the fp32 model;
//   - sums: one gradient that neither type holds, pushed 200 times to 100
//     ids of a table of `add` in each type; the shards' sums stay within
//     one rounding step of the true sums (the worker's error feedback, kept
//     by id).
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/control_client.h"
#include "common/config.h"
#include "common/watched_process.h"
#include "tests/util/free_port.h"
#include "tests/util/server_process.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

using std::chrono::seconds;

constexpr uint32_t kDim = 4;

// Tables 0-2: sgd in fp32, bf16, fp16; 3-4: add in bf16, fp16.
std::string JobYaml(int port0, int port1) {
  const std::string sgd = "keys: hashed, dim: " + std::to_string(kDim) +
                          ", max_rows: 10000, optimizer: { type: sgd, lr: 0.2 }";
  const std::string add = "keys: hashed, dim: 1, max_rows: 10000, optimizer: { type: add }";
  return "cluster: { servers: [\"127.0.0.1:" + std::to_string(port0) + "\", \"127.0.0.1:" +
         std::to_string(port1) + "\"], workers: 1 }\n"
         "tables:\n"
         "  - { name: fp32, " + sgd + " }\n"
         "  - { name: bf16, " + sgd + ", wire: { push: bf16 } }\n"
         "  - { name: fp16, " + sgd + ", wire: { push: fp16 } }\n"
         "  - { name: sum_bf16, " + add + ", wire: { push: bf16 } }\n"
         "  - { name: sum_fp16, " + add + ", wire: { push: fp16 } }\n"
         "consistency: { mode: bsp }\n"
         "server: { exit_when_workers_leave: false }\n"
         "client: { request_timeout_ms: 30000 }\n";
}

// n distinct ids spread over the uint64 range: (first + i) times an odd
// constant, a bijection of the uint64s.
std::vector<uint64_t> SpreadIds(size_t n, uint64_t first) {
  std::vector<uint64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = (first + i) * 0xd6e8feb86659fd93ull;
  return ids;
}

class HashedWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("hashed_wire_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    job_path_ = (dir_ / "job.yaml").string();
    const int port0 = FreePort();
    int port1 = FreePort();
    while (port1 == port0) port1 = FreePort();
    std::ofstream(job_path_) << JobYaml(port0, port1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::string job_path_;
};

TEST_F(HashedWireTest, SixteenBitPushesTrainAndSumAsFloat32Ones) {
  auto job = LoadJobFile(job_path_);
  ASSERT_OK(job);
  std::vector<std::unique_ptr<WatchedProcess>> servers;
  for (int shard = 0; shard < 2; ++shard) {
    auto server = StartShardServer(job_path_, static_cast<uint32_t>(shard));
    ASSERT_OK(server);
    servers.push_back(std::move(*server));
  }
  for (auto& server : servers) ASSERT_OK(server->WaitForLine("serving", seconds(30)));
  auto made = Client::Create(*job, 0);
  ASSERT_OK(made);
  Client& client = **made;
  ASSERT_OK(client.Join());

  // Training: targets in [-2, 2], one minibatch a clock.
  const std::vector<uint64_t> ids = SpreadIds(500, 1);
  std::mt19937_64 random(2);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> target(ids.size() * kDim);
  for (float& t : target) t = uniform(random);
  std::uniform_int_distribution<size_t> pick(0, ids.size() - 1);
  constexpr int kSteps = 300;
  constexpr size_t kBatch = 128;
  std::vector<uint64_t> batch(kBatch);
  std::vector<size_t> at(kBatch);
  std::vector<float> w(kBatch * kDim);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kBatch; ++i) {
      at[i] = pick(random);
      batch[i] = ids[at[i]];
    }
    for (uint32_t table = 0; table < 3; ++table) {
      ASSERT_OK(client.PullSync(table, batch, w.data()));
      std::vector<float> grad(kBatch * kDim);
      for (size_t i = 0; i < kBatch; ++i) {
        for (uint32_t c = 0; c < kDim; ++c) {
          grad[i * kDim + c] = w[i * kDim + c] - target[at[i] * kDim + c];
        }
      }
      ASSERT_OK(client.PushSync(table, batch, SharedFloats::Take(std::move(grad))));
    }
    auto clock = client.Clock();
    ASSERT_OK(clock);
    ASSERT_OK(client.Wait(*clock));
  }
  std::vector<std::vector<float>> model(3, std::vector<float>(ids.size() * kDim));
  for (uint32_t table = 0; table < 3; ++table) {
    ASSERT_OK(client.PullSync(table, ids, model[table].data()));
  }
  for (uint32_t table = 0; table < 3; ++table) {
    SCOPED_TRACE(job->tables[table].name);
    double worst = 0, apart = 0;
    for (size_t i = 0; i < target.size(); ++i) {
      worst = std::max(worst, std::fabs(double{model[table][i]} - target[i]));
      apart = std::max(apart, std::fabs(double{model[table][i]} - model[0][i]));
    }
    std::printf("%s: largest distance to the targets %.2e, to the fp32 model %.2e\n",
                job->tables[table].name.c_str(), worst, apart);
    EXPECT_LT(worst, 1e-3);
    EXPECT_LT(apart, 1e-3);
  }

  // Sums: value 1 plus 0.9 of half a bf16 unit, which bf16 alone always
  // rounds down and fp16 alone always up.
  const std::vector<uint64_t> sum_ids = SpreadIds(100, 1000);
  const float g0 = 1.0f + 0.9f * 0x1p-8f;
  constexpr int kPushes = 200;
  for (int p = 0; p < kPushes; ++p) {
    for (uint32_t table : {3u, 4u}) {
      ASSERT_OK(client.PushSync(table, sum_ids,
                                SharedFloats::Take(std::vector<float>(sum_ids.size(), g0))));
    }
  }
  const double truth = kPushes * static_cast<double>(g0);
  for (const auto& [table, unit] :
       {std::pair<uint32_t, double>{3, 0x1p-7}, std::pair<uint32_t, double>{4, 0x1p-10}}) {
    SCOPED_TRACE(job->tables[table].name);
    std::vector<float> sums(sum_ids.size());
    ASSERT_OK(client.PullSync(table, sum_ids, sums.data()));
    for (size_t i = 0; i < sums.size(); ++i) {
      // One unit of the values pushed, plus float32's rounding of the
      // shard's additions (half a unit at 200 each).
      ASSERT_LE(std::fabs(sums[i] - truth), unit + kPushes * 0x1p-17)
          << "id " << sum_ids[i] << ": shard " << sums[i] << ", true " << truth;
    }
  }
  EXPECT_EQ(client.counters().residuals_dropped, 0u);

  ASSERT_OK(client.Leave());
  auto control = ControlClient::Create(*job);
  ASSERT_OK(control);
  ASSERT_OK((*control)->ShutdownServers());
  for (auto& server : servers) ASSERT_OK(server->WaitFor(seconds(30)));
}

}  // namespace
}  // namespace ps
