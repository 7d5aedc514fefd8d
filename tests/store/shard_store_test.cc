#include "store/shard_store.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/key_range.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

JobOptions Job(uint32_t shards, InitKind kind) {
  TableOptions t = TestTable("t", 37, 3);
  t.init.kind = kind;
  t.init.value = 0.5f;
  t.init.seed = 9;
  return TestJob().Servers(shards, 7000).Table(t).Build();
}

TEST(ShardStoreTest, InitialValuesDoNotDependOnTheShardCount) {
  for (InitKind kind : {InitKind::kUniform, InitKind::kNormal, InitKind::kConstant}) {
    std::vector<float> whole;
    auto one = ShardStore::Create(Job(1, kind), 0);
    ASSERT_OK(one);
    auto v1 = (*one)->CopyValues(0);
    std::vector<float> joined;
    for (uint32_t s = 0; s < 3; ++s) {
      auto part = ShardStore::Create(Job(3, kind), s);
      ASSERT_OK(part);
      auto v = (*part)->CopyValues(0);
      EXPECT_EQ(v.size(), ShardRows(37, 3, s).size() * 3);
      joined.insert(joined.end(), v.begin(), v.end());
    }
    ASSERT_EQ(joined.size(), v1.size());
    for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], v1[i]);
  }
}

TEST(ShardStoreTest, UniformInitStaysInsideItsScale) {
  auto store = ShardStore::Create(Job(1, InitKind::kUniform), 0);
  ASSERT_OK(store);
  bool varied = false;
  const std::vector<float> values = (*store)->CopyValues(0);
  for (float v : values) {
    EXPECT_LE(std::abs(v), 0.5f);
    varied |= v != values[0];
  }
  EXPECT_TRUE(varied);
}

TEST(ShardStoreTest, SgdAndAddRulesApplyToTheNamedRows) {
  JobOptions job = Job(2, InitKind::kZeros);
  job.tables[0].optimizer = {OptimizerKind::kSgd, 0.25f};
  TableOptions acc = job.tables[0];
  acc.name = "acc";
  acc.optimizer = {OptimizerKind::kAdd, 0.0f};
  job.tables.push_back(acc);
  auto store = ShardStore::Create(job, 1);  // rows [18, 37)
  ASSERT_OK(store);
  std::vector<uint64_t> keys = {20, 18, 20};
  std::vector<float> vals = {4, 4, 4, 8, 8, 8, 1, 2, 3};
  for (uint32_t t = 0; t < 2; ++t) {
    Request r;
    r.header.op = Op::kPush;
    r.header.table = t;
    r.header.count = 3;
    r.header.dim = 3;
    r.keys = keys;
    r.values = vals;
    (*store)->ApplyPush(r, 0);
  }
  auto sgd = (*store)->CopyValues(0);
  auto add = (*store)->CopyValues(1);
  EXPECT_EQ(sgd[0], -2.0f);                   // row 18: -0.25*8
  EXPECT_EQ(sgd[6], -0.25f * 4 - 0.25f * 1);  // row 20, col 0: two pushes
  EXPECT_EQ(add[0], 8.0f);
  EXPECT_EQ(add[8], 4.0f + 3.0f);             // row 20, col 2
  EXPECT_EQ(add[3], 0.0f);                    // row 19 untouched
}

// A table of 1000 rows x 1024 floats: 256 rows (1 MiB) per block, 4 blocks.
Request DenseRequest(Op op, uint64_t first_row, uint64_t count, std::span<const float> values) {
  Request r;
  r.header.op = op;
  r.header.table = 0;
  r.header.count = count;
  r.header.dim = 1024;
  r.header.flags = kFlagDenseRange;
  r.header.first_row = first_row;
  r.values = values;
  return r;
}

TEST(ShardStoreTest, DensePullSharesBlocksAndAPushCopiesOnlyTheSharedOnes) {
  JobOptions job = Job(1, InitKind::kZeros);
  job.tables[0].rows = 1000;
  job.tables[0].dim = 1024;
  job.tables[0].optimizer = {OptimizerKind::kAdd, 0.0f};
  auto store = ShardStore::Create(job, 0);
  ASSERT_OK(store);

  // Rows 200..599 touch blocks 0, 1 and 2: three frames of whole rows.
  std::vector<Frame> frames;
  ASSERT_OK((*store)->ReadRows(DenseRequest(Op::kPull, 200, 400, {}), &frames));
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].size(), 56u * 1024 * 4);
  EXPECT_EQ(frames[1].size(), 256u * 1024 * 4);
  EXPECT_EQ(frames[2].size(), 88u * 1024 * 4);

  // A push over every row while the reply is unsent: the pulled frames keep
  // the old values, the store gets the new ones, only the 3 shared blocks
  // were copied.
  std::vector<float> ones(1000 * 1024, 1.0f);
  (*store)->ApplyPush(DenseRequest(Op::kPush, 0, 1000, ones), 0);
  EXPECT_EQ((*store)->copy_on_write_count(), 3u);
  for (const Frame& f : frames) {
    const auto* v = reinterpret_cast<const float*>(f.data());
    for (size_t i = 0; i < f.size() / 4; ++i) ASSERT_EQ(v[i], 0.0f);
  }
  for (float v : (*store)->CopyValues(0)) ASSERT_EQ(v, 1.0f);

  // Once the reply is gone, pushes write in place.
  frames.clear();
  (*store)->ApplyPush(DenseRequest(Op::kPush, 0, 1000, ones), 0);
  EXPECT_EQ((*store)->copy_on_write_count(), 3u);
  for (float v : (*store)->CopyValues(0)) ASSERT_EQ(v, 2.0f);
}

TEST(ShardStoreTest, SparsePullIsGatheredIntoOneFrame) {
  JobOptions job = Job(1, InitKind::kUniform);
  auto store = ShardStore::Create(job, 0);
  ASSERT_OK(store);
  std::vector<uint64_t> keys = {36, 0, 36};
  Request r;
  r.header.op = Op::kPull;
  r.header.count = 3;
  r.header.dim = 3;
  r.keys = keys;
  std::vector<Frame> frames;
  ASSERT_OK((*store)->ReadRows(r, &frames));
  ASSERT_EQ(frames.size(), 1u);
  const auto* v = reinterpret_cast<const float*>(frames[0].data());
  const std::vector<float> all = (*store)->CopyValues(0);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(v[c], all[36 * 3 + c]);
    EXPECT_EQ(v[3 + c], all[c]);
    EXPECT_EQ(v[6 + c], all[36 * 3 + c]);
  }
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(ShardStoreOptimizerTest, StateLivesBesideTheValuesAndSurvivesCopyOnWrite) {
  JobOptions job = Job(1, InitKind::kZeros);
  job.tables[0].rows = 4;
  job.tables[0].dim = 1;
  job.tables[0].optimizer.kind = OptimizerKind::kAdam;
  job.tables[0].optimizer.lr = 0.1f;
  auto store = ShardStore::Create(job, 0).value();
  std::vector<float> g = {1, -1, 0, 2};
  Request r;
  r.header.op = Op::kPush;
  r.header.count = 4;
  r.header.dim = 1;
  r.header.flags = kFlagDenseRange;
  r.values = g;
  // A pull holds the block while the push arrives: the copy keeps the state.
  std::vector<Frame> held;
  Request pull = r;
  pull.header.op = Op::kPull;
  ASSERT_OK(store->ReadRows(pull, &held));
  store->ApplyPush(r, 0);
  EXPECT_EQ(store->copy_on_write_count(), 1u);
  const auto w = store->CopyValues(0), m = store->CopySlot(0, 0), v = store->CopySlot(0, 1);
  // Adam's first step moves each weight by lr against the gradient's sign.
  EXPECT_NEAR(w[0], -0.1f, 1e-6f);
  EXPECT_NEAR(w[1], 0.1f, 1e-6f);
  EXPECT_EQ(w[2], 0.0f);
  EXPECT_NEAR(m[3], 0.2f, 1e-7f);
  EXPECT_NEAR(v[3], 0.004f, 1e-4f * 0.004f);
  store->ApplyPush(r, 0);
  const auto m2 = store->CopySlot(0, 0);
  EXPECT_NEAR(m2[3], 0.9f * 0.2f + 0.2f, 1e-6f);
}

TEST(ShardStoreOptimizerTest, AdamStepIsTheClockNotThePushCount) {
  // A push that arrives in two parts, and a second push of the same clock,
  // update every value as if it came whole: Adam's t is clock + 1.
  JobOptions job = Job(1, InitKind::kZeros);
  job.tables[0].rows = 4;
  job.tables[0].dim = 1;
  job.tables[0].optimizer.kind = OptimizerKind::kAdam;
  job.tables[0].optimizer.lr = 0.1f;
  auto whole = ShardStore::Create(job, 0).value();
  auto parts = ShardStore::Create(job, 0).value();
  const std::vector<float> g = {1, -1, 0.5f, 2};
  Request r;
  r.header.op = Op::kPush;
  r.header.count = 4;
  r.header.dim = 1;
  r.header.flags = kFlagDenseRange;
  r.values = g;
  whole->ApplyPush(r, 0);
  for (uint64_t first : {0u, 2u}) {
    Request p = r;
    p.header.first_row = first;
    p.header.count = 2;
    p.values = std::span<const float>(g).subspan(first, 2);
    parts->ApplyPush(p, 0);
  }
  EXPECT_EQ(whole->CopyValues(0), parts->CopyValues(0));
  // The first step at clock 0 is bias-corrected with t = 1: lr * sign(g).
  EXPECT_NEAR(parts->CopyValues(0)[2], -0.1f, 1e-6f);
  whole->ApplyPush(r, 5);
  const float m = 0.9f * 0.1f * 2 + 0.1f * 2;       // slot 0 of row 3 after two steps
  const float v = 0.999f * 0.001f * 4 + 0.001f * 4;  // slot 1
  const double t = 6;                                // clock 5 + 1
  const double step = 0.1 * (m / (1 - std::pow(0.9, t))) /
                      (std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8);
  EXPECT_NEAR(whole->CopyValues(0)[3], -0.1 - step, 1e-5);
}

TEST(ShardStoreOptimizerTest, ScheduleFollowsTheClockGiven) {
  JobOptions job = Job(1, InitKind::kZeros);
  job.tables[0].rows = 1;
  job.tables[0].dim = 1;
  job.tables[0].optimizer.lr = 1.0f;
  job.tables[0].optimizer.decay = LrDecay::kStep;
  job.tables[0].optimizer.decay_every = 10;
  job.tables[0].optimizer.decay_gamma = 0.5f;
  auto store = ShardStore::Create(job, 0).value();
  std::vector<float> g = {1};
  Request r;
  r.header.op = Op::kPush;
  r.header.count = 1;
  r.header.dim = 1;
  r.header.flags = kFlagDenseRange;
  r.values = g;
  store->ApplyPush(r, 0);   // lr 1
  store->ApplyPush(r, 10);  // lr 0.5
  store->ApplyPush(r, 25);  // lr 0.25
  EXPECT_FLOAT_EQ(store->CopyValues(0)[0], -1.75f);
}

}  // namespace
}  // namespace ps
