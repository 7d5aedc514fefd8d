#include "store/shard_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "common/key_range.h"
#include "common/wire_floats.h"
#include "store/block_memory.h"
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
    ASSERT_OK((*store)->ApplyPush(r, 0));
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
  ASSERT_OK((*store)->ApplyPush(DenseRequest(Op::kPush, 0, 1000, ones), 0));
  EXPECT_EQ((*store)->copy_on_write_count(), 3u);
  for (const Frame& f : frames) {
    const auto* v = reinterpret_cast<const float*>(f.data());
    for (size_t i = 0; i < f.size() / 4; ++i) ASSERT_EQ(v[i], 0.0f);
  }
  for (float v : (*store)->CopyValues(0)) ASSERT_EQ(v, 1.0f);

  // Once the reply is gone, pushes write in place.
  frames.clear();
  ASSERT_OK((*store)->ApplyPush(DenseRequest(Op::kPush, 0, 1000, ones), 0));
  EXPECT_EQ((*store)->copy_on_write_count(), 3u);
  for (float v : (*store)->CopyValues(0)) ASSERT_EQ(v, 2.0f);
}

// A restore's reading threads (server/restore.h) write disjoint runs of
// rows at once: the store ends bit for bit as restored run by run on one
// thread, from an unwritten store as from one whose blocks a pull still
// shares (copied first, the pulled frames keeping their values).
TEST(ShardStoreTest, RowsRestoredOnSeveralThreadsEqualRowsRestoredOnOne) {
  JobOptions job = Job(1, InitKind::kUniform);
  job.tables[0].rows = 1000;
  job.tables[0].dim = 1024;  // blocks of 256 rows
  job.tables[0].optimizer = {OptimizerKind::kAdam, 0.01f};
  job.tables.push_back(TestTable("small", 37, 3, OptimizerKind::kSgd));
  job.tables[1].optimizer.momentum = 0.9f;
  // Each table's values, then each slot's, in row order: distinct bits.
  std::vector<std::vector<std::vector<float>>> data(2);
  for (uint32_t t = 0; t < 2; ++t) {
    const size_t n = job.tables[t].rows * job.tables[t].dim;
    for (uint32_t a = 0; a <= job.tables[t].optimizer.Slots(); ++a) {
      std::vector<float> array(n);
      for (size_t i = 0; i < n; ++i) {
        const auto bits = static_cast<uint32_t>((t << 30) | (a << 28) | i);
        std::memcpy(&array[i], &bits, sizeof bits);
      }
      data[t].push_back(std::move(array));
    }
  }
  // Runs of 100 rows (of 10 for "small"), straddling blocks; run `r` of
  // table `t` restored into `store` through `restore`.
  const auto run_rows = [](uint32_t t) { return t == 0 ? 100u : 10u; };
  const auto restore_run = [&](uint32_t t, uint64_t first, auto restore) {
    const uint64_t count = std::min<uint64_t>(run_rows(t), job.tables[t].rows - first);
    const size_t at = first * job.tables[t].dim;
    std::vector<const std::byte*> slots;
    for (size_t a = 1; a < data[t].size(); ++a) {
      slots.push_back(reinterpret_cast<const std::byte*>(data[t][a].data() + at));
    }
    restore(t, first, count, reinterpret_cast<const std::byte*>(data[t][0].data() + at),
            std::span<const std::byte* const>(slots));
  };
  auto one = ShardStore::Create(job, 0, false);
  ASSERT_OK(one);
  for (uint32_t t = 0; t < 2; ++t) {
    for (uint64_t first = 0; first < job.tables[t].rows; first += run_rows(t)) {
      restore_run(t, first, [&](auto... args) { (*one)->RestoreRows(args...); });
    }
  }
  const auto on_threads = [&](ShardStore* store) {
    store->BeginConcurrentRestore();
    std::vector<std::thread> threads;
    for (uint64_t k = 0; k < 4; ++k) {
      threads.emplace_back([&, k] {
        for (uint32_t t = 0; t < 2; ++t) {
          uint64_t run = 0;
          for (uint64_t first = 0; first < job.tables[t].rows; first += run_rows(t), ++run) {
            if (run % 4 != k) continue;
            restore_run(t, first, [&](auto... args) { store->RestoreRangeRows(args...); });
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();
  };
  const auto expect_same = [&](const ShardStore& store) {
    const ShardSnapshot a = (*one)->Snapshot(job, 0, 3).value();
    const ShardSnapshot b = store.Snapshot(job, 0, 3).value();
    for (uint32_t t = 0; t < 2; ++t) {
      ASSERT_EQ(a.tables[t].values.size(), data[t][0].size());
      EXPECT_EQ(std::memcmp(a.tables[t].values.data(), data[t][0].data(),
                            data[t][0].size() * sizeof(float)),
                0);
      ASSERT_EQ(b.tables[t].values.size(), a.tables[t].values.size());
      EXPECT_EQ(std::memcmp(b.tables[t].values.data(), a.tables[t].values.data(),
                            a.tables[t].values.size() * sizeof(float)),
                0)
          << t;
      ASSERT_EQ(b.tables[t].slots.size(), data[t].size() - 1);
      for (size_t k = 0; k < b.tables[t].slots.size(); ++k) {
        EXPECT_EQ(std::memcmp(b.tables[t].slots[k].data(), data[t][k + 1].data(),
                              data[t][k + 1].size() * sizeof(float)),
                  0)
            << t << " slot " << k;
      }
    }
  };

  auto unwritten = ShardStore::CreateUnwritten(job, 0);
  ASSERT_OK(unwritten);
  on_threads(unwritten->get());
  expect_same(**unwritten);

  auto shared = ShardStore::Create(job, 0);
  ASSERT_OK(shared);
  const std::vector<float> before = (*shared)->CopyValues(0);
  std::vector<Frame> frames;
  ASSERT_OK((*shared)->ReadRows(DenseRequest(Op::kPull, 200, 400, {}), &frames));
  ASSERT_EQ(frames.size(), 3u);
  on_threads(shared->get());
  EXPECT_EQ((*shared)->copy_on_write_count(), 3u);
  expect_same(**shared);
  const auto* pulled = reinterpret_cast<const float*>(frames[0].data());
  EXPECT_EQ(std::memcmp(pulled, before.data() + 200 * 1024, frames[0].size()), 0);
}

// Backing a block's pages at once (a restore's first write into a block)
// keeps what the block holds, and an unwritten block becomes writable.
TEST(ShardStoreTest, PrefaultingABlockKeepsItsValues) {
  BlockFloats written;
  written.assign(300000, 1.5f);
  PrefaultBlockMemory(written.data(), written.size() * sizeof(float));
  for (float v : written) ASSERT_EQ(v, 1.5f);
  BlockFloats unwritten;
  unwritten.resize(300000);
  PrefaultBlockMemory(unwritten.data(), unwritten.size() * sizeof(float));
  for (size_t i = 0; i < unwritten.size(); ++i) unwritten[i] = static_cast<float>(i);
  for (size_t i = 0; i < unwritten.size(); ++i) ASSERT_EQ(unwritten[i], static_cast<float>(i));
  BlockFloats small;  // under a page: nothing to do
  small.assign(10, 2.5f);
  PrefaultBlockMemory(small.data(), small.size() * sizeof(float));
  for (float v : small) ASSERT_EQ(v, 2.5f);
}

// A whole block sent as it is starts half a page into a page
// (store/block_memory.h), so the kernel's copy of it into the socket never
// writes just past where it reads modulo 4 KiB; so does its copy after a
// push (copy-on-write) and its 16-bit conversion. A table of a few rows
// gets a cache line's alignment instead of a page.
TEST(ShardStoreTest, SharedBlocksStartHalfAPageIntoAPage) {
  JobOptions job = Job(1, InitKind::kZeros);
  job.tables[0].rows = 600;
  job.tables[0].dim = 1024;
  job.tables[0].optimizer = {OptimizerKind::kAdd, 0.0f};
  TableOptions small = TestTable("small", 3, 2);
  job.tables.push_back(small);
  auto store = ShardStore::Create(job, 0);
  ASSERT_OK(store);
  auto page_offset = [](const Frame& f) { return reinterpret_cast<uintptr_t>(f.data()) % 4096; };

  std::vector<Frame> frames;
  ASSERT_OK((*store)->ReadRows(DenseRequest(Op::kPull, 0, 600, {}), &frames));
  ASSERT_EQ(frames.size(), 3u);
  for (const Frame& f : frames) EXPECT_EQ(page_offset(f), 2048u);
  // Written while shared: the store's copies start there too.
  std::vector<float> ones(600 * 1024, 1.0f);
  ASSERT_OK((*store)->ApplyPush(DenseRequest(Op::kPush, 0, 600, ones), 0));
  EXPECT_EQ((*store)->copy_on_write_count(), 3u);
  frames.clear();
  ASSERT_OK((*store)->ReadRows(DenseRequest(Op::kPull, 0, 600, {}), &frames));
  for (const Frame& f : frames) EXPECT_EQ(page_offset(f), 2048u);

  Request half = DenseRequest(Op::kPull, 0, 600, {});
  half.header.dtype = WireType::kBf16;
  frames.clear();
  ASSERT_OK((*store)->ReadRows(half, &frames));
  for (const Frame& f : frames) EXPECT_EQ(page_offset(f), 2048u);

  Request tiny = DenseRequest(Op::kPull, 0, 3, {});
  tiny.header.table = 1;
  tiny.header.dim = 2;
  frames.clear();
  ASSERT_OK((*store)->ReadRows(tiny, &frames));
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(frames[0].data()) % 64, 0u);
}

// A 16-bit dense pull converts each block once per change: every later
// pull of the same values shares the converted block, a push drops the
// converted copy of the blocks it writes (and only those), and a reply in
// flight keeps the values it was given.
TEST(ShardStoreTest, SixteenBitPullsConvertEachBlockOncePerChange) {
  JobOptions job = Job(1, InitKind::kUniform);
  job.tables[0].rows = 1000;
  job.tables[0].dim = 1024;
  job.tables[0].optimizer = {OptimizerKind::kAdd, 0.0f};
  auto store = ShardStore::Create(job, 0);
  ASSERT_OK(store);
  auto pull = [&](WireType dtype, uint64_t first, uint64_t count) {
    Request r = DenseRequest(Op::kPull, first, count, {});
    r.header.dtype = dtype;
    std::vector<Frame> frames;
    uint64_t held = 0;
    EXPECT_OK((*store)->ReadRows(r, &frames, &held));
    std::vector<uint16_t> joined;
    for (const Frame& f : frames) {
      const auto* v = reinterpret_cast<const uint16_t*>(f.data());
      joined.insert(joined.end(), v, v + f.size() / 2);
    }
    return std::make_pair(joined, held);
  };
  auto expected = [&](WireType dtype, uint64_t first, uint64_t count) {
    const std::vector<float> all = (*store)->CopyValues(0);
    std::vector<uint16_t> out(count * 1024);
    EncodeFloats(dtype, all.data() + first * 1024, out.size(), out.data());
    return out;
  };

  // Rows 200..599 touch blocks 0, 1 and 2: converted once, whatever the
  // number of pulls; each frame holds its converted block.
  const auto [first, held] = pull(WireType::kBf16, 200, 400);
  EXPECT_EQ(first, expected(WireType::kBf16, 200, 400));
  EXPECT_EQ(held, 3u * 256 * 1024 * 2);
  EXPECT_EQ((*store)->encoded_block_count(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pull(WireType::kBf16, 200, 400).first, first);
  EXPECT_EQ(pull(WireType::kBf16, 250, 10).first, expected(WireType::kBf16, 250, 10));
  EXPECT_EQ((*store)->encoded_block_count(), 3u);

  // A push into block 1 (rows 256..511) while a reply still holds the old
  // conversion: that reply keeps its values, the next pull converts block 1
  // again and sees the push; blocks 0 and 2 stay converted.
  Request r = DenseRequest(Op::kPull, 300, 1, {});
  r.header.dtype = WireType::kBf16;
  std::vector<Frame> in_flight;
  ASSERT_OK((*store)->ReadRows(r, &in_flight));
  const std::vector<uint16_t> before = expected(WireType::kBf16, 300, 1);
  std::vector<float> ones(10 * 1024, 1.0f);
  ASSERT_OK((*store)->ApplyPush(DenseRequest(Op::kPush, 300, 10, ones), 0));
  EXPECT_EQ((*store)->copy_on_write_count(), 0u);  // the reply holds a converted copy
  const auto after = pull(WireType::kBf16, 200, 400).first;
  EXPECT_EQ(after, expected(WireType::kBf16, 200, 400));
  EXPECT_NE(after, first);
  EXPECT_EQ((*store)->encoded_block_count(), 4u);
  ASSERT_EQ(in_flight.size(), 1u);
  EXPECT_EQ(0, std::memcmp(in_flight[0].data(), before.data(), 1024 * 2));

  // Another 16-bit type converts anew.
  EXPECT_EQ(pull(WireType::kF16, 0, 256).first, expected(WireType::kF16, 0, 256));
  EXPECT_EQ((*store)->encoded_block_count(), 5u);
}

// A PULL of rows 36, 0 and 36 (3 floats each) of Job()'s table, in `dtype`.
Request SparsePull(WireType dtype) {
  static const std::vector<uint64_t> keys = {36, 0, 36};
  Request r;
  r.header.op = Op::kPull;
  r.header.count = 3;
  r.header.dim = 3;
  r.header.dtype = dtype;
  r.keys = keys;
  return r;
}

TEST(ShardStoreTest, SixteenBitSparsePullIsGatheredThenConverted) {
  JobOptions job = Job(1, InitKind::kUniform);
  auto store = ShardStore::Create(job, 0);
  ASSERT_OK(store);
  const Request r = SparsePull(WireType::kF16);
  std::vector<Frame> frames;
  uint64_t held = 0;
  ASSERT_OK((*store)->ReadRows(r, &frames, &held));
  ASSERT_EQ(frames.size(), 1u);
  ASSERT_EQ(frames[0].size(), 9u * 2);
  EXPECT_EQ(held, 9u * 2);
  const auto* v = reinterpret_cast<const uint16_t*>(frames[0].data());
  const std::vector<float> all = (*store)->CopyValues(0);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(v[c], FloatToF16(all[36 * 3 + c]));
    EXPECT_EQ(v[3 + c], FloatToF16(all[c]));
    EXPECT_EQ(v[6 + c], FloatToF16(all[36 * 3 + c]));
  }
  EXPECT_EQ((*store)->encoded_block_count(), 0u);
}

TEST(ShardStoreTest, SparsePullIsGatheredIntoOneFrame) {
  JobOptions job = Job(1, InitKind::kUniform);
  auto store = ShardStore::Create(job, 0);
  ASSERT_OK(store);
  const Request r = SparsePull(WireType::kF32);
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
  ASSERT_OK(store->ApplyPush(r, 0));
  EXPECT_EQ(store->copy_on_write_count(), 1u);
  const auto w = store->CopyValues(0), m = store->CopySlot(0, 0), v = store->CopySlot(0, 1);
  // Adam's first step moves each weight by lr against the gradient's sign.
  EXPECT_NEAR(w[0], -0.1f, 1e-6f);
  EXPECT_NEAR(w[1], 0.1f, 1e-6f);
  EXPECT_EQ(w[2], 0.0f);
  EXPECT_NEAR(m[3], 0.2f, 1e-7f);
  EXPECT_NEAR(v[3], 0.004f, 1e-4f * 0.004f);
  ASSERT_OK(store->ApplyPush(r, 0));
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
  ASSERT_OK(whole->ApplyPush(r, 0));
  for (uint64_t first : {0u, 2u}) {
    Request p = r;
    p.header.first_row = first;
    p.header.count = 2;
    p.values = std::span<const float>(g).subspan(first, 2);
    ASSERT_OK(parts->ApplyPush(p, 0));
  }
  EXPECT_EQ(whole->CopyValues(0), parts->CopyValues(0));
  // The first step at clock 0 is bias-corrected with t = 1: lr * sign(g).
  EXPECT_NEAR(parts->CopyValues(0)[2], -0.1f, 1e-6f);
  ASSERT_OK(whole->ApplyPush(r, 5));
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
  ASSERT_OK(store->ApplyPush(r, 0));   // lr 1
  ASSERT_OK(store->ApplyPush(r, 10));  // lr 0.5
  ASSERT_OK(store->ApplyPush(r, 25));  // lr 0.25
  EXPECT_FLOAT_EQ(store->CopyValues(0)[0], -1.75f);
}

// One table of `rows` x `dim` under `kind` (sgd: lr 2 with momentum 0.5,
// so that one finite gradient can overflow a value; others lr 0.1).
JobOptions OverflowJob(OptimizerKind kind, uint64_t rows, uint32_t dim,
                       NonFiniteResultPolicy policy) {
  JobOptions job = Job(1, InitKind::kConstant);
  job.tables[0].rows = rows;
  job.tables[0].dim = dim;
  job.tables[0].optimizer.kind = kind;
  job.tables[0].optimizer.lr = kind == OptimizerKind::kSgd ? 2.0f : 0.1f;
  if (kind == OptimizerKind::kSgd) job.tables[0].optimizer.momentum = 0.5f;
  job.server.on_non_finite_result = policy;
  return job;
}

Request DensePush(uint64_t first, std::span<const float> g, uint32_t dim) {
  Request r;
  r.header.op = Op::kPush;
  r.header.first_row = first;
  r.header.count = g.size() / dim;
  r.header.dim = dim;
  r.header.flags = kFlagDenseRange;
  r.values = g;
  return r;
}

TEST(ShardStoreNonFiniteTest, PushWithAResultThatIsNotFiniteIsRefusedWhole) {
  // Momentum (a slot), adagrad's sums and ftrl's n (whose square overflows
  // first).
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kFtrl}) {
    // 5000 rows of dim 1: a dense push of them is updated in several
    // pieces, and the bad row lies in the last.
    const JobOptions job = OverflowJob(kind, 5000, 1, NonFiniteResultPolicy::kRefuse);
    const uint32_t last = job.tables[0].optimizer.Slots() - 1;  // ftrl: n
    auto store = ShardStore::Create(job, 0).value();
    std::vector<float> g(5000, 1.0f);
    ASSERT_OK(store->ApplyPush(DensePush(0, g, 1), 0));
    const std::vector<float> values = store->CopyValues(0), slot = store->CopySlot(0, 0);
    const std::vector<float> last_slot = store->CopySlot(0, last);
    g[4500] = kind == OptimizerKind::kSgd ? -3.4e38f : 3e20f;
    Status refused = store->ApplyPush(DensePush(0, g, 1), 1);
    EXPECT_EQ(refused.code(), StatusCode::kOutOfRange) << refused.ToString();
    EXPECT_NE(refused.message().find("table 't'"), std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find("row 4500"), std::string::npos) << refused.message();
    EXPECT_EQ(store->CopyValues(0), values) << "every row, before the bad one too, is unchanged";
    EXPECT_EQ(store->CopySlot(0, 0), slot);
    EXPECT_EQ(store->CopySlot(0, last), last_slot);
    // Refused: no row holds a value that is not finite.
    EXPECT_EQ(store->refused_rows(0), 1u);
    EXPECT_EQ(store->non_finite_rows(0), 0u);
  }
}

TEST(ShardStoreNonFiniteTest, RefusedSparsePushNamingARowTwiceLeavesItsOldValues) {
  auto store = ShardStore::Create(
                   OverflowJob(OptimizerKind::kAdd, 10, 2, NonFiniteResultPolicy::kRefuse), 0)
                   .value();
  const std::vector<float> before = store->CopyValues(0);
  const std::vector<uint64_t> rows = {3, 7, 3, 5};
  const std::vector<float> g = {1, 2, 3, 4, 5, 6, 3.4e38f, 3.4e38f};
  Request r;
  r.header.op = Op::kPush;
  r.header.count = 4;
  r.header.dim = 2;
  r.keys = rows;
  r.values = g;
  ASSERT_OK(store->ApplyPush(r, 0));  // constant 0.5 + 3.4e38: finite
  const std::vector<float> once = store->CopyValues(0);
  EXPECT_NE(once, before);
  EXPECT_EQ(store->ApplyPush(r, 0).code(), StatusCode::kOutOfRange);  // row 5 overflows
  EXPECT_EQ(store->CopyValues(0), once);
}

TEST(ShardStoreNonFiniteTest, FlagAppliesAndCountsTheRows) {
  auto store =
      ShardStore::Create(OverflowJob(OptimizerKind::kSgd, 8, 2, NonFiniteResultPolicy::kFlag), 0)
          .value();
  std::vector<float> g(16, 0.0f);
  g[4] = g[5] = g[10] = -3.4e38f;  // rows 2 and 5
  for (int i = 0; i < 12; ++i) ASSERT_OK(store->ApplyPush(DensePush(0, g, 2), i));
  EXPECT_TRUE(std::isinf(store->CopyValues(0)[4]));
  EXPECT_EQ(store->CopyValues(0)[0], 0.5f);
  EXPECT_GE(store->non_finite_rows(0), 2u);
}

TEST(ShardStoreNonFiniteTest, AggregatedUpdateLeavesOutRowsWhoseResultIsNotFinite) {
  for (NonFiniteResultPolicy policy :
       {NonFiniteResultPolicy::kRefuse, NonFiniteResultPolicy::kFlag}) {
    auto store = ShardStore::Create(OverflowJob(OptimizerKind::kAdd, 6, 1, policy), 0).value();
    // Two finite pushes whose sum is not: 2 x 3e38 in row 1.
    const std::vector<float> g = {1, 3e38f, 0, 0, 0, 2};
    ASSERT_OK(store->ApplyPush(DensePush(0, g, 1), 0));  // row 1: 0.5 + 3e38
    store->Accumulate(DensePush(0, g, 1), 1);
    store->Accumulate(DensePush(0, g, 1), 1);
    store->ApplyAccumulated(2, 1.0f);  // the sum, not the mean: 6e38 overflows
    const std::vector<float> v = store->CopyValues(0);
    EXPECT_EQ(v[0], 0.5f + 1 + 2);
    EXPECT_EQ(v[5], 0.5f + 2 + 4);
    if (policy == NonFiniteResultPolicy::kRefuse) {
      EXPECT_EQ(v[1], 0.5f + 3e38f) << "the row keeps its value";
      EXPECT_EQ(store->refused_rows(0), 1u);
      EXPECT_EQ(store->non_finite_rows(0), 0u);
    } else {
      EXPECT_TRUE(std::isinf(v[1]));
      EXPECT_EQ(store->refused_rows(0), 0u);
      EXPECT_EQ(store->non_finite_rows(0), 1u);
    }
  }
}

}  // namespace
}  // namespace ps
