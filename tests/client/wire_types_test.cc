// Tables whose values travel in bf16 or fp16 (TableOptions::wire), against
// real ShardServers on loopback (in this process, on threads): mixed types
// in one job, dense and sparse pushes and pulls across shards, half the
// bytes on the wire, error feedback keeping the applied sum of many pushes
// within one rounding step of the true sum, and the parameter cache's
// read-my-writes with 16-bit pulls.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "client/client.h"
#include "common/wire_floats.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

constexpr uint64_t kRows = 1001;
constexpr uint32_t kDim = 3;

TableOptions Table(const char* name, WireType pull, WireType push) {
  TableOptions t = TestTable(name, kRows, kDim, OptimizerKind::kAdd);  // w += g, zeros
  t.wire = {.pull = pull, .push = push};
  return t;
}

// Table 0 fp32 both ways, 1 bf16 both ways, 2 pulls fp16 and takes fp32.
JobOptions MixedJob(TestJob job) {
  return job.Servers(3)
      .Workers(2)
      .Table(Table("fp32", WireType::kF32, WireType::kF32))
      .Table(Table("bf16", WireType::kBf16, WireType::kBf16))
      .Table(Table("fp16_pull", WireType::kF16, WireType::kF32))
      .RequestTimeoutMs(5000)
      .Build();
}

class WireTypesTest : public ::testing::Test {
 protected:
  void Start(JobOptions job) {
    job_ = std::move(job);
    cluster_ = std::make_unique<InProcessCluster>(job_);
    auto c = Client::Create(job_, 0, cluster_->endpoints());
    ASSERT_OK(c);
    client_ = std::move(*c);
  }
  std::vector<float> PullAll(uint32_t table) {
    std::vector<float> out(kRows * kDim, -1.0f);
    EXPECT_OK(client_->Wait(*client_->PullDense(table, out.data())));
    return out;
  }

  JobOptions job_;
  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<Client> client_;
};

float Bf16(float v) { return Bf16ToFloat(FloatToBf16(v)); }
float F16(float v) { return F16ToFloat(FloatToF16(v)); }

TEST_F(WireTypesTest, MixedTypesInOneJobDenseAndSparse) {
  Start(MixedJob(TestJob().Asp()));
  std::vector<float> v(kRows * kDim);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0f / 3.0f + 0.001f * static_cast<float>(i);
  // The same dense push to each table, counting the bytes it sends.
  std::vector<uint64_t> sent;
  for (uint32_t table = 0; table < 3; ++table) {
    const uint64_t before = client_->counters().bytes_sent;
    ASSERT_OK(client_->Wait(*client_->PushDense(table, SharedFloats::Take(std::vector<float>(v)))));
    sent.push_back(client_->counters().bytes_sent - before);
  }
  // bf16 values are half the bytes (the headers are a few dozen bytes).
  EXPECT_NEAR(static_cast<double>(sent[1]) / static_cast<double>(sent[0]), 0.5, 0.01)
      << sent[1] << " against " << sent[0];
  const std::vector<float> f32 = PullAll(0), bf16 = PullAll(1), f16 = PullAll(2);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(f32[i], v[i]) << i;
    // Pushed rounded to bf16 (zeros before: the residuals too), pulled in
    // bf16: the same value.
    ASSERT_EQ(bf16[i], Bf16(v[i])) << i;
    // Pushed in fp32, so stored exactly, pulled rounded to fp16.
    ASSERT_EQ(f16[i], F16(v[i])) << i;
  }
  // Sparse: rows of every shard, out of order, one repeated (a gathered
  // push), then a run of rows inside one shard.
  const std::vector<uint64_t> rows = {1000, 3, 500, 334, 3, 999};
  std::vector<float> g(rows.size() * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i + 1) + 1e-4f;
  ASSERT_OK(client_->Wait(*client_->Push(1, rows, SharedFloats::Take(std::vector<float>(g)))));
  std::vector<float> got(rows.size() * kDim);
  ASSERT_OK(client_->Wait(*client_->Pull(1, rows, got.data())));
  // Row 3 got two rows of the push; each went rounded with its own
  // residual (which the first push left at v - bf16(v)).
  std::vector<double> want(kRows * kDim);
  std::vector<float> residual(kRows * kDim);
  for (size_t i = 0; i < v.size(); ++i) {
    want[i] = Bf16(v[i]);
    residual[i] = v[i] - Bf16(v[i]);
  }
  for (size_t x = 0; x < rows.size(); ++x) {
    for (uint32_t c = 0; c < kDim; ++c) {
      const size_t at = rows[x] * kDim + c;
      const float total = g[x * kDim + c] + residual[at];
      const float rounded = Bf16(total);
      residual[at] = total - rounded;
      want[at] = static_cast<float>(want[at]) + rounded;  // the shard adds in float32
    }
  }
  for (size_t x = 0; x < rows.size(); ++x) {
    for (uint32_t c = 0; c < kDim; ++c) {
      EXPECT_EQ(got[x * kDim + c], Bf16(static_cast<float>(want[rows[x] * kDim + c])))
          << "row " << rows[x] << " col " << c;
    }
  }
}

// Many pushes of values that bf16 cannot hold: the shard's float32 sum
// stays within one rounding step of the true sum (error feedback), where
// rounding each push alone would have lost 0.9 of half an ulp every time.
TEST_F(WireTypesTest, ErrorFeedbackKeepsTheShardsSumWithinOneRoundingStep) {
  Start(TestJob()
            .Servers(2)
            .Workers(1)
            .Asp()
            .Table(Table("ef", WireType::kF32, WireType::kBf16))
            .RequestTimeoutMs(5000)
            .Build());
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  std::vector<double> truth(kRows * kDim, 0.0);
  const int pushes = 300;
  for (int t = 0; t < pushes; ++t) {
    std::vector<float> g(kRows * kDim);
    for (size_t i = 0; i < g.size(); ++i) {
      // Element 0 of each row: 1 + 0.9 of half an ulp at 1, always rounded down alone.
      g[i] = i % kDim == 0 ? 1.0f + 0.9f * 0x1p-8f : u(gen);
      truth[i] += g[i];
    }
    ASSERT_OK(client_->Wait(*client_->PushDense(0, SharedFloats::Take(std::move(g)))));
  }
  const std::vector<float> w = PullAll(0);
  for (size_t i = 0; i < w.size(); ++i) {
    // One rounding step of the values pushed (bf16's ulp at 2), plus
    // float32's own rounding of the shard's 300 additions near 300.
    ASSERT_LE(std::fabs(w[i] - truth[i]), 0x1p-6 + pushes * 0x1p-15)
        << "element " << i << ": shard " << w[i] << ", true " << truth[i];
  }
  // Without feedback element 0 would stand at 300, 1.05 below the truth.
  EXPECT_NEAR(w[0], truth[0], 0.02);
  EXPECT_GT(truth[0] - pushes * 1.0, 1.0);
}

// Under ssp the cache serves reads between pulls: with bf16 pulls and
// pushes it holds what the pulls returned plus what the shard adds (the
// rounded pushes), so a read after a push sees it, equal to what the
// shard then answers.
TEST_F(WireTypesTest, TheCacheKeepsReadMyWritesWithBf16) {
  Start(MixedJob(TestJob().Ssp(2)));
  std::vector<float> out(kRows * kDim);
  ASSERT_OK(client_->Wait(*client_->PullDense(1, out.data())));  // fills the cache
  std::vector<float> g(kRows * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f + 1e-3f * static_cast<float>(i % 97);
  ASSERT_OK(client_->Wait(*client_->PushDense(1, SharedFloats::Take(std::vector<float>(g)))));
  const uint64_t hits = client_->counters().cache_hits;
  ASSERT_OK(client_->Wait(*client_->PullDense(1, out.data())));
  EXPECT_EQ(client_->counters().cache_hits, hits + kRows) << "the read came from the cache";
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], Bf16(g[i])) << i;
  // The shard holds the same: the other worker, whose cache is empty, pulls it.
  auto other = Client::Create(job_, 1, cluster_->endpoints());
  ASSERT_OK(other);
  std::vector<float> fresh(kRows * kDim);
  ASSERT_OK((*other)->Wait(*(*other)->PullDense(1, fresh.data())));
  EXPECT_EQ((*other)->counters().cache_hits, 0u);
  EXPECT_EQ(fresh, out);
}

}  // namespace
}  // namespace ps
